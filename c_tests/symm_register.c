/*
 * symm_register (GPU, n ranks): symmCommRegister makes existing buffers
 * reachable by the peers, at the right offsets.
 *
 *   symm_register mp|all [--nranks=N]
 *
 * Each rank cuMemAlloc's A (3 MiB + 123 bytes; legacy-IPC capable) and fills
 * all of it with its pattern (pattern index = offset in A). Then:
 *  1. whole A registered: every rank's copy is read through
 *     symmMemGetPeerPtr (check kernel) and through the symmMemGetPeerTable
 *     table (entry = peer pointer; own entry = own pointer); interior
 *     pointers map to the same offset; after symmCommDeregister the pointer
 *     is unknown and a second deregister is rejected;
 *  2. a sub-range at an odd offset (A + 4113, 1 MiB + 3 bytes): the peers
 *     see pattern bytes 4113... (so the offset inside the peer allocation is
 *     right); one byte before and one past the sub-range are unknown;
 *  3. a second, disjoint sub-range of the same allocation registered while
 *     the first is live: both readable; after deregistering the first, the
 *     second still is (the peer's mapping of the shared allocation must
 *     outlive the first registration);
 *  4. a sub-range of a symmMemAlloc buffer registered: its peer addresses
 *     equal the symmetric buffer's peer addresses plus the offset, and the
 *     data is there.
 * Every step ends with symmBarrier before deregistration; cuMemFree comes
 * after every rank has deregistered (host barrier).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpu_world.h"

#define A_BYTES ((3u << 20) + 123)
#define SALT_A 101u
#define SALT_S 102u

/* Check every rank's copy of [buf, buf + n) as rank r sees it, where the
 * data is pattern(q, salt, idx0 + i). */
static void check_peer_view(struct tw *tw, struct tw_rank *r, const uint8_t *buf, size_t n, uint32_t salt,
                            uint64_t idx0, const char *what) {
  void **table = NULL;
  if (!TW_SYMM(r, symmMemGetPeerTable(r->comm, buf, &table))) return;
  CUdeviceptr t = (CUdeviceptr)(uintptr_t)table;
  uint64_t ht[TW_MAX_RANKS] = {0};
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(ht, t, sizeof(uint64_t) * (size_t)tw->nranks));
  /* The table holds the start of the buffer holding `buf` on each rank;
   * `buf` is at the same offset from it on every rank. */
  uint64_t off = (uint64_t)(uintptr_t)buf - ht[r->rank];
  TW_CHECK(r, ht[r->rank] <= (uint64_t)(uintptr_t)buf, "%s: own table entry 0x%" PRIx64 " is above the pointer %p",
           what, ht[r->rank], (const void *)buf);
  for (int q = 0; q < tw->nranks; q++) {
    void *pq_v = NULL;
    if (!TW_SYMM(r, symmMemGetPeerPtr(r->comm, buf, q, &pq_v))) continue;
    CUdeviceptr pq = (CUdeviceptr)(uintptr_t)pq_v;
    if (q == r->rank) TW_CHECK(r, pq_v == buf, "%s: own peer pointer %p != %p", what, pq_v, (const void *)buf);
    TW_CHECK(r, ht[q] + off == pq, "%s: table[%d] + %" PRIu64 " = 0x%" PRIx64 ", peer pointer 0x%llx", what, q, off,
             ht[q] + off, pq);
    void *last = NULL;
    if (TW_SYMM(r, symmMemGetPeerPtr(r->comm, buf + n - 1, q, &last)))
      TW_CHECK(r, (CUdeviceptr)(uintptr_t)last == pq + n - 1, "%s: peer pointer of the last byte is %p, expected 0x%llx",
               what, last, pq + n - 1);
    struct tw_count c = tw_verify(r, pq, n, (uint32_t)q, salt, idx0);
    TW_CHECK(r, c.bad == 0, "%s: rank %d's data through symmMemGetPeerPtr: %llu bad bytes, first at %llu", what, q,
             c.bad, c.first);
    c = tw_verify_table(r, t, q, off, n, (uint32_t)q, salt, idx0);
    TW_CHECK(r, c.bad == 0, "%s: rank %d's data through the peer table: %llu bad bytes, first at %llu", what, q, c.bad,
             c.first);
  }
}

