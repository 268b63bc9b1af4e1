/*
 * symmcomm_device.cuh: symmcomm's device API, for your own CUDA kernels.
 *
 * Header-only CUDA C++ (C++17, nvcc 12.x/13.x, sm_80 and newer). It needs
 * nothing of the library's internals: only symmcomm.h, which it includes.
 *
 *   Host:   symmDevCommRequirements req = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER;
 *           req.blockCount = grid;                      // barrier slots
 *           symmDevComm dc;
 *           symmDevCommCreate(comm, &req, &dc);         // collective
 *           my_kernel<<<grid, block, 0, stream>>>(dc, ...);
 *           ...
 *           symmDevCommDestroy(comm, &dc);              // collective
 *   Device: __global__ void my_kernel(symmDevComm dc, ...)   // by value
 *
 * What is here (every function is __device__; "block" functions must be
 * called by every thread of the block with the same arguments, "thread"
 * functions by any thread):
 *
 *   peer memory  symmDevPeerPtr, symmDevIsSymmetric (symmetric memory, by
 *                arithmetic); symmDevTablePeerPtr (registered buffers,
 *                through symmMemGetPeerTable's table)
 *   teams        symmDevTeamWorld, symmDevTeamStrided, symmDevTeamRankToWorld
 *   barriers     symmDevBarrierArrive, symmDevBarrierWait, symmDevBarrier
 *                (block; the calling block with the block that uses the same
 *                slot on every rank of the team)
 *   signals      symmDevSignalSet, symmDevSignalAdd, symmDevSignalRead,
 *                symmDevSignalWait, symmDevSignalWaitNext (thread);
 *                symmDevBlockPutSignal, symmDevBlockSignalWait,
 *                symmDevBlockSignalWaitNext (block)
 *   LL packets   symmDevLLStore, symmDevLLTryLoad, symmDevLLLoad (thread);
 *                symmDevLLBegin (thread), symmDevLLEnd (block)
 *   errors       symmDevGetError
 *
 * Memory ordering (all at system scope, i.e. across GPUs):
 *   - symmDevBarrierArrive releases everything the block wrote before it,
 *     to any GPU; symmDevBarrierWait on the same slot acquires it for the
 *     whole block: after the wait, every thread sees every team member's
 *     writes made before its arrive.
 *   - symmDevSignalSet/Add release the calling thread's earlier writes
 *     (call __syncthreads() first to release the block's);
 *     symmDevSignalRead/Wait/WaitNext acquire for the calling thread
 *     (__syncthreads() after extends that to the block). The Block*
 *     variants do both for you.
 *   - An LL packet is its own synchronisation: a load that sees the flag
 *     has the packet's 8 data bytes; nothing else is ordered.
 *   - Plain loads and stores to peer memory are weak: order them only
 *     through barriers, signals or kernel boundaries.
 *
 * Bounded waits. Every wait here gives up after the communicator's
 * SYMM_TIMEOUT, within 10 ms when the host calls symmCommAbort
 * (SYMM_DEV_SPIN_STATUS_NS), or when another wait of the communicator on
 * this rank already failed. It then
 * returns a failure code (never traps: the CUDA context stays usable), and
 * the first failure is recorded in the communicator's status, naming the
 * rank, the function, the slot, the peer waited for and the values, so
 * symmCommGetAsyncError reports it and symmGetLastError(comm) explains it.
 * Codes returned by device functions:
 *   symmSuccess          done
 *   symmTimeout          this wait reached SYMM_TIMEOUT
 *   symmRemoteError      the communicator was aborted (symmCommAbort)
 *   symmInvalidArgument  a bad argument to a device function (recorded)
 *   otherwise            the code of the communicator's earlier error
 * After a failure the communicator is unusable (as with every asynchronous
 * error): let the kernel return, then abort or destroy the communicator.
 * Bad arguments (slot or peer out of range, a team without this rank, a
 * misaligned LL pointer) are recorded and returned, never written through.
 *
 * Reuse. Barrier slots, signal slots and LL epochs are advanced only by
 * kernels, with wrap-safe counters in device memory: the same slots serve
 * any number of kernels and CUDA-graph replays with no host reset.
 *
 * ABI. symmDevComm is passed by value and its layout is frozen for device
 * API major version 1 (the static_asserts below pin every field). A kernel
 * compiled against this header keeps working with later libraries of the
 * same major version; symmDevCommCreate refuses headers of another major
 * version or a newer minor one, and writes the caller's layout only (its
 * version and size, never a later minor version's appended fields). The status record (symmDevStatus) is part
 * of the same frozen ABI: device-API failures are written with op = 6
 * (SYMM_DEV_STATUS_OP) and
 *   detail  = function << 24 | slot   (a wait; functions numbered below)
 *             function << 24 | what   (a bad argument; see symm_detail)
 *   info[0] = blockIdx.x, info[1]/info[4] = value waited for (low/high),
 *   info[2]/info[5] = value seen (low/high), info[3] = comparison,
 *   info[6] = threadIdx.x, info[7] = 0.
 */
