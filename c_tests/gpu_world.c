/* The multi-rank harness of the GPU drivers; see gpu_world.h. */
#include "gpu_world.h"

#include <dirent.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kernels/tu_pattern.h"

#ifndef TU_KERNELS_FATBIN
#error "TU_KERNELS_FATBIN (path of the test kernels' fatbin) must be defined by the build"
#endif

static const char *mode_name(enum tw_mode m) {
  return m == TW_MP ? "mp" : m == TW_ALL ? "all" : "one";
}

/* ---- the process's world, watchdog and phase ------------------------------ */

static struct tw *g_tw;              /* the world of this process */
static const struct tw_spec *g_spec; /* what the driver is */
static char g_phase[TW_PHASE_BYTES] = "start-up";
static char g_wd_prefix[192] = "?"; /* "<name> <mode> n<N> rank R", made before the alarm can fire */
static unsigned g_limit_s;           /* the watchdog's limit */
static int g_finished;               /* the body returned normally (mp child) */

struct tw *tw_world(void) { return g_tw; }

double tw_scale(void) { return g_tw && g_tw->shared ? 4.0 : 1.0; }

const char *tw_current_phase(void) { return g_phase; }

void tw_progress(void) {
  if (g_spec && g_spec->stall && g_limit_s) alarm(g_limit_s);
}

void tw_phase(const char *fmt, ...) {
  char buf[sizeof g_phase];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(g_phase, buf, sizeof g_phase);
  if (g_tw && g_tw->mode == TW_MP && g_tw->sh && g_tw->nlocal == 1)
    memcpy(g_tw->sh->phase[g_tw->r[0].rank], buf, sizeof buf);
  tw_progress();
}

static void wd_write(const char *s) {
  ssize_t w = write(2, s, strlen(s));
  (void)w;
}

