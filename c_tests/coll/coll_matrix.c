/*
 * coll_matrix <mp|all> [--nranks=N] [--tiers=SMLQP] [--colls=a,b,...] [--reps=N]
 *
 * Correctness matrix of the collectives over n ranks: every collective x
 * element type x reduction op x root x count x in/out of place x buffer
 * class x alignment, each case run twice in a row (--reps) with fresh random
 * inputs, checked element by element on the host against a host model of
 * the library's rules (coll_util.c: cw_reduce).
 *
 * Collectives: allreduce, allgather, reducescatter, broadcast, reduce,
 * alltoall (block q of every rank goes to rank q), sendrecv (a ring in one
 * group: send to rank + 1, receive from rank - 1), sendrecv_pair (pairwise
 * exchange 0<->1, 2<->3, ...; even n > 2 only: with 2 ranks it is the ring)
 * self_sendrecv (a rank sends to itself in one group) and sendrecv_gather
 * (many to one: every rank sends to rank 0, which receives block r of its
 * output from rank r, itself included). Inside a group
 * even ranks post the send first and odd ranks the receive: the order must
 * not matter. Roots: 0, n/2 and n-1 (0 and 1 with two ranks).
 *
 * Tiers (the full product is too large for the big counts, so they get a
 * representative subset -- printed at start):
 *   tier S  counts 0, 1, 7, 1023, 65539: the full product. Every dtype, every
 *           op (sum, prod, max, min, avg), every root, every buffer class
 *           (staged = cuMemAlloc, registered = cuMemAlloc +
 *           symmCommRegister, symmetric = symmMemAlloc); out of place with
 *           send+recv 256-byte aligned, both offset by one element, or only
 *           sendbuff offset (mixed alignment); in place aligned and offset.
 *   tier Q  (quick: CTest's shared-device runs) counts 0, 7, 65539;
 *           fp8e4m3, bf16, int32 and float64 (1, 2, 4, 8 bytes); ops sum
 *           and avg (n-dependent); six placements (out of place: staged aligned,
 *           registered offset, symmetric aligned, symmetric send-offset; in
 *           place: symmetric aligned, staged offset), the root turning with
 *           the placement. 65539 elements straddle the LL limit (1 MiB at
 *           2 ranks, 512 KiB at 4, 512 KiB / (n - 1) otherwise) and the two-shot threshold (256 KiB) depending on n
 *           and the element size.
 *   tier M  count 4 Mi (4194304): every collective and dtype; ops sum and
 *           max; every root; three variants: staged in place (out of place
 *           for send/recv) offset by one element, registered out of
 *           place with only sendbuff offset, symmetric out of place aligned.
 *           Send/recv also 4 Mi + 4099 (a short last 2 MiB chunk), staged
 *           offset and symmetric aligned.
 *   tier L  count 256 Mi (268435456): allreduce and reducescatter with
 *           bf16 sum, fp32 sum and int32 max, allgather of bf16, fp32 and
 *           int32; symmetric out of place aligned and staged in place offset
 *           by one element. Plus allgather of float64 (n x 2 GiB receive
 *           buffer: byte offsets past 2^32), symmetric and staged, out of
 *           place. The sendbuff-unchanged check is skipped in tier L.
 *   tier P  (pipelines: the SYMM_ALGO runs of push, pipe, write and p2p)
 *           count 1 Mi + 7: allreduce, reducescatter and allgather of bf16
 *           and float32, sum,
 *           five placements (out of place: staged aligned, registered
 *           offset, symmetric aligned; in place: staged offset, symmetric
 *           aligned) -- with a 1 MiB scratch that is 32+ chunks through 4
 *           slots; send/recv (ring, pairs, self) of int32, also 3 Mi + 21,
 *           staged offset and symmetric aligned (the sized kernel's ring
 *           wraps; symmetric receive buffers take the direct push).
 *   Tier L is dropped (and says so) when a GPU has too little free memory
 *   (counting every rank that shares it).
 *
 * Bit-identity: after every all-reduce case the ranks exchange a hash of
 * their whole output; all must be equal (every rank computes the same
 * bits, whichever rank reduced which element), else the case fails on the
 * ranks that differ from rank 0.
 * SYMM_TEST_TIERS=<letters> overrides --tiers (e.g. SYMM_TEST_TIERS=SML
 * for a full run of a registered test); the default is SML.
 *
 * Every run: the receive window (plus the bytes before an offset buffer and
 * 256 guard bytes after it) is poisoned with 0xA5 (0x5A on the second rep),
 * the send window with 0xC3/0x3C; after the collective every output element
 * must match the reference (integers exactly, floats bit-identical or
 * within a dtype tolerance: differences within tolerance are counted as
 * "inexact" and fail only with COLL_EXACT=1), every non-output byte of the
 * window (guards, the non-root's reduce output, the other blocks of an in
 * place reduce-scatter) must be unchanged, and the send window must be
 * unchanged (out of place). symmCommGetAsyncError must stay symmSuccess.
 * A failure names the case (collective, dtype, op, root, count, placement,
 * class, rep), the rank, the first bad element and the seed.
 *
 * Inputs: fresh random values every run from a seed printed at start
 * (COLL_SEED=<seed> reproduces a run); rank r's element j is
 * cw_gen(dtype, case seed, r, j), so every rank can compute the reference
 * for every other rank's input without communication. Integers are any bit
 * pattern (sums and products wrap, and the reference wraps the same way);
 * fp8/fp16 are any finite pattern (so sums saturate / overflow to inf and
 * the rounding and saturation rules are exercised); bf16/fp32/fp64 are
 * normal numbers of moderate magnitude.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_util.h"

#ifndef COLL_KERNELS_FATBIN
#error "COLL_KERNELS_FATBIN must be defined by the build"
#endif

enum { C_AR, C_AG, C_RS, C_BC, C_RD, C_A2A, C_SR, C_PAIR, C_SELF, C_GATHER, NCOLL };
static const char *const coll_name[NCOLL] = {"allreduce", "allgather",     "reducescatter",
                                             "broadcast", "reduce",        "alltoall",
                                             "sendrecv",  "sendrecv_pair", "self_sendrecv",
                                             "sendrecv_gather"};
static int is_reduction(int c) { return c == C_AR || c == C_RS || c == C_RD; }
static int has_root(int c) { return c == C_BC || c == C_RD; }
static int is_p2p(int c) { return c == C_SR || c == C_PAIR || c == C_SELF || c == C_GATHER; }
static int has_in_place(int c) { return !is_p2p(c); }

enum { AL_ALIGNED = 0, AL_BOTH = 1, AL_SEND = 2 };
static const char *const align_name[3] = {"aligned", "offset+1elem", "send-offset+1elem"};

#define GUARD 256
enum { T_S, T_M, T_L, T_Q, T_P, NTIERS };
static const char tier_char[NTIERS] = {'S', 'M', 'L', 'Q', 'P'};

struct mcase {
  unsigned char coll, dt, op, root, inplace, cls, align, tier;
  size_t count;
};

struct opts {
  int tiers[NTIERS];
  int colls[NCOLL];
  int reps;
  int exact;
};

/* ---- the plan ---------------------------------------------------------------- */

static size_t add(struct mcase *out, size_t n, struct mcase c) {
  if (out) out[n] = c;
  return n + 1;
}

/* The roots every rooted case runs with: 0, n/2 and n-1 (distinct). */
static int root_set(int nranks, int *roots) {
  int k = 0;
  const int cand[3] = {0, nranks / 2, nranks - 1};
  for (int i = 0; i < 3; i++) {
    int dup = 0;
    for (int j = 0; j < k; j++) dup |= roots[j] == cand[i];
    if (!dup) roots[k++] = cand[i];
  }
  return k;
}

