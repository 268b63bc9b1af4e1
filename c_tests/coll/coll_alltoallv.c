/*
 * coll_alltoallv <mp|all> [--nranks=N]
 *
 * symmAllToAllv: uneven counts (some zero, odd ones, blocks from a few
 * elements to over 1 MiB so that the sized kernel's direct push is taken
 * into symmetric outputs), displacements with gaps, send blocks in peer
 * order and receive blocks in reverse peer order; every buffer class
 * (plain, registered, symmetric), twice in a row. Checked on the host:
 * every received block, and every gap of the receive buffer still poison.
 * Then the argument checks, on each rank alone (nothing is launched): NULL
 * arrays, overlapping send and receive buffers, overlapping receive blocks,
 * a bad datatype.
 *
 * CTest runs it with the default send/recv kernel and with SYMM_ALGO=p2p.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#define POISON 0xA5A5A5A5u
#define SEND_GAP 16 /* elements between send blocks */
#define RECV_GAP 8  /* ... and receive blocks */

/* Elements rank `from` sends to rank `to` at scale k: zero for a third of
 * the pairs, odd otherwise. */
static size_t count_of(int from, int to, int n, size_t k) {
  if ((from + to) % 3 == 0) return 0;
  return k * (size_t)(1 + (from * n + to) % 4) + 3;
}

static uint32_t value_of(int from, int to, size_t j) {
  return (uint32_t)(from * 1000003u + to * 7919u) ^ (uint32_t)(j * 2654435761u);
}

struct plan {
  size_t sc[TW_MAX_RANKS], sd[TW_MAX_RANKS], rc[TW_MAX_RANKS], rd[TW_MAX_RANKS];
  size_t send_elems, recv_elems;
};

/* Rank r's arrays: send blocks in peer order, receive blocks in reverse. */
static struct plan plan_of(int r, int n, size_t k) {
  struct plan p;
  memset(&p, 0, sizeof p);
  for (int q = 0; q < n; q++) {
    p.sc[q] = count_of(r, q, n, k);
    p.sd[q] = p.send_elems;
    p.send_elems += p.sc[q] + SEND_GAP;
  }
  for (int q = n - 1; q >= 0; q--) {
    p.rc[q] = count_of(q, r, n, k);
    p.rd[q] = p.recv_elems;
    p.recv_elems += p.rc[q] + RECV_GAP;
  }
  return p;
}

static void run_case(struct tw *w, enum cw_class cls, size_t k, int rep) {
  const int n = w->nranks;
  size_t send_max = 0, recv_max = 0;
  for (int r = 0; r < n; r++) {
    struct plan p = plan_of(r, n, k);
    if (p.send_elems > send_max) send_max = p.send_elems;
    if (p.recv_elems > recv_max) recv_max = p.recv_elems;
  }
  struct cw_buf S, R;
  cw_buf_alloc(w, &S, cls, send_max * 4);
  cw_buf_alloc(w, &R, cls, recv_max * 4);
  uint32_t *host = malloc((send_max > recv_max ? send_max : recv_max) * 4);
  REQUIRE(host != NULL, "out of host memory");
  tw_phase("%s buffers, scale %zu, rep %d", cw_class_name[cls], k, rep);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    struct plan p = plan_of(r->rank, n, k);
    for (size_t e = 0; e < send_max; e++) host[e] = POISON;
    for (int q = 0; q < n; q++)
      for (size_t j = 0; j < p.sc[q]; j++) host[p.sd[q] + j] = value_of(r->rank, q, j);
    tw_use(r);
    CU_REQUIRE(tu_upload(S.p[i], host, send_max * 4));
    for (size_t e = 0; e < recv_max; e++) host[e] = POISON;
    CU_REQUIRE(tu_upload(R.p[i], host, recv_max * 4));
  }
  tw_host_barrier(w, "buffers ready");
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    struct plan p = plan_of(r->rank, n, k);
    TW_SYMM_REQUIRE(r, symmAllToAllv((const void *)(uintptr_t)S.p[i], p.sc, p.sd, (void *)(uintptr_t)R.p[i], p.rc,
                                     p.rd, symmUint32, r->comm, r->stream));
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    struct plan p = plan_of(r->rank, n, k);
    TW_CHECK(r, tw_stream_poll(r, r->stream, 60.0) == 0, "the all-to-all-v did not finish");
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemcpyDtoH(host, R.p[i], recv_max * 4));
    size_t wrong = 0, first = (size_t)-1;
    int first_peer = -1;
    for (int q = 0; q < n; q++) {
      for (size_t j = 0; j < p.rc[q]; j++)
        if (host[p.rd[q] + j] != value_of(q, r->rank, j) && wrong++ == 0) first = j, first_peer = q;
      for (size_t g = p.rd[q] + p.rc[q]; g < p.rd[q] + p.rc[q] + RECV_GAP; g++)
        if (host[g] != POISON && wrong++ == 0) first = g, first_peer = -2;
    }
    TW_CHECK(r, wrong == 0, "%s, scale %zu, rep %d: %zu wrong element(s); the first %s %d, element %zu",
             cw_class_name[cls], k, rep, wrong, first_peer == -2 ? "in a gap after a block, at" : "from peer",
             first_peer == -2 ? 0 : first_peer, first);
  }
  free(host);
  tw_host_barrier(w, "checked");
  cw_buf_free(w, &S);
  cw_buf_free(w, &R);
}

