/*
 * coll_allreduce_norm <mp|all> [--nranks=N]
 *
 * symmAllReduceAddRMSNorm against an fp64 reference:
 *   residualOut = sum over ranks of input + residual
 *   out         = residualOut / sqrt(mean(residualOut^2) + eps) * weight
 * for bf16, fp16 and fp32, shapes that take the fused LL kernel (up to the
 * all-reduce's LL limit) and the two-kernel form (all-reduce, then add and
 * norm), rows from 16 bytes to the 64 KiB maximum, staged and symmetric
 * inputs, separate outputs and the two aliases the call allows (out =
 * input, residualOut = residual), a CUDA graph replayed twice, fp8 e4m3
 * outputs (symmAllReduceAddRMSNormFp8: a given scale and per-token scales),
 * and bad arguments (refused on each rank, nothing enqueued).
 *
 * With SYMM_ALGO=ll from 3 ranks, and by default at 4, the shapes between
 * the one-shot LL limit and twice it take the two-shot LL form, where the rank that owns a row
 * (rows * p / n onwards) adds its residual: one more case gives every rank
 * a different residual and checks that each row's residualOut, on every
 * rank, has its owner's (which the other forms would not give). With
 * SYMM_ALGO naming `normwrite`, and by default (unless `nonormwrite`),
 * the shapes above the LL forms take the
 * two-shot form by stores (kernels/allreduce_norm_write.cu, from 2 ranks,
 * rows up to 16 KiB), which also adds the owner's residual: the same
 * check runs on 300 x 4096; and the form back to back with the staged
 * all-reduce, which shares its scratch.
 *
 * The inputs are multiples of 1/16 small enough that every sum and
 * residualOut are exact in each type: residualOut must equal the reference
 * exactly, and out must be within 2 units in the last place of the type
 * (fp32: 1e-5 relative) plus 1e-6 absolute. The largest error per type is
 * printed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#define EPS 1e-5f

static const int dtypes[] = {symmBfloat16, symmFloat16, symmFloat32};
static double max_err[3];

static double in_val(int r, size_t t, size_t h) { return (double)((int)((r * 7 + t * 13 + h * 3) % 17) - 8) / 16.0; }
static double res_val(size_t t, size_t h) { return (double)((int)((t * 5 + h) % 11) - 5) / 8.0; }
static double w_val(size_t h) { return 0.5 + (double)(h % 7) / 8.0; }
/* The owner case (above): rank r's residual is res_val + r / 8, still exact. */
static int residual_per_rank;
static double rank_residual(int r) { return residual_per_rank ? (double)r / 8.0 : 0.0; }
/* The two-shot form's owner of row t of `tokens` (kernels/allreduce_norm.cu). */
static int row_owner(size_t t, size_t tokens, int n) { return (int)(((t + 1) * (size_t)n - 1) / tokens); }

static int dt_index(int dt) { return dt == symmBfloat16 ? 0 : dt == symmFloat16 ? 1 : 2; }

