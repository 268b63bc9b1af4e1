// The fused matmul ops (src/fused): the start sync that also compares the
// call across ranks, flag signals to one or every peer, and the
// matmul-reduce-scatter's reduction of the landed partials. The GEMMs
// themselves are cuBLASLt's; the data moves on the copy engines.
#include "coll.cuh"

// Start of a fused call: every rank tells every other what it is about to
// do (4 words, see src/fused/mod.rs), then they meet. A rank that sees a
// peer's words differ from its own records SYMM_DEV_MISMATCH (an
// asynchronous symmInvalidUsage) instead of running on with a different
// shape. Flags self-reset: the sender waits for 0, writes its words and
// sets 1 (release); the receiver waits for 1 (acquire), reads the words and
// sets 0 (release), so the sender never rewrites words still being read.
struct SymmFusedSyncArgs {
  SymmFlagArgs flags;                       // the sync row
  uint32_t* desc;                           // this rank's slots [peer][4]
  uint32_t* peer_desc[SYMM_MAX_RANKS];      // rank r's slots (we write [our rank])
  uint32_t mine[4];
};
static_assert(sizeof(SymmFusedSyncArgs) == sizeof(SymmFlagArgs) + 8 + 8 * SYMM_MAX_RANKS + 16,
              "SymmFusedSyncArgs layout");

// Wait details (the "wait detail" of a timeout message), one per wait of
// this file: the start sync's slot reuse and arrival (and a mismatch
// record), a put waiting for the peer to consume the previous flag, a wait
// for a peer's flag.
enum : uint32_t {
  SYMM_FUSED_WAIT_SYNC_SEND = 0x40,
  SYMM_FUSED_WAIT_SYNC_RECV = 0x41,
  SYMM_FUSED_WAIT_SYNC_MISMATCH = 0x42,
  SYMM_FUSED_WAIT_PUT = 0x43,
  SYMM_FUSED_WAIT_FLAG = 0x44,
};

SYMM_KERNEL void symm_fused_sync(SymmFusedSyncArgs a) {
  const uint32_t p = threadIdx.x, me = a.flags.wait.rank;
  if (p >= a.flags.nranks || p == me) return;
  uint32_t* out = a.flags.remote[p] + me;
  SymmSpin send(a.flags.wait, p, SYMM_FUSED_WAIT_SYNC_SEND);
  while (symm_ld_acquire_sys(out) != 0u)
    if (send.give_up()) return;
  volatile uint32_t* slot = a.peer_desc[p] + me * 4;
  for (int k = 0; k < 4; ++k) slot[k] = a.mine[k];
  __threadfence_system();
  symm_st_release_sys(out, 1u);

  uint32_t* in = a.flags.local + p;
  SymmSpin recv(a.flags.wait, p, SYMM_FUSED_WAIT_SYNC_RECV);
  while (symm_ld_acquire_sys(in) != 1u)
    if (recv.give_up()) return;
  uint32_t theirs[4];
  const volatile uint32_t* from = a.desc + p * 4;
  for (int k = 0; k < 4; ++k) theirs[k] = from[k];
  symm_st_release_sys(in, 0u);
  bool differ = false;
  for (int k = 0; k < 4; ++k) differ |= theirs[k] != a.mine[k];
  if (differ) {
    SymmSpin rec(a.flags.wait, p, SYMM_FUSED_WAIT_SYNC_MISMATCH);
    rec.record_mismatch(a.mine, theirs);
  }
}

// a.peer < nranks: that peer only; otherwise every peer.
__device__ __forceinline__ bool fused_is_target(const SymmFlagArgs& a, uint32_t p) {
  return p < a.nranks && p != a.wait.rank && (a.peer >= a.nranks || a.peer == p);
}

// Set this rank's flag in the target peers' row once the previous one was
// consumed (release: the stream's earlier work, copies included, is
// visible to the peer when it sees the flag).
SYMM_KERNEL void symm_fused_put(SymmFlagArgs a) {
  const uint32_t p = threadIdx.x;
  if (!fused_is_target(a, p)) return;
  uint32_t* slot = a.remote[p] + a.wait.rank;
  SymmSpin spin(a.wait, p, SYMM_FUSED_WAIT_PUT);
  __threadfence_system();
  while (symm_cas_release_sys(slot, 0u, 1u) != 0u)
    if (spin.give_up()) return;
}

