/*
 * dev_barrier (GPU, n ranks): the device API's block barriers under load.
 *
 *   dev_barrier mp|all [--nranks=N] [--blocks=B] [--iters=I] [--launches=L] [--replays=R]
 *
 * One device communicator with B barrier slots (default 64). Each rank
 * runs dk_barrier_stress (dev_kernels.cu) with B blocks: every iteration,
 * block b writes the round number into its symmetric cell b, crosses a
 * split barrier (arrive, then wait), checks every team member's cell b
 * holds the same round, and crosses a second barrier; every third
 * iteration uses the team of ranks of its parity instead of the world. L
 * launches of I iterations (defaults 5 x 2,000), then a CUDA graph of two
 * launches replayed R times (default 20), with no host reset of anything:
 * the barrier epochs live in device memory. Then: no mismatch, no failed
 * device call, every block counted (L + 2R) * I rounds, no asynchronous
 * error; the device communicator is destroyed (collective) and made again
 * (its slots start from zero again). Shared devices (time-sliced ranks):
 * CTest passes smaller counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_util.h"

#define THREADS 128

static unsigned blocks = 64, iters = 2000, launches = 5, replays = 20;

static int option(const char *arg, void *ctx) {
  (void)ctx;
  if (sscanf(arg, "--blocks=%u", &blocks) == 1) return blocks >= 1 && blocks <= 1024 ? 0 : -1;
  if (sscanf(arg, "--iters=%u", &iters) == 1) return 0;
  if (sscanf(arg, "--launches=%u", &launches) == 1) return 0;
  if (sscanf(arg, "--replays=%u", &replays) == 1) return 0;
  return -1;
}

struct rank_state {
  CUdeviceptr cells, rounds, res;
  CUgraph graph;
  CUgraphExec exec;
};

static void launch(struct tw_rank *r, struct dev_kernels *k, symmDevComm *dc, struct rank_state *s, unsigned n) {
  CUdeviceptr cells = s->cells, rounds = s->rounds, res = s->res;
  void *p[] = {dc, &cells, &rounds, &n, &res};
  dev_launch(r, NULL, k->barrier_stress, blocks, THREADS, p, "dk_barrier_stress");
}

static void run(struct tw *tw, struct dev_kernels *k, symmDevComm *dc, void **cells) {
  struct rank_state st[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    st[i].cells = (CUdeviceptr)(uintptr_t)cells[i];
    st[i].rounds = dev_words(r, blocks);
    st[i].res = dev_words(r, DEV_RES_WORDS);
  }
  tw_host_barrier(tw, "before the launches");
  tw_phase("%u launches of %u iterations on %u blocks", launches, iters, blocks);
  double t0 = tu_now();
  for (unsigned l = 0; l < launches; l++)
    for (int i = 0; i < tw->nlocal; i++) launch(&tw->r[i], &k[i], &dc[i], &st[i], iters);
  tw_sync_all(tw, 300, "the barrier launches");
  double t = tu_now() - t0;
  tw_log(tw, "%u launches x %u iterations x 2 barriers on %u blocks: %.3f s, %.2f us per barrier%s", launches, iters,
         blocks, t, t / (2.0 * launches * iters) * 1e6, tw->shared ? " [shared devices: timing means nothing]" : "");

  tw_phase("capture a graph of two launches");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    tw_use(r);
    CUresult cr = tu_cu.cuStreamBeginCapture(r->stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    TW_REQUIRE(r, cr == 0, "cuStreamBeginCapture: %s", tu_cu_error(cr));
    launch(r, &k[i], &dc[i], &st[i], iters);
    launch(r, &k[i], &dc[i], &st[i], iters);
    tw_use(r);
    cr = tu_cu.cuStreamEndCapture(r->stream, &st[i].graph);
    TW_REQUIRE(r, cr == 0, "cuStreamEndCapture: %s", tu_cu_error(cr));
    cr = tu_cu.cuGraphInstantiateWithFlags(&st[i].exec, st[i].graph, 0);
    TW_REQUIRE(r, cr == 0, "cuGraphInstantiateWithFlags: %s", tu_cu_error(cr));
  }
  tw_host_barrier(tw, "graphs captured");
  tw_phase("%u graph replays", replays);
  for (unsigned g = 0; g < replays; g++) {
    for (int i = 0; i < tw->nlocal; i++) {
      tw_use(&tw->r[i]);
      CUresult cr = tu_cu.cuGraphLaunch(st[i].exec, tw->r[i].stream);
      TW_REQUIRE(&tw->r[i], cr == 0, "cuGraphLaunch #%u: %s", g, tu_cu_error(cr));
    }
  }
  tw_sync_all(tw, 300, "the graph replays");

  tw_phase("check");
  const unsigned want = (launches + 2 * replays) * iters;
  tw_check_async(tw, "the device barriers");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    dev_check_results(r, st[i].res, "dk_barrier_stress");
    uint32_t *rounds = malloc(blocks * 4);
    TW_REQUIRE(r, rounds != NULL, "out of host memory");
    dev_read_words(r, st[i].rounds, blocks, rounds);
    unsigned wrong = 0;
    for (unsigned b = 0; b < blocks; b++) wrong += rounds[b] != want;
    TW_CHECK(r, wrong == 0, "%u of %u blocks counted the wrong number of rounds (block 0: %u, expected %u)", wrong,
             blocks, rounds[0], want);
    free(rounds);
    tw_use(r);
    CU_REQUIRE(tu_cu.cuGraphExecDestroy(st[i].exec));
    CU_REQUIRE(tu_cu.cuGraphDestroy(st[i].graph));
    CU_REQUIRE(tu_cu.cuMemFree(st[i].rounds));
    CU_REQUIRE(tu_cu.cuMemFree(st[i].res));
  }
  tw_log(tw, "%u rounds per block checked on every rank (world and parity-team barriers, split arrive/wait)", want);
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  struct dev_kernels k[TW_MAX_RANKS];
  dev_load(tw, k);
  void *cells[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) sz[i] = blocks * 4;
  tw_phase("alloc cells");
  symmResult_t rc = tw_alloc(tw, sz, cells);
  TW_REQUIRE(&tw->r[0], rc == symmSuccess, "symmMemAlloc: %s", tu_result_name(rc));
  symmDevComm dc[TW_MAX_RANKS];
  symmDevCommRequirements req = dev_requirements(blocks, 0, 0);
  for (int round = 0; round < 2; round++) {
    tw_phase("symmDevCommCreate #%d", round);
    rc = dev_create_all(tw, &req, dc);
    for (int i = 0; i < tw->nlocal; i++) TW_SYMM_REQUIRE(&tw->r[i], rc);
    for (int i = 0; i < tw->nlocal; i++) {
      TW_CHECK(&tw->r[i], dc[i].version == SYMM_DEVICE_API_VERSION && dc[i].size == sizeof(symmDevComm),
               "devComm version %u size %u", dc[i].version, dc[i].size);
      TW_CHECK(&tw->r[i], dc[i].rank == tw->r[i].rank && dc[i].nRanks == tw->nranks && dc[i].blockCount == blocks,
               "devComm rank %d nRanks %d blockCount %u", dc[i].rank, dc[i].nRanks, dc[i].blockCount);
    }
    if (round == 1) {
      /* Fresh slots count from zero again: so must the cells' rounds. */
      for (int i = 0; i < tw->nlocal; i++) dev_fill_words(&tw->r[i], (CUdeviceptr)(uintptr_t)cells[i], blocks, 0);
      tw_host_barrier(tw, "cells reset");
      iters = iters / 4 + 1; /* the second round is a short re-check */
      launches = 1;
      replays = replays / 4 + 1;
    }
    run(tw, k, dc, cells);
    tw_phase("symmDevCommDestroy #%d", round);
    rc = dev_destroy(tw, dc);
    for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  }
  rc = tw_free(tw, cells);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {.name = "dev_barrier",
                                      .modes = "mp,all",
                                      .usage = "[--blocks=B] [--iters=I] [--launches=L] [--replays=R]",
                                      .limit_s = 540,
                                      .option = option,
                                      .body = body};
  return tw_main(&spec, argc, argv);
}
