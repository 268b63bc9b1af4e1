/* Shared part of the collective test drivers; see coll_util.h. */
#include "coll_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ---- watchdog, phase, messages -------------------------------------------- */

static char g_phase[320] = "start-up";
static struct cw *g_w;
static int g_finished;

void cw_phase(const char *fmt, ...) {
  char buf[sizeof g_phase];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(g_phase, buf, sizeof g_phase);
}

const char *cw_current_phase(void) { return g_phase; }

static void wd_write(const char *s) {
  ssize_t n = write(2, s, strlen(s));
  (void)n;
}

static void mark_dead(void) {
  if (g_w && g_w->mode == CW_MP && g_w->sh) __atomic_store_n(&g_w->sh->dead, g_w->r[0].rank + 1, __ATOMIC_RELEASE);
}

static void on_alarm(int sig) {
  (void)sig;
  wd_write("\nFAIL watchdog: ");
  if (g_w) {
    wd_write(g_w->name);
    wd_write(g_w->mode == CW_MP ? (g_w->r[0].rank == 0 ? " mp rank 0" : " mp rank 1") : " all");
  }
  wd_write(": the time limit passed; stuck in phase: ");
  wd_write(g_phase);
  wd_write("\n");
  mark_dead();
  _exit(3);
}

static void at_exit_mark_dead(void) {
  if (!g_finished) mark_dead();
}

static void prefix(char *buf, size_t len) {
  if (!g_w)
    snprintf(buf, len, "?");
  else if (g_w->mode == CW_MP)
    snprintf(buf, len, "%s mp rank %d", g_w->name, g_w->r[0].rank);
  else
    snprintf(buf, len, "%s all", g_w->name);
}

