/*
 * symm_timeout (GPU, n ranks): a device-side wait that can never finish
 * ends after SYMM_TIMEOUT with an asynchronous error instead of hanging.
 *
 *   symm_timeout mp|all [--nranks=N]
 *
 * SYMM_TIMEOUT is 2 s unless the environment sets another value (CTest sets
 * 2). Rank 0 enqueues symmBarrier; no other rank does (mp: they wait until
 * rank 0 is done, then leave; all: only comm 0 launches a barrier). Rank 0
 * polls symmCommGetAsyncError every 5 ms: it must become symmTimeout no
 * earlier than SYMM_TIMEOUT - 0.1 s and no later than SYMM_TIMEOUT + 1 s
 * after the launch, stay so, and symmGetLastError(comm) must name
 * symmBarrier and a rank it waited for (any of 1 .. n-1: the barrier waits
 * for all of them at once). The stream then drains, and a memcpy round trip
 * and a kernel still work on that device. The other ranks' communicators
 * have no async error. Rank 0 aborts its communicator (as the message
 * advises), the others destroy theirs.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_world.h"

#define FLAG_RANK0_DONE 0

static double timeout_s;

static void rank0(struct tw *tw, struct tw_rank *r) {
  tw_phase("rank 0: barrier that nobody joins");
  symmResult_t async = symmInternalError;
  TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
  TW_CHECK(r, async == symmSuccess, "async error before the test: %s", tu_result_name(async));
  double t0 = tu_now();
  TW_SYMM_REQUIRE(r, symmBarrier(r->comm, r->stream));
  double hard = t0 + timeout_s + 15;
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
  tw_log(tw, "rank 0: async error %s after %.3f s (SYMM_TIMEOUT=%.1f s): %s", tu_result_name(async), t, timeout_s,
         m ? m : "(NULL)");
  TW_CHECK(r, async == symmTimeout, "async error %s, expected symmTimeout (polled for %.1f s)", tu_result_name(async),
           tu_now() - t0);
  if (async == symmTimeout) {
    TW_CHECK(r, t <= timeout_s + 1.0, "the timeout was reported %.3f s after the launch (limit %.1f + 1 s)", t,
             timeout_s);
    TW_CHECK(r, t >= timeout_s - 0.1, "the timeout was reported after only %.3f s (SYMM_TIMEOUT %.1f s)", t,
             timeout_s);
    TW_CHECK(r, tu_contains_ci(m, "symmBarrier"), "the message does not name symmBarrier: %s", m ? m : "(NULL)");
    int named = 0;
    for (int q = 1; q < tw->nranks; q++) {
      char rq[32];
      snprintf(rq, sizeof rq, "rank %d", q);
      named |= tu_contains_ci(m, rq);
    }
    TW_CHECK(r, named, "the message does not name a rank the barrier waited for (1 .. %d): %s", tw->nranks - 1,
             m ? m : "(NULL)");
  }
  /* The kernel gave up: the stream drains. */
  int s = tw_stream_poll(r, r->stream, 5.0);
  TW_CHECK(r, s == 0, "the stream did not drain within 5 s of the timeout report");
  if (s != 0) tu_exit_now();
  symmResult_t again = symmSuccess;
  TW_SYMM(r, symmCommGetAsyncError(r->comm, &again));
  TW_CHECK(r, again == symmTimeout, "the async error did not stay: now %s", tu_result_name(again));
  tw_check_context_usable(r, "a device-side timeout");
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
  tw_others_wait_rank0(tw, FLAG_RANK0_DONE, timeout_s + 60);
  tw_host_barrier(tw, "before teardown");
  if (r0) {
    tw_phase("rank 0: abort");
    double t0 = tu_now();
    symmResult_t rc = symmCommAbort(r0->comm);
    double t = tu_now() - t0;
    TW_CHECK(r0, rc == symmSuccess, "symmCommAbort: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
    TW_CHECK(r0, t < 5.0, "symmCommAbort took %.2f s", t);
    r0->comm = NULL;
  }
  tw_destroy_comms(tw); /* the others (rank 0's was aborted) */
}

int main(int argc, char **argv) {
  /* Before any library call: read once per process (mp children inherit). */
  setenv("SYMM_TIMEOUT", "2", 0);
  timeout_s = atof(getenv("SYMM_TIMEOUT"));
  if (timeout_s <= 0) timeout_s = 2;
  static struct tw_spec spec = {.name = "symm_timeout", .modes = "mp,all", .kernels = 1, .body = body};
  spec.limit_s = 90 + timeout_s;
  return tw_main(&spec, argc, argv);
}
