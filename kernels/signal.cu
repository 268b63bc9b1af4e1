// Cross-GPU synchronisation primitives: barrier, point-to-point signals and
// 32-bit stream write/wait. Every flag is self-resetting (a sender sets
// 0 -> 1, the receiver consumes 1 -> 0), so no host counter is involved and a
// captured CUDA graph can be replayed any number of times.
#include "common.cuh"

// Set my flag in `peer`'s row, waiting first until the previous signal was
// consumed. Release: everything this stream wrote before is visible to the
// peer once it sees the flag.
__device__ __forceinline__ bool symm_flag_send(const SymmFlagArgs& a, uint32_t peer) {
  uint32_t* slot = a.remote[peer] + a.wait.rank;
  SymmSpin spin(a.wait, peer, 0);
  while (symm_cas_release_sys(slot, 0u, 1u) != 0u)
    if (spin.give_up()) return false;
  return true;
}

// Consume the flag `peer` set in my row. Acquire: the peer's writes before
// its send are visible after this returns.
__device__ __forceinline__ bool symm_flag_recv(const SymmFlagArgs& a, uint32_t peer) {
  uint32_t* slot = a.local + peer;
  SymmSpin spin(a.wait, peer, 1);
  while (symm_cas_acquire_sys(slot, 1u, 0u) != 1u)
    if (spin.give_up()) return false;
  return true;
}

// All ranks: thread p signals peer p and then waits for peer p's signal.
// Launch with one block of at least nranks threads.
SYMM_KERNEL void symm_barrier(SymmFlagArgs a) {
  const uint32_t p = threadIdx.x;
  if (p >= a.nranks || p == a.wait.rank) return;
  if (symm_flag_send(a, p)) symm_flag_recv(a, p);
}

SYMM_KERNEL void symm_put_signal(SymmFlagArgs a) {
  if (threadIdx.x == 0) symm_flag_send(a, a.peer);
}

SYMM_KERNEL void symm_wait_signal(SymmFlagArgs a) {
  if (threadIdx.x == 0) symm_flag_recv(a, a.peer);
}

// Store `value` at `addr` (local or a peer's), after all earlier work of the
// stream, with system-scope release.
SYMM_KERNEL void symm_write_value32(uint32_t* addr, uint32_t value) {
  if (threadIdx.x == 0) {
    __threadfence_system();
    symm_st_release_sys(addr, value);
  }
}

// Wait until *addr == value (cond 0) or *addr is at or after value in
// wrap-safe 32-bit order (cond 1).
SYMM_KERNEL void symm_wait_value32(const uint32_t* addr, uint32_t value, uint32_t cond, SymmWaitCtx wait) {
  if (threadIdx.x != 0) return;
  SymmSpin spin(wait, 0, value);
  for (;;) {
    const uint32_t v = symm_ld_acquire_sys(addr);
    if (cond == 0 ? v == value : symm_seq_geq(v, value)) return;
    if (spin.give_up()) return;
  }
}