#ifndef SYMMCOMM_DEVICE_CUH
#define SYMMCOMM_DEVICE_CUH

#if !defined(__CUDACC__)
#error "symmcomm_device.cuh is CUDA C++: compile it with nvcc"
#endif
#if __cplusplus < 201703L
#error "symmcomm_device.cuh needs C++17 (nvcc -std=c++17)"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "symmcomm_device.cuh needs compute capability 8.0 or newer (sm_80+)"
#endif

#include <stddef.h>
#include <stdint.h>

#include "symmcomm.h"

/* ---- The frozen layout (device API 1.x) ------------------------------------ */

static_assert(SYMM_DEVICE_API_MAJOR == 1 && SYMM_DEVICE_API_VERSION == 100,
              "symmcomm_device.cuh and symmcomm.h come from different releases");
static_assert(sizeof(symmDevComm) == 128, "symmDevComm layout (device API 1.0)");
static_assert(offsetof(symmDevComm, version) == 0 && offsetof(symmDevComm, size) == 4, "symmDevComm layout");
static_assert(offsetof(symmDevComm, rank) == 8 && offsetof(symmDevComm, nRanks) == 12, "symmDevComm layout");
static_assert(offsetof(symmDevComm, symmBase) == 16 && offsetof(symmDevComm, symmStride) == 24, "symmDevComm layout");
static_assert(offsetof(symmDevComm, blockCount) == 32 && offsetof(symmDevComm, signalCount) == 36, "symmDevComm layout");
static_assert(offsetof(symmDevComm, barrierInbox) == 40 && offsetof(symmDevComm, barrierEpochs) == 48, "symmDevComm layout");
static_assert(offsetof(symmDevComm, llEpochs) == 56 && offsetof(symmDevComm, signals) == 64, "symmDevComm layout");
static_assert(offsetof(symmDevComm, signalShadows) == 72 && offsetof(symmDevComm, llBuffer) == 80, "symmDevComm layout");
static_assert(offsetof(symmDevComm, llBytes) == 88 && offsetof(symmDevComm, status) == 96, "symmDevComm layout");
static_assert(offsetof(symmDevComm, errorGuard) == 104 && offsetof(symmDevComm, timeoutNs) == 112, "symmDevComm layout");
static_assert(offsetof(symmDevComm, handle) == 120, "symmDevComm layout");
static_assert(sizeof(symmDevStatus) == 64, "symmDevStatus layout");
static_assert(offsetof(symmDevStatus, abort) == 0 && offsetof(symmDevStatus, error) == 4, "symmDevStatus layout");
static_assert(offsetof(symmDevStatus, rank) == 8 && offsetof(symmDevStatus, op) == 12, "symmDevStatus layout");
static_assert(offsetof(symmDevStatus, peer) == 16 && offsetof(symmDevStatus, detail) == 20, "symmDevStatus layout");
static_assert(offsetof(symmDevStatus, waitedNs) == 24 && offsetof(symmDevStatus, info) == 32, "symmDevStatus layout");
static_assert(sizeof(symmDevCommRequirements) == 32, "symmDevCommRequirements layout");
static_assert(offsetof(symmDevCommRequirements, blockCount) == 12, "symmDevCommRequirements layout");
static_assert(offsetof(symmDevCommRequirements, llBytes) == 24, "symmDevCommRequirements layout");

/* ---- Types ---------------------------------------------------------------- */

/* A team: the ranks first, first + stride, ..., first + (nRanks - 1) * stride
 * of the communicator; `rank` is this rank's index in it (-1: not a member). */
struct symmDevTeam {
  int first;
  int nRanks;
  int stride;
  int rank;
};

/* Comparisons of signal waits (numbers frozen). Ordered comparisons are
 * unsigned 64-bit. */
enum symmDevCmp_t : uint32_t {
  symmDevCmpEq = 0,
  symmDevCmpNe = 1,
  symmDevCmpGe = 2,
  symmDevCmpGt = 3,
  symmDevCmpLe = 4,
  symmDevCmpLt = 5,
};

/* What a signal does to the peer's slot (numbers frozen). */
enum symmDevSignalOp_t : uint32_t {
  symmDevSignalOpSet = 0,
  symmDevSignalOpAdd = 1,
};

/* One launch's LL flag for a slot (symmDevLLBegin). `flag` is never 0, so
 * zeroed memory never looks like a packet; `parity` alternates per launch,
 * for double-buffered packet areas. */
