/*
 * gpu_world: the one multi-rank harness of the GPU drivers (symm_*.c,
 * coll/coll_*.c and bench/symm_bench.c).
 *
 * A driver's body is written once against a "world" of local ranks and runs
 * in one of three modes:
 *
 *   mp   one process per rank, forked by tu_run_ranks; each joins with
 *        symmCommInitRank. The world holds 1 local rank. Rank 0 makes each
 *        unique id and hands it over through a MAP_SHARED page, which also
 *        carries host barriers, flags, value exchanges, each rank's current
 *        phase and a "rank died" mark.
 *   all  one process and thread for every rank (symmCommInitAll); collective
 *        host calls are wrapped in symmGroupStart/End.
 *   one  like all, over a single GPU (1 rank), for checks that need no peer.
 *
 * Rank count: --nranks=N on the command line, else SYMM_TEST_NRANKS, else
 * every visible GPU (at least 2, at most 8). Rank r uses device r % ngpus.
 * Modes mp and all need 2 ranks or more, except mp for a driver whose spec
 * sets mp_one_rank (--nranks=1: one process, one rank, as a benchmark of the
 * host's cost per call runs on one GPU).
 * More ranks than GPUs need SYMM_TEST_SHARED_DEVICES=1 (the library's
 * test-only mode that lets ranks share a GPU); without it the driver skips
 * (exit 77) and says why. With no GPU it prints "skipped: no CUDA device
 * (<reason>)" and exits 77.
 *
 * Shared devices (tw->shared): in mp the rank processes of one GPU are
 * time-sliced by the driver (no MPS), so every wait on a peer of the same
 * GPU progresses only when that peer's context gets the GPU: correct but
 * slow. In all mode the ranks of one GPU share a context and their kernels
 * must be resident together; the library divides its collective grids by
 * the ranks per GPU for that, and the harness raises
 * CUDA_DEVICE_MAX_CONNECTIONS to 32 so that the ranks' streams do not
 * share a hardware queue (a kernel queued behind a peer's waiting kernel
 * would never start). The harness scales its host-side time limits by
 * tw_scale() (4 when shared) and drivers shrink their work there.
 *
 * Bodies enqueue on every local rank before they wait for any (in all mode
 * one thread drives every GPU: waiting on rank 0 before rank 1's half of a
 * barrier is enqueued would deadlock until SYMM_TIMEOUT).
 *
 * Every wait is bounded: stream waits poll cuStreamQuery against a
 * deadline (and notice an asynchronous error of the communicator or a dead
 * peer process), host barriers have a deadline and notice a dead peer, and
 * a watchdog (alarm) ends a process that stops making progress, naming the
 * phase it was in (tw_phase). SYMM_TEST_WATCHDOG=<s> overrides the
 * driver's limit (CTest sets it just below the test's TIMEOUT).
 */
#ifndef SYMM_GPU_WORLD_H
#define SYMM_GPU_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "symmcomm.h"
#include "test_util.h"

#define TW_MAX_RANKS 8
#define TW_SCRATCH_BYTES 4096
#define TW_FLAGS 16
#define TW_PHASE_BYTES 320

enum tw_mode { TW_MP = 0, TW_ALL = 1, TW_ONE = 2 };

/* The symm_* drivers' test kernels (kernels/test_kernels.cu), loaded when
 * the spec asks for them. */
struct tw_kernels {
  CUmodule module;
  CUfunction reset_result, fill, verify, verify_table, count_nonzero;
  CUfunction store_u32, load_u32, load_u32_table, graph_step, graph_check;
};

/* One rank driven by this process. */
struct tw_rank {
  int rank;   /* rank in the communicator */
  int device; /* CUDA ordinal: rank % ngpus */
  int index;  /* position in tw->r */
  CUcontext ctx;
  symmComm_t comm;  /* NULL until tw_init_comms */
  CUstream stream;  /* non-blocking stream of this rank */
  CUstream stream2; /* a second one (consumers, side work) */
  struct tw_kernels k;  /* with spec.kernels */
  CUdeviceptr scratch;  /* TW_SCRATCH_BYTES for the kernels' results (spec.kernels) */
};

/* Host state shared by the processes of an mp world (MAP_SHARED, made
 * before the fork); the same page, unshared, in the other modes. */
struct tw_shared {
  int id_round; /* round of the unique id below (rank 0 writes it) */
  symmUniqueId id;
  int bar_count, bar_gen; /* host barrier */
  int dead;               /* 1 + rank of a process that stopped abnormally */
  int flag[TW_FLAGS];
  uint64_t xchg[2][TW_MAX_RANKS];          /* tw_exchange_u64, alternating slots */
  char phase[TW_MAX_RANKS][TW_PHASE_BYTES]; /* each rank's phase, for the parent's messages */
};