void tw_mark_dead(void) {
  if (g_tw && g_tw->mode == TW_MP && g_tw->sh && g_tw->nlocal == 1) {
    int expected = 0;
    __atomic_compare_exchange_n(&g_tw->sh->dead, &expected, g_tw->r[0].rank + 1, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
  }
}

int tw_peer_dead(void) {
  return g_tw && g_tw->mode == TW_MP && g_tw->sh && __atomic_load_n(&g_tw->sh->dead, __ATOMIC_ACQUIRE) != 0;
}

static void on_alarm(int sig) {
  (void)sig;
  wd_write("\nFAIL watchdog: ");
  wd_write(g_wd_prefix);
  wd_write(g_spec && g_spec->stall ? ": no progress within the time limit; stuck in phase: "
                                   : ": no end in sight (time limit passed); stuck in phase: ");
  wd_write(g_phase);
  wd_write("\n");
  tw_mark_dead();
  _exit(3);
}

static void at_exit_mark_dead(void) {
  if (!g_finished) tw_mark_dead();
}

static void watchdog_start(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  alarm(g_limit_s);
}

/* ---- messages ------------------------------------------------------------ */

static void prefix(const struct tw *tw, char *buf, size_t len) {
  if (!tw)
    snprintf(buf, len, "?");
  else if (tw->mode == TW_MP && tw->nlocal == 1)
    snprintf(buf, len, "%s mp n%d rank %d", tw->name, tw->nranks, tw->r[0].rank);
  else
    snprintf(buf, len, "%s %s n%d", tw->name, mode_name(tw->mode), tw->nranks);
}

void tw_log(const struct tw *tw, const char *fmt, ...) {
  char pre[160], body[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  prefix(tw ? tw : g_tw, pre, sizeof pre);
  printf("[%s] %s\n", pre, body);
  fflush(stdout);
}

void tw_fail_at(const char *file, int line, const struct tw_rank *r, const char *fmt, ...) {
  char pre[160], body[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  prefix(g_tw, pre, sizeof pre);
  if (r)
    tu_fail(file, line, "[%s] rank %d (device %d): %s", pre, r->rank, r->device, body);
  else
    tu_fail(file, line, "[%s] %s", pre, body);
}

int tw_symm_ok(const char *file, int line, const struct tw_rank *r, const char *expr, symmResult_t rc) {
  if (rc == symmSuccess) return 1;
  char msg[1024];
  const char *m = tu_last_error(r ? r->comm : NULL, msg, sizeof msg);
  tw_fail_at(file, line, r, "%s returned %s: %s (phase: %s)", expr, tu_result_name(rc), m ? m : "(NULL message)",
             g_phase);
  return 0;
}

int tw_expect_fail(const char *file, int line, const struct tw_rank *r, const char *expr, symmResult_t got,
                   symmResult_t want, symmComm_t where, const char *keyword) {
  char msg[1024];
  const char *m = tu_last_error(where, msg, sizeof msg);
  if (got != want) {
    tw_fail_at(file, line, r, "%s returned %s, expected %s (last error: %s)", expr, tu_result_name(got),
               tu_result_name(want), m ? m : "(NULL)");
    return 0;
  }
  if (keyword && !tu_contains_ci(m, keyword)) {
    tw_fail_at(file, line, r, "%s: message \"%s\" does not mention \"%s\"", expr, m ? m : "(NULL)", keyword);
    return 0;
  }
  return 1;
}

void tw_cuda_fatal(const char *file, int line, const char *expr, CUresult rc) {
  tw_fail_at(file, line, NULL, "CUDA call %s failed: %s (phase: %s)", expr, tu_cu_error(rc), g_phase);
  tu_exit_now();
}

/* ---- CUDA helpers ---------------------------------------------------------- */

void tw_sleep(double s) {
  if (s <= 0) return;
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void tw_use(const struct tw_rank *r) {
  CUresult rc = tu_cu.cuCtxSetCurrent(r->ctx);
  TW_REQUIRE(r, rc == 0, "cuCtxSetCurrent: %s", tu_cu_error(rc));
}

/* 0 idle, 1 busy after timeout_s, -1 failed (reported). `checked`: also
 * give up on an asynchronous error of r's communicator or a dead peer. */
static int poll_stream(const struct tw_rank *r, CUstream s, double timeout_s, int checked) {
  tw_use(r);
  const double start = tu_now();
  double next_check = start + 0.01, nap = 2e-6;
  for (;;) {
    CUresult rc = tu_cu.cuStreamQuery(s);
    if (rc == 0) return 0;
    if (rc != TU_CUDA_ERROR_NOT_READY) {
      tw_fail_at(__FILE__, __LINE__, r, "cuStreamQuery: %s (phase: %s)", tu_cu_error(rc), g_phase);
      return -1;
    }
    const double now = tu_now();
    if (checked && now >= next_check) {
      next_check = now + 0.01;
      if (r->comm) {
        symmResult_t ae = symmSuccess;
        symmResult_t q = symmCommGetAsyncError(r->comm, &ae);
        if (q != symmSuccess || ae != symmSuccess) {
          char msg[1024];
          const char *m = tu_last_error(r->comm, msg, sizeof msg);
          tw_fail_at(__FILE__, __LINE__, r,
                     "asynchronous error while waiting for the stream: symmCommGetAsyncError returned %s, "
                     "asyncError %s (last error: %s) (phase: %s)",
                     tu_result_name(q), tu_result_name(ae), m ? m : "(NULL)", g_phase);
          return -1;
        }
      }
      if (tw_peer_dead()) {
        tw_fail_at(__FILE__, __LINE__, r, "rank %d's process stopped early (see its messages) (phase: %s)",
                   __atomic_load_n(&g_tw->sh->dead, __ATOMIC_ACQUIRE) - 1, g_phase);
        return -1;
      }
    }
    if (now - start > timeout_s) return 1;
    tw_sleep(nap);
    if (nap < 200e-6) nap *= 2;
  }
}

int tw_stream_poll(const struct tw_rank *r, CUstream s, double timeout_s) { return poll_stream(r, s, timeout_s, 0); }

void tw_stream_wait_on(const struct tw_rank *r, CUstream s, double timeout_s, const char *what) {
  const double limit = timeout_s * tw_scale();
  int rc = poll_stream(r, s, limit, 1);
  TW_REQUIRE(r, rc != 1, "stream still busy after %.0f s: %s (phase: %s)", limit, what, g_phase);
  TW_REQUIRE(r, rc == 0, "stream wait failed: %s", what);
  tw_progress();
}

void tw_stream_wait(const struct tw_rank *r, double timeout_s, const char *what) {
  tw_stream_wait_on(r, r->stream, timeout_s, what);
}

void tw_sync_all(const struct tw *tw, double timeout_s, const char *what) {
  for (int i = 0; i < tw->nlocal; i++) tw_stream_wait(&tw->r[i], timeout_s, what);
}

/* The harness's own kernels: no async-error check (they also run after a
 * fault, see tw_check_context_usable). */
static void wait_plain(const struct tw_rank *r, double timeout_s, const char *what) {
  int rc = poll_stream(r, r->stream, timeout_s * tw_scale(), 0);
  TW_REQUIRE(r, rc != 1, "stream still busy after %.0f s: %s (phase: %s)", timeout_s * tw_scale(), what, g_phase);
  TW_REQUIRE(r, rc == 0, "stream failed: %s", what);
}

void tw_check_async(const struct tw *tw, const char *after) {
  for (int i = 0; i < tw->nlocal; i++) {
    const struct tw_rank *r = &tw->r[i];
    symmResult_t ae = symmSuccess;
    symmResult_t q = symmCommGetAsyncError(r->comm, &ae);
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    TW_CHECK(r, q == symmSuccess && ae == symmSuccess,
             "after %s: symmCommGetAsyncError returned %s, asyncError %s (last error: %s)", after, tu_result_name(q),
             tu_result_name(ae), m ? m : "(NULL)");
  }
}

void tw_launch(const struct tw_rank *r, CUfunction fn, uint64_t n, void **params, const char *what) {
  unsigned block = n ? 256 : 32;
  uint64_t blocks = n ? (n + block - 1) / block : 1;
  if (blocks > 4096) blocks = 4096;
  /* A driver whose spec does not load the test kernels has NULL handles
   * here, which cuLaunchKernel reports only as CUDA_ERROR_INVALID_HANDLE. */
  TW_REQUIRE(r, fn != NULL, "%s: the harness's test kernels are not loaded (the driver's tw_spec needs .kernels = 1)",
             what);
  tw_use(r);
  CUresult rc = tu_cu.cuLaunchKernel(fn, (unsigned)blocks, 1, 1, block, 1, 1, 0, r->stream, params, NULL);
  TW_REQUIRE(r, rc == 0, "cuLaunchKernel(%s): %s", what, tu_cu_error(rc));
}

static void reset_result(const struct tw_rank *r) {
  CUdeviceptr res = r->scratch;
  void *p[] = {&res};
  tw_launch(r, r->k.reset_result, 0, p, "tk_reset_result");
}

static struct tw_count read_result(const struct tw_rank *r, const char *what) {
  unsigned long long h[2];
  wait_plain(r, 120, what);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(h, r->scratch, sizeof h));
  return (struct tw_count){h[0], h[1]};
}

void tw_fill(const struct tw_rank *r, CUdeviceptr buf, uint64_t n, uint32_t prank, uint32_t salt, uint64_t idx0) {
  if (n == 0) return;
  CUdeviceptr b = buf;
  uint64_t nn = n, i0 = idx0;
  uint32_t pr = prank, s = salt;
  void *p[] = {&b, &nn, &pr, &s, &i0};
  tw_launch(r, r->k.fill, n, p, "tk_fill_pattern");
}

struct tw_count tw_verify(const struct tw_rank *r, CUdeviceptr buf, uint64_t n, uint32_t prank, uint32_t salt,
                          uint64_t idx0) {
  if (n == 0) return (struct tw_count){0, ~0ull};
  reset_result(r);
  CUdeviceptr b = buf, res = r->scratch;
  uint64_t nn = n, i0 = idx0;
  uint32_t pr = prank, s = salt;
  void *p[] = {&b, &nn, &pr, &s, &i0, &res};
  tw_launch(r, r->k.verify, n, p, "tk_verify_pattern");
  return read_result(r, "tk_verify_pattern");
}

struct tw_count tw_verify_table(const struct tw_rank *r, CUdeviceptr table, int peer, uint64_t offset, uint64_t n,
                                uint32_t prank, uint32_t salt, uint64_t idx0) {
  if (n == 0) return (struct tw_count){0, ~0ull};
  reset_result(r);
  CUdeviceptr t = table, res = r->scratch;
  uint64_t off = offset, nn = n, i0 = idx0;
  uint32_t pe = (uint32_t)peer, pr = prank, s = salt;
  void *p[] = {&t, &pe, &off, &nn, &pr, &s, &i0, &res};
  tw_launch(r, r->k.verify_table, n, p, "tk_verify_pattern_table");
  return read_result(r, "tk_verify_pattern_table");
}

struct tw_count tw_count_nonzero(const struct tw_rank *r, CUdeviceptr buf, uint64_t n) {
  if (n == 0) return (struct tw_count){0, ~0ull};
  reset_result(r);
  CUdeviceptr b = buf, res = r->scratch;
  uint64_t nn = n;
  void *p[] = {&b, &nn, &res};
  tw_launch(r, r->k.count_nonzero, n, p, "tk_count_nonzero");
  return read_result(r, "tk_count_nonzero");
}

void tw_store_u32(const struct tw_rank *r, CUdeviceptr ptr, uint32_t v) {
  CUdeviceptr a = ptr;
  uint32_t val = v;
  void *p[] = {&a, &val};
  tw_launch(r, r->k.store_u32, 0, p, "tk_store_u32");
}

/* scratch + 64: where the load kernels put their word. */
#define LOAD_SLOT 64

uint32_t tw_load_u32(const struct tw_rank *r, CUdeviceptr ptr) {
  CUdeviceptr a = ptr, out = r->scratch + LOAD_SLOT;
  void *p[] = {&a, &out};
  tw_launch(r, r->k.load_u32, 0, p, "tk_load_u32");
  wait_plain(r, 60, "tk_load_u32");
  uint32_t v = 0;
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(&v, out, sizeof v));
  return v;
}

uint32_t tw_load_u32_table(const struct tw_rank *r, CUdeviceptr table, int peer, uint64_t word) {
  CUdeviceptr t = table, out = r->scratch + LOAD_SLOT;
  uint32_t pe = (uint32_t)peer;
  uint64_t w = word;
  void *p[] = {&t, &pe, &w, &out};
  tw_launch(r, r->k.load_u32_table, 0, p, "tk_load_u32_table");
  wait_plain(r, 60, "tk_load_u32_table");
  uint32_t v = 0;
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(&v, out, sizeof v));
  return v;
}

size_t tw_host_verify(const uint8_t *host, size_t n, uint32_t prank, uint32_t salt, uint64_t idx0, size_t *first) {
  size_t bad = 0;
  *first = (size_t)-1;
  for (size_t i = 0; i < n; i++) {
    if (host[i] != tu_pattern_byte(prank, salt, idx0 + i)) {
      if (bad == 0) *first = i;
      bad++;
    }
  }
  return bad;
}

void tw_check_context_usable(const struct tw_rank *r, const char *after) {
  const size_t n = 1u << 20;
  uint8_t *h = malloc(n);
  TW_REQUIRE(r, h != NULL, "out of host memory");
  tw_use(r);
  CUdeviceptr d = 0;
  CUresult rc = tu_cu.cuMemAlloc(&d, n);
  TW_CHECK(r, rc == 0, "after %s: cuMemAlloc(1 MiB): %s", after, tu_cu_error(rc));
  if (rc != 0) {
    free(h);
    return;
  }
  for (size_t i = 0; i < n; i++) h[i] = tu_pattern_byte((uint32_t)r->rank, 777, i);
  rc = tu_upload(d, h, n);
  TW_CHECK(r, rc == 0, "after %s: tu_upload: %s", after, tu_cu_error(rc));
  memset(h, 0, n);
  rc = tu_cu.cuMemcpyDtoH(h, d, n);
  TW_CHECK(r, rc == 0, "after %s: cuMemcpyDtoH: %s", after, tu_cu_error(rc));
  size_t first;
  size_t bad = tw_host_verify(h, n, (uint32_t)r->rank, 777, 0, &first);
  TW_CHECK(r, bad == 0, "after %s: memcpy round trip: %zu bad bytes, first at %zu", after, bad, first);
  /* A kernel too: fill on the stream, check on the stream. */
  tw_fill(r, d, n, (uint32_t)r->rank, 778, 0);
  struct tw_count c = tw_verify(r, d, n, (uint32_t)r->rank, 778, 0);
  TW_CHECK(r, c.bad == 0, "after %s: fill + check kernels: %llu bad bytes", after, c.bad);
  rc = tu_cu.cuMemFree(d);
  TW_CHECK(r, rc == 0, "after %s: cuMemFree: %s", after, tu_cu_error(rc));
  free(h);
}

CUmodule tw_load_module(const struct tw_rank *r, const char *path, const char *env) {
  const char *e = env ? getenv(env) : NULL;
  if (e && e[0]) path = e;
  FILE *f = fopen(path, "rb");
  TW_REQUIRE(r, f != NULL, "cannot open the test kernels %s: %s (set %s to the fatbin's path)", path, strerror(errno),
             env ? env : "the path");
  TW_REQUIRE(r, fseek(f, 0, SEEK_END) == 0, "seek %s", path);
  long len = ftell(f);
  TW_REQUIRE(r, len > 0 && fseek(f, 0, SEEK_SET) == 0, "%s is empty or unreadable", path);
  size_t alloc = ((size_t)len + 63) / 64 * 64;
  void *img = aligned_alloc(64, alloc);
  TW_REQUIRE(r, img != NULL, "out of host memory");
  memset(img, 0, alloc);
  size_t got = fread(img, 1, (size_t)len, f);
  fclose(f);
  TW_REQUIRE(r, got == (size_t)len, "short read of %s (%zu of %ld bytes)", path, got, len);
  tw_use(r);
  CUmodule m = NULL;
  CUresult rc = tu_cu.cuModuleLoadData(&m, img);
  free(img);
  TW_REQUIRE(r, rc == 0, "cuModuleLoadData(%s) (sm_80/sm_90 + compute_90 PTX): %s", path, tu_cu_error(rc));
  return m;
}

CUfunction tw_function(const struct tw_rank *r, CUmodule m, const char *name) {
  CUfunction fn = NULL;
  CUresult rc = tu_cu.cuModuleGetFunction(&fn, m, name);
  TW_REQUIRE(r, rc == 0, "kernel %s missing from the test module: %s", name, tu_cu_error(rc));
  return fn;
}

/* ---- host coordination ------------------------------------------------------ */

static void check_peers_alive(struct tw *tw, const char *what) {
  int dead = __atomic_load_n(&tw->sh->dead, __ATOMIC_ACQUIRE);
  if (dead) {
    tw_fail_at(__FILE__, __LINE__, NULL, "%s: rank %d stopped early (see its messages); giving up", what, dead - 1);
    tu_exit_now();
  }
}

void tw_host_barrier(struct tw *tw, const char *what) {
  if (tw->mode != TW_MP) return;
  struct tw_shared *sh = tw->sh;
  char old_phase[sizeof g_phase];
  memcpy(old_phase, g_phase, sizeof g_phase);
  tw_phase("host barrier: %s", what);
  int gen = __atomic_load_n(&sh->bar_gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&sh->bar_count, 1, __ATOMIC_ACQ_REL) == tw->nranks) {
    __atomic_store_n(&sh->bar_count, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&sh->bar_gen, 1, __ATOMIC_RELEASE);
  } else {
    const double limit = tw->wait_s * tw_scale(), deadline = tu_now() + limit;
    double nap = 2e-6;
    while (__atomic_load_n(&sh->bar_gen, __ATOMIC_ACQUIRE) == gen) {
      check_peers_alive(tw, what);
      if (tu_now() > deadline) {
        tw_fail_at(__FILE__, __LINE__, NULL, "host barrier (%s): the other ranks did not arrive in %.0f s", what,
                   limit);
        tu_exit_now();
      }
      tw_sleep(nap);
      if (nap < 100e-6) nap *= 2;
    }
  }
  tw_phase("%s", old_phase);
}

