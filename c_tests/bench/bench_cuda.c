/* Extra CUDA driver entry points for symm_bench; see bench_cuda.h. */
#include "bench_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

struct bc_api bc;
static int loaded;

int bc_load(char *reason, size_t len) {
  if (loaded) return 0;
  if (tu_cuda_load_ext(reason, len) != 0) return -1;
  /* Already loaded by tu_cuda_load: this only takes another reference. */
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(reason, len, "cannot load the CUDA driver: %s", e ? e : "libcuda.so.1 not found");
    return -1;
  }
  /* Each entry: the names to try, in order of preference. */
  const struct {
    const char *names[2];
    void *slot;
  } syms[] = {
      {{"cuEventCreate", NULL}, &bc.cuEventCreate},
      {{"cuEventRecord", NULL}, &bc.cuEventRecord},
      {{"cuEventElapsedTime_v2", "cuEventElapsedTime"}, &bc.cuEventElapsedTime},
      {{"cuEventDestroy_v2", NULL}, &bc.cuEventDestroy},
      {{"cuMemAllocHost_v2", NULL}, &bc.cuMemAllocHost},
      {{"cuMemFreeHost", NULL}, &bc.cuMemFreeHost},
      {{"cuMemcpyHtoDAsync_v2", NULL}, &bc.cuMemcpyHtoDAsync},
      {{"cuMemcpyDtoHAsync_v2", NULL}, &bc.cuMemcpyDtoHAsync},
      {{"cuMemcpyDtoDAsync_v2", NULL}, &bc.cuMemcpyDtoDAsync},
      {{"cuMemsetD8Async", NULL}, &bc.cuMemsetD8Async},
      {{"cuDeviceGetPCIBusId", NULL}, &bc.cuDeviceGetPCIBusId},
      {{"cuDriverGetVersion", NULL}, &bc.cuDriverGetVersion},
      {{"cuDeviceTotalMem_v2", NULL}, &bc.cuDeviceTotalMem},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *sym = NULL;
    for (int k = 0; k < 2 && !sym && syms[i].names[k]; k++) sym = dlsym(lib, syms[i].names[k]);
    if (!sym) {
      snprintf(reason, len, "libcuda.so.1 lacks %s", syms[i].names[0]);
      dlclose(lib);
      return -1;
    }
    memcpy(syms[i].slot, &sym, sizeof sym);
  }
  loaded = 1;
  return 0;
}
