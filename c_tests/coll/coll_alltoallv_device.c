/*
 * coll_alltoallv_device <mp|all> [--nranks=N]
 *
 * symmAllToAllvDevice (the counts in device memory): every rank's send
 * counts are written to the device, the call moves the blocks, and each
 * rank checks its output (blocks in rank order, every element), the
 * counts and offsets it was given (outSplitsOffsets), and that nothing past
 * the blocks was written. Cases: 1- and 4-byte elements (odd counts, so
 * blocks start at every alignment), counts with zeros, a rank that sends
 * nothing and a rank that receives nothing, symmetric and registered
 * inputs, a capacity with slack; one CUDA graph per rank replayed with new
 * counts and data each time (the point of device counts); a capacity one
 * element short on rank 0 (its asynchronous error names the size it
 * needed, nothing is written, the other ranks finish without error); bad
 * arguments, refused on each rank with nothing enqueued.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#define POISON 0xA5

enum { PLAIN, NOBODY_SENDS_FROM_1, NOBODY_SENDS_TO_0 };

/* Elements rank `from` sends to rank `to` at scale k, in pattern `pat`
 * (rep varies it between graph replays). */
static int64_t count_of(int from, int to, int n, size_t k, int pat, int rep) {
  if (pat == NOBODY_SENDS_FROM_1 && from == 1) return 0;
  if (pat == NOBODY_SENDS_TO_0 && to == 0) return 0;
  if ((from + to + rep) % 3 == 0) return 0;
  return (int64_t)(k * (size_t)(1 + (from * n + to + rep) % 4) + 3);
}

static uint8_t byte_of(int from, int to, size_t j, int rep) {
  return (uint8_t)((from * 131u + to * 17u + (unsigned)rep * 7u) ^ (unsigned)(j * 2654435761u >> 7));
}

struct plan {
  int64_t sc[TW_MAX_RANKS];
  size_t send_elems, recv_elems, from_off[TW_MAX_RANKS];
};

static struct plan plan_of(int r, int n, size_t k, int pat, int rep) {
  struct plan p;
  memset(&p, 0, sizeof p);
  for (int q = 0; q < n; q++) {
    p.sc[q] = count_of(r, q, n, k, pat, rep);
    p.send_elems += (size_t)p.sc[q];
  }
  for (int q = 0; q < n; q++) {
    p.from_off[q] = p.recv_elems;
    p.recv_elems += (size_t)count_of(q, r, n, k, pat, rep);
  }
  return p;
}

struct bufs {
  struct cw_buf S;
  CUdeviceptr R[TW_MAX_RANKS], splits[TW_MAX_RANKS], out[TW_MAX_RANKS];
  size_t send_bytes, recv_bytes;
};

static void alloc_bufs(struct tw *w, struct bufs *b, enum cw_class cls, size_t send_bytes, size_t recv_bytes) {
  b->send_bytes = send_bytes;
  b->recv_bytes = recv_bytes;
  cw_buf_alloc(w, &b->S, cls, send_bytes);
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    CU_REQUIRE(tu_cu.cuMemAlloc(&b->R[i], recv_bytes));
    CU_REQUIRE(tu_cu.cuMemAlloc(&b->splits[i], TW_MAX_RANKS * 8));
    CU_REQUIRE(tu_cu.cuMemAlloc(&b->out[i], 2 * TW_MAX_RANKS * 8));
  }
}

static void free_bufs(struct tw *w, struct bufs *b) {
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    CU_REQUIRE(tu_cu.cuMemFree(b->R[i]));
    CU_REQUIRE(tu_cu.cuMemFree(b->splits[i]));
    CU_REQUIRE(tu_cu.cuMemFree(b->out[i]));
  }
  cw_buf_free(w, &b->S);
}