void tw_flag_set(struct tw *tw, int idx, int value) {
  __atomic_store_n(&tw->sh->flag[idx], value, __ATOMIC_RELEASE);
}

int tw_flag_wait(struct tw *tw, int idx, int value, double timeout_s) {
  double deadline = tu_now() + timeout_s * tw_scale();
  while (__atomic_load_n(&tw->sh->flag[idx], __ATOMIC_ACQUIRE) != value) {
    if (tw_peer_dead() || tu_now() > deadline) return -1;
    tw_sleep(100e-6);
  }
  return 0;
}

void tw_others_wait_rank0(struct tw *tw, int idx, double timeout_s) {
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    if (r->rank == 0) continue;
    tw_phase("rank %d: waiting for rank 0", r->rank);
    TW_CHECK(r, tw_flag_wait(tw, idx, 1, timeout_s) == 0, "rank 0 did not finish its part");
    symmResult_t async = symmInternalError;
    TW_SYMM(r, symmCommGetAsyncError(r->comm, &async));
    TW_CHECK(r, async == symmSuccess, "rank %d launched nothing, yet its async error is %s (%s)", r->rank,
             tu_result_name(async), symmGetLastError(r->comm));
  }
}

void tw_exchange_u64(struct tw *tw, const uint64_t *v, uint64_t out[TW_MAX_RANKS]) {
  if (tw->mode != TW_MP) {
    for (int i = 0; i < tw->nlocal; i++) out[tw->r[i].rank] = v[i];
    return;
  }
  /* Slots alternate between rounds: a rank can be at most one round ahead
   * (the next round's barrier waits for everyone to finish reading). */
  const unsigned par = tw->xround++ & 1;
  __atomic_store_n(&tw->sh->xchg[par][tw->r[0].rank], v[0], __ATOMIC_RELAXED);
  tw_host_barrier(tw, "exchanging values");
  for (int k = 0; k < tw->nranks; k++) out[k] = __atomic_load_n(&tw->sh->xchg[par][k], __ATOMIC_RELAXED);
}