struct tw {
  const char *name;
  enum tw_mode mode;
  int nranks, nlocal, ngpus;
  int shared;      /* some GPU holds several ranks (SYMM_TEST_SHARED_DEVICES=1) */
  int lead;        /* this process speaks for the world: rank 0's (mp) or the only one */
  double wait_s;   /* host-side waits (barriers, ids, flags) give up after this (x tw_scale()) */
  struct tw_rank r[TW_MAX_RANKS];
  struct tw_shared *sh;
  void *user; /* spec.user_bytes, zeroed, shared by the rank processes; read by report() */
  int id_round;
  unsigned xround;
};

typedef void (*tw_body_fn)(struct tw *tw, void *ctx);

/* What a driver is. Unset fields are 0. */
struct tw_spec {
  const char *name;
  const char *modes;  /* accepted modes, comma-separated: "mp,all", "one,mp,all", "all" */
  const char *usage;  /* the driver's own options, for the usage line (may be NULL) */
  double limit_s;     /* watchdog per process (SYMM_TEST_WATCHDOG overrides) */
  int stall;          /* 1: limit_s counts from the last tw_phase/tw_progress, not from the start */
  int kernels;        /* load the test kernels (tk_*) and a scratch buffer on every rank */
  int quiet;          /* no harness messages on success (the benchmark's output is a table) */
  int min_gpus;       /* skip below this many GPUs even with shared devices (0: none) */
  int mp_one_rank;    /* mode mp also at --nranks=1 (one process, one rank on GPU 0: a
                       * benchmark's host-cost figures on one GPU); else mp needs 2 */
  int library_timeouts; /* leave SYMM_TIMEOUT / SYMM_BOOTSTRAP_TIMEOUT unset (the library's defaults) */
  size_t user_bytes;  /* size of tw->user */
  /* A driver option (an argument after the mode other than --nranks=N):
   * 0 if taken, else the usage error is reported. Runs before any fork. */
  int (*option)(const char *arg, void *ctx);
  /* In every process that drives ranks, after CUDA is loaded and cuInit,
   * before the ranks are set up (load more driver entry points, tables). */
  void (*process_init)(struct tw *tw, void *ctx);
  tw_body_fn body;
  tw_body_fn report; /* after every body: in the parent (mp) or the process (may be NULL) */
  void *ctx;
};

/* The whole main() of a test driver: "<prog> <mode> [--nranks=N] [driver
 * options]". Returns the exit code (0, 1; skips exit 77 directly). */
int tw_main(const struct tw_spec *spec, int argc, char **argv);
/* The same for a driver with its own command line: mode and rank count
 * given (nranks 0: the default). */
int tw_run(const struct tw_spec *spec, enum tw_mode mode, int nranks);
/* The number of CUDA devices (probed once, in a forked child, so that this
 * process stays CUDA-free); 0 with `reason` set when there are none, -1 if
 * the probe broke. */
int tw_gpu_count(char *reason, size_t len);
/* SYMM_TEST_SHARED_DEVICES is set to a non-zero number. */
int tw_shared_devices_allowed(void);
/* The world of this process (NULL before tw_run). */
struct tw *tw_world(void);
/* Host-side time limits are multiplied by this: 4 with shared devices, else 1. */
double tw_scale(void);

/* ---- messages and failures ------------------------------------------------ */

