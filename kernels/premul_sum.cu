// NCCL's pre-multiplied sum (ncclRedOpCreatePreMulSum): the sum over ranks
// of s_r * x_r, each rank with its own scalar s_r. The library serves it in
// two steps on the caller's stream (src/coll/premul_sum.rs): this kernel
// scales the rank's own input, then the sum collective runs on the copy.
// The product is taken as the reductions combine: in fp32 for the 16- and
// 8-bit floats, in the type's own width with wrap for integers.
#include "coll.cuh"

template <typename T>
__device__ __forceinline__ T premul(T x, typename Acc<T>::type s) {
  return from_acc<T>(combine<SYMM_PROD>(to_acc(x), s));
}

// dst[i] = scalar * src[i] for count elements; dst may be src. The scalar
// is *scalar_dev when that is not null (read when the kernel runs, as NCCL
// reads a device-resident scalar), else the low bytes of `bits`.
template <typename T>
__device__ void premul_scale_body(T* dst, const T* src, uint64_t count, uint64_t bits, const T* scalar_dev) {
  T s;
  if (scalar_dev != nullptr) {
    s = *scalar_dev;
  } else {
    memcpy(&s, &bits, sizeof(T));
  }
  const typename Acc<T>::type sa = to_acc(s);
  const uint64_t tid = symm_thread_index();
  const uint64_t stride = symm_grid_stride();
  constexpr uint32_t E = vec_elems<T>();
  // 16-byte vectors when both sides are aligned (the usual case: tensors
  // start 256-byte aligned), else element by element.
  const bool vec = misalign(dst) == 0 && misalign(src) == 0;
  const uint64_t nvec = vec ? count / E : 0;
  union V {
    uint4 u;
    T e[E];
  };
  for (uint64_t i = tid; i < nvec; i += stride) {
    V v;
    v.u = reinterpret_cast<const uint4*>(src)[i];
#pragma unroll
    for (uint32_t k = 0; k < E; ++k) v.e[k] = premul<T>(v.e[k], sa);
    reinterpret_cast<uint4*>(dst)[i] = v.u;
  }
  for (uint64_t i = nvec * E + tid; i < count; i += stride) dst[i] = premul<T>(src[i], sa);
}

#define SYMM_PREMUL_SCALE_KERNEL(family, suffix, T)                                                          \
  SYMM_KERNEL void symm_##family##_##suffix(T* dst, const T* src, uint64_t count, uint64_t bits, const T* scalar) { \
    premul_scale_body<T>(dst, src, count, bits, scalar);                                                       \
  }

SYMM_FOR_EACH_TYPE(SYMM_PREMUL_SCALE_KERNEL, premul_scale)
