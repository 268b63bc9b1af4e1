// All-gather: block r (a.count elements) of every rank's output is rank r's
// input. With SYMM_COLL_PROGRESS the work is cut into units of a.unit
// elements and, as each unit of each rank lands in this rank's output, the
// flag progress[r * units_per_rank + unit] is set to 1 (release, system
// scope), so a consumer on another stream can start on it.
#include "ll.cuh"

SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_allgather(SymmCollArgs a) {
  SYMM_COLL_PROLOGUE(a, s)
  const uint64_t sz = a.elem_size;
  const bool staged = a.mode & SYMM_COLL_STAGED;
  const bool progress = a.mode & SYMM_COLL_PROGRESS;
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  const uint64_t units_per_rank = progress ? (a.count + a.unit - 1) / a.unit : 0;
  for (uint64_t base = 0; base < a.count; base += a.chunk) {
    const uint64_t n = min(a.chunk, a.count - base);
    // Work units of this round: a.unit elements each (progress mode), or
    // one even share per block of a full round. Block b owns units b,
    // b + grid, ... on every rank and in every round, so its copy-in and
    // its pulls cover the same data and the same part of scratch (see
    // next_parity).
    uint64_t unit = a.unit;
    if (!progress) {
      const uint64_t full = min(a.chunk, a.count);
      uint64_t lo, hi;
      split_range(full * sz, 16, gridDim.x, 0, &lo, &hi);
      unit = (hi - lo) / sz;
      if (unit == 0) unit = full;
    }
    const uint32_t par = staged ? next_parity(a) : 0;
    if (staged) {
      s.tl.mark(SYMM_PHASE_COPY_IN, (uint32_t)(base / a.chunk));
      for (uint64_t u = blockIdx.x; u * unit < n; u += gridDim.x) {
        const uint64_t len = min(unit, n - u * unit);
        copy_any(classic, scratch_in(a, a.rank, par) + u * unit * sz, a.send + (base + u * unit) * sz, len * sz);
      }
    }
    if (!block_sync(a, s)) return;
    s.tl.mark(SYMM_PHASE_GATHER, (uint32_t)(base / a.chunk));
    for (uint64_t u = blockIdx.x; u * unit < n; u += gridDim.x) {
      const uint64_t off = base + u * unit, len = min(unit, n - u * unit);
      for (uint32_t k = 0; k < a.nranks; ++k) {
        const uint32_t r = (a.rank + k) % a.nranks;  // own block first, then the peers in turn
        const char* from = r == a.rank ? a.send + off * sz
                           : staged    ? scratch_in(a, r, par) + u * unit * sz
                                       : a.src[r] + off * sz;
        copy_any(classic, a.recv + (r * a.count + off) * sz, from, len * sz);
        if (progress) {
          __syncthreads();
          if (threadIdx.x == 0) {
            __threadfence_system();
            symm_st_release_sys(a.progress + r * units_per_rank + off / a.unit, 1u);
          }
        }
      }
    }
  }
  SYMM_COLL_EPILOGUE(a, s)
}

// Push (`auto` at 2 and 4 ranks, SYMM_ALGO=push; recv symmetric/registered
// on every rank, send any buffer, in place too; NCCL's symmetric
// "AllGather_ST" does the same): each rank stores its own
// block into every rank's output (a.scratch[r]: rank r's recvbuff as seen
// here), so the bytes cross NVLink as posted writes instead of loads that
// wait a round trip. The entry sync makes sure every peer has entered
// this call (its stream is done with its recvbuff); the exit sync
// (SYMM_COLL_END_SYNC) that every peer's stores into this rank's output
// have landed. Block b stores the same share of the block on every rank.
SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_allgather_push(SymmCollArgs a) {
  SYMM_COLL_PROLOGUE(a, s)
  if (!block_sync(a, s)) return;
  const uint64_t n = a.count * a.elem_size;
  const bool classic = a.mode & SYMM_COLL_CLASSIC;
  uint64_t lo, hi;
  split_range(n, 16, gridDim.x, blockIdx.x, &lo, &hi);
  s.tl.mark(SYMM_PHASE_GATHER);
  for (uint32_t k = 0; k < a.nranks && lo < hi; ++k) {
    const uint32_t r = (a.rank + 1 + k) % a.nranks;  // the peers in turn, the own copy last
    char* to = a.scratch[r] + a.rank * n + lo;
    if (to != a.send + lo) copy_any(classic, to, a.send + lo, hi - lo, true);  // in place: already there
  }
  SYMM_COLL_EPILOGUE(a, s)
}

// LL for small blocks: every rank sends its input to every peer as LL
// packets; each rank copies its own block locally and unpacks the others.
SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_allgather_ll(SymmCollArgs a) {
  const LLState s = ll_begin(a);
  const uint64_t n = a.count * a.elem_size, units = (n + 7) / 8, stride = symm_grid_stride();
  for (uint64_t u = symm_thread_index(); u < units; u += stride) {
    const uint2 v = ll_load_unit(a.send, u, n);
    for (uint32_t k = 1; k < a.nranks; ++k) ll_put(ll_slot(a, (a.rank + k) % a.nranks, s.parity, a.rank) + u, v, s.flag);
    // In place (send = recv + rank * n) this stores what was just read.
    ll_store_unit(a.recv + a.rank * n, u, n, v);
  }
  ll_end(a, s, ll_unpack_peers(a, s, a.recv, n));
}
