// Send and receive, any number of each (up to SYMM_P2P_MAX_OPS) in one
// launch, so that a group's sends and receives progress together in both
// directions. The host puts at most one send and one receive per peer in a
// launch; SYMM_P2P_BLOCKS blocks serve each operation, block j of a send
// pairing with block j of the matching receive.
//
// Per chunk k of a channel (sender -> receiver, block j): the sender waits
// until the receiver has taken chunk k-2 (it reuses that slot), writes its
// slice into slot k%2 in the receiver's memory, and publishes ready = k+1;
// the receiver waits for it, copies the slice out of its own memory and
// publishes done = k+1. Pushing (remote stores, which need no round trip)
// rather than pulling keeps the link busy with few blocks. The counters
// persist in device memory, so later launches (and graph replays) continue
// the series.
#include "coll.cuh"

SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_sendrecv(SymmP2PArgs a) {
  const uint32_t op_index = blockIdx.x / SYMM_P2P_BLOCKS, j = blockIdx.x % SYMM_P2P_BLOCKS;
  if (op_index >= a.nops) return;
  const SymmP2POp op = a.ops[op_index];
  const uint32_t peer = op.peer;
  __shared__ uint32_t start;
  __shared__ int failed;
  uint32_t* counter = op.is_send ? SYMM_P2P_SENT(a.flags, j, peer) : SYMM_P2P_TAKEN(a.flags, j, peer);
  if (threadIdx.x == 0) {
    start = *counter;
    failed = 0;
  }
  __syncthreads();
  const uint64_t nchunks = (op.bytes + a.slot_bytes - 1) / a.slot_bytes;
  for (uint64_t c = 0; c < nchunks; ++c) {
    const uint32_t k = start + (uint32_t)c;
    const uint64_t off = c * a.slot_bytes, len = min(a.slot_bytes, op.bytes - off);
    // Block j always owns the same bytes of a slot, whatever this chunk's
    // length: its wait on done[j] must cover exactly what it overwrites.
    uint64_t lo, hi;
    split_range(a.slot_bytes, 16, SYMM_P2P_BLOCKS, j, &lo, &hi);
    lo = min(lo, len);
    hi = min(hi, len);
    if (op.is_send) {
      char* slot = a.peer_slots[peer] + ((uint64_t)a.rank * 2 + (k & 1)) * a.slot_bytes;
      if (threadIdx.x == 0) {
        // Slot k%2 last held chunk k-2: wait until the receiver took it
        // (done >= k-1; trivially true for the first two chunks).
        SymmSpin spin(a.wait, peer, j);
        while (!symm_seq_geq(symm_ld_acquire_sys(SYMM_P2P_DONE(a.flags, j, peer)), k - 1))
          if (spin.give_up()) { failed = 1; break; }
      }
      __syncthreads();
      if (failed) return;
      copy_bytes(slot + lo, reinterpret_cast<const char*>(op.buf) + off + lo, hi - lo);
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence_system();
        symm_st_release_sys(SYMM_P2P_READY(a.peer_flags[peer], j, a.rank), k + 1);
      }
    } else {
      if (threadIdx.x == 0) {
        SymmSpin spin(a.wait, peer, j);
        while (!symm_seq_geq(symm_ld_acquire_sys(SYMM_P2P_READY(a.flags, j, peer)), k + 1))
          if (spin.give_up()) { failed = 1; break; }
      }
      __syncthreads();
      if (failed) return;
      const char* slot = a.slots + ((uint64_t)peer * 2 + (k & 1)) * a.slot_bytes;
      copy_bytes(reinterpret_cast<char*>(op.buf) + off + lo, slot + lo, hi - lo);
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence_system();
        symm_st_release_sys(SYMM_P2P_DONE(a.peer_flags[peer], j, a.rank), k + 1);
      }
    }
  }
  if (threadIdx.x == 0) *counter = start + (uint32_t)nchunks;
}
