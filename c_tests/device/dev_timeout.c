/*
 * dev_timeout (GPU, n ranks): a rank that never arrives at a device-API
 * barrier makes the others' kernels give up after SYMM_TIMEOUT, report it,
 * and return; nothing hangs and the contexts stay usable.
 *
 *   dev_timeout mp|all [--nranks=N]
 *
 * SYMM_TIMEOUT is 2 s unless the environment sets another value. After a
 * collective symmDevCommCreate (4 barrier slots), every rank but the last
 * launches dk_barrier_once (4 blocks x 64 threads, symmDevBarrier on slot
 * blockIdx.x); the last rank launches nothing. Each survivor polls
 * symmCommGetAsyncError: it must become symmTimeout between SYMM_TIMEOUT -
 * 0.1 s and SYMM_TIMEOUT + 1 s after the launch (+ 2 s with shared
 * devices) and symmGetLastError(comm) must name the user's wait
 * (symmDevBarrierWait, its barrier slot) and the missing rank; the kernel
 * must have returned (stream drained) with symmTimeout in every thread of
 * every block; a memcpy and a kernel still work. The missing rank has no
 * asynchronous error. Survivors abort their communicators (as the message
 * advises), the missing rank destroys its own.
 */
#include <stdio.h>
#include <stdlib.h>

#include "dev_util.h"

#define BLOCKS 4
#define THREADS 64

static double timeout_s;

/* Watch every local survivor at once (one thread drives them all in "all"
 * mode): when its asynchronous error appears and when its kernel returns,
 * both measured from the launch. Then check each. */
