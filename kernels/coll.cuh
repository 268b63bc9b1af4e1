// Building blocks of the collective kernels: element types and reduction
// operators, vectorised copies and reductions over ranges (16-byte accesses,
// scalar heads and tails), and the per-block cross-rank sync.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "common.cuh"

// ---- Element types ---------------------------------------------------------
// Acc<T>: the type reductions accumulate in. 16-bit and 8-bit floats use
// fp32; integers accumulate in their own width with two's-complement wrap
// (done in the unsigned type, since signed overflow is undefined in C++).

template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<__nv_fp8_e4m3> { using type = float; };
template <> struct Acc<__nv_fp8_e5m2> { using type = float; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type to_acc(T x) { return (typename Acc<T>::type)x; }
template <> __device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_acc(__nv_fp8_e4m3 x) { return (float)x; }
template <> __device__ __forceinline__ float to_acc(__nv_fp8_e5m2 x) { return (float)x; }

template <typename T> __device__ __forceinline__ T from_acc(typename Acc<T>::type x) { return (T)x; }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
// The fp8 constructors round to nearest and saturate to the finite range.
template <> __device__ __forceinline__ __nv_fp8_e4m3 from_acc<__nv_fp8_e4m3>(float x) { return __nv_fp8_e4m3(x); }
template <> __device__ __forceinline__ __nv_fp8_e5m2 from_acc<__nv_fp8_e5m2>(float x) { return __nv_fp8_e5m2(x); }

// Reduction operators (numbers as symmRedOp_t).
enum { SYMM_SUM = 0, SYMM_PROD = 1, SYMM_MAX = 2, SYMM_MIN = 3, SYMM_AVG = 4 };

template <typename A> struct Wrap { using type = A; };
template <> struct Wrap<int8_t> { using type = uint8_t; };
template <> struct Wrap<int32_t> { using type = uint32_t; };
template <> struct Wrap<int64_t> { using type = uint64_t; };

template <int OP, typename A>
__device__ __forceinline__ A combine(A a, A b) {
  using W = typename Wrap<A>::type;
  if (OP == SYMM_SUM || OP == SYMM_AVG) return (A)(W)((W)a + (W)b);
  if (OP == SYMM_PROD) return (A)(W)((W)a * (W)b);
  if (OP == SYMM_MAX) return a > b ? a : b;
  return a < b ? a : b;
}

template <int OP, typename A>
__device__ __forceinline__ A finalize(A a, uint32_t nranks) {
  if (OP == SYMM_AVG) return a / (A)nranks;  // integers: truncating division
  return a;
}

// ---- Ranges -----------------------------------------------------------------

// Elements per 16-byte vector.
template <typename T> __host__ __device__ constexpr uint32_t vec_elems() { return 16 / sizeof(T); }

__device__ __forceinline__ uint32_t misalign(const void* p) { return (uint32_t)((uintptr_t)p & 15); }

// Pointers whose misalignments differ (a block at r * count elements of a
// buffer, count not a multiple of 16 bytes: every odd size, and most sizes
// at 3 ranks) cannot all move 16-byte vectors. The loops below then keep
// one side, the anchor, in aligned vectors and move each other pointer in
// pieces of `access_width` bytes: the largest power of two (up to 16) that
// divides its distance from the anchor, so that every piece is aligned.
// Before (through the tenth session) such ranges went one byte or element
// at a time: 1 GiB reduce-scatter at 3 ranks 4.24 ms out of place against
// 2.26 in place (4 x H100, eleventh session), where the pointers agree.
__device__ __forceinline__ uint32_t access_width(const void* p, uint32_t anchor_misalign) {
  const uint32_t rel = (misalign(p) - anchor_misalign) & 15;
  return rel == 0 ? 16u : rel & (0u - rel);
}

// 16 bytes at p, which is w-aligned (w = 1, 2, 4, 8 or 16), in w-byte pieces.
__device__ __forceinline__ uint4 ld16_by(const char* p, uint32_t w) {
  uint4 v;
  if (w == 16) {
    v = *reinterpret_cast<const uint4*>(p);
  } else if (w == 8) {
    const uint2 a = reinterpret_cast<const uint2*>(p)[0], b = reinterpret_cast<const uint2*>(p)[1];
    v = make_uint4(a.x, a.y, b.x, b.y);
  } else if (w == 4) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
    v = make_uint4(q[0], q[1], q[2], q[3]);
  } else if (w == 2) {
    const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
    uint32_t x[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) x[k] = (uint32_t)q[2 * k] | (uint32_t)q[2 * k + 1] << 16;
    v = make_uint4(x[0], x[1], x[2], x[3]);
  } else {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(p);
    uint32_t x[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k)
      x[k] = (uint32_t)q[4 * k] | (uint32_t)q[4 * k + 1] << 8 | (uint32_t)q[4 * k + 2] << 16 | (uint32_t)q[4 * k + 3] << 24;
    v = make_uint4(x[0], x[1], x[2], x[3]);
  }
  return v;
}