/* printf to stdout prefixed with "[<test> <mode> n<N>]" (and the rank in mp). */
void tw_log(const struct tw *tw, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What the process is doing, for the watchdog and wait messages. */
void tw_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *tw_current_phase(void);
/* Progress for a stall watchdog (spec.stall): re-arms it. */
void tw_progress(void);

/* A failed check about rank r (prefixes "rank R (device D): "; NULL: the world). */
void tw_fail_at(const char *file, int line, const struct tw_rank *r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define TW_CHECK(r, cond, ...)                                     \
  do {                                                             \
    if (!(cond)) tw_fail_at(__FILE__, __LINE__, (r), __VA_ARGS__); \
  } while (0)

#define TW_REQUIRE(r, cond, ...)                        \
  do {                                                  \
    if (!(cond)) {                                      \
      tw_fail_at(__FILE__, __LINE__, (r), __VA_ARGS__); \
      tu_exit_now();                                    \
    }                                                   \
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

/* A driver call that must succeed (the harness is broken otherwise): failure
 * is fatal and names the call, the phase and the error. */
#define TW_CU(call)                                                  \
  do {                                                               \
    CUresult tw_rc_ = (call);                                        \
    if (tw_rc_ != 0) tw_cuda_fatal(__FILE__, __LINE__, #call, tw_rc_); \
  } while (0)
void tw_cuda_fatal(const char *file, int line, const char *expr, CUresult rc) __attribute__((noreturn));

/* Mark this process's rank as dead for the others (before an _exit that
 * skips atexit handlers). */
void tw_mark_dead(void);
/* Another rank's process stopped abnormally (mp). */
int tw_peer_dead(void);

/* ---- CUDA helpers ---------------------------------------------------------- */

/* Make rank r's context current on this thread. */
void tw_use(const struct tw_rank *r);

/* Wait for stream s of rank r: fatal if still busy after timeout_s (x
 * tw_scale()), if it fails, if r's communicator reports an asynchronous
 * error, or if a peer process died; `what` names the work. */
void tw_stream_wait_on(const struct tw_rank *r, CUstream s, double timeout_s, const char *what);
/* The same on r->stream. */
void tw_stream_wait(const struct tw_rank *r, double timeout_s, const char *what);
/* r->stream of every local rank. */
void tw_sync_all(const struct tw *tw, double timeout_s, const char *what);
/* Plain poll (no async-error or peer check, no scaling): 0 done, 1 still
 * busy after timeout_s, -1 the stream failed (reported). For waits after a
 * fault (timeout, abort), where an async error is expected. */
int tw_stream_poll(const struct tw_rank *r, CUstream s, double timeout_s);
/* symmCommGetAsyncError of every local rank must be symmSuccess. */
void tw_check_async(const struct tw *tw, const char *after);

/* Mismatch count and first bad index of a device-side check. */
struct tw_count {
  unsigned long long bad, first;
};

/* The test kernels (spec.kernels). Enqueue a pattern fill of [buf, buf + n)
 * on r's stream. */
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
/* Launch a kernel with a grid for n elements (n = 0: 1 thread). */
void tw_launch(const struct tw_rank *r, CUfunction fn, uint64_t n, void **params, const char *what);

/* Host copy of the pattern check: mismatches of host[0..n) against
 * pattern(prank, salt, idx0 + i); *first gets the first bad index. */
size_t tw_host_verify(const uint8_t *host, size_t n, uint32_t prank, uint32_t salt, uint64_t idx0, size_t *first);

/* After a fault (timeout, abort): a memcpy round trip and a test kernel
 * still work on r's device. Records failures. Needs spec.kernels. */
void tw_check_context_usable(const struct tw_rank *r, const char *after);

/* A kernel image read from `path` (`env`, when set in the environment,
 * overrides it), loaded into r's context. Fatal on failure. */
CUmodule tw_load_module(const struct tw_rank *r, const char *path, const char *env);
CUfunction tw_function(const struct tw_rank *r, CUmodule m, const char *name);

/* ---- host coordination (mp: across processes; otherwise trivial) --------- */

/* Every process of the world arrives (bounded; a dead peer is fatal). */
void tw_host_barrier(struct tw *tw, const char *what);
void tw_flag_set(struct tw *tw, int idx, int value);
/* 0 once flag[idx] == value, -1 after timeout_s or when a peer died. */
int tw_flag_wait(struct tw *tw, int idx, int value, double timeout_s);
/* Every local rank but 0 waits (up to timeout_s) until rank 0 set flag[idx]
 * to 1, then must have no asynchronous error (it launched nothing). */
void tw_others_wait_rank0(struct tw *tw, int idx, double timeout_s);
/* Every rank's value: v[i] is local rank i's; out[rank] gets rank's. */
void tw_exchange_u64(struct tw *tw, const uint64_t *v, uint64_t out[TW_MAX_RANKS]);
/* Minimum of every rank's value (v indexed by local rank). */
uint64_t tw_min_u64(struct tw *tw, const uint64_t *v);

/* ---- communicators and collective host calls ----------------------------- */

/* mp: rank 0 makes a unique id, every process joins with
 * symmCommInitRank; all/one: symmCommInitAll over the ranks' devices.
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
  size_t free_mem[TW_MAX_RANKS]; /* cuMemGetInfo free bytes per local rank's device */
  int fds, threads;
  long rss_kb;  /* resident memory after returning free heap pages (malloc_trim) */
  long heap_kb; /* bytes malloc has handed out and not had back (mallinfo2), -1 if unknown */
};
void tw_measure(const struct tw *tw, struct tw_res *out);
/* Poll (up to settle_s) until fds and threads equal `base` (and free memory
 * is at least base's); returns the last measurement in *out. Collective: it
 * ends with a host barrier, so that no rank's next allocation lands in
 * another process's measurement of a GPU they share. */
void tw_measure_settled(struct tw *tw, const struct tw_res *base, double settle_s, struct tw_res *out);

/* Sleep for s seconds (restarts after signals). */
void tw_sleep(double s);

#endif /* SYMM_GPU_WORLD_H */
