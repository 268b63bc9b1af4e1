/*
 * eager_bench mp [--nranks=N] [options]: the host's view of eager
 * all-reduces issued the way applications issue them: back to back, no
 * synchronisation inside the loop, one stream wait after. One process per
 * rank (mode mp), each on its own GPU.
 *
 * Per variant it times --runs loops of --calls calls (plain cuMemAlloc
 * buffers of --bytes, like a framework's tensors) of the operation --op:
 *
 *   allreduce  (the default) bf16 sum, in place;
 *   sendrecv   one group per call: symmGroupStart, symmSend of the buffer to
 *              rank (r + 1) % n, symmRecv from (r - 1 + n) % n into a
 *              separate receive buffer, symmGroupEnd (NCCL rows:
 *              ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd); at one rank
 *              the peer is the rank itself, which both libraries accept.
 *
 *   symm same      symmAllReduce (or the group) on one buffer, every call;
 *   symm rotating  the same on --buffers buffers in turn (a new buffer
 *                  per call as far as the library's per-call checks can
 *                  tell: more than it remembers);
 *   nccl same / nccl rotating   the same through ncclAllReduce (or NCCL's
 *                  group) (--vs-nccl; --nccl-lib=PATH, default libnccl.so.2:
 *                  the real NCCL, or the libnccl.so.2 stand-in, whose path
 *                  SYMM_NCCL_MODE and SYMM_NCCL_LIB choose: the header's
 *                  "# environment:" line shows them when set).
 *   nccl-win same / rotating    the same on buffers from ncclMemAlloc, each
 *                  registered with ncclCommWindowRegister
 *                  (NCCL_WIN_COLL_SYMMETRIC) on the same communicator: NCCL's
 *                  symmetric kernels (--nccl-window, with --vs-nccl; NCCL
 *                  2.27 and later).
 *
 * Per run and rank: wall time per call (first call to the stream's end,
 * over the calls), CPU time per call of the issuing thread
 * (CLOCK_THREAD_CPUTIME_ID: a call that spins in the driver counts), and
 * the longest single call the host saw. A run's figure is the slowest
 * rank's; a row gives min / median / max over the runs (a stall that
 * comes and goes shows as a spread, never hidden in one mean). Every
 * variant's output is checked: all-reduce: zeros stay zeros through the
 * loop, then one more call on ones must give nranks in every element;
 * send/recv: every receive buffer the loop used holds what the peer's
 * send buffer of the same index holds (a pattern per rank and buffer),
 * the receive buffers being zeroed before each variant.
 *
 *   launch-floor   (--launch-floor, all-reduce only) cuLaunchKernel of a kernel
 *                  that does nothing, with a 488-byte argument block by value
 *                  (the size of the library's collective arguments), 512
 *                  threads: the floor of any launch of that shape, to tell how
 *                  much of symmAllReduce's cost is the driver's. Nothing to
 *                  check (0 wrong).
 *   launch-floor-64B  the same with a 64-byte block: what a compact argument
 *                  block could save per launch.
 *
 * Options: --op=allreduce|sendrecv (allreduce) --bytes=N (256K, even, at most 1G)
 * or --sizes=LIST (comma-separated sizes, e.g. 8,4K,256K,4M: every variant at
 * each size, in that order) --calls=N (2000) --runs=N (5) --buffers=N (64)
 * --vs-nccl --nccl-window (all-reduce only) --nccl-lib=PATH. --nranks=1 runs one
 * process with one rank on GPU 0 (the host's cost per call; NCCL refuses
 * two ranks on one GPU). Output: a header, then per table "# table NAME: TITLE",
 * "# columns: ..." and one row per variant (whitespace-separated), which
 * scripts/perf-tables turns into markdown. One all-reduce size (--bytes, or
 * the default) prints one table named "eager", as it always did; --sizes or
 * --op=sendrecv print one table per size named "eager OP BYTES" (e.g.
 * "# table eager sendrecv 4096: ..."). With --nccl-window a column "best NCCL / this" follows
 * "NCCL / this": the faster of the two NCCL rows of the same buffer use over
 * this row (median walls). With shared GPUs (SYMM_TEST_SHARED_DEVICES=1) the
 * times mean nothing (the header says so); --vs-nccl then needs a library
 * that accepts shared GPUs (the stand-in with SYMM_NCCL_MODE=symm).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_cuda.h"
#include "bench_nccl.h"
#include "bench_world.h"
#include "coll_util.h"

#define PROG "eager_bench"
#define MAX_RUNS 64
#define MAX_BUFFERS 1024
#define MAX_SIZES 16

enum op { OP_ALLREDUCE, OP_SENDRECV };
static const char *const op_name[] = {"allreduce", "sendrecv"};          /* --op=, and the tables' names */
static const char *const op_title[] = {"all-reduce", "grouped send/recv"}; /* the tables' titles */

