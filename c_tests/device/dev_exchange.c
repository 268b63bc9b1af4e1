/*
 * dev_exchange (GPU, n ranks): the device API's signals, put-with-signal,
 * LL packets and peer tables, across launches and graph replays.
 *
 *   dev_exchange mp|all [--nranks=N] [--blocks=B] [--launches=L] [--replays=R]
 *
 * dk_exchange (dev_kernels.cu), B blocks (default 16) of 128 threads, per
 * launch: block b sends 1,000 words to every peer with
 * symmDevBlockPutSignal (add 1 on signal slot b) and checks every peer's
 * words after symmDevBlockSignalWaitNext (a counting wait that needs no
 * reset between launches); sets signal slot B + b of every peer to the
 * launch number and waits for >= it with symmDevSignalWait; sends one LL
 * packet per thread to every peer (symmDevLLStore into the peer's
 * dc.llBuffer, symmDevLLBegin/End flags) and loads the peers' with
 * symmDevLLLoad; reads every peer's registered (cuMemAlloc) buffer through
 * symmMemGetPeerTable's table with symmDevTablePeerPtr; ends with a
 * barrier. Every value carries (sender, receiver, launch). L launches
 * (default 50), then a graph of one launch replayed R times (default 50).
 * Then: no mismatch, no failed call, every block counted L + R launches,
 * no asynchronous error.
 */
#include <stdio.h>
#include <stdlib.h>

#include "dev_util.h"

#define THREADS 128
#define WORDS 1000

static unsigned blocks = 16, launches = 50, replays = 50;

static int option(const char *arg, void *ctx) {
  (void)ctx;
  if (sscanf(arg, "--blocks=%u", &blocks) == 1) return blocks >= 1 && blocks <= 256 ? 0 : -1;
  if (sscanf(arg, "--launches=%u", &launches) == 1) return 0;
  if (sscanf(arg, "--replays=%u", &replays) == 1) return 0;
  return -1;
}

struct rank_state {
  CUdeviceptr inbox, staging, launches, res, reg, table;
  void *reg_handle;
  CUgraph graph;
  CUgraphExec exec;
};

