/*
 * coll_alltoallv_2d <mp|all> [--nranks=N]
 *
 * symmAllToAllvDevice2d (expert-major dispatch, PyTorch's
 * all_to_all_vdev_2d) and symmAllToAllvDevice2dOffset (the combine,
 * all_to_all_vdev_2d_offset). Every rank's counts (pseudo-random, zeros
 * included, odd sizes so blocks start at every alignment) are written to
 * the device; the dispatch's output is checked against a host reference of
 * every element, of outSplitsOffsets, and of the alignment padding and the
 * tail (still poison); then the combine, fed the dispatch's output and
 * outSplitsOffsets as they are on the device, must return every element to
 * where it came from (round trip == input), with its own outSplitsOffsets
 * (rank-major counts and packed offsets). Cases: 1, 2 and 3 experts per
 * rank, majorAlign 1 and 8, 1- and 4-byte elements, symmetric and
 * registered inputs; one CUDA graph per rank (dispatch + combine) replayed
 * with new counts and data; bad arguments refused on the host with nothing
 * enqueued; a capacity one element short on rank 0 (its asynchronous
 * symmInvalidUsage names the size, nothing is written, the other ranks
 * finish); a negative count on rank 1 (every rank's asynchronous error,
 * nothing written anywhere).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#define POISON 0xA5
#define JUNK (-7)
#define NE_MAX 3
#define MAXS (TW_MAX_RANKS * NE_MAX)

struct cfg {
  int ne;
  int64_t align;
  size_t k;  /* counts are below 2k */
  int rep;   /* varies counts and data (graph replays) */
  uint64_t seed;
};

/* Elements rank `from` sends to expert e of rank `to`. */
static int64_t count_of(const struct cfg *c, int from, int to, int e) {
  const uint64_t h = cw_mix64(c->seed ^ (uint64_t)from << 40 ^ (uint64_t)to << 32 ^ (uint64_t)e << 24 ^
                              (uint64_t)c->rep << 8 ^ (uint64_t)c->ne);
  if (h % 5 == 0) return 0;
  if (c->ne >= 3 && to == 0 && e == 1) return 0; /* an expert that receives nothing (PyTorch's padding rule) */
  return (int64_t)((h >> 8) % (2 * c->k)) + 1;
}

static uint8_t byte_of(int from, int to, int e, size_t j, int rep) {
  return (uint8_t)((from * 131u + to * 17u + (unsigned)e * 61u + (unsigned)rep * 7u) ^
                   (unsigned)(j * 2654435761u >> 7));
}

static size_t round_up(size_t x, int64_t a) {
  return a <= 1 ? x : (x + (size_t)a - 1) / (size_t)a * (size_t)a;
}

/* Rank r's side of a case: what it sends (rank-major, packed), what the
 * dispatch gives it (expert-major, aligned groups). */
struct plan {
  int64_t sc[MAXS], so[MAXS]; /* [q*ne+e]: sendSplits, where each block starts in the input */
  size_t send_elems;
  int64_t rc[MAXS], ro[MAXS]; /* [e*n+p]: the dispatch's outSplitsOffsets */
  size_t recv_elems;          /* with the padding */
};

static struct plan plan_of(const struct cfg *c, int r, int n) {
  struct plan p;
  memset(&p, 0, sizeof p);
  const int ne = c->ne;
  for (int q = 0; q < n; q++)
    for (int e = 0; e < ne; e++) {
      p.sc[q * ne + e] = count_of(c, r, q, e);
      p.so[q * ne + e] = (int64_t)p.send_elems;
      p.send_elems += (size_t)p.sc[q * ne + e];
    }
  /* PyTorch's groups: from align 1 on each one but the last padded to a
   * multiple of align, and at least align long (an empty expert too). */
  size_t at = 0, start = 0;
  for (int e = 0; e < ne; e++) {
    if (e > 0) {
      at = round_up(at, c->align);
      if (c->align > 0 && at < start + (size_t)c->align) at = start + (size_t)c->align;
    }
    start = at;
    for (int q = 0; q < n; q++) {
      p.rc[e * n + q] = count_of(c, q, r, e);
      p.ro[e * n + q] = (int64_t)at;
      at += (size_t)p.rc[e * n + q];
    }
  }
  p.recv_elems = at;
  return p;
}