// Store 16 bytes at p, which is w-aligned, in w-byte pieces.
__device__ __forceinline__ void st16_by(char* p, uint4 v, uint32_t w) {
  if (w == 16) {
    *reinterpret_cast<uint4*>(p) = v;
  } else if (w == 8) {
    reinterpret_cast<uint2*>(p)[0] = make_uint2(v.x, v.y);
    reinterpret_cast<uint2*>(p)[1] = make_uint2(v.z, v.w);
  } else if (w == 4) {
    uint32_t* q = reinterpret_cast<uint32_t*>(p);
    q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
  } else {
    const uint32_t x[4] = {v.x, v.y, v.z, v.w};
    if (w == 2) {
      uint16_t* q = reinterpret_cast<uint16_t*>(p);
#pragma unroll
      for (uint32_t k = 0; k < 4; ++k) q[2 * k] = (uint16_t)x[k], q[2 * k + 1] = (uint16_t)(x[k] >> 16);
    } else {
      uint8_t* q = reinterpret_cast<uint8_t*>(p);
#pragma unroll
      for (uint32_t k = 0; k < 16; ++k) q[k] = (uint8_t)(x[k / 4] >> (8 * (k % 4)));
    }
  }
}

// Split [0, n) into `parts` pieces whose boundaries are whole vectors;
// piece `i` is [*lo, *hi).
__device__ __forceinline__ void split_range(uint64_t n, uint32_t epv, uint32_t parts, uint32_t i, uint64_t* lo, uint64_t* hi) {
  const uint64_t vecs = (n + epv - 1) / epv;
  const uint64_t per = (vecs + parts - 1) / parts;
  uint64_t a = (uint64_t)i * per * epv, b = a + per * epv;
  *lo = a < n ? a : n;
  *hi = b < n ? b : n;
}

// ---- Copies ---------------------------------------------------------------
// Two generations of the copy loop, both selectable (SYMM_ALGO=classic picks
// the first, for A/B measurements). Both copy [0, n) bytes by the threads of
// one block, with 16-byte accesses when both pointers share their
// misalignment.

// Loads in flight per thread in the deep copies (copy_bytes_by).
#define SYMM_COPY_DEPTH 8u
// copy_bytes_by's loop for pointers whose misalignments differ. A call by
// default: inlined beside the aligned loops of its callers (ag_write_scatter
// holds four) it took their registers, and the store-only kernels at 4
// ranks, whose blocks are aligned, ran 20-25 % slower (eleventh session);
// the store-only reduce-scatter still loses 7-9 % with it inlined (2 ranks,
// 256 MiB - 1 GiB, fifteenth session). A family that defines
// SYMM_COPY_PIECES_INLINE before including this header inlines it: as a
// call it cost the synced all-reduce its registers (ptxas, sm_90: 64 of
// them and 7,962 bytes of spill stores in symm_allreduce_bf16, against 128
// and 760 inlined), and inlined the staged all-reduce runs 1.09-1.23x
// faster from 4 to 256 MiB at 2 ranks, the synced and pipelined
// reduce-scatters 1-3 % and 8-10 % (fifteenth session).
#ifdef SYMM_COPY_PIECES_INLINE
#define SYMM_COPY_PIECES_LINKAGE __forceinline__
#else
#define SYMM_COPY_PIECES_LINKAGE __noinline__
#endif
__device__ SYMM_COPY_PIECES_LINKAGE void copy_bytes_pieces(char* dst, const char* src, uint64_t n, uint32_t t,
                                                            uint32_t nt, bool to_peer) {
  const uint32_t anchor = misalign(to_peer ? dst : src);
  const uint32_t ws = access_width(src, anchor), wd = access_width(dst, anchor);
  uint64_t head = (16 - anchor) & 15;
  if (head > n) head = n;
  if (t < head) dst[t] = src[t];
  const uint64_t nvec = (n - head) / 16;
  const char* s = src + head;
  char* d = dst + head;
  constexpr uint32_t U = SYMM_COPY_DEPTH;
  for (uint64_t i = t; i < nvec; i += (uint64_t)U * nt) {
    uint4 v[U];
#pragma unroll
    for (uint32_t k = 0; k < U; ++k)
      if (i + k * nt < nvec) v[k] = ld16_by(s + (i + k * nt) * 16, ws);
#pragma unroll
    for (uint32_t k = 0; k < U; ++k)
      if (i + k * nt < nvec) st16_by(d + (i + k * nt) * 16, v[k], wd);
  }
  const uint64_t done = head + nvec * 16;
  for (uint64_t k = t; k < n - done; k += nt) dst[done + k] = src[done + k];
}

// The loop before: eight loads in flight per thread only while at least
// eight vectors per thread remain (64 KiB with 512 threads); a smaller
// range, such as a block's 32 KiB slice, runs the tail loop with one load
// in flight per thread.
template <bool PIECES>
__device__ __forceinline__ void copy_bytes_classic(char* dst, const char* src, uint64_t n, bool to_peer) {
  const uint32_t t = threadIdx.x, nt = blockDim.x;
  if (n == 0 || dst == src) return;
  if (misalign(dst) == misalign(src)) {
    uint64_t head = (16 - misalign(dst)) & 15;
    if (head > n) head = n;
    if (t < head) dst[t] = src[t];
    const uint64_t nvec = (n - head) / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src + head);
    uint4* d = reinterpret_cast<uint4*>(dst + head);
    uint64_t i = t;
    constexpr uint32_t U = 8;
    for (; i + (U - 1) * nt < nvec; i += U * nt) {
      uint4 v[U];
#pragma unroll
      for (uint32_t k = 0; k < U; ++k) v[k] = s[i + k * nt];
#pragma unroll
      for (uint32_t k = 0; k < U; ++k) d[i + k * nt] = v[k];
    }
    for (; i < nvec; i += nt) d[i] = s[i];
    const uint64_t done = head + nvec * 16;
    if (t < n - done) dst[done + t] = src[done + t];
  } else if constexpr (PIECES) {
    copy_bytes_pieces(dst, src, n, t, nt, to_peer);
  } else {
    for (uint64_t i = t; i < n; i += nt) dst[i] = src[i];
  }
}