static void launch(struct tw_rank *r, struct dev_kernels *k, symmDevComm *dc, struct rank_state *s) {
  CUdeviceptr inbox = s->inbox, staging = s->staging, l = s->launches, table = s->table, res = s->res;
  unsigned words = WORDS;
  void *p[] = {dc, &inbox, &staging, &words, &l, &table, &res};
  dev_launch(r, NULL, k->exchange, blocks, THREADS, p, "dk_exchange");
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  struct dev_kernels k[TW_MAX_RANKS];
  dev_load(tw, k);
  struct rank_state st[TW_MAX_RANKS];
  const size_t inbox_words = (size_t)blocks * tw->nranks * WORDS;
  void *inbox[TW_MAX_RANKS], *reg[TW_MAX_RANKS], *handle[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS], reg_sz[TW_MAX_RANKS];
  tw_phase("buffers");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    sz[i] = inbox_words * 4;
    st[i].staging = dev_words(r, inbox_words);
    st[i].launches = dev_words(r, blocks);
    st[i].res = dev_words(r, DEV_RES_WORDS);
    /* A plain cudaMalloc-style buffer of `blocks` ints, each rank + 1. */
    st[i].reg = dev_words(r, blocks);
    dev_fill_words(r, st[i].reg, blocks, (uint32_t)r->rank + 1);
    reg[i] = (void *)(uintptr_t)st[i].reg;
    reg_sz[i] = blocks * 4;
  }
  symmResult_t rc = tw_alloc(tw, sz, inbox);
  TW_REQUIRE(&tw->r[0], rc == symmSuccess, "symmMemAlloc: %s", tu_result_name(rc));
  rc = tw_register(tw, reg, reg_sz, handle);
  TW_REQUIRE(&tw->r[0], rc == symmSuccess, "symmCommRegister: %s", tu_result_name(rc));
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    st[i].inbox = (CUdeviceptr)(uintptr_t)inbox[i];
    void **table = NULL;
    TW_SYMM_REQUIRE(r, symmMemGetPeerTable(r->comm, reg[i], &table));
    st[i].table = (CUdeviceptr)(uintptr_t)table;
  }

  tw_phase("symmDevCommCreate");
  const uint64_t ll_bytes = 2ull * tw->nranks * blocks * THREADS * 16;
  symmDevCommRequirements req = dev_requirements(blocks, 2 * blocks, ll_bytes);
  symmDevComm dc[TW_MAX_RANKS];
  rc = dev_create_all(tw, &req, dc);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM_REQUIRE(&tw->r[i], rc);
  for (int i = 0; i < tw->nlocal; i++)
    TW_CHECK(&tw->r[i], dc[i].llBuffer != NULL && dc[i].llBytes == ll_bytes && dc[i].signalCount == 2 * blocks,
             "devComm llBuffer %p llBytes %llu signalCount %u", dc[i].llBuffer, (unsigned long long)dc[i].llBytes,
             dc[i].signalCount);

  tw_host_barrier(tw, "before the launches");
  tw_phase("%u launches", launches);
  double t0 = tu_now();
  for (unsigned l = 0; l < launches; l++)
    for (int i = 0; i < tw->nlocal; i++) launch(&tw->r[i], &k[i], &dc[i], &st[i]);
  tw_sync_all(tw, 300, "the exchange launches");
  tw_log(tw, "%u exchange launches: %.3f s%s", launches, tu_now() - t0,
         tw->shared ? " [shared devices: timing means nothing]" : "");

  tw_phase("graph of one launch, %u replays", replays);
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    tw_use(r);
    CUresult cr = tu_cu.cuStreamBeginCapture(r->stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    TW_REQUIRE(r, cr == 0, "cuStreamBeginCapture: %s", tu_cu_error(cr));
    launch(r, &k[i], &dc[i], &st[i]);
    tw_use(r);
    cr = tu_cu.cuStreamEndCapture(r->stream, &st[i].graph);
    TW_REQUIRE(r, cr == 0, "cuStreamEndCapture: %s", tu_cu_error(cr));
    cr = tu_cu.cuGraphInstantiateWithFlags(&st[i].exec, st[i].graph, 0);
    TW_REQUIRE(r, cr == 0, "cuGraphInstantiateWithFlags: %s", tu_cu_error(cr));
  }
  tw_host_barrier(tw, "graphs captured");
  for (unsigned g = 0; g < replays; g++)
    for (int i = 0; i < tw->nlocal; i++) {
      tw_use(&tw->r[i]);
      CUresult cr = tu_cu.cuGraphLaunch(st[i].exec, tw->r[i].stream);
      TW_REQUIRE(&tw->r[i], cr == 0, "cuGraphLaunch #%u: %s", g, tu_cu_error(cr));
    }
  tw_sync_all(tw, 300, "the graph replays");

  tw_phase("check");
  tw_check_async(tw, "the exchanges");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    dev_check_results(r, st[i].res, "dk_exchange");
    uint32_t *l = malloc(blocks * 4);
    TW_REQUIRE(r, l != NULL, "out of host memory");
    dev_read_words(r, st[i].launches, blocks, l);
    unsigned wrong = 0;
    for (unsigned b = 0; b < blocks; b++) wrong += l[b] != launches + replays;
    TW_CHECK(r, wrong == 0, "%u of %u blocks counted the wrong number of launches (block 0: %u, expected %u)", wrong,
             blocks, l[0], launches + replays);
    free(l);
  }
  tw_log(tw, "%u exchanges (put-with-signal, set/wait, LL packets, peer tables) checked on every rank",
         launches + replays);

  tw_phase("teardown");
  rc = dev_destroy(tw, dc);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  tw_deregister(tw, handle);
  rc = tw_free(tw, inbox);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    tw_use(r);
    CU_REQUIRE(tu_cu.cuGraphExecDestroy(st[i].exec));
    CU_REQUIRE(tu_cu.cuGraphDestroy(st[i].graph));
    CU_REQUIRE(tu_cu.cuMemFree(st[i].staging));
    CU_REQUIRE(tu_cu.cuMemFree(st[i].launches));
    CU_REQUIRE(tu_cu.cuMemFree(st[i].res));
    CU_REQUIRE(tu_cu.cuMemFree(st[i].reg));
  }
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {.name = "dev_exchange",
                                      .modes = "mp,all",
                                      .usage = "[--blocks=B] [--launches=L] [--replays=R]",
                                      .limit_s = 540,
                                      .option = option,
                                      .body = body};
  return tw_main(&spec, argc, argv);
}
