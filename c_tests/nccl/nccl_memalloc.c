/* ncclMemAlloc / ncclMemFree of libsymmcomm_nccl.so, written against the
 * real nccl.h and run with SYMM_NCCL_MODE=symm (no real NCCL in the process):
 *   - without a CUDA driver (or device): ncclMemAlloc fails with
 *     ncclUnhandledCudaError and a message, writes nothing, never crashes;
 *   - with one: the memory is cuMem (VMM) memory, rounded to the allocation
 *     granularity, exportable as a POSIX file descriptor, readable and
 *     writable; ncclMemFree releases it and refuses anything else.
 * Either way: NULL arguments, size 0 and foreign pointers behave as
 * documented. The driver is probed here through dlopen, as the library does. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      failures++;                                                 \
    }                                                             \
  } while (0)

struct {
  int (*cuInit)(unsigned);
  int (*cuDeviceGetCount)(int *);
  int (*cuDeviceGet)(int *, int);
  int (*cuDevicePrimaryCtxRetain)(void **, int);
  int (*cuCtxSetCurrent)(void *);
  int (*cuMemGetAddressRange)(unsigned long long *, size_t *, unsigned long long);
  int (*cuMemRetainAllocationHandle)(unsigned long long *, void *);
  int (*cuMemRelease)(unsigned long long);
  int (*cuMemExportToShareableHandle)(void *, unsigned long long, int, unsigned long long);
  int (*cuMemsetD8)(unsigned long long, unsigned char, size_t);
  int (*cuMemcpyDtoH)(void *, unsigned long long, size_t);
  int (*cuCtxSynchronize)(void);
} cu;

/* 1 with a usable device (its context current), 0 without; why in `why`. */
static int probe(char *why, size_t len) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, len, "no libcuda.so.1 (%s)", dlerror());
    return 0;
  }
#define SYM(name, sym)             \
  do {                             \
    void *s_ = dlsym(h, sym);      \
    memcpy(&cu.name, &s_, sizeof s_); \
  } while (0)
  SYM(cuInit, "cuInit");
  SYM(cuDeviceGetCount, "cuDeviceGetCount");
  SYM(cuDeviceGet, "cuDeviceGet");
  SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
  SYM(cuMemGetAddressRange, "cuMemGetAddressRange_v2");
  SYM(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle");
  SYM(cuMemRelease, "cuMemRelease");
  SYM(cuMemExportToShareableHandle, "cuMemExportToShareableHandle");
  SYM(cuMemsetD8, "cuMemsetD8_v2");
  SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  SYM(cuCtxSynchronize, "cuCtxSynchronize");
  int n = 0, dev = 0;
  void *ctx = NULL;
  if (!cu.cuInit || cu.cuInit(0) != 0 || cu.cuDeviceGetCount(&n) != 0 || n == 0) {
    snprintf(why, len, "cuInit or cuDeviceGetCount failed, or no device");
    return 0;
  }
  if (cu.cuDeviceGet(&dev, 0) || cu.cuDevicePrimaryCtxRetain(&ctx, dev) || cu.cuCtxSetCurrent(ctx)) {
    snprintf(why, len, "cannot make device 0 current");
    return 0;
  }
  return 1;
}

static int contains(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

int main(void) {
  char why[256] = "";
  int gpu = probe(why, sizeof why);
  printf("CUDA device: %s\n", gpu ? "yes" : why);

  /* Independent of the driver. */
  CHECK(ncclMemAlloc(NULL, 4096) == ncclInvalidArgument, "ncclMemAlloc(NULL, ...) should be ncclInvalidArgument");
  CHECK(contains(ncclGetLastError(NULL), "ptr"), "message \"%s\" should name ptr", ncclGetLastError(NULL));
  void *p = (void *)(uintptr_t)0x77;
  CHECK(ncclMemAlloc(&p, 0) == ncclSuccess && p == NULL, "size 0 should give NULL, as cudaMalloc does");
  CHECK(ncclMemFree(NULL) == ncclSuccess, "ncclMemFree(NULL) should do nothing");
  CHECK(ncclMemFree((void *)(uintptr_t)0x10000) == ncclInvalidArgument, "freeing a foreign pointer");
  CHECK(contains(ncclGetLastError(NULL), "ncclMemAlloc"), "message \"%s\" should say it is not from ncclMemAlloc",
        ncclGetLastError(NULL));

  const size_t size = (3 << 20) + 5;
  p = (void *)(uintptr_t)0x77;
  ncclResult_t rc = ncclMemAlloc(&p, size);
  if (!gpu) {
    CHECK(rc == ncclUnhandledCudaError, "without a driver ncclMemAlloc returned %d, expected ncclUnhandledCudaError", rc);
    const char *m = ncclGetLastError(NULL);
    CHECK(contains(m, "ncclMemAlloc") && (contains(m, "CUDA") || contains(m, "cuda")),
          "message \"%s\" should name ncclMemAlloc and say CUDA is missing", m ? m : "(NULL)");
    CHECK(p == (void *)(uintptr_t)0x77, "a failed ncclMemAlloc wrote *ptr");
    printf("ncclMemAlloc without a driver: error %d: %s\n", rc, m ? m : "");
  } else {
    CHECK(rc == ncclSuccess && p != NULL, "ncclMemAlloc(%zu): %d: %s", size, rc, ncclGetLastError(NULL));
    unsigned long long base = 0, h = 0;
    size_t mapped = 0;
    CHECK(cu.cuMemGetAddressRange(&base, &mapped, (unsigned long long)(uintptr_t)p) == 0, "cuMemGetAddressRange");
    CHECK(base == (unsigned long long)(uintptr_t)p && mapped >= size && mapped % (2 << 20) == 0,
          "allocation at %#llx of %zu bytes: expected %p, a multiple of 2 MiB >= %zu", base, mapped, p, size);
    CHECK(cu.cuMemRetainAllocationHandle(&h, p) == 0, "not cuMem (VMM) memory: cuMemRetainAllocationHandle failed");
    int fd = -1;
    CHECK(cu.cuMemExportToShareableHandle(&fd, h, 1 /* POSIX fd */, 0) == 0 && fd >= 0,
          "the handle does not export as a POSIX file descriptor");
    if (fd >= 0) close(fd);
    cu.cuMemRelease(h);
    unsigned char tail[16];
    CHECK(cu.cuMemsetD8((unsigned long long)(uintptr_t)p, 0xab, mapped) == 0 && cu.cuCtxSynchronize() == 0,
          "cuMemsetD8 on the allocation");
    CHECK(cu.cuMemcpyDtoH(tail, (unsigned long long)(uintptr_t)p + mapped - 16, 16) == 0 && tail[15] == 0xab,
          "the whole mapping is not read/writable");
    CHECK(ncclMemFree((char *)p + 4096) == ncclInvalidArgument, "an interior pointer must be refused");
    CHECK(ncclMemFree(p) == ncclSuccess, "ncclMemFree: %s", ncclGetLastError(NULL));
    CHECK(ncclMemFree(p) == ncclInvalidArgument, "a second ncclMemFree of the same pointer must be refused");
    printf("ncclMemAlloc: %zu bytes mapped at %p, exportable, freed\n", mapped, p);
  }
  printf(failures ? "nccl_memalloc: %d failure(s)\n" : "nccl_memalloc: OK\n", failures);
  return failures ? 1 : 0;
}