static struct mcase mk(int coll, int dt, int op, int root, int ip, int cls, int al, int tier, size_t count) {
  struct mcase c = {(unsigned char)coll, (unsigned char)dt,  (unsigned char)op,   (unsigned char)root,
                    (unsigned char)ip,   (unsigned char)cls, (unsigned char)al, (unsigned char)tier, count};
  return c;
}

/* Whether collective `coll` runs at all with `nranks` ranks. */
static int coll_runs(int coll, int nranks) { return coll != C_PAIR || (nranks > 2 && nranks % 2 == 0); }

static size_t plan_tier_s(struct mcase *out, size_t n, int coll, int dt, const int *roots, int nroots) {
  static const size_t counts[] = {0, 1, 7, 1023, 65539};
  for (int op = 0; op < (is_reduction(coll) ? CW_NOPS : 1); op++)
    for (int ri = 0; ri < (has_root(coll) ? nroots : 1); ri++)
      for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
        for (int ip = 0; ip < (has_in_place(coll) ? 2 : 1); ip++)
          for (int cls = 0; cls < CW_NCLASSES; cls++)
            for (int al = 0; al < (ip ? 2 : 3); al++) n = add(out, n, mk(coll, dt, op, roots[ri], ip, cls, al, T_S, counts[ci]));
  return n;
}

static size_t plan_tier_q(struct mcase *out, size_t n, int coll, int dt, const int *roots, int nroots) {
  static const size_t counts[] = {0, 7, 65539};
  static const int ops[] = {symmSum, symmAvg};
  /* {in place, class, alignment}: four out of place, then two in place. */
  static const int place[6][3] = {{0, CW_STAGED, AL_ALIGNED},    {0, CW_REGISTERED, AL_BOTH},
                                  {0, CW_SYMMETRIC, AL_ALIGNED}, {0, CW_SYMMETRIC, AL_SEND},
                                  {1, CW_SYMMETRIC, AL_ALIGNED}, {1, CW_STAGED, AL_BOTH}};
  if (dt != symmFloat8e4m3 && dt != symmBfloat16 && dt != symmInt32 && dt != symmFloat64) return n;
  for (int oi = 0; oi < (is_reduction(coll) ? 2 : 1); oi++)
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
      for (int v = 0; v < (has_in_place(coll) ? 6 : 4); v++)
        n = add(out, n,
                mk(coll, dt, ops[oi], has_root(coll) ? roots[v % nroots] : 0, place[v][0], place[v][1], place[v][2],
                   T_Q, counts[ci]));
  return n;
}

static size_t plan_tier_m(struct mcase *out, size_t n, int coll, int dt, const int *roots, int nroots) {
  static const int ops[] = {symmSum, symmMax};
  const size_t count = (size_t)4 << 20;
  for (int oi = 0; oi < (is_reduction(coll) ? 2 : 1); oi++)
    for (int ri = 0; ri < (has_root(coll) ? nroots : 1); ri++) {
      const int root = roots[ri];
      n = add(out, n, mk(coll, dt, ops[oi], root, has_in_place(coll), CW_STAGED, AL_BOTH, T_M, count));
      n = add(out, n, mk(coll, dt, ops[oi], root, 0, CW_REGISTERED, AL_SEND, T_M, count));
      n = add(out, n, mk(coll, dt, ops[oi], root, 0, CW_SYMMETRIC, AL_ALIGNED, T_M, count));
      /* 3 Mi elements: for the all-reduce by reduce-scatter + all-gather
       * (SYMM_ALGO=rsag), equal blocks of whole 16-byte vectors with no
       * tail at 3 ranks too (4 Mi leaves a tail of 16 elements there). */
      if (coll == C_AR) {
        n = add(out, n, mk(coll, dt, ops[oi], root, 1, CW_STAGED, AL_BOTH, T_M, (size_t)3 << 20));
        n = add(out, n, mk(coll, dt, ops[oi], root, 0, CW_SYMMETRIC, AL_ALIGNED, T_M, (size_t)3 << 20));
      }
      /* Point-to-point moves 2 MiB chunks through two slots; 4 Mi
       * elements is a whole number of chunks for every size, so also a
       * count whose last chunk is short (the slot's split between the
       * copying blocks differs for it). */
      if (is_p2p(coll)) {
        n = add(out, n, mk(coll, dt, ops[oi], root, 0, CW_STAGED, AL_BOTH, T_M, count + 4099));
        n = add(out, n, mk(coll, dt, ops[oi], root, 0, CW_SYMMETRIC, AL_ALIGNED, T_M, count + 4099));
      }
    }
  return n;
}

static size_t plan_tier_l(struct mcase *out, size_t n, int coll, int dt) {
  const size_t count = (size_t)256 << 20;
  int op = -1;
  if (coll == C_AR || coll == C_RS || coll == C_AG) {
    if (dt == symmBfloat16 || dt == symmFloat32) op = symmSum;
    if (dt == symmInt32) op = symmMax;
  }
  if (op >= 0) {
    n = add(out, n, mk(coll, dt, op, 0, 0, CW_SYMMETRIC, AL_ALIGNED, T_L, count));
    n = add(out, n, mk(coll, dt, op, 0, 1, CW_STAGED, AL_BOTH, T_L, count));
  }
  if (coll == C_AG && dt == symmFloat64) {
    n = add(out, n, mk(coll, dt, 0, 0, 0, CW_SYMMETRIC, AL_ALIGNED, T_L, count));
    n = add(out, n, mk(coll, dt, 0, 0, 0, CW_STAGED, AL_ALIGNED, T_L, count));
  }
  return n;
}

static size_t plan_tier_p(struct mcase *out, size_t n, int coll, int dt) {
  static const int place[5][3] = {{0, CW_STAGED, AL_ALIGNED}, {0, CW_REGISTERED, AL_BOTH}, {0, CW_SYMMETRIC, AL_ALIGNED},
                                  {1, CW_STAGED, AL_BOTH},    {1, CW_SYMMETRIC, AL_ALIGNED}};
  const size_t count = ((size_t)1 << 20) + 7;
  if ((coll == C_AR || coll == C_RS || coll == C_AG) && (dt == symmBfloat16 || dt == symmFloat32))
    for (int v = 0; v < 5; v++) n = add(out, n, mk(coll, dt, symmSum, 0, place[v][0], place[v][1], place[v][2], T_P, count));
  if (is_p2p(coll) && dt == symmInt32)
    for (int c = 0; c < 2; c++) {
      const size_t cnt = c ? 3 * count : count;
      n = add(out, n, mk(coll, dt, 0, 0, 0, CW_STAGED, AL_BOTH, T_P, cnt));
      n = add(out, n, mk(coll, dt, 0, 0, 0, CW_SYMMETRIC, AL_ALIGNED, T_P, cnt));
    }
  return n;
}

/* Every case, tier by tier (S, Q, M, L, P). */
static size_t build_plan(struct mcase *out, const struct opts *o, int nranks) {
  static const int order[NTIERS] = {T_S, T_Q, T_M, T_L, T_P};
  int roots[3];
  const int nroots = root_set(nranks, roots);
  size_t n = 0;
  for (int ti = 0; ti < NTIERS; ti++) {
    const int t = order[ti];
    if (!o->tiers[t]) continue;
    for (int coll = 0; coll < NCOLL; coll++) {
      if (!o->colls[coll] || !coll_runs(coll, nranks)) continue;
      for (int dt = 0; dt < CW_NDTYPES; dt++) {
        if (t == T_S) n = plan_tier_s(out, n, coll, dt, roots, nroots);
        if (t == T_Q) n = plan_tier_q(out, n, coll, dt, roots, nroots);
        if (t == T_M) n = plan_tier_m(out, n, coll, dt, roots, nroots);
        if (t == T_L) n = plan_tier_l(out, n, coll, dt);
        if (t == T_P) n = plan_tier_p(out, n, coll, dt);
      }
    }
  }
  return n;
}

