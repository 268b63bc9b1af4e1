/*
 * coll_graph <mp|all> [--nranks=N] [--replays=N]
 *
 * CUDA graph capture and replay of the collectives over n ranks. For each
 * buffer class (symmetric, registered, staged) one graph per rank is
 * captured on a non-default stream (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL; in
 * "all" mode every rank's stream is captured at once, since a send/recv
 * group spans every communicator). The graph holds, for a small (4099) and
 * a large (3000001, several staging rounds / p2p chunks) count:
 *   all-reduce bf16 sum, all-reduce int32 max, all-gather bf16,
 *   reduce-scatter int32 sum, broadcast int32 (root 0 small, root n-1
 *   large), all-to-all bf16, and a send/recv ring group (int32: send to
 *   rank + 1, receive from rank - 1)
 * preceded by input kernels that derive every input from a replay counter
 * in device memory (so every replay has different inputs), followed by
 * check kernels that compare every output element of every replay with its
 * expected value (computed on the device from the same counter; bf16
 * inputs are small integers so the sums are exact), and a kernel that
 * advances the counter.
 *
 * The graph is replayed 1000 times (--replays; CTest's shared-device runs
 * use fewer: there every cross-rank wait costs a context switch). After
 * replay 0, every 50th replay and
 * the last one, the host also (a) copies every output back and compares it
 * with a host computation of the expected values, and (b) runs the same
 * sequence eagerly (outside the graph) for the same replay number, and
 * requires the eager outputs to be bit-identical to the graph's; eager calls
 * interleaved with replays must not disturb either. At the end: zero
 * device-side mismatches over all replays, the counter equals the number of
 * replays, and symmCommGetAsyncError is symmSuccess throughout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_pattern.h"
#include "coll_util.h"

#ifndef COLL_KERNELS_FATBIN
#error "COLL_KERNELS_FATBIN must be defined by the build"
#endif

#define NOPS 14
#define SAMPLE_EVERY 50

static const char *const cg_name[] = {"allreduce-bf16-sum", "allreduce-int32-max", "allgather-bf16",
                                      "reducescatter-int32-sum", "broadcast-int32", "alltoall-bf16",
                                      "sendrecv-int32"};

struct gop {
  uint32_t coll, kind, op_id, root;
  size_t count, in_elems, out_elems, in_off, out_off;
};

struct rank_k {
  CUmodule mod;
  CUfunction fill, check, bump;
  CUdeviceptr ctr; /* [0] graph counter, [1] eager counter */
  CUdeviceptr res; /* [0..7] graph result, [8..15] eager result */
  struct cw_host host_g, host_e;
};

static struct gop g_ops[NOPS];
static size_t g_in_bytes, g_out_bytes, g_max_out;
static int g_replays = 1000;
static uint64_t g_seed;

static void make_ops(int nranks) {
  static const size_t counts[2] = {4099, 3000001};
  int k = 0;
  size_t in_off = 0, out_off = 0;
  for (int s = 0; s < 2; s++) {
    const size_t c = counts[s];
    const struct {
      uint32_t coll, kind;
    } list[7] = {{CG_AR_SUM, CG_BF16}, {CG_AR_MAX, CG_I32}, {CG_AG, CG_BF16}, {CG_RS_SUM, CG_I32},
                 {CG_BC, CG_I32},      {CG_A2A, CG_BF16},   {CG_SR, CG_I32}};
    for (int j = 0; j < 7; j++, k++) {
      struct gop *o = &g_ops[k];
      o->coll = list[j].coll;
      o->kind = list[j].kind;
      o->op_id = (uint32_t)k;
      o->root = s ? (uint32_t)nranks - 1 : 0; /* broadcast: root 0 for the small count, n-1 for the large */
      o->count = c;
      const size_t es = o->kind == CG_BF16 ? 2 : 4;
      o->in_elems = (o->coll == CG_RS_SUM || o->coll == CG_A2A) ? (size_t)nranks * c : c;
      o->out_elems = (o->coll == CG_AG || o->coll == CG_A2A) ? (size_t)nranks * c : c;
      o->in_off = in_off;
      o->out_off = out_off;
      in_off += (o->in_elems * es + 4095) / 4096 * 4096;
      out_off += (o->out_elems * es + 4095) / 4096 * 4096;
      if (o->out_elems * es > g_max_out) g_max_out = o->out_elems * es;
    }
  }
  g_in_bytes = in_off;
  g_out_bytes = out_off;
}

