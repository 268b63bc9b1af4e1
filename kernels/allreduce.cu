// All-reduce. One-shot: every rank reduces the whole vector from all ranks'
// inputs (one sync per round; best for 2 ranks at any size and for small
// messages). Two-shot: each rank reduces its slice into its scratch, then
// every rank gathers all slices (two syncs per round; less traffic for more
// than 2 ranks). Inputs come straight from peers' symmetric or registered
// buffers, or from scratch after a copy-in (staged), in rounds of a.chunk.
// Reductions load every rank's data at once, own rank first, and combine
// in rank order (coll.cuh, reduce_balanced); SYMM_COLL_CLASSIC selects the
// loops of before. Two-shot variants with fewer cross-rank syncs:
// allreduce_push.cu (symmetric/registered buffers) and allreduce_pipe.cu
// (pipelined through scratch).
// copy_bytes_pieces inlined (coll.cuh): measured faster in this family.
#define SYMM_COPY_PIECES_INLINE
#include "ll.cuh"

template <typename T, int OP>
__device__ void allreduce_body(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  constexpr uint32_t E = vec_elems<T>();
  const bool staged = a.mode & SYMM_COLL_STAGED;
  const bool two_shot = a.mode & SYMM_COLL_TWO_SHOT;
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  // Staged two-shot with SYMM_COLL_OWN_DIRECT (the default; SYMM_ALGO=
  // ownstaged clears it): this rank's slice of each block's share, which
  // only this rank reduces, is read from the input instead of being staged
  // (one-shot: every peer reads all of it). In place the block that reads
  // the slice is the one that later gathers over it, after its syncs.
  const bool own_direct = staged && two_shot && (a.mode & SYMM_COLL_OWN_DIRECT);
  T* recv = reinterpret_cast<T*>(a.recv);
  for (uint64_t base = 0; base < a.count; base += a.chunk) {
    const uint64_t n = min(a.chunk, a.count - base);
    uint64_t lo, hi;
    round_share(min(a.chunk, a.count), n, E, &lo, &hi);
    const uint32_t par = (staged || two_shot) ? next_parity(a) : 0;
    // One-shot: this block's share of the round, into recv. Two-shot: my
    // slice of it, into my scratch.
    uint64_t slo = 0, shi = hi - lo;
    if (two_shot) split_range(hi - lo, E, a.nranks, a.rank, &slo, &shi);
    if (staged) {
      s.tl.mark(SYMM_PHASE_COPY_IN, (uint32_t)(base / a.chunk));
      char* to = scratch_in(a, a.rank, par);
      const char* in = a.send + base * sizeof(T);
      // The share, or with own_direct the share around my slice: up to two
      // ranges through one copy (a copy is inlined deep; written twice it
      // added 1.6 MB to the library).
      const uint64_t cut = own_direct ? slo : hi - lo, resume = own_direct ? shi : hi - lo;
#pragma unroll 1
      for (uint32_t part = 0; part < 2; ++part) {
        const uint64_t first = lo + (part == 0 ? 0 : resume), end = part == 0 ? lo + cut : hi;
        copy_any(classic, to + first * sizeof(T), in + first * sizeof(T), (end - first) * sizeof(T));
      }
    }
    if (!block_sync(a, s)) return;
    // The sources in rank order.
    const T* from[SYMM_MAX_RANKS];
#pragma unroll
    for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
      if (r >= a.nranks) break;
      const T* src = staged ? reinterpret_cast<const T*>(scratch_in(a, r, par)) : reinterpret_cast<const T*>(a.src[r]) + base;
      from[r] = src + lo + slo;
    }
    if (own_direct) from[a.rank] = reinterpret_cast<const T*>(a.send) + base + lo + slo;
    T* dst = two_shot ? reinterpret_cast<T*>(scratch_out(a, a.rank, par)) + lo + slo : recv + base + lo;
    s.tl.mark(SYMM_PHASE_REDUCE, (uint32_t)(base / a.chunk));
    reduce_any<T, OP>(classic, dst, from, a.nranks, a.rank, shi - slo, a.nranks);
    if (!two_shot) continue;
    if (!block_sync(a, s)) return;
    s.tl.mark(SYMM_PHASE_GATHER, (uint32_t)(base / a.chunk));
    for (uint32_t k = 0; k < a.nranks; ++k) {
      const uint32_t r = (a.rank + k) % a.nranks;  // spread the pulls over the peers
      split_range(hi - lo, E, a.nranks, r, &slo, &shi);
      const char* slice = scratch_out(a, r, par) + (lo + slo) * sizeof(T);
      copy_any(classic, a.recv + (base + lo + slo) * sizeof(T), slice, (shi - slo) * sizeof(T));
    }
  }
  SYMM_COLL_EPILOGUE(a, s)
}

