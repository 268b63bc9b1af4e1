/*
 * gpu_world: what the symmetric-memory GPU tests (symm_*.c) share.
 *
 * A test body is written once against a "world" of local ranks and runs in
 * one of three modes, chosen by the driver's last argument:
 *
 *   mp   2 processes forked by tu_run_ranks, one rank each, rank r on device
 *        r % ngpus (symmCommInitRank). The world holds 1 local rank. Rank 0
 *        makes each unique id and hands it over through a MAP_SHARED page,
 *        which also carries host barriers and flags between the processes.
 *   all  1 process, 1 thread, 2 GPUs (symmCommInitAll). The world holds both
 *        ranks; collective host calls are wrapped in symmGroupStart/End.
 *   one  like all, over a single GPU (1 rank), for the checks that need no
 *        peer.
 *
 * The body loops over tw->r[0 .. nlocal-1] for everything per rank, and
 * enqueues work on every local rank before it waits for any (one thread
 * drives both GPUs in "all" mode, so waiting on GPU 0 before GPU 1's half of
 * a barrier is enqueued would deadlock until SYMM_TIMEOUT).
 *
 * Every wait is bounded: stream waits poll cuStreamQuery against a
 * deadline, host barriers have a deadline and notice a dead peer process,
 * and a watchdog (alarm) ends a process that stops making progress, naming
 * the phase it was in (tw_phase).
 */
#ifndef SYMM_GPU_WORLD_H
#define SYMM_GPU_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "symmcomm.h"
#include "test_util.h"

#define TW_MAX_RANKS 2
#define TW_SCRATCH_BYTES 4096

enum tw_mode { TW_MP = 0, TW_ALL = 1, TW_ONE = 2 };

struct tw_kernels {
  CUmodule module;
  CUfunction reset_result, fill, verify, verify_table, count_nonzero;
  CUfunction store_u32, load_u32, load_u32_table, graph_step, graph_check;
};

/* One rank driven by this process. */
struct tw_rank {
  int rank;   /* rank in the communicator */
  int device; /* CUDA ordinal */
  int index;  /* position in tw->r */
  CUcontext ctx;
  symmComm_t comm; /* NULL until tw_init_comms */
  CUstream stream; /* non-blocking stream of this device */
  struct tw_kernels k;
  CUdeviceptr scratch; /* TW_SCRATCH_BYTES of device memory for results */
};

/* Host-side state shared by the processes of an mp world (a MAP_SHARED page
 * made before the fork); private memory in the other modes. */
#define TW_FLAGS 16
struct tw_shared {
  int id_round; /* round of the unique id below (rank 0 writes it) */
  symmUniqueId id;
  int bar_count, bar_gen; /* host barrier */
  int dead;               /* 1 + rank of a process that stopped abnormally */
  int flag[TW_FLAGS];
};

struct tw {
  const char *name;
  enum tw_mode mode;
  int nranks, nlocal, ngpus;
  struct tw_rank r[TW_MAX_RANKS];
  struct tw_shared *sh;
  int id_round;
};

/* ---- running a test ------------------------------------------------------ */

typedef void (*tw_body_fn)(struct tw *tw, void *ctx);

/* The whole main() of a driver: mode from argv[argc-1] ("mp", "all" or
 * "one"), GPU probe (skip with 77 and the reason below the GPUs the mode
 * needs), default SYMM_TIMEOUT=30 and SYMM_BOOTSTRAP_TIMEOUT=30 unless set,
 * then body(tw, ctx) in every rank process (mp) or in this process, each
 * with a watchdog of `limit_s` seconds. Devices, streams, test kernels and
 * scratch memory are set up before the body and released after it; the
 * body creates and destroys the communicators (tw_init_comms). Returns the
 * exit code. `modes` lists the modes the driver accepts, e.g. "mp,all". */
int tw_main(const char *name, const char *modes, int argc, char **argv, double limit_s, tw_body_fn body,
            void *ctx);

/* ---- messages and failures ------------------------------------------------ */

