/*
 * fused_bench <mp|all> [--nranks=N] [options]: the fused matmul ops, timed.
 *
 * Multi-rank (the default): per op and shape, TFLOP/s per GPU (the FLOPs a
 * rank computes / the slowest rank's mean time per call) of
 *   fused    symmAllGatherMatmul / symmMatmulReduceScatter;
 *   unfused  symmAllGather then one GEMM / one GEMM then symmReduceScatter;
 *   nccl     (--vs-nccl) ncclAllGather then the same GEMM / the GEMM then
 *            ncclReduceScatter.
 * "The same GEMM" is the library's own: the fused op on a one-rank
 * communicator with chunksPerRank = 1, which is one cuBLASLt GEMM.
 *
 * --efficiency (one GPU, one rank): the pipeline's GEMM efficiency. For
 * each seed shape and each emulated rank count R (4 and 8), the op on a
 * one-rank communicator with the shard cut into R x c chunks, c being the
 * chunks per rank the library runs at R ranks (all-gather-matmul: with a
 * symmetric A and aGathered; matmul-reduce-scatter: one per destination
 * unless the workspace bound (SYMM_FUSED_WORKSPACE_MAX_BYTES) cuts rounds), against one
 * monolithic GEMM of the same total shape: efficiency = monolithic time /
 * chunked time. The chunks run as the pipeline runs them (alternating
 * between its two GEMM streams, with the SMs the pipeline leaves free).
 *
 * Options: --op=ag|rs|both, --dtype=bf16|fp16|fp32|e4m3, --shape=M,N,K
 * (total rows, columns, inner dimension; repeatable; default the seed
 * shapes M = 8192 * nranks, 8192, 8192 and 32768, 8192, 16384),
 * --iters=N (20), --warmup=N (5), --chunks=C (chunksPerRank; 0 default),
 * --pairs=N (--efficiency: timed pairs of one GEMM and the chunks; 9),
 * --plain-a (A in cudaMalloc memory instead of symmetric memory),
 * --no-gathered (all-gather-matmul without aGathered), --vs-nccl,
 * --nccl-lib=PATH.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_nccl.h"
#include "bench_world.h"
#include "coll_util.h"

#define MAX_SHAPES 8

static struct {
  int ag, rs, dtype, iters, warmup, chunks, plain_a, no_gathered, vs_nccl, efficiency, pairs;
  const char *nccl_lib;
  size_t shapes[MAX_SHAPES][3];
  int nshapes;
} O = {.ag = 1, .rs = 1, .dtype = symmBfloat16, .iters = 20, .warmup = 5, .pairs = 9};

#define MAX_PAIRS 64

static symmComm_t g_gemm[TW_MAX_RANKS]; /* one-rank communicators: "the same GEMM" */
static bn_comm g_nccl[TW_MAX_RANKS];
static CUevent g_ev[TW_MAX_RANKS][2];

static size_t esize(int t) { return t == symmFloat32 ? 4 : t == symmFloat8e4m3 ? 1 : 2; }