static size_t max_elems(const struct cfg *c, int n, int recv) {
  size_t m = 0;
  for (int r = 0; r < n; r++) {
    const struct plan p = plan_of(c, r, n);
    const size_t e = recv ? p.recv_elems : p.send_elems;
    m = e > m ? e : m;
  }
  return m;
}

struct bufs {
  struct cw_buf S, R;  /* the dispatch's input and output (the combine's input) */
  CUdeviceptr B[TW_MAX_RANKS], splits[TW_MAX_RANKS], oso[TW_MAX_RANKS], oso2[TW_MAX_RANKS];
  size_t send_bytes, recv_bytes, back_bytes;
};

static void alloc_bufs(struct tw *w, struct bufs *b, enum cw_class cls, size_t send_bytes, size_t recv_bytes) {
  b->send_bytes = send_bytes;
  b->recv_bytes = recv_bytes;
  b->back_bytes = send_bytes;
  cw_buf_alloc(w, &b->S, cls, send_bytes);
  cw_buf_alloc(w, &b->R, cls, recv_bytes);
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    CU_REQUIRE(tu_cu.cuMemAlloc(&b->B[i], b->back_bytes));
    CU_REQUIRE(tu_cu.cuMemAlloc(&b->splits[i], MAXS * 8));
    CU_REQUIRE(tu_cu.cuMemAlloc(&b->oso[i], 2 * MAXS * 8));
    CU_REQUIRE(tu_cu.cuMemAlloc(&b->oso2[i], 2 * MAXS * 8));
  }
}

static void free_bufs(struct tw *w, struct bufs *b) {
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    CU_REQUIRE(tu_cu.cuMemFree(b->B[i]));
    CU_REQUIRE(tu_cu.cuMemFree(b->splits[i]));
    CU_REQUIRE(tu_cu.cuMemFree(b->oso[i]));
    CU_REQUIRE(tu_cu.cuMemFree(b->oso2[i]));
  }
  cw_buf_free(w, &b->R);
  cw_buf_free(w, &b->S);
}

/* Rank slot i's input and counts of case c; outputs poisoned. `bad_block`
 * >= 0 makes that entry of the counts negative. */
static void fill(struct tw *w, struct bufs *b, int i, int es, const struct cfg *c, int bad_block) {
  struct tw_rank *r = &w->r[i];
  const int n = w->nranks, ne = c->ne;
  struct plan p = plan_of(c, r->rank, n);
  size_t most = b->send_bytes > b->recv_bytes ? b->send_bytes : b->recv_bytes;
  uint8_t *host = malloc(most);
  REQUIRE(host != NULL, "out of host memory");
  size_t at = 0;
  for (int q = 0; q < n; q++)
    for (int e = 0; e < ne; e++)
      for (size_t j = 0; j < (size_t)p.sc[q * ne + e] * es; j++) host[at++] = byte_of(r->rank, q, e, j, c->rep);
  tw_use(r);
  CU_REQUIRE(tu_upload(b->S.p[i], host, at ? at : 1));
  memset(host, POISON, most);
  CU_REQUIRE(tu_upload(b->R.p[i], host, b->recv_bytes));
  CU_REQUIRE(tu_upload(b->B[i], host, b->back_bytes));
  if (bad_block >= 0) p.sc[bad_block] = -3;
  CU_REQUIRE(tu_upload(b->splits[i], p.sc, (size_t)n * ne * 8));
  int64_t junk[2 * MAXS];
  for (int q = 0; q < 2 * MAXS; q++) junk[q] = JUNK;
  CU_REQUIRE(tu_upload(b->oso[i], junk, sizeof junk));
  CU_REQUIRE(tu_upload(b->oso2[i], junk, sizeof junk));
  free(host);
}