static size_t op_es(const struct gop *o) { return o->kind == CG_BF16 ? 2 : 4; }
static symmDataType_t op_dt(const struct gop *o) { return o->kind == CG_BF16 ? symmBfloat16 : symmInt32; }

static void launch(const struct tw_rank *r, CUfunction fn, uint64_t n, void **params, const char *what) {
  uint64_t blocks = n ? (n + 255) / 256 : 1;
  if (blocks > 1024) blocks = 1024;
  CUresult rc = tu_cu.cuLaunchKernel(fn, (unsigned)blocks, 1, 1, n ? 256 : 32, 1, 1, 0, r->stream, params, NULL);
  TW_REQUIRE(r, rc == 0, "cuLaunchKernel(%s): %s", what, tu_cu_error(rc));
}

/* The whole sequence on every local rank's stream (captured or eager).
 * ctr_slot 0 = graph counter/result, 1 = eager. */
static void enqueue_sequence(struct tw *w, struct rank_k *rk, const struct cw_buf *in, const struct cw_buf *out,
                             uint32_t seed, int slot, int bump) {
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    for (int k = 0; k < NOPS; k++) {
      const struct gop *o = &g_ops[k];
      CUdeviceptr buf = in->p[i] + o->in_off, ctr = rk[i].ctr + 4 * (size_t)slot;
      uint64_t n = o->in_elems;
      uint32_t kind = o->kind, sd = seed, rank = (uint32_t)r->rank, op = o->op_id;
      void *p[] = {&buf, &n, &kind, &sd, &rank, &op, &ctr};
      launch(r, rk[i].fill, n, p, "cg_fill");
    }
    /* A memset node just before the first collective: on GPUs of their
     * own (not shared) an LL kernel is captured as a programmatic dependent, and its
     * predecessor need not be a kernel. (Word 8 of ctr: unused.) */
    TW_CU(cw_cu.cuMemsetD32Async(rk[i].ctr + 32, 0, 1, r->stream));
  }
  for (int k = 0; k < NOPS; k++) {
    const struct gop *o = &g_ops[k];
    const symmDataType_t dt = op_dt(o);
    if (o->coll == CG_SR) {
      symmResult_t rc = symmGroupStart();
      REQUIRE(rc == symmSuccess, "symmGroupStart: %s", tu_result_name(rc));
      for (int i = 0; i < w->nlocal; i++) {
        struct tw_rank *r = &w->r[i];
        void *sp = (void *)(uintptr_t)(in->p[i] + o->in_off), *rp = (void *)(uintptr_t)(out->p[i] + o->out_off);
        const int next = (r->rank + 1) % w->nranks, prev = (r->rank + w->nranks - 1) % w->nranks;
        TW_SYMM_REQUIRE(r, symmSend(sp, o->count, dt, next, r->comm, r->stream));
        TW_SYMM_REQUIRE(r, symmRecv(rp, o->count, dt, prev, r->comm, r->stream));
      }
      rc = symmGroupEnd();
      REQUIRE(rc == symmSuccess, "symmGroupEnd (sendrecv, count %zu): %s (%s)", o->count, tu_result_name(rc),
              symmGetLastError(w->r[0].comm));
      continue;
    }
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      const void *sp = (const void *)(uintptr_t)(in->p[i] + o->in_off);
      void *rp = (void *)(uintptr_t)(out->p[i] + o->out_off);
      switch (o->coll) {
        case CG_AR_SUM: TW_SYMM_REQUIRE(r, symmAllReduce(sp, rp, o->count, dt, symmSum, r->comm, r->stream)); break;
        case CG_AR_MAX: TW_SYMM_REQUIRE(r, symmAllReduce(sp, rp, o->count, dt, symmMax, r->comm, r->stream)); break;
        case CG_AG: TW_SYMM_REQUIRE(r, symmAllGather(sp, rp, o->count, dt, r->comm, r->stream)); break;
        case CG_RS_SUM:
          TW_SYMM_REQUIRE(r, symmReduceScatter(sp, rp, o->count, dt, symmSum, r->comm, r->stream));
          break;
        case CG_BC:
          TW_SYMM_REQUIRE(r, symmBroadcast(sp, rp, o->count, dt, (int)o->root, r->comm, r->stream));
          break;
        default: TW_SYMM_REQUIRE(r, symmAllToAll(sp, rp, o->count, dt, r->comm, r->stream)); break;
      }
    }
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    for (int k = 0; k < NOPS; k++) {
      const struct gop *o = &g_ops[k];
      CUdeviceptr buf = out->p[i] + o->out_off, ctr = rk[i].ctr + 4 * (size_t)slot,
                  res = rk[i].res + 64 * (size_t)slot;
      uint64_t n = o->out_elems, count = o->count;
      uint32_t coll = o->coll, kind = o->kind, rank = (uint32_t)r->rank, nranks = (uint32_t)w->nranks,
               root = o->root, sd = seed, op = o->op_id;
      void *p[] = {&buf, &n, &coll, &kind, &count, &rank, &nranks, &root, &sd, &op, &ctr, &res};
      launch(r, rk[i].check, n, p, "cg_check");
    }
    if (bump) {
      CUdeviceptr ctr = rk[i].ctr;
      void *p[] = {&ctr};
      launch(r, rk[i].bump, 0, p, "cg_bump");
    }
  }
}

