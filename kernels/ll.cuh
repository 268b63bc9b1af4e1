// Low-latency ("LL") packets for small collectives: no cross-rank sync at
// all. Each 8 data bytes travel to the peer in one 16-byte store as two
// {4 data bytes, 4-byte flag} halves; each 8-byte half lands whole, so a
// reader that sees the call's flag in both halves has the data. The flag is
// the call's epoch, so stale packets of earlier calls never match and the
// buffers need no reset (the same idea as NCCL's LL protocol).
//
// Buffers: every rank owns a[parity][source rank] slots of a.ll_slot bytes
// (a.ll[r] is rank r's, as seen here). A call writes parity epoch & 1.
// Why two parities are enough: a rank writes call k+2 into a peer's slot
// only after it finished call k+1, which needed the peer's call k+1
// packets, which the peer sends only after it finished reading call k.
//
// The epoch lives in this rank's pad (SYMM_COLL_LL_COUNTERS) and is
// advanced by the kernel's last block, so graph replays stay in step.
#pragma once
#include "coll.cuh"

struct LLState {
  uint32_t epoch;
  uint32_t flag;
  uint32_t parity;
};

// Next epoch; skips the value whose flag would be 0 (zeroed memory) while
// keeping the parity alternating.
__device__ __forceinline__ uint32_t ll_next(uint32_t e) { return e + 1 == 0xffffffffu ? 1u : e + 1; }

__device__ __forceinline__ LLState ll_begin(const SymmCollArgs& a) {
  // Programmatic dependent launch (SYMM_COLL_PDL; the default on sm_90
  // since the eighth session, SYMM_ALGO `nopdl` launches as before):
  // the host lets this kernel launch before the stream's previous kernel
  // has finished, so first wait for that kernel and its memory (a no-op
  // in a kernel launched without the attribute), then let the stream's
  // next kernel launch while this one runs: its blocks are resident at
  // its own wait when this one ends, instead of a launch gap later. Every
  // block of this grid is resident by the time all have triggered, so the
  // early blocks cannot starve this grid's cross-rank waits. Only with
  // the bit: with `nopdl` a user's kernel launched as a dependent does not
  // start early (with it, PDL's contract holds: it waits in
  // griddepcontrol.wait before it reads what this kernel wrote).
#if __CUDA_ARCH__ >= 900  // sm_80 has no programmatic launch (the host sets none there)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (a.mode & SYMM_COLL_PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  LLState s;
  s.epoch = *(volatile uint32_t*)(a.epochs + SYMM_COLL_LL_COUNTERS);
  s.flag = s.epoch + 1;
  s.parity = s.epoch & 1;
  return s;
}

// Every block calls this once, with `ok` false in threads that gave up.
// The last block to finish advances the epoch for the next call.
__device__ __forceinline__ void ll_end(const SymmCollArgs& a, const LLState& s, bool ok) {
  const int failed = __syncthreads_or(!ok);
  if (threadIdx.x != 0 || failed) return;  // a broken communicator stays broken
  uint32_t* c = a.epochs + SYMM_COLL_LL_COUNTERS;
  __threadfence();
  if (atomicAdd(c + 1, 1u) == gridDim.x - 1) {
    c[1] = 0;
    c[0] = ll_next(s.epoch);
  }
}

// Slot of `owner`'s LL buffer that `source` writes this call.
__device__ __forceinline__ uint4* ll_slot(const SymmCollArgs& a, uint32_t owner, uint32_t parity, uint32_t source) {
  return reinterpret_cast<uint4*>(a.ll[owner] + (uint64_t)(parity * a.nranks + source) * a.ll_slot);
}

__device__ __forceinline__ void ll_put(uint4* p, uint2 d, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d.x), "r"(flag), "r"(d.y), "r"(flag)
               : "memory");
}

// One look at the packet at `p`: true, with its data, once both halves
// carry `flag`.
__device__ __forceinline__ bool ll_try_get(const uint4* p, uint32_t flag, uint2* out) {
  uint32_t d0, f0, d1, f1;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
               : "l"(p)
               : "memory");
  if (f0 == flag && f1 == flag) {
    *out = make_uint2(d0, d1);
    return true;
  }
  return false;
}

