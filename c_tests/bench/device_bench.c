/*
 * device_bench mp [--nranks=N] [options]: the device API's examples timed
 * beside what a user would run instead, graph-replayed, one process per rank.
 *
 *   table oneshot  examples/device/one_shot_all_reduce.cu's kernel (fp32 sum
 *                  of a symmetric input into a plain output, the example's
 *                  grid of 32 x 512 threads), symmAllReduce on the same
 *                  buffers, and ncclAllReduce (--vs-nccl) on plain ones
 *                  (with --nccl-window also on ncclMemAlloc buffers
 *                  registered as windows: NCCL's symmetric kernels).
 *   table rmsnorm  examples/device/all_reduce_rms_norm.cu's kernel (all-
 *                  reduce of bf16 x fused with the residual add and RMSNorm;
 *                  one row per block, 256 threads, at most 64 blocks) against
 *                  symmAllReduce then a separate add + RMSNorm kernel, and
 *                  ncclAllReduce then the same kernel (--nccl-window: also
 *                  on window-registered buffers), and the library's call
 *                  symmAllReduceAddRMSNorm (residualOut into its own
 *                  buffer; rows of a multiple of 8 elements only), and the
 *                  same call in place as vLLM makes it (out = input,
 *                  residualOut = residual: each captured call then works on
 *                  the previous one's outputs, which changes no timing). A size
 *                  of S bytes is S/2 bf16 elements per rank: rows of
 *                  --hidden elements (fewer when S/2 is smaller).
 *
 * The examples' kernels are compiled from the examples' own source (CMake
 * extracts the marked blocks; extract_kernel.cmake), so this times exactly
 * what the examples run.
 *
 * Each variant at each size: --iters calls captured into one CUDA graph per
 * rank, replayed once untimed, then --replays times between CUDA events
 * after a host and a device barrier; the time is the slowest rank's mean
 * per call. Then, unless --no-check, one eager call on fresh inputs is
 * checked on the host: the one-shot outputs must equal the exact sum
 * (small integers), the RMSNorm outputs must be within 2^-6 relative of an
 * fp64 reference (bf16 in, out and, unfused, the all-reduced sum). #wrong
 * counts wrong elements over all ranks and variants; the exit status is 1
 * when it is not 0.
 *
 * Options: --minbytes=N (8) --maxbytes=N (256K) --factor=F (2) --iters=N
 * (200) --replays=N (3) --hidden=H (4096) --blocks=B (one-shot grid, 32)
 * --only=oneshot|rmsnorm --no-check --vs-nccl --nccl-window --nccl-lib=PATH.
 * Sizes take K/M suffixes (binary). --nccl-window (with --vs-nccl) adds
 * NCCL's window column: buffers from ncclMemAlloc registered with
 * ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) on the same communicator,
 * timed and checked like the plain ones, its time and ratio beside theirs.
 *
 * Output: a header (versions, command, date, GPUs), then per table a line
 * "# table NAME: TITLE", a line "# columns: A | B | ...", and one row per
 * size (whitespace-separated, "-" where a variant did not run);
 * scripts/perf-tables turns it into markdown. With shared GPUs
 * (SYMM_TEST_SHARED_DEVICES=1) the times mean nothing; --vs-nccl then needs
 * --nccl-lib naming a library that accepts shared GPUs (symmcomm's
 * libnccl.so.2 stand-in with SYMM_NCCL_MODE=symm).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_cuda.h"
#include "bench_nccl.h"
#include "bench_world.h"
#include "coll_util.h"

#define PROG "device_bench"
#define RMS_THREADS 256
#define RMS_MAX_BLOCKS 64
#define ONESHOT_THREADS 512

static struct {
  size_t minb, maxb, factor;
  int iters, replays, hidden, blocks, check, vs_nccl, nccl_window, oneshot, rmsnorm;
  const char *nccl_lib;
  char cmdline[1024];
} O = {.minb = 8, .maxb = 256 << 10, .factor = 2, .iters = 200, .replays = 3, .hidden = 4096, .blocks = 32,
       .check = 1, .oneshot = 1, .rmsnorm = 1};

static int option(const char *arg, void *ctx) {
  (void)ctx;
  size_t n = strlen(O.cmdline);
  snprintf(O.cmdline + n, sizeof O.cmdline - n, " %s", arg);
  if (!strncmp(arg, "--minbytes=", 11)) return bw_parse_size(arg + 11, &O.minb);
  if (!strncmp(arg, "--maxbytes=", 11)) return bw_parse_size(arg + 11, &O.maxb);
  if (!strncmp(arg, "--factor=", 9)) return bw_parse_size(arg + 9, &O.factor) || O.factor < 2 ? -1 : 0;
  if (sscanf(arg, "--iters=%d", &O.iters) == 1) return O.iters > 0 && O.iters <= 100000 ? 0 : -1;
  if (sscanf(arg, "--replays=%d", &O.replays) == 1) return O.replays > 0 && O.replays <= 10000 ? 0 : -1;
  if (sscanf(arg, "--hidden=%d", &O.hidden) == 1) return O.hidden > 0 && O.hidden <= 12288 ? 0 : -1;
  if (sscanf(arg, "--blocks=%d", &O.blocks) == 1) return O.blocks > 0 && O.blocks <= 1024 ? 0 : -1;
  if (!strcmp(arg, "--only=oneshot")) return O.rmsnorm = 0, 0;
  if (!strcmp(arg, "--only=rmsnorm")) return O.oneshot = 0, 0;
  if (!strcmp(arg, "--no-check")) return O.check = 0, 0;
  if (!strcmp(arg, "--vs-nccl")) return O.vs_nccl = 1, 0;
  if (!strcmp(arg, "--nccl-window")) return O.nccl_window = 1, 0;
  if (!strncmp(arg, "--nccl-lib=", 11)) return O.nccl_lib = arg + 11, 0;
  return -1;
}

/* ---- per-rank state (one rank per process: mp) ------------------------------------ */

