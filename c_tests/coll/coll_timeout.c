/*
 * coll_timeout <mp|all> [--nranks=N]
 *
 * A collective or send/recv that the other ranks never join ends after
 * SYMM_TIMEOUT with an asynchronous symmTimeout instead of hanging, in
 * whichever kernel SYMM_ALGO selects (CTest runs it per algorithm: the
 * synced kernels, push, pipe, the sized send/recv kernel). Cases, each on a
 * fresh communicator (a timed-out communicator is unusable):
 *
 *   allreduce      4 Mi floats, symmetric send and recv buffers (push with
 *                  SYMM_ALGO=...push, else the direct kernels);
 *   reducescatter  4 Mi floats per rank, plain buffers (staged; pipelined
 *                  with SYMM_ALGO=...pipe);
 *   send           64 MiB to rank 1 (more than the 4 MiB of slots, so the
 *                  sender must wait for the receiver);
 *   recv           64 MiB from rank 1 (send and recv: the message must name
 *                  symmSend/symmRecv);
 *   recv_small     64 KiB from rank 1: LL packets under `auto` (since the
 *                  fourteenth session) and a p2p:ll= shape (the receiver
 *                  polls the data itself), the ring under other shapes;
 *   alltoall       symmAllToAll of 16 MiB symmetric buffers (blocks above
 *                  the LL limit: the point-to-point engine by default);
 *   alltoallv_device
 *                  symmAllToAllvDevice, 4096 one-byte rows for every rank
 *                  from the symmetric send buffer, the counts in device
 *                  memory (the kernel's entry sync waits for the peers);
 *   alltoallv_2d   symmAllToAllvDevice2d, 2 local experts, 2048 rows for
 *                  each (rank, expert), aligned to 16;
 *   allreduce_norm symmAllReduceAddRMSNorm, 4 tokens x 4096 bf16: the LL
 *                  form SYMM_ALGO selects (one-shot, spread, batched;
 *                  batched and spread by default) polls packets that
 *                  never come;
 *   allreduce_norm_in_place
 *                  the same in place (out = input, residualOut =
 *                  residual): by default the batched entry taking this
 *                  rank's own packets back (they come) before its peers'
 *                  (they do not); with SYMM_ALGO=batch (not auto's
 *                  layout) at 4 ranks the batched entry behind its fence,
 *                  with nobatch whole rows;
 *   allreduce_norm_wide
 *                  the same, 128 tokens (1 MiB): the one-shot LL form at 2
 *                  ranks, the two-shot LL form at 4 (and with SYMM_ALGO=ll
 *                  at 8), batched unless nobatch; else by default the form
 *                  by stores (its block syncs), or with nonormwrite the
 *                  all-reduce first (the two-kernel form, its norm kernel
 *                  after the all-reduce that times out).
 *
 * Only rank 0 calls; the other ranks allocate what is collective and then
 * wait. Rank 0 polls symmCommGetAsyncError: it must become symmTimeout no
 * earlier than SYMM_TIMEOUT - 0.1 s and no later than SYMM_TIMEOUT + 3 s
 * after the call, with a message that says it timed out; the stream then
 * drains, and a memcpy round trip and a kernel still work on the device.
 * Rank 0 aborts its communicator, the others destroy theirs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

static double timeout_s;

enum {
  K_AR, K_RS, K_SEND, K_RECV, K_RECV_SMALL, K_A2A, K_A2AV_DEV, K_A2AV_2D, K_NORM, K_NORM_IN_PLACE, K_NORM_WIDE, NCASES
};
static const char *const case_name[NCASES] = {"allreduce",        "reducescatter", "send",           "recv",
                                              "recv_small",       "alltoall",      "alltoallv_device", "alltoallv_2d",
                                              "allreduce_norm",   "allreduce_norm_in_place", "allreduce_norm_wide"};
/* rank 0 flags each case done in its own tw flag. */
_Static_assert(NCASES <= TW_FLAGS, "a tw flag a case");

/* The device-count all-to-all-vs' counts: `splits` rows for each of
 * `entries` blocks, written to device memory at `at`; `out` (2 x entries
 * int64) follows them. */
