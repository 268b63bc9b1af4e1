/*
 * coll_bad_input all [--nranks=N]
 *
 * Argument checking of the collective and point-to-point calls, in one
 * process over n ranks (symmCommInitAll), so that buffers and streams of
 * another GPU are at hand: ranks 0 and 1 must be on different GPUs (it
 * skips on one GPU; with shared devices rank r is on GPU r % ngpus, so they
 * still are). Every bad call is made on rank 0 or 1 only and must
 *  - return the right code (symmInvalidArgument; symmInvalidUsage for a
 *    destroyed communicator),
 *  - leave a message naming the problem in symmGetLastError (the
 *    communicator's, or symmGetLastError(NULL) when the handle is bad),
 *  - enqueue nothing: every stream is idle right after the call (a
 *    collective kernel enqueued by mistake would wait for the other ranks),
 *    and a following valid all-reduce on every rank gives the right result
 *    with symmCommGetAsyncError still symmSuccess (the communicator stays
 *    usable and in step).
 * Calls: symmAllReduce, symmAllGather, symmAllGatherWithProgress,
 * symmReduceScatter, symmBroadcast, symmReduce, symmAllToAll, symmSend,
 * symmRecv. Bad inputs: NULL sendbuff / recvbuff with count > 0, datatype
 * 12 and -1, op 5 and -1, count x size overflow, sendbuff / recvbuff on the
 * other GPU, a host (malloc) pointer, a buffer smaller than count, a stream
 * of the other GPU, root / peer out of range (n and -1), a NULL
 * communicator, progress flags NULL / misaligned / chunkCount 0, a bad send
 * inside a group (the group must then launch nothing), symmGroupEnd without
 * symmGroupStart, and a destroyed communicator (every call, including
 * symmCommGetAsyncError and a second symmCommDestroy: symmInvalidUsage).
 * Valid corner cases that must succeed: count 0 with NULL buffers (nothing
 * enqueued), broadcast with sendbuff NULL on the non-root, reduce with
 * recvbuff NULL on the non-root.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#define N 1024
enum { A_AR, A_AG, A_AGP, A_RS, A_BC, A_RD, A_A2A, A_SEND, A_RECV, NAPI };
static const char *const api_name[NAPI] = {"symmAllReduce", "symmAllGather", "symmAllGatherWithProgress",
                                           "symmReduceScatter", "symmBroadcast", "symmReduce", "symmAllToAll",
                                           "symmSend", "symmRecv"};
static int has_send(int a) { return a != A_RECV; }
static int has_recv(int a) { return a != A_SEND; }
static int has_op(int a) { return a == A_AR || a == A_RS || a == A_RD; }
static int has_root(int a) { return a == A_BC || a == A_RD || a == A_SEND || a == A_RECV; }

struct env {
  struct tw *w;
  CUdeviceptr A[TW_MAX_RANKS], B[TW_MAX_RANKS], T0, flags0;
  int *host;
  int ncases, nfailed;
};

static symmResult_t call_api(int api, const void *s, void *r, size_t count, int dt, int op, int root, symmComm_t comm,
                             CUstream st, uint32_t *flags, size_t chunk) {
  const symmDataType_t d = (symmDataType_t)dt;
  const symmRedOp_t o = (symmRedOp_t)op;
  switch (api) {
    case A_AR: return symmAllReduce(s, r, count, d, o, comm, st);
    case A_AG: return symmAllGather(s, r, count, d, comm, st);
    case A_AGP: return symmAllGatherWithProgress(s, r, count, d, flags, chunk, comm, st);
    case A_RS: return symmReduceScatter(s, r, count, d, o, comm, st);
    case A_BC: return symmBroadcast(s, r, count, d, root, comm, st);
    case A_RD: return symmReduce(s, r, count, d, o, root, comm, st);
    case A_A2A: return symmAllToAll(s, r, count, d, comm, st);
    case A_SEND: return symmSend(s, count, d, root, comm, st);
    default: return symmRecv(r, count, d, root, comm, st);
  }
}

/* Every stream idle (nothing enqueued by a call that failed). */
static int streams_idle(struct env *e, const char *desc) {
  int ok = 1;
  for (int i = 0; i < e->w->nlocal; i++) {
    struct tw_rank *r = &e->w->r[i];
    tw_use(r);
    CUresult q = tu_cu.cuStreamQuery(r->stream);
    if (q != 0) {
      tw_fail_at(__FILE__, __LINE__, r, "%s: the stream is not idle after a failed call (%s): something was enqueued",
                 desc, tu_cu_error(q));
      ok = 0;
    }
  }
  return ok;
}

