// All-reduce + residual add + RMSNorm as one kernel above the LL forms, by
// stores (SYMM_ALGO token `normwrite`; src/coll/allreduce_norm_write.rs).
// There the fused op otherwise runs the library's all-reduce and then a
// norm kernel over its output: a second launch and a second pass over
// every row, 6.6-11.8 us over the all-reduce alone at 128 tokens of 8192
// with the ranks co-resident on one H200 (docs/PERFORMANCE.md, twentieth
// session). Here the two-shot LL form's plan (allreduce_norm.cu
// allreduce_norm_ll2) with plain stores into scratch and block syncs
// instead of LL packets, so any message the scratch holds:
//  1. every rank stores the rows each peer owns (norm_owner_begin) into
//     that owner's scratch, in the slot of its own rank;
//  2. after a sync with every peer, the owner sums each of its rows over
//     the ranks in rank order (fp32; its own input from memory), adds ITS
//     residual, stores residual_out and the out row, and stores the
//     rounded residual_out row and the row's sum of squares into every
//     peer's scratch;
//  3. after a second sync every rank normalises the peers' rows from
//     those, so out has the same bits on every rank.
// Each rank's stores carry (n - 1) / n of the message twice, as the
// library's two-shot all-reduce's do, and nothing crosses NVLink but
// stores. As in the two-shot LL form the residual is the owner's: the same
// on every rank in tensor parallelism, which the form assumes.
//
// Blocks: rows of an owner go to blocks by their index in its share
// (i % gridDim.x), the same in every step, so block b of the owner reads
// only what block b of every rank stored, and block syncs (coll.cuh
// block_sync: block b with block b of every peer) suffice; a thread holds
// SYMM_NORM_BATCH_UNITS units of a row (rows of up to 16 KiB), its loads
// asked for together as in the batched entries. A sync at entry too: every
// peer has started this kernel, so none still reads the scratch we store
// into, whichever kernel used it last (as the store-only collectives do;
// allreduce_write.cu). Peers touch only our scratch, so no exit sync: the
// next kernel that stores into it syncs with us first, or takes the other
// scratch half (next_parity).
// Aliasing: out may be the input, residual_out the residual. Block b reads
// the input of the peers' rows in step 1 and writes their out rows in
// step 3 (the same rows: the same block), and each thread of an owned row
// reads its input and residual units before it writes them.
#include "norm.cuh"
#include "pipe.cuh"  // SYMM_FOR_EACH_OPT_IN_TYPE: fp16, fp32, bf16

// Where the rows lie in scratch, for shares of at most `share` rows of
// `rb` bytes: in owner j's in-half, source r's rows of j from
// row_at(r, i); in rank r's out-half, owner j's residual_out rows from
// row_at(j, i), and their sums of squares (floats) from squares_at(j, i),
// after the rows. (src/coll/allreduce_norm_write.rs checks that a half
// holds them.)
struct NormWriteLayout {
  uint64_t share, rb;
  uint32_t nranks;
  __device__ __forceinline__ uint64_t row_at(uint32_t r, uint64_t i) const { return (r * share + i) * rb; }
  __device__ __forceinline__ uint64_t squares_at(uint32_t j, uint64_t i) const {
    return nranks * share * rb + (j * share + i) * 4;
  }
};

// A row of `bytes` (a multiple of 16) from local memory into a peer's
// scratch, two 16-byte vectors a thread asked for before they are stored.
// Not coll.cuh's copy_bytes_by: its eight vectors a thread take this
// kernel, already at the 128 registers of 512 threads, into spilling, and
// the form 0.8-3.7 us slower a call at 300 and 512 tokens (twenty-third
// session, ranks on one GPU).
__device__ __forceinline__ void norm_store_row(char* to, const char* from, uint64_t bytes) {
  constexpr uint32_t V = 2;
  const uint64_t step = (uint64_t)blockDim.x * 16;
  for (uint64_t o = threadIdx.x * 16; o < bytes; o += V * step) {
    uint4 v[V];
#pragma unroll
    for (uint32_t k = 0; k < V; ++k)
      if (o + k * step < bytes) v[k] = *reinterpret_cast<const uint4*>(from + o + k * step);
#pragma unroll
    for (uint32_t k = 0; k < V; ++k)
      if (o + k * step < bytes) *reinterpret_cast<uint4*>(to + o + k * step) = v[k];
  }
}

