/* Host side of symm_bench's data check; see bench_data.h. */
#include "bench_data.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const struct bd_type bd_types[BD_NUM_TYPES] = {
    {"int8", "char", "i8", 0, 1, BD_SIGNED, BD_FMT_NONE},
    {"uint8", "u8", NULL, 1, 1, BD_UNSIGNED, BD_FMT_NONE},
    {"int32", "int", "i32", 2, 4, BD_SIGNED, BD_FMT_NONE},
    {"uint32", "u32", NULL, 3, 4, BD_UNSIGNED, BD_FMT_NONE},
    {"int64", "i64", NULL, 4, 8, BD_SIGNED, BD_FMT_NONE},
    {"uint64", "u64", NULL, 5, 8, BD_UNSIGNED, BD_FMT_NONE},
    {"fp16", "half", "float16", 6, 2, BD_FLOAT, BD_FMT_F16},
    {"fp32", "float", "float32", 7, 4, BD_FLOAT, BD_FMT_F32},
    {"fp64", "double", "float64", 8, 8, BD_FLOAT, BD_FMT_F64},
    {"bf16", "bfloat16", NULL, 9, 2, BD_FLOAT, BD_FMT_BF16},
    {"fp8e4m3", "f8e4m3", "e4m3", 10, 1, BD_FLOAT, BD_FMT_E4M3},
    {"fp8e5m2", "f8e5m2", "e5m2", 11, 1, BD_FLOAT, BD_FMT_E5M2},
};

const struct bd_type *bd_type_by_name(const char *name) {
  for (int i = 0; i < BD_NUM_TYPES; i++) {
    const struct bd_type *t = &bd_types[i];
    if (strcasecmp(name, t->name) == 0 || (t->alias1 && strcasecmp(name, t->alias1) == 0) ||
        (t->alias2 && strcasecmp(name, t->alias2) == 0))
      return t;
  }
  return NULL;
}

