/* GPU driver for libsymmcomm_nccl.so, written against the REAL nccl.h and
 * the CUDA runtime (as an NCCL user would). Modes:
 *   native N  N processes (rank r on GPU r % ngpus): every native
 *             collective x dtype x op with exact checks, send/recv in
 *             groups, window/ncclMemAlloc registration, a non-blocking
 *             config, CUDA-graph capture; then ncclGather/ncclScatter,
 *             RCCL's ncclAllToAllv (native; grouped sends and receives
 *             when forwarded) and
 *             ncclCommSplit (native, with NCCL halves in auto mode) and a
 *             PreMulSum op (native; forwarded with SYMM_NCCL_MODE=nccl),
 *             with checked results. Run with
 *             SYMM_NCCL_MODE=nccl for a forced-NCCL communicator
 *             (everything forwarded, same checks).
 *   group N   one process, N GPUs: ncclCommInitRank for each GPU inside
 *             ncclGroupStart/End, collectives and send/recv from one
 *             thread, then ncclCommInitAll.
 *   kill N    rank N-1 is SIGKILLed while rank 0 is inside an all-reduce:
 *             rank 0's ncclCommGetAsyncError must report an error within
 *             SYMM_TIMEOUT (+10 s), ncclCommAbort must return, and a new
 *             communicator must work.
 * Exit 77 (skip) with fewer GPUs than needed. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* RCCL's all-to-all-v, which the stand-in exports and nccl.h lacks. */
ncclResult_t ncclAllToAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[], void *recvbuff,
                           const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream);

#define DIE(...)                                                        \
  do {                                                                  \
    fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                       \
    fprintf(stderr, "\n");                                              \
    exit(1);                                                            \
  } while (0)
#define NCCL(call)                                                                         \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    if (r_ != ncclSuccess) DIE("%s = %d (%s): %s", #call, r_, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
  } while (0)
#define NCCLC(comm, call)                                                                  \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    if (r_ != ncclSuccess) DIE("%s = %d: %s", #call, r_, ncclGetLastError(comm));          \
  } while (0)
#define CUDA(call)                                                      \
  do {                                                                  \
    cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess) DIE("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

static int g_rank = -1;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- host-side element conversions (values are small integers: exact) -- */
static size_t dt_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
static uint16_t f2h(float f) { /* normal range, integers */
  uint32_t x;
  memcpy(&x, &f, 4);
  if (f == 0) return (uint16_t)(x >> 16);
  uint32_t s = (x >> 16) & 0x8000, e = ((x >> 23) & 0xff) - 127 + 15, m = (x >> 13) & 0x3ff;
  return (uint16_t)(s | (e << 10) | m);
}
static float h2f(uint16_t h) {
  uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
  if (e == 0 && m == 0) x = s;
  else x = s | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static void put(void *buf, size_t i, ncclDataType_t t, double v) {
  char *b = (char *)buf;
  switch (t) {
    case ncclInt8: ((int8_t *)b)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t *)b)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t *)b)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)b)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t *)b)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t *)b)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t *)b)[i] = f2h((float)v); break;
    case ncclFloat32: ((float *)b)[i] = (float)v; break;
    case ncclFloat64: ((double *)b)[i] = v; break;
    case ncclBfloat16: { float f = (float)v; uint32_t x; memcpy(&x, &f, 4); ((uint16_t *)b)[i] = (uint16_t)(x >> 16); break; }
    default: DIE("dtype %d", t);
  }
}
static double get(const void *buf, size_t i, ncclDataType_t t) {
  const char *b = (const char *)buf;
  switch (t) {
    case ncclInt8: return ((const int8_t *)b)[i];
    case ncclUint8: return ((const uint8_t *)b)[i];
    case ncclInt32: return ((const int32_t *)b)[i];
    case ncclUint32: return ((const uint32_t *)b)[i];
    case ncclInt64: return (double)((const int64_t *)b)[i];
    case ncclUint64: return (double)((const uint64_t *)b)[i];
    case ncclFloat16: return h2f(((const uint16_t *)b)[i]);
    case ncclFloat32: return ((const float *)b)[i];
    case ncclFloat64: return ((const double *)b)[i];
    case ncclBfloat16: { uint32_t x = (uint32_t)((const uint16_t *)b)[i] << 16; float f; memcpy(&f, &x, 4); return f; }
    default: DIE("dtype %d", t);
  }
  return 0;
}