/* A valid all-reduce (int32 sum, A -> B) on every rank, checked. */
static int valid_allreduce(struct env *e, const char *after) {
  struct tw *w = e->w;
  static int round;
  round++;
  static int32_t in[TW_MAX_RANKS][N];
  int32_t want[N] = {0};
  for (int i = 0; i < w->nlocal; i++)
    for (int j = 0; j < N; j++) {
      in[i][j] = (int32_t)(cw_mix64((uint64_t)(round * 7 + i) * 100003 + (uint64_t)j) & 0xffff);
      want[j] += in[i][j];
    }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    TW_CU(cw_cu.cuMemcpyHtoDAsync(e->A[i], in[i], sizeof in[i], r->stream));
    TW_CU(cw_cu.cuMemsetD8Async(e->B[i], 0xa5, N * 4, r->stream));
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    symmResult_t rc = symmAllReduce((void *)(uintptr_t)e->A[i], (void *)(uintptr_t)e->B[i], N, symmInt32, symmSum,
                                    r->comm, r->stream);
    TW_REQUIRE(r, rc == symmSuccess, "valid all-reduce after %s returned %s: %s", after, tu_result_name(rc),
               symmGetLastError(r->comm));
  }
  tw_sync_all(w, 60, "valid all-reduce");
  int ok = 1;
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    int32_t out[N];
    tw_use(r);
    TW_CU(tu_cu.cuMemcpyDtoH(out, e->B[i], sizeof out));
    for (int j = 0; j < N; j++)
      if (out[j] != want[j]) {
        tw_fail_at(__FILE__, __LINE__, r, "valid all-reduce after %s: element %d is %d, expected %d", after, j, out[j],
                   want[j]);
        ok = 0;
        break;
      }
  }
  tw_check_async(w, after);
  return ok;
}

/* One bad call's outcome. `where` is where the message must be (the
 * communicator, or NULL for the thread's slot). */
static void expect(struct env *e, const char *desc, symmResult_t got, symmResult_t want, symmComm_t where,
                   const char *kw) {
  char msg[1024];
  const char *m = tu_last_error(where, msg, sizeof msg);
  int ok = 1;
  e->ncases++;
  if (got != want) {
    tw_fail_at(__FILE__, __LINE__, NULL, "%s: returned %s, expected %s (last error: \"%s\")", desc, tu_result_name(got),
               tu_result_name(want), m ? m : "(NULL)");
    ok = 0;
  } else if (want != symmSuccess && (!m || !m[0] || (kw && !tu_contains_ci(m, kw)))) {
    tw_fail_at(__FILE__, __LINE__, NULL, "%s: returned %s but the message \"%s\" does not mention \"%s\"", desc,
               tu_result_name(got), m ? m : "(NULL)", kw ? kw : "anything");
    ok = 0;
  }
  ok &= streams_idle(e, desc);
  ok &= valid_allreduce(e, desc);
  if (!ok) e->nfailed++;
}

