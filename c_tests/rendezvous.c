/*
 * rendezvous: symmCommInitRank across forked processes, one rank each.
 *
 *   rendezvous ok <nranks>          every rank initialises
 *   rendezvous missing_rank         nranks=3, only 2 arrive (SYMM_BOOTSTRAP_TIMEOUT set)
 *   rendezvous late_rank            rank 1 arrives 30 s after rank 0 (default timeout)
 *   rendezvous nranks_mismatch      ranks disagree on nranks
 *   rendezvous duplicate_rank       two processes claim rank 0
 *   rendezvous rank_out_of_range    one rank number is outside [0, nranks)
 *   rendezvous corrupted_id         flipped bytes / all-zero id
 *
 * The parent makes the unique id (which starts the rendezvous root in this
 * process) and forks the ranks; it never initialises CUDA itself, so the
 * children may. In the scenarios that should form a group, child i (with
 * GPUs) retains device i % ngpus's primary context and makes it current
 * before symmCommInitRank; without GPUs every rank must get the "no CUDA
 * driver" error right after the rendezvous, so all of this runs on
 * CPU-only machines too. The failure scenarios end before CUDA is touched,
 * so their ranks select no GPU.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "symmcomm.h"
#include "test_util.h"

#define MAX_PROCS 64

/* What each forked process does. */
struct plan {
  symmUniqueId id;
  int nprocs;
  int nranks[MAX_PROCS];
  int rank[MAX_PROCS];
  double delay_s[MAX_PROCS]; /* sleep before calling symmCommInitRank */
  int select_gpu;            /* make device i % ngpus current first */
  int ngpus;
};

static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void rank_body(int i, void *ctx, struct tu_rank_result *out) {
  const struct plan *p = ctx;
  if (p->select_gpu && p->ngpus > 0) {
    char why[256];
    if (tu_cuda_use_device(i % p->ngpus, why, sizeof why) != 0) {
      snprintf(out->msg, sizeof out->msg, "harness: selecting device %d failed: %s", i % p->ngpus, why);
      return; /* code stays -1 */
    }
  }
  if (p->delay_s[i] > 0) sleep_s(p->delay_s[i]);
  symmComm_t comm = NULL;
  double t0 = tu_now();
  symmResult_t rc = symmCommInitRank(&comm, p->nranks[i], p->id, p->rank[i]);
  out->elapsed = tu_now() - t0;
  tu_rank_finish(rc, comm, out);
}

static int ngpus;
static char gpu_reason[512];