static void enqueue(struct tw *w, struct bufs *b, int i, int dt, const struct cfg *c, size_t capacity, int combine) {
  struct tw_rank *r = &w->r[i];
  TW_SYMM_REQUIRE(r, symmAllToAllvDevice2d((const void *)(uintptr_t)b->S.p[i], (const int64_t *)(uintptr_t)b->splits[i],
                                           (void *)(uintptr_t)b->R.p[i], capacity, (int64_t *)(uintptr_t)b->oso[i],
                                           c->ne, c->align, 1, (symmDataType_t)dt, r->comm, r->stream));
  if (!combine) return;
  /* The combine takes the dispatch's output and outSplitsOffsets as they are. */
  TW_SYMM_REQUIRE(r, symmAllToAllvDevice2dOffset((const void *)(uintptr_t)b->R.p[i],
                                                 (const int64_t *)(uintptr_t)b->oso[i], (void *)(uintptr_t)b->B[i],
                                                 b->back_bytes / (size_t)cw_dt[dt].size,
                                                 (int64_t *)(uintptr_t)b->oso2[i], c->ne, 1, (symmDataType_t)dt,
                                                 r->comm, r->stream));
}

/* Rank slot i's outputs of case c: the dispatch's blocks, padding and tail,
 * its outSplitsOffsets; with `combine`, the round trip and the combine's
 * outSplitsOffsets. */
static void check(struct tw *w, struct bufs *b, int i, int es, const struct cfg *c, int combine, const char *what) {
  struct tw_rank *r = &w->r[i];
  const int n = w->nranks, ne = c->ne, ns = n * ne;
  const struct plan p = plan_of(c, r->rank, n);
  TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "%s: the all-to-all-v did not finish", what);
  uint8_t *host = malloc(b->recv_bytes > b->back_bytes ? b->recv_bytes : b->back_bytes);
  REQUIRE(host != NULL, "out of host memory");
  int64_t got[2 * MAXS];
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, b->R.p[i], b->recv_bytes));
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(got, b->oso[i], sizeof got));
  uint8_t *mark = calloc(b->recv_bytes, 1); /* bytes a block covers */
  REQUIRE(mark != NULL, "out of host memory");
  size_t wrong = 0, first = (size_t)-1;
  for (int e = 0; e < ne; e++)
    for (int q = 0; q < n; q++) {
      const int o = e * n + q;
      TW_CHECK(r, got[o] == p.rc[o] && got[ns + o] == p.ro[o],
               "%s: dispatch outSplitsOffsets[:, %d] (expert %d from rank %d) is (%lld, %lld), expected (%lld, %lld)",
               what, o, e, q, (long long)got[o], (long long)got[ns + o], (long long)p.rc[o], (long long)p.ro[o]);
      for (size_t j = 0; j < (size_t)p.rc[o] * es; j++) {
        const size_t g = (size_t)p.ro[o] * es + j;
        mark[g] = 1;
        if (host[g] != byte_of(q, r->rank, e, j, c->rep) && wrong++ == 0) first = g;
      }
    }
  for (int o = 2 * ns; o < 2 * MAXS; o++)
    TW_CHECK(r, got[o] == JUNK, "%s: dispatch wrote outSplitsOffsets word %d, past its 2 x %d", what, o, ns);
  size_t pad = 0;
  for (size_t g = 0; g < b->recv_bytes; g++)
    if (!mark[g]) {
      pad += g < p.recv_elems * es;
      if (host[g] != POISON && wrong++ == 0) first = g;
    }
  TW_CHECK(r, wrong == 0,
           "%s: %zu wrong byte(s) of the dispatch's recvbuff, the first at byte %zu (%zu elements with %zu padding "
           "bytes)",
           what, wrong, first, p.recv_elems, pad);
  free(mark);
  if (combine) {
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, b->B[i], b->back_bytes));
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(got, b->oso2[i], sizeof got));
    wrong = 0;
    first = (size_t)-1;
    for (int q = 0; q < n; q++)
      for (int e = 0; e < ne; e++) {
        const int o = q * ne + e;
        TW_CHECK(r, got[o] == p.sc[o] && got[ns + o] == p.so[o],
                 "%s: combine outSplitsOffsets[:, %d] (rank %d's expert %d) is (%lld, %lld), expected (%lld, %lld)",
                 what, o, q, e, (long long)got[o], (long long)got[ns + o], (long long)p.sc[o], (long long)p.so[o]);
        for (size_t j = 0; j < (size_t)p.sc[o] * es; j++) {
          const size_t g = (size_t)p.so[o] * es + j;
          if (host[g] != byte_of(r->rank, q, e, j, c->rep) && wrong++ == 0) first = g;
        }
      }
    for (size_t g = p.send_elems * es; g < b->back_bytes; g++)
      if (host[g] != POISON && wrong++ == 0) first = g;
    TW_CHECK(r, wrong == 0, "%s: the round trip differs from the input in %zu byte(s), the first at byte %zu", what,
             wrong, first);
  }
  free(host);
}