static void barrier_all(struct tw *tw) {
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmBarrier(tw->r[i].comm, tw->r[i].stream));
}

/* The pointer is not inside any registered/symmetric buffer any more. */
static void expect_unknown(struct tw *tw, struct tw_rank *r, const void *ptr, const char *what) {
  for (int q = 0; q < tw->nranks; q++) {
    void *out = (void *)(uintptr_t)0x77;
    if (!TW_EXPECT_FAIL(r, symmMemGetPeerPtr(r->comm, ptr, q, &out), symmInvalidArgument, r->comm, NULL))
      tw_fail_at(__FILE__, __LINE__, r, "(%s)", what);
    TW_CHECK(r, out == (void *)(uintptr_t)0x77, "%s: a rejected symmMemGetPeerPtr wrote %p", what, out);
  }
}

static symmResult_t reg_all(struct tw *tw, uint8_t *const *base, size_t off, size_t len, void **h, const char *what) {
  void *bufs[TW_MAX_RANKS];
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    bufs[i] = base[i] + off;
    sz[i] = len;
    h[i] = NULL;
  }
  tw_phase("register %s", what);
  double t0 = tu_now();
  symmResult_t rc = tw_register(tw, bufs, sz, h);
  for (int i = 0; i < tw->nlocal; i++) {
    TW_SYMM(&tw->r[i], rc);
    if (rc == symmSuccess) TW_CHECK(&tw->r[i], h[i] != NULL, "%s: handle is NULL", what);
  }
  tw_log(tw, "registered %s (%zu bytes at offset %zu) in %.1f ms", what, len, off, (tu_now() - t0) * 1e3);
  return rc;
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  uint8_t *A[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    CUdeviceptr d = 0;
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemAlloc(&d, A_BYTES));
    A[i] = (uint8_t *)(uintptr_t)d;
    tw_fill(r, d, A_BYTES, (uint32_t)r->rank, SALT_A, 0);
  }
  tw_sync_all(tw, 60, "fill A");

  /* 1. The whole allocation. */
  void *h1[TW_MAX_RANKS];
  if (reg_all(tw, A, 0, A_BYTES, h1, "whole A") != symmSuccess) tu_exit_now();
  barrier_all(tw);
  tw_phase("check whole A");
  for (int i = 0; i < tw->nlocal; i++) check_peer_view(tw, &tw->r[i], A[i], A_BYTES, SALT_A, 0, "whole A");
  barrier_all(tw);
  tw_sync_all(tw, 60, "checks of whole A");
  tw_deregister(tw, h1);
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    expect_unknown(tw, r, A[i], "A after deregistration");
    TW_EXPECT_FAIL(r, symmCommDeregister(r->comm, h1[i]), symmInvalidArgument, r->comm, NULL);
  }

  /* 2. A sub-range at an odd offset. */
  const size_t off2 = 4096 + 17, len2 = (1u << 20) + 3;
  void *h2[TW_MAX_RANKS];
  if (reg_all(tw, A, off2, len2, h2, "sub-range 2") != symmSuccess) tu_exit_now();
  barrier_all(tw);
  tw_phase("check sub-range 2");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    check_peer_view(tw, r, A[i] + off2, len2, SALT_A, off2, "sub-range 2");
    expect_unknown(tw, r, A[i] + off2 - 1, "one byte before sub-range 2");
    expect_unknown(tw, r, A[i] + off2 + len2, "one byte past sub-range 2");
  }

  /* 3. A second, disjoint sub-range of the same allocation, while 2 is live. */
  const size_t off3 = (2u << 20) + 5, len3 = (512u << 10) + 1;
  void *h3[TW_MAX_RANKS];
  if (reg_all(tw, A, off3, len3, h3, "sub-range 3") != symmSuccess) tu_exit_now();
  barrier_all(tw);
  tw_phase("check sub-ranges 2 and 3");
  for (int i = 0; i < tw->nlocal; i++) {
    check_peer_view(tw, &tw->r[i], A[i] + off3, len3, SALT_A, off3, "sub-range 3");
    check_peer_view(tw, &tw->r[i], A[i] + off2, len2, SALT_A, off2, "sub-range 2 (with 3 live)");
  }
  barrier_all(tw);
  tw_sync_all(tw, 60, "checks of sub-ranges 2 and 3");
  tw_deregister(tw, h2);
  tw_host_barrier(tw, "sub-range 2 deregistered everywhere");
  barrier_all(tw);
  tw_phase("check sub-range 3 after deregistering 2");
  for (int i = 0; i < tw->nlocal; i++) {
    check_peer_view(tw, &tw->r[i], A[i] + off3, len3, SALT_A, off3, "sub-range 3 after 2 was deregistered");
    expect_unknown(tw, &tw->r[i], A[i] + off2, "sub-range 2 after deregistration");
  }
  barrier_all(tw);
  tw_sync_all(tw, 60, "checks of sub-range 3");
  tw_deregister(tw, h3);

  /* 4. A sub-range of a symmetric buffer. */
  void *S[TW_MAX_RANKS];
  size_t s_bytes[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) s_bytes[i] = 1u << 20;
  tw_phase("alloc S");
  symmResult_t rc = tw_alloc(tw, s_bytes, S);
  if (rc != symmSuccess) {
    TW_SYMM(&tw->r[0], rc);
    tu_exit_now();
  }
  for (int i = 0; i < tw->nlocal; i++) tw_fill(&tw->r[i], (CUdeviceptr)(uintptr_t)S[i], s_bytes[i], (uint32_t)tw->r[i].rank, SALT_S, 0);
  tw_sync_all(tw, 60, "fill S");
  const size_t off4 = 100, len4 = 4096;
  void *h4[TW_MAX_RANKS];
  uint8_t *Sb[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) Sb[i] = S[i];
  if (reg_all(tw, Sb, off4, len4, h4, "symmetric sub-range 4") != symmSuccess) tu_exit_now();
  barrier_all(tw);
  tw_phase("check symmetric sub-range 4");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    for (int q = 0; q < tw->nranks; q++) {
      void *sym = NULL, *sub = NULL;
      /* S + off4 may resolve through either buffer; both must agree. */
      if (TW_SYMM(r, symmMemGetPeerPtr(r->comm, S[i], q, &sym)) &&
          TW_SYMM(r, symmMemGetPeerPtr(r->comm, Sb[i] + off4, q, &sub)))
        TW_CHECK(r, (uintptr_t)sub == (uintptr_t)sym + off4,
                 "registered symmetric sub-range: peer %d pointer %p, symmetric buffer's is %p + %zu", q, sub, sym,
                 off4);
    }
    check_peer_view(tw, r, Sb[i] + off4, len4, SALT_S, off4, "symmetric sub-range 4");
  }
  barrier_all(tw);
  tw_sync_all(tw, 60, "checks of sub-range 4");
  tw_deregister(tw, h4);
  for (int i = 0; i < tw->nlocal; i++) {
    /* The symmetric buffer itself is still there. */
    void *still = NULL;
    TW_SYMM(&tw->r[i], symmMemGetPeerPtr(tw->r[i].comm, Sb[i] + off4, 0, &still));
  }
  tw_phase("free S");
  rc = tw_free(tw, S);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);

  /* Every rank has closed its mappings of the peers' A before A goes. */
  tw_host_barrier(tw, "before cuMemFree(A)");
  for (int i = 0; i < tw->nlocal; i++) {
    tw_use(&tw->r[i]);
    CU_REQUIRE(tu_cu.cuMemFree((CUdeviceptr)(uintptr_t)A[i]));
  }
  tw_check_async(tw, "the registration checks");
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {
      .name = "symm_register", .modes = "mp,all", .limit_s = 180, .kernels = 1, .body = body};
  return tw_main(&spec, argc, argv);
}
