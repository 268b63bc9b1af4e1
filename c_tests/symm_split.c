/*
 * symm_split (GPU, n ranks): symmCommSplit and symmCommShrink make working
 * communicators out of a parent's ranks.
 *
 *   symm_split mp|all [--nranks=N]
 *
 *  1. Bad input on one rank fails every rank, and leaves the parent usable:
 *     the last rank passes color -5 (symmInvalidArgument there,
 *     symmRemoteError elsewhere); the ranks of one color pass different
 *     configs (symmInvalidUsage everywhere). No *newcomm is written.
 *  2. A grid: with 4 or 8 ranks, rows (color rank / cols, key rank % cols)
 *     and columns (color rank % cols, keys reversed); with 2 or 3 ranks,
 *     one color with reversed keys, and one color per rank (one-rank
 *     children). A config asks the row children for 8 MiB of scratch.
 *  3. NOCOLOR: rank 0 takes no color (gets NULL); the others form one child
 *     ordered by key = -rank.
 *  4. The parent is destroyed before its children; then every child runs an
 *     all-reduce (staged, and from a symmetric buffer of the child), an
 *     all-gather and a broadcast from its last rank, each checked against
 *     what the member ranks contributed.
 *  5. Shrink: the last rank is excluded (it never calls); the others form a
 *     child in parent order, checked as in 4 (made before the parent goes).
 *
 * Inside "all" mode (one thread drives every rank) the calls are wrapped in
 * symmGroupStart/End, and *newcomm is written at symmGroupEnd.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_world.h"

#define MAX_CHILDREN 8
#define SENTINEL ((symmComm_t)(uintptr_t)0xdeadbee0)

/* One child communicator as one local rank holds it. */
struct child {
  const char *what;
  symmComm_t comm;
  int n, rank;
  int members[TW_MAX_RANKS]; /* parent ranks, in child rank order */
};

struct ctx {
  struct child kids[TW_MAX_RANKS][MAX_CHILDREN];
  int nkids;
};

typedef int (*pick_fn)(int rank, int nranks);

/* Rank p's contribution, element i (exact in float32). */
static float value(int p, size_t i) { return (float)((p + 1) * 16 + (int)(i % 13)); }

/* The expected members of `rank`'s child for colors/keys given by the
 * functions (NOCOLOR: n = 0). */
static void expect_members(struct child *k, int rank, int nranks, pick_fn color, pick_fn key) {
  k->n = 0;
  k->rank = -1;
  int c = color(rank, nranks);
  if (c == SYMM_SPLIT_NOCOLOR) return;
  for (int p = 0; p < nranks; p++)
    if (color(p, nranks) == c) k->members[k->n++] = p;
  /* by key, then parent rank (insertion sort: stable) */
  for (int a = 1; a < k->n; a++)
    for (int b = a; b > 0; b--) {
      int x = k->members[b - 1], y = k->members[b];
      if (key(x, nranks) > key(y, nranks)) {
        k->members[b - 1] = y;
        k->members[b] = x;
      }
    }
  for (int q = 0; q < k->n; q++)
    if (k->members[q] == rank) k->rank = q;
}

/* symmCommSplit on every local rank (grouped in all mode); the result is
 * the first failure. */
