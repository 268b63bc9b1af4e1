/*
 * coll_util: what the collective test drivers (c_tests/coll/coll_*.c) share
 * besides the multi-rank harness (../gpu_world.h, which runs them):
 *
 *  - More CUDA driver entry points than test_util's tu_cu (cw_cu), resolved
 *    with dlsym from the libcuda.so.1 tu_cuda_load opened, and page-locked
 *    host buffers.
 *  - Buffers of the three classes the library tells apart (staged,
 *    registered, symmetric) on every local rank.
 *  - Host models of the element types and reductions (fp16/bf16/fp8
 *    conversions with round-to-nearest-even, fp8 saturation), the random
 *    input generator every rank can evaluate for every rank, and a small
 *    pthread parallel-for for the large host-side checks.
 *
 * Drivers set .process_init = cw_process_init in their tw_spec.
 */
#ifndef SYMM_COLL_UTIL_H
#define SYMM_COLL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_world.h"
#include "symmcomm.h"
#include "test_util.h"

/* ---- extra driver API -------------------------------------------------- */

typedef struct CUevent_st *CUevent;

struct cw_cuda_api {
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n, CUstream s);
  CUresult (*cuMemsetD32Async)(CUdeviceptr dst, unsigned int value, size_t n, CUstream s);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s); /* _v2 */
  CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);       /* _v2 */
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s); /* _v2 */
  CUresult (*cuMemAllocHost)(void **p, size_t bytes);                                        /* _v2 */
  CUresult (*cuMemFreeHost)(void *p);
  CUresult (*cuEventCreate)(CUevent *ev, unsigned int flags);
  CUresult (*cuEventRecord)(CUevent ev, CUstream s);
  CUresult (*cuEventQuery)(CUevent ev);
  CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
  CUresult (*cuEventDestroy)(CUevent ev); /* _v2 */
  CUresult (*cuStreamWaitEvent)(CUstream s, CUevent ev, unsigned int flags);
  CUresult (*cuDeviceCanAccessPeer)(int *can, CUdevice dev, CUdevice peer);
};
extern struct cw_cuda_api cw_cu;

/* tw_spec.process_init of the collective drivers: the extra driver entry
 * points and the decode tables, in every process that drives ranks. */
void cw_process_init(struct tw *tw, void *ctx);

/* Page-locked host memory (cuMemAllocHost in r's context), falling back
 * to malloc (reported once) when the driver refuses. */
struct cw_host {
  void *p;
  size_t bytes;
  int pinned;
};
void cw_host_alloc(const struct tw_rank *r, struct cw_host *h, size_t bytes);
void cw_host_free(const struct tw_rank *r, struct cw_host *h);

/* ---- buffer classes ------------------------------------------------------------ */

enum cw_class { CW_STAGED = 0, CW_REGISTERED = 1, CW_SYMMETRIC = 2, CW_NCLASSES = 3 };
extern const char *const cw_class_name[CW_NCLASSES];

/* One buffer of a class on every local rank (the same size everywhere). */
struct cw_buf {
  enum cw_class cls;
  size_t bytes;
  CUdeviceptr p[TW_MAX_RANKS];
  void *handle[TW_MAX_RANKS]; /* registration handles */
};
/* Collective (registers / symmMemAllocs on every rank). Fatal on failure. */
void cw_buf_alloc(struct tw *w, struct cw_buf *b, enum cw_class cls, size_t bytes);
void cw_buf_free(struct tw *w, struct cw_buf *b);

/* ---- element types ------------------------------------------------------------ */

#define CW_NDTYPES 12
#define CW_NOPS 5
struct cw_dtype_info {
  const char *name;
  int size;
  int is_float;
  int is_signed;
};
extern const struct cw_dtype_info cw_dt[CW_NDTYPES];
extern const char *const cw_op_name[CW_NOPS];

