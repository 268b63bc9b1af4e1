// Shared device helpers for symmcomm's kernels. Every kernel entry point is
// extern "C" so the host resolves it by name with cuModuleGetFunction.
#pragma once
#include <stdint.h>

#define SYMM_KERNEL extern "C" __global__

// Global thread index and grid-wide stride, 64-bit so counts past 2^32 work.
__device__ __forceinline__ uint64_t symm_thread_index() {
  return (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ uint64_t symm_grid_stride() {
  return (uint64_t)gridDim.x * blockDim.x;
}

// ---- System-scope atomics: every flag that publishes data to another GPU
// uses release on the writer and acquire on the reader.
__device__ __forceinline__ uint32_t symm_cas_release_sys(uint32_t* p, uint32_t cmp, uint32_t val) {
  uint32_t old;
  asm volatile("atom.release.sys.global.cas.b32 %0, [%1], %2, %3;" : "=r"(old) : "l"(p), "r"(cmp), "r"(val) : "memory");
  return old;
}
__device__ __forceinline__ uint32_t symm_cas_acquire_sys(uint32_t* p, uint32_t cmp, uint32_t val) {
  uint32_t old;
  asm volatile("atom.acquire.sys.global.cas.b32 %0, [%1], %2, %3;" : "=r"(old) : "l"(p), "r"(cmp), "r"(val) : "memory");
  return old;
}
__device__ __forceinline__ uint32_t symm_ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void symm_st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t symm_ld_volatile(const volatile uint32_t* p) { return *p; }

__device__ __forceinline__ uint64_t symm_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Wrap-safe "a is at or after b" for 32-bit epochs/sequence numbers.
__device__ __forceinline__ bool symm_seq_geq(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }
__device__ __forceinline__ bool symm_seq_geq64(uint64_t a, uint64_t b) { return (int64_t)(a - b) >= 0; }

#include "abi.cuh"

// A bounded spin-wait. Call give_up() once per loop iteration: it is a
// counter increment except every 1024th call, which reads %globaltimer and
// the communicator's error guard (device memory: another wait already gave
// up), and at most once per SYMM_SPIN_STATUS_NS of waiting the host-visible
// status (the abort flag). On timeout or abort it records the error once
// and tells the caller to return; kernels never trap, so the context stays
// usable.
//
// Why the host status is read so rarely: it lies in host memory, so each
// read crosses PCIe. An LL kernel spins with one thread per 8 data bytes
// (32K threads at 256 KiB); when each read the status every 1024 polls,
// their reads flooded the GPU's path to host memory, which also carries the
// GPU's fetches of newly launched work: the next launches on that GPU came
// late, the peer waited for them, and eager 2-rank all-reduces ran at 0.3-1
// ms a call (docs/PERFORMANCE.md, "The two-rank eager stall"). NCCL reads
// its abort flag every million spins for the same reason.
#define SYMM_SPIN_STATUS_NS 10000000ull  // 10 ms: how late an abort is noticed, at most

struct SymmSpin {
  const SymmWaitCtx& ctx;
  uint64_t start;
  uint64_t next_status;
  uint32_t iters;
  uint32_t peer;
  uint32_t detail;

  __device__ SymmSpin(const SymmWaitCtx& c, uint32_t peer_, uint32_t detail_)
      : ctx(c), start(0), next_status(0), iters(0), peer(peer_), detail(detail_) {}

  __device__ bool give_up() {
    if ((++iters & 1023u) != 0) return false;
    const uint64_t now = symm_globaltimer();
    if (start == 0) {
      start = now;
      next_status = now + SYMM_SPIN_STATUS_NS;
    }
    // Set by the first wait that recorded an error: the communicator is broken.
    if (*(volatile uint32_t*)ctx.error_guard) return true;
    if (now - start > ctx.timeout_ns) {
      record(SYMM_DEV_TIMEOUT, now);
      return true;
    }
    if (symm_seq_geq64(now, next_status)) {
      next_status = now + SYMM_SPIN_STATUS_NS;
      volatile SymmStatus* s = ctx.status;
      if (s->abort) {
        record(SYMM_DEV_ABORTED, now);
        return true;
      }
    }
    return false;
  }

  __device__ void record(uint32_t kind, uint64_t now) {
    if (atomicCAS(ctx.error_guard, 0u, 1u) != 0u) return;
    write(kind, now);
  }

  // SYMM_CHECK found different collectives on this rank and `peer`.
  __device__ void record_mismatch(const uint32_t mine[4], const uint32_t theirs[4]) {
    if (atomicCAS(ctx.error_guard, 0u, 1u) != 0u) return;
    volatile SymmStatus* s = ctx.status;
    for (int k = 0; k < 4; ++k) {
      s->mine[k] = mine[k];
      s->theirs[k] = theirs[k];
    }
    start = symm_globaltimer();
    write(SYMM_DEV_MISMATCH, start);
  }

  __device__ void write(uint32_t kind, uint64_t now) {
    volatile SymmStatus* s = ctx.status;
    s->rank = ctx.rank;
    s->op = ctx.op;
    s->peer = peer;
    s->detail = detail;
    s->waited_ns = now - start;
    __threadfence_system();
    s->error = kind;
    __threadfence_system();
  }
};
