/*
 * dev_bad_input (GPU, n ranks): symmDevCommCreate / symmDevCommDestroy
 * refuse bad arguments, mismatched headers and broken communicators with a
 * clear error on every rank (never a hang: the other ranks learn of one
 * rank's refusal), and write no output; bad arguments inside a kernel are
 * returned to the kernel and reported, never written through.
 *
 *   dev_bad_input mp|all [--nranks=N]
 *
 * Every rank in turn (all passing the same thing):
 *   NULL req, NULL devComm                     -> symmInvalidArgument
 *   blockCount 0, > SYMM_DEV_MAX_BLOCKS,
 *   signalCount > SYMM_DEV_MAX_SIGNALS,
 *   llBytes not a multiple of 16, reserved != 0 -> symmInvalidArgument
 *   a header of device API 2.0, of 1.1 (newer),
 *   another sizeof(symmDevComm), another
 *   sizeof(symmDevCommRequirements), no initializer -> symmInvalidUsage
 * One rank wrong: rank 0 passes blockCount 0, the others a good request:
 *   rank 0 symmInvalidArgument, the others symmRemoteError naming rank 0.
 * Ranks disagreeing (rank 0 asks for 2 blocks, the others 4): every rank
 *   symmInvalidUsage. Then a good create and destroy; destroying it again,
 *   or a made-up one, is symmInvalidArgument; NULL too.
 * In kernels (dk_bad_argument): a signal to peer nRanks, a barrier slot
 *   past blockCount, an LL store to a misaligned address and a barrier of a
 *   team without this rank each return symmInvalidArgument to the kernel;
 *   symmCommGetAsyncError then reports symmInvalidArgument naming the first
 *   (symmDevSignalAdd, the peer); and symmDevCommCreate on that
 *   communicator is refused (symmInvalidUsage: it has an asynchronous
 *   error) on every rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_util.h"

/* Every local rank's create must fail with `want` and a message naming
 * `keyword`; outputs untouched. */
static void expect_create_fails(struct tw *tw, const symmDevCommRequirements *const *req, int null_out,
                                symmResult_t want, const char *keyword, const char *what) {
  tw_phase("symmDevCommCreate: %s", what);
  symmDevComm dc[TW_MAX_RANKS];
  memset(dc, 0xab, sizeof dc);
  const int grouped = tw->mode != TW_MP;
  if (grouped) TW_SYMM(&tw->r[0], symmGroupStart());
  symmResult_t rc[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) rc[i] = symmDevCommCreate(tw->r[i].comm, req[i], null_out ? NULL : &dc[i]);
  symmResult_t end = grouped ? symmGroupEnd() : symmSuccess;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    /* In a group the call queues; symmGroupEnd returns the first failure. */
    symmResult_t got = grouped ? end : rc[i];
    if (grouped) TW_CHECK(r, rc[i] == symmSuccess, "%s: grouped symmDevCommCreate returned %s at once", what,
                          tu_result_name(rc[i]));
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    TW_CHECK(r, got == want, "%s: %s returned %s, expected %s (%s)", what,
             grouped ? "symmGroupEnd" : "symmDevCommCreate", tu_result_name(got), tu_result_name(want), m ? m : "");
    TW_CHECK(r, tu_contains_ci(m, "symmDevCommCreate") && tu_contains_ci(m, keyword),
             "%s: the message should name symmDevCommCreate and \"%s\": %s", what, keyword, m ? m : "(NULL)");
    unsigned char sentinel[sizeof(symmDevComm)];
    memset(sentinel, 0xab, sizeof sentinel);
    TW_CHECK(r, memcmp(&dc[i], sentinel, sizeof sentinel) == 0, "%s: a refused symmDevCommCreate wrote its output",
             what);
  }
}

static void same_for_all(struct tw *tw, const symmDevCommRequirements *req, int null_out, symmResult_t want,
                         const char *keyword, const char *what) {
  const symmDevCommRequirements *reqs[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) reqs[i] = req;
  expect_create_fails(tw, reqs, null_out, want, keyword, what);
}