static int option(const char *arg, void *ctx) {
  (void)ctx;
  size_t a, b, c;
  if (!strcmp(arg, "--op=ag")) O.rs = 0;
  else if (!strcmp(arg, "--op=rs")) O.ag = 0;
  else if (!strcmp(arg, "--op=both")) O.ag = O.rs = 1;
  else if (!strcmp(arg, "--dtype=bf16")) O.dtype = symmBfloat16;
  else if (!strcmp(arg, "--dtype=fp16")) O.dtype = symmFloat16;
  else if (!strcmp(arg, "--dtype=fp32")) O.dtype = symmFloat32;
  else if (!strcmp(arg, "--dtype=e4m3")) O.dtype = symmFloat8e4m3;
  else if (sscanf(arg, "--shape=%zu,%zu,%zu", &a, &b, &c) == 3 && O.nshapes < MAX_SHAPES) {
    O.shapes[O.nshapes][0] = a;
    O.shapes[O.nshapes][1] = b;
    O.shapes[O.nshapes][2] = c;
    O.nshapes++;
  } else if (sscanf(arg, "--iters=%d", &O.iters) == 1 && O.iters > 0) {
  } else if (sscanf(arg, "--warmup=%d", &O.warmup) == 1 && O.warmup >= 0) {
  } else if (sscanf(arg, "--chunks=%d", &O.chunks) == 1 && O.chunks >= 0) {
  } else if (sscanf(arg, "--pairs=%d", &O.pairs) == 1 && O.pairs > 0 && O.pairs <= MAX_PAIRS) {
  } else if (!strcmp(arg, "--plain-a")) O.plain_a = 1;
  else if (!strcmp(arg, "--no-gathered")) O.no_gathered = 1;
  else if (!strcmp(arg, "--vs-nccl")) O.vs_nccl = 1;
  else if (!strcmp(arg, "--efficiency")) O.efficiency = 1;
  else if (!strncmp(arg, "--nccl-lib=", 11)) O.nccl_lib = arg + 11;
  else return -1;
  return 0;
}

/* The library's chunking (src/fused), mirrored to report and emulate it. */
static size_t chunk_rows(size_t rows, size_t chunks) {
  if (chunks < 1) chunks = 1;
  if (chunks > rows) chunks = rows ? rows : 1;
  size_t per = (rows + chunks - 1) / chunks;
  if (per >= 16) per = (per + 15) / 16 * 16;
  if (per > rows) per = rows;
  return per ? per : 1;
}

static size_t bounded_chunk_rows(size_t rows, size_t want, size_t fit) {
  const size_t rc = chunk_rows(rows, want);
  if (rc <= fit) return rc;
  const size_t aim = fit >= 16 ? fit / 16 * 16 : fit ? fit : 1;
  return chunk_rows(rows, (rows + aim - 1) / aim);
}

/* A workspace size variable as src/config.rs reads it (1 MiB .. 64 GiB, else `dflt`). */
static size_t env_bytes(const char *name, size_t dflt) {
  const char *e = getenv(name);
  const double v = e && *e ? strtod(e, NULL) : 0;
  return v >= (double)(1 << 20) && v <= 68719476736.0 ? (size_t)v : dflt;
}

/* The workspace a call wanting `need` bytes runs with: the first size
 * (SYMM_FUSED_WORKSPACE_BYTES, 256 MiB), grown up to
 * SYMM_FUSED_WORKSPACE_MAX_BYTES (2 GiB; the first size when only that is
 * set), as src/fused/state.rs grows it. */
static size_t workspace_bytes(size_t need) {
  const char *set = getenv("SYMM_FUSED_WORKSPACE_BYTES");
  const size_t lo = env_bytes("SYMM_FUSED_WORKSPACE_BYTES", (size_t)256 << 20);
  size_t hi = env_bytes("SYMM_FUSED_WORKSPACE_MAX_BYTES", set && *set ? lo : (size_t)2 << 30);
  if (hi < lo) hi = lo;
  return need < lo ? lo : need > hi ? hi : need;
}

/* Chunks per rank the library runs at R ranks for a shard of `rows` rows:
 * all-gather-matmul ceil(4096 / n), at most 8, each >= 128 rows, with a
 * symmetric A and aGathered (no workspace slots: src/fused/mod.rs
 * default_chunks); matmul-reduce-scatter one per destination (or `want`)
 * unless the workspace bounds the rounds (matmul_reduce_scatter.rs rounds):
 * one round takes 2 + R partial slots, more take 2 + 2R, and the call grows
 * the workspace to what it takes up to the bound. 0: refused. */
