/*
 * symm_graph (GPU, n ranks): the stream-ordered primitives captured in a
 * CUDA graph replay correctly 10,000 times (200 with shared devices, where
 * every cross-rank wait costs a context switch).
 *
 *   symm_graph mp|all [--nranks=N]
 *
 * Each rank owns words in a small symmetric buffer W (kernels/tu_pattern.h,
 * TU_GW_*). "next" is rank + 1 and "prev" rank - 1 (mod n). Captured once
 * per rank on its non-default stream (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL:
 * a library call that made an unsafe CUDA call on this thread during
 * capture would invalidate it):
 *   1. tk_graph_step: COUNTER += 1, after checking that DONE is 1 (the last
 *      replay's step 6 landed) and clearing it;
 *   2. symmBarrier;
 *   3. tk_graph_check: read next's COUNTER through the peer pointer; it
 *      must equal ours (both counted this replay before the barrier, and
 *      next does not count the following one before its step 5, which waits
 *      for our step 4);
 *   4. symmPutSignal(next, channel 3);  5. symmWaitSignal(prev, channel 3);
 *   6. symmStreamWriteValue32(&W[DONE], 1);
 *   7. symmStreamWaitValue32(&W[DONE], 1, symmCmpEq).
 * The graph is launched 10,000 times (in "all" mode every rank's graph is
 * launched each iteration from the one thread); then: no async error,
 * COUNTER = 10,000 (own and next's, read back through the peer pointer),
 * LAST_READ = 10,000, no mismatches, no missed DONE, DONE = 1.
 */
#include <stdint.h>
#include <stdio.h>

#include "gpu_world.h"
#include "kernels/tu_pattern.h"

#define REPLAYS 10000
#define REPLAYS_SHARED 200
#define CHANNEL 3
#define W_BYTES 4096

struct graph {
  CUgraph graph;
  CUgraphExec exec;
};

/* Capture the sequence on r's stream. Fatal if any step fails (the capture
 * is ended first so the stream is not left capturing). */
