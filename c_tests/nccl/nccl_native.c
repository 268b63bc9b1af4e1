/* What PyTorch and nccl-tests need of libsymmcomm_nccl.so beyond plain
 * collectives, written against the REAL nccl.h and the CUDA runtime.
 * Run with SYMM_NCCL_MODE=symm (nothing can fall back to NCCL) and
 * SYMM_DEBUG=INFO (the log is captured and checked).
 *
 *   one      one process, one rank, the way nccl-tests -g 1 runs:
 *            ncclCommInitRankConfig inside a group, ncclMemAlloc buffers,
 *            windows registered inside a group, then every collective
 *            (all-reduce x 5 ops, all-gather, reduce-scatter, broadcast,
 *            ncclBcast, reduce, all-to-all, gather, scatter, send/recv to
 *            itself) x 12 types, out of place and in place, on registered
 *            and unregistered buffers: with one rank every output equals
 *            the input, byte for byte.
 *   mesh N   N processes (rank r on GPU r % ngpus; more ranks than GPUs need
 *            SYMM_TEST_SHARED_DEVICES=1): ncclCommSplit into rows and
 *            columns (a 2 x N/2 grid for N = 4, 8; else reversed keys and
 *            one rank per color), a NOCOLOR split, ncclCommShrink without
 *            the last rank; collectives checked on every child after the
 *            parent is destroyed; then ncclMemAlloc segments (as a
 *            torch.cuda.MemPool holds them) window-registered whole and in
 *            part, with all-gather, all-reduce and reduce-scatter from
 *            tensors inside them; PreMulSum ops (host and device scalars)
 *            on an all-reduce and a reduce-scatter. The log must show
 *            every communicator on the symmcomm path and the registered
 *            inputs read in place.
 * With SYMM_NCCL_MODE=auto (and a real NCCL) the children also get NCCL
 * halves; ranks cannot share a GPU then (NCCL refuses), so it skips.
 * Exit 77 (skip) without enough GPUs. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_rank = -1;
static int g_saved_err = -1;
static FILE *g_log;

/* Put stderr back and copy what the library logged to it. */
static void release_log(void) {
  if (!g_log) return;
  fflush(stderr);
  dup2(g_saved_err, 2);
  rewind(g_log);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, g_log)) > 0) fwrite(buf, 1, n, stderr);
  fflush(stderr);
}

#define DIE(...)                                                           \
  do {                                                                     \
    release_log();                                                         \
    fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                          \
    fprintf(stderr, "\n");                                                 \
    exit(1);                                                               \
  } while (0)
#define NCCL(comm, call)                                                                  \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess) DIE("%s = %d: %s", #call, r_, ncclGetLastError(comm));         \
  } while (0)
#define CUDA(call)                                                      \
  do {                                                                  \
    cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess) DIE("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

/* Capture stderr (the library's log) in a temporary file. */
static void capture_log(void) {
  fflush(stderr);
  g_log = tmpfile();
  if (!g_log) DIE("tmpfile");
  g_saved_err = dup(2);
  dup2(fileno(g_log), 2);
}

/* The captured log as a string (caller frees). */
static char *log_text(void) {
  fflush(stderr);
  long end = ftell(g_log);
  char *t = calloc(1, (size_t)end + 1);
  rewind(g_log);
  size_t got = fread(t, 1, (size_t)end, g_log);
  t[got] = 0;
  fseek(g_log, 0, SEEK_END);
  return t;
}

static size_t count_of(const char *text, const char *needle) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p++) n++;
  return n;
}

static size_t dt_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

/* Bytes 0x20..0x3f: every element of every type is a positive, normal,
 * finite number (or a positive integer), so a one-rank reduction returns
 * it unchanged. */
static void pattern(unsigned char *h, size_t bytes, unsigned salt) {
  for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)(0x20 + (i * 7 + salt) % 32);
}

static void *dev_pattern(void *d, size_t bytes, unsigned salt) {
  unsigned char *h = malloc(bytes);
  pattern(h, bytes, salt);
  CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  CUDA(cudaDeviceSynchronize());
  free(h);
  return d;
}

