/* CPU checks of libsymmcomm_nccl.so through the REAL nccl.h, linked as
 * libnccl.so.2. Mode (argv[1]) matches the environment CTest sets:
 *   auto  - default routing, real NCCL found by search behind us
 *   nccl  - SYMM_NCCL_MODE=nccl, SYMM_NCCL_LIB = the real library
 *   nolib - SYMM_NCCL_MODE=nccl, SYMM_NCCL_LIB = a missing file
 *   symm  - SYMM_NCCL_MODE=symm
 * On a machine without a GPU every communicator init must fail with an
 * error and a message; with one it may succeed and is then destroyed. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* RCCL's all-to-all-v, which the stand-in exports and nccl.h lacks. */
ncclResult_t ncclAllToAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[], void *recvbuff,
                           const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream);

static int failures;
#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
      failures++;                                                     \
    }                                                                 \
  } while (0)

static int has_nccl_part(const ncclUniqueId *id) { return memcmp(id->internal, "SYMMNCCL", 8) == 0 && (id->internal[8] & 2); }
static int has_symm_part(const ncclUniqueId *id) { return memcmp(id->internal, "SYMMNCCL", 8) == 0 && (id->internal[8] & 1); }

static void common_checks(void) {
  int v = 0;
  /* 2.28.9 is reported; the header may be another 2.28 release (the GPU
   * machine's is 2.28.3): the series must match. */
  CHECK(ncclGetVersion(&v) == ncclSuccess && v / 100 == NCCL_VERSION_CODE / 100, "version %d, header %d", v,
        NCCL_VERSION_CODE);
  CHECK(ncclGetVersion(NULL) == ncclInvalidArgument, "NULL version pointer");
  CHECK(strstr(ncclGetLastError(NULL), "version is NULL") != NULL, "message: %s", ncclGetLastError(NULL));
  for (int r = 0; r < 12; r++) CHECK(ncclGetErrorString((ncclResult_t)r) != NULL, "string for %d", r);
  CHECK(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "%s", ncclGetErrorString(ncclSuccess));
  /* Made-up and NULL communicators are errors, not crashes. */
  ncclComm_t bogus = (ncclComm_t)(uintptr_t)0x1234560;
  int n = -1;
  CHECK(ncclCommCount(bogus, &n) == ncclInvalidArgument && n == -1, "bogus comm");
  CHECK(ncclAllReduce(NULL, NULL, 1, ncclFloat, ncclSum, NULL, NULL) == ncclInvalidArgument, "NULL comm");
  const size_t one[1] = {1};
  CHECK(ncclAllToAllv(NULL, one, one, NULL, one, one, ncclFloat, NULL, NULL) == ncclInvalidArgument,
        "all-to-all-v, NULL comm");
  CHECK(ncclAllToAllv(NULL, one, one, NULL, one, one, ncclFloat, bogus, NULL) == ncclInvalidArgument,
        "all-to-all-v, bogus comm");
  CHECK(strstr(ncclGetLastError(NULL), "ncclAllToAllv") != NULL, "message: %s", ncclGetLastError(NULL));
  CHECK(ncclCommDestroy(bogus) == ncclInvalidArgument, "destroy bogus");
  CHECK(ncclCommAbort(NULL) == ncclInvalidArgument, "abort NULL");
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "GroupEnd without GroupStart");
  CHECK(ncclGroupStart() == ncclSuccess && ncclGroupEnd() == ncclSuccess, "empty group");
  CHECK(ncclGetUniqueId(NULL) == ncclInvalidArgument, "NULL id");
  /* A config that was never initialised is refused before anything runs. */
  ncclConfig_t bad;
  memset(&bad, 0, sizeof bad);
  ncclComm_t c = NULL;
  ncclUniqueId zero;
  memset(&zero, 0, sizeof zero);
  CHECK(ncclCommInitRankConfig(&c, 1, zero, 0, &bad) == ncclInvalidArgument && c == NULL, "bad config");
  CHECK(ncclCommInitRank(&c, 0, zero, 0) == ncclInvalidArgument && c == NULL, "nranks 0");
  CHECK(ncclCommInitRank(&c, 2, zero, 2) == ncclInvalidArgument && c == NULL, "rank out of range");
}

/* One-rank communicator: fails cleanly without a GPU; works with one. */
static void init_one(const ncclUniqueId *id, const char *expect_in_error) {
  ncclComm_t c = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&c, 1, *id, 0, &cfg);
  if (r == ncclSuccess) {
    printf("init succeeded (a GPU is present)\n");
    int n = 0;
    CHECK(ncclCommCount(c, &n) == ncclSuccess && n == 1, "count %d", n);
    ncclResult_t ae = ncclInProgress;
    CHECK(ncclCommGetAsyncError(c, &ae) == ncclSuccess && ae == ncclSuccess, "async %d", ae);
    CHECK(ncclCommDestroy(c) == ncclSuccess, "destroy");
    return;
  }
  const char *msg = ncclGetLastError(NULL);
  printf("init without a GPU: %s: %s\n", ncclGetErrorString(r), msg);
  CHECK(c == NULL, "comm written on failure");
  CHECK(msg[0] != '\0', "empty message");
  if (expect_in_error) CHECK(strstr(msg, expect_in_error) != NULL, "message lacks '%s': %s", expect_in_error, msg);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "auto";
  common_checks();
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclResult_t r = ncclGetUniqueId(&id);
  if (strcmp(mode, "auto") == 0) {
    CHECK(r == ncclSuccess, "GetUniqueId: %s", ncclGetLastError(NULL));
    CHECK(has_symm_part(&id) && has_nccl_part(&id), "auto id must carry both parts (flags %d)", id.internal[8]);
    init_one(&id, NULL);
  } else if (strcmp(mode, "nccl") == 0) {
    /* A GPU-free call served by the real NCCL: its id is inside ours. */
    CHECK(r == ncclSuccess, "GetUniqueId forwarded: %s", ncclGetLastError(NULL));
    CHECK(has_nccl_part(&id) && !has_symm_part(&id), "forced-NCCL id (flags %d)", id.internal[8]);
    init_one(&id, "real NCCL");
    void *p = NULL;
    r = ncclMemAlloc(&p, 1 << 20);
    if (r == ncclSuccess) {
      CHECK(ncclMemFree(p) == ncclSuccess, "MemFree");
    } else {
      CHECK(strstr(ncclGetLastError(NULL), "real NCCL") != NULL, "MemAlloc message: %s", ncclGetLastError(NULL));
    }
  } else if (strcmp(mode, "nolib") == 0) {
    CHECK(r == ncclInvalidUsage, "no real NCCL: GetUniqueId must be ncclInvalidUsage, got %d", r);
    CHECK(strstr(ncclGetLastError(NULL), "SYMM_NCCL_LIB") != NULL, "message: %s", ncclGetLastError(NULL));
    void *p = NULL;
    CHECK(ncclMemAlloc(&p, 4096) == ncclInvalidUsage && p == NULL, "MemAlloc without NCCL");
  } else if (strcmp(mode, "symm") == 0) {
    CHECK(r == ncclSuccess, "GetUniqueId: %s", ncclGetLastError(NULL));
    CHECK(has_symm_part(&id) && !has_nccl_part(&id), "symm-only id (flags %d)", id.internal[8]);
    init_one(&id, NULL);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("nccl_cpu %s: OK\n", mode);
  return 0;
}
