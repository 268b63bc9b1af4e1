/* A CUDAPluggableAllocator over ncclMemAlloc/ncclMemFree, as the NCCL
 * allocators of Megatron, Apex and vLLM build it: compiled against the
 * machine's nccl.h, linked against nothing, so the calls bind to whichever
 * libnccl.so.2 the process has loaded (the preloaded stand-in).
 *   cc -shared -fPIC -o nccl_allocator.so nccl_allocator.c
 * (tests/torch/nccl_native_torch.py builds and loads it). */
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>

typedef struct CUstream_st *cudaStream_t;

void *nccl_alloc(size_t size, int device, cudaStream_t stream) {
  (void)device; /* PyTorch makes the device current before calling */
  (void)stream;
  void *ptr = NULL;
  ncclResult_t rc = ncclMemAlloc(&ptr, size);
  if (rc != ncclSuccess) {
    fprintf(stderr, "nccl_alloc: ncclMemAlloc(%zu) failed: %s\n", size, ncclGetLastError(NULL));
    return NULL;
  }
  return ptr;
}

void nccl_free(void *ptr, size_t size, int device, cudaStream_t stream) {
  (void)size;
  (void)device;
  (void)stream;
  ncclResult_t rc = ncclMemFree(ptr);
  if (rc != ncclSuccess) fprintf(stderr, "nccl_free: ncclMemFree(%p) failed: %s\n", ptr, ncclGetLastError(NULL));
}
