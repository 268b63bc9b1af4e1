// Pipelined collectives (SYMM_ALGO=pipe): the staged two-shot all-reduce
// and reduce-scatter without whole-grid lock step. The vector goes in
// chunks through SYMM_PIPE_SLOTS scratch slots per direction; instead of
// two block syncs per round, each block publishes per-chunk progress flags
// to the same block of every peer and waits only for the flags a step needs:
//
//   IN_READY(q)  the writer's copy-in of chunk q is in its input slot;
//   REDUCED(q)   the writer has reduced chunk q: its slice is in its output
//                slot (all-reduce), and it no longer reads our input slot;
//   GATHERED(q)  the writer has copied every slice of chunk q out: it no
//                longer reads our output slot.
//
// A slot is reused S chunks later, once every peer's flag says it is done
// with it. The copy-in of chunk q+1 runs while the peers still reduce chunk
// q. (Each chunk also waits for the peers' IN_READY and REDUCED of that
// same chunk, which keeps a block within about one chunk of its peers and,
// for S >= 2, already implies the slot waits; they stay, so that reuse is
// safe whatever the step order. src/coll/pipe_model.rs checks both.) Only the
// kernel's own chunks wait for a slot's previous user (pipe_wait_slot): the
// first S chunks take over slots from earlier kernels, which the entry sync
// and exit wait below already cover -- and whose flags may never have been
// published for them: a reduce-scatter publishes no GATHERED, an all-reduce
// of a direct input no IN_READY. (Waiting for GATHERED(q + 1 - S) of a chunk
// a reduce-scatter had numbered made the first all-reduce after reduce-
// scatters of S or more chunks in all, since the last all-reduce, wait for
// a flag no peer would ever write.)
//
// Chunks are numbered by a per-block counter in this rank's pad (advanced
// by kernels, so graph replays continue the series); every rank launches
// the same grid for a call, so block b's counter is the same on every rank.
// Flags only grow and are compared wrap-safe: no reset. Before its exit
// wait a kernel brings every kind of flag up to its final chunk number
// (pipe_publish_all), also the kinds it does not publish per chunk, so no
// flag trails its block's counter by more than one kernel's chunks: a flag
// left 2^31 chunks behind would compare as ahead.
//
// The invariant that replaces "a block only reads scratch that the
// same-index block wrote in this kernel's rounds" (coll.cuh, next_parity):
//  - inside a kernel, block b owns the same offsets of every chunk (its
//    share of a full chunk) on every rank, writes only those, and reads
//    only what the peers' block b wrote there, after their flag;
//  - across kernels: a pipelined kernel writes no scratch before its entry
//    sync with every peer (after which every peer has finished all earlier
//    kernels, so nothing of theirs still reads our scratch), and it does not
//    end before every peer's flags say that it has finished reading our
//    slots (exit wait). So the next kernel, of any kind and grid, finds no
//    peer reading this rank's scratch.
#pragma once
#include "coll.cuh"

// Chunk numbers wrap at 2^32; q % S continues across the wrap only when S
// divides 2^32.
static_assert((SYMM_PIPE_SLOTS & (SYMM_PIPE_SLOTS - 1)) == 0, "SYMM_PIPE_SLOTS must be a power of two");

// The opt-in two-shot kernels (push, pipe) are built for the 16- and 32-bit
// floating-point types only, which large all-reduces and reduce-scatters
// carry in practice; calls of other types run the default kernels
// (src/coll/mod.rs, opt_in_dtype). Each type costs minutes of nvcc.
#define SYMM_FOR_EACH_OPT_IN_TYPE(X, family) \
  X(family, f16, __half)                     \
  X(family, f32, float)                      \
  X(family, bf16, __nv_bfloat16)

// This block's flag of `kind`, written by rank `peer`, in the pad whose sync
// flags start at `flags` (ours: a.flags; rank r's: a.peer_flags[r]).
__device__ __forceinline__ uint32_t* pipe_flag(uint32_t* flags, uint32_t kind, uint32_t peer) {
  return flags + SYMM_PIPE_DELTA + (kind * SYMM_COLL_MAX_BLOCKS + blockIdx.x) * SYMM_MAX_RANKS + peer;
}

// This block's chunk counter (this rank's pad).
__device__ __forceinline__ uint32_t* pipe_counter(const SymmCollArgs& a) {
  return a.flags + SYMM_PIPE_DELTA + SYMM_PIPE_KINDS * SYMM_COLL_MAX_BLOCKS * SYMM_MAX_RANKS + blockIdx.x;
}

// Tell the same block of every peer that ours reached `seq` for `kind`.
// The barrier orders every thread's earlier writes (and reads) before the
// release store, which publishes them with it: no separate fence.
__device__ __forceinline__ void pipe_publish(const SymmCollArgs& a, uint32_t kind, uint32_t seq) {
  __syncthreads();
  const uint32_t p = threadIdx.x;
  if (p < a.nranks && p != a.rank) symm_st_release_sys(pipe_flag(a.peer_flags[p], kind, a.rank), seq);
}

// Wait (bounded) until the same block of every peer published `seq` or
// later for `kind`. False in every thread when a wait gave up (timeout,
// abort, or an error another wait recorded): the kernel must return.
__device__ __forceinline__ bool pipe_wait(const SymmCollArgs& a, uint32_t kind, uint32_t seq) {
  const uint32_t p = threadIdx.x;
  int fail = 0;
  if (p < a.nranks && p != a.rank) {
    const uint32_t* f = pipe_flag(a.flags, kind, p);
    SymmSpin spin(a.wait, p, blockIdx.x);
    while (!symm_seq_geq(symm_ld_acquire_sys(f), seq)) {
      if (spin.give_up()) {
        fail = 1;
        break;
      }
    }
  }
  return !__syncthreads_or(fail);
}

// Wait (bounded) until every peer is done with the slot that this kernel's
// chunk k takes over from chunk k - S: their flag `kind` reached `seq` (the
// previous user's number + 1). For k < S the previous user belongs to an
// earlier kernel (see above): no wait. `k` is the same in every thread.
__device__ __forceinline__ bool pipe_wait_slot(const SymmCollArgs& a, uint32_t kind, uint32_t k, uint32_t seq) {
  return k < SYMM_PIPE_SLOTS || pipe_wait(a, kind, seq);
}

// Every kind of this block's flags at every peer to `seq_end` (the kernel's
// last chunk + 1): the kinds the kernel published per chunk are there
// already (same value again), the others catch up (see above).
__device__ __forceinline__ void pipe_publish_all(const SymmCollArgs& a, uint32_t seq_end) {
  __syncthreads();
  const uint32_t p = threadIdx.x;
  if (p < a.nranks && p != a.rank)
    for (uint32_t kind = 0; kind < SYMM_PIPE_KINDS; ++kind)
      symm_st_release_sys(pipe_flag(a.peer_flags[p], kind, a.rank), seq_end);
}

// The block's first chunk number (read once, after the entry sync).
__device__ __forceinline__ uint32_t pipe_begin(const SymmCollArgs& a) {
  __shared__ uint32_t seq0;
  if (threadIdx.x == 0) seq0 = *pipe_counter(a);
  __syncthreads();
  return seq0;
}

// After the exit wait: the next kernel continues the series.
__device__ __forceinline__ void pipe_end(const SymmCollArgs& a, uint32_t seq_end) {
  if (threadIdx.x == 0) *pipe_counter(a) = seq_end;
}