// The deep copy: the unrolled loop covers the whole range with a guard per
// vector, so every thread issues all its loads (up to COPY_DEPTH) before its
// first store at any size -- a 32 KiB slice keeps 4 loads in flight per
// thread instead of 1. A peer's memory is microseconds away, and only bytes
// in flight hide that. `t`/`nt`: this thread's index among the `nt` threads
// sharing the copy (a block, or a warp group of one).
// Different misalignments: the anchor is the source (its loads wait a
// round trip when it is a peer's), or with `to_peer` the destination (the
// stores a kernel posts into a peer's memory); the other side moves in the
// widest aligned pieces (access_width).
//
// PIECES (every caller but the store-only kernels' aligned instances, see
// vectors_everywhere): misaligned ranges take copy_bytes_pieces; without
// it, bytes.
template <bool PIECES = true>
__device__ __forceinline__ void copy_bytes_by(char* dst, const char* src, uint64_t n, uint32_t t, uint32_t nt,
                                              bool to_peer = false) {
  if (n == 0 || dst == src) return;
  if (misalign(dst) == misalign(src)) {
    uint64_t head = (16 - misalign(dst)) & 15;
    if (head > n) head = n;
    if (t < head) dst[t] = src[t];
    const uint64_t nvec = (n - head) / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src + head);
    uint4* d = reinterpret_cast<uint4*>(dst + head);
    constexpr uint32_t U = SYMM_COPY_DEPTH;
    for (uint64_t i = t; i < nvec; i += (uint64_t)U * nt) {
      uint4 v[U];
#pragma unroll
      for (uint32_t k = 0; k < U; ++k)
        if (i + k * nt < nvec) v[k] = s[i + k * nt];
#pragma unroll
      for (uint32_t k = 0; k < U; ++k)
        if (i + k * nt < nvec) d[i + k * nt] = v[k];
    }
    const uint64_t done = head + nvec * 16;
    for (uint64_t k = t; k < n - done; k += nt) dst[done + k] = src[done + k];
  } else if constexpr (PIECES) {
    copy_bytes_pieces(dst, src, n, t, nt, to_peer);
  } else {
    // Unrelated misalignments without PIECES: bytes, several in flight per
    // thread. The store-only kernels' aligned instances never get here
    // (every pointer they form is 16-byte aligned: vectors_everywhere); the
    // loop keeps them correct for any input without a call in them.
    constexpr uint32_t U = SYMM_COPY_DEPTH;
    for (uint64_t i = t; i < n; i += (uint64_t)U * nt) {
      char v[U];
#pragma unroll
      for (uint32_t k = 0; k < U; ++k)
        if (i + k * nt < n) v[k] = src[i + k * nt];
#pragma unroll
      for (uint32_t k = 0; k < U; ++k)
        if (i + k * nt < n) dst[i + k * nt] = v[k];
    }
  }
}

__device__ __forceinline__ void copy_bytes(char* dst, const char* src, uint64_t n) {
  copy_bytes_by(dst, src, n, threadIdx.x, blockDim.x);
}

// The loop the kernel's mode asks for (`to_peer`: the destination is a
// peer's memory, see copy_bytes_by).
template <bool PIECES = true>
__device__ __forceinline__ void copy_any(bool classic, char* dst, const char* src, uint64_t n, bool to_peer = false) {
  if (classic)
    copy_bytes_classic<PIECES>(dst, src, n, to_peer);
  else
    copy_bytes_by<PIECES>(dst, src, n, threadIdx.x, blockDim.x, to_peer);
}

// ---- Reductions ---------------------------------------------------------------
// Every rank must compute the same bits (the all-reduce of every rank is
// bit-identical, whichever rank reduced which element). Both loops below
// combine the sources in rank order, srcs[0] first, in Acc<T>: the first
// generation because it also loads them in that order; the second because
// its loads land in registers indexed by source rank, whatever order they
// were issued in, and the combining loop walks those registers 0, 1, ...

// dst[i] = OP over r of srcs[r][i], in rank order.
template <typename T, int OP>
__device__ __forceinline__ void reduce_one(T* dst, const T* const* srcs, uint32_t nsrc, uint64_t i, uint32_t nranks) {
  typename Acc<T>::type acc = to_acc(srcs[0][i]);
  for (uint32_t r = 1; r < nsrc; ++r) acc = combine<OP>(acc, to_acc(srcs[r][i]));
  dst[i] = from_acc<T>(finalize<OP>(acc, nranks));
}

