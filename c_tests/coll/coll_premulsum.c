/*
 * coll_premulsum <mp|all> [--nranks=N]
 *
 * NCCL's pre-multiplied sum (symmRedOpCreatePreMulSum): the sum over ranks
 * of each rank's own scalar times its input. Every rank makes one op per
 * type with its own scalar (floats 1 / (r + 1), integers r + 2: different on
 * every rank, as nccl-tests gives them, so a scale after the sum would be
 * wrong); even ranks pass it from the host, odd ranks in device memory.
 *
 *   cases    all-reduce, reduce-scatter and reduce (root n - 1) x 12 types
 *            x counts 1, 1027, 65539, out of place and in place, plain and
 *            symmetric buffers. Checked on the host against the sum of each
 *            rank's product rounded once to the type (the library's model,
 *            coll_util's cw_reduce), within the type's tolerance; out of
 *            place, every rank's input must be unchanged.
 *   graph    an all-reduce and a reduce-scatter (whose scaled copy is a
 *            stream-ordered allocation: memory nodes) captured with a
 *            device scalar, replayed 3 times with the scalar rewritten
 *            before each: every replay sums with the current scalar.
 *   bad      refused with symmInvalidArgument and a message naming the
 *            problem, nothing launched: NULL op or scalar, bad type or
 *            residence, a device scalar passed as host-immediate, a host
 *            scalar passed as device, an op used with another type, an op
 *            never made or destroyed, destroying a built-in op or one twice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#define MAX_COUNT 65539
#define REPLAYS 3

/* Picked in main, before the rank processes fork: one seed for all. */
static uint64_t g_seed;

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_REDUCE, NCOLLS };
static const char *const coll_name[NCOLLS] = {"all-reduce", "reduce-scatter", "reduce"};

/* The bits of value `x` (a small exact number) as an element of dt. */
static uint64_t encode(int dt, double x) {
  switch (dt) {
    case symmFloat16: return cw_float_to_f16((float)x);
    case symmBfloat16: return cw_float_to_bf16((float)x);
    case symmFloat8e4m3: return cw_float_to_e4m3((float)x);
    case symmFloat8e5m2: return cw_float_to_e5m2((float)x);
    case symmFloat32: {
      float f = (float)x;
      uint32_t u;
      memcpy(&u, &f, 4);
      return u;
    }
    case symmFloat64: {
      uint64_t u;
      memcpy(&u, &x, 8);
      return u;
    }
    default: return (uint64_t)(int64_t)x;
  }
}

/* Rank r's scalar for dt, different on every rank: 1 / (r + 1) rounded to
 * the type for floats (at most 1, so no fp16 product overflows into an
 * inf that a sum would turn into NaN), r + 2 for integers (wrapping). */
static uint64_t scalar_of(int dt, int r) {
  return encode(dt, cw_dt[dt].is_float ? 1.0 / (r + 1) : (double)(r + 2));
}

/* s * x as the library computes it: in fp32 for 16- and 8-bit floats,
 * rounded once to the type; integers wrap in their width. */
static uint64_t product(int dt, uint64_t x, uint64_t s) {
  const int size = cw_dt[dt].size;
  switch (dt) {
    case symmFloat64: {
      double a, b;
      memcpy(&a, &x, 8);
      memcpy(&b, &s, 8);
      double p = a * b;
      uint64_t u;
      memcpy(&u, &p, 8);
      return u;
    }
    case symmFloat32: case symmFloat16: case symmBfloat16: case symmFloat8e4m3: case symmFloat8e5m2: {
      const float p = (float)cw_value(dt, x) * (float)cw_value(dt, s);
      return encode(dt, p);
    }
    default: {
      const uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
      return (x * s) & mask;
    }
  }
}

struct world_bufs {
  struct cw_buf in, out;
  CUdeviceptr scalar[TW_MAX_RANKS]; /* each rank's device scalars, one slot a type */
  symmRedOp_t op[TW_MAX_RANKS][CW_NDTYPES];
};

