/*
 * symm_leaks (GPU, n ranks): repeated allocation and communicator
 * lifecycles leave nothing behind.
 *
 *   symm_leaks mp|all [--nranks=N]
 *
 * Phase A, one communicator: 1,000 symmMemAlloc/symmMemFree cycles (3 MiB,
 * 1 MiB + 1 and 64 KiB + 7 bytes in turn; collective; every 100th buffer
 * is written and read back through the peer pointer). Phase B: 100
 * communicator init/destroy cycles (mp: symmCommInitRank with a fresh
 * unique id each cycle, made by rank 0 and handed over through shared
 * memory; all: symmCommInitAll over every rank). Before each phase (after a
 * warm-up of the same work) and after it, each process measures its devices'
 * free memory (cuMemGetInfo), its open file descriptors (/proc/self/fd) and
 * threads (/proc/self/task), and its resident memory. After each phase the
 * descriptors and threads must be back to at most the baseline and device
 * free memory back to at least the baseline, waiting up to 3 s for exiting
 * threads; resident memory may grow by at most 2 MiB from a quarter of the
 * way through each phase to its end (a one-time growth in the first cycles,
 * e.g. an allocator's high-water mark, is not a leak). All numbers are
 * printed. SYMM_TEST_ALLOC_CYCLES and SYMM_TEST_INIT_CYCLES
 * change the cycle counts, and SYMM_TEST_LEAK_TRACE=1 prints the resident
 * memory and malloc's bytes in use before every init cycle (to see whether
 * a growth is per cycle). Resident memory is measured after malloc_trim,
 * so that heap pages malloc merely keeps do not count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_world.h"

#define SALT 55u
/* Resident memory may grow once (allocator high-water marks, caches filled
 * by the first cycles), so it is checked from a quarter of the way through
 * each phase to its end: that part may grow by at most this much (noise is
 * well under 100 KiB; a leak of 30 KiB per init cycle shows). */
#define RSS_SLACK_KB 2048L

/* Cycle counts: 1,000 and 100, or SYMM_TEST_ALLOC_CYCLES / _INIT_CYCLES. */
static int cycles(const char *env, int dflt) {
  const char *v = getenv(env);
  int n = v && v[0] ? atoi(v) : dflt;
  return n > 0 ? n : dflt;
}

static const size_t cycle_sizes[] = {3u << 20, (1u << 20) + 1, (64u << 10) + 7};
#define NSIZES (sizeof cycle_sizes / sizeof cycle_sizes[0])

static void alloc_free_cycle(struct tw *tw, int k) {
  void *p[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS];
  size_t n = cycle_sizes[k % NSIZES];
  for (int i = 0; i < tw->nlocal; i++) sz[i] = n;
  symmResult_t rc = tw_alloc(tw, sz, p);
  if (rc != symmSuccess) {
    tw_fail_at(__FILE__, __LINE__, &tw->r[0], "alloc cycle %d (%zu bytes): %s (%s)", k, n, tu_result_name(rc),
               symmGetLastError(tw->r[0].comm));
    tu_exit_now();
  }
  if (k % 100 == 0) {
    /* The memory is real: fill, barrier, check the peer's copy, barrier. */
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      tw_fill(r, (CUdeviceptr)(uintptr_t)p[i], n, (uint32_t)r->rank, SALT + (uint32_t)k, 0);
      TW_SYMM(r, symmBarrier(r->comm, r->stream));
    }
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      int q = (r->rank + 1) % tw->nranks;
      void *pq = NULL;
      if (TW_SYMM(r, symmMemGetPeerPtr(r->comm, p[i], q, &pq))) {
        struct tw_count c = tw_verify(r, (CUdeviceptr)(uintptr_t)pq, n, (uint32_t)q, SALT + (uint32_t)k, 0);
        TW_CHECK(r, c.bad == 0, "alloc cycle %d: peer's copy has %llu bad bytes", k, c.bad);
      }
    }
    for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmBarrier(tw->r[i].comm, tw->r[i].stream));
    tw_sync_all(tw, 60, "alloc cycle check");
  }
  rc = tw_free(tw, p);
  if (rc != symmSuccess) {
    tw_fail_at(__FILE__, __LINE__, &tw->r[0], "free cycle %d: %s (%s)", k, tu_result_name(rc),
               symmGetLastError(tw->r[0].comm));
    tu_exit_now();
  }
}

static void print_res(struct tw *tw, const char *label, const struct tw_res *m) {
  char mem[TW_MAX_RANKS * 48] = "";
  size_t len = 0;
  for (int i = 0; i < tw->nlocal && len < sizeof mem; i++)
    len += (size_t)snprintf(mem + len, sizeof mem - len, "%sdevice %d free %zu B", i ? ", " : "", tw->r[i].device,
                            m->free_mem[i]);
  tw_log(tw, "%-22s %s; fds %d; threads %d; RSS %ld KiB; heap in use %ld KiB", label, mem, m->fds, m->threads,
         m->rss_kb, m->heap_kb);
}

/* SYMM_TEST_LEAK_TRACE=1: resident memory and heap before every cycle, to
 * tell a per-cycle growth from a one-time one. */
static void trace(struct tw *tw, const char *phase, int k) {
  static int on = -1;
  if (on < 0) on = getenv("SYMM_TEST_LEAK_TRACE") && atoi(getenv("SYMM_TEST_LEAK_TRACE")) > 0;
  if (!on) return;
  struct tw_res m;
  tw_measure(tw, &m);
  tw_log(tw, "%s cycle %d: RSS %ld KiB, heap in use %ld KiB", phase, k, m.rss_kb, m.heap_kb);
}