// The loop before (SYMM_ALGO=classic): source 0's vectors, then source 1's,
// ...: U loads of one source in flight per thread at a time, and at the
// first step of a round every rank reads rank 0.
template <typename T, int OP>
__device__ __noinline__ void reduce_elems_classic(T* dst, const T* const* srcs, uint32_t nsrc, uint64_t n,
                                                     uint32_t nranks) {
  using A = typename Acc<T>::type;
  constexpr uint32_t E = vec_elems<T>();
  const uint32_t t = threadIdx.x, nt = blockDim.x;
  // Co-aligned pointers only (reduce_any).
  uint64_t head = ((16 - misalign(dst)) & 15) / sizeof(T);
  if (head > n) head = n;
  const uint64_t nvec = (n - head) / E;
  const uint64_t tail = head + nvec * E;
  for (uint64_t i = t; i < head; i += nt) reduce_one<T, OP>(dst, srcs, nsrc, i, nranks);
  union Pack { uint4 v; T e[E]; };
  // Main loop: U vectors per thread, so U loads per source are in flight.
  constexpr uint32_t U = 4;
  uint64_t v0 = t;
  for (; v0 + (U - 1) * nt < nvec; v0 += U * nt) {
    Pack in[U];
    A acc[U][E];
#pragma unroll
    for (uint32_t j = 0; j < U; ++j) in[j].v = reinterpret_cast<const uint4*>(srcs[0] + head)[v0 + j * nt];
#pragma unroll
    for (uint32_t j = 0; j < U; ++j)
#pragma unroll
      for (uint32_t k = 0; k < E; ++k) acc[j][k] = to_acc(in[j].e[k]);
    for (uint32_t r = 1; r < nsrc; ++r) {
#pragma unroll
      for (uint32_t j = 0; j < U; ++j) in[j].v = reinterpret_cast<const uint4*>(srcs[r] + head)[v0 + j * nt];
#pragma unroll
      for (uint32_t j = 0; j < U; ++j)
#pragma unroll
        for (uint32_t k = 0; k < E; ++k) acc[j][k] = combine<OP>(acc[j][k], to_acc(in[j].e[k]));
    }
#pragma unroll
    for (uint32_t j = 0; j < U; ++j) {
      Pack out;
#pragma unroll
      for (uint32_t k = 0; k < E; ++k) out.e[k] = from_acc<T>(finalize<OP>(acc[j][k], nranks));
      reinterpret_cast<uint4*>(dst + head)[v0 + j * nt] = out.v;
    }
  }
  for (uint64_t v = v0; v < nvec; v += nt) {
    Pack in;
    in.v = reinterpret_cast<const uint4*>(srcs[0] + head)[v];
    A acc[E];
#pragma unroll
    for (uint32_t k = 0; k < E; ++k) acc[k] = to_acc(in.e[k]);
    for (uint32_t r = 1; r < nsrc; ++r) {
      in.v = reinterpret_cast<const uint4*>(srcs[r] + head)[v];
#pragma unroll
      for (uint32_t k = 0; k < E; ++k) acc[k] = combine<OP>(acc[k], to_acc(in.e[k]));
    }
    Pack out;
#pragma unroll
    for (uint32_t k = 0; k < E; ++k) out.e[k] = from_acc<T>(finalize<OP>(acc[k], nranks));
    reinterpret_cast<uint4*>(dst + head)[v] = out.v;
  }
  for (uint64_t i = tail + t; i < n; i += nt) reduce_one<T, OP>(dst, srcs, nsrc, i, nranks);
}

