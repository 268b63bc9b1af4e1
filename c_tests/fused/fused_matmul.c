/*
 * fused_matmul <mp|all> [--nranks=N] [--quick]
 *
 * symmAllGatherMatmul and symmMatmulReduceScatter against an unfused
 * reference built from symmcomm's collectives and a naive GEMM
 * (fused_kernels.cu: fp32 accumulation, one rounding):
 *   all-gather-matmul:     symmAllGather(A shard) then GEMM (+ beta * C);
 *   matmul-reduce-scatter: GEMM of the whole A then symmReduceScatter
 *                          (then + beta * C).
 * For bf16, fp16, fp32 (TF32), fp8 e4m3 (tensor scales, bf16 C), e4m3 x e5m2
 * (fp16 C) and fp8 with row-wise scales (which the library may refuse with
 * symmNotSupported naming row-wise scales where cuBLASLt lacks them), over
 * shapes with ragged k and n, padded leading dimensions, B as k x n and as
 * n x k, beta 0 and 0.5, shards that are not a multiple of the chunk, plain
 * and symmetric A, with and without aGathered. Every rank checks all of its
 * output (the layout of the reference: rows rank * mShard ... of the
 * gathered product) with a maximum error relative to the largest reference
 * value within the output type's bound, no non-finite values, aGathered
 * byte-identical to the all-gather, and symmCommGetAsyncError clean.
 * Inputs are multiples of 1/4 in [-1, 1] (scales 0.5, 1, 2), exact in every
 * type, so a misplaced row or column is an O(1) error.
 *
 * Then a CUDA graph of each op, captured once and replayed 10 times with
 * new inputs before every replay (each replay checked), and bad arguments:
 * every one must fail with the expected code and a message naming the
 * problem, enqueue nothing and leave the communicator usable.
 *
 * --quick (shared-device runs): fewer cases and 4 graph replays.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#ifndef FUSED_KERNELS_FATBIN
#error "FUSED_KERNELS_FATBIN must be defined by the build"
#endif

enum { T_F16 = 6, T_F32 = 7, T_BF16 = 9, T_E4M3 = 10, T_E5M2 = 11 };

struct fk {
  CUmodule mod;
  CUfunction fill, fill_scales, gemm, axpby, compare, bytes_differ;
  CUdeviceptr res; /* 4 words */
};

struct mcase {
  const char *name;
  int at, bt, ct, transB;
  size_t ms, n, k; /* all-gather: mShard, n, k; reduce-scatter: mShard (m = N * mShard), n, kShard */
  size_t lda_pad, ldb_pad, ldc_pad;
  float beta;
  int scale; /* 0 none, 1 tensor, 2 row-wise */
  int chunks;
  int symmetric_a; /* A in symmetric memory */
  int gathered;    /* pass aGathered (all-gather only) */
};

static int g_quick;
static uint32_t g_seed = 0x5eed;
static int g_cases, g_failed, g_refused;
static struct fk K[TW_MAX_RANKS];
/* One symmetric buffer per rank for "symmetric A" cases (offset 0). */
static void *g_sym[TW_MAX_RANKS];
static size_t g_sym_bytes = (size_t)16 << 20;

static size_t tsize(int t) { return t == T_F32 ? 4 : (t == T_E4M3 || t == T_E5M2) ? 1 : 2; }
static const char *tname(int t) {
  switch (t) {
    case T_F16: return "fp16";
    case T_F32: return "fp32";
    case T_BF16: return "bf16";
    case T_E4M3: return "e4m3";
    default: return "e5m2";
  }
}
/* Largest error relative to the largest reference value: a few units in
 * the last place of the output type (TF32 inputs are exact here). */
static double bound(int ct) { return ct == T_BF16 ? 1.0 / 64 : ct == T_F16 ? 1.0 / 512 : 1.0 / 2048; }

static CUdeviceptr dalloc(const struct tw_rank *r, size_t bytes) {
  CUdeviceptr p = 0;
  tw_use(r);
  TW_CU(tu_cu.cuMemAlloc(&p, bytes ? bytes : 16));
  return p;
}
static void dfree(const struct tw_rank *r, CUdeviceptr p) {
  tw_use(r);
  if (p) TW_CU(tu_cu.cuMemFree(p));
}

