// All-reduce by push (SYMM_ALGO=push): two-shot for symmetric or registered
// input AND output buffers, with two cross-rank syncs in all, at entry and
// exit, whatever the size.
//
// Rank r owns slice r of every block's share of the vector (the same split
// as two-shot): it loads that slice from every rank's input (own rank first,
// then the peers in turn, combined in rank order: reduce_balanced) and
// stores the result straight into every rank's output. No scratch, no
// rounds, so no round-to-round syncs:
//  - entry sync: every peer has started this kernel, so its stream has
//    finished whatever used its output before (we are about to write it)
//    and its input holds this call's data; it also compares the layout
//    token, which names both buffers here, and the protocol;
//  - exit sync: every rank's stores into our output, and its loads from our
//    input, are done before our kernel ends and the stream moves on.
// Each element is reduced by one rank only, so every rank's output has the
// same bits. In place (send = recv) is safe: rank j reads element i of
// every rank only in slice j and writes it only there, load before store.
#include "pipe.cuh"  // SYMM_FOR_EACH_OPT_IN_TYPE

template <typename T, int OP>
__device__ void allreduce_push_body(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  constexpr uint32_t E = vec_elems<T>();
  if (!block_sync(a, s)) return;
  uint64_t lo, hi, slo, shi;
  split_range(a.count, E, gridDim.x, blockIdx.x, &lo, &hi);
  split_range(hi - lo, E, a.nranks, a.rank, &slo, &shi);
  const T* from[SYMM_MAX_RANKS];
  T* to[SYMM_MAX_RANKS];
  // a.src[r]: rank r's input; a.scratch[r] is rank r's output here (the
  // host passes the output's peer addresses in place of the scratch ones).
#pragma unroll
  for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
    if (r >= a.nranks) break;
    from[r] = reinterpret_cast<const T*>(a.src[r]) + lo + slo;
    to[r] = reinterpret_cast<T*>(a.scratch[r]) + lo + slo;
  }
  s.tl.mark(SYMM_PHASE_REDUCE);
  reduce_to<T, OP>(to, a.nranks, from, a.nranks, a.rank, shi - slo, a.nranks);
  if (!block_sync(a, s)) return;  // always: peers write our output
  sync_end(a, s);
}

SYMM_FOR_EACH_OPT_IN_TYPE(SYMM_REDUCE_KERNEL, allreduce_push)