static void new_id(struct plan *p) {
  symmResult_t rc = symmGetUniqueId(&p->id);
  REQUIRE(rc == symmSuccess, "symmGetUniqueId: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
}

/* Fork the plan's processes and print what each reported. */
static void run(const char *label, struct plan *p, double limit_s, struct tu_rank_result *res) {
  p->ngpus = ngpus;
  printf("[%s] %d process(es), limit %.0f s\n", label, p->nprocs, limit_s);
  fflush(stdout);
  if (tu_run_ranks(p->nprocs, rank_body, p, limit_s, res) != 0)
    tu_fail(__FILE__, __LINE__, "[%s] not every rank reported (see above)", label);
  for (int i = 0; i < p->nprocs; i++)
    printf("  proc %d (rank %d of %d): %s after %.2f s%s%s\n", i, p->rank[i], p->nranks[i],
           res[i].code >= 0 ? tu_result_name(res[i].code) : "no result", res[i].elapsed, res[i].msg[0] ? ": " : "",
           res[i].msg);
  fflush(stdout);
}

/* Every process got `want`, within `max_s`, with a message containing one
 * of the keywords (NULL-terminated list; empty list: no message check). */
static void expect_all(const char *label, const struct plan *p, const struct tu_rank_result *res, symmResult_t want,
                       double max_s, const char *const *keywords) {
  for (int i = 0; i < p->nprocs; i++) {
    const struct tu_rank_result *r = &res[i];
    if (r->code != (int)want) {
      tu_fail(__FILE__, __LINE__, "[%s] proc %d: got %s, expected %s (%s)", label, i,
              r->code >= 0 ? tu_result_name(r->code) : "no result", tu_result_name(want), r->msg);
      continue;
    }
    CHECK(r->elapsed <= max_s, "[%s] proc %d took %.2f s (limit %.1f s)", label, i, r->elapsed, max_s);
    if (keywords && keywords[0]) {
      int hit = 0;
      for (const char *const *k = keywords; *k; k++) hit |= tu_contains_ci(r->msg, *k);
      CHECK(hit, "[%s] proc %d: message \"%s\" does not mention \"%s\"%s", label, i, r->msg, keywords[0],
            keywords[1] ? " (or an alternative)" : "");
    }
  }
}

/* After a rendezvous that should have worked: success with a GPU, else
 * the no-driver error on every rank. */
static void expect_formed(const char *label, const struct plan *p, const struct tu_rank_result *res, double max_s) {
  if (ngpus == 0) {
    static const char *const driver[] = {"cuda driver", "libcuda", NULL};
    expect_all(label, p, res, symmUnhandledCudaError, max_s, driver);
    return;
  }
  expect_all(label, p, res, symmSuccess, max_s, NULL);
  for (int i = 0; i < p->nprocs; i++) {
    const struct tu_rank_result *r = &res[i];
    if (r->code != symmSuccess) continue;
    CHECK(r->count == p->nranks[i], "[%s] proc %d: symmCommCount %d, expected %d", label, i, r->count, p->nranks[i]);
    CHECK(r->rank == p->rank[i], "[%s] proc %d: symmCommUserRank %d, expected %d", label, i, r->rank, p->rank[i]);
    CHECK(r->device == i % ngpus, "[%s] proc %d: symmCommCuDevice %d, expected %d", label, i, r->device, i % ngpus);
    CHECK(r->async_error == symmSuccess, "[%s] proc %d: async error %d", label, i, r->async_error);
    CHECK(r->destroy_code == symmSuccess, "[%s] proc %d: symmCommDestroy returned %s", label, i,
          tu_result_name(r->destroy_code));
  }
}

static void plain_plan(struct plan *p, int nprocs, int nranks) {
  memset(p, 0, sizeof *p);
  p->nprocs = nprocs;
  for (int i = 0; i < nprocs; i++) {
    p->nranks[i] = nranks;
    p->rank[i] = i;
  }
  new_id(p);
}

static struct tu_rank_result res[MAX_PROCS];

static void scenario_ok(int n) {
  struct plan p;
  plain_plan(&p, n, n);
  p.select_gpu = 1;
  run("ok", &p, 150, res);
  /* Without a GPU the error comes right after the rendezvous; with GPUs
   * initialisation loads modules and checks peers, which takes longer. */
  expect_formed("ok", &p, res, ngpus ? 60.0 : 10.0);
}

static void scenario_missing_rank(void) {
  const char *env = getenv("SYMM_BOOTSTRAP_TIMEOUT");
  REQUIRE(env && atof(env) > 0, "this test needs SYMM_BOOTSTRAP_TIMEOUT set (CTest sets 3)");
  double timeout = atof(env);
  struct plan p;
  plain_plan(&p, 2, 3); /* rank 2 never comes */
  run("missing_rank", &p, timeout + 20, res);
  static const char *const kw[] = {"time", NULL}; /* "timed out" / "timeout" */
  expect_all("missing_rank", &p, res, symmTimeout, timeout + 2.0, kw);
}

static void scenario_late_rank(void) {
  struct plan p;
  plain_plan(&p, 2, 2);
  p.select_gpu = 1;
  p.delay_s[1] = 30.0;
  run("late_rank", &p, 100, res);
  expect_formed("late_rank", &p, res, ngpus ? 90.0 : 40.0);
  /* Rank 0 really waited for rank 1 (else the delay did not happen). */
  CHECK(res[0].elapsed >= 25.0, "rank 0 returned after %.1f s although rank 1 only arrived after 30 s",
        res[0].elapsed);
}

static void scenario_nranks_mismatch(void) {
  struct plan p;
  plain_plan(&p, 2, 2);
  p.nranks[1] = 3;
  run("nranks_mismatch", &p, 40, res);
  static const char *const kw[] = {"nranks", NULL};
  expect_all("nranks_mismatch", &p, res, symmInvalidUsage, 10.0, kw);
}

static void scenario_duplicate_rank(void) {
  struct plan p;
  plain_plan(&p, 2, 2);
  p.rank[1] = 0;
  run("duplicate_rank", &p, 40, res);
  static const char *const kw[] = {"twice", "duplicate", NULL};
  expect_all("duplicate_rank", &p, res, symmInvalidUsage, 10.0, kw);
}

static void scenario_rank_out_of_range(void) {
  const int bad[] = {5, -1};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
    struct plan p;
    plain_plan(&p, 2, 2);
    p.rank[1] = bad[b];
    char label[64], rank_text[32];
    snprintf(label, sizeof label, "rank_out_of_range rank=%d", bad[b]);
    snprintf(rank_text, sizeof rank_text, "%d", bad[b]);
    run(label, &p, 40, res);
    /* Both ranks: the bad one from its own check, the good one because the
     * root tells it (quickly, not by timing out); both name the bad rank. */
    const char *const kw[] = {rank_text, NULL};
    expect_all(label, &p, res, symmInvalidArgument, 10.0, kw);
  }
}

