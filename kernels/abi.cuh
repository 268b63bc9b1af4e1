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
  SYMM_DEV_MISMATCH = 3,  // SYMM_CHECK: ranks called different collectives
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
  uint32_t mine[4];     // SYMM_DEV_MISMATCH: this rank's call descriptor (coll.cuh)
  uint32_t theirs[4];   // ... and the peer's
};
static_assert(sizeof(SymmStatus) == 64, "SymmStatus layout");

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

// ---- Collectives ---------------------------------------------------------

// Most blocks a collective kernel uses; each block syncs only with the
// block of the same index on the other ranks.
#define SYMM_COLL_MAX_BLOCKS 128

// SymmCollArgs::epochs holds 4 rows of SYMM_COLL_MAX_BLOCKS words: per-block
// sync epochs, staged rounds, kernels run (coll.cuh), then the LL packets'
// call epoch and finished-block count (ll.cuh) at this index.
#define SYMM_COLL_LL_COUNTERS (3 * SYMM_COLL_MAX_BLOCKS)

// Flags of SymmCollArgs::mode.
#define SYMM_COLL_STAGED 1u     // inputs are copied into scratch first
#define SYMM_COLL_END_SYNC 2u   // peers read our user buffers: wait for them at the end
#define SYMM_COLL_TWO_SHOT 4u   // all-reduce: reduce-scatter, then all-gather
#define SYMM_COLL_PROGRESS 8u   // all-gather: set a flag per landed chunk
#define SYMM_COLL_CHECK 16u     // compare (collective, count, dtype, op, root) across ranks
#define SYMM_COLL_LOCAL 32u     // reduce-scatter: reduce a.src[0..n) locally, no cross-rank sync

// Collective ids, for SYMM_CHECK and error messages (src/coll/mod.rs).
enum SymmCollId : uint32_t {
  SYMM_COLL_ALLREDUCE = 1,
  SYMM_COLL_ALLGATHER = 2,
  SYMM_COLL_REDUCE_SCATTER = 3,
  SYMM_COLL_BROADCAST = 4,
  SYMM_COLL_REDUCE = 5,
  SYMM_COLL_ALLTOALL = 6,
};

// Arguments of every collective kernel, passed by value.
// Pointers to other ranks are as seen from this process.
struct SymmCollArgs {
  SymmWaitCtx wait;
  uint32_t* flags;                      // this rank's sync flags [block][peer]
  uint32_t* peer_flags[SYMM_MAX_RANKS]; // rank r's sync flags (we write [block][our rank])
  uint32_t* epochs;                     // this rank's per-block counters (see coll.cuh)
  uint32_t* check;                      // this rank's descriptor slots [block][peer] (see coll.cuh)
  uint32_t* peer_check[SYMM_MAX_RANKS];
  const char* src[SYMM_MAX_RANKS];      // zero-copy: rank r's input buffer
  char* scratch[SYMM_MAX_RANKS];        // rank r's scratch (two halves of `half` bytes, in then out)
  char* ll[SYMM_MAX_RANKS];             // rank r's LL packet slots [parity][source] (ll.cuh)
  const char* send;                     // this rank's input
  char* recv;                           // this rank's output
  uint32_t* progress;                   // SYMM_COLL_PROGRESS: flags[rank][chunk]
  uint64_t count;                       // elements (per rank block where the collective has blocks)
  uint64_t chunk;                       // elements per staged round
  uint64_t unit;                        // elements per work unit (progress chunk), 0 = even split
  uint64_t half;                        // bytes of one scratch half
  uint64_t ll_slot;                     // bytes of one LL slot
  uint32_t rank, nranks, op, root;
  uint32_t mode, coll, dtype, elem_size;
  uint32_t token;                       // which user buffer peers read (0: staged); must match
  uint32_t pad;
};
static_assert(sizeof(SymmCollArgs) == 32 + 8 + 64 + 8 + 8 + 64 + 64 + 64 + 64 + 8 + 8 + 8 + 40 + 32 + 8,
              "SymmCollArgs layout");

// ---- Point-to-point ------------------------------------------------------

#define SYMM_P2P_MAX_OPS 16       // sends + receives in one launch
#define SYMM_P2P_BLOCKS 16        // blocks per operation (the same on every rank)

// One send or receive of `bytes` bytes with `peer`.
struct SymmP2POp {
  uint64_t buf;
  uint64_t bytes;
  uint32_t peer;
  uint32_t is_send;
};

// Data goes through the receiver's staging slots: [sender][2][slot_bytes].
// Flags (uint32, in each rank's pad):
//   ready[block][sender]   in the receiver's pad: chunks the sender has staged
//   done[block][receiver]  in the sender's pad: chunks the receiver has taken
//   sent[block][peer], taken[block][peer]: local chunk counters per channel.
struct SymmP2PArgs {
  SymmWaitCtx wait;
  uint32_t* flags;                      // this rank's: ready, done, sent, taken
  uint32_t* peer_flags[SYMM_MAX_RANKS];
  char* slots;                          // this rank's staging slots
  char* peer_slots[SYMM_MAX_RANKS];
  uint64_t slot_bytes;
  SymmP2POp ops[SYMM_P2P_MAX_OPS];
  uint32_t nops, rank, nranks, pad;
};
static_assert(sizeof(SymmP2PArgs) == 32 + 8 + 64 + 8 + 64 + 8 + 24 * SYMM_P2P_MAX_OPS + 16, "SymmP2PArgs layout");

#define SYMM_P2P_READY(f, blk, r) ((f) + (blk) * SYMM_MAX_RANKS + (r))
#define SYMM_P2P_DONE(f, blk, r) ((f) + SYMM_P2P_BLOCKS * SYMM_MAX_RANKS + (blk) * SYMM_MAX_RANKS + (r))
#define SYMM_P2P_SENT(f, blk, r) ((f) + 2 * SYMM_P2P_BLOCKS * SYMM_MAX_RANKS + (blk) * SYMM_MAX_RANKS + (r))
#define SYMM_P2P_TAKEN(f, blk, r) ((f) + 3 * SYMM_P2P_BLOCKS * SYMM_MAX_RANKS + (blk) * SYMM_MAX_RANKS + (r))
#define SYMM_P2P_FLAG_WORDS (4 * SYMM_P2P_BLOCKS * SYMM_MAX_RANKS)