/* Inputs and counts of (k, pat, rep) on rank slot i, outputs poisoned. */
static void fill(struct tw *w, struct bufs *b, int i, int es, size_t k, int pat, int rep) {
  struct tw_rank *r = &w->r[i];
  const struct plan p = plan_of(r->rank, w->nranks, k, pat, rep);
  uint8_t *host = malloc(b->send_bytes > b->recv_bytes ? b->send_bytes : b->recv_bytes);
  REQUIRE(host != NULL, "out of host memory");
  size_t at = 0;
  for (int q = 0; q < w->nranks; q++)
    for (size_t j = 0; j < (size_t)p.sc[q] * es; j++) host[at++] = byte_of(r->rank, q, j, rep);
  tw_use(r);
  CU_REQUIRE(tu_upload(b->S.p[i], host, at ? at : 1));
  memset(host, POISON, b->recv_bytes);
  CU_REQUIRE(tu_upload(b->R[i], host, b->recv_bytes));
  CU_REQUIRE(tu_upload(b->splits[i], p.sc, (size_t)w->nranks * 8));
  int64_t junk[2 * TW_MAX_RANKS];
  for (int q = 0; q < 2 * TW_MAX_RANKS; q++) junk[q] = -7;
  CU_REQUIRE(tu_upload(b->out[i], junk, sizeof junk));
  free(host);
}

/* Rank slot i's output of (k, pat, rep): the blocks, the counts and
 * offsets, and poison after the last block. */
static void check(struct tw *w, struct bufs *b, int i, int es, size_t k, int pat, int rep, const char *what) {
  struct tw_rank *r = &w->r[i];
  const int n = w->nranks;
  const struct plan p = plan_of(r->rank, n, k, pat, rep);
  TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "%s: the all-to-all-v did not finish", what);
  uint8_t *host = malloc(b->recv_bytes);
  REQUIRE(host != NULL, "out of host memory");
  int64_t got[2 * TW_MAX_RANKS];
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, b->R[i], b->recv_bytes));
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(got, b->out[i], 2 * (size_t)n * 8));
  size_t wrong = 0, first = (size_t)-1;
  for (int q = 0; q < n; q++) {
    const int64_t c = count_of(q, r->rank, n, k, pat, rep);
    TW_CHECK(r, got[q] == c && got[n + q] == (int64_t)p.from_off[q],
             "%s: outSplitsOffsets for rank %d is (%lld, %lld), expected (%lld, %zu)", what, q, (long long)got[q],
             (long long)got[n + q], (long long)c, p.from_off[q]);
    for (size_t j = 0; j < (size_t)c * es; j++)
      if (host[p.from_off[q] * es + j] != byte_of(q, r->rank, j, rep) && wrong++ == 0) first = p.from_off[q] * es + j;
  }
  for (size_t g = p.recv_elems * es; g < b->recv_bytes; g++)
    if (host[g] != POISON && wrong++ == 0) first = g;
  TW_CHECK(r, wrong == 0, "%s: %zu wrong byte(s) of recvbuff, the first at byte %zu (%zu elements received)", what,
           wrong, first, p.recv_elems);
  free(host);
}

static size_t max_elems(int n, size_t k, int recv, int pat, int rep) {
  size_t m = 0;
  for (int r = 0; r < n; r++) {
    struct plan p = plan_of(r, n, k, pat, rep);
    size_t e = recv ? p.recv_elems : p.send_elems;
    if (e > m) m = e;
  }
  return m;
}

static void enqueue(struct tw *w, struct bufs *b, int i, int dt, size_t capacity) {
  struct tw_rank *r = &w->r[i];
  TW_SYMM_REQUIRE(r, symmAllToAllvDevice((const void *)(uintptr_t)b->S.p[i], (const int64_t *)(uintptr_t)b->splits[i],
                                         (void *)(uintptr_t)b->R[i], capacity, (int64_t *)(uintptr_t)b->out[i],
                                         1, (symmDataType_t)dt, r->comm, r->stream));
}

static void run_case(struct tw *w, enum cw_class cls, int dt, size_t k, int pat) {
  const int n = w->nranks, es = cw_dt[dt].size;
  const size_t cap = max_elems(n, k, 1, pat, 0) + 5; /* slack: must stay poison */
  struct bufs b;
  alloc_bufs(w, &b, cls, (max_elems(n, k, 0, pat, 0) + 1) * es, cap * es);
  tw_phase("%s input, %s, scale %zu, pattern %d", cw_class_name[cls], cw_dt[dt].name, k, pat);
  for (int i = 0; i < w->nlocal; i++) fill(w, &b, i, es, k, pat, 0);
  tw_host_barrier(w, "buffers ready");
  for (int i = 0; i < w->nlocal; i++) enqueue(w, &b, i, dt, cap);
  char what[128];
  snprintf(what, sizeof what, "%s input, %s, scale %zu, pattern %d", cw_class_name[cls], cw_dt[dt].name, k, pat);
  for (int i = 0; i < w->nlocal; i++) check(w, &b, i, es, k, pat, 0, what);
  tw_host_barrier(w, "checked");
  free_bufs(w, &b);
}

