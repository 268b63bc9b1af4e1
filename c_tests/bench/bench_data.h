/*
 * bench_data: the host side of symm_bench's data check (no CUDA here).
 *
 *  - the 12 element types (symmDataType_t == ncclDataType_t numbering),
 *    with exact encoders/decoders for fp16, bf16, fp8 e4m3 and fp8 e5m2;
 *  - deterministic input patterns ("tiles") per rank, and for reductions
 *    the exact expected result, so that a result is checked bit for bit.
 *
 * Every buffer the benchmark fills is periodic: element k of a rank's input
 * is in[rank][k % period]. The expected content of an output region is a
 * tile read from some phase on (bd_compare).
 *
 * Reductions must come out exact whatever the order or the accumulator:
 *  - integer types: any values; the reference emulates the device exactly
 *    (two's-complement wrap in the type's width, truncating division for
 *    avg, signed or unsigned comparisons);
 *  - floating types: small multiples of powers of two, chosen per type, op
 *    and rank count so that every partial sum/product is exact in the
 *    accumulator (fp32 for the 8- and 16-bit types) and the result is exact
 *    in the type. Avg uses inputs whose sum is a multiple of nranks.
 *    bd_pattern_make verifies all of this on every element and fails
 *    (rather than produce an inexact expectation) if it ever does not hold.
 */
#ifndef SYMM_BENCH_DATA_H
#define SYMM_BENCH_DATA_H

#include <stddef.h>
#include <stdint.h>

#define BD_MAX_RANKS 8

/* Reduction operators (symmRedOp_t == ncclRedOp_t numbering). */
enum { BD_SUM = 0, BD_PROD = 1, BD_MAX = 2, BD_MIN = 3, BD_AVG = 4, BD_NUM_OPS = 5 };

enum bd_kind { BD_SIGNED, BD_UNSIGNED, BD_FLOAT };

/* Floating formats. */
enum bd_fmt { BD_FMT_NONE, BD_FMT_F16, BD_FMT_BF16, BD_FMT_E4M3, BD_FMT_E5M2, BD_FMT_F32, BD_FMT_F64 };

struct bd_type {
  const char *name;    /* what -d takes and the table prints: "bf16" */
  const char *alias1;  /* nccl-tests' names, also accepted */
  const char *alias2;
  int id;              /* symmDataType_t / ncclDataType_t */
  size_t size;         /* bytes */
  enum bd_kind kind;
  enum bd_fmt fmt;
};

#define BD_NUM_TYPES 12
extern const struct bd_type bd_types[BD_NUM_TYPES];

/* NULL if unknown. */
const struct bd_type *bd_type_by_name(const char *name);
/* "sum" ... "avg"; NULL for a bad op. */
const char *bd_op_name(int op);
/* -1 if unknown. */
int bd_op_by_name(const char *name);

/* Floating types: write the exact encoding of v to out (size bytes).
 * 0 on success; -1 if v is not exactly representable (or not finite). */
int bd_encode_float(const struct bd_type *t, double v, void *out);
/* Floating types: the value of the element at in (NaN/inf as such). */
double bd_decode_float(const struct bd_type *t, const void *in);

/* The element at p as text ("1.5" for floats, decimal for integers, with
 * the raw bits in hex), for messages. */
void bd_format_elem(const struct bd_type *t, const void *p, char *buf, size_t len);

struct bd_pattern {
  const struct bd_type *type;
  int nranks;
  int reduce;  /* 1: `out` holds the expected reduction */
  int op;
  size_t period; /* elements */
  uint8_t *in[BD_MAX_RANKS]; /* period * size bytes each */
  uint8_t *out;              /* period * size bytes (reductions), else NULL */
};

/* The default period: a prime, so that a block misplaced by a power-of-two
 * offset never lines up with the pattern. */
#define BD_PERIOD 1048573u

/* Make the tiles for `nranks` ranks. reduce = 0: arbitrary bytes (data
 * movement only). reduce = 1: values for `op` and the expected result.
 * 0 on success; -1 with a message in err (out of memory, or a value that
 * would not be exact: a bug in this file). */
int bd_pattern_make(struct bd_pattern *p, const struct bd_type *t, int reduce, int op, int nranks, size_t period,
                    uint64_t seed, char *err, size_t errlen);
void bd_pattern_free(struct bd_pattern *p);

/* Compare n elements at `got` with tile[(phase + k) % period], k = 0..n-1.
 * Returns the number of differing elements; *first_bad (if not NULL) gets
 * the index k of the first one (unchanged when none). */
uint64_t bd_compare(const uint8_t *got, size_t n, const uint8_t *tile, size_t period, size_t phase, size_t es,
                    size_t *first_bad);

/* Host-only self-test of the encoders and of every (type, op, nranks)
 * pattern with a short period. Prints failures to stderr; returns the
 * number of failures and writes the number of combinations checked. */
int bd_self_test(int *combinations);

#endif /* SYMM_BENCH_DATA_H */
