/*
 * args: every null / out-of-range / non-live argument of every entry point
 * returns its documented code, leaves outputs alone, and leaves a message
 * (naming the function and the argument) where symmGetLastError finds it.
 *
 *   args <path/to/symmcomm.h>
 *
 * The checks follow the Rust sources in src/ffi/. Everything that fails
 * before CUDA is touched runs everywhere; checks that need a live
 * communicator (pointer, peer and size checks, per-communicator messages)
 * run only with a GPU. The header is parsed at the end: a function it
 * declares that no check here exercised fails the test, so new entry points
 * cannot go unchecked.
 */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmcomm.h"
#include "test_util.h"

#define SENTINEL_INT 0x5a5a5a5a
#define SENTINEL_PTR ((void *)(uintptr_t)0xdeadbee0)
#define SENTINEL_COMM ((symmComm_t)SENTINEL_PTR)
/* A well-aligned address that was never a communicator. */
#define FAKE_COMM ((symmComm_t)(uintptr_t)0x1000)
#define FAKE_PTR ((void *)(uintptr_t)0x2000)

/* ---- coverage: which functions had at least one check ------------------ */

#define MAX_COVERED 256
static char covered[MAX_COVERED][TU_NAME_MAX];
static int ncovered;
static pthread_mutex_t covered_lock = PTHREAD_MUTEX_INITIALIZER;

static void cover(const char *api) {
  pthread_mutex_lock(&covered_lock);
  int seen = 0;
  for (int i = 0; i < ncovered; i++) seen |= strcmp(covered[i], api) == 0;
  if (!seen && ncovered < MAX_COVERED) snprintf(covered[ncovered++], TU_NAME_MAX, "%s", api);
  pthread_mutex_unlock(&covered_lock);
}

/* Check a failed call: its code, and that the message recorded for `where`
 * (NULL: this thread's) names the function and contains `keyword`. */
static void expect(int line, const char *call, symmResult_t got, symmResult_t want, symmComm_t where,
                   const char *api, const char *keyword) {
  cover(api);
  if (got != want) {
    tu_fail(__FILE__, line, "%s returned %s, expected %s", call, tu_result_name(got), tu_result_name(want));
    return;
  }
  const char *msg = symmGetLastError(where);
  if (!msg || !msg[0]) {
    tu_fail(__FILE__, line, "%s: symmGetLastError(%s) is %s", call, where ? "comm" : "NULL",
            msg ? "empty" : "NULL");
    return;
  }
  if (!tu_contains_ci(msg, api) || !tu_contains_ci(msg, keyword))
    tu_fail(__FILE__, line, "%s: message \"%s\" should name %s and mention \"%s\"", call, msg, api, keyword);
}
#define EXPECT(call, want, where, api, keyword) expect(__LINE__, #call, (call), (want), (where), (api), (keyword))

static int thread_msg_is(const char *want) {
  const char *m = symmGetLastError(NULL);
  return m && strcmp(m, want) == 0;
}

/* Runs on a second thread: its message slot starts empty and its failures
 * do not leak into the main thread's slot. */
static void *other_thread(void *arg) {
  (void)arg;
  CHECK(thread_msg_is(""), "a new thread's symmGetLastError(NULL) is \"%s\", expected \"\"",
        symmGetLastError(NULL));
  EXPECT(symmCommDestroy(NULL), symmInvalidArgument, NULL, "symmCommDestroy", "comm");
  return NULL;
}

/* Every function taking a communicator checks it first: NULL is an invalid
 * argument, a handle that is not live is invalid usage (message on the
 * thread either way), and outputs stay untouched. */