static size_t lib_chunks(int rs, size_t rows, size_t n, size_t R, size_t want) {
  if (!rs) {
    if (want) return want;
    size_t c = (4096 + n - 1) / n;
    if (c > 8) c = 8;
    const size_t cap = rows / 128 ? rows / 128 : 1;
    return c < cap ? c : cap;
  }
  const size_t prow = n * (O.dtype == symmFloat32 ? 4 : 2);
  if (!want) want = 1;
  size_t rc = chunk_rows(rows, want);
  const size_t slots = rc >= rows ? 2 + R : 2 + 2 * R;
  const size_t ws = workspace_bytes(slots * rc * prow);
  if (rc > ws / (slots * prow)) {
    const size_t fit = ws / ((2 + 2 * R) * prow);
    if (!fit) return 0;
    rc = bounded_chunk_rows(rows, want < 2 ? 2 : want, fit);
  }
  return (rows + rc - 1) / rc;
}

/* Random values in [-1, 1] of the benchmark's type, everywhere in [p, p + bytes). */
static void fill_random(const struct tw_rank *r, CUdeviceptr p, size_t bytes, uint64_t seed) {
  static unsigned char tile[1 << 20];
  const size_t es = esize(O.dtype);
  for (size_t i = 0; i < sizeof tile / es; i++) {
    const float v = (float)((cw_mix64(seed + i) % 2001) / 1000.0 - 1.0);
    uint32_t bits = O.dtype == symmBfloat16 ? cw_float_to_bf16(v)
                    : O.dtype == symmFloat16 ? cw_float_to_f16(v)
                    : O.dtype == symmFloat8e4m3 ? cw_float_to_e4m3(v)
                                                : 0;
    if (O.dtype == symmFloat32) memcpy(&bits, &v, 4);
    memcpy(tile + i * es, &bits, es);
  }
  tw_use(r);
  for (size_t off = 0; off < bytes; off += sizeof tile) {
    size_t n = bytes - off < sizeof tile ? bytes - off : sizeof tile;
    TW_CU(tu_upload(p + off, tile, n));
  }
}

static CUdeviceptr dalloc(const struct tw_rank *r, size_t bytes) {
  CUdeviceptr p = 0;
  tw_use(r);
  TW_CU(tu_cu.cuMemAlloc(&p, bytes));
  return p;
}

static void desc_for(symmMatmulDesc_t *d, int chunks, CUdeviceptr gathered, CUdeviceptr scale) {
  REQUIRE(symmMatmulDescInit(d, (symmDataType_t)O.dtype) == symmSuccess, "symmMatmulDescInit");
  d->transB = 1; /* B as n x k: framework weights (and what fp8 needs) */
  d->chunksPerRank = chunks;
  d->aGathered = (void *)(uintptr_t)gathered;
  if (O.dtype == symmFloat8e4m3) {
    d->scaleMode = symmScaleTensor;
    d->aScale = d->bScale = (const float *)(uintptr_t)scale;
  }
}

typedef void (*enqueue_fn)(struct tw *w, void *ctx);

/* Mean ms per call of the slowest rank. */
static double timed(struct tw *w, enqueue_fn fn, void *ctx, const char *what) {
  tw_phase("%s", what);
  for (int i = 0; i < O.warmup; i++) fn(w, ctx);
  tw_sync_all(w, 600, what);
  tw_host_barrier(w, what);
  for (int i = 0; i < w->nlocal; i++) TW_CU(cw_cu.cuEventRecord(g_ev[i][0], w->r[i].stream));
  for (int i = 0; i < O.iters; i++) fn(w, ctx);
  for (int i = 0; i < w->nlocal; i++) TW_CU(cw_cu.cuEventRecord(g_ev[i][1], w->r[i].stream));
  tw_sync_all(w, 600, what);
  uint64_t us[TW_MAX_RANKS], all[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) {
    float ms = 0;
    tw_use(&w->r[i]);
    TW_CU(cw_cu.cuEventElapsedTime(&ms, g_ev[i][0], g_ev[i][1]));
    us[i] = (uint64_t)(ms * 1000.0 / O.iters);
  }
  tw_exchange_u64(w, us, all);
  uint64_t worst = 0;
  for (int r = 0; r < w->nranks; r++) worst = all[r] > worst ? all[r] : worst;
  return worst / 1000.0;
}