static symmResult_t split_all(struct tw *tw, pick_fn color, pick_fn key, const symmConfig_t *const *cfg,
                              symmComm_t *out) {
  const int grouped = tw->mode != TW_MP;
  symmResult_t first = grouped ? symmGroupStart() : symmSuccess;
  for (int i = 0; i < tw->nlocal; i++) {
    int r = tw->r[i].rank;
    out[i] = SENTINEL;
    symmResult_t rc = symmCommSplit(tw->r[i].comm, color(r, tw->nranks), key(r, tw->nranks), cfg ? cfg[i] : NULL,
                                    &out[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = grouped ? symmGroupEnd() : symmSuccess;
  return first != symmSuccess ? first : end;
}

static void make_children(struct tw *tw, struct ctx *cx, const char *what, pick_fn color, pick_fn key,
                          const symmConfig_t *const *cfg) {
  tw_phase("split: %s", what);
  symmComm_t out[TW_MAX_RANKS];
  symmResult_t rc = split_all(tw, color, key, cfg, out);
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    TW_REQUIRE(r, rc == symmSuccess, "%s: symmCommSplit: %s (%s)", what, tu_result_name(rc),
               symmGetLastError(r->comm));
    struct child *k = &cx->kids[i][cx->nkids];
    k->what = what;
    expect_members(k, r->rank, tw->nranks, color, key);
    k->comm = out[i];
    if (k->n == 0) {
      TW_CHECK(r, out[i] == NULL, "%s: a NOCOLOR rank got %p, not NULL", what, (void *)out[i]);
      continue;
    }
    TW_REQUIRE(r, out[i] != NULL && out[i] != SENTINEL, "%s: no child", what);
    int n = -1, cr = -1, dev = -1;
    TW_SYMM(r, symmCommCount(k->comm, &n));
    TW_SYMM(r, symmCommUserRank(k->comm, &cr));
    TW_SYMM(r, symmCommCuDevice(k->comm, &dev));
    TW_CHECK(r, n == k->n && cr == k->rank && dev == r->device, "%s: child has %d ranks, rank %d, device %d; expected %d, %d, %d",
             what, n, cr, dev, k->n, k->rank, r->device);
  }
  cx->nkids++;
}

/* Wait for r's stream, watching the child's asynchronous errors. */
static void wait_child(const struct tw_rank *r, symmComm_t comm, const char *what) {
  struct tw_rank as_child = *r;
  as_child.comm = comm;
  tw_stream_wait(&as_child, 120, what);
}

static CUdeviceptr upload(const struct tw_rank *r, const float *host, size_t count) {
  CUdeviceptr d = 0;
  tw_use(r);
  TW_CU(tu_cu.cuMemAlloc(&d, count * sizeof(float)));
  TW_CU(tu_upload(d, host, count * sizeof(float)));
  return d;
}

static void check(const struct tw_rank *r, const struct child *k, CUdeviceptr d, size_t count,
                  float (*want)(const struct child *, size_t), const char *coll) {
  float *h = malloc(count * sizeof(float));
  TW_REQUIRE(r, h != NULL, "malloc");
  tw_use(r);
  TW_CU(tu_cu.cuMemcpyDtoH(h, d, count * sizeof(float)));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < count; i++)
    if (h[i] != want(k, i) && bad++ == 0) first = i;
  TW_CHECK(r, bad == 0, "%s child (rank %d of %d): %s: %zu wrong of %zu, first [%zu] = %g, want %g", k->what, k->rank,
           k->n, coll, bad, count, first, bad ? h[first] : 0.0, bad ? want(k, first) : 0.0);
  free(h);
}

static size_t g_count; /* elements per rank of the current check */

static float want_sum(const struct child *k, size_t i) {
  float s = 0;
  for (int q = 0; q < k->n; q++) s += value(k->members[q], i);
  return s;
}
static float want_gather(const struct child *k, size_t i) { return value(k->members[i / g_count], i % g_count); }
static float want_bcast(const struct child *k, size_t i) { return value(k->members[k->n - 1], i); }

/* Collectives on child slot `slot` of every local rank, checked. */
static void run_child(struct tw *tw, struct ctx *cx, int slot, size_t count) {
  g_count = count;
  const int grouped = tw->mode != TW_MP;
  CUdeviceptr in[TW_MAX_RANKS] = {0}, out[TW_MAX_RANKS] = {0};
  void *sym[TW_MAX_RANKS] = {0};
  float *host = malloc(count * sizeof(float));
  TW_REQUIRE(NULL, host != NULL, "malloc");
  tw_phase("child %s: all-reduce (staged)", cx->kids[0][slot].what);
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    struct child *k = &cx->kids[i][slot];
    if (!k->n) continue;
    for (size_t e = 0; e < count; e++) host[e] = value(r->rank, e);
    in[i] = upload(r, host, count);
    TW_CU(tu_cu.cuMemAlloc(&out[i], count * sizeof(float) * (size_t)k->n));
  }
  /* Enqueue on every local rank before waiting on any (one thread may drive all). */
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (k->n)
      TW_SYMM(&tw->r[i], symmAllReduce((void *)(uintptr_t)in[i], (void *)(uintptr_t)out[i], count, symmFloat32,
                                       symmSum, k->comm, tw->r[i].stream));
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (!k->n) continue;
    wait_child(&tw->r[i], k->comm, "child all-reduce");
    check(&tw->r[i], k, out[i], count, want_sum, "all-reduce");
  }
  tw_phase("child %s: all-gather, broadcast", cx->kids[0][slot].what);
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (k->n)
      TW_SYMM(&tw->r[i], symmAllGather((void *)(uintptr_t)in[i], (void *)(uintptr_t)out[i], count, symmFloat32,
                                       k->comm, tw->r[i].stream));
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (!k->n) continue;
    wait_child(&tw->r[i], k->comm, "child all-gather");
    check(&tw->r[i], k, out[i], count * (size_t)k->n, want_gather, "all-gather");
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (k->n)
      TW_SYMM(&tw->r[i], symmBroadcast((void *)(uintptr_t)in[i], (void *)(uintptr_t)out[i], count, symmFloat32,
                                       k->n - 1, k->comm, tw->r[i].stream));
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (!k->n) continue;
    wait_child(&tw->r[i], k->comm, "child broadcast");
    check(&tw->r[i], k, out[i], count, want_bcast, "broadcast");
  }
  /* The child's own symmetric memory: an input peers read in place. */
  tw_phase("child %s: symmetric all-reduce", cx->kids[0][slot].what);
  symmResult_t rc = grouped ? symmGroupStart() : symmSuccess;
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (k->n && rc == symmSuccess) rc = symmMemAlloc(k->comm, count * sizeof(float), &sym[i]);
  }
  if (grouped) {
    symmResult_t end = symmGroupEnd();
    if (rc == symmSuccess) rc = end;
  }
  TW_REQUIRE(NULL, rc == symmSuccess, "symmMemAlloc on the %s children: %s", cx->kids[0][slot].what, tu_result_name(rc));
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (!k->n) continue;
    tw_use(&tw->r[i]);
    for (size_t e = 0; e < count; e++) host[e] = value(tw->r[i].rank, e);
    TW_CU(tu_upload((CUdeviceptr)(uintptr_t)sym[i], host, count * sizeof(float)));
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (k->n)
      TW_SYMM(&tw->r[i], symmAllReduce(sym[i], (void *)(uintptr_t)out[i], count, symmFloat32, symmSum, k->comm,
                                       tw->r[i].stream));
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (!k->n) continue;
    wait_child(&tw->r[i], k->comm, "child symmetric all-reduce");
    check(&tw->r[i], k, out[i], count, want_sum, "symmetric all-reduce");
  }
  rc = grouped ? symmGroupStart() : symmSuccess;
  for (int i = 0; i < tw->nlocal; i++) {
    struct child *k = &cx->kids[i][slot];
    if (k->n && rc == symmSuccess) rc = symmMemFree(k->comm, sym[i]);
  }
  if (grouped) {
    symmResult_t end = symmGroupEnd();
    if (rc == symmSuccess) rc = end;
  }
  TW_CHECK(NULL, rc == symmSuccess, "symmMemFree on the %s children: %s", cx->kids[0][slot].what, tu_result_name(rc));
  for (int i = 0; i < tw->nlocal; i++) {
    if (!in[i]) continue;
    tw_use(&tw->r[i]);
    TW_CU(tu_cu.cuMemFree(in[i]));
    TW_CU(tu_cu.cuMemFree(out[i]));
  }
  free(host);
}

