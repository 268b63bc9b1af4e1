/*
 * coll_util: what the collective test drivers (c_tests/coll/coll_*.c) share.
 *
 *  - A "world" of 2 ranks in one of two modes (the driver's mode argument):
 *      mp   2 processes forked by tu_run_ranks, rank r on device r,
 *           symmCommInitRank. Rank 0 makes the unique id and hands it over
 *           through a MAP_SHARED page, which also carries host barriers, a
 *           "rank died" flag and the per-rank statistics the parent prints.
 *      all  1 process driving both GPUs (symmCommInitAll), one stream per
 *           GPU. Bodies enqueue on every local rank before they wait on any.
 *    Every wait is bounded: stream waits poll cuStreamQuery against a
 *    deadline (and notice an asynchronous error of the communicator or a
 *    dead peer process), and a watchdog (alarm) ends a process that stops
 *    making progress, naming the phase it was in (cw_phase).
 *  - More CUDA driver entry points than test_util's tu_cu (cw_cu), resolved
 *    with dlsym from the libcuda.so.1 tu_cuda_load opened.
 *  - Host models of the element types and reductions (fp16/bf16/fp8
 *    conversions with round-to-nearest-even, fp8 saturation), the random
 *    input generator every rank can evaluate for every rank, and a small
 *    pthread parallel-for for the large host-side checks.
 *
 * test_util.{h,c} is used read-only.
 */
#ifndef SYMM_COLL_UTIL_H
#define SYMM_COLL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "symmcomm.h"
#include "test_util.h"

#define CW_MAX_RANKS 2

/* ---- extra driver API -------------------------------------------------- */

typedef struct CUevent_st *CUevent;

struct cw_cuda_api {
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n, CUstream s);
  CUresult (*cuMemsetD32Async)(CUdeviceptr dst, unsigned int value, size_t n, CUstream s);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s); /* _v2 */
  CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);       /* _v2 */
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

/* Run a driver call that must succeed (the harness is broken otherwise):
 * failure is fatal and names the call, the phase and the error. */