static void comm_checks(symmComm_t bad, symmResult_t want, const char *kw) {
  int out = SENTINEL_INT;
  size_t out_size = (size_t)SENTINEL_INT;
  symmResult_t res_out = (symmResult_t)SENTINEL_INT;
  void *ptr = SENTINEL_PTR;
  void **table = (void **)SENTINEL_PTR;
  uint32_t word[2] = {0, 0};

  EXPECT(symmCommDestroy(bad), want, NULL, "symmCommDestroy", kw);
  EXPECT(symmCommAbort(bad), want, NULL, "symmCommAbort", kw);
  EXPECT(symmCommGetAsyncError(bad, &res_out), want, NULL, "symmCommGetAsyncError", kw);
  EXPECT(symmCommGetAsyncError(bad, NULL), want, NULL, "symmCommGetAsyncError", kw);
  EXPECT(symmCommCount(bad, &out), want, NULL, "symmCommCount", kw);
  EXPECT(symmCommCount(bad, NULL), want, NULL, "symmCommCount", kw);
  EXPECT(symmCommCuDevice(bad, &out), want, NULL, "symmCommCuDevice", kw);
  EXPECT(symmCommUserRank(bad, &out), want, NULL, "symmCommUserRank", kw);
  /* The communicator is checked before anything else, even for count 0. */
  EXPECT(symmMemset32(NULL, 0, 0, bad, NULL), want, NULL, "symmMemset32", kw);
  EXPECT(symmMemset32(FAKE_PTR, 7, 4, bad, NULL), want, NULL, "symmMemset32", kw);
  EXPECT(symmBarrier(bad, NULL), want, NULL, "symmBarrier", kw);
  EXPECT(symmPutSignal(bad, 0, 0, NULL), want, NULL, "symmPutSignal", kw);
  EXPECT(symmWaitSignal(bad, 0, 0, NULL), want, NULL, "symmWaitSignal", kw);
  EXPECT(symmStreamWriteValue32(bad, word, 1, NULL), want, NULL, "symmStreamWriteValue32", kw);
  EXPECT(symmStreamWriteValue32(bad, NULL, 1, NULL), want, NULL, "symmStreamWriteValue32", kw);
  EXPECT(symmStreamWaitValue32(bad, word, 1, symmCmpEq, NULL), want, NULL, "symmStreamWaitValue32", kw);
  EXPECT(symmMemAlloc(bad, 4096, &ptr), want, NULL, "symmMemAlloc", kw);
  EXPECT(symmMemFree(bad, FAKE_PTR), want, NULL, "symmMemFree", kw);
  EXPECT(symmMemGetPeerPtr(bad, FAKE_PTR, 0, &ptr), want, NULL, "symmMemGetPeerPtr", kw);
  EXPECT(symmMemGetPeerTable(bad, FAKE_PTR, &table), want, NULL, "symmMemGetPeerTable", kw);
  EXPECT(symmCommRegister(bad, FAKE_PTR, 4096, &ptr), want, NULL, "symmCommRegister", kw);
  EXPECT(symmCommDeregister(bad, FAKE_PTR), want, NULL, "symmCommDeregister", kw);
  EXPECT(symmCommGetSignalPad(bad, 0, &ptr, &out_size), want, NULL, "symmCommGetSignalPad", kw);
  EXPECT(symmCommGetSignalPadTable(bad, &table), want, NULL, "symmCommGetSignalPadTable", kw);
  /* Collectives check the communicator first, even for count 0. */
  EXPECT(symmAllReduce(FAKE_PTR, FAKE_PTR, 4, symmFloat32, symmSum, bad, NULL), want, NULL, "symmAllReduce", kw);
  EXPECT(symmAllReduce(NULL, NULL, 0, symmFloat32, symmSum, bad, NULL), want, NULL, "symmAllReduce", kw);
  EXPECT(symmAllReduceAddRMSNorm(FAKE_PTR, FAKE_PTR, FAKE_PTR, FAKE_PTR, FAKE_PTR, 4, 4096, 1e-6f, symmBfloat16, bad,
                                 NULL),
         want, NULL, "symmAllReduceAddRMSNorm", kw);
  EXPECT(symmAllReduceAddRMSNormFp8(FAKE_PTR, FAKE_PTR, FAKE_PTR, FAKE_PTR, FAKE_PTR, (float *)FAKE_PTR, 1, 4, 4096,
                                    1e-6f, symmBfloat16, bad, NULL),
         want, NULL, "symmAllReduceAddRMSNormFp8", kw);
  EXPECT(symmAllGather(FAKE_PTR, FAKE_PTR, 4, symmInt8, bad, NULL), want, NULL, "symmAllGather", kw);
  EXPECT(symmAllGatherWithProgress(FAKE_PTR, FAKE_PTR, 4, symmInt8, (uint32_t *)FAKE_PTR, 1, bad, NULL), want, NULL,
         "symmAllGatherWithProgress", kw);
  EXPECT(symmReduceScatter(FAKE_PTR, FAKE_PTR, 4, symmBfloat16, symmMax, bad, NULL), want, NULL,
         "symmReduceScatter", kw);
  EXPECT(symmBroadcast(FAKE_PTR, FAKE_PTR, 4, symmUint64, 0, bad, NULL), want, NULL, "symmBroadcast", kw);
  EXPECT(symmReduce(FAKE_PTR, FAKE_PTR, 4, symmFloat16, symmProd, 0, bad, NULL), want, NULL, "symmReduce", kw);
  EXPECT(symmAllToAll(FAKE_PTR, FAKE_PTR, 4, symmInt32, bad, NULL), want, NULL, "symmAllToAll", kw);
  const size_t v_counts[1] = {4};
  EXPECT(symmAllToAllv(FAKE_PTR, v_counts, v_counts, FAKE_PTR, v_counts, v_counts, symmInt32, bad, NULL), want, NULL,
         "symmAllToAllv", kw);
  EXPECT(symmAllToAllvDevice(FAKE_PTR, (const int64_t *)FAKE_PTR, FAKE_PTR, 4, (int64_t *)FAKE_PTR, 1, symmInt32, bad,
                             NULL),
         want, NULL, "symmAllToAllvDevice", kw);
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, (const int64_t *)FAKE_PTR, FAKE_PTR, 4, (int64_t *)FAKE_PTR, 2, 1, 1, symmInt32,
                               bad, NULL),
         want, NULL, "symmAllToAllvDevice2d", kw);
  EXPECT(symmAllToAllvDevice2dOffset(FAKE_PTR, (const int64_t *)FAKE_PTR, FAKE_PTR, 4, (int64_t *)FAKE_PTR, 2,
                                     1, symmInt32, bad, NULL),
         want, NULL, "symmAllToAllvDevice2dOffset", kw);
  EXPECT(symmSend(FAKE_PTR, 4, symmInt32, 0, bad, NULL), want, NULL, "symmSend", kw);
  EXPECT(symmRecv(FAKE_PTR, 4, symmInt32, 0, bad, NULL), want, NULL, "symmRecv", kw);
  EXPECT(symmCommSetCopyEngine(bad, 1), want, NULL, "symmCommSetCopyEngine", kw);
  symmRedOp_t op_out = (symmRedOp_t)SENTINEL_INT;
  float one = 1.0f;
  EXPECT(symmRedOpCreatePreMulSum(&op_out, &one, symmFloat32, symmScalarHostImmediate, bad), want, NULL,
         "symmRedOpCreatePreMulSum", kw);
  EXPECT(symmRedOpDestroy((symmRedOp_t)5, bad), want, NULL, "symmRedOpDestroy", kw);
  CHECK((int)op_out == SENTINEL_INT, "a failed symmRedOpCreatePreMulSum wrote *op");
  /* The fused ops check their descriptor and pointers, then whether
   * cuBLASLt loads (symmNotSupported, which a CPU-only machine gets for a
   * handle that is not live), then the communicator (c_tests/fused). */
  symmMatmulDesc_t md;
  REQUIRE(symmMatmulDescInit(&md, symmBfloat16) == symmSuccess, "symmMatmulDescInit");
  if (bad == NULL) {
    EXPECT(symmAllGatherMatmul(FAKE_PTR, FAKE_PTR, FAKE_PTR, 4, 4, 4, &md, bad, NULL), want, NULL,
           "symmAllGatherMatmul", kw);
    EXPECT(symmMatmulReduceScatter(FAKE_PTR, FAKE_PTR, FAKE_PTR, 4, 4, 4, &md, bad, NULL), want, NULL,
           "symmMatmulReduceScatter", kw);
  } else {
    symmResult_t f = symmAllGatherMatmul(FAKE_PTR, FAKE_PTR, FAKE_PTR, 4, 4, 4, &md, bad, NULL);
    if (f == symmNotSupported)
      EXPECT(symmAllGatherMatmul(FAKE_PTR, FAKE_PTR, FAKE_PTR, 4, 4, 4, &md, bad, NULL), symmNotSupported, NULL,
             "symmAllGatherMatmul", "cuBLASLt");
    else
      EXPECT(symmAllGatherMatmul(FAKE_PTR, FAKE_PTR, FAKE_PTR, 4, 4, 4, &md, bad, NULL), want, NULL,
             "symmAllGatherMatmul", kw);
    f = symmMatmulReduceScatter(FAKE_PTR, FAKE_PTR, FAKE_PTR, 4, 4, 4, &md, bad, NULL);
    EXPECT(symmMatmulReduceScatter(FAKE_PTR, FAKE_PTR, FAKE_PTR, 4, 4, 4, &md, bad, NULL),
           f == symmNotSupported ? symmNotSupported : want, NULL, "symmMatmulReduceScatter",
           f == symmNotSupported ? "cuBLASLt" : kw);
  }
  EXPECT(symmMatmulDescInit(NULL, symmBfloat16), symmInvalidArgument, NULL, "symmMatmulDescInit", "desc");
  /* The device API's host half: the communicator first, whatever else is wrong. */
  symmDevCommRequirements dreq = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER;
  dreq.blockCount = 1;
  symmDevComm ddc, dsent;
  memset(&ddc, 0x5a, sizeof ddc);
  memcpy(&dsent, &ddc, sizeof ddc);
  EXPECT(symmDevCommCreate(bad, &dreq, &ddc), want, NULL, "symmDevCommCreate", kw);
  EXPECT(symmDevCommCreate(bad, NULL, NULL), want, NULL, "symmDevCommCreate", kw);
  EXPECT(symmDevCommDestroy(bad, &ddc), want, NULL, "symmDevCommDestroy", kw);
  EXPECT(symmDevCommDestroy(bad, NULL), want, NULL, "symmDevCommDestroy", kw);
  CHECK(memcmp(&ddc, &dsent, sizeof ddc) == 0, "a failed symmDevCommCreate wrote its output");
  /* Split and shrink check the parent first, before their other arguments. */
  symmComm_t child = SENTINEL_COMM;
  const int excl[1] = {1};
  EXPECT(symmCommSplit(bad, 0, 0, NULL, &child), want, NULL, "symmCommSplit", kw);
  EXPECT(symmCommSplit(bad, SYMM_SPLIT_NOCOLOR, 0, NULL, NULL), want, NULL, "symmCommSplit", kw);
  EXPECT(symmCommShrink(bad, excl, 1, NULL, SYMM_SHRINK_DEFAULT, &child), want, NULL, "symmCommShrink", kw);
  EXPECT(symmCommShrink(bad, NULL, -1, NULL, 7, NULL), want, NULL, "symmCommShrink", kw);
  CHECK(child == SENTINEL_COMM, "a failed split or shrink wrote *newcomm");
  EXPECT(symmCommSetAlgorithm(bad, "auto"), want, NULL, "symmCommSetAlgorithm", kw);
  EXPECT(symmCommGetTimeline(bad, NULL, 0, &out_size), want, NULL, "symmCommGetTimeline", kw);

  CHECK(out == SENTINEL_INT && (int)res_out == SENTINEL_INT && out_size == (size_t)SENTINEL_INT,
        "a failed query wrote its output");
  CHECK(ptr == SENTINEL_PTR && table == (void **)SENTINEL_PTR, "a failed call wrote a pointer output");
  CHECK(word[0] == 0 && word[1] == 0, "a failed symmStreamWriteValue32 wrote host memory");
}