void cw_log(const struct cw *w, const char *fmt, ...) {
  (void)w;
  char pre[128], body[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  prefix(pre, sizeof pre);
  printf("[%s] %s\n", pre, body);
  fflush(stdout);
}

void cw_fail_at(const char *file, int line, const struct cw_rank *r, const char *fmt, ...) {
  char pre[128], body[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  prefix(pre, sizeof pre);
  if (r)
    tu_fail(file, line, "[%s] rank %d (device %d): %s", pre, r->rank, r->device, body);
  else
    tu_fail(file, line, "[%s] %s", pre, body);
}

int cw_symm_ok(const char *file, int line, const struct cw_rank *r, const char *expr, symmResult_t rc) {
  if (rc == symmSuccess) return 1;
  char msg[1024];
  const char *m = tu_last_error(r ? r->comm : NULL, msg, sizeof msg);
  cw_fail_at(file, line, r, "%s returned %s: %s (phase: %s)", expr, tu_result_name(rc), m ? m : "(NULL message)",
             g_phase);
  return 0;
}

void cw_cuda_fatal(const char *file, int line, const char *expr, CUresult rc) {
  cw_fail_at(file, line, NULL, "CUDA call %s failed: %s (phase: %s)", expr, tu_cu_error(rc), g_phase);
  tu_exit_now();
}

/* ---- extra driver API ------------------------------------------------------- */

struct cw_cuda_api cw_cu;

static void load_extra_api(void) {
  static int done;
  if (done) return;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != NULL, "dlopen(libcuda.so.1) for the extra driver entry points failed: %s", dlerror());
  const struct {
    const char *name;
    void *slot;
  } syms[] = {
      {"cuMemsetD8Async", &cw_cu.cuMemsetD8Async},
      {"cuMemsetD32Async", &cw_cu.cuMemsetD32Async},
      {"cuMemcpyHtoDAsync_v2", &cw_cu.cuMemcpyHtoDAsync},
      {"cuMemcpyDtoHAsync_v2", &cw_cu.cuMemcpyDtoHAsync},
      {"cuMemAllocHost_v2", &cw_cu.cuMemAllocHost},
      {"cuMemFreeHost", &cw_cu.cuMemFreeHost},
      {"cuEventCreate", &cw_cu.cuEventCreate},
      {"cuEventRecord", &cw_cu.cuEventRecord},
      {"cuEventQuery", &cw_cu.cuEventQuery},
      {"cuEventElapsedTime", &cw_cu.cuEventElapsedTime},
      {"cuEventDestroy_v2", &cw_cu.cuEventDestroy},
      {"cuStreamWaitEvent", &cw_cu.cuStreamWaitEvent},
      {"cuDeviceCanAccessPeer", &cw_cu.cuDeviceCanAccessPeer},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *sym = dlsym(lib, syms[i].name);
    REQUIRE(sym != NULL, "libcuda.so.1 lacks %s", syms[i].name);
    memcpy(syms[i].slot, &sym, sizeof sym);
  }
  done = 1;
}

/* ---- CUDA helpers ------------------------------------------------------------- */

static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void cw_use(const struct cw_rank *r) {
  CUresult rc = tu_cu.cuCtxSetCurrent(r->ctx);
  CW_REQUIRE(r, rc == 0, "cuCtxSetCurrent: %s", tu_cu_error(rc));
}

static int peer_dead(void) {
  return g_w && g_w->mode == CW_MP && __atomic_load_n(&g_w->sh->dead, __ATOMIC_ACQUIRE) != 0;
}

int cw_stream_poll(const struct cw_rank *r, CUstream s, double timeout_s) {
  cw_use(r);
  double start = tu_now(), next_check = start + 0.01;
  double nap = 2e-6;
  for (;;) {
    CUresult rc = tu_cu.cuStreamQuery(s);
    if (rc == 0) return 0;
    if (rc != TU_CUDA_ERROR_NOT_READY) {
      cw_fail_at(__FILE__, __LINE__, r, "cuStreamQuery: %s (phase: %s)", tu_cu_error(rc), g_phase);
      return -1;
    }
    double now = tu_now();
    if (now >= next_check) {
      next_check = now + 0.01;
      if (r->comm) {
        symmResult_t ae = symmSuccess;
        symmResult_t q = symmCommGetAsyncError(r->comm, &ae);
        if (q != symmSuccess || ae != symmSuccess) {
          char msg[1024];
          const char *m = tu_last_error(r->comm, msg, sizeof msg);
          cw_fail_at(__FILE__, __LINE__, r,
                     "asynchronous error while waiting for the stream: symmCommGetAsyncError returned %s, "
                     "asyncError %s (last error: %s) (phase: %s)",
                     tu_result_name(q), tu_result_name(ae), m ? m : "(NULL)", g_phase);
          return -1;
        }
      }
      if (peer_dead()) {
        cw_fail_at(__FILE__, __LINE__, r, "the other rank's process stopped early (see its messages) (phase: %s)",
                   g_phase);
        return -1;
      }
    }
    if (now - start > timeout_s) return 1;
    sleep_s(nap);
    if (nap < 200e-6) nap *= 2;
  }
}

void cw_stream_wait(const struct cw_rank *r, CUstream s, double timeout_s, const char *what) {
  int rc = cw_stream_poll(r, s, timeout_s);
  CW_REQUIRE(r, rc != 1, "stream still busy after %.0f s: %s (phase: %s)", timeout_s, what, g_phase);
  CW_REQUIRE(r, rc == 0, "stream wait failed: %s", what);
}

void cw_sync_all(const struct cw *w, double timeout_s, const char *what) {
  for (int i = 0; i < w->nlocal; i++) cw_stream_wait(&w->r[i], w->r[i].stream, timeout_s, what);
}

void cw_host_alloc(const struct cw_rank *r, struct cw_host *h, size_t bytes) {
  static int warned;
  memset(h, 0, sizeof *h);
  if (bytes == 0) bytes = 64;
  h->bytes = bytes;
  cw_use(r);
  CUresult rc = cw_cu.cuMemAllocHost(&h->p, bytes);
  if (rc == 0 && h->p) {
    h->pinned = 1;
    return;
  }
  if (!warned) {
    cw_log(g_w, "note: cuMemAllocHost(%zu bytes) failed (%s); using pageable memory (slower copies)", bytes,
           tu_cu_error(rc));
    warned = 1;
  }
  h->p = malloc(bytes);
  CW_REQUIRE(r, h->p != NULL, "out of host memory (%zu bytes)", bytes);
}

void cw_host_free(const struct cw_rank *r, struct cw_host *h) {
  if (!h->p) return;
  if (h->pinned) {
    cw_use(r);
    CW_CU(cw_cu.cuMemFreeHost(h->p));
  } else {
    free(h->p);
  }
  memset(h, 0, sizeof *h);
}

CUmodule cw_load_module(const struct cw_rank *r, const char *path) {
  const char *env = getenv("COLL_TEST_KERNELS");
  if (env && env[0]) path = env;
  FILE *f = fopen(path, "rb");
  CW_REQUIRE(r, f != NULL, "cannot open the test kernels %s: %s (set COLL_TEST_KERNELS to the fatbin's path)", path,
             strerror(errno));
  CW_REQUIRE(r, fseek(f, 0, SEEK_END) == 0, "seek %s", path);
  long len = ftell(f);
  CW_REQUIRE(r, len > 0 && fseek(f, 0, SEEK_SET) == 0, "%s is empty or unreadable", path);
  size_t alloc = ((size_t)len + 63) / 64 * 64;
  void *img = aligned_alloc(64, alloc);
  CW_REQUIRE(r, img != NULL, "out of host memory");
  memset(img, 0, alloc);
  size_t got = fread(img, 1, (size_t)len, f);
  fclose(f);
  CW_REQUIRE(r, got == (size_t)len, "short read of %s", path);
  cw_use(r);
  CUmodule m = NULL;
  CUresult rc = tu_cu.cuModuleLoadData(&m, img);
  free(img);
  CW_REQUIRE(r, rc == 0, "cuModuleLoadData(%s) (sm_80/sm_90 + compute_90 PTX): %s", path, tu_cu_error(rc));
  return m;
}

CUfunction cw_function(const struct cw_rank *r, CUmodule m, const char *name) {
  CUfunction fn = NULL;
  CUresult rc = tu_cu.cuModuleGetFunction(&fn, m, name);
  CW_REQUIRE(r, rc == 0, "kernel %s missing from the test module: %s", name, tu_cu_error(rc));
  return fn;
}

/* ---- host coordination ------------------------------------------------------- */

void cw_host_barrier(struct cw *w, const char *what) {
  if (w->mode != CW_MP) return;
  struct cw_shared *sh = w->sh;
  int gen = __atomic_load_n(&sh->bar_gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&sh->bar_count, 1, __ATOMIC_ACQ_REL) == w->nranks) {
    __atomic_store_n(&sh->bar_count, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&sh->bar_gen, 1, __ATOMIC_RELEASE);
    return;
  }
  double deadline = tu_now() + 300;
  while (__atomic_load_n(&sh->bar_gen, __ATOMIC_ACQUIRE) == gen) {
    if (peer_dead()) {
      cw_fail_at(__FILE__, __LINE__, NULL, "host barrier (%s): the other rank stopped early; giving up", what);
      tu_exit_now();
    }
    if (tu_now() > deadline) {
      cw_fail_at(__FILE__, __LINE__, NULL, "host barrier (%s): the other rank did not arrive in 300 s", what);
      tu_exit_now();
    }
    sleep_s(50e-6);
  }
}