static void expect_pattern(const void *d, size_t bytes, unsigned salt, const char *what) {
  unsigned char *h = malloc(bytes), *w = malloc(bytes);
  CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  pattern(w, bytes, salt);
  for (size_t i = 0; i < bytes; i++)
    if (h[i] != w[i]) DIE("%s: byte %zu is %#x, want %#x", what, i, h[i], w[i]);
  free(h);
  free(w);
}

/* ---- one rank, as nccl-tests -g 1 ------------------------------------------ */

static int run_one(void) {
  g_rank = 0;
  capture_log();
  int v = 0;
  NCCL(NULL, ncclGetVersion(&v));
  if (v < 22800) DIE("ncclGetVersion %d", v);
  ncclUniqueId id;
  NCCL(NULL, ncclGetUniqueId(&id));
  ncclComm_t c;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.nvlinkCentricSched = 1; /* what nccl-tests 2.19 sets */
  CUDA(cudaSetDevice(0));
  NCCL(NULL, ncclGroupStart());
  NCCL(NULL, ncclCommInitRankConfig(&c, 1, id, 0, &cfg));
  NCCL(NULL, ncclGroupEnd());
  int n = -1, r = -1, d = -1;
  NCCL(c, ncclCommCount(c, &n));
  NCCL(c, ncclCommUserRank(c, &r));
  NCCL(c, ncclCommCuDevice(c, &d));
  if (n != 1 || r != 0 || d != 0) DIE("queries %d %d %d", n, r, d);
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t max_bytes = 4 << 20;
  void *sendb, *recvb, *plain_s, *plain_r;
  NCCL(NULL, ncclGroupStart()); /* nccl-tests allocates and registers in a group */
  NCCL(NULL, ncclMemAlloc(&sendb, max_bytes));
  NCCL(NULL, ncclMemAlloc(&recvb, max_bytes));
  ncclWindow_t wins[2];
  NCCL(c, ncclCommWindowRegister(c, sendb, max_bytes, &wins[0], NCCL_WIN_COLL_SYMMETRIC));
  NCCL(c, ncclCommWindowRegister(c, recvb, max_bytes, &wins[1], NCCL_WIN_COLL_SYMMETRIC));
  NCCL(NULL, ncclGroupEnd());
  NCCL(NULL, ncclMemAlloc(&plain_s, max_bytes)); /* not registered: the staged path */
  NCCL(NULL, ncclMemAlloc(&plain_r, max_bytes));
  void *regh;
  NCCL(c, ncclCommRegister(c, plain_r, max_bytes, &regh)); /* local registration: accepted */
  const size_t counts[] = {1, 1000, (1 << 20) + 3};
  unsigned salt = 0;
  for (int reg = 0; reg < 2; reg++) {
    char *sb = reg ? sendb : plain_s, *rb = reg ? recvb : plain_r;
    for (int t = 0; t < ncclNumTypes; t++) {
      for (size_t ci = 0; ci < 3; ci++) {
        size_t es = dt_size(t), count = counts[ci];
        if (count * es > max_bytes) count = max_bytes / es;
        size_t bytes = count * es;
        char what[160];
#define RUN(name, call, out)                                                                        \
  do {                                                                                              \
    snprintf(what, sizeof what, "%s type %d count %zu %s", name, t, count, reg ? "window" : "plain"); \
    salt++;                                                                                         \
    dev_pattern(sb, bytes, salt);                                                                   \
    CUDA(cudaMemset(rb, 0, bytes));                                                                 \
    CUDA(cudaDeviceSynchronize());                                                                  \
    NCCL(c, call);                                                                                  \
    CUDA(cudaStreamSynchronize(s));                                                                 \
    expect_pattern(out, bytes, salt, what);                                                         \
  } while (0)
        for (int op = 0; op < ncclNumOps; op++)
          RUN("all-reduce", ncclAllReduce(sb, rb, count, t, op, c, s), rb);
        RUN("all-reduce in place", ncclAllReduce(sb, sb, count, t, ncclSum, c, s), sb);
        RUN("all-gather", ncclAllGather(sb, rb, count, t, c, s), rb);
        RUN("reduce-scatter", ncclReduceScatter(sb, rb, count, t, ncclMax, c, s), rb);
        RUN("broadcast", ncclBroadcast(sb, rb, count, t, 0, c, s), rb);
        RUN("bcast", ncclBcast(sb, count, t, 0, c, s), sb);
        RUN("reduce", ncclReduce(sb, rb, count, t, ncclMin, 0, c, s), rb);
        RUN("all-to-all", ncclAlltoAll(sb, rb, count, t, c, s), rb);
        RUN("gather", ncclGather(sb, rb, count, t, 0, c, s), rb);
        RUN("scatter", ncclScatter(sb, rb, count, t, 0, c, s), rb);
        snprintf(what, sizeof what, "send/recv to itself type %d count %zu", t, count);
        salt++;
        dev_pattern(sb, bytes, salt);
        NCCL(NULL, ncclGroupStart());
        NCCL(c, ncclSend(sb, count, t, 0, c, s));
        NCCL(c, ncclRecv(rb, count, t, 0, c, s));
        NCCL(NULL, ncclGroupEnd());
        CUDA(cudaStreamSynchronize(s));
        expect_pattern(rb, bytes, salt, what);
      }
    }
  }
  /* A root that is not a rank: refused with a message naming it, nothing enqueued. */
  for (int bad_root = -1; bad_root <= 1; bad_root += 2) {
    ncclResult_t rc = ncclGather(sendb, recvb, 16, ncclFloat32, bad_root, c, s);
    const char *msg = ncclGetLastError(c);
    if (rc != ncclInvalidArgument || !strstr(msg, "root"))
      DIE("ncclGather with root %d: %d (%s); want ncclInvalidArgument naming the root", bad_root, rc, msg);
    rc = ncclScatter(sendb, recvb, 16, ncclFloat32, bad_root, c, s);
    msg = ncclGetLastError(c);
    if (rc != ncclInvalidArgument || !strstr(msg, "root"))
      DIE("ncclScatter with root %d: %d (%s); want ncclInvalidArgument naming the root", bad_root, rc, msg);
  }
  if (cudaStreamQuery(s) != cudaSuccess) DIE("a refused gather/scatter left work on the stream");
  ncclResult_t ae;
  NCCL(c, ncclCommGetAsyncError(c, &ae));
  if (ae != ncclSuccess) DIE("async error %d: %s", ae, ncclGetLastError(c));
  NCCL(c, ncclCommDeregister(c, regh));
  NCCL(c, ncclCommWindowDeregister(c, wins[0]));
  NCCL(c, ncclCommWindowDeregister(c, wins[1]));
  NCCL(NULL, ncclMemFree(sendb));
  NCCL(NULL, ncclMemFree(recvb));
  NCCL(NULL, ncclMemFree(plain_s));
  NCCL(NULL, ncclMemFree(plain_r));
  NCCL(c, ncclCommFinalize(c));
  NCCL(c, ncclCommDestroy(c));
  char *text = log_text();
  size_t native = count_of(text, "path symmcomm"), nccl = count_of(text, ": path NCCL");
  release_log();
  if (native != 1 || nccl != 0) DIE("log: %zu communicator(s) on the symmcomm path, %zu on NCCL; want 1 and 0", native, nccl);
  /* No zero-copy line to look for: at one rank a collective launches
   * nothing (src/coll/one_rank.rs, as NCCL), it copies; the N-rank test
   * below checks that windows are read in place. */
  printf("nccl_native one: every collective x %d types x 3 counts, windows and plain buffers: OK\n", ncclNumTypes);
  free(text);
  return 0;
}

