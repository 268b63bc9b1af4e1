/*
 * coll_mismatch <mp|all> [--nranks=N] <count|token>
 *
 * Ranks that disagree about a collective must get an asynchronous error,
 * not corrupted data or a hang. Each sub-case uses a fresh communicator
 * (after an asynchronous error a communicator must be destroyed): every
 * rank enqueues its call (rank 0 one side of the disagreement, every other
 * rank the other side, called "rank 1" below), then polls
 * symmCommGetAsyncError until it reports something. Required on every
 * rank: symmInvalidUsage within 5 s (15 s with shared devices; SYMM_TIMEOUT
 * is 20 s, so a mismatch that goes unnoticed shows up as symmTimeout, not
 * as a hang), a message naming the
 * problem in symmGetLastError, the stream idle afterwards (the kernels
 * stop), the receive buffer still all poison (no block touched data), and
 * symmCommDestroy succeeding.
 *
 *  count  (SYMM_CHECK=1; the driver sets it): rank 1 passes a different
 *         count to all-reduce (plain buffers, and symmetric ones); also a
 *         different collective, dtype, op and broadcast root.
 *  token  (SYMM_CHECK=0, SYMM_ALGO=oneshot unless set: it must turn LL
 *         off; the driver sets them): the layout
 *         token check that is always on where peers read each other's
 *         buffers (LL packets, used for small messages, never do). Rank 0 passes a symmetric sendbuff, rank 1 a plain one
 *         (all-reduce, all-gather, reduce-scatter, reduce, all-to-all), a
 *         registered vs a plain one, and symmetric buffers at different
 *         offsets. With SYMM_ALGO=twoshot+push...: also rank 0 with a
 *         symmetric recvbuff (push kernel) against rank 1 with a plain one
 *         (another two-shot kernel): the protocol check must catch it.
 *
 * Some cases pass a symmetric recvbuff (the push kernel's condition); the
 * rest a plain one. Either must stay all poison.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_util.h"

#define N 2048
#define BYTES (4 * N * 4)
#define DETECT_S 5.0

static int g_token;
static int g_cases, g_failed;

enum { K_AR, K_AG, K_RS, K_RD, K_A2A, K_BC };

struct side {
  int kind;
  size_t count;
  int dt, op, root;
  int cls;      /* buffer class of sendbuff */
  size_t off;   /* byte offset of sendbuff in its buffer */
  int rsym;     /* recvbuff symmetric (1) or plain (0) */
};

struct scase {
  const char *name;
  struct side s[2];
  const char *keyword;
};

static symmResult_t issue(const struct side *sd, const void *send, void *recv, const struct tw_rank *r) {
  const symmDataType_t dt = (symmDataType_t)sd->dt;
  const symmRedOp_t op = (symmRedOp_t)sd->op;
  switch (sd->kind) {
    case K_AR: return symmAllReduce(send, recv, sd->count, dt, op, r->comm, r->stream);
    case K_AG: return symmAllGather(send, recv, sd->count, dt, r->comm, r->stream);
    case K_RS: return symmReduceScatter(send, recv, sd->count, dt, op, r->comm, r->stream);
    case K_RD: return symmReduce(send, recv, sd->count, dt, op, sd->root, r->comm, r->stream);
    case K_A2A: return symmAllToAll(send, recv, sd->count, dt, r->comm, r->stream);
    default: return symmBroadcast(send, recv, sd->count, dt, sd->root, r->comm, r->stream);
  }
}

