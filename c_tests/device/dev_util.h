/*
 * What the device-API drivers (c_tests/device/dev_*.c) share on top of the
 * multi-rank harness (../gpu_world.h): their kernels (dev_kernels.cu, a
 * fatbin loaded per rank; SYMM_TEST_DEV_KERNELS overrides the path), the
 * collective symmDevCommCreate/Destroy on every local rank (grouped when
 * one thread drives several communicators), launches with explicit grids,
 * and the small result arrays the kernels fill.
 */
#ifndef SYMM_DEV_UTIL_H
#define SYMM_DEV_UTIL_H

#include "gpu_world.h"

/* The kernels' result words (dev_kernels.cu): mismatches, first bad value,
 * failed device calls, first failure code. */
#define DEV_RES_WORDS 4

struct dev_kernels {
  CUmodule module;
  CUfunction barrier_stress, exchange, barrier_once, signal_wait, bad_argument;
};

/* Load dev_kernels.fatbin into every local rank's context. */
void dev_load(struct tw *tw, struct dev_kernels k[TW_MAX_RANKS]);

/* A requirements struct from the header's initializer. */
symmDevCommRequirements dev_requirements(uint32_t blocks, uint32_t signals, uint64_t ll_bytes);

/* symmDevCommCreate on every local rank with req[i]; the first failure
 * (per-rank messages in symmGetLastError(comm)). req may be NULL entries. */
symmResult_t dev_create(struct tw *tw, const symmDevCommRequirements *const *req, symmDevComm *dc);
/* The same requirements on every rank. */
symmResult_t dev_create_all(struct tw *tw, const symmDevCommRequirements *req, symmDevComm *dc);
/* symmDevCommDestroy on every local rank. */
symmResult_t dev_destroy(struct tw *tw, const symmDevComm *dc);

/* Launch fn on r's stream (or `stream` when not NULL); fatal on failure. */
void dev_launch(const struct tw_rank *r, CUstream stream, CUfunction fn, unsigned grid, unsigned block, void **params,
                const char *what);

/* A zeroed device array of `words` 32-bit words on r's device. */
CUdeviceptr dev_words(const struct tw_rank *r, size_t words);
/* Fill `words` words with v (synchronous). */
void dev_fill_words(const struct tw_rank *r, CUdeviceptr p, size_t words, uint32_t v);
/* Read `words` words (synchronous). */
void dev_read_words(const struct tw_rank *r, CUdeviceptr p, size_t words, uint32_t *out);
/* Check a result array: no mismatches and no failed device call. */
void dev_check_results(const struct tw_rank *r, CUdeviceptr res, const char *what);

#endif /* SYMM_DEV_UTIL_H */