/* One graph per rank, replayed with new counts and data each time. */
static void graph_case(struct tw *w) {
  const int n = w->nranks, dt = symmUint32, es = 4;
  const size_t k = 1000;
  size_t send_max = 0, cap = 0;
  for (int rep = 0; rep < 3; rep++) {
    size_t s = max_elems(n, k, 0, PLAIN, rep), r = max_elems(n, k, 1, PLAIN, rep);
    send_max = s > send_max ? s : send_max;
    cap = r > cap ? r : cap;
  }
  struct bufs b;
  alloc_bufs(w, &b, CW_SYMMETRIC, (send_max + 1) * es, cap * es);
  CUgraph g[TW_MAX_RANKS] = {0};
  CUgraphExec ge[TW_MAX_RANKS] = {0};
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(tu_cu.cuStreamBeginCapture(r->stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    enqueue(w, &b, i, dt, cap);
    CUresult rc = tu_cu.cuStreamEndCapture(r->stream, &g[i]);
    TW_REQUIRE(r, rc == 0 && g[i], "cuStreamEndCapture: %s", tu_cu_error(rc));
  }
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuGraphInstantiateWithFlags(&ge[i], g[i], 0));
  }
  for (int rep = 0; rep < 3; rep++) {
    tw_phase("graph replay %d with new counts", rep);
    for (int i = 0; i < w->nlocal; i++) fill(w, &b, i, es, k, PLAIN, rep);
    tw_host_barrier(w, "replay inputs ready");
    for (int i = 0; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      TW_CU(tu_cu.cuGraphLaunch(ge[i], w->r[i].stream));
    }
    char what[64];
    snprintf(what, sizeof what, "graph replay %d", rep);
    for (int i = 0; i < w->nlocal; i++) check(w, &b, i, es, k, PLAIN, rep, what);
    tw_host_barrier(w, "replay checked");
  }
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuGraphExecDestroy(ge[i]));
    TW_CU(tu_cu.cuGraphDestroy(g[i]));
  }
  free_bufs(w, &b);
}

/* Rank 0's capacity one element short: its asynchronous error names the
 * size, its output stays poison; the others finish without error. The
 * communicators are aborted and made again afterwards. */
static void overflow_case(struct tw *w) {
  const int n = w->nranks, dt = symmUint32, es = 4;
  const size_t k = 50;
  const size_t need0 = plan_of(0, n, k, PLAIN, 0).recv_elems, cap = max_elems(n, k, 1, PLAIN, 0);
  struct bufs b;
  alloc_bufs(w, &b, CW_SYMMETRIC, (max_elems(n, k, 0, PLAIN, 0) + 1) * es, cap * es);
  tw_phase("rank 0's capacity one element short of %zu", need0);
  for (int i = 0; i < w->nlocal; i++) fill(w, &b, i, es, k, PLAIN, 0);
  tw_host_barrier(w, "buffers ready");
  for (int i = 0; i < w->nlocal; i++) enqueue(w, &b, i, dt, w->r[i].rank == 0 ? need0 - 1 : cap);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "overflow: the stream did not drain");
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    char msg[1024], want[64];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    if (r->rank == 0) {
      snprintf(want, sizeof want, "receive %zu rows", need0);
      TW_CHECK(r, async == symmInvalidUsage, "overflow: rank 0's async error is %s, expected symmInvalidUsage",
               tu_result_name(async));
      TW_CHECK(r, tu_contains_ci(m, want) && tu_contains_ci(m, "recvCapacity"),
               "overflow: the message does not say \"%s\" and name recvCapacity: %s", want, m ? m : "(NULL)");
      uint8_t *host = malloc(b.recv_bytes);
      REQUIRE(host != NULL, "out of host memory");
      tw_use(r);
      CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, b.R[i], b.recv_bytes));
      size_t touched = 0;
      for (size_t g = 0; g < b.recv_bytes; g++) touched += host[g] != POISON;
      TW_CHECK(r, touched == 0, "overflow: %zu byte(s) of rank 0's recvbuff were written", touched);
      free(host);
      /* outSplitsOffsets too keeps what it held (the fill's -7s). */
      int64_t oso[2 * TW_MAX_RANKS];
      CU_REQUIRE(tu_cu.cuMemcpyDtoH(oso, b.out[i], 2 * (size_t)n * 8));
      for (int q = 0; q < 2 * n; q++)
        TW_CHECK(r, oso[q] == -7, "overflow: outSplitsOffsets[%d] was written (%lld)", q, (long long)oso[q]);
    } else {
      TW_CHECK(r, async == symmSuccess, "overflow: rank %d (not short) has an asynchronous error %s: %s", r->rank,
               tu_result_name(async), m ? m : "(NULL)");
      check(w, &b, i, es, k, PLAIN, 0, "beside rank 0's overflow");
    }
  }
  tw_host_barrier(w, "overflow checked");
  free_bufs(w, &b);
  for (int i = 0; i < w->nlocal; i++)
    if (w->r[i].rank == 0) cw_abort(&w->r[i], "the overflow");
  tw_destroy_comms(w);
}

