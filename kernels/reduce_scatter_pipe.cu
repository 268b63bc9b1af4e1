// Reduce-scatter of staged (plain) inputs, pipelined (SYMM_ALGO=pipe;
// protocol in pipe.cuh). Symmetric/registered inputs need no pipeline: the
// reduce-scatter kernel reads them where they are, with a sync at entry
// and exit only (reduce_scatter.cu).
//
// Rank r's scratch holds SYMM_PIPE_SLOTS input slots (one scratch half
// each); chunk q of the call goes to slot q % S, destination block j of the
// chunk at j * a.chunk elements. Per chunk, block b of rank r waits for
// every peer's IN_READY(q), reduces its share of block r of the chunk from
// every rank's slot into the output, publishes REDUCED(q), and then copies
// its share of chunk q + 1 in (once every peer has REDUCED chunk
// q + 1 - S, the slot's previous user, if this kernel's) and publishes
// IN_READY(q + 1). One whole-block sync at entry; the kernel publishes
// every kind of flag up to its last chunk (GATHERED too, which it has no
// use for but the all-reduce waits on) and ends after every peer's REDUCED
// of the last chunk.
// copy_bytes_pieces inlined (coll.cuh): measured faster in this family.
#define SYMM_COPY_PIECES_INLINE
#include "pipe.cuh"

template <typename T, int OP>
__device__ void reduce_scatter_pipe_body(const SymmCollArgs& a) {
  SYMM_COLL_PROLOGUE(a, s)
  constexpr uint32_t E = vec_elems<T>();
  constexpr uint64_t sz = sizeof(T);
  const uint64_t full = min(a.chunk, a.count);
  const uint32_t nchunks = (uint32_t)((a.count + a.chunk - 1) / a.chunk);
  if (!block_sync(a, s)) return;
  const uint32_t seq0 = pipe_begin(a);
  auto slot = [&](uint32_t r, uint32_t q) { return a.scratch[r] + (uint64_t)(q % SYMM_PIPE_SLOTS) * a.half; };
  auto share = [&](uint32_t k, uint64_t* lo, uint64_t* hi) {
    const uint64_t base = (uint64_t)k * a.chunk;
    round_share(full, min(a.chunk, a.count - base), E, lo, hi);
  };
  auto copy_in = [&](uint32_t k) {
    uint64_t lo, hi;
    share(k, &lo, &hi);
    s.tl.mark(SYMM_PHASE_COPY_IN, k);
    for (uint32_t j = 0; j < a.nranks; ++j)
      copy_bytes(slot(a.rank, seq0 + k) + ((uint64_t)j * a.chunk + lo) * sz,
                 a.send + ((uint64_t)j * a.count + (uint64_t)k * a.chunk + lo) * sz, (hi - lo) * sz);
  };
  copy_in(0);
  pipe_publish(a, SYMM_PIPE_IN_READY, seq0 + 1);
  for (uint32_t k = 0; k < nchunks; ++k) {
    const uint32_t q = seq0 + k;
    uint64_t lo, hi;
    share(k, &lo, &hi);
    s.tl.mark(SYMM_PHASE_WAIT, k);
    if (!pipe_wait(a, SYMM_PIPE_IN_READY, q + 1)) return;
    const T* from[SYMM_MAX_RANKS];
#pragma unroll
    for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
      if (r >= a.nranks) break;
      from[r] = reinterpret_cast<const T*>(slot(r, q)) + (uint64_t)a.rank * a.chunk + lo;
    }
    T* out = reinterpret_cast<T*>(a.recv) + (uint64_t)k * a.chunk + lo;
    s.tl.mark(SYMM_PHASE_REDUCE, k);
    reduce_to<T, OP>(&out, 1, from, a.nranks, a.rank, hi - lo, a.nranks);
    pipe_publish(a, SYMM_PIPE_REDUCED, q + 1);
    if (k + 1 < nchunks) {
      s.tl.mark(SYMM_PHASE_WAIT, k + 1);
      if (!pipe_wait_slot(a, SYMM_PIPE_REDUCED, k + 1, q + 2 - SYMM_PIPE_SLOTS)) return;
      copy_in(k + 1);
      pipe_publish(a, SYMM_PIPE_IN_READY, q + 2);
    }
  }
  pipe_publish_all(a, seq0 + nchunks);  // GATHERED too, which all-reduces wait on
  s.tl.mark(SYMM_PHASE_WAIT, nchunks);
  if (!pipe_wait(a, SYMM_PIPE_REDUCED, seq0 + nchunks)) return;
  pipe_end(a, seq0 + nchunks);
  sync_end(a, s);
}

SYMM_FOR_EACH_OPT_IN_TYPE(SYMM_REDUCE_KERNEL, reduce_scatter_pipe)
