/*
 * What the one-process-per-rank benchmarks on the test harness
 * (device_bench, eager_bench, fused_bench) share: NCCL's communicator over
 * the harness's world, the first and last lines of their headers, and
 * sizes written with K/M/G suffixes.
 */
#ifndef SYMM_BENCH_WORLD_H
#define SYMM_BENCH_WORLD_H

#include <stddef.h>

#include "bench_nccl.h"
#include "gpu_world.h"

/* The start of a benchmark body in mode mp: this process's one rank, with
 * bench_cuda.h's driver entry points loaded, the communicator made
 * (tw_init_comms) and its context current; NULL when the init failed (the
 * failure is recorded: the body returns). */
struct tw_rank *bw_start_rank(struct tw *w, const char *prog);

/* Rank 0's NCCL unique id handed to every process of the world
 * (tw_exchange_u64), then ncclCommInitRank for rank r in r's context.
 * Returns NCCL's result (bn loaded by the caller). Collective. */
bn_result bw_nccl_init_rank(struct tw *w, const struct tw_rank *r, bn_comm *comm);

/* The header's first lines: "# PROG: symmcomm X, NCCL Y, CUDA driver Z",
 * "# command: PROG mp --nranks=N CMDLINE", "# date: ..., host: ...", and
 * "# NCCL library: LIB" when nccl_lib is set. NCCL's version only once bn
 * is loaded. Needs bc (bench_cuda.h) loaded. */
void bw_header_start(const char *prog, const struct tw *w, const char *cmdline, const char *nccl_lib);

/* Its last lines: "# ranks: N", the shared-GPU warning where ranks share
 * GPUs, and "#  rank K: GPU D, NAME" per rank (scripts/perf-tables reads
 * them). Flushes stdout. */
void bw_header_ranks(const struct tw *w);

/* A symmcomm or NCCL call of rank r that must succeed: on failure the
 * call's name, the result and the last error message are recorded as a
 * failure of r, and the process ends (the harness reports it). */
void bw_symm_ok(const char *file, int line, const struct tw_rank *r, symmResult_t rc, const char *what);
void bw_nccl_ok(const char *file, int line, const struct tw_rank *r, bn_comm comm, bn_result rc, const char *what);
#define BW_SYMM(r, rc, what) bw_symm_ok(__FILE__, __LINE__, (r), (rc), (what))
#define BW_NCCL(r, comm, rc, what) bw_nccl_ok(__FILE__, __LINE__, (r), (comm), (rc), (what))

/* Whether argv[2..argc-1] (the options after the mode) hold `arg` exactly:
 * for checks between options before tw_main, whose option callback sees
 * one at a time. */
int bw_has_arg(int argc, char **argv, const char *arg);

/* "8", "64K", "1M", "1G" (binary): 0, or -1 for anything else, 0, or over 1 TiB. */
int bw_parse_size(const char *s, size_t *out);

#endif /* SYMM_BENCH_WORLD_H */