static const char *case_name(char *buf, size_t len, enum cw_class cls, int dt, const struct cfg *c) {
  snprintf(buf, len, "%s input, %s, %d expert(s), majorAlign %lld, scale %zu, rep %d", cw_class_name[cls],
           cw_dt[dt].name, c->ne, (long long)c->align, c->k, c->rep);
  return buf;
}

static void run_case(struct tw *w, enum cw_class cls, int dt, const struct cfg *c) {
  const int n = w->nranks, es = cw_dt[dt].size;
  const size_t cap = max_elems(c, n, 1) + 5; /* slack: must stay poison */
  char what[160];
  case_name(what, sizeof what, cls, dt, c);
  struct bufs b;
  alloc_bufs(w, &b, cls, (max_elems(c, n, 0) + 3) * es, cap * es);
  tw_phase("%s", what);
  for (int i = 0; i < w->nlocal; i++) fill(w, &b, i, es, c, -1);
  tw_host_barrier(w, "buffers ready");
  for (int i = 0; i < w->nlocal; i++) enqueue(w, &b, i, dt, c, cap, 1);
  for (int i = 0; i < w->nlocal; i++) check(w, &b, i, es, c, 1, what);
  tw_host_barrier(w, "checked");
  free_bufs(w, &b);
}

/* One graph per rank (dispatch, then combine), replayed with new counts
 * and data each time. */
static void graph_case(struct tw *w, uint64_t seed) {
  const int n = w->nranks, dt = symmUint32, es = 4;
  struct cfg c = {.ne = 3, .align = 8, .k = 700, .rep = 0, .seed = seed};
  size_t send_max = 0, cap = 0;
  for (c.rep = 0; c.rep < 3; c.rep++) {
    const size_t s = max_elems(&c, n, 0), r = max_elems(&c, n, 1);
    send_max = s > send_max ? s : send_max;
    cap = r > cap ? r : cap;
  }
  c.rep = 0;
  struct bufs b;
  alloc_bufs(w, &b, CW_SYMMETRIC, (send_max + 1) * es, cap * es);
  CUgraph g[TW_MAX_RANKS] = {0};
  CUgraphExec ge[TW_MAX_RANKS] = {0};
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(tu_cu.cuStreamBeginCapture(r->stream, TU_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    enqueue(w, &b, i, dt, &c, cap, 1);
    CUresult rc = tu_cu.cuStreamEndCapture(r->stream, &g[i]);
    TW_REQUIRE(r, rc == 0 && g[i], "cuStreamEndCapture: %s", tu_cu_error(rc));
  }
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuGraphInstantiateWithFlags(&ge[i], g[i], 0));
  }
  for (c.rep = 0; c.rep < 3; c.rep++) {
    tw_phase("graph replay %d with new counts", c.rep);
    for (int i = 0; i < w->nlocal; i++) fill(w, &b, i, es, &c, -1);
    tw_host_barrier(w, "replay inputs ready");
    for (int i = 0; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      TW_CU(tu_cu.cuGraphLaunch(ge[i], w->r[i].stream));
    }
    char what[64];
    snprintf(what, sizeof what, "graph replay %d", c.rep);
    for (int i = 0; i < w->nlocal; i++) check(w, &b, i, es, &c, 1, what);
    tw_host_barrier(w, "replay checked");
  }
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuGraphExecDestroy(ge[i]));
    TW_CU(tu_cu.cuGraphDestroy(g[i]));
  }
  free_bufs(w, &b);
}

