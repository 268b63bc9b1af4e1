// The row arithmetic of the fused all-reduce + RMSNorm, shared by its
// kernel families (allreduce_norm.cu: the LL forms and the norm kernel;
// allreduce_norm_write.cu: the two-shot form by stores): a row held in
// registers, a unit (8 bytes) per thread and step; the residual add, the
// sum of squares, the scaling by the weight, and the fp8 outputs.
#pragma once
#include "ll.cuh"  // LLUnit, and coll.cuh's to_acc / from_acc

// The batched entries' largest block, and the units a thread of one holds
// at most (so rows of up to 16 KiB in 512 threads).
#define SYMM_NORM_BATCH_THREADS 512
#define SYMM_NORM_BATCH_UNITS 4

// Sum (or, MAX, the max) of v over the block, in every thread (blockDim.x
// a multiple of 32).
template <bool MAX>
__device__ __forceinline__ float norm_block_reduce(float v) {
  __shared__ float part[SYMM_NORM_MAX_THREADS / 32];
  auto op = [](float x, float y) { return MAX ? fmaxf(x, y) : x + y; };
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // part[] of the previous reduction has been read
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? part[lane] : 0.f;  // 0 is neutral for both (|y| >= 0)
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// E fp8 e4m3 values of one unit, stored together (E * 1 byte).
template <uint32_t E> union Fp8Unit {
  __nv_fp8_e4m3 e[E];
  typename std::conditional<E == 4, uint32_t, uint16_t>::type u;
};

// What one block holds of a row: units [lo, hi) of row `row`, a row
// being upr units. The whole row, or with SYMM_NORM_SPREAD's parts one of
// several pieces (the two-shot form). Thread t holds units lo + t + k *
// blockDim.x (its x[k]).
struct NormPart {
  uint64_t row, upr, lo, hi;
  __device__ __forceinline__ uint64_t unit(uint32_t k) const { return lo + threadIdx.x + (uint64_t)k * blockDim.x; }
};
__device__ __forceinline__ NormPart whole_row(uint64_t row, uint64_t upr) { return NormPart{row, upr, 0, upr}; }

// The part's sums are in x: add the residual, store residual_out and keep
// its rounded values in x; `sent(j, unit)` sees every residual_out unit
// (the two-shot form sends it to the peers). The residual's units come
// from memory, or with `held` from the thread's registers (the batched
// entry: held(k) is its unit k). Returns the thread's sum of squares.
template <typename T, uint32_t U, typename Sent, typename Held = std::nullptr_t>
__device__ __forceinline__ float norm_add_residual(const SymmNormArgs& n, const NormPart& p, float (&x)[U][8 / sizeof(T)],
                                                   Sent sent, Held held = nullptr) {
  constexpr uint32_t E = 8 / sizeof(T);
  float ss = 0.f;
#pragma unroll
  for (uint32_t k = 0; k < U; ++k) {
    const uint64_t j = p.unit(k);
    if (j >= p.hi) break;
    const uint64_t off = (p.row * p.upr + j) * 8;
    LLUnit<T> res, out;
    if constexpr (std::is_same<Held, std::nullptr_t>::value) res.u = *reinterpret_cast<const uint2*>(n.residual + off);
    else res.u = held(k);
#pragma unroll
    for (uint32_t e = 0; e < E; ++e) {
      const float v = x[k][e] + to_acc(res.e[e]);
      ss += v * v;
      out.e[e] = from_acc<T>(v);
      x[k][e] = to_acc(out.e[e]);  // normalise what residual_out holds
    }
    *reinterpret_cast<uint2*>(n.residual_out + off) = out.u;
    sent(j, out.u);
  }
  return ss;
}

// Normalise the part from residual_out's values in x (squares: the whole
// row's sum of squares) and store out. Every thread of the block calls it
// (block reduction for the fp8 per-token scale, which needs the whole row
// in the block).
// The weight's units come from memory, or with `held` from registers.
template <typename T, int Q, uint32_t U, typename Held = std::nullptr_t>
__device__ __forceinline__ void norm_scale_row(const SymmNormArgs& n, const NormPart& p, float (&x)[U][8 / sizeof(T)],
                                               float squares, Held held = nullptr) {
  constexpr uint32_t E = 8 / sizeof(T);
  const float inv = rsqrtf(squares / (float)n.hidden + n.eps);
  float amax = 0.f;
#pragma unroll
  for (uint32_t k = 0; k < U; ++k) {
    const uint64_t j = p.unit(k);
    if (j >= p.hi) break;
    LLUnit<T> w, out;
    if constexpr (std::is_same<Held, std::nullptr_t>::value) w.u = *reinterpret_cast<const uint2*>(n.weight + j * 8);
    else w.u = held(k);
#pragma unroll
    for (uint32_t e = 0; e < E; ++e) {
      x[k][e] = x[k][e] * inv * to_acc(w.e[e]);  // y, kept for the fp8 outputs
      out.e[e] = from_acc<T>(x[k][e]);
      amax = fmaxf(amax, fabsf(x[k][e]));
    }
    if (Q == SYMM_NORM_SAME_TYPE) *reinterpret_cast<uint2*>(n.coll.recv + (p.row * p.upr + j) * 8) = out.u;
  }
  if (Q == SYMM_NORM_SAME_TYPE) return;
  // fp8: y / scale, saturated to e4m3's +-448. Per token, the scale makes
  // the row's largest |y| 448 (at least 1 / (448 * 512), as vLLM's dynamic
  // per-token quantisation keeps it).
  float scale;
  if (Q == SYMM_NORM_FP8_TOKEN) {
    scale = fmaxf(norm_block_reduce<true>(amax) / 448.f, 1.f / (448.f * 512.f));
    if (threadIdx.x == 0) n.scales[p.row] = scale;
  } else {
    scale = n.scales[0];
  }
  const float rcp = 1.f / scale;
#pragma unroll
  for (uint32_t k = 0; k < U; ++k) {
    const uint64_t j = p.unit(k);
    if (j >= p.hi) break;
    Fp8Unit<E> q;
#pragma unroll
    for (uint32_t e = 0; e < E; ++e) q.e[e] = __nv_fp8_e4m3(x[k][e] * rcp);  // saturates (satfinite)
    *reinterpret_cast<decltype(q.u)*>(n.coll.recv + (p.row * p.upr + j) * E) = q.u;
  }
}

// A thread's units of the part from `row` (the row's first byte: a row
// of the input, the residual or scratch; the weight, whose one row every
// row shares), asked for together; zeros past the part.
__device__ __forceinline__ void norm_load_part(const NormPart& p, const char* row, uint2* v) {
#pragma unroll
  for (uint32_t k = 0; k < SYMM_NORM_BATCH_UNITS; ++k) {
    const uint64_t j = p.unit(k);
    v[k] = j < p.hi ? *reinterpret_cast<const uint2*>(row + j * 8) : make_uint2(0, 0);
  }
}

// A thread's units of the part, each of this rank's input (`mine`, for
// the sums), the residual's (`res`) and the weight's (`w`), asked for
// together (no store between them, so the loads are all in flight at
// once); zeros past the part. A null array is not loaded.
__device__ __forceinline__ void norm_batch_load(const SymmNormArgs& n, const NormPart& p, uint2* mine, uint2* res,
                                                uint2* w) {
  const uint64_t row = p.row * p.upr * 8;
  if (mine) norm_load_part(p, n.coll.send + row, mine);
  if (res) norm_load_part(p, n.residual + row, res);
  if (w) norm_load_part(p, n.weight, w);
}

// Rank r's units v of a part added into x (x[k] = v[k] for rank 0): every
// rank's units combined in rank order, so every rank sums the same bits.
template <typename T, uint32_t U>
__device__ __forceinline__ void norm_accumulate(float (&x)[U][8 / sizeof(T)], const uint2 (&v)[U], uint32_t r) {
#pragma unroll
  for (uint32_t k = 0; k < U; ++k) {
    LLUnit<T> in;
    in.u = v[k];
#pragma unroll
    for (uint32_t e = 0; e < 8 / sizeof(T); ++e) x[k][e] = r == 0 ? to_acc(in.e[e]) : x[k][e] + to_acc(in.e[e]);
  }
}

// The two-shot forms' owner of rows (LL and by stores): rank p owns
// [norm_owner_begin(p), norm_owner_begin(p + 1)); at least one row each
// when rows >= nranks.
__device__ __forceinline__ uint64_t norm_owner_begin(uint64_t rows, uint32_t nranks, uint32_t p) {
  return rows * p / nranks;
}
// The p with norm_owner_begin(p) <= row < norm_owner_begin(p + 1).
__device__ __forceinline__ uint32_t norm_owner(uint64_t rows, uint32_t nranks, uint64_t row) {
  return (uint32_t)(((row + 1) * nranks - 1) / rows);
}

// Each entry serves the three outputs (n.quant), chosen per call.
#define SYMM_NORM_QUANT_SWITCH(body, T)                          \
  switch (n.quant) {                                             \
    case SYMM_NORM_SAME_TYPE: body<T, SYMM_NORM_SAME_TYPE>(n); break; \
    case SYMM_NORM_FP8_TENSOR: body<T, SYMM_NORM_FP8_TENSOR>(n); break; \
    default: body<T, SYMM_NORM_FP8_TOKEN>(n); break;              \
  }