static void argument_checks(struct tw *tw) {
  symmDevCommRequirements good = dev_requirements(4, 4, 4096), bad;
  same_for_all(tw, NULL, 0, symmInvalidArgument, "req is NULL", "NULL req");
  same_for_all(tw, &good, 1, symmInvalidArgument, "devComm is NULL", "NULL devComm");
  bad = good, bad.blockCount = 0;
  same_for_all(tw, &bad, 0, symmInvalidArgument, "blockCount is 0", "zero blocks");
  bad = good, bad.blockCount = SYMM_DEV_MAX_BLOCKS + 1;
  same_for_all(tw, &bad, 0, symmInvalidArgument, "SYMM_DEV_MAX_BLOCKS", "too many blocks");
  bad = good, bad.signalCount = SYMM_DEV_MAX_SIGNALS + 1;
  same_for_all(tw, &bad, 0, symmInvalidArgument, "SYMM_DEV_MAX_SIGNALS", "too many signals");
  bad = good, bad.llBytes = 100;
  same_for_all(tw, &bad, 0, symmInvalidArgument, "multiple of 16", "llBytes not a multiple of 16");
  bad = good, bad.reserved = 7;
  same_for_all(tw, &bad, 0, symmInvalidArgument, "reserved", "reserved not 0");
  /* Headers that do not match the library. */
  bad = good, bad.apiVersion = 200;
  same_for_all(tw, &bad, 0, symmInvalidUsage, "device API 2.0", "a device API 2.0 header");
  bad = good, bad.apiVersion = SYMM_DEVICE_API_VERSION + 1;
  same_for_all(tw, &bad, 0, symmInvalidUsage, "newer than this library", "a newer minor version");
  bad = good, bad.devCommSize = sizeof(symmDevComm) - 8;
  same_for_all(tw, &bad, 0, symmInvalidUsage, "disagree on the device communicator's layout",
               "another sizeof(symmDevComm)");
  bad = good, bad.size = sizeof(symmDevCommRequirements) + 8;
  same_for_all(tw, &bad, 0, symmInvalidUsage, "req->size", "another sizeof(symmDevCommRequirements)");
  memset(&bad, 0, sizeof bad);
  bad.blockCount = 4;
  same_for_all(tw, &bad, 0, symmInvalidUsage, "SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER", "no initializer");

  /* One rank wrong: everyone fails, at once. */
  bad = good, bad.blockCount = 0;
  const symmDevCommRequirements *reqs[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) reqs[i] = tw->r[i].rank == 0 ? &bad : &good;
  if (tw->mode == TW_MP) {
    /* Each process sees its own code. */
    expect_create_fails(tw, reqs, 0, tw->r[0].rank == 0 ? symmInvalidArgument : symmRemoteError,
                        tw->r[0].rank == 0 ? "blockCount is 0" : "rank 0", "only rank 0 passes blockCount 0");
  } else {
    expect_create_fails(tw, reqs, 0, symmInvalidArgument, "blockCount", "only rank 0 passes blockCount 0");
  }
  symmDevCommRequirements two = dev_requirements(2, 4, 4096);
  for (int i = 0; i < tw->nlocal; i++) reqs[i] = tw->r[i].rank == 0 ? &two : &good;
  expect_create_fails(tw, reqs, 0, symmInvalidUsage, "different device communicators", "ranks disagree");
}

