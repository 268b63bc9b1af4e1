/*
 * The CUDA driver calls symm_bench needs beyond test_util's tu_cu (events,
 * pinned host memory, asynchronous copies and memsets, device queries),
 * resolved with dlsym from the same libcuda.so.1, so that the benchmark
 * builds without a CUDA toolkit.
 */
#ifndef SYMM_BENCH_CUDA_H
#define SYMM_BENCH_CUDA_H

#include <stddef.h>

#include "test_util.h"

typedef struct CUevent_st *bc_event;

#define BC_CU_EVENT_DEFAULT 0u

struct bc_api {
  CUresult (*cuEventCreate)(bc_event *ev, unsigned int flags);
  CUresult (*cuEventRecord)(bc_event ev, CUstream stream);
  CUresult (*cuEventElapsedTime)(float *ms, bc_event start, bc_event end); /* _v2 when present */
  CUresult (*cuEventDestroy)(bc_event ev);                                 /* cuEventDestroy_v2 */
  CUresult (*cuMemAllocHost)(void **p, size_t bytes);                      /* cuMemAllocHost_v2 */
  CUresult (*cuMemFreeHost)(void *p);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s); /* _v2 */
  CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);       /* _v2 */
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s); /* _v2 */
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n, CUstream s);
  CUresult (*cuDeviceGetPCIBusId)(char *id, int len, CUdevice dev);
  CUresult (*cuDriverGetVersion)(int *version);
  CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice dev); /* cuDeviceTotalMem_v2 */
};

extern struct bc_api bc;

/* tu_cuda_load_ext, then resolve bc. 0, or -1 with `reason`. Idempotent. */
int bc_load(char *reason, size_t len);

#endif /* SYMM_BENCH_CUDA_H */