/* printf to stdout prefixed with "[<test> <mode>]" (and the rank in mp). */
void tw_log(const struct tw *tw, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What the process is doing, for the watchdog's message. */
void tw_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A failed check about rank r (prefixes "rank R (device D): "). */
void tw_fail_at(const char *file, int line, const struct tw_rank *r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define TW_CHECK(r, cond, ...)                                     \
  do {                                                             \
    if (!(cond)) tw_fail_at(__FILE__, __LINE__, (r), __VA_ARGS__); \
  } while (0)

#define TW_REQUIRE(r, cond, ...)                     \
  do {                                               \
    if (!(cond)) {                                   \
      tw_fail_at(__FILE__, __LINE__, (r), __VA_ARGS__); \
      tu_exit_now();                                 \
    }                                                \
  } while (0)

/* A symm call that must succeed: on failure records the code and
 * symmGetLastError(r->comm) and yields 0, else 1. */
int tw_symm_ok(const char *file, int line, const struct tw_rank *r, const char *expr, symmResult_t rc);
#define TW_SYMM(r, call) tw_symm_ok(__FILE__, __LINE__, (r), #call, (call))
#define TW_SYMM_REQUIRE(r, call)          \
  do {                                    \
    if (!TW_SYMM(r, call)) tu_exit_now(); \
  } while (0)

/* A call that must fail with `want` (and leave a message naming `keyword`,
 * when not NULL, in symmGetLastError(where)). Returns 1 when it did. */
int tw_expect_fail(const char *file, int line, const struct tw_rank *r, const char *expr, symmResult_t got,
                   symmResult_t want, symmComm_t where, const char *keyword);
#define TW_EXPECT_FAIL(r, call, want, where, keyword) \
  tw_expect_fail(__FILE__, __LINE__, (r), #call, (call), (want), (where), (keyword))

/* ---- CUDA helpers ---------------------------------------------------------- */

/* Make rank r's context current on this thread. */
void tw_use(const struct tw_rank *r);

/* Wait for r's stream with a deadline (polls cuStreamQuery); a stream still
 * busy after `timeout_s` or failing is fatal. `what` names the work. */
void tw_stream_wait(const struct tw_rank *r, double timeout_s, const char *what);
/* Every local rank's stream. */
void tw_sync_all(const struct tw *tw, double timeout_s, const char *what);
/* Non-fatal: 0 done, 1 still busy after timeout_s, -1 error (reported). */
int tw_stream_poll(const struct tw_rank *r, double timeout_s);

/* Mismatch count and first bad index of a device-side check. */
struct tw_count {
  unsigned long long bad, first;
};

/* Enqueue a pattern fill of [buf, buf + n) on r's stream. */
void tw_fill(const struct tw_rank *r, CUdeviceptr buf, uint64_t n, uint32_t prank, uint32_t salt, uint64_t idx0);
/* Check [buf, buf + n) (any address r's GPU can read) against the pattern
 * on r's stream; waits for the stream. */
struct tw_count tw_verify(const struct tw_rank *r, CUdeviceptr buf, uint64_t n, uint32_t prank, uint32_t salt,
                          uint64_t idx0);
/* The same through a device pointer table: checks table[peer] + offset. */
struct tw_count tw_verify_table(const struct tw_rank *r, CUdeviceptr table, int peer, uint64_t offset, uint64_t n,
                                uint32_t prank, uint32_t salt, uint64_t idx0);
/* Non-zero bytes in [buf, buf + n); waits for the stream. */
struct tw_count tw_count_nonzero(const struct tw_rank *r, CUdeviceptr buf, uint64_t n);
/* Enqueue *p = v. */
void tw_store_u32(const struct tw_rank *r, CUdeviceptr p, uint32_t v);
/* *p and table[peer][word], read by a kernel on r's stream; wait for it. */
uint32_t tw_load_u32(const struct tw_rank *r, CUdeviceptr p);
uint32_t tw_load_u32_table(const struct tw_rank *r, CUdeviceptr table, int peer, uint64_t word);
/* Launch one of the test kernels with a grid for n elements (n = 0: 1 thread). */
void tw_launch(const struct tw_rank *r, CUfunction fn, uint64_t n, void **params, const char *what);

/* Host copy of the pattern check: mismatches of host[0..n) against
 * pattern(prank, salt, idx0 + i); *first gets the first bad index. */
size_t tw_host_verify(const uint8_t *host, size_t n, uint32_t prank, uint32_t salt, uint64_t idx0, size_t *first);

/* After a fault (timeout, abort): a memcpy round trip and a test kernel
 * still work on r's device. Records failures. */
void tw_check_context_usable(const struct tw_rank *r, const char *after);

/* ---- host coordination (mp: across processes; otherwise trivial) --------- */

/* Every process of the world arrives (bounded; a dead peer is fatal). */
void tw_host_barrier(struct tw *tw, const char *what);
void tw_flag_set(struct tw *tw, int idx, int value);
/* 0 once flag[idx] == value, -1 after timeout_s or when a peer died. */
int tw_flag_wait(struct tw *tw, int idx, int value, double timeout_s);

/* ---- communicators and collective host calls ----------------------------- */

/* mp: rank 0 makes a unique id, every process joins with
 * symmCommInitRank; all/one: symmCommInitAll over devices 0..nranks-1.
 * Checks count/rank/device. Returns the init result (failures recorded). */
symmResult_t tw_init_comms(struct tw *tw);
/* symmCommDestroy every local comm (checked); comm handles set to NULL. */
void tw_destroy_comms(struct tw *tw);
/* The next unique id of this world (mp: made by rank 0, read by the others). */
void tw_next_id(struct tw *tw, symmUniqueId *id);

/* Collective calls on every local rank: direct in mp, inside
 * symmGroupStart/End otherwise. Arrays are indexed by local rank. The result
 * is the first failure (in a group, what symmGroupEnd returned); per-rank
 * messages are in symmGetLastError(r->comm). */
symmResult_t tw_alloc(struct tw *tw, const size_t *size, void **ptr);
symmResult_t tw_free(struct tw *tw, void *const *ptr);
symmResult_t tw_register(struct tw *tw, void *const *buf, const size_t *size, void **handle);
/* symmCommDeregister on every local rank (local call; checked). */
void tw_deregister(struct tw *tw, void *const *handle);

/* ---- resources (leak checks) ----------------------------------------------- */

struct tw_res {
  size_t free_mem[TW_MAX_RANKS]; /* cuMemGetInfo free bytes per local device */
  int fds, threads;
  long rss_kb;
};
void tw_measure(const struct tw *tw, struct tw_res *out);
/* Poll (up to settle_s) until fds and threads equal `base` (and free memory
 * is at least base's); returns the last measurement in *out. */
void tw_measure_settled(const struct tw *tw, const struct tw_res *base, double settle_s, struct tw_res *out);

/* Sleep for s seconds (restarts after signals). */
void tw_sleep(double s);

#endif /* SYMM_GPU_WORLD_H */