struct symmDevLLEpoch {
  uint32_t epoch;
  uint32_t flag;
  uint32_t parity;
};

/* ---- Internals -------------------------------------------------------------- */

namespace symm_detail {

/* symmDevStatus::error values (frozen; the library's kernels write 1-3 too). */
enum : uint32_t { kErrTimeout = 1, kErrAborted = 2, kErrMismatch = 3, kErrInvalidArgument = 4 };

/* Function numbers in symmDevStatus::detail >> 24 (frozen). */
enum : uint32_t {
  kFnBarrierArrive = 1,
  kFnBarrierWait = 2,
  kFnSignalSet = 3,
  kFnSignalAdd = 4,
  kFnSignalWait = 5,
  kFnSignalWaitNext = 6,
  kFnSignalRead = 7,
  kFnLLStore = 8,
  kFnLLLoad = 9,
  kFnLLBegin = 10,
  kFnBlockPutSignal = 11,
  kFnPeerPtr = 12,
};

/* What was wrong with an argument (detail & 0xffffff of a bad-argument
 * record; frozen). */
enum : uint32_t {
  kArgSlot = 1,      /* value, limit: the slot, the slots reserved */
  kArgPeer = 2,      /* value, limit: the peer, the rank count */
  kArgTeam = 3,      /* the team lacks this rank or leaves the communicator */
  kArgAlign = 4,     /* value: the pointer */
  kArgSignalOp = 5,  /* value: the op */
  kArgCmp = 6,       /* value: the comparison */
  kArgNotSymmetric = 7, /* value: the pointer */
};

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_acquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void red_add_release(uint64_t* p, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Wrap-safe "a is at or after b". */
__device__ __forceinline__ bool seq_geq(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }
__device__ __forceinline__ bool seq_geq(uint64_t a, uint64_t b) { return (int64_t)(a - b) >= 0; }

/* A status code for a symmDevStatus::error value. */
__device__ __forceinline__ symmResult_t code_of(uint32_t error) {
  switch (error) {
    case 0: return symmSuccess;
    case kErrTimeout: return symmTimeout;
    case kErrAborted: return symmRemoteError;
    case kErrMismatch: return symmInvalidUsage;
    case kErrInvalidArgument: return symmInvalidArgument;
    default: return symmInternalError;
  }
}

/* Record the first error of the communicator (on this rank): the device
 * word errorGuard decides who is first, then the record is written to the
 * host-mapped status, `error` last. */
__device__ __forceinline__ void record(const symmDevComm& dc, uint32_t error, uint32_t fn, uint32_t low24,
                                       uint32_t peer, uint64_t value, uint64_t seen, uint32_t cmp, uint64_t waited) {
  if (atomicCAS(dc.errorGuard, 0u, 1u) != 0u) return;
  volatile symmDevStatus* s = dc.status;
  s->rank = (uint32_t)dc.rank;
  s->op = (uint32_t)SYMM_DEV_STATUS_OP;
  s->peer = peer;
  s->detail = fn << 24 | (low24 & 0xffffffu);
  s->waitedNs = waited;
  s->info[0] = blockIdx.x;
  s->info[1] = (uint32_t)value;
  s->info[2] = (uint32_t)seen;
  s->info[3] = cmp;
  s->info[4] = (uint32_t)(value >> 32);
  s->info[5] = (uint32_t)(seen >> 32);
  s->info[6] = threadIdx.x;
  s->info[7] = 0;
  __threadfence_system();
  s->error = error;
  __threadfence_system();
}

/* A bad argument: recorded (once per call, by thread 0 of the block for
 * block functions) and returned. */
__device__ __forceinline__ symmResult_t invalid(const symmDevComm& dc, uint32_t fn, uint32_t what, uint64_t value,
                                                uint64_t limit) {
  record(dc, kErrInvalidArgument, fn, what, 0xffffffffu, value, limit, 0, 0);
  return symmInvalidArgument;
}

/* The code of the error recorded on this rank, once errorGuard is set: the
 * recorder writes `error` last, so a reader that comes in mid-write re-reads
 * (bounded). Reads host-mapped memory: for the moment a wait gives up, not
 * for inner loops. */
__device__ __forceinline__ symmResult_t recorded_error(const symmDevComm& dc) {
  const volatile symmDevStatus* s = dc.status;
  for (int k = 0; k < (1 << 16); ++k)
    if (const uint32_t e = s->error) return code_of(e);
  return symmInternalError;
}

/* How often, at most, a spinning thread reads the host-mapped abort flag
 * (ns): each read crosses PCIe, and thousands of spinning threads reading
 * it often starve the GPU's fetches of newly launched work (the library's
 * kernels/common.cuh says more). An abort is noticed within this. */
#define SYMM_DEV_SPIN_STATUS_NS 10000000ull

/* The bound on a spin-wait: call poll() once per unsuccessful check. Every
 * 1024th call reads %globaltimer and the device word errorGuard (set once
 * any wait recorded an error), and every SYMM_DEV_SPIN_STATUS_NS of waiting
 * the host-mapped abort flag; on timeout or abort it records the failure
 * once and returns its code. */
struct Spin {
  const symmDevComm& dc;
  uint64_t start;
  uint64_t nextStatus;
  uint32_t iters;

  __device__ __forceinline__ explicit Spin(const symmDevComm& d)
      : dc(d), start(globaltimer()), nextStatus(start + SYMM_DEV_SPIN_STATUS_NS), iters(0) {}

  __device__ __forceinline__ symmResult_t poll(uint32_t fn, uint32_t slot, uint32_t peer, uint64_t value,
                                               uint64_t seen, uint32_t cmp) {
    if ((++iters & 1023u) != 0) return symmSuccess;
    const uint64_t now = globaltimer();
    if (*(const volatile uint32_t*)dc.errorGuard) return recorded_error(dc);
    if (now - start > dc.timeoutNs) {
      record(dc, kErrTimeout, fn, slot, peer, value, seen, cmp, now - start);
      return symmTimeout;
    }
    if ((int64_t)(now - nextStatus) >= 0) {
      nextStatus = now + SYMM_DEV_SPIN_STATUS_NS;
      const volatile symmDevStatus* s = dc.status;
      if (s->abort) {
        record(dc, kErrAborted, fn, slot, peer, value, seen, cmp, now - start);
        return symmRemoteError;
      }
    }
    return symmSuccess;
  }
};

/* One code for the whole block after a block-wide step in which some
 * threads may have failed: the communicator's recorded error, which the
 * failing thread wrote before reaching the barrier (or, while another
 * recorder is mid-write, after a short bounded re-read). */
__device__ __forceinline__ symmResult_t block_result(const symmDevComm& dc, symmResult_t mine) {
  if (!__syncthreads_or(mine != symmSuccess)) return symmSuccess;
  const symmResult_t recorded = recorded_error(dc);
  return recorded != symmInternalError ? recorded : mine != symmSuccess ? mine : symmInternalError;
}

__device__ __forceinline__ bool team_ok(const symmDevComm& dc, const symmDevTeam& t) {
  return t.nRanks >= 1 && t.stride >= 1 && t.first >= 0 && t.rank >= 0 && t.rank < t.nRanks &&
         t.first + t.rank * t.stride == dc.rank && (int64_t)t.first + (int64_t)(t.nRanks - 1) * t.stride < dc.nRanks;
}

__device__ __forceinline__ bool cmp_holds(uint64_t v, uint32_t cmp, uint64_t x) {
  switch (cmp) {
    case symmDevCmpEq: return v == x;
    case symmDevCmpNe: return v != x;
    case symmDevCmpGe: return v >= x;
    case symmDevCmpGt: return v > x;
    case symmDevCmpLe: return v <= x;
    default: return v < x;
  }
}

template <typename T>
__device__ __forceinline__ T* offset(T* p, int64_t bytes) {
  return (T*)((uintptr_t)p + (uintptr_t)bytes);  // any T, const or not, void included
}

}  // namespace symm_detail

/* ---- Peer memory ------------------------------------------------------------ */

/* Thread. Whether `ptr` lies in this rank's copy of the symmetric heap
 * (memory from symmMemAlloc of this communicator, or the device
 * communicator's own slots and LL buffer). */
__device__ __forceinline__ bool symmDevIsSymmetric(const symmDevComm& dc, const void* ptr) {
  const uint64_t mine = dc.symmBase + (uint64_t)dc.rank * dc.symmStride;
  return (uint64_t)(uintptr_t)ptr - mine < dc.symmStride;
}

/* Thread. `peer`'s copy of `ptr`, a local address inside a symmetric
 * allocation: plain arithmetic (every rank's heap is mapped at a fixed
 * stride in this process), no table walk, no check on the hot path
 * (symmDevIsSymmetric checks). Load and store through it like local memory. */
template <typename T>
__device__ __forceinline__ T* symmDevPeerPtr(const symmDevComm& dc, T* ptr, int peer) {
  return symm_detail::offset(ptr, (int64_t)(peer - dc.rank) * (int64_t)dc.symmStride);
}

/* Thread. `peer`'s address of byte `offset` of a registered (or symmetric)
 * buffer, through the device table symmMemGetPeerTable returned for it. */
template <typename T = void>
__device__ __forceinline__ T* symmDevTablePeerPtr(void* const* table, int peer, size_t offset) {
  return static_cast<T*>(static_cast<void*>(static_cast<char*>(table[peer]) + offset));
}

/* ---- Teams ------------------------------------------------------------------ */

/* Thread. Every rank of the communicator. */
__device__ __forceinline__ symmDevTeam symmDevTeamWorld(const symmDevComm& dc) {
  return symmDevTeam{0, dc.nRanks, 1, dc.rank};
}

/* Thread. Ranks first, first + stride, ... (nRanks of them); `rank` is -1
 * when this rank is not one of them. */
__device__ __forceinline__ symmDevTeam symmDevTeamStrided(const symmDevComm& dc, int first, int nRanks, int stride) {
  int idx = -1;
  if (stride > 0 && dc.rank >= first && (dc.rank - first) % stride == 0 && (dc.rank - first) / stride < nRanks)
    idx = (dc.rank - first) / stride;
  return symmDevTeam{first, nRanks, stride, idx};
}

/* Thread. The communicator rank of team member `i`. */
__device__ __forceinline__ int symmDevTeamRankToWorld(const symmDevTeam& team, int i) {
  return team.first + i * team.stride;
}

/* ---- Errors ------------------------------------------------------------------ */

/* Thread. The communicator's recorded error on this rank as a code
 * (symmSuccess when none): lets a kernel stop early once any wait failed.
 * Reads host-mapped memory: not for inner loops. */
__device__ __forceinline__ symmResult_t symmDevGetError(const symmDevComm& dc) {
  const volatile symmDevStatus* s = dc.status;
  return symm_detail::code_of(s->error);
}

/* ---- Barriers ---------------------------------------------------------------- */

/* Block. Arrive at barrier `slot` (0 <= slot < blockCount; usually
 * blockIdx.x) of `team`: releases everything the block wrote before (all
 * threads' writes, to any GPU) to the team's blocks that use the same slot.
 * Does not wait. Pair it with symmDevBarrierWait on the same slot and team
 * before arriving again; work in between overlaps the other ranks' arrival.
 * Every rank's counters for a slot stay in step as long as each pair of
 * ranks passes the same sequence of barriers on that slot, whatever teams
 * they belong to. */
__device__ __forceinline__ symmResult_t symmDevBarrierArrive(const symmDevComm& dc, uint32_t slot,
                                                             const symmDevTeam& team) {
  using namespace symm_detail;
  if (slot >= dc.blockCount)  // arguments are the same in every thread: all return here
    return threadIdx.x == 0 ? invalid(dc, kFnBarrierArrive, kArgSlot, slot, dc.blockCount) : symmInvalidArgument;
  if (!team_ok(dc, team))
    return threadIdx.x == 0 ? invalid(dc, kFnBarrierArrive, kArgTeam, (uint32_t)team.rank, (uint32_t)team.nRanks)
                            : symmInvalidArgument;
  __syncthreads();  // the block's writes happen before thread i's release below
  const uint32_t row = slot * (uint32_t)dc.nRanks;
  for (int i = threadIdx.x; i < team.nRanks; i += blockDim.x) {
    const int p = team.first + i * team.stride;
    if (p == dc.rank) continue;
    uint32_t* epoch = dc.barrierEpochs + row + p;
    const uint32_t e = *epoch + 1;
    *epoch = e;
    st_release(symmDevPeerPtr(dc, dc.barrierInbox + row + dc.rank, p), e);
  }
  return symmSuccess;
}
__device__ __forceinline__ symmResult_t symmDevBarrierArrive(const symmDevComm& dc, uint32_t slot) {
  return symmDevBarrierArrive(dc, slot, symmDevTeamWorld(dc));
}

/* Block. Wait until every rank of `team` arrived at `slot` as often as this
 * rank did; acquires their writes for the whole block. Returns the same
 * code in every thread. */
__device__ __forceinline__ symmResult_t symmDevBarrierWait(const symmDevComm& dc, uint32_t slot,
                                                           const symmDevTeam& team) {
  using namespace symm_detail;
  if (slot >= dc.blockCount)
    return threadIdx.x == 0 ? invalid(dc, kFnBarrierWait, kArgSlot, slot, dc.blockCount) : symmInvalidArgument;
  if (!team_ok(dc, team))
    return threadIdx.x == 0 ? invalid(dc, kFnBarrierWait, kArgTeam, (uint32_t)team.rank, (uint32_t)team.nRanks)
                            : symmInvalidArgument;
  const uint32_t row = slot * (uint32_t)dc.nRanks;
  symmResult_t rc = symmSuccess;
  for (int i = threadIdx.x; i < team.nRanks && rc == symmSuccess; i += blockDim.x) {
    const int p = team.first + i * team.stride;
    if (p == dc.rank) continue;
    const uint32_t want = dc.barrierEpochs[row + p];
    const uint32_t* inbox = dc.barrierInbox + row + p;
    uint32_t seen = ld_acquire(inbox);
    if (seq_geq(seen, want)) continue;
    Spin spin(dc);
    while (!seq_geq(seen = ld_acquire(inbox), want))
      if ((rc = spin.poll(kFnBarrierWait, slot, p, want, seen, symmDevCmpGe)) != symmSuccess) break;
  }
  return block_result(dc, rc);  // also the barrier that shares the acquire with the block
}
__device__ __forceinline__ symmResult_t symmDevBarrierWait(const symmDevComm& dc, uint32_t slot) {
  return symmDevBarrierWait(dc, slot, symmDevTeamWorld(dc));
}

/* Block. symmDevBarrierArrive then symmDevBarrierWait. */
__device__ __forceinline__ symmResult_t symmDevBarrier(const symmDevComm& dc, uint32_t slot, const symmDevTeam& team) {
  const symmResult_t rc = symmDevBarrierArrive(dc, slot, team);
  return rc != symmSuccess ? rc : symmDevBarrierWait(dc, slot, team);
}
__device__ __forceinline__ symmResult_t symmDevBarrier(const symmDevComm& dc, uint32_t slot) {
  return symmDevBarrier(dc, slot, symmDevTeamWorld(dc));
}

/* ---- Signals ------------------------------------------------------------------ */
/* Each rank owns signalCount slots; slot s holds one 64-bit word per source
 * rank, written only by that rank: symmDevSignal* change word [s][this rank]
 * in `peer`'s memory; waits watch word [s][fromPeer] in this rank's. */

namespace symm_detail {
__device__ __forceinline__ bool signal_args_ok(const symmDevComm& dc, uint32_t fn, int peer, uint32_t slot,
                                               symmResult_t* rc) {
  if (slot >= dc.signalCount) {
    *rc = invalid(dc, fn, kArgSlot, slot, dc.signalCount);
    return false;
  }
  if (peer < 0 || peer >= dc.nRanks) {
    *rc = invalid(dc, fn, kArgPeer, (uint32_t)peer, (uint32_t)dc.nRanks);
    return false;
  }
  return true;
}
}  // namespace symm_detail

/* Thread. Set word [slot][this rank] of `peer`'s signals to `value`,
 * releasing this thread's earlier writes (system scope). */
__device__ __forceinline__ symmResult_t symmDevSignalSet(const symmDevComm& dc, int peer, uint32_t slot,
                                                         uint64_t value) {
  using namespace symm_detail;
  symmResult_t rc = symmSuccess;
  if (!signal_args_ok(dc, kFnSignalSet, peer, slot, &rc)) return rc;
  st_release(symmDevPeerPtr(dc, dc.signals + (uint64_t)slot * dc.nRanks + dc.rank, peer), value);
  return symmSuccess;
}

/* Thread. Add `n` to word [slot][this rank] of `peer`'s signals (an atomic
 * that releases this thread's earlier writes). */
__device__ __forceinline__ symmResult_t symmDevSignalAdd(const symmDevComm& dc, int peer, uint32_t slot,
                                                         uint64_t n = 1) {
  using namespace symm_detail;
  symmResult_t rc = symmSuccess;
  if (!signal_args_ok(dc, kFnSignalAdd, peer, slot, &rc)) return rc;
  red_add_release(symmDevPeerPtr(dc, dc.signals + (uint64_t)slot * dc.nRanks + dc.rank, peer), n);
  return symmSuccess;
}

/* Thread. The current value of signal `slot` from `fromPeer` (acquire); 0
 * with a recorded error for bad arguments. */
__device__ __forceinline__ uint64_t symmDevSignalRead(const symmDevComm& dc, uint32_t slot, int fromPeer) {
  using namespace symm_detail;
  symmResult_t rc = symmSuccess;
  if (!signal_args_ok(dc, kFnSignalRead, fromPeer, slot, &rc)) return 0;
  return ld_acquire(dc.signals + (uint64_t)slot * dc.nRanks + fromPeer);
}

/* Thread. Wait until signal `slot` from `fromPeer` compares `cmp` to
 * `value` (acquire); `*seen` (optional) gets the last value read. */
__device__ __forceinline__ symmResult_t symmDevSignalWait(const symmDevComm& dc, uint32_t slot, int fromPeer,
                                                          symmDevCmp_t cmp, uint64_t value,
                                                          uint64_t* seen = nullptr) {
  using namespace symm_detail;
  symmResult_t rc = symmSuccess;
  if (!signal_args_ok(dc, kFnSignalWait, fromPeer, slot, &rc)) return rc;
  if ((uint32_t)cmp > symmDevCmpLt) return invalid(dc, kFnSignalWait, kArgCmp, (uint32_t)cmp, symmDevCmpLt);
  const uint64_t* word = dc.signals + (uint64_t)slot * dc.nRanks + fromPeer;
  uint64_t v = ld_acquire(word);
  if (!cmp_holds(v, cmp, value)) {
    Spin spin(dc);
    while (!cmp_holds(v = ld_acquire(word), cmp, value))
      if ((rc = spin.poll(kFnSignalWait, slot, (uint32_t)fromPeer, value, v, cmp)) != symmSuccess) break;
  }
  if (seen) *seen = v;
  return cmp_holds(v, cmp, value) ? symmSuccess : rc;
}

/* Thread. Counting waits that survive kernel relaunches and graph replays
 * with no reset: this rank keeps, per (slot, fromPeer), how much it has
 * consumed; this adds `n` to it and waits until the signal reaches it
 * (wrap-safe). Pair with symmDevSignalAdd(dc, thisRank, slot, n) on
 * `fromPeer`. One thread at a time per (slot, fromPeer). */
__device__ __forceinline__ symmResult_t symmDevSignalWaitNext(const symmDevComm& dc, uint32_t slot, int fromPeer,
                                                              uint64_t n = 1) {
  using namespace symm_detail;
  symmResult_t rc = symmSuccess;
  if (!signal_args_ok(dc, kFnSignalWaitNext, fromPeer, slot, &rc)) return rc;
  const uint64_t idx = (uint64_t)slot * dc.nRanks + fromPeer;
  const uint64_t want = dc.signalShadows[idx] + n;
  dc.signalShadows[idx] = want;
  const uint64_t* word = dc.signals + idx;
  uint64_t v = ld_acquire(word);
  if (seq_geq(v, want)) return symmSuccess;
  Spin spin(dc);
  while (!seq_geq(v = ld_acquire(word), want))
    if ((rc = spin.poll(kFnSignalWaitNext, slot, (uint32_t)fromPeer, want, v, symmDevCmpGe)) != symmSuccess) return rc;
  return symmSuccess;
}

/* Block. Put with signal: the block copies `bytes` from `src` (any memory
 * this GPU reads) to `peer`'s copy of the symmetric address `dst`, then one
 * thread sets or adds `value` to word [slot][this rank] of `peer`'s signals,
 * releasing the whole copy: a peer that sees the signal sees the data. */
__device__ __forceinline__ symmResult_t symmDevBlockPutSignal(const symmDevComm& dc, int peer, void* dst,
                                                              const void* src, size_t bytes, uint32_t slot,
                                                              uint64_t value, symmDevSignalOp_t op) {
  using namespace symm_detail;
  symmResult_t rc = symmSuccess;
  if (threadIdx.x == 0 && signal_args_ok(dc, kFnBlockPutSignal, peer, slot, &rc) && (uint32_t)op > symmDevSignalOpAdd)
    rc = invalid(dc, kFnBlockPutSignal, kArgSignalOp, (uint32_t)op, symmDevSignalOpAdd);
  if (__syncthreads_or(rc != symmSuccess)) return symmInvalidArgument;
  char* d = symmDevPeerPtr(dc, static_cast<char*>(dst), peer);
  const char* s = static_cast<const char*>(src);
  if ((((uintptr_t)d | (uintptr_t)s) & 15) == 0) {
    const size_t nv = bytes / 16;
    for (size_t i = threadIdx.x; i < nv; i += blockDim.x)
      reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(s)[i];
    for (size_t i = nv * 16 + threadIdx.x; i < bytes; i += blockDim.x) d[i] = s[i];
  } else {
    for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) d[i] = s[i];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t* word = symmDevPeerPtr(dc, dc.signals + (uint64_t)slot * dc.nRanks + dc.rank, peer);
    if (op == symmDevSignalOpAdd) red_add_release(word, value);
    else st_release(word, value);
  }
  return symmSuccess;
}