static void fill(const struct tw_rank *r, CUdeviceptr p, int t, uint64_t rows, uint64_t cols, uint64_t ld,
                 uint32_t salt, uint64_t row0) {
  int tt = t;
  uint32_t seed = g_seed;
  void *a[] = {&p, &tt, &rows, &cols, &ld, &seed, &salt, &row0};
  tw_launch(r, K[r->index].fill, rows * cols, a, "fm_fill");
}
static void fill_scales(const struct tw_rank *r, CUdeviceptr p, uint64_t n, uint32_t salt, uint64_t row0) {
  uint32_t seed = g_seed;
  void *a[] = {&p, &n, &seed, &salt, &row0};
  tw_launch(r, K[r->index].fill_scales, n, a, "fm_fill_scales");
}
static void ref_gemm(const struct tw_rank *r, CUdeviceptr A, int at, uint64_t lda, CUdeviceptr B, int bt,
                     uint64_t ldb, int transB, CUdeviceptr C, int ct, uint64_t ldc, uint64_t m, uint64_t n, uint64_t k,
                     CUdeviceptr as, CUdeviceptr bs, int scale, float beta, CUdeviceptr Cold, uint64_t ldcold) {
  void *a[] = {&A, &at, &lda, &B, &bt, &ldb, &transB, &C, &ct, &ldc, &m, &n, &k, &as, &bs, &scale, &beta, &Cold,
               &ldcold};
  tw_launch(r, K[r->index].gemm, m * n, a, "fm_gemm");
}

/* Compare; returns 1 when within bound. */
static int compare(const struct tw_rank *r, const char *what, CUdeviceptr got, uint64_t ldg, CUdeviceptr ref,
                   uint64_t ldr, int t, uint64_t rows, uint64_t cols, double tol) {
  tw_use(r);
  TW_CU(cw_cu.cuMemsetD32Async(K[r->index].res, 0, 4, r->stream));
  CUdeviceptr res = K[r->index].res;
  int tt = t;
  void *a[] = {&got, &ldg, &ref, &ldr, &tt, &rows, &cols, &res};
  tw_launch(r, K[r->index].compare, rows * cols, a, "fm_compare");
  unsigned int h[4];
  tw_stream_wait(r, 120, what);
  TW_CU(tu_cu.cuMemcpyDtoH(h, res, sizeof h));
  float maxd, maxr;
  memcpy(&maxd, &h[0], 4);
  memcpy(&maxr, &h[1], 4);
  const double rel = maxd / (maxr > 0 ? maxr : 1.0f);
  if (h[2] || rel > tol) {
    tw_fail_at(__FILE__, __LINE__, r, "%s: max error %.3g relative to max |ref| %.3g (bound %.3g), %u of %llu elements "
               "differ, %u non-finite", what, rel, (double)maxr, tol, h[3], (unsigned long long)(rows * cols), h[2]);
    return 0;
  }
  return 1;
}

static void init_desc(symmMatmulDesc_t *d, const struct mcase *c, CUdeviceptr as, CUdeviceptr bs, CUdeviceptr gath) {
  symmResult_t rc = symmMatmulDescInit(d, (symmDataType_t)c->at);
  REQUIRE(rc == symmSuccess, "symmMatmulDescInit(%s) returned %s", tname(c->at), tu_result_name(rc));
  d->bType = (symmDataType_t)c->bt;
  d->cType = (symmDataType_t)c->ct;
  d->transB = c->transB;
  d->lda = c->k + c->lda_pad;
  d->ldb = (c->transB ? c->k : c->n) + c->ldb_pad;
  d->ldc = c->n + c->ldc_pad;
  d->beta = c->beta;
  d->scaleMode = (symmScaleMode_t)c->scale;
  d->aScale = c->scale ? (const float *)(uintptr_t)as : NULL;
  d->bScale = c->scale ? (const float *)(uintptr_t)bs : NULL;
  d->aGathered = (void *)(uintptr_t)gath;
  d->chunksPerRank = c->chunks;
}

/* Every local rank's call inside one group (the first fused call on a
 * communicator is collective on the host). */
