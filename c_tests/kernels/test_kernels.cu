// Kernels of the symmetric-memory C tests. Compiled by nvcc into a fatbin at
// build time (c_tests/CMakeLists.txt) and loaded at run time through the
// driver API (gpu_world.c), so the C drivers need no CUDA headers.
//
// Every entry point is extern "C" (resolved by name with
// cuModuleGetFunction) and takes only pointers and fixed-width integers.
// Loops are grid-stride with 64-bit indices; results that must stay on the
// GPU (mismatch counts of 1 GiB checks) go to a device counter.
#include <stdint.h>

#include "tu_pattern.h"

#define TK extern "C" __global__

__device__ __forceinline__ uint64_t tk_tid() { return (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ uint64_t tk_stride() { return (uint64_t)gridDim.x * blockDim.x; }

// res[0] = 0 mismatches, res[1] = "no bad index yet".
TK void tk_reset_result(unsigned long long* res) {
  if (tk_tid() == 0) {
    res[0] = 0ull;
    res[1] = ~0ull;
  }
}

// buf[i] = pattern(rank, salt, idx0 + i) for i in [0, n).
TK void tk_fill_pattern(uint8_t* buf, uint64_t n, uint32_t rank, uint32_t salt, uint64_t idx0) {
  for (uint64_t i = tk_tid(); i < n; i += tk_stride()) buf[i] = tu_pattern_byte(rank, salt, idx0 + i);
}

// Count bytes of [buf, buf + n) that differ from the pattern into res[0] and
// the lowest bad index into res[1]. Volatile loads: the data may have been
// written by another GPU.
__device__ void tk_verify_range(const volatile uint8_t* buf, uint64_t n, uint32_t rank, uint32_t salt, uint64_t idx0,
                                unsigned long long* res) {
  unsigned long long bad = 0, first = ~0ull;
  for (uint64_t i = tk_tid(); i < n; i += tk_stride()) {
    if (buf[i] != tu_pattern_byte(rank, salt, idx0 + i)) {
      if (bad == 0) first = i;
      bad++;
    }
  }
  if (bad) {
    atomicAdd(&res[0], bad);
    atomicMin(&res[1], first);
  }
}

TK void tk_verify_pattern(const uint8_t* buf, uint64_t n, uint32_t rank, uint32_t salt, uint64_t idx0,
                          unsigned long long* res) {
  tk_verify_range(buf, n, rank, salt, idx0, res);
}

// The same, on table[peer] + offset: `table` is a device array of per-rank
// pointers (symmMemGetPeerTable), read on the GPU.
TK void tk_verify_pattern_table(const uint8_t* const* table, uint32_t peer, uint64_t offset, uint64_t n, uint32_t rank,
                                uint32_t salt, uint64_t idx0, unsigned long long* res) {
  const uint8_t* buf = table[peer] + offset;
  tk_verify_range(buf, n, rank, salt, idx0, res);
}

// Non-zero bytes of [buf, buf + n): count in res[0], lowest index in res[1].
TK void tk_count_nonzero(const uint8_t* buf, uint64_t n, unsigned long long* res) {
  const volatile uint8_t* b = buf;
  unsigned long long bad = 0, first = ~0ull;
  for (uint64_t i = tk_tid(); i < n; i += tk_stride()) {
    if (b[i] != 0) {
      if (bad == 0) first = i;
      bad++;
    }
  }
  if (bad) {
    atomicAdd(&res[0], bad);
    atomicMin(&res[1], first);
  }
}

TK void tk_store_u32(uint32_t* p, uint32_t v) {
  if (tk_tid() == 0) *(volatile uint32_t*)p = v;
}

TK void tk_load_u32(const uint32_t* p, uint32_t* out) {
  if (tk_tid() == 0) *out = *(const volatile uint32_t*)p;
}

// *out = table[peer][word]
TK void tk_load_u32_table(uint32_t* const* table, uint32_t peer, uint64_t word, uint32_t* out) {
  if (tk_tid() == 0) *out = ((const volatile uint32_t*)table[peer])[word];
}

// Graph replay, first node: check that the previous replay's
// symmStreamWriteValue32 landed (DONE == 1), clear DONE, count this replay.
TK void tk_graph_step(uint32_t* words) {
  if (tk_tid() != 0) return;
  volatile uint32_t* w = words;
  const uint32_t c = w[TU_GW_COUNTER];
  if (c != 0 && w[TU_GW_DONE] != 1u) w[TU_GW_DONE_MISSES] = w[TU_GW_DONE_MISSES] + 1;
  w[TU_GW_DONE] = 0;
  w[TU_GW_COUNTER] = c + 1;
}

// Graph replay, after the barrier: the peer's counter must equal ours (both
// ranks counted this replay before the barrier; neither counts the next one
// before the other's symmPutSignal, which comes after this read).
TK void tk_graph_check(const uint32_t* peer_words, uint32_t* words) {
  if (tk_tid() != 0) return;
  const volatile uint32_t* pw = peer_words;
  volatile uint32_t* w = words;
  const uint32_t v = pw[TU_GW_COUNTER];
  const uint32_t mine = w[TU_GW_COUNTER];
  w[TU_GW_LAST_READ] = v;
  if (v != mine) {
    if (w[TU_GW_MISMATCHES] == 0) {
      w[TU_GW_FIRST_MINE] = mine;
      w[TU_GW_FIRST_PEER] = v;
    }
    w[TU_GW_MISMATCHES] = w[TU_GW_MISMATCHES] + 1;
  }
}
