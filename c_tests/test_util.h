/*
 * Helpers shared by the symmcomm C test drivers:
 *  - CHECK/REQUIRE assertions that count failures and keep going,
 *  - a GPU probe that runs in a forked child (so the test process itself
 *    never initialises CUDA and may still fork ranks afterwards),
 *  - a tiny CUDA driver-API loader (dlopen + dlsym, hand-written types) so
 *    the drivers build without a CUDA toolkit,
 *  - a "run N ranks in N forked processes" harness with a hard deadline.
 */
#ifndef SYMM_TEST_UTIL_H
#define SYMM_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "symmcomm.h"

/* Exit code CTest treats as "skipped" (SKIP_RETURN_CODE). */
#define TU_SKIP 77

/* ---- assertions ------------------------------------------------------- */

/* Number of failed CHECKs so far in this process. */
extern int tu_failures;

void tu_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Record a failure (with a printf-style explanation) and continue. */
#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) tu_fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/* Record a failure and stop the program now (exit 1). */
#define REQUIRE(cond, ...)                        \
  do {                                            \
    if (!(cond)) {                                \
      tu_fail(__FILE__, __LINE__, __VA_ARGS__);   \
      tu_exit_now();                              \
    }                                             \
  } while (0)

void tu_exit_now(void) __attribute__((noreturn));

/* Print a summary line and return the process exit code (0 or 1). */
int tu_finish(const char *test_name);

/* Print "skipped: no CUDA device (<reason>)" and exit with TU_SKIP. */
void tu_skip_no_gpu(const char *reason) __attribute__((noreturn));

/* Print "skipped: <printf-style reason>" and exit with TU_SKIP (for tests
 * that need more than "a GPU", e.g. two of them). */
void tu_skip(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* ---- small utilities -------------------------------------------------- */

/* Monotonic clock in seconds. */
double tu_now(void);

/* Case-insensitive substring test; NULL-safe (NULL contains nothing). */
int tu_contains_ci(const char *haystack, const char *needle);

/* "symmInvalidArgument" etc., from a table of our own (not the library's). */
const char *tu_result_name(int code);

/* A stable copy of symmGetLastError(comm) (the library's string is only
 * valid until the next failure recorded in the same place). NULL stays
 * NULL so that callers can detect it. */
const char *tu_last_error(symmComm_t comm, char *buf, size_t len);

/* ---- the header's function list -------------------------------------- */

#define TU_NAME_MAX 128

/* The functions symmcomm.h declares: every `symm<ident>(` inside its
 * extern "C" block, comments skipped, in order of appearance. Returns the
 * number found (at most `max`), or -1 if the file cannot be read or has no
 * extern "C" block, or a name is declared twice. Parsed rather than listed
 * so that a function added to the header is checked without editing the
 * tests. */
int tu_header_functions(const char *path, char (*names)[TU_NAME_MAX], int max);

/* ---- GPU probe -------------------------------------------------------- */

/* Number of CUDA devices, found in a forked child that dlopens libcuda.so.1
 * and calls cuInit/cuDeviceGetCount, so this process stays CUDA-free.
 * Returns >= 0; when 0, `reason` says why (no driver, cuInit failure, ...).
 * Returns -1 if the probe itself broke (fork failed, child crashed or hung);
 * `reason` then says how. */
int tu_gpu_count(char *reason, size_t len);

/* ---- CUDA driver API, loaded at run time ------------------------------ */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;
/* The same struct the symmcomm header uses, so streams pass straight through. */
typedef struct CUstream_st *CUstream;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

/* The few driver constants the tests use (values from cuda.h). */
#define TU_CUDA_ERROR_NOT_READY 600
#define TU_CU_STREAM_NON_BLOCKING 1u
#define TU_CU_STREAM_CAPTURE_MODE_GLOBAL 0
#define TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define TU_CU_STREAM_CAPTURE_MODE_RELAXED 2

struct tu_cuda_api {
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuDeviceGetCount)(int *count);
  CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuMemAlloc)(CUdeviceptr *ptr, size_t bytes);             /* cuMemAlloc_v2 */
  CUresult (*cuMemFree)(CUdeviceptr ptr);                             /* cuMemFree_v2 */
  CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes); /* cuMemcpyDtoH_v2 */
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes); /* cuMemcpyHtoD_v2 */
  CUresult (*cuStreamCreate)(CUstream *stream, unsigned int flags);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuStreamDestroy)(CUstream stream); /* cuStreamDestroy_v2 */
  /* Optional (NULL if absent): only used to name errors. */
  CUresult (*cuGetErrorName)(CUresult err, const char **name);
  /* Extended set: resolved when present, NULL otherwise (tu_cuda_load does
   * not fail for them). Drivers that load modules, launch kernels or
   * capture graphs call tu_cuda_load_ext, which requires all of them. */
  CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
  CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
  CUresult (*cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes); /* cuMemGetInfo_v2 */
  CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule module, const char *name);
  CUresult (*cuLaunchKernel)(CUfunction fn, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                             unsigned int block_x, unsigned int block_y, unsigned int block_z,
                             unsigned int shared_bytes, CUstream stream, void **params, void **extra);
  CUresult (*cuStreamQuery)(CUstream stream);
  CUresult (*cuStreamBeginCapture)(CUstream stream, int mode); /* cuStreamBeginCapture_v2 */
  CUresult (*cuStreamEndCapture)(CUstream stream, CUgraph *graph);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
  CUresult (*cuGraphLaunch)(CUgraphExec exec, CUstream stream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec exec);
  CUresult (*cuGraphDestroy)(CUgraph graph);
  CUresult (*cuDevicePrimaryCtxReset)(CUdevice dev); /* cuDevicePrimaryCtxReset_v2 */
};