/* ---- per-rank geometry of a case ------------------------------------------- */

struct geom {
  size_t es, c, send_elems, recv_elems;
  /* Receive window: [R, R + r_off + r_elems * es + GUARD). Element i of the
   * window is output when in [out_lo, out_hi), own input j = i - in_lo when
   * in [in_lo, in_hi) (in place), poison otherwise. */
  size_t r_off, r_elems, out_lo, out_hi, in_lo, in_hi;
  /* Send window (out of place only): [S, S + s_off + send_elems * es + GUARD). */
  size_t s_off;
  /* Where the rank's own input goes (bytes from R in place, from S out of
   * place) and the pointers passed to the library (byte offsets). */
  size_t in_dst, send_at, recv_at;
  int check_send; /* out of place and not tier L */
};

static struct geom geometry(const struct mcase *k, int rank, int n) {
  struct geom g;
  memset(&g, 0, sizeof g);
  g.es = (size_t)cw_dt[k->dt].size;
  g.c = k->count;
  const size_t c = g.c, es = g.es;
  g.send_elems = (k->coll == C_RS || k->coll == C_A2A) ? (size_t)n * c : c;
  g.recv_elems = (k->coll == C_AG || k->coll == C_A2A || (k->coll == C_GATHER && rank == 0)) ? (size_t)n * c : c;
  const int writes = !(k->coll == C_RD && k->root != rank) && !(k->coll == C_GATHER && rank != 0);
  if (!k->inplace) {
    g.s_off = (k->align == AL_BOTH || k->align == AL_SEND) ? es : 0;
    g.r_off = k->align == AL_BOTH ? es : 0;
    g.r_elems = g.recv_elems;
    g.out_lo = 0;
    g.out_hi = writes ? g.recv_elems : 0;
    g.in_dst = g.s_off;
    g.send_at = g.s_off;
    g.recv_at = g.r_off;
    g.check_send = k->tier != T_L;
    return g;
  }
  const size_t off = k->align == AL_BOTH ? es : 0;
  g.r_off = off;
  g.send_at = g.recv_at = off;
  switch (k->coll) {
    case C_AG:
      g.r_elems = (size_t)n * c;
      g.in_lo = (size_t)rank * c;
      g.in_hi = g.in_lo + c;
      g.out_lo = 0;
      g.out_hi = g.r_elems;
      g.send_at = off + (size_t)rank * c * es;
      break;
    case C_RS:
      g.r_elems = (size_t)n * c;
      g.in_lo = 0;
      g.in_hi = g.r_elems;
      g.out_lo = (size_t)rank * c;
      g.out_hi = g.out_lo + c;
      g.recv_at = off + (size_t)rank * c * es;
      break;
    case C_A2A:
      g.r_elems = (size_t)n * c;
      g.in_lo = 0;
      g.in_hi = g.r_elems;
      g.out_lo = 0;
      g.out_hi = g.r_elems;
      break;
    default: /* AR, BC, RD */
      g.r_elems = c;
      g.in_lo = 0;
      g.in_hi = c;
      g.out_lo = 0;
      g.out_hi = writes ? c : 0;
      break;
  }
  g.in_dst = off + g.in_lo * es;
  return g;
}

static size_t r_window_bytes(const struct geom *g) { return g->r_off + g->r_elems * g->es + GUARD; }
static size_t s_window_bytes(const struct geom *g) { return g->s_off + g->send_elems * g->es + GUARD; }

/* ---- statistics (in tw->user: the parent prints them) --------------------- */

struct gstat {
  uint32_t runs, checks, failed;
  uint64_t inexact;
  double secs;
};
struct mstats {
  int filled[TW_MAX_RANKS];
  struct gstat g[TW_MAX_RANKS][NCOLL][CW_NDTYPES];
  struct gstat tier[TW_MAX_RANKS][NTIERS];
  int dropped_l;
};

/* ---- the run --------------------------------------------------------------- */

static uint64_t g_seed;
static struct opts g_opts;

struct rank_state {
  struct cw_host in, out_r, out_s;
};

struct check_res {
  size_t bad, unwritten, inexact, first_bad, first_inexact;
};

struct check_ctx {
  const struct mcase *k;
  const struct geom *g;
  int rank, n;
  uint64_t seed, poison;
  const unsigned char *win; /* host copy of the window, at the first element */
  struct check_res res[CW_MAX_THREADS];
};

/* Expected bits of window element i; *kind: 2 output, 1 own input, 0 poison. */
static uint64_t expected_at(const struct check_ctx *x, size_t i, int *kind) {
  const struct mcase *k = x->k;
  const struct geom *g = x->g;
  const int dt = k->dt;
  if (i >= g->out_lo && i < g->out_hi) {
    *kind = 2;
    const size_t kk = i - g->out_lo, c = g->c;
    uint64_t vals[TW_MAX_RANKS];
    switch (k->coll) {
      case C_AR:
      case C_RD:
        for (int r = 0; r < x->n; r++) vals[r] = cw_gen(dt, x->seed, r, kk);
        return cw_reduce(dt, k->op, vals, x->n);
      case C_RS:
        for (int r = 0; r < x->n; r++) vals[r] = cw_gen(dt, x->seed, r, (size_t)x->rank * c + kk);
        return cw_reduce(dt, k->op, vals, x->n);
      case C_AG: return cw_gen(dt, x->seed, (int)(kk / c), kk % c);
      case C_A2A: return cw_gen(dt, x->seed, (int)(kk / c), (size_t)x->rank * c + kk % c);
      case C_BC: return cw_gen(dt, x->seed, k->root, kk);
      case C_SR: return cw_gen(dt, x->seed, (x->rank + x->n - 1) % x->n, kk);
      case C_PAIR: return cw_gen(dt, x->seed, x->rank ^ 1, kk);
      case C_GATHER: return cw_gen(dt, x->seed, (int)(kk / c), kk % c); /* rank 0: block r from rank r */
      default: return cw_gen(dt, x->seed, x->rank, kk);
    }
  }
  if (i >= g->in_lo && i < g->in_hi) {
    *kind = 1;
    return cw_gen(dt, x->seed, x->rank, i - g->in_lo);
  }
  *kind = 0;
  return x->poison;
}

static void check_range(size_t lo, size_t hi, int tid, void *arg) {
  struct check_ctx *x = arg;
  struct check_res *res = &x->res[tid];
  memset(res, 0, sizeof *res);
  res->first_bad = res->first_inexact = (size_t)-1;
  const int dt = x->k->dt, es = cw_dt[dt].size;
  for (size_t i = lo; i < hi; i++) {
    int kind;
    uint64_t exp = expected_at(x, i, &kind);
    uint64_t got = cw_get(x->win, i, es);
    int cmp = kind == 2 ? cw_compare(dt, got, exp) : (got == exp ? 0 : 2);
    if (cmp == 0) continue;
    if (cmp == 1) {
      if (res->inexact++ == 0) res->first_inexact = i;
      continue;
    }
    if (res->bad++ == 0) res->first_bad = i;
    if (kind == 2 && got == x->poison) res->unwritten++;
  }
}