/* Element i of a little-endian array of `size`-byte elements, and back. */
static inline uint64_t cw_get(const void *buf, size_t i, int size) {
  const unsigned char *p = (const unsigned char *)buf + i * (size_t)size;
  switch (size) {
    case 1: return p[0];
    case 2: { uint16_t v; __builtin_memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; __builtin_memcpy(&v, p, 4); return v; }
    default: { uint64_t v; __builtin_memcpy(&v, p, 8); return v; }
  }
}
static inline void cw_put(void *buf, size_t i, int size, uint64_t v) {
  unsigned char *p = (unsigned char *)buf + i * (size_t)size;
  switch (size) {
    case 1: p[0] = (unsigned char)v; break;
    case 2: { uint16_t x = (uint16_t)v; __builtin_memcpy(p, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v; __builtin_memcpy(p, &x, 4); break; }
    default: __builtin_memcpy(p, &v, 8); break;
  }
}

/* Conversions (host models of CUDA's):
 *  - decode: the exact value of an encoded element;
 *  - encode: round-to-nearest-even from float; fp16/bf16 overflow to inf,
 *    fp8 saturates to the largest finite value (__NV_SATFINITE). */
float cw_f16_to_float(uint32_t h);
float cw_bf16_to_float(uint32_t h);
float cw_e4m3_to_float(uint32_t h);
float cw_e5m2_to_float(uint32_t h);
uint32_t cw_float_to_f16(float x);
uint32_t cw_float_to_bf16(float x);
uint32_t cw_float_to_e4m3(float x);
uint32_t cw_float_to_e5m2(float x);

/* The value of element bits `v` of type dt as a double (integers too). */
double cw_value(int dt, uint64_t v);
/* "0x3f80 (1)" style rendering of element bits for messages. */
const char *cw_render(int dt, uint64_t v, char *buf, size_t len);

/* The reduction the library defines: vals[0..n) (rank order) combined with
 * `op` in the accumulator type (fp32 for 16/8-bit floats, the own width
 * with wrap-around for integers), avg divided by n, then rounded once. */
uint64_t cw_reduce(int dt, int op, const uint64_t *vals, int n);

/* Float comparison with a dtype tolerance: 0 = bit-identical, 1 = not
 * identical but within tolerance, 2 = wrong. Integers: 0 or 2. */
int cw_compare(int dt, uint64_t got, uint64_t expected);

/* ---- random inputs -------------------------------------------------------------- */

static inline uint64_t cw_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/* Element j of rank r's input for a case with seed `seed`: a finite value
 * of type dt (integers: any bit pattern; fp8/fp16: any finite pattern;
 * bf16/fp32/fp64: normal numbers of moderate magnitude). */
uint64_t cw_gen(int dt, uint64_t seed, int r, uint64_t j);

/* ---- parallel for ------------------------------------------------------------- */

/* fn(lo, hi, tid, ctx) over [0, n) split across up to cw_threads() threads
 * (inline below 64 Ki items). tid < cw_threads(). */
typedef void (*cw_range_fn)(size_t lo, size_t hi, int tid, void *ctx);
void cw_par_for(size_t n, cw_range_fn fn, void *ctx);
int cw_threads(void);
#define CW_MAX_THREADS 32

/* Seconds since the epoch as a seed, unless COLL_SEED is set. */
uint64_t cw_pick_seed(void);

/* ---- tests that break a communicator on purpose ---------------------------- */

/* SYMM_TIMEOUT in seconds, set to `dflt` first when unset (a test of
 * device-side errors wants them in seconds, not the harness's 30). */
double cw_short_timeout(const char *dflt);
/* A call refused on bad input: its result must be `want` and r's last error
 * must contain `says` (case-insensitive); `what` names the case. */
void cw_refused(struct tw_rank *r, const char *what, symmResult_t rc, symmResult_t want, const char *says);
/* symmCommAbort on r's communicator (checked, `after` naming the case);
 * r->comm is NULL afterwards, so tw_destroy_comms skips it. */
void cw_abort(struct tw_rank *r, const char *after);

#endif /* SYMM_COLL_UTIL_H */