static uint64_t enc(int dt, double v) {
  if (dt == symmBfloat16) return cw_float_to_bf16((float)v);
  if (dt == symmFloat16) return cw_float_to_f16((float)v);
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static double dec(int dt, uint64_t u) {
  if (dt == symmBfloat16) return cw_bf16_to_float((uint32_t)u);
  if (dt == symmFloat16) return cw_f16_to_float((uint32_t)u);
  float f;
  uint32_t x = (uint32_t)u;
  memcpy(&f, &x, 4);
  return f;
}

/* Relative tolerance of out: two units in the last place. */
static double tolerance(int dt) { return dt == symmBfloat16 ? 2.0 / 128 : dt == symmFloat16 ? 2.0 / 1024 : 1e-5; }

/* Rank r's input, the residual and the weight, from the patterns above. */
static void upload_inputs(struct tw_rank *r, int dt, size_t tokens, size_t hidden, CUdeviceptr in, CUdeviceptr res,
                          CUdeviceptr wt, uint8_t *host) {
  const int es = cw_dt[dt].size;
  const size_t bytes = tokens * hidden * es;
  for (size_t t = 0; t < tokens; t++)
    for (size_t h = 0; h < hidden; h++) cw_put(host, t * hidden + h, es, enc(dt, in_val(r->rank, t, h)));
  CU_REQUIRE(tu_upload(in, host, bytes));
  for (size_t t = 0; t < tokens; t++)
    for (size_t h = 0; h < hidden; h++) cw_put(host, t * hidden + h, es, enc(dt, res_val(t, h) + rank_residual(r->rank)));
  CU_REQUIRE(tu_upload(res, host, bytes));
  for (size_t h = 0; h < hidden; h++) cw_put(host, h, es, enc(dt, w_val(h)));
  CU_REQUIRE(tu_upload(wt, host, hidden * es));
}

/* residualOut's exact value: the residual plus every rank's input. */
static void reference_sums(int n, size_t tokens, size_t hidden, double *x) {
  for (size_t t = 0; t < tokens; t++)
    for (size_t h = 0; h < hidden; h++) {
      double v = res_val(t, h) + rank_residual(row_owner(t, tokens, n));
      for (int q = 0; q < n; q++) v += in_val(q, t, h);
      x[t * hidden + h] = v;
    }
}

/* Rank r's out and residualOut (device buffers) against the reference:
 * residualOut exactly, out within the tolerance; the largest relative
 * error of out into *worst. `host` holds tokens x hidden elements. */
static void check_outputs(struct tw_rank *r, int n, int dt, size_t tokens, size_t hidden, CUdeviceptr out,
                          CUdeviceptr rout, uint8_t *host, double *worst) {
  const int es = cw_dt[dt].size;
  const size_t elems = tokens * hidden, bytes = elems * es;
  double *x = malloc(elems * sizeof(double));
  REQUIRE(x != NULL, "out of host memory");
  reference_sums(n, tokens, hidden, x);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, rout, bytes));
  size_t wrong = 0, first = 0;
  for (size_t e = 0; e < elems; e++)
    if (dec(dt, cw_get(host, e, es)) != x[e] && wrong++ == 0) first = e;
  TW_CHECK(r, wrong == 0, "residualOut: %zu wrong element(s); the first, %zu, is %g, expected %g", wrong, first,
           dec(dt, cw_get(host, first, es)), x[first]);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, out, bytes));
  wrong = 0;
  for (size_t t = 0; t < tokens; t++) {
    double ss = 0;
    for (size_t h = 0; h < hidden; h++) ss += x[t * hidden + h] * x[t * hidden + h];
    const double inv = 1.0 / sqrt(ss / (double)hidden + (double)EPS);
    for (size_t h = 0; h < hidden; h++) {
      const size_t e = t * hidden + h;
      const double want = x[e] * inv * w_val(h), got = dec(dt, cw_get(host, e, es));
      const double err = fabs(got - want), rel = err / (fabs(want) > 1e-30 ? fabs(want) : 1.0);
      if (rel > *worst) *worst = rel;
      if (!(err <= tolerance(dt) * fabs(want) + 1e-6) && wrong++ == 0) first = e;
    }
  }
  TW_CHECK(r, wrong == 0, "out: %zu element(s) off by more than %g relative; the first, %zu, is %g", wrong,
           tolerance(dt), first, dec(dt, cw_get(host, first, es)));
  free(x);
}

enum alias { SEPARATE, IN_PLACE };

/* SYMM_ALGO's tokens (joined by '+' or ','), one by one: the next token
 * of *p into (tok, len), *p moved past it; 0 at the end. */
static int next_token(const char **p, const char **tok, size_t *len) {
  if (!*p || !**p) return 0;
  *tok = *p;
  *len = strcspn(*p, "+,");
  *p += *len + ((*p)[*len] != '\0');
  return 1;
}

static int token_is(const char *tok, size_t len, const char *want) { return len == strlen(want) && !strncmp(tok, want, len); }

/* Whether SYMM_ALGO names `want`. */
static int has_token(const char *algo, const char *want) {
  const char *tok;
  size_t len;
  while (next_token(&algo, &tok, &len))
    if (token_is(tok, len, want)) return 1;
  return 0;
}

/* Whether SYMM_ALGO leaves the choice of kernel to auto, as the library's
 * Algo::is_auto: only "auto", "grid=N" and the tunings below. */