static struct check_res merge(const struct check_ctx *x) {
  struct check_res m = {0, 0, 0, (size_t)-1, (size_t)-1};
  for (int t = 0; t < cw_threads(); t++) {
    const struct check_res *r = &x->res[t];
    m.bad += r->bad;
    m.unwritten += r->unwritten;
    m.inexact += r->inexact;
    if (r->bad && r->first_bad < m.first_bad) m.first_bad = r->first_bad;
    if (r->inexact && r->first_inexact < m.first_inexact) m.first_inexact = r->first_inexact;
  }
  return m;
}

struct fill_ctx {
  int dt, rank, es;
  uint64_t seed;
  unsigned char *dst;
};
static void fill_range(size_t lo, size_t hi, int tid, void *arg) {
  (void)tid;
  struct fill_ctx *f = arg;
  for (size_t j = lo; j < hi; j++) cw_put(f->dst, j, f->es, cw_gen(f->dt, f->seed, f->rank, j));
}

/* The send window must still hold poison around the input and the input itself. */
struct send_ctx {
  int dt, rank, es;
  uint64_t seed;
  const unsigned char *win;
  struct check_res res[CW_MAX_THREADS];
};
static void send_range(size_t lo, size_t hi, int tid, void *arg) {
  struct send_ctx *s = arg;
  struct check_res *res = &s->res[tid];
  memset(res, 0, sizeof *res);
  res->first_bad = (size_t)-1;
  for (size_t j = lo; j < hi; j++)
    if (cw_get(s->win, j, s->es) != cw_gen(s->dt, s->seed, s->rank, j) && res->bad++ == 0) res->first_bad = j;
}

static int g_printed;
#define MAX_PRINTED 40