static void survivors(struct tw *tw, const CUdeviceptr *codes, double t0) {
  double t_err[TW_MAX_RANKS], t_done[TW_MAX_RANKS];
  symmResult_t async[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) t_err[i] = t_done[i] = 0, async[i] = symmSuccess;
  const double hard = t0 + timeout_s + 20;
  for (;;) {
    int pending = 0;
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      if (r->rank == tw->nranks - 1) continue;
      if (t_err[i] == 0) {
        symmResult_t q = symmCommGetAsyncError(r->comm, &async[i]);
        if (!TW_SYMM(r, q)) t_err[i] = -1;
        else if (async[i] != symmSuccess) t_err[i] = tu_now() - t0;
        else pending++;
      }
      if (t_done[i] == 0) {
        tw_use(r);
        CUresult s = tu_cu.cuStreamQuery(r->stream);
        if (s == 0) t_done[i] = tu_now() - t0;
        else if (s == TU_CUDA_ERROR_NOT_READY) pending++;
        else {
          TW_CHECK(r, 0, "the survivor's stream failed: %s", tu_cu_error(s));
          t_done[i] = -1;
        }
      }
    }
    if (!pending || tu_now() > hard) break;
    tw_sleep(0.005);
  }
  const double slack = tw->shared ? 2.0 : 1.0;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    if (r->rank == tw->nranks - 1) continue;
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    tw_log(tw, "rank %d: async error %s after %.3f s, kernel returned after %.3f s (SYMM_TIMEOUT=%.1f s): %s",
           r->rank, tu_result_name(async[i]), t_err[i], t_done[i], timeout_s, m ? m : "(NULL)");
    TW_CHECK(r, async[i] == symmTimeout, "async error %s, expected symmTimeout", tu_result_name(async[i]));
    if (async[i] == symmTimeout) {
      TW_CHECK(r, t_err[i] <= timeout_s + slack, "the timeout was reported %.3f s after the launch (limit %.1f + %.0f s)",
               t_err[i], timeout_s, slack);
      TW_CHECK(r, t_err[i] >= timeout_s - 0.1, "the timeout was reported after only %.3f s (SYMM_TIMEOUT %.1f s)",
               t_err[i], timeout_s);
      TW_CHECK(r, tu_contains_ci(m, "symmDevBarrierWait") && tu_contains_ci(m, "barrier slot"),
               "the message does not name the user's wait (symmDevBarrierWait, barrier slot): %s", m ? m : "(NULL)");
      char missing[32];
      snprintf(missing, sizeof missing, "rank %d", tw->nranks - 1);
      TW_CHECK(r, tu_contains_ci(m, missing), "the message does not name the missing %s: %s", missing,
               m ? m : "(NULL)");
    }
    TW_CHECK(r, t_done[i] > 0, "the user kernel did not return within SYMM_TIMEOUT + 20 s");
    if (t_done[i] <= 0) tu_exit_now();
    TW_CHECK(r, t_done[i] <= timeout_s + slack + 1.0,
             "the user kernel returned %.2f s after its launch (SYMM_TIMEOUT %.1f s)", t_done[i], timeout_s);
    uint32_t got[BLOCKS * THREADS];
    dev_read_words(r, codes[i], BLOCKS * THREADS, got);
    unsigned wrong = 0;
    for (int k = 0; k < BLOCKS * THREADS; k++) wrong += got[k] != (uint32_t)symmTimeout;
    TW_CHECK(r, wrong == 0, "%u threads did not return symmTimeout from symmDevBarrier (thread 0: %s)", wrong,
             tu_result_name((int)got[0]));
    tw_check_context_usable(r, "a device-API timeout");
  }
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  struct dev_kernels k[TW_MAX_RANKS];
  dev_load(tw, k);
  symmDevCommRequirements req = dev_requirements(BLOCKS, 0, 0);
  symmDevComm dc[TW_MAX_RANKS];
  symmResult_t rc = dev_create_all(tw, &req, dc);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM_REQUIRE(&tw->r[i], rc);
  CUdeviceptr codes[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    codes[i] = dev_words(&tw->r[i], BLOCKS * THREADS);
    dev_fill_words(&tw->r[i], codes[i], BLOCKS * THREADS, 0xffffffffu);
  }
  tw_host_barrier(tw, "before the launch");
  tw_phase("survivors: symmDevBarrier that rank %d never joins", tw->nranks - 1);
  const double t0 = tu_now();
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    if (r->rank == tw->nranks - 1) continue;
    CUdeviceptr c = codes[i];
    void *p[] = {&dc[i], &c};
    dev_launch(r, NULL, k[i].barrier_once, BLOCKS, THREADS, p, "dk_barrier_once");
  }
  survivors(tw, codes, t0);
  tw_host_barrier(tw, "survivors checked");

  /* The missing rank: untouched by the others' timeouts. */
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    if (r->rank != tw->nranks - 1) continue;
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    TW_CHECK(r, async == symmSuccess, "the rank that never arrived has async error %s (%s)", tu_result_name(async),
             symmGetLastError(r->comm));
  }
  tw_host_barrier(tw, "before teardown");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemFree(codes[i]));
    if (r->rank == tw->nranks - 1) continue;
    tw_phase("rank %d: abort", r->rank);
    double a0 = tu_now();
    rc = symmCommAbort(r->comm);
    TW_CHECK(r, rc == symmSuccess, "symmCommAbort: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
    TW_CHECK(r, tu_now() - a0 < 5.0, "symmCommAbort took %.2f s", tu_now() - a0);
    r->comm = NULL;
  }
  tw_destroy_comms(tw); /* the missing rank's */
}

int main(int argc, char **argv) {
  setenv("SYMM_TIMEOUT", "2", 0); /* before any library call; mp children inherit it */
  timeout_s = atof(getenv("SYMM_TIMEOUT"));
  if (timeout_s <= 0) timeout_s = 2;
  /* .kernels: tw_check_context_usable launches the harness's test kernels. */
  static struct tw_spec spec = {.name = "dev_timeout", .modes = "mp,all", .kernels = 1, .body = body};
  spec.limit_s = 120 + timeout_s;
  return tw_main(&spec, argc, argv);
}
