/*
 * symm_pattern (GPU, n ranks): every rank sees every peer's symmetric memory
 * and user signal pad.
 *
 *   symm_pattern mp|all [--nranks=N]
 *
 * Signal pads: symmCommGetSignalPad gives each rank's user area (same size
 * everywhere, distinct addresses, table from symmCommGetSignalPadTable
 * agrees); the areas start zeroed; each rank writes words at the start and
 * the end of its own area, and after symmBarrier every rank reads them
 * through the pad pointers and through the device table.
 *
 * Symmetric buffers, for sizes 1, 3, 4, 4097, 1 MiB + 5, 64 MiB and 1 GiB:
 * symmMemAlloc (collective); symmMemGetPeerPtr(ptr, own rank) is ptr; each
 * rank fills its copy with its own byte pattern (a kernel on its stream);
 * symmBarrier; each rank checks every rank's copy (its own included)
 * (a) through symmMemGetPeerPtr with a check kernel over the whole buffer,
 *     plus a cuMemcpyDtoH of the first and last 64 KiB checked on the host,
 * (b) through the device table of symmMemGetPeerTable (entries equal the
 *     peer pointers; interior pointers give the same table);
 * interior pointers map to the same offset in the peer's copy, one past the
 * end is rejected; symmBarrier; symmMemFree (collective); afterwards the
 * pointer is no longer known to symmMemGetPeerPtr. A negative control
 * (from 4097 bytes up) checks each copy against the wrong rank's and the
 * wrong case's pattern and requires mismatches, so the check kernel is
 * known to see a difference.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_world.h"
#include "kernels/tu_pattern.h"

#define HOST_CHECK_BYTES (64u << 10)
static uint8_t host[HOST_CHECK_BYTES];

static const size_t sizes[] = {1, 3, 4, 4097, (1u << 20) + 5, 64u << 20, 1u << 30};

/* Pad words each rank writes into its own user area. */
static uint32_t pad_word_first(int rank) { return 0x5A000011u | (uint32_t)rank << 8; }
static uint32_t pad_word_last(int rank) { return 0xA5000000u | (uint32_t)rank; }

static void check_signal_pads(struct tw *tw) {
  void *pads[TW_MAX_RANKS][TW_MAX_RANKS];
  size_t bytes[TW_MAX_RANKS] = {0};
  CUdeviceptr tables[TW_MAX_RANKS] = {0};
  tw_phase("signal pads: queries");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    for (int q = 0; q < tw->nranks; q++) {
      size_t b = 0;
      pads[i][q] = NULL;
      TW_SYMM_REQUIRE(r, symmCommGetSignalPad(r->comm, q, &pads[i][q], &b));
      TW_REQUIRE(r, pads[i][q] != NULL && b >= 4096 && b % 4 == 0,
                 "symmCommGetSignalPad(peer %d): pad %p, %zu bytes", q, pads[i][q], b);
      if (q == 0) bytes[i] = b;
      TW_CHECK(r, b == bytes[i], "pad sizes differ: %zu bytes for peer %d, %zu for peer 0", b, q, bytes[i]);
      for (int p = 0; p < q; p++)
        TW_CHECK(r, pads[i][p] != pads[i][q], "peers %d and %d have the same pad address %p", p, q, pads[i][q]);
    }
    void *bad = (void *)(uintptr_t)0x1234;
    size_t bad_bytes = 7;
    TW_EXPECT_FAIL(r, symmCommGetSignalPad(r->comm, tw->nranks, &bad, &bad_bytes), symmInvalidArgument, r->comm,
                   "peer");
    TW_EXPECT_FAIL(r, symmCommGetSignalPad(r->comm, -1, &bad, &bad_bytes), symmInvalidArgument, r->comm, "peer");
    TW_CHECK(r, bad == (void *)(uintptr_t)0x1234 && bad_bytes == 7, "a rejected call wrote its outputs");

    void **table = NULL;
    TW_SYMM_REQUIRE(r, symmCommGetSignalPadTable(r->comm, &table));
    TW_REQUIRE(r, table != NULL, "symmCommGetSignalPadTable gave NULL");
    tables[i] = (CUdeviceptr)(uintptr_t)table;
    uint64_t h[TW_MAX_RANKS] = {0};
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(h, tables[i], sizeof(uint64_t) * (size_t)tw->nranks));
    for (int q = 0; q < tw->nranks; q++)
      TW_CHECK(r, h[q] == (uint64_t)(uintptr_t)pads[i][q], "pad table[%d] = 0x%" PRIx64 ", symmCommGetSignalPad says %p",
               q, h[q], pads[i][q]);
    tw_log(tw, "rank %d: user signal pad %zu bytes; own at %p", r->rank, bytes[i], pads[i][r->rank]);
  }

  /* Every area starts zeroed (checked before anyone writes: the writes come
   * after a barrier that every rank enters after its check). */
  tw_phase("signal pads: zero check");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    for (int q = 0; q < tw->nranks; q++) {
      struct tw_count c = tw_count_nonzero(r, (CUdeviceptr)(uintptr_t)pads[i][q], bytes[i]);
      TW_CHECK(r, c.bad == 0, "rank %d's user pad is not zeroed: %llu non-zero bytes, first at %llu", q, c.bad,
               c.first);
    }
  }
  tw_phase("signal pads: write own words");
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmBarrier(tw->r[i].comm, tw->r[i].stream));
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    CUdeviceptr own = (CUdeviceptr)(uintptr_t)pads[i][r->rank];
    tw_store_u32(r, own, pad_word_first(r->rank));
    tw_store_u32(r, own + bytes[i] - 4, pad_word_last(r->rank));
    TW_SYMM(r, symmBarrier(r->comm, r->stream));
  }
  tw_phase("signal pads: read peers' words");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    uint64_t last_word = bytes[i] / 4 - 1;
    for (int q = 0; q < tw->nranks; q++) {
      CUdeviceptr pq = (CUdeviceptr)(uintptr_t)pads[i][q];
      uint32_t a = tw_load_u32(r, pq), b = tw_load_u32(r, pq + bytes[i] - 4);
      uint32_t ta = tw_load_u32_table(r, tables[i], q, 0), tb = tw_load_u32_table(r, tables[i], q, last_word);
      TW_CHECK(r, a == pad_word_first(q) && b == pad_word_last(q),
               "rank %d's pad through its pointer: words 0x%08x ... 0x%08x, expected 0x%08x ... 0x%08x", q, a, b,
               pad_word_first(q), pad_word_last(q));
      TW_CHECK(r, ta == pad_word_first(q) && tb == pad_word_last(q),
               "rank %d's pad through the table: words 0x%08x ... 0x%08x, expected 0x%08x ... 0x%08x", q, ta, tb,
               pad_word_first(q), pad_word_last(q));
    }
  }
  /* Nobody leaves (and destroys) while another rank still reads. */
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmBarrier(tw->r[i].comm, tw->r[i].stream));
  tw_sync_all(tw, 60, "signal pad checks");
  tw_log(tw, "signal pads: pointers, table, zeroed start and cross-rank words OK");
}

