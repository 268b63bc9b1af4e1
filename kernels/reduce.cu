// Reduce: the root's output is the reduction of every rank's input.
#include "coll.cuh"

template <typename T, int OP>
__device__ void reduce_body(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  constexpr uint32_t E = vec_elems<T>();
  const bool staged = a.mode & SYMM_COLL_STAGED;
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  for (uint64_t base = 0; base < a.count; base += a.chunk) {
    const uint64_t n = min(a.chunk, a.count - base);
    uint64_t lo, hi;
    round_share(min(a.chunk, a.count), n, E, &lo, &hi);
    const uint32_t par = staged ? next_parity(a) : 0;
    if (staged) {
      s.tl.mark(SYMM_PHASE_COPY_IN, (uint32_t)(base / a.chunk));
      copy_any(classic, scratch_in(a, a.rank, par) + lo * sizeof(T), a.send + (base + lo) * sizeof(T),
               (hi - lo) * sizeof(T));
    }
    if (!block_sync(a, s)) return;
    if (a.rank != a.root) continue;
    const T* from[SYMM_MAX_RANKS];
#pragma unroll
    for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
      if (r >= a.nranks) break;
      from[r] = staged ? reinterpret_cast<const T*>(scratch_in(a, r, par)) + lo
                       : reinterpret_cast<const T*>(a.src[r]) + base + lo;
    }
    s.tl.mark(SYMM_PHASE_REDUCE, (uint32_t)(base / a.chunk));
    reduce_any<T, OP>(classic, reinterpret_cast<T*>(a.recv) + base + lo, from, a.nranks, a.rank, hi - lo, a.nranks);
  }
  SYMM_COLL_EPILOGUE(a, s)
}

SYMM_FOR_EACH_TYPE(SYMM_REDUCE_KERNEL, reduce)
