/*
 * symm_barrier_stress (GPU, 2 GPUs): 100,000 symmBarrier back to back on one
 * stream per rank, then one stream wait; every call succeeds, the streams
 * drain within the deadline, and symmCommGetAsyncError stays symmSuccess.
 * Prints the time per barrier (wall clock from the first enqueue to the
 * drained stream, divided by the count) and the host enqueue cost.
 *
 *   symm_barrier_stress mp|all
 */
#include <stdio.h>

#include "gpu_world.h"

#define WARMUP 1000
#define COUNT 100000

/* Enqueue n barriers on every local rank, interleaved (one thread drives
 * both GPUs in "all" mode). Returns the number of failed calls. */
static int enqueue(struct tw *tw, int n) {
  for (int k = 0; k < n; k++) {
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      symmResult_t rc = symmBarrier(r->comm, r->stream);
      if (rc != symmSuccess) {
        TW_SYMM(r, rc);
        tw_log(tw, "rank %d: symmBarrier #%d failed; stopping", r->rank, k);
        return 1;
      }
    }
  }
  return 0;
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  tw_phase("warm-up barriers");
  tw_host_barrier(tw, "before warm-up");
  int failed = enqueue(tw, WARMUP);
  tw_sync_all(tw, 120, "warm-up barriers");
  if (!failed) {
    tw_host_barrier(tw, "before the timed run");
    tw_phase("%d barriers", COUNT);
    double t0 = tu_now();
    failed = enqueue(tw, COUNT);
    double t_enq = tu_now() - t0;
    tw_sync_all(tw, 300, "100000 barriers");
    double t = tu_now() - t0;
    if (!failed)
      tw_log(tw, "%d barriers on %d local stream(s): %.3f s, %.2f us per barrier (host enqueue %.2f us per call)",
             COUNT, tw->nlocal, t, t / COUNT * 1e6, t_enq / COUNT / tw->nlocal * 1e6);
  }
  for (int i = 0; i < tw->nlocal; i++) {
    symmResult_t async = symmInternalError;
    TW_SYMM(&tw->r[i], symmCommGetAsyncError(tw->r[i].comm, &async));
    TW_CHECK(&tw->r[i], async == symmSuccess, "async error after the barriers: %s (%s)", tu_result_name(async),
             symmGetLastError(tw->r[i].comm));
  }
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) { return tw_main("symm_barrier_stress", "mp,all", argc, argv, 300, body, NULL); }