static void refused(struct tw_rank *r, const char *what, symmResult_t rc, const char *says) {
  cw_refused(r, what, rc, symmInvalidArgument, says);
}

static void bad_input(struct tw *w) {
  struct bufs b;
  alloc_bufs(w, &b, CW_SYMMETRIC, 4096, 4096);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    void *s = (void *)(uintptr_t)b.S.p[i], *rv = (void *)(uintptr_t)b.R.p[i], *pl = (void *)(uintptr_t)b.B[i];
    const int64_t *sp = (const int64_t *)(uintptr_t)b.splits[i];
    int64_t *o = (int64_t *)(uintptr_t)b.oso[i];
    refused(r, "2d: plain sendbuff", symmAllToAllvDevice2d(pl, sp, rv, 16, o, 2, 1, 1, symmUint8, r->comm, r->stream),
            "symmetric or registered");
    refused(r, "2d: NULL sendSplits", symmAllToAllvDevice2d(s, NULL, rv, 16, o, 2, 1, 1, symmUint8, r->comm, r->stream),
            "sendSplits is NULL");
    refused(r, "2d: NULL recvbuff", symmAllToAllvDevice2d(s, sp, NULL, 16, o, 2, 1, 1, symmUint8, r->comm, r->stream),
            "recvbuff is NULL");
    refused(r, "2d: misaligned outSplitsOffsets",
            symmAllToAllvDevice2d(s, sp, rv, 16, (int64_t *)((char *)o + 4), 2, 1, 1, symmUint8, r->comm, r->stream),
            "8-byte");
    refused(r, "2d: localExperts 0", symmAllToAllvDevice2d(s, sp, rv, 16, o, 0, 1, 1, symmUint8, r->comm, r->stream),
            "localExperts is 0");
    refused(r, "2d: too many experts",
            symmAllToAllvDevice2d(s, sp, rv, 16, o, 1025, 1, 1, symmUint8, r->comm, r->stream), "1024 blocks");
    refused(r, "2d: negative majorAlign",
            symmAllToAllvDevice2d(s, sp, rv, 16, o, 2, -1, 1, symmUint8, r->comm, r->stream), "majorAlign is -1");
    refused(r, "2d: recvbuff over sendbuff",
            symmAllToAllvDevice2d(s, sp, s, 16, o, 2, 1, 1, symmUint8, r->comm, r->stream), "overlap");
    refused(r, "2d: bad datatype",
            symmAllToAllvDevice2d(s, sp, rv, 16, o, 2, 1, 1, (symmDataType_t)99, r->comm, r->stream), "datatype");
    refused(r, "2d offset: plain sendbuff",
            symmAllToAllvDevice2dOffset(pl, o, rv, 16, (int64_t *)(uintptr_t)b.oso2[i], 2, 1, symmUint8, r->comm,
                                        r->stream),
            "symmetric or registered");
    refused(r, "2d offset: NULL inSplitsOffsets",
            symmAllToAllvDevice2dOffset(s, NULL, rv, 16, o, 2, 1, symmUint8, r->comm, r->stream),
            "inSplitsOffsets is NULL");
    refused(r, "2d offset: misaligned inSplitsOffsets",
            symmAllToAllvDevice2dOffset(s, (const int64_t *)((const char *)sp + 4), rv, 16, o, 2, 1, symmUint8, r->comm,
                                        r->stream),
            "8-byte");
    refused(r, "2d offset: localExperts 0",
            symmAllToAllvDevice2dOffset(s, sp, rv, 16, o, 0, 1, symmUint8, r->comm, r->stream), "localExperts is 0");
    refused(r, "2d offset: outSplitsOffsets over inSplitsOffsets",
            symmAllToAllvDevice2dOffset(s, sp, rv, 16, (int64_t *)(uintptr_t)sp, 2, 1, symmUint8, r->comm, r->stream),
            "overlap");
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    TW_CHECK(r, async == symmSuccess, "bad arguments left an asynchronous error: %s", tu_result_name(async));
  }
  free_bufs(w, &b);
}