/* Block. Thread 0 waits as symmDevSignalWait; the block then shares its
 * acquire. Returns the same code in every thread. */
__device__ __forceinline__ symmResult_t symmDevBlockSignalWait(const symmDevComm& dc, uint32_t slot, int fromPeer,
                                                               symmDevCmp_t cmp, uint64_t value) {
  symmResult_t rc = symmSuccess;
  if (threadIdx.x == 0) rc = symmDevSignalWait(dc, slot, fromPeer, cmp, value);
  return symm_detail::block_result(dc, rc);
}

/* Block. Thread 0 waits as symmDevSignalWaitNext; the block then shares
 * its acquire. Returns the same code in every thread. */
__device__ __forceinline__ symmResult_t symmDevBlockSignalWaitNext(const symmDevComm& dc, uint32_t slot,
                                                                   int fromPeer, uint64_t n = 1) {
  symmResult_t rc = symmSuccess;
  if (threadIdx.x == 0) rc = symmDevSignalWaitNext(dc, slot, fromPeer, n);
  return symm_detail::block_result(dc, rc);
}

/* ---- LL packets --------------------------------------------------------------- */
/* A packet is 16 bytes, 16-byte aligned: {data low word, flag, data high
 * word, flag}. Each 8-byte half lands whole, so a reader that sees `flag`
 * in both halves has all 8 data bytes: one store carries data and its
 * synchronisation (the latency-bound exchanges of small messages). Use a
 * flag no earlier packet at that address carried: symmDevLLBegin gives one
 * per launch. Packets can live in dc.llBuffer (requirements.llBytes) or in
 * any symmetric buffer. */