uint64_t tw_min_u64(struct tw *tw, const uint64_t *v) {
  uint64_t all[TW_MAX_RANKS], m = UINT64_MAX;
  tw_exchange_u64(tw, v, all);
  for (int k = 0; k < tw->nranks; k++)
    if (all[k] < m) m = all[k];
  return m;
}

/* ---- communicators ------------------------------------------------------------ */

void tw_next_id(struct tw *tw, symmUniqueId *id) {
  int round = ++tw->id_round;
  struct tw_shared *sh = tw->sh;
  if (tw->mode != TW_MP || tw->r[0].rank == 0) {
    symmResult_t rc = symmGetUniqueId(id);
    REQUIRE(rc == symmSuccess, "symmGetUniqueId: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
    if (tw->mode == TW_MP) {
      memcpy(&sh->id, id, sizeof *id);
      __atomic_store_n(&sh->id_round, round, __ATOMIC_RELEASE);
    }
    return;
  }
  const double limit = tw->wait_s * tw_scale(), deadline = tu_now() + limit;
  while (__atomic_load_n(&sh->id_round, __ATOMIC_ACQUIRE) < round) {
    check_peers_alive(tw, "waiting for rank 0's unique id");
    REQUIRE(tu_now() < deadline, "no unique id from rank 0 (round %d) after %.0f s", round, limit);
    tw_sleep(100e-6);
  }
  int got = __atomic_load_n(&sh->id_round, __ATOMIC_ACQUIRE);
  REQUIRE(got == round, "unique id rounds out of step: expected %d, rank 0 is at %d", round, got);
  memcpy(id, &sh->id, sizeof *id);
}

symmResult_t tw_init_comms(struct tw *tw) {
  tw_phase("communicator init");
  symmResult_t rc;
  if (tw->mode == TW_MP) {
    symmUniqueId id;
    tw_next_id(tw, &id);
    tw_use(&tw->r[0]);
    rc = symmCommInitRank(&tw->r[0].comm, tw->nranks, id, tw->r[0].rank);
  } else {
    symmComm_t comms[TW_MAX_RANKS];
    int devs[TW_MAX_RANKS];
    for (int i = 0; i < tw->nlocal; i++) devs[i] = tw->r[i].device;
    rc = symmCommInitAll(comms, tw->nlocal, devs);
    if (rc == symmSuccess)
      for (int i = 0; i < tw->nlocal; i++) tw->r[i].comm = comms[i];
  }
  if (rc != symmSuccess) {
    tw_fail_at(__FILE__, __LINE__, NULL, "%s: %s (%s)", tw->mode == TW_MP ? "symmCommInitRank" : "symmCommInitAll",
               tu_result_name(rc), symmGetLastError(NULL));
    for (int i = 0; i < tw->nlocal; i++) tw->r[i].comm = NULL;
    return rc;
  }
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    int count = -1, rank = -1, dev = -1;
    TW_SYMM(r, symmCommCount(r->comm, &count));
    TW_SYMM(r, symmCommUserRank(r->comm, &rank));
    TW_SYMM(r, symmCommCuDevice(r->comm, &dev));
    TW_CHECK(r, count == tw->nranks && rank == r->rank && dev == r->device,
             "communicator says count %d, rank %d, device %d", count, rank, dev);
  }
  return rc;
}