static int auto_choice(const char *algo) {
  static const char *const keep_auto[] = {"auto",     "spread",    "nospread", "prefetch", "pdl",       "nopdl",
                                          "lightsync", "fullsync", "serial",   "nobatch",  "normwrite", "nonormwrite",
                                          "loopback", "noloopback", "ownstaged", "classic2"};
  const char *tok;
  size_t len;
  while (next_token(&algo, &tok, &len)) {
    int kept = len == 0 || strncmp(tok, "grid=", 5) == 0 || token_is(tok, len, "batch") || strncmp(tok, "batch=", 6) == 0;
    for (size_t k = 0; !kept && k < sizeof keep_auto / sizeof keep_auto[0]; k++) kept = token_is(tok, len, keep_auto[k]);
    if (!kept) return 0;
  }
  return 1;
}

/* One case on every rank; graph: capture the call and replay it twice (in
 * place, after copies in the graph that put the input and the residual
 * back, so each replay computes the same outputs: the copies also end in
 * the buffers the call then overwrites, as a caller's own kernel would). */
static void run_case(struct tw *w, int dt, size_t tokens, size_t hidden, enum cw_class cls, enum alias al, int graph) {
  const int es = cw_dt[dt].size, n = w->nranks, di = dt_index(dt);
  const size_t elems = tokens * hidden, bytes = elems * es;
  struct cw_buf IN, RES, WT, OUT, ROUT, KEEP_IN, KEEP_RES;
  const int restore = graph && al == IN_PLACE;
  cw_buf_alloc(w, &IN, cls, bytes);
  cw_buf_alloc(w, &RES, CW_STAGED, bytes);
  cw_buf_alloc(w, &WT, CW_STAGED, hidden * es);
  cw_buf_alloc(w, &OUT, CW_STAGED, bytes);
  cw_buf_alloc(w, &ROUT, CW_STAGED, bytes);
  if (restore) {
    cw_buf_alloc(w, &KEEP_IN, CW_STAGED, bytes);
    cw_buf_alloc(w, &KEEP_RES, CW_STAGED, bytes);
  }
  uint8_t *host = malloc(bytes);
  REQUIRE(host != NULL, "out of host memory");
  tw_phase("%s %zu x %zu, %s input, %s%s", cw_dt[dt].name, tokens, hidden, cw_class_name[cls],
           al == IN_PLACE ? "out = input, residualOut = residual" : "separate outputs", graph ? ", graph" : "");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    upload_inputs(r, dt, tokens, hidden, IN.p[i], RES.p[i], WT.p[i], host);
    CU_REQUIRE(cw_cu.cuMemsetD8Async(OUT.p[i], 0xA5, bytes, r->stream));
    CU_REQUIRE(cw_cu.cuMemsetD8Async(ROUT.p[i], 0xA5, bytes, r->stream));
    if (restore) {
      CU_REQUIRE(cw_cu.cuMemcpyDtoDAsync(KEEP_IN.p[i], IN.p[i], bytes, r->stream));
      CU_REQUIRE(cw_cu.cuMemcpyDtoDAsync(KEEP_RES.p[i], RES.p[i], bytes, r->stream));
    }
    tw_stream_wait(r, 60, "poisoning the outputs");
  }
  tw_host_barrier(w, "buffers ready");
  CUgraph g[TW_MAX_RANKS] = {0};
  CUgraphExec ge[TW_MAX_RANKS] = {0};
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    if (graph) TW_CU(tu_cu.cuStreamBeginCapture(r->stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    if (restore) {
      TW_CU(cw_cu.cuMemcpyDtoDAsync(IN.p[i], KEEP_IN.p[i], bytes, r->stream));
      TW_CU(cw_cu.cuMemcpyDtoDAsync(RES.p[i], KEEP_RES.p[i], bytes, r->stream));
    }
    void *in = (void *)(uintptr_t)IN.p[i], *res = (void *)(uintptr_t)RES.p[i];
    void *out = al == IN_PLACE ? in : (void *)(uintptr_t)OUT.p[i];
    void *rout = al == IN_PLACE ? res : (void *)(uintptr_t)ROUT.p[i];
    TW_SYMM_REQUIRE(r, symmAllReduceAddRMSNorm(in, res, (void *)(uintptr_t)WT.p[i], out, rout, tokens, hidden, EPS,
                                               (symmDataType_t)dt, r->comm, r->stream));
    if (graph) {
      CUresult rc = tu_cu.cuStreamEndCapture(r->stream, &g[i]);
      TW_REQUIRE(r, rc == 0 && g[i], "cuStreamEndCapture: %s", tu_cu_error(rc));
    }
  }
  if (graph)
    for (int rep = 0; rep < 2; rep++)
      for (int i = 0; i < w->nlocal; i++) {
        tw_use(&w->r[i]);
        if (rep == 0) TW_CU(tu_cu.cuGraphInstantiateWithFlags(&ge[i], g[i], 0));
        TW_CU(tu_cu.cuGraphLaunch(ge[i], w->r[i].stream));
      }
  double worst = 0;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "the fused all-reduce + RMSNorm did not finish");
    tw_use(r);
    check_outputs(r, n, dt, tokens, hidden, al == IN_PLACE ? IN.p[i] : OUT.p[i], al == IN_PLACE ? RES.p[i] : ROUT.p[i],
                  host, &worst);
    if (graph) {
      TW_CU(tu_cu.cuGraphExecDestroy(ge[i]));
      TW_CU(tu_cu.cuGraphDestroy(g[i]));
    }
  }
  if (worst > max_err[di]) max_err[di] = worst;
  free(host);
  tw_host_barrier(w, "checked");
  cw_buf_free(w, &IN);
  cw_buf_free(w, &RES);
  cw_buf_free(w, &WT);
  cw_buf_free(w, &OUT);
  cw_buf_free(w, &ROUT);
  if (restore) {
    cw_buf_free(w, &KEEP_IN);
    cw_buf_free(w, &KEEP_RES);
  }
}