// With SYMM_NORM_PREFETCH (SYMM_ALGO `normwrite+prefetch`): ask for a
// thread's units of the block's next row in this SM's L1 before working
// on this one. A block with several rows otherwise starts a row's loads
// only after the previous row's stores and block reduction, one round
// trip to L2 or HBM after another; a prefetch holds no register (the
// kernel uses all 128 registers of 512 threads). What it asks for
// is final: the scratch after the block sync that ends the step before.
__device__ __forceinline__ void norm_write_prefetch(const SymmNormArgs& n, const NormPart& p, const char* row) {
  if (!(n.flags & SYMM_NORM_PREFETCH)) return;
#pragma unroll
  for (uint32_t k = 0; k < SYMM_NORM_BATCH_UNITS; ++k) {
    const uint64_t j = p.unit(k);
    if (j >= p.hi) break;
    asm volatile("prefetch.L1 [%0];" ::"l"(row + j * 8));
  }
}

template <typename T, int Q>
__device__ void allreduce_norm_write_body(const SymmNormArgs& n) {
  const SymmCollArgs& a = n.coll;
  constexpr uint32_t E = 8 / sizeof(T);
  constexpr uint32_t U = SYMM_NORM_BATCH_UNITS;
  const uint32_t nr = a.nranks, me = a.rank;
  const uint64_t rows = n.rows, upr = (uint64_t)n.hidden * sizeof(T) / 8;  // units per row
  const NormWriteLayout at{(rows + nr - 1) / nr, upr * 8, nr};
  // Owner p's rows [first(p), first(p) + owned(p)), each taken once per
  // loop below (a 64-bit division apiece).
  auto first = [&](uint32_t p) { return norm_owner_begin(rows, nr, p); };
  auto owned = [&](uint32_t p) { return norm_owner_begin(rows, nr, p + 1) - norm_owner_begin(rows, nr, p); };
  // Launched as a programmatic dependent as the LL kernels are (ll.cuh
  // ll_begin, and why): the stream's previous kernel and its memory first,
  // before the block counters and the descriptors below are touched.
#if __CUDA_ARCH__ >= 900  // sm_80 has no programmatic launch (the host sets none there)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (a.mode & SYMM_COLL_PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  SYMM_COLL_PROLOGUE(a, s)
  if (!block_sync(a, s)) return;
  const uint32_t par = next_parity(a);
  // 1. The peers' rows into their owners' scratch.
  s.tl.mark(SYMM_PHASE_COPY_IN);
  for (uint32_t k = 1; k < nr; ++k) {
    const uint32_t j = (me + k) % nr;  // spread the stores over the links
    char* slot = scratch_in(a, j, par);
    const uint64_t from = first(j), count = owned(j);
    for (uint64_t i = blockIdx.x; i < count; i += gridDim.x)
      norm_store_row(slot + at.row_at(me, i), a.send + (from + i) * at.rb, at.rb);
  }
  if (!block_sync(a, s)) return;
  // The weight's units of a thread: the same in every row.
  uint2 w[U];
  norm_batch_load(n, whole_row(0, upr), nullptr, nullptr, w);
  // 2. Our rows: every rank's units in rank order, the residual, out; the
  //    rounded residual_out units and the row's sum of squares to every peer.
  s.tl.mark(SYMM_PHASE_REDUCE);
  const char* in = scratch_in(a, me, par);
  const uint64_t my_first = first(me), my_rows = owned(me);
  for (uint64_t i = blockIdx.x; i < my_rows; i += gridDim.x) {
    const NormPart p = whole_row(my_first + i, upr);
    uint2 mine[U], res[U];
    norm_batch_load(n, p, mine, res, nullptr);
    if ((n.flags & SYMM_NORM_PREFETCH) && i + gridDim.x < my_rows) {  // the next row's: every rank's units, the residual's
      const NormPart q = whole_row(p.row + gridDim.x, upr);
      for (uint32_t r = 0; r < nr; ++r)
        norm_write_prefetch(n, q, r == me ? a.send + q.row * at.rb : in + at.row_at(r, i + gridDim.x));
      norm_write_prefetch(n, q, n.residual + q.row * at.rb);
    }
    float x[U][E];
#pragma unroll
    for (uint32_t r = 0; r < SYMM_MAX_RANKS; ++r) {
      if (r >= nr) break;
      uint2 v[U];
      if (r == me) {
#pragma unroll
        for (uint32_t k = 0; k < U; ++k) v[k] = mine[k];
      } else {
        norm_load_part(p, in + at.row_at(r, i), v);
      }
      norm_accumulate<T>(x, v, r);
    }
    auto send = [&](uint64_t j, uint2 u) {
      for (uint32_t k = 1; k < nr; ++k)
        *reinterpret_cast<uint2*>(scratch_out(a, (me + k) % nr, par) + at.row_at(me, i) + j * 8) = u;
    };
    const float squares = norm_block_reduce<false>(norm_add_residual<T>(n, p, x, send, [&](uint32_t k) { return res[k]; }));
    const uint32_t q = threadIdx.x;
    if (q < nr && q != me) *reinterpret_cast<float*>(scratch_out(a, q, par) + at.squares_at(me, i)) = squares;
    norm_scale_row<T, Q>(n, p, x, squares, [&](uint32_t k) { return w[k]; });
  }
  if (!block_sync(a, s)) return;
  // 3. The peers' rows from what their owners stored here.
  s.tl.mark(SYMM_PHASE_GATHER);
  const char* back = scratch_out(a, me, par);
  for (uint32_t k = 1; k < nr; ++k) {
    const uint32_t j = (me + k) % nr;
    const uint64_t from = first(j), count = owned(j);
    for (uint64_t i = blockIdx.x; i < count; i += gridDim.x) {
      const NormPart p = whole_row(from + i, upr);
      uint2 v[U];
      norm_load_part(p, back + at.row_at(j, i), v);
      if (i + gridDim.x < count) norm_write_prefetch(n, p, back + at.row_at(j, i + gridDim.x));  // the next row's
      const float squares = *reinterpret_cast<const float*>(back + at.squares_at(j, i));
      float x[U][E];
#pragma unroll
      for (uint32_t k2 = 0; k2 < U; ++k2) {
        const uint64_t u = p.unit(k2);
        if (u < p.hi) *reinterpret_cast<uint2*>(n.residual_out + (p.row * upr + u) * 8) = v[k2];  // the owner's bits
        LLUnit<T> in;
        in.u = v[k2];
#pragma unroll
        for (uint32_t e = 0; e < E; ++e) x[k2][e] = to_acc(in.e[e]);
      }
      norm_scale_row<T, Q>(n, p, x, squares, [&](uint32_t k2) { return w[k2]; });
    }
  }
  sync_end(a, s);
}

#define SYMM_NORM_WRITE_KERNEL(family, suffix, T)                                                         \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_BATCH_THREADS) symm_allreduce_norm_write_##suffix(SymmNormArgs n) { \
    SYMM_NORM_QUANT_SWITCH(allreduce_norm_write_body, T)                                                   \
  }

SYMM_FOR_EACH_OPT_IN_TYPE(SYMM_NORM_WRITE_KERNEL, norm_write)
