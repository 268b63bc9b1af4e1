// All-reduce two-shot, pipelined (SYMM_ALGO=pipe; protocol in pipe.cuh).
//
// Scratch of rank r: [input slots | output slots], SYMM_PIPE_SLOTS of each
// in the two in-halves and the two out-halves. Chunk q of the call uses
// slots q % S. Per chunk, block b of rank r:
//   1. (staged) its share of chunk q is in its input slot (copied in during
//      the previous step) -- wait for every peer's IN_READY(q);
//   2. waits until every peer has gathered chunk q - S out of its output
//      slot (GATHERED; only from the kernel's S-th chunk on), reduces
//      slice r of its share from every rank's input slot (or, with a
//      symmetric/registered input, from the peers' inputs directly) into
//      its output slot, publishes REDUCED(q);
//   3. (staged) copies its share of chunk q + 1 into input slot (q+1) % S,
//      once every peer has reduced chunk q + 1 - S (REDUCED; ditto), publishes
//      IN_READY(q + 1): the copy-in overlaps the peers' reductions;
//   4. waits for every peer's REDUCED(q), copies every rank's slice of its
//      share into the output (starting with its own, then the peers in
//      turn), publishes GATHERED(q).
// Syncs of the whole block with the peers: one at entry (descriptor check,
// and the peers are past every earlier kernel), none per chunk; the kernel
// publishes every kind of flag up to its last chunk (pipe_publish_all) and
// ends after every peer's GATHERED of the last chunk (exit wait), which
// also covers their reads of a direct input.
#include "pipe.cuh"

template <typename T, int OP>
__device__ void allreduce_pipe_body(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  constexpr uint32_t E = vec_elems<T>();
  constexpr uint64_t sz = sizeof(T);
  const bool staged = a.mode & SYMM_COLL_STAGED;
  const uint64_t slot_bytes = 2 * a.half / SYMM_PIPE_SLOTS;
  const uint64_t full = min(a.chunk, a.count);
  const uint32_t nchunks = (uint32_t)((a.count + a.chunk - 1) / a.chunk);
  if (!block_sync(a, s)) return;
  const uint32_t seq0 = pipe_begin(a);
  auto in_slot = [&](uint32_t r, uint32_t q) { return a.scratch[r] + (uint64_t)(q % SYMM_PIPE_SLOTS) * slot_bytes; };
  auto out_slot = [&](uint32_t r, uint32_t q) {
    return a.scratch[r] + 2 * a.half + (uint64_t)(q % SYMM_PIPE_SLOTS) * slot_bytes;
  };
  // This block's share [lo, hi) of chunk k: the same offsets in every chunk.
  auto share = [&](uint32_t k, uint64_t* lo, uint64_t* hi) {
    const uint64_t base = (uint64_t)k * a.chunk;
    round_share(full, min(a.chunk, a.count - base), E, lo, hi);
  };
  auto copy_in = [&](uint32_t k) {
    uint64_t lo, hi;
    share(k, &lo, &hi);
    s.tl.mark(SYMM_PHASE_COPY_IN, k);
    copy_bytes(in_slot(a.rank, seq0 + k) + lo * sz, a.send + ((uint64_t)k * a.chunk + lo) * sz, (hi - lo) * sz);
  };
  if (staged) {
    copy_in(0);
    pipe_publish(a, SYMM_PIPE_IN_READY, seq0 + 1);
  }
  for (uint32_t k = 0; k < nchunks; ++k) {
    const uint32_t q = seq0 + k;
    const uint64_t base = (uint64_t)k * a.chunk;
    uint64_t lo, hi, slo, shi;
    share(k, &lo, &hi);
    split_range(hi - lo, E, a.nranks, a.rank, &slo, &shi);
    s.tl.mark(SYMM_PHASE_WAIT, k);
    if (staged && !pipe_wait(a, SYMM_PIPE_IN_READY, q + 1)) return;
    if (!pipe_wait_slot(a, SYMM_PIPE_GATHERED, k, q + 1 - SYMM_PIPE_SLOTS)) return;
    const T* from[SYMM_MAX_RANKS];
#pragma unroll
    for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
      if (r >= a.nranks) break;
      from[r] = staged ? reinterpret_cast<const T*>(in_slot(r, q)) + lo + slo
                       : reinterpret_cast<const T*>(a.src[r]) + base + lo + slo;
    }
    T* mine = reinterpret_cast<T*>(out_slot(a.rank, q)) + lo + slo;
    s.tl.mark(SYMM_PHASE_REDUCE, k);
    reduce_to<T, OP>(&mine, 1, from, a.nranks, a.rank, shi - slo, a.nranks);
    pipe_publish(a, SYMM_PIPE_REDUCED, q + 1);
    if (staged && k + 1 < nchunks) {
      s.tl.mark(SYMM_PHASE_WAIT, k + 1);
      if (!pipe_wait_slot(a, SYMM_PIPE_REDUCED, k + 1, q + 2 - SYMM_PIPE_SLOTS)) return;
      copy_in(k + 1);
      pipe_publish(a, SYMM_PIPE_IN_READY, q + 2);
    }
    s.tl.mark(SYMM_PHASE_WAIT, k);
    if (!pipe_wait(a, SYMM_PIPE_REDUCED, q + 1)) return;
    s.tl.mark(SYMM_PHASE_GATHER, k);
    for (uint32_t j = 0; j < a.nranks; ++j) {
      const uint32_t r = (a.rank + j) % a.nranks;  // own slice first, then the peers in turn
      uint64_t rlo, rhi;
      split_range(hi - lo, E, a.nranks, r, &rlo, &rhi);
      copy_bytes(a.recv + (base + lo + rlo) * sz, out_slot(r, q) + (lo + rlo) * sz, (rhi - rlo) * sz);
    }
    pipe_publish(a, SYMM_PIPE_GATHERED, q + 1);
  }
  pipe_publish_all(a, seq0 + nchunks);  // a direct input published no IN_READY
  s.tl.mark(SYMM_PHASE_WAIT, nchunks);
  if (!pipe_wait(a, SYMM_PIPE_GATHERED, seq0 + nchunks)) return;
  pipe_end(a, seq0 + nchunks);
  sync_end(a, s);
}

SYMM_FOR_EACH_OPT_IN_TYPE(SYMM_REDUCE_KERNEL, allreduce_pipe)
