/* The shared part of the symmetric-memory GPU tests; see gpu_world.h. */
#include "gpu_world.h"

#include <dirent.h>
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

/* ---- watchdog and phase ------------------------------------------------- */

static char g_phase[256] = "start-up";
static struct tw *g_tw;   /* the world of this process */
static int g_finished;    /* the body returned normally (mp child) */

void tw_phase(const char *fmt, ...) {
  char buf[sizeof g_phase];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(g_phase, buf, sizeof g_phase);
}

static void wd_write(const char *s) {
  ssize_t w = write(2, s, strlen(s));
  (void)w;
}

static void mark_dead(void) {
  if (g_tw && g_tw->mode == TW_MP && g_tw->sh)
    __atomic_store_n(&g_tw->sh->dead, g_tw->r[0].rank + 1, __ATOMIC_RELEASE);
}

static void on_alarm(int sig) {
  (void)sig;
  wd_write("\nFAIL watchdog: ");
  if (g_tw) {
    wd_write(g_tw->name);
    wd_write(" ");
    wd_write(mode_name(g_tw->mode));
  }
  if (g_tw && g_tw->mode == TW_MP) wd_write(g_tw->r[0].rank == 0 ? " rank 0" : " rank 1");
  wd_write(": no end in sight; stuck in phase: ");
  wd_write(g_phase);
  wd_write("\n");
  mark_dead();
  _exit(3);
}

static void at_exit_mark_dead(void) {
  if (!g_finished) mark_dead();
}

static void watchdog_start(double limit_s) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  alarm((unsigned)(limit_s + 0.5));
}

/* ---- messages ------------------------------------------------------------ */

static void prefix(const struct tw *tw, char *buf, size_t len) {
  if (!tw) {
    snprintf(buf, len, "?");
  } else if (tw->mode == TW_MP) {
    snprintf(buf, len, "%s mp rank %d", tw->name, tw->r[0].rank);
  } else {
    snprintf(buf, len, "%s %s", tw->name, mode_name(tw->mode));
  }
}