// A 16-byte load issued where it stands: `asm volatile` keeps the loads of
// the balanced loop in the order written (own rank's source first), which
// the compiler could otherwise reorder.
__device__ __forceinline__ uint4 ld_vec_ordered(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Element i of every destination = OP over the sources, in rank order
// (the balanced loop's head and tail; NMAX bounds nsrc and ndst).
template <typename T, int OP, uint32_t NMAX>
__device__ __forceinline__ void reduce_one_to(T* const* dsts, uint32_t ndst, const T* const* srcs, uint32_t nsrc,
                                              uint64_t i, uint32_t nranks) {
  typename Acc<T>::type acc = to_acc(srcs[0][i]);
#pragma unroll
  for (uint32_t r = 1; r < NMAX; ++r)
    if (r < nsrc) acc = combine<OP>(acc, to_acc(srcs[r][i]));
  const T out = from_acc<T>(finalize<OP>(acc, nranks));
#pragma unroll
  for (uint32_t d = 0; d < NMAX; ++d)
    if (d < ndst) dsts[d][i] = out;
}

// The balanced loop: dsts[0..ndst)[i] = OP over srcs[0..nsrc)[i], for i in
// [0, n) elements, by the threads of one block; nsrc, ndst <= NMAX.
//
// Per step a thread issues U loads of every source before it combines
// anything, so NMAX * U 16-byte loads are in flight per thread whatever the
// rank count, and every peer serves every thread at once. Issue order
// starts at source `first` (the caller's rank) and rotates, so that the
// first requests of a step go to a different GPU on every rank; the loads
// land in in[source rank][j] (indices known at compile time, so registers)
// and are combined in rank order, which keeps the bits the same on every
// rank. Stores go to every destination (the push all-reduce writes each
// rank's output; otherwise ndst = 1), also starting at `first`. Only the
// loop bounds are guarded, so the tail of any range keeps its loads in
// flight too.
//
// In place (a destination that is also a source) is safe: element i is
// read and then written by the same thread in the same step.
//
// Not inlined (nor is the classic loop): a reduction kernel holds one
// instance per op and rank-count class, and inlined together their
// registers spill. As a call it gets only the registers its callers do not
// hold across it (sm_90 SASS: R88-R123 and a few low ones), hence the load
// array zeroed each step below.
// PIECES: the instance for pointers whose misalignments differ (reduce_to
// picks it; the other instance requires co-aligned pointers). It keeps one
// side, the anchor, in whole vectors (copy_bytes_by) and moves the other
// pointers in aligned pieces. Its own instance, so that the aligned loop's
// code and registers stay as they were.
template <typename T, int OP, uint32_t NMAX, uint32_t U, bool PIECES>
__device__ __noinline__ void reduce_balanced(T* const* dsts, uint32_t ndst, const T* const* srcs, uint32_t nsrc,
                                             uint32_t first, uint64_t n, uint32_t nranks) {
  using A = typename Acc<T>::type;
  constexpr uint32_t E = vec_elems<T>();
  const uint32_t t = threadIdx.x, nt = blockDim.x;
  if (n == 0) return;
  uint32_t mis = misalign(dsts[0]);
  // PIECES only: one piece width for every pointer off the anchor (the
  // narrowest), and a bit per pointer that takes it (fewer registers than
  // a width each).
  uint32_t w = 16, src_pieces = 0, dst_pieces = 0;
  if constexpr (PIECES) {
    // The anchor: the sources' misalignment where they all share it (the
    // pulls: every rank's block sits at the same offset, and the remote
    // loads stay whole vectors), else the first destination's.
    const uint32_t src_mis = misalign(srcs[0]);
    bool srcs_agree = true;
#pragma unroll
    for (uint32_t r = 1; r < NMAX; ++r)
      if (r < nsrc) srcs_agree &= misalign(srcs[r]) == src_mis;
    if (srcs_agree) mis = src_mis;
#pragma unroll
    for (uint32_t r = 0; r < NMAX; ++r) {
      const uint32_t x = r < nsrc ? access_width(srcs[r], mis) : 16u, y = r < ndst ? access_width(dsts[r], mis) : 16u;
      src_pieces |= (uint32_t)(x != 16) << r;
      dst_pieces |= (uint32_t)(y != 16) << r;
      w = min(w, min(x, y));
    }
  }
  // Without PIECES, pointers whose misalignments differ would all be
  // "head", done one element at a time. Its callers never pass them
  // (reduce_to checks co_aligned, the store-only kernels' aligned instances
  // vectors_everywhere); the check stays as the safety net it was before
  // the PIECES instance existed (taken out, the loop spilled more: ptxas).
  bool vectors = true;
  if constexpr (!PIECES) {
#pragma unroll
    for (uint32_t r = 0; r < NMAX; ++r) {
      if (r < nsrc) vectors &= misalign(srcs[r]) == mis;
      if (r < ndst) vectors &= misalign(dsts[r]) == mis;
    }
  }
  uint64_t head = n, nvec = 0;
  if (vectors) {
    head = ((16 - mis) & 15) / sizeof(T);
    if (head > n) head = n;
    nvec = (n - head) / E;
  }
  const uint64_t tail = head + nvec * E;
  for (uint64_t i = t; i < head; i += nt) reduce_one_to<T, OP, NMAX>(dsts, ndst, srcs, nsrc, i, nranks);
  union Pack { uint4 v; T e[E]; };
  // Vector pointers even where PIECES moves pieces (only the address
  // arithmetic; such a vector is read and written through ld16_by /
  // st16_by): the aligned loop spilled twice as much with byte pointers.
  const uint4* s[NMAX];
  uint4* d[NMAX];
#pragma unroll
  for (uint32_t r = 0; r < NMAX; ++r) {
    s[r] = r < nsrc ? reinterpret_cast<const uint4*>(srcs[r] + head) : nullptr;
    d[r] = r < ndst ? reinterpret_cast<uint4*>(dsts[r] + head) : nullptr;
  }
  for (uint64_t v0 = t; v0 < nvec; v0 += (uint64_t)U * nt) {
    // Zeroed every step, though no zero is ever combined: a vector assigned
    // only under a condition keeps its old value where the load is skipped,
    // so the array would live across steps. In a function that holds only
    // part of the kernel's registers it then lived on the stack, each load
    // stored there as it returned and the next issued after that store:
    // one load in flight per thread instead of NMAX * U (SASS, sm_90;
    // docs/PERFORMANCE.md, twenty-eighth session).
    Pack in[NMAX][U];
#pragma unroll
    for (uint32_t r = 0; r < NMAX; ++r)
#pragma unroll
      for (uint32_t j = 0; j < U; ++j) in[r][j].v = make_uint4(0, 0, 0, 0);
    // Loads: sources first..nsrc-1, then 0..first-1.
#pragma unroll
    for (uint32_t pass = 0; pass < 2; ++pass)
#pragma unroll
      for (uint32_t r = 0; r < NMAX; ++r) {
        if (r >= nsrc || (r >= first) != (pass == 0)) continue;
#pragma unroll
        for (uint32_t j = 0; j < U; ++j)
          if (v0 + j * nt < nvec) {
            const uint4* at = s[r] + v0 + j * nt;
            in[r][j].v = PIECES && (src_pieces >> r & 1) ? ld16_by(reinterpret_cast<const char*>(at), w) : ld_vec_ordered(at);
          }
      }
#pragma unroll
    for (uint32_t j = 0; j < U; ++j) {
      if (v0 + j * nt >= nvec) continue;
      // Combine in rank order.
      A acc[E];
#pragma unroll
      for (uint32_t k = 0; k < E; ++k) acc[k] = to_acc(in[0][j].e[k]);
#pragma unroll
      for (uint32_t r = 1; r < NMAX; ++r)
        if (r < nsrc)
#pragma unroll
          for (uint32_t k = 0; k < E; ++k) acc[k] = combine<OP>(acc[k], to_acc(in[r][j].e[k]));
      Pack out;
#pragma unroll
      for (uint32_t k = 0; k < E; ++k) out.e[k] = from_acc<T>(finalize<OP>(acc[k], nranks));
#pragma unroll
      for (uint32_t pass = 0; pass < 2; ++pass)
#pragma unroll
        for (uint32_t r = 0; r < NMAX; ++r)
          if (r < ndst && (r >= first) == (pass == 0)) {
            uint4* at = d[r] + v0 + j * nt;
            if (PIECES && (dst_pieces >> r & 1))
              st16_by(reinterpret_cast<char*>(at), out.v, w);
            else
              *at = out.v;
          }
    }
  }
  for (uint64_t i = tail + t; i < n; i += nt) reduce_one_to<T, OP, NMAX>(dsts, ndst, srcs, nsrc, i, nranks);
}

// Whether every pointer shares one misalignment (the loops' whole-vector
// case); otherwise the reductions take reduce_balanced's PIECES instance.
template <typename T>
__device__ __forceinline__ bool co_aligned(T* const* dsts, uint32_t ndst, const T* const* srcs, uint32_t nsrc) {
  const uint32_t mis = misalign(dsts[0]);
  bool aligned = true;
  for (uint32_t r = 0; r < nsrc; ++r) aligned &= misalign(srcs[r]) == mis;
  for (uint32_t r = 1; r < ndst; ++r) aligned &= misalign(dsts[r]) == mis;
  return aligned;
}

// The PIECES loops instantiated for the rank count (as reduce_to's, below):
// reduce_to's choice for pointers whose misalignments differ, and, alone,
// reduce_to in a kernel instance that runs only where some pointer is
// misaligned (the store-only kernels, write_rounds.cuh vectors_everywhere):
// the PIECES loops alone, which take co-aligned pointers too, so that the
// aligned instance is the only caller of the aligned loops (ptxas shares a
// kernel's registers out among its functions by what is live at each call).
template <typename T, int OP>
__device__ __forceinline__ void reduce_pieces_to(T* const* dsts, uint32_t ndst, const T* const* srcs, uint32_t nsrc,
                                                 uint32_t first, uint64_t n, uint32_t nranks) {
  if (nsrc <= 4)
    reduce_balanced<T, OP, 4, 2, true>(dsts, ndst, srcs, nsrc, first, n, nranks);
  else
    reduce_balanced<T, OP, 8, 1, true>(dsts, ndst, srcs, nsrc, first, n, nranks);
}

// The balanced loop instantiated for the rank count: registers for 8
// vectors, 2 of each source up to 4 ranks (8 loads in flight per thread
// and step at 4 ranks, 4 at 2), 1 of each from 5 to 8. Two instances per
// type and op keep the reduction families' compile time in bounds.
template <typename T, int OP, bool PIECES = true>
__device__ __forceinline__ void reduce_to(T* const* dsts, uint32_t ndst, const T* const* srcs, uint32_t nsrc,
                                          uint32_t first, uint64_t n, uint32_t nranks) {
  if (PIECES && !co_aligned(dsts, ndst, srcs, nsrc)) {
    reduce_pieces_to<T, OP>(dsts, ndst, srcs, nsrc, first, n, nranks);
  } else if (nsrc <= 4) {
    reduce_balanced<T, OP, 4, 2, false>(dsts, ndst, srcs, nsrc, first, n, nranks);
  } else {
    reduce_balanced<T, OP, 8, 1, false>(dsts, ndst, srcs, nsrc, first, n, nranks);
  }
}

// dst = OP over srcs (rank order) with the loop the kernel's mode asks for.
template <typename T, int OP>
__device__ __forceinline__ void reduce_any(bool classic, T* dst, const T* const* srcs, uint32_t nsrc, uint32_t first,
                                           uint64_t n, uint32_t nranks) {
  // The classic loop (the A/B "before") for co-aligned pointers only.
  if (classic && co_aligned(&dst, 1, srcs, nsrc))
    reduce_elems_classic<T, OP>(dst, srcs, nsrc, n, nranks);
  else
    reduce_to<T, OP>(&dst, 1, srcs, nsrc, first, n, nranks);
}

// ---- Timeline (SYMM_TIMELINE=1) --------------------------------------------
// Thread 0 of every block records the phases it enters (abi.cuh); the
// others carry a null pointer and record nothing.
struct Timeline {
  SymmTlEvent* rec;
  uint32_t n;

  __device__ explicit Timeline(const SymmCollArgs& a)
      : rec(a.timeline && threadIdx.x == 0 ? a.timeline + blockIdx.x * (SYMM_TL_EVENTS + 1) + 1 : nullptr), n(0) {
    mark(SYMM_PHASE_START);
  }

  __device__ __forceinline__ void mark(uint32_t phase, uint32_t arg = 0) {
    if (rec && n < SYMM_TL_EVENTS) {
      SymmTlEvent e;
      e.phase = phase;
      e.arg = arg;
      e.ns = symm_globaltimer();
      rec[n++] = e;
    }
  }

  // The last event, then the block's header.
  __device__ __forceinline__ void finish() {
    mark(SYMM_PHASE_END);
    if (rec) {
      SymmTlEvent h;
      h.phase = n;
      h.arg = gridDim.x;
      h.ns = 0;
      rec[-1] = h;
    }
  }
};

// ---- Cross-rank sync, one block with the same block on every rank ---------
// Epoch-based: block b keeps a counter in its own pad (advanced only by
// kernels, so graph replay stays correct); each sync publishes epoch+1 to
// every peer's flag [b][our rank] with release, and waits until our flag
// [b][peer] has reached it (wrap-safe). Flags only grow, so they need no
// reset and a signal is never lost.
//
// The first sync of a kernel also checks that the ranks agree on what they
// are doing: before it, each block writes a descriptor of the call into
// every peer's check slot [b][our rank]; after it, each compares what the
// peers wrote. Always compared: the layout token (which user buffers peers
// read or write directly, or 0 when staged), so that no rank touches a
// peer's memory that the peer did not pass, and the protocol (the mode bits
// of SYMM_COLL_PROTO_BITS: one-shot, two-shot, push, pipelined), so that
// ranks that chose different kernels (different SYMM_ALGO, or buffer
// classes that lead to different kernels) fail instead of misreading each
// other's flags. With SYMM_CHECK also the collective, count, dtype/op and
// root. On a mismatch every rank records the error and no block touches
// data.
//
// Descriptor words: [0] collective << 24 | protocol << 16 | root,
// [1] count low, [2] count high << 16 | dtype << 8 | op, [3] token.
#define SYMM_DESC_WORDS 4
#define SYMM_DESC_PROTO_MASK 0x00ff0000u

struct BlockSync {
  uint32_t epoch;  // valid in every thread
  uint32_t parity;
  bool first;
  uint32_t desc[SYMM_DESC_WORDS];
  Timeline tl;  // this block's phase events (thread 0; SYMM_TIMELINE=1)

  __device__ explicit BlockSync(const SymmCollArgs& a) : epoch(0), parity(0), first(true), desc(), tl(a) {}
};

// Per-block counters after the epochs (SymmCollArgs::epochs):
// [0, B) sync epochs, [B, 2B) staged rounds, [2B, 3B) kernels run.
__device__ __forceinline__ uint32_t* block_counter(const SymmCollArgs& a, uint32_t which) {
  return a.epochs + which * SYMM_COLL_MAX_BLOCKS + blockIdx.x;
}

// Descriptor slot [parity][block][rank]. Two parities, alternating per
// kernel: a fast peer may write its next kernel's descriptor before this
// rank has read the current one, but it cannot get two kernels ahead.
__device__ __forceinline__ uint32_t* desc_slot(uint32_t* base, uint32_t parity, uint32_t rank) {
  return base + ((parity * SYMM_COLL_MAX_BLOCKS + blockIdx.x) * SYMM_MAX_RANKS + rank) * SYMM_DESC_WORDS;
}

__device__ __forceinline__ BlockSync sync_begin(const SymmCollArgs& a, uint32_t token) {
  __shared__ uint32_t epoch, parity;
  if (threadIdx.x == 0) {
    epoch = *block_counter(a, 0);
    uint32_t* kernels = block_counter(a, 2);
    parity = *kernels & 1;
    *kernels = *kernels + 1;
  }
  __syncthreads();
  BlockSync s(a);
  s.parity = parity;
  s.desc[0] = a.coll << 24 | ((a.mode & SYMM_COLL_PROTO_BITS) >> 2) << 16 | (a.root & 0xffffu);
  s.desc[1] = (uint32_t)a.count;
  s.desc[2] = (uint32_t)(a.count >> 32) << 16 | (a.dtype & 0xffu) << 8 | (a.op & 0xffu);
  s.desc[3] = token;
  const uint32_t p = threadIdx.x;
  if (p < a.nranks && p != a.rank) {
    uint32_t* slot = desc_slot(a.peer_check[p], s.parity, a.rank);
    for (int k = 0; k < SYMM_DESC_WORDS; ++k) slot[k] = s.desc[k];  // published by the first sync
  }
  s.epoch = epoch;
  return s;
}

// Everything this block wrote before is visible to the peers' same block
// after it, and everything they wrote before theirs is visible to us.
// False when the kernel must stop (timeout, abort, or a mismatch).
__device__ __forceinline__ bool block_sync(const SymmCollArgs& a, BlockSync& s) {
  __shared__ int failed;
  s.tl.mark(SYMM_PHASE_SYNC);
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  const uint32_t next = s.epoch + 1;
  const uint32_t p = threadIdx.x;
  const bool peer = p < a.nranks && p != a.rank;
  if (peer) {
    // The release store alone publishes what the block wrote before the
    // barrier above (a release is cumulative over what the barrier made
    // this thread observe; it compiles to MEMBAR.ALL.SYS + the store). The
    // sequentially consistent fence before it (MEMBAR.SC.SYS and an L1
    // invalidation, sm_90) only without SYMM_COLL_LIGHT_SYNC (SYMM_ALGO
    // `fullsync`): on 4 x H100 it cost 4.8 us of a 4 MiB all-reduce's 35.7.
    if (!(a.mode & SYMM_COLL_LIGHT_SYNC)) __threadfence_system();
    symm_st_release_sys(a.peer_flags[p] + blockIdx.x * SYMM_MAX_RANKS + a.rank, next);
    const uint32_t* mine = a.flags + blockIdx.x * SYMM_MAX_RANKS + p;
    SymmSpin spin(a.wait, p, blockIdx.x);
    while (!symm_seq_geq(symm_ld_acquire_sys(mine), next)) {
      if (spin.give_up()) {
        failed = 1;
        break;
      }
    }
  }
  if (s.first && peer && !failed) {
    const volatile uint32_t* theirs = desc_slot(a.check, s.parity, p);
    uint32_t t[SYMM_DESC_WORDS];
    for (int k = 0; k < SYMM_DESC_WORDS; ++k) t[k] = theirs[k];
    const bool full = a.mode & SYMM_COLL_CHECK;
    bool differ = t[3] != s.desc[3] || ((t[0] ^ s.desc[0]) & SYMM_DESC_PROTO_MASK) != 0;
    for (int k = 0; k < 3; ++k) differ |= full && t[k] != s.desc[k];
    if (differ) {
      failed = 1;
      SymmSpin rec(a.wait, p, blockIdx.x);
      rec.record_mismatch(s.desc, t);
    }
  }
  __syncthreads();
  s.first = false;
  s.epoch = next;
  return !failed;
}

__device__ __forceinline__ void sync_end(const SymmCollArgs& a, BlockSync& s) {
  if (threadIdx.x == 0) *block_counter(a, 0) = s.epoch;
  s.tl.finish();
}

// ---- Scratch and stamping ----------------------------------------------------

// Rank r's scratch: [in 0][in 1][out 0][out 1], `half` bytes each.
__device__ __forceinline__ char* scratch_in(const SymmCollArgs& a, uint32_t r, uint32_t parity) {
  return a.scratch[r] + (uint64_t)parity * a.half;
}
__device__ __forceinline__ char* scratch_out(const SymmCollArgs& a, uint32_t r, uint32_t parity) {
  return a.scratch[r] + (uint64_t)(2 + parity) * a.half;
}

// Staged rounds alternate scratch halves. Block b writes half p for round k
// only once no peer reads what this rank put there for round k-2:
// - in the same kernel, block b fills the same part of every half in every
//   round (round_share), read only by the peers' block b, which round k-1's
//   sync saw past round k-2;
// - across kernels, whose grids and splits differ, every block of a rank
//   takes the same parity for the same round (the counters below move in
//   step, also those of blocks a kernel does not launch). A kernel's first
//   round then writes the half its predecessor's last round did not; this
//   kernel started after every block of the last one passed its last sync,
//   so the peers were done with the round before. Its later rounds come
//   after a sync with every peer, which has then finished the last kernel.
// The counters live next to the blocks' epochs, advanced only by kernels.
__device__ __forceinline__ uint32_t next_parity(const SymmCollArgs& a) {
  __shared__ uint32_t parity;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* rounds = a.epochs + SYMM_COLL_MAX_BLOCKS;
    const uint32_t round = rounds[blockIdx.x];
    parity = round & 1;
    // Blocks b, b + grid, ... are this block's to advance.
    for (uint32_t b = blockIdx.x; b < SYMM_COLL_MAX_BLOCKS; b += gridDim.x) rounds[b] = round + 1;
  }
  __syncthreads();
  return parity;
}