static int call_all(struct tw *w, const char *what, symmResult_t (*fn)(struct tw_rank *, void *), void *ctx,
                    int allow_refusal) {
  symmResult_t rc[TW_MAX_RANKS];
  symmGroupStart();
  for (int i = 0; i < w->nlocal; i++) rc[i] = fn(&w->r[i], ctx);
  symmResult_t g = symmGroupEnd();
  int refused = 0;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    char m[1024];
    const char *msg = tu_last_error(r->comm, m, sizeof m);
    if (allow_refusal && rc[i] == symmNotSupported) {
      TW_CHECK(r, tu_contains_ci(msg, "row-wise") || tu_contains_ci(msg, "fp8"),
               "%s: symmNotSupported without naming row-wise scales or fp8: \"%s\"", what, msg ? msg : "");
      refused++;
      continue;
    }
    TW_REQUIRE(r, rc[i] == symmSuccess, "%s returned %s: %s", what, tu_result_name(rc[i]), msg ? msg : "");
  }
  TW_REQUIRE(NULL, g == symmSuccess || refused, "%s: symmGroupEnd returned %s", what, tu_result_name(g));
  if (refused) {
    TW_REQUIRE(NULL, refused == w->nlocal, "%s: only some ranks refused", what);
    return 0;
  }
  return 1;
}

/* ---- all-gather-matmul ----------------------------------------------------- */

struct ag_bufs {
  const struct mcase *c;
  CUdeviceptr a[TW_MAX_RANKS], apacked[TW_MAX_RANKS], b[TW_MAX_RANKS], cc[TW_MAX_RANKS], cold[TW_MAX_RANKS],
      gref[TW_MAX_RANKS], ref[TW_MAX_RANKS], gath[TW_MAX_RANKS], as[TW_MAX_RANKS], bs[TW_MAX_RANKS],
      asg[TW_MAX_RANKS];
};

static symmResult_t ag_call(struct tw_rank *r, void *ctx) {
  struct ag_bufs *x = ctx;
  const struct mcase *c = x->c;
  const int i = r->index;
  symmMatmulDesc_t d;
  init_desc(&d, c, x->as[i], x->bs[i], c->gathered ? x->gath[i] : 0);
  return symmAllGatherMatmul((const void *)(uintptr_t)x->a[i], (const void *)(uintptr_t)x->b[i],
                             (void *)(uintptr_t)x->cc[i], c->ms, c->n, c->k, &d, r->comm, r->stream);
}

static symmResult_t ag_ref_gather(struct tw_rank *r, void *ctx) {
  struct ag_bufs *x = ctx;
  return symmAllGather((const void *)(uintptr_t)x->apacked[r->index], (void *)(uintptr_t)x->gref[r->index],
                       x->c->ms * x->c->k, (symmDataType_t)x->c->at, r->comm, r->stream);
}

/* New inputs (salt) and the reference on every rank. */
static void ag_inputs(struct tw *w, struct ag_bufs *x, uint32_t salt) {
  const struct mcase *c = x->c;
  const size_t N = (size_t)w->nranks, M = N * c->ms, lda = c->k + c->lda_pad, ldc = c->n + c->ldc_pad;
  const size_t ldb = (c->transB ? c->k : c->n) + c->ldb_pad, brows = c->transB ? c->n : c->k;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    fill(r, x->a[i], c->at, c->ms, c->k, lda, salt, (uint64_t)r->rank * c->ms);
    fill(r, x->apacked[i], c->at, c->ms, c->k, c->k, salt, (uint64_t)r->rank * c->ms);
    fill(r, x->b[i], c->bt, brows, c->transB ? c->k : c->n, ldb, salt + 1, 0);
    fill(r, x->cc[i], c->ct, M, c->n, ldc, salt + 2, 0);
    fill(r, x->cold[i], c->ct, M, c->n, ldc, salt + 2, 0);
    if (c->scale) {
      fill_scales(r, x->as[i], c->scale == 2 ? c->ms : 1, salt + 3, c->scale == 2 ? (uint64_t)r->rank * c->ms : 0);
      fill_scales(r, x->asg[i], c->scale == 2 ? M : 1, salt + 3, 0);
      fill_scales(r, x->bs[i], c->scale == 2 ? c->n : 1, salt + 4, 0);
    }
  }
  call_all(w, "symmAllGather (reference)", ag_ref_gather, x, 0);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    ref_gemm(r, x->gref[i], c->at, c->k, x->b[i], c->bt, ldb, c->transB, x->ref[i], c->ct, ldc, M, c->n, c->k,
             x->asg[i], x->bs[i], c->scale, c->beta, x->cold[i], ldc);
  }
}