static struct {
  size_t bytes;              /* the size being timed: each of sizes[] in turn */
  size_t sizes[MAX_SIZES];   /* --bytes (one) or --sizes */
  int nsizes, sizes_given;   /* sizes_given: --sizes (one table per size) */
  size_t max_bytes;          /* the largest: what the buffers hold */
  enum op op;
  int calls, runs, buffers, vs_nccl, nccl_window, launch_floor;
  const char *nccl_lib;
  char cmdline[1024];
} O = {.bytes = 256 << 10, .sizes = {256 << 10}, .nsizes = 1, .calls = 2000, .runs = 5, .buffers = 64};

/* One size of --bytes or --sizes: even (bf16 elements), at most 1 GiB. */
static int parse_bytes(const char *opt, const char *s, size_t *out) {
  if (bw_parse_size(s, out) == 0 && *out % 2 == 0 && *out <= (1u << 30)) return 0;
  fprintf(stderr, PROG ": %s: \"%s\" is not a size of whole bf16 elements: an even number of bytes from 2 to 1G, "
          "with an optional K, M or G (8, 4K, 256K, 4M)\n", opt, s);
  return -1;
}

/* --sizes=8,4K,256K,4M: at most MAX_SIZES, each as --bytes takes it. */
static int parse_sizes(const char *list) {
  char buf[512];
  if (!*list || strlen(list) >= sizeof buf) {
    fprintf(stderr, PROG ": --sizes: give a comma-separated list of sizes, e.g. --sizes=8,4K,256K,4M\n");
    return -1;
  }
  strcpy(buf, list);
  O.nsizes = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (O.nsizes == MAX_SIZES) {
      fprintf(stderr, PROG ": --sizes: at most %d sizes\n", MAX_SIZES);
      return -1;
    }
    if (parse_bytes("--sizes", tok, &O.sizes[O.nsizes]) != 0) return -1;
    O.nsizes++;
  }
  if (O.nsizes == 0 || list[strlen(list) - 1] == ',' || list[0] == ',' || strstr(list, ",,")) {
    fprintf(stderr, PROG ": --sizes: \"%s\" has an empty entry (e.g. --sizes=8,4K,256K,4M)\n", list);
    return -1;
  }
  O.sizes_given = 1;
  return 0;
}

static int option(const char *arg, void *ctx) {
  (void)ctx;
  size_t n = strlen(O.cmdline);
  snprintf(O.cmdline + n, sizeof O.cmdline - n, " %s", arg);
  if (!strncmp(arg, "--bytes=", 8)) return parse_bytes("--bytes", arg + 8, &O.sizes[0]) ? -1 : (O.nsizes = 1, 0);
  if (!strncmp(arg, "--sizes=", 8)) return parse_sizes(arg + 8);
  if (!strncmp(arg, "--op=", 5)) {
    for (int k = 0; k < 2; k++)
      if (!strcmp(arg + 5, op_name[k])) return O.op = (enum op)k, 0;
    fprintf(stderr, PROG ": --op: \"%s\" is not allreduce or sendrecv\n", arg + 5);
    return -1;
  }
  if (sscanf(arg, "--calls=%d", &O.calls) == 1) return O.calls > 0 && O.calls <= 1000000 ? 0 : -1;
  if (sscanf(arg, "--runs=%d", &O.runs) == 1) return O.runs > 0 && O.runs <= MAX_RUNS ? 0 : -1;
  if (sscanf(arg, "--buffers=%d", &O.buffers) == 1) return O.buffers > 1 && O.buffers <= MAX_BUFFERS ? 0 : -1;
  if (!strcmp(arg, "--vs-nccl")) return O.vs_nccl = 1, 0;
  if (!strcmp(arg, "--nccl-window")) return O.nccl_window = 1, 0;
  if (!strcmp(arg, "--launch-floor")) return O.launch_floor = 1, 0;
  if (!strncmp(arg, "--nccl-lib=", 11)) return O.nccl_lib = arg + 11, 0;
  return -1;
}