/* Host check of one rank's outputs (host copy `h`) for replay `replay`. */
struct hcheck {
  const struct gop *o;
  const unsigned char *h;
  uint32_t seed, rank, nranks, replay;
  size_t bad[CW_MAX_THREADS], first[CW_MAX_THREADS];
};
static void hcheck_range(size_t lo, size_t hi, int tid, void *arg) {
  struct hcheck *x = arg;
  const struct gop *o = x->o;
  const int es = (int)op_es(o);
  x->bad[tid] = 0;
  x->first[tid] = (size_t)-1;
  for (size_t i = lo; i < hi; i++) {
    uint32_t want = cp_graph_expected(o->coll, o->kind, x->seed, x->rank, x->nranks, o->root, o->op_id, x->replay,
                                      o->count, i);
    if ((uint32_t)cw_get(x->h, i, es) != want && x->bad[tid]++ == 0) x->first[tid] = i;
  }
}

/* Copy rank i's outputs to host (one op at a time into `h`, packed at the
 * op's out_off), after the stream is idle. */
static void fetch_outputs(struct tw *w, int i, const struct cw_buf *out, struct cw_host *h) {
  struct tw_rank *r = &w->r[i];
  tw_use(r);
  TW_CU(cw_cu.cuMemcpyDtoHAsync(h->p, out->p[i], g_out_bytes, r->stream));
}

static int sample_and_eager(struct tw *w, struct rank_k *rk, const struct cw_buf *in, const struct cw_buf *out,
                            uint32_t seed, uint32_t replay, const char *cls) {
  int failed = 0;
  tw_phase("%s: host check of graph replay %u", cls, replay);
  for (int i = 0; i < w->nlocal; i++) fetch_outputs(w, i, out, &rk[i].host_g);
  tw_sync_all(w, 120, "copying graph outputs");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    for (int k = 0; k < NOPS; k++) {
      struct hcheck x;
      memset(&x, 0, sizeof x);
      x.o = &g_ops[k];
      x.h = (const unsigned char *)rk[i].host_g.p + g_ops[k].out_off;
      x.seed = seed;
      x.rank = (uint32_t)r->rank;
      x.nranks = (uint32_t)w->nranks;
      x.replay = replay;
      cw_par_for(g_ops[k].out_elems, hcheck_range, &x);
      size_t bad = 0, first = (size_t)-1;
      for (int t = 0; t < cw_threads(); t++) {
        bad += x.bad[t];
        if (x.bad[t] && x.first[t] < first) first = x.first[t];
      }
      if (bad) {
        const struct gop *o = &g_ops[k];
        tw_fail_at(__FILE__, __LINE__, r,
                   "%s graph replay %u: %s count %zu: %zu of %zu output elements wrong (host check), first %zu: "
                   "got 0x%x expected 0x%x",
                   cls, replay, cg_name[o->coll], o->count, bad, o->out_elems, first,
                   (unsigned)cw_get(x.h, first, (int)op_es(o)),
                   cp_graph_expected(o->coll, o->kind, seed, x.rank, x.nranks, o->root, o->op_id, replay, o->count,
                                     first));
        failed = 1;
      }
    }
  }
  /* The same replay number, eagerly. */
  tw_phase("%s: eager run of replay %u", cls, replay);
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(cw_cu.cuMemsetD32Async(rk[i].ctr + 4, replay, 1, w->r[i].stream));
    TW_CU(cw_cu.cuMemsetD8Async(out->p[i], 0xa5, g_out_bytes, w->r[i].stream)); /* no stale graph output */
  }
  enqueue_sequence(w, rk, in, out, seed, 1, 0);
  for (int i = 0; i < w->nlocal; i++) fetch_outputs(w, i, out, &rk[i].host_e);
  tw_sync_all(w, 120, "eager run");
  for (int i = 0; i < w->nlocal; i++) {
    for (int k = 0; k < NOPS; k++) {
      const struct gop *o = &g_ops[k];
      const unsigned char *a = (const unsigned char *)rk[i].host_g.p + o->out_off;
      const unsigned char *e = (const unsigned char *)rk[i].host_e.p + o->out_off;
      size_t nb = o->out_elems * op_es(o);
      if (memcmp(a, e, nb) != 0) {
        size_t j = 0;
        while (j < nb && a[j] == e[j]) j++;
        tw_fail_at(__FILE__, __LINE__, &w->r[i],
                   "%s replay %u: %s count %zu: graph and eager outputs differ, first at byte %zu (element %zu): "
                   "graph 0x%02x eager 0x%02x",
                   cls, replay, cg_name[o->coll], o->count, j, j / op_es(o), a[j], e[j]);
        failed = 1;
      }
    }
  }
  tw_check_async(w, "graph sample");
  return failed;
}