/* A pointer's peer address, checked against the expected one. */
static void expect_peer_ptr(struct tw_rank *r, const void *ptr, int q, uintptr_t want, const char *what) {
  void *got = NULL;
  if (!TW_SYMM(r, symmMemGetPeerPtr(r->comm, ptr, q, &got))) return;
  TW_CHECK(r, (uintptr_t)got == want, "symmMemGetPeerPtr(%s, peer %d) = %p, expected 0x%" PRIxPTR, what, q, got,
           want);
}

static void host_check(struct tw_rank *r, CUdeviceptr pq, size_t n, int q, uint32_t salt) {
  size_t m = n < HOST_CHECK_BYTES ? n : HOST_CHECK_BYTES, first = 0, bad;
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, pq, m));
  bad = tw_host_verify(host, m, (uint32_t)q, salt, 0, &first);
  TW_CHECK(r, bad == 0, "%zu-byte buffer, rank %d's copy, first %zu bytes by cuMemcpyDtoH: %zu bad, first at %zu", n,
           q, m, bad, first);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, pq + (n - m), m));
  bad = tw_host_verify(host, m, (uint32_t)q, salt, n - m, &first);
  TW_CHECK(r, bad == 0, "%zu-byte buffer, rank %d's copy, last %zu bytes by cuMemcpyDtoH: %zu bad, first at %zu", n, q,
           m, bad, first + (n - m));
}