enum variant {
  V_SYMM_SAME,
  V_SYMM_ROTATING,
  V_NCCL_SAME,
  V_NCCL_ROTATING,
  V_NCCL_WIN_SAME,     /* --nccl-window: NCCL on window-registered buffers */
  V_NCCL_WIN_ROTATING,
  V_FLOOR,             /* --launch-floor: an empty kernel, the same argument size */
  V_FLOOR_SMALL,       /* --launch-floor: an empty kernel, 64 bytes of arguments */
  NVARIANTS
};
static const char *const variant_name[NVARIANTS] = {"symm-same",     "symm-rotating", "nccl-same",
                                                    "nccl-rotating", "nccl-win-same", "nccl-win-rotating",
                                                    "launch-floor",  "launch-floor-64B"};

static struct {
  struct tw_rank *r;
  bn_comm nccl;
  int to, from; /* --op=sendrecv: the peers (this rank itself at one rank) */
  CUdeviceptr buf[MAX_BUFFERS];  /* all-reduce: in place; send/recv: what is sent */
  CUdeviceptr rbuf[MAX_BUFFERS]; /* send/recv: the receive buffers */
  CUdeviceptr win_buf[MAX_BUFFERS]; /* --nccl-window: from ncclMemAlloc, one window each */
  bn_window win[MAX_BUFFERS];
  uint64_t windows_declined; /* NULL windows from ncclCommWindowRegister, all ranks */
  uint16_t *host;
  CUfunction floor_kernel, floor_small_kernel; /* --launch-floor */
} R;

/* The calls that must succeed, for the rank of this process. */
#define check_symm(rc, what) BW_SYMM(R.r, (rc), (what))
#define check_nccl(rc, what) BW_NCCL(R.r, R.nccl, (rc), (what))