static void cpu_checks(void) {
  int out = SENTINEL_INT;
  symmComm_t comm = SENTINEL_COMM;
  symmComm_t comms[2] = {SENTINEL_COMM, SENTINEL_COMM};
  symmUniqueId zero_id;
  memset(&zero_id, 0, sizeof zero_id);

  CHECK(thread_msg_is(""), "before any failure symmGetLastError(NULL) should be \"\", got \"%s\"",
        symmGetLastError(NULL));
  cover("symmGetLastError");
  cover("symmGetErrorString"); /* no failure mode; see the version test */
  CHECK(symmGetErrorString(symmInvalidArgument)[0] != '\0', "empty description");

  /* symmGetVersion / symmGetUniqueId */
  EXPECT(symmGetVersion(NULL), symmInvalidArgument, NULL, "symmGetVersion", "version");
  EXPECT(symmGetUniqueId(NULL), symmInvalidArgument, NULL, "symmGetUniqueId", "uniqueId");

  /* A success does not clear the last message ("most recent failed call"). */
  CHECK(symmGetVersion(&out) == symmSuccess, "symmGetVersion(&out) failed");
  CHECK(tu_contains_ci(symmGetLastError(NULL), "symmGetUniqueId"),
        "a successful call replaced the last error message with \"%s\"", symmGetLastError(NULL));

  /* symmCommInitRank: argument checks that come before the rendezvous. */
  EXPECT(symmCommInitRank(NULL, 1, zero_id, 0), symmInvalidArgument, NULL, "symmCommInitRank", "comm");
  EXPECT(symmCommInitRank(&comm, 0, zero_id, 0), symmInvalidArgument, NULL, "symmCommInitRank", "nranks");
  EXPECT(symmCommInitRank(&comm, -1, zero_id, 0), symmInvalidArgument, NULL, "symmCommInitRank", "nranks");
  EXPECT(symmCommInitRank(&comm, INT_MIN, zero_id, 0), symmInvalidArgument, NULL, "symmCommInitRank", "nranks");
  /* An id that symmGetUniqueId never made is caught before any connection. */
  EXPECT(symmCommInitRank(&comm, 1, zero_id, 0), symmInvalidArgument, NULL, "symmCommInitRank", "unique id");
  CHECK(comm == SENTINEL_COMM, "failed symmCommInitRank wrote *comm");

  /* Rank out of range in a one-rank group: the rendezvous answers at once
   * (no other rank to wait for), without touching CUDA. */
  const int bad_ranks[] = {1, -1, INT_MAX};
  for (size_t i = 0; i < sizeof bad_ranks / sizeof bad_ranks[0]; i++) {
    symmUniqueId id;
    symmResult_t rc = symmGetUniqueId(&id);
    CHECK(rc == symmSuccess, "symmGetUniqueId failed: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
    if (rc != symmSuccess) break;
    char rank_text[32];
    snprintf(rank_text, sizeof rank_text, "rank %d", bad_ranks[i]);
    double t0 = tu_now();
    EXPECT(symmCommInitRank(&comm, 1, id, bad_ranks[i]), symmInvalidArgument, NULL, "symmCommInitRank",
           rank_text);
    CHECK(tu_now() - t0 < 10.0, "rank %d of 1 took %.1f s to be rejected", bad_ranks[i], tu_now() - t0);
    CHECK(comm == SENTINEL_COMM, "failed symmCommInitRank wrote *comm");
  }

  /* symmCommInitAll: checks before any device is opened. */
  const int dev_neg[2] = {0, -1};
  const int dev_dup[2] = {0, 0};
  EXPECT(symmCommInitAll(NULL, 1, NULL), symmInvalidArgument, NULL, "symmCommInitAll", "comms");
  EXPECT(symmCommInitAll(comms, 0, NULL), symmInvalidArgument, NULL, "symmCommInitAll", "ndev");
  EXPECT(symmCommInitAll(comms, -1, NULL), symmInvalidArgument, NULL, "symmCommInitAll", "ndev");
  EXPECT(symmCommInitAll(comms, 0, dev_neg), symmInvalidArgument, NULL, "symmCommInitAll", "ndev");
  EXPECT(symmCommInitAll(comms, 2, dev_neg), symmInvalidArgument, NULL, "symmCommInitAll", "devlist[1]");
  /* Two ranks on one GPU is refused unless SYMM_TEST_SHARED_DEVICES=1. */
  EXPECT(symmCommInitAll(comms, 2, dev_dup), symmInvalidArgument, NULL, "symmCommInitAll", "devlist[1]");
  CHECK(comms[0] == SENTINEL_COMM && comms[1] == SENTINEL_COMM, "failed symmCommInitAll wrote comms[]");

  /* Every function that takes a communicator, given NULL or a made-up one. */
  comm_checks(NULL, symmInvalidArgument, "comm");
  comm_checks(FAKE_COMM, symmInvalidUsage, "not a live communicator");

  /* A non-live handle has no message slot of its own: it reads the thread's. */
  const char *via_fake = symmGetLastError(FAKE_COMM);
  const char *via_null = symmGetLastError(NULL);
  CHECK(via_fake && via_null && strcmp(via_fake, via_null) == 0,
        "symmGetLastError(non-live) = \"%s\", symmGetLastError(NULL) = \"%s\"", via_fake ? via_fake : "(null)",
        via_null ? via_null : "(null)");

  /* symmConfigInit: the caller's struct size must hold every field. */
  symmConfig_t cfg;
  memset(&cfg, 0x5a, sizeof cfg);
  EXPECT(symmConfigInit(NULL, sizeof cfg), symmInvalidArgument, NULL, "symmConfigInit", "config");
  EXPECT(symmConfigInit(&cfg, 8), symmInvalidArgument, NULL, "symmConfigInit", "size");
  EXPECT(symmConfigInit(&cfg, sizeof cfg - 1), symmInvalidArgument, NULL, "symmConfigInit", "size");
  CHECK(cfg.magic == 0x5a5a5a5au, "a failed symmConfigInit wrote the struct");
  CHECK(symmConfigInit(&cfg, sizeof cfg) == symmSuccess, "symmConfigInit: %s", symmGetLastError(NULL));
  CHECK(cfg.size == sizeof cfg && cfg.magic == SYMM_CONFIG_MAGIC && cfg.version == SYMM_VERSION_CODE &&
            cfg.scratchBytes == SYMM_CONFIG_UNDEF && cfg.timeoutMs == SYMM_CONFIG_UNDEF &&
            cfg.copyEngine == SYMM_CONFIG_UNDEF,
        "symmConfigInit filled size %zu magic %#x version %u scratch %lld timeout %lld copy %lld", cfg.size,
        cfg.magic, cfg.version, (long long)cfg.scratchBytes, (long long)cfg.timeoutMs, (long long)cfg.copyEngine);
  /* A newer caller's larger struct: its extra fields are left alone. */
  struct {
    symmConfig_t v1;
    uint64_t later;
  } newer;
  newer.later = 0x1234;
  CHECK(symmConfigInit(&newer.v1, sizeof newer) == symmSuccess && newer.v1.size == sizeof newer &&
            newer.later == 0x1234,
        "symmConfigInit on a larger struct: size %zu, extra field %#llx", newer.v1.size,
        (unsigned long long)newer.later);
  CHECK(SYMM_SPLIT_NOCOLOR == -1 && SYMM_SHRINK_DEFAULT == 0 && SYMM_SHRINK_ABORT == 1,
        "split/shrink constants differ from NCCL's");

  /* Groups: End needs a matching Start; nesting is counted. */
  EXPECT(symmGroupEnd(), symmInvalidUsage, NULL, "symmGroupEnd", "symmGroupStart");
  cover("symmGroupStart");
  CHECK(symmGroupStart() == symmSuccess && symmGroupStart() == symmSuccess, "symmGroupStart failed");
  CHECK(symmGroupEnd() == symmSuccess, "inner symmGroupEnd failed: %s", symmGetLastError(NULL));
  CHECK(symmGroupEnd() == symmSuccess, "outer symmGroupEnd of an empty group failed: %s", symmGetLastError(NULL));
  EXPECT(symmGroupEnd(), symmInvalidUsage, NULL, "symmGroupEnd", "symmGroupStart");

  /* Thread-local: another thread starts clean and does not touch ours. */
  char before[640];
  tu_last_error(NULL, before, sizeof before);
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, other_thread, NULL) == 0, "pthread_create failed");
  pthread_join(t, NULL);
  CHECK(thread_msg_is(before), "another thread's failure changed this thread's message to \"%s\"",
        symmGetLastError(NULL));
}