static const char *const op_names[BD_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

const char *bd_op_name(int op) {
  return op >= 0 && op < BD_NUM_OPS ? op_names[op] : NULL;
}

int bd_op_by_name(const char *name) {
  for (int i = 0; i < BD_NUM_OPS; i++)
    if (strcasecmp(name, op_names[i]) == 0) return i;
  return -1;
}

/* ---- small floats ---------------------------------------------------------- */

struct mini {
  int ebits, mbits, bias;
  int fn; /* e4m3 "FN": no infinities, only S.1111.111 is NaN */
};

static const struct mini *mini_of(enum bd_fmt f) {
  static const struct mini f16 = {5, 10, 15, 0}, bf16 = {8, 7, 127, 0}, e4m3 = {4, 3, 7, 1}, e5m2 = {5, 2, 15, 0};
  switch (f) {
    case BD_FMT_F16: return &f16;
    case BD_FMT_BF16: return &bf16;
    case BD_FMT_E4M3: return &e4m3;
    case BD_FMT_E5M2: return &e5m2;
    default: return NULL;
  }
}

static int mini_encode(const struct mini *f, double v, uint32_t *bits) {
  if (isnan(v) || isinf(v)) return -1;
  const uint32_t sign = signbit(v) ? 1u : 0u;
  const double a = fabs(v);
  const uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
  uint32_t biased, mant;
  if (a == 0) {
    biased = 0;
    mant = 0;
  } else {
    int x;
    const double fr = frexp(a, &x); /* a = fr * 2^x, fr in [0.5, 1) */
    const int e = x - 1;            /* a = (2 fr) * 2^e, 2 fr in [1, 2) */
    const int emin = 1 - f->bias;
    if (e >= emin) {
      const double m = ldexp(2 * fr - 1, f->mbits);
      if (m != floor(m)) return -1;
      biased = (uint32_t)(e + f->bias);
      mant = (uint32_t)m;
      const uint32_t max_biased = f->fn ? emask : emask - 1;
      if (biased > max_biased) return -1;
      if (f->fn && biased == emask && mant == mmask) return -1; /* the NaN code */
    } else {
      const double m = ldexp(a, f->mbits - emin);
      if (m != floor(m) || m < 1 || m > (double)mmask) return -1;
      biased = 0;
      mant = (uint32_t)m;
    }
  }
  *bits = sign << (f->ebits + f->mbits) | biased << f->mbits | mant;
  return 0;
}

static double mini_decode(const struct mini *f, uint32_t bits) {
  const uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
  const uint32_t sign = bits >> (f->ebits + f->mbits) & 1;
  const uint32_t biased = bits >> f->mbits & emask, mant = bits & mmask;
  double v;
  if (!f->fn && biased == emask) {
    v = mant ? NAN : INFINITY;
  } else if (f->fn && biased == emask && mant == mmask) {
    v = NAN;
  } else if (biased == 0) {
    v = ldexp((double)mant, 1 - f->bias - f->mbits);
  } else {
    v = ldexp(1.0 + ldexp((double)mant, -f->mbits), (int)biased - f->bias);
  }
  return sign ? -v : v;
}

int bd_encode_float(const struct bd_type *t, double v, void *out) {
  if (t->kind != BD_FLOAT || isnan(v) || isinf(v)) return -1;
  if (t->fmt == BD_FMT_F64) {
    memcpy(out, &v, 8);
    return 0;
  }
  if (t->fmt == BD_FMT_F32) {
    float f = (float)v;
    if ((double)f != v || isinf(f)) return -1;
    memcpy(out, &f, 4);
    return 0;
  }
  uint32_t bits;
  if (mini_encode(mini_of(t->fmt), v, &bits) != 0) return -1;
  if (t->size == 1) {
    uint8_t b = (uint8_t)bits;
    memcpy(out, &b, 1);
  } else {
    uint16_t h = (uint16_t)bits;
    memcpy(out, &h, 2);
  }
  return 0;
}

double bd_decode_float(const struct bd_type *t, const void *in) {
  if (t->fmt == BD_FMT_F64) {
    double d;
    memcpy(&d, in, 8);
    return d;
  }
  if (t->fmt == BD_FMT_F32) {
    float f;
    memcpy(&f, in, 4);
    return f;
  }
  uint32_t bits = 0;
  if (t->size == 1) {
    uint8_t b;
    memcpy(&b, in, 1);
    bits = b;
  } else {
    uint16_t h;
    memcpy(&h, in, 2);
    bits = h;
  }
  return mini_decode(mini_of(t->fmt), bits);
}

/* ---- integers ---------------------------------------------------------------- */

static uint64_t mask_of(size_t size) {
  return size >= 8 ? ~0ull : (1ull << (8 * size)) - 1;
}

static int64_t sext(uint64_t x, size_t size) {
  if (size >= 8) return (int64_t)x;
  const unsigned bits = (unsigned)(8 * size);
  const uint64_t m = 1ull << (bits - 1);
  x &= mask_of(size);
  return (int64_t)((x ^ m) - m);
}

static uint64_t load_int(const void *p, size_t size) {
  uint64_t v = 0;
  memcpy(&v, p, size); /* little-endian host, as the GPU */
  return v;
}

void bd_format_elem(const struct bd_type *t, const void *p, char *buf, size_t len) {
  uint64_t raw = load_int(p, t->size);
  int hexw = (int)(2 * t->size);
  if (t->kind == BD_FLOAT)
    snprintf(buf, len, "%.9g (0x%0*" PRIx64 ")", bd_decode_float(t, p), hexw, raw);
  else if (t->kind == BD_SIGNED)
    snprintf(buf, len, "%" PRId64 " (0x%0*" PRIx64 ")", sext(raw, t->size), hexw, raw);
  else
    snprintf(buf, len, "%" PRIu64 " (0x%0*" PRIx64 ")", raw, hexw, raw);
}

/* What the kernels do (kernels/coll.cuh combine/finalize), for integers. */
static uint64_t int_combine(const struct bd_type *t, int op, uint64_t a, uint64_t b) {
  const uint64_t m = mask_of(t->size);
  switch (op) {
    case BD_SUM:
    case BD_AVG: return (a + b) & m;
    case BD_PROD: return (a * b) & m;
    case BD_MAX:
      if (t->kind == BD_SIGNED) return sext(a, t->size) > sext(b, t->size) ? a : b;
      return a > b ? a : b;
    default:
      if (t->kind == BD_SIGNED) return sext(a, t->size) < sext(b, t->size) ? a : b;
      return a < b ? a : b;
  }
}

static uint64_t int_finalize(const struct bd_type *t, int op, uint64_t acc, int nranks) {
  if (op != BD_AVG) return acc;
  const uint64_t m = mask_of(t->size);
  if (t->kind == BD_SIGNED) return (uint64_t)(sext(acc, t->size) / (int64_t)nranks) & m; /* truncating */
  return (acc / (uint64_t)nranks) & m;
}

/* ---- patterns ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

static uint64_t hash3(uint64_t seed, uint64_t i, uint64_t r) {
  return mix64(seed ^ mix64(i * 0x9e3779b97f4a7c15ull + r + 1));
}

/* Significand bits (with the implicit one). */
static int precision(const struct bd_type *t) {
  switch (t->fmt) {
    case BD_FMT_F16: return 11;
    case BD_FMT_BF16: return 8;
    case BD_FMT_E4M3: return 4;
    case BD_FMT_E5M2: return 3;
    case BD_FMT_F32: return 24;
    default: return 53;
  }
}

/* The device accumulates these in fp32 (Acc<T> = float), fp64 in fp64. */
static int acc_is_fp32(const struct bd_type *t) {
  return t->fmt != BD_FMT_F64;
}

/* Largest E (up to 30) with 2^E and 2^-E both exact in the type. */
static int pow2_range(const struct bd_type *t) {
  unsigned char buf[8];
  int e = 0;
  while (e < 30 && bd_encode_float(t, ldexp(1.0, e + 1), buf) == 0 && bd_encode_float(t, ldexp(1.0, -(e + 1)), buf) == 0)
    e++;
  return e;
}

static long lmin(long a, long b) {
  return a < b ? a : b;
}

/* The inputs of element i on every rank, as exact doubles. */
static void float_inputs(const struct bd_type *t, int op, int n, uint64_t i, uint64_t seed, int prod_range, double *v) {
  const uint64_t h = hash3(seed, i, 0xffff);
  const long two_p = 1L << precision(t);
  const double a = ldexp(1.0, (int)(h % 5) - 2); /* 1/4 .. 4 */
  const double s = (h >> 32) & 1 ? -1.0 : 1.0;
  switch (op) {
    case BD_SUM: {
      /* |sum| <= n K <= 2^p: exact in the type and in the accumulator. */
      const long K = lmin(1000, two_p / n);
      for (int r = 0; r < n; r++) v[r] = a * (double)((long)(hash3(seed, i, (uint64_t)r) % (uint64_t)(2 * K + 1)) - K);
      break;
    }
    case BD_MAX:
    case BD_MIN: {
      const long K = lmin(1000, two_p);
      for (int r = 0; r < n; r++) v[r] = a * (double)((long)(hash3(seed, i, (uint64_t)r) % (uint64_t)(2 * K + 1)) - K);
      break;
    }
    case BD_PROD: {
      /* +-2^k, |k| <= L with n L <= the exact power-of-two range. */
      long L = lmin(3, prod_range / n);
      if (L < 0) L = 0;
      for (int r = 0; r < n; r++) {
        const uint64_t hr = hash3(seed, i, (uint64_t)r);
        const int k = (int)((long)(hr % (uint64_t)(2 * L + 1)) - L);
        v[r] = ((hr >> 40) & 1 ? -1.0 : 1.0) * ldexp(1.0, k);
      }
      break;
    }
    default: { /* BD_AVG */
      /* Ranks 0..n-2 take m in [1, Ka]; the last rank tops the sum up to
       * the next multiple of n (m in [1, n]), so the mean q = sum / n is an
       * integer <= 2^p. */
      long Ka = lmin(1000, two_p);
      if (n > 1) Ka = lmin(Ka, (two_p - 1) * n / (n - 1));
      long sum = 0;
      for (int r = 0; r < n - 1; r++) {
        const long m = 1 + (long)(hash3(seed, i, (uint64_t)r) % (uint64_t)Ka);
        v[r] = s * a * (double)m;
        sum += m;
      }
      const long q = sum / n + 1;
      v[n - 1] = s * a * (double)(n * q - sum);
      break;
    }
  }
}

static double float_combine(int op, double a, double b) {
  switch (op) {
    case BD_SUM:
    case BD_AVG: return a + b;
    case BD_PROD: return a * b;
    case BD_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

static int exact_in_fp32(double x) {
  return (double)(float)x == x;
}

void bd_pattern_free(struct bd_pattern *p) {
  for (int r = 0; r < BD_MAX_RANKS; r++) {
    free(p->in[r]);
    p->in[r] = NULL;
  }
  free(p->out);
  p->out = NULL;
}

int bd_pattern_make(struct bd_pattern *p, const struct bd_type *t, int reduce, int op, int nranks, size_t period,
                    uint64_t seed, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  p->type = t;
  p->nranks = nranks;
  p->reduce = reduce;
  p->op = op;
  p->period = period;
  if (nranks < 1 || nranks > BD_MAX_RANKS || period == 0 || (reduce && bd_op_name(op) == NULL)) {
    snprintf(err, errlen, "bad pattern parameters (nranks %d, period %zu, op %d)", nranks, period, op);
    return -1;
  }
  const size_t es = t->size, bytes = period * es;
  for (int r = 0; r < nranks; r++) {
    p->in[r] = malloc(bytes);
    if (!p->in[r]) goto oom;
  }
  if (!reduce) {
    for (int r = 0; r < nranks; r++)
      for (size_t b = 0; b < bytes; b += 8) {
        uint64_t h = hash3(seed, b / 8, (uint64_t)r);
        size_t k = bytes - b < 8 ? bytes - b : 8;
        memcpy(p->in[r] + b, &h, k);
      }
    return 0;
  }
  p->out = malloc(bytes);
  if (!p->out) goto oom;
  if (t->kind != BD_FLOAT) {
    const uint64_t m = mask_of(es);
    for (size_t i = 0; i < period; i++) {
      uint64_t acc = 0;
      for (int r = 0; r < nranks; r++) {
        uint64_t v = hash3(seed, i, (uint64_t)r) & m;
        memcpy(p->in[r] + i * es, &v, es);
        acc = r == 0 ? v : int_combine(t, op, acc, v);
      }
      acc = int_finalize(t, op, acc, nranks);
      memcpy(p->out + i * es, &acc, es);
    }
    return 0;
  }
  const int prange = pow2_range(t);
  const int acc32 = acc_is_fp32(t);
  for (size_t i = 0; i < period; i++) {
    double v[BD_MAX_RANKS];
    float_inputs(t, op, nranks, i, seed, prange, v);
    double acc = 0;
    for (int r = 0; r < nranks; r++) {
      if (bd_encode_float(t, v[r], p->in[r] + i * es) != 0) {
        snprintf(err, errlen, "internal: input %.17g (rank %d, element %zu) is not exact in %s", v[r], r, i, t->name);
        goto fail;
      }
      acc = r == 0 ? v[r] : float_combine(op, acc, v[r]);
      if (acc32 && !exact_in_fp32(acc)) {
        snprintf(err, errlen, "internal: partial %s %.17g (element %zu) is not exact in fp32", bd_op_name(op), acc, i);
        goto fail;
      }
    }
    double res = acc;
    if (op == BD_AVG) {
      res = acc / nranks;
      if (res * nranks != acc || (acc32 && !exact_in_fp32(res))) {
        snprintf(err, errlen, "internal: avg %.17g / %d (element %zu) is not exact", acc, nranks, i);
        goto fail;
      }
    }
    if (res == 0) res = 0.0; /* +0: the inputs are never -0, so neither is a sum */
    if (bd_encode_float(t, res, p->out + i * es) != 0) {
      snprintf(err, errlen, "internal: result %.17g (%s, element %zu) is not exact in %s", res, bd_op_name(op), i,
               t->name);
      goto fail;
    }
  }
  return 0;
oom:
  snprintf(err, errlen, "out of host memory for the data patterns (%zu bytes per rank)", bytes);
fail:
  bd_pattern_free(p);
  return -1;
}

uint64_t bd_compare(const uint8_t *got, size_t n, const uint8_t *tile, size_t period, size_t phase, size_t es,
                    size_t *first_bad) {
  uint64_t bad = 0;
  size_t k = 0, ph = phase % period;
  while (k < n) {
    size_t seg = period - ph;
    if (seg > n - k) seg = n - k;
    if (memcmp(got + k * es, tile + ph * es, seg * es) != 0) {
      for (size_t j = 0; j < seg; j++) {
        if (memcmp(got + (k + j) * es, tile + (ph + j) * es, es) != 0) {
          if (bad == 0 && first_bad) *first_bad = k + j;
          bad++;
        }
      }
    }
    k += seg;
    ph = 0;
  }
  return bad;
}

/* ---- self-test --------------------------------------------------------------------- */

static int test_codes(const struct bd_type *t) {
  int fails = 0;
  const uint32_t ncodes = t->size == 1 ? 256u : 65536u;
  for (uint32_t c = 0; c < ncodes; c++) {
    unsigned char in[2], out[2];
    if (t->size == 1) {
      in[0] = (unsigned char)c;
    } else {
      uint16_t h = (uint16_t)c;
      memcpy(in, &h, 2);
    }
    double v = bd_decode_float(t, in);
    if (isnan(v) || isinf(v)) continue;
    if (bd_encode_float(t, v, out) != 0 || memcmp(in, out, t->size) != 0) {
      if (fails < 5) fprintf(stderr, "self-test: %s code 0x%x (%.9g) does not round-trip\n", t->name, c, v);
      fails++;
    }
  }
  return fails;
}

/* Values that must not encode (inexact or out of range), and some that must. */
static int test_edges(void) {
  static const struct {
    const char *type;
    double v;
    int ok;
  } cases[] = {
      {"fp8e4m3", 448, 1},    {"fp8e4m3", 480, 0},   {"fp8e4m3", 17, 0},     {"fp8e4m3", 18, 1},
      {"fp8e4m3", 0x1p-9, 1}, {"fp8e4m3", 0x1p-10, 0}, {"fp8e5m2", 57344, 1}, {"fp8e5m2", 65536, 0},
      {"fp8e5m2", 9, 0},      {"fp8e5m2", 0x1p-16, 1}, {"fp16", 65504, 1},    {"fp16", 65536, 0},
      {"fp16", 2049, 0},      {"fp16", 0x1p-24, 1},  {"bf16", 257, 0},       {"bf16", 256, 1},
      {"fp32", 16777217, 0},  {"fp32", 16777216, 1}, {"fp16", -0.0, 1},      {"bf16", 0x1p-133, 1},
  };
  int fails = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char buf[8];
    const struct bd_type *t = bd_type_by_name(cases[i].type);
    int ok = t && bd_encode_float(t, cases[i].v, buf) == 0;
    if (ok != cases[i].ok) {
      fprintf(stderr, "self-test: encoding %.17g as %s: %s, expected %s\n", cases[i].v, cases[i].type,
              ok ? "accepted" : "refused", cases[i].ok ? "accepted" : "refused");
      fails++;
    }
    if (ok && bd_decode_float(t, buf) != cases[i].v) {
      fprintf(stderr, "self-test: %.17g as %s decodes to %.17g\n", cases[i].v, cases[i].type, bd_decode_float(t, buf));
      fails++;
    }
  }
  return fails;
}

/* Recompute the expectation independently: in reverse rank order, from the
 * encoded inputs. Exact arithmetic makes the order irrelevant. */
static int recheck(const struct bd_pattern *p) {
  const struct bd_type *t = p->type;
  const size_t es = t->size;
  int fails = 0;
  for (size_t i = 0; i < p->period && fails < 3; i++) {
    int mismatch;
    if (t->kind == BD_FLOAT) {
      double acc = 0;
      for (int r = p->nranks - 1; r >= 0; r--) {
        double x = bd_decode_float(t, p->in[r] + i * es);
        acc = r == p->nranks - 1 ? x : float_combine(p->op, acc, x);
      }
      if (p->op == BD_AVG) acc /= p->nranks;
      mismatch = acc != bd_decode_float(t, p->out + i * es);
    } else {
      uint64_t acc = 0;
      for (int r = p->nranks - 1; r >= 0; r--) {
        uint64_t x = load_int(p->in[r] + i * es, es);
        acc = r == p->nranks - 1 ? x : int_combine(t, p->op, acc, x);
      }
      acc = int_finalize(t, p->op, acc, p->nranks);
      mismatch = acc != load_int(p->out + i * es, es);
    }
    if (mismatch) {
      fprintf(stderr, "self-test: %s %s n=%d element %zu: the reverse-order result differs\n", t->name,
              bd_op_name(p->op), p->nranks, i);
      fails++;
    }
  }
  return fails;
}

int bd_self_test(int *combinations) {
  int fails = 0, combos = 0;
  for (int k = 0; k < BD_NUM_TYPES; k++)
    if (bd_types[k].kind == BD_FLOAT && bd_types[k].size <= 2) fails += test_codes(&bd_types[k]);
  fails += test_edges();
  char err[256];
  for (int k = 0; k < BD_NUM_TYPES; k++) {
    const struct bd_type *t = &bd_types[k];
    for (int n = 2; n <= BD_MAX_RANKS; n++) {
      for (int op = 0; op < BD_NUM_OPS; op++) {
        struct bd_pattern p;
        combos++;
        if (bd_pattern_make(&p, t, 1, op, n, 4099, 0x5eed0000u + (uint64_t)(k * 64 + op), err, sizeof err) != 0) {
          fprintf(stderr, "self-test: %s %s n=%d: %s\n", t->name, bd_op_name(op), n, err);
          fails++;
          continue;
        }
        fails += recheck(&p);
        /* Variety: a float sum pattern must not be constant. */
        size_t distinct = 0;
        for (size_t i = 1; i < p.period && distinct == 0; i++)
          distinct = memcmp(p.out, p.out + i * t->size, t->size) != 0;
        if (!distinct) {
          fprintf(stderr, "self-test: %s %s n=%d: the expected result is constant\n", t->name, bd_op_name(op), n);
          fails++;
        }
        bd_pattern_free(&p);
      }
      struct bd_pattern p;
      combos++;
      if (bd_pattern_make(&p, t, 0, 0, n, 4099, 77, err, sizeof err) != 0) {
        fprintf(stderr, "self-test: %s copy pattern n=%d: %s\n", t->name, n, err);
        fails++;
      } else {
        bd_pattern_free(&p);
      }
    }
  }
  /* bd_compare: phases and counts. */
  {
    uint8_t tile[7 * 2], buf[30 * 2];
    for (int i = 0; i < 14; i++) tile[i] = (uint8_t)(i * 37 + 1);
    for (int i = 0; i < 30; i++) memcpy(buf + 2 * i, tile + 2 * ((i + 3) % 7), 2);
    size_t first = 99;
    if (bd_compare(buf, 30, tile, 7, 3, 2, &first) != 0 || first != 99) fails++;
    buf[2 * 11 + 1] ^= 1;
    buf[2 * 29] ^= 1;
    if (bd_compare(buf, 30, tile, 7, 3, 2, &first) != 2 || first != 11) {
      fprintf(stderr, "self-test: bd_compare miscounts\n");
      fails++;
    }
  }
  *combinations = combos;
  return fails;
}