/* FNV-1a over bytes (the all-reduce bit-identity check). */
static uint64_t bytes_hash(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static void describe(const struct mcase *k, char *buf, size_t len) {
  char opbuf[32] = "", rootbuf[16] = "";
  if (is_reduction(k->coll)) snprintf(opbuf, sizeof opbuf, " %s", cw_op_name[k->op]);
  if (has_root(k->coll)) snprintf(rootbuf, sizeof rootbuf, " root=%d", k->root);
  snprintf(buf, len, "%s %s%s%s count=%zu %s %s %s", coll_name[k->coll], cw_dt[k->dt].name, opbuf, rootbuf,
           k->count, k->inplace ? "in-place" : "out-of-place", cw_class_name[k->cls], align_name[k->align]);
}

static void report_failure(const struct tw_rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_failure(const struct tw_rank *r, const char *fmt, ...) {
  if (g_printed++ >= MAX_PRINTED) {
    if (g_printed == MAX_PRINTED + 1)
      tw_log(NULL, "(more failures: only the first %d are printed; the summary counts all)", MAX_PRINTED);
    tu_failures++;
    return;
  }
  char body[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  tw_fail_at(__FILE__, __LINE__, r, "%s", body);
}

struct world_bufs {
  struct cw_buf R[CW_NCLASSES], S[CW_NCLASSES];
  struct rank_state st[TW_MAX_RANKS];
};

static void enqueue_call(struct tw *w, const struct mcase *k, const struct geom *gs, const struct world_bufs *b,
                         const char *desc) {
  const symmDataType_t dt = (symmDataType_t)k->dt;
  if (is_p2p(k->coll)) {
    symmResult_t rc = symmGroupStart();
    REQUIRE(rc == symmSuccess, "symmGroupStart: %s", tu_result_name(rc));
    for (int i = 0; i < w->nlocal; i++) {
      struct tw_rank *r = &w->r[i];
      const struct geom *g = &gs[i];
      void *sp = (void *)(uintptr_t)(b->S[k->cls].p[i] + g->send_at);
      void *rp = (void *)(uintptr_t)(b->R[k->cls].p[i] + g->recv_at);
      const int n = w->nranks;
      if (k->coll == C_GATHER) {
        /* Many to one: every rank sends to rank 0, which receives block j
         * from rank j (itself included), its receives posted first. */
        const size_t block = k->count * (size_t)cw_dt[k->dt].size;
        if (r->rank == 0)
          for (int j = 0; j < n; j++)
            TW_REQUIRE(r, TW_SYMM(r, symmRecv((char *)rp + (size_t)j * block, k->count, dt, j, r->comm, r->stream)),
                       "%s", desc);
        TW_REQUIRE(r, TW_SYMM(r, symmSend(sp, k->count, dt, 0, r->comm, r->stream)), "%s", desc);
        continue;
      }
      int to = r->rank, from = r->rank; /* C_SELF */
      if (k->coll == C_SR) {
        to = (r->rank + 1) % n;
        from = (r->rank + n - 1) % n;
      } else if (k->coll == C_PAIR) {
        to = from = r->rank ^ 1;
      }
      /* Even ranks post their send first, odd ranks their receive: order
       * inside a group must not matter. */
      if (r->rank % 2 == 0) {
        TW_REQUIRE(r, TW_SYMM(r, symmSend(sp, k->count, dt, to, r->comm, r->stream)), "%s", desc);
        TW_REQUIRE(r, TW_SYMM(r, symmRecv(rp, k->count, dt, from, r->comm, r->stream)), "%s", desc);
      } else {
        TW_REQUIRE(r, TW_SYMM(r, symmRecv(rp, k->count, dt, from, r->comm, r->stream)), "%s", desc);
        TW_REQUIRE(r, TW_SYMM(r, symmSend(sp, k->count, dt, to, r->comm, r->stream)), "%s", desc);
      }
    }
    rc = symmGroupEnd();
    for (int i = 0; i < w->nlocal; i++)
      TW_REQUIRE(&w->r[i], rc == symmSuccess, "symmGroupEnd: %s (%s) [%s]", tu_result_name(rc),
                 symmGetLastError(w->r[i].comm), desc);
    return;
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    const struct geom *g = &gs[i];
    CUdeviceptr base = k->inplace ? b->R[k->cls].p[i] : b->S[k->cls].p[i];
    const void *sp = (const void *)(uintptr_t)(base + g->send_at);
    void *rp = (void *)(uintptr_t)(b->R[k->cls].p[i] + g->recv_at);
    const symmRedOp_t op = (symmRedOp_t)k->op;
    symmResult_t rc;
    switch (k->coll) {
      case C_AR: rc = symmAllReduce(sp, rp, k->count, dt, op, r->comm, r->stream); break;
      case C_AG: rc = symmAllGather(sp, rp, k->count, dt, r->comm, r->stream); break;
      case C_RS: rc = symmReduceScatter(sp, rp, k->count, dt, op, r->comm, r->stream); break;
      case C_BC: rc = symmBroadcast(sp, rp, k->count, dt, k->root, r->comm, r->stream); break;
      case C_RD: rc = symmReduce(sp, rp, k->count, dt, op, k->root, r->comm, r->stream); break;
      default: rc = symmAllToAll(sp, rp, k->count, dt, r->comm, r->stream); break;
    }
    if (rc != symmSuccess) {
      char m[1024];
      const char *msg = tu_last_error(r->comm, m, sizeof m);
      tw_fail_at(__FILE__, __LINE__, r, "%s: the call returned %s: %s", desc, tu_result_name(rc),
                 msg ? msg : "(NULL)");
      tu_exit_now(); /* the other ranks now wait for a collective that will not come */
    }
  }
}

/* One case, one rep, on every local rank. */
static void run_case(struct tw *w, struct world_bufs *b, const struct mcase *k, size_t idx, int rep,
                     struct mstats *ms) {
  const double t0 = tu_now();
  const uint64_t seed = cw_mix64(g_seed ^ cw_mix64(idx * 2 + (uint64_t)rep));
  const unsigned char pr = rep & 1 ? 0x5a : 0xa5, ps = rep & 1 ? 0x3c : 0xc3;
  char desc[256];
  describe(k, desc, sizeof desc);
  char full[320];
  snprintf(full, sizeof full, "%s rep %d", desc, rep);
  tw_phase("case #%zu: %s", idx, full);
  struct geom gs[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    struct geom *g = &gs[i];
    *g = geometry(k, r->rank, w->nranks);
    size_t in_elems = k->inplace ? g->in_hi - g->in_lo : g->send_elems;
    struct fill_ctx f = {k->dt, r->rank, (int)g->es, seed, b->st[i].in.p};
    cw_par_for(in_elems, fill_range, &f);
    tw_use(r);
    TW_CU(cw_cu.cuMemsetD8Async(b->R[k->cls].p[i], pr, r_window_bytes(g), r->stream));
    if (!k->inplace) TW_CU(cw_cu.cuMemsetD8Async(b->S[k->cls].p[i], ps, s_window_bytes(g), r->stream));
    CUdeviceptr dst = (k->inplace ? b->R[k->cls].p[i] : b->S[k->cls].p[i]) + g->in_dst;
    if (in_elems) TW_CU(cw_cu.cuMemcpyHtoDAsync(dst, b->st[i].in.p, in_elems * g->es, r->stream));
  }
  enqueue_call(w, k, gs, b, full);
  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    const struct geom *g = &gs[i];
    tw_use(r);
    TW_CU(cw_cu.cuMemcpyDtoHAsync(b->st[i].out_r.p, b->R[k->cls].p[i], r_window_bytes(g), r->stream));
    if (g->check_send)
      TW_CU(cw_cu.cuMemcpyDtoHAsync(b->st[i].out_s.p, b->S[k->cls].p[i], s_window_bytes(g), r->stream));
  }
  for (int i = 0; i < w->nlocal; i++) tw_stream_wait_on(&w->r[i], w->r[i].stream, 180, full);

  /* Bit-identity of all-reduce outputs across ranks: every process takes
   * part in the exchange of every all-reduce case. */
  uint64_t out_hash[TW_MAX_RANKS] = {0}, all_hash[TW_MAX_RANKS] = {0};
  if (k->coll == C_AR) {
    for (int i = 0; i < w->nlocal; i++) {
      const struct geom *g = &gs[i];
      out_hash[i] = bytes_hash((const unsigned char *)b->st[i].out_r.p + g->r_off + g->out_lo * g->es,
                               (g->out_hi - g->out_lo) * g->es);
    }
    tw_exchange_u64(w, out_hash, all_hash);
  }

  for (int i = 0; i < w->nlocal; i++) {
    struct tw_rank *r = &w->r[i];
    const struct geom *g = &gs[i];
    const unsigned char *hr = b->st[i].out_r.p;
    int failed = 0;
    if (k->coll == C_AR && all_hash[r->rank] != all_hash[0]) {
      report_failure(r, "%s: all-reduce output not bit-identical across ranks: rank %d's output hashes to 0x%016llx, "
                     "rank 0's to 0x%016llx (every rank must compute the same bits); seed 0x%llx", full, r->rank,
                     (unsigned long long)all_hash[r->rank], (unsigned long long)all_hash[0],
                     (unsigned long long)g_seed);
      failed = 1;
    }
    /* Guards: the bytes before an offset window and after its end. */
    const size_t end = g->r_off + g->r_elems * g->es;
    for (size_t j = 0; j < r_window_bytes(g); j++) {
      if (j == g->r_off) j = end;
      if (j >= r_window_bytes(g)) break;
      if (hr[j] != pr) {
        report_failure(r, "%s: recvbuff guard byte %s%zu changed: 0x%02x, expected poison 0x%02x; seed 0x%llx", full,
                       j < g->r_off ? "-" : "+", j < g->r_off ? g->r_off - j : j - end, hr[j], pr,
                       (unsigned long long)g_seed);
        failed = 1;
        break;
      }
    }
    uint64_t poison = 0;
    memset(&poison, pr, (size_t)g->es);
    struct check_ctx *x = calloc(1, sizeof *x);
    TW_REQUIRE(r, x != NULL, "out of host memory");
    *x = (struct check_ctx){k, g, r->rank, w->nranks, seed, poison, hr + g->r_off, {{0}}};
    cw_par_for(g->r_elems, check_range, x);
    struct check_res m = merge(x);
    if (m.bad) {
      int kind;
      char gb[96], eb[96];
      uint64_t exp = expected_at(x, m.first_bad, &kind);
      uint64_t got = cw_get(x->win, m.first_bad, (int)g->es);
      report_failure(r,
                     "%s: %zu of %zu elements wrong (%zu output elements still poison); first bad index %zu "
                     "(%s): got %s, expected %s; seed 0x%llx",
                     full, m.bad, g->r_elems, m.unwritten, m.first_bad,
                     kind == 2 ? "output" : kind == 1 ? "in-place input, must be unchanged" : "must stay poison",
                     cw_render(k->dt, got, gb, sizeof gb), cw_render(k->dt, exp, eb, sizeof eb),
                     (unsigned long long)g_seed);
      failed = 1;
    }
    if (m.inexact) {
      int kind;
      char gb[96], eb[96];
      uint64_t exp = expected_at(x, m.first_inexact, &kind);
      uint64_t got = cw_get(x->win, m.first_inexact, (int)g->es);
      if (g_opts.exact) {
        report_failure(r, "%s: %zu elements within tolerance but not bit-identical (COLL_EXACT=1); first %zu: got %s, "
                       "expected %s; seed 0x%llx", full, m.inexact, m.first_inexact,
                       cw_render(k->dt, got, gb, sizeof gb), cw_render(k->dt, exp, eb, sizeof eb),
                       (unsigned long long)g_seed);
        failed = 1;
      } else if (g_printed < MAX_PRINTED) {
        g_printed++;
        tw_log(w, "NOTE %s rank %d: %zu elements within tolerance but not bit-identical to the RNE model; first %zu: "
               "got %s, expected %s", full, r->rank, m.inexact, m.first_inexact,
               cw_render(k->dt, got, gb, sizeof gb), cw_render(k->dt, exp, eb, sizeof eb));
      }
    }
    free(x);
    if (g->check_send) {
      const unsigned char *hs = b->st[i].out_s.p;
      const size_t send_end = g->s_off + g->send_elems * g->es;
      for (size_t j = 0; j < s_window_bytes(g); j++) {
        if (j == g->s_off) j = send_end;
        if (j >= s_window_bytes(g)) break;
        if (hs[j] != ps) {
          report_failure(r, "%s: sendbuff guard byte at window offset %zu changed: 0x%02x, expected 0x%02x", full, j,
                         hs[j], ps);
          failed = 1;
          break;
        }
      }
      struct send_ctx *s = calloc(1, sizeof *s);
      TW_REQUIRE(r, s != NULL, "out of host memory");
      s->dt = k->dt;
      s->rank = r->rank;
      s->es = (int)g->es;
      s->seed = seed;
      s->win = hs + g->s_off;
      cw_par_for(g->send_elems, send_range, s);
      size_t bad = 0, first = (size_t)-1;
      for (int t = 0; t < cw_threads(); t++) {
        bad += s->res[t].bad;
        if (s->res[t].bad && s->res[t].first_bad < first) first = s->res[t].first_bad;
      }
      if (bad) {
        char gb[96], eb[96];
        report_failure(r, "%s: sendbuff modified: %zu of %zu elements changed, first %zu: now %s, was %s", full, bad,
                       g->send_elems, first, cw_render(k->dt, cw_get(s->win, first, s->es), gb, sizeof gb),
                       cw_render(k->dt, cw_gen(k->dt, seed, r->rank, first), eb, sizeof eb));
        failed = 1;
      }
      free(s);
    }
    int slot = w->mode == TW_MP ? r->rank : 0;
    struct gstat *gst = &ms->g[slot][k->coll][k->dt];
    struct gstat *tst = &ms->tier[slot][k->tier];
    gst->checks++;
    tst->checks++;
    gst->inexact += m.inexact;
    tst->inexact += m.inexact;
    if (failed) {
      gst->failed++;
      tst->failed++;
    }
  }
  tw_check_async(w, full);
  const double dt_s = tu_now() - t0;
  int slot = w->mode == TW_MP ? w->r[0].rank : 0;
  ms->g[slot][k->coll][k->dt].runs++;
  ms->g[slot][k->coll][k->dt].secs += dt_s;
  ms->tier[slot][k->tier].runs++;
  ms->tier[slot][k->tier].secs += dt_s;
}

/* ---- host model self-check ------------------------------------------------------ */

/* The reference is only as good as the host model of CUDA's conversions:
 * compare it with CUDA itself (coll_kernels.cu: cm_convert, cm_decode) on
 * ~800 Ki floats (random patterns, every fp16 and bf16 value with the
 * midpoints to its neighbour and the floats next to them, the fp8 values
 * likewise, and the overflow / saturation ranges) and on every fp16 and
 * fp8 pattern. A disagreement is a bug of this test, not of the library. */
static int g_model_ok = 1;

static void push(float *xs, size_t *n, size_t cap, float v) {
  if (*n < cap && !isnan(v) && !isinf(v)) xs[(*n)++] = v;
}

static void neighbours(float *xs, size_t *n, size_t cap, int dt, uint32_t h, uint32_t h1) {
  double a = cw_value(dt, h), b = cw_value(dt, h1);
  if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) return;
  float mid = (float)((a + b) / 2);
  push(xs, n, cap, (float)a);
  push(xs, n, cap, mid);
  push(xs, n, cap, nextafterf(mid, INFINITY));
  push(xs, n, cap, nextafterf(mid, -INFINITY));
}

static void model_selfcheck(struct tw *w) {
  struct tw_rank *r = &w->r[0];
  tw_phase("host model self-check");
  const size_t cap = (size_t)1 << 20;
  float *xs = malloc(cap * sizeof *xs);
  REQUIRE(xs != NULL, "out of host memory");
  size_t n = 0;
  for (uint64_t i = 0; n < (size_t)1 << 18; i++) {
    uint32_t b = (uint32_t)cw_mix64(i * 7919 + g_seed);
    float f;
    memcpy(&f, &b, 4);
    push(xs, &n, cap, f);
  }
  for (uint32_t h = 0; h < 0xffff; h++) {
    if ((h & 0x7fff) == 0x7fff) continue;
    neighbours(xs, &n, cap, symmFloat16, h, h + 1);
    neighbours(xs, &n, cap, symmBfloat16, h, h + 1);
  }
  for (uint32_t h = 0; h < 0xff; h++) {
    if ((h & 0x7f) == 0x7f) continue;
    neighbours(xs, &n, cap, symmFloat8e4m3, h, h + 1);
    neighbours(xs, &n, cap, symmFloat8e5m2, h, h + 1);
  }
  static const double edges[][2] = {{65000, 66000}, {400, 600}, {50000, 70000}, {3.3e38, 3.4028e38}};
  for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
    for (int k = 0; k <= 2000; k++) {
      float v = (float)(edges[e][0] + (edges[e][1] - edges[e][0]) * k / 2000.0);
      push(xs, &n, cap, v);
      push(xs, &n, cap, -v);
    }
  push(xs, &n, cap, 0.0f);
  push(xs, &n, cap, -0.0f);

  CUmodule m = tw_load_module(r, COLL_KERNELS_FATBIN, "COLL_TEST_KERNELS");
  CUfunction conv = tw_function(r, m, "cm_convert"), dec = tw_function(r, m, "cm_decode");
  tw_use(r);
  CUdeviceptr din, d16, db16, d43, d52, df16, dd43, dd52;
  TW_CU(tu_cu.cuMemAlloc(&din, n * 4));
  TW_CU(tu_cu.cuMemAlloc(&d16, n * 2));
  TW_CU(tu_cu.cuMemAlloc(&db16, n * 2));
  TW_CU(tu_cu.cuMemAlloc(&d43, n));
  TW_CU(tu_cu.cuMemAlloc(&d52, n));
  TW_CU(tu_cu.cuMemAlloc(&df16, 65536 * 4));
  TW_CU(tu_cu.cuMemAlloc(&dd43, 256 * 4));
  TW_CU(tu_cu.cuMemAlloc(&dd52, 256 * 4));
  TW_CU(cw_cu.cuMemcpyHtoDAsync(din, xs, n * 4, r->stream));
  uint64_t nn = n;
  void *p1[] = {&din, &nn, &d16, &db16, &d43, &d52};
  TW_CU(tu_cu.cuLaunchKernel(conv, 1024, 1, 1, 256, 1, 1, 0, r->stream, p1, NULL));
  void *p2[] = {&df16, &dd43, &dd52};
  TW_CU(tu_cu.cuLaunchKernel(dec, 256, 1, 1, 256, 1, 1, 0, r->stream, p2, NULL));
  tw_stream_wait_on(r, r->stream, 60, "conversion kernels");
  uint16_t *h16 = malloc(n * 2), *hb16 = malloc(n * 2);
  uint8_t *h43 = malloc(n), *h52 = malloc(n);
  float *f16 = malloc(65536 * 4), f43[256], f52[256];
  REQUIRE(h16 && hb16 && h43 && h52 && f16, "out of host memory");
  TW_CU(tu_cu.cuMemcpyDtoH(h16, d16, n * 2));
  TW_CU(tu_cu.cuMemcpyDtoH(hb16, db16, n * 2));
  TW_CU(tu_cu.cuMemcpyDtoH(h43, d43, n));
  TW_CU(tu_cu.cuMemcpyDtoH(h52, d52, n));
  TW_CU(tu_cu.cuMemcpyDtoH(f16, df16, 65536 * 4));
  TW_CU(tu_cu.cuMemcpyDtoH(f43, dd43, sizeof f43));
  TW_CU(tu_cu.cuMemcpyDtoH(f52, dd52, sizeof f52));
  const char *names[4] = {"float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"};
  size_t bad[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < n; i++) {
    uint32_t host[4] = {cw_float_to_f16(xs[i]), cw_float_to_bf16(xs[i]), cw_float_to_e4m3(xs[i]),
                        cw_float_to_e5m2(xs[i])};
    uint32_t dev[4] = {h16[i], hb16[i], h43[i], h52[i]};
    for (int f = 0; f < 4; f++)
      if (host[f] != dev[f] && bad[f]++ < 3)
        tw_fail_at(__FILE__, __LINE__, r, "TEST BUG (host model, not the library): %s(%a = %.9g): CUDA gives 0x%x, "
                   "the host model 0x%x", names[f], (double)xs[i], (double)xs[i], dev[f], host[f]);
  }
  size_t dbad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float a = cw_f16_to_float(h);
    if (isnan(a) ? !isnan(f16[h]) : (a != f16[h] || signbit(a) != signbit(f16[h])))
      if (dbad++ < 3)
        tw_fail_at(__FILE__, __LINE__, r, "TEST BUG (host model): fp16 0x%04x decodes to %a on CUDA, %a here", h,
                   (double)f16[h], (double)a);
  }
  for (uint32_t h = 0; h < 256; h++) {
    float a = cw_e4m3_to_float(h), b = cw_e5m2_to_float(h);
    if (isnan(a) ? !isnan(f43[h]) : (a != f43[h] || signbit(a) != signbit(f43[h])))
      if (dbad++ < 6)
        tw_fail_at(__FILE__, __LINE__, r, "TEST BUG (host model): e4m3 0x%02x decodes to %a on CUDA, %a here", h,
                   (double)f43[h], (double)a);
    if (isnan(b) ? !isnan(f52[h]) : (b != f52[h] || signbit(b) != signbit(f52[h])))
      if (dbad++ < 6)
        tw_fail_at(__FILE__, __LINE__, r, "TEST BUG (host model): e5m2 0x%02x decodes to %a on CUDA, %a here", h,
                   (double)f52[h], (double)b);
  }
  g_model_ok = !bad[0] && !bad[1] && !bad[2] && !bad[3] && !dbad;
  if (w->lead)
    tw_log(w, "host model self-check: %zu floats x 4 conversions and every fp16/fp8 decode vs CUDA: %s "
           "(mismatches f16 %zu, bf16 %zu, e4m3 %zu, e5m2 %zu, decode %zu)",
           n, g_model_ok ? "agree" : "DISAGREE (test bug)", bad[0], bad[1], bad[2], bad[3], dbad);
  CUdeviceptr all[] = {din, d16, db16, d43, d52, df16, dd43, dd52};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) TW_CU(tu_cu.cuMemFree(all[i]));
  TW_CU(tu_cu.cuModuleUnload(m));
  free(xs);
  free(h16);
  free(hb16);
  free(h43);
  free(h52);
  free(f16);
}