/* ---- colorings ---------------------------------------------------------------- */

static int cols_of(int n) { return n / 2; }
static int grid(int n) { return n == 4 || n == 8; }
static int row_color(int r, int n) { return grid(n) ? r / cols_of(n) : 7; }
static int row_key(int r, int n) { return grid(n) ? r % cols_of(n) : n - r; }
static int col_color(int r, int n) { return grid(n) ? r % cols_of(n) : 100 + r; }
static int col_key(int r, int n) { return grid(n) ? n - r : 0; }
static int nocolor_color(int r, int n) { (void)n; return r == 0 ? SYMM_SPLIT_NOCOLOR : 5; }
static int neg_key(int r, int n) { (void)n; return -r; }
static int bad_color(int r, int n) { return r == n - 1 ? -5 : 0; }
static int zero(int r, int n) { (void)r; (void)n; return 0; }

/* ---- the body ------------------------------------------------------------------ */

static void expect_all_failed(struct tw *tw, symmResult_t rc, const symmComm_t *out, const char *what,
                              symmResult_t mine, symmResult_t others, int culprit, const char *keyword) {
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    TW_CHECK(r, out[i] == SENTINEL, "%s: *newcomm was written (%p)", what, (void *)out[i]);
    TW_CHECK(r, m && tu_contains_ci(m, "symmCommSplit") && tu_contains_ci(m, keyword),
             "%s: message \"%s\" should name symmCommSplit and mention \"%s\"", what, m ? m : "(NULL)", keyword);
    if (tw->mode == TW_MP) {
      symmResult_t want = r->rank == culprit ? mine : others;
      TW_CHECK(r, rc == want, "%s: symmCommSplit returned %s, expected %s", what, tu_result_name(rc),
               tu_result_name(want));
    }
  }
  if (tw->mode != TW_MP) {
    /* symmGroupEnd returns the first failure in call order: the first local rank's. */
    const symmResult_t want = tw->r[0].rank == culprit ? mine : others;
    TW_CHECK(NULL, rc == want, "%s: symmGroupEnd returned %s, expected %s (rank %d's)", what, tu_result_name(rc),
             tu_result_name(want), tw->r[0].rank);
  }
}

