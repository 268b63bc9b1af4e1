/*
 * init_all (GPU): symmCommInitAll over every visible GPU, with the default
 * and with explicit device lists; each communicator reports the right
 * count, rank and device; destroy and abort release them (after which the
 * handles are no longer live). The library keeps each device's kernels
 * loaded between communicators; after the application resets the primary
 * context (cudaDeviceReset) a new communicator must still run kernels.
 */
#include <stdio.h>
#include <string.h>

#include "symmcomm.h"
#include "test_util.h"

#define MAX_DEV 64

/* InitAll with `devlist` (NULL: 0..n-1), then check every communicator. */
static int init_and_check(const char *label, symmComm_t *comms, int n, const int *devlist) {
  for (int i = 0; i < n; i++) comms[i] = NULL;
  symmResult_t rc = symmCommInitAll(comms, n, devlist);
  CHECK(rc == symmSuccess, "[%s] symmCommInitAll: %s (%s)", label, tu_result_name(rc), symmGetLastError(NULL));
  if (rc != symmSuccess) return -1;
  for (int i = 0; i < n; i++) {
    int count = -1, rank = -1, dev = -1;
    symmResult_t async = symmInternalError;
    int want_dev = devlist ? devlist[i] : i;
    CHECK(comms[i] != NULL, "[%s] comms[%d] is NULL", label, i);
    for (int j = 0; j < i; j++) CHECK(comms[i] != comms[j], "[%s] comms[%d] == comms[%d]", label, i, j);
    CHECK(symmCommCount(comms[i], &count) == symmSuccess && count == n, "[%s] comm %d: count %d, expected %d",
          label, i, count, n);
    CHECK(symmCommUserRank(comms[i], &rank) == symmSuccess && rank == i, "[%s] comm %d: rank %d", label, i, rank);
    CHECK(symmCommCuDevice(comms[i], &dev) == symmSuccess && dev == want_dev,
          "[%s] comm %d: device %d, expected %d", label, i, dev, want_dev);
    CHECK(symmCommGetAsyncError(comms[i], &async) == symmSuccess && async == symmSuccess,
          "[%s] comm %d: async error %s", label, i, tu_result_name(async));
    printf("  [%s] rank %d/%d on device %d\n", label, rank, count, dev);
  }
  return 0;
}

/* Release with destroy or abort; afterwards the handle must be dead. */
static void release_all(const char *label, symmComm_t *comms, int n, int use_abort) {
  for (int i = 0; i < n; i++) {
    symmResult_t rc = use_abort ? symmCommAbort(comms[i]) : symmCommDestroy(comms[i]);
    CHECK(rc == symmSuccess, "[%s] %s(comms[%d]): %s (%s)", label, use_abort ? "symmCommAbort" : "symmCommDestroy",
          i, tu_result_name(rc), symmGetLastError(comms[i]));
    int count = -1;
    rc = symmCommCount(comms[i], &count);
    CHECK(rc == symmInvalidUsage, "[%s] symmCommCount on released comms[%d]: %s", label, i, tu_result_name(rc));
  }
}

/* A one-rank all-reduce of 1024 floats on device 0, checked: it launches a
 * kernel of the library's modules. */
static void one_rank_all_reduce(const char *label) {
  char reason[512];
  REQUIRE(tu_cuda_use_device(0, reason, sizeof reason) == 0, "%s", reason);
  symmComm_t c;
  int dev = 0;
  symmResult_t rc = symmCommInitAll(&c, 1, &dev);
  CHECK(rc == symmSuccess, "[%s] symmCommInitAll: %s (%s)", label, tu_result_name(rc), symmGetLastError(NULL));
  if (rc != symmSuccess) return;
  enum { N = 1024 };
  float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)i;
  CUdeviceptr send, recv;
  CUstream s;
  CU_REQUIRE(tu_cu.cuMemAlloc(&send, sizeof in));
  CU_REQUIRE(tu_cu.cuMemAlloc(&recv, sizeof out));
  CU_REQUIRE(tu_cu.cuStreamCreate(&s, 1));
  CU_REQUIRE(tu_upload(send, in, sizeof in));
  rc = symmAllReduce((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, N, symmFloat32, symmSum, c, s);
  CHECK(rc == symmSuccess, "[%s] symmAllReduce: %s (%s)", label, tu_result_name(rc), symmGetLastError(c));
  CU_REQUIRE(tu_cu.cuStreamSynchronize(s));
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(out, recv, sizeof out));
  CHECK(memcmp(in, out, sizeof in) == 0, "[%s] a one-rank all-reduce did not copy its input", label);
  CHECK(symmCommDestroy(c) == symmSuccess, "[%s] destroy failed", label);
  CU_REQUIRE(tu_cu.cuStreamDestroy(s));
  CU_REQUIRE(tu_cu.cuMemFree(send));
  CU_REQUIRE(tu_cu.cuMemFree(recv));
  printf("  [%s] one-rank all-reduce ok\n", label);
}

/* cuDevicePrimaryCtxReset (what cudaDeviceReset does) between two
 * communicators, with no communicator alive. */
static void reset_between_communicators(void) {
  one_rank_all_reduce("before reset");
  char reason[512];
  REQUIRE(tu_cuda_load_ext(reason, sizeof reason) == 0, "%s", reason);
  CUdevice d;
  CU_REQUIRE(tu_cu.cuDeviceGet(&d, 0));
  CU_REQUIRE(tu_cu.cuDevicePrimaryCtxReset(d));
  one_rank_all_reduce("after reset");
}

int main(void) {
  char reason[512];
  int ngpus = tu_gpu_count(reason, sizeof reason);
  REQUIRE(ngpus >= 0, "GPU probe failed: %s", reason);
  if (ngpus == 0) tu_skip_no_gpu(reason);
  if (ngpus > MAX_DEV) ngpus = MAX_DEV;
  printf("%d CUDA device(s)\n", ngpus);

  symmComm_t comms[MAX_DEV];
  int devlist[MAX_DEV];

  /* Every GPU, default device list. */
  if (init_and_check("all, NULL devlist", comms, ngpus, NULL) == 0) release_all("all", comms, ngpus, 0);

  /* Explicit list in reverse order: rank i is on device ngpus-1-i. */
  for (int i = 0; i < ngpus; i++) devlist[i] = ngpus - 1 - i;
  if (init_and_check("reversed devlist", comms, ngpus, devlist) == 0) release_all("reversed", comms, ngpus, 0);

  /* A single GPU that is not device 0 (when there is one). */
  devlist[0] = ngpus - 1;
  if (init_and_check("last device only", comms, 1, devlist) == 0) release_all("last only", comms, 1, 0);

  /* Abort releases as destroy does. */
  if (init_and_check("for abort", comms, ngpus, NULL) == 0) release_all("abort", comms, ngpus, 1);

  /* Repeated create/destroy must keep working (no leaked device state). */
  for (int round = 0; round < 5; round++) {
    symmComm_t c;
    symmResult_t rc = symmCommInitAll(&c, 1, NULL);
    CHECK(rc == symmSuccess, "round %d: symmCommInitAll: %s (%s)", round, tu_result_name(rc), symmGetLastError(NULL));
    if (rc == symmSuccess) CHECK(symmCommDestroy(c) == symmSuccess, "round %d: destroy failed", round);
  }
  reset_between_communicators();
  return tu_finish("init_all");
}