static void make_ops(struct tw *w, struct world_bufs *b) {
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemAlloc(&b->scalar[i], 8 * CW_NDTYPES));
    for (int dt = 0; dt < CW_NDTYPES; dt++) {
      uint64_t s = scalar_of(dt, r->rank);
      const CUdeviceptr at = b->scalar[i] + 8 * (CUdeviceptr)dt;
      CU_REQUIRE(tu_upload(at, &s, (size_t)cw_dt[dt].size));
      if (r->rank % 2 == 0)
        TW_SYMM_REQUIRE(r, symmRedOpCreatePreMulSum(&b->op[i][dt], &s, (symmDataType_t)dt, symmScalarHostImmediate, r->comm));
      else
        TW_SYMM_REQUIRE(r, symmRedOpCreatePreMulSum(&b->op[i][dt], (void *)(uintptr_t)at, (symmDataType_t)dt,
                                                    symmScalarDevice, r->comm));
      TW_CHECK(r, (int)b->op[i][dt] >= symmNumOps, "op number %d is a built-in op's", (int)b->op[i][dt]);
    }
  }
}

/* Elements of the input and output of collective c with `count`. */
static size_t in_elems(int c, size_t count, int n) { return c == C_REDUCE_SCATTER ? count * (size_t)n : count; }

static void *at(CUdeviceptr p, size_t elems, int size) { return (void *)(uintptr_t)(p + elems * (size_t)size); }

static symmResult_t enqueue(struct tw_rank *r, int c, int dt, symmRedOp_t op, CUdeviceptr in, CUdeviceptr out,
                            size_t count, int in_place) {
  const int size = cw_dt[dt].size, n = tw_world()->nranks;
  const void *send = at(in, 0, size);
  switch (c) {
    case C_ALLREDUCE:
      return symmAllReduce(send, in_place ? at(in, 0, size) : at(out, 0, size), count, (symmDataType_t)dt, op, r->comm,
                           r->stream);
    case C_REDUCE_SCATTER:
      return symmReduceScatter(send, in_place ? at(in, count * (size_t)r->rank, size) : at(out, 0, size), count,
                               (symmDataType_t)dt, op, r->comm, r->stream);
    default:
      return symmReduce(send, in_place ? at(in, 0, size) : at(out, 0, size), count, (symmDataType_t)dt, op, n - 1,
                        r->comm, r->stream);
  }
}

/* Element j of the expected output of collective c (its index in the
 * sum's input is j, or the rank's block for reduce-scatter). */
static uint64_t expected(int c, int dt, uint64_t seed, int rank, size_t count, size_t j, const uint64_t *scalars) {
  uint64_t v[TW_MAX_RANKS];
  const int n = tw_world()->nranks;
  const size_t idx = c == C_REDUCE_SCATTER ? (size_t)rank * count + j : j;
  for (int q = 0; q < n; q++) v[q] = product(dt, cw_gen(dt, seed, q, idx), scalars[q]);
  return cw_reduce(dt, 0, v, n);
}