void tw_destroy_comms(struct tw *tw) {
  tw_phase("communicator destroy");
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    if (!r->comm) continue;
    symmResult_t rc = symmCommDestroy(r->comm);
    TW_CHECK(r, rc == symmSuccess, "symmCommDestroy: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
    r->comm = NULL;
  }
}

/* One collective host call on every local rank (k: 0 alloc, 1 free, 2
 * register), grouped when one thread drives several communicators. */
static symmResult_t collective_call(struct tw *tw, int k, const size_t *size, void *const *in, void **out) {
  const int grouped = tw->mode != TW_MP;
  symmResult_t first = grouped ? symmGroupStart() : symmSuccess;
  if (first != symmSuccess) return first;
  for (int i = 0; i < tw->nlocal; i++) {
    symmComm_t c = tw->r[i].comm;
    symmResult_t rc = k == 0   ? symmMemAlloc(c, size[i], &out[i])
                      : k == 1 ? symmMemFree(c, in[i])
                               : symmCommRegister(c, in[i], size[i], &out[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = grouped ? symmGroupEnd() : symmSuccess;
  return first != symmSuccess ? first : end;
}

symmResult_t tw_alloc(struct tw *tw, const size_t *size, void **ptr) { return collective_call(tw, 0, size, NULL, ptr); }

symmResult_t tw_free(struct tw *tw, void *const *ptr) { return collective_call(tw, 1, NULL, ptr, NULL); }

symmResult_t tw_register(struct tw *tw, void *const *buf, const size_t *size, void **handle) {
  return collective_call(tw, 2, size, buf, handle);
}

void tw_deregister(struct tw *tw, void *const *handle) {
  for (int i = 0; i < tw->nlocal; i++) TW_SYMM(&tw->r[i], symmCommDeregister(tw->r[i].comm, handle[i]));
}

/* ---- resources ------------------------------------------------------------------ */

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kb = strtol(line + 6, NULL, 10);
  fclose(f);
  return kb;
}

void tw_measure(const struct tw *tw, struct tw_res *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < tw->nlocal; i++) {
    size_t fr = 0, total = 0;
    tw_use(&tw->r[i]);
    CU_REQUIRE(tu_cu.cuMemGetInfo(&fr, &total));
    out->free_mem[i] = fr;
  }
  out->fds = count_dir("/proc/self/fd") - 1; /* minus the directory's own descriptor */
  out->threads = count_dir("/proc/self/task");
  out->heap_kb = -1;
#if defined(__GLIBC__)
  /* Free heap pages that malloc keeps (per-thread arenas, fragments) are not
   * a leak: hand them back first, and count what is still handed out. */
  malloc_trim(0);
#if __GLIBC_PREREQ(2, 33)
  struct mallinfo2 mi = mallinfo2();
  out->heap_kb = (long)((mi.uordblks + mi.hblkhd) / 1024);
#endif
#endif
  out->rss_kb = rss_kb();
}

void tw_measure_settled(struct tw *tw, const struct tw_res *base, double settle_s, struct tw_res *out) {
  double deadline = tu_now() + settle_s;
  for (;;) {
    tw_measure(tw, out);
    int ok = out->fds <= base->fds && out->threads <= base->threads;
    for (int i = 0; i < tw->nlocal; i++) ok &= out->free_mem[i] >= base->free_mem[i];
    if (ok || tu_now() > deadline) break;
    tw_sleep(0.05);
  }
  tw_host_barrier(tw, "measured");
}

/* ---- set-up and the main driver ------------------------------------------------- */

static void get_fn(struct tw_rank *r, CUfunction *fn, const char *name) { *fn = tw_function(r, r->k.module, name); }

static void setup_rank(struct tw *tw, struct tw_rank *r) {
  CUdevice dev;
  CU_REQUIRE(tu_cu.cuDeviceGet(&dev, r->device));
  CU_REQUIRE(tu_cu.cuDevicePrimaryCtxRetain(&r->ctx, dev));
  tw_use(r);
  CU_REQUIRE(tu_cu.cuStreamCreate(&r->stream, TU_CU_STREAM_NON_BLOCKING));
  CU_REQUIRE(tu_cu.cuStreamCreate(&r->stream2, TU_CU_STREAM_NON_BLOCKING));
  if (g_spec->kernels) {
    r->k.module = tw_load_module(r, TU_KERNELS_FATBIN, "SYMM_TEST_KERNELS");
    get_fn(r, &r->k.reset_result, "tk_reset_result");
    get_fn(r, &r->k.fill, "tk_fill_pattern");
    get_fn(r, &r->k.verify, "tk_verify_pattern");
    get_fn(r, &r->k.verify_table, "tk_verify_pattern_table");
    get_fn(r, &r->k.count_nonzero, "tk_count_nonzero");
    get_fn(r, &r->k.store_u32, "tk_store_u32");
    get_fn(r, &r->k.load_u32, "tk_load_u32");
    get_fn(r, &r->k.load_u32_table, "tk_load_u32_table");
    get_fn(r, &r->k.graph_step, "tk_graph_step");
    get_fn(r, &r->k.graph_check, "tk_graph_check");
    CU_REQUIRE(tu_cu.cuMemAlloc(&r->scratch, TW_SCRATCH_BYTES));
  }
  if (!g_spec->quiet) {
    char name[128] = "?";
    size_t fr = 0, total = 0;
    CU_REQUIRE(tu_cu.cuDeviceGetName(name, (int)sizeof name, dev));
    CU_REQUIRE(tu_cu.cuMemGetInfo(&fr, &total));
    tw_log(tw, "rank %d on device %d (%s): %.1f of %.1f GiB free", r->rank, r->device, name, fr / 1073741824.0,
           total / 1073741824.0);
  }
}

static void teardown_rank(struct tw *tw, struct tw_rank *r) {
  if (r->comm) {
    tw_log(tw, "rank %d: the body left its communicator; destroying it", r->rank);
    symmCommDestroy(r->comm);
    r->comm = NULL;
  }
  tw_use(r);
  /* Nothing of ours may still run: the streams are idle after a normal body. */
  if (tw_stream_poll(r, r->stream, 60) == 0 && tw_stream_poll(r, r->stream2, 60) == 0) {
    CU_REQUIRE(tu_cu.cuStreamDestroy(r->stream));
    CU_REQUIRE(tu_cu.cuStreamDestroy(r->stream2));
    if (g_spec->kernels) {
      CU_REQUIRE(tu_cu.cuMemFree(r->scratch));
      CU_REQUIRE(tu_cu.cuModuleUnload(r->k.module));
    }
  }
}

static void run_world(struct tw *tw) {
  char reason[512];
  prefix(tw, g_wd_prefix, sizeof g_wd_prefix);
  watchdog_start();
  REQUIRE(tu_cuda_load_ext(reason, sizeof reason) == 0, "%s", reason);
  CU_REQUIRE(tu_cu.cuInit(0));
  if (g_spec->process_init) g_spec->process_init(tw, g_spec->ctx);
  for (int i = 0; i < tw->nlocal; i++) setup_rank(tw, &tw->r[i]);
  double t0 = tu_now();
  tw_phase("test body");
  g_spec->body(tw, g_spec->ctx);
  tw_phase("teardown");
  for (int i = 0; i < tw->nlocal; i++) teardown_rank(tw, &tw->r[i]);
  alarm(0);
  if (!g_spec->quiet)
    tw_log(tw, "body took %.2f s; %d failed check(s) in this process", tu_now() - t0, tu_failures);
}

static void mp_child(int rank, void *ctx, struct tu_rank_result *out) {
  (void)ctx;
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct tw *tw = g_tw;
  tw->nlocal = 1;
  tw->lead = rank == 0;
  tw->r[0].rank = rank;
  tw->r[0].device = rank % tw->ngpus;
  tw->r[0].index = 0;
  atexit(at_exit_mark_dead);
  double t0 = tu_now();
  run_world(tw);
  g_finished = 1;
  out->elapsed = tu_now() - t0;
  out->code = tu_failures ? 1 : 0;
  out->count = tu_failures;
  snprintf(out->msg, sizeof out->msg, "%d failed check(s)", tu_failures);
}

static int mode_allowed(const char *modes, const char *m) {
  size_t n = strlen(m);
  for (const char *p = modes; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncmp(p, m, n) == 0) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

int tw_gpu_count(char *reason, size_t len) {
  static int probed, count;
  static char why[512];
  if (!probed) {
    count = tu_gpu_count(why, sizeof why);
    probed = 1;
  }
  snprintf(reason, len, "%s", why);
  return count;
}

int tw_shared_devices_allowed(void) {
  const char *s = getenv("SYMM_TEST_SHARED_DEVICES");
  return s && atoi(s) != 0;
}

/* A positive integer from the environment, or 0 when unset or not one. */
static long env_long(const char *name) {
  const char *s = getenv(name);
  if (!s || !s[0]) return 0;
  char *end;
  long v = strtol(s, &end, 10);
  return *end == '\0' && v > 0 ? v : 0;
}

static void *shared_map(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED, "mmap(%zu bytes): %s", bytes, strerror(errno));
  memset(p, 0, bytes);
  return p;
}

int tw_run(const struct tw_spec *spec, enum tw_mode mode, int nranks) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  static struct tw world;
  memset(&world, 0, sizeof world);
  world.name = spec->name;
  world.mode = mode;
  world.wait_s = 300;
  world.lead = 1;
  g_tw = &world;
  g_spec = spec;
  const char *m = mode_name(mode);

  char reason[512];
  int ngpus = tw_gpu_count(reason, sizeof reason);
  REQUIRE(ngpus >= 0, "GPU probe failed: %s", reason);
  if (ngpus == 0) tu_skip_no_gpu(reason);
  if (mode == TW_ONE) {
    nranks = 1;
  } else if (nranks == 0) {
    long want = env_long("SYMM_TEST_NRANKS");
    nranks = want ? (int)want : ngpus < 2 ? 2 : ngpus > TW_MAX_RANKS ? TW_MAX_RANKS : ngpus;
  }
  const int min_ranks = mode == TW_ONE || (mode == TW_MP && spec->mp_one_rank) ? 1 : 2;
  REQUIRE(nranks >= min_ranks && nranks <= TW_MAX_RANKS, "%s %s: %d ranks (%d to %d)", spec->name, m, nranks,
          min_ranks, TW_MAX_RANKS);
  if (spec->min_gpus && ngpus < spec->min_gpus)
    tu_skip("%s %s needs %d CUDA devices; %d visible", spec->name, m, spec->min_gpus, ngpus);
  if (nranks > ngpus && !tw_shared_devices_allowed())
    tu_skip("%s %s at %d ranks needs %d CUDA devices with peer access; %d visible (SYMM_TEST_SHARED_DEVICES=1 "
            "puts several ranks on one GPU, for correctness tests only)",
            spec->name, m, nranks, nranks, ngpus);
  world.nranks = nranks;
  world.ngpus = ngpus;
  world.shared = nranks > ngpus;

  /* Environment first: the library and the driver read it once, on first
   * use (in mp the children inherit it). Short defaults make a broken wait
   * fail in seconds; shared GPUs are time-sliced, so they get longer ones.
   * CTest or the caller may set others. */
  if (!spec->library_timeouts) {
    setenv("SYMM_TIMEOUT", world.shared ? "120" : "30", 0);
    setenv("SYMM_BOOTSTRAP_TIMEOUT", world.shared ? "120" : "30", 0);
  }
  if (world.shared) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  long wd = env_long("SYMM_TEST_WATCHDOG");
  double limit = wd ? (double)wd : spec->limit_s * tw_scale();
  g_limit_s = (unsigned)(limit + 0.5);

  world.sh = shared_map(sizeof(struct tw_shared));
  if (spec->user_bytes) world.user = shared_map(spec->user_bytes);
  if (!spec->quiet)
    printf("%s %s: %d rank(s) on %d CUDA device(s)%s; SYMM_TIMEOUT=%s SYMM_BOOTSTRAP_TIMEOUT=%s SYMM_CHECK=%s; "
           "watchdog %.0f s\n",
           spec->name, m, nranks, ngpus, world.shared ? " (shared devices: ranks r and r + ngpus share a GPU)" : "",
           getenv("SYMM_TIMEOUT") ? getenv("SYMM_TIMEOUT") : "(unset)",
           getenv("SYMM_BOOTSTRAP_TIMEOUT") ? getenv("SYMM_BOOTSTRAP_TIMEOUT") : "(unset)",
           getenv("SYMM_CHECK") ? getenv("SYMM_CHECK") : "(unset)", limit);

  double t0 = tu_now();
  if (mode == TW_MP) {
    struct tu_rank_result res[TW_MAX_RANKS];
    /* The children's watchdogs fire first; the harness kills later (a
     * stall watchdog has no total limit: a week). */
    tu_run_ranks(nranks, mp_child, NULL, spec->stall ? 7 * 86400.0 : limit + 20, res);
    for (int r = 0; r < nranks; r++) {
      char ph[TW_PHASE_BYTES];
      memcpy(ph, world.sh->phase[r], sizeof ph);
      ph[sizeof ph - 1] = '\0';
      if (res[r].code < 0)
        tu_fail(__FILE__, __LINE__, "[%s mp n%d] rank %d: %s (last phase: %s)", spec->name, nranks, r, res[r].msg, ph);
      else if (res[r].code != 0)
        tu_fail(__FILE__, __LINE__, "[%s mp n%d] rank %d: %s (see its FAIL lines above)", spec->name, nranks, r,
                res[r].msg);
      else if (!spec->quiet)
        printf("[%s mp n%d] rank %d: no failed checks (%.2f s)\n", spec->name, nranks, r, res[r].elapsed);
    }
  } else {
    world.nlocal = nranks;
    for (int i = 0; i < nranks; i++) {
      world.r[i].rank = i;
      world.r[i].device = i % ngpus;
      world.r[i].index = i;
    }
    run_world(&world);
  }
  if (spec->report) spec->report(&world, spec->ctx);
  char label[160];
  snprintf(label, sizeof label, "%s %s n%d", spec->name, m, nranks);
  if (spec->quiet && tu_failures == 0) return 0;
  printf("%s: total %.2f s\n", label, tu_now() - t0);
  return tu_finish(label);
}

