// Stream-ordered fills.
#include "common.cuh"

// Fill count 32-bit words at dst (4-byte aligned) with value. The aligned
// middle is written with 16-byte stores; the unaligned head and the tail
// with single words.
SYMM_KERNEL void symm_memset32(uint32_t* dst, uint32_t value, uint64_t count) {
  const uint64_t tid = symm_thread_index();
  const uint64_t stride = symm_grid_stride();
  uint64_t head = ((16 - ((uintptr_t)dst & 15)) & 15) / 4;
  if (head > count) head = count;
  if (tid < head) dst[tid] = value;

  const uint64_t nvec = (count - head) / 4;
  uint4* vdst = reinterpret_cast<uint4*>(dst + head);
  const uint4 v = make_uint4(value, value, value, value);
  for (uint64_t i = tid; i < nvec; i += stride) vdst[i] = v;

  const uint64_t tail = head + nvec * 4;
  if (tid < count - tail) dst[tail + tid] = value;
}