static uint64_t now_ns(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int is_symm(enum variant v) {
  return v == V_SYMM_SAME || v == V_SYMM_ROTATING;
}

static int is_window(enum variant v) {
  return v == V_NCCL_WIN_SAME || v == V_NCCL_WIN_ROTATING;
}

static int is_rotating(enum variant v) {
  return v == V_SYMM_ROTATING || v == V_NCCL_ROTATING || v == V_NCCL_WIN_ROTATING;
}

/* Buffer b of variant v: the window variants have buffers of their own. */
static CUdeviceptr buffer(enum variant v, int b) {
  return is_window(v) ? R.win_buf[b] : R.buf[b];
}

static void all_reduce(enum variant v, CUdeviceptr p) {
  const size_t n = O.bytes / 2;
  void *b = (void *)(uintptr_t)p;
  if (is_symm(v))
    check_symm(symmAllReduce(b, b, n, symmBfloat16, symmSum, R.r->comm, R.r->stream), "symmAllReduce");
  else
    check_nccl(bn.AllReduce(b, b, n, symmBfloat16, symmSum, R.nccl, R.r->stream), "ncclAllReduce");
}

/* One group: buffer b to R.to, receive buffer b from R.from. */
static void send_recv(enum variant v, int b) {
  const size_t n = O.bytes / 2;
  const void *sb = (const void *)(uintptr_t)R.buf[b];
  void *rb = (void *)(uintptr_t)R.rbuf[b];
  if (is_symm(v)) {
    check_symm(symmGroupStart(), "symmGroupStart");
    check_symm(symmSend(sb, n, symmBfloat16, R.to, R.r->comm, R.r->stream), "symmSend");
    check_symm(symmRecv(rb, n, symmBfloat16, R.from, R.r->comm, R.r->stream), "symmRecv");
    check_symm(symmGroupEnd(), "symmGroupEnd");
  } else {
    check_nccl(bn.GroupStart(), "ncclGroupStart");
    check_nccl(bn.Send(sb, n, symmBfloat16, R.to, R.nccl, R.r->stream), "ncclSend");
    check_nccl(bn.Recv(rb, n, symmBfloat16, R.from, R.nccl, R.r->stream), "ncclRecv");
    check_nccl(bn.GroupEnd(), "ncclGroupEnd");
  }
}

/* --launch-floor: one launch of an empty kernel, 488 or 64 bytes of arguments. */
static void launch_floor(int small) {
  static uint64_t args[61];
  void *params[] = {args};
  CUresult rc = tu_cu.cuLaunchKernel(small ? R.floor_small_kernel : R.floor_kernel, 1, 1, 1, 512, 1, 1, 0,
                                     R.r->stream, params, NULL);
  TW_REQUIRE(R.r, rc == 0, "cuLaunchKernel(eb_launch_floor%s): %s", small ? "_small" : "", tu_cu_error(rc));
}

/* The call the loops time, on buffer b of variant v. */
static void issue(enum variant v, int b) {
  if (v == V_FLOOR || v == V_FLOOR_SMALL)
    launch_floor(v == V_FLOOR_SMALL);
  else if (O.op == OP_SENDRECV)
    send_recv(v, b);
  else
    all_reduce(v, buffer(v, b));
}

static int nbuffers(enum variant v) {
  return is_rotating(v) ? O.buffers : 1;
}

/* The warm-up's calls before the timed loops. */
#define WARMUP 20

/* One timed loop: per-call wall, CPU and longest call (ns) of this rank. */
static void timed_loop(struct tw *w, enum variant v, uint64_t out[3]) {
  const int nb = nbuffers(v);
  tw_sync_all(w, 600, "before the loop");
  tw_host_barrier(w, "loop start");
  uint64_t longest = 0;
  const uint64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID), t0 = now_ns(CLOCK_MONOTONIC);
  uint64_t prev = t0;
  for (int k = 0; k < O.calls; k++) {
    issue(v, k % nb);
    const uint64_t t = now_ns(CLOCK_MONOTONIC);
    if (t - prev > longest) longest = t - prev;
    prev = t;
  }
  const uint64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  tw_stream_wait(R.r, 600, "the timed loop");
  const uint64_t t2 = now_ns(CLOCK_MONOTONIC);
  out[0] = (t2 - t0) / (uint64_t)O.calls;
  out[1] = (c1 - c0) / (uint64_t)O.calls;
  out[2] = longest;
}

/* Element i of rank r's send buffer b (--op=sendrecv): a bf16 bit pattern
 * with the top exponent bit clear (never Inf or NaN), different per rank,
 * buffer and element. */
static uint16_t send_pattern(int r, int b, size_t i) {
  return (uint16_t)(((uint32_t)i * 40503u + (uint32_t)r * 7919u + (uint32_t)b * 104729u) & 0x3fffu);
}

/* --op=sendrecv: every send buffer gets this rank's pattern (all of it, for
 * every size), every receive buffer zeros. */
static void fill_send_buffers(void) {
  const size_t n = O.max_bytes / 2;
  for (int b = 0; b < O.buffers; b++) {
    for (size_t i = 0; i < n; i++) R.host[i] = send_pattern(R.r->rank, b, i);
    TW_CU(cw_cu.cuMemcpyHtoDAsync(R.buf[b], R.host, O.max_bytes, R.r->stream));
    TW_CU(cw_cu.cuMemsetD8Async(R.rbuf[b], 0, O.max_bytes, R.r->stream));
    tw_stream_wait(R.r, 600, "filling the send buffers"); /* R.host is reused */
  }
}

/* --op=sendrecv: the receive buffers of variant v zeroed before it runs, so
 * that what its check finds there is what its own calls received. */
static void clear_receive_buffers(enum variant v) {
  for (int b = 0; b < nbuffers(v); b++) TW_CU(cw_cu.cuMemsetD8Async(R.rbuf[b], 0, O.bytes, R.r->stream));
  tw_stream_wait(R.r, 600, "clearing the receive buffers");
}

/* Send/recv: each receive buffer the calls used (the warm-up's and the
 * loops' k % nbuffers) holds the peer's send buffer of the same index. */
