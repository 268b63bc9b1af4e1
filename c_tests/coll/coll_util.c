/* Shared part of the collective test drivers; see coll_util.h. */
#include "coll_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
      {"cuMemcpyDtoDAsync_v2", &cw_cu.cuMemcpyDtoDAsync},
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

/* ---- page-locked host memory ---------------------------------------------------- */

void cw_host_alloc(const struct tw_rank *r, struct cw_host *h, size_t bytes) {
  static int warned;
  memset(h, 0, sizeof *h);
  if (bytes == 0) bytes = 64;
  h->bytes = bytes;
  tw_use(r);
  CUresult rc = cw_cu.cuMemAllocHost(&h->p, bytes);
  if (rc == 0 && h->p) {
    h->pinned = 1;
    return;
  }
  if (!warned) {
    tw_log(NULL, "note: cuMemAllocHost(%zu bytes) failed (%s); using pageable memory (slower copies)", bytes,
           tu_cu_error(rc));
    warned = 1;
  }
  h->p = malloc(bytes);
  TW_REQUIRE(r, h->p != NULL, "out of host memory (%zu bytes)", bytes);
}

void cw_host_free(const struct tw_rank *r, struct cw_host *h) {
  if (!h->p) return;
  if (h->pinned) {
    tw_use(r);
    TW_CU(cw_cu.cuMemFreeHost(h->p));
  } else {
    free(h->p);
  }
  memset(h, 0, sizeof *h);
}

/* ---- buffer classes ---------------------------------------------------------------- */

const char *const cw_class_name[CW_NCLASSES] = {"staged", "registered", "symmetric"};

void cw_buf_alloc(struct tw *w, struct cw_buf *b, enum cw_class cls, size_t bytes) {
  memset(b, 0, sizeof *b);
  b->cls = cls;
  b->bytes = bytes;
  tw_phase("allocating a %s buffer of %zu bytes", cw_class_name[cls], bytes);
  size_t sizes[TW_MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) sizes[i] = bytes;
  if (cls == CW_SYMMETRIC) {
    void *p[TW_MAX_RANKS] = {0};
    symmResult_t rc = tw_alloc(w, sizes, p);
    for (int i = 0; i < w->nlocal; i++) {
      TW_REQUIRE(&w->r[i], rc == symmSuccess && p[i], "symmMemAlloc(%zu bytes): %s (%s)", bytes, tu_result_name(rc),
                 symmGetLastError(w->r[i].comm));
      b->p[i] = (CUdeviceptr)(uintptr_t)p[i];
    }
    return;
  }
  for (int i = 0; i < w->nlocal; i++) {
    tw_use(&w->r[i]);
    CUresult rc = tu_cu.cuMemAlloc(&b->p[i], bytes);
    TW_REQUIRE(&w->r[i], rc == 0, "cuMemAlloc(%zu bytes): %s", bytes, tu_cu_error(rc));
  }
  if (cls == CW_REGISTERED) {
    void *p[TW_MAX_RANKS];
    for (int i = 0; i < w->nlocal; i++) p[i] = (void *)(uintptr_t)b->p[i];
    symmResult_t rc = tw_register(w, p, sizes, b->handle);
    for (int i = 0; i < w->nlocal; i++)
      TW_REQUIRE(&w->r[i], rc == symmSuccess, "symmCommRegister(%zu bytes): %s (%s)", bytes, tu_result_name(rc),
                 symmGetLastError(w->r[i].comm));
  }
}

void cw_buf_free(struct tw *w, struct cw_buf *b) {
  if (!b->bytes) return;
  tw_phase("freeing a %s buffer", cw_class_name[b->cls]);
  if (b->cls == CW_SYMMETRIC) {
    void *p[TW_MAX_RANKS];
    for (int i = 0; i < w->nlocal; i++) p[i] = (void *)(uintptr_t)b->p[i];
    symmResult_t rc = tw_free(w, p);
    for (int i = 0; i < w->nlocal; i++)
      TW_CHECK(&w->r[i], rc == symmSuccess, "symmMemFree: %s (%s)", tu_result_name(rc),
               symmGetLastError(w->r[i].comm));
  } else {
    if (b->cls == CW_REGISTERED) tw_deregister(w, b->handle);
    for (int i = 0; i < w->nlocal; i++) {
      tw_use(&w->r[i]);
      CUresult rc = tu_cu.cuMemFree(b->p[i]);
      TW_CHECK(&w->r[i], rc == 0, "cuMemFree: %s", tu_cu_error(rc));
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
  /* mp: the rank processes share the machine. */
  const struct tw *w = tw_world();
  int procs = w && w->mode == TW_MP ? w->nranks : 1;
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

/* ---- per-process set-up ---------------------------------------------------------------------- */

void cw_process_init(struct tw *tw, void *ctx) {
  (void)tw;
  (void)ctx;
  load_extra_api();
  tables_init();
}

double cw_short_timeout(const char *dflt) {
  setenv("SYMM_TIMEOUT", dflt, 0);
  const double t = atof(getenv("SYMM_TIMEOUT"));
  return t > 0 ? t : atof(dflt);
}

void cw_abort(struct tw_rank *r, const char *after) {
  tw_phase("rank %d: abort after %s", r->rank, after);
  symmResult_t rc = symmCommAbort(r->comm);
  TW_CHECK(r, rc == symmSuccess, "symmCommAbort: %s (%s)", tu_result_name(rc), symmGetLastError(NULL));
  r->comm = NULL;
}

void cw_refused(struct tw_rank *r, const char *what, symmResult_t rc, symmResult_t want, const char *says) {
  char msg[1024];
  const char *m = tu_last_error(r->comm, msg, sizeof msg);
  TW_CHECK(r, rc == want, "%s: %s, expected %s", what, tu_result_name(rc), tu_result_name(want));
  TW_CHECK(r, tu_contains_ci(m, says), "%s: the message does not say \"%s\": %s", what, says, m ? m : "(NULL)");
}