void tw_log(const struct tw *tw, const char *fmt, ...) {
  char pre[128], body[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  prefix(tw, pre, sizeof pre);
  printf("[%s] %s\n", pre, body);
  fflush(stdout);
}

void tw_fail_at(const char *file, int line, const struct tw_rank *r, const char *fmt, ...) {
  char pre[128], body[2048];
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
  tw_fail_at(file, line, r, "%s returned %s: %s", expr, tu_result_name(rc), m ? m : "(NULL message)");
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

int tw_stream_poll(const struct tw_rank *r, double timeout_s) {
  tw_use(r);
  double deadline = tu_now() + timeout_s;
  for (;;) {
    CUresult rc = tu_cu.cuStreamQuery(r->stream);
    if (rc == 0) return 0;
    if (rc != TU_CUDA_ERROR_NOT_READY) {
      tw_fail_at(__FILE__, __LINE__, r, "cuStreamQuery: %s (phase: %s)", tu_cu_error(rc), g_phase);
      return -1;
    }
    if (tu_now() > deadline) return 1;
    tw_sleep(20e-6);
  }
}

void tw_stream_wait(const struct tw_rank *r, double timeout_s, const char *what) {
  int rc = tw_stream_poll(r, timeout_s);
  TW_REQUIRE(r, rc != 1, "stream still busy after %.0f s: %s (phase: %s)", timeout_s, what, g_phase);
  TW_REQUIRE(r, rc == 0, "stream failed: %s", what);
}

void tw_sync_all(const struct tw *tw, double timeout_s, const char *what) {
  for (int i = 0; i < tw->nlocal; i++) tw_stream_wait(&tw->r[i], timeout_s, what);
}

void tw_launch(const struct tw_rank *r, CUfunction fn, uint64_t n, void **params, const char *what) {
  unsigned block = n ? 256 : 32;
  uint64_t blocks = n ? (n + block - 1) / block : 1;
  if (blocks > 4096) blocks = 4096;
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
  tw_stream_wait(r, 120, what);
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
  tw_stream_wait(r, 60, "tk_load_u32");
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
  tw_stream_wait(r, 60, "tk_load_u32_table");
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
  rc = tu_cu.cuMemcpyHtoD(d, h, n);
  TW_CHECK(r, rc == 0, "after %s: cuMemcpyHtoD: %s", after, tu_cu_error(rc));
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
    double deadline = tu_now() + 120;
    while (__atomic_load_n(&sh->bar_gen, __ATOMIC_ACQUIRE) == gen) {
      check_peers_alive(tw, what);
      if (tu_now() > deadline) {
        tw_fail_at(__FILE__, __LINE__, NULL, "host barrier (%s): the other rank did not arrive in 120 s", what);
        tu_exit_now();
      }
      tw_sleep(100e-6);
    }
  }
  memcpy(g_phase, old_phase, sizeof g_phase);
}

void tw_flag_set(struct tw *tw, int idx, int value) {
  __atomic_store_n(&tw->sh->flag[idx], value, __ATOMIC_RELEASE);
}

int tw_flag_wait(struct tw *tw, int idx, int value, double timeout_s) {
  double deadline = tu_now() + timeout_s;
  while (__atomic_load_n(&tw->sh->flag[idx], __ATOMIC_ACQUIRE) != value) {
    if (__atomic_load_n(&tw->sh->dead, __ATOMIC_ACQUIRE) || tu_now() > deadline) return -1;
    tw_sleep(100e-6);
  }
  return 0;
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
  double deadline = tu_now() + 120;
  while (__atomic_load_n(&sh->id_round, __ATOMIC_ACQUIRE) < round) {
    check_peers_alive(tw, "waiting for rank 0's unique id");
    REQUIRE(tu_now() < deadline, "no unique id from rank 0 (round %d) after 120 s", round);
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

symmResult_t tw_alloc(struct tw *tw, const size_t *size, void **ptr) {
  if (tw->mode == TW_MP) return symmMemAlloc(tw->r[0].comm, size[0], &ptr[0]);
  symmResult_t first = symmGroupStart();
  if (first != symmSuccess) return first;
  for (int i = 0; i < tw->nlocal; i++) {
    symmResult_t rc = symmMemAlloc(tw->r[i].comm, size[i], &ptr[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = symmGroupEnd();
  return first != symmSuccess ? first : end;
}

symmResult_t tw_free(struct tw *tw, void *const *ptr) {
  if (tw->mode == TW_MP) return symmMemFree(tw->r[0].comm, ptr[0]);
  symmResult_t first = symmGroupStart();
  if (first != symmSuccess) return first;
  for (int i = 0; i < tw->nlocal; i++) {
    symmResult_t rc = symmMemFree(tw->r[i].comm, ptr[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = symmGroupEnd();
  return first != symmSuccess ? first : end;
}

symmResult_t tw_register(struct tw *tw, void *const *buf, const size_t *size, void **handle) {
  if (tw->mode == TW_MP) return symmCommRegister(tw->r[0].comm, buf[0], size[0], &handle[0]);
  symmResult_t first = symmGroupStart();
  if (first != symmSuccess) return first;
  for (int i = 0; i < tw->nlocal; i++) {
    symmResult_t rc = symmCommRegister(tw->r[i].comm, buf[i], size[i], &handle[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = symmGroupEnd();
  return first != symmSuccess ? first : end;
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
  out->rss_kb = rss_kb();
}

void tw_measure_settled(const struct tw *tw, const struct tw_res *base, double settle_s, struct tw_res *out) {
  double deadline = tu_now() + settle_s;
  for (;;) {
    tw_measure(tw, out);
    int ok = out->fds <= base->fds && out->threads <= base->threads;
    for (int i = 0; i < tw->nlocal; i++) ok &= out->free_mem[i] >= base->free_mem[i];
    if (ok || tu_now() > deadline) return;
    tw_sleep(0.05);
  }
}

/* ---- set-up and the main driver ------------------------------------------------- */

static void *g_fatbin;

static void load_fatbin(void) {
  if (g_fatbin) return;
  const char *env = getenv("SYMM_TEST_KERNELS");
  const char *path = env && env[0] ? env : TU_KERNELS_FATBIN;
  FILE *f = fopen(path, "rb");
  REQUIRE(f != NULL, "cannot open the test kernels %s: %s (set SYMM_TEST_KERNELS to its path)", path,
          strerror(errno));
  REQUIRE(fseek(f, 0, SEEK_END) == 0, "seek %s", path);
  long len = ftell(f);
  REQUIRE(len > 0 && fseek(f, 0, SEEK_SET) == 0, "%s is empty or unreadable", path);
  size_t alloc = ((size_t)len + 63) / 64 * 64;
  void *img = aligned_alloc(64, alloc);
  REQUIRE(img != NULL, "out of host memory");
  memset(img, 0, alloc);
  size_t got = fread(img, 1, (size_t)len, f);
  fclose(f);
  REQUIRE(got == (size_t)len, "short read of %s (%zu of %ld bytes)", path, got, len);
  g_fatbin = img;
}

static void get_fn(struct tw_rank *r, CUfunction *fn, const char *name) {
  CUresult rc = tu_cu.cuModuleGetFunction(fn, r->k.module, name);
  TW_REQUIRE(r, rc == 0, "kernel %s missing from the test module: %s", name, tu_cu_error(rc));
}

static void setup_rank(struct tw *tw, struct tw_rank *r) {
  CUdevice dev;
  CU_REQUIRE(tu_cu.cuDeviceGet(&dev, r->device));
  CU_REQUIRE(tu_cu.cuDevicePrimaryCtxRetain(&r->ctx, dev));
  tw_use(r);
  char name[128] = "?";
  CU_REQUIRE(tu_cu.cuDeviceGetName(name, (int)sizeof name, dev));
  CUresult rc = tu_cu.cuModuleLoadData(&r->k.module, g_fatbin);
  TW_REQUIRE(r, rc == 0, "loading the test kernels (sm_80/sm_90 + compute_90 PTX): %s", tu_cu_error(rc));
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
  CU_REQUIRE(tu_cu.cuStreamCreate(&r->stream, TU_CU_STREAM_NON_BLOCKING));
  CU_REQUIRE(tu_cu.cuMemAlloc(&r->scratch, TW_SCRATCH_BYTES));
  size_t fr = 0, total = 0;
  CU_REQUIRE(tu_cu.cuMemGetInfo(&fr, &total));
  tw_log(tw, "rank %d on device %d (%s): %.1f of %.1f GiB free", r->rank, r->device, name, fr / 1073741824.0,
         total / 1073741824.0);
}

static void teardown_rank(struct tw *tw, struct tw_rank *r) {
  if (r->comm) {
    tw_log(tw, "rank %d: the test left its communicator; destroying it", r->rank);
    symmCommDestroy(r->comm);
    r->comm = NULL;
  }
  tw_use(r);
  /* Nothing of ours may still run: the stream is idle after a normal body. */
  if (tw_stream_poll(r, 60) == 0) {
    CU_REQUIRE(tu_cu.cuStreamDestroy(r->stream));
    CU_REQUIRE(tu_cu.cuMemFree(r->scratch));
    CU_REQUIRE(tu_cu.cuModuleUnload(r->k.module));
  }
}

static double g_limit;
static tw_body_fn g_body;
static void *g_body_ctx;

static void run_world(struct tw *tw) {
  char reason[512];
  watchdog_start(g_limit);
  REQUIRE(tu_cuda_load_ext(reason, sizeof reason) == 0, "%s", reason);
  CU_REQUIRE(tu_cu.cuInit(0));
  load_fatbin();
  for (int i = 0; i < tw->nlocal; i++) setup_rank(tw, &tw->r[i]);
  double t0 = tu_now();
  tw_phase("test body");
  g_body(tw, g_body_ctx);
  tw_phase("teardown");
  for (int i = 0; i < tw->nlocal; i++) teardown_rank(tw, &tw->r[i]);
  alarm(0);
  tw_log(tw, "body took %.2f s; %d failed check(s) in this process", tu_now() - t0, tu_failures);
}

static void mp_child(int rank, void *ctx, struct tu_rank_result *out) {
  (void)ctx;
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct tw *tw = g_tw;
  tw->nlocal = 1;
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

int tw_main(const char *name, const char *modes, int argc, char **argv, double limit_s, tw_body_fn body,
            void *ctx) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  REQUIRE(argc >= 2, "usage: %s <%s>", argv[0], modes);
  const char *m = argv[argc - 1];
  REQUIRE(mode_allowed(modes, m), "%s: unknown mode \"%s\" (expected one of %s)", name, m, modes);
  static struct tw world;
  world.name = name;
  world.mode = strcmp(m, "mp") == 0 ? TW_MP : strcmp(m, "all") == 0 ? TW_ALL : TW_ONE;
  world.nranks = world.mode == TW_ONE ? 1 : 2;
  g_tw = &world;
  g_limit = limit_s;
  g_body = body;
  g_body_ctx = ctx;

  /* Environment first: the library reads it once, on first use (in mp the
   * children inherit it). Short defaults so that a broken wait fails in
   * seconds, not minutes; CTest or the caller may set others. */
  setenv("SYMM_TIMEOUT", "30", 0);
  setenv("SYMM_BOOTSTRAP_TIMEOUT", "30", 0);

  char reason[512];
  int ngpus = tu_gpu_count(reason, sizeof reason);
  REQUIRE(ngpus >= 0, "GPU probe failed: %s", reason);
  if (ngpus == 0) tu_skip_no_gpu(reason);
  if (ngpus < world.nranks)
    tu_skip("%s %s needs %d CUDA devices with peer access; %d visible", name, m, world.nranks, ngpus);
  world.ngpus = ngpus;
  printf("%s %s: %d CUDA device(s); SYMM_TIMEOUT=%s SYMM_BOOTSTRAP_TIMEOUT=%s; limit %.0f s\n", name, m, ngpus,
         getenv("SYMM_TIMEOUT"), getenv("SYMM_BOOTSTRAP_TIMEOUT"), limit_s);

  if (world.mode == TW_MP) {
    void *page = mmap(NULL, sizeof(struct tw_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(page != MAP_FAILED, "mmap: %s", strerror(errno));
    memset(page, 0, sizeof(struct tw_shared));
    world.sh = page;
    struct tu_rank_result res[TW_MAX_RANKS];
    /* The children's watchdogs fire at limit_s; the harness kills later. */
    tu_run_ranks(world.nranks, mp_child, NULL, limit_s + 15, res);
    for (int r = 0; r < world.nranks; r++) {
      if (res[r].code < 0)
        tu_fail(__FILE__, __LINE__, "[%s mp] rank %d: %s", name, r, res[r].msg);
      else if (res[r].code != 0)
        tu_fail(__FILE__, __LINE__, "[%s mp] rank %d: %s (see its FAIL lines above)", name, r, res[r].msg);
      else
        printf("[%s mp] rank %d: passed in %.2f s\n", name, r, res[r].elapsed);
    }
  } else {
    static struct tw_shared private_sh;
    world.sh = &private_sh;
    world.nlocal = world.nranks;
    for (int i = 0; i < world.nlocal; i++) {
      world.r[i].rank = i;
      world.r[i].device = i;
      world.r[i].index = i;
    }
    run_world(&world);
  }
  char label[128];
  snprintf(label, sizeof label, "%s %s", name, m);
  return tu_finish(label);
}