static void destroyed_comm(struct env *e) {
  struct tw *w = e->w;
  tw_phase("destroyed communicator");
  symmComm_t x[TW_MAX_RANKS];
  int devs[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) devs[i] = w->r[i].device;
  symmResult_t rc = symmCommInitAll(x, w->nlocal, devs);
  REQUIRE(rc == symmSuccess, "symmCommInitAll for the destroyed-communicator checks: %s (%s)", tu_result_name(rc),
          symmGetLastError(NULL));
  for (int i = 0; i < w->nlocal; i++)
    REQUIRE(symmCommDestroy(x[i]) == symmSuccess, "symmCommDestroy: %s", symmGetLastError(NULL));
  /* No communicator is created in between, so the stale handle cannot have
   * been reused for a new one. */
  void *s = (void *)(uintptr_t)e->A[0], *r = (void *)(uintptr_t)e->B[0];
  char desc[160];
  for (int api = 0; api < NAPI; api++) {
    snprintf(desc, sizeof desc, "%s on a destroyed communicator", api_name[api]);
    rc = call_api(api, s, r, N, symmInt32, symmSum, 1, x[0], w->r[0].stream, (uint32_t *)(uintptr_t)e->flags0, 64);
    e->ncases++;
    char msg[1024];
    const char *m = tu_last_error(NULL, msg, sizeof msg);
    if (rc != symmInvalidUsage || !tu_contains_ci(m, "live")) {
      tw_fail_at(__FILE__, __LINE__, NULL, "%s: returned %s (message \"%s\"), expected symmInvalidUsage naming a "
                 "communicator that is not live", desc, tu_result_name(rc), m ? m : "(NULL)");
      e->nfailed++;
    }
    streams_idle(e, desc);
  }
  symmResult_t ae = symmSuccess;
  rc = symmCommGetAsyncError(x[1], &ae);
  TW_CHECK(NULL, rc == symmInvalidUsage, "symmCommGetAsyncError on a destroyed communicator returned %s",
           tu_result_name(rc));
  rc = symmCommDestroy(x[1]);
  TW_CHECK(NULL, rc == symmInvalidUsage, "a second symmCommDestroy returned %s", tu_result_name(rc));
  e->ncases += 2;
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  struct env e;
  memset(&e, 0, sizeof e);
  e.w = w;
  /* Room for every call's whole input and output (n blocks of N for
   * reduce-scatter and all-to-all): only the bad argument may be wrong. */
  const size_t ab_bytes = (size_t)w->nranks * N * 4;
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuMemAlloc(&e.A[i], ab_bytes));
    TW_CU(tu_cu.cuMemAlloc(&e.B[i], ab_bytes));
  }
  tw_use(&w->r[0]);
  TW_CU(tu_cu.cuMemAlloc(&e.T0, 64));
  TW_CU(tu_cu.cuMemAlloc(&e.flags0, 4096));
  e.host = calloc((size_t)w->nranks * N, 4);
  REQUIRE(e.host != NULL, "out of host memory");

  destroyed_comm(&e);
  if (tw_init_comms(w) != symmSuccess) return;
  valid_allreduce(&e, "init");

  struct tw_rank *r0 = &w->r[0], *r1 = &w->r[1];
  symmComm_t c0 = r0->comm, c1 = r1->comm;
  CUstream s0 = r0->stream, s1 = r1->stream;
  void *A0 = (void *)(uintptr_t)e.A[0], *B0 = (void *)(uintptr_t)e.B[0];
  void *A1 = (void *)(uintptr_t)e.A[1], *B1 = (void *)(uintptr_t)e.B[1];
  void *T0 = (void *)(uintptr_t)e.T0;
  uint32_t *F0 = (uint32_t *)(uintptr_t)e.flags0;
  const size_t huge = SIZE_MAX / 2 + 1;
  char d[256], what[64];

  for (int api = 0; api < NAPI; api++) {
    const char *an = api_name[api];
    const int root = api == A_SEND || api == A_RECV ? 1 : 0; /* peer 1, or root 0 (this rank) */
    tw_phase("bad arguments of %s", an);
#define BAD(what, call, want, where, kw)                          \
  do {                                                            \
    snprintf(d, sizeof d, "%s with %s", an, what);                \
    symmResult_t got_ = (call);                                   \
    expect(&e, d, got_, (want), (where), (kw));                   \
  } while (0)
    if (has_send(api)) {
      BAD("sendbuff NULL, count 1024", call_api(api, NULL, B0, N, symmInt32, symmSum, root, c0, s0, F0, 64),
          symmInvalidArgument, c0, "sendbuff");
      BAD("sendbuff on the other GPU", call_api(api, A1, B0, N, symmInt32, symmSum, root, c0, s0, F0, 64),
          symmInvalidArgument, c0, "device");
      BAD("sendbuff a host (malloc) pointer",
          call_api(api, e.host, B0, N, symmInt32, symmSum, root, c0, s0, F0, 64), symmInvalidArgument, c0, "sendbuff");
      BAD("sendbuff smaller than count elements", call_api(api, T0, B0, N, symmInt32, symmSum, root, c0, s0, F0, 64),
          symmInvalidArgument, c0, "past");
      BAD("sendbuff on the other GPU (rank 1's communicator, GPU 0's buffer)",
          call_api(api, A0, B1, N, symmInt32, symmSum, root == 1 ? 0 : 1, c1, s1, F0, 64), symmInvalidArgument, c1,
          "device");
    }
    if (has_recv(api)) {
      BAD("recvbuff NULL, count 1024", call_api(api, A0, NULL, N, symmInt32, symmSum, root, c0, s0, F0, 64),
          symmInvalidArgument, c0, "recvbuff");
      BAD("recvbuff on the other GPU", call_api(api, A0, B1, N, symmInt32, symmSum, root, c0, s0, F0, 64),
          symmInvalidArgument, c0, "device");
      BAD("recvbuff smaller than the output", call_api(api, A0, T0, N, symmInt32, symmSum, root, c0, s0, F0, 64),
          symmInvalidArgument, c0, "past");
    }
    BAD("datatype 12", call_api(api, A0, B0, N, symmNumTypes, symmSum, root, c0, s0, F0, 64), symmInvalidArgument, c0,
        "datatype");
    BAD("datatype -1", call_api(api, A0, B0, N, -1, symmSum, root, c0, s0, F0, 64), symmInvalidArgument, c0,
        "datatype");
    if (has_op(api)) {
      BAD("op 5", call_api(api, A0, B0, N, symmInt32, symmNumOps, root, c0, s0, F0, 64), symmInvalidArgument, c0,
          "op");
      BAD("op -1", call_api(api, A0, B0, N, symmInt32, -1, root, c0, s0, F0, 64), symmInvalidArgument, c0, "op");
    }
    BAD("count x size overflowing", call_api(api, A0, B0, huge, symmInt32, symmSum, root, c0, s0, F0, 64),
        symmInvalidArgument, c0, "overflow");
    BAD("a stream of the other GPU", call_api(api, A0, B0, N, symmInt32, symmSum, root, c0, s1, F0, 64),
        symmInvalidArgument, c0, "stream");
    BAD("a stream of the other GPU (rank 1's communicator, GPU 0's stream)",
        call_api(api, A1, B1, N, symmInt32, symmSum, root == 1 ? 0 : 1, c1, s0, F0, 64), symmInvalidArgument, c1,
        "stream");
    if (has_root(api)) {
      const char *kw = api == A_SEND || api == A_RECV ? "peer" : "root";
      snprintf(what, sizeof what, "root/peer %d (%d ranks)", w->nranks, w->nranks);
      BAD(what, call_api(api, A0, B0, N, symmInt32, symmSum, w->nranks, c0, s0, F0, 64), symmInvalidArgument, c0,
          kw);
      BAD("root/peer -1", call_api(api, A0, B0, N, symmInt32, symmSum, -1, c0, s0, F0, 64), symmInvalidArgument, c0,
          kw);
    }
    BAD("a NULL communicator", call_api(api, A0, B0, N, symmInt32, symmSum, root, NULL, s0, F0, 64),
        symmInvalidArgument, NULL, "comm");
    if (api == A_AGP) {
      BAD("flags NULL", call_api(api, A0, B0, N, symmInt32, symmSum, 0, c0, s0, NULL, 64), symmInvalidArgument, c0,
          "flags");
      BAD("flags not 4-byte aligned",
          call_api(api, A0, B0, N, symmInt32, symmSum, 0, c0, s0, (uint32_t *)(uintptr_t)(e.flags0 + 2), 64),
          symmInvalidArgument, c0, "aligned");
      BAD("chunkCount 0", call_api(api, A0, B0, N, symmInt32, symmSum, 0, c0, s0, F0, 0), symmInvalidArgument, c0,
          "chunkCount");
    }
    /* Valid: count 0 with NULL buffers enqueues nothing. */
    BAD("count 0 and NULL buffers (valid)", call_api(api, NULL, NULL, 0, symmInt32, symmSum, root, c0, s0, NULL, 64),
        symmSuccess, c0, NULL);
#undef BAD
  }

  /* A bad send inside a group: the call fails, the group then launches nothing. */
  tw_phase("bad send inside a group");
  {
    symmResult_t gs = symmGroupStart();
    symmResult_t bad = symmSend(A0, N, symmInt32, 7, c0, s0);
    symmResult_t ge = symmGroupEnd();
    e.ncases++;
    TW_CHECK(r0, gs == symmSuccess && bad == symmInvalidArgument && ge == symmSuccess,
             "group with a bad send (peer 7): symmGroupStart %s, symmSend %s (expected symmInvalidArgument), "
             "symmGroupEnd %s (expected symmSuccess: nothing left to launch)",
             tu_result_name(gs), tu_result_name(bad), tu_result_name(ge));
    streams_idle(&e, "group with a bad send");
    valid_allreduce(&e, "group with a bad send");
  }
  {
    symmResult_t ge = symmGroupEnd();
    snprintf(d, sizeof d, "symmGroupEnd without symmGroupStart");
    expect(&e, d, ge, symmInvalidUsage, NULL, "symmGroupStart");
  }

  /* Valid: broadcast with sendbuff NULL on the non-root, reduce with
   * recvbuff NULL on the non-root. */
  tw_phase("NULL buffers where the call does not use them");
  {
    /* Root 0; every other rank is a non-root and passes NULL. */
    static int32_t in[TW_MAX_RANKS][N];
    int32_t out[N], sum[N];
    for (int j = 0; j < N; j++) sum[j] = 0;
    for (int i = 0; i < w->nlocal; i++)
      for (int j = 0; j < N; j++) {
        in[i][j] = i == 0 ? j * 3 - 77 : 1000 * i - j;
        sum[j] += in[i][j];
      }
    tw_use(r0);
    TW_CU(cw_cu.cuMemcpyHtoDAsync(e.A[0], in[0], sizeof in[0], s0));
    for (int i = 1; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      TW_CU(cw_cu.cuMemsetD8Async(e.B[i], 0xa5, N * 4, w->r[i].stream));
    }
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      symmResult_t rc = symmBroadcast(i == 0 ? A0 : NULL, (void *)(uintptr_t)e.B[i], N, symmInt32, 0, r->comm,
                                      r->stream);
      TW_CHECK(r, rc == symmSuccess, "broadcast with sendbuff NULL on the non-roots: %s (%s)", tu_result_name(rc),
               symmGetLastError(r->comm));
    }
    e.ncases++;
    tw_sync_all(w, 60, "broadcast with NULL sendbuff on the non-roots");
    for (int i = 1; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      TW_CU(tu_cu.cuMemcpyDtoH(out, e.B[i], sizeof out));
      TW_CHECK(&w->r[i], memcmp(in[0], out, sizeof out) == 0, "broadcast with sendbuff NULL on the non-root: wrong data");
    }

    for (int i = 1; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      TW_CU(cw_cu.cuMemcpyHtoDAsync(e.A[i], in[i], sizeof in[i], w->r[i].stream));
    }
    tw_use(r0);
    TW_CU(cw_cu.cuMemsetD8Async(e.B[0], 0xa5, N * 4, s0));
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      symmResult_t rc = symmReduce((void *)(uintptr_t)e.A[i], i == 0 ? B0 : NULL, N, symmInt32, symmSum, 0, r->comm,
                                   r->stream);
      TW_CHECK(r, rc == symmSuccess, "reduce with recvbuff NULL on the non-roots: %s (%s)", tu_result_name(rc),
               symmGetLastError(r->comm));
    }
    e.ncases++;
    tw_sync_all(w, 60, "reduce with NULL recvbuff on the non-roots");
    tw_use(r0);
    TW_CU(tu_cu.cuMemcpyDtoH(out, e.B[0], sizeof out));
    int bad = 0;
    for (int j = 0; j < N; j++) bad += out[j] != sum[j];
    TW_CHECK(r0, bad == 0, "reduce with recvbuff NULL on the non-roots: %d wrong elements at the root", bad);
    tw_check_async(w, "NULL buffers where unused");
  }

  tw_log(w, "summary: %d bad-input cases checked (each followed by a checked all-reduce), %d failed", e.ncases,
         e.nfailed);
  tw_destroy_comms(w);
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuMemFree(e.A[i]));
    TW_CU(tu_cu.cuMemFree(e.B[i]));
  }
  tw_use(&w->r[0]);
  TW_CU(tu_cu.cuMemFree(e.T0));
  TW_CU(tu_cu.cuMemFree(e.flags0));
  free(e.host);
}

int main(int argc, char **argv) {
  static const struct tw_spec spec = {.name = "coll_bad_input", .modes = "all", .limit_s = 270, .min_gpus = 2,
      .process_init = cw_process_init, .body = body};
  return tw_main(&spec, argc, argv);
}
