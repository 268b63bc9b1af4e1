/*
 * loop_bench: the local cost of the collectives' inner loops on one GPU,
 * old ("classic", SYMM_ALGO=classic) against new (the default), on local
 * memory only: what a block's loop does with its slice, without NVLink.
 * Not a test (registered nowhere): run it by hand on a GPU machine.
 *
 *   loop_bench [--bytes N] [--slice N] [--nsrc LIST] [--iters N] [--device D]
 *
 * copy:    every block copies 32 KiB slices (--slice) of a 1 GiB buffer
 *          (--bytes) with copy_bytes_classic vs copy_bytes (the two-shot
 *          gather, all-to-all and reduce-scatter copy-in move such slices);
 * reduce:  bf16 sum of n local sources (--nsrc, default 2,3,4,8) of
 *          --bytes / n each, in slices of 16 KiB per block, with
 *          reduce_elems_classic vs reduce_balanced.
 * Prints GB/s (bytes read + written per second) of both and their ratio.
 * The kernels come from loop_kernels.fatbin (built next to this program;
 * LOOP_BENCH_KERNELS overrides the path).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda.h"
#include "test_util.h"

#ifndef LOOP_KERNELS_FATBIN
#error "LOOP_KERNELS_FATBIN must be defined by the build"
#endif

#define CK(call)                                                                     \
  do {                                                                               \
    CUresult rc_ = (call);                                                           \
    if (rc_ != 0) {                                                                  \
      fprintf(stderr, "loop_bench: %s failed: %s\n", #call, tu_cu_error(rc_));       \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

static void *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc((size_t)n + 64);
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  return p;
}

/* Mean ms per launch of fn over iters launches (after one warm-up). */
static double time_kernel(CUfunction fn, unsigned grid, void **params, int iters, CUstream st) {
  bc_event a, b;
  CK(bc.cuEventCreate(&a, BC_CU_EVENT_DEFAULT));
  CK(bc.cuEventCreate(&b, BC_CU_EVENT_DEFAULT));
  CK(tu_cu.cuLaunchKernel(fn, grid, 1, 1, 512, 1, 1, 0, st, params, NULL));
  CK(bc.cuEventRecord(a, st));
  for (int k = 0; k < iters; k++) CK(tu_cu.cuLaunchKernel(fn, grid, 1, 1, 512, 1, 1, 0, st, params, NULL));
  CK(bc.cuEventRecord(b, st));
  CK(tu_cu.cuStreamSynchronize(st));
  float ms = 0;
  CK(bc.cuEventElapsedTime(&ms, a, b));
  CK(bc.cuEventDestroy(a));
  CK(bc.cuEventDestroy(b));
  return ms / iters;
}

int main(int argc, char **argv) {
  size_t bytes = (size_t)1 << 30, slice = 32 << 10;
  int iters = 20, device = 0;
  const char *nsrc_list = "2,3,4,8";
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--bytes=", 8)) bytes = parse_size(argv[i] + 8);
    else if (!strncmp(argv[i], "--slice=", 8)) slice = parse_size(argv[i] + 8);
    else if (!strncmp(argv[i], "--nsrc=", 7)) nsrc_list = argv[i] + 7;
    else if (!strncmp(argv[i], "--iters=", 8)) iters = atoi(argv[i] + 8);
    else if (!strncmp(argv[i], "--device=", 9)) device = atoi(argv[i] + 9);
    else {
      fprintf(stderr, "usage: loop_bench [--bytes=1G] [--slice=32K] [--nsrc=2,3,4,8] [--iters=20] [--device=0]\n");
      return 2;
    }
  }
  char reason[512];
  if (bc_load(reason, sizeof reason) != 0 || tu_cuda_use_device(device, reason, sizeof reason) != 0) {
    printf("loop_bench: no usable GPU (%s)\n", reason);
    return 0;
  }
  const char *path = getenv("LOOP_BENCH_KERNELS") ? getenv("LOOP_BENCH_KERNELS") : LOOP_KERNELS_FATBIN;
  void *image = read_file(path);
  if (!image) {
    fprintf(stderr, "loop_bench: cannot read %s\n", path);
    return 1;
  }
  CUmodule mod;
  CK(tu_cu.cuModuleLoadData(&mod, image));
  CUfunction copy, reduce;
  CK(tu_cu.cuModuleGetFunction(&copy, mod, "lb_copy"));
  CK(tu_cu.cuModuleGetFunction(&reduce, mod, "lb_reduce_bf16"));
  CUstream st;
  CK(tu_cu.cuStreamCreate(&st, TU_CU_STREAM_NON_BLOCKING));
  CUdeviceptr src, dst;
  CK(tu_cu.cuMemAlloc(&src, bytes));
  CK(tu_cu.cuMemAlloc(&dst, bytes));
  CK(bc.cuMemsetD8Async(src, 0x3c, bytes, st));
  CK(bc.cuMemsetD8Async(dst, 0, bytes, st));
  const unsigned grid = 132; /* one block per SM of an H100/H200, as the collectives launch */
  printf("# loop_bench: %zu MiB buffers, grid %u x 512 threads, %d launches per figure\n", bytes >> 20, grid, iters);

  uint64_t sl = slice, nslices = bytes / slice;
  double gbs[2];
  for (int classic = 1; classic >= 0; classic--) {
    int c = classic;
    void *params[] = {&dst, &src, &sl, &nslices, &c};
    const double ms = time_kernel(copy, grid, params, iters, st);
    gbs[classic] = 2.0 * (double)(nslices * slice) / (ms * 1e6);
  }
  printf("copy   %6zu KiB slices:  classic %7.1f GB/s   new %7.1f GB/s   new/classic %.2f\n", slice >> 10, gbs[1],
         gbs[0], gbs[0] / gbs[1]);

  for (const char *q = nsrc_list; *q;) {
    const unsigned nsrc = (unsigned)strtoul(q, (char **)&q, 10);
    if (*q == ',') q++;
    if (nsrc < 1 || nsrc > 8) continue;
    uint64_t count = bytes / 2 / nsrc, rslice = 16 << 10; /* elements: 32 KiB of bf16 per source */
    for (int classic = 1; classic >= 0; classic--) {
      int c = classic;
      void *params[] = {&dst, &src, (void *)&nsrc, &count, &rslice, &c};
      const double ms = time_kernel(reduce, grid, params, iters, st);
      gbs[classic] = (double)(nsrc + 1) * (double)count * 2.0 / (ms * 1e6);
    }
    printf("reduce %u sources, bf16:   classic %7.1f GB/s   new %7.1f GB/s   new/classic %.2f\n", nsrc, gbs[1], gbs[0],
           gbs[0] / gbs[1]);
  }
  CK(tu_cu.cuMemFree(src));
  CK(tu_cu.cuMemFree(dst));
  CK(tu_cu.cuModuleUnload(mod));
  free(image);
  return 0;
}
