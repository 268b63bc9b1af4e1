/*
 * symm_bench: an nccl-tests-style benchmark of symmcomm's collectives,
 * optionally side by side with NCCL (--vs-nccl) on the same GPUs, buffers
 * and streams. Run with --help for the options.
 *
 * Per collective and size it times `iters` back-to-back calls with CUDA
 * events on every rank's stream (after a host barrier and a device barrier,
 * so that the ranks start together), reports the slowest rank's mean time
 * per call, and checks the result of one more call bit for bit (for the
 * out-of-place and in-place variants), like nccl-tests' table.
 *
 * Two ways to drive the GPUs, both run by the multi-rank harness of the
 * tests (../gpu_world.h):
 *   procs    one process per GPU (the harness's "mp"): the parent forks one
 *            rank per GPU (symmCommInitRank) and never touches CUDA itself.
 *            Ranks meet through a MAP_SHARED page (barriers, timings, the
 *            unique ids, NCCL's unique id from rank 0).
 *   initall  one process and thread (the harness's "all"), symmCommInitAll,
 *            one stream per GPU; every call is enqueued on every GPU before
 *            anything waits.
 *
 * Every wait is bounded: streams are polled against --timeout, host
 * barriers have a deadline and notice a failed peer, and a watchdog ends a
 * rank that makes no progress for --timeout + 60 s, naming where it was.
 *
 * Without a CUDA device it prints one line saying so and exits 0 (77 with
 * --require-gpu, the CTest convention for "skipped"). More ranks (-g) than
 * GPUs only with SYMM_TEST_SHARED_DEVICES=1 (several ranks per GPU, for the
 * correctness checks: the timings then mean nothing, and the header says
 * so; not with --vs-nccl).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bench_cuda.h"
#include "bench_data.h"
#include "bench_nccl.h"
#include "gpu_world.h"
#include "symmcomm.h"
#include "test_util.h"

#define MAX_RANKS 8
#define MAX_SIZES 256
#define MAX_ALGOS 12
#define MAX_RUNS 16
#define PROG "symm_bench"

/* Exit codes of a rank process: */
#define RANK_OK 0
#define RANK_WRONG 1 /* finished, but some result was wrong */
#define RANK_FATAL 2 /* gave up (message printed) */

/* ---- collectives ------------------------------------------------------------ */

enum coll { C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_BROADCAST, C_REDUCE, C_ALLTOALL, C_SENDRECV, C_NUM };

static const char *const coll_names[C_NUM] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                              "reduce",    "alltoall",  "sendrecv"};

static int coll_reduces(enum coll c) {
  return c == C_ALLREDUCE || c == C_REDUCESCATTER || c == C_REDUCE;
}

static int coll_rooted(enum coll c) {
  return c == C_BROADCAST || c == C_REDUCE;
}

/* "all_reduce", "AllReduce", "all-reduce" all name allreduce. */
static int coll_by_name(const char *s, size_t len) {
  char norm[32];
  size_t k = 0;
  for (size_t i = 0; i < len && k + 1 < sizeof norm; i++)
    if (s[i] != '_' && s[i] != '-') norm[k++] = s[i];
  norm[k] = '\0';
  for (int c = 0; c < C_NUM; c++)
    if (strcasecmp(norm, coll_names[c]) == 0) return c;
  if (strcasecmp(norm, "all2all") == 0) return C_ALLTOALL;
  return -1;
}

/* IMPL_NCCL_WINDOW: NCCL on its window-registered buffers (--nccl-window). */
enum impl { IMPL_SYMM, IMPL_NCCL, IMPL_NCCL_WINDOW };
/* BUF_SYMMETRIC_RECV: a plain sendbuff and a symmetric recvbuff (kernels
 * that take any input but store into the peers' outputs: twoshot+write). */
enum bufclass { BUF_STAGED, BUF_REGISTERED, BUF_SYMMETRIC, BUF_SYMMETRIC_RECV };
static const char *const bufclass_names[] = {"staged", "registered", "symmetric", "symmetric-recv"};

/* ---- options ------------------------------------------------------------------ */

struct opts {
  int colls[C_NUM];
  int ncoll;
  size_t minb, maxb, factor;
  const struct bd_type *type;
  int op;
  int root;
  long iters;  /* 0: adaptive */
  int runs;    /* timed runs per column; the median is reported, the spread printed */
  long warmup;
  double target_ms;
  int graph, graph_replays;
  int initall;
  enum bufclass buffers;
  int ngpus; /* 0: all visible */
  int check;
  int vs_nccl;
  int nccl_inplace;
  int nccl_window; /* a second NCCL column on ncclMemAlloc buffers registered as windows */
  const char *nccl_lib;
  int require_gpu;
  double timeout;
  int self_test;
  /* --algos: algorithms to run side by side (symmCommSetAlgorithm), each a
   * table of its own; none: the communicator's (SYMM_ALGO). */
  char algos[MAX_ALGOS][64];
  int nalgos;
  /* --algos-for COLL=A,B,...: that collective's own list (replaces --algos
   * for it), so that one process runs each collective with the algorithms
   * that differ for it. */
  char coll_algos[C_NUM][MAX_ALGOS][64];
  int coll_nalgos[C_NUM];
  char cmdline[1536];
};

static struct opts O = {
    .ncoll = 0,
    .minb = 8,
    .maxb = 1ull << 30,
    .factor = 2,
    .type = NULL,
    .op = BD_SUM,
    .root = 0,
    .iters = 0,
    .runs = 3,
    .warmup = 5,
    .target_ms = 20.0,
    .graph = 0,
    .graph_replays = 1,
    .initall = 0,
    .buffers = BUF_STAGED,
    .ngpus = 0,
    .check = 1,
    .vs_nccl = 0,
    .nccl_inplace = 0,
    .nccl_window = 0,
    .nccl_lib = NULL,
    .require_gpu = 0,
    .timeout = 300.0,
    .self_test = 0,
};

static void usage(FILE *f) {
  fprintf(f,
          "Usage: " PROG " [options]\n"
          "nccl-tests-style benchmark of symmcomm's collectives on the GPUs of this machine.\n"
          "\n"
          "  -c, --coll LIST        collectives, comma-separated, or 'all' (default allreduce):\n"
          "                         allreduce allgather reducescatter broadcast reduce alltoall sendrecv\n"
          "  -b, --minbytes N       smallest size in bytes (default 8; suffixes K M G, binary)\n"
          "  -e, --maxbytes N       largest size in bytes (default 1G); the sweep always ends with it\n"
          "  -f, --stepfactor N     size multiplier between rows (default 2)\n"
          "  -d, --datatype T       int8 uint8 int32 uint32 int64 uint64 fp16 fp32 fp64 bf16 fp8e4m3 fp8e5m2\n"
          "                         (default bf16; nccl-tests' names such as float, half, bfloat16 work too)\n"
          "  -o, --op OP            sum prod max min avg (default sum)\n"
          "  -r, --root R           root of broadcast and reduce (default 0)\n"
          "  -n, --iters N          timed calls per row and placement (default: adaptive, enough for\n"
          "                         about --target-ms, at least 20 and at most 1000)\n"
          "  -w, --warmup_iters N   warm-up calls before timing (default 5; they also size the adaptive -n)\n"
          "      --target-ms MS     time the adaptive -n aims for per row and placement (default 20)\n"
          "      --runs R           timed runs of -n calls each per row and placement, back to back\n"
          "                         inside a run (default 3): the median is reported, each row's\n"
          "                         spread follows it on a '#  runs:' line\n"
          "  -G, --cudagraph        capture the N timed calls in a CUDA graph per rank and time its replay\n"
          "      --graph-replays K  timed replays of that graph (default 1, after one untimed replay)\n"
          "  -m, --mode M           procs: one process per GPU (fork, symmGetUniqueId + symmCommInitRank;\n"
          "                         default); initall: one process drives all GPUs (symmCommInitAll,\n"
          "                         one stream per GPU)\n"
          "  -B, --buffers CLASS    staged: plain cuMemAlloc buffers (default); registered: cuMemAlloc +\n"
          "                         symmCommRegister; symmetric: symmMemAlloc; symmetric-recv: a plain\n"
          "                         sendbuff and a symmMemAlloc recvbuff\n"
          "  -g, --ngpus N          GPUs (ranks) to use, at least 2 (default: SYMM_TEST_NRANKS, else all\n"
          "                         visible, at most 8); more than visible only with SYMM_TEST_SHARED_DEVICES=1\n"
          "                         (ranks share GPUs: results checked, timings meaningless)\n"
          "  -N, --no-check         do not check the results\n"
          "      --vs-nccl          also time NCCL (libnccl.so.2, loaded at run time) out of place on the same\n"
          "                         GPUs and streams, with plain cuMemAlloc buffers; adds NCCL's time, busbw\n"
          "                         and the ratio NCCL time / symmcomm time (> 1: symmcomm is faster)\n"
          "      --nccl-inplace     with --vs-nccl: time and check NCCL in place instead (the ratio then\n"
          "                         compares the in-place times)\n"
          "      --nccl-window      with --vs-nccl: a second NCCL column, 'NCCL window', on buffers from\n"
          "                         ncclMemAlloc registered with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)\n"
          "                         on the same communicator (NCCL's symmetric kernels; nccl-tests' -R 2),\n"
          "                         timed and checked like the first (in place too with --nccl-inplace), with\n"
          "                         its own busbw and ratio window time / symmcomm time; needs NCCL 2.27+\n"
          "      --nccl-lib PATH    the NCCL library to load (default libnccl.so.2); with shared GPUs\n"
          "                         (SYMM_TEST_SHARED_DEVICES=1) --vs-nccl needs one that accepts them: symmcomm's\n"
          "                         libnccl.so.2 stand-in with SYMM_NCCL_MODE=symm (a smoke test of the NCCL columns)\n"
          "      --timeout S        longest wait for any GPU work or peer (default 300 s)\n"
          "      --require-gpu      exit 77 (CTest's 'skipped') instead of 0 when there is no usable GPU\n"
          "      --algos A,B,...    run every table once per algorithm, side by side in this process:\n"
          "                         symmCommSetAlgorithm with each (SYMM_ALGO's tokens joined by '+', e.g.\n"
          "                         classic,auto,twoshot+push,twoshot+pipe,p2p); NCCL runs with the first only\n"
          "      --algos-for C=A,B  the same for collective C only, replacing --algos for it (repeatable), e.g.\n"
          "                         --algos-for sendrecv=classic,auto,p2p --algos-for allgather=classic,auto\n"
          "      --self-test        check the data patterns and encoders on the host, then exit\n"
          "  -h, --help             this text\n"
          "\n"
          "Columns as nccl-tests: time is the slowest rank's mean per call; algbw = size / time; busbw\n"
          "= algbw * 2(n-1)/n (allreduce), * (n-1)/n (allgather, reducescatter, alltoall; size = the\n"
          "whole gathered/scattered buffer), * 1 (broadcast, reduce, sendrecv). #wrong counts wrong\n"
          "elements over all ranks and must be 0: the exit status is 1 otherwise or on any failure.\n"
          "NCCL_NVLS_ENABLE is forced to 0 (NVLink multicast is never used).\n"
          "With SYMM_TIMELINE=1 every row is followed by the per-phase summary of rank 0's last synced\n"
          "collective kernel of the out-of-place timed calls (symmCommGetTimeline; the last of the\n"
          "back-to-back loop or graph replays, not the checked call): mean and max over its blocks of\n"
          "the time in each phase.\n");
}