SYMM_FOR_EACH_TYPE(SYMM_REDUCE_KERNEL, allreduce)

// LL one-shot for small messages: every rank sends its whole input to every
// peer as LL packets, then reduces what arrived, in rank order. No sync, no
// staging copy, any input buffer (ll.cuh).
template <typename T, int OP>
__device__ void allreduce_ll_body(const SymmCollArgs& a) {
  const LLState s = ll_begin(a);
  const uint64_t n = a.count * sizeof(T), units = (n + 7) / 8, stride = symm_grid_stride();
  for (uint64_t u = symm_thread_index(); u < units; u += stride) {
    const uint2 v = ll_load_unit(a.send, u, n);
    for (uint32_t k = 1; k < a.nranks; ++k) ll_put(ll_slot(a, (a.rank + k) % a.nranks, s.parity, a.rank) + u, v, s.flag);
  }
  bool ok = true;
  // In place is safe: unit u of the input is read (again) by the thread
  // that writes unit u of the output, just before.
  for (uint64_t u = symm_thread_index(); ok && u < units; u += stride) {
    uint2 out;
    ok = ll_reduce_unit<T, OP>(a, s, a.send, u, n, u, &out);
    if (ok) ll_store_unit(a.recv, u, n, out);
  }
  ll_end(a, s, ok);
}

SYMM_FOR_EACH_TYPE(SYMM_REDUCE_KERNEL, allreduce_ll)

// LL two-shot (SYMM_ALGO=ll, from 3 ranks, for messages up to about
// nranks / 2 times the LL slots): rank p owns units [units * p / n,
// units * (p + 1) / n) of the message. Every rank sends each peer that
// peer's share of its input; the owner reduces its share in rank order
// (as the one-shot does: every rank ends with the same bits), stores it
// and sends it to every peer. Each rank sends (n - 1) / n of the message
// twice instead of n - 1 times. A slot: the share coming in [0, share), the
// reduced share coming back [share, 2 share). Every rank owns a unit (the
// host sends no smaller message this way), so each call hears from every
// peer, as the slots' two parities need (ll.cuh). In place is safe: a
// unit of a peer's share is read (step 1) and written (step 3) by the same
// thread, a unit of ours read and written by the same thread in step 2.
template <typename T, int OP>
__device__ void allreduce_ll2_body(const SymmCollArgs& a) {
  const LLState s = ll_begin(a);
  const uint64_t n = a.count * sizeof(T), units = (n + 7) / 8, stride = symm_grid_stride();
  const uint64_t t0 = symm_thread_index(), share = (units + a.nranks - 1) / a.nranks;
  auto begin = [&](uint32_t p) { return units * p / a.nranks; };
  // 1. Each peer's share of our input, to that peer.
  for (uint32_t k = 1; k < a.nranks; ++k) {
    const uint32_t p = (a.rank + k) % a.nranks;
    const uint64_t b0 = begin(p), b1 = begin(p + 1);
    uint4* slot = ll_slot(a, p, s.parity, a.rank);
    for (uint64_t u = b0 + t0; u < b1; u += stride) ll_put(slot + (u - b0), ll_load_unit(a.send, u, n), s.flag);
  }
  // 2. Our share: reduced, stored, and sent back to every peer.
  bool ok = true;
  const uint64_t m0 = begin(a.rank), m1 = begin(a.rank + 1);
  for (uint64_t u = m0 + t0; ok && u < m1; u += stride) {
    uint2 out;
    ok = ll_reduce_unit<T, OP>(a, s, a.send, u, n, u - m0, &out);
    if (!ok) break;
    ll_store_unit(a.recv, u, n, out);
    for (uint32_t k = 1; k < a.nranks; ++k)
      ll_put(ll_slot(a, (a.rank + k) % a.nranks, s.parity, a.rank) + share + (u - m0), out, s.flag);
  }
  // 3. The peers' shares, from their owners.
  for (uint32_t k = 1; ok && k < a.nranks; ++k) {
    const uint32_t p = (a.rank + k) % a.nranks;
    const uint64_t b0 = begin(p), b1 = begin(p + 1);
    const uint4* slot = ll_slot(a, a.rank, s.parity, p) + share;
    for (uint64_t u = b0 + t0; ok && u < b1; u += stride) {
      uint2 v;
      ok = ll_get(a, slot + (u - b0), s.flag, p, &v);
      if (ok) ll_store_unit(a.recv, u, n, v);
    }
  }
  ll_end(a, s, ok);
}

SYMM_FOR_EACH_TYPE(SYMM_REDUCE_KERNEL, allreduce_ll2)