static struct {
  struct tw_rank *r;
  symmDevComm dc;
  CUmodule mod;
  CUfunction one_shot, fused, fill_f32, fill_rms, add_rms_norm;
  bn_comm nccl;
  CUevent ev[2];
  void *sym;                                    /* symmetric input (both tables) */
  CUdeviceptr in, out, residual, weight, rms_out; /* in = sym */
  CUdeviceptr residual_out;                     /* symmAllReduceAddRMSNorm's second output */
  CUdeviceptr nin, nout;                        /* NCCL's plain buffers */
  CUdeviceptr win_in, win_out;                  /* NCCL's window buffers (--nccl-window): ncclMemAlloc */
  bn_window win_in_reg, win_out_reg;            /* their windows on nccl */
  void *host;
  size_t bytes;
  uint64_t windows_declined; /* NULL windows from ncclCommWindowRegister, all ranks */
} R;

/* The calls that must succeed, for the rank of this process. */
#define check_symm(rc, what) BW_SYMM(R.r, (rc), (what))
#define check_nccl(rc, what) BW_NCCL(R.r, R.nccl, (rc), (what))

static void launch(CUfunction fn, unsigned grid, unsigned block, unsigned smem, void **params, const char *what) {
  CUresult rc = tu_cu.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, smem, R.r->stream, params, NULL);
  TW_REQUIRE(R.r, rc == 0, "cuLaunchKernel(%s, grid %u, block %u): %s", what, grid, block, tu_cu_error(rc));
}

static unsigned fill_grid(size_t n) {
  size_t g = (n + 255) / 256;
  return (unsigned)(g < 1 ? 1 : g > 1024 ? 1024 : g);
}

/* ---- the variants ------------------------------------------------------------------ */

enum table { T_ONESHOT, T_RMSNORM };
/* V_NCCL_WINDOW: ncclAllReduce on the window-registered buffers; V_LIB
 * (table rmsnorm): symmAllReduceAddRMSNorm; V_ALONE (table rmsnorm):
 * symmAllReduce alone on the same input, the floor the fused call is held
 * to ("within 1 us of the all-reduce alone"); V_LIB_IN_PLACE (table
 * rmsnorm): symmAllReduceAddRMSNorm in place, the Python default and
 * vLLM's call (the library may take another kernel form there: under
 * `auto` the one-shot LL form does not spread its sends in place; with
 * SYMM_ALGO=spread it does, on its fenced entry). */
