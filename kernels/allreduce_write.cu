// All-reduce, two-shot, by stores only (SYMM_ALGO=twoshot+write): for an
// output in a symmetric or registered buffer and any input.
//
// The push kernel (allreduce_push.cu) loads its slice from the peers'
// inputs and stores the result into their outputs, so every NVLink
// direction carries read responses beside the peers' stores; NCCL's ring
// only stores. Here nothing crosses the link but stores:
//  1. scatter: rank r stores owner j's slice of its input into j's scratch
//     (one slot per source rank in the half of the round's parity);
//  2. after a sync with every peer (their slices have landed), the owner
//     reduces its slice from its own input and the peers' copies, all in
//     local memory, and stores the result into every rank's output.
// A sync at entry (every peer has started this kernel, so every rank has
// finished the kernels before it: nothing still reads or writes the
// scratch we are about to store into, whichever kernel used it last), one
// a round (the scatter's), and one at the exit: peers store into our
// output until then. The input is read only by its own rank, so it may
// be any buffer; a.src[r] holds rank r's OUTPUT address here (no kernel of
// this family reads a peer's input), a.scratch[r] rank r's scratch.
//
// Rounds and scratch (coll.cuh next_parity, round_share): a round of a.chunk
// elements (a multiple of nranks vectors: the host sizes it so nranks slots
// of a.chunk / nranks fit a scratch half) is split into owner slices first,
// then each slice among the blocks, both as if the round were full, so
// block b of every rank writes the same slots of an owner's half in every
// round and only the owner's block b reads them. Round k + 2 reuses round
// k's half: block b scatters into it only after round k + 1's sync, which
// the owner's block b reaches after reducing round k. (The parity still
// comes from next_parity, so that the staged kernels after this one keep
// their rule.)
// In place (send = recv) is safe: rank r reads its elements of owner j's
// slice in round k's scatter, before round k's sync, and j stores the
// results there only after that sync; the owner reads and writes its own
// slice element by element (reduce_to loads before it stores).
// Each element is reduced by one rank, in rank order: every output has the
// same bits.
#include "pipe.cuh"  // SYMM_FOR_EACH_OPT_IN_TYPE
#include "write_rounds.cuh"

// Owner j's part for this block of a round of `n` elements: [*lo, *lo +
// *len) in the round, and its offset in each source's slot of j's scratch.
template <typename T>
__device__ __forceinline__ void write_part(const SymmCollArgs& a, uint32_t j, uint64_t n, uint64_t* lo, uint64_t* len,
                                           uint64_t* slot_off) {
  constexpr uint32_t E = vec_elems<T>();
  uint64_t j0, j1, p0, p1;
  split_range(min(a.chunk, a.count), E, a.nranks, j, &j0, &j1);
  split_range(j1 - j0, E, gridDim.x, blockIdx.x, &p0, &p1);
  const uint64_t b = min(j0 + p0, n), e = min(j0 + p1, n);
  *lo = b;
  *len = e - b;
  *slot_off = p0;
}

// The owner's step of a round: its part of its slice from its own input
// and the peers' copies in its scratch, stored into every rank's output.
// (ptxas -v, sm_90: the kernel spills less with this inlined than not.
// ptxas shares a kernel's registers out among its functions by what is
// live at each call, so reduce_balanced's spills depend on its callers
// (before its load array was zeroed each step, 130-270 bytes here and in
// allreduce.cu, on the loads' path, against 0-24 in allreduce_push.cu);
// hence one caller per instance, write_rounds.cuh vectors_everywhere.)
template <typename T, int OP, bool PIECES>
__device__ __forceinline__ void write_reduce(const SymmCollArgs& a, uint64_t base, uint64_t rn, uint32_t par) {
  const uint32_t n = a.nranks, me = a.rank;
  uint64_t lo, len, off;
  write_part<T>(a, me, rn, &lo, &len, &off);
  const uint64_t stride = a.chunk / n;
  const T* from[SYMM_MAX_RANKS];
  T* to[SYMM_MAX_RANKS];
  const T* mine = reinterpret_cast<const T*>(scratch_in(a, me, par));
#pragma unroll
  for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
    if (r >= n) break;
    from[r] = r == me ? reinterpret_cast<const T*>(a.send) + base + lo : mine + (uint64_t)r * stride + off;
    to[r] = reinterpret_cast<T*>(const_cast<char*>(a.src[r])) + base + lo;  // rank r's output
  }
  if constexpr (PIECES)
    reduce_pieces_to<T, OP>(to, n, from, n, me, len, n);
  else
    reduce_to<T, OP, false>(to, n, from, n, me, len, n);
}

// Round `base`'s scatter: this block's part of every other owner's slice
// of the round into that owner's scratch half `par`, in slot `me`.
template <typename T, bool PIECES>
__device__ __noinline__ void write_scatter(const SymmCollArgs& a, bool classic, uint64_t base, uint32_t par) {
  const uint32_t n = a.nranks, me = a.rank;
  const uint64_t rn = min(a.chunk, a.count - base), stride = a.chunk / n;
  const T* send = reinterpret_cast<const T*>(a.send);
  for (uint32_t k = 1; k < n; ++k) {
    const uint32_t j = (me + k) % n;  // spread the stores over the links
    uint64_t lo, len, off;
    write_part<T>(a, j, rn, &lo, &len, &off);
    char* slot = scratch_in(a, j, par) + ((uint64_t)me * stride + off) * sizeof(T);
    copy_any<PIECES>(classic, slot, reinterpret_cast<const char*>(send + base + lo), len * sizeof(T), true);
  }
}

template <typename T, int OP, bool PIECES>
__device__ __forceinline__ void allreduce_write_run(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  if (!block_sync(a, s)) return;
  // Pipelined by one round since the tenth session (write_rounds.cuh; peers
  // store into our output until the exit sync, as before).
  const bool ok = store_only_rounds(
      a, s, [&](uint64_t base, uint32_t par) { write_scatter<T, PIECES>(a, classic, base, par); },
      [&](uint64_t base, uint32_t par) { write_reduce<T, OP, PIECES>(a, base, min(a.chunk, a.count - base), par); });
  if (!ok || !block_sync(a, s)) return;  // always: peers store into our output
  sync_end(a, s);
}

template <typename T, int OP>
__device__ void allreduce_write_body(const SymmCollArgs& a) {
  if (vectors_everywhere(a, sizeof(T)))
    allreduce_write_run<T, OP, false>(a);
  else
    allreduce_write_run<T, OP, true>(a);
}

SYMM_FOR_EACH_OPT_IN_TYPE(SYMM_REDUCE_KERNEL, allreduce_write)