static void usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void usage_error(const char *fmt, ...) {
  va_list ap;
  fputs(PROG ": ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs(" (see --help)\n", stderr);
  exit(2);
}

/* "8", "64K", "1M", "1G", "1GiB", "4096B". */
static int parse_bytes(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno || s[0] == '-') return -1;
  unsigned shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
  }
  if (shift && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return -1;
  if (shift && v > (~0ull >> shift)) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static long parse_long(const char *s, const char *what, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno || v < lo || v > hi) usage_error("%s: '%s' is not a number in [%ld, %ld]", what, s, lo, hi);
  return v;
}

static double parse_double(const char *s, const char *what, double lo, double hi) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno || !(v >= lo && v <= hi)) usage_error("%s: '%s' is not a number in [%g, %g]", what, s, lo, hi);
  return v;
}

/* "a,b+c,d": up to MAX_ALGOS entries, each SYMM_ALGO's tokens joined by '+'. */
static void parse_algo_list(const char *what, const char *arg, char out[MAX_ALGOS][64], int *n) {
  *n = 0;
  for (const char *q = arg; *q;) {
    const char *e = strchr(q, ',');
    size_t len = e ? (size_t)(e - q) : strlen(q);
    if (len == 0 || len >= sizeof out[0]) usage_error("%s: bad entry '%.*s'", what, (int)len, q);
    if (*n == MAX_ALGOS) usage_error("%s: at most %d algorithms", what, MAX_ALGOS);
    snprintf(out[(*n)++], sizeof out[0], "%.*s", (int)len, q);
    if (!e) break;
    q = e + 1;
  }
  if (*n == 0) usage_error("%s: no algorithm named", what);
}

static void parse_colls(const char *arg) {
  O.ncoll = 0;
  if (strcasecmp(arg, "all") == 0) {
    for (int c = 0; c < C_NUM; c++) O.colls[O.ncoll++] = c;
    return;
  }
  for (const char *p = arg; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int c = coll_by_name(p, len);
    if (c < 0) usage_error("-c: unknown collective '%.*s'", (int)len, p);
    int dup = 0;
    for (int i = 0; i < O.ncoll; i++) dup |= O.colls[i] == c;
    if (!dup) O.colls[O.ncoll++] = c;
    if (!e) break;
    p = e + 1;
  }
  if (O.ncoll == 0) usage_error("-c: no collective named");
}

enum {
  OPT_VS_NCCL = 1000,
  OPT_NCCL_INPLACE,
  OPT_NCCL_WINDOW,
  OPT_NCCL_LIB,
  OPT_REQUIRE_GPU,
  OPT_TIMEOUT,
  OPT_TARGET_MS,
  OPT_RUNS,
  OPT_GRAPH_REPLAYS,
  OPT_SELF_TEST,
  OPT_ALGOS,
  OPT_ALGOS_FOR,
};

static void parse_args(int argc, char **argv) {
  size_t k = 0;
  for (int i = 0; i < argc && k + 2 < sizeof O.cmdline; i++) {
    int w = snprintf(O.cmdline + k, sizeof O.cmdline - k, "%s%s", i ? " " : "", argv[i]);
    if (w < 0) break;
    k += (size_t)w;
  }
  if (k >= sizeof O.cmdline) k = sizeof O.cmdline - 1;
  O.cmdline[k] = '\0';

  static const struct option longs[] = {
      {"coll", required_argument, NULL, 'c'},
      {"minbytes", required_argument, NULL, 'b'},
      {"maxbytes", required_argument, NULL, 'e'},
      {"stepfactor", required_argument, NULL, 'f'},
      {"datatype", required_argument, NULL, 'd'},
      {"op", required_argument, NULL, 'o'},
      {"root", required_argument, NULL, 'r'},
      {"iters", required_argument, NULL, 'n'},
      {"warmup_iters", required_argument, NULL, 'w'},
      {"cudagraph", no_argument, NULL, 'G'},
      {"mode", required_argument, NULL, 'm'},
      {"buffers", required_argument, NULL, 'B'},
      {"ngpus", required_argument, NULL, 'g'},
      {"no-check", no_argument, NULL, 'N'},
      {"help", no_argument, NULL, 'h'},
      {"vs-nccl", no_argument, NULL, OPT_VS_NCCL},
      {"nccl-lib", required_argument, NULL, OPT_NCCL_LIB},
      {"nccl-inplace", no_argument, NULL, OPT_NCCL_INPLACE},
      {"nccl-window", no_argument, NULL, OPT_NCCL_WINDOW},
      {"require-gpu", no_argument, NULL, OPT_REQUIRE_GPU},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"target-ms", required_argument, NULL, OPT_TARGET_MS},
      {"runs", required_argument, NULL, OPT_RUNS},
      {"graph-replays", required_argument, NULL, OPT_GRAPH_REPLAYS},
      {"self-test", no_argument, NULL, OPT_SELF_TEST},
      {"algos", required_argument, NULL, OPT_ALGOS},
      {"algos-for", required_argument, NULL, OPT_ALGOS_FOR},
      {NULL, 0, NULL, 0},
  };
  int ch;
  opterr = 0;
  while ((ch = getopt_long(argc, argv, ":c:b:e:f:d:o:r:n:w:Gm:B:g:Nh", longs, NULL)) != -1) {
    switch (ch) {
      case 'c': parse_colls(optarg); break;
      case 'b':
        if (parse_bytes(optarg, &O.minb) != 0) usage_error("-b: bad size '%s'", optarg);
        break;
      case 'e':
        if (parse_bytes(optarg, &O.maxb) != 0) usage_error("-e: bad size '%s'", optarg);
        break;
      case 'f': O.factor = (size_t)parse_long(optarg, "-f", 2, 1 << 20); break;
      case 'd':
        O.type = bd_type_by_name(optarg);
        if (!O.type) usage_error("-d: unknown data type '%s'", optarg);
        break;
      case 'o':
        O.op = bd_op_by_name(optarg);
        if (O.op < 0) usage_error("-o: unknown reduction '%s' (sum prod max min avg)", optarg);
        break;
      case 'r': O.root = (int)parse_long(optarg, "-r", 0, MAX_RANKS - 1); break;
      case 'n': O.iters = parse_long(optarg, "-n", 1, 1000000); break;
      case 'w': O.warmup = parse_long(optarg, "-w", 0, 100000); break;
      case 'G': O.graph = 1; break;
      case 'm':
        if (strcasecmp(optarg, "procs") == 0 || strcasecmp(optarg, "proc") == 0)
          O.initall = 0;
        else if (strcasecmp(optarg, "initall") == 0)
          O.initall = 1;
        else
          usage_error("-m: unknown mode '%s' (procs or initall)", optarg);
        break;
      case 'B': {
        int found = -1;
        for (int i = 0; i < (int)(sizeof bufclass_names / sizeof bufclass_names[0]); i++)
          if (strcasecmp(optarg, bufclass_names[i]) == 0) found = i;
        if (found < 0)
          usage_error("-B: unknown buffer class '%s' (staged, registered, symmetric or symmetric-recv)", optarg);
        O.buffers = (enum bufclass)found;
        break;
      }
      case 'g': O.ngpus = (int)parse_long(optarg, "-g", 1, MAX_RANKS); break;
      case 'N': O.check = 0; break;
      case 'h':
        usage(stdout);
        exit(0);
      case OPT_VS_NCCL: O.vs_nccl = 1; break;
      case OPT_NCCL_LIB: O.nccl_lib = optarg; break;
      case OPT_NCCL_INPLACE: O.nccl_inplace = O.vs_nccl = 1; break;
      case OPT_NCCL_WINDOW: O.nccl_window = 1; break;
      case OPT_REQUIRE_GPU: O.require_gpu = 1; break;
      case OPT_TIMEOUT: O.timeout = parse_double(optarg, "--timeout", 1, 86400); break;
      case OPT_TARGET_MS: O.target_ms = parse_double(optarg, "--target-ms", 0.01, 1e6); break;
      case OPT_RUNS: O.runs = (int)parse_long(optarg, "--runs", 1, MAX_RUNS); break;
      case OPT_GRAPH_REPLAYS: O.graph_replays = (int)parse_long(optarg, "--graph-replays", 1, 10000); break;
      case OPT_SELF_TEST: O.self_test = 1; break;
      case OPT_ALGOS: parse_algo_list("--algos", optarg, O.algos, &O.nalgos); break;
      case OPT_ALGOS_FOR: {
        const char *eq = strchr(optarg, '=');
        const int c = eq ? coll_by_name(optarg, (size_t)(eq - optarg)) : -1;
        if (c < 0) usage_error("--algos-for: '%s' is not COLLECTIVE=ALGO,ALGO,...", optarg);
        parse_algo_list("--algos-for", eq + 1, O.coll_algos[c], &O.coll_nalgos[c]);
        break;
      }
      case ':': usage_error("option %s needs a value", argv[optind - 1]);
      default: usage_error("unknown option %s", argv[optind - 1]);
    }
  }
  if (optind < argc) usage_error("unexpected argument '%s'", argv[optind]);
  if (O.ncoll == 0) O.colls[O.ncoll++] = C_ALLREDUCE;
  if (!O.type) O.type = bd_type_by_name("bf16");
  if (O.minb == 0) usage_error("-b must be at least 1 byte");
  if (O.minb > O.maxb) usage_error("-b (%zu) is larger than -e (%zu)", O.minb, O.maxb);
  if (O.nccl_window && !O.vs_nccl)
    usage_error("--nccl-window adds a second NCCL column beside the ordinary one: it needs --vs-nccl");
}

