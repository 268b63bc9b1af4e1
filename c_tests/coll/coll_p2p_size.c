/*
 * coll_p2p_size <mp|all> [--nranks=N]
 *
 * A send and its receive that disagree on the size, on the sized send/recv
 * kernel (CTest sets SYMM_ALGO=p2p; SYMM_TIMEOUT=2 here unless set), from
 * the size at which the receiver describes its buffer to the sender (1 MiB):
 * the sender must store nothing, not even into a receive buffer it could
 * push into directly, and both ranks must get an asynchronous error instead
 * of corrupted memory or a hang. Cases, each on a fresh communicator:
 *
 *   larger   rank 0 sends 2 MiB, rank 1 receives 1 MiB into a symmetric
 *            buffer (the direct push would write 1 MiB past it);
 *   smaller  rank 0 sends 1 MiB, rank 1 receives 2 MiB (symmetric);
 *   plain    rank 0 sends 2 MiB, rank 1 receives 1 MiB into a plain
 *            buffer (the ring path).
 *
 * Required: both ranks' errors are symmInvalidUsage within SYMM_TIMEOUT,
 * each message naming the other rank's size and the rule (the sender tells
 * its receiver of the mismatch, which then stops waiting); rank 1's whole
 * 4 MiB allocation around the receive buffer still holds its poison; both
 * streams drain.
 * Other ranks launch nothing and must have no error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#define POISON 0xA5
#define ALLOC_BYTES ((size_t)4 << 20)

static double timeout_s;

enum { K_LARGER, K_SMALLER, K_PLAIN, NCASES };
static const char *const case_name[NCASES] = {"larger send", "smaller send", "larger send, plain receive buffer"};

static size_t send_bytes(int k) {
  return k == K_SMALLER ? (size_t)1 << 20 : (size_t)2 << 20;
}

static size_t recv_bytes(int k) {
  return k == K_SMALLER ? (size_t)2 << 20 : (size_t)1 << 20;
}

/* Poll the async error of `r` until it is set or `limit` s pass; the time. */
static double wait_error(struct tw_rank *r, double limit, symmResult_t *async) {
  const double t0 = tu_now();
  for (;;) {
    *async = symmSuccess;
    symmResult_t q = symmCommGetAsyncError(r->comm, async);
    if (!TW_SYMM(r, q) || *async != symmSuccess || tu_now() - t0 > limit) return tu_now() - t0;
    tw_sleep(0.005);
  }
}

/* Rank 0 or 1 of case k: enqueue its side (rank 1 receives into the
 * middle of a 4 MiB allocation, every byte of which is poisoned first);
 * the plain allocation it made, for the check and the free. */
static CUdeviceptr side(struct tw_rank *r, int k, void *sym_send, void *sym_recv) {
  const int sender = r->rank == 0;
  tw_use(r);
  CUdeviceptr plain = 0;
  CU_REQUIRE(tu_cu.cuMemAlloc(&plain, ALLOC_BYTES));
  const CUdeviceptr area = k == K_PLAIN ? plain : (CUdeviceptr)(uintptr_t)sym_recv;
  CU_REQUIRE(cw_cu.cuMemsetD8Async(area, POISON, ALLOC_BYTES, r->stream));
  CU_REQUIRE(cw_cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)sym_send, 1, ALLOC_BYTES, r->stream));
  TW_CHECK(r, tw_stream_poll(r, r->stream, 10.0) == 0, "%s: the set-up did not finish", case_name[k]);
  if (sender)
    TW_SYMM_REQUIRE(r, symmSend(sym_send, send_bytes(k), symmUint8, 1, r->comm, r->stream));
  else
    TW_SYMM_REQUIRE(r, symmRecv((void *)(uintptr_t)(area + (1 << 20)), recv_bytes(k), symmUint8, 0, r->comm, r->stream));
  tw_phase("rank %d: %s of case \"%s\" enqueued", r->rank, sender ? "send" : "receive", case_name[k]);
  return plain;
}

