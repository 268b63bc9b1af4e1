/*
 * memset_kernel (GPU): symmMemset32 writes exactly `count` words at every
 * word offset from a 256-byte-aligned base, for counts around the kernel's
 * 16-byte vector width and block size, and never touches the guard words on
 * either side. Bad pointers and streams are rejected without writing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmcomm.h"
#include "test_util.h"

#define GUARD 64 /* words of guard pattern before and after each fill */
#define GUARD_PATTERN 0xDEADBEEFu

static const size_t counts[] = {0, 1, 3, 4, 5, 7, 1023, 65539, (1u << 22) + 3};
#define MAX_COUNT ((1u << 22) + 3)
#define TOTAL_WORDS (GUARD + 3 + MAX_COUNT + GUARD)

static uint32_t *host; /* TOTAL_WORDS */

/* Reset words [0, n) of the device buffer to the guard pattern. */
static void fill_guard(CUdeviceptr base, size_t n) {
  for (size_t i = 0; i < n; i++) host[i] = GUARD_PATTERN;
  CU_REQUIRE(tu_upload(base, host, n * 4));
}

/* Words [0, n) must be guard, except [lo, lo+count) which must be `value`.
 * Reports the first few bad words. */
static void verify(const char *label, CUdeviceptr base, size_t n, size_t lo, size_t count, uint32_t value) {
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, base, n * 4));
  int shown = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t want = (i >= lo && i < lo + count) ? value : GUARD_PATTERN;
    if (host[i] == want) continue;
    if (shown++ < 5)
      tu_fail(__FILE__, __LINE__, "[%s] word %zu (fill starts at %zu, %zu words) is 0x%08x, expected 0x%08x", label,
              i, lo, count, host[i], want);
    bad++;
  }
  if (bad > 5) tu_fail(__FILE__, __LINE__, "[%s] ... %zu bad words in all", label, bad);
}

static void expect_rejected(const char *label, symmResult_t rc, symmComm_t comm, const char *keyword) {
  CHECK(rc == symmInvalidArgument, "[%s] returned %s, expected symmInvalidArgument", label, tu_result_name(rc));
  const char *m = symmGetLastError(comm);
  CHECK(m && tu_contains_ci(m, keyword), "[%s] message \"%s\" does not mention \"%s\"", label, m ? m : "(null)",
        keyword);
}