/* ---- the ranks of this process (the harness's world, plus the benchmark's state) ---- */

struct rank_state {
  struct tw_rank *t; /* rank, device, context, stream, communicator */
  bc_event ev[4];
  bn_comm ncomm;
  CUdeviceptr sbuf, rbuf;   /* the chosen buffer class */
  void *sreg, *rreg;        /* registrations (registered class) */
  CUdeviceptr nsbuf, nrbuf; /* NCCL's (the same as sbuf/rbuf unless symmetric) */
  CUdeviceptr wsbuf, wrbuf; /* NCCL's window column (--nccl-window): from ncclMemAlloc */
  bn_window swin, rwin;     /* their windows on ncomm */
  uint8_t *host;            /* pinned staging for reading results back */
  size_t host_bytes;
  CUgraph graph;
  CUgraphExec exec;
};

/* tw->user: what the rank processes share besides the harness's page. */
struct bench_shared {
  int nccl_ready;
  bn_unique_id nccl_id;
};

struct world {
  struct tw *tw;
  int nranks, nlocal;
  struct rank_state r[MAX_RANKS];
  size_t buf_bytes;
  size_t sizes[MAX_SIZES];
  int nsizes;
  uint64_t nccl_windows_declined; /* NULL windows from ncclCommWindowRegister, all ranks */
};

static struct world W;

static int leader(void) {
  return W.r[0].t->rank == 0;
}

static void die(const struct rank_state *r, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(const struct rank_state *r, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const int mp = W.tw && W.tw->mode == TW_MP;
  if (!r && mp) r = &W.r[0];
  if (r && r->t)
    fprintf(stderr, PROG ": rank %d (GPU %d): %s\n", r->t->rank, r->t->device, msg);
  else
    fprintf(stderr, PROG ": %s\n", msg);
  fprintf(stderr, PROG ": FAILED (while: %s)\n", tw_current_phase());
  tw_mark_dead();
  fflush(NULL);
  /* _exit: no library or driver teardown that could wait on stuck work. */
  _exit(mp ? RANK_FATAL : 1);
}

#define CU(r, call)                                                                  \
  do {                                                                               \
    CUresult cu_rc_ = (call);                                                        \
    if (cu_rc_ != 0) die((r), "%s failed: %s", #call, tu_cu_error(cu_rc_));          \
  } while (0)

static void die_symm(const struct rank_state *r, const char *what, symmResult_t rc) __attribute__((noreturn));
static void die_symm(const struct rank_state *r, const char *what, symmResult_t rc) {
  char msg[1024];
  const char *m = tu_last_error(r ? r->t->comm : NULL, msg, sizeof msg);
  die(r, "%s failed: %s: %s", what, symmGetErrorString(rc), m && m[0] ? m : "(no message)");
}

#define SYMM(r, call)                                        \
  do {                                                       \
    symmResult_t symm_rc_ = (call);                          \
    if (symm_rc_ != symmSuccess) die_symm((r), #call, symm_rc_); \
  } while (0)

static bn_comm ncomm_of(const struct rank_state *r) {
  return r ? r->ncomm : NULL;
}

#define NCCL(r, call)                                                                                     \
  do {                                                                                                    \
    bn_result nccl_rc_ = (call);                                                                          \
    if (nccl_rc_ != 0) {                                                                                  \
      char nccl_msg_[1024];                                                                               \
      die((r), "%s failed: %s", #call, bn_error(nccl_rc_, ncomm_of(r), nccl_msg_, sizeof nccl_msg_));     \
    }                                                                                                     \
  } while (0)

static void use_ctx(const struct rank_state *r) {
  CU(r, tu_cu.cuCtxSetCurrent(r->t->ctx));
}

/* ---- waiting and host coordination ---------------------------------------------- */

static void check_async(const struct rank_state *r, const char *what) {
  if (r->t->comm) {
    symmResult_t ae = symmSuccess;
    SYMM(r, symmCommGetAsyncError(r->t->comm, &ae));
    if (ae != symmSuccess) {
      char msg[1024];
      const char *m = tu_last_error(r->t->comm, msg, sizeof msg);
      die(r, "%s: the communicator reports %s: %s", what, symmGetErrorString(ae), m ? m : "");
    }
  }
  if (r->ncomm && bn.CommGetAsyncError) {
    bn_result ne = 0;
    NCCL(r, bn.CommGetAsyncError(r->ncomm, &ne));
    if (ne != 0 && ne != 7 /* ncclInProgress */) {
      char msg[1024];
      die(r, "%s: NCCL reports an asynchronous error: %s", what, bn_error(ne, r->ncomm, msg, sizeof msg));
    }
  }
}

/* Wait for r's stream, bounded by --timeout (the harness's wait: it also
 * stops when a peer process died); then check for errors the kernels
 * recorded (a device-side timeout lets the stream finish). */
static void wait_stream(const struct rank_state *r, const char *what) {
  tw_stream_wait(r->t, O.timeout, what);
  check_async(r, what);
}

static void wait_all(const char *what) {
  for (int i = 0; i < W.nlocal; i++) wait_stream(&W.r[i], what);
}

static void host_barrier(const char *what) {
  tw_host_barrier(W.tw, what);
}

/* Max / sum over every rank of one value per local rank. */
static double world_max(const double *v) {
  uint64_t bits[MAX_RANKS], all[MAX_RANKS];
  for (int i = 0; i < W.nlocal; i++) memcpy(&bits[i], &v[i], sizeof bits[i]);
  tw_exchange_u64(W.tw, bits, all);
  double m = v[0];
  for (int k = 0; k < W.nranks; k++) {
    double x;
    memcpy(&x, &all[k], sizeof x);
    m = x > m ? x : m;
  }
  return m;
}

static uint64_t world_sum(const uint64_t *v) {
  uint64_t all[MAX_RANKS], s = 0;
  tw_exchange_u64(W.tw, v, all);
  for (int k = 0; k < W.nranks; k++) s += all[k];
  return s;
}

/* ---- set-up and teardown --------------------------------------------------------- */

/* What the benchmark adds to the harness's rank: events, pinned staging. */
static void setup_rank(struct rank_state *r) {
  use_ctx(r);
  for (int k = 0; k < 4; k++) CU(r, bc.cuEventCreate(&r->ev[k], BC_CU_EVENT_DEFAULT));
  size_t hb = (O.maxb + 63) / 64 * 64;
  if (hb > (64u << 20)) hb = 64u << 20;
  if (hb < 4096) hb = 4096;
  r->host_bytes = hb;
  void *h = NULL;
  CU(r, bc.cuMemAllocHost(&h, hb));
  r->host = h;
}

/* A collective host call of every local rank (the harness groups them when
 * one thread drives several communicators) must have succeeded. */
static void collective_ok(symmResult_t rc, const char *what) {
  if (rc == symmSuccess) return;
  for (int i = 0; i < W.nlocal; i++) {
    const char *m = symmGetLastError(W.r[i].t->comm);
    if (m && m[0]) fprintf(stderr, PROG ": rank %d: %s\n", W.r[i].t->rank, m);
  }
  die_symm(W.nlocal == 1 ? &W.r[0] : NULL, what, rc);
}

static void init_nccl(void) {
  char reason[512];
  tw_phase("loading NCCL");
  if (bn_load(O.nccl_lib, reason, sizeof reason) != 0) die(NULL, "--vs-nccl: %s", reason);
  if (O.nccl_window && bn_window_check(reason, sizeof reason) != 0) die(NULL, "--nccl-window: %s", reason);
  tw_phase("NCCL communicator init");
  if (!O.initall) {
    struct rank_state *r = &W.r[0];
    struct bench_shared *sh = W.tw->user;
    use_ctx(r);
    bn_unique_id id;
    if (r->t->rank == 0) {
      NCCL(r, bn.GetUniqueId(&id));
      memcpy(&sh->nccl_id, &id, sizeof id);
      __atomic_store_n(&sh->nccl_ready, 1, __ATOMIC_RELEASE);
    }
    host_barrier("NCCL unique id");
    if (!__atomic_load_n(&sh->nccl_ready, __ATOMIC_ACQUIRE)) die(r, "rank 0 published no NCCL unique id");
    memcpy(&id, &sh->nccl_id, sizeof id);
    NCCL(r, bn.CommInitRank(&r->ncomm, W.nranks, id, r->t->rank));
  } else {
    bn_comm comms[MAX_RANKS];
    int devs[MAX_RANKS];
    for (int i = 0; i < W.nlocal; i++) devs[i] = W.r[i].t->device;
    NCCL(NULL, bn.CommInitAll(comms, W.nlocal, devs));
    for (int i = 0; i < W.nlocal; i++) W.r[i].ncomm = comms[i];
  }
}

/* --nccl-window: a second pair of NCCL buffers, allocated with ncclMemAlloc
 * and registered as windows (NCCL_WIN_COLL_SYMMETRIC) on the same NCCL
 * communicator as the ordinary column. Same communicator: NCCL picks its
 * symmetric kernels per call, only when both buffers lie in such windows, so
 * the ordinary column's cuMemAlloc buffers keep NCCL's usual path on it; it
 * is how nccl-tests -R 2 and PyTorch's NCCL memory pool use windows; and a
 * second communicator would add its own buffers, channels and proxy thread
 * to every GPU. ncclMemAlloc rounds each buffer up to the allocation
 * granularity itself; the windows cover the `bytes` asked for, the same on
 * every rank, as registration requires. */
static void alloc_nccl_windows(size_t bytes) {
  tw_phase("allocating and registering NCCL's window buffers");
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    void *s = NULL, *d = NULL;
    use_ctx(r); /* ncclMemAlloc allocates on the current device */
    NCCL(r, bn.MemAlloc(&s, bytes));
    NCCL(r, bn.MemAlloc(&d, bytes));
    r->wsbuf = (CUdeviceptr)(uintptr_t)s;
    r->wrbuf = (CUdeviceptr)(uintptr_t)d;
  }
  /* Collective: every rank registers its buffers in the same order. One
   * thread driving several communicators (initall) groups the calls, as it
   * does the collectives; NCCL then writes the windows at ncclGroupEnd. */
  const int grouped = W.nlocal > 1;
  if (grouped) NCCL(NULL, bn.GroupStart());
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    use_ctx(r);
    NCCL(r, bn.CommWindowRegister(r->ncomm, (void *)(uintptr_t)r->wsbuf, bytes, &r->swin, BN_WIN_COLL_SYMMETRIC));
    NCCL(r, bn.CommWindowRegister(r->ncomm, (void *)(uintptr_t)r->wrbuf, bytes, &r->rwin, BN_WIN_COLL_SYMMETRIC));
  }
  if (grouped) NCCL(NULL, bn.GroupEnd());
  uint64_t declined[MAX_RANKS];
  for (int i = 0; i < W.nlocal; i++) declined[i] = (uint64_t)(W.r[i].swin == NULL) + (W.r[i].rwin == NULL);
  W.nccl_windows_declined = world_sum(declined); /* for the header (bn_note_declined_windows) */
}

/* Before ncclCommDestroy: the windows, grouped as they were registered. */
static void deregister_nccl_windows(void) {
  const int grouped = W.nlocal > 1;
  if (grouped) NCCL(NULL, bn.GroupStart());
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    use_ctx(r);
    if (r->swin) NCCL(r, bn.CommWindowDeregister(r->ncomm, r->swin));
    if (r->rwin) NCCL(r, bn.CommWindowDeregister(r->ncomm, r->rwin));
    r->swin = r->rwin = NULL;
  }
  if (grouped) NCCL(NULL, bn.GroupEnd());
}

/* Whether the sendbuff (recv 0) or recvbuff (recv 1) of the chosen class
 * comes from the symmetric heap. */
static int in_symmetric_heap(int recv) {
  return O.buffers == BUF_SYMMETRIC || (recv && O.buffers == BUF_SYMMETRIC_RECV);
}

/* Every local rank's sendbuff or recvbuff (recv 0 or 1) of `bytes`: from
 * the symmetric heap (collectively) or cuMemAlloc; `ptrs` gets them. */
static void alloc_side(int recv, const size_t *sz, size_t bytes, void **ptrs) {
  if (in_symmetric_heap(recv)) collective_ok(tw_alloc(W.tw, sz, ptrs), "symmMemAlloc");
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    CUdeviceptr *p = recv ? &r->rbuf : &r->sbuf;
    if (in_symmetric_heap(recv)) {
      *p = (CUdeviceptr)(uintptr_t)ptrs[i];
      continue;
    }
    use_ctx(r);
    CU(r, tu_cu.cuMemAlloc(p, bytes));
    ptrs[i] = (void *)(uintptr_t)*p;
  }
}