static uint64_t check_received(enum variant v) {
  const size_t n = O.bytes / 2;
  const int calls = O.calls > WARMUP ? O.calls : WARMUP;
  const int used = nbuffers(v) < calls ? nbuffers(v) : calls;
  uint64_t bad = 0;
  for (int b = 0; b < used; b++) {
    TW_CU(cw_cu.cuMemcpyDtoHAsync(R.host, R.rbuf[b], O.bytes, R.r->stream));
    tw_stream_wait(R.r, 600, "reading the received data");
    for (size_t i = 0; i < n; i++) bad += R.host[i] != send_pattern(R.from, b, i);
  }
  return bad;
}

/* All-reduce: zeros stay zeros through the loops; then ones sum to nranks
 * everywhere. Send/recv: check_received. The sum over ranks. */
static uint64_t check_variant(struct tw *w, enum variant v) {
  const size_t n = O.bytes / 2;
  const uint16_t want = (uint16_t)cw_float_to_bf16((float)w->nranks);
  uint64_t bad = 0;
  if (v == V_FLOOR || v == V_FLOOR_SMALL) {
    /* nothing computed, nothing to check */
  } else if (O.op == OP_SENDRECV) {
    bad = check_received(v);
  } else {
    for (int b = 0; b < nbuffers(v); b++) {
      TW_CU(cw_cu.cuMemcpyDtoHAsync(R.host, buffer(v, b), O.bytes, R.r->stream));
      tw_stream_wait(R.r, 600, "reading the output");
      for (size_t i = 0; i < n; i++) bad += R.host[i] != 0;
    }
    for (size_t i = 0; i < n; i++) R.host[i] = (uint16_t)cw_float_to_bf16(1.0f);
    TW_CU(cw_cu.cuMemcpyHtoDAsync(buffer(v, 0), R.host, O.bytes, R.r->stream));
    all_reduce(v, buffer(v, 0));
    TW_CU(cw_cu.cuMemcpyDtoHAsync(R.host, buffer(v, 0), O.bytes, R.r->stream));
    tw_stream_wait(R.r, 600, "the checked call");
    for (size_t i = 0; i < n; i++) bad += R.host[i] != want;
    TW_CU(cw_cu.cuMemsetD8Async(buffer(v, 0), 0, O.bytes, R.r->stream));
    tw_stream_wait(R.r, 600, "clearing");
  }
  uint64_t all[TW_MAX_RANKS], total = 0;
  tw_exchange_u64(w, &bad, all);
  for (int k = 0; k < w->nranks; k++) total += all[k];
  return total;
}

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* "min/median/max" of n values in µs (v sorted in place); returns the median. */
static double spread(uint64_t *v, int n, char *buf, size_t len) {
  qsort(v, (size_t)n, sizeof *v, cmp_u64);
  const double med = n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2;
  snprintf(buf, len, "%.1f/%.1f/%.1f", (double)v[0] / 1e3, med / 1e3, (double)v[n - 1] / 1e3);
  return med;
}

/* One table per size ("eager OP BYTES"), or the one table "eager" of a
 * single all-reduce size, as this benchmark always printed it. */
static int legacy_table(void) {
  return O.op == OP_ALLREDUCE && !O.sizes_given;
}