/* symmAllReduceAddRMSNormFp8: out in e4m3, divided by a given per-tensor
 * scale (0.02) or by the per-token scales the call writes; residualOut
 * into residual (in place). e4m3 keeps 3 mantissa bits: each output within
 * half a step (1/16 relative) of the exact y / scale, clamped to +-448,
 * plus e4m3's smallest step; per-token scales within 1e-5 of the
 * reference. */
static void run_fp8_case(struct tw *w, int dt, size_t tokens, size_t hidden, int per_token) {
  const int es = cw_dt[dt].size, n = w->nranks;
  const size_t elems = tokens * hidden, bytes = elems * es;
  const float given = 0.02f;
  struct cw_buf IN, RES, WT, OUT, SC;
  cw_buf_alloc(w, &IN, CW_STAGED, bytes);
  cw_buf_alloc(w, &RES, CW_STAGED, bytes);
  cw_buf_alloc(w, &WT, CW_STAGED, hidden * es);
  cw_buf_alloc(w, &OUT, CW_STAGED, elems);
  cw_buf_alloc(w, &SC, CW_STAGED, tokens * 4);
  uint8_t *host = malloc(bytes);
  float *scales = malloc(tokens * 4);
  double *x = malloc(elems * sizeof(double));
  REQUIRE(host != NULL && scales != NULL && x != NULL, "out of host memory");
  tw_phase("fp8 out: %s %zu x %zu, %s scales", cw_dt[dt].name, tokens, hidden, per_token ? "per-token" : "a given");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    upload_inputs(r, dt, tokens, hidden, IN.p[i], RES.p[i], WT.p[i], host);
    scales[0] = given;
    CU_REQUIRE(tu_upload(SC.p[i], scales, 4));
  }
  tw_host_barrier(w, "buffers ready");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    void *res = (void *)(uintptr_t)RES.p[i];
    TW_SYMM_REQUIRE(r, symmAllReduceAddRMSNormFp8((void *)(uintptr_t)IN.p[i], res, (void *)(uintptr_t)WT.p[i],
                                                  (void *)(uintptr_t)OUT.p[i], res, (float *)(uintptr_t)SC.p[i],
                                                  per_token, tokens, hidden, EPS, (symmDataType_t)dt, r->comm,
                                                  r->stream));
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "the fp8 call did not finish");
    tw_use(r);
    reference_sums(n, tokens, hidden, x);
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, RES.p[i], bytes));
    size_t wrong = 0, first = 0;
    for (size_t e = 0; e < elems; e++)
      if (dec(dt, cw_get(host, e, es)) != x[e] && wrong++ == 0) first = e;
    TW_CHECK(r, wrong == 0, "fp8 case: residualOut has %zu wrong element(s), the first at %zu", wrong, first);
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(scales, SC.p[i], per_token ? tokens * 4 : 4));
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, OUT.p[i], elems));
    wrong = 0;
    size_t bad_scales = 0;
    for (size_t t = 0; t < tokens; t++) {
      double ss = 0, amax = 0;
      for (size_t h = 0; h < hidden; h++) ss += x[t * hidden + h] * x[t * hidden + h];
      const double inv = 1.0 / sqrt(ss / (double)hidden + (double)EPS);
      for (size_t h = 0; h < hidden; h++) amax = fmax(amax, fabs(x[t * hidden + h] * inv * w_val(h)));
      double scale = given;
      if (per_token) {
        scale = fmax(amax / 448.0, 1.0 / (448.0 * 512.0));
        if (fabs(scales[t] - scale) > 1e-5 * scale) bad_scales++;
        scale = scales[t]; /* the outputs against the scale the call used */
      }
      for (size_t h = 0; h < hidden; h++) {
        double want = x[t * hidden + h] * inv * w_val(h) / scale;
        want = want > 448 ? 448 : want < -448 ? -448 : want;
        const double got = cw_e4m3_to_float(host[t * hidden + h]);
        if (!(fabs(got - want) <= fabs(want) / 16 + 1.0 / 512) && wrong++ == 0) first = t * hidden + h;
      }
    }
    TW_CHECK(r, bad_scales == 0, "fp8 case: %zu per-token scale(s) off the reference by more than 1e-5", bad_scales);
    TW_CHECK(r, wrong == 0, "fp8 case: %zu output(s) off by more than half an e4m3 step; the first at %zu is %g", wrong,
             first, cw_e4m3_to_float(host[first]));
  }
  free(host);
  free(scales);
  free(x);
  tw_host_barrier(w, "fp8 checked");
  cw_buf_free(w, &IN);
  cw_buf_free(w, &RES);
  cw_buf_free(w, &WT);
  cw_buf_free(w, &OUT);
  cw_buf_free(w, &SC);
}