static void free_side(int recv) {
  void *ptrs[MAX_RANKS];
  for (int i = 0; i < W.nlocal; i++) ptrs[i] = (void *)(uintptr_t)(recv ? W.r[i].rbuf : W.r[i].sbuf);
  if (in_symmetric_heap(recv)) {
    collective_ok(tw_free(W.tw, ptrs), "symmMemFree");
    return;
  }
  for (int i = 0; i < W.nlocal; i++) {
    use_ctx(&W.r[i]);
    CU(&W.r[i], tu_cu.cuMemFree((CUdeviceptr)(uintptr_t)ptrs[i]));
  }
}

static void alloc_buffers(void) {
  tw_phase("allocating %s buffers", bufclass_names[O.buffers]);
  size_t bytes = (O.maxb + 4095) / 4096 * 4096;
  W.buf_bytes = bytes;
  size_t sz[MAX_RANKS];
  void *s[MAX_RANKS], *rv[MAX_RANKS];
  for (int i = 0; i < W.nlocal; i++) sz[i] = bytes;
  alloc_side(0, sz, bytes, s);
  alloc_side(1, sz, bytes, rv);
  if (O.buffers == BUF_REGISTERED) {
    void *hs[MAX_RANKS], *hr[MAX_RANKS];
    collective_ok(tw_register(W.tw, s, sz, hs), "symmCommRegister");
    collective_ok(tw_register(W.tw, rv, sz, hr), "symmCommRegister");
    for (int i = 0; i < W.nlocal; i++) {
      W.r[i].sreg = hs[i];
      W.r[i].rreg = hr[i];
    }
  }
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    if (!O.vs_nccl) continue;
    if (in_symmetric_heap(1)) { /* NCCL on its own plain buffers */
      use_ctx(r);
      CU(r, tu_cu.cuMemAlloc(&r->nsbuf, bytes));
      CU(r, tu_cu.cuMemAlloc(&r->nrbuf, bytes));
    } else {
      r->nsbuf = r->sbuf;
      r->nrbuf = r->rbuf;
    }
  }
  if (O.nccl_window) alloc_nccl_windows(bytes);
}

static void teardown(void) {
  tw_phase("teardown");
  wait_all("teardown");
  if (O.buffers == BUF_REGISTERED)
    for (int i = 0; i < W.nlocal; i++) {
      SYMM(&W.r[i], symmCommDeregister(W.r[i].t->comm, W.r[i].sreg));
      SYMM(&W.r[i], symmCommDeregister(W.r[i].t->comm, W.r[i].rreg));
    }
  free_side(0);
  free_side(1);
  if (O.nccl_window) deregister_nccl_windows();
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    if (r->ncomm) {
      NCCL(r, bn.CommDestroy(r->ncomm));
      r->ncomm = NULL;
    }
    if (O.vs_nccl && in_symmetric_heap(1)) {
      use_ctx(r);
      CU(r, tu_cu.cuMemFree(r->nsbuf));
      CU(r, tu_cu.cuMemFree(r->nrbuf));
    }
    if (r->wsbuf) NCCL(r, bn.MemFree((void *)(uintptr_t)r->wsbuf));
    if (r->wrbuf) NCCL(r, bn.MemFree((void *)(uintptr_t)r->wrbuf));
    r->wsbuf = r->wrbuf = 0;
  }
  tw_destroy_comms(W.tw);
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    use_ctx(r);
    for (int k = 0; k < 4; k++) CU(r, bc.cuEventDestroy(r->ev[k]));
    CU(r, bc.cuMemFreeHost(r->host));
  }
}

/* ---- one call on every rank ---------------------------------------------------------- */

struct layout {
  size_t count;      /* what the API takes */
  size_t send_elems; /* elements of sendbuff read */
  size_t recv_elems; /* elements of recvbuff written */
  size_t size;       /* bytes, as nccl-tests reports them */
  double bus;        /* busbw / algbw */
};

/* 0 when the size holds no element per call (the row is skipped). */
static int make_layout(enum coll c, size_t bytes, size_t es, int n, struct layout *L) {
  const size_t elems = bytes / es;
  const double nn = n;
  switch (c) {
    case C_ALLREDUCE:
      *L = (struct layout){elems, elems, elems, elems * es, 2 * (nn - 1) / nn};
      break;
    case C_ALLGATHER: {
      size_t k = elems / (size_t)n;
      *L = (struct layout){k, k, k * (size_t)n, k * (size_t)n * es, (nn - 1) / nn};
      break;
    }
    case C_REDUCESCATTER: {
      size_t k = elems / (size_t)n;
      *L = (struct layout){k, k * (size_t)n, k, k * (size_t)n * es, (nn - 1) / nn};
      break;
    }
    case C_ALLTOALL: {
      size_t k = elems / (size_t)n;
      *L = (struct layout){k, k * (size_t)n, k * (size_t)n, k * (size_t)n * es, (nn - 1) / nn};
      break;
    }
    default: /* broadcast, reduce, sendrecv */
      *L = (struct layout){elems, elems, elems, elems * es, 1.0};
      break;
  }
  return L->count > 0;
}

struct ptrs {
  CUdeviceptr s, r;
};

static void column_ptrs(enum coll c, enum impl impl, int inplace, const struct rank_state *r, const struct layout *L,
                        struct ptrs *p) {
  const size_t es = O.type->size;
  CUdeviceptr sbuf = r->sbuf, rbuf = r->rbuf;
  if (impl == IMPL_NCCL) sbuf = r->nsbuf, rbuf = r->nrbuf;
  if (impl == IMPL_NCCL_WINDOW) sbuf = r->wsbuf, rbuf = r->wrbuf;
  if (!inplace) {
    p->s = sbuf;
    p->r = rbuf;
    return;
  }
  /* In place, as nccl-tests: all-gather's input is this rank's block of
   * recvbuff, reduce-scatter's output is this rank's block of sendbuff;
   * everything else passes one buffer twice. */
  const CUdeviceptr base = rbuf, block = (CUdeviceptr)r->t->rank * L->count * es;
  p->s = p->r = base;
  if (c == C_ALLGATHER) p->s = base + block;
  if (c == C_REDUCESCATTER) p->r = base + block;
}

static void *vp(CUdeviceptr p) {
  return (void *)(uintptr_t)p;
}

static void enqueue_symm(enum coll c, const struct layout *L, const struct ptrs *p) {
  const symmDataType_t dt = (symmDataType_t)O.type->id;
  const symmRedOp_t op = (symmRedOp_t)O.op;
  if (c == C_SENDRECV) {
    /* Every rank sends to the next and receives from the previous, all in
     * one group (one thread may drive several communicators). */
    symmResult_t rcs[MAX_RANKS];
    SYMM(NULL, symmGroupStart());
    for (int i = 0; i < W.nlocal; i++) {
      const struct rank_state *r = &W.r[i];
      const int next = (r->t->rank + 1) % W.nranks, prev = (r->t->rank - 1 + W.nranks) % W.nranks;
      rcs[i] = symmSend(vp(p[i].s), L->count, dt, next, r->t->comm, r->t->stream);
      if (rcs[i] == symmSuccess) rcs[i] = symmRecv(vp(p[i].r), L->count, dt, prev, r->t->comm, r->t->stream);
    }
    symmResult_t end = symmGroupEnd();
    for (int i = 0; i < W.nlocal; i++)
      if (rcs[i] != symmSuccess) die_symm(&W.r[i], "symmSend/symmRecv", rcs[i]);
    if (end != symmSuccess) {
      for (int i = 0; i < W.nlocal; i++) {
        const char *m = symmGetLastError(W.r[i].t->comm);
        if (m && m[0]) fprintf(stderr, PROG ": rank %d: %s\n", W.r[i].t->rank, m);
      }
      die_symm(W.nlocal == 1 ? &W.r[0] : NULL, "symmGroupEnd (send/recv)", end);
    }
    return;
  }
  for (int i = 0; i < W.nlocal; i++) {
    const struct rank_state *r = &W.r[i];
    void *s = vp(p[i].s), *d = vp(p[i].r);
    switch (c) {
      case C_ALLREDUCE: SYMM(r, symmAllReduce(s, d, L->count, dt, op, r->t->comm, r->t->stream)); break;
      case C_ALLGATHER: SYMM(r, symmAllGather(s, d, L->count, dt, r->t->comm, r->t->stream)); break;
      case C_REDUCESCATTER: SYMM(r, symmReduceScatter(s, d, L->count, dt, op, r->t->comm, r->t->stream)); break;
      case C_BROADCAST: SYMM(r, symmBroadcast(s, d, L->count, dt, O.root, r->t->comm, r->t->stream)); break;
      case C_REDUCE: SYMM(r, symmReduce(s, d, L->count, dt, op, O.root, r->t->comm, r->t->stream)); break;
      case C_ALLTOALL: SYMM(r, symmAllToAll(s, d, L->count, dt, r->t->comm, r->t->stream)); break;
      default: die(r, "internal: collective %d", (int)c);
    }
  }
}