/* Filled by tu_cuda_load. */
extern struct tu_cuda_api tu_cu;

/* dlopen libcuda.so.1 and resolve every entry of tu_cu. 0 on success,
 * else -1 with `reason` set. Idempotent. Does not call cuInit. */
int tu_cuda_load(char *reason, size_t len);

/* tu_cuda_load, then require the extended entries too (-1 + reason naming
 * the first missing one). */
int tu_cuda_load_ext(char *reason, size_t len);

/* cuInit, then make device `ordinal`'s primary context current on this
 * thread (what a rank does before symmCommInitRank). 0 or -1 + reason. */
int tu_cuda_use_device(int ordinal, char *reason, size_t len);

/* "CUDA_ERROR_INVALID_VALUE (1)" or "CUDA error 1". */
const char *tu_cu_error(CUresult r);

/* cuMemcpyHtoD that returns once the bytes are on the device: the drivers
 * upload with this, never with cuMemcpyHtoD itself, and need no sync after.
 * From pageable memory the driver's synchronous copy returns once the bytes
 * are staged, before its DMA ends (CUDA's "API synchronization behavior"),
 * and the harness's non-blocking streams do not wait for the legacy stream
 * it ran on: a collective enqueued next could read the old bytes. It waits
 * for the legacy stream only, not the whole context, so it never waits
 * behind another rank's kernel spinning on a peer. */
CUresult tu_upload(CUdeviceptr dst, const void *src, size_t bytes);

/* Run a driver call; on failure report it and exit (the harness is broken,
 * not the library). */
#define CU_REQUIRE(call)                                                              \
  do {                                                                                \
    CUresult cu_rc_ = (call);                                                         \
    REQUIRE(cu_rc_ == 0, "CUDA call %s failed: %s", #call, tu_cu_error(cu_rc_));      \
  } while (0)

/* ---- forked ranks ----------------------------------------------------- */

/* What one rank reports back to the parent (through a pipe). */
struct tu_rank_result {
  int reported;      /* set by the harness: 1 if the child sent a report */
  int code;          /* what symmCommInitRank returned */
  double elapsed;    /* seconds the symmCommInitRank call took */
  int count, rank, device, async_error; /* queries on success (else -1) */
  int destroy_code;  /* symmCommDestroy's result on success (else -1) */
  char msg[640];     /* symmGetLastError after a failure, or a harness note */
};

/* Body of one rank; runs in a forked child. Fill `out` (already zeroed,
 * queries preset to -1). */
typedef void (*tu_rank_fn)(int rank, void *ctx, struct tu_rank_result *out);

/* Fork `nranks` children, each running fn(rank, ctx, &results[rank]), and
 * collect their reports. Children still running after `limit_s` seconds are
 * killed. Returns 0 if every child reported, else -1 (and says which did
 * not, in results[r].msg, and on stderr). */
int tu_run_ranks(int nranks, tu_rank_fn fn, void *ctx, double limit_s, struct tu_rank_result *results);

/* The usual rank body tail: after a successful init, fill the queries and
 * destroy the communicator; after a failure, copy the message. */
void tu_rank_finish(symmResult_t rc, symmComm_t comm, struct tu_rank_result *out);

#endif /* SYMM_TEST_UTIL_H */