static void read_result(const struct tw_rank *r, CUdeviceptr res, unsigned long long out[8]) {
  tw_use(r);
  TW_CU(tu_cu.cuMemcpyDtoH(out, res, 64));
}

static void run_class(struct tw *w, struct rank_k *rk, enum cw_class cls) {
  const char *cname = cw_class_name[cls];
  const uint32_t seed = (uint32_t)cw_mix64(g_seed + (uint64_t)cls);
  struct cw_buf in, out;
  cw_buf_alloc(w, &in, cls, g_in_bytes);
  cw_buf_alloc(w, &out, cls, g_out_bytes);
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(cw_cu.cuMemsetD32Async(rk[i].ctr, 0, 2, w->r[i].stream));
    TW_CU(cw_cu.cuMemsetD8Async(rk[i].res, 0, 128, w->r[i].stream));
  }
  tw_sync_all(w, 60, "reset counters");

  /* Capture (every local stream at once). */
  tw_phase("%s: capture", cname);
  CUgraph graph[TW_MAX_RANKS] = {0};
  CUgraphExec exec[TW_MAX_RANKS] = {0};
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuStreamBeginCapture(w->r[i].stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  }
  enqueue_sequence(w, rk, &in, &out, seed, 0, 1);
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    CUresult rc = tu_cu.cuStreamEndCapture(w->r[i].stream, &graph[i]);
    TW_REQUIRE(&w->r[i], rc == 0 && graph[i], "cuStreamEndCapture: %s (did a library call invalidate the capture?)",
               tu_cu_error(rc));
  }
  /* Only after every capture of this thread has ended. */
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuGraphInstantiateWithFlags(&exec[i], graph[i], 0));
  }

  /* Replays. */
  double t0 = tu_now(), sampling = 0;
  int samples = 0, sample_fail = 0;
  for (int k = 0; k < g_replays; k++) {
    tw_phase("%s: graph replay %d of %d", cname, k, g_replays);
    for (int i = 0; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      TW_CU(tu_cu.cuGraphLaunch(exec[i], w->r[i].stream));
    }
    if (k == 0 || (k + 1) % SAMPLE_EVERY == 0 || k == g_replays - 1) {
      tw_sync_all(w, 120, "graph replay");
      double s0 = tu_now();
      sample_fail |= sample_and_eager(w, rk, &in, &out, seed, (uint32_t)k, cname);
      samples++;
      sampling += tu_now() - s0;
    }
  }
  tw_sync_all(w, 120, "last replay");
  double total = tu_now() - t0;

  for (int i = 0; i < w->nlocal; i++) {
    const struct tw_rank *r = &w->r[i];
    unsigned long long gres[8], eres[8];
    uint32_t ctr[2];
    read_result(r, rk[i].res, gres);
    read_result(r, rk[i].res + 64, eres);
    TW_CU(tu_cu.cuMemcpyDtoH(ctr, rk[i].ctr, sizeof ctr));
    TW_CHECK(r, ctr[0] == (uint32_t)g_replays, "%s: the graph's replay counter is %u after %d replays", cname, ctr[0],
             g_replays);
    if (gres[0])
      tw_fail_at(__FILE__, __LINE__, r,
                 "%s: %llu wrong output elements over %d graph replays (device check); first: replay %llu, %s count "
                 "%zu, index %llu: got 0x%llx expected 0x%llx",
                 cname, gres[0], g_replays, gres[2], cg_name[g_ops[gres[3] % NOPS].coll], g_ops[gres[3] % NOPS].count,
                 gres[4], gres[5], gres[6]);
    if (eres[0])
      tw_fail_at(__FILE__, __LINE__, r,
                 "%s: %llu wrong output elements in the eager runs (device check); first: replay %llu, %s count %zu, "
                 "index %llu: got 0x%llx expected 0x%llx",
                 cname, eres[0], eres[2], cg_name[g_ops[eres[3] % NOPS].coll], g_ops[eres[3] % NOPS].count, eres[4],
                 eres[5], eres[6]);
    tw_log(w, "%-10s rank %d: %d replays of %d collectives (device-checked: %llu wrong elements), %d host-checked "
           "samples + eager comparisons%s; %.2f s total, %.2f s sampling, %.0f us/replay otherwise",
           cname, r->rank, g_replays, NOPS, gres[0], samples, sample_fail ? " (FAILED)" : "", total, sampling,
           (total - sampling) / g_replays * 1e6);
  }
  tw_check_async(w, "graph replays");

  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuGraphExecDestroy(exec[i]));
    TW_CU(tu_cu.cuGraphDestroy(graph[i]));
  }
  cw_buf_free(w, &in);
  cw_buf_free(w, &out);
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  make_ops(w->nranks);
  if (w->lead)
    tw_log(w, "seed 0x%llx (COLL_SEED reproduces); %d replays; %d collectives per graph (counts 4099 and 3000001); "
           "inputs %.1f MiB, outputs %.1f MiB per rank and class",
           (unsigned long long)g_seed, g_replays, NOPS, g_in_bytes / 1048576.0, g_out_bytes / 1048576.0);
  struct rank_k rk[TW_MAX_RANKS];
  memset(rk, 0, sizeof rk);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    rk[i].mod = tw_load_module(r, COLL_KERNELS_FATBIN, "COLL_TEST_KERNELS");
    rk[i].fill = tw_function(r, rk[i].mod, "cg_fill");
    rk[i].check = tw_function(r, rk[i].mod, "cg_check");
    rk[i].bump = tw_function(r, rk[i].mod, "cg_bump");
    tw_use(r);
    TW_CU(tu_cu.cuMemAlloc(&rk[i].ctr, 64));
    TW_CU(tu_cu.cuMemAlloc(&rk[i].res, 128));
    cw_host_alloc(r, &rk[i].host_g, g_out_bytes);
    cw_host_alloc(r, &rk[i].host_e, g_out_bytes);
  }
  if (tw_init_comms(w) != symmSuccess) return;
  for (int c = CW_NCLASSES - 1; c >= 0; c--) run_class(w, rk, (enum cw_class)c);
  tw_destroy_comms(w);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(tu_cu.cuMemFree(rk[i].ctr));
    TW_CU(tu_cu.cuMemFree(rk[i].res));
    TW_CU(tu_cu.cuModuleUnload(rk[i].mod));
    cw_host_free(r, &rk[i].host_g);
    cw_host_free(r, &rk[i].host_e);
  }
}

static int option(const char *arg, void *ctx) {
  (void)ctx;
  if (strncmp(arg, "--replays=", 10) != 0) return -1;
  g_replays = atoi(arg + 10);
  REQUIRE(g_replays >= 1, "--replays must be >= 1");
  return 0;
}

int main(int argc, char **argv) {
  g_seed = cw_pick_seed();
  static const struct tw_spec spec = {.name = "coll_graph", .modes = "mp,all", .usage = "[--replays=N]",
      .limit_s = 540, .mp_one_rank = 1, .option = option, .process_init = cw_process_init, .body = body};
  return tw_main(&spec, argc, argv);
}
