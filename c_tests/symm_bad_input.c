/*
 * symm_bad_input (GPU): wrong calls fail quickly with the documented code,
 * write no outputs, and leave the communicator usable; collective calls on
 * which the ranks disagree fail on every rank instead of hanging.
 *
 *   symm_bad_input one|mp|all [--nranks=N]
 *
 * one (1 GPU, symmCommInitAll over 1 device), local checks:
 *   symmMemFree of NULL / a made-up address / a cuMemAlloc pointer / an
 *   interior pointer / a freed pointer -> symmInvalidArgument;
 *   symmMemAlloc of 0 bytes, of SIZE_MAX -> symmInvalidArgument; of more
 *   than the device has -> an error, after which allocation still works;
 *   symmMemGetPeerPtr with peer -1 / nranks / INT_MAX, or a pointer outside
 *   every buffer, symmMemGetPeerTable of a host pointer -> symmInvalidArgument;
 *   symmCommRegister of a host pointer, 0 bytes, or past its allocation's
 *   end, symmCommDeregister of a made-up handle -> symmInvalidArgument;
 *   symmPutSignal/symmWaitSignal to self or on channel -1 / SYMM_SIGNAL_CHANNELS,
 *   symmCommGetSignalPad(peer out of range), symmStreamWriteValue32 on an
 *   unaligned address -> symmInvalidArgument; no async error afterwards.
 * mp and all (n ranks, SYMM_BOOTSTRAP_TIMEOUT=10): the local checks above
 * that need no peer, peer out of range, then collectives that disagree
 * (rank 0 against all the others, "rank 1" below):
 *   symmMemAlloc with 1 MiB on rank 0 and 2 MiB + 3 on rank 1 -> both ranks
 *   symmInvalidUsage within 5 s, message naming both sizes, no output
 *   written; then a matching allocation succeeds at the same address as
 *   before the failure (the failed one leaked no heap range) and device free
 *   memory is back where it was;
 *   symmMemAlloc on rank 0 against symmCommRegister on rank 1 -> both fail
 *   ("out of step") within 5 s;
 *   symmCommRegister of 4096 bytes on rank 0 and 8192 on rank 1 -> both
 *   fail (symmInvalidUsage) within 5 s; then matching registrations work;
 *   symmMemFree of different buffers (rank 0 frees X, rank 1 frees Y) ->
 *   both symmInvalidUsage ("nothing was freed") within 5 s, both buffers
 *   still known, and then freed normally.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_world.h"

#define SENT ((void *)(uintptr_t)0xdeadbee0)
#define QUICK_S 5.0

/* Local (non-collective) misuse on rank r: everything fails fast. */
static void local_checks(struct tw *tw, struct tw_rank *r) {
  symmComm_t c = r->comm;
  void *out = SENT;
  double t0 = tu_now();

  /* symmMemFree: only symmMemAlloc's own addresses. */
  TW_EXPECT_FAIL(r, symmMemFree(c, NULL), symmInvalidArgument, c, "ptr");
  TW_EXPECT_FAIL(r, symmMemFree(c, (void *)(uintptr_t)0x10000), symmInvalidArgument, c, "not a live");
  CUdeviceptr dev = 0;
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemAlloc(&dev, 1u << 20));
  TW_EXPECT_FAIL(r, symmMemFree(c, (void *)(uintptr_t)dev), symmInvalidArgument, c, "not a live");

  /* symmMemAlloc: size checks happen before anything collective. */
  TW_EXPECT_FAIL(r, symmMemAlloc(c, 0, &out), symmInvalidArgument, c, "size");
  TW_CHECK(r, out == SENT, "symmMemAlloc(0) wrote %p", out);
  TW_EXPECT_FAIL(r, symmMemAlloc(c, SIZE_MAX, &out), symmInvalidArgument, c, "size");
  TW_CHECK(r, out == SENT, "symmMemAlloc(SIZE_MAX) wrote %p", out);

  /* Peer and pointer lookups. */
  int peers[] = {-1, tw->nranks, tw->nranks + 5, INT_MAX};
  void *scratch = (void *)(uintptr_t)r->scratch;
  for (size_t k = 0; k < sizeof peers / sizeof peers[0]; k++) {
    void *pp = SENT;
    size_t bytes = 7;
    /* The signal pad is symmetric memory that always exists. */
    void *pad = NULL;
    TW_SYMM(r, symmCommGetSignalPad(c, r->rank, &pad, &bytes));
    bytes = 7;
    TW_EXPECT_FAIL(r, symmMemGetPeerPtr(c, pad, peers[k], &pp), symmInvalidArgument, c, "peer");
    TW_CHECK(r, pp == SENT, "symmMemGetPeerPtr(peer %d) wrote %p", peers[k], pp);
    TW_EXPECT_FAIL(r, symmCommGetSignalPad(c, peers[k], &pp, &bytes), symmInvalidArgument, c, "peer");
    TW_CHECK(r, pp == SENT && bytes == 7, "symmCommGetSignalPad(peer %d) wrote its outputs", peers[k]);
  }
  void *pp = SENT;
  TW_EXPECT_FAIL(r, symmMemGetPeerPtr(c, scratch, 0, &pp), symmInvalidArgument, c, NULL);
  TW_EXPECT_FAIL(r, symmMemGetPeerPtr(c, &pp, 0, &pp), symmInvalidArgument, c, NULL);
  TW_CHECK(r, pp == SENT, "a rejected symmMemGetPeerPtr wrote %p", pp);
  void **table = (void **)SENT;
  TW_EXPECT_FAIL(r, symmMemGetPeerTable(c, &pp, &table), symmInvalidArgument, c, NULL);
  TW_CHECK(r, table == (void **)SENT, "a rejected symmMemGetPeerTable wrote %p", (void *)table);

  /* Registration arguments (checked locally, before the collective part). */
  static char host_buf[4096];
  void *h = SENT;
  TW_EXPECT_FAIL(r, symmCommRegister(c, host_buf, sizeof host_buf, &h), symmInvalidArgument, c, "buff");
  TW_EXPECT_FAIL(r, symmCommRegister(c, (void *)(uintptr_t)dev, 0, &h), symmInvalidArgument, c, "size");
  /* 64 MiB from inside a 1 MiB allocation: past its end whatever the
   * driver's rounding (a range that fit would make this a collective call). */
  TW_EXPECT_FAIL(r, symmCommRegister(c, (void *)(uintptr_t)(dev + 4096), 64u << 20, &h), symmInvalidArgument, c,
                 "past");
  TW_CHECK(r, h == SENT, "a rejected symmCommRegister wrote %p", h);
  TW_EXPECT_FAIL(r, symmCommDeregister(c, (void *)(uintptr_t)12345), symmInvalidArgument, c, NULL);

  /* Signals. */
  TW_EXPECT_FAIL(r, symmPutSignal(c, r->rank, 0, r->stream), symmInvalidArgument, c, "peer");
  TW_EXPECT_FAIL(r, symmWaitSignal(c, r->rank, 0, r->stream), symmInvalidArgument, c, "peer");
  int other = tw->nranks > 1 ? (r->rank + 1) % tw->nranks : 0;
  if (tw->nranks > 1) {
    TW_EXPECT_FAIL(r, symmPutSignal(c, other, -1, r->stream), symmInvalidArgument, c, "channel");
    TW_EXPECT_FAIL(r, symmWaitSignal(c, other, SYMM_SIGNAL_CHANNELS, r->stream), symmInvalidArgument, c, "channel");
  }
  TW_EXPECT_FAIL(r, symmPutSignal(c, tw->nranks, 0, r->stream), symmInvalidArgument, c, "peer");
  TW_EXPECT_FAIL(r, symmStreamWriteValue32(c, (void *)(uintptr_t)(dev + 2), 1, r->stream), symmInvalidArgument, c,
                 "aligned");
  TW_EXPECT_FAIL(r, symmStreamWaitValue32(c, (void *)(uintptr_t)(dev + 1), 1, symmCmpEq, r->stream),
                 symmInvalidArgument, c, "aligned");

  double t = tu_now() - t0;
  TW_CHECK(r, t < QUICK_S, "the rejected calls took %.2f s together", t);
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemFree(dev));
  tw_stream_wait(r, 30, "stream after rejected calls");
  symmResult_t async = symmInternalError;
  TW_SYMM(r, symmCommGetAsyncError(c, &async));
  TW_CHECK(r, async == symmSuccess, "async error after rejected calls: %s", tu_result_name(async));
  tw_log(tw, "rank %d: local misuse rejected in %.3f s", r->rank, t);
}

