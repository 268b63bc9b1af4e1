// The device API header on its own, compiled by nvcc (the device_header
// test: sm_80 and sm_90, C++17 and C++20, every warning an error), and its
// agreement with the rest of the ABI:
//  - symmcomm_device.cuh pins symmDevComm, symmDevStatus and
//    symmDevCommRequirements (as cbindgen writes them into symmcomm.h)
//    field by field; including it here runs those static_asserts;
//  - the status record the device API writes is the library's own
//    (kernels/abi.cuh's SymmStatus), offset for offset, with the same error
//    kinds and an op number the library's kernels do not use;
//  - SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER fills what the library checks;
//  - every device function instantiates (a kernel calls each one).
#include "symmcomm_device.cuh"

#include "abi.cuh"  // the library's kernel ABI (kernels/): compile-time only

#include <stddef.h>

static_assert(sizeof(symmDevStatus) == sizeof(SymmStatus), "status record size");
static_assert(offsetof(symmDevStatus, abort) == offsetof(SymmStatus, abort), "status.abort");
static_assert(offsetof(symmDevStatus, error) == offsetof(SymmStatus, error), "status.error");
static_assert(offsetof(symmDevStatus, rank) == offsetof(SymmStatus, rank), "status.rank");
static_assert(offsetof(symmDevStatus, op) == offsetof(SymmStatus, op), "status.op");
static_assert(offsetof(symmDevStatus, peer) == offsetof(SymmStatus, peer), "status.peer");
static_assert(offsetof(symmDevStatus, detail) == offsetof(SymmStatus, detail), "status.detail");
static_assert(offsetof(symmDevStatus, waitedNs) == offsetof(SymmStatus, waited_ns), "status.waited_ns");
static_assert(offsetof(symmDevStatus, info) == offsetof(SymmStatus, mine), "status.info = mine, theirs");
static_assert(offsetof(symmDevStatus, info) + 16 == offsetof(SymmStatus, theirs), "status.info = mine, theirs");
static_assert((uint32_t)symm_detail::kErrTimeout == (uint32_t)SYMM_DEV_TIMEOUT &&
                  (uint32_t)symm_detail::kErrAborted == (uint32_t)SYMM_DEV_ABORTED &&
                  (uint32_t)symm_detail::kErrMismatch == (uint32_t)SYMM_DEV_MISMATCH,
              "error kinds");
static_assert((uint32_t)SYMM_DEV_STATUS_OP > (uint32_t)SYMM_OP_COLLECTIVE &&
                  (uint32_t)SYMM_DEV_STATUS_OP != (uint32_t)SYMM_OP_SEND_RECV,
              "the device API's op number is its own");
static_assert(SYMM_MAX_RANKS <= 8 && sizeof(((symmDevStatus*)nullptr)->info) == 32, "status info words");

// The initializer: sizes and version from these headers, counts zero.
constexpr symmDevCommRequirements kInit = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER;
static_assert(kInit.size == sizeof(symmDevCommRequirements) && kInit.devCommSize == sizeof(symmDevComm) &&
                  kInit.apiVersion == SYMM_DEVICE_API_VERSION && kInit.blockCount == 0 && kInit.signalCount == 0 &&
                  kInit.reserved == 0 && kInit.llBytes == 0,
              "SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER");

extern "C" __global__ void device_header_every_function(symmDevComm dc, float* sym, void* const* table,
                                                        uint4* ll, int* out) {
  int bad = 0;
  float* peer = symmDevPeerPtr(dc, sym, (dc.rank + 1) % dc.nRanks);
  const float* cpeer = symmDevPeerPtr(dc, static_cast<const float*>(sym), 0);
  bad += !symmDevIsSymmetric(dc, sym);
  bad += symmDevTablePeerPtr<float>(table, 0, 16) == nullptr;
  bad += symmDevTablePeerPtr(table, 0, 0) == nullptr;
  const symmDevTeam world = symmDevTeamWorld(dc);
  const symmDevTeam pairs = symmDevTeamStrided(dc, dc.rank & 1, dc.nRanks / 2, 2);
  bad += symmDevTeamRankToWorld(world, 0) != 0;
  bad += symmDevBarrierArrive(dc, blockIdx.x) != symmSuccess;
  peer[threadIdx.x] = cpeer[threadIdx.x];
  bad += symmDevBarrierWait(dc, blockIdx.x) != symmSuccess;
  bad += symmDevBarrier(dc, blockIdx.x, pairs) != symmSuccess;
  bad += symmDevBarrierArrive(dc, blockIdx.x, world) != symmSuccess;
  bad += symmDevBarrierWait(dc, blockIdx.x, world) != symmSuccess;
  if (threadIdx.x == 0) {
    bad += symmDevSignalSet(dc, 0, 1, 5) != symmSuccess;
    bad += symmDevSignalAdd(dc, 0, 1) != symmSuccess;
    bad += symmDevSignalAdd(dc, 0, 1, 2) != symmSuccess;
    bad += symmDevSignalRead(dc, 1, 0) == 0;
    uint64_t seen = 0;
    bad += symmDevSignalWait(dc, 1, 0, symmDevCmpGe, 1, &seen) != symmSuccess;
    bad += symmDevSignalWait(dc, 1, 0, symmDevCmpNe, 0) != symmSuccess;
    bad += symmDevSignalWaitNext(dc, 1, 0) != symmSuccess;
    bad += symmDevSignalWaitNext(dc, 1, 0, 3) != symmSuccess;
  }
  bad += symmDevBlockPutSignal(dc, 0, sym, sym + 64, 256, 2, 1, symmDevSignalOpAdd) != symmSuccess;
  bad += symmDevBlockSignalWait(dc, 2, 0, symmDevCmpGe, 1) != symmSuccess;
  bad += symmDevBlockSignalWaitNext(dc, 2, 0) != symmSuccess;
  const symmDevLLEpoch ep = symmDevLLBegin(dc, blockIdx.x);
  uint64_t v = 0;
  bad += symmDevLLStore(dc, ll + threadIdx.x, 42, ep.flag) != symmSuccess;
  bad += !symmDevLLTryLoad(ll + threadIdx.x, ep.flag, &v);
  bad += symmDevLLLoad(dc, ll + threadIdx.x, ep.flag, &v, 0) != symmSuccess;
  symmDevLLEnd(dc, blockIdx.x, ep);
  bad += symmDevGetError(dc) != symmSuccess;
  if (bad) atomicAdd(out, bad);
}
