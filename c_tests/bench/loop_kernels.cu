// Kernels of loop_bench: the library's copy and reduction loops
// (kernels/coll.cuh), old ("classic") and new, on local memory only.
#include "coll.cuh"

// Every block copies slices s = block, block + grid, ... of `slice` bytes.
SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS)
    lb_copy(char* dst, const char* src, uint64_t slice, uint64_t nslices, int classic) {
  for (uint64_t s = blockIdx.x; s < nslices; s += gridDim.x) copy_any(classic, dst + s * slice, src + s * slice, slice);
}

// dst = sum over nsrc sources (source r at src + r * count), slice by slice
// (`slice` elements); the new loop starts its loads at source
// block % nsrc, as a rank starts at its own.
SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS)
    lb_reduce_bf16(__nv_bfloat16* dst, const __nv_bfloat16* src, uint32_t nsrc, uint64_t count, uint64_t slice,
                   int classic) {
  const uint64_t nslices = (count + slice - 1) / slice;
  for (uint64_t s = blockIdx.x; s < nslices; s += gridDim.x) {
    const uint64_t off = s * slice, n = min(slice, count - off);
    const __nv_bfloat16* from[SYMM_MAX_RANKS];
    for (uint32_t r = 0; r < nsrc; ++r) from[r] = src + r * count + off;
    reduce_any<__nv_bfloat16, SYMM_SUM>(classic, dst + off, from, nsrc, blockIdx.x % nsrc, n, nsrc);
  }
}