static void check_size(struct tw *tw, size_t n, uint32_t salt) {
  void *p[TW_MAX_RANKS] = {0};
  size_t sz[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) sz[i] = n;
  tw_phase("alloc %zu bytes", n);
  double t0 = tu_now();
  symmResult_t rc = tw_alloc(tw, sz, p);
  double t_alloc = tu_now() - t0;
  if (rc != symmSuccess) {
    for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
    tu_exit_now();
  }
  tw_phase("fill %zu bytes", n);
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    TW_REQUIRE(r, p[i] != NULL, "symmMemAlloc(%zu) gave NULL", n);
    expect_peer_ptr(r, p[i], r->rank, (uintptr_t)p[i], "ptr");
    tw_fill(r, (CUdeviceptr)(uintptr_t)p[i], n, (uint32_t)r->rank, salt, 0);
    TW_SYMM(r, symmBarrier(r->comm, r->stream));
  }
  tw_phase("check %zu bytes", n);
  double worst_verify = 0;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    const uint8_t *mine = p[i];
    void **table = NULL;
    TW_SYMM_REQUIRE(r, symmMemGetPeerTable(r->comm, mine, &table));
    CUdeviceptr t = (CUdeviceptr)(uintptr_t)table;
    uint64_t ht[TW_MAX_RANKS] = {0};
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(ht, t, sizeof(uint64_t) * (size_t)tw->nranks));
    if (n > 1) {
      void **t2 = NULL;
      TW_SYMM(r, symmMemGetPeerTable(r->comm, mine + n - 1, &t2));
      TW_CHECK(r, t2 == table, "symmMemGetPeerTable(last byte) = %p, of the start = %p", (void *)t2, (void *)table);
    }
    for (int q = 0; q < tw->nranks; q++) {
      void *pq_v = NULL;
      if (!TW_SYMM(r, symmMemGetPeerPtr(r->comm, mine, q, &pq_v))) continue;
      CUdeviceptr pq = (CUdeviceptr)(uintptr_t)pq_v;
      TW_CHECK(r, ht[q] == pq, "%zu bytes: table[%d] = 0x%" PRIx64 " but symmMemGetPeerPtr says 0x%llx", n, q, ht[q],
               pq);
      expect_peer_ptr(r, mine + n / 2, q, (uintptr_t)(pq + n / 2), "ptr + n/2");
      expect_peer_ptr(r, mine + n - 1, q, (uintptr_t)(pq + n - 1), "ptr + n - 1");
      void *past = (void *)(uintptr_t)0x42;
      TW_EXPECT_FAIL(r, symmMemGetPeerPtr(r->comm, mine + n, q, &past), symmInvalidArgument, r->comm, NULL);
      TW_CHECK(r, past == (void *)(uintptr_t)0x42, "a rejected symmMemGetPeerPtr wrote its output");

      double v0 = tu_now();
      struct tw_count c = tw_verify(r, pq, n, (uint32_t)q, salt, 0);
      double dv = tu_now() - v0;
      if (dv > worst_verify) worst_verify = dv;
      TW_CHECK(r, c.bad == 0, "%zu bytes: rank %d's copy through symmMemGetPeerPtr: %llu bad bytes, first at %llu", n,
               q, c.bad, c.first);
      c = tw_verify_table(r, t, q, 0, n, (uint32_t)q, salt, 0);
      TW_CHECK(r, c.bad == 0, "%zu bytes: rank %d's copy through the peer table: %llu bad bytes, first at %llu", n, q,
               c.bad, c.first);
      host_check(r, pq, n, q, salt);
      if (n >= 4097) {
        /* Negative control: the same bytes checked as another rank's (or
         * another case's) pattern must mostly mismatch, or the check kernel
         * proves nothing. */
        c = tw_verify(r, pq, n, (uint32_t)(q + 1) % (uint32_t)tw->nranks, salt, 0);
        struct tw_count c2 = tw_verify(r, pq, n, (uint32_t)q, salt + 1000, 0);
        TW_CHECK(r, c.bad > n / 2 && c2.bad > n / 2,
                 "%zu bytes: negative control: checking rank %d's copy as rank %d's / another case's data found "
                 "only %llu / %llu mismatches",
                 n, q, (q + 1) % tw->nranks, c.bad, c2.bad);
      }
      if (n >= (64u << 20) && q != r->rank)
        tw_log(tw, "rank %d: checked rank %d's %zu MiB over the peer mapping in %.1f ms (%.1f GB/s)", r->rank, q,
               n >> 20, dv * 1e3, n / dv / 1e9);
    }
  }
  tw_phase("final barrier %zu bytes", n);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmBarrier(tw->r[i].comm, tw->r[i].stream));
  tw_sync_all(tw, 60, "barrier before symmMemFree");
  tw_phase("free %zu bytes", n);
  t0 = tu_now();
  rc = tw_free(tw, p);
  double t_free = tu_now() - t0;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    TW_SYMM(r, rc);
    void *gone = NULL;
    TW_EXPECT_FAIL(r, symmMemGetPeerPtr(r->comm, p[i], (r->rank + 1) % tw->nranks, &gone), symmInvalidArgument,
                   r->comm, NULL);
  }
  tw_log(tw, "%10zu bytes: alloc %.1f ms, checks OK (slowest check %.1f ms), free %.1f ms; address %p", n,
         t_alloc * 1e3, worst_verify * 1e3, t_free * 1e3, p[0]);
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  tw_host_barrier(tw, "after init");
  check_signal_pads(tw);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) check_size(tw, sizes[k], (uint32_t)(k + 1));
  tw_check_async(tw, "the pattern checks");
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {
      .name = "symm_pattern", .modes = "mp,all", .limit_s = 240, .kernels = 1, .body = body};
  return tw_main(&spec, argc, argv);
}
