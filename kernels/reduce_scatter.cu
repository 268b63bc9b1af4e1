// Reduce-scatter: rank r's output is the reduction of block r (a.count
// elements) of every rank's input. Symmetric/registered inputs are read
// where they are, with a sync at entry and exit only; staged inputs go
// through scratch in rounds (two syncs per round), or pipelined with
// per-chunk flags (reduce_scatter_pipe.cu, SYMM_ALGO=pipe).
// copy_bytes_pieces inlined (coll.cuh): measured faster in this family.
#define SYMM_COPY_PIECES_INLINE
#include "ll.cuh"

// The copy-engine path's last step: the peers' blocks were already copied
// next to each other here; reduce them, touching only local memory.
template <typename T, int OP>
__device__ void local_reduce(const SymmCollArgs& a) {
  uint64_t lo, hi;
  split_range(a.count, vec_elems<T>(), gridDim.x, blockIdx.x, &lo, &hi);
  const T* from[SYMM_MAX_RANKS];
#pragma unroll
  for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
    if (r >= a.nranks) break;
    from[r] = reinterpret_cast<const T*>(a.src[r]) + lo;
  }
  reduce_any<T, OP>(a.mode & SYMM_COLL_CLASSIC, reinterpret_cast<T*>(a.recv) + lo, from, a.nranks, a.rank, hi - lo,
                    a.nranks);
}

template <typename T, int OP>
__device__ void reduce_scatter_body(const SymmCollArgs& a) {
  if (a.mode & SYMM_COLL_LOCAL) {
    local_reduce<T, OP>(a);
    return;
  }
  SYMM_COLL_PROLOGUE(a, s)
  constexpr uint32_t E = vec_elems<T>();
  const bool staged = a.mode & SYMM_COLL_STAGED;
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  // Staged with SYMM_COLL_OWN_DIRECT (the default; SYMM_ALGO=ownstaged
  // clears it): this rank's own block, which only this rank reads, is
  // reduced from the input instead of being staged first. In place
  // (recv = send + rank * count) each element of it is read and then
  // written by the same thread (reduce_balanced); the host sets the bit
  // only for that overlap or none.
  const bool own_direct = staged && (a.mode & SYMM_COLL_OWN_DIRECT);
  T* recv = reinterpret_cast<T*>(a.recv);
  for (uint64_t base = 0; base < a.count; base += a.chunk) {
    const uint64_t n = min(a.chunk, a.count - base);
    uint64_t lo, hi;
    round_share(min(a.chunk, a.count), n, E, &lo, &hi);
    const uint32_t par = staged ? next_parity(a) : 0;
    if (staged) {
      // Scratch holds block j of this round at j * a.chunk.
      s.tl.mark(SYMM_PHASE_COPY_IN, (uint32_t)(base / a.chunk));
      for (uint32_t j = 0; j < a.nranks; ++j)
        if (!own_direct || j != a.rank)
          copy_any(classic, scratch_in(a, a.rank, par) + (j * a.chunk + lo) * sizeof(T),
                   a.send + (j * a.count + base + lo) * sizeof(T), (hi - lo) * sizeof(T));
    }
    if (!block_sync(a, s)) return;
    const T* from[SYMM_MAX_RANKS];
#pragma unroll
    for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
      if (r >= a.nranks) break;
      from[r] = staged ? reinterpret_cast<const T*>(scratch_in(a, r, par)) + a.rank * a.chunk + lo
                       : reinterpret_cast<const T*>(a.src[r]) + a.rank * a.count + base + lo;
    }
    if (own_direct) from[a.rank] = reinterpret_cast<const T*>(a.send) + a.rank * a.count + base + lo;
    s.tl.mark(SYMM_PHASE_REDUCE, (uint32_t)(base / a.chunk));
    reduce_any<T, OP>(classic, recv + base + lo, from, a.nranks, a.rank, hi - lo, a.nranks);
  }
  SYMM_COLL_EPILOGUE(a, s)
}

SYMM_FOR_EACH_TYPE(SYMM_REDUCE_KERNEL, reduce_scatter)

// LL for small blocks: every rank sends block r of its input to rank r as
// LL packets, then reduces its own block from what arrived (ll.cuh).
template <typename T, int OP>
__device__ void reduce_scatter_ll_body(const SymmCollArgs& a) {
  const LLState s = ll_begin(a);
  const uint64_t n = a.count * sizeof(T), units = (n + 7) / 8, stride = symm_grid_stride();
  for (uint64_t u = symm_thread_index(); u < units; u += stride) {
    for (uint32_t k = 1; k < a.nranks; ++k) {
      const uint32_t r = (a.rank + k) % a.nranks;
      ll_put(ll_slot(a, r, s.parity, a.rank) + u, ll_load_unit(a.send + r * n, u, n), s.flag);
    }
  }
  bool ok = true;
  for (uint64_t u = symm_thread_index(); ok && u < units; u += stride) {
    uint2 out;
    ok = ll_reduce_unit<T, OP>(a, s, a.send + a.rank * n, u, n, u, &out);
    if (ok) ll_store_unit(a.recv, u, n, out);
  }
  ll_end(a, s, ok);
}

SYMM_FOR_EACH_TYPE(SYMM_REDUCE_KERNEL, reduce_scatter_ll)