/* Thread. Store `data` with `flag` at `dst` (local or a peer's memory). */
__device__ __forceinline__ symmResult_t symmDevLLStore(const symmDevComm& dc, void* dst, uint64_t data,
                                                       uint32_t flag) {
  using namespace symm_detail;
  if ((uintptr_t)dst & 15) return invalid(dc, kFnLLStore, kArgAlign, (uint64_t)(uintptr_t)dst, 16);
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"((uint32_t)data), "r"(flag),
               "r"((uint32_t)(data >> 32)), "r"(flag)
               : "memory");
  return symmSuccess;
}

/* Thread. If the packet at `src` (16-byte aligned) carries `flag`, set
 * *data and return true; never waits. */
__device__ __forceinline__ bool symmDevLLTryLoad(const void* src, uint32_t flag, uint64_t* data) {
  uint32_t d0, f0, d1, f1;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
               : "l"(src)
               : "memory");
  if (f0 != flag || f1 != flag) return false;
  *data = (uint64_t)d1 << 32 | d0;
  return true;
}

/* Thread. Wait (bounded) until the packet at `src` carries `flag`, then
 * set *data. `fromPeer` is the rank expected to write it (for the error
 * record). */
__device__ __forceinline__ symmResult_t symmDevLLLoad(const symmDevComm& dc, const void* src, uint32_t flag,
                                                      uint64_t* data, int fromPeer) {
  using namespace symm_detail;
  if ((uintptr_t)src & 15) return invalid(dc, kFnLLLoad, kArgAlign, (uint64_t)(uintptr_t)src, 16);
  if (symmDevLLTryLoad(src, flag, data)) return symmSuccess;
  Spin spin(dc);
  for (;;) {
    if (symmDevLLTryLoad(src, flag, data)) return symmSuccess;
    const volatile uint32_t* w = static_cast<const volatile uint32_t*>(src);
    const uint64_t flags = (uint64_t)w[3] << 32 | w[1];
    const symmResult_t rc = spin.poll(kFnLLLoad, 0, (uint32_t)fromPeer, flag, flags, symmDevCmpEq);
    if (rc != symmSuccess) return rc;
  }
}