static void destroy_checks(struct tw *tw) {
  tw_phase("good create, destroy, destroy again");
  symmDevCommRequirements good = dev_requirements(4, 4, 4096);
  symmDevComm dc[TW_MAX_RANKS];
  symmResult_t rc = dev_create_all(tw, &good, dc);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM_REQUIRE(&tw->r[i], rc);
  rc = dev_destroy(tw, dc);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], rc);
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    /* Refused before anything collective, so no group is needed. */
    TW_EXPECT_FAIL(r, symmDevCommDestroy(r->comm, &dc[i]), symmInvalidArgument, r->comm, "not a live device");
    symmDevComm made_up = dc[i];
    made_up.handle = 0x7777777;
    TW_EXPECT_FAIL(r, symmDevCommDestroy(r->comm, &made_up), symmInvalidArgument, r->comm, "not a live device");
    TW_EXPECT_FAIL(r, symmDevCommDestroy(r->comm, NULL), symmInvalidArgument, r->comm, "devComm");
  }
  if (tw->mode != TW_MP) {
    TW_SYMM(&tw->r[0], symmGroupStart());
    for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmDevCommDestroy(tw->r[i].comm, &dc[i]));
    rc = symmGroupEnd();
    TW_CHECK(&tw->r[0], rc == symmInvalidArgument, "grouped destroy of destroyed device communicators: %s",
             tu_result_name(rc));
    for (int i = 0; i < tw->nlocal; i++)
      TW_CHECK(&tw->r[i], tu_contains_ci(symmGetLastError(tw->r[i].comm), "not a live device"),
               "message: %s", symmGetLastError(tw->r[i].comm));
  }
}

static void kernel_checks(struct tw *tw) {
  tw_phase("bad arguments inside kernels");
  struct dev_kernels k[TW_MAX_RANKS];
  dev_load(tw, k);
  symmDevCommRequirements good = dev_requirements(2, 2, 4096);
  symmDevComm dc[TW_MAX_RANKS];
  symmResult_t rc = dev_create_all(tw, &good, dc);
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM_REQUIRE(&tw->r[i], rc);
  CUdeviceptr scratch[TW_MAX_RANKS], codes[TW_MAX_RANKS];
  static const char *const names[] = {"signal to peer nRanks", "barrier slot blockCount", "misaligned LL store",
                                      "barrier of a team without this rank"};
  for (int i = 0; i < tw->nlocal; i++) {
    scratch[i] = dev_words(&tw->r[i], 64);
    codes[i] = dev_words(&tw->r[i], 4);
    dev_fill_words(&tw->r[i], codes[i], 4, 0xffffffffu);
  }
  for (unsigned which = 0; which < 4; which++) {
    for (int i = 0; i < tw->nlocal; i++) {
      CUdeviceptr s = scratch[i], c = codes[i] + 4 * which;
      unsigned w = which;
      void *p[] = {&dc[i], &w, &s, &c};
      dev_launch(&tw->r[i], NULL, k[i].bad_argument, 1, 64, p, "dk_bad_argument");
    }
  }
  tw_sync_all(tw, 60, "the bad-argument kernels");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    uint32_t got[4];
    dev_read_words(r, codes[i], 4, got);
    for (int w = 0; w < 4; w++)
      TW_CHECK(r, got[w] == (uint32_t)symmInvalidArgument, "%s: the kernel got %s, expected symmInvalidArgument",
               names[w], tu_result_name((int)got[w]));
    symmResult_t async = symmSuccess;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    char peer[48];
    snprintf(peer, sizeof peer, "peer %d is out of range", tw->nranks);
    TW_CHECK(r, async == symmInvalidArgument, "async error %s after bad device arguments, expected symmInvalidArgument",
             tu_result_name(async));
    TW_CHECK(r, tu_contains_ci(m, "symmDevSignalAdd") && tu_contains_ci(m, peer),
             "the message should name symmDevSignalAdd and \"%s\": %s", peer, m ? m : "(NULL)");
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemFree(scratch[i]));
    CU_REQUIRE(tu_cu.cuMemFree(codes[i]));
  }
  tw_host_barrier(tw, "bad arguments reported");
  /* A communicator in error: refused on every rank (all are in error). */
  same_for_all(tw, &good, 0, symmInvalidUsage, "asynchronous error", "a communicator in error");
}

static void body(struct tw *tw, void *ctx) {
  (void)ctx;
  if (tw_init_comms(tw) != symmSuccess) return;
  argument_checks(tw);
  destroy_checks(tw);
  tw_check_async(tw, "refused calls");
  kernel_checks(tw);
  tw_host_barrier(tw, "before destroy");
  tw_destroy_comms(tw);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {.name = "dev_bad_input", .modes = "mp,all", .limit_s = 300, .body = body};
  return tw_main(&spec, argc, argv);
}