static void device_counts(int entries, int64_t rows, CUdeviceptr at) {
  int64_t host[2 * TW_MAX_RANKS * 2];
  REQUIRE(entries <= TW_MAX_RANKS * 2, "too many count entries");
  for (int i = 0; i < entries; i++) host[i] = rows;
  CU_REQUIRE(tu_upload(at, host, (size_t)entries * sizeof(int64_t)));
}

static void rank0_case(struct tw *tw, struct tw_rank *r, int k, void *sym_s, void *sym_r) {
  tw_phase("rank 0: %s that nobody joins", case_name[k]);
  const size_t bytes = (size_t)64 << 20;
  CUdeviceptr a = 0, b = 0;
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemAlloc(&a, bytes));
  CU_REQUIRE(tu_cu.cuMemAlloc(&b, bytes));
  symmResult_t async = symmInternalError;
  TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
  TW_CHECK(r, async == symmSuccess, "%s: async error before the call: %s", case_name[k], tu_result_name(async));
  /* Before the clock starts: the counts' copy is synchronous. */
  if (k == K_A2AV_DEV) device_counts(tw->nranks, 4096, a);
  if (k == K_A2AV_2D) device_counts(tw->nranks * 2, 2048, a);
  const double t0 = tu_now();
  switch (k) {
    case K_AR:
      TW_SYMM_REQUIRE(r, symmAllReduce(sym_s, sym_r, bytes / 4 / 4, symmFloat32, symmSum, r->comm, r->stream));
      break;
    case K_RS: {
      const size_t per = bytes / 4 / (size_t)tw->nranks;
      TW_SYMM_REQUIRE(r, symmReduceScatter((void *)(uintptr_t)a, (void *)(uintptr_t)b, per, symmFloat32, symmSum,
                                           r->comm, r->stream));
      break;
    }
    case K_SEND: TW_SYMM_REQUIRE(r, symmSend((void *)(uintptr_t)a, bytes, symmUint8, 1, r->comm, r->stream)); break;
    case K_RECV: TW_SYMM_REQUIRE(r, symmRecv((void *)(uintptr_t)b, bytes, symmUint8, 1, r->comm, r->stream)); break;
    case K_RECV_SMALL:
      TW_SYMM_REQUIRE(r, symmRecv((void *)(uintptr_t)b, (size_t)64 << 10, symmUint8, 1, r->comm, r->stream));
      break;
    case K_A2A: {
      const size_t per = ((size_t)16 << 20) / 4 / (size_t)tw->nranks;
      TW_SYMM_REQUIRE(r, symmAllToAll(sym_s, sym_r, per, symmFloat32, r->comm, r->stream));
      break;
    }
    case K_A2AV_DEV: {
      /* Counts and outSplitsOffsets in `a` (device memory), output in `b`. */
      const int n = tw->nranks;
      int64_t *splits = (int64_t *)(uintptr_t)a, *out = splits + n;
      TW_SYMM_REQUIRE(r, symmAllToAllvDevice(sym_s, splits, (void *)(uintptr_t)b, bytes, out, 1, symmUint8, r->comm,
                                             r->stream));
      break;
    }
    case K_NORM:
    case K_NORM_IN_PLACE:
    case K_NORM_WIDE: {
      /* Input and out in `a`, residual and residualOut in `b`, the weight
       * after them (their contents do not matter: nothing is written);
       * in place out is the input and residualOut the residual. */
      const size_t tokens = k == K_NORM_WIDE ? 128 : 4, hidden = 4096, rows = tokens * hidden * 2;
      const size_t apart = k == K_NORM_IN_PLACE ? 0 : rows;
      char *in = (char *)(uintptr_t)a, *res = (char *)(uintptr_t)b;
      TW_SYMM_REQUIRE(r, symmAllReduceAddRMSNorm(in, res, res + 2 * rows, in + apart, res + apart, tokens, hidden,
                                                 1e-5f, symmBfloat16, r->comm, r->stream));
      break;
    }
    default: {
      const int ns = tw->nranks * 2;
      int64_t *splits = (int64_t *)(uintptr_t)a, *out = splits + ns;
      TW_SYMM_REQUIRE(r, symmAllToAllvDevice2d(sym_s, splits, (void *)(uintptr_t)b, bytes, out, 2, 16, 1, symmUint8,
                                               r->comm, r->stream));
      break;
    }
  }
  const double hard = t0 + timeout_s + 30;
  double t = 0;
  for (;;) {
    async = symmSuccess;
    symmResult_t q = symmCommGetAsyncError(r->comm, &async);
    t = tu_now() - t0;
    if (!TW_SYMM(r, q) || async != symmSuccess || tu_now() > hard) break;
    tw_sleep(0.005);
  }
  char msg[1024];
  const char *m = tu_last_error(r->comm, msg, sizeof msg);
  tw_log(tw, "rank 0: %s: async error %s after %.3f s (SYMM_TIMEOUT=%.1f s, SYMM_ALGO=%s): %s", case_name[k],
         tu_result_name(async), t, timeout_s, getenv("SYMM_ALGO") ? getenv("SYMM_ALGO") : "(unset)", m ? m : "(NULL)");
  TW_CHECK(r, async == symmTimeout, "%s: async error %s, expected symmTimeout", case_name[k], tu_result_name(async));
  if (async == symmTimeout) {
    TW_CHECK(r, t <= timeout_s + 3.0, "%s: the timeout was reported %.3f s after the call (limit %.1f + 3 s)",
             case_name[k], t, timeout_s);
    TW_CHECK(r, t >= timeout_s - 0.1, "%s: the timeout was reported after only %.3f s (SYMM_TIMEOUT %.1f s)",
             case_name[k], t, timeout_s);
    TW_CHECK(r, tu_contains_ci(m, "timed out"), "%s: the message does not say it timed out: %s", case_name[k],
             m ? m : "(NULL)");
    if (k == K_SEND || k == K_RECV || k == K_RECV_SMALL)
      TW_CHECK(r, tu_contains_ci(m, "symmSend/symmRecv"), "%s: the message does not name symmSend/symmRecv: %s",
               case_name[k], m ? m : "(NULL)");
  }
  int s = tw_stream_poll(r, r->stream, 10.0);
  TW_CHECK(r, s == 0, "%s: the stream did not drain within 10 s of the timeout report", case_name[k]);
  if (s != 0) tu_exit_now();
  tw_check_context_usable(r, "a collective's device-side timeout");
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemFree(a));
  CU_REQUIRE(tu_cu.cuMemFree(b));
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  for (int k = 0; k < NCASES; k++) {
    if (tw_init_comms(tw) != symmSuccess) return;
    /* Symmetric buffers are collective: every rank allocates them. */
    size_t sz[TW_MAX_RANKS];
    void *s[TW_MAX_RANKS], *rv[TW_MAX_RANKS];
    for (int i = 0; i < tw->nlocal; i++) sz[i] = (size_t)16 << 20;
    REQUIRE(tw_alloc(tw, sz, s) == symmSuccess, "symmMemAlloc failed");
    REQUIRE(tw_alloc(tw, sz, rv) == symmSuccess, "symmMemAlloc failed");
    tw_host_barrier(tw, "after init");
    struct tw_rank *r0 = tw->r[0].rank == 0 ? &tw->r[0] : NULL;
    if (r0) {
      rank0_case(tw, r0, k, s[0], rv[0]);
      tw_flag_set(tw, k, 1);
    }
    /* The others launched nothing: they wait for rank 0 and must have no
     * asynchronous error. */
    tw_others_wait_rank0(tw, k, timeout_s + 90);
    tw_host_barrier(tw, "before teardown");
    if (r0) cw_abort(r0, case_name[k]);
    /* The others free their symmetric buffers (local unmaps once the
     * group is gone) by destroying their communicators. */
    tw_destroy_comms(tw);
  }
}

int main(int argc, char **argv) {
  timeout_s = cw_short_timeout("2");
  static struct tw_spec spec = {.name = "coll_timeout", .modes = "mp,all", .kernels = 1, .body = body};
  spec.limit_s = NCASES * (120 + timeout_s);
  spec.process_init = cw_process_init;
  return tw_main(&spec, argc, argv);
}