/* 1 when this process's ranks match the reference. */
static int ag_check(struct tw *w, struct ag_bufs *x, const char *what) {
  const struct mcase *c = x->c;
  const size_t M = (size_t)w->nranks * c->ms, ldc = c->n + c->ldc_pad;
  int ok = 1;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    ok &= compare(r, what, x->cc[i], ldc, x->ref[i], ldc, c->ct, M, c->n, bound(c->ct));
    if (c->gathered) {
      CUdeviceptr res = K[i].res;
      uint64_t bytes = M * c->k * tsize(c->at);
      TW_CU(cw_cu.cuMemsetD32Async(res, 0, 4, r->stream));
      void *a[] = {&x->gath[i], &x->gref[i], &bytes, &res};
      tw_launch(r, K[i].bytes_differ, bytes, a, "fm_bytes_differ");
      unsigned int h[4];
      tw_stream_wait(r, 120, what);
      TW_CU(tu_cu.cuMemcpyDtoH(h, res, sizeof h));
      TW_CHECK(r, h[0] == 0, "%s: aGathered differs from symmAllGather's output in %u of %llu bytes", what, h[0],
               (unsigned long long)bytes);
      ok &= h[0] == 0;
    }
  }
  tw_check_async(w, what);
  g_failed += !ok;
  return ok;
}

static void ag_alloc(struct tw *w, struct ag_bufs *x) {
  const struct mcase *c = x->c;
  const size_t N = (size_t)w->nranks, M = N * c->ms, lda = c->k + c->lda_pad, ldc = c->n + c->ldc_pad;
  const size_t ldb = (c->transB ? c->k : c->n) + c->ldb_pad, brows = c->transB ? c->n : c->k;
  const size_t ea = tsize(c->at), ec = tsize(c->ct);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    if (c->symmetric_a) {
      REQUIRE(c->ms * lda * ea <= g_sym_bytes, "symmetric pool too small");
      x->a[i] = (CUdeviceptr)(uintptr_t)g_sym[i];
    } else {
      x->a[i] = dalloc(r, c->ms * lda * ea);
    }
    x->apacked[i] = dalloc(r, c->ms * c->k * ea);
    x->b[i] = dalloc(r, brows * ldb * tsize(c->bt));
    x->cc[i] = dalloc(r, M * ldc * ec);
    x->cold[i] = dalloc(r, M * ldc * ec);
    x->ref[i] = dalloc(r, M * ldc * ec);
    x->gref[i] = dalloc(r, M * c->k * ea);
    x->gath[i] = c->gathered ? dalloc(r, M * c->k * ea) : 0;
    x->as[i] = dalloc(r, (c->scale == 2 ? c->ms : 1) * 4);
    x->asg[i] = dalloc(r, (c->scale == 2 ? M : 1) * 4);
    x->bs[i] = dalloc(r, (c->scale == 2 ? c->n : 1) * 4);
  }
}

static void ag_free(struct tw *w, struct ag_bufs *x) {
  tw_sync_all(w, 120, "before freeing");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    if (!x->c->symmetric_a) dfree(r, x->a[i]);
    CUdeviceptr *all[] = {&x->apacked[i], &x->b[i], &x->cc[i], &x->cold[i], &x->ref[i], &x->gref[i], &x->gath[i],
                          &x->as[i], &x->asg[i], &x->bs[i]};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) dfree(r, *all[j]);
  }
}

static void describe(const struct mcase *c, const char *op, char *buf, size_t len) {
  snprintf(buf, len, "%s %s: %sx%s->%s transB=%d mShard=%zu n=%zu k=%zu pads %zu/%zu/%zu beta=%g scales=%d chunks=%d%s%s",
           op, c->name, tname(c->at), tname(c->bt), tname(c->ct), c->transB, c->ms, c->n, c->k, c->lda_pad, c->ldb_pad, c->ldc_pad, (double)c->beta, c->scale, c->chunks,
           c->symmetric_a ? " symmetric-A" : "", c->gathered ? " aGathered" : "");
}

static void ag_case(struct tw *w, const struct mcase *c) {
  char what[300];
  describe(c, "allgather-matmul", what, sizeof what);
  tw_phase("%s", what);
  struct ag_bufs x = {.c = c};
  ag_alloc(w, &x);
  ag_inputs(w, &x, 10);
  g_cases++;
  if (call_all(w, what, ag_call, &x, c->scale == 2)) {
    const int ok = ag_check(w, &x, what);
    if (w->lead) tw_log(w, "%-110s %s", what, ok ? "ok" : "FAILED (see above)");
  } else {
    g_refused++;
    if (w->lead) tw_log(w, "%-110s refused (symmNotSupported)", what);
  }
  ag_free(w, &x);
}

/* ---- matmul-reduce-scatter ----------------------------------------------- */