static void check_side(struct tw *tw, struct tw_rank *r, int k, void *sym_recv, CUdeviceptr plain_area) {
  const int sender = r->rank == 0;
  symmResult_t async;
  const double t = wait_error(r, timeout_s + 30, &async);
  char msg[1024];
  const char *m = tu_last_error(r->comm, msg, sizeof msg);
  tw_log(tw, "rank %d: %s: async error %s after %.3f s: %s", r->rank, case_name[k], tu_result_name(async), t,
         m ? m : "(NULL)");
  const char *who = sender ? "sender" : "receiver";
  TW_CHECK(r, async == symmInvalidUsage, "%s: the %s's async error is %s, expected symmInvalidUsage", case_name[k], who,
           tu_result_name(async));
  TW_CHECK(r, t <= timeout_s, "%s: the %s's size mismatch was reported after %.3f s (SYMM_TIMEOUT %.1f s)",
           case_name[k], who, t, timeout_s);
  char want[64];
  snprintf(want, sizeof want, "%zu bytes", sender ? recv_bytes(k) : send_bytes(k));
  TW_CHECK(r, tu_contains_ci(m, want) && tu_contains_ci(m, "same size"),
           "%s: the %s's message does not name the other side's %s and the rule: %s", case_name[k], who, want,
           m ? m : "(NULL)");
  int s = tw_stream_poll(r, r->stream, 10.0);
  TW_CHECK(r, s == 0, "%s: the stream did not drain within 10 s of the error", case_name[k]);
  if (s != 0) tu_exit_now();
  if (!sender) {
    const CUdeviceptr area = k == K_PLAIN ? plain_area : (CUdeviceptr)(uintptr_t)sym_recv;
    unsigned char *host = malloc(ALLOC_BYTES);
    REQUIRE(host != NULL, "out of host memory");
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, area, ALLOC_BYTES));
    size_t touched = 0, first = ALLOC_BYTES;
    for (size_t i = 0; i < ALLOC_BYTES; i++)
      if (host[i] != POISON) {
        touched++;
        if (first == ALLOC_BYTES) first = i;
      }
    free(host);
    TW_CHECK(r, touched == 0, "%s: %zu byte(s) of the receiver's allocation were written, the first at offset %zu "
             "(the receive buffer is [1 MiB, 1 MiB + %zu))", case_name[k], touched, first, recv_bytes(k));
  }
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  for (int k = 0; k < NCASES; k++) {
    if (tw_init_comms(tw) != symmSuccess) return;
    size_t sz[TW_MAX_RANKS];
    void *s[TW_MAX_RANKS], *rv[TW_MAX_RANKS];
    for (int i = 0; i < tw->nlocal; i++) sz[i] = ALLOC_BYTES;
    REQUIRE(tw_alloc(tw, sz, s) == symmSuccess, "symmMemAlloc failed");
    REQUIRE(tw_alloc(tw, sz, rv) == symmSuccess, "symmMemAlloc failed");
    tw_host_barrier(tw, "after init");
    CUdeviceptr plain[TW_MAX_RANKS] = {0};
    /* Ranks 0 and 1 (wherever they run) enqueue first, then check: in mode
     * all one thread drives both. */
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      if (r->rank <= 1) plain[i] = side(r, k, s[i], rv[i]);
    }
    for (int i = 0; i < tw->nlocal; i++) {
      struct tw_rank *r = &tw->r[i];
      if (r->rank > 1) continue;
      check_side(tw, r, k, rv[i], plain[i]);
      tw_use(r);
      CU_REQUIRE(tu_cu.cuMemFree(plain[i]));
    }
    /* Ranks 2 and up launched nothing and wait here. */
    tw_host_barrier(tw, "before teardown");
    for (int i = 0; i < tw->nlocal; i++)
      if (tw->r[i].rank <= 1) cw_abort(&tw->r[i], case_name[k]);
    tw_destroy_comms(tw);
  }
}

int main(int argc, char **argv) {
  setenv("SYMM_ALGO", "p2p", 0);
  timeout_s = cw_short_timeout("2");
  static struct tw_spec spec = {.name = "coll_p2p_size", .modes = "mp,all", .kernels = 1, .body = body};
  spec.limit_s = NCASES * (120 + timeout_s);
  spec.process_init = cw_process_init;
  return tw_main(&spec, argc, argv);
}