static void capture(struct tw_rank *r, CUdeviceptr w, CUdeviceptr peer_w, int next, int prev, struct graph *g) {
  tw_use(r);
  CUresult cr = tu_cu.cuStreamBeginCapture(r->stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  TW_REQUIRE(r, cr == 0, "cuStreamBeginCapture: %s", tu_cu_error(cr));
  int ok = 1;
  CUdeviceptr a = w, pa = peer_w;
  void *p_step[] = {&a};
  void *p_check[] = {&pa, &a};
  tw_launch(r, r->k.graph_step, 0, p_step, "tk_graph_step (capture)");
  ok &= TW_SYMM(r, symmBarrier(r->comm, r->stream));
  tw_launch(r, r->k.graph_check, 0, p_check, "tk_graph_check (capture)");
  ok &= TW_SYMM(r, symmPutSignal(r->comm, next, CHANNEL, r->stream));
  ok &= TW_SYMM(r, symmWaitSignal(r->comm, prev, CHANNEL, r->stream));
  void *done = (void *)(uintptr_t)(w + 4 * TU_GW_DONE);
  ok &= TW_SYMM(r, symmStreamWriteValue32(r->comm, done, 1, r->stream));
  ok &= TW_SYMM(r, symmStreamWaitValue32(r->comm, done, 1, symmCmpEq, r->stream));
  tw_use(r);
  g->graph = NULL;
  cr = tu_cu.cuStreamEndCapture(r->stream, &g->graph);
  TW_REQUIRE(r, cr == 0 && g->graph, "cuStreamEndCapture: %s (a call during the capture invalidated it?)",
             tu_cu_error(cr));
  TW_REQUIRE(r, ok, "a library call failed during capture (see above)");
  cr = tu_cu.cuGraphInstantiateWithFlags(&g->exec, g->graph, 0);
  TW_REQUIRE(r, cr == 0, "cuGraphInstantiateWithFlags: %s", tu_cu_error(cr));
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  void *W[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) sz[i] = W_BYTES;
  tw_phase("alloc W");
  symmResult_t rc = tw_alloc(tw, sz, W);
  if (rc != symmSuccess) {
    TW_SYMM(&tw->r[0], rc);
    tu_exit_now();
  }
  CUdeviceptr peer_w[TW_MAX_RANKS];
  struct graph g[TW_MAX_RANKS];
  tw_phase("capture");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    const int next = (r->rank + 1) % tw->nranks, prev = (r->rank + tw->nranks - 1) % tw->nranks;
    void *pw = NULL;
    TW_SYMM_REQUIRE(r, symmMemGetPeerPtr(r->comm, W[i], next, &pw));
    peer_w[i] = (CUdeviceptr)(uintptr_t)pw;
    /* Fresh symmetric memory is zeroed: COUNTER, DONE and the checks start at 0. */
    struct tw_count c = tw_count_nonzero(r, (CUdeviceptr)(uintptr_t)W[i], W_BYTES);
    TW_CHECK(r, c.bad == 0, "new symmetric buffer has %llu non-zero bytes", c.bad);
    capture(r, (CUdeviceptr)(uintptr_t)W[i], peer_w[i], next, prev, &g[i]);
  }
  tw_host_barrier(tw, "graphs captured");
  const int replays = tw->shared ? REPLAYS_SHARED : REPLAYS;
  tw_phase("%d graph replays", replays);
  double t0 = tu_now();
  for (int it = 0; it < replays; it++) {
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      tw_use(r);
      CUresult cr = tu_cu.cuGraphLaunch(g[i].exec, r->stream);
      TW_REQUIRE(r, cr == 0, "cuGraphLaunch #%d: %s", it, tu_cu_error(cr));
    }
  }
  double t_enq = tu_now() - t0;
  tw_sync_all(tw, 300, "graph replays");
  double t = tu_now() - t0;
  tw_log(tw, "%d replays: %.3f s, %.2f us per replay (launch %.2f us per cuGraphLaunch)", replays, t,
         t / replays * 1e6, t_enq / replays / tw->nlocal * 1e6);

  tw_phase("check results");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    TW_CHECK(r, async == symmSuccess, "async error after the replays: %s (%s)", tu_result_name(async),
             symmGetLastError(r->comm));
    uint32_t w[TU_GW_WORDS];
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(w, (CUdeviceptr)(uintptr_t)W[i], sizeof w));
    /* Next counted its last replay before it joined the last barrier,
     * which our stream passed: its COUNTER is final. */
    uint32_t peer_counter = 0;
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(&peer_counter, peer_w[i] + 4 * TU_GW_COUNTER, sizeof peer_counter));
    tw_log(tw, "rank %d: counter %u, peer's counter %u, last read %u, mismatches %u, missed DONE %u, DONE %u",
           r->rank, w[TU_GW_COUNTER], peer_counter, w[TU_GW_LAST_READ], w[TU_GW_MISMATCHES], w[TU_GW_DONE_MISSES],
           w[TU_GW_DONE]);
    TW_CHECK(r, w[TU_GW_COUNTER] == (uint32_t)replays, "counter %u after %d replays", w[TU_GW_COUNTER], replays);
    TW_CHECK(r, peer_counter == (uint32_t)replays, "the next rank's counter (through the peer pointer) is %u",
             peer_counter);
    TW_CHECK(r, w[TU_GW_LAST_READ] == (uint32_t)replays, "the last replay read the next rank's counter as %u",
             w[TU_GW_LAST_READ]);
    TW_CHECK(r, w[TU_GW_MISMATCHES] == 0,
             "%u replays read a peer counter different from ours (first: ours %u, peer's %u)", w[TU_GW_MISMATCHES],
             w[TU_GW_FIRST_MINE], w[TU_GW_FIRST_PEER]);
    TW_CHECK(r, w[TU_GW_DONE_MISSES] == 0, "%u replays began without the previous replay's DONE = 1",
             w[TU_GW_DONE_MISSES]);
    TW_CHECK(r, w[TU_GW_DONE] == 1, "DONE is %u after the last replay", w[TU_GW_DONE]);
  }
  for (int i = 0; i < tw->nlocal; i++) {
    tw_use(&tw->r[i]);
    CU_REQUIRE(tu_cu.cuGraphExecDestroy(g[i].exec));
    CU_REQUIRE(tu_cu.cuGraphDestroy(g[i].graph));
  }
  tw_phase("free W");
  rc = tw_free(tw, W);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {
      .name = "symm_graph", .modes = "mp,all", .limit_s = 300, .kernels = 1, .body = body};
  return tw_main(&spec, argc, argv);
}