/* Rank r's element i: small positive integers; for avg, ranks pair up
 * (+d, -d) so the mean is the exact integer base. */
static double val(int r, int n, size_t i, ncclRedOp_t op) {
  double base = (double)(i % 5) + 2;
  if (op == ncclAvg) return base + ((r % 2 == 0) ? 1 : -1) * (double)(i % 2) * ((n % 2 == 0 || r != n - 1) ? 1 : 0);
  if (op == ncclProd) return (double)((i + r) % 2) + 1;
  return (double)((i + r) % 4) + 1;
}
static double reduce_expect(int n, size_t i, ncclRedOp_t op) {
  double acc = val(0, n, i, op);
  for (int r = 1; r < n; r++) {
    double v = val(r, n, i, op);
    if (op == ncclSum || op == ncclAvg) acc += v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  return op == ncclAvg ? acc / n : acc;
}

static void *dev_fill(size_t count, ncclDataType_t t, int r, int n, ncclRedOp_t op) {
  void *h = malloc(count * dt_size(t) + 1), *d;
  for (size_t i = 0; i < count; i++) put(h, i, t, val(r, n, i, op));
  CUDA(cudaMalloc(&d, count * dt_size(t) + 1));
  CUDA(cudaMemcpy(d, h, count * dt_size(t), cudaMemcpyHostToDevice));
  /* From pageable memory cudaMemcpy may return before the DMA lands, and
   * the collectives run on a non-blocking stream that does not wait for it:
   * without this, a kernel could read the previous buffer's bytes. */
  CUDA(cudaDeviceSynchronize());
  free(h);
  return d;
}
static void *dev_to_host(const void *d, size_t bytes) {
  void *h = malloc(bytes + 1);
  CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

static const ncclDataType_t kTypes[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                        ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};
static const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

static void check_allreduce(ncclComm_t c, cudaStream_t s, int r, int n, ncclDataType_t t, ncclRedOp_t op, size_t count) {
  void *in = dev_fill(count, t, r, n, op), *out;
  CUDA(cudaMalloc(&out, count * dt_size(t)));
  NCCLC(c, ncclAllReduce(in, out, count, t, op, c, s));
  CUDA(cudaStreamSynchronize(s));
  void *h = dev_to_host(out, count * dt_size(t));
  for (size_t i = 0; i < count; i++) {
    double want = reduce_expect(n, i, op), got = get(h, i, t);
    if (got != want) DIE("allreduce dtype %d op %d count %zu: [%zu] = %g, want %g", t, op, count, i, got, want);
  }
  free(h);
  CUDA(cudaFree(in));
  CUDA(cudaFree(out));
}

static void check_others(ncclComm_t c, cudaStream_t s, int r, int n, ncclDataType_t t, size_t count) {
  size_t es = dt_size(t);
  void *in = dev_fill(count * n, t, r, n, ncclSum), *out, *h;
  CUDA(cudaMalloc(&out, count * n * es));
  /* all-gather: block q = rank q's first `count` elements */
  NCCLC(c, ncclAllGather(in, out, count, t, c, s));
  CUDA(cudaStreamSynchronize(s));
  h = dev_to_host(out, count * n * es);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      if (get(h, q * count + i, t) != val(q, n, i, ncclSum)) DIE("allgather dtype %d [%d][%zu]", t, q, i);
  free(h);
  /* reduce-scatter: my block of the sum */
  NCCLC(c, ncclReduceScatter(in, out, count, t, ncclSum, c, s));
  CUDA(cudaStreamSynchronize(s));
  h = dev_to_host(out, count * es);
  for (size_t i = 0; i < count; i++)
    if (get(h, i, t) != reduce_expect(n, r * count + i, ncclSum)) DIE("reducescatter dtype %d [%zu]", t, i);
  free(h);
  /* broadcast from the last rank, and ncclBcast in place from rank 0 */
  NCCLC(c, ncclBroadcast(in, out, count, t, n - 1, c, s));
  CUDA(cudaStreamSynchronize(s));
  h = dev_to_host(out, count * es);
  for (size_t i = 0; i < count; i++)
    if (get(h, i, t) != val(n - 1, n, i, ncclSum)) DIE("broadcast dtype %d [%zu]", t, i);
  free(h);
  /* reduce (max) to root 0 */
  NCCLC(c, ncclReduce(in, out, count, t, ncclMax, 0, c, s));
  CUDA(cudaStreamSynchronize(s));
  if (r == 0) {
    h = dev_to_host(out, count * es);
    for (size_t i = 0; i < count; i++)
      if (get(h, i, t) != reduce_expect(n, i, ncclMax)) DIE("reduce dtype %d [%zu]", t, i);
    free(h);
  }
  /* all-to-all: block q of out = block r of rank q's in */
  NCCLC(c, ncclAlltoAll(in, out, count, t, c, s));
  CUDA(cudaStreamSynchronize(s));
  h = dev_to_host(out, count * n * es);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      if (get(h, q * count + i, t) != val(q, n, r * count + i, ncclSum)) DIE("alltoall dtype %d [%d][%zu]", t, q, i);
  free(h);
  /* send/recv ring in a group: receive the left neighbour's data */
  NCCL(ncclGroupStart());
  NCCLC(c, ncclSend(in, count, t, (r + 1) % n, c, s));
  NCCLC(c, ncclRecv(out, count, t, (r + n - 1) % n, c, s));
  NCCL(ncclGroupEnd());
  CUDA(cudaStreamSynchronize(s));
  h = dev_to_host(out, count * es);
  for (size_t i = 0; i < count; i++)
    if (get(h, i, t) != val((r + n - 1) % n, n, i, ncclSum)) DIE("sendrecv dtype %d [%zu]", t, i);
  free(h);
  CUDA(cudaFree(in));
  CUDA(cudaFree(out));
}

static void check_forwarded(ncclComm_t c, cudaStream_t s, int r, int n) {
  const size_t count = 4096;
  float *in = dev_fill(count * n, ncclFloat32, r, n, ncclSum), *out;
  CUDA(cudaMalloc((void **)&out, count * n * 4));
  /* gather to root 0, scatter from root n-1 (grouped sends and receives) */
  NCCLC(c, ncclGather(in, out, count, ncclFloat32, 0, c, s));
  CUDA(cudaStreamSynchronize(s));
  if (r == 0) {
    float *h = dev_to_host(out, count * n * 4);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++)
        if (h[q * count + i] != val(q, n, i, ncclSum)) DIE("gather [%d][%zu]", q, i);
    free(h);
  }
  NCCLC(c, ncclScatter(in, out, count, ncclFloat32, n - 1, c, s));
  CUDA(cudaStreamSynchronize(s));
  float *h = dev_to_host(out, count * 4);
  for (size_t i = 0; i < count; i++)
    if (h[i] != val(n - 1, n, r * count + i, ncclSum)) DIE("scatter [%zu]", i);
  free(h);
  /* all-to-all-v (RCCL's): rank q sends a2av_count(q, p) elements of its
   * input, packed in peer order, to rank p, which stores them packed in
   * peer order too; a third of the pairs send nothing. */
  size_t sc[64], sd[64], rc[64], rd[64], at_s = 0, at_r = 0;
  for (int q = 0; q < n; q++) {
    sc[q] = (r + q) % 3 == 0 ? 0 : (size_t)((r * n + q) % 4) * 300 + 7;
    sd[q] = at_s;
    at_s += sc[q];
    rc[q] = (q + r) % 3 == 0 ? 0 : (size_t)((q * n + r) % 4) * 300 + 7;
    rd[q] = at_r;
    at_r += rc[q];
  }
  if (at_s > count * n || at_r > count * n) DIE("all-to-all-v plan larger than the buffers");
  NCCLC(c, ncclAllToAllv(in, sc, sd, out, rc, rd, ncclFloat32, c, s));
  CUDA(cudaStreamSynchronize(s));
  h = dev_to_host(out, count * n * 4);
  for (int q = 0; q < n; q++) {
    /* Where rank q's block for this rank starts in q's input. */
    size_t from = 0;
    for (int p = 0; p < r; p++) from += (q + p) % 3 == 0 ? 0 : (size_t)((q * n + p) % 4) * 300 + 7;
    for (size_t i = 0; i < rc[q]; i++)
      if (h[rd[q] + i] != val(q, n, from + i, ncclSum)) DIE("all-to-all-v [%d][%zu]", q, i);
  }
  free(h);
  /* PreMulSum: sum of 0.5 * x */
  float half = 0.5f;
  ncclRedOp_t op;
  NCCLC(c, ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, c));
  NCCLC(c, ncclAllReduce(in, out, count, ncclFloat32, op, c, s));
  CUDA(cudaStreamSynchronize(s));
  NCCLC(c, ncclRedOpDestroy(op, c));
  h = dev_to_host(out, count * 4);
  for (size_t i = 0; i < count; i++)
    if (h[i] != 0.5 * reduce_expect(n, i, ncclSum)) DIE("premulsum [%zu] = %g", i, h[i]);
  free(h);
  /* split: reversed ranks in one colour (native, NCCL half alongside) */
  ncclComm_t child = NULL;
  NCCLC(c, ncclCommSplit(c, 0, n - r, &child, NULL));
  int cr = -1, cn = -1;
  NCCLC(child, ncclCommUserRank(child, &cr));
  NCCLC(child, ncclCommCount(child, &cn));
  if (cr != n - 1 - r || cn != n) DIE("split child rank %d of %d", cr, cn);
  check_allreduce(child, s, cr, cn, ncclFloat32, ncclSum, 1000);
  NCCLC(child, ncclCommDestroy(child));
  CUDA(cudaFree(in));
  CUDA(cudaFree(out));
}