static void enqueue_nccl(enum coll c, const struct layout *L, const struct ptrs *p) {
  const int dt = O.type->id, op = O.op;
  const size_t es = O.type->size;
  const int grouped = W.nlocal > 1 || c == C_SENDRECV || c == C_ALLTOALL;
  if (grouped) NCCL(NULL, bn.GroupStart());
  for (int i = 0; i < W.nlocal; i++) {
    const struct rank_state *r = &W.r[i];
    void *s = vp(p[i].s), *d = vp(p[i].r);
    switch (c) {
      case C_ALLREDUCE: NCCL(r, bn.AllReduce(s, d, L->count, dt, op, r->ncomm, r->t->stream)); break;
      case C_ALLGATHER: NCCL(r, bn.AllGather(s, d, L->count, dt, r->ncomm, r->t->stream)); break;
      case C_REDUCESCATTER: NCCL(r, bn.ReduceScatter(s, d, L->count, dt, op, r->ncomm, r->t->stream)); break;
      case C_BROADCAST: NCCL(r, bn.Broadcast(s, d, L->count, dt, O.root, r->ncomm, r->t->stream)); break;
      case C_REDUCE: NCCL(r, bn.Reduce(s, d, L->count, dt, op, O.root, r->ncomm, r->t->stream)); break;
      case C_ALLTOALL:
        for (int q = 0; q < W.nranks; q++) {
          const CUdeviceptr off = (CUdeviceptr)q * L->count * es;
          NCCL(r, bn.Send(vp(p[i].s + off), L->count, dt, q, r->ncomm, r->t->stream));
          NCCL(r, bn.Recv(vp(p[i].r + off), L->count, dt, q, r->ncomm, r->t->stream));
        }
        break;
      case C_SENDRECV: {
        const int next = (r->t->rank + 1) % W.nranks, prev = (r->t->rank - 1 + W.nranks) % W.nranks;
        NCCL(r, bn.Send(s, L->count, dt, next, r->ncomm, r->t->stream));
        NCCL(r, bn.Recv(d, L->count, dt, prev, r->ncomm, r->t->stream));
        break;
      }
      default: die(r, "internal: collective %d", (int)c);
    }
  }
  if (grouped) NCCL(W.nlocal == 1 ? &W.r[0] : NULL, bn.GroupEnd());
}

/* Both NCCL columns make the same calls: their buffers (p) differ. */
static void enqueue_round(enum coll c, enum impl impl, const struct layout *L, const struct ptrs *p) {
  if (impl == IMPL_SYMM)
    enqueue_symm(c, L, p);
  else
    enqueue_nccl(c, L, p);
}

/* Capture `calls` rounds into one graph per rank (all streams capture at
 * once: a round spans every local GPU). Every capture ends before any
 * graph is instantiated: instantiation is not allowed on a thread that
 * still captures a stream. */
static void capture(enum coll c, enum impl impl, const struct layout *L, const struct ptrs *p, long calls) {
  for (int i = 0; i < W.nlocal; i++) {
    use_ctx(&W.r[i]);
    CU(&W.r[i], tu_cu.cuStreamBeginCapture(W.r[i].t->stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  }
  for (long k = 0; k < calls; k++) enqueue_round(c, impl, L, p);
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    use_ctx(r);
    CUgraph g = NULL;
    CU(r, tu_cu.cuStreamEndCapture(r->t->stream, &g));
    if (!g) die(r, "cuStreamEndCapture returned no graph");
    r->graph = g;
  }
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    use_ctx(r);
    CU(r, tu_cu.cuGraphInstantiateWithFlags(&r->exec, r->graph, 0));
  }
}

static void launch_graphs(void) {
  for (int i = 0; i < W.nlocal; i++) {
    use_ctx(&W.r[i]);
    CU(&W.r[i], tu_cu.cuGraphLaunch(W.r[i].exec, W.r[i].t->stream));
  }
}

static void destroy_graphs(void) {
  for (int i = 0; i < W.nlocal; i++) {
    struct rank_state *r = &W.r[i];
    use_ctx(r);
    if (r->exec) CU(r, tu_cu.cuGraphExecDestroy(r->exec));
    if (r->graph) CU(r, tu_cu.cuGraphDestroy(r->graph));
    r->exec = NULL;
    r->graph = NULL;
  }
}

static void record(int k) {
  for (int i = 0; i < W.nlocal; i++) {
    use_ctx(&W.r[i]);
    CU(&W.r[i], bc.cuEventRecord(W.r[i].ev[k], W.r[i].t->stream));
  }
}

/* Milliseconds between events a and b, per local rank (after a wait). */
static void elapsed(int a, int b, double *ms) {
  for (int i = 0; i < W.nlocal; i++) {
    float f = 0;
    use_ctx(&W.r[i]);
    CU(&W.r[i], bc.cuEventElapsedTime(&f, W.r[i].ev[a], W.r[i].ev[b]));
    ms[i] = f;
  }
}

static void device_barrier(void) {
  for (int i = 0; i < W.nlocal; i++) SYMM(&W.r[i], symmBarrier(W.r[i].t->comm, W.r[i].t->stream));
}

/* ---- data: fill, poison, check ------------------------------------------------------- */

static void dev_poison(const struct rank_state *r, CUdeviceptr p, size_t bytes) {
  if (bytes) CU(r, bc.cuMemsetD8Async(p, 0xff, bytes, r->t->stream));
}

/* dst[k] = tile[k % period] for k < n: one upload of the tile, then
 * doubling copies on the device (the filled part is always a whole number
 * of periods, so the copies continue the pattern). */
static void dev_fill(const struct rank_state *r, CUdeviceptr dst, size_t n, const uint8_t *tile, size_t period) {
  const size_t es = O.type->size;
  if (n == 0) return;
  const size_t first = n < period ? n : period;
  /* From pageable memory the driver stages the bytes before it returns. */
  CU(r, bc.cuMemcpyHtoDAsync(dst, tile, first * es, r->t->stream));
  for (size_t done = first; done < n;) {
    const size_t k = done < n - done ? done : n - done;
    CU(r, bc.cuMemcpyDtoDAsync(dst + done * es, dst, k * es, r->t->stream));
    done += k;
  }
}

/* The inputs of one placement, and poison where results will land. */
static void prepare(enum coll c, int inplace, const struct layout *L, const struct ptrs *p,
                    const struct bd_pattern *pat) {
  const size_t es = O.type->size;
  for (int i = 0; i < W.nlocal; i++) {
    const struct rank_state *r = &W.r[i];
    const uint8_t *mine = pat->in[r->t->rank];
    use_ctx(r);
    if (!inplace) {
      dev_poison(r, p[i].r, L->recv_elems * es);
      dev_fill(r, p[i].s, L->send_elems, mine, pat->period);
    } else if (c == C_ALLGATHER) {
      dev_poison(r, p[i].r, L->recv_elems * es);
      dev_fill(r, p[i].s, L->count, mine, pat->period);
    } else if (c == C_BROADCAST && r->t->rank != O.root) {
      dev_poison(r, p[i].r, L->recv_elems * es);
    } else {
      dev_fill(r, p[i].s, L->send_elems, mine, pat->period);
    }
  }
  wait_all("filling the inputs");
  host_barrier("inputs ready");
}

/* Wrong elements of n at src against tile from `phase`; prints the first
 * few differences. */
static uint64_t check_region(const struct rank_state *r, CUdeviceptr src, size_t n, const uint8_t *tile, size_t period,
                             size_t phase, const char *label, size_t index0, int *reported) {
  const size_t es = O.type->size, chunk = r->host_bytes / es;
  uint64_t bad = 0;
  for (size_t k = 0; k < n; k += chunk) {
    const size_t m = n - k < chunk ? n - k : chunk;
    use_ctx(r);
    CU(r, bc.cuMemcpyDtoHAsync(r->host, src + k * es, m * es, r->t->stream));
    wait_stream(r, "reading the results back");
    size_t first = (size_t)-1;
    const uint64_t b = bd_compare(r->host, m, tile, period, (phase + k) % period, es, &first);
    if (b && *reported < 3) {
      char got[96], want[96];
      bd_format_elem(O.type, r->host + first * es, got, sizeof got);
      bd_format_elem(O.type, tile + ((phase + k + first) % period) * es, want, sizeof want);
      fprintf(stderr, PROG ": rank %d: %s: %" PRIu64 " wrong element(s) in this part; element %zu is %s, expected %s\n",
              r->t->rank, label, b, index0 + k + first, got, want);
      (*reported)++;
    }
    bad += b;
  }
  return bad;
}