/* ---- body -------------------------------------------------------------------- */

struct sizes {
  size_t r[CW_NCLASSES], s[CW_NCLASSES], in, out_r, out_s;
};

static struct sizes plan_sizes(const struct mcase *plan, size_t n, int nranks) {
  struct sizes z;
  memset(&z, 0, sizeof z);
  for (size_t i = 0; i < n; i++) {
    const struct mcase *k = &plan[i];
    for (int rank = 0; rank < nranks; rank++) {
      struct geom g = geometry(k, rank, nranks);
      size_t rb = r_window_bytes(&g), sb = s_window_bytes(&g);
      size_t in = (k->inplace ? g.in_hi - g.in_lo : g.send_elems) * g.es;
      if (rb > z.r[k->cls]) z.r[k->cls] = rb;
      if (!k->inplace && sb > z.s[k->cls]) z.s[k->cls] = sb;
      if (in > z.in) z.in = in;
      if (rb > z.out_r) z.out_r = rb;
      if (g.check_send && sb > z.out_s) z.out_s = sb;
    }
  }
  return z;
}

static size_t device_bytes(const struct sizes *z) {
  size_t t = 0;
  for (int c = 0; c < CW_NCLASSES; c++) t += z->r[c] + z->s[c];
  return t;
}

static void body(struct tw *w, void *ctx) {
  (void)ctx;
  struct mstats *ms = (struct mstats *)(void *)w->user;
  const int lead = w->lead;
  struct opts o = g_opts;
  size_t n = build_plan(NULL, &o, w->nranks);
  struct mcase *plan = malloc((n ? n : 1) * sizeof *plan);
  REQUIRE(plan != NULL, "out of host memory");
  build_plan(plan, &o, w->nranks);
  struct sizes z = plan_sizes(plan, n, w->nranks);

  /* Tier L needs tens of GiB per GPU: drop it (everywhere alike) if any
   * GPU lacks the memory for every rank it holds. */
  const uint64_t per_gpu = (uint64_t)((w->nranks + w->ngpus - 1) / w->ngpus);
  uint64_t free_mem[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) {
    size_t fr = 0, total = 0;
    tw_use(&w->r[i]);
    TW_CU(tu_cu.cuMemGetInfo(&fr, &total));
    free_mem[i] = fr;
  }
  const uint64_t min_free = tw_min_u64(w, free_mem);
  const uint64_t margin = (uint64_t)3 << 30; /* library scratch, contexts, headroom */
  if (o.tiers[T_L] && (device_bytes(&z) + margin) * per_gpu > min_free) {
    if (lead)
      tw_log(w, "CAPPED: tier L dropped: it needs %.1f GiB per rank (+%.0f GiB headroom) x %d rank(s) per GPU, the "
             "emptiest GPU has %.1f GiB free", device_bytes(&z) / 1073741824.0, margin / 1073741824.0, (int)per_gpu,
             min_free / 1073741824.0);
    o.tiers[T_L] = 0;
    ms->dropped_l = 1;
    n = build_plan(plan, &o, w->nranks);
    z = plan_sizes(plan, n, w->nranks);
  }
  size_t per_tier[NTIERS] = {0};
  for (size_t i = 0; i < n; i++) per_tier[plan[i].tier]++;
  if (lead) {
    tw_log(w, "seed 0x%llx (rerun with COLL_SEED=0x%llx); %d reps per case; %d host threads per process; %s",
           (unsigned long long)g_seed, (unsigned long long)g_seed, o.reps, cw_threads(),
           o.exact ? "floats must be bit-identical (COLL_EXACT=1)" : "floats within tolerance pass");
    char roots[32] = "";
    int rs[3];
    for (int k = 0, nr = root_set(w->nranks, rs); k < nr; k++)
      snprintf(roots + strlen(roots), sizeof roots - strlen(roots), "%s%d", k ? "," : "", rs[k]);
    tw_log(w, "plan over %d ranks (roots %s): tier S (counts 0,1,7,1023,65539; full product): %zu cases; tier Q "
           "(quick subset): %zu cases; tier M (4 Mi; sum/max, 3 variants; p2p also 4 Mi+4099): %zu cases; tier L "
           "(256 Mi subset): %zu cases; tier P (1 Mi+7 pipelines): %zu cases; each case x %d reps",
           w->nranks, roots, per_tier[T_S], per_tier[T_Q], per_tier[T_M], per_tier[T_L], per_tier[T_P], o.reps);
    tw_log(w, "device memory per GPU: %.2f GiB of test buffers (staged %.2f+%.2f, registered %.2f+%.2f, symmetric "
           "%.2f+%.2f GiB recv+send); %.1f GiB free", device_bytes(&z) / 1073741824.0, z.r[0] / 1073741824.0,
           z.s[0] / 1073741824.0, z.r[1] / 1073741824.0, z.s[1] / 1073741824.0, z.r[2] / 1073741824.0,
           z.s[2] / 1073741824.0, min_free / 1073741824.0);
  }

  model_selfcheck(w);
  if (tw_init_comms(w) != symmSuccess) {
    free(plan);
    return;
  }
  /* COLL_ALGO_ODD_RANKS: odd ranks set this algorithm (symmCommSetAlgorithm)
   * over SYMM_ALGO, for kernel choices whose two ends may differ (the
   * send/recv engine's p2p:pair=1: either end may pair alone). */
  const char *odd = getenv("COLL_ALGO_ODD_RANKS");
  if (odd && odd[0]) {
    for (int i = 0; i < w->nlocal; i++)
      if (w->r[i].rank % 2) TW_SYMM_REQUIRE(&w->r[i], symmCommSetAlgorithm(w->r[i].comm, odd));
    if (lead) tw_log(w, "odd ranks run \"%s\" (COLL_ALGO_ODD_RANKS)", odd);
  }
  struct world_bufs *b = calloc(1, sizeof *b);
  REQUIRE(b != NULL, "out of host memory");
  for (int c = 0; c < CW_NCLASSES; c++) {
    if (z.r[c]) cw_buf_alloc(w, &b->R[c], (enum cw_class)c, z.r[c]);
    if (z.s[c]) cw_buf_alloc(w, &b->S[c], (enum cw_class)c, z.s[c]);
  }
  for (int i = 0; i < w->nlocal; i++) {
    tw_phase("allocating host buffers");
    cw_host_alloc(&w->r[i], &b->st[i].in, z.in);
    cw_host_alloc(&w->r[i], &b->st[i].out_r, z.out_r);
    cw_host_alloc(&w->r[i], &b->st[i].out_s, z.out_s);
  }
  ms->filled[w->mode == TW_MP ? w->r[0].rank : 0] = 1;

  int last_tier = -1;
  double tier_t0 = tu_now();
  for (size_t idx = 0; idx < n; idx++) {
    if (plan[idx].tier != last_tier) {
      if (lead && last_tier >= 0)
        tw_log(w, "tier %c done in %.1f s", tier_char[last_tier], tu_now() - tier_t0);
      last_tier = plan[idx].tier;
      tier_t0 = tu_now();
    }
    for (int rep = 0; rep < o.reps; rep++) run_case(w, b, &plan[idx], idx, rep, ms);
    if (lead && (idx + 1) % 5000 == 0)
      tw_log(w, "progress: %zu of %zu cases (%.1f s into tier %c)", idx + 1, n, tu_now() - tier_t0,
             tier_char[last_tier]);
  }

  if (lead && last_tier >= 0) tw_log(w, "tier %c done in %.1f s", tier_char[last_tier], tu_now() - tier_t0);
  tw_phase("freeing buffers");
  for (int c = 0; c < CW_NCLASSES; c++) {
    cw_buf_free(w, &b->R[c]);
    cw_buf_free(w, &b->S[c]);
  }
  for (int i = 0; i < w->nlocal; i++) {
    cw_host_free(&w->r[i], &b->st[i].in);
    cw_host_free(&w->r[i], &b->st[i].out_r);
    cw_host_free(&w->r[i], &b->st[i].out_s);
  }
  free(b);
  free(plan);
  tw_destroy_comms(w);
}