static void check_registered(ncclComm_t c, cudaStream_t s, int r, int n) {
  const size_t count = 1 << 18;
  /* a window (symmetric registration) on an ncclMemAlloc buffer: the real
   * NCCL (forced-NCCL runs) accepts windows only on such memory */
  float *in = dev_fill(count, ncclFloat32, r, n, ncclSum), *out, *win_buf;
  CUDA(cudaMalloc((void **)&out, count * 4));
  NCCLC(c, ncclMemAlloc((void **)&win_buf, count * 4));
  /* On s, not cudaMemcpy: a device-to-device cudaMemcpy returns before it
   * ends, on the legacy stream, which s (non-blocking) does not wait for. */
  CUDA(cudaMemcpyAsync(win_buf, in, count * 4, cudaMemcpyDeviceToDevice, s));
  ncclWindow_t win;
  NCCLC(c, ncclCommWindowRegister(c, win_buf, count * 4, &win, NCCL_WIN_COLL_SYMMETRIC));
  NCCLC(c, ncclAllReduce(win_buf, out, count, ncclFloat32, ncclSum, c, s));
  CUDA(cudaStreamSynchronize(s));
  float *h = dev_to_host(out, count * 4);
  for (size_t i = 0; i < count; i++)
    if (h[i] != reduce_expect(n, i, ncclSum)) DIE("window allreduce [%zu]", i);
  free(h);
  NCCLC(c, ncclCommWindowDeregister(c, win));
  NCCL(ncclMemFree(win_buf));
  /* ncclMemAlloc + ncclCommRegister */
  void *m, *handle;
  NCCLC(c, ncclMemAlloc(&m, count * 4));
  CUDA(cudaMemcpyAsync(m, in, count * 4, cudaMemcpyDeviceToDevice, s));
  NCCLC(c, ncclCommRegister(c, m, count * 4, &handle));
  NCCLC(c, ncclAllReduce(m, m, count, ncclFloat32, ncclMax, c, s));
  CUDA(cudaStreamSynchronize(s));
  h = dev_to_host(m, count * 4);
  for (size_t i = 0; i < count; i++)
    if (h[i] != reduce_expect(n, i, ncclMax)) DIE("memalloc allreduce [%zu]", i);
  free(h);
  NCCLC(c, ncclCommDeregister(c, handle));
  NCCL(ncclMemFree(m));
  CUDA(cudaFree(in));
  CUDA(cudaFree(out));
}

