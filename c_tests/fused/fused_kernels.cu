// Reference kernels of the fused-op tests (fused_matmul.c): deterministic
// fills, a naive GEMM that accumulates in fp32 and rounds once (the
// semantics cuBLASLt implements), and an error measure. Values are
// multiples of 1/4 in [-1, 1] and scales powers of two, so every input is
// exact in every type (fp8 included) and the fp32 sums are exact too: the
// fused results differ from these only by the final rounding (and by
// summation order where that rounding happens per partial).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

enum { T_F16 = 6, T_F32 = 7, T_BF16 = 9, T_E4M3 = 10, T_E5M2 = 11 };

__device__ __forceinline__ float ld_elem(const void* p, int t, uint64_t i) {
  switch (t) {
    case T_F16: return __half2float(reinterpret_cast<const __half*>(p)[i]);
    case T_BF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
    case T_E4M3: return (float)reinterpret_cast<const __nv_fp8_e4m3*>(p)[i];
    case T_E5M2: return (float)reinterpret_cast<const __nv_fp8_e5m2*>(p)[i];
    default: return reinterpret_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void st_elem(void* p, int t, uint64_t i, float v) {
  switch (t) {
    case T_F16: reinterpret_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case T_BF16: reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case T_E4M3: reinterpret_cast<__nv_fp8_e4m3*>(p)[i] = __nv_fp8_e4m3(v); break;
    case T_E5M2: reinterpret_cast<__nv_fp8_e5m2*>(p)[i] = __nv_fp8_e5m2(v); break;
    default: reinterpret_cast<float*>(p)[i] = v; break;
  }
}

__device__ __forceinline__ uint32_t fm_hash(uint32_t seed, uint32_t salt, uint64_t r, uint64_t c) {
  uint64_t x = ((uint64_t)seed << 32 | salt) ^ (r * 0x9e3779b97f4a7c15ull) ^ (c * 0xc2b2ae3d27d4eb4full);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

// Element (r, c) of a rows x cols matrix (leading dimension ld) gets
// pattern(row0 + r, c): rows of one logical matrix can be filled on
// several ranks.
extern "C" __global__ void fm_fill(void* p, int t, uint64_t rows, uint64_t cols, uint64_t ld, uint32_t seed,
                                   uint32_t salt, uint64_t row0) {
  const uint64_t n = rows * cols;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t r = i / cols, c = i % cols;
    st_elem(p, t, r * ld + c, ((int)(fm_hash(seed, salt, row0 + r, c) % 9u) - 4) * 0.25f);
  }
}

// Scales: 0.5, 1 or 2 (element i of a vector whose first element is row0).
extern "C" __global__ void fm_fill_scales(float* p, uint64_t n, uint32_t seed, uint32_t salt, uint64_t row0) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
    p[i] = 0.5f * (float)(1u << (fm_hash(seed, salt, row0 + i, 7) % 3u));
}

// C (m x n, ldc, type ct) = scaleA * scaleB * (A (m x k, lda) * op(B)) + beta * Cold (ldcold).
// scale_mode 0: none; 1: as[0] * bs[0]; 2: as[row] * bs[col].
extern "C" __global__ void fm_gemm(const void* A, int at, uint64_t lda, const void* B, int bt, uint64_t ldb,
                                   int transB, void* C, int ct, uint64_t ldc, uint64_t m, uint64_t n, uint64_t k,
                                   const float* as, const float* bs, int scale_mode, float beta, const void* Cold,
                                   uint64_t ldcold) {
  const uint64_t total = m * n;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < total;
       i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t r = i / n, c = i % n;
    float acc = 0.f;
    for (uint64_t p = 0; p < k; ++p) {
      const float a = ld_elem(A, at, r * lda + p);
      const float b = ld_elem(B, bt, transB ? c * ldb + p : p * ldb + c);
      acc += a * b;
    }
    if (scale_mode == 1) acc *= as[0] * bs[0];
    if (scale_mode == 2) acc *= as[r] * bs[c];
    if (beta != 0.f) acc += beta * ld_elem(Cold, ct, r * ldcold + c);
    st_elem(C, ct, r * ldc + c, acc);
  }
}

// X (rows x cols, ldx) = X + beta * Y (ldy), rounded once.
extern "C" __global__ void fm_axpby(void* X, uint64_t ldx, const void* Y, uint64_t ldy, int t, uint64_t rows,
                                    uint64_t cols, float beta) {
  const uint64_t n = rows * cols;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t r = i / cols, c = i % cols;
    st_elem(X, t, r * ldx + c, ld_elem(X, t, r * ldx + c) + beta * ld_elem(Y, t, r * ldy + c));
  }
}

// out[0]: max |got - ref| (float bits), out[1]: max |ref|, out[2]: non-finite
// results, out[3]: elements that differ at all.
extern "C" __global__ void fm_compare(const void* got, uint64_t ldg, const void* ref, uint64_t ldr, int t,
                                      uint64_t rows, uint64_t cols, unsigned int* out) {
  const uint64_t n = rows * cols;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t r = i / cols, c = i % cols;
    const float g = ld_elem(got, t, r * ldg + c), e = ld_elem(ref, t, r * ldr + c);
    if (!isfinite(g)) {
      atomicAdd(&out[2], 1u);
      continue;
    }
    const float d = fabsf(g - e);
    if (d != 0.f) atomicAdd(&out[3], 1u);
    atomicMax(&out[0], __float_as_uint(d));
    atomicMax(&out[1], __float_as_uint(fabsf(e)));
  }
}

// out[0] += bytes of a and b that differ.
extern "C" __global__ void fm_bytes_differ(const unsigned char* a, const unsigned char* b, uint64_t n,
                                           unsigned int* out) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
    if (a[i] != b[i]) atomicAdd(&out[0], 1u);
}