static void run_case(struct tw *w, const struct scase *sc) {
  tw_phase("%s", sc->name);
  g_cases++;
  int failed = 0;
  if (tw_init_comms(w) != symmSuccess) tu_exit_now();
  /* Buffers of every class (collective calls on every rank), the send data,
   * and a poisoned plain receive buffer. */
  struct cw_buf bufs[CW_NCLASSES], recv, rsym;
  for (int c = 0; c < CW_NCLASSES; c++) cw_buf_alloc(w, &bufs[c], (enum cw_class)c, BYTES);
  cw_buf_alloc(w, &recv, CW_STAGED, BYTES);
  cw_buf_alloc(w, &rsym, CW_SYMMETRIC, BYTES);
  static uint32_t host[BYTES / 4];
  for (size_t j = 0; j < BYTES / 4; j++) host[j] = (uint32_t)j * 2654435761u;
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    for (int c = 0; c < CW_NCLASSES; c++)
      TW_CU(cw_cu.cuMemcpyHtoDAsync(bufs[c].p[i], host, BYTES, w->r[i].stream));
    TW_CU(cw_cu.cuMemsetD8Async(recv.p[i], 0xa5, BYTES, w->r[i].stream));
    TW_CU(cw_cu.cuMemsetD8Async(rsym.p[i], 0xa5, BYTES, w->r[i].stream));
  }
  tw_sync_all(w, 60, "set-up");

  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    const struct side *sd = &sc->s[r->rank == 0 ? 0 : 1];
    const void *send = (const void *)(uintptr_t)(bufs[sd->cls].p[i] + sd->off);
    const CUdeviceptr rp = sd->rsym ? rsym.p[i] : recv.p[i];
    symmResult_t rc = issue(sd, send, (void *)(uintptr_t)rp, r);
    TW_REQUIRE(r, rc == symmSuccess, "%s: the call itself returned %s (%s); mismatches are found on the device",
               sc->name, tu_result_name(rc), symmGetLastError(r->comm));
  }
  const double t0 = tu_now();
  symmResult_t got[TW_MAX_RANKS];
  double when[TW_MAX_RANKS];
  for (int i = 0; i < TW_MAX_RANKS; i++) {
    got[i] = symmSuccess;
    when[i] = -1;
  }
  const double detect_s = DETECT_S * (w->shared ? 3 : 1);
  int pending = w->nlocal;
  while (pending > 0 && tu_now() - t0 < 40) {
    for (int i = 0; i < w->nlocal; i++) {
      if (when[i] >= 0) continue;
      symmResult_t ae = symmSuccess;
      symmResult_t q = symmCommGetAsyncError(w->r[i].comm, &ae);
      TW_REQUIRE(&w->r[i], q == symmSuccess, "symmCommGetAsyncError returned %s", tu_result_name(q));
      if (ae != symmSuccess) {
        got[i] = ae;
        when[i] = tu_now() - t0;
        pending--;
      }
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    if (when[i] < 0) {
      tw_fail_at(__FILE__, __LINE__, r, "%s: no asynchronous error after 40 s (the mismatch went unnoticed)", sc->name);
      failed = 1;
      continue;
    }
    if (got[i] != symmInvalidUsage || when[i] > detect_s || !tu_contains_ci(m, sc->keyword)) {
      tw_fail_at(__FILE__, __LINE__, r,
                 "%s: symmCommGetAsyncError gave %s after %.2f s with message \"%s\"; expected symmInvalidUsage "
                 "within %.0f s naming \"%s\"",
                 sc->name, tu_result_name(got[i]), when[i], m ? m : "(NULL)", detect_s, sc->keyword);
      failed = 1;
    } else {
      tw_log(w, "%-58s rank %d: %s after %.3f s: %s", sc->name, r->rank, tu_result_name(got[i]), when[i], m);
    }
  }
  /* The kernels must stop, and must not have written any output. */
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    tw_use(r);
    double s0 = tu_now();
    CUresult q;
    while ((q = tu_cu.cuStreamQuery(r->stream)) == TU_CUDA_ERROR_NOT_READY && tu_now() - s0 < 40) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    if (q != 0) {
      tw_fail_at(__FILE__, __LINE__, r, "%s: the stream did not become idle after the error (%s)", sc->name,
                 tu_cu_error(q));
      failed = 1;
      tu_exit_now(); /* cannot safely free or destroy under a running kernel */
    }
    static unsigned char out[BYTES];
    const struct side *sd = &sc->s[r->rank == 0 ? 0 : 1];
    TW_CU(tu_cu.cuMemcpyDtoH(out, sd->rsym ? rsym.p[i] : recv.p[i], BYTES));
    size_t changed = 0, first = 0;
    for (size_t j = 0; j < BYTES; j++)
      if (out[j] != 0xa5 && changed++ == 0) first = j;
    if (changed) {
      tw_fail_at(__FILE__, __LINE__, r, "%s: %zu bytes of recvbuff were written despite the mismatch (first at %zu)",
                 sc->name, changed, first);
      failed = 1;
    }
  }
  /* After an asynchronous error only destroying the communicator is
   * meaningful: it releases the symmetric memory and the registrations;
   * the cuMemAlloc'd buffers are freed after it. */
  tw_destroy_comms(w);
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuMemFree(bufs[CW_STAGED].p[i]));
    TW_CU(tu_cu.cuMemFree(bufs[CW_REGISTERED].p[i]));
    TW_CU(tu_cu.cuMemFree(recv.p[i]));
  }
  (void)rsym; /* symmetric: released with the communicator */
  if (failed) g_failed++;
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  const int I32 = symmInt32, F32 = symmFloat32; /* push and pipe exist for 16/32-bit floats only */
  /* rank 0 side, rank 1 side: {kind, count, dt, op, root, class, offset} */
  const struct scase count_cases[] = {
      {"all-reduce count 1024 vs 2048 (plain)",
       {{K_AR, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}, {K_AR, 2048, I32, symmSum, 0, CW_STAGED, 0, 0}}, "mismatch"},
      {"all-reduce count 1024 vs 2048 (symmetric)",
       {{K_AR, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}, {K_AR, 2048, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}}, "mismatch"},
      {"all-reduce count 1024 vs 1025 (registered)",
       {{K_AR, 1024, I32, symmSum, 0, CW_REGISTERED, 0, 0}, {K_AR, 1025, I32, symmSum, 0, CW_REGISTERED, 0, 0}},
       "mismatch"},
      {"all-reduce vs all-gather (plain)",
       {{K_AR, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}, {K_AG, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}}, "mismatch"},
      {"all-reduce int32 vs float32 (plain)",
       {{K_AR, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}, {K_AR, 1024, F32, symmSum, 0, CW_STAGED, 0, 0}}, "mismatch"},
      {"all-reduce sum vs max (symmetric)",
       {{K_AR, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}, {K_AR, 1024, I32, symmMax, 0, CW_SYMMETRIC, 0, 0}}, "mismatch"},
      {"broadcast root 0 vs root 1 (plain)",
       {{K_BC, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}, {K_BC, 1024, I32, symmSum, 1, CW_STAGED, 0, 0}}, "mismatch"},
      {"all-reduce count 1024 vs 2048 (symmetric send and recv)",
       {{K_AR, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 1}, {K_AR, 2048, I32, symmSum, 0, CW_SYMMETRIC, 0, 1}},
       "mismatch"},
  };
  const struct scase token_cases[] = {
      {"all-reduce: symmetric vs plain sendbuff",
       {{K_AR, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}, {K_AR, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}}, "disagree"},
      {"all-gather: symmetric vs plain sendbuff",
       {{K_AG, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}, {K_AG, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}}, "disagree"},
      {"reduce-scatter: symmetric vs plain sendbuff",
       {{K_RS, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}, {K_RS, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}}, "disagree"},
      {"reduce (root 0): symmetric vs plain sendbuff",
       {{K_RD, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}, {K_RD, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}}, "disagree"},
      {"all-to-all: symmetric vs plain sendbuff",
       {{K_A2A, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}, {K_A2A, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}}, "disagree"},
      {"all-reduce: plain vs registered sendbuff",
       {{K_AR, 1024, I32, symmSum, 0, CW_STAGED, 0, 0}, {K_AR, 1024, I32, symmSum, 0, CW_REGISTERED, 0, 0}}, "disagree"},
      {"all-reduce: symmetric sendbuff at offset 0 vs 256",
       {{K_AR, 1024, I32, symmSum, 0, CW_SYMMETRIC, 0, 0}, {K_AR, 1024, I32, symmSum, 0, CW_SYMMETRIC, 256, 0}},
       "disagree"},
      {"all-reduce float32: symmetric send+recv (push) vs symmetric send, plain recv",
       {{K_AR, 1024, F32, symmSum, 0, CW_SYMMETRIC, 0, 1}, {K_AR, 1024, F32, symmSum, 0, CW_SYMMETRIC, 0, 0}},
       "disagree"},
  };
  const struct scase *cases = g_token ? token_cases : count_cases;
  size_t n = g_token ? sizeof token_cases / sizeof token_cases[0] : sizeof count_cases / sizeof count_cases[0];
  /* The push case differs in kernel only where push is on and two-shot forced. */
  const char *algo = getenv("SYMM_ALGO");
  const int push = algo && strstr(algo, "push") && strstr(algo, "twoshot");
  if (g_token && !push) n--;
  for (size_t i = 0; i < n; i++) run_case(w, &cases[i]);
  if (w->lead)
    tw_log(w, "summary: %d %s-mismatch cases, %d failed", g_cases, g_token ? "token" : "SYMM_CHECK", g_failed);
}

