/*
 * coll_progress <mp|all> [--nranks=N] [--quick]
 *
 * symmAllGatherWithProgress with a consumer, over n ranks. Per run, on every
 * rank: the
 * flags array (nranks * ceil(sendcount / chunkCount) words, plus 16 guard
 * words) is zeroed; a consumer kernel (coll_kernels.cu: cp_consumer) is
 * launched on a second stream BEFORE the all-gather is enqueued; for every
 * flag it spins (acquire load at system scope, bounded by %globaltimer:
 * 10 s from its start) until the flag is 1, then checks every element of
 * that chunk of recvbuff against the input pattern of the chunk's rank, and
 * counts wrong elements and timed-out flags in device memory. Then the host
 * requires: no wrong elements, no timeouts, every flag consumed, every flag
 * 1, the guard words 0, and (host check) the whole receive window correct
 * with its guard bytes untouched; symmCommGetAsyncError stays symmSuccess.
 *
 * Cases: buffer class staged / registered / symmetric x out of place / in
 * place x int32 / uint8 x sendcount 5 chunks, 5 chunks + 123 (a partial
 * last chunk) and 100 (< one chunk), chunkCount 64 Ki elements, 3 reps
 * each with new data; plus sendcount 16 Mi + 7 int32 with chunkCount 1 Mi
 * (17 chunks per rank; staged: several staging rounds) for every class,
 * out of place and in place. Last, a chunkCount larger than a staging round
 * with plain (staged) buffers: the library may refuse it with
 * symmNotSupported (then nothing may be enqueued) or run it (then the
 * result must be right).
 *
 * --quick (CTest's shared-device runs, where every cross-rank wait costs a
 * context switch): 1 rep instead of 3, and 4 Mi + 7 instead of 16 Mi + 7
 * for the large case (still several chunks and staging rounds). With shared
 * devices the consumer waits up to 60 s instead of 10.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_pattern.h"
#include "coll_util.h"

#ifndef COLL_KERNELS_FATBIN
#error "COLL_KERNELS_FATBIN must be defined by the build"
#endif

#define GUARD 256
#define FLAG_GUARD 16
#define CONSUMER_TIMEOUT_NS 10000000000ull
#define CONSUMER_TIMEOUT_SHARED_NS 60000000000ull

struct pk {
  CUmodule mod;
  CUfunction consumer;
  CUdeviceptr flags, res;
  struct cw_host in, out, hflags;
};

struct pcase {
  int cls, inplace, dt;
  size_t count, chunk;
};

static uint64_t g_seed;
static int g_quick;
static size_t g_max_count, g_max_flags;
static int g_runs, g_failed_runs;

static uint64_t consumer_timeout_ns(const struct tw *w) {
  return w->shared ? CONSUMER_TIMEOUT_SHARED_NS : CONSUMER_TIMEOUT_NS;
}

static size_t units_of(const struct pcase *c) { return c->count ? (c->count + c->chunk - 1) / c->chunk : 0; }

static void describe(const struct pcase *c, char *buf, size_t len) {
  snprintf(buf, len, "allgather-with-progress %s count=%zu chunk=%zu %s %s", cw_dt[c->dt].name, c->count, c->chunk,
           c->inplace ? "in-place" : "out-of-place", cw_class_name[c->cls]);
}

/* Enqueue the per-rank set-up of a run (poison, zero flags, input). */
static void prepare(struct tw *w, struct pk *pk, const struct cw_buf *S, const struct cw_buf *R,
                    const struct pcase *c, uint32_t seed) {
  const size_t es = (size_t)cw_dt[c->dt].size, n = (size_t)w->nranks;
  const uint64_t mask = es == 4 ? 0xffffffffu : 0xffu;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    for (size_t j = 0; j < c->count; j++)
      cw_put(pk[i].in.p, j, (int)es, cp_progress(seed, (uint32_t)r->rank, j) & mask);
    TW_CU(cw_cu.cuMemsetD8Async(R->p[i], 0xa5, n * c->count * es + GUARD, r->stream));
    if (!c->inplace) TW_CU(cw_cu.cuMemsetD8Async(S->p[i], 0xc3, c->count * es + GUARD, r->stream));
    TW_CU(cw_cu.cuMemsetD32Async(pk[i].flags, 0, n * units_of(c) + FLAG_GUARD, r->stream));
    TW_CU(cw_cu.cuMemsetD8Async(pk[i].res, 0, 64, r->stream));
    CUdeviceptr dst = c->inplace ? R->p[i] + (size_t)r->rank * c->count * es : S->p[i];
    if (c->count) TW_CU(cw_cu.cuMemcpyHtoDAsync(dst, pk[i].in.p, c->count * es, r->stream));
  }
  /* The consumer reads the flags from another stream: they must be zero
   * before it starts. */
  tw_sync_all(w, 60, "progress set-up");
}

