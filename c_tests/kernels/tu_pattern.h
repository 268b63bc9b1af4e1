/*
 * The byte pattern the symmetric-memory tests write and check, shared by the
 * test kernels (kernels/test_kernels.cu) and the host code (gpu_world.c), so
 * that both sides compute exactly the same bytes.
 *
 * Byte i of a buffer that rank `rank` filled in test case `salt` is
 * tu_pattern_byte(rank, salt, idx0 + i), where idx0 is the buffer's offset in
 * the allocation it was filled through. A good mix of all three inputs: a
 * buffer read at the wrong offset, from the wrong rank or left over from an
 * earlier case differs in about 255 of every 256 bytes.
 */
#ifndef TU_PATTERN_H
#define TU_PATTERN_H

#include <stdint.h>

#if defined(__CUDACC__)
#define TU_PATTERN_FN static __host__ __device__ __forceinline__
#else
#define TU_PATTERN_FN static inline
#endif

TU_PATTERN_FN uint8_t tu_pattern_byte(uint32_t rank, uint32_t salt, uint64_t i) {
  uint32_t x = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)(i >> 32) * 0x85EBCA77u;
  x ^= rank * 0xC2B2AE3Du + salt * 0x27D4EB2Fu + 0x165667B1u;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  x *= 0x297A2D39u;
  x ^= x >> 15;
  return (uint8_t)(x ^ (x >> 8) ^ (x >> 16) ^ (x >> 24));
}

/* Words of the graph-replay test's per-rank symmetric buffer (uint32 index). */
#define TU_GW_COUNTER 0     /* replays done by this rank (tk_graph_step) */
#define TU_GW_DONE 1        /* set to 1 by symmStreamWriteValue32 at each replay's end */
#define TU_GW_DONE_MISSES 2 /* replays that began without the previous one's DONE */
#define TU_GW_LAST_READ 3   /* the peer's counter as read at the last replay */
#define TU_GW_MISMATCHES 4  /* replays where the peer's counter differed from ours */
#define TU_GW_FIRST_MINE 5  /* our counter at the first mismatch */
#define TU_GW_FIRST_PEER 6  /* the peer's counter at the first mismatch */
#define TU_GW_WORDS 8

#endif /* TU_PATTERN_H */