enum variant { V_KERNEL, V_SYMM, V_NCCL, V_NCCL_WINDOW, V_LIB, V_ALONE, V_LIB_IN_PLACE, NVARIANTS };

static int is_nccl(enum variant v) {
  return v == V_NCCL || v == V_NCCL_WINDOW;
}

/* NCCL's input and output buffers of variant v (an NCCL variant). */
static CUdeviceptr nccl_in(enum variant v) {
  return v == V_NCCL_WINDOW ? R.win_in : R.nin;
}
static CUdeviceptr nccl_out(enum variant v) {
  return v == V_NCCL_WINDOW ? R.win_out : R.nout;
}

struct shape {
  enum table table;
  size_t bytes, elems; /* per rank */
  int tokens, hidden;
};

/* One call of variant v on the rank's stream. */
static void enqueue(const struct shape *s, enum variant v) {
  if (s->table == T_ONESHOT) {
    size_t n = s->elems;
    switch (v) {
      case V_KERNEL: {
        void *p[] = {&R.dc, &R.in, &R.out, &n};
        launch(R.one_shot, (unsigned)O.blocks, ONESHOT_THREADS, 0, p, "one_shot_all_reduce");
        break;
      }
      case V_SYMM:
        check_symm(symmAllReduce((const void *)(uintptr_t)R.in, (void *)(uintptr_t)R.out, n, symmFloat32, symmSum,
                                 R.r->comm, R.r->stream),
                   "symmAllReduce");
        break;
      default:
        check_nccl(bn.AllReduce((const void *)(uintptr_t)nccl_in(v), (void *)(uintptr_t)nccl_out(v), n, symmFloat32,
                                symmSum, R.nccl, R.r->stream),
                   "ncclAllReduce");
        break;
    }
    return;
  }
  int tokens = s->tokens, hidden = s->hidden;
  float eps = 1e-6f;
  const unsigned blocks = (unsigned)(tokens < RMS_MAX_BLOCKS ? tokens : RMS_MAX_BLOCKS);
  const unsigned smem = (unsigned)hidden * 4u;
  if (v == V_KERNEL) {
    void *p[] = {&R.dc, &R.in, &R.residual, &R.weight, &R.rms_out, &tokens, &hidden, &eps};
    launch(R.fused, blocks, RMS_THREADS, smem, p, "all_reduce_add_rms_norm");
    return;
  }
  if (v == V_LIB || v == V_LIB_IN_PLACE) {
    const CUdeviceptr out = v == V_LIB ? R.rms_out : R.in, residual_out = v == V_LIB ? R.residual_out : R.residual;
    check_symm(symmAllReduceAddRMSNorm((const void *)(uintptr_t)R.in, (const void *)(uintptr_t)R.residual,
                                       (const void *)(uintptr_t)R.weight, (void *)(uintptr_t)out,
                                       (void *)(uintptr_t)residual_out, (size_t)tokens, (size_t)hidden, eps,
                                       symmBfloat16, R.r->comm, R.r->stream),
               "symmAllReduceAddRMSNorm");
    return;
  }
  CUdeviceptr sum = v == V_SYMM ? R.out : nccl_out(v);
  if (v == V_SYMM || v == V_ALONE)
    check_symm(symmAllReduce((const void *)(uintptr_t)R.in, (void *)(uintptr_t)R.out, s->elems, symmBfloat16, symmSum,
                             R.r->comm, R.r->stream),
               "symmAllReduce");
  else
    check_nccl(bn.AllReduce((const void *)(uintptr_t)nccl_in(v), (void *)(uintptr_t)nccl_out(v), s->elems,
                            symmBfloat16, symmSum, R.nccl, R.r->stream),
               "ncclAllReduce");
  if (v == V_ALONE) return;
  void *p[] = {&sum, &R.residual, &R.weight, &R.rms_out, &tokens, &hidden, &eps};
  launch(R.add_rms_norm, blocks, RMS_THREADS, smem, p, "db_add_rms_norm");
}