/* Under normwrite: the form by stores back to back with the library's
 * staged all-reduce, which takes the same scratch halves, with no host sync
 * between (fused, all-reduce, fused, all-reduce, fused on each rank's
 * stream): the kernels' scratch protocol across different kernels (the
 * entry sync, coll.cuh next_parity). Every output is checked: the fused
 * calls' against the reference, the all-reduces' (fp32, 4 MiB, rank r
 * contributing r + i % 7) exactly. */
#define INTERLEAVED 3
static void run_interleaved(struct tw *w) {
  const int dt = symmBfloat16, es = 2, n = w->nranks;
  const size_t tokens = 300, hidden = 4096, bytes = tokens * hidden * es, ar_count = 1 << 20;
  struct cw_buf IN, RES, WT, OUT[INTERLEAVED], ROUT[INTERLEAVED], AIN, AOUT[INTERLEAVED - 1];
  cw_buf_alloc(w, &IN, CW_STAGED, bytes);
  cw_buf_alloc(w, &RES, CW_STAGED, bytes);
  cw_buf_alloc(w, &WT, CW_STAGED, hidden * es);
  cw_buf_alloc(w, &AIN, CW_STAGED, ar_count * 4);
  for (int c = 0; c < INTERLEAVED; c++) {
    cw_buf_alloc(w, &OUT[c], CW_STAGED, bytes);
    cw_buf_alloc(w, &ROUT[c], CW_STAGED, bytes);
    if (c + 1 < INTERLEAVED) cw_buf_alloc(w, &AOUT[c], CW_STAGED, ar_count * 4);
  }
  uint8_t *host = malloc(ar_count * 4 > bytes ? ar_count * 4 : bytes);
  REQUIRE(host != NULL, "out of host memory");
  tw_phase("interleaved with symmAllReduce: bf16 %zu x %zu, fp32 %zu", tokens, hidden, ar_count);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    upload_inputs(r, dt, tokens, hidden, IN.p[i], RES.p[i], WT.p[i], host);
    float *f = (float *)host;
    for (size_t e = 0; e < ar_count; e++) f[e] = (float)(r->rank + (int)(e % 7));
    CU_REQUIRE(tu_upload(AIN.p[i], host, ar_count * 4));
  }
  tw_host_barrier(w, "buffers ready");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    void *in = (void *)(uintptr_t)IN.p[i], *res = (void *)(uintptr_t)RES.p[i], *wt = (void *)(uintptr_t)WT.p[i];
    for (int c = 0; c < INTERLEAVED; c++) {
      TW_SYMM_REQUIRE(r, symmAllReduceAddRMSNorm(in, res, wt, (void *)(uintptr_t)OUT[c].p[i], (void *)(uintptr_t)ROUT[c].p[i],
                                                 tokens, hidden, EPS, (symmDataType_t)dt, r->comm, r->stream));
      if (c + 1 < INTERLEAVED)
        TW_SYMM_REQUIRE(r, symmAllReduce((void *)(uintptr_t)AIN.p[i], (void *)(uintptr_t)AOUT[c].p[i], ar_count,
                                         symmFloat32, symmSum, r->comm, r->stream));
    }
  }
  double worst = 0;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "the interleaved calls did not finish");
    tw_use(r);
    for (int c = 0; c < INTERLEAVED; c++) check_outputs(r, n, dt, tokens, hidden, OUT[c].p[i], ROUT[c].p[i], host, &worst);
    for (int c = 0; c + 1 < INTERLEAVED; c++) {
      CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, AOUT[c].p[i], ar_count * 4));
      const float *f = (const float *)host;
      size_t wrong = 0, first = 0;
      for (size_t e = 0; e < ar_count; e++)
        if (f[e] != (float)(n * (n - 1) / 2 + n * (int)(e % 7)) && wrong++ == 0) first = e;
      TW_CHECK(r, wrong == 0, "all-reduce %d between the fused calls: %zu wrong element(s), the first at %zu is %g", c,
               wrong, first, f[first]);
    }
  }
  if (worst > max_err[dt_index(dt)]) max_err[dt_index(dt)] = worst;
  free(host);
  tw_host_barrier(w, "interleaved checked");
  cw_buf_free(w, &IN);
  cw_buf_free(w, &RES);
  cw_buf_free(w, &WT);
  cw_buf_free(w, &AIN);
  for (int c = 0; c < INTERLEAVED; c++) {
    cw_buf_free(w, &OUT[c]);
    cw_buf_free(w, &ROUT[c]);
    if (c + 1 < INTERLEAVED) cw_buf_free(w, &AOUT[c]);
  }
}