struct run {
  size_t ms, n, k; /* per-rank problem: all-gather: mShard, n, k; reduce-scatter: m, n, kShard */
  int rs, chunks;
  CUdeviceptr a[TW_MAX_RANKS], b[TW_MAX_RANKS], c[TW_MAX_RANKS], full[TW_MAX_RANKS], part[TW_MAX_RANKS],
      scale[TW_MAX_RANKS];
  void *sym[TW_MAX_RANKS];
  int use_nccl;
};

static void check(struct tw_rank *r, symmResult_t rc, const char *what) {
  if (rc == symmSuccess) return;
  char m[1024];
  const char *msg = tu_last_error(r->comm, m, sizeof m);
  tw_fail_at(__FILE__, __LINE__, r, "%s: %s: %s", what, tu_result_name(rc), msg ? msg : "");
  tu_exit_now();
}

static void enqueue_fused(struct tw *w, void *ctx) {
  struct run *x = ctx;
  symmGroupStart();
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    symmMatmulDesc_t d;
    desc_for(&d, x->chunks, x->rs || O.no_gathered ? 0 : x->full[i], x->scale[i]);
    const void *a = (const void *)(uintptr_t)x->a[i], *b = (const void *)(uintptr_t)x->b[i];
    void *c = (void *)(uintptr_t)x->c[i];
    check(r, x->rs ? symmMatmulReduceScatter(a, b, c, x->ms, x->n, x->k, &d, r->comm, r->stream)
                   : symmAllGatherMatmul(a, b, c, x->ms, x->n, x->k, &d, r->comm, r->stream),
          "fused op");
  }
  symmResult_t g = symmGroupEnd();
  REQUIRE(g == symmSuccess, "symmGroupEnd: %s", tu_result_name(g));
}

/* The one-GEMM reference: rows x n x k on the rank's one-rank communicator. */
static void gemm(struct tw_rank *r, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, size_t rows, size_t n, size_t k,
                 CUdeviceptr scale) {
  symmMatmulDesc_t d;
  desc_for(&d, 1, 0, scale);
  check(r, symmAllGatherMatmul((const void *)(uintptr_t)a, (const void *)(uintptr_t)b, (void *)(uintptr_t)c, rows, n,
                               k, &d, g_gemm[r->index], r->stream),
        "one GEMM");
}

static void enqueue_unfused(struct tw *w, void *ctx) {
  struct run *x = ctx;
  const size_t N = (size_t)w->nranks;
  if (!x->rs) {
    if (x->use_nccl) bn.GroupStart();
    else symmGroupStart();
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      const void *s = (const void *)(uintptr_t)x->a[i];
      void *d = (void *)(uintptr_t)x->full[i];
      int dt = O.dtype == symmFloat8e4m3 ? 0 /* ncclInt8: same bytes */ : O.dtype;
      if (x->use_nccl) REQUIRE(bn.AllGather(s, d, x->ms * x->k, dt, g_nccl[i], r->stream) == 0, "ncclAllGather");
      else check(r, symmAllGather(s, d, x->ms * x->k, (symmDataType_t)O.dtype, r->comm, r->stream), "symmAllGather");
    }
    if (x->use_nccl) REQUIRE(bn.GroupEnd() == 0, "ncclGroupEnd");
    else REQUIRE(symmGroupEnd() == symmSuccess, "symmGroupEnd");
    for (int i = 0; i < w->nlocal; i++) gemm(&w->r[i], x->full[i], x->b[i], x->c[i], N * x->ms, x->n, x->k, x->scale[i]);
    return;
  }
  for (int i = 0; i < w->nlocal; i++) gemm(&w->r[i], x->a[i], x->b[i], x->part[i], x->ms, x->n, x->k, x->scale[i]);
  const int ct = O.dtype == symmFloat8e4m3 ? symmBfloat16 : O.dtype;
  if (x->use_nccl) bn.GroupStart();
  else symmGroupStart();
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    const void *s = (const void *)(uintptr_t)x->part[i];
    void *d = (void *)(uintptr_t)x->c[i];
    size_t cnt = x->ms / N * x->n;
    if (x->use_nccl) REQUIRE(bn.ReduceScatter(s, d, cnt, ct, 0, g_nccl[i], r->stream) == 0, "ncclReduceScatter");
    else check(r, symmReduceScatter(s, d, cnt, (symmDataType_t)ct, symmSum, r->comm, r->stream), "symmReduceScatter");
  }
  if (x->use_nccl) REQUIRE(bn.GroupEnd() == 0, "ncclGroupEnd");
  else REQUIRE(symmGroupEnd() == symmSuccess, "symmGroupEnd");
}