static void check_graph(ncclComm_t c, cudaStream_t s, int r, int n) {
  const size_t count = 1024;
  float *in = dev_fill(count, ncclFloat32, r, n, ncclSum), *out;
  CUDA(cudaMalloc((void **)&out, count * 4));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  NCCLC(c, ncclAllReduce(in, out, count, ncclFloat32, ncclSum, c, s));
  NCCLC(c, ncclAllReduce(out, out, count, ncclFloat32, ncclSum, c, s));
  CUDA(cudaStreamEndCapture(s, &g));
  CUDA(cudaGraphInstantiate(&ge, g, 0));
  for (int it = 0; it < 3; it++) {
    CUDA(cudaMemsetAsync(out, 0, count * 4, s)); /* ordered before the replay (cudaMemset is not) */
    CUDA(cudaGraphLaunch(ge, s));
    CUDA(cudaStreamSynchronize(s));
    float *h = dev_to_host(out, count * 4);
    for (size_t i = 0; i < count; i++)
      if (h[i] != n * reduce_expect(n, i, ncclSum)) DIE("graph replay %d [%zu] = %g", it, i, h[i]);
    free(h);
  }
  CUDA(cudaGraphExecDestroy(ge));
  CUDA(cudaGraphDestroy(g));
  CUDA(cudaFree(in));
  CUDA(cudaFree(out));
}

