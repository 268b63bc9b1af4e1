/*
 * Input patterns shared by the host drivers (C) and the test kernels
 * (coll_kernels.cu), so that both sides compute the same values.
 */
#ifndef SYMM_COLL_PATTERN_H
#define SYMM_COLL_PATTERN_H

#include <stdint.h>

#ifdef __CUDACC__
#define CP_FN __host__ __device__ static inline
#else
#define CP_FN static inline
#endif

CP_FN uint32_t cp_mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

CP_FN uint32_t cp_hash(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return cp_mix32(a ^ cp_mix32((b + 0x9e3779b9u) ^ cp_mix32((c + 0x85ebca6bu) ^ cp_mix32(d + 0xc2b2ae35u))));
}

/* bf16 bits of a small integer k (|k| <= 256: exactly representable). */
CP_FN uint16_t cp_bf16_of_int(int k) {
  if (k == 0) return 0;
  uint32_t s = k < 0 ? 1u : 0u;
  uint32_t a = (uint32_t)(k < 0 ? -k : k);
  int e = 0;
  while ((a >> (e + 1)) != 0) e++;
  uint32_t mant = (e <= 7 ? a << (7 - e) : a >> (e - 7)) & 0x7fu;
  return (uint16_t)(s << 15 | (uint32_t)(127 + e) << 7 | mant);
}

/* ---- graph test ----------------------------------------------------------
 * Operation ids name each captured call's input; `kind` 0 = int32 (any
 * bits), 1 = bf16 (small integers in [-32, 31], so a sum over up to 8 ranks
 * stays within [-256, 248], exact in bf16: the expected value needs no
 * rounding). */
enum { CG_I32 = 0, CG_BF16 = 1 };
enum { CG_AR_SUM = 0, CG_AR_MAX = 1, CG_AG = 2, CG_RS_SUM = 3, CG_BC = 4, CG_A2A = 5, CG_SR = 6 };

CP_FN int cp_graph_small(uint32_t seed, uint32_t rank, uint32_t op_id, uint32_t replay, uint64_t j) {
  return (int)(cp_hash(seed ^ (op_id << 8) ^ rank, replay, (uint32_t)j, (uint32_t)(j >> 32)) % 64u) - 32;
}
CP_FN uint32_t cp_graph_i32(uint32_t seed, uint32_t rank, uint32_t op_id, uint32_t replay, uint64_t j) {
  return cp_hash(seed ^ (op_id << 8) ^ rank ^ 0x5bd1e995u, replay, (uint32_t)j, (uint32_t)(j >> 32));
}
/* Element j of `rank`'s input of operation op_id in replay `replay`. */
CP_FN uint32_t cp_graph_in(uint32_t kind, uint32_t seed, uint32_t rank, uint32_t op_id, uint32_t replay, uint64_t j) {
  return kind == CG_BF16 ? cp_bf16_of_int(cp_graph_small(seed, rank, op_id, replay, j))
                         : cp_graph_i32(seed, rank, op_id, replay, j);
}
/* Expected element i of `rank`'s output of collective `coll`. */
CP_FN uint32_t cp_graph_expected(uint32_t coll, uint32_t kind, uint32_t seed, uint32_t rank, uint32_t nranks,
                                 uint32_t root, uint32_t op_id, uint32_t replay, uint64_t count, uint64_t i) {
  switch (coll) {
    case CG_AR_SUM: { /* bf16 sum */
      int s = 0;
      for (uint32_t r = 0; r < nranks; r++) s += cp_graph_small(seed, r, op_id, replay, i);
      return cp_bf16_of_int(s);
    }
    case CG_AR_MAX: { /* int32 max */
      int32_t m = (int32_t)cp_graph_i32(seed, 0, op_id, replay, i);
      for (uint32_t r = 1; r < nranks; r++) {
        int32_t v = (int32_t)cp_graph_i32(seed, r, op_id, replay, i);
        if (v > m) m = v;
      }
      return (uint32_t)m;
    }
    case CG_AG: return cp_graph_in(kind, seed, (uint32_t)(i / count), op_id, replay, i % count);
    case CG_RS_SUM: { /* int32 sum, wrapping */
      uint32_t s = 0;
      for (uint32_t r = 0; r < nranks; r++) s += cp_graph_i32(seed, r, op_id, replay, (uint64_t)rank * count + i);
      return s;
    }
    case CG_BC: return cp_graph_in(kind, seed, root, op_id, replay, i);
    case CG_A2A: return cp_graph_in(kind, seed, (uint32_t)(i / count), op_id, replay, (uint64_t)rank * count + i % count);
    default: /* CG_SR: a ring, received from the previous rank */
      return cp_graph_in(kind, seed, (rank + nranks - 1) % nranks, op_id, replay, i);
  }
}

/* ---- progress test: element i of rank q's block ---------------------------- */
CP_FN uint32_t cp_progress(uint32_t seed, uint32_t q, uint64_t i) {
  return cp_hash(seed, q, (uint32_t)i, (uint32_t)(i >> 32));
}

#endif /* SYMM_COLL_PATTERN_H */
