/*
 * symm_abort (GPU, 2 GPUs): symmCommAbort unblocks kernels that wait for
 * something that never comes, long before SYMM_TIMEOUT.
 *
 *   symm_abort mp|all
 *
 * SYMM_TIMEOUT is 60 s unless the environment sets another value. Rank 0
 * (mp: the rank-0 process; all: comm 0) enqueues, on its stream,
 * symmWaitSignal(peer 1, channel 7) for a signal nobody sends, then a
 * symmBarrier that rank 1 never joins and a symmStreamWaitValue32 on a word
 * that never changes. After 1 s the stream must still be busy (the waits
 * really wait) with no async error; then symmCommAbort(comm): it must
 * return successfully within 5 s, the stream must be drained by then (at
 * most 5 s more), all of it well under SYMM_TIMEOUT, and a memcpy round
 * trip and a kernel must still work on the device. Rank 1's communicator
 * has no async error and is destroyed normally.
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
  int busy = tw_stream_poll(r, 0);
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
  int s = tw_stream_poll(r, 5.0);
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
  struct tw_rank *r0 = NULL, *r1 = NULL;
  for (int i = 0; i < tw->nlocal; i++) {
    if (tw->r[i].rank == 0) r0 = &tw->r[i];
    if (tw->r[i].rank == 1) r1 = &tw->r[i];
  }
  if (r0) {
    rank0(tw, r0);
    tw_flag_set(tw, FLAG_RANK0_DONE, 1);
  }
  if (r1) {
    tw_phase("rank 1: waiting for rank 0");
    int w = tw_flag_wait(tw, FLAG_RANK0_DONE, 1, 60);
    TW_CHECK(r1, w == 0, "rank 0 did not finish its part");
    symmResult_t async = symmInternalError;
    TW_SYMM(r1, symmCommGetAsyncError(r1->comm, &async));
    TW_CHECK(r1, async == symmSuccess, "rank 1 waited for nothing, yet its async error is %s (%s)",
             tu_result_name(async), symmGetLastError(r1->comm));
    symmResult_t rc = symmCommDestroy(r1->comm);
    TW_CHECK(r1, rc == symmSuccess, "symmCommDestroy: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
    r1->comm = NULL;
  }
}

int main(int argc, char **argv) {
  setenv("SYMM_TIMEOUT", "60", 0);
  timeout_s = atof(getenv("SYMM_TIMEOUT"));
  if (timeout_s <= 0) timeout_s = 60;
  return tw_main("symm_abort", "mp,all", argc, argv, 120, body, NULL);
}