struct rs_bufs {
  const struct mcase *c;
  CUdeviceptr a[TW_MAX_RANKS], b[TW_MAX_RANKS], cc[TW_MAX_RANKS], cold[TW_MAX_RANKS], p[TW_MAX_RANKS],
      ref[TW_MAX_RANKS], as[TW_MAX_RANKS], bs[TW_MAX_RANKS];
};

static symmResult_t rs_call(struct tw_rank *r, void *ctx) {
  struct rs_bufs *x = ctx;
  const struct mcase *c = x->c;
  const int i = r->index;
  symmMatmulDesc_t d;
  init_desc(&d, c, x->as[i], x->bs[i], 0);
  return symmMatmulReduceScatter((const void *)(uintptr_t)x->a[i], (const void *)(uintptr_t)x->b[i],
                                 (void *)(uintptr_t)x->cc[i], (size_t)tw_world()->nranks * c->ms, c->n, c->k, &d,
                                 r->comm, r->stream);
}

static symmResult_t rs_ref_scatter(struct tw_rank *r, void *ctx) {
  struct rs_bufs *x = ctx;
  return symmReduceScatter((const void *)(uintptr_t)x->p[r->index], (void *)(uintptr_t)x->ref[r->index],
                           x->c->ms * x->c->n, (symmDataType_t)x->c->ct, symmSum, r->comm, r->stream);
}

static void rs_inputs(struct tw *w, struct rs_bufs *x, uint32_t salt) {
  const struct mcase *c = x->c;
  const size_t M = (size_t)w->nranks * c->ms, lda = c->k + c->lda_pad, ldc = c->n + c->ldc_pad;
  const size_t ldb = (c->transB ? c->k : c->n) + c->ldb_pad, brows = c->transB ? c->n : c->k;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    const uint32_t s = salt + 16 * (uint32_t)r->rank; /* every rank holds its own k slice */
    fill(r, x->a[i], c->at, M, c->k, lda, s, 0);
    fill(r, x->b[i], c->bt, brows, c->transB ? c->k : c->n, ldb, s + 1, 0);
    fill(r, x->cc[i], c->ct, c->ms, c->n, ldc, s + 2, 0);
    fill(r, x->cold[i], c->ct, c->ms, c->n, ldc, s + 2, 0);
    if (c->scale) {
      fill_scales(r, x->as[i], c->scale == 2 ? M : 1, s + 3, 0);
      fill_scales(r, x->bs[i], c->scale == 2 ? c->n : 1, s + 4, 0);
    }
    ref_gemm(r, x->a[i], c->at, lda, x->b[i], c->bt, ldb, c->transB, x->p[i], c->ct, c->n, M, c->n, c->k, x->as[i],
             x->bs[i], c->scale, 0.f, 0, 0);
  }
  call_all(w, "symmReduceScatter (reference)", rs_ref_scatter, x, 0);
  if (c->beta != 0.f)
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      uint64_t ldr = c->n, ldo = ldc, rows = c->ms, cols = c->n;
      int t = c->ct;
      float beta = c->beta;
      void *a[] = {&x->ref[i], &ldr, &x->cold[i], &ldo, &t, &rows, &cols, &beta};
      tw_launch(r, K[i].axpby, rows * cols, a, "fm_axpby");
    }
}

static int rs_check(struct tw *w, struct rs_bufs *x, const char *what) {
  const struct mcase *c = x->c;
  int ok = 1;
  /* beta: the reference rounds twice (reduce-scatter, then + beta * C). */
  const double tol = bound(c->ct) * (c->beta != 0.f ? 2 : 1);
  for (int i = 0; i < w->nlocal; i++)
    ok &= compare(&w->r[i], what, x->cc[i], c->n + c->ldc_pad, x->ref[i], c->n, c->ct, c->ms, c->n, tol);
  tw_check_async(w, what);
  g_failed += !ok;
  return ok;
}