static uint64_t check_results(enum coll c, const struct layout *L, const struct ptrs *p, const struct bd_pattern *pat,
                              const char *label) {
  const size_t es = O.type->size, n = (size_t)W.nranks, cnt = L->count, P = pat->period;
  uint64_t bad[MAX_RANKS];
  for (int i = 0; i < W.nlocal; i++) {
    const struct rank_state *r = &W.r[i];
    const size_t q = (size_t)r->t->rank;
    int rep = 0;
    uint64_t b = 0;
    switch (c) {
      case C_ALLREDUCE: b = check_region(r, p[i].r, cnt, pat->out, P, 0, label, 0, &rep); break;
      case C_REDUCESCATTER: b = check_region(r, p[i].r, cnt, pat->out, P, q * cnt, label, 0, &rep); break;
      case C_REDUCE:
        if (r->t->rank == O.root) b = check_region(r, p[i].r, cnt, pat->out, P, 0, label, 0, &rep);
        break;
      case C_BROADCAST: b = check_region(r, p[i].r, cnt, pat->in[O.root], P, 0, label, 0, &rep); break;
      case C_SENDRECV:
        b = check_region(r, p[i].r, cnt, pat->in[(q + n - 1) % n], P, 0, label, 0, &rep);
        break;
      case C_ALLGATHER:
        for (size_t k = 0; k < n; k++) b += check_region(r, p[i].r + k * cnt * es, cnt, pat->in[k], P, 0, label, k * cnt, &rep);
        break;
      case C_ALLTOALL:
        for (size_t k = 0; k < n; k++)
          b += check_region(r, p[i].r + k * cnt * es, cnt, pat->in[k], P, q * cnt, label, k * cnt, &rep);
        break;
      default: die(r, "internal: collective %d", (int)c);
    }
    bad[i] = b;
  }
  return world_sum(bad);
}

/* ---- one column: time and check one placement of one implementation ------------------- */

struct column {
  double us;      /* median over the runs of the slowest rank's mean per call */
  double us_min, us_max; /* the fastest and slowest run */
  int runs;
  uint64_t wrong; /* over all ranks */
  int checked;
  long iters;
};

/* In-place send/receive (sendbuff == recvbuff, as nccl-tests runs it) is a
 * race in any implementation: chunk c of the buffer may be overwritten by
 * the receive before the send has read it (or before the peer has read it,
 * where peers read each other's buffers directly). NCCL gets it wrong too
 * at large sizes, so it is timed but not checked. */
static int checkable(enum coll c, int inplace) {
  return O.check && !(c == C_SENDRECV && inplace);
}

/* Whether this column uses CUDA graphs. Not NCCL (either column) in
 * initall mode: there, capturing NCCL's grouped calls over several
 * communicators from one thread stalled inside NCCL (2.28, a few hundred
 * calls into a capture), so NCCL is timed with eager launches (the header
 * says so). */