static void body(struct tw *tw, void *vctx) {
  struct ctx *cx = vctx;
  memset(cx, 0, sizeof *cx);
  const int n = tw->nranks;
  const size_t count = tw->shared ? 65537 : 300001; /* above the LL size: the synced kernels */
  TW_REQUIRE(NULL, tw_init_comms(tw) == symmSuccess, "init failed");

  /* 1. Bad input anywhere fails everywhere; the parent stays usable. */
  symmComm_t out[TW_MAX_RANKS];
  tw_phase("split: a negative color on rank %d", n - 1);
  symmResult_t rc = split_all(tw, bad_color, zero, NULL, out);
  expect_all_failed(tw, rc, out, "bad color", symmInvalidArgument, symmRemoteError, n - 1, "color -5");

  symmConfig_t cfg_a[TW_MAX_RANKS], cfg_b[TW_MAX_RANKS];
  const symmConfig_t *cfgs[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) {
    TW_REQUIRE(&tw->r[i], symmConfigInit(&cfg_a[i], sizeof cfg_a[i]) == symmSuccess, "symmConfigInit");
    cfg_b[i] = cfg_a[i];
    cfg_a[i].scratchBytes = 8 << 20;
    cfg_b[i].scratchBytes = 16 << 20;
    cfgs[i] = tw->r[i].rank == 0 ? &cfg_b[i] : &cfg_a[i];
  }
  tw_phase("split: rank 0 asks for another config");
  rc = split_all(tw, zero, zero, cfgs, out);
  expect_all_failed(tw, rc, out, "config mismatch", symmInvalidUsage, symmInvalidUsage, 0, "different child settings");

  /* 2, 3. The grid (rows with a config), and NOCOLOR. */
  for (int i = 0; i < tw->nlocal; i++) cfgs[i] = &cfg_a[i];
  make_children(tw, cx, "row", row_color, row_key, cfgs);
  make_children(tw, cx, "column", col_color, col_key, NULL);
  make_children(tw, cx, "nocolor", nocolor_color, neg_key, NULL);

  /* 5. Shrink: the last rank does not take part. */
  tw_phase("shrink: without rank %d", n - 1);
  const int excl[1] = {n - 1};
  const int grouped = tw->mode != TW_MP;
  rc = grouped ? symmGroupStart() : symmSuccess;
  int shrunk = cx->nkids++;
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    struct child *k = &cx->kids[i][shrunk];
    k->what = "shrink";
    k->n = 0;
    if (r->rank == n - 1) continue;
    k->n = n - 1;
    k->rank = r->rank;
    for (int p = 0; p < n - 1; p++) k->members[p] = p;
    k->comm = SENTINEL;
    symmResult_t x = symmCommShrink(r->comm, excl, 1, NULL, SYMM_SHRINK_DEFAULT, &k->comm);
    if (x != symmSuccess && rc == symmSuccess) rc = x;
  }
  if (grouped) {
    symmResult_t end = symmGroupEnd();
    if (rc == symmSuccess) rc = end;
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    struct child *k = &cx->kids[i][shrunk];
    if (!k->n) continue;
    TW_REQUIRE(r, rc == symmSuccess && k->comm && k->comm != SENTINEL, "symmCommShrink: %s (%s)", tu_result_name(rc),
               symmGetLastError(r->comm));
    int cn = -1, cr = -1;
    TW_SYMM(r, symmCommCount(k->comm, &cn));
    TW_SYMM(r, symmCommUserRank(k->comm, &cr));
    TW_CHECK(r, cn == n - 1 && cr == r->rank, "shrink child: %d ranks, rank %d", cn, cr);
  }
  /* Everyone has its children: the parent may go (also in mp, where the
   * others may still be setting up theirs: they no longer need it). */
  tw_host_barrier(tw, "children made");
  tw_destroy_comms(tw);

  /* 4. Every child works on its own. */
  for (int slot = 0; slot < cx->nkids; slot++) {
    run_child(tw, cx, slot, count);
    tw_host_barrier(tw, "child checked");
  }
  tw_phase("destroy the children");
  for (int slot = 0; slot < cx->nkids; slot++)
    for (int i = 0; i < tw->nlocal; i++) {
      struct child *k = &cx->kids[i][slot];
      if (k->n) TW_CHECK(&tw->r[i], symmCommDestroy(k->comm) == symmSuccess, "destroy %s child", k->what);
    }
  tw_log(tw, "splits (grid, nocolor, one-rank, bad input) and a shrink checked on %d ranks", n);
}

int main(int argc, char **argv) {
  static struct ctx cx;
  static const struct tw_spec spec = {
      .name = "symm_split", .modes = "mp,all", .limit_s = 300, .body = body, .ctx = &cx};
  return tw_main(&spec, argc, argv);
}