static void rs_alloc(struct tw *w, struct rs_bufs *x) {
  const struct mcase *c = x->c;
  const size_t M = (size_t)w->nranks * c->ms, lda = c->k + c->lda_pad, ldc = c->n + c->ldc_pad;
  const size_t ldb = (c->transB ? c->k : c->n) + c->ldb_pad, brows = c->transB ? c->n : c->k;
  const size_t ec = tsize(c->ct);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    if (c->symmetric_a) {
      REQUIRE(M * lda * tsize(c->at) <= g_sym_bytes, "symmetric pool too small");
      x->a[i] = (CUdeviceptr)(uintptr_t)g_sym[i];
    } else {
      x->a[i] = dalloc(r, M * lda * tsize(c->at));
    }
    x->b[i] = dalloc(r, brows * ldb * tsize(c->bt));
    x->cc[i] = dalloc(r, c->ms * ldc * ec);
    x->cold[i] = dalloc(r, c->ms * ldc * ec);
    x->p[i] = dalloc(r, M * c->n * ec);
    x->ref[i] = dalloc(r, c->ms * c->n * ec);
    x->as[i] = dalloc(r, (c->scale == 2 ? M : 1) * 4);
    x->bs[i] = dalloc(r, (c->scale == 2 ? c->n : 1) * 4);
  }
}

static void rs_free(struct tw *w, struct rs_bufs *x) {
  tw_sync_all(w, 120, "before freeing");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    if (!x->c->symmetric_a) dfree(r, x->a[i]);
    CUdeviceptr *all[] = {&x->b[i], &x->cc[i], &x->cold[i], &x->p[i], &x->ref[i], &x->as[i], &x->bs[i]};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) dfree(r, *all[j]);
  }
}

static void rs_case(struct tw *w, const struct mcase *c) {
  char what[300];
  describe(c, "matmul-reducescatter", what, sizeof what);
  tw_phase("%s", what);
  struct rs_bufs x = {.c = c};
  rs_alloc(w, &x);
  rs_inputs(w, &x, 20);
  g_cases++;
  if (call_all(w, what, rs_call, &x, c->scale == 2)) {
    const int ok = rs_check(w, &x, what);
    if (w->lead) tw_log(w, "%-110s %s", what, ok ? "ok" : "FAILED (see above)");
  } else {
    g_refused++;
    if (w->lead) tw_log(w, "%-110s refused (symmNotSupported)", what);
  }
  rs_free(w, &x);
}

/* ---- CUDA graphs ------------------------------------------------------------ */

static void graph_case(struct tw *w, const struct mcase *c, int rs) {
  char what[300];
  describe(c, rs ? "graph matmul-reducescatter" : "graph allgather-matmul", what, sizeof what);
  tw_phase("%s", what);
  struct ag_bufs ag = {.c = c};
  struct rs_bufs rsb = {.c = c};
  if (rs) {
    rs_alloc(w, &rsb);
    rs_inputs(w, &rsb, 30);
  } else {
    ag_alloc(w, &ag);
    ag_inputs(w, &ag, 30);
  }
  tw_sync_all(w, 120, "before capture");
  CUgraphExec exec[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(tu_cu.cuStreamBeginCapture(r->stream, 0 /* global */));
    symmResult_t rc = rs ? rs_call(r, &rsb) : ag_call(r, &ag);
    CUgraph g;
    TW_CU(tu_cu.cuStreamEndCapture(r->stream, &g));
    char m[1024];
    const char *msg = tu_last_error(r->comm, m, sizeof m);
    TW_REQUIRE(r, rc == symmSuccess, "%s: capturing the call returned %s: %s", what, tu_result_name(rc), msg ? msg : "");
    TW_CU(tu_cu.cuGraphInstantiateWithFlags(&exec[i], g, 0));
    TW_CU(tu_cu.cuGraphDestroy(g));
  }
  const int replays = g_quick ? 4 : 10;
  int good = 0;
  for (int k = 0; k < replays; k++) {
    char rep[340];
    snprintf(rep, sizeof rep, "%s replay %d", what, k);
    tw_phase("%s", rep);
    /* New inputs before every replay (the reference is recomputed). */
    if (rs)
      rs_inputs(w, &rsb, 40 + 8 * (uint32_t)k);
    else
      ag_inputs(w, &ag, 40 + 8 * (uint32_t)k);
    for (int i = 0; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      TW_CU(tu_cu.cuGraphLaunch(exec[i], w->r[i].stream));
    }
    g_cases++;
    good += rs ? rs_check(w, &rsb, rep) : ag_check(w, &ag, rep);
  }
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuGraphExecDestroy(exec[i]));
  }
  if (w->lead) tw_log(w, "%-110s %d of %d replays ok", what, good, replays);
  if (rs)
    rs_free(w, &rsb);
  else
    ag_free(w, &ag);
}

/* ---- bad arguments ---------------------------------------------------------- */