static void add_stat(struct gstat *sum, const struct gstat *s, int first) {
  if (first) sum->runs = s->runs; /* every process runs the same cases */
  sum->checks += s->checks;
  sum->failed += s->failed;
  sum->inexact += s->inexact;
  if (s->secs > sum->secs) sum->secs = s->secs;
}

static void report(struct tw *w, void *ctx) {
  (void)ctx;
  const struct mstats *ms = (const struct mstats *)(const void *)w->user;
  const int slots = w->mode == TW_MP ? w->nranks : 1;
  const char *mode = w->mode == TW_MP ? "mp" : "all";
  printf("\n%s %s n%d summary (seed 0x%llx, %d reps per case)%s\n", w->name, mode, w->nranks,
         (unsigned long long)g_seed, g_opts.reps, ms->dropped_l ? " [tier L dropped: not enough GPU memory]" : "");
  printf("  %-14s %-9s %7s %8s %7s %8s %9s\n", "collective", "dtype", "runs", "checks", "failed", "inexact", "time(s)");
  struct gstat total = {0, 0, 0, 0, 0};
  for (int c = 0; c < NCOLL; c++) {
    for (int dt = 0; dt < CW_NDTYPES; dt++) {
      struct gstat s = {0, 0, 0, 0, 0};
      for (int k = 0; k < slots; k++)
        if (ms->filled[k]) add_stat(&s, &ms->g[k][c][dt], k == 0 || !ms->filled[0]);
      if (!s.runs && !s.checks) continue;
      printf("  %-14s %-9s %7u %8u %7u %8llu %9.2f%s\n", coll_name[c], cw_dt[dt].name, s.runs, s.checks, s.failed,
             (unsigned long long)s.inexact, s.secs, s.failed ? "  <-- FAILED" : "");
      total.runs += s.runs;
      total.checks += s.checks;
      total.failed += s.failed;
      total.inexact += s.inexact;
      total.secs += s.secs;
    }
  }
  for (int t = 0; t < NTIERS; t++) {
    struct gstat s = {0, 0, 0, 0, 0};
    for (int k = 0; k < slots; k++)
      if (ms->filled[k]) add_stat(&s, &ms->tier[k][t], k == 0 || !ms->filled[0]);
    if (!s.runs) continue;
    printf("  tier %c: %u runs, %u rank-checks, %u failed, %llu inexact elements, %.1f s\n", tier_char[t], s.runs,
           s.checks, s.failed, (unsigned long long)s.inexact, s.secs);
  }
  printf("  total: %u runs (case x rep), %u rank-checks, %u failed, %llu inexact elements, %.1f s in runs\n",
         total.runs, total.checks, total.failed, (unsigned long long)total.inexact, total.secs);
  if (total.failed && !tu_failures) tu_failures += (int)total.failed;
}

