// Structures shared by the host (Rust) and the kernels. Mirrored in
// src/cuda/abi.rs; both sides assert the sizes so a drift fails to build.
#pragma once
#include <stdint.h>

#define SYMM_MAX_RANKS 8

// Operation ids recorded with a device-side error (see src/cuda/abi.rs).
enum SymmOpId : uint32_t {
  SYMM_OP_NONE = 0,
  SYMM_OP_BARRIER = 1,
  SYMM_OP_PUT_SIGNAL = 2,
  SYMM_OP_WAIT_SIGNAL = 3,
  SYMM_OP_WAIT_VALUE = 4,
  SYMM_OP_COLLECTIVE = 5,
};

// Error kinds in SymmStatus::error.
enum SymmErrorKind : uint32_t {
  SYMM_DEV_OK = 0,
  SYMM_DEV_TIMEOUT = 1,
  SYMM_DEV_ABORTED = 2,
};

// Per-communicator status, in host-pinned memory mapped into the device:
// the host sets `abort`; the first kernel that gives up records why.
struct SymmStatus {
  uint32_t abort;       // written by the host (symmCommAbort)
  uint32_t error;       // SymmErrorKind; first writer wins (atomicCAS)
  uint32_t rank;        // rank that recorded the error
  uint32_t op;          // SymmOpId
  uint32_t peer;        // peer being waited for
  uint32_t detail;      // op-specific (channel, block)
  uint64_t waited_ns;   // how long the wait lasted
};
static_assert(sizeof(SymmStatus) == 32, "SymmStatus layout");

// What every waiting kernel needs to bound its spins. `error_guard` is a
// word of device memory that makes the first error the one recorded (GPU
// atomics on host memory are not portable over PCIe).
struct SymmWaitCtx {
  SymmStatus* status;
  uint32_t* error_guard;
  uint64_t timeout_ns;
  uint32_t rank;
  uint32_t op;
};
static_assert(sizeof(SymmWaitCtx) == 32, "SymmWaitCtx layout");

// Arguments of the flag-exchange kernels (barrier, put/wait signal):
// `local` is this rank's flag row (indexed by peer); `remote[p]` is rank p's
// row, where this rank writes at index `rank`.
struct SymmFlagArgs {
  SymmWaitCtx wait;
  uint32_t* local;
  uint32_t* remote[SYMM_MAX_RANKS];
  uint32_t nranks;
  uint32_t peer;        // put/wait: the one peer; barrier: unused
};
static_assert(sizeof(SymmFlagArgs) == 32 + 8 + 8 * SYMM_MAX_RANKS + 8, "SymmFlagArgs layout");