/* Alloc, write, read back from every rank, free: the communicator works.
 * Returns this rank's address (of local rank i) for the layout check. */
static void alloc_roundtrip(struct tw *tw, size_t n, uint32_t salt, void **addr) {
  void *p[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) sz[i] = n;
  symmResult_t rc = tw_alloc(tw, sz, p);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  if (rc != symmSuccess) tu_exit_now();
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    addr[i] = p[i];
    tw_fill(r, (CUdeviceptr)(uintptr_t)p[i], n, (uint32_t)r->rank, salt, 0);
    TW_SYMM(r, symmBarrier(r->comm, r->stream));
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    for (int q = 0; q < tw->nranks; q++) {
      void *pq = NULL;
      if (!TW_SYMM(r, symmMemGetPeerPtr(r->comm, p[i], q, &pq))) continue;
      struct tw_count c = tw_verify(r, (CUdeviceptr)(uintptr_t)pq, n, (uint32_t)q, salt, 0);
      TW_CHECK(r, c.bad == 0, "rank %d's copy: %llu bad bytes", q, c.bad);
    }
  }
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmBarrier(tw->r[i].comm, tw->r[i].stream));
  tw_sync_all(tw, 60, "alloc round trip");
  rc = tw_free(tw, p);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
}

/* Free-pointer checks that need a live allocation. */
static void free_checks(struct tw *tw) {
  void *p[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) sz[i] = 8192;
  symmResult_t rc = tw_alloc(tw, sz, p);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  if (rc != symmSuccess) tu_exit_now();
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    TW_EXPECT_FAIL(r, symmMemFree(r->comm, (char *)p[i] + 4096), symmInvalidArgument, r->comm, "not a live");
  }
  rc = tw_free(tw, p);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    TW_EXPECT_FAIL(r, symmMemFree(r->comm, p[i]), symmInvalidArgument, r->comm, "not a live");
  }
  if (tw->mode != TW_MP) {
    /* Inside a group too: the error comes back from symmGroupEnd. */
    symmResult_t s = symmGroupStart();
    for (int i = 0; i < tw->nlocal; i++) {
      symmResult_t f = symmMemFree(tw->r[i].comm, p[i]);
      if (s == symmSuccess) s = f;
    }
    symmResult_t e = symmGroupEnd();
    if (s == symmSuccess) s = e;
    TW_CHECK(&tw->r[0], s == symmInvalidArgument, "grouped symmMemFree of freed pointers: %s, expected %s",
             tu_result_name(s), tu_result_name(symmInvalidArgument));
  }
}

