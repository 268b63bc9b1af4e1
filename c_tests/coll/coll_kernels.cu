// Test kernels of the collective drivers, loaded by path at run time
// (cuModuleLoadData; COLL_TEST_KERNELS overrides the path):
//  - cg_fill / cg_check / cg_bump: inputs derived from a replay counter in
//    device memory, and an on-device check of every output, captured into
//    the graph of coll_graph.c around the collectives;
//  - cp_consumer: the progress consumer of coll_progress.c;
//  - cm_convert / cm_decode: CUDA's own float conversions, which
//    coll_matrix.c compares with its host model before trusting it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "coll_pattern.h"

#define CK extern "C" __global__

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t grid_index() { return (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ uint64_t grid_stride() { return (uint64_t)gridDim.x * blockDim.x; }

__device__ __forceinline__ uint32_t load_elem(const uint8_t* p, uint64_t i, uint32_t es) {
  if (es == 4) return reinterpret_cast<const uint32_t*>(p)[i];
  if (es == 2) return reinterpret_cast<const uint16_t*>(p)[i];
  return p[i];
}

// Element j < n of this rank's input of op `op_id` for replay *counter.
CK void cg_fill(uint8_t* buf, uint64_t n, uint32_t kind, uint32_t seed, uint32_t rank, uint32_t op_id,
                const uint32_t* counter) {
  const uint32_t replay = *counter;
  for (uint64_t j = grid_index(); j < n; j += grid_stride()) {
    const uint32_t v = cp_graph_in(kind, seed, rank, op_id, replay, j);
    if (kind == CG_BF16)
      reinterpret_cast<uint16_t*>(buf)[j] = (uint16_t)v;
    else
      reinterpret_cast<uint32_t*>(buf)[j] = v;
  }
}

// Compare out[0 .. n) with the expected output for replay *counter.
// result[0] += mismatches; the first mismatch (guarded by result[1]) is
// described in result[2..6]: replay, op id, index, got, expected.
CK void cg_check(const uint8_t* out, uint64_t n, uint32_t coll, uint32_t kind, uint64_t count, uint32_t rank,
                 uint32_t nranks, uint32_t root, uint32_t seed, uint32_t op_id, const uint32_t* counter,
                 unsigned long long* result) {
  const uint32_t replay = *counter;
  const uint32_t es = kind == CG_BF16 ? 2 : 4;
  for (uint64_t i = grid_index(); i < n; i += grid_stride()) {
    const uint32_t want = cp_graph_expected(coll, kind, seed, rank, nranks, root, op_id, replay, count, i);
    const uint32_t got = load_elem(out, i, es);
    if (got != want) {
      atomicAdd(&result[0], 1ull);
      if (atomicCAS(&result[1], 0ull, 1ull) == 0ull) {
        result[2] = replay;
        result[3] = op_id;
        result[4] = i;
        result[5] = got;
        result[6] = want;
      }
    }
  }
}

CK void cg_bump(uint32_t* counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *counter = *counter + 1;
}

// Progress consumer. flags[f] (f = q * units + c) becomes 1 once chunk c
// (chunk elements) of rank q's block is in recv. Block b takes flags b,
// b + grid, ...: thread 0 spins on the flag with an acquire load (bounded
// by timeout_ns from the block's start, %globaltimer), then the block
// checks the chunk's elements against cp_progress(seed, q, i).
// result[0] += wrong elements, result[1] += flags that timed out,
// result[2] = 1 + first flag with a wrong element, result[3] = 1 + its
// element index within the block, result[4] = 1 + first timed-out flag,
// result[5] = got, result[6] = expected of the first wrong element,
// result[7] += flags consumed.
CK void cp_consumer(const uint32_t* flags, uint32_t units, uint32_t nranks, const uint8_t* recv, uint64_t count,
                    uint64_t chunk, uint32_t es, uint32_t seed, uint64_t timeout_ns, unsigned long long* result) {
  __shared__ int ready;
  const uint64_t start = globaltimer();
  const uint32_t nflags = units * nranks;
  const uint32_t mask = es == 4 ? 0xffffffffu : es == 2 ? 0xffffu : 0xffu;
  for (uint32_t f = blockIdx.x; f < nflags; f += gridDim.x) {
    if (threadIdx.x == 0) {
      int ok = 0;
      for (;;) {
        if (ld_acquire_sys(flags + f) == 1u) {
          ok = 1;
          break;
        }
        if (globaltimer() - start > timeout_ns) break;
        __nanosleep(200);
      }
      ready = ok;
      if (ok) {
        atomicAdd(&result[7], 1ull);
      } else {
        atomicAdd(&result[1], 1ull);
        atomicCAS(&result[4], 0ull, (unsigned long long)f + 1);
      }
    }
    __syncthreads();
    if (ready) {
      const uint32_t q = f / units, c = f % units;
      const uint64_t lo = (uint64_t)c * chunk;
      const uint64_t hi = lo + chunk < count ? lo + chunk : count;
      const uint8_t* block = recv + (uint64_t)q * count * es;
      for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const uint32_t got = load_elem(block, i, es);
        const uint32_t want = cp_progress(seed, q, i) & mask;
        if (got != want) {
          atomicAdd(&result[0], 1ull);
          if (atomicCAS(&result[2], 0ull, (unsigned long long)f + 1) == 0ull) {
            result[3] = i + 1;
            result[5] = got;
            result[6] = want;
          }
        }
      }
    }
    __syncthreads();
  }
}

// CUDA's conversions of in[0 .. n): what the library's from_acc<T> uses
// (__float2half_rn, __float2bfloat16_rn, the saturating fp8 constructors).
CK void cm_convert(const float* in, uint64_t n, uint16_t* f16, uint16_t* bf16, uint8_t* e4m3, uint8_t* e5m2) {
  for (uint64_t i = grid_index(); i < n; i += grid_stride()) {
    const float x = in[i];
    f16[i] = __half_as_ushort(__float2half_rn(x));
    bf16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    e4m3[i] = __nv_fp8_e4m3(x).__x;
    e5m2[i] = __nv_fp8_e5m2(x).__x;
  }
}

// Every fp16 pattern and every fp8 pattern as float (what to_acc<T> does).
CK void cm_decode(float* f16, float* e4m3, float* e5m2) {
  for (uint64_t i = grid_index(); i < 65536; i += grid_stride()) {
    f16[i] = __half2float(__ushort_as_half((unsigned short)i));
    if (i < 256) {
      __nv_fp8_e4m3 a;
      a.__x = (__nv_fp8_storage_t)i;
      e4m3[i] = (float)a;
      __nv_fp8_e5m2 b;
      b.__x = (__nv_fp8_storage_t)i;
      e5m2[i] = (float)b;
    }
  }
}

// eager_bench --launch-floor: a kernel that does nothing, with an argument
// block the size of the library's collective arguments (SymmCollArgs, 488
// bytes) by value: what one cuLaunchKernel of that shape costs the host.
struct alignas(8) EbFloorArgs {
  uint64_t w[61];
};
static_assert(sizeof(EbFloorArgs) == 488, "the size of SymmCollArgs");
CK void eb_launch_floor(EbFloorArgs a) { (void)a; }
// ... and with 64 bytes of arguments: the difference is what a compact
// argument block (e.g. for the LL kernels) could save per launch.
struct alignas(8) EbFloorSmallArgs {
  uint64_t w[8];
};
CK void eb_launch_floor_small(EbFloorSmallArgs a) { (void)a; }
