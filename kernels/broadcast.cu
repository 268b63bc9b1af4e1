// Broadcast: every rank's output is the root's input.
#include "coll.cuh"

SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_broadcast(SymmCollArgs a) {
  SYMM_COLL_PROLOGUE(a, s)
  const uint64_t sz = a.elem_size;
  const bool staged = a.mode & SYMM_COLL_STAGED;
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  for (uint64_t base = 0; base < a.count; base += a.chunk) {
    const uint64_t n = min(a.chunk, a.count - base);
    uint64_t lo, hi;
    round_share(min(a.chunk, a.count) * sz, n * sz, 16, &lo, &hi);
    const uint32_t par = staged ? next_parity(a) : 0;
    if (staged && a.rank == a.root) {
      s.tl.mark(SYMM_PHASE_COPY_IN, (uint32_t)(base / a.chunk));
      copy_any(classic, scratch_in(a, a.rank, par) + lo, a.send + base * sz + lo, hi - lo);
    }
    if (!block_sync(a, s)) return;
    s.tl.mark(SYMM_PHASE_GATHER, (uint32_t)(base / a.chunk));
    const char* from = a.rank == a.root ? a.send + base * sz
                       : staged         ? scratch_in(a, a.root, par)
                                        : a.src[a.root] + base * sz;
    copy_any(classic, a.recv + base * sz + lo, from + lo, hi - lo);
  }
  SYMM_COLL_EPILOGUE(a, s)
}