/* Thread. This launch's flag for LL slot `slot` (0 <= slot < blockCount,
 * usually blockIdx.x): the same in every thread until symmDevLLEnd. On
 * bad arguments the flag is 0 (matches no packet) and the error recorded. */
__device__ __forceinline__ symmDevLLEpoch symmDevLLBegin(const symmDevComm& dc, uint32_t slot) {
  using namespace symm_detail;
  if (slot >= dc.blockCount) {
    invalid(dc, kFnLLBegin, kArgSlot, slot, dc.blockCount);
    return symmDevLLEpoch{0, 0, 0};
  }
  const uint32_t e = *reinterpret_cast<volatile uint32_t*>(dc.llEpochs + slot);
  return symmDevLLEpoch{e, e + 1, e & 1u};
}

/* Block. Advance LL slot `slot` past epoch `ep` (what symmDevLLBegin gave)
 * for the next launch; call once, at the end, with every thread. Two
 * parities suffice when every rank reads, within a launch, the packets of
 * each rank it writes to (exchanges): a rank writes launch k+2 into a
 * peer's area only after reading the peer's launch k+1 packets, which the
 * peer sends after it finished reading launch k. */
__device__ __forceinline__ void symmDevLLEnd(const symmDevComm& dc, uint32_t slot, const symmDevLLEpoch& ep) {
  __syncthreads();
  if (threadIdx.x == 0 && slot < dc.blockCount && ep.flag != 0) {
    // Skip the value whose flag would be 0 (never a packet), keeping parity.
    dc.llEpochs[slot] = ep.epoch + 1 == 0xffffffffu ? 1u : ep.epoch + 1;
  }
}

#endif /* SYMMCOMM_DEVICE_CUH */
