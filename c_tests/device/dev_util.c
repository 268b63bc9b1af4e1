/* See dev_util.h. */
#include "dev_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dev_load(struct tw *tw, struct dev_kernels k[TW_MAX_RANKS]) {
  for (int i = 0; i < tw->nlocal; i++) {
    struct tw_rank *r = &tw->r[i];
    k[i].module = tw_load_module(r, DEV_KERNELS_FATBIN, "SYMM_TEST_DEV_KERNELS");
    k[i].barrier_stress = tw_function(r, k[i].module, "dk_barrier_stress");
    k[i].exchange = tw_function(r, k[i].module, "dk_exchange");
    k[i].barrier_once = tw_function(r, k[i].module, "dk_barrier_once");
    k[i].signal_wait = tw_function(r, k[i].module, "dk_signal_wait");
    k[i].bad_argument = tw_function(r, k[i].module, "dk_bad_argument");
  }
}

symmDevCommRequirements dev_requirements(uint32_t blocks, uint32_t signals, uint64_t ll_bytes) {
  symmDevCommRequirements req = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.blockCount = blocks;
  req.signalCount = signals;
  req.llBytes = ll_bytes;
  return req;
}

symmResult_t dev_create(struct tw *tw, const symmDevCommRequirements *const *req, symmDevComm *dc) {
  const int grouped = tw->mode != TW_MP;
  symmResult_t first = grouped ? symmGroupStart() : symmSuccess;
  if (first != symmSuccess) return first;
  for (int i = 0; i < tw->nlocal; i++) {
    symmResult_t rc = symmDevCommCreate(tw->r[i].comm, req[i], &dc[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = grouped ? symmGroupEnd() : symmSuccess;
  return first != symmSuccess ? first : end;
}

symmResult_t dev_create_all(struct tw *tw, const symmDevCommRequirements *req, symmDevComm *dc) {
  const symmDevCommRequirements *reqs[TW_MAX_RANKS];
  for (int i = 0; i < tw->nlocal; i++) reqs[i] = req;
  return dev_create(tw, reqs, dc);
}

symmResult_t dev_destroy(struct tw *tw, const symmDevComm *dc) {
  const int grouped = tw->mode != TW_MP;
  symmResult_t first = grouped ? symmGroupStart() : symmSuccess;
  if (first != symmSuccess) return first;
  for (int i = 0; i < tw->nlocal; i++) {
    symmResult_t rc = symmDevCommDestroy(tw->r[i].comm, &dc[i]);
    if (rc != symmSuccess && first == symmSuccess) first = rc;
  }
  symmResult_t end = grouped ? symmGroupEnd() : symmSuccess;
  return first != symmSuccess ? first : end;
}

void dev_launch(const struct tw_rank *r, CUstream stream, CUfunction fn, unsigned grid, unsigned block, void **params,
                const char *what) {
  tw_use(r);
  CUresult rc = tu_cu.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream ? stream : r->stream, params, NULL);
  TW_REQUIRE(r, rc == 0, "cuLaunchKernel(%s, grid %u, block %u): %s", what, grid, block, tu_cu_error(rc));
}

CUdeviceptr dev_words(const struct tw_rank *r, size_t words) {
  tw_use(r);
  CUdeviceptr p = 0;
  CU_REQUIRE(tu_cu.cuMemAlloc(&p, words * 4));
  dev_fill_words(r, p, words, 0);
  return p;
}

void dev_fill_words(const struct tw_rank *r, CUdeviceptr p, size_t words, uint32_t v) {
  uint32_t *h = malloc(words * 4);
  TW_REQUIRE(r, h != NULL, "out of host memory");
  for (size_t i = 0; i < words; i++) h[i] = v;
  tw_use(r);
  CU_REQUIRE(tu_upload(p, h, words * 4));
  free(h);
}

void dev_read_words(const struct tw_rank *r, CUdeviceptr p, size_t words, uint32_t *out) {
  tw_use(r);
  CU_REQUIRE(tu_cu.cuMemcpyDtoH(out, p, words * 4));
}

void dev_check_results(const struct tw_rank *r, CUdeviceptr res, const char *what) {
  uint32_t h[DEV_RES_WORDS];
  dev_read_words(r, res, DEV_RES_WORDS, h);
  TW_CHECK(r, h[0] == 0, "%s: %u mismatches (first bad value %#x)", what, h[0], h[1]);
  TW_CHECK(r, h[2] == 0, "%s: %u device calls failed (first: %s)", what, h[2], tu_result_name((int)h[3]));
}