static symmResult_t call(struct tw_rank *r, struct pk *pk, const struct cw_buf *S, const struct cw_buf *R,
                         const struct pcase *c) {
  const size_t es = (size_t)cw_dt[c->dt].size;
  void *recv = (void *)(uintptr_t)R->p[r->index];
  const void *send = c->inplace ? (const void *)(uintptr_t)(R->p[r->index] + (size_t)r->rank * c->count * es)
                                : (const void *)(uintptr_t)S->p[r->index];
  (void)pk;
  return symmAllGatherWithProgress(send, recv, c->count, (symmDataType_t)c->dt,
                                   (uint32_t *)(uintptr_t)pk[r->index].flags, c->chunk, r->comm, r->stream);
}

static void run(struct tw *w, struct pk *pk, const struct cw_buf *S, const struct cw_buf *R, const struct pcase *c,
                int rep) {
  char desc[200];
  describe(c, desc, sizeof desc);
  tw_phase("%s rep %d", desc, rep);
  const uint32_t seed = (uint32_t)cw_mix64(g_seed ^ cw_mix64((uint64_t)g_runs));
  const size_t es = (size_t)cw_dt[c->dt].size, n = (size_t)w->nranks, units = units_of(c);
  const uint64_t mask = es == 4 ? 0xffffffffu : 0xffu;
  const double t0 = tu_now();
  prepare(w, pk, S, R, c, seed);
  int failed = 0, stalled = 0;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    CUdeviceptr flags = pk[i].flags, recv = R->p[i], res = pk[i].res;
    uint32_t u = (uint32_t)units, nr = (uint32_t)n, e = (uint32_t)es, sd = seed;
    uint64_t count = c->count, chunk = c->chunk, tmo = consumer_timeout_ns(w);
    void *p[] = {&flags, &u, &nr, &recv, &count, &chunk, &e, &sd, &tmo, &res};
    /* Ranks sharing one GPU: one consumer block each, so the consumers
     * leave the SMs the ranks' all-gather blocks need at once (the library
     * keeps one SM a sharing rank free, not sixteen). */
    const unsigned most = w->shared ? 1u : 16u;
    unsigned grid = (unsigned)(n * units < most ? n * units : most);
    if (grid == 0) grid = 1;
    CUresult rc = tu_cu.cuLaunchKernel(pk[i].consumer, grid, 1, 1, 256, 1, 1, 0, r->stream2, p, NULL);
    TW_REQUIRE(r, rc == 0, "cuLaunchKernel(cp_consumer): %s", tu_cu_error(rc));
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    symmResult_t rc = call(r, pk, S, R, c);
    if (rc != symmSuccess) {
      char m[1024];
      const char *msg = tu_last_error(r->comm, m, sizeof m);
      tw_fail_at(__FILE__, __LINE__, r, "%s: the call returned %s: %s", desc, tu_result_name(rc), msg ? msg : "");
      tu_exit_now();
    }
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(cw_cu.cuMemcpyDtoHAsync(pk[i].out.p, R->p[i], n * c->count * es + GUARD, r->stream));
    TW_CU(cw_cu.cuMemcpyDtoHAsync(pk[i].hflags.p, pk[i].flags, (n * units + FLAG_GUARD) * 4, r->stream));
  }
  for (int i = 0; i < w->nlocal; i++) {
    tw_stream_wait_on(&w->r[i], w->r[i].stream, 120, desc);
    tw_stream_wait_on(&w->r[i], w->r[i].stream2, 120, "progress consumer");
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    unsigned long long res[8];
    tw_use(r);
    TW_CU(tu_cu.cuMemcpyDtoH(res, pk[i].res, sizeof res));
    if (res[0] || res[1] || res[7] != n * units) {
      tw_fail_at(__FILE__, __LINE__, r,
                 "%s rep %d: consumer saw %llu wrong elements, %llu flags timed out (first flag %lld), consumed %llu "
                 "of %zu flags; first wrong element: flag %lld (rank %lld chunk %lld) index %lld: got 0x%llx "
                 "expected 0x%llx",
                 desc, rep, res[0], res[1], (long long)res[4] - 1, res[7], n * units, (long long)res[2] - 1,
                 units ? ((long long)res[2] - 1) / (long long)units : -1,
                 units ? ((long long)res[2] - 1) % (long long)units : -1, (long long)res[3] - 1, res[5], res[6]);
      failed = 1;
      if (res[1] && res[7] == 0) stalled = 1;
    }
    const uint32_t *hf = pk[i].hflags.p;
    for (size_t f = 0; f < n * units + FLAG_GUARD; f++) {
      uint32_t want = f < n * units ? 1u : 0u;
      if (hf[f] != want) {
        tw_fail_at(__FILE__, __LINE__, r, "%s rep %d: flag %zu is %u, expected %u%s", desc, rep, f, hf[f], want,
                   f < n * units ? "" : " (past the flags the call owns)");
        failed = 1;
        break;
      }
    }
    const unsigned char *h = pk[i].out.p;
    size_t bad = 0, first = (size_t)-1;
    for (size_t q = 0; q < n; q++)
      for (size_t j = 0; j < c->count; j++) {
        size_t k = q * c->count + j;
        if (cw_get(h, k, (int)es) != (cp_progress(seed, (uint32_t)q, j) & mask) && bad++ == 0) first = k;
      }
    if (bad) {
      tw_fail_at(__FILE__, __LINE__, r, "%s rep %d: %zu of %zu received elements wrong, first %zu (rank %zu block "
                 "index %zu): got 0x%llx expected 0x%llx",
                 desc, rep, bad, n * c->count, first, first / c->count, first % c->count,
                 (unsigned long long)cw_get(h, first, (int)es),
                 (unsigned long long)(cp_progress(seed, (uint32_t)(first / c->count), first % c->count) & mask));
      failed = 1;
    }
    for (size_t b = n * c->count * es; b < n * c->count * es + GUARD; b++)
      if (h[b] != 0xa5) {
        tw_fail_at(__FILE__, __LINE__, r, "%s rep %d: guard byte %zu after recvbuff changed to 0x%02x", desc, rep,
                   b - n * c->count * es, h[b]);
        failed = 1;
        break;
      }
  }
  if (stalled)
    tw_log(w, "%s rep %d: the consumer saw no flag for %.0f s although the flags%s were set in the end: the "
           "all-gather only ran after the consumer gave up. If this is the first all-gather of the process, the "
           "library's kernel was most likely loaded lazily at its first launch, and loading waited for the running "
           "consumer (CUDA lazy loading; rerun with CUDA_MODULE_LOADING=EAGER to confirm). The library should "
           "resolve/load all its kernels at communicator init.",
           desc, rep, consumer_timeout_ns(w) / 1e9, failed ? " (see above)" : "");
  tw_check_async(w, desc);
  g_runs++;
  if (failed) g_failed_runs++;
  if (rep == 0 && w->lead)
    tw_log(w, "%-80s %zu flags/rank, %s (%.3f s)", desc, n * units, failed ? "FAILED" : "ok", tu_now() - t0);
}

