/*
 * NCCL, loaded at run time (dlopen libnccl.so.2) for --vs-nccl, with the
 * few prototypes declared here so that the benchmark builds without NCCL.
 * ncclDataType_t and ncclRedOp_t use the same numbers as symmcomm's enums;
 * cudaStream_t is CUstream.
 */
#ifndef SYMM_BENCH_NCCL_H
#define SYMM_BENCH_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "test_util.h"

typedef struct ncclComm *bn_comm;
typedef struct {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} bn_unique_id;
typedef int bn_result; /* ncclResult_t: 0 = ncclSuccess */
typedef struct ncclWindow_vidmem *bn_window; /* ncclWindow_t (NCCL 2.27 and later) */

/* ncclCommWindowRegister's flag for a window NCCL's symmetric kernels may
 * use (NCCL_WIN_COLL_SYMMETRIC). */
#define BN_WIN_COLL_SYMMETRIC 0x01

struct bn_api {
  bn_result (*GetVersion)(int *version);
  bn_result (*GetUniqueId)(bn_unique_id *id);
  bn_result (*CommInitRank)(bn_comm *comm, int nranks, bn_unique_id id, int rank);
  bn_result (*CommInitAll)(bn_comm *comms, int ndev, const int *devlist);
  bn_result (*CommDestroy)(bn_comm comm);
  bn_result (*AllReduce)(const void *s, void *r, size_t count, int type, int op, bn_comm comm, CUstream st);
  bn_result (*AllGather)(const void *s, void *r, size_t sendcount, int type, bn_comm comm, CUstream st);
  bn_result (*ReduceScatter)(const void *s, void *r, size_t recvcount, int type, int op, bn_comm comm, CUstream st);
  bn_result (*Broadcast)(const void *s, void *r, size_t count, int type, int root, bn_comm comm, CUstream st);
  bn_result (*Reduce)(const void *s, void *r, size_t count, int type, int op, int root, bn_comm comm, CUstream st);
  bn_result (*Send)(const void *s, size_t count, int type, int peer, bn_comm comm, CUstream st);
  bn_result (*Recv)(void *r, size_t count, int type, int peer, bn_comm comm, CUstream st);
  bn_result (*GroupStart)(void);
  bn_result (*GroupEnd)(void);
  const char *(*GetErrorString)(bn_result r);
  /* Optional (NULL in old NCCLs). */
  const char *(*GetLastError)(bn_comm comm);
  bn_result (*CommGetAsyncError)(bn_comm comm, bn_result *err);
  /* Optional: window registration (--nccl-window; bn_window_check says
   * whether all four are there). */
  bn_result (*MemAlloc)(void **ptr, size_t size);
  bn_result (*MemFree)(void *ptr);
  bn_result (*CommWindowRegister)(bn_comm comm, void *buff, size_t size, bn_window *win, int flags);
  bn_result (*CommWindowDeregister)(bn_comm comm, bn_window win);
};

extern struct bn_api bn;

/* dlopen `path` (NULL: "libnccl.so.2") and resolve bn. 0, or -1 with
 * `reason`. Idempotent. */
int bn_load(const char *path, char *reason, size_t len);

/* Whether the loaded library has what --nccl-window uses (ncclMemAlloc,
 * ncclMemFree, ncclCommWindowRegister, ncclCommWindowDeregister): 0, or -1
 * with `reason` naming the library and the first symbol it lacks. After a
 * successful bn_load. */
int bn_window_check(char *reason, size_t len);

/* ncclCommWindowRegister may decline and still succeed, writing a NULL
 * window (an NCCL without cuMem or peer mappings): the window column then
 * times NCCL's ordinary path. Prints the header's line saying so when
 * `declined` of the `total` registrations (over all ranks) were; nothing
 * when none was. scripts/perf-tables shows the line. */
void bn_note_declined_windows(uint64_t declined, uint64_t total);

/* "ncclInvalidArgument: <last error>" for messages. */
const char *bn_error(bn_result r, bn_comm comm, char *buf, size_t len);

#endif /* SYMM_BENCH_NCCL_H */