/* Checks that need a live communicator; `a` and `b` are one-rank
 * communicators from two symmCommInitAll calls. */
static void live_checks(symmComm_t a, symmComm_t b) {
  int out = SENTINEL_INT;
  size_t out_size = (size_t)SENTINEL_INT;
  void *ptr = SENTINEL_PTR;
  void **table = (void **)SENTINEL_PTR;
  uint32_t host_words[4] = {0, 0, 0, 0};
  char thread_before[640], a_before[640];

  CHECK(symmGetLastError(a) && strcmp(symmGetLastError(a), "") == 0, "a new communicator's message is \"%s\"",
        symmGetLastError(a));

  /* Failures with a live communicator are recorded on it, not on the thread. */
  EXPECT(symmCommDestroy(NULL), symmInvalidArgument, NULL, "symmCommDestroy", "comm");
  tu_last_error(NULL, thread_before, sizeof thread_before);

  EXPECT(symmCommCount(a, NULL), symmInvalidArgument, a, "symmCommCount", "NULL");
  EXPECT(symmCommCuDevice(a, NULL), symmInvalidArgument, a, "symmCommCuDevice", "NULL");
  EXPECT(symmCommUserRank(a, NULL), symmInvalidArgument, a, "symmCommUserRank", "NULL");
  EXPECT(symmCommGetAsyncError(a, NULL), symmInvalidArgument, a, "symmCommGetAsyncError", "asyncError");

  /* symmMemset32 (device-pointer checks are in memset_kernel). */
  CHECK(symmMemset32(NULL, 0, 0, a, NULL) == symmSuccess, "count 0 with NULL dst should be a no-op success");
  EXPECT(symmMemset32(NULL, 1, 1, a, NULL), symmInvalidArgument, a, "symmMemset32", "dst");
  EXPECT(symmMemset32((void *)(uintptr_t)0x1002, 1, 1, a, NULL), symmInvalidArgument, a, "symmMemset32",
         "aligned");
  EXPECT(symmMemset32(FAKE_PTR, 1, SIZE_MAX / 4 + 1, a, NULL), symmInvalidArgument, a, "symmMemset32", "overflow");
  EXPECT(symmMemset32(host_words, 1, 4, a, NULL), symmInvalidArgument, a, "symmMemset32", "dst");

  /* Signals: in a one-rank group every peer is either this rank or out of
   * range (channel checks need two ranks: see two_rank_checks). */
  EXPECT(symmPutSignal(a, 0, 0, NULL), symmInvalidArgument, a, "symmPutSignal", "this rank");
  EXPECT(symmPutSignal(a, 1, 0, NULL), symmInvalidArgument, a, "symmPutSignal", "peer 1");
  EXPECT(symmPutSignal(a, -1, 0, NULL), symmInvalidArgument, a, "symmPutSignal", "peer -1");
  EXPECT(symmWaitSignal(a, 0, 0, NULL), symmInvalidArgument, a, "symmWaitSignal", "this rank");
  EXPECT(symmWaitSignal(a, INT_MAX, 0, NULL), symmInvalidArgument, a, "symmWaitSignal", "out of range");

  /* Stream write/wait: NULL, misaligned, not device memory, bad condition. */
  EXPECT(symmStreamWriteValue32(a, NULL, 1, NULL), symmInvalidArgument, a, "symmStreamWriteValue32", "addr");
  EXPECT(symmStreamWriteValue32(a, (void *)(uintptr_t)0x1002, 1, NULL), symmInvalidArgument, a,
         "symmStreamWriteValue32", "aligned");
  EXPECT(symmStreamWriteValue32(a, host_words, 1, NULL), symmInvalidArgument, a, "symmStreamWriteValue32",
         "address");
  EXPECT(symmStreamWaitValue32(a, NULL, 1, symmCmpEq, NULL), symmInvalidArgument, a, "symmStreamWaitValue32",
         "addr");
  EXPECT(symmStreamWaitValue32(a, host_words, 1, (symmCmp_t)2, NULL), symmInvalidArgument, a,
         "symmStreamWaitValue32", "cond");
  EXPECT(symmStreamWaitValue32(a, host_words, 1, (symmCmp_t)-1, NULL), symmInvalidArgument, a,
         "symmStreamWaitValue32", "cond");
  EXPECT(symmStreamWaitValue32(a, (void *)(uintptr_t)0x1002, 1, symmCmpGeq, NULL), symmInvalidArgument, a,
         "symmStreamWaitValue32", "aligned");
  CHECK(host_words[0] == 0, "a rejected symmStreamWriteValue32 wrote host memory");

  /* Symmetric memory. */
  EXPECT(symmMemAlloc(a, 4096, NULL), symmInvalidArgument, a, "symmMemAlloc", "ptr");
  EXPECT(symmMemAlloc(a, 0, &ptr), symmInvalidArgument, a, "symmMemAlloc", "size");
  EXPECT(symmMemAlloc(a, SIZE_MAX, &ptr), symmInvalidArgument, a, "symmMemAlloc", "size");
  EXPECT(symmMemFree(a, NULL), symmInvalidArgument, a, "symmMemFree", "ptr");
  EXPECT(symmMemFree(a, FAKE_PTR), symmInvalidArgument, a, "symmMemFree", "not a live symmetric allocation");
  EXPECT(symmMemGetPeerPtr(a, NULL, 0, &ptr), symmInvalidArgument, a, "symmMemGetPeerPtr", "ptr");
  EXPECT(symmMemGetPeerPtr(a, FAKE_PTR, 0, NULL), symmInvalidArgument, a, "symmMemGetPeerPtr", "peerPtr");
  EXPECT(symmMemGetPeerPtr(a, FAKE_PTR, -1, &ptr), symmInvalidArgument, a, "symmMemGetPeerPtr", "peer -1");
  EXPECT(symmMemGetPeerPtr(a, FAKE_PTR, 1, &ptr), symmInvalidArgument, a, "symmMemGetPeerPtr", "peer 1");
  EXPECT(symmMemGetPeerPtr(a, FAKE_PTR, 0, &ptr), symmInvalidArgument, a, "symmMemGetPeerPtr",
         "not inside a symmetric or registered buffer");
  EXPECT(symmMemGetPeerTable(a, NULL, &table), symmInvalidArgument, a, "symmMemGetPeerTable", "ptr");
  EXPECT(symmMemGetPeerTable(a, FAKE_PTR, NULL), symmInvalidArgument, a, "symmMemGetPeerTable", "tableDev");
  EXPECT(symmMemGetPeerTable(a, FAKE_PTR, &table), symmInvalidArgument, a, "symmMemGetPeerTable",
         "not inside a symmetric or registered buffer");

  /* Registration. */
  EXPECT(symmCommRegister(a, NULL, 4096, &ptr), symmInvalidArgument, a, "symmCommRegister", "buff");
  EXPECT(symmCommRegister(a, FAKE_PTR, 4096, NULL), symmInvalidArgument, a, "symmCommRegister", "handle");
  EXPECT(symmCommRegister(a, FAKE_PTR, 0, &ptr), symmInvalidArgument, a, "symmCommRegister", "size");
  EXPECT(symmCommRegister(a, host_words, sizeof host_words, &ptr), symmInvalidArgument, a, "symmCommRegister",
         "buff");
  EXPECT(symmCommDeregister(a, NULL), symmInvalidArgument, a, "symmCommDeregister", "handle");
  EXPECT(symmCommDeregister(a, FAKE_PTR), symmInvalidArgument, a, "symmCommDeregister", "not a live registration");

  /* Signal pads. */
  EXPECT(symmCommGetSignalPad(a, 0, NULL, &out_size), symmInvalidArgument, a, "symmCommGetSignalPad", "pad");
  EXPECT(symmCommGetSignalPad(a, 0, &ptr, NULL), symmInvalidArgument, a, "symmCommGetSignalPad", "bytes");
  EXPECT(symmCommGetSignalPad(a, 1, &ptr, &out_size), symmInvalidArgument, a, "symmCommGetSignalPad", "peer 1");
  EXPECT(symmCommGetSignalPad(a, -1, &ptr, &out_size), symmInvalidArgument, a, "symmCommGetSignalPad", "peer -1");
  EXPECT(symmCommGetSignalPadTable(a, NULL), symmInvalidArgument, a, "symmCommGetSignalPadTable", "tableDev");

  /* Collectives: nothing is enqueued on a bad argument. */
  float *host_buf = (float *)host_words;
  CHECK(symmAllReduce(NULL, NULL, 0, symmFloat32, symmSum, a, NULL) == symmSuccess, "count 0 should be a no-op");
  CHECK(symmSend(NULL, 0, symmInt8, 0, a, NULL) == symmSuccess, "count 0 send should be a no-op");
  EXPECT(symmAllReduce(NULL, FAKE_PTR, 4, symmFloat32, symmSum, a, NULL), symmInvalidArgument, a, "symmAllReduce",
         "sendbuff");
  EXPECT(symmAllReduce(FAKE_PTR, FAKE_PTR, 4, (symmDataType_t)99, symmSum, a, NULL), symmInvalidArgument, a,
         "symmAllReduce", "datatype 99");
  EXPECT(symmAllReduce(FAKE_PTR, FAKE_PTR, 4, (symmDataType_t)-1, symmSum, a, NULL), symmInvalidArgument, a,
         "symmAllReduce", "datatype");
  EXPECT(symmAllReduce(FAKE_PTR, FAKE_PTR, 4, symmFloat32, (symmRedOp_t)5, a, NULL), symmInvalidArgument, a,
         "symmAllReduce", "op 5");
  EXPECT(symmAllReduce(FAKE_PTR, FAKE_PTR, SIZE_MAX / 2, symmFloat32, symmSum, a, NULL), symmInvalidArgument, a,
         "symmAllReduce", "overflow");
  EXPECT(symmAllReduce(host_buf, FAKE_PTR, 4, symmFloat32, symmSum, a, NULL), symmInvalidArgument, a,
         "symmAllReduce", "sendbuff");
  /* Pre-multiplied sums: the op and its scalar (c_tests/coll/coll_premulsum
   * uses them). */
  symmRedOp_t made = (symmRedOp_t)SENTINEL_INT;
  float one = 1.0f;
  EXPECT(symmRedOpCreatePreMulSum(NULL, &one, symmFloat32, symmScalarHostImmediate, a), symmInvalidArgument, a,
         "symmRedOpCreatePreMulSum", "op is NULL");
  EXPECT(symmRedOpCreatePreMulSum(&made, NULL, symmFloat32, symmScalarHostImmediate, a), symmInvalidArgument, a,
         "symmRedOpCreatePreMulSum", "scalar is NULL");
  EXPECT(symmRedOpCreatePreMulSum(&made, &one, (symmDataType_t)12, symmScalarHostImmediate, a), symmInvalidArgument,
         a, "symmRedOpCreatePreMulSum", "datatype 12");
  EXPECT(symmRedOpCreatePreMulSum(&made, &one, symmFloat32, (symmScalarResidence_t)2, a), symmInvalidArgument, a,
         "symmRedOpCreatePreMulSum", "residence 2");
  EXPECT(symmRedOpCreatePreMulSum(&made, &one, symmFloat32, symmScalarDevice, a), symmInvalidArgument, a,
         "symmRedOpCreatePreMulSum", "not memory known to CUDA");
  CHECK((int)made == SENTINEL_INT, "a failed symmRedOpCreatePreMulSum wrote *op");
  EXPECT(symmRedOpDestroy(symmSum, a), symmInvalidArgument, a, "symmRedOpDestroy", "built-in");
  EXPECT(symmRedOpDestroy((symmRedOp_t)5, a), symmInvalidArgument, a, "symmRedOpDestroy", "op 5");
  /* The fused all-reduce + RMSNorm: shapes, type, pointers, alignment and
   * aliasing before any buffer is looked at. */
  char *const rn_in = (char *)FAKE_PTR, *const rn_res = rn_in + (1 << 20), *const rn_w = rn_in + (2 << 20),
             *const rn_out = rn_in + (3 << 20);
  EXPECT(symmAllReduceAddRMSNorm(rn_in, rn_res, rn_w, rn_out, rn_res, 4, 12, 1e-6f, symmBfloat16, a, NULL),
         symmInvalidArgument, a, "symmAllReduceAddRMSNorm", "multiple of 8");
  EXPECT(symmAllReduceAddRMSNorm(rn_in, rn_res, rn_w, rn_out, rn_res, 4, 4096, 1e-6f, symmInt32, a, NULL),
         symmInvalidArgument, a, "symmAllReduceAddRMSNorm", "symmBfloat16");
  EXPECT(symmAllReduceAddRMSNorm(rn_in, NULL, rn_w, rn_out, rn_res, 4, 4096, 1e-6f, symmBfloat16, a, NULL),
         symmInvalidArgument, a, "symmAllReduceAddRMSNorm", "residual is NULL");
  EXPECT(symmAllReduceAddRMSNorm(rn_in, rn_res, rn_w, rn_res, rn_res, 4, 4096, 1e-6f, symmBfloat16, a, NULL),
         symmInvalidArgument, a, "symmAllReduceAddRMSNorm", "overlap");
  EXPECT(symmAllReduceAddRMSNorm(rn_in, rn_res, rn_w + 8, rn_out, rn_res, 4, 4096, 1e-6f, symmBfloat16, a, NULL),
         symmInvalidArgument, a, "symmAllReduceAddRMSNorm", "16-byte");
  EXPECT(symmAllReduceAddRMSNorm(rn_in, rn_res, rn_w, rn_out, rn_res, 4, 4096, -1.0f, symmBfloat16, a, NULL),
         symmInvalidArgument, a, "symmAllReduceAddRMSNorm", "eps");
  EXPECT(symmAllReduceAddRMSNorm(rn_in, rn_res, rn_w, rn_out, rn_res, 1, 1 << 16, 1e-6f, symmBfloat16, a, NULL),
         symmNotSupported, a, "symmAllReduceAddRMSNorm", "64 KiB");
  float *const rn_scales = (float *)(rn_in + (4 << 20));
  EXPECT(symmAllReduceAddRMSNormFp8(rn_in, rn_res, rn_w, rn_out, rn_res, NULL, 1, 4, 4096, 1e-6f, symmBfloat16, a,
                                    NULL),
         symmInvalidArgument, a, "symmAllReduceAddRMSNormFp8", "scales is NULL");
  EXPECT(symmAllReduceAddRMSNormFp8(rn_in, rn_res, rn_w, rn_in, rn_res, rn_scales, 0, 4, 4096, 1e-6f, symmBfloat16, a,
                                    NULL),
         symmInvalidArgument, a, "symmAllReduceAddRMSNormFp8", "input and out overlap");
  EXPECT(symmAllGather(NULL, FAKE_PTR, 4, symmInt8, a, NULL), symmInvalidArgument, a, "symmAllGather", "sendbuff");
  EXPECT(symmAllGatherWithProgress(FAKE_PTR, FAKE_PTR, 4, (symmDataType_t)12, NULL, 1, a, NULL), symmInvalidArgument,
         a, "symmAllGatherWithProgress", "datatype");
  EXPECT(symmReduceScatter(FAKE_PTR, FAKE_PTR, 4, symmBfloat16, (symmRedOp_t)-1, a, NULL), symmInvalidArgument, a,
         "symmReduceScatter", "op");
  EXPECT(symmBroadcast(FAKE_PTR, FAKE_PTR, 4, symmInt8, 1, a, NULL), symmInvalidArgument, a, "symmBroadcast",
         "root 1");
  EXPECT(symmBroadcast(FAKE_PTR, FAKE_PTR, 4, symmInt8, -1, a, NULL), symmInvalidArgument, a, "symmBroadcast",
         "root -1");
  EXPECT(symmReduce(FAKE_PTR, FAKE_PTR, 4, symmInt8, symmMin, 7, a, NULL), symmInvalidArgument, a, "symmReduce",
         "root 7");
  EXPECT(symmAllToAll(FAKE_PTR, FAKE_PTR, SIZE_MAX / 3, symmInt64, a, NULL), symmInvalidArgument, a, "symmAllToAll",
         "overflow");
  const size_t v_one[1] = {4}, v_zero[1] = {0};
  EXPECT(symmAllToAllv(FAKE_PTR, NULL, v_zero, FAKE_PTR, v_one, v_zero, symmInt8, a, NULL), symmInvalidArgument, a,
         "symmAllToAllv", "sendcounts");
  EXPECT(symmAllToAllv(FAKE_PTR, v_one, v_zero, FAKE_PTR, v_one, v_zero, (symmDataType_t)42, a, NULL),
         symmInvalidArgument, a, "symmAllToAllv", "datatype 42");
  EXPECT(symmAllToAllv(FAKE_PTR, v_one, v_zero, FAKE_PTR, v_one, v_zero, symmInt8, a, NULL), symmInvalidArgument, a,
         "symmAllToAllv", "overlap");
  int64_t *const dev_words = (int64_t *)FAKE_PTR;
  EXPECT(symmAllToAllvDevice(FAKE_PTR, NULL, FAKE_PTR, 4, dev_words, 1, symmInt8, a, NULL), symmInvalidArgument, a,
         "symmAllToAllvDevice", "sendSplits is NULL");
  EXPECT(symmAllToAllvDevice(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, NULL, 1, symmInt8, a, NULL), symmInvalidArgument,
         a, "symmAllToAllvDevice", "outSplitsOffsets is NULL");
  EXPECT(symmAllToAllvDevice(FAKE_PTR, (const int64_t *)((char *)FAKE_PTR + 4), FAKE_PTR, 4, dev_words, 1, symmInt8, a,
                             NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice", "8-byte");
  EXPECT(symmAllToAllvDevice(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 1, (symmDataType_t)77, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice", "datatype 77");
  EXPECT(symmAllToAllvDevice(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 0, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice", "rowElems is 0");
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 2, 1, (size_t)1 << 40,
                               symmFloat32, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2d", "more than 4 GiB a row");
  EXPECT(symmAllToAllvDevice(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice", "symmetric or registered");
  /* The 2-D forms: the same checks (shared), and localExperts / majorAlign. */
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, NULL, FAKE_PTR, 4, dev_words, 2, 1, 1, symmInt8, a, NULL), symmInvalidArgument,
         a, "symmAllToAllvDevice2d", "sendSplits is NULL");
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, NULL, 2, 1, 1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2d", "outSplitsOffsets is NULL");
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, (int64_t *)((char *)FAKE_PTR + 4), 2, 1,
                               1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2d", "8-byte");
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 0, 1, 1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2d", "localExperts is 0");
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 1025, 1, 1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2d", "1024 blocks");
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 2, -8, 1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2d", "majorAlign is -8");
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 2, 8, 1, (symmDataType_t)77, a,
                               NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2d", "datatype 77");
  EXPECT(symmAllToAllvDevice2d(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 2, 8, 1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2d", "symmetric or registered");
  EXPECT(symmAllToAllvDevice2dOffset(FAKE_PTR, NULL, FAKE_PTR, 4, dev_words, 2, 1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2dOffset", "inSplitsOffsets is NULL");
  EXPECT(symmAllToAllvDevice2dOffset(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, -1, 1, symmInt8, a,
                                     NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2dOffset", "localExperts is -1");
  EXPECT(symmAllToAllvDevice2dOffset(FAKE_PTR, dev_words + 1024, FAKE_PTR, 4, dev_words + 2048, 2, 1, symmInt8, a, NULL),
         symmInvalidArgument, a, "symmAllToAllvDevice2dOffset", "symmetric or registered");
  EXPECT(symmSend(FAKE_PTR, 4, symmInt8, 1, a, NULL), symmInvalidArgument, a, "symmSend", "peer 1");
  EXPECT(symmRecv(FAKE_PTR, 4, (symmDataType_t)42, 0, a, NULL), symmInvalidArgument, a, "symmRecv", "datatype 42");
  EXPECT(symmRecv(NULL, 4, symmInt8, 0, a, NULL), symmInvalidArgument, a, "symmRecv", "recvbuff");
  EXPECT(symmCommSetCopyEngine(a, 2), symmInvalidArgument, a, "symmCommSetCopyEngine", "enable");
  EXPECT(symmCommSetCopyEngine(a, -1), symmInvalidArgument, a, "symmCommSetCopyEngine", "enable");
  /* Device communicators (one rank: the collective part is trivial). */
  symmDevCommRequirements dreq = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER, dbad;
  dreq.blockCount = 2;
  symmDevComm ddc, dsent;
  memset(&ddc, 0x5a, sizeof ddc);
  memcpy(&dsent, &ddc, sizeof ddc);
  EXPECT(symmDevCommCreate(a, NULL, &ddc), symmInvalidArgument, a, "symmDevCommCreate", "req is NULL");
  EXPECT(symmDevCommCreate(a, &dreq, NULL), symmInvalidArgument, a, "symmDevCommCreate", "devComm is NULL");
  dbad = dreq, dbad.blockCount = 0;
  EXPECT(symmDevCommCreate(a, &dbad, &ddc), symmInvalidArgument, a, "symmDevCommCreate", "blockCount is 0");
  dbad = dreq, dbad.blockCount = SYMM_DEV_MAX_BLOCKS + 1;
  EXPECT(symmDevCommCreate(a, &dbad, &ddc), symmInvalidArgument, a, "symmDevCommCreate", "SYMM_DEV_MAX_BLOCKS");
  dbad = dreq, dbad.apiVersion = SYMM_DEVICE_API_VERSION + 100;
  EXPECT(symmDevCommCreate(a, &dbad, &ddc), symmInvalidUsage, a, "symmDevCommCreate", "device API 2.0");
  dbad = dreq, dbad.devCommSize = sizeof(symmDevComm) + 8;
  EXPECT(symmDevCommCreate(a, &dbad, &ddc), symmInvalidUsage, a, "symmDevCommCreate", "layout");
  CHECK(memcmp(&ddc, &dsent, sizeof ddc) == 0, "a refused symmDevCommCreate wrote its output");
  EXPECT(symmDevCommDestroy(a, NULL), symmInvalidArgument, a, "symmDevCommDestroy", "devComm");
  EXPECT(symmDevCommDestroy(a, &ddc), symmInvalidArgument, a, "symmDevCommDestroy", "not a live device communicator");
  CHECK(symmDevCommCreate(a, &dreq, &ddc) == symmSuccess, "symmDevCommCreate(1 rank): %s", symmGetLastError(a));
  CHECK(ddc.rank == 0 && ddc.nRanks == 1 && ddc.blockCount == 2 && ddc.version == SYMM_DEVICE_API_VERSION,
        "symmDevCommCreate(1 rank) gave rank %d of %d, %u blocks, version %u", ddc.rank, ddc.nRanks, ddc.blockCount,
        ddc.version);
  CHECK(symmDevCommDestroy(a, &ddc) == symmSuccess, "symmDevCommDestroy: %s", symmGetLastError(a));
  EXPECT(symmDevCommDestroy(a, &ddc), symmInvalidArgument, a, "symmDevCommDestroy", "not a live device communicator");

  /* Split and shrink of a one-rank communicator (collective over one rank:
   * a bad argument fails at once, nothing is written). */
  symmComm_t child = SENTINEL_COMM;
  symmConfig_t cfg;
  CHECK(symmConfigInit(&cfg, sizeof cfg) == symmSuccess, "symmConfigInit failed");
  EXPECT(symmCommSplit(a, 0, 0, NULL, NULL), symmInvalidArgument, a, "symmCommSplit", "newcomm");
  EXPECT(symmCommSplit(a, -2, 0, NULL, &child), symmInvalidArgument, a, "symmCommSplit", "color -2");
  symmConfig_t bad_cfg = cfg;
  bad_cfg.magic = 0;
  EXPECT(symmCommSplit(a, 0, 0, &bad_cfg, &child), symmInvalidArgument, a, "symmCommSplit", "symmConfigInit");
  bad_cfg = cfg;
  bad_cfg.scratchBytes = 4096;
  EXPECT(symmCommSplit(a, 0, 0, &bad_cfg, &child), symmInvalidArgument, a, "symmCommSplit", "scratchBytes");
  bad_cfg = cfg;
  bad_cfg.copyEngine = 3;
  EXPECT(symmCommSplit(a, 0, 0, &bad_cfg, &child), symmInvalidArgument, a, "symmCommSplit", "copyEngine");
  const int excl_self[1] = {0}, excl_out[1] = {1}, excl_twice[2] = {0, 0};
  EXPECT(symmCommShrink(a, excl_self, 1, NULL, SYMM_SHRINK_DEFAULT, &child), symmInvalidArgument, a,
         "symmCommShrink", "excluded ranks must not call");
  EXPECT(symmCommShrink(a, excl_out, 1, NULL, SYMM_SHRINK_DEFAULT, &child), symmInvalidArgument, a,
         "symmCommShrink", "not a rank");
  EXPECT(symmCommShrink(a, excl_twice, 2, NULL, SYMM_SHRINK_DEFAULT, &child), symmInvalidArgument, a,
         "symmCommShrink", "excludeRanks");
  EXPECT(symmCommShrink(a, NULL, 1, NULL, SYMM_SHRINK_DEFAULT, &child), symmInvalidArgument, a, "symmCommShrink",
         "excludeRanks");
  EXPECT(symmCommShrink(a, NULL, -1, NULL, SYMM_SHRINK_DEFAULT, &child), symmInvalidArgument, a, "symmCommShrink",
         "excludeCount");
  EXPECT(symmCommShrink(a, NULL, 0, NULL, 5, &child), symmInvalidArgument, a, "symmCommShrink", "flags");
  EXPECT(symmCommShrink(a, NULL, 0, NULL, SYMM_SHRINK_DEFAULT, NULL), symmInvalidArgument, a, "symmCommShrink",
         "newcomm");
  CHECK(child == SENTINEL_COMM, "a failed split or shrink wrote *newcomm");
  /* The valid calls: NOCOLOR gives NULL; a one-rank child and a one-rank
   * shrink work, and outlive their parent's queries. */
  CHECK(symmCommSplit(a, SYMM_SPLIT_NOCOLOR, 0, NULL, &child) == symmSuccess && child == NULL,
        "NOCOLOR split: %s, child %p", symmGetLastError(a), (void *)child);
  cfg.timeoutMs = 5000;
  CHECK(symmCommSplit(a, 3, 9, &cfg, &child) == symmSuccess && child != NULL, "one-rank split: %s",
        symmGetLastError(a));
  if (child) {
    int n = -1, r = -1;
    CHECK(symmCommCount(child, &n) == symmSuccess && n == 1 && symmCommUserRank(child, &r) == symmSuccess && r == 0,
          "one-rank child: count %d rank %d", n, r);
    symmComm_t grandchild = NULL;
    CHECK(symmCommShrink(child, NULL, 0, NULL, SYMM_SHRINK_DEFAULT, &grandchild) == symmSuccess && grandchild,
          "one-rank shrink: %s", symmGetLastError(child));
    CHECK(symmCommDestroy(child) == symmSuccess, "destroy child: %s", symmGetLastError(child));
    if (grandchild) CHECK(symmCommDestroy(grandchild) == symmSuccess, "destroy shrink child failed");
  }
  EXPECT(symmCommSetAlgorithm(a, "fastest"), symmInvalidArgument, a, "symmCommSetAlgorithm", "fastest");
  EXPECT(symmCommSetAlgorithm(a, "oneshot+twoshot"), symmInvalidArgument, a, "symmCommSetAlgorithm", "more than one");
  EXPECT(symmCommGetTimeline(a, NULL, 0, NULL), symmInvalidArgument, a, "symmCommGetTimeline", "count");
  EXPECT(symmCommGetTimeline(a, NULL, 4, &out_size), symmInvalidArgument, a, "symmCommGetTimeline", "events");
  if (!getenv("SYMM_TIMELINE"))
    EXPECT(symmCommGetTimeline(a, NULL, 0, &out_size), symmInvalidUsage, a, "symmCommGetTimeline", "SYMM_TIMELINE");

  CHECK(ptr == SENTINEL_PTR && table == (void **)SENTINEL_PTR, "a failed call wrote a pointer output");
  CHECK(out_size == (size_t)SENTINEL_INT && out == SENTINEL_INT, "a failed call wrote a size/int output");
  CHECK(thread_msg_is(thread_before), "errors on a live communicator changed the thread's message to \"%s\"",
        symmGetLastError(NULL));

  /* Isolation: b's slot is untouched by a's errors, and vice versa. */
  CHECK(symmGetLastError(b) && strcmp(symmGetLastError(b), "") == 0,
        "errors on communicator a changed b's message to \"%s\"", symmGetLastError(b));
  tu_last_error(a, a_before, sizeof a_before);
  EXPECT(symmCommUserRank(b, NULL), symmInvalidArgument, b, "symmCommUserRank", "NULL");
  CHECK(strcmp(symmGetLastError(a), a_before) == 0, "an error on b changed a's message from \"%s\" to \"%s\"",
        a_before, symmGetLastError(a));
}

/* Channel checks need a peer that is not this rank: a two-rank group. */
static void two_rank_checks(void) {
  symmComm_t c[2];
  symmResult_t rc = symmCommInitAll(c, 2, NULL);
  CHECK(rc == symmSuccess, "symmCommInitAll(2 GPUs): %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
  if (rc != symmSuccess) return;
  EXPECT(symmPutSignal(c[0], 1, -1, NULL), symmInvalidArgument, c[0], "symmPutSignal", "channel -1");
  EXPECT(symmPutSignal(c[0], 1, INT_MAX, NULL), symmInvalidArgument, c[0], "symmPutSignal", "channel");
  EXPECT(symmWaitSignal(c[1], 0, -1, NULL), symmInvalidArgument, c[1], "symmWaitSignal", "channel -1");
  EXPECT(symmPutSignal(c[0], 2, 0, NULL), symmInvalidArgument, c[0], "symmPutSignal", "peer 2");
  CHECK(symmCommDestroy(c[0]) == symmSuccess && symmCommDestroy(c[1]) == symmSuccess, "destroy failed");
}

static void gpu_checks(int ngpus) {
  symmComm_t a = NULL, b = NULL;
  symmComm_t comms[1] = {SENTINEL_COMM};
  int out = SENTINEL_INT;

  symmResult_t rc = symmCommInitAll(&a, 1, NULL);
  REQUIRE(rc == symmSuccess, "symmCommInitAll(&a, 1, NULL): %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
  rc = symmCommInitAll(&b, 1, NULL);
  REQUIRE(rc == symmSuccess, "symmCommInitAll(&b, 1, NULL): %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
  CHECK(a != b, "two InitAll calls returned the same handle");

  /* A device that does not exist. */
  int missing_dev[1] = {ngpus};
  EXPECT(symmCommInitAll(comms, 1, missing_dev), symmInvalidArgument, NULL, "symmCommInitAll", "does not exist");
  CHECK(comms[0] == SENTINEL_COMM, "failed symmCommInitAll wrote comms[0]");

  live_checks(a, b);
  if (ngpus >= 2)
    two_rank_checks();
  else
    printf("note: signal channel checks need 2 GPUs; %d visible\n", ngpus);

  /* Destroyed handles are no longer live: invalid usage, message on the thread. */
  CHECK(symmCommDestroy(a) == symmSuccess, "symmCommDestroy(a) failed: %s", symmGetLastError(a));
  EXPECT(symmCommCount(a, &out), symmInvalidUsage, NULL, "symmCommCount", "not a live communicator");
  EXPECT(symmCommDestroy(a), symmInvalidUsage, NULL, "symmCommDestroy", "not a live communicator");
  EXPECT(symmCommAbort(a), symmInvalidUsage, NULL, "symmCommAbort", "not a live communicator");
  EXPECT(symmMemset32(NULL, 0, 0, a, NULL), symmInvalidUsage, NULL, "symmMemset32", "live");
  CHECK(out == SENTINEL_INT, "a query on a destroyed communicator wrote its output");
  CHECK(symmCommAbort(b) == symmSuccess, "symmCommAbort(b) failed: %s", symmGetLastError(b));
  EXPECT(symmCommUserRank(b, &out), symmInvalidUsage, NULL, "symmCommUserRank", "not a live communicator");
}

/* Every function the header declares must have been checked above. */
static void coverage_check(const char *header) {
  static char names[MAX_COVERED][TU_NAME_MAX];
  int n = tu_header_functions(header, names, MAX_COVERED);
  REQUIRE(n >= 10, "could not parse the functions of %s (got %d)", header, n);
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < ncovered; j++) seen |= strcmp(names[i], covered[j]) == 0;
    CHECK(seen, "%s is declared in the header but args.c has no check for it", names[i]);
  }
  printf("%d header functions, all with argument checks\n", n);
}

int main(int argc, char **argv) {
  REQUIRE(argc == 2, "usage: %s <symmcomm.h>", argv[0]);
  /* The duplicate-device check above is what this test expects; the test
   * override would disable it. Config is read once, on the first call. */
  unsetenv("SYMM_TEST_SHARED_DEVICES");

  char reason[512];
  int ngpus = tu_gpu_count(reason, sizeof reason);
  REQUIRE(ngpus >= 0, "GPU probe failed: %s", reason);

  cpu_checks();
  if (ngpus > 0)
    gpu_checks(ngpus);
  else
    printf("note: checks that need a live communicator skipped: no CUDA device (%s)\n", reason);
  coverage_check(argv[1]);
  return tu_finish("args");
}