static int graph_for(enum impl impl) {
  return O.graph && !(impl != IMPL_SYMM && W.nlocal > 1);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void capture_timeline(void);

static void run_column(enum coll c, enum impl impl, int inplace, const struct layout *L, const struct bd_pattern *pat,
                       struct column *out) {
  const int graph = graph_for(impl);
  struct ptrs p[MAX_RANKS];
  char label[128];
  static const char *const impl_prefix[] = {"", "NCCL ", "NCCL window "};
  snprintf(label, sizeof label, "%s%s %s, %zu B", impl_prefix[impl], coll_names[c],
           inplace ? "in-place" : "out-of-place", L->size);
  for (int i = 0; i < W.nlocal; i++) column_ptrs(c, impl, inplace, &W.r[i], L, &p[i]);
  double ms[MAX_RANKS];

  tw_phase("%s: filling the inputs", label);
  prepare(c, inplace, L, p, pat);

  /* Warm-up: the first call untimed (first-use costs), the rest timed to
   * size the adaptive iteration count. */
  tw_phase("%s: warm-up", label);
  long untimed = O.warmup > 1 ? 1 : 0, probe = O.warmup - untimed;
  if (O.iters == 0 && probe < 1) probe = 1;
  for (long k = 0; k < untimed; k++) enqueue_round(c, impl, L, p);
  long iters = O.iters;
  if (probe > 0) {
    record(0);
    for (long k = 0; k < probe; k++) enqueue_round(c, impl, L, p);
    record(1);
  }
  wait_all("warm-up");
  if (probe > 0) {
    elapsed(0, 1, ms);
    for (int i = 0; i < W.nlocal; i++) ms[i] /= (double)probe;
    const double per_call = world_max(ms);
    if (iters == 0) {
      double want = per_call > 0 ? ceil(O.target_ms / per_call) : 1000;
      iters = want < 20 ? 20 : want > 1000 ? 1000 : (long)want;
    }
  }
  out->iters = iters;

  long replays = 1;
  if (graph) {
    tw_phase("%s: capturing %ld calls", label, iters);
    capture(c, impl, L, p, iters);
    launch_graphs(); /* untimed: uploads the graph */
    wait_all("first graph replay");
    replays = O.graph_replays;
  }

  /* --runs timed runs, each of `iters` calls back to back (graph: `replays`
   * replays of them), as applications issue them: a stall that comes and
   * goes shows as a spread between runs instead of hiding in one mean. */
  double run_us[MAX_RUNS];
  for (int run = 0; run < O.runs; run++) {
    tw_phase("%s: timing %ld calls%s, run %d of %d", label, iters, graph ? " (graph)" : "", run + 1, O.runs);
    host_barrier("before timing");
    device_barrier();
    record(2);
    if (graph) {
      for (long k = 0; k < replays; k++) launch_graphs();
    } else {
      for (long k = 0; k < iters; k++) enqueue_round(c, impl, L, p);
    }
    record(3);
    wait_all("timed calls");
    elapsed(2, 3, ms);
    for (int i = 0; i < W.nlocal; i++) ms[i] = ms[i] * 1000.0 / ((double)iters * (double)replays);
    run_us[run] = world_max(ms);
  }
  /* The last timed call's phases (SYMM_TIMELINE=1), before the checked
   * call: that one follows host-side preparation, so its sync phase would
   * hold the ranks' launch skew instead of a call issued back to back. */
  if (impl == IMPL_SYMM && !inplace) capture_timeline();
  qsort(run_us, (size_t)O.runs, sizeof run_us[0], cmp_double);
  out->runs = O.runs;
  out->us_min = run_us[0];
  out->us_max = run_us[O.runs - 1];
  out->us = O.runs % 2 ? run_us[O.runs / 2] : (run_us[O.runs / 2 - 1] + run_us[O.runs / 2]) / 2;
  if (graph) destroy_graphs();

  out->wrong = 0;
  out->checked = checkable(c, inplace);
  if (out->checked) {
    tw_phase("%s: checking the result", label);
    prepare(c, inplace, L, p, pat);
    if (graph) {
      capture(c, impl, L, p, 1);
      launch_graphs();
    } else {
      enqueue_round(c, impl, L, p);
    }
    wait_all("the checked call");
    if (graph) destroy_graphs();
    host_barrier("checked call done");
    out->wrong = check_results(c, L, p, pat, label);
  }
  host_barrier("column done");
}

/* ---- the table --------------------------------------------------------------------- */

static void fmt_time(double us, char *buf, size_t len) {
  if (us >= 10000)
    snprintf(buf, len, "%.0f", us);
  else if (us >= 100)
    snprintf(buf, len, "%.1f", us);
  else
    snprintf(buf, len, "%.2f", us);
}

static void centered(const char *s, int width) {
  int len = (int)strlen(s), left = (width - len) / 2;
  if (left < 0) left = 0;
  printf("%*s%s%*s", left, "", s, width - len - left > 0 ? width - len - left : 0, "");
}

/* Widths: size 12, count 12, type 8, redop 6, root 6; per placement: time
 * 8, algbw 7, busbw 7, #wrong 6; NCCL, then NCCL window (--nccl-window):
 * time 8, busbw 7, ratio 9; two spaces between fields. */
static void print_table_header(enum coll c) {
  printf("#\n# %s\n", coll_names[c]);
  printf("#%51s", "");
  centered("out-of-place", 36);
  centered("in-place", 36);
  if (O.vs_nccl) centered(O.nccl_inplace ? "NCCL (in-place)" : "NCCL (out-of-place)", 30);
  if (O.nccl_window) centered(O.nccl_inplace ? "NCCL window (in-place)" : "NCCL window (out-of-place)", 30);
  printf("\n");
  printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int k = 0; k < 2; k++) printf("  %8s  %7s  %7s  %6s", "time", "algbw", "busbw", "#wrong");
  if (O.vs_nccl) printf("  %8s  %7s  %9s", "time", "busbw", "nccl/symm");
  if (O.nccl_window) printf("  %8s  %7s  %9s", "time", "busbw", "win/symm");
  printf("\n");
  printf("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int k = 0; k < 2; k++) printf("  %8s  %7s  %7s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  if (O.vs_nccl) printf("  %8s  %7s  %9s", "(us)", "(GB/s)", "(time)");
  if (O.nccl_window) printf("  %8s  %7s  %9s", "(us)", "(GB/s)", "(time)");
  printf("\n");
  fflush(stdout);
}

struct totals {
  double busbw_sum;
  int busbw_n;
  double nccl_busbw_sum, ratio_log_sum;
  int nccl_n;
  /* The window column: its busbw, log(window / symm), log(min(NCCL,
   * window) / symm). */
  double window_busbw_sum, window_ratio_log_sum, best_ratio_log_sum;
  int window_n;
  uint64_t wrong;
  uint64_t nccl_wrong, window_wrong;
  int rows;
};

/* nc: NCCL's column, nw: its window column (NULL where not run). */
static void print_row(enum coll c, const struct layout *L, const struct column *oop, const struct column *ip,
                      const struct column *nc, const struct column *nw, struct totals *t) {
  const size_t es = O.type->size;
  const char *redop = coll_reduces(c) ? bd_op_name(O.op) : "none";
  const int root = coll_rooted(c) ? O.root : -1;
  printf("%12zu  %12zu  %8s  %6s  %6d", L->size, L->size / es, O.type->name, redop, root);
  const struct column *cols[2] = {oop, ip};
  for (int k = 0; k < 2; k++) {
    char tb[32], wb[32];
    const double algbw = (double)L->size / cols[k]->us / 1e3, busbw = algbw * L->bus;
    fmt_time(cols[k]->us, tb, sizeof tb);
    if (cols[k]->checked)
      snprintf(wb, sizeof wb, "%" PRIu64, cols[k]->wrong);
    else
      snprintf(wb, sizeof wb, "N/A");
    printf("  %8s  %7.2f  %7.2f  %6s", tb, algbw, busbw, wb);
    t->busbw_sum += busbw;
    t->busbw_n++;
    t->wrong += cols[k]->wrong;
  }
  if (nc) {
    char tb[32];
    const double busbw = (double)L->size / nc->us / 1e3 * L->bus, ratio = nc->us / (O.nccl_inplace ? ip->us : oop->us);
    fmt_time(nc->us, tb, sizeof tb);
    printf("  %8s  %7.2f  %9.2f", tb, busbw, ratio);
    t->nccl_busbw_sum += busbw;
    t->ratio_log_sum += log(ratio);
    t->nccl_n++;
    t->nccl_wrong += nc->wrong;
  }
  if (nw) {
    char tb[32];
    const double symm_us = O.nccl_inplace ? ip->us : oop->us;
    const double busbw = (double)L->size / nw->us / 1e3 * L->bus, ratio = nw->us / symm_us;
    const double best_nccl_us = nc && nc->us < nw->us ? nc->us : nw->us;
    fmt_time(nw->us, tb, sizeof tb);
    printf("  %8s  %7.2f  %9.2f", tb, busbw, ratio);
    t->window_busbw_sum += busbw;
    t->window_ratio_log_sum += log(ratio);
    t->best_ratio_log_sum += log(best_nccl_us / symm_us);
    t->window_n++;
    t->window_wrong += nw->wrong;
  }
  printf("\n");
  /* The runs' spread (min / max per call), for the row just printed. */
  if (oop->runs > 1) {
    printf("#  runs: %d of %ld calls; out-of-place %.2f-%.2f us, in-place %.2f-%.2f us", oop->runs, oop->iters,
           oop->us_min, oop->us_max, ip->us_min, ip->us_max);
    if (nc) printf(", NCCL %.2f-%.2f us", nc->us_min, nc->us_max);
    if (nw) printf(", NCCL window %.2f-%.2f us", nw->us_min, nw->us_max);
    printf("\n");
  }
  if (nc && nc->wrong)
    printf("# note: NCCL's result differs from the exact expectation in %" PRIu64
           " element(s) at this size (not counted as a symmcomm failure)\n",
           nc->wrong);
  if (nw && nw->wrong)
    printf("# note: NCCL window's result differs from the exact expectation in %" PRIu64
           " element(s) at this size (not counted as a symmcomm failure)\n",
           nw->wrong);
  t->rows++;
  fflush(stdout);
}

static uint64_t coll_seed(enum coll c) {
  return 0x53594d4d00000000ull ^ ((uint64_t)c << 24) ^ ((uint64_t)O.type->id << 16) ^ ((uint64_t)O.op << 8);
}

/* ---- per-phase timeline (SYMM_TIMELINE=1) ------------------------------------------------ */

static const char *const phase_names[] = {"start", "copy-in", "sync", "reduce", "gather", "wait", "end"};
#define NPHASES 7
#define TL_MAX_EVENTS (128 * 255)
static char g_timeline[1024];

static int timeline_on(void) {
  const char *e = getenv("SYMM_TIMELINE");
  return e && e[0] && strcmp(e, "0") != 0;
}

/* Summarise rank 0's last synced collective kernel into g_timeline: per
 * phase, the mean and the max over the blocks of the time spent in it.
 * Waits for nothing: run_column calls it after the timed calls completed. */
static void capture_timeline(void) {
  g_timeline[0] = '\0';
  if (!timeline_on() || W.r[0].t->rank != 0) return;
  static symmTimelineEvent_t ev[TL_MAX_EVENTS];
  static double per[128][NPHASES];
  size_t n = 0;
  SYMM(&W.r[0], symmCommGetTimeline(W.r[0].t->comm, ev, TL_MAX_EVENTS, &n));
  if (n > TL_MAX_EVENTS) n = TL_MAX_EVENTS;
  if (n == 0) {
    snprintf(g_timeline, sizeof g_timeline, "#   timeline: none (LL packets or send/recv: no synced kernel)\n");
    return;
  }
  memset(per, 0, sizeof per);
  int blocks = 0;
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (size_t k = 0; k < n; k++) {
    const symmTimelineEvent_t *e = &ev[k];
    if (e->block >= 128 || e->phase >= NPHASES) continue;
    per[e->block][e->phase] += (double)e->duration_ns / 1e3;
    if ((int)e->block + 1 > blocks) blocks = (int)e->block + 1;
    if (e->start_ns < t0) t0 = e->start_ns;
    if (e->start_ns + e->duration_ns > t1) t1 = e->start_ns + e->duration_ns;
  }
  size_t w = (size_t)snprintf(g_timeline, sizeof g_timeline, "#   timeline rank 0, %d blocks, %.1f us first to last stamp; "
                              "us per block, mean/max:", blocks, (double)(t1 - t0) / 1e3);
  for (int p = 0; p < NPHASES - 1 && w < sizeof g_timeline; p++) {
    double sum = 0, mx = 0;
    for (int b = 0; b < blocks; b++) {
      sum += per[b][p];
      if (per[b][p] > mx) mx = per[b][p];
    }
    if (mx > 0) w += (size_t)snprintf(g_timeline + w, sizeof g_timeline - w, " %s %.1f/%.1f", phase_names[p], sum / blocks, mx);
  }
  if (w < sizeof g_timeline) snprintf(g_timeline + w, sizeof g_timeline - w, "\n");
}

/* Empty rank 0's timeline record (a read with capacity > 0 clears it), so
 * that the next capture sees only the kernels run after this: a kernel
 * that records nothing (LL, send/recv) then reads as none, not as the
 * previous column's. */
static void clear_timeline(void) {
  if (!timeline_on() || W.r[0].t->rank != 0) return;
  symmTimelineEvent_t one;
  size_t n = 0;
  SYMM(&W.r[0], symmCommGetTimeline(W.r[0].t->comm, &one, 1, &n));
}

/* Every local communicator runs `algo` (NULL: its SYMM_ALGO) from now on. */
static void set_algo(const char *algo) {
  wait_all("switching algorithms");
  host_barrier("switching algorithms");
  for (int i = 0; i < W.nlocal; i++) SYMM(&W.r[i], symmCommSetAlgorithm(W.r[i].t->comm, algo));
  host_barrier("algorithm switched");
}

static void run_collective(enum coll c, struct totals *all) {
  char err[512];
  struct bd_pattern pat;
  tw_phase("%s: making the data patterns", coll_names[c]);
  if (bd_pattern_make(&pat, O.type, coll_reduces(c), O.op, W.nranks, BD_PERIOD, coll_seed(c), err, sizeof err) != 0)
    die(NULL, "%s", err);
  static struct column nccl_cols[MAX_SIZES], nccl_window_cols[MAX_SIZES];
  /* This collective's list (--algos-for), else --algos, else none. */
  char(*algos)[64] = O.coll_nalgos[c] ? O.coll_algos[c] : O.algos;
  const int listed = O.coll_nalgos[c] ? O.coll_nalgos[c] : O.nalgos;
  const int nalgos = listed ? listed : 1;
  for (int ai = 0; ai < nalgos; ai++) {
    const char *algo = listed ? algos[ai] : NULL;
    if (listed) set_algo(algo);
    if (leader()) {
      print_table_header(c);
      if (algo) printf("# algorithm: %s (symmCommSetAlgorithm)%s\n", algo, O.vs_nccl && ai > 0 ? "; NCCL columns from the first table" : "");
    }
    struct totals t;
    memset(&t, 0, sizeof t);
    size_t last_size = 0;
    for (int s = 0; s < W.nsizes; s++) {
      struct layout L;
      if (!make_layout(c, W.sizes[s], O.type->size, W.nranks, &L)) continue;
      if (L.size == last_size) continue; /* rounding made it the same as the last row */
      last_size = L.size;
      struct column oop, ip;
      clear_timeline();
      run_column(c, IMPL_SYMM, 0, &L, &pat, &oop); /* captures the timeline of its last timed call */
      run_column(c, IMPL_SYMM, 1, &L, &pat, &ip);
      if (O.vs_nccl && ai == 0) run_column(c, IMPL_NCCL, O.nccl_inplace, &L, &pat, &nccl_cols[s]);
      if (O.nccl_window && ai == 0) run_column(c, IMPL_NCCL_WINDOW, O.nccl_inplace, &L, &pat, &nccl_window_cols[s]);
      if (leader()) {
        print_row(c, &L, &oop, &ip, O.vs_nccl ? &nccl_cols[s] : NULL, O.nccl_window ? &nccl_window_cols[s] : NULL, &t);
        if (g_timeline[0]) fputs(g_timeline, stdout);
      }
    }
    if (leader()) {
      if (t.rows == 0) printf("# (no size fits one %s element per rank)\n", O.type->name);
      if (c == C_SENDRECV && O.check)
        printf("# in-place sendrecv (sendbuff == recvbuff) is timed, not checked: it races in any implementation\n");
      printf("# Avg bus bandwidth    : %g\n", t.busbw_n ? t.busbw_sum / t.busbw_n : 0.0);
      if (O.vs_nccl && t.nccl_n)
        printf("# NCCL avg bus bandwidth: %g; geometric mean of nccl/symm time: %.3f\n", t.nccl_busbw_sum / t.nccl_n,
               exp(t.ratio_log_sum / t.nccl_n));
      if (O.nccl_window && t.window_n)
        printf("# NCCL (window) avg bus bandwidth: %g; geometric mean of win/symm time: %.3f; of best-NCCL/symm time: "
               "%.3f\n",
               t.window_busbw_sum / t.window_n, exp(t.window_ratio_log_sum / t.window_n),
               exp(t.best_ratio_log_sum / t.window_n));
      fflush(stdout);
    }
    all->rows += t.rows;
    all->wrong += t.wrong;
    if (ai == 0) all->nccl_wrong += t.nccl_wrong;
    if (ai == 0) all->window_wrong += t.window_wrong;
  }
  if (listed) set_algo(NULL);
  bd_pattern_free(&pat);
}

/* ---- header ---------------------------------------------------------------------------- */

static void print_env(void) {
  int any = 0;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "SYMM_", 5) == 0 || strncmp(*e, "NCCL_", 5) == 0 || strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0) {
      printf("%s %s", any ? "" : "# environment:", *e);
      any = 1;
    }
  }
  if (any) printf("\n");
}

static void human(size_t b, char *buf, size_t len) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0)
    snprintf(buf, len, "%zu GiB", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0)
    snprintf(buf, len, "%zu MiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    snprintf(buf, len, "%zu KiB", b >> 10);
  else
    snprintf(buf, len, "%zu B", b);
}

