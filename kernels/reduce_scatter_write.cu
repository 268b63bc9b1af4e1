// Reduce-scatter by stores only (SYMM_ALGO=write; `auto`'s where
// src/coll/defaults.rs says): any input, any output.
//
// The pull kernel (reduce_scatter.cu) has every owner load its block from
// the peers' inputs (or their staged copies), so NVLink carries read
// responses; at 3 ranks on 4 x H200 the pull reached about half the rate
// into each GPU of 2 or 4 ranks (docs/PERFORMANCE.md, tenth session).
// Here nothing crosses the link but stores, the first half of the
// write-only all-reduce (allreduce_write.cu):
//  1. scatter: rank r stores its copy of owner j's block (this round's
//     part) into j's scratch, in the slot of source r;
//  2. after a sync with every peer (their parts have landed), the owner
//     reduces its block from its own input and the peers' copies, all in
//     local memory, into its own output.
// Peers touch only scratch: the input and the output may be any buffer,
// and no exit sync is needed (a kernel that stores into a peer's scratch
// syncs at its entry, as this one does; the parity rule covers kernels
// that stage into their own).
//
// Rounds and scratch: a round takes a.chunk elements of every block (a
// whole number of vectors); an owner's scratch half holds one slot of
// a.chunk per source rank. The round is split among the blocks as if it
// were full (round_share), so block b of every rank writes the same part
// of every slot in every round and only the owner's block b reads it.
// Rounds alternate halves (write_rounds.cuh says why the pipelined order
// is safe); the parity comes from next_parity, shared with the staged
// kernels, so consecutive kernels start on different halves.
// In place (recvbuff = sendbuff + rank * recvcount) is safe: the owner's
// block is read and written element by element by one thread (reduce_to
// loads before it stores), and peers never read it.
// Each element is reduced by one rank, in rank order (the balanced loop).
#include "pipe.cuh"  // SYMM_FOR_EACH_OPT_IN_TYPE
#include "write_rounds.cuh"

// Round `base`: this block's part [*lo, *hi) of every block.
template <typename T>
__device__ __forceinline__ void rs_write_part(const SymmCollArgs& a, uint64_t base, uint64_t* lo, uint64_t* hi) {
  round_share(min(a.chunk, a.count), min(a.chunk, a.count - base), vec_elems<T>(), lo, hi);
}

// Round `base`'s scatter: this block's part of every other owner's block
// into that owner's scratch half `par`, in slot `me`.
template <typename T, bool PIECES>
__device__ __noinline__ void rs_write_scatter(const SymmCollArgs& a, bool classic, uint64_t base, uint32_t par) {
  const uint32_t n = a.nranks, me = a.rank;
  uint64_t lo, hi;
  rs_write_part<T>(a, base, &lo, &hi);
  const T* send = reinterpret_cast<const T*>(a.send);
  for (uint32_t k = 1; k < n; ++k) {
    const uint32_t j = (me + k) % n;  // spread the stores over the links
    char* slot = scratch_in(a, j, par) + ((uint64_t)me * a.chunk + lo) * sizeof(T);
    copy_any<PIECES>(classic, slot, reinterpret_cast<const char*>(send + (uint64_t)j * a.count + base + lo),
             (hi - lo) * sizeof(T), true);
  }
}

// Round `base`'s reduction: this block's part of the owner's block, from
// its own input and the peers' copies in scratch half `par`.
template <typename T, int OP, bool PIECES>
__device__ __forceinline__ void rs_write_reduce(const SymmCollArgs& a, uint64_t base, uint32_t par) {
  const uint32_t n = a.nranks, me = a.rank;
  uint64_t lo, hi;
  rs_write_part<T>(a, base, &lo, &hi);
  const T* send = reinterpret_cast<const T*>(a.send);
  const T* mine = reinterpret_cast<const T*>(scratch_in(a, me, par));
  const T* from[SYMM_MAX_RANKS];
#pragma unroll
  for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
    if (r >= n) break;
    from[r] = r == me ? send + (uint64_t)me * a.count + base + lo : mine + (uint64_t)r * a.chunk + lo;
  }
  T* to = reinterpret_cast<T*>(a.recv) + base + lo;
  if constexpr (PIECES)
    reduce_pieces_to<T, OP>(&to, 1, from, n, me, hi - lo, n);
  else
    reduce_to<T, OP, false>(&to, 1, from, n, me, hi - lo, n);
}

template <typename T, int OP, bool PIECES>
__device__ __forceinline__ void reduce_scatter_write_run(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  // Entry: every peer has started this kernel, so none still reads the
  // scratch we are about to store into, whichever kernel used it last.
  if (!block_sync(a, s)) return;
  // Pipelined by one round (write_rounds.cuh: scattered, synced and reduced
  // in turn, a block's links idled while it reduced).
  const bool ok = store_only_rounds(
      a, s, [&](uint64_t base, uint32_t par) { rs_write_scatter<T, PIECES>(a, classic, base, par); },
      [&](uint64_t base, uint32_t par) { rs_write_reduce<T, OP, PIECES>(a, base, par); });
  if (!ok) return;
  SYMM_COLL_EPILOGUE(a, s)
}

// The instance without the pieces loops where every block is aligned
// (write_rounds.cuh vectors_everywhere).
template <typename T, int OP>
__device__ void reduce_scatter_write_body(const SymmCollArgs& a) {
  if (vectors_everywhere(a, sizeof(T)))
    reduce_scatter_write_run<T, OP, false>(a);
  else
    reduce_scatter_write_run<T, OP, true>(a);
}

SYMM_FOR_EACH_OPT_IN_TYPE(SYMM_REDUCE_KERNEL, reduce_scatter_write)