// Wait for and consume the target peers' flags (acquire).
SYMM_KERNEL void symm_fused_wait(SymmFlagArgs a) {
  const uint32_t p = threadIdx.x;
  if (!fused_is_target(a, p)) return;
  uint32_t* slot = a.local + p;
  SymmSpin spin(a.wait, p, SYMM_FUSED_WAIT_FLAG);
  while (symm_cas_acquire_sys(slot, 1u, 0u) != 1u)
    if (spin.give_up()) return;
}

// out[r][c] = from(beta * out[r][c] + sum over s of src[s][r * cols + c]),
// summed in fp32 in source (rank) order, so every rank rounds like the
// reduce-scatter kernels do. Sources are packed rows; out has `ld_out`.
struct SymmFusedReduceArgs {
  const char* src[SYMM_MAX_RANKS];
  char* out;
  uint64_t rows, cols, ld_out;
  float beta;
  uint32_t nsrc;
};
static_assert(sizeof(SymmFusedReduceArgs) == 8 * SYMM_MAX_RANKS + 8 + 24 + 8, "SymmFusedReduceArgs layout");

template <typename T>
__device__ __forceinline__ void fused_reduce_at(const SymmFusedReduceArgs& a, uint64_t r, uint64_t c, T* out) {
  float acc = 0.f;
  for (uint32_t s = 0; s < a.nsrc; ++s) acc += to_acc(reinterpret_cast<const T*>(a.src[s])[r * a.cols + c]);
  T* o = out + r * a.ld_out + c;
  if (a.beta != 0.f) acc += a.beta * to_acc(*o);
  *o = from_acc<T>(acc);
}

template <typename T>
__device__ void fused_reduce_body(const SymmFusedReduceArgs& a) {
  constexpr uint32_t E = vec_elems<T>();
  T* out = reinterpret_cast<T*>(a.out);
  bool vec = a.cols % E == 0 && a.ld_out % E == 0 && misalign(a.out) == 0;
  for (uint32_t s = 0; s < a.nsrc; ++s) vec &= misalign(a.src[s]) == 0;
  const uint64_t stride = symm_grid_stride();
  if (!vec) {
    const uint64_t n = a.rows * a.cols;
    for (uint64_t i = symm_thread_index(); i < n; i += stride) fused_reduce_at<T>(a, i / a.cols, i % a.cols, out);
    return;
  }
  union Pack { uint4 v; T e[E]; };
  const uint64_t vcols = a.cols / E, n = a.rows * vcols;
  for (uint64_t i = symm_thread_index(); i < n; i += stride) {
    const uint64_t r = i / vcols, c = (i % vcols) * E;
    float acc[E];
#pragma unroll
    for (uint32_t k = 0; k < E; ++k) acc[k] = 0.f;
    for (uint32_t s = 0; s < a.nsrc; ++s) {
      Pack in;
      in.v = *reinterpret_cast<const uint4*>(reinterpret_cast<const T*>(a.src[s]) + r * a.cols + c);
#pragma unroll
      for (uint32_t k = 0; k < E; ++k) acc[k] += to_acc(in.e[k]);
    }
    uint4* o = reinterpret_cast<uint4*>(out + r * a.ld_out + c);
    Pack res;
    if (a.beta != 0.f) {
      Pack old;
      old.v = *o;
#pragma unroll
      for (uint32_t k = 0; k < E; ++k) acc[k] += a.beta * to_acc(old.e[k]);
    }
#pragma unroll
    for (uint32_t k = 0; k < E; ++k) res.e[k] = from_acc<T>(acc[k]);
    *o = res.v;
  }
}

#define SYMM_FUSED_REDUCE(suffix, T) \
  SYMM_KERNEL void __launch_bounds__(256) symm_fused_reduce_##suffix(SymmFusedReduceArgs a) { fused_reduce_body<T>(a); }

SYMM_FUSED_REDUCE(bf16, __nv_bfloat16)
SYMM_FUSED_REDUCE(f16, __half)
SYMM_FUSED_REDUCE(f32, float)