#define CW_CU(call)                                                                              \
  do {                                                                                           \
    CUresult cw_rc_ = (call);                                                                    \
    if (cw_rc_ != 0) cw_cuda_fatal(__FILE__, __LINE__, #call, cw_rc_);                           \
  } while (0)
void cw_cuda_fatal(const char *file, int line, const char *expr, CUresult rc) __attribute__((noreturn));

/* ---- the world ------------------------------------------------------------ */

enum cw_mode { CW_MP = 0, CW_ALL = 1 };

struct cw_rank {
  int rank, device, index;
  CUcontext ctx;
  symmComm_t comm;
  CUstream stream;  /* non-blocking */
  CUstream stream2; /* a second non-blocking stream (consumers) */
};

/* Host state shared by the processes of an mp world (MAP_SHARED page made
 * before the fork); private memory in "all" mode. `user` is for the
 * driver (statistics the parent prints). */
#define CW_USER_BYTES (256 * 1024)
struct cw_shared {
  int id_round;
  symmUniqueId id;
  int bar_count, bar_gen;
  int dead; /* 1 + rank of a process that stopped abnormally */
  uint64_t xchg[CW_MAX_RANKS];
  int flag[8];
  unsigned char user[CW_USER_BYTES];
};

struct cw {
  const char *name;
  enum cw_mode mode;
  int nranks, nlocal, ngpus;
  struct cw_rank r[CW_MAX_RANKS];
  struct cw_shared *sh;
  int id_round;
  int argc;
  char **argv; /* arguments after the mode */
};

typedef void (*cw_body_fn)(struct cw *w, void *ctx);

/* The whole main() of a driver. Mode from argv[1] ("mp" or "all"; `modes`
 * lists the accepted ones, e.g. "mp,all"), the rest of argv is left in
 * w->argv. GPU probe (skip 77 with < 2 devices), then body(w, ctx) in each
 * rank process (mp) or in this process (all), with a watchdog of limit_s.
 * Devices, contexts and streams are set up before the body; the body makes
 * and destroys the communicators (cw_init_comms / cw_destroy_comms). After
 * every body has returned, report(w, ctx) runs in the parent / the process
 * (may be NULL) and can read w->sh->user. Returns the exit code. */
int cw_main(const char *name, const char *modes, int argc, char **argv, double limit_s, cw_body_fn body,
            cw_body_fn report, void *ctx);

/* ---- messages ------------------------------------------------------------- */

/* printf to stdout with "[<test> <mode>]" (and " rank R" in mp) prefix. */
void cw_log(const struct cw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* What this process is doing, for the watchdog and stream-wait messages. */
void cw_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *cw_current_phase(void);
/* A failed check about rank r (NULL: the world). */
void cw_fail_at(const char *file, int line, const struct cw_rank *r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define CW_CHECK(r, cond, ...)                                     \
  do {                                                             \
    if (!(cond)) cw_fail_at(__FILE__, __LINE__, (r), __VA_ARGS__); \
  } while (0)
#define CW_REQUIRE(r, cond, ...)                          \
  do {                                                    \
    if (!(cond)) {                                        \
      cw_fail_at(__FILE__, __LINE__, (r), __VA_ARGS__);   \
      tu_exit_now();                                      \
    }                                                     \
  } while (0)

/* A symm call that must succeed: on failure records the code and
 * symmGetLastError and returns 0. */
int cw_symm_ok(const char *file, int line, const struct cw_rank *r, const char *expr, symmResult_t rc);
#define CW_SYMM(r, call) cw_symm_ok(__FILE__, __LINE__, (r), #call, (call))
#define CW_SYMM_REQUIRE(r, call)          \
  do {                                    \
    if (!CW_SYMM(r, call)) tu_exit_now(); \
  } while (0)

/* ---- CUDA helpers ---------------------------------------------------------- */

void cw_use(const struct cw_rank *r);
/* Poll `s` of rank r until idle: 0 done; 1 still busy after timeout_s; -1
 * the stream failed, the communicator has an asynchronous error, or a peer
 * process died (each reported). */
int cw_stream_poll(const struct cw_rank *r, CUstream s, double timeout_s);
/* cw_stream_poll that must end in 0; otherwise fatal, naming `what`. */
void cw_stream_wait(const struct cw_rank *r, CUstream s, double timeout_s, const char *what);
/* r->stream of every local rank. */
void cw_sync_all(const struct cw *w, double timeout_s, const char *what);

/* Page-locked host memory (cuMemAllocHost in r's context), falling back
 * to malloc (reported once) when the driver refuses. */
struct cw_host {
  void *p;
  size_t bytes;
  int pinned;
};
void cw_host_alloc(const struct cw_rank *r, struct cw_host *h, size_t bytes);
void cw_host_free(const struct cw_rank *r, struct cw_host *h);

/* Load the test kernels' fatbin (COLL_TEST_KERNELS overrides `path`)
 * into r's context. */
CUmodule cw_load_module(const struct cw_rank *r, const char *path);
CUfunction cw_function(const struct cw_rank *r, CUmodule m, const char *name);

/* ---- host coordination ------------------------------------------------------ */

void cw_host_barrier(struct cw *w, const char *what);
/* Minimum of every rank's `v` (mp: through the shared page; all: the
 * minimum over the local values, passed as v[0..nlocal-1]). */
uint64_t cw_min_u64(struct cw *w, const uint64_t *v);

/* ---- communicators and collective host calls ----------------------------- */

symmResult_t cw_init_comms(struct cw *w);
void cw_destroy_comms(struct cw *w);
/* Collective host calls on every local rank: direct in mp, inside one
 * symmGroupStart/End in "all". Arrays are indexed by local rank. */
symmResult_t cw_mem_alloc(struct cw *w, size_t size, void **ptr);
symmResult_t cw_mem_free(struct cw *w, void *const *ptr);
symmResult_t cw_register(struct cw *w, void *const *buf, size_t size, void **handle);
void cw_deregister(struct cw *w, void *const *handle);
/* symmCommGetAsyncError of every local rank must be symmSuccess. */
void cw_check_async(const struct cw *w, const char *after);

/* ---- buffer classes ------------------------------------------------------------ */

enum cw_class { CW_STAGED = 0, CW_REGISTERED = 1, CW_SYMMETRIC = 2, CW_NCLASSES = 3 };
extern const char *const cw_class_name[CW_NCLASSES];

/* One buffer of a class on every local rank (the same size everywhere). */
struct cw_buf {
  enum cw_class cls;
  size_t bytes;
  CUdeviceptr p[CW_MAX_RANKS];
  void *handle[CW_MAX_RANKS]; /* registration handles */
};
/* Collective (registers / symmMemAllocs on every rank). Fatal on failure. */
void cw_buf_alloc(struct cw *w, struct cw_buf *b, enum cw_class cls, size_t bytes);
void cw_buf_free(struct cw *w, struct cw_buf *b);

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

#endif /* SYMM_COLL_UTIL_H */