static void setup(struct tw *w, struct run *x) {
  const size_t N = (size_t)w->nranks, es = esize(O.dtype);
  const size_t ces = O.dtype == symmFloat8e4m3 ? 2 : es;
  const size_t arows = x->rs ? x->ms : x->ms, crow = x->rs ? x->ms / N : N * x->ms;
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) sz[i] = arows * x->k * es;
  if (!O.plain_a) REQUIRE(tw_alloc(w, sz, x->sym) == symmSuccess, "symmMemAlloc for A");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    x->a[i] = O.plain_a ? dalloc(r, sz[i]) : (CUdeviceptr)(uintptr_t)x->sym[i];
    x->b[i] = dalloc(r, x->n * x->k * es);
    x->c[i] = dalloc(r, crow * x->n * ces);
    x->full[i] = x->rs ? 0 : dalloc(r, N * x->ms * x->k * es);
    x->part[i] = x->rs ? dalloc(r, x->ms * x->n * ces) : 0;
    x->scale[i] = dalloc(r, 16);
    float one[4] = {1, 1, 1, 1};
    TW_CU(tu_upload(x->scale[i], one, sizeof one));
    fill_random(r, x->a[i], sz[i], 1 + (uint64_t)r->rank);
    fill_random(r, x->b[i], x->n * x->k * es, 1000 + (uint64_t)r->rank);
  }
}

static void teardown(struct tw *w, struct run *x) {
  tw_sync_all(w, 600, "teardown");
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    CUdeviceptr all[] = {O.plain_a ? x->a[i] : 0, x->b[i], x->c[i], x->full[i], x->part[i], x->scale[i]};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
      if (all[j]) TW_CU(tu_cu.cuMemFree(all[j]));
  }
  if (!O.plain_a) REQUIRE(tw_free(w, x->sym) == symmSuccess, "symmMemFree");
}

static const char *dname(void) {
  return O.dtype == symmBfloat16 ? "bf16" : O.dtype == symmFloat16 ? "fp16" : O.dtype == symmFloat32 ? "fp32" : "e4m3";
}