// This block's share [lo, hi) of a round of n units (elements or bytes; the
// kernel's rounds hold `full` units, the last one maybe fewer): the share of
// a full round, clipped to n, so that it lies at the same offsets in every
// round of the kernel (see next_parity).
__device__ __forceinline__ void round_share(uint64_t full, uint64_t n, uint32_t epv, uint64_t* lo, uint64_t* hi) {
  split_range(full, epv, gridDim.x, blockIdx.x, lo, hi);
  *lo = min(*lo, n);
  *hi = min(*hi, n);
}

#define SYMM_COLL_THREADS 512

// One extern "C" kernel per element type for a reduction family; `body` is
// a template <typename T, int OP> __device__ void (const SymmCollArgs&).
#define SYMM_REDUCE_KERNEL(family, suffix, T)                                   \
  SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS)                          \
      symm_##family##_##suffix(SymmCollArgs a) {                                 \
    switch (a.op) {                                                              \
      case SYMM_SUM: family##_body<T, SYMM_SUM>(a); break;                       \
      case SYMM_PROD: family##_body<T, SYMM_PROD>(a); break;                     \
      case SYMM_MAX: family##_body<T, SYMM_MAX>(a); break;                       \
      case SYMM_MIN: family##_body<T, SYMM_MIN>(a); break;                       \
      default: family##_body<T, SYMM_AVG>(a); break;                             \
    }                                                                            \
  }

// Suffixes match src/coll/mod.rs (DataType::kernel_suffix).
#define SYMM_FOR_EACH_TYPE(X, family) \
  X(family, i8, int8_t)               \
  X(family, u8, uint8_t)              \
  X(family, i32, int32_t)             \
  X(family, u32, uint32_t)            \
  X(family, i64, int64_t)             \
  X(family, u64, uint64_t)            \
  X(family, f16, __half)              \
  X(family, f32, float)               \
  X(family, f64, double)              \
  X(family, bf16, __nv_bfloat16)      \
  X(family, f8e4m3, __nv_fp8_e4m3)    \
  X(family, f8e5m2, __nv_fp8_e5m2)

// Start of a collective body: load the block's epoch and publish the
// call's descriptor (checked at the first sync).
#define SYMM_COLL_PROLOGUE(a, s) BlockSync s = sync_begin(a, (a).token);

// Peers read this rank's user buffers directly: wait until they are done
// before the stream moves on (and may overwrite them).
#define SYMM_COLL_EPILOGUE(a, s)                                  \
  if (((a).mode & SYMM_COLL_END_SYNC) && !block_sync(a, s)) return; \
  sync_end(a, s);