/* Bad arguments, each rank alone: refused before anything is enqueued. */
static void bad_input(struct tw *w) {
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    CUdeviceptr a = 0;
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemAlloc(&a, 4 << 20));
    char *in = (char *)(uintptr_t)a, *res = in + (1 << 20), *wt = in + (2 << 20), *out = in + (3 << 20);
    const symmDataType_t bf = symmBfloat16;
    cw_refused(r, "hidden 12", symmAllReduceAddRMSNorm(in, res, wt, out, res, 4, 12, EPS, bf, r->comm, r->stream),
            symmInvalidArgument, "multiple of 8");
    cw_refused(r, "int32", symmAllReduceAddRMSNorm(in, res, wt, out, res, 4, 64, EPS, symmInt32, r->comm, r->stream),
            symmInvalidArgument, "symmBfloat16");
    cw_refused(r, "out = residual", symmAllReduceAddRMSNorm(in, res, wt, res, res, 4, 64, EPS, bf, r->comm, r->stream),
            symmInvalidArgument, "overlap");
    cw_refused(r, "weight misaligned",
            symmAllReduceAddRMSNorm(in, res, wt + 2, out, res, 4, 64, EPS, bf, r->comm, r->stream),
            symmInvalidArgument, "16-byte");
    cw_refused(r, "NULL weight", symmAllReduceAddRMSNorm(in, res, NULL, out, res, 4, 64, EPS, bf, r->comm, r->stream),
            symmInvalidArgument, "weight is NULL");
    cw_refused(r, "negative eps", symmAllReduceAddRMSNorm(in, res, wt, out, res, 4, 64, -1.0f, bf, r->comm, r->stream),
            symmInvalidArgument, "eps");
    cw_refused(r, "hidden 65536",
            symmAllReduceAddRMSNorm(in, res, wt, out, res, 1, 65536, EPS, bf, r->comm, r->stream), symmNotSupported,
            "64 KiB");
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    TW_CHECK(r, async == symmSuccess, "bad arguments left an asynchronous error: %s", tu_result_name(async));
    CU_REQUIRE(tu_cu.cuMemFree(a));
  }
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  if (tw_init_comms(w) != symmSuccess) return;
  /* tokens x hidden: LL-sized (one row, a few, 16-byte rows), 524 and 768
   * KiB in 16 bits (one-shot LL at 2 ranks; above its limit from 3: the
   * two-shot LL form where it fits, by default at 4 and with SYMM_ALGO=ll
   * from 3, else the two-kernel form),
   * from 2 MiB (the two-kernel form), and the widest row (64 KiB: 8 units
   * a thread). */
  static const size_t shapes[][2] = {{1, 4096}, {7, 1024}, {16, 8}, {48, 2048}, {131, 2048}, {96, 4096}, {300, 4096}};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    const int dt = dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      const size_t hidden = dt == symmFloat32 && shapes[s][1] == 8 ? 4 : shapes[s][1];
      run_case(w, dt, shapes[s][0], hidden, CW_STAGED, SEPARATE, 0);
      run_case(w, dt, shapes[s][0], hidden, CW_SYMMETRIC, IN_PLACE, 0);
    }
    /* In place in a graph: by default spread with the own packets (from 2
     * ranks), their flags advanced by the kernel from replay to replay. */
    run_case(w, dt, 4, 4096, CW_SYMMETRIC, IN_PLACE, 1);
    run_case(w, dt, 2, dt == symmFloat32 ? 16384 : 32768, CW_STAGED, SEPARATE, 0);
    run_case(w, dt, 5, 4096, CW_SYMMETRIC, SEPARATE, 1);
    run_case(w, dt, 400, 2048, CW_STAGED, SEPARATE, 1);
    run_case(w, dt, 131, 2048, CW_STAGED, SEPARATE, 1);
    /* fp8 outputs: the fused kernel and the two-kernel form (from 2 MiB). */
    run_fp8_case(w, dt, 1, 4096, 1);
    run_fp8_case(w, dt, 48, 2048, 0);
    run_fp8_case(w, dt, 300, 4096, 1);
    run_fp8_case(w, dt, 131, 2048, 1);
  }
  /* The two-shot form runs with SYMM_ALGO=ll from 3 ranks, and by default
   * at 4 (src/coll/mod.rs LL_TWO_SHOT_DEFAULT_RANKS) without
   * SYMM_CHECK (`spread`, `nospread`, `prefetch`, `nopdl`, `fullsync`, `grid=N`,
   * `batch[=N]`, `loopback`, `noloopback` tune kernels and keep auto's). */
  const char *algo = getenv("SYMM_ALGO"), *check = getenv("SYMM_CHECK");
  int forced_ll = has_token(algo, "ll") && w->nranks >= 3;
  int by_default = auto_choice(algo) && w->nranks == 4 && !(check && atoi(check));
  if (forced_ll || by_default) {
    /* 131 x 2048 bf16 fits the two-shot form at 3 to 8 ranks. */
    residual_per_rank = 1;
    run_case(w, symmBfloat16, 131, 2048, CW_STAGED, SEPARATE, 1);
    run_case(w, symmBfloat16, 131, 2048, CW_SYMMETRIC, IN_PLACE, 0);
    residual_per_rank = 0;
  }
  /* 300 x 4096 bf16 (2.4 MiB) is above the LL forms at every rank count;
   * the form by stores is auto's from 2 ranks (src/coll/defaults.rs
   * NORM_BATCH_DEFAULT_MIN_RANKS). */
  if (has_token(algo, "normwrite") || (auto_choice(algo) && w->nranks >= 2 && !has_token(algo, "nonormwrite"))) {
    residual_per_rank = 1;
    run_case(w, symmBfloat16, 300, 4096, CW_STAGED, SEPARATE, 1);
    run_case(w, symmBfloat16, 300, 4096, CW_SYMMETRIC, IN_PLACE, 0);
    residual_per_rank = 0;
    run_interleaved(w);
  }
  tw_log(w, "largest relative error of out against the fp64 reference: bf16 %.3g, fp16 %.3g, fp32 %.3g "
         "(bounds %.3g, %.3g, %.3g); residualOut exact", max_err[0], max_err[1], max_err[2], tolerance(symmBfloat16),
         tolerance(symmFloat16), tolerance(symmFloat32));
  bad_input(w);
  tw_destroy_comms(w);
}

int main(int argc, char **argv) {
  static struct tw_spec spec = {.name = "coll_allreduce_norm", .modes = "mp,all", .body = body};
  spec.limit_s = 300;
  spec.process_init = cw_process_init;
  return tw_main(&spec, argc, argv);
}