static void multi_rank(struct tw *w) {
  const size_t N = (size_t)w->nranks;
  if (w->lead)
    tw_log(w, "%-4s %-5s %7s %6s %6s %6s | %10s %10s %10s | %8s %8s  (TFLOP/s per GPU; A %s, %s)", "op", "type", "M",
           "N", "K", "chunks", "fused", "unfused", O.vs_nccl ? "nccl" : "-", "f/unf", O.vs_nccl ? "f/nccl" : "-",
           O.plain_a ? "plain" : "symmetric", O.no_gathered ? "no aGathered" : "aGathered");
  for (int s = 0; s < O.nshapes; s++)
    for (int rs = 0; rs < 2; rs++) {
      if ((rs && !O.rs) || (!rs && !O.ag)) continue;
      const size_t M = O.shapes[s][0], n = O.shapes[s][1], K = O.shapes[s][2];
      if (M % N || (rs && K % N)) continue;
      struct run x = {.rs = rs, .n = n, .chunks = O.chunks};
      x.ms = rs ? M : M / N;
      x.k = rs ? K / N : K;
      setup(w, &x);
      const double flop = 2.0 * (double)M * (double)n * (double)x.k; /* per rank */
      const double tf = timed(w, enqueue_fused, &x, "fused");
      const double tu = timed(w, enqueue_unfused, &x, "unfused");
      double tn = 0;
      if (O.vs_nccl) {
        x.use_nccl = 1;
        tn = timed(w, enqueue_unfused, &x, "nccl");
        x.use_nccl = 0;
      }
      if (w->lead) {
        const size_t c = lib_chunks(rs, M / N, n, N, (size_t)O.chunks);
        tw_log(w, "%-4s %-5s %7zu %6zu %6zu %6zu | %10.1f %10.1f %10.1f | %8.3f %8.3f", rs ? "mmrs" : "agmm", dname(), M,
               n, K, c, flop / tf / 1e9, flop / tu / 1e9, O.vs_nccl ? flop / tn / 1e9 : 0.0, tu / tf,
               O.vs_nccl ? tn / tf : 0.0);
      }
      teardown(w, &x);
    }
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts a copy). */
static double median(const double *v, int n) {
  double s[MAX_PAIRS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double min_of(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}

static double max_of(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

/* One GPU: chunked as R ranks would chunk, against one GEMM. */
static void efficiency(struct tw *w) {
  struct tw_rank *r = &w->r[0];
  if (w->lead) {
    tw_log(w, "chunked as R ranks chunk: all-gather-matmul with a symmetric A and aGathered, matmul-reduce-scatter "
              "with a fused workspace of %zu MiB growing up to %zu MiB%s", workspace_bytes(0) >> 20,
           workspace_bytes((size_t)-1) >> 20, O.chunks ? " and --chunks" : "");
    tw_log(w, "%-4s %-5s %7s %6s %6s %5s %7s | %10s %10s | %s %d %s", "op", "type", "M", "N", "K", "ranks", "chunks",
           "one GEMM", "pipeline", "efficiency (TFLOP/s per GPU; medians of", O.pairs, "interleaved pairs)");
  }
  for (int s = 0; s < O.nshapes; s++)
    for (int rs = 0; rs < 2; rs++) {
      if ((rs && !O.rs) || (!rs && !O.ag)) continue;
      for (int R = 4; R <= 8; R += 4) {
        const size_t M = O.shapes[s][0], n = O.shapes[s][1], K = O.shapes[s][2];
        /* The per-rank GEMMs at R ranks: all-gather: M x n x K in R shards;
         * reduce-scatter: M x n x (K / R) in R destination blocks. */
        struct run x = {.rs = rs, .ms = M, .n = n, .k = rs ? K / R : K};
        const size_t per = lib_chunks(rs, M / R, n, (size_t)R, (size_t)O.chunks);
        if (!per) {
          if (w->lead) tw_log(w, "mmrs %s %7zu %6zu %6zu %5d: one row does not fit the workspace, skipped", dname(), M, n, x.k, R);
          continue;
        }
        setup(w, &x);
        const double flop = 2.0 * (double)M * (double)n * (double)x.k;
        /* The clocks follow the power draw, which drifts through a run
         * (random bf16 operands hold an H100 at its power limit): one
         * GEMM and the chunks alternate, O.pairs times after one pair
         * that warms the card, and the medians are reported. */
        double t1[MAX_PAIRS] = {0}, tc[MAX_PAIRS] = {0}, ratio[MAX_PAIRS] = {0};
        for (int p = -1; p < O.pairs; p++) {
          x.chunks = 1;
          const double a = timed(w, enqueue_fused, &x, "one GEMM");
          x.chunks = (int)(per * (size_t)R);
          const double b = timed(w, enqueue_fused, &x, "chunked");
          if (p < 0) continue;
          t1[p] = a;
          tc[p] = b;
          ratio[p] = a / b;
        }
        const double lo = min_of(ratio, O.pairs), hi = max_of(ratio, O.pairs);
        if (w->lead)
          tw_log(w, "%-4s %-5s %7zu %6zu %6zu %5d %7d | %10.1f %10.1f | %.1f %% (pairs %.1f-%.1f %%)", rs ? "mmrs" : "agmm",
                 dname(), M, n, x.k, R, x.chunks, flop / median(t1, O.pairs) / 1e9, flop / median(tc, O.pairs) / 1e9,
                 100.0 * median(ratio, O.pairs), 100.0 * lo, 100.0 * hi);
        teardown(w, &x);
      }
    }
  (void)r;
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  if (O.nshapes == 0) {
    const size_t N = O.efficiency ? 8 : (size_t)w->nranks;
    O.shapes[0][0] = 8192 * (O.efficiency ? 1 : N);
    O.shapes[0][1] = 8192;
    O.shapes[0][2] = 8192;
    O.shapes[1][0] = 32768;
    O.shapes[1][1] = 8192;
    O.shapes[1][2] = 16384;
    O.nshapes = 2;
    if (O.efficiency) {
      /* m = 8192 * R at R = 4 and 8: both totals, each emulated at 4 and 8. */
      O.shapes[0][0] = 32768;
      O.shapes[2][0] = 65536;
      O.shapes[2][1] = 8192;
      O.shapes[2][2] = 8192;
      O.nshapes = 3;
    }
  }
  REQUIRE(!O.efficiency || w->nranks == 1, "--efficiency runs on one rank: use the 'one' mode");
  if (O.efficiency) O.no_gathered = 1;
  if (tw_init_comms(w) != symmSuccess) return;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    int dev = r->device;
    REQUIRE(symmCommInitAll(&g_gemm[i], 1, &dev) == symmSuccess, "symmCommInitAll (one-rank GEMM communicator): %s",
            symmGetLastError(NULL));
    TW_CU(cw_cu.cuEventCreate(&g_ev[i][0], 0));
    TW_CU(cw_cu.cuEventCreate(&g_ev[i][1], 0));
  }
  if (O.vs_nccl) {
    char reason[512];
    REQUIRE(bn_load(O.nccl_lib, reason, sizeof reason) == 0, "--vs-nccl: %s", reason);
    if (w->mode == TW_MP) {
      REQUIRE(bw_nccl_init_rank(w, &w->r[0], &g_nccl[0]) == 0, "ncclGetUniqueId/ncclCommInitRank");
    } else {
      int devs[TW_MAX_RANKS];
      for (int i = 0; i < w->nlocal; i++) devs[i] = w->r[i].device;
      REQUIRE(bn.CommInitAll(g_nccl, w->nlocal, devs) == 0, "ncclCommInitAll");
    }
  }
  if (w->lead)
    tw_log(w, "fused_bench: %d rank(s), %s, %d iterations after %d warm-up%s", w->nranks, dname(), O.iters, O.warmup,
           w->shared ? " (shared GPUs: timings meaningless)" : "");
  if (O.efficiency) efficiency(w);
  else multi_rank(w);
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    if (g_nccl[i]) bn.CommDestroy(g_nccl[i]);
    REQUIRE(symmCommDestroy(g_gemm[i]) == symmSuccess, "symmCommDestroy");
    TW_CU(cw_cu.cuEventDestroy(g_ev[i][0]));
    TW_CU(cw_cu.cuEventDestroy(g_ev[i][1]));
  }
  tw_destroy_comms(w);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {.name = "fused_bench", .modes = "mp,all,one",
      .usage = "[--op=ag|rs|both] [--dtype=bf16|fp16|fp32|e4m3] [--shape=M,N,K]... [--iters=N] [--warmup=N] "
               "[--chunks=C] [--pairs=N] [--plain-a] [--no-gathered] [--vs-nccl] [--nccl-lib=PATH] [--efficiency]",
      .limit_s = 3600, .stall = 1, .library_timeouts = 1, .option = option, .process_init = cw_process_init,
      .body = body};
  return tw_main(&spec, argc, argv);
}
