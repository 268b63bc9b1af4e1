/*
 * symm_barrier_stress (GPU, n ranks): 100,000 symmBarrier back to back on
 * one stream per rank, then one stream wait; every call succeeds, the
 * streams drain within the deadline, and symmCommGetAsyncError stays
 * symmSuccess. Prints the time per barrier (wall clock from the first
 * enqueue to the drained stream, divided by the count) and the host enqueue
 * cost. With shared devices (several ranks per GPU, time-sliced) 2,000
 * after 100 warm-up ones instead of 1,000: every barrier there waits for a
 * context switch.
 *
 *   symm_barrier_stress mp|all [--nranks=N]
 */
#include <stdio.h>

#include "gpu_world.h"

#define WARMUP 1000
#define COUNT 100000
#define WARMUP_SHARED 100
#define COUNT_SHARED 2000

/* Enqueue n barriers on every local rank, interleaved (one thread drives
 * every GPU in "all" mode). Returns the number of failed calls. */
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
  int failed = enqueue(tw, tw->shared ? WARMUP_SHARED : WARMUP);
  tw_sync_all(tw, 120, "warm-up barriers");
  if (!failed) {
    const int count = tw->shared ? COUNT_SHARED : COUNT;
    tw_host_barrier(tw, "before the timed run");
    tw_phase("%d barriers", count);
    double t0 = tu_now();
    failed = enqueue(tw, count);
    double t_enq = tu_now() - t0;
    tw_sync_all(tw, 300, "the timed barriers");
    double t = tu_now() - t0;
    if (!failed)
      tw_log(tw, "%d barriers on %d local stream(s): %.3f s, %.2f us per barrier (host enqueue %.2f us per call)%s",
             count, tw->nlocal, t, t / count * 1e6, t_enq / count / tw->nlocal * 1e6,
             tw->shared ? " [shared devices: timing means nothing]" : "");
  }
  tw_check_async(tw, "the barriers");
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {
      .name = "symm_barrier_stress", .modes = "mp,all", .limit_s = 300, .kernels = 1, .body = body};
  return tw_main(&spec, argc, argv);
}