static void bad_inputs(struct tw *w) {
  tw_phase("bad inputs");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    const size_t N = (size_t)w->nranks, ms = 32, n = 32, k = 32;
    CUdeviceptr a = dalloc(r, N * ms * k * 2), b = dalloc(r, k * n * 2), c = dalloc(r, N * ms * n * 2),
                small = dalloc(r, 64);
    const void *A = (const void *)(uintptr_t)a, *B = (const void *)(uintptr_t)b;
    void *C = (void *)(uintptr_t)c;
    symmComm_t cm = r->comm;
    CUstream s = r->stream;
    symmMatmulDesc_t d, x;
    TW_REQUIRE(r, symmMatmulDescInit(&d, symmBfloat16) == symmSuccess, "symmMatmulDescInit");
#define BAD(call, want, kw) TW_EXPECT_FAIL(r, call, want, cm, kw)
    BAD(symmAllGatherMatmul(A, B, C, ms, n, k, NULL, cm, s), symmInvalidArgument, "desc");
    BAD(symmMatmulReduceScatter(A, B, C, N * ms, n, k, NULL, cm, s), symmInvalidArgument, "desc");
    BAD(symmAllGatherMatmul(NULL, B, C, ms, n, k, &d, cm, s), symmInvalidArgument, "aShard");
    BAD(symmAllGatherMatmul(A, NULL, C, ms, n, k, &d, cm, s), symmInvalidArgument, "b");
    BAD(symmMatmulReduceScatter(A, B, NULL, N * ms, n, k, &d, cm, s), symmInvalidArgument, "cShard");
    BAD(symmAllGatherMatmul(A, B, C, ms, n, 0, &d, cm, s), symmInvalidArgument, "k");
    x = d;
    x.structSize = 8;
    BAD(symmAllGatherMatmul(A, B, C, ms, n, k, &x, cm, s), symmInvalidArgument, "structSize");
    x = d;
    x.aType = symmInt32;
    BAD(symmAllGatherMatmul(A, B, C, ms, n, k, &x, cm, s), symmNotSupported, "aType");
    x = d;
    x.transB = 2;
    BAD(symmAllGatherMatmul(A, B, C, ms, n, k, &x, cm, s), symmInvalidArgument, "transB");
    x = d;
    x.lda = k - 1;
    BAD(symmAllGatherMatmul(A, B, C, ms, n, k, &x, cm, s), symmInvalidArgument, "lda");
    x = d;
    x.aType = x.bType = symmFloat8e4m3;
    BAD(symmAllGatherMatmul(A, B, C, ms, n, k, &x, cm, s), symmNotSupported, "transB");
    x = d;
    x.aGathered = C;
    BAD(symmMatmulReduceScatter(A, B, C, N * ms, n, k, &x, cm, s), symmInvalidArgument, "aGathered");
    if (N > 1) BAD(symmMatmulReduceScatter(A, B, C, N * ms + 1, n, k, &d, cm, s), symmInvalidArgument, "multiple");
    BAD(symmAllGatherMatmul(A, B, (void *)(uintptr_t)small, ms, n, k, &d, cm, s), symmInvalidArgument, "runs past");
    TW_EXPECT_FAIL(r, symmAllGatherMatmul(A, B, C, ms, n, k, &d, NULL, s), symmInvalidArgument, NULL, "comm");
    /* Nothing may have been enqueued. */
    tw_use(r);
    CUresult q = tu_cu.cuStreamQuery(s);
    TW_CHECK(r, q == 0, "a refused fused call left work on the stream (%s)", tu_cu_error(q));
    dfree(r, a);
    dfree(r, b);
    dfree(r, c);
    dfree(r, small);
#undef BAD
  }
  tw_check_async(w, "bad inputs");
  if (w->lead) tw_log(w, "bad inputs: every call refused with a message, nothing enqueued");
}