int main(void) {
  char reason[512];
  int ngpus = tu_gpu_count(reason, sizeof reason);
  REQUIRE(ngpus >= 0, "GPU probe failed: %s", reason);
  if (ngpus == 0) tu_skip_no_gpu(reason);
  REQUIRE(tu_cuda_use_device(0, reason, sizeof reason) == 0, "%s", reason);

  int dev0 = 0;
  symmComm_t comm;
  symmResult_t rc = symmCommInitAll(&comm, 1, &dev0);
  REQUIRE(rc == symmSuccess, "symmCommInitAll on device 0: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));

  host = malloc((size_t)TOTAL_WORDS * 4);
  REQUIRE(host != NULL, "out of host memory");
  CUdeviceptr base;
  CU_REQUIRE(tu_cu.cuMemAlloc(&base, (size_t)TOTAL_WORDS * 4));
  REQUIRE(base % 256 == 0, "cuMemAlloc returned 0x%llx, not 256-byte aligned", base);
  CUstream stream;
  CU_REQUIRE(tu_cu.cuStreamCreate(&stream, 0));

  /* Every word offset from an aligned base, every count. */
  for (size_t o = 0; o < 4; o++) {
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
      size_t count = counts[k];
      size_t lo = GUARD + o, n = lo + count + GUARD;
      uint32_t value = 0x10000000u * (uint32_t)(o + 1) + (uint32_t)k; /* never the guard pattern */
      char label[80];
      snprintf(label, sizeof label, "offset %zu words, count %zu", o, count);
      fill_guard(base, n);
      rc = symmMemset32((void *)(uintptr_t)(base + 4 * lo), value, count, comm, stream);
      CHECK(rc == symmSuccess, "[%s] symmMemset32: %s (%s)", label, tu_result_name(rc), symmGetLastError(comm));
      CU_REQUIRE(tu_cu.cuStreamSynchronize(stream));
      verify(label, base, n, lo, count, value);
    }
  }

  /* All-zero and all-one values, on the default stream (NULL). */
  const uint32_t edge_values[] = {0u, 0xFFFFFFFFu};
  for (size_t i = 0; i < 2; i++) {
    size_t lo = GUARD + 1, count = 4099, n = lo + count + GUARD;
    fill_guard(base, n);
    rc = symmMemset32((void *)(uintptr_t)(base + 4 * lo), edge_values[i], count, comm, NULL);
    CHECK(rc == symmSuccess, "[default stream] symmMemset32: %s (%s)", tu_result_name(rc), symmGetLastError(comm));
    CU_REQUIRE(tu_cu.cuCtxSynchronize());
    verify("default stream", base, n, lo, count, edge_values[i]);
  }

  /* Rejected calls write nothing: run them over a guard-filled buffer. */
  size_t n = GUARD * 4;
  fill_guard(base, n);
  expect_rejected("dst = base + 1 byte", symmMemset32((void *)(uintptr_t)(base + 1), 1, 4, comm, stream), comm,
                  "aligned");
  expect_rejected("dst = base + 2 bytes", symmMemset32((void *)(uintptr_t)(base + 2), 1, 4, comm, stream), comm,
                  "aligned");
  expect_rejected("host pointer", symmMemset32(host, 1, 4, comm, stream), comm, "dst");
  /* 4 MiB past the end: beyond any rounding of the allocation's size. */
  expect_rejected("past the end of the allocation",
                  symmMemset32((void *)(uintptr_t)(base + 4), 1, TOTAL_WORDS + (1u << 20), comm, stream), comm, "end");
  CU_REQUIRE(tu_cu.cuStreamSynchronize(stream));
  CU_REQUIRE(tu_cu.cuCtxSynchronize());
  verify("after rejected calls", base, n, 0, 0, 0);
  CHECK(symmMemset32((void *)(uintptr_t)base, 1, 0, comm, stream) == symmSuccess, "count 0 should succeed");
  CU_REQUIRE(tu_cu.cuStreamSynchronize(stream));
  verify("after count 0", base, n, 0, 0, 0);

  /* Memory and streams of another GPU belong to another communicator. */
  if (ngpus >= 2) {
    CUdeviceptr other;
    CUstream other_stream;
    REQUIRE(tu_cuda_use_device(1, reason, sizeof reason) == 0, "%s", reason);
    CU_REQUIRE(tu_cu.cuMemAlloc(&other, 4096));
    CU_REQUIRE(tu_cu.cuStreamCreate(&other_stream, 0));
    REQUIRE(tu_cuda_use_device(0, reason, sizeof reason) == 0, "%s", reason);
    expect_rejected("buffer on device 1", symmMemset32((void *)(uintptr_t)other, 1, 16, comm, stream), comm,
                    "device 1");
    expect_rejected("stream on device 1", symmMemset32((void *)(uintptr_t)base, 1, 16, comm, other_stream), comm,
                    "stream");
    CU_REQUIRE(tu_cu.cuCtxSynchronize());
    verify("after cross-device calls", base, n, 0, 0, 0);
    REQUIRE(tu_cuda_use_device(1, reason, sizeof reason) == 0, "%s", reason);
    CU_REQUIRE(tu_cu.cuStreamDestroy(other_stream));
    CU_REQUIRE(tu_cu.cuMemFree(other));
    REQUIRE(tu_cuda_use_device(0, reason, sizeof reason) == 0, "%s", reason);
  } else {
    printf("note: cross-device checks need 2 GPUs; %d visible\n", ngpus);
  }

  CU_REQUIRE(tu_cu.cuStreamDestroy(stream));
  CU_REQUIRE(tu_cu.cuMemFree(base));
  CHECK(symmCommDestroy(comm) == symmSuccess, "symmCommDestroy: %s", symmGetLastError(comm));
  free(host);
  return tu_finish("memset_kernel");
}
