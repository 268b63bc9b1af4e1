// All-to-all with equal blocks: block r of rank q's output is block q of
// rank r's input (a.count elements per block).
#include "ll.cuh"

// Staged with SYMM_COLL_OWN_DIRECT (the default; SYMM_ALGO=ownstaged
// clears it): this rank's own block, which no peer reads, is not staged.
// Out of place it goes from the input to the output after the peers'
// blocks are pulled (so the copy-in, before the sync the peers wait on, is
// shorter); exactly in place it is already where it belongs. The host sets
// the bit only without any other overlap of the buffers: the own copy
// writes the output while other blocks may still stage the input.
SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_alltoall(SymmCollArgs a) {
  SYMM_COLL_PROLOGUE(a, s)
  const uint64_t sz = a.elem_size;
  const bool staged = a.mode & SYMM_COLL_STAGED;
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  const bool own_direct = staged && (a.mode & SYMM_COLL_OWN_DIRECT);
  for (uint64_t base = 0; base < a.count; base += a.chunk) {
    const uint64_t n = min(a.chunk, a.count - base);
    uint64_t lo, hi;
    round_share(min(a.chunk, a.count) * sz, n * sz, 16, &lo, &hi);
    const uint32_t par = staged ? next_parity(a) : 0;
    if (staged) {
      // Scratch holds block j of this round at j * a.chunk elements.
      s.tl.mark(SYMM_PHASE_COPY_IN, (uint32_t)(base / a.chunk));
      for (uint32_t j = 0; j < a.nranks; ++j)
        if (!own_direct || j != a.rank)
          copy_any(classic, scratch_in(a, a.rank, par) + j * a.chunk * sz + lo,
                   a.send + (j * a.count + base) * sz + lo, hi - lo);
    }
    if (!block_sync(a, s)) return;
    s.tl.mark(SYMM_PHASE_GATHER, (uint32_t)(base / a.chunk));
    for (uint32_t k = 0; k < a.nranks; ++k) {
      const uint32_t r = (a.rank + k) % a.nranks;
      if (own_direct && r == a.rank) continue;  // below
      const char* from = staged ? scratch_in(a, r, par) + a.rank * a.chunk * sz
                                : a.src[r] + (a.rank * a.count + base) * sz;
      copy_any(classic, a.recv + (r * a.count + base) * sz + lo, from + lo, hi - lo);
    }
    const uint64_t own = (a.rank * a.count + base) * sz + lo;
    if (own_direct && a.send != a.recv) copy_any(classic, a.recv + own, a.send + own, hi - lo);
  }
  SYMM_COLL_EPILOGUE(a, s)
}

// LL for small blocks (`auto` and SYMM_ALGO=ll, out of place without overlap): every
// rank sends block r of its input to rank r as LL packets, copies its own
// block locally, and unpacks what each peer sent into block p of its
// output: no cross-rank sync, the reduce-scatter LL kernel without the
// reduction. In place (send = recv) is safe: unit u of every block is read
// (sent, or copied for the own block) and later written (unpacked) by the
// same thread, which sends all of its units before it unpacks any. A
// partial overlap is not (a unit's address would belong to another
// thread's unit of another block): the host keeps that case on the synced
// kernel.
SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_alltoall_ll(SymmCollArgs a) {
  const LLState s = ll_begin(a);
  const uint64_t n = a.count * a.elem_size, units = (n + 7) / 8, stride = symm_grid_stride();
  for (uint64_t u = symm_thread_index(); u < units; u += stride) {
    for (uint32_t k = 1; k < a.nranks; ++k) {
      const uint32_t r = (a.rank + k) % a.nranks;
      ll_put(ll_slot(a, r, s.parity, a.rank) + u, ll_load_unit(a.send + r * n, u, n), s.flag);
    }
    ll_store_unit(a.recv + a.rank * n, u, n, ll_load_unit(a.send + a.rank * n, u, n));
  }
  ll_end(a, s, ll_unpack_peers(a, s, a.recv, n));
}