static void run_case(struct tw *w, struct world_bufs *b, int c, int dt, size_t count, int in_place, uint64_t seed,
                     unsigned char *host) {
  const int n = w->nranks, size = cw_dt[dt].size;
  const size_t ni = in_elems(c, count, n);
  uint64_t scalars[TW_MAX_RANKS];
  for (int q = 0; q < n; q++) scalars[q] = scalar_of(dt, q);
  tw_phase("%s, %s, count %zu, %s, %s buffers", coll_name[c], cw_dt[dt].name, count, in_place ? "in place" : "out of place",
           cw_class_name[b->in.cls]);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    for (size_t j = 0; j < ni; j++) cw_put(host, j, size, cw_gen(dt, seed, r->rank, j));
    tw_use(r);
    CU_REQUIRE(tu_upload(b->in.p[i], host, ni * (size_t)size));
    CU_REQUIRE(cw_cu.cuMemsetD8Async(b->out.p[i], 0xA5, b->out.bytes, r->stream));
    TW_CHECK(r, tw_stream_poll(r, r->stream, 30.0) == 0, "the set-up did not finish");
  }
  tw_host_barrier(w, "inputs ready");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    TW_SYMM_REQUIRE(r, enqueue(r, c, dt, b->op[i][dt], b->in.p[i], b->out.p[i], count, in_place));
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    TW_REQUIRE(r, tw_stream_poll(r, r->stream, 60.0) == 0, "%s did not finish", coll_name[c]);
    if (c == C_REDUCE && r->rank != n - 1 && in_place) continue; /* off the root in place: nothing defined */
    tw_use(r);
    const int root_out = !(c == C_REDUCE && r->rank != n - 1);
    if (root_out) {
      CUdeviceptr out = in_place ? (c == C_REDUCE_SCATTER ? b->in.p[i] + (CUdeviceptr)(count * (size_t)r->rank * size)
                                                          : b->in.p[i])
                                 : b->out.p[i];
      CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, out, count * (size_t)size));
      size_t wrong = 0, near = 0, first = 0;
      uint64_t got0 = 0, want0 = 0;
      for (size_t j = 0; j < count; j++) {
        const uint64_t want = expected(c, dt, seed, r->rank, count, j, scalars), got = cw_get(host, j, size);
        const int k = cw_compare(dt, got, want);
        if (k == 1) near++;
        if (k == 2 && wrong++ == 0) first = j, got0 = got, want0 = want;
      }
      char g[64], e[64];
      TW_CHECK(r, wrong == 0, "%s %s count %zu %s (%s): %zu wrong (%zu within tolerance); element %zu is %s, expected %s",
               coll_name[c], cw_dt[dt].name, count, in_place ? "in place" : "out of place", cw_class_name[b->in.cls], wrong,
               near, first, cw_render(dt, got0, g, sizeof g), cw_render(dt, want0, e, sizeof e));
    }
    if (!in_place) {
      /* The input is the caller's and const: the scaled copy went elsewhere. */
      CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, b->in.p[i], ni * (size_t)size));
      size_t changed = 0;
      for (size_t j = 0; j < ni; j++) changed += cw_get(host, j, size) != cw_gen(dt, seed, r->rank, j);
      TW_CHECK(r, changed == 0, "%s %s count %zu: %zu element(s) of the input changed", coll_name[c], cw_dt[dt].name,
               count, changed);
    }
  }
  tw_host_barrier(w, "checked");
}

/* The scalar in device memory is read when the collective runs: a graph
 * replayed after the scalar is rewritten sums with the new value. */