/* The asynchronous error of slot i must be symmInvalidUsage naming `want`;
 * its dispatch output and outSplitsOffsets untouched. */
static void expect_refused_on_device(struct tw *w, struct bufs *b, int i, const char *want, const char *what) {
  struct tw_rank *r = &w->r[i];
  symmResult_t async = symmInternalError;
  TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
  char msg[1024];
  const char *m = tu_last_error(r->comm, msg, sizeof msg);
  TW_CHECK(r, async == symmInvalidUsage, "%s: rank %d's async error is %s, expected symmInvalidUsage", what, r->rank,
           tu_result_name(async));
  TW_CHECK(r, tu_contains_ci(m, want) && tu_contains_ci(m, "symmAllToAllvDevice2d"),
           "%s: the message does not name symmAllToAllvDevice2d and say \"%s\": %s", what, want, m ? m : "(NULL)");
  uint8_t *host = malloc(b->recv_bytes);
  REQUIRE(host != NULL, "out of host memory");
  int64_t got[2 * MAXS];
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, b->R.p[i], b->recv_bytes));
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(got, b->oso[i], sizeof got));
  size_t touched = 0, words = 0;
  for (size_t g = 0; g < b->recv_bytes; g++) touched += host[g] != POISON;
  for (int o = 0; o < 2 * MAXS; o++) words += got[o] != JUNK;
  TW_CHECK(r, touched == 0 && words == 0, "%s: %zu byte(s) of rank %d's recvbuff and %zu outSplitsOffsets word(s) "
           "were written", what, touched, r->rank, words);
  free(host);
}

/* Rank 0's capacity one element short (with the alignment padding): its
 * asynchronous error names the size, nothing is written there; the others
 * finish without error. Rank 0's communicator is aborted, then all
 * destroyed. */
static void overflow_case(struct tw *w, uint64_t seed) {
  const int n = w->nranks, dt = symmUint32, es = 4;
  struct cfg c = {.ne = 2, .align = 8, .k = 50, .rep = 0, .seed = seed};
  while (plan_of(&c, 0, n).recv_elems == 0) c.seed++; /* rank 0 must receive something */
  const size_t need0 = plan_of(&c, 0, n).recv_elems, cap = max_elems(&c, n, 1);
  struct bufs b;
  alloc_bufs(w, &b, CW_SYMMETRIC, (max_elems(&c, n, 0) + 1) * es, cap * es);
  tw_phase("rank 0's capacity one element short of %zu", need0);
  for (int i = 0; i < w->nlocal; i++) fill(w, &b, i, es, &c, -1);
  tw_host_barrier(w, "buffers ready");
  for (int i = 0; i < w->nlocal; i++) enqueue(w, &b, i, dt, &c, w->r[i].rank == 0 ? need0 - 1 : cap, 0);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "overflow: the stream did not drain");
    if (r->rank == 0) {
      char want[64];
      snprintf(want, sizeof want, "receive %zu rows", need0);
      expect_refused_on_device(w, &b, i, want, "overflow");
    } else {
      symmResult_t async = symmInternalError;
      TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
      TW_CHECK(r, async == symmSuccess, "overflow: rank %d (not short) has an asynchronous error %s", r->rank,
               tu_result_name(async));
      check(w, &b, i, es, &c, 0, "beside rank 0's overflow");
    }
  }
  tw_host_barrier(w, "overflow checked");
  free_bufs(w, &b);
  for (int i = 0; i < w->nlocal; i++)
    if (w->r[i].rank == 0) cw_abort(&w->r[i], "the overflow");
  tw_destroy_comms(w);
}