static ncclComm_t init_nonblocking(int n, ncclUniqueId id, int r) {
  ncclComm_t c = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t res = ncclCommInitRankConfig(&c, n, id, r, &cfg);
  if (res != ncclSuccess && res != ncclInProgress) DIE("init: %d: %s", res, ncclGetLastError(NULL));
  ncclResult_t state;
  do NCCLC(c, ncclCommGetAsyncError(c, &state));
  while (state == ncclInProgress);
  if (state != ncclSuccess) DIE("init async error %d", state);
  return c;
}

static int rank_native(int n, ncclUniqueId id, int r, int ngpus) {
  CUDA(cudaSetDevice(r % ngpus));
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclComm_t c = init_nonblocking(n, id, r);
  int cn, cr, cd;
  NCCLC(c, ncclCommCount(c, &cn));
  NCCLC(c, ncclCommUserRank(c, &cr));
  NCCLC(c, ncclCommCuDevice(c, &cd));
  if (cn != n || cr != r || cd != r % ngpus) DIE("queries %d %d %d", cn, cr, cd);
  const size_t counts[] = {1, 1000, 300001};
  for (size_t ti = 0; ti < sizeof kTypes / sizeof *kTypes; ti++)
    for (size_t oi = 0; oi < sizeof kOps / sizeof *kOps; oi++)
      for (size_t ci = 0; ci < 3; ci++) check_allreduce(c, s, r, n, kTypes[ti], kOps[oi], counts[ci]);
  for (size_t ti = 0; ti < sizeof kTypes / sizeof *kTypes; ti++) {
    check_others(c, s, r, n, kTypes[ti], 777);
    check_others(c, s, r, n, kTypes[ti], 200000);
  }
  check_registered(c, s, r, n);
  check_graph(c, s, r, n);
  check_forwarded(c, s, r, n);
  ncclResult_t ae;
  NCCLC(c, ncclCommGetAsyncError(c, &ae));
  if (ae != ncclSuccess) DIE("async error %d: %s", ae, ncclGetLastError(c));
  NCCLC(c, ncclCommFinalize(c));
  NCCLC(c, ncclCommDestroy(c));
  printf("[rank %d] native checks passed\n", r);
  return 0;
}

