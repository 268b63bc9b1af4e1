/*
 * dev_abort (GPU, n ranks): symmCommAbort ends a user kernel that spins in
 * a device-API wait, long before SYMM_TIMEOUT, and the kernel learns why.
 *
 *   dev_abort mp|all [--nranks=N]
 *
 * SYMM_TIMEOUT is 60 s unless the environment sets another value. After a
 * collective symmDevCommCreate, rank 0 launches, on its stream,
 * dk_signal_wait (thread 0 waits for signal slot 0 from rank 1 to reach 1;
 * nobody signals) and then dk_barrier_once (a barrier no other rank
 * joins). After 1 s the stream must still be busy with no asynchronous
 * error; then symmCommAbort: it must return within 5 s, the stream must
 * drain within 5 s more (all of it well under SYMM_TIMEOUT), the signal
 * wait must have returned symmRemoteError (aborted) and every thread of
 * the barrier kernel too; a memcpy and a kernel still work. The other
 * ranks have no asynchronous error and destroy their communicators.
 */
#include <stdio.h>
#include <stdlib.h>

#include "dev_util.h"

#define FLAG_RANK0_DONE 0
#define THREADS 64

static double timeout_s;

static void rank0(struct tw *tw, struct tw_rank *r, struct dev_kernels *k, symmDevComm *dc) {
  CUdeviceptr wait_code = dev_words(r, 1), bar_codes = dev_words(r, THREADS);
  dev_fill_words(r, wait_code, 1, 0xffffffffu);
  dev_fill_words(r, bar_codes, THREADS, 0xffffffffu);
  tw_phase("rank 0: user kernels that wait for ever");
  const double t0 = tu_now();
  unsigned slot = 0;
  int peer = 1;
  unsigned long long value = 1;
  void *pw[] = {dc, &slot, &peer, &value, &wait_code};
  dev_launch(r, NULL, k->signal_wait, 1, 32, pw, "dk_signal_wait");
  void *pb[] = {dc, &bar_codes};
  dev_launch(r, NULL, k->barrier_once, 1, THREADS, pb, "dk_barrier_once");
  tw_sleep(1.0);
  int busy = tw_stream_poll(r, r->stream, 0);
  TW_CHECK(r, busy == 1, "the stream is no longer busy 1 s after a signal wait nobody answers (poll: %d)", busy);
  symmResult_t async = symmInternalError;
  TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
  TW_CHECK(r, async == symmSuccess, "async error while waiting: %s (%s)", tu_result_name(async),
           symmGetLastError(r->comm));

  tw_phase("rank 0: symmCommAbort");
  const double a0 = tu_now();
  symmResult_t rc = symmCommAbort(r->comm);
  const double t_abort = tu_now() - a0;
  r->comm = NULL;
  TW_CHECK(r, rc == symmSuccess, "symmCommAbort: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
  TW_CHECK(r, t_abort < 5.0, "symmCommAbort took %.2f s (SYMM_TIMEOUT %.0f s)", t_abort, timeout_s);
  const double d0 = tu_now();
  int s = tw_stream_poll(r, r->stream, 5.0);
  const double t_drain = tu_now() - d0, total = tu_now() - t0;
  TW_CHECK(r, s == 0, "the user kernels did not return within 5 s after symmCommAbort returned");
  tw_log(tw, "rank 0: symmCommAbort returned after %.3f s; the user kernels returned %.3f s later; %.2f s from "
         "launch (SYMM_TIMEOUT %.0f s)", t_abort, t_drain, total, timeout_s);
  TW_CHECK(r, total < timeout_s / 2, "the kernels ended %.1f s after launch: the abort did not cut them short", total);
  if (s != 0) tu_exit_now();
  uint32_t w = 0, b[THREADS];
  dev_read_words(r, wait_code, 1, &w);
  dev_read_words(r, bar_codes, THREADS, b);
  TW_CHECK(r, w == (uint32_t)symmRemoteError, "symmDevSignalWait returned %s after the abort, expected symmRemoteError",
           tu_result_name((int)w));
  unsigned wrong = 0;
  for (int i = 0; i < THREADS; i++) wrong += b[i] != (uint32_t)symmRemoteError;
  TW_CHECK(r, wrong == 0, "%u threads of the aborted barrier did not return symmRemoteError (thread 0: %s)", wrong,
           tu_result_name((int)b[0]));
  tw_check_context_usable(r, "symmCommAbort of a spinning user kernel");
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemFree(wait_code));
  CU_REQUIRE(tu_cu.cuMemFree(bar_codes));
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  struct dev_kernels k[TW_MAX_RANKS];
  dev_load(tw, k);
  symmDevCommRequirements req = dev_requirements(1, 1, 0);
  symmDevComm dc[TW_MAX_RANKS];
  symmResult_t rc = dev_create_all(tw, &req, dc);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM_REQUIRE(&tw->r[i], rc);
  tw_host_barrier(tw, "after symmDevCommCreate");
  struct tw_rank *r0 = tw->r[0].rank == 0 ? &tw->r[0] : NULL;
  if (r0) {
    rank0(tw, r0, &k[0], &dc[0]);
    tw_flag_set(tw, FLAG_RANK0_DONE, 1);
  }
  tw_others_wait_rank0(tw, FLAG_RANK0_DONE, 90);
  tw_destroy_comms(tw); /* the others (rank 0's was aborted) */
}

int main(int argc, char **argv) {
  setenv("SYMM_TIMEOUT", "60", 0);
  timeout_s = atof(getenv("SYMM_TIMEOUT"));
  if (timeout_s <= 0) timeout_s = 60;
  /* .kernels: tw_check_context_usable launches the harness's test kernels. */
  static const struct tw_spec spec = {
      .name = "dev_abort", .modes = "mp,all", .limit_s = 150, .kernels = 1, .body = body};
  return tw_main(&spec, argc, argv);
}