/* An allocation bigger than the device's memory fails (on every rank) and
 * leaves the heap usable. */
static void too_big(struct tw *tw) {
  void *p[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    size_t fr = 0, total = 0;
    tw_use(&tw->r[i]);
    CU_REQUIRE(tu_cu.cuMemGetInfo(&fr, &total));
    sz[i] = total + (1u << 30);
    p[i] = SENT;
  }
  tw_phase("too-big alloc");
  double t0 = tu_now();
  symmResult_t rc = tw_alloc(tw, sz, p);
  double t = tu_now() - t0;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    char msg[1024];
    tw_log(tw, "rank %d: symmMemAlloc(%zu bytes) -> %s in %.2f s: %s", r->rank, sz[i], tu_result_name(rc), t,
           tu_last_error(r->comm, msg, sizeof msg));
    TW_CHECK(r, rc != symmSuccess, "symmMemAlloc of %zu bytes (more than the device) succeeded", sz[i]);
    TW_CHECK(r, p[i] == SENT, "the failed symmMemAlloc wrote %p", p[i]);
    TW_CHECK(r, t < QUICK_S * 2, "the failed symmMemAlloc took %.2f s", t);
  }
  if (rc == symmSuccess) tw_free(tw, p);
}

static void collective_mismatches(struct tw *tw) {
  /* Layout reference: where a 1 MiB buffer lands now. */
  void *ref[TW_MAX_RANKS];
  alloc_roundtrip(tw, 1u << 20, 7, ref);
  struct tw_res before, after;
  /* Every process measures in the same state (with shared devices the
   * other processes' memory counts on this GPU too). */
  tw_host_barrier(tw, "before measuring free memory");
  tw_measure(tw, &before);

  /* Different sizes. */
  void *p[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    sz[i] = tw->r[i].rank == 0 ? (1u << 20) : (2u << 20) + 3;
    p[i] = SENT;
  }
  tw_phase("mismatched alloc sizes");
  double t0 = tu_now();
  symmResult_t rc = tw_alloc(tw, sz, p);
  double t = tu_now() - t0;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    tw_log(tw, "rank %d: mismatched symmMemAlloc -> %s after %.3f s: %s", r->rank, tu_result_name(rc), t, m);
    TW_CHECK(r, rc == symmInvalidUsage, "mismatched symmMemAlloc sizes: %s, expected symmInvalidUsage",
             tu_result_name(rc));
    TW_CHECK(r, tu_contains_ci(m, "1048576") && tu_contains_ci(m, "2097155"),
             "the message does not name both sizes (1048576 and 2097155): %s", m ? m : "(NULL)");
    TW_CHECK(r, p[i] == SENT, "the failed symmMemAlloc wrote %p", p[i]);
    TW_CHECK(r, t < QUICK_S, "the mismatch took %.2f s to report", t);
  }
  if (rc == symmSuccess) tw_free(tw, p);
  tw_host_barrier(tw, "after the failed allocation");
  tw_measure_settled(tw, &before, 2.0, &after);
  for (int i = 0; i < tw->nlocal; i++)
    TW_CHECK(&tw->r[i], after.free_mem[i] >= before.free_mem[i],
             "device %d: %zu bytes less free memory after the failed allocation", tw->r[i].device,
             before.free_mem[i] - after.free_mem[i]);
  /* A matching allocation works and lands where the reference did. */
  void *again[TW_MAX_RANKS];
  alloc_roundtrip(tw, 1u << 20, 8, again);
  for (int i = 0; i < tw->nlocal; i++)
    TW_CHECK(&tw->r[i], again[i] == ref[i],
             "after the failed allocation a 1 MiB buffer lands at %p, before it at %p (leaked heap range?)", again[i],
             ref[i]);

  /* Different calls: alloc on rank 0, register on rank 1. */
  CUdeviceptr B[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    tw_use(&tw->r[i]);
    CU_REQUIRE(tu_cu.cuMemAlloc(&B[i], 1u << 20));
  }
  tw_phase("alloc against register");
  void *outs[TW_MAX_RANKS];
  symmResult_t rcs[TW_MAX_RANKS];
  t0 = tu_now();
  if (tw->mode == TW_MP) {
    struct tw_rank *r = &tw->r[0];
    outs[0] = SENT;
    rcs[0] = r->rank == 0 ? symmMemAlloc(r->comm, 1u << 20, &outs[0])
                          : symmCommRegister(r->comm, (void *)(uintptr_t)B[0], 4096, &outs[0]);
  } else {
    symmResult_t s = symmGroupStart();
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      outs[i] = SENT;
      symmResult_t f = r->rank == 0 ? symmMemAlloc(r->comm, 1u << 20, &outs[i])
                                    : symmCommRegister(r->comm, (void *)(uintptr_t)B[i], 4096, &outs[i]);
      if (s == symmSuccess) s = f;
    }
    symmResult_t e = symmGroupEnd();
    for (int i = 0; i < tw->nlocal; i++) rcs[i] = s != symmSuccess ? s : e;
  }
  t = tu_now() - t0;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    tw_log(tw, "rank %d: %s against the peer's %s -> %s after %.3f s: %s", r->rank,
           r->rank == 0 ? "symmMemAlloc" : "symmCommRegister", r->rank == 0 ? "symmCommRegister" : "symmMemAlloc",
           tu_result_name(rcs[i]), t, m);
    TW_CHECK(r, rcs[i] == symmInvalidUsage, "diverging collective calls: %s, expected symmInvalidUsage",
             tu_result_name(rcs[i]));
    TW_CHECK(r, outs[i] == SENT, "the failed call wrote %p", outs[i]);
    TW_CHECK(r, t < QUICK_S, "the divergence took %.2f s to report", t);
  }

  /* Different registration sizes. */
  tw_phase("mismatched registration sizes");
  void *bufs[TW_MAX_RANKS], *h[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    bufs[i] = (void *)(uintptr_t)B[i];
    sz[i] = tw->r[i].rank == 0 ? 4096 : 8192;
    h[i] = SENT;
  }
  t0 = tu_now();
  rc = tw_register(tw, bufs, sz, h);
  t = tu_now() - t0;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    tw_log(tw, "rank %d: mismatched symmCommRegister -> %s after %.3f s: %s", r->rank, tu_result_name(rc), t, m);
    TW_CHECK(r, rc != symmSuccess, "mismatched registration sizes succeeded");
    TW_CHECK(r, rc == symmInvalidUsage, "mismatched registration sizes: %s, expected symmInvalidUsage",
             tu_result_name(rc));
    TW_CHECK(r, h[i] == SENT, "the failed registration wrote %p", h[i]);
    TW_CHECK(r, t < QUICK_S, "the mismatch took %.2f s to report", t);
  }
  if (rc == symmSuccess) tw_deregister(tw, h);
  /* Matching registrations work afterwards. */
  for (int i = 0; i < tw->nlocal; i++) sz[i] = 4096;
  rc = tw_register(tw, bufs, sz, h);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  if (rc == symmSuccess) {
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      tw_fill(r, B[i], 4096, (uint32_t)r->rank, 9, 0);
      TW_SYMM(r, symmBarrier(r->comm, r->stream));
    }
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      int q = (r->rank + 1) % tw->nranks;
      void *pq = NULL;
      if (TW_SYMM(r, symmMemGetPeerPtr(r->comm, bufs[i], q, &pq))) {
        struct tw_count c = tw_verify(r, (CUdeviceptr)(uintptr_t)pq, 4096, (uint32_t)q, 9, 0);
        TW_CHECK(r, c.bad == 0, "registration after the mismatch: peer data has %llu bad bytes", c.bad);
      }
    }
    for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmBarrier(tw->r[i].comm, tw->r[i].stream));
    tw_sync_all(tw, 60, "registration round trip");
    tw_deregister(tw, h);
  }
  /* Different buffers freed: rank 0 frees X, rank 1 frees Y. */
  tw_phase("mismatched frees");
  void *X[TW_MAX_RANKS], *Y[TW_MAX_RANKS], *f[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) sz[i] = 64u << 10;
  rc = tw_alloc(tw, sz, X);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  if (rc != symmSuccess) tu_exit_now();
  rc = tw_alloc(tw, sz, Y);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  if (rc != symmSuccess) tu_exit_now();
  for (int i = 0; i < tw->nlocal; i++) f[i] = tw->r[i].rank == 0 ? X[i] : Y[i];
  t0 = tu_now();
  rc = tw_free(tw, f);
  t = tu_now() - t0;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    tw_log(tw, "rank %d: symmMemFree of different buffers -> %s after %.3f s: %s", r->rank, tu_result_name(rc), t, m);
    TW_CHECK(r, rc == symmInvalidUsage, "freeing different buffers: %s, expected symmInvalidUsage",
             tu_result_name(rc));
    TW_CHECK(r, tu_contains_ci(m, "nothing was freed"), "the message does not say that nothing was freed: %s",
             m ? m : "(NULL)");
    TW_CHECK(r, t < QUICK_S, "the mismatch took %.2f s to report", t);
    /* Both buffers are still there... */
    for (int q = 0; q < tw->nranks; q++) {
      void *px = NULL, *py = NULL;
      TW_SYMM(r, symmMemGetPeerPtr(r->comm, X[i], q, &px));
      TW_SYMM(r, symmMemGetPeerPtr(r->comm, Y[i], q, &py));
    }
  }
  /* ... and free normally afterwards. */
  rc = tw_free(tw, X);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  rc = tw_free(tw, Y);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);

  tw_host_barrier(tw, "before cuMemFree(B)");
  for (int i = 0; i < tw->nlocal; i++) {
    tw_use(&tw->r[i]);
    CU_REQUIRE(tu_cu.cuMemFree(B[i]));
  }
  /* And symmetric allocation still works after all of it. */
  void *last[TW_MAX_RANKS];
  alloc_roundtrip(tw, 4097, 10, last);
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  tw_phase("local checks");
  for (int i = 0; i < tw->nlocal; i++) local_checks(tw, &tw->r[i]);
  tw_host_barrier(tw, "local checks done");
  tw_phase("free checks");
  free_checks(tw);
  too_big(tw);
  void *dummy[TW_MAX_RANKS];
  alloc_roundtrip(tw, (1u << 20) + 5, 11, dummy);
  if (tw->nranks > 1) collective_mismatches(tw);
  tw_check_async(tw, "the bad-input checks");
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) {
  setenv("SYMM_BOOTSTRAP_TIMEOUT", "10", 0);
  static const struct tw_spec spec = {
      .name = "symm_bad_input", .modes = "one,mp,all", .limit_s = 180, .kernels = 1, .body = body};
  return tw_main(&spec, argc, argv);
}
