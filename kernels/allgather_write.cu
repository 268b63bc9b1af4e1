// All-gather by stores only into scratch (SYMM_ALGO=write, tenth session):
// any input, any output. The push (allgather.cu symm_allgather_push) stores
// straight into the peers' outputs, so it needs a symmetric or registered
// recvbuff; for any other the pull (symm_allgather) loads the peers'
// staged blocks across NVLink, 0.56-0.71x NCCL at 3 ranks and 0.84-0.97x at
// 4 from 4 MiB on 4 x H200 (docs/PERFORMANCE.md, tenth session). Here:
//  1. scatter: rank r stores its round part into every peer's scratch half,
//     in the slot of source r, and copies it into its own output block;
//  2. after a sync with every peer (their parts have landed), it copies
//     the peers' slots of its own scratch into their output blocks: local
//     memory only.
// Rounds, parity and pipelining as in reduce_scatter_write.cu
// (write_rounds.cuh: round k + 1 is stored before round k is copied out);
// peers touch only scratch, so no exit sync. In place (sendbuff = recvbuff
// + rank * count) the own copy is skipped: the block is already there, and
// the copies out write only the other blocks.
#include "write_rounds.cuh"

// This block's part [*lo, *hi) of round `base`, in bytes of a block.
__device__ __forceinline__ void ag_write_part(const SymmCollArgs& a, uint64_t base, uint64_t* lo, uint64_t* hi) {
  const uint64_t sz = a.elem_size;
  round_share(min(a.chunk, a.count) * sz, min(a.chunk, a.count - base) * sz, 16, lo, hi);
}

template <bool PIECES>
__device__ __noinline__ void ag_write_scatter(const SymmCollArgs& a, bool classic, uint64_t base, uint32_t par) {
  const uint64_t sz = a.elem_size;
  uint64_t lo, hi;
  ag_write_part(a, base, &lo, &hi);
  const char* from = a.send + base * sz + lo;
  for (uint32_t k = 1; k < a.nranks; ++k) {
    const uint32_t j = (a.rank + k) % a.nranks;  // spread the stores over the links
    copy_any<PIECES>(classic, scratch_in(a, j, par) + a.rank * a.chunk * sz + lo, from, hi - lo, true);
  }
  char* own = a.recv + (a.rank * a.count + base) * sz + lo;
  if (own != from) copy_any<PIECES>(classic, own, from, hi - lo);
}

template <bool PIECES>
__device__ __noinline__ void ag_write_copy_out(const SymmCollArgs& a, bool classic, uint64_t base, uint32_t par) {
  const uint64_t sz = a.elem_size;
  uint64_t lo, hi;
  ag_write_part(a, base, &lo, &hi);
  for (uint32_t k = 1; k < a.nranks; ++k) {
    const uint32_t r = (a.rank + k) % a.nranks;
    copy_any<PIECES>(classic, a.recv + (r * a.count + base) * sz + lo, scratch_in(a, a.rank, par) + r * a.chunk * sz + lo,
             hi - lo);
  }
}

template <bool PIECES>
__device__ __forceinline__ void allgather_write_run(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  // Entry: every peer has started this kernel, so none still reads the
  // scratch we are about to store into, whichever kernel used it last.
  if (!block_sync(a, s)) return;
  const bool ok = store_only_rounds(
      a, s, [&](uint64_t base, uint32_t par) { ag_write_scatter<PIECES>(a, classic, base, par); },
      [&](uint64_t base, uint32_t par) { ag_write_copy_out<PIECES>(a, classic, base, par); });
  if (!ok) return;
  SYMM_COLL_EPILOGUE(a, s)
}

// The instance without the pieces loops where every block is aligned
// (write_rounds.cuh vectors_everywhere).
SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_allgather_write(SymmCollArgs a) {
  if (vectors_everywhere(a, a.elem_size))
    allgather_write_run<false>(a);
  else
    allgather_write_run<true>(a);
}