int tw_main(const struct tw_spec *spec, int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *usage_opts = spec->usage ? spec->usage : "";
  REQUIRE(argc >= 2, "usage: %s <%s> [--nranks=N] %s", argv[0], spec->modes, usage_opts);
  const char *m = argv[1];
  REQUIRE(mode_allowed(spec->modes, m), "%s: unknown mode \"%s\" (expected one of %s)", spec->name, m, spec->modes);
  enum tw_mode mode = strcmp(m, "mp") == 0 ? TW_MP : strcmp(m, "all") == 0 ? TW_ALL : TW_ONE;
  int nranks = 0;
  for (int i = 2; i < argc; i++) {
    if (strncmp(argv[i], "--nranks=", 9) == 0) {
      char *end;
      long v = strtol(argv[i] + 9, &end, 10);
      REQUIRE(*end == '\0' && v >= 1 && v <= TW_MAX_RANKS, "--nranks: \"%s\" is not a rank count from 1 to %d",
              argv[i] + 9, TW_MAX_RANKS);
      nranks = (int)v;
    } else {
      /* The driver may have said what is wrong with a value it knows. */
      REQUIRE(spec->option && spec->option(argv[i], spec->ctx) == 0, "unknown option or bad value: %s (usage: %s <%s> "
              "[--nranks=N] %s)", argv[i], argv[0], spec->modes, usage_opts);
    }
  }
  return tw_run(spec, mode, nranks);
}
