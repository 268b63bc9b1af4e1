// The round loop of the store-only kernels (allreduce_write.cu,
// reduce_scatter_write.cu): scatter round 0; then per round a sync with
// every peer (the round has landed everywhere), the next round's scatter
// into the other scratch half, and this round's reduction, so that a
// block's stores drain over NVLink while it reduces (tenth session: 1 GiB
// reduce-scatter 2096 -> 1697 us at 2 ranks on 2 x H200). With
// SYMM_COLL_SERIAL_ROUNDS (SYMM_ALGO=serial) the next scatter comes after
// the reduction instead, the order of before, for A/B measurements.
//
// Safe: round k + 1 goes into the half of round k - 1, which the owner's
// block b finished reducing before it reached round k's sync; round k's
// half is stored into again only by round k + 2's scatter, after round
// k + 1's sync, which this block reaches after reducing round k. The
// parity comes from next_parity, shared with the staged kernels.
#pragma once
#include "coll.cuh"

// Whether every pointer a store-only kernel forms is 16-byte aligned: the
// buffers (a.src[r] holds each rank's output in allreduce_write.cu, and is
// zero in the other two), blocks of `count` and slots of `chunk` elements of
// `elem_size` bytes. Then the kernel runs its instance without the pieces
// loops (coll.cuh PIECES), whose mere presence in the kernel cost the
// aligned loops registers: 4 ranks, reduce-scatter `write` 1 GiB 2525 ->
// 3221 us, all-gather 2592 -> 3078, all-reduce 16 MiB 102 -> 126 (4 x H100,
// eleventh and twelfth sessions).
__device__ __forceinline__ bool vectors_everywhere(const SymmCollArgs& a, uint64_t elem_size) {
  uint64_t bits = (uintptr_t)a.send | (uintptr_t)a.recv | a.count * elem_size | a.chunk * elem_size;
  for (uint32_t r = 0; r < a.nranks; ++r) bits |= (uintptr_t)a.src[r];
  return (bits & 15) == 0;
}

// scatter(base, parity) stores this block's part of round `base`;
// reduce(base, parity) reduces it. Returns false if a sync failed (the
// error is recorded; the kernel returns).
template <typename Scatter, typename Reduce>
__device__ __forceinline__ bool store_only_rounds(const SymmCollArgs& a, BlockSync& s, Scatter scatter,
                                                  Reduce reduce) {
  const bool serial = a.mode & SYMM_COLL_SERIAL_ROUNDS;
  uint32_t par = next_parity(a);
  s.tl.mark(SYMM_PHASE_COPY_IN, 0);
  scatter(0, par);
  for (uint64_t base = 0; base < a.count; base += a.chunk) {
    const uint32_t round = (uint32_t)(base / a.chunk);
    const uint64_t next = base + a.chunk;
    if (!block_sync(a, s)) return false;
    const uint32_t this_par = par;
    // One call site each, so the deep copy and reduction loops are emitted once.
#pragma unroll 1
    for (uint32_t step = 0; step < 2; ++step) {
      if ((step == 0) != serial) {
        if (next >= a.count) continue;
        par = next_parity(a);
        s.tl.mark(SYMM_PHASE_COPY_IN, round + 1);
        scatter(next, par);
      } else {
        s.tl.mark(SYMM_PHASE_REDUCE, round);
        reduce(base, this_par);
      }
    }
  }
  return true;
}