static int rank_kill(int n, ncclUniqueId id, int r, int ngpus) {
  CUDA(cudaSetDevice(r % ngpus));
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclComm_t c;
  NCCL(ncclCommInitRank(&c, n, id, r));
  check_allreduce(c, s, r, n, ncclFloat32, ncclSum, 4096);
  if (r == n - 1) {
    usleep(500 * 1000); /* the others are inside the next all-reduce by now */
    printf("[rank %d] killing myself\n", r);
    fflush(stdout);
    raise(SIGKILL);
  }
  float *buf;
  CUDA(cudaMalloc((void **)&buf, 1 << 20));
  double t0 = now();
  NCCLC(c, ncclAllReduce(buf, buf, 1 << 18, ncclFloat32, ncclSum, c, s));
  const char *tmo = getenv("SYMM_TIMEOUT");
  double limit = (tmo ? atof(tmo) : 120) + 10;
  ncclResult_t ae = ncclSuccess;
  while (ae == ncclSuccess) {
    if (now() - t0 > limit) DIE("no async error after %.1f s (SYMM_TIMEOUT + 10)", now() - t0);
    usleep(10 * 1000);
    NCCLC(c, ncclCommGetAsyncError(c, &ae));
  }
  printf("[rank %d] async error %d after %.2f s: %s\n", r, ae, now() - t0, ncclGetLastError(c));
  double t1 = now();
  NCCL(ncclCommAbort(c));
  printf("[rank %d] ncclCommAbort returned in %.2f s\n", r, now() - t1);
  CUDA(cudaStreamSynchronize(s));
  /* The process goes on: a new (one-rank) communicator works. */
  ncclUniqueId id2;
  NCCL(ncclGetUniqueId(&id2));
  ncclComm_t c2;
  NCCL(ncclCommInitRank(&c2, 1, id2, 0));
  check_allreduce(c2, s, 0, 1, ncclFloat32, ncclSum, 1000);
  NCCL(ncclCommDestroy(c2));
  printf("[rank %d] new communicator after the abort works\n", r);
  return 0;
}

/* A grouped all-reduce (one thread, every device's communicator), checked. */
static void group_allreduce(ncclComm_t *comms, cudaStream_t *streams, float **in, float **out, int n, size_t count,
                            ncclRedOp_t op, const char *what) {
  NCCL(ncclGroupStart());
  for (int d = 0; d < n; d++) NCCL(ncclAllReduce(in[d], out[d], count, ncclFloat32, op, comms[d], streams[d]));
  NCCL(ncclGroupEnd());
  for (int d = 0; d < n; d++) {
    CUDA(cudaSetDevice(d));
    CUDA(cudaStreamSynchronize(streams[d]));
    float *h = dev_to_host(out[d], count * 4);
    for (size_t i = 0; i < count; i++)
      if (h[i] != reduce_expect(n, i, op)) DIE("%s dev %d [%zu]", what, d, i);
    free(h);
  }
}