static int option(const char *arg, void *ctx) {
  (void)ctx;
  if (strcmp(arg, "count") == 0 || strcmp(arg, "token") == 0) return 0;
  return -1;
}

int main(int argc, char **argv) {
  const char *what = NULL;
  for (int i = 2; i < argc; i++)
    if (option(argv[i], NULL) == 0) what = argv[i];
  REQUIRE(what != NULL, "usage: coll_mismatch <mp|all> [--nranks=N] <count|token>");
  g_token = strcmp(what, "token") == 0;
  /* The library reads SYMM_CHECK once, at first use (in mp: in the rank
   * processes, after this). */
  const char *want = g_token ? "0" : "1";
  const char *have = getenv("SYMM_CHECK");
  if (!have || strcmp(have, want) != 0) {
    printf("coll_mismatch %s: setting SYMM_CHECK=%s (was %s)\n", what, want, have ? have : "unset");
    setenv("SYMM_CHECK", want, 1);
  }
  if (g_token) setenv("SYMM_ALGO", "oneshot", 0);
  setenv("SYMM_TIMEOUT", "20", 0);
  static struct tw_spec spec = {.modes = "mp,all", .usage = "<count|token>", .limit_s = 270, .option = option,
      .process_init = cw_process_init, .body = body};
  spec.name = g_token ? "coll_token_mismatch" : "coll_check_mismatch";
  return tw_main(&spec, argc, argv);
}