static void scenario_corrupted_id(void) {
  /* One byte in each field of the id layout, then an all-zero id. */
  const int flip_at[] = {0, 9, 13, 15, 20, 33, 64, 127, -1};
  for (size_t k = 0; k < sizeof flip_at / sizeof flip_at[0]; k++) {
    struct plan p;
    plain_plan(&p, 2, 2);
    char label[64];
    if (flip_at[k] >= 0) {
      p.id.internal[flip_at[k]] ^= 0x5;
      snprintf(label, sizeof label, "corrupted_id byte %d", flip_at[k]);
    } else {
      memset(&p.id, 0, sizeof p.id);
      snprintf(label, sizeof label, "corrupted_id all-zero");
    }
    run(label, &p, 10, res);
    static const char *const kw[] = {"corrupt", NULL};
    expect_all(label, &p, res, symmInvalidArgument, 5.0, kw);
  }
}

int main(int argc, char **argv) {
  REQUIRE(argc >= 2, "usage: %s <scenario> [nranks]", argv[0]);
  const char *scn = argv[1];
  int n = argc >= 3 ? atoi(argv[2]) : 2;

  /* Environment first: the library reads it once, on the first call. */
  if (strcmp(scn, "late_rank") == 0) unsetenv("SYMM_BOOTSTRAP_TIMEOUT"); /* the point is the default */
  ngpus = tu_gpu_count(gpu_reason, sizeof gpu_reason);
  REQUIRE(ngpus >= 0, "GPU probe failed: %s", gpu_reason);
  if (ngpus > 0) {
    printf("%d CUDA device(s)\n", ngpus);
    /* More ranks than GPUs only works with the test-only sharing switch. */
    if (strcmp(scn, "ok") == 0 && n > ngpus) {
      printf("setting SYMM_TEST_SHARED_DEVICES=1 (%d ranks on %d GPUs)\n", n, ngpus);
      setenv("SYMM_TEST_SHARED_DEVICES", "1", 1);
    }
  } else {
    printf("no CUDA device (%s): expecting the no-driver error after each rendezvous\n", gpu_reason);
  }

  if (strcmp(scn, "ok") == 0) {
    REQUIRE(n >= 1 && n <= MAX_PROCS, "nranks %d out of range", n);
    scenario_ok(n);
  } else if (strcmp(scn, "missing_rank") == 0) {
    scenario_missing_rank();
  } else if (strcmp(scn, "late_rank") == 0) {
    scenario_late_rank();
  } else if (strcmp(scn, "nranks_mismatch") == 0) {
    scenario_nranks_mismatch();
  } else if (strcmp(scn, "duplicate_rank") == 0) {
    scenario_duplicate_rank();
  } else if (strcmp(scn, "rank_out_of_range") == 0) {
    scenario_rank_out_of_range();
  } else if (strcmp(scn, "corrupted_id") == 0) {
    scenario_corrupted_id();
  } else {
    REQUIRE(0, "unknown scenario %s", scn);
  }
  char name[96];
  snprintf(name, sizeof name, "rendezvous %s", scn);
  return tu_finish(name);
}