static void graph_replays(struct tw *w, struct world_bufs *b, uint64_t seed, unsigned char *host) {
  const int n = w->nranks, dt = symmFloat32;
  const size_t count = 4099;
  CUgraph graph[TW_MAX_RANKS];
  CUgraphExec exec[TW_MAX_RANKS];
  symmRedOp_t op[TW_MAX_RANKS];
  tw_phase("graph: capture");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    for (size_t j = 0; j < count * (size_t)n; j++) cw_put(host, j, 4, cw_gen(dt, seed, r->rank, j));
    CU_REQUIRE(tu_upload(b->in.p[i], host, count * (size_t)n * 4));
    void *scalar = (void *)(uintptr_t)(b->scalar[i] + 8 * (CUdeviceptr)dt);
    TW_SYMM_REQUIRE(r, symmRedOpCreatePreMulSum(&op[i], scalar, symmFloat32, symmScalarDevice, r->comm));
    TW_CU(tu_cu.cuStreamBeginCapture(r->stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    /* Out of place, so every replay starts from the same input. */
    TW_SYMM_REQUIRE(r, symmAllReduce(at(b->in.p[i], 0, 4), at(b->out.p[i], 0, 4), count, symmFloat32, op[i], r->comm, r->stream));
    TW_SYMM_REQUIRE(r, symmReduceScatter(at(b->in.p[i], 0, 4), at(b->out.p[i], count, 4), count, symmFloat32, op[i],
                                         r->comm, r->stream));
    TW_CU(tu_cu.cuStreamEndCapture(r->stream, &graph[i]));
    TW_CU(tu_cu.cuGraphInstantiateWithFlags(&exec[i], graph[i], 0));
  }
  tw_host_barrier(w, "graphs made");
  for (int rep = 0; rep < REPLAYS; rep++) {
    uint64_t scalars[TW_MAX_RANKS];
    for (int q = 0; q < n; q++) scalars[q] = encode(dt, 0.25 * (q + 1) * (rep + 1) * (rep % 2 ? -1 : 1));
    tw_phase("graph: replay %d", rep);
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      tw_use(r);
      CU_REQUIRE(tu_upload(b->scalar[i] + 8 * (CUdeviceptr)dt, &scalars[r->rank], 4));
    }
    tw_host_barrier(w, "scalars written");
    for (int i = 0; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      TW_CU(tu_cu.cuGraphLaunch(exec[i], w->r[i].stream));
    }
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      TW_REQUIRE(r, tw_stream_poll(r, r->stream, 60.0) == 0, "replay %d did not finish", rep);
      tw_use(r);
      CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, b->out.p[i], 2 * count * 4));
      size_t wrong = 0;
      for (size_t j = 0; j < count; j++) {
        wrong += cw_compare(dt, cw_get(host, j, 4), expected(C_ALLREDUCE, dt, seed, r->rank, count, j, scalars)) == 2;
        wrong += cw_compare(dt, cw_get(host, count + j, 4),
                            expected(C_REDUCE_SCATTER, dt, seed, r->rank, count, j, scalars)) == 2;
      }
      TW_CHECK(r, wrong == 0, "replay %d: %zu wrong element(s) of %zu", rep, wrong, 2 * count);
    }
    tw_host_barrier(w, "replay checked");
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(tu_cu.cuGraphExecDestroy(exec[i]));
    TW_CU(tu_cu.cuGraphDestroy(graph[i]));
    TW_SYMM_REQUIRE(r, symmRedOpDestroy(op[i], r->comm));
  }
  /* Put the per-type device scalars back for anything after. */
  for (int i = 0; i < w->nlocal; i++) {
    uint64_t s = scalar_of(dt, w->r[i].rank);
    tw_use(&w->r[i]);
    CU_REQUIRE(tu_upload(b->scalar[i] + 8 * (CUdeviceptr)dt, &s, 4));
  }
}

static void refused(struct tw_rank *r, const char *what, symmResult_t rc, const char *says) {
  cw_refused(r, what, rc, symmInvalidArgument, says);
}