/* ---- driver ------------------------------------------------------------------ */

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    K[i].mod = tw_load_module(r, FUSED_KERNELS_FATBIN, "FUSED_TEST_KERNELS");
    K[i].fill = tw_function(r, K[i].mod, "fm_fill");
    K[i].fill_scales = tw_function(r, K[i].mod, "fm_fill_scales");
    K[i].gemm = tw_function(r, K[i].mod, "fm_gemm");
    K[i].axpby = tw_function(r, K[i].mod, "fm_axpby");
    K[i].compare = tw_function(r, K[i].mod, "fm_compare");
    K[i].bytes_differ = tw_function(r, K[i].mod, "fm_bytes_differ");
    K[i].res = dalloc(r, 16);
  }
  if (tw_init_comms(w) != symmSuccess) return;
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) sz[i] = g_sym_bytes;
  REQUIRE(tw_alloc(w, sz, g_sym) == symmSuccess, "symmMemAlloc of the symmetric A pool failed");

  /* name, at, bt, ct, transB, ms, n, k, pads a/b/c, beta, scale, chunks, symmetric A, aGathered */
  static const struct mcase ag[] = {
      {"square", T_BF16, T_BF16, T_BF16, 0, 256, 256, 256, 0, 0, 0, 0.f, 0, 0, 0, 0},
      {"ragged", T_BF16, T_BF16, T_BF16, 1, 300, 136, 72, 8, 8, 8, 0.5f, 0, 4, 1, 1},
      {"fp16", T_F16, T_F16, T_F16, 0, 100, 200, 120, 0, 8, 0, 0.f, 0, 3, 0, 1},
      {"fp32-tf32", T_F32, T_F32, T_F32, 1, 128, 96, 40, 4, 0, 4, 0.f, 0, 2, 1, 0},
      {"bf16-to-fp32", T_BF16, T_BF16, T_F32, 0, 64, 64, 64, 0, 0, 0, 0.f, 0, 0, 0, 0},
      {"fp8-tensor", T_E4M3, T_E4M3, T_BF16, 1, 160, 144, 96, 0, 0, 0, 0.f, 1, 3, 0, 0},
      {"fp8-mixed", T_E4M3, T_E5M2, T_F16, 1, 64, 128, 64, 16, 0, 0, 0.f, 1, 0, 1, 1},
      {"fp8-rowwise", T_E4M3, T_E4M3, T_BF16, 1, 128, 128, 128, 0, 0, 0, 0.f, 2, 2, 0, 0},
  };
  static const struct mcase rs[] = {
      {"square", T_BF16, T_BF16, T_BF16, 0, 128, 256, 128, 0, 0, 0, 0.f, 0, 0, 0, 0},
      {"ragged", T_BF16, T_BF16, T_BF16, 1, 100, 136, 72, 8, 8, 8, 0.5f, 0, 3, 1, 0},
      {"rounds", T_F16, T_F16, T_F16, 0, 64, 64, 256, 0, 0, 0, 0.f, 0, 5, 0, 0},
      {"fp32-tf32", T_F32, T_F32, T_F32, 0, 96, 80, 48, 0, 4, 0, 0.f, 0, 2, 0, 0},
      {"fp8-tensor", T_E4M3, T_E4M3, T_BF16, 1, 64, 128, 64, 0, 0, 0, 0.f, 1, 2, 0, 0},
      {"fp8-rowwise", T_E4M3, T_E4M3, T_BF16, 1, 64, 128, 128, 0, 0, 0, 0.f, 2, 2, 0, 0},
      /* The default chunking: one round, or, where the workspace cannot
       * hold (2 + nranks) partial blocks of 320 KiB (the 1 MiB
       * registration), the fewest balanced rounds that fit. */
      {"default-rounds", T_BF16, T_BF16, T_BF16, 1, 320, 512, 64, 0, 0, 8, 0.5f, 0, 0, 1, 0},
  };
  const size_t nag = sizeof ag / sizeof ag[0], nrs = sizeof rs / sizeof rs[0];
  for (size_t i = 0; i < nag; i++)
    if (!g_quick || i != 4) ag_case(w, &ag[i]);
  for (size_t i = 0; i < nrs; i++)
    if (!g_quick || i != 3) rs_case(w, &rs[i]);
  graph_case(w, &ag[1], 0);
  graph_case(w, &rs[1], 1);
  bad_inputs(w);
  /* Still in step after the refusals. */
  ag_case(w, &ag[0]);
  if (w->lead) tw_log(w, "summary: %d checks, %d failed, %d refused (symmNotSupported)", g_cases, g_failed, g_refused);
  REQUIRE(tw_free(w, g_sym) == symmSuccess, "symmMemFree");
  tw_destroy_comms(w);
  for (int i = 0; i < w->nlocal; i++) {
    dfree(&w->r[i], K[i].res);
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuModuleUnload(K[i].mod));
  }
}

static int option(const char *arg, void *ctx) {
  (void)ctx;
  if (strcmp(arg, "--quick") != 0) return -1;
  g_quick = 1;
  return 0;
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {.name = "fused_matmul", .modes = "mp,all", .usage = "[--quick]",
      .limit_s = 840, .stall = 1, .option = option, .process_init = cw_process_init, .body = body};
  return tw_main(&spec, argc, argv);
}