static int parse_list(const char *arg, const char *const *names, int count, int *flags) {
  memset(flags, 0, sizeof(int) * (size_t)count);
  char buf[512];
  snprintf(buf, sizeof buf, "%s", arg);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int i = 0; i < count; i++)
      if (strcmp(tok, names[i]) == 0) flags[i] = found = 1;
    if (!found) return -1;
  }
  return 0;
}

/* --tiers=: a set of tier letters (S, M, L, Q, P). */
static int parse_tiers(const char *arg, int *tiers) {
  for (int t = 0; t < NTIERS; t++) tiers[t] = strchr(arg, tier_char[t]) != NULL;
  for (const char *p = arg; *p; p++)
    if (!strchr("SMLQP", *p)) return -1;
  return 0;
}

static const char *g_env_tiers; /* SYMM_TEST_TIERS: wins over --tiers */

static int option(const char *arg, void *ctx) {
  (void)ctx;
  if (strncmp(arg, "--tiers=", 8) == 0) {
    if (!g_env_tiers)
      REQUIRE(parse_tiers(arg + 8, g_opts.tiers) == 0, "--tiers: \"%s\" is not a set of S, M, L, Q, P", arg + 8);
  } else if (strncmp(arg, "--colls=", 8) == 0) {
    REQUIRE(parse_list(arg + 8, coll_name, NCOLL, g_opts.colls) == 0,
            "--colls: unknown collective in \"%s\" (allreduce, allgather, reducescatter, broadcast, reduce, "
            "alltoall, sendrecv, sendrecv_pair, self_sendrecv, sendrecv_gather)", arg + 8);
  } else if (strncmp(arg, "--reps=", 7) == 0) {
    g_opts.reps = atoi(arg + 7);
    REQUIRE(g_opts.reps >= 1 && g_opts.reps <= 100, "--reps must be 1..100");
  } else {
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  g_opts.tiers[T_S] = g_opts.tiers[T_M] = g_opts.tiers[T_L] = 1; /* default: SML */
  for (int c = 0; c < NCOLL; c++) g_opts.colls[c] = 1;
  g_opts.reps = 2;
  const char *ex = getenv("COLL_EXACT");
  g_opts.exact = ex && ex[0] && strcmp(ex, "0") != 0;
  const char *et = getenv("SYMM_TEST_TIERS");
  if (et && et[0]) {
    REQUIRE(parse_tiers(et, g_opts.tiers) == 0, "SYMM_TEST_TIERS: \"%s\" is not a set of S, M, L, Q, P", et);
    g_env_tiers = et;
  }
  g_seed = cw_pick_seed();
  static const struct tw_spec spec = {.name = "coll_matrix", .modes = "mp,all",
      .usage = "[--tiers=SMLQP] [--colls=a,b] [--reps=N]", .limit_s = 1500, .mp_one_rank = 1,
      .user_bytes = sizeof(struct mstats),
      .option = option, .process_init = cw_process_init, .body = body, .report = report};
  return tw_main(&spec, argc, argv);
}