/* A negative count on rank 1 (rank 0 with one rank): every rank's
 * asynchronous error names it and nothing is written anywhere. Every
 * communicator is aborted. */
static void negative_case(struct tw *w, uint64_t seed) {
  const int n = w->nranks, dt = symmUint8, es = 1;
  const int culprit = n > 1 ? 1 : 0;
  const struct cfg c = {.ne = 3, .align = 1, .k = 40, .rep = 0, .seed = seed};
  struct bufs b;
  alloc_bufs(w, &b, CW_REGISTERED, (max_elems(&c, n, 0) + 1) * es, (max_elems(&c, n, 1) + 1) * es);
  tw_phase("a negative count on rank %d", culprit);
  for (int i = 0; i < w->nlocal; i++) fill(w, &b, i, es, &c, w->r[i].rank == culprit ? 1 : -1);
  tw_host_barrier(w, "buffers ready");
  for (int i = 0; i < w->nlocal; i++) enqueue(w, &b, i, dt, &c, max_elems(&c, n, 1) + 1, 0);
  char want[64];
  snprintf(want, sizeof want, "rank %d's send counts", culprit);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "negative count: the stream did not drain");
    expect_refused_on_device(w, &b, i, want, "negative count");
  }
  tw_host_barrier(w, "negative count checked");
  free_bufs(w, &b);
  for (int i = 0; i < w->nlocal; i++) cw_abort(&w->r[i], "the negative count");
  tw_destroy_comms(w);
}

/* Picked before the harness starts the ranks (mp: before the fork), so
 * that every rank computes every rank's counts. */
static uint64_t g_seed;

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  const uint64_t seed = g_seed;
  if (tw_init_comms(w) != symmSuccess) return;
  tw_phase("seed %llu (COLL_SEED=%llu repeats it)", (unsigned long long)seed, (unsigned long long)seed);
  static const int dts[] = {symmUint8, symmUint32};
  static const size_t scales[] = {7, 3000};
  static const int64_t aligns[] = {1, 8};
  int k = 0;
  for (int ne = 1; ne <= NE_MAX; ne++)
    for (size_t a = 0; a < 2; a++)
      for (size_t d = 0; d < 2; d++, k++) {
        const struct cfg c = {.ne = ne, .align = aligns[a], .k = scales[k % 2], .rep = 0, .seed = seed + (uint64_t)k};
        run_case(w, k % 3 == 2 ? CW_REGISTERED : CW_SYMMETRIC, dts[d], &c);
      }
  /* The kernels move rows of bytes: every other type once, small. */
  for (int dt = 0; dt < CW_NDTYPES; dt++, k++)
    if (dt != symmUint8 && dt != symmUint32) {
      const struct cfg c = {.ne = 2, .align = 8, .k = 7, .rep = 0, .seed = seed + (uint64_t)k};
      run_case(w, CW_SYMMETRIC, dt, &c);
    }
  graph_case(w, seed);
  bad_input(w);
  overflow_case(w, seed);
  if (tw_init_comms(w) != symmSuccess) return;
  negative_case(w, seed);
}

int main(int argc, char **argv) {
  g_seed = cw_pick_seed();
  static struct tw_spec spec = {.name = "coll_alltoallv_2d", .modes = "mp,all", .body = body};
  spec.limit_s = 240;
  spec.process_init = cw_process_init;
  return tw_main(&spec, argc, argv);
}