static void print_header(void) {
  int v = 0, drv = 0;
  symmGetVersion(&v);
  CU(&W.r[0], bc.cuDriverGetVersion(&drv));
  char date[64] = "?", host[128] = "?";
  time_t now = time(NULL);
  struct tm tmv;
  if (localtime_r(&now, &tmv)) strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", &tmv);
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  printf("# " PROG ": symmcomm %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  if (O.vs_nccl) {
    int nv = 0;
    if (bn.GetVersion && bn.GetVersion(&nv) == 0)
      printf(", NCCL %d.%d.%d", nv / 10000, nv / 100 % 100, nv % 100);
  }
  printf(", CUDA driver %d.%d\n", drv / 1000, drv % 1000 / 10);
  printf("# command: %s\n", O.cmdline);
  printf("# date: %s, host: %s\n", date, host);
  printf("# mode: %s\n", O.initall ? "initall (one process, symmCommInitAll, one stream per GPU)"
                                   : "procs (one process per GPU: symmGetUniqueId, fork, symmCommInitRank)");
  printf("# buffers: %s\n", O.buffers == BUF_STAGED       ? "staged (plain cuMemAlloc buffers)"
                            : O.buffers == BUF_REGISTERED ? "registered (cuMemAlloc + symmCommRegister)"
                            : O.buffers == BUF_SYMMETRIC  ? "symmetric (symmMemAlloc)"
                                                          : "symmetric-recv (plain cuMemAlloc sendbuff, symmMemAlloc recvbuff)");
  if (O.vs_nccl)
    printf("# NCCL: %s on %s, same streams; NCCL_NVLS_ENABLE=%s\n", O.nccl_inplace ? "in place" : "out of place",
           in_symmetric_heap(1) ? "its own cuMemAlloc buffers" : "the same cuMemAlloc buffers",
           getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "(unset)");
  if (O.nccl_window)
    printf("# NCCL (window): %s on ncclMemAlloc buffers registered with "
           "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) on the same communicator (NCCL's symmetric kernels where "
           "it has them)\n",
           O.nccl_inplace ? "in place" : "out of place");
  if (O.nccl_window) bn_note_declined_windows(W.nccl_windows_declined, 2 * (uint64_t)W.nranks);
  if (O.vs_nccl && O.nccl_lib) printf("# NCCL library: %s\n", O.nccl_lib);
  char a[32], b[32];
  human(O.minb, a, sizeof a);
  human(O.maxb, b, sizeof b);
  printf("# sizes: %s .. %s, factor %zu; type %s, op %s, root %d\n", a, b, O.factor, O.type->name, bd_op_name(O.op),
         O.root);
  if (O.iters)
    printf("# iterations: %ld per row and placement", O.iters);
  else
    printf("# iterations: adaptive (about %g ms per row and placement, 20..1000)", O.target_ms);
  printf(", %d timed run(s), median reported", O.runs);
  printf(", warm-up %ld; %s; data check: %s\n", O.warmup,
         O.graph ? "CUDA graph of the timed calls" : "eager launches", O.check ? "on" : "off");
  if (O.graph) printf("# graph: %d timed replay(s) after an untimed one\n", O.graph_replays);
  if (O.graph && O.vs_nccl && W.nlocal > 1)
    printf("# NCCL is timed with eager launches in initall mode (capturing its grouped calls over several\n"
           "# communicators from one thread stalls in NCCL); use -m procs to compare graphs with NCCL\n");
  printf("# time: CUDA events on each rank's stream after a host and a device barrier; slowest rank's mean per call\n");
  print_env();
  printf("# ranks: %d\n", W.nranks);
  if (W.tw->shared)
    printf("# WARNING: %d ranks share %d GPUs (SYMM_TEST_SHARED_DEVICES=1, time-sliced): the results are checked,\n"
           "# WARNING: but every time and bandwidth below is meaningless\n",
           W.nranks, W.tw->ngpus);
  for (int k = 0; k < W.nranks; k++) {
    CUdevice dev;
    char name[128] = "?", bus[32] = "?";
    size_t total = 0;
    const int ordinal = k % W.tw->ngpus; /* the harness puts rank k there */
    CU(&W.r[0], tu_cu.cuDeviceGet(&dev, ordinal));
    CU(&W.r[0], tu_cu.cuDeviceGetName(name, (int)sizeof name, dev));
    CU(&W.r[0], bc.cuDeviceGetPCIBusId(bus, (int)sizeof bus, dev));
    CU(&W.r[0], bc.cuDeviceTotalMem(&total, dev));
    printf("#  rank %d: GPU %d, %s [%s], %.0f GiB\n", k, ordinal, name, bus, (double)total / (1ull << 30));
  }
  fflush(stdout);
}

/* ---- the body: same in both modes ------------------------------------------------------- */

static int bench_body(struct tw *tw) {
  char reason[512];
  W.tw = tw;
  W.nranks = tw->nranks;
  W.nlocal = tw->nlocal;
  tw->wait_s = O.timeout;
  tw_phase("loading CUDA");
  if (bc_load(reason, sizeof reason) != 0) die(NULL, "%s", reason);
  for (int i = 0; i < W.nlocal; i++) {
    W.r[i].t = &tw->r[i];
    setup_rank(&W.r[i]);
  }
  if (tw_init_comms(tw) != symmSuccess) die(NULL, "communicator init failed (see above)");
  if (O.vs_nccl) init_nccl();
  alloc_buffers();
  if (leader()) print_header();
  struct totals all;
  memset(&all, 0, sizeof all);
  for (int k = 0; k < O.ncoll; k++) run_collective((enum coll)O.colls[k], &all);
  if (leader()) {
    if (!O.check)
      printf("# %d row(s); results not checked (-N)\n", all.rows);
    else if (all.wrong == 0)
      printf("# %d row(s), 0 wrong elements: OK\n", all.rows);
    else
      printf("# %d row(s), %" PRIu64 " wrong element(s): FAILED\n", all.rows, all.wrong);
    if (all.nccl_wrong) printf("# NCCL differed from the expectation in %" PRIu64 " element(s)\n", all.nccl_wrong);
    if (all.window_wrong)
      printf("# NCCL window differed from the expectation in %" PRIu64 " element(s)\n", all.window_wrong);
    fflush(stdout);
  }
  host_barrier("all collectives done");
  teardown();
  return all.wrong ? RANK_WRONG : RANK_OK;
}

/* The harness's body: wrong results count as a failure of this rank. */
static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (bench_body(tw) != RANK_OK) tu_failures++;
}

/* ---- main ---------------------------------------------------------------------------------- */

static void make_sizes(void) {
  W.nsizes = 0;
  size_t s = O.minb;
  for (;;) {
    if (W.nsizes == MAX_SIZES) usage_error("too many sizes (at most %d rows); use a larger -f", MAX_SIZES);
    W.sizes[W.nsizes++] = s;
    if (s > O.maxb / O.factor) break;
    s *= O.factor;
  }
  if (W.sizes[W.nsizes - 1] != O.maxb) {
    if (W.nsizes == MAX_SIZES) usage_error("too many sizes (at most %d rows); use a larger -f", MAX_SIZES);
    W.sizes[W.nsizes++] = O.maxb;
  }
}

/* No usable GPUs: say so and exit 0, or 77 with --require-gpu (then in the
 * "skipped: <reason>" form CTest's GPU drivers use, which scripts/test
 * shows). */
static int no_gpu(const char *what) {
  if (O.require_gpu)
    printf("skipped: %s\n", what);
  else
    printf(PROG ": %s; nothing to measure\n", what);
  fflush(stdout);
  return O.require_gpu ? TU_SKIP : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  parse_args(argc, argv);
  if (O.self_test) {
    int combos = 0;
    int fails = bd_self_test(&combos);
    printf(PROG ": self-test of the data patterns: %d combination(s), %d failure(s): %s\n", combos, fails,
           fails ? "FAILED" : "OK");
    return fails ? 1 : 0;
  }
  make_sizes();

  /* Never NVLink multicast (shared hosts): set before anything loads NCCL,
   * and inherited by the rank processes. */
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  if (nvls && strcmp(nvls, "0") != 0)
    fprintf(stderr, PROG ": NCCL_NVLS_ENABLE=%s overridden to 0 (NVLink multicast is never used)\n", nvls);
  setenv("NCCL_NVLS_ENABLE", "0", 1);

  /* Probe in a child so that this process never initialises CUDA (procs
   * mode forks the ranks from it). */
  char reason[512], what[640];
  int ngpus = tw_gpu_count(reason, sizeof reason);
  if (ngpus < 0) {
    fprintf(stderr, PROG ": the GPU probe failed: %s\n", reason);
    return 1;
  }
  if (ngpus == 0) {
    snprintf(what, sizeof what, "no CUDA device (%s)", reason);
    return no_gpu(what);
  }
  const char *env_n = getenv("SYMM_TEST_NRANKS");
  if (!O.ngpus && env_n && env_n[0]) O.ngpus = (int)parse_long(env_n, "SYMM_TEST_NRANKS", 2, MAX_RANKS);
  int n = O.ngpus ? O.ngpus : (ngpus < MAX_RANKS ? ngpus : MAX_RANKS);
  if (O.ngpus > ngpus) {
    if (!tw_shared_devices_allowed()) {
      snprintf(what, sizeof what,
               "-g %d asks for more GPUs than the %d CUDA device(s) visible (SYMM_TEST_SHARED_DEVICES=1 shares them, "
               "for correctness checks only)",
               O.ngpus, ngpus);
      return no_gpu(what);
    }
    if (O.vs_nccl && !O.nccl_lib)
      usage_error("--vs-nccl needs a GPU per rank (NCCL refuses ranks that share a GPU), or --nccl-lib naming a "
                  "library that accepts shared GPUs");
    fprintf(stderr, PROG ": %d ranks on %d GPU(s) (SYMM_TEST_SHARED_DEVICES=1): results are checked, timings mean "
            "nothing\n", O.ngpus, ngpus);
  }
  if (n < 2) {
    snprintf(what, sizeof what, "%d CUDA device(s) %s, but the collectives need at least 2 ranks on 2 GPUs", n,
             O.ngpus ? "asked for (-g)" : "found");
    return no_gpu(what);
  }
  if (O.root >= n) usage_error("-r %d: the root must be a rank below %d", O.root, n);

  /* Ranks live and die by the harness (gpu_world.h): procs = its "mp",
   * initall = its "all"; its watchdog fires after --timeout + 60 s without
   * progress (phase changes and finished waits). */
  static struct tw_spec spec = {.name = PROG, .quiet = 1, .stall = 1, .library_timeouts = 1, .body = body};
  spec.limit_s = O.timeout + 60;
  spec.user_bytes = sizeof(struct bench_shared);
  return tw_run(&spec, O.initall ? TW_ALL : TW_MP, n);
}