static int run_group(int n, int ngpus) {
  (void)ngpus;
  g_rank = 0;
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  ncclComm_t comms[8];
  cudaStream_t streams[8];
  NCCL(ncclGroupStart());
  for (int d = 0; d < n; d++) {
    CUDA(cudaSetDevice(d));
    CUDA(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking));
    NCCL(ncclCommInitRank(&comms[d], n, id, d));
  }
  NCCL(ncclGroupEnd());
  const size_t count = 100000;
  float *in[8], *out[8];
  for (int d = 0; d < n; d++) {
    CUDA(cudaSetDevice(d));
    in[d] = dev_fill(count, ncclFloat32, d, n, ncclSum);
    CUDA(cudaMalloc((void **)&out[d], count * 4));
  }
  group_allreduce(comms, streams, in, out, n, count, ncclSum, "group allreduce");
  /* A ring of sends and receives from one thread: only works in a group. */
  NCCL(ncclGroupStart());
  for (int d = 0; d < n; d++) {
    NCCL(ncclSend(in[d], count, ncclFloat32, (d + 1) % n, comms[d], streams[d]));
    NCCL(ncclRecv(out[d], count, ncclFloat32, (d + n - 1) % n, comms[d], streams[d]));
  }
  NCCL(ncclGroupEnd());
  for (int d = 0; d < n; d++) {
    CUDA(cudaSetDevice(d));
    CUDA(cudaStreamSynchronize(streams[d]));
    float *h = dev_to_host(out[d], count * 4);
    for (size_t i = 0; i < count; i++)
      if (h[i] != val((d + n - 1) % n, n, i, ncclSum)) DIE("group sendrecv dev %d [%zu]", d, i);
    free(h);
  }
  for (int d = 0; d < n; d++) NCCL(ncclCommDestroy(comms[d]));
  NCCL(ncclCommInitAll(comms, n, NULL));
  for (int d = 0; d < n; d++) {
    CUDA(cudaSetDevice(d));
    int cd;
    NCCL(ncclCommCuDevice(comms[d], &cd));
    if (cd != d) DIE("InitAll device %d", cd);
  }
  group_allreduce(comms, streams, in, out, n, count, ncclMax, "InitAll allreduce");
  for (int d = 0; d < n; d++) NCCL(ncclCommDestroy(comms[d]));
  printf("nccl_gpu group %d: OK\n", n);
  return 0;
}

static void hex(const ncclUniqueId *id, char *out) {
  for (int i = 0; i < 128; i++) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}
static void unhex(const char *s, ncclUniqueId *id) {
  for (int i = 0; i < 128; i++) {
    unsigned v;
    sscanf(s + 2 * i, "%2x", &v);
    id->internal[i] = (char)v;
  }
}

int main(int argc, char **argv) {
  if (argc >= 6 && strcmp(argv[1], "rank") == 0) { /* child */
    int n = atoi(argv[3]), r = atoi(argv[4]), ngpus;
    g_rank = r;
    ncclUniqueId id;
    unhex(argv[5], &id);
    alarm(280);
    CUDA(cudaGetDeviceCount(&ngpus));
    return strcmp(argv[2], "kill") == 0 ? rank_kill(n, id, r, ngpus) : rank_native(n, id, r, ngpus);
  }
  if (argc < 3) {
    fprintf(stderr, "usage: %s native|group|kill N\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  int n = atoi(argv[2]), ngpus = 0;
  if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus < 2 || ngpus < n) {
    printf("skipped: needs %d GPUs, found %d\n", n, ngpus);
    return 77;
  }
  if (strcmp(mode, "group") == 0) return run_group(n, ngpus);
  /* Separate processes (exec, not just fork: no CUDA or NCCL state shared). */
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  char idhex[257], nstr[16], rstr[16];
  hex(&id, idhex);
  snprintf(nstr, sizeof nstr, "%d", n);
  pid_t pids[8];
  for (int r = 0; r < n; r++) {
    snprintf(rstr, sizeof rstr, "%d", r);
    pids[r] = fork();
    if (pids[r] == 0) {
      execl("/proc/self/exe", argv[0], "rank", mode, nstr, rstr, idhex, (char *)NULL);
      _exit(127);
    }
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    int killed_as_planned = strcmp(mode, "kill") == 0 && r == n - 1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    if (!killed_as_planned && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      fprintf(stderr, "rank %d failed (status %#x)\n", r, st);
      bad = 1;
    }
  }
  if (!bad) printf("nccl_gpu %s %d: OK\n", mode, n);
  return bad;
}
