// device_bench's kernels (a fatbin loaded by device_bench.c through the
// driver API): the device-API examples' kernels exactly as the examples have
// them (extracted at build time by extract_kernel.cmake, extern "C"), and
// what the unfused variants and the checks need around them.
#include <cuda_bf16.h>
#include <stddef.h>

#include "symmcomm_device.cuh"

// one_shot_all_reduce(symmDevComm, const float*, float*, size_t)
#include "one_shot_all_reduce_kernel.cuh"
// block_sum(float, float*), all_reduce_add_rms_norm(symmDevComm, x, residual, weight, out, tokens, hidden, eps)
#include "all_reduce_rms_norm_kernel.cuh"

extern "C" {

// One-shot inputs: small integers, so every order of the fp32 sum is exact.
__global__ void db_fill_f32(float* in, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    in[i] = (float)(rank + 1) + (float)(i % 7);
}

// RMSNorm inputs, positive so that no sum cancels (the checks' tolerance is
// then relative): x in [0, 0.25), residual in [0.5, 1.5), weight in [0.5, 1).
__device__ float db_x(int rank, size_t i) { return (float)((i * 7 + (size_t)rank * 3) % 17) / 64.0f; }
__device__ float db_residual(size_t i) { return 0.5f + (float)((i * 5) % 13) / 12.0f; }

__global__ void db_fill_rms(__nv_bfloat16* x, __nv_bfloat16* residual, __nv_bfloat16* weight, size_t n, int hidden,
                            int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    x[i] = __float2bfloat16(db_x(rank, i));
    residual[i] = __float2bfloat16(db_residual(i));
    if (i < (size_t)hidden) weight[i] = __float2bfloat16(0.5f + (float)(i % 8) / 16.0f);
  }
}

// The unfused second half: `sum` is the all-reduced x (from symmAllReduce
// or NCCL); residual += sum, out = RMSNorm(residual) * weight. The same
// arithmetic as all_reduce_add_rms_norm after its peer loop (one row per
// block, fp32 accumulation, `hidden` floats of dynamic shared memory).
__global__ void db_add_rms_norm(const __nv_bfloat16* sum, __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                __nv_bfloat16* out, int tokens, int hidden, float eps) {
  extern __shared__ float y[];
  __shared__ float scratch[32];
  for (int t = blockIdx.x; t < tokens; t += gridDim.x) {
    const size_t row = (size_t)t * hidden;
    float squares = 0.0f;
    for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
      const float v = __bfloat162float(sum[row + h]) + __bfloat162float(residual[row + h]);
      residual[row + h] = __float2bfloat16(v);
      y[h] = v;
      squares += v * v;
    }
    const float scale = rsqrtf(block_sum(squares, scratch) / (float)hidden + eps);
    for (int h = threadIdx.x; h < hidden; h += blockDim.x)
      out[row + h] = __float2bfloat16(y[h] * scale * __bfloat162float(weight[h]));
  }
}

}  // extern "C"
