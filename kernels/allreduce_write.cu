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
// (ptxas -v, sm_90: the kernel spills less with this inlined than not;
// reduce_balanced spills 130-270 bytes here, as in allreduce.cu, against
// 0-24 in allreduce_push.cu: not yet understood.)
template <typename T, int OP>
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
  reduce_to<T, OP>(to, n, from, n, me, len, n);
}

// Round `base`'s scatter: this block's part of every other owner's slice
// of the round into that owner's scratch half `par`, in slot `me`.
template <typename T>
__device__ __noinline__ void write_scatter(const SymmCollArgs& a, bool classic, uint64_t base, uint32_t par) {
  const uint32_t n = a.nranks, me = a.rank;
  const uint64_t rn = min(a.chunk, a.count - base), stride = a.chunk / n;
  const T* send = reinterpret_cast<const T*>(a.send);
  for (uint32_t k = 1; k < n; ++k) {
    const uint32_t j = (me + k) % n;  // spread the stores over the links
    uint64_t lo, len, off;
    write_part<T>(a, j, rn, &lo, &len, &off);
    char* slot = scratch_in(a, j, par) + ((uint64_t)me * stride + off) * sizeof(T);
    copy_any(classic, slot, reinterpret_cast<const char*>(send + base + lo), len * sizeof(T));
  }
}

// Pipelined by one round (tenth session; SYMM_ALGO=serial keeps the order
// of before): after round k's sync a block first scatters round k + 1
// (into the other half) and then reduces round k, so that round k + 1's
// stores are under way while it reduces, and round k + 1's sync finds
// them landed. Safe: round k + 1 goes into the half of round k - 1, which
// the owner's block b finished reducing before it reached round k's sync;
// round k's half is stored into again only by round k + 2's scatter,
// after round k + 1's sync, which this block reaches after reducing round
// k. (The outputs are another matter: peers store into ours until the
// exit sync, as before.)
template <typename T, int OP>
__device__ void allreduce_write_body(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  const bool serial = a.mode & SYMM_COLL_SERIAL_ROUNDS;
  if (!block_sync(a, s)) return;
  uint32_t par = next_parity(a);
  s.tl.mark(SYMM_PHASE_COPY_IN, 0);
  write_scatter<T>(a, classic, 0, par);
  for (uint64_t base = 0; base < a.count; base += a.chunk) {
    const uint32_t round = (uint32_t)(base / a.chunk);
    const uint64_t rn = min(a.chunk, a.count - base), next = base + a.chunk;
    if (!block_sync(a, s)) return;
    const uint32_t this_par = par;
    // Scatter round k + 1 before reducing round k, or after (serial); one
    // call site each, so the deep copy and reduction loops are emitted once.
#pragma unroll 1
    for (uint32_t step = 0; step < 2; ++step) {
      if ((step == 0) != serial) {
        if (next >= a.count) continue;
        par = next_parity(a);
        s.tl.mark(SYMM_PHASE_COPY_IN, round + 1);
        write_scatter<T>(a, classic, next, par);
      } else {
        s.tl.mark(SYMM_PHASE_REDUCE, round);
        write_reduce<T, OP>(a, base, rn, this_par);
      }
    }
  }
  if (!block_sync(a, s)) return;  // always: peers store into our output
  sync_end(a, s);
}

SYMM_FOR_EACH_OPT_IN_TYPE(SYMM_REDUCE_KERNEL, allreduce_write)
