/* Shared by the one-process-per-rank benchmarks; see bench_world.h. */
#include "bench_world.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_cuda.h"
#include "symmcomm.h"

struct tw_rank *bw_start_rank(struct tw *w, const char *prog) {
  REQUIRE(w->nlocal == 1, "%s runs one rank per process (mode mp)", prog);
  char reason[512];
  REQUIRE(bc_load(reason, sizeof reason) == 0, "%s", reason);
  if (tw_init_comms(w) != symmSuccess) return NULL;
  tw_use(&w->r[0]);
  return &w->r[0];
}

bn_result bw_nccl_init_rank(struct tw *w, const struct tw_rank *r, bn_comm *comm) {
  bn_unique_id id;
  memset(&id, 0, sizeof id);
  bn_result rc = 0;
  if (r->rank == 0) rc = bn.GetUniqueId(&id);
  /* Every process joins the exchange even if rank 0 failed (a zero id then
   * fails every init, and no process waits for one that left). */
  for (size_t j = 0; j < sizeof id / 8; j++) {
    uint64_t v = 0, all[TW_MAX_RANKS];
    if (r->rank == 0) memcpy(&v, id.internal + 8 * j, 8);
    tw_exchange_u64(w, &v, all);
    memcpy(id.internal + 8 * j, &all[0], 8);
  }
  if (rc != 0) return rc;
  tw_use(r);
  return bn.CommInitRank(comm, w->nranks, id, r->rank);
}

void bw_header_start(const char *prog, const struct tw *w, const char *cmdline, const char *nccl_lib) {
  int v = 0, drv = 0, nv = 0;
  symmGetVersion(&v);
  TW_CU(bc.cuDriverGetVersion(&drv));
  if (bn.GetVersion) bn.GetVersion(&nv);
  char date[64] = "?", host[128] = "?";
  time_t now = time(NULL);
  struct tm tmv;
  if (localtime_r(&now, &tmv)) strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", &tmv);
  gethostname(host, sizeof host - 1);
  printf("# %s: symmcomm %d.%d.%d", prog, v / 10000, v / 100 % 100, v % 100);
  if (nv) printf(", NCCL %d.%d.%d", nv / 10000, nv / 100 % 100, nv % 100);
  printf(", CUDA driver %d.%d\n", drv / 1000, drv % 1000 / 10);
  printf("# command: %s mp --nranks=%d%s\n", prog, w->nranks, cmdline);
  printf("# date: %s, host: %s\n", date, host);
  if (nccl_lib) printf("# NCCL library: %s\n", nccl_lib);
}

void bw_header_ranks(const struct tw *w) {
  printf("# ranks: %d\n", w->nranks);
  if (w->shared)
    printf("# WARNING: %d ranks share %d GPU(s) (SYMM_TEST_SHARED_DEVICES=1, time-sliced): the results are checked,\n"
           "# WARNING: but every time below is meaningless\n",
           w->nranks, w->ngpus);
  for (int k = 0; k < w->nranks; k++) {
    CUdevice dev;
    char name[128] = "?";
    TW_CU(tu_cu.cuDeviceGet(&dev, k % w->ngpus));
    TW_CU(tu_cu.cuDeviceGetName(name, (int)sizeof name, dev));
    printf("#  rank %d: GPU %d, %s\n", k, k % w->ngpus, name);
  }
  fflush(stdout);
}

void bw_symm_ok(const char *file, int line, const struct tw_rank *r, symmResult_t rc, const char *what) {
  if (rc == symmSuccess) return;
  char m[1024];
  const char *msg = tu_last_error(r ? r->comm : NULL, m, sizeof m);
  tw_fail_at(file, line, r, "%s: %s: %s", what, tu_result_name(rc), msg ? msg : "");
  tu_exit_now();
}

void bw_nccl_ok(const char *file, int line, const struct tw_rank *r, bn_comm comm, bn_result rc, const char *what) {
  if (rc == 0) return;
  char m[1024];
  tw_fail_at(file, line, r, "%s: %s", what, bn_error(rc, comm, m, sizeof m));
  tu_exit_now();
}

int bw_has_arg(int argc, char **argv, const char *arg) {
  for (int i = 2; i < argc; i++)
    if (strcmp(argv[i], arg) == 0) return 1;
  return 0;
}

int bw_parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno || s[0] == '-') return -1;
  unsigned shift = 0;
  if (*end == 'k' || *end == 'K') shift = 10, end++;
  else if (*end == 'm' || *end == 'M') shift = 20, end++;
  else if (*end == 'g' || *end == 'G') shift = 30, end++;
  if (*end != '\0' || v == 0 || v > (1ull << 40) >> shift) return -1;
  *out = (size_t)(v << shift);
  return 0;
}