uint64_t cw_min_u64(struct cw *w, const uint64_t *v) {
  uint64_t m = UINT64_MAX;
  if (w->mode != CW_MP) {
    for (int i = 0; i < w->nlocal; i++)
      if (v[i] < m) m = v[i];
    return m;
  }
  w->sh->xchg[w->r[0].rank] = v[0];
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  cw_host_barrier(w, "exchange");
  for (int i = 0; i < w->nranks; i++)
    if (w->sh->xchg[i] < m) m = w->sh->xchg[i];
  cw_host_barrier(w, "exchange done");
  return m;
}

/* ---- communicators -------------------------------------------------------------- */

static void next_id(struct cw *w, symmUniqueId *id) {
  int round = ++w->id_round;
  struct cw_shared *sh = w->sh;
  if (w->mode != CW_MP || w->r[0].rank == 0) {
    symmResult_t rc = symmGetUniqueId(id);
    REQUIRE(rc == symmSuccess, "symmGetUniqueId: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
    if (w->mode == CW_MP) {
      memcpy(&sh->id, id, sizeof *id);
      __atomic_store_n(&sh->id_round, round, __ATOMIC_RELEASE);
    }
    return;
  }
  double deadline = tu_now() + 120;
  while (__atomic_load_n(&sh->id_round, __ATOMIC_ACQUIRE) < round) {
    REQUIRE(!peer_dead(), "rank 0 stopped before making unique id #%d", round);
    REQUIRE(tu_now() < deadline, "no unique id #%d from rank 0 after 120 s", round);
    sleep_s(100e-6);
  }
  memcpy(id, &sh->id, sizeof *id);
}

symmResult_t cw_init_comms(struct cw *w) {
  cw_phase("communicator init");
  symmResult_t rc;
  if (w->mode == CW_MP) {
    symmUniqueId id;
    next_id(w, &id);
    cw_use(&w->r[0]);
    rc = symmCommInitRank(&w->r[0].comm, w->nranks, id, w->r[0].rank);
  } else {
    symmComm_t comms[CW_MAX_RANKS];
    int devs[CW_MAX_RANKS];
    for (int i = 0; i < w->nlocal; i++) devs[i] = w->r[i].device;
    rc = symmCommInitAll(comms, w->nlocal, devs);
    if (rc == symmSuccess)
      for (int i = 0; i < w->nlocal; i++) w->r[i].comm = comms[i];
  }
  if (rc != symmSuccess) {
    cw_fail_at(__FILE__, __LINE__, NULL, "%s: %s (%s)", w->mode == CW_MP ? "symmCommInitRank" : "symmCommInitAll",
               tu_result_name(rc), symmGetLastError(NULL));
    for (int i = 0; i < w->nlocal; i++) w->r[i].comm = NULL;
    return rc;
  }
  for (int i = 0; i < w->nlocal; i++) {
    struct cw_rank *r = &w->r[i];
    int count = -1, rank = -1, dev = -1;
    CW_SYMM(r, symmCommCount(r->comm, &count));
    CW_SYMM(r, symmCommUserRank(r->comm, &rank));
    CW_SYMM(r, symmCommCuDevice(r->comm, &dev));
    CW_CHECK(r, count == w->nranks && rank == r->rank && dev == r->device,
             "communicator says count %d, rank %d, device %d", count, rank, dev);
  }
  return rc;
}

void cw_destroy_comms(struct cw *w) {
  cw_phase("communicator destroy");
  for (int i = 0; i < w->nlocal; i++) {
    struct cw_rank *r = &w->r[i];
    if (!r->comm) continue;
    symmResult_t rc = symmCommDestroy(r->comm);
    CW_CHECK(r, rc == symmSuccess, "symmCommDestroy: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
    r->comm = NULL;
  }
}

symmResult_t cw_mem_alloc(struct cw *w, size_t size, void **ptr) {
  if (w->mode == CW_MP) return symmMemAlloc(w->r[0].comm, size, &ptr[0]);
  symmResult_t first = symmGroupStart();
  if (first != symmSuccess) return first;
  for (int i = 0; i < w->nlocal; i++) {
    symmResult_t rc = symmMemAlloc(w->r[i].comm, size, &ptr[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = symmGroupEnd();
  return first != symmSuccess ? first : end;
}

symmResult_t cw_mem_free(struct cw *w, void *const *ptr) {
  if (w->mode == CW_MP) return symmMemFree(w->r[0].comm, ptr[0]);
  symmResult_t first = symmGroupStart();
  if (first != symmSuccess) return first;
  for (int i = 0; i < w->nlocal; i++) {
    symmResult_t rc = symmMemFree(w->r[i].comm, ptr[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = symmGroupEnd();
  return first != symmSuccess ? first : end;
}

symmResult_t cw_register(struct cw *w, void *const *buf, size_t size, void **handle) {
  if (w->mode == CW_MP) return symmCommRegister(w->r[0].comm, buf[0], size, &handle[0]);
  symmResult_t first = symmGroupStart();
  if (first != symmSuccess) return first;
  for (int i = 0; i < w->nlocal; i++) {
    symmResult_t rc = symmCommRegister(w->r[i].comm, buf[i], size, &handle[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = symmGroupEnd();
  return first != symmSuccess ? first : end;
}

void cw_deregister(struct cw *w, void *const *handle) {
  for (int i = 0; i < w->nlocal; i++) CW_SYMM(&w->r[i], symmCommDeregister(w->r[i].comm, handle[i]));
}

void cw_check_async(const struct cw *w, const char *after) {
  for (int i = 0; i < w->nlocal; i++) {
    const struct cw_rank *r = &w->r[i];
    symmResult_t ae = symmSuccess;
    symmResult_t q = symmCommGetAsyncError(r->comm, &ae);
    char msg[1024];
    const char *m = tu_last_error(r->comm, msg, sizeof msg);
    CW_CHECK(r, q == symmSuccess && ae == symmSuccess,
             "after %s: symmCommGetAsyncError returned %s, asyncError %s (last error: %s)", after, tu_result_name(q),
             tu_result_name(ae), m ? m : "(NULL)");
  }
}

/* ---- buffer classes ---------------------------------------------------------------- */

const char *const cw_class_name[CW_NCLASSES] = {"staged", "registered", "symmetric"};

void cw_buf_alloc(struct cw *w, struct cw_buf *b, enum cw_class cls, size_t bytes) {
  memset(b, 0, sizeof *b);
  b->cls = cls;
  b->bytes = bytes;
  cw_phase("allocating a %s buffer of %zu bytes", cw_class_name[cls], bytes);
  if (cls == CW_SYMMETRIC) {
    void *p[CW_MAX_RANKS] = {0};
    symmResult_t rc = cw_mem_alloc(w, bytes, p);
    for (int i = 0; i < w->nlocal; i++) {
      CW_REQUIRE(&w->r[i], rc == symmSuccess && p[i], "symmMemAlloc(%zu bytes): %s (%s)", bytes, tu_result_name(rc),
                 symmGetLastError(w->r[i].comm));
      b->p[i] = (CUdeviceptr)(uintptr_t)p[i];
    }
    return;
  }
  for (int i = 0; i < w->nlocal; i++) {
    cw_use(&w->r[i]);
    CUresult rc = tu_cu.cuMemAlloc(&b->p[i], bytes);
    CW_REQUIRE(&w->r[i], rc == 0, "cuMemAlloc(%zu bytes): %s", bytes, tu_cu_error(rc));
  }
  if (cls == CW_REGISTERED) {
    void *p[CW_MAX_RANKS];
    for (int i = 0; i < w->nlocal; i++) p[i] = (void *)(uintptr_t)b->p[i];
    symmResult_t rc = cw_register(w, p, bytes, b->handle);
    for (int i = 0; i < w->nlocal; i++)
      CW_REQUIRE(&w->r[i], rc == symmSuccess, "symmCommRegister(%zu bytes): %s (%s)", bytes, tu_result_name(rc),
                 symmGetLastError(w->r[i].comm));
  }
}

void cw_buf_free(struct cw *w, struct cw_buf *b) {
  if (!b->bytes) return;
  cw_phase("freeing a %s buffer", cw_class_name[b->cls]);
  if (b->cls == CW_SYMMETRIC) {
    void *p[CW_MAX_RANKS];
    for (int i = 0; i < w->nlocal; i++) p[i] = (void *)(uintptr_t)b->p[i];
    symmResult_t rc = cw_mem_free(w, p);
    for (int i = 0; i < w->nlocal; i++)
      CW_CHECK(&w->r[i], rc == symmSuccess, "symmMemFree: %s (%s)", tu_result_name(rc),
               symmGetLastError(w->r[i].comm));
  } else {
    if (b->cls == CW_REGISTERED) cw_deregister(w, b->handle);
    for (int i = 0; i < w->nlocal; i++) {
      cw_use(&w->r[i]);
      CUresult rc = tu_cu.cuMemFree(b->p[i]);
      CW_CHECK(&w->r[i], rc == 0, "cuMemFree: %s", tu_cu_error(rc));
    }
  }
  memset(b, 0, sizeof *b);
}

/* ---- element types ----------------------------------------------------------------- */

const struct cw_dtype_info cw_dt[CW_NDTYPES] = {
    {"int8", 1, 0, 1},     {"uint8", 1, 0, 0},    {"int32", 4, 0, 1},    {"uint32", 4, 0, 0},
    {"int64", 8, 0, 1},    {"uint64", 8, 0, 0},   {"float16", 2, 1, 1},  {"float32", 4, 1, 1},
    {"float64", 8, 1, 1},  {"bfloat16", 2, 1, 1}, {"fp8_e4m3", 1, 1, 1}, {"fp8_e5m2", 1, 1, 1},
};
const char *const cw_op_name[CW_NOPS] = {"sum", "prod", "max", "min", "avg"};

static float bits_to_f32(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static uint32_t f32_to_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}
static double bits_to_f64(uint64_t b) {
  double d;
  memcpy(&d, &b, 8);
  return d;
}
static uint64_t f64_to_bits(double d) {
  uint64_t b;
  memcpy(&b, &d, 8);
  return b;
}

/* A small binary float format: mbits mantissa bits, ebits exponent bits,
 * `bias`; `ieee` formats reserve the top exponent for inf/NaN (fp16, bf16,
 * e5m2), e4m3 does not (only S.1111.111 is NaN). */
struct small_fmt {
  int mbits, ebits, bias, ieee;
  double maxfin;
  uint32_t maxfin_bits, inf_bits;
};
static const struct small_fmt F16 = {10, 5, 15, 1, 65504.0, 0x7bffu, 0x7c00u};
static const struct small_fmt BF16 = {7, 8, 127, 1, 3.38953138925153547590470800371487866880e38, 0x7f7fu, 0x7f80u};
static const struct small_fmt E4M3 = {3, 4, 7, 0, 448.0, 0x7eu, 0x7fu /* NaN: no inf */};
static const struct small_fmt E5M2 = {2, 5, 15, 1, 57344.0, 0x7bu, 0x7cu};

static double small_decode(const struct small_fmt *f, uint32_t h) {
  uint32_t sign = (h >> (f->mbits + f->ebits)) & 1u;
  uint32_t e = (h >> f->mbits) & ((1u << f->ebits) - 1);
  uint32_t m = h & ((1u << f->mbits) - 1);
  double v;
  if (f->ieee && e == (1u << f->ebits) - 1)
    v = m ? NAN : INFINITY;
  else if (!f->ieee && e == (1u << f->ebits) - 1 && m == (1u << f->mbits) - 1)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  else
    v = ldexp((double)(m | (1u << f->mbits)), (int)e - f->bias - f->mbits);
  return sign ? -v : v;
}

/* Round-to-nearest-even of x into the format; `sat`: out-of-range values
 * (and infinities) become the largest finite value, else infinity. */
static uint32_t small_encode(const struct small_fmt *f, double x, int sat) {
  uint32_t sbit = (signbit(x) ? 1u : 0u) << (f->mbits + f->ebits);
  double a = fabs(x);
  if (isnan(x)) return sbit | (f->ieee ? f->inf_bits | (1u << (f->mbits - 1)) : 0x7fu);
  if (isinf(a)) return sbit | (sat ? f->maxfin_bits : f->inf_bits);
  if (a == 0) return sbit;
  int ex;
  (void)frexp(a, &ex);
  int E = ex - 1; /* a in [2^E, 2^(E+1)) */
  const int emin = 1 - f->bias;
  if (E < emin) E = emin;
  double n = rint(ldexp(a, f->mbits - E)); /* exact scaling; rint rounds half to even */
  if (n >= ldexp(1.0, f->mbits + 1)) {     /* rounded up into the next binade */
    E += 1;
    n = ldexp(n, -1);
  }
  double val = ldexp(n, E - f->mbits);
  if (val > f->maxfin) return sbit | (sat ? f->maxfin_bits : f->inf_bits);
  uint32_t ni = (uint32_t)n;
  if (ni < (1u << f->mbits)) return sbit | ni; /* subnormal (E == emin) */
  return sbit | ((uint32_t)(E + f->bias) << f->mbits) | (ni - (1u << f->mbits));
}

/* Decode tables (filled once by tables_init, before any thread starts). */
static float tab_f16[65536], tab_e4m3[256], tab_e5m2[256];
static int tables_ready;

static void tables_init(void) {
  if (tables_ready) return;
  for (uint32_t h = 0; h < 65536; h++) tab_f16[h] = (float)small_decode(&F16, h);
  for (uint32_t h = 0; h < 256; h++) {
    tab_e4m3[h] = (float)small_decode(&E4M3, h);
    tab_e5m2[h] = (float)small_decode(&E5M2, h);
  }
  tables_ready = 1;
}

float cw_f16_to_float(uint32_t h) { return tables_ready ? tab_f16[h & 0xffff] : (float)small_decode(&F16, h & 0xffff); }
float cw_bf16_to_float(uint32_t h) { return bits_to_f32((h & 0xffff) << 16); }
float cw_e4m3_to_float(uint32_t h) { return tables_ready ? tab_e4m3[h & 0xff] : (float)small_decode(&E4M3, h & 0xff); }
float cw_e5m2_to_float(uint32_t h) { return tables_ready ? tab_e5m2[h & 0xff] : (float)small_decode(&E5M2, h & 0xff); }
uint32_t cw_float_to_f16(float x) { return small_encode(&F16, x, 0); }
uint32_t cw_float_to_bf16(float x) { return small_encode(&BF16, x, 0); }
uint32_t cw_float_to_e4m3(float x) { return small_encode(&E4M3, x, 1); }
uint32_t cw_float_to_e5m2(float x) { return small_encode(&E5M2, x, 1); }

static int64_t sext(uint64_t v, int bits) {
  if (bits == 64) return (int64_t)v;
  uint64_t m = 1ull << (bits - 1);
  v &= (1ull << bits) - 1;
  return (int64_t)((v ^ m) - m);
}

double cw_value(int dt, uint64_t v) {
  switch (dt) {
    case symmInt8: return (double)sext(v, 8);
    case symmUint8: return (double)(v & 0xff);
    case symmInt32: return (double)sext(v, 32);
    case symmUint32: return (double)(v & 0xffffffffu);
    case symmInt64: return (double)(int64_t)v;
    case symmUint64: return (double)v;
    case symmFloat16: return cw_f16_to_float((uint32_t)v);
    case symmFloat32: return bits_to_f32((uint32_t)v);
    case symmFloat64: return bits_to_f64(v);
    case symmBfloat16: return cw_bf16_to_float((uint32_t)v);
    case symmFloat8e4m3: return cw_e4m3_to_float((uint32_t)v);
    default: return cw_e5m2_to_float((uint32_t)v);
  }
}

const char *cw_render(int dt, uint64_t v, char *buf, size_t len) {
  int sz = cw_dt[dt].size;
  uint64_t mask = sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1;
  v &= mask;
  if (cw_dt[dt].is_float)
    snprintf(buf, len, "0x%0*llx (%.9g)", 2 * sz, (unsigned long long)v, cw_value(dt, v));
  else if (cw_dt[dt].is_signed)
    snprintf(buf, len, "0x%0*llx (%lld)", 2 * sz, (unsigned long long)v, (long long)sext(v, 8 * sz));
  else
    snprintf(buf, len, "0x%0*llx (%llu)", 2 * sz, (unsigned long long)v, (unsigned long long)v);
  return buf;
}

static float dec_small(int dt, uint64_t v) {
  switch (dt) {
    case symmFloat16: return cw_f16_to_float((uint32_t)v);
    case symmBfloat16: return cw_bf16_to_float((uint32_t)v);
    case symmFloat8e4m3: return cw_e4m3_to_float((uint32_t)v);
    default: return cw_e5m2_to_float((uint32_t)v);
  }
}
static uint32_t enc_small(int dt, float x) {
  switch (dt) {
    case symmFloat16: return cw_float_to_f16(x);
    case symmBfloat16: return cw_float_to_bf16(x);
    case symmFloat8e4m3: return cw_float_to_e4m3(x);
    default: return cw_float_to_e5m2(x);
  }
}

/* One combine step exactly as the kernels' combine<OP>(acc, x): acc first. */
static float comb_f(int op, float a, float b) {
  switch (op) {
    case symmSum:
    case symmAvg: return a + b;
    case symmProd: return a * b;
    case symmMax: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}
static double comb_d(int op, double a, double b) {
  switch (op) {
    case symmSum:
    case symmAvg: return a + b;
    case symmProd: return a * b;
    case symmMax: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

uint64_t cw_reduce(int dt, int op, const uint64_t *vals, int n) {
  if (cw_dt[dt].is_float) {
    if (dt == symmFloat64) {
      double acc = bits_to_f64(vals[0]);
      for (int r = 1; r < n; r++) acc = comb_d(op, acc, bits_to_f64(vals[r]));
      if (op == symmAvg) acc = acc / (double)n;
      return f64_to_bits(acc);
    }
    float acc = dt == symmFloat32 ? bits_to_f32((uint32_t)vals[0]) : dec_small(dt, vals[0]);
    for (int r = 1; r < n; r++)
      acc = comb_f(op, acc, dt == symmFloat32 ? bits_to_f32((uint32_t)vals[r]) : dec_small(dt, vals[r]));
    if (op == symmAvg) acc = acc / (float)n;
    return dt == symmFloat32 ? f32_to_bits(acc) : enc_small(dt, acc);
  }
  const int bits = 8 * cw_dt[dt].size;
  const uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  const int sgn = cw_dt[dt].is_signed;
  uint64_t acc = vals[0] & mask;
  for (int r = 1; r < n; r++) {
    uint64_t x = vals[r] & mask;
    switch (op) {
      case symmSum:
      case symmAvg: acc = (acc + x) & mask; break;
      case symmProd: acc = (acc * x) & mask; break;
      case symmMax:
        if (sgn ? sext(acc, bits) < sext(x, bits) : acc < x) acc = x;
        break;
      default:
        if (sgn ? sext(acc, bits) > sext(x, bits) : acc > x) acc = x;
        break;
    }
  }
  if (op == symmAvg) acc = sgn ? (uint64_t)(sext(acc, bits) / (int64_t)n) & mask : (acc / (uint64_t)n) & mask;
  return acc;
}

int cw_compare(int dt, uint64_t got, uint64_t expected) {
  const int sz = cw_dt[dt].size;
  const uint64_t mask = sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1;
  got &= mask;
  expected &= mask;
  if (got == expected) return 0;
  if (!cw_dt[dt].is_float) return 2;
  double g = cw_value(dt, got), e = cw_value(dt, expected);
  if (isnan(g) || isnan(e) || isinf(g) || isinf(e)) return 2;
  double rel, abs_min;
  switch (dt) {
    case symmFloat16: rel = ldexp(1, -10); abs_min = ldexp(1, -24); break;
    case symmBfloat16: rel = ldexp(1, -7); abs_min = ldexp(1, -133); break;
    case symmFloat8e4m3: rel = ldexp(1, -3); abs_min = ldexp(1, -9); break;
    case symmFloat8e5m2: rel = ldexp(1, -2); abs_min = ldexp(1, -16); break;
    case symmFloat32: rel = ldexp(1, -22); abs_min = ldexp(1, -149); break;
    default: rel = ldexp(1, -50); abs_min = ldexp(1, -1074); break;
  }
  double tol = fabs(e) * rel;
  if (tol < abs_min) tol = abs_min;
  return fabs(g - e) <= tol ? 1 : 2;
}

/* ---- random inputs --------------------------------------------------------------------- */

uint64_t cw_gen(int dt, uint64_t seed, int r, uint64_t j) {
  uint64_t x = cw_mix64(seed ^ ((uint64_t)(r + 1) * 0xd1b54a32d192ed03ull) ^ (j * 0x8cb92ba72f3d8dd7ull));
  switch (dt) {
    case symmInt8:
    case symmUint8: return x & 0xff;
    case symmInt32:
    case symmUint32: return x & 0xffffffffu;
    case symmInt64:
    case symmUint64: return x;
    case symmFloat16: {
      uint64_t h = x & 0xffff;
      if (((h >> 10) & 0x1f) == 0x1f) h &= ~0x4000ull; /* inf/NaN -> a finite exponent */
      return h;
    }
    case symmBfloat16: { /* sign, exponent 2^-20 .. 2^20, 7 random mantissa bits */
      uint64_t e = 127 - 20 + (x >> 16) % 41;
      return ((x >> 15) & 1) << 15 | e << 7 | (x & 0x7f);
    }
    case symmFloat32: { /* sign, exponent 2^-30 .. 2^30, 23 random mantissa bits */
      uint64_t e = 127 - 30 + (x >> 40) % 61;
      return ((x >> 63) & 1) << 31 | e << 23 | (x & 0x7fffff);
    }
    case symmFloat64: { /* sign, exponent 2^-60 .. 2^60, 52 random mantissa bits */
      uint64_t y = cw_mix64(x);
      uint64_t e = 1023 - 60 + (y >> 8) % 121;
      return (y & 1) << 63 | e << 52 | (x & 0xfffffffffffffull);
    }
    case symmFloat8e4m3: {
      uint64_t b = x & 0xff;
      if ((b & 0x7f) == 0x7f) b ^= 1; /* NaN -> +-448 */
      return b;
    }
    default: {
      uint64_t b = x & 0xff;
      if (((b >> 2) & 0x1f) == 0x1f) b &= ~0x40ull; /* inf/NaN -> a finite exponent */
      return b;
    }
  }
}

uint64_t cw_pick_seed(void) {
  const char *s = getenv("COLL_SEED");
  if (s && s[0]) return strtoull(s, NULL, 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return cw_mix64((uint64_t)ts.tv_sec * 1000000007ull + (uint64_t)ts.tv_nsec + (uint64_t)getpid());
}

/* ---- parallel for -------------------------------------------------------------------------- */

static int g_threads;

int cw_threads(void) {
  if (g_threads) return g_threads;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  /* mp: two rank processes share the machine. */
  int procs = g_w && g_w->mode == CW_MP ? g_w->nranks : 1;
  n /= procs;
  if (n < 1) n = 1;
  if (n > CW_MAX_THREADS) n = CW_MAX_THREADS;
  g_threads = (int)n;
  return g_threads;
}

struct par_job {
  cw_range_fn fn;
  void *ctx;
  size_t lo, hi;
  int tid;
};

static void *par_thread(void *arg) {
  struct par_job *j = arg;
  j->fn(j->lo, j->hi, j->tid, j->ctx);
  return NULL;
}

void cw_par_for(size_t n, cw_range_fn fn, void *ctx) {
  int nt = cw_threads();
  if (n < (1u << 16) || nt == 1) {
    fn(0, n, 0, ctx);
    return;
  }
  pthread_t th[CW_MAX_THREADS];
  struct par_job jobs[CW_MAX_THREADS];
  int started[CW_MAX_THREADS] = {0};
  size_t per = (n + (size_t)nt - 1) / (size_t)nt;
  for (int t = 0; t < nt; t++) {
    size_t lo = per * (size_t)t, hi = lo + per;
    if (lo > n) lo = n;
    if (hi > n) hi = n;
    jobs[t] = (struct par_job){fn, ctx, lo, hi, t};
    if (t > 0 && pthread_create(&th[t], NULL, par_thread, &jobs[t]) == 0) started[t] = 1;
  }
  /* This thread does part 0, and the parts whose thread did not start. */
  for (int t = 0; t < nt; t++)
    if (t == 0 || !started[t]) fn(jobs[t].lo, jobs[t].hi, t, ctx);
  for (int t = 1; t < nt; t++)
    if (started[t]) pthread_join(th[t], NULL);
}

/* ---- set-up and main ----------------------------------------------------------------------- */

static double g_limit;
static cw_body_fn g_body, g_report;
static void *g_ctx;

static void setup_rank(struct cw_rank *r) {
  CUdevice dev;
  CW_CU(tu_cu.cuDeviceGet(&dev, r->device));
  CW_CU(tu_cu.cuDevicePrimaryCtxRetain(&r->ctx, dev));
  cw_use(r);
  CW_CU(tu_cu.cuStreamCreate(&r->stream, TU_CU_STREAM_NON_BLOCKING));
  CW_CU(tu_cu.cuStreamCreate(&r->stream2, TU_CU_STREAM_NON_BLOCKING));
}

static void teardown_rank(struct cw *w, struct cw_rank *r) {
  if (r->comm) {
    cw_log(w, "rank %d: the body left its communicator; destroying it", r->rank);
    symmCommDestroy(r->comm);
    r->comm = NULL;
  }
  cw_use(r);
  if (cw_stream_poll(r, r->stream, 60) == 0 && cw_stream_poll(r, r->stream2, 60) == 0) {
    CW_CU(tu_cu.cuStreamDestroy(r->stream));
    CW_CU(tu_cu.cuStreamDestroy(r->stream2));
  }
}

static void run_world(struct cw *w) {
  char reason[512];
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  alarm((unsigned)(g_limit + 0.5));
  REQUIRE(tu_cuda_load_ext(reason, sizeof reason) == 0, "%s", reason);
  load_extra_api();
  tables_init();
  CW_CU(tu_cu.cuInit(0));
  for (int i = 0; i < w->nlocal; i++) setup_rank(&w->r[i]);
  cw_phase("test body");
  g_body(w, g_ctx);
  cw_phase("teardown");
  for (int i = 0; i < w->nlocal; i++) teardown_rank(w, &w->r[i]);
  alarm(0);
}

static void mp_child(int rank, void *ctx, struct tu_rank_result *out) {
  (void)ctx;
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct cw *w = g_w;
  w->nlocal = 1;
  w->r[0].rank = rank;
  w->r[0].device = rank % w->ngpus;
  w->r[0].index = 0;
  atexit(at_exit_mark_dead);
  double t0 = tu_now();
  run_world(w);
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

int cw_main(const char *name, const char *modes, int argc, char **argv, double limit_s, cw_body_fn body,
            cw_body_fn report, void *ctx) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  REQUIRE(argc >= 2, "usage: %s <%s> [options]", argv[0], modes);
  const char *m = argv[1];
  REQUIRE(mode_allowed(modes, m), "%s: unknown mode \"%s\" (expected one of %s)", name, m, modes);
  static struct cw world;
  world.name = name;
  world.mode = strcmp(m, "mp") == 0 ? CW_MP : CW_ALL;
  world.nranks = 2;
  world.argc = argc - 2;
  world.argv = argv + 2;
  g_w = &world;
  g_limit = limit_s;
  g_body = body;
  g_report = report;
  g_ctx = ctx;

  /* The library reads its environment once, on first use; short defaults
   * make a broken wait fail in seconds (CTest may set others). */
  setenv("SYMM_TIMEOUT", "30", 0);
  setenv("SYMM_BOOTSTRAP_TIMEOUT", "30", 0);

  char reason[512];
  int ngpus = tu_gpu_count(reason, sizeof reason);
  REQUIRE(ngpus >= 0, "GPU probe failed: %s", reason);
  if (ngpus == 0) tu_skip_no_gpu(reason);
  if (ngpus < world.nranks) tu_skip("%s %s needs 2 CUDA devices; %d visible", name, m, ngpus);
  world.ngpus = ngpus;
  printf("%s %s: %d CUDA device(s); SYMM_TIMEOUT=%s SYMM_BOOTSTRAP_TIMEOUT=%s SYMM_CHECK=%s; limit %.0f s\n", name,
         m, ngpus, getenv("SYMM_TIMEOUT"), getenv("SYMM_BOOTSTRAP_TIMEOUT"),
         getenv("SYMM_CHECK") ? getenv("SYMM_CHECK") : "(unset)", limit_s);

  void *page = mmap(NULL, sizeof(struct cw_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED, "mmap: %s", strerror(errno));
  memset(page, 0, sizeof(struct cw_shared));
  world.sh = page;
  double t0 = tu_now();
  if (world.mode == CW_MP) {
    struct tu_rank_result res[CW_MAX_RANKS];
    /* The children's watchdogs fire at limit_s; the harness kills later. */
    tu_run_ranks(world.nranks, mp_child, NULL, limit_s + 20, res);
    for (int r = 0; r < world.nranks; r++) {
      if (res[r].code < 0)
        tu_fail(__FILE__, __LINE__, "[%s mp] rank %d: %s", name, r, res[r].msg);
      else if (res[r].code != 0)
        tu_fail(__FILE__, __LINE__, "[%s mp] rank %d: %s (see its FAIL lines above)", name, r, res[r].msg);
      else
        printf("[%s mp] rank %d: no failed checks (%.2f s)\n", name, r, res[r].elapsed);
    }
  } else {
    world.nlocal = world.nranks;
    for (int i = 0; i < world.nlocal; i++) {
      world.r[i].rank = i;
      world.r[i].device = i;
      world.r[i].index = i;
    }
    run_world(&world);
  }
  if (report) report(&world, ctx);
  printf("%s %s: total %.2f s\n", name, m, tu_now() - t0);
  char label[128];
  snprintf(label, sizeof label, "%s %s", name, m);
  return tu_finish(label);
}