/* Baseline: the same values twice in a row, 100 ms apart (up to 3 s). */
static void measure_stable(struct tw *tw, struct tw_res *out) {
  struct tw_res prev;
  tw_measure(tw, &prev);
  for (int k = 0; k < 30; k++) {
    tw_sleep(0.1);
    tw_measure(tw, out);
    int same = out->fds == prev.fds && out->threads == prev.threads;
    for (int i = 0; i < tw->nlocal; i++) same &= out->free_mem[i] == prev.free_mem[i];
    if (same) return;
    prev = *out;
  }
}

static void compare(struct tw *tw, const char *phase, const struct tw_res *before, const struct tw_res *after,
                    long rss_mid_kb, int mid_cycle) {
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    long long diff = (long long)after->free_mem[i] - (long long)before->free_mem[i];
    tw_log(tw, "%s: device %d free memory %+lld B", phase, r->device, diff);
    TW_CHECK(r, after->free_mem[i] >= before->free_mem[i],
             "%s: device %d has %lld bytes less free memory than before (%zu -> %zu)", phase, r->device, -diff,
             before->free_mem[i], after->free_mem[i]);
  }
  tw_log(tw, "%s: fds %d -> %d, threads %d -> %d, RSS %ld -> %ld KiB (%+ld; %+ld from cycle %d to the end), heap in use "
         "%ld -> %ld KiB", phase, before->fds, after->fds, before->threads, after->threads, before->rss_kb,
         after->rss_kb, after->rss_kb - before->rss_kb, after->rss_kb - rss_mid_kb, mid_cycle, before->heap_kb,
         after->heap_kb);
  TW_CHECK(&tw->r[0], after->fds <= before->fds, "%s: %d open file descriptors, %d before", phase, after->fds,
           before->fds);
  TW_CHECK(&tw->r[0], after->threads <= before->threads, "%s: %d threads, %d before", phase, after->threads,
           before->threads);
  TW_CHECK(&tw->r[0], after->rss_kb - rss_mid_kb <= RSS_SLACK_KB,
           "%s: resident memory grew by %ld KiB from cycle %d to the end (%ld -> %ld KiB; allowed %ld KiB): a "
           "host-side leak per cycle?",
           phase, after->rss_kb - rss_mid_kb, mid_cycle, rss_mid_kb, after->rss_kb, RSS_SLACK_KB);
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  struct tw_res before, after;

  /* Phase A: allocation cycles on one communicator. */
  if (tw_init_comms(tw) != symmSuccess) return;
  tw_phase("alloc warm-up");
  for (int k = 0; k < (int)NSIZES * 2; k++) alloc_free_cycle(tw, k + 1);
  tw_host_barrier(tw, "before the alloc baseline");
  measure_stable(tw, &before);
  print_res(tw, "alloc cycles: before", &before);
  tw_host_barrier(tw, "alloc baseline taken");
  const int alloc_cycles = cycles("SYMM_TEST_ALLOC_CYCLES", 1000);
  const int init_cycles = cycles("SYMM_TEST_INIT_CYCLES", 100);
  double t0 = tu_now();
  struct tw_res mid;
  const int alloc_mid = alloc_cycles / 4;
  for (int k = 0; k < alloc_cycles; k++) {
    if (k == alloc_mid) tw_measure(tw, &mid);
    tw_phase("alloc cycle %d", k);
    alloc_free_cycle(tw, k);
  }
  double t = tu_now() - t0;
  tw_log(tw, "%d alloc/free cycles: %.2f s, %.2f ms per cycle", alloc_cycles, t, t / alloc_cycles * 1e3);
  tw_host_barrier(tw, "alloc cycles done");
  tw_measure_settled(tw, &before, 3.0, &after);
  print_res(tw, "alloc cycles: after", &after);
  compare(tw, "alloc cycles", &before, &after, mid.rss_kb, alloc_mid);
  tw_check_async(tw, "the alloc cycles");
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);

  /* Phase B: communicator lifecycles. The communicator above was the
   * warm-up: measure now that it is gone. */
  tw_host_barrier(tw, "before the init baseline");
  measure_stable(tw, &before);
  print_res(tw, "init cycles: before", &before);
  tw_host_barrier(tw, "init baseline taken");
  t0 = tu_now();
  double slowest = 0;
  const int init_mid = init_cycles / 4;
  for (int k = 0; k < init_cycles; k++) {
    if (k == init_mid) tw_measure(tw, &mid);
    trace(tw, "init", k);
    tw_phase("init cycle %d", k);
    double c0 = tu_now();
    if (tw_init_comms(tw) != symmSuccess) {
      tw_fail_at(__FILE__, __LINE__, NULL, "init cycle %d failed (see above)", k);
      tu_exit_now();
    }
    tw_destroy_comms(tw);
    double c = tu_now() - c0;
    if (c > slowest) slowest = c;
  }
  t = tu_now() - t0;
  tw_log(tw, "%d init/destroy cycles: %.2f s, %.1f ms per cycle (slowest %.1f ms)", init_cycles, t,
         t / init_cycles * 1e3, slowest * 1e3);
  tw_host_barrier(tw, "init cycles done");
  tw_measure_settled(tw, &before, 3.0, &after);
  print_res(tw, "init cycles: after", &after);
  compare(tw, "init cycles", &before, &after, mid.rss_kb, init_mid);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {
      .name = "symm_leaks", .modes = "mp,all", .limit_s = 420, .kernels = 1, .body = body};
  return tw_main(&spec, argc, argv);
}