/* ---- N ranks: split, shrink, pool-style windows ---------------------------- */

static float value(int p, size_t i) { return (float)((p + 1) * 16 + (int)(i % 13)); }

struct child {
  const char *what;
  ncclComm_t comm;
  int n, rank, members[8];
};

static void fill_value(float *d, int p, size_t count) {
  float *h = malloc(count * 4);
  for (size_t i = 0; i < count; i++) h[i] = value(p, i);
  CUDA(cudaMemcpy(d, h, count * 4, cudaMemcpyHostToDevice));
  CUDA(cudaDeviceSynchronize());
  free(h);
}

/* All-reduce, all-gather and broadcast on a child, checked. */
static void check_child(const struct child *k, cudaStream_t s) {
  /* 1.2 MB: above the LL limit (1 MiB a rank at 2 ranks), so that the
   * registered inputs are read in place (checked in the log below). */
  const size_t count = 300003;
  float *in, *out, *h = malloc(count * 4 * (size_t)k->n);
  NCCL(NULL, ncclMemAlloc((void **)&in, count * 4));
  NCCL(NULL, ncclMemAlloc((void **)&out, count * 4 * (size_t)k->n));
  fill_value(in, g_rank, count);
  NCCL(k->comm, ncclAllReduce(in, out, count, ncclFloat32, ncclSum, k->comm, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(h, out, count * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int q = 0; q < k->n; q++) want += value(k->members[q], i);
    if (h[i] != want) DIE("%s child: all-reduce [%zu] = %g, want %g", k->what, i, h[i], want);
  }
  NCCL(k->comm, ncclAllGather(in, out, count, ncclFloat32, k->comm, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(h, out, count * 4 * (size_t)k->n, cudaMemcpyDeviceToHost));
  for (int q = 0; q < k->n; q++)
    for (size_t i = 0; i < count; i++)
      if (h[q * count + i] != value(k->members[q], i)) DIE("%s child: all-gather block %d [%zu]", k->what, q, i);
  NCCL(k->comm, ncclBroadcast(in, out, count, ncclFloat32, k->n - 1, k->comm, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(h, out, count * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; i++)
    if (h[i] != value(k->members[k->n - 1], i)) DIE("%s child: broadcast [%zu]", k->what, i);
  NCCL(NULL, ncclMemFree(in));
  NCCL(NULL, ncclMemFree(out));
  free(h);
}

/* Members of `rank`'s child for colors c[] and keys k[] (by key, then rank). */
static void expect(struct child *k, const int *color, const int *key, int n, int rank) {
  k->n = 0;
  k->rank = -1;
  if (color[rank] == NCCL_SPLIT_NOCOLOR) return;
  for (int p = 0; p < n; p++)
    if (color[p] == color[rank]) k->members[k->n++] = p;
  for (int a = 1; a < k->n; a++)
    for (int b = a; b > 0 && key[k->members[b - 1]] > key[k->members[b]]; b--) {
      int x = k->members[b];
      k->members[b] = k->members[b - 1];
      k->members[b - 1] = x;
    }
  for (int q = 0; q < k->n; q++)
    if (k->members[q] == rank) k->rank = q;
}

static void split(ncclComm_t parent, struct child *k, const char *what, const int *color, const int *key, int n) {
  k->what = what;
  expect(k, color, key, n, g_rank);
  k->comm = (ncclComm_t)(uintptr_t)0xdeadbee0;
  NCCL(parent, ncclCommSplit(parent, color[g_rank], key[g_rank], &k->comm, NULL));
  if (!k->n) {
    if (k->comm != NULL) DIE("%s: NOCOLOR gave %p", what, (void *)k->comm);
    return;
  }
  int cn = -1, cr = -1;
  NCCL(k->comm, ncclCommCount(k->comm, &cn));
  NCCL(k->comm, ncclCommUserRank(k->comm, &cr));
  if (cn != k->n || cr != k->rank) DIE("%s child: %d ranks, rank %d; want %d, %d", what, cn, cr, k->n, k->rank);
}

/* Pool-style buffers: segments from ncclMemAlloc, window-registered whole
 * (as ProcessGroupNCCL::register_mem_pool does) and in part; collectives
 * read tensors inside them. */
static void check_windows(ncclComm_t c, int n, cudaStream_t s) {
  const size_t seg_bytes = 6 << 20, count = 300001; /* 1.2 MB per rank: above the LL size */
  char *seg, *seg2;
  float *out;
  NCCL(NULL, ncclMemAlloc((void **)&seg, seg_bytes));
  NCCL(NULL, ncclMemAlloc((void **)&seg2, seg_bytes));
  NCCL(NULL, ncclMemAlloc((void **)&out, count * 4 * (size_t)n));
  ncclWindow_t w1, w2;
  NCCL(NULL, ncclGroupStart());
  NCCL(c, ncclCommWindowRegister(c, seg, seg_bytes, &w1, NCCL_WIN_COLL_SYMMETRIC));
  NCCL(NULL, ncclGroupEnd());
  /* Only a part of the second segment, at an odd offset. */
  NCCL(c, ncclCommWindowRegister(c, seg2 + (1 << 20) + 4096, 3 << 20, &w2, NCCL_WIN_COLL_SYMMETRIC));
  float *t1 = (float *)(seg + (2 << 20) + 512); /* a tensor inside the whole-segment window */
  float *t2 = (float *)(seg2 + (1 << 20) + 4096 + 256); /* inside the partial window */
  /* Per-rank shares above the LL size at every rank count (LL ignores
   * buffer kinds; 1 MiB a rank at 2 ranks): 2.4 MB in the 3 MiB window. */
  const size_t rs = 600000 / (size_t)n, count2 = rs * (size_t)n;
  float *out2;
  NCCL(NULL, ncclMemAlloc((void **)&out2, count2 * 4));
  fill_value(t1, g_rank, count);
  fill_value(t2, g_rank, count2);
  float *h = malloc((count * (size_t)n > count2 ? count * (size_t)n : count2) * 4);
  NCCL(c, ncclAllGather(t1, out, count, ncclFloat32, c, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(h, out, count * 4 * (size_t)n, cudaMemcpyDeviceToHost));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      if (h[q * count + i] != value(q, i)) DIE("window all-gather block %d [%zu]", q, i);
  NCCL(c, ncclAllReduce(t1, out, count, ncclFloat32, ncclSum, c, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(h, out, count * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int q = 0; q < n; q++) want += value(q, i);
    if (h[i] != want) DIE("window all-reduce [%zu] = %g, want %g", i, h[i], want);
  }
  NCCL(c, ncclAllReduce(t2, out2, count2, ncclFloat32, ncclMax, c, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(h, out2, count2 * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count2; i++)
    if (h[i] != value(n - 1, i)) DIE("partial-window all-reduce max [%zu] = %g", i, h[i]);
  NCCL(c, ncclReduceScatter(t2, out2, rs, ncclFloat32, ncclSum, c, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(h, out2, rs * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < rs; i++) {
    float want = 0;
    for (int q = 0; q < n; q++) want += value(q, (size_t)g_rank * rs + i);
    if (h[i] != want) DIE("partial-window reduce-scatter [%zu] = %g, want %g", i, h[i], want);
  }
  NCCL(NULL, ncclMemFree(out2));
  NCCL(c, ncclCommWindowDeregister(c, w1));
  NCCL(c, ncclCommWindowDeregister(c, w2));
  NCCL(NULL, ncclMemFree(seg));
  NCCL(NULL, ncclMemFree(seg2));
  NCCL(NULL, ncclMemFree(out));
  free(h);
}

/* One float32 all-reduce (or reduce-scatter) of `count` elements with a
 * PreMulSum op made for it and destroyed after; the output copied to h. */
static void premul_once(ncclComm_t c, cudaStream_t s, int reduce_scatter, void *scalar, ncclScalarResidence_t where,
                        const float *in, float *out, size_t count, float *h) {
  ncclRedOp_t op;
  NCCL(c, ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, where, c));
  if ((int)op < (int)ncclNumOps) DIE("ncclRedOpCreatePreMulSum gave op %d, a built-in op's number", (int)op);
  if (reduce_scatter)
    NCCL(c, ncclReduceScatter(in, out, count, ncclFloat32, op, c, s));
  else
    NCCL(c, ncclAllReduce(in, out, count, ncclFloat32, op, c, s));
  CUDA(cudaStreamSynchronize(s));
  NCCL(c, ncclRedOpDestroy(op, c));
  CUDA(cudaMemcpy(h, out, count * 4, cudaMemcpyDeviceToHost));
}

/* ncclRedOpCreatePreMulSum, served natively (with SYMM_NCCL_MODE=symm
 * there is no NCCL to forward to): an all-reduce with every rank's own
 * host scalar, as nccl-tests' -o all gives them, then a reduce-scatter with
 * one device scalar, as FSDP2 divides its gradients. Values are exact. */
static void check_premulsum(ncclComm_t c, int n, cudaStream_t s) {
  const size_t count = 4099;
  float *in, *out, *dev_scalar, *h = malloc(count * 4 * (size_t)n);
  CUDA(cudaMalloc((void **)&in, count * 4 * (size_t)n));
  CUDA(cudaMalloc((void **)&out, count * 4 * (size_t)n));
  CUDA(cudaMalloc((void **)&dev_scalar, 4));
  fill_value(in, g_rank, count * (size_t)n);
  float mine = 0.5f * (float)(g_rank + 1), quarter = 0.25f;
  premul_once(c, s, 0, &mine, ncclScalarHostImmediate, in, out, count, h);
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int q = 0; q < n; q++) want += 0.5f * (float)(q + 1) * value(q, i);
    if (h[i] != want) DIE("premulsum all-reduce [%zu] = %g, want %g", i, h[i], want);
  }
  CUDA(cudaMemcpy(dev_scalar, &quarter, 4, cudaMemcpyHostToDevice));
  premul_once(c, s, 1, dev_scalar, ncclScalarDevice, in, out, count, h);
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int q = 0; q < n; q++) want += 0.25f * value(q, (size_t)g_rank * count + i);
    if (h[i] != want) DIE("premulsum reduce-scatter [%zu] = %g, want %g", i, h[i], want);
  }
  CUDA(cudaFree(in));
  CUDA(cudaFree(out));
  CUDA(cudaFree(dev_scalar));
  free(h);
}

static int rank_mesh(int n, ncclUniqueId id, int r, int ngpus) {
  g_rank = r;
  capture_log();
  CUDA(cudaSetDevice(r % ngpus));
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclComm_t c;
  NCCL(NULL, ncclCommInitRank(&c, n, id, r));
  check_windows(c, n, s);
  check_premulsum(c, n, s);
  int rows[8] = {0}, rkey[8] = {0}, cols[8] = {0}, ckey[8] = {0}, noc[8] = {0}, nkey[8] = {0};
  int grid = n == 4 || n == 8, w = n / 2;
  for (int p = 0; p < n; p++) {
    rows[p] = grid ? p / w : 0;
    rkey[p] = grid ? p % w : n - p;
    cols[p] = grid ? p % w : 10 + p;
    ckey[p] = grid ? p / w : 0;
    noc[p] = p == 0 ? NCCL_SPLIT_NOCOLOR : 3;
    nkey[p] = -p;
  }
  struct child kids[4];
  split(c, &kids[0], "row", rows, rkey, n);
  split(c, &kids[1], "column", cols, ckey, n);
  split(c, &kids[2], "nocolor", noc, nkey, n);
  int nkids = 3;
  if (r != n - 1) { /* the excluded rank does not call ncclCommShrink */
    int excl[1] = {n - 1};
    struct child *k = &kids[nkids++];
    k->what = "shrink";
    k->n = n - 1;
    k->rank = r;
    for (int p = 0; p < n - 1; p++) k->members[p] = p;
    NCCL(c, ncclCommShrink(c, excl, 1, &k->comm, NULL, NCCL_SHRINK_DEFAULT));
    int cn = -1, cr = -1;
    NCCL(k->comm, ncclCommCount(k->comm, &cn));
    NCCL(k->comm, ncclCommUserRank(k->comm, &cr));
    if (cn != n - 1 || cr != r) DIE("shrink child: %d ranks, rank %d", cn, cr);
  }
  NCCL(c, ncclCommDestroy(c)); /* the parent goes first */
  for (int i = 0; i < nkids; i++)
    if (kids[i].n) check_child(&kids[i], s);
  for (int i = 0; i < nkids; i++)
    if (kids[i].n) NCCL(kids[i].comm, ncclCommDestroy(kids[i].comm));
  char *text = log_text();
  int made = 1 + nkids - (kids[2].n ? 0 : 1);
  size_t native = count_of(text, ": path symmcomm"), nccl = count_of(text, ": path NCCL");
  size_t splits = count_of(text, "ncclCommSplit: rank"), shrinks = count_of(text, "ncclCommShrink: rank");
  size_t direct = count_of(text, "from a registered buffer (zero-copy)");
  release_log();
  if (native != (size_t)made || nccl != 0)
    DIE("log: %zu communicator(s) on the symmcomm path and %zu on NCCL; want %d and 0", native, nccl, made);
  if (splits < 2 || shrinks != (r != n - 1 ? 1u : 0u)) DIE("log: %zu split and %zu shrink path lines", splits, shrinks);
  if (direct < 3) DIE("log: %zu collective kinds read a registered input in place; want all-gather, all-reduce, reduce-scatter", direct);
  printf("[rank %d] %d communicators native, windows read in place: OK\n", r, made);
  free(text);
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
  int ngpus = 0;
  if (argc >= 5 && strcmp(argv[1], "rank") == 0) {
    ncclUniqueId id;
    unhex(argv[4], &id);
    alarm(500);
    CUDA(cudaGetDeviceCount(&ngpus));
    return rank_mesh(atoi(argv[2]), id, atoi(argv[3]), ngpus);
  }
  if (argc < 2 || (strcmp(argv[1], "one") && (strcmp(argv[1], "mesh") || argc < 3))) {
    fprintf(stderr, "usage: %s one | mesh N\n", argv[0]);
    return 2;
  }
  if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus < 1) {
    printf("skipped: no CUDA device\n");
    return 77;
  }
  if (strcmp(argv[1], "one") == 0) return run_one();
  int n = atoi(argv[2]);
  const char *shared = getenv("SYMM_TEST_SHARED_DEVICES"), *mode = getenv("SYMM_NCCL_MODE");
  if (n < 2 || n > 8) DIE("N must be 2..8");
  if (n > ngpus && !(shared && atoi(shared) != 0)) {
    printf("skipped: %d ranks on %d GPU(s) need SYMM_TEST_SHARED_DEVICES=1\n", n, ngpus);
    return 77;
  }
  if (n > ngpus && !(mode && strcmp(mode, "symm") == 0)) {
    printf("skipped: %d ranks on %d GPU(s): the real NCCL refuses ranks sharing a GPU (use SYMM_NCCL_MODE=symm)\n", n,
           ngpus);
    return 77;
  }
  ncclUniqueId id;
  NCCL(NULL, ncclGetUniqueId(&id));
  char idhex[257], nstr[16], rstr[16];
  hex(&id, idhex);
  snprintf(nstr, sizeof nstr, "%d", n);
  pid_t pids[8];
  for (int r = 0; r < n; r++) {
    snprintf(rstr, sizeof rstr, "%d", r);
    pids[r] = fork();
    if (pids[r] == 0) {
      execl("/proc/self/exe", argv[0], "rank", nstr, rstr, idhex, (char *)NULL);
      _exit(127);
    }
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      fprintf(stderr, "rank %d failed (status %#x)\n", r, st);
      bad = 1;
    }
  }
  if (!bad) printf("nccl_native mesh %d: OK\n", n);
  return bad;
}