static void refused(struct tw_rank *r, const char *what, symmResult_t rc, const char *says) {
  cw_refused(r, what, rc, symmInvalidArgument, says);
}

static void bad_input(struct tw *w) {
  struct bufs b;
  alloc_bufs(w, &b, CW_SYMMETRIC, 4096, 4096);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    void *s = (void *)(uintptr_t)b.S.p[i], *rv = (void *)(uintptr_t)b.R[i];
    const int64_t *sp = (const int64_t *)(uintptr_t)b.splits[i];
    int64_t *o = (int64_t *)(uintptr_t)b.out[i];
    refused(r, "plain sendbuff", symmAllToAllvDevice(rv, sp, s, 16, o, 1, symmUint8, r->comm, r->stream),
            "symmetric or registered");
    refused(r, "NULL sendSplits", symmAllToAllvDevice(s, NULL, rv, 16, o, 1, symmUint8, r->comm, r->stream),
            "sendSplits is NULL");
    refused(r, "misaligned outSplitsOffsets",
            symmAllToAllvDevice(s, sp, rv, 16, (int64_t *)((char *)o + 4), 1, symmUint8, r->comm, r->stream), "8-byte");
    refused(r, "recvbuff over sendbuff", symmAllToAllvDevice(s, sp, s, 16, o, 1, symmUint8, r->comm, r->stream),
            "overlap");
    refused(r, "bad datatype", symmAllToAllvDevice(s, sp, rv, 16, o, 1, (symmDataType_t)99, r->comm, r->stream),
            "datatype");
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    TW_CHECK(r, async == symmSuccess, "bad arguments left an asynchronous error: %s", tu_result_name(async));
  }
  free_bufs(w, &b);
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  if (tw_init_comms(w) != symmSuccess) return;
  static const int dts[] = {symmUint8, symmUint32};
  static const size_t scales[] = {7, 20000};
  for (int c = CW_REGISTERED; c <= CW_SYMMETRIC; c++)
    for (size_t d = 0; d < 2; d++)
      for (size_t s = 0; s < 2; s++) run_case(w, (enum cw_class)c, dts[d], scales[s], PLAIN);
  /* The kernels move rows of bytes: every other type once, small. */
  for (int dt = 0; dt < CW_NDTYPES; dt++)
    if (dt != symmUint8 && dt != symmUint32) run_case(w, CW_SYMMETRIC, dt, 7, PLAIN);
  run_case(w, CW_SYMMETRIC, symmUint32, 100, NOBODY_SENDS_FROM_1);
  run_case(w, CW_SYMMETRIC, symmUint8, 100, NOBODY_SENDS_TO_0);
  graph_case(w);
  bad_input(w);
  overflow_case(w);
}

int main(int argc, char **argv) {
  static struct tw_spec spec = {.name = "coll_alltoallv_device", .modes = "mp,all", .body = body};
  spec.limit_s = 240;
  spec.process_init = cw_process_init;
  return tw_main(&spec, argc, argv);
}