/* chunkCount larger than a staging round with plain buffers. */
static void big_chunk(struct tw *w, struct pk *pk, const struct cw_buf *S, const struct cw_buf *R) {
  struct pcase c = {CW_STAGED, 0, symmInt32, g_max_count, (g_max_count + 2) / 2};
  char desc[200];
  describe(&c, desc, sizeof desc);
  const uint32_t seed = (uint32_t)cw_mix64(g_seed ^ 0x77);
  prepare(w, pk, S, R, &c, seed);
  symmResult_t rc[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) rc[i] = call(&w->r[i], pk, S, R, &c);
  int refused = 0;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    char m[1024];
    const char *msg = tu_last_error(r->comm, m, sizeof m);
    if (rc[i] == symmNotSupported) {
      refused++;
      TW_CHECK(r, tu_contains_ci(msg, "chunkCount"), "%s: symmNotSupported, but the message does not mention "
               "chunkCount: \"%s\"", desc, msg ? msg : "(NULL)");
      tw_use(r);
      CUresult q = tu_cu.cuStreamQuery(r->stream);
      TW_CHECK(r, q == 0, "%s: refused with symmNotSupported but the stream is busy (%s): something was enqueued",
               desc, tu_cu_error(q));
    } else {
      TW_CHECK(r, rc[i] == symmSuccess, "%s: returned %s (%s); expected success or symmNotSupported", desc,
               tu_result_name(rc[i]), msg ? msg : "");
    }
  }
  if (w->lead)
    tw_log(w, "%s: %s", desc,
           refused ? "refused with symmNotSupported (chunk larger than a staging round); nothing enqueued"
                   : "accepted");
  if (refused == w->nlocal) return;
  REQUIRE(refused == 0, "the ranks disagree on refusing %s", desc);
  /* Accepted: let it finish and check the data (no consumer here). */
  tw_sync_all(w, 120, desc);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(tu_cu.cuMemcpyDtoH(pk[i].out.p, R->p[i], (size_t)w->nranks * c.count * 4));
    size_t bad = 0;
    for (size_t k = 0; k < (size_t)w->nranks * c.count; k++)
      bad += cw_get(pk[i].out.p, k, 4) != cp_progress(seed, (uint32_t)(k / c.count), k % c.count);
    TW_CHECK(r, bad == 0, "%s: %zu received elements wrong", desc, bad);
  }
  tw_check_async(w, desc);
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  const size_t chunk = 64 * 1024;
  const size_t counts[3] = {5 * chunk, 5 * chunk + 123, 100};
  const int dts[2] = {symmInt32, symmUint8};
  const int reps = g_quick ? 1 : 3;
  g_max_count = ((size_t)(g_quick ? 4 : 16) << 20) + 7;
  const size_t big_chunk_count = (size_t)1 << 20;
  g_max_flags = (size_t)w->nranks * ((g_max_count + big_chunk_count - 1) / big_chunk_count) + 64;
  if (5 * chunk + 123 > g_max_count) g_max_count = 5 * chunk + 123;
  if (w->lead)
    tw_log(w, "seed 0x%llx (COLL_SEED reproduces); consumer timeout %.0f s per run", (unsigned long long)g_seed,
           consumer_timeout_ns(w) / 1e9);
  struct pk pk[TW_MAX_RANKS];
  memset(pk, 0, sizeof pk);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    pk[i].mod = tw_load_module(r, COLL_KERNELS_FATBIN, "COLL_TEST_KERNELS");
    pk[i].consumer = tw_function(r, pk[i].mod, "cp_consumer");
    tw_use(r);
    TW_CU(tu_cu.cuMemAlloc(&pk[i].flags, (g_max_flags + FLAG_GUARD) * 4));
    TW_CU(tu_cu.cuMemAlloc(&pk[i].res, 64));
    cw_host_alloc(r, &pk[i].in, g_max_count * 4);
    cw_host_alloc(r, &pk[i].out, (size_t)w->nranks * g_max_count * 4 + GUARD);
    cw_host_alloc(r, &pk[i].hflags, (g_max_flags + FLAG_GUARD) * 4);
  }
  if (tw_init_comms(w) != symmSuccess) return;
  struct cw_buf S[CW_NCLASSES], R[CW_NCLASSES];
  for (int c = 0; c < CW_NCLASSES; c++) {
    cw_buf_alloc(w, &S[c], (enum cw_class)c, g_max_count * 4 + GUARD);
    cw_buf_alloc(w, &R[c], (enum cw_class)c, (size_t)w->nranks * g_max_count * 4 + GUARD);
  }
  for (int cls = 0; cls < CW_NCLASSES; cls++)
    for (int ip = 0; ip < 2; ip++) {
      for (int d = 0; d < 2; d++)
        for (int ci = 0; ci < 3; ci++) {
          struct pcase c = {cls, ip, dts[d], counts[ci], chunk};
          for (int rep = 0; rep < reps; rep++) run(w, pk, &S[cls], &R[cls], &c, rep);
        }
      struct pcase big = {cls, ip, symmInt32, g_max_count, big_chunk_count};
      run(w, pk, &S[cls], &R[cls], &big, 0);
    }
  big_chunk(w, pk, &S[CW_STAGED], &R[CW_STAGED]);
  /* The communicator must still be in step: one more checked run. */
  struct pcase after = {CW_STAGED, 0, symmInt32, 5 * chunk + 123, chunk};
  run(w, pk, &S[CW_STAGED], &R[CW_STAGED], &after, 0);
  if (w->lead)
    tw_log(w, "summary: %d runs, %d failed", g_runs, g_failed_runs);
  for (int c = 0; c < CW_NCLASSES; c++) {
    cw_buf_free(w, &S[c]);
    cw_buf_free(w, &R[c]);
  }
  tw_destroy_comms(w);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(tu_cu.cuMemFree(pk[i].flags));
    TW_CU(tu_cu.cuMemFree(pk[i].res));
    TW_CU(tu_cu.cuModuleUnload(pk[i].mod));
    cw_host_free(r, &pk[i].in);
    cw_host_free(r, &pk[i].out);
    cw_host_free(r, &pk[i].hflags);
  }
}

static int option(const char *arg, void *ctx) {
  (void)ctx;
  if (strcmp(arg, "--quick") != 0) return -1;
  g_quick = 1;
  return 0;
}

int main(int argc, char **argv) {
  g_seed = cw_pick_seed();
  static const struct tw_spec spec = {.name = "coll_progress", .modes = "mp,all", .usage = "[--quick]",
      .limit_s = 540, .option = option, .process_init = cw_process_init, .body = body};
  return tw_main(&spec, argc, argv);
}
