/*
 * symm_abort (GPU, n ranks): symmCommAbort unblocks kernels that wait for
 * something that never comes, long before SYMM_TIMEOUT.
 *
 *   symm_abort mp|all [--nranks=N]
 *
 * SYMM_TIMEOUT is 60 s unless the environment sets another value. Rank 0
 * (mp: the rank-0 process; all: comm 0) enqueues, on its stream,
 * symmWaitSignal(peer 1, channel 7) for a signal nobody sends, then a
 * symmBarrier that rank 1 never joins and a symmStreamWaitValue32 on a word
 * that never changes. After 1 s the stream must still be busy (the waits
 * really wait) with no async error; then symmCommAbort(comm): it must
 * return successfully within 5 s, the stream must be drained by then (at
 * most 5 s more), all of it well under SYMM_TIMEOUT, and a memcpy round
 * trip and a kernel must still work on the device. The other ranks'
 * communicators have no async error and are destroyed normally.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_world.h"

#define FLAG_RANK0_DONE 0
#define CHANNEL 7

static double timeout_s;

static void rank0(struct tw *tw, struct tw_rank *r) {
  tw_phase("rank 0: enqueue waits");
  CUdeviceptr word = 0;
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemAlloc(&word, 256));
  tw_store_u32(r, word, 0);
  tw_stream_wait(r, 30, "zero the wait word");
  double t0 = tu_now();
  TW_SYMM_REQUIRE(r, symmWaitSignal(r->comm, 1, CHANNEL, r->stream));
  TW_SYMM_REQUIRE(r, symmBarrier(r->comm, r->stream));
  TW_SYMM_REQUIRE(r, symmStreamWaitValue32(r->comm, (void *)(uintptr_t)word, 12345, symmCmpEq, r->stream));
  tw_sleep(1.0);
  int busy = tw_stream_poll(r, r->stream, 0);
  TW_CHECK(r, busy == 1, "the stream is no longer busy 1 s after a symmWaitSignal nobody answers (poll: %d)", busy);
  symmResult_t async = symmInternalError;
  TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
  TW_CHECK(r, async == symmSuccess, "async error while waiting: %s (%s)", tu_result_name(async),
           symmGetLastError(r->comm));

  tw_phase("rank 0: symmCommAbort");
  double a0 = tu_now();
  symmResult_t rc = symmCommAbort(r->comm);
  double t_abort = tu_now() - a0;
  r->comm = NULL;
  TW_CHECK(r, rc == symmSuccess, "symmCommAbort: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
  TW_CHECK(r, t_abort < 5.0, "symmCommAbort took %.2f s (SYMM_TIMEOUT %.0f s)", t_abort, timeout_s);
  double d0 = tu_now();
  int s = tw_stream_poll(r, r->stream, 5.0);
  double t_drain = tu_now() - d0;
  TW_CHECK(r, s == 0, "the stream did not drain within 5 s after symmCommAbort returned");
  double total = tu_now() - t0;
  tw_log(tw, "rank 0: symmCommAbort returned after %.3f s; stream drained %.3f s later; %.2f s from the first "
         "wait's launch (SYMM_TIMEOUT %.0f s)",
         t_abort, t_drain, total, timeout_s);
  TW_CHECK(r, total < timeout_s / 2, "the waits ended %.1f s after launch: the abort did not cut them short", total);
  if (s != 0) tu_exit_now();
  tw_check_context_usable(r, "symmCommAbort");
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemFree(word));
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  tw_host_barrier(tw, "after init");
  struct tw_rank *r0 = tw->r[0].rank == 0 ? &tw->r[0] : NULL;
  if (r0) {
    rank0(tw, r0);
    tw_flag_set(tw, FLAG_RANK0_DONE, 1);
  }
  tw_others_wait_rank0(tw, FLAG_RANK0_DONE, 60);
  tw_destroy_comms(tw); /* the others (rank 0's was aborted) */
}

int main(int argc, char **argv) {
  setenv("SYMM_TIMEOUT", "60", 0);
  timeout_s = atof(getenv("SYMM_TIMEOUT"));
  if (timeout_s <= 0) timeout_s = 60;
  static const struct tw_spec spec = {
      .name = "symm_abort", .modes = "mp,all", .limit_s = 120, .kernels = 1, .body = body};
  return tw_main(&spec, argc, argv);
}
