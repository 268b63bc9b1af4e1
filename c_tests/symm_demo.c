/*
 * symm_demo: the smallest end-to-end use of symmcomm from C. Creates one
 * communicator per local GPU (symmCommInitAll), prints what each reports,
 * fills a buffer on each GPU with symmMemset32 and checks it.
 *
 * Not a test: on a machine without a GPU it says so and exits 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "symmcomm.h"
#include "test_util.h"

#define MAX_DEV 64
#define WORDS 4096

static int fail(const char *what, symmResult_t rc, symmComm_t comm) {
  fprintf(stderr, "symm_demo: %s failed: %s: %s\n", what, symmGetErrorString(rc), symmGetLastError(comm));
  return 1;
}

int main(void) {
  char reason[512];
  int ngpus = tu_gpu_count(reason, sizeof reason);
  if (ngpus <= 0) {
    printf("symm_demo: no CUDA device found (%s); nothing to run\n", reason);
    return 0;
  }
  if (ngpus > MAX_DEV) ngpus = MAX_DEV;

  int version = 0;
  symmGetVersion(&version);
  printf("symm_demo: symmcomm %d.%d.%d, %d GPU(s)\n", version / 10000, version / 100 % 100, version % 100, ngpus);

  symmComm_t comms[MAX_DEV];
  symmResult_t rc = symmCommInitAll(comms, ngpus, NULL);
  if (rc != symmSuccess) return fail("symmCommInitAll", rc, NULL);

  static uint32_t host[WORDS];
  int bad = 0;
  for (int i = 0; i < ngpus; i++) {
    int rank = -1, count = -1, dev = -1;
    symmCommUserRank(comms[i], &rank);
    symmCommCount(comms[i], &count);
    symmCommCuDevice(comms[i], &dev);
    printf("  rank %d of %d on CUDA device %d\n", rank, count, dev);

    /* Fill a buffer on this rank's GPU and read it back. */
    if (tu_cuda_use_device(dev, reason, sizeof reason) != 0) {
      fprintf(stderr, "symm_demo: %s\n", reason);
      return 1;
    }
    CUdeviceptr buf;
    CU_REQUIRE(tu_cu.cuMemAlloc(&buf, sizeof host));
    uint32_t value = 0xC0DE0000u + (uint32_t)rank;
    rc = symmMemset32((void *)(uintptr_t)buf, value, WORDS, comms[i], NULL);
    if (rc != symmSuccess) return fail("symmMemset32", rc, comms[i]);
    CU_REQUIRE(tu_cu.cuCtxSynchronize());
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, buf, sizeof host));
    CU_REQUIRE(tu_cu.cuMemFree(buf));
    for (int w = 0; w < WORDS; w++) bad += host[w] != value;
  }
  for (int i = 0; i < ngpus; i++) {
    rc = symmCommDestroy(comms[i]);
    if (rc != symmSuccess) return fail("symmCommDestroy", rc, comms[i]);
  }
  if (bad) {
    fprintf(stderr, "symm_demo: memset check FAILED (%d wrong words)\n", bad);
    return 1;
  }
  printf("symm_demo: memset check OK\n");
  return 0;
}