/* Fresh inputs of the variant (and poisoned outputs), on every rank. */
static void prepare(struct tw *w, const struct shape *s, enum variant v) {
  CUdeviceptr in = is_nccl(v) ? nccl_in(v) : R.in;
  int rank = R.r->rank, hidden = s->hidden;
  size_t n = s->elems;
  tw_use(R.r);
  if (s->table == T_ONESHOT) {
    void *p[] = {&in, &n, &rank};
    launch(R.fill_f32, fill_grid(n), 256, 0, p, "db_fill_f32");
    TW_CU(cw_cu.cuMemsetD8Async(is_nccl(v) ? nccl_out(v) : R.out, 0xff, s->bytes, R.r->stream));
  } else {
    void *p[] = {&in, &R.residual, &R.weight, &n, &hidden, &rank};
    launch(R.fill_rms, fill_grid(n), 256, 0, p, "db_fill_rms");
    TW_CU(cw_cu.cuMemsetD8Async(R.rms_out, 0xff, s->bytes, R.r->stream));
  }
  tw_sync_all(w, 600, "filling the inputs");
  tw_host_barrier(w, "inputs ready");
}

/* Mean microseconds per call over the ranks' slowest, graph-replayed. */
static double time_graph(struct tw *w, const struct shape *s, enum variant v) {
  CUstream st = R.r->stream;
  CUgraph g = NULL;
  CUgraphExec exec = NULL;
  tw_phase("%s %zu B, variant %d: capturing %d calls", s->table == T_ONESHOT ? "oneshot" : "rmsnorm", s->bytes, (int)v,
           O.iters);
  tw_use(R.r);
  TW_CU(tu_cu.cuStreamBeginCapture(st, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int i = 0; i < O.iters; i++) enqueue(s, v);
  TW_CU(tu_cu.cuStreamEndCapture(st, &g));
  TW_REQUIRE(R.r, g != NULL, "cuStreamEndCapture returned no graph");
  TW_CU(tu_cu.cuGraphInstantiateWithFlags(&exec, g, 0));
  TW_CU(tu_cu.cuGraphLaunch(exec, st)); /* untimed: uploads the graph, first-use costs */
  tw_sync_all(w, 600, "first graph replay");
  tw_phase("%s %zu B, variant %d: timing", s->table == T_ONESHOT ? "oneshot" : "rmsnorm", s->bytes, (int)v);
  tw_host_barrier(w, "before timing");
  check_symm(symmBarrier(R.r->comm, st), "symmBarrier");
  TW_CU(cw_cu.cuEventRecord(R.ev[0], st));
  for (int k = 0; k < O.replays; k++) TW_CU(tu_cu.cuGraphLaunch(exec, st));
  TW_CU(cw_cu.cuEventRecord(R.ev[1], st));
  tw_sync_all(w, 600, "timed replays");
  float ms = 0;
  TW_CU(cw_cu.cuEventElapsedTime(&ms, R.ev[0], R.ev[1]));
  TW_CU(tu_cu.cuGraphExecDestroy(exec));
  TW_CU(tu_cu.cuGraphDestroy(g));
  uint64_t ns = (uint64_t)((double)ms * 1e6 / ((double)O.iters * O.replays)), all[TW_MAX_RANKS];
  tw_exchange_u64(w, &ns, all);
  uint64_t worst = 0;
  for (int k = 0; k < w->nranks; k++) worst = all[k] > worst ? all[k] : worst;
  return (double)worst / 1e3;
}

/* ---- host checks ---------------------------------------------------------------------- */

static float bf16_round(float x) { return cw_bf16_to_float(cw_float_to_bf16(x)); }
/* db_x, db_residual, the weight: the host copies of device_bench_kernels.cu's. */
static float host_x(int rank, size_t i) { return (float)((i * 7 + (size_t)rank * 3) % 17) / 64.0f; }
static float host_residual(size_t i) { return bf16_round(0.5f + (float)((i * 5) % 13) / 12.0f); }
static float host_weight(int h) { return bf16_round(0.5f + (float)(h % 8) / 16.0f); }

/* Wrong elements of this rank's output of one eager call. */
static uint64_t check_output(struct tw *w, const struct shape *s, enum variant v) {
  enqueue(s, v);
  tw_sync_all(w, 600, "the checked call");
  uint64_t bad = 0;
  if (s->table == T_ONESHOT) {
    float *h = R.host;
    TW_CU(tu_cu.cuMemcpyDtoH(h, is_nccl(v) ? nccl_out(v) : R.out, s->bytes));
    for (size_t i = 0; i < s->elems; i++) {
      float want = 0;
      for (int r = 0; r < w->nranks; r++) want += (float)(r + 1) + (float)(i % 7);
      bad += h[i] != want;
    }
    return bad;
  }
  uint16_t *h = R.host;
  if (v == V_ALONE) {
    /* The sums of db_x: multiples of 1/64 below 2, exact in bf16. */
    TW_CU(tu_cu.cuMemcpyDtoH(h, R.out, s->elems * 2));
    for (size_t i = 0; i < s->elems; i++) {
      double want = 0;
      for (int r = 0; r < w->nranks; r++) want += host_x(r, i);
      bad += cw_bf16_to_float(h[i]) != (float)want;
    }
    return bad;
  }
  TW_CU(tu_cu.cuMemcpyDtoH(h, v == V_LIB_IN_PLACE ? R.in : R.rms_out, s->elems * 2));
  for (int t = 0; t < s->tokens; t++) {
    const size_t row = (size_t)t * s->hidden;
    double squares = 0, y[12288];
    for (int k = 0; k < s->hidden; k++) {
      double v = host_residual(row + k);
      for (int r = 0; r < w->nranks; r++) v += host_x(r, row + k);
      y[k] = v;
      squares += v * v;
    }
    const double scale = 1.0 / sqrt(squares / s->hidden + 1e-6);
    for (int k = 0; k < s->hidden; k++) {
      const double ref = y[k] * scale * host_weight(k), got = cw_bf16_to_float(h[row + k]);
      bad += !(fabs(got - ref) <= fabs(ref) / 64);
    }
  }
  return bad;
}

/* ---- the tables ------------------------------------------------------------------------- */

static void header(struct tw *w) {
  bw_header_start(PROG, w, O.cmdline, O.vs_nccl ? O.nccl_lib : NULL);
  /* The algorithm choice changes which form the library's columns run
   * (scripts/perf-tables prints it under the table). */
  const char *algo = getenv("SYMM_ALGO");
  if (algo && *algo) printf("# environment: SYMM_ALGO=%s\n", algo);
  printf("# graph: %d calls per graph, %d timed replay(s) after an untimed one; time: CUDA events on each rank's "
         "stream after a host and a device barrier, slowest rank's mean per call\n",
         O.iters, O.replays);
  if (O.nccl_window) bn_note_declined_windows(R.windows_declined, 2 * (uint64_t)w->nranks);
  bw_header_ranks(w);
}

static void fmt(double us, char *buf, size_t len) {
  if (us <= 0) snprintf(buf, len, "-");
  else snprintf(buf, len, us >= 100 ? "%.1f" : "%.2f", us);
}

static void ratio(double num, double den, char *buf, size_t len) {
  if (num <= 0 || den <= 0) snprintf(buf, len, "-");
  else snprintf(buf, len, "%.2f", num / den);
}

/* Two columns: the time `shown`, then `call` - `alone` ("-" where either
 * is missing): the fused call's time over the all-reduce alone. */
static void print_time_and_gap(double shown, double call, double alone) {
  char a[32], d[32];
  fmt(shown, a, sizeof a);
  if (call > 0 && alone > 0) snprintf(d, sizeof d, "%.2f", call - alone);
  else snprintf(d, sizeof d, "-");
  printf("  %9s  %7s", a, d);
}

static uint64_t run_table(struct tw *w, enum table t) {
  if (w->lead) {
    /* Without --nccl-window the lines are as they always were; the window
     * adds columns of its own (scripts/perf-tables goes by the names). */
    if (t == T_ONESHOT) {
      printf("#\n# table oneshot: one-shot all-reduce, fp32 sum, graph-replayed: the kernel of "
             "examples/device/one_shot_all_reduce.cu (%d x %d threads), symmAllReduce (same buffers: symmetric in, "
             "plain out), ncclAllReduce (plain buffers%s)\n",
             O.blocks, ONESHOT_THREADS,
             O.nccl_window ? "; NCCL window: ncclMemAlloc buffers registered with ncclCommWindowRegister" : "");
      printf("# columns: size (B) | example (us) | symmAllReduce (us) | NCCL (us)%s | symmAllReduce / example | "
             "NCCL / example%s | #wrong\n",
             O.nccl_window ? " | NCCL window (us)" : "", O.nccl_window ? " | NCCL window / example" : "");
    } else {
      printf("#\n# table rmsnorm: all-reduce + residual add + RMSNorm, bf16 (fp32 accumulation), graph-replayed: "
             "the fused kernel of examples/device/all_reduce_rms_norm.cu, symmAllReduce + a separate add+RMSNorm "
             "kernel, ncclAllReduce + the same kernel%s\n",
             O.nccl_window ? " (NCCL window: its buffers from ncclMemAlloc, registered with ncclCommWindowRegister)"
                           : "");
      printf("# columns: size (B) | tokens | hidden | fused (us) | symmAllReduce + norm (us) | NCCL + norm (us)%s | "
             "(symm + norm) / fused | (NCCL + norm) / fused%s | symmAllReduceAddRMSNorm (us) | "
             "(symm + norm) / symmAllReduceAddRMSNorm | (NCCL + norm) / symmAllReduceAddRMSNorm | "
             "symmAllReduce alone (us) | symmAllReduceAddRMSNorm - alone (us) | in place (us) | in place - alone (us) | "
             "#wrong\n",
             O.nccl_window ? " | NCCL window + norm (us)" : "", O.nccl_window ? " | (NCCL window + norm) / fused" : "");
    }
    fflush(stdout);
  }
  uint64_t wrong_total = 0;
  for (size_t bytes = O.minb;; bytes *= O.factor) {
    struct shape s = {.table = t, .bytes = bytes};
    s.elems = bytes / (t == T_ONESHOT ? 4 : 2);
    if (s.elems > 0) {
      s.hidden = (int)(s.elems < (size_t)O.hidden ? s.elems : (size_t)O.hidden);
      s.tokens = (int)(s.elems / (size_t)s.hidden);
      s.elems = (size_t)s.tokens * (size_t)s.hidden;
      s.bytes = s.elems * (t == T_ONESHOT ? 4 : 2);
      double us[NVARIANTS] = {0};
      uint64_t bad = 0;
      for (int v = 0; v < NVARIANTS; v++) {
        if ((v == V_NCCL && !O.vs_nccl) || (v == V_NCCL_WINDOW && !O.nccl_window)) continue;
        if ((v == V_LIB || v == V_LIB_IN_PLACE) && (t != T_RMSNORM || s.hidden % 8 != 0)) continue;
        if (v == V_ALONE && t != T_RMSNORM) continue;
        prepare(w, &s, (enum variant)v);
        us[v] = time_graph(w, &s, (enum variant)v);
        if (O.check) {
          prepare(w, &s, (enum variant)v);
          uint64_t b = check_output(w, &s, (enum variant)v), all[TW_MAX_RANKS];
          tw_exchange_u64(w, &b, all);
          for (int k = 0; k < w->nranks; k++) bad += all[k];
        }
        tw_host_barrier(w, "variant done");
      }
      wrong_total += bad;
      if (w->lead) {
        char a[32], b[32], c[32], d[32], r1[32], r2[32], r3[32], wb[32];
        fmt(us[V_KERNEL], a, sizeof a);
        fmt(us[V_SYMM], b, sizeof b);
        fmt(us[V_NCCL], c, sizeof c);
        fmt(us[V_NCCL_WINDOW], d, sizeof d);
        ratio(us[V_SYMM], us[V_KERNEL], r1, sizeof r1);
        ratio(us[V_NCCL], us[V_KERNEL], r2, sizeof r2);
        ratio(us[V_NCCL_WINDOW], us[V_KERNEL], r3, sizeof r3);
        if (O.check)
          snprintf(wb, sizeof wb, "%llu", (unsigned long long)bad);
        else
          snprintf(wb, sizeof wb, "N/A");
        /* The window's time and ratio follow NCCL's, as the columns line says. */
        if (t == T_ONESHOT)
          printf("%12zu  %9s  %9s  %9s", s.bytes, a, b, c);
        else
          printf("%12zu  %6d  %6d  %9s  %9s  %9s", s.bytes, s.tokens, s.hidden, a, b, c);
        if (O.nccl_window) printf("  %9s", d);
        printf("  %7s  %7s", r1, r2);
        if (O.nccl_window) printf("  %7s", r3);
        if (t == T_RMSNORM) {
          char l[32], r4[32], r5[32];
          fmt(us[V_LIB], l, sizeof l);
          ratio(us[V_SYMM], us[V_LIB], r4, sizeof r4);
          ratio(us[V_NCCL], us[V_LIB], r5, sizeof r5);
          printf("  %9s  %7s  %7s", l, r4, r5);
          print_time_and_gap(us[V_ALONE], us[V_LIB], us[V_ALONE]);
          print_time_and_gap(us[V_LIB_IN_PLACE], us[V_LIB_IN_PLACE], us[V_ALONE]);
        }
        printf("  %6s\n", wb);
        fflush(stdout);
      }
    }
    if (bytes > O.maxb / O.factor) break;
  }
  return wrong_total;
}

/* --nccl-window: NCCL's second pair of buffers, from ncclMemAlloc (on this
 * rank's device, current), registered as windows NCCL's symmetric kernels
 * may use on the same communicator as the plain pair: NCCL chooses those
 * kernels per call, by whether the buffers lie in such windows (as
 * nccl-tests -R 2 does; a second communicator would only add its own
 * buffers and threads). Registration is collective: every rank, the same
 * size, the same order. */
static void alloc_nccl_windows(struct tw *w) {
  char reason[512];
  REQUIRE(bn_window_check(reason, sizeof reason) == 0, "--nccl-window: %s", reason);
  void *in = NULL, *out = NULL;
  tw_use(R.r);
  check_nccl(bn.MemAlloc(&in, R.bytes), "ncclMemAlloc");
  check_nccl(bn.MemAlloc(&out, R.bytes), "ncclMemAlloc");
  R.win_in = (CUdeviceptr)(uintptr_t)in;
  R.win_out = (CUdeviceptr)(uintptr_t)out;
  check_nccl(bn.CommWindowRegister(R.nccl, in, R.bytes, &R.win_in_reg, BN_WIN_COLL_SYMMETRIC),
             "ncclCommWindowRegister");
  check_nccl(bn.CommWindowRegister(R.nccl, out, R.bytes, &R.win_out_reg, BN_WIN_COLL_SYMMETRIC),
             "ncclCommWindowRegister");
  uint64_t mine = (uint64_t)(R.win_in_reg == NULL) + (R.win_out_reg == NULL), all[TW_MAX_RANKS];
  tw_exchange_u64(w, &mine, all);
  for (int k = 0; k < w->nranks; k++) R.windows_declined += all[k];
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  REQUIRE(O.minb <= O.maxb, "--minbytes is larger than --maxbytes");
  if (!(R.r = bw_start_rank(w, PROG))) return;
  char reason[512];
  R.mod = tw_load_module(R.r, DEVICE_BENCH_KERNELS_FATBIN, "SYMM_TEST_DEVICE_BENCH_KERNELS");
  R.one_shot = tw_function(R.r, R.mod, "one_shot_all_reduce");
  R.fused = tw_function(R.r, R.mod, "all_reduce_add_rms_norm");
  R.fill_f32 = tw_function(R.r, R.mod, "db_fill_f32");
  R.fill_rms = tw_function(R.r, R.mod, "db_fill_rms");
  R.add_rms_norm = tw_function(R.r, R.mod, "db_add_rms_norm");
  TW_CU(cw_cu.cuEventCreate(&R.ev[0], 0));
  TW_CU(cw_cu.cuEventCreate(&R.ev[1], 0));

  symmDevCommRequirements req = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.blockCount = (uint32_t)(O.blocks > RMS_MAX_BLOCKS ? O.blocks : RMS_MAX_BLOCKS);
  check_symm(symmDevCommCreate(R.r->comm, &req, &R.dc), "symmDevCommCreate");

  R.bytes = (O.maxb + 4095) / 4096 * 4096;
  size_t sz[TW_MAX_RANKS] = {R.bytes};
  check_symm(tw_alloc(w, sz, &R.sym), "symmMemAlloc");
  R.in = (CUdeviceptr)(uintptr_t)R.sym;
  TW_CU(tu_cu.cuMemAlloc(&R.out, R.bytes));
  TW_CU(tu_cu.cuMemAlloc(&R.residual, R.bytes));
  TW_CU(tu_cu.cuMemAlloc(&R.rms_out, R.bytes));
  TW_CU(tu_cu.cuMemAlloc(&R.residual_out, R.bytes));
  TW_CU(tu_cu.cuMemAlloc(&R.weight, (size_t)O.hidden * 2));
  R.host = malloc(R.bytes);
  REQUIRE(R.host != NULL, "out of host memory");

  if (O.vs_nccl) {
    REQUIRE(bn_load(O.nccl_lib, reason, sizeof reason) == 0, "--vs-nccl: %s", reason);
    check_nccl(bw_nccl_init_rank(w, R.r, &R.nccl), "ncclGetUniqueId/ncclCommInitRank");
    TW_CU(tu_cu.cuMemAlloc(&R.nin, R.bytes));
    TW_CU(tu_cu.cuMemAlloc(&R.nout, R.bytes));
  }
  if (O.nccl_window) alloc_nccl_windows(w);
  if (w->lead) header(w);

  uint64_t wrong = 0;
  if (O.oneshot) wrong += run_table(w, T_ONESHOT);
  if (O.rmsnorm) wrong += run_table(w, T_RMSNORM);
  if (w->lead) {
    if (!O.check) printf("# results not checked (--no-check)\n");
    else printf("# %llu wrong element(s): %s\n", (unsigned long long)wrong, wrong ? "FAILED" : "OK");
    fflush(stdout);
  }
  TW_CHECK(R.r, wrong == 0, "%llu wrong element(s) (see the tables)", (unsigned long long)wrong);

  tw_sync_all(w, 600, "teardown");
  tw_host_barrier(w, "teardown");
  if (R.win_in_reg) check_nccl(bn.CommWindowDeregister(R.nccl, R.win_in_reg), "ncclCommWindowDeregister");
  if (R.win_out_reg) check_nccl(bn.CommWindowDeregister(R.nccl, R.win_out_reg), "ncclCommWindowDeregister");
  if (R.nccl) check_nccl(bn.CommDestroy(R.nccl), "ncclCommDestroy");
  if (R.nin) TW_CU(tu_cu.cuMemFree(R.nin));
  if (R.nout) TW_CU(tu_cu.cuMemFree(R.nout));
  if (R.win_in) check_nccl(bn.MemFree((void *)(uintptr_t)R.win_in), "ncclMemFree");
  if (R.win_out) check_nccl(bn.MemFree((void *)(uintptr_t)R.win_out), "ncclMemFree");
  TW_CU(tu_cu.cuMemFree(R.out));
  TW_CU(tu_cu.cuMemFree(R.residual));
  TW_CU(tu_cu.cuMemFree(R.rms_out));
  TW_CU(tu_cu.cuMemFree(R.residual_out));
  TW_CU(tu_cu.cuMemFree(R.weight));
  check_symm(tw_free(w, &R.sym), "symmMemFree");
  check_symm(symmDevCommDestroy(R.r->comm, &R.dc), "symmDevCommDestroy");
  TW_CU(cw_cu.cuEventDestroy(R.ev[0]));
  TW_CU(cw_cu.cuEventDestroy(R.ev[1]));
  free(R.host);
  tw_destroy_comms(w);
}

int main(int argc, char **argv) {
  /* The harness hands the options over one at a time: this pair is checked
   * here, before it runs (and on machines without a GPU). */
  if (bw_has_arg(argc, argv, "--nccl-window") && !bw_has_arg(argc, argv, "--vs-nccl")) {
    fprintf(stderr, PROG ": --nccl-window adds a second NCCL column beside the ordinary one: it needs --vs-nccl\n");
    return 2;
  }
  static const struct tw_spec spec = {.name = PROG, .modes = "mp",
      .usage = "[--minbytes=N] [--maxbytes=N] [--factor=F] [--iters=N] [--replays=N] [--hidden=H] [--blocks=B] "
               "[--only=oneshot|rmsnorm] [--no-check] [--vs-nccl [--nccl-window]] [--nccl-lib=PATH]",
      .limit_s = 3600, .stall = 1, .quiet = 1, .library_timeouts = 1, .option = option,
      .process_init = cw_process_init, .body = body};
  return tw_main(&spec, argc, argv);
}