/* "8 B", "4 KiB", "256 KiB", "4 MiB", "1 GiB" (as scripts/perf-tables writes sizes). */
static void human(size_t n, char *buf, size_t len) {
  static const struct { unsigned shift; const char *unit; } u[] = {{30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (size_t k = 0; k < sizeof u / sizeof u[0]; k++)
    if (n >= ((size_t)1 << u[k].shift) && n % ((size_t)1 << u[k].shift) == 0) {
      snprintf(buf, len, "%zu %s", n >> u[k].shift, u[k].unit);
      return;
    }
  snprintf(buf, len, "%zu B", n);
}

static void header(struct tw *w) {
  bw_header_start(PROG, w, O.cmdline, O.vs_nccl ? O.nccl_lib : NULL);
  /* What serves the NCCL rows when the library is the stand-in. */
  const char *mode = getenv("SYMM_NCCL_MODE"), *lib = getenv("SYMM_NCCL_LIB");
  if (O.vs_nccl && (mode || lib))
    printf("# environment:%s%s%s%s\n", mode ? " SYMM_NCCL_MODE=" : "", mode ? mode : "", lib ? " SYMM_NCCL_LIB=" : "",
           lib ? lib : "");
  if (legacy_table()) {
    printf("# loop: %d back-to-back in-place all-reduces of %zu bytes (bf16 sum, plain buffers), one stream wait after; "
           "%d runs per variant, each the slowest rank's; rotating: %d buffers in turn\n",
           O.calls, O.bytes, O.runs, O.buffers);
  } else {
    char sizes[MAX_SIZES * 12] = "";
    for (int k = 0; k < O.nsizes; k++)
      snprintf(sizes + strlen(sizes), sizeof sizes - strlen(sizes), "%s%zu", k ? ", " : "", O.sizes[k]);
    if (O.op == OP_ALLREDUCE)
      printf("# loop: %d back-to-back in-place all-reduces (bf16 sum, plain buffers)", O.calls);
    else
      printf("# loop: %d back-to-back grouped send/recv calls (one group per call: send to rank + 1, receive from "
             "rank - 1 into a separate buffer; bf16, plain buffers)", O.calls);
    printf(" of %s%s bytes, one stream wait after; %d runs per variant, each the slowest rank's; rotating: %d "
           "buffers in turn\n", O.nsizes > 1 ? "each size in turn: " : "", sizes, O.runs, O.buffers);
  }
  if (O.nccl_window)
    printf("# nccl-win: ncclAllReduce on buffers from ncclMemAlloc, each registered with "
           "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) on the same communicator (NCCL's symmetric kernels)\n");
  if (O.nccl_window) bn_note_declined_windows(R.windows_declined, (uint64_t)O.buffers * (uint64_t)w->nranks);
  bw_header_ranks(w);
}

/* The table of the size being timed: its name and title, then its columns. */
static void table_header(void) {
  if (legacy_table()) {
    printf("#\n# table eager: eager all-reduce loop, per call, min/median/max over runs\n");
  } else {
    char size[32];
    human(O.bytes, size, sizeof size);
    printf("#\n# table eager %s %zu: eager %s loop of %s, per call, min/median/max over runs\n", op_name[O.op], O.bytes,
           op_title[O.op], size);
  }
  /* Without --nccl-window the columns are as they always were. */
  printf("# columns: variant | wall (us) | host CPU (us) | longest call (us) | NCCL / this (median wall, same buffer use) | "
         "%s#wrong\n",
         O.nccl_window ? "best NCCL / this (the faster of nccl and nccl-win, same buffer use) | " : "");
  fflush(stdout);
}

/* --nccl-window: --buffers buffers from ncclMemAlloc (this rank's device is
 * current), zeroed, each registered as a window NCCL's symmetric kernels
 * may use, on the same communicator as the plain buffers: NCCL chooses
 * those kernels per call, by whether the buffer lies in such a window (as
 * nccl-tests -R 2 does; a second communicator would only add its own
 * buffers and threads). One window per buffer, as the plain rotating
 * variant has one allocation per buffer. Registration is collective: every
 * rank, the same size, the same order. */
static void alloc_nccl_windows(struct tw *w) {
  char reason[512];
  REQUIRE(bn_window_check(reason, sizeof reason) == 0, "--nccl-window: %s", reason);
  tw_use(R.r);
  uint64_t mine = 0, all[TW_MAX_RANKS];
  for (int b = 0; b < O.buffers; b++) {
    void *p = NULL;
    check_nccl(bn.MemAlloc(&p, O.max_bytes), "ncclMemAlloc");
    R.win_buf[b] = (CUdeviceptr)(uintptr_t)p;
    TW_CU(cw_cu.cuMemsetD8Async(R.win_buf[b], 0, O.max_bytes, R.r->stream));
    check_nccl(bn.CommWindowRegister(R.nccl, p, O.max_bytes, &R.win[b], BN_WIN_COLL_SYMMETRIC), "ncclCommWindowRegister");
    mine += R.win[b] == NULL;
    tw_progress();
  }
  tw_exchange_u64(w, &mine, all);
  for (int k = 0; k < w->nranks; k++) R.windows_declined += all[k];
}

/* Every variant at the size O.bytes: one row each; the wrong elements. */
static uint64_t time_size(struct tw *w) {
  /* NCCL first (plain, then window), so that each later row can give its
   * ratio to NCCL's rows of the same buffer use. */
  static const enum variant order[NVARIANTS] = {V_NCCL_SAME, V_NCCL_ROTATING, V_NCCL_WIN_SAME, V_NCCL_WIN_ROTATING,
                                                V_SYMM_SAME, V_SYMM_ROTATING, V_FLOOR, V_FLOOR_SMALL};
  double nccl_median[2] = {0, 0};   /* same, rotating */
  double window_median[2] = {0, 0}; /* the same on the window buffers */
  /* The variant column's width: the window's names are longer. */
  const int name_width = O.nccl_window ? 17 : 14;
  uint64_t wrong_total = 0;
  for (int i = 0; i < NVARIANTS; i++) {
    const enum variant v = order[i];
    if (!is_symm(v) && !is_window(v) && !O.vs_nccl) continue;
    if (is_window(v) && !O.nccl_window) continue;
    if ((v == V_FLOOR || v == V_FLOOR_SMALL) && !O.launch_floor) continue;
    tw_phase("%s %zu bytes", variant_name[v], O.bytes);
    if (O.op == OP_SENDRECV) clear_receive_buffers(v);
    for (int k = 0; k < WARMUP; k++) issue(v, k % nbuffers(v));
    uint64_t wall[MAX_RUNS], cpu[MAX_RUNS], longest[MAX_RUNS];
    for (int run = 0; run < O.runs; run++) {
      uint64_t mine[3], all[TW_MAX_RANKS];
      timed_loop(w, v, mine);
      uint64_t *dst[3] = {&wall[run], &cpu[run], &longest[run]};
      for (int m = 0; m < 3; m++) {
        tw_exchange_u64(w, &mine[m], all);
        *dst[m] = 0;
        for (int k = 0; k < w->nranks; k++)
          if (all[k] > *dst[m]) *dst[m] = all[k];
      }
      tw_progress();
    }
    const uint64_t bad = check_variant(w, v);
    wrong_total += bad;
    if (w->lead) {
      char ws[64], cs[64], ls[64], rs[32] = "-", bs[32] = "-";
      const double med = spread(wall, O.runs, ws, sizeof ws);
      spread(cpu, O.runs, cs, sizeof cs);
      spread(longest, O.runs, ls, sizeof ls);
      const int rotating = is_rotating(v);
      if (v == V_NCCL_SAME || v == V_NCCL_ROTATING) nccl_median[rotating] = med;
      if (is_window(v)) window_median[rotating] = med;
      if (nccl_median[rotating] > 0) snprintf(rs, sizeof rs, "%.2f", nccl_median[rotating] / med);
      printf("%-*s  %20s  %20s  %24s  %6s", name_width, variant_name[v], ws, cs, ls, rs);
      if (O.nccl_window) {
        /* Once both NCCL rows of this buffer use have run: "-" on the plain
         * NCCL row (its window row comes next). */
        const double plain = nccl_median[rotating], window = window_median[rotating];
        if (plain > 0 && window > 0) snprintf(bs, sizeof bs, "%.2f", (plain < window ? plain : window) / med);
        printf("  %6s", bs);
      }
      printf("  %6llu\n", (unsigned long long)bad);
      fflush(stdout);
    }
  }
  return wrong_total;
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  if (!(R.r = bw_start_rank(w, PROG))) return;
  char reason[512];
  for (int z = 0; z < O.nsizes; z++)
    if (O.sizes[z] > O.max_bytes) O.max_bytes = O.sizes[z];
  const int n = w->nranks;
  R.to = (R.r->rank + 1) % n;
  R.from = (R.r->rank - 1 + n) % n;
  /* Buffers of the largest size; each size uses their start. */
  for (int b = 0; b < O.buffers; b++) {
    TW_CU(tu_cu.cuMemAlloc(&R.buf[b], O.max_bytes));
    TW_CU(cw_cu.cuMemsetD8Async(R.buf[b], 0, O.max_bytes, R.r->stream));
    if (O.op == OP_SENDRECV) TW_CU(tu_cu.cuMemAlloc(&R.rbuf[b], O.max_bytes));
  }
  R.host = malloc(O.max_bytes);
  REQUIRE(R.host != NULL, "out of host memory");
  if (O.op == OP_SENDRECV) fill_send_buffers();
  if (O.vs_nccl) {
    REQUIRE(bn_load(O.nccl_lib, reason, sizeof reason) == 0, "--vs-nccl: %s", reason);
    check_nccl(bw_nccl_init_rank(w, R.r, &R.nccl), "ncclGetUniqueId/ncclCommInitRank");
  }
  if (O.nccl_window) alloc_nccl_windows(w);
  if (O.launch_floor) {
    CUmodule mod = tw_load_module(R.r, COLL_KERNELS_FATBIN, "COLL_TEST_KERNELS");
    R.floor_kernel = tw_function(R.r, mod, "eb_launch_floor");
    R.floor_small_kernel = tw_function(R.r, mod, "eb_launch_floor_small");
  }
  if (w->lead) header(w);

  uint64_t wrong_total = 0;
  for (int z = 0; z < O.nsizes; z++) {
    O.bytes = O.sizes[z];
    if (w->lead) table_header();
    wrong_total += time_size(w);
  }
  if (w->lead) {
    printf("# %llu wrong element(s): %s\n", (unsigned long long)wrong_total, wrong_total ? "FAILED" : "OK");
    fflush(stdout);
  }
  TW_CHECK(R.r, wrong_total == 0, "%llu wrong element(s)", (unsigned long long)wrong_total);

  tw_sync_all(w, 600, "teardown");
  tw_host_barrier(w, "teardown");
  for (int b = 0; b < O.buffers; b++)
    if (R.win[b]) check_nccl(bn.CommWindowDeregister(R.nccl, R.win[b]), "ncclCommWindowDeregister");
  if (R.nccl) check_nccl(bn.CommDestroy(R.nccl), "ncclCommDestroy");
  for (int b = 0; b < O.buffers; b++) {
    TW_CU(tu_cu.cuMemFree(R.buf[b]));
    if (R.rbuf[b]) TW_CU(tu_cu.cuMemFree(R.rbuf[b]));
  }
  for (int b = 0; b < O.buffers; b++)
    if (R.win_buf[b]) check_nccl(bn.MemFree((void *)(uintptr_t)R.win_buf[b]), "ncclMemFree");
  free(R.host);
  tw_destroy_comms(w);
}

/* Whether argv[2..argc-1] holds an option starting with `prefix`. */
static int has_prefix(int argc, char **argv, const char *prefix) {
  for (int i = 2; i < argc; i++)
    if (!strncmp(argv[i], prefix, strlen(prefix))) return 1;
  return 0;
}

int main(int argc, char **argv) {
  /* The harness hands the options over one at a time: these pairs are
   * checked here, before it runs (and on machines without a GPU). */
  if (bw_has_arg(argc, argv, "--nccl-window") && !bw_has_arg(argc, argv, "--vs-nccl")) {
    fprintf(stderr, PROG ": --nccl-window adds NCCL rows on window-registered buffers beside the ordinary ones: it "
            "needs --vs-nccl\n");
    return 2;
  }
  if (bw_has_arg(argc, argv, "--nccl-window") && bw_has_arg(argc, argv, "--op=sendrecv")) {
    fprintf(stderr, PROG ": --nccl-window times NCCL's symmetric kernels, which serve collectives, not send/recv: it "
            "goes with --op=allreduce\n");
    return 2;
  }
  if (bw_has_arg(argc, argv, "--launch-floor") && bw_has_arg(argc, argv, "--op=sendrecv")) {
    fprintf(stderr, PROG ": --launch-floor is the floor of one collective launch: it goes with --op=allreduce\n");
    return 2;
  }
  if (has_prefix(argc, argv, "--bytes=") && has_prefix(argc, argv, "--sizes=")) {
    fprintf(stderr, PROG ": --bytes=N times one size and --sizes=LIST several: give one of them\n");
    return 2;
  }
  static const struct tw_spec spec = {.name = PROG, .modes = "mp",
      .usage = "[--op=allreduce|sendrecv] [--bytes=N | --sizes=N,N,...] [--calls=N] [--runs=N] [--buffers=N] "
               "[--vs-nccl [--nccl-window]] [--nccl-lib=PATH] [--launch-floor]",
      .limit_s = 1800, .stall = 1, .quiet = 1, .library_timeouts = 1, .mp_one_rank = 1, .option = option,
      .process_init = cw_process_init, .body = body};
  return tw_main(&spec, argc, argv);
}