/* Bad arguments, on each rank alone: nothing is launched. */
static void bad_input(struct tw *w, struct world_bufs *b) {
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    float half = 0.5f;
    symmRedOp_t op = (symmRedOp_t)12345, made;
    void *dev = (void *)(uintptr_t)b->scalar[i];
    void *buf = at(b->in.p[i], 0, 4);
    refused(r, "NULL op", symmRedOpCreatePreMulSum(NULL, &half, symmFloat32, symmScalarHostImmediate, r->comm), "op is NULL");
    refused(r, "NULL scalar", symmRedOpCreatePreMulSum(&op, NULL, symmFloat32, symmScalarHostImmediate, r->comm),
            "scalar is NULL");
    refused(r, "bad datatype", symmRedOpCreatePreMulSum(&op, &half, (symmDataType_t)99, symmScalarHostImmediate, r->comm),
            "datatype");
    refused(r, "bad residence", symmRedOpCreatePreMulSum(&op, &half, symmFloat32, (symmScalarResidence_t)7, r->comm),
            "residence");
    refused(r, "device scalar as host-immediate",
            symmRedOpCreatePreMulSum(&op, dev, symmFloat32, symmScalarHostImmediate, r->comm), "device memory");
    refused(r, "host scalar as device", symmRedOpCreatePreMulSum(&op, &half, symmFloat32, symmScalarDevice, r->comm),
            "not memory known to CUDA");
    TW_CHECK(r, (int)op == 12345, "a refused create wrote *op = %d", (int)op);
    refused(r, "an op of another type", symmAllReduce(buf, buf, 4, symmInt32, b->op[i][symmFloat32], r->comm, r->stream),
            "was created for");
    refused(r, "an op never made", symmAllReduce(buf, buf, 4, symmFloat32, (symmRedOp_t)4321, r->comm, r->stream),
            "nor a live op");
    refused(r, "a negative op", symmReduce(buf, buf, 4, symmFloat32, (symmRedOp_t)-1, 0, r->comm, r->stream), "nor a live op");
    TW_SYMM_REQUIRE(r, symmRedOpCreatePreMulSum(&made, &half, symmFloat32, symmScalarHostImmediate, r->comm));
    TW_SYMM_REQUIRE(r, symmRedOpDestroy(made, r->comm));
    refused(r, "a destroyed op", symmReduceScatter(buf, buf, 1, symmFloat32, made, r->comm, r->stream), "nor a live op");
    refused(r, "destroyed twice", symmRedOpDestroy(made, r->comm), "not a live op");
    refused(r, "destroying a built-in op", symmRedOpDestroy(symmSum, r->comm), "built-in");
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    TW_CHECK(r, async == symmSuccess, "bad arguments left an asynchronous error: %s", tu_result_name(async));
  }
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  if (tw_init_comms(w) != symmSuccess) return;
  const int n = w->nranks;
  const uint64_t seed = g_seed;
  tw_log(w, "seed %llu (COLL_SEED to repeat)", (unsigned long long)seed);
  unsigned char *host = malloc((size_t)MAX_COUNT * (size_t)n * 8);
  REQUIRE(host != NULL, "out of host memory");
  static const size_t counts[] = {1, 1027, MAX_COUNT};
  static const enum cw_class classes[] = {CW_STAGED, CW_SYMMETRIC};
  for (size_t k = 0; k < sizeof classes / sizeof classes[0]; k++) {
    struct world_bufs b;
    memset(&b, 0, sizeof b);
    cw_buf_alloc(w, &b.in, classes[k], (size_t)MAX_COUNT * (size_t)n * 8);
    cw_buf_alloc(w, &b.out, classes[k], (size_t)MAX_COUNT * (size_t)n * 8);
    make_ops(w, &b);
    for (int c = 0; c < NCOLLS; c++)
      for (int dt = 0; dt < CW_NDTYPES; dt++)
        for (size_t m = 0; m < sizeof counts / sizeof counts[0]; m++)
          for (int in_place = 0; in_place < 2; in_place++) run_case(w, &b, c, dt, counts[m], in_place, seed + m, host);
    if (k == 0) {
      graph_replays(w, &b, seed, host);
      bad_input(w, &b);
    }
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      for (int dt = 0; dt < CW_NDTYPES; dt++) TW_SYMM_REQUIRE(r, symmRedOpDestroy(b.op[i][dt], r->comm));
      tw_use(r);
      CU_REQUIRE(tu_cu.cuMemFree(b.scalar[i]));
    }
    tw_host_barrier(w, "buffers done");
    cw_buf_free(w, &b.in);
    cw_buf_free(w, &b.out);
  }
  free(host);
  tw_check_async(w, "the pre-multiplied sums");
  tw_destroy_comms(w);
}

int main(int argc, char **argv) {
  static struct tw_spec spec = {.name = "coll_premulsum", .modes = "mp,all", .mp_one_rank = 1, .body = body};
  spec.limit_s = 600;
  spec.process_init = cw_process_init;
  g_seed = cw_pick_seed();
  return tw_main(&spec, argc, argv);
}