// Wait (bounded) for the packet at `p` to carry `flag`; false on timeout
// or abort (recorded by SymmSpin).
__device__ __forceinline__ bool ll_get(const SymmCollArgs& a, const uint4* p, uint32_t flag, uint32_t peer, uint2* out) {
  SymmSpin spin(a.wait, peer, blockIdx.x);
  for (;;) {
    if (ll_try_get(p, flag, out)) return true;
    if (spin.give_up()) return false;
  }
}

// Bytes [8u, 8u + 8) of a buffer of n bytes; bytes past n read as 0.
__device__ __forceinline__ uint2 ll_load_unit(const char* base, uint64_t u, uint64_t n) {
  const uint64_t off = u * 8;
  if (((uintptr_t)base & 7) == 0 && off + 8 <= n) return *reinterpret_cast<const uint2*>(base + off);
  union { uint2 v; uint8_t b[8]; } x;
  x.v = make_uint2(0, 0);
  for (int k = 0; k < 8; ++k)
    if (off + k < n) x.b[k] = (uint8_t)base[off + k];
  return x.v;
}

// Store bytes [8u, 8u + 8) of a buffer of n bytes (those below n only).
__device__ __forceinline__ void ll_store_unit(char* base, uint64_t u, uint64_t n, uint2 v) {
  const uint64_t off = u * 8;
  if (((uintptr_t)base & 7) == 0 && off + 8 <= n) {
    *reinterpret_cast<uint2*>(base + off) = v;
    return;
  }
  union { uint2 v; uint8_t b[8]; } x;
  x.v = v;
  for (int k = 0; k < 8; ++k)
    if (off + k < n) base[off + k] = (char)x.b[k];
}

// Unpack what every peer sent this call into block r of `recv` (n bytes a
// block, r the sender): the receiving half of the all-gather and
// all-to-all LL kernels. False in a thread that gave up.
__device__ __forceinline__ bool ll_unpack_peers(const SymmCollArgs& a, const LLState& s, char* recv, uint64_t n) {
  const uint64_t units = (n + 7) / 8, stride = symm_grid_stride();
  bool ok = true;
  for (uint64_t u = symm_thread_index(); ok && u < units; u += stride) {
    for (uint32_t k = 1; ok && k < a.nranks; ++k) {
      const uint32_t r = (a.rank + k) % a.nranks;
      uint2 v;
      ok = ll_get(a, ll_slot(a, a.rank, s.parity, r) + u, s.flag, r, &v);
      if (ok) ll_store_unit(recv + r * n, u, n, v);
    }
  }
  return ok;
}

// 8 bytes seen as elements of T.
template <typename T> union LLUnit {
  uint2 u;
  T e[8 / sizeof(T)];
};

// OP over ranks, in rank order, of unit u: this rank's from `mine`, the
// peers' from the packets they wrote into this rank's slots, at packet
// `at` of each (u itself where every unit of the message has its packet).
template <typename T, int OP>
__device__ __forceinline__ bool ll_reduce_unit(const SymmCollArgs& a, const LLState& s, const char* mine, uint64_t u,
                                               uint64_t n, uint64_t at, uint2* out) {
  constexpr uint32_t E = 8 / sizeof(T);
  typename Acc<T>::type acc[E];
  for (uint32_t r = 0; r < a.nranks; ++r) {
    LLUnit<T> in;
    if (r == a.rank) in.u = ll_load_unit(mine, u, n);
    else if (!ll_get(a, ll_slot(a, a.rank, s.parity, r) + at, s.flag, r, &in.u)) return false;
#pragma unroll
    for (uint32_t k = 0; k < E; ++k) acc[k] = r == 0 ? to_acc(in.e[k]) : combine<OP>(acc[k], to_acc(in.e[k]));
  }
  LLUnit<T> res;
#pragma unroll
  for (uint32_t k = 0; k < E; ++k) res.e[k] = from_acc<T>(finalize<OP>(acc[k], a.nranks));
  *out = res.u;
  return true;
}