/* One bad call: symmInvalidArgument, its message naming the problem. */
static void refused(struct tw_rank *r, const char *what, symmResult_t rc, const char *says) {
  cw_refused(r, what, rc, symmInvalidArgument, says);
}

/* Bad arguments, on each rank alone: nothing is launched. */
static void bad_input(struct tw *w) {
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    const int n = w->nranks;
    size_t c[TW_MAX_RANKS], d[TW_MAX_RANKS], same[TW_MAX_RANKS];
    for (int q = 0; q < n; q++) c[q] = 4, d[q] = (size_t)q * 4, same[q] = 0;
    CUdeviceptr a = 0, b = 0;
    tw_use(r);
    CU_REQUIRE(tu_cu.cuMemAlloc(&a, (size_t)n * 16));
    CU_REQUIRE(tu_cu.cuMemAlloc(&b, (size_t)n * 16));
    void *pa = (void *)(uintptr_t)a, *pb = (void *)(uintptr_t)b;
    refused(r, "NULL sendcounts", symmAllToAllv(pa, NULL, d, pb, c, d, symmUint32, r->comm, r->stream),
            "sendcounts is NULL");
    refused(r, "NULL rdispls", symmAllToAllv(pa, c, d, pb, c, NULL, symmUint32, r->comm, r->stream), "rdispls is NULL");
    refused(r, "in place", symmAllToAllv(pa, c, d, pa, c, d, symmUint32, r->comm, r->stream), "overlap");
    if (n > 1)
      refused(r, "receive blocks on each other", symmAllToAllv(pa, c, d, pb, c, same, symmUint32, r->comm, r->stream),
              "overlap");
    refused(r, "bad datatype", symmAllToAllv(pa, c, d, pb, c, d, (symmDataType_t)99, r->comm, r->stream), "datatype");
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    TW_CHECK(r, async == symmSuccess, "bad arguments left an asynchronous error: %s", tu_result_name(async));
    CU_REQUIRE(tu_cu.cuMemFree(a));
    CU_REQUIRE(tu_cu.cuMemFree(b));
  }
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  if (tw_init_comms(w) != symmSuccess) return;
  /* Scale 7: blocks of 10-31 elements; 100000: up to 400 000 elements
   * (1.6 MB, past the 1 MiB from which symmetric outputs are pushed into). */
  static const size_t scales[] = {7, 100000};
  for (int cls = 0; cls < CW_NCLASSES; cls++)
    for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++)
      for (int rep = 0; rep < 2; rep++) run_case(w, (enum cw_class)cls, scales[s], rep);
  bad_input(w);
  tw_destroy_comms(w);
}

int main(int argc, char **argv) {
  static struct tw_spec spec = {.name = "coll_alltoallv", .modes = "mp,all", .body = body};
  spec.limit_s = 240;
  spec.process_init = cw_process_init;
  return tw_main(&spec, argc, argv);
}
