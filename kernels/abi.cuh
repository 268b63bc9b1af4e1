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
  // 6: the device API's own (SYMM_DEV_STATUS_OP, include/symmcomm_device.cuh).
  SYMM_OP_SEND_RECV = 7,
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

// Pipelined collectives (pipe.cuh, SYMM_COLL_PIPE): flags in each rank's
// pad at SYMM_PIPE_DELTA words after its collective sync flags
// (SymmCollArgs::flags, peer_flags[r]): [kind][block][peer] words, where
// rank `peer` writes how far its block got; then one chunk counter per
// block, this rank's own. src/memory/pad.rs places the region.
#define SYMM_PIPE_SLOTS 4         // scratch slots per direction (in, out) a pipelined kernel cycles through
#define SYMM_PIPE_DELTA 16384     // words from the sync flags to the pipeline flags
#define SYMM_PIPE_IN_READY 0      // chunks whose copy-in is in the writer's scratch
#define SYMM_PIPE_REDUCED 1       // chunks the writer has reduced (its reads of our inputs are done)
#define SYMM_PIPE_GATHERED 2      // chunks the writer has gathered (its reads of our results are done)
#define SYMM_PIPE_KINDS 3
#define SYMM_PIPE_WORDS (SYMM_PIPE_KINDS * SYMM_COLL_MAX_BLOCKS * SYMM_MAX_RANKS + SYMM_COLL_MAX_BLOCKS)

// Flags of SymmCollArgs::mode.
#define SYMM_COLL_STAGED 1u     // inputs are copied into scratch first
#define SYMM_COLL_END_SYNC 2u   // peers read our user buffers: wait for them at the end
#define SYMM_COLL_TWO_SHOT 4u   // all-reduce: reduce-scatter, then all-gather
#define SYMM_COLL_PROGRESS 8u   // all-gather: set a flag per landed chunk
#define SYMM_COLL_CHECK 16u     // compare (collective, count, dtype, op, root) across ranks
#define SYMM_COLL_LOCAL 32u     // reduce-scatter: reduce a.src[0..n) locally, no cross-rank sync
#define SYMM_COLL_PUSH 64u      // all-reduce two-shot: reduce the own slice from the peers' inputs and
                                // store it into every rank's output (symmetric/registered send and
                                // recv); all-gather: store the own block into every rank's output
                                // (symmetric/registered recv)
#define SYMM_COLL_PIPE 128u     // two-shot all-reduce / reduce-scatter pipelined through scratch slots
                                // with per-chunk flags (pipe.cuh)
#define SYMM_COLL_CLASSIC 256u  // the copy and reduction loops of before (rank-order loads, one vector
                                // in flight in the copy tail): for A/B measurements
#define SYMM_COLL_PDL 512u      // LL kernels: launched as programmatic dependents (ll.cuh ll_begin)
#define SYMM_COLL_LIGHT_SYNC 1024u  // block_sync publishes with its release store alone (coll.cuh)
#define SYMM_COLL_SERIAL_ROUNDS 2048u  // store-only kernels: scatter round k + 1 after reducing round k
                                       // (write_rounds.cuh), not before
#define SYMM_COLL_OWN_DIRECT 4096u  // staged kernels: the part of the input only this rank reads (the
                                    // all-to-all's and reduce-scatter's own block, the two-shot
                                    // all-reduce's own slice) read where it is, never staged
// Mode bits that change what crosses between ranks (the protocol): compared
// at the first sync on every call, so ranks that picked different kernels
// fail with a mismatch instead of misreading each other's flags.
// All three: the write-only two-shot all-reduce (allreduce_write.cu).
#define SYMM_COLL_PROTO_BITS (SYMM_COLL_TWO_SHOT | SYMM_COLL_PUSH | SYMM_COLL_PIPE)

// ---- Per-phase timeline (SYMM_TIMELINE=1) ----------------------------------
// Every block of a synced collective kernel records %globaltimer when it
// enters a phase: SymmCollArgs::timeline holds, per block, one header event
// (phase = events recorded, arg = the kernel's grid size) and then up to
// SYMM_TL_EVENTS events. A phase lasts until the block's next event. The
// buffer holds the last kernel's events (each kernel starts over).
#define SYMM_TL_EVENTS 255
struct SymmTlEvent {
  uint32_t phase;  // SymmPhase
  uint32_t arg;    // round or chunk index
  uint64_t ns;     // %globaltimer
};
static_assert(sizeof(SymmTlEvent) == 16, "SymmTlEvent layout");
enum SymmPhase : uint32_t {
  SYMM_PHASE_START = 0,    // kernel entry (descriptor, counters)
  SYMM_PHASE_COPY_IN = 1,  // own input into scratch
  SYMM_PHASE_SYNC = 2,     // whole-block sync with the peers' same block
  SYMM_PHASE_REDUCE = 3,   // loads from the ranks and combining (and, with push, the stores)
  SYMM_PHASE_GATHER = 4,   // copying results out (pulls of the peers' slices, all-gather, ...)
  SYMM_PHASE_WAIT = 5,     // waiting on per-chunk flags (pipelined kernels)
  SYMM_PHASE_END = 6,      // done
};

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
  SymmTlEvent* timeline;                // SYMM_TIMELINE=1: per-block phase events; else null
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
static_assert(sizeof(SymmCollArgs) == 32 + 8 + 64 + 8 + 8 + 64 + 64 + 64 + 64 + 8 + 8 + 8 + 8 + 40 + 32 + 8,
              "SymmCollArgs layout");

// ---- All-reduce + residual add + RMSNorm (allreduce_norm.cu) --------------
// coll.send: this rank's input (tokens x hidden), or in the two-kernel
// form the sums (the all-reduce's output); coll.recv: the output.
struct SymmNormArgs {
  SymmCollArgs coll;
  const char* residual;   // tokens x hidden
  char* residual_out;     // tokens x hidden; may be residual
  const char* weight;     // hidden
  uint64_t rows;          // tokens
  uint32_t hidden;        // elements per row
  float eps;
  float* scales;          // SYMM_NORM_FP8_TENSOR: [0] read; SYMM_NORM_FP8_TOKEN: one per row, written
  uint32_t quant;         // SYMM_NORM_SAME_TYPE or one of the fp8 outputs
  uint32_t flags;         // SYMM_NORM_SPREAD, SYMM_NORM_PREFETCH, the pieces (SYMM_NORM_PARTS_SHIFT)
};
static_assert(sizeof(SymmNormArgs) == sizeof(SymmCollArgs) + 8 * 4 + 8 + 16, "SymmNormArgs layout");
#define SYMM_NORM_SAME_TYPE 0   // out has the input's type
#define SYMM_NORM_FP8_TENSOR 1  // out is fp8 e4m3: y / scales[0], saturated
#define SYMM_NORM_FP8_TOKEN 2   // out is fp8 e4m3: y / scale of its row, max|y| / 448 (written to scales)
#define SYMM_NORM_SPREAD 1u        // flags: the one-shot LL form sends from every block of its grid
#define SYMM_NORM_PREFETCH 2u      // flags: the LL forms ask for residual and weight in L1 before waiting on peers
#define SYMM_NORM_PARTS_SHIFT 8u   // flags bits 8-15: the two-shot LL form's pieces a row (0 or 1: whole rows)
#define SYMM_NORM_MAX_UNITS 8      // 8-byte units of a row one thread holds
#define SYMM_NORM_MAX_THREADS 1024 // so a row is at most 64 KiB

// ---- All-to-all-v with the counts on the device (alltoallv_device.cu) ----
struct SymmA2AVDevArgs {
  SymmCollArgs coll;           // send: this rank's input (src[r]: rank r's), recv: the output
  const int64_t* splits;       // this rank's send count to each rank (rows), device memory
  int64_t* out_splits_offsets; // [2][nranks]: the count received from each rank, its offset in recv
  uint64_t send_capacity;      // rows from send to the end of its buffer
  uint64_t recv_capacity;      // rows recv holds
};
static_assert(sizeof(SymmA2AVDevArgs) == sizeof(SymmCollArgs) + 8 * 4, "SymmA2AVDevArgs layout");
#define SYMM_A2AV_TAG 0xFD000000u  // SymmStatus mine[0]: an all-to-all-v's counts do not fit (mine[3]: which)
// mine[3] bits 8-15: which form recorded it (0: the 1-D kernel).
#define SYMM_A2AV_FORM_SHIFT 8u
#define SYMM_A2AV_FORM_2D 1u         // symm_alltoallv_2d (dispatch)
#define SYMM_A2AV_FORM_2D_OFFSET 2u  // symm_alltoallv_2d_offset (combine)

// The 2-D forms (alltoallv_device.cu): ne local experts per rank, ns = nranks * ne
// blocks per rank, at most SYMM_A2AV_2D_MAX_SPLITS (each block's shared tables;
// each rank's table of 2 * ns + 1 words goes through the front of its scratch).
#define SYMM_A2AV_2D_MAX_SPLITS 1024
struct SymmA2AV2dArgs {
  SymmCollArgs coll;           // send: this rank's input (src[r]: rank r's), recv: the output
  const int64_t* splits;       // dispatch: [ns] counts, rank-major (q*ne+e); combine: [2][ns] counts
                               // and offsets in send, expert-major (e*nranks+p); device memory
  int64_t* out_splits_offsets; // [2][ns]: counts received and their offsets in recv, in output order
  uint64_t send_capacity;      // rows from send to the end of its buffer
  uint64_t recv_capacity;      // rows recv holds
  uint64_t major_align;        // dispatch: each expert's group starts at a multiple (0, 1: none)
  uint32_t experts;            // ne
  uint32_t pad;
};
static_assert(sizeof(SymmA2AV2dArgs) == sizeof(SymmCollArgs) + 8 * 6, "SymmA2AV2dArgs layout");

// ---- Point-to-point ------------------------------------------------------

#define SYMM_P2P_MAX_OPS 16       // sends + receives in one launch
#define SYMM_P2P_BLOCKS 16        // blocks per operation of the fixed kernel (the same on every rank)

// One send or receive of `bytes` bytes with `peer`.
struct SymmP2POp {
  uint64_t buf;
  uint64_t bytes;
  uint32_t peer;
  uint32_t is_send;
  uint32_t first_block;  // sized kernel: this operation's blocks are [first_block, first_block + blocks)
  uint32_t blocks;
  uint64_t heap_offset;  // sized kernel, receive: buf's offset in this rank's symmetric heap slot, which
                         // the sender may then store into directly; SYMM_P2P_NO_DIRECT otherwise
};
static_assert(sizeof(SymmP2POp) == 40, "SymmP2POp layout");

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
  char* heap[SYMM_MAX_RANKS];           // rank r's symmetric heap slot, as seen here (direct pushes)
  SymmP2POp ops[SYMM_P2P_MAX_OPS];
  uint32_t nops, rank, nranks;
  uint32_t mode;                        // SYMM_COLL_CLASSIC: the fixed kernel's copy loop of before
  uint64_t ll_offset;                   // sized kernel: the LL packet area's offset in every rank's heap slot
  uint64_t ll_slot;                     // ... and the bytes of each of its [parity][sender] slots
};
static_assert(sizeof(SymmP2PArgs) == 32 + 8 + 64 + 8 + 64 + 8 + 64 + 40 * SYMM_P2P_MAX_OPS + 16 + 16, "SymmP2PArgs layout");

#define SYMM_P2P_READY(f, blk, r) ((f) + (blk) * SYMM_MAX_RANKS + (r))
#define SYMM_P2P_DONE(f, blk, r) ((f) + SYMM_P2P_BLOCKS * SYMM_MAX_RANKS + (blk) * SYMM_MAX_RANKS + (r))
#define SYMM_P2P_SENT(f, blk, r) ((f) + 2 * SYMM_P2P_BLOCKS * SYMM_MAX_RANKS + (blk) * SYMM_MAX_RANKS + (r))
#define SYMM_P2P_TAKEN(f, blk, r) ((f) + 3 * SYMM_P2P_BLOCKS * SYMM_MAX_RANKS + (blk) * SYMM_MAX_RANKS + (r))
#define SYMM_P2P_FLAG_WORDS (4 * SYMM_P2P_BLOCKS * SYMM_MAX_RANKS)

// The sized kernel (sendrecv.cu, symm_sendrecv_sized): a channel's 4 MiB of
// slots (the two slots of the fixed kernel) form a ring of SYMM_P2P_RING
// chunks; chunk q of the channel's series goes to ring slot q % RING and
// carries its own flags, so sender and receiver may use different numbers
// of blocks. Flags at SYMM_P2P_SIZED_DELTA words after the fixed kernel's
// (SymmP2PArgs::flags, peer_flags[r]); word offsets below.
#define SYMM_P2P_CHUNK (16u << 10)          // bytes per chunk: one warp group's unit between flags
#define SYMM_P2P_RING 256u                  // chunk slots per channel by default (4 MiB)
#define SYMM_P2P_RING_MAX 1024u             // the most (SYMM_P2P_RING_BYTES = 16 MiB): the flags' room
// SymmP2PArgs::mode bits 24-27 (the sized kernel): log2 of the ring's chunk
// slots (SYMM_P2P_RING_BYTES / SYMM_P2P_CHUNK: 8-10), 0 for SYMM_P2P_RING;
// the channel's slots are then 2 x SymmP2PArgs::slot_bytes bytes. The same
// on every rank (a communicator setting).
#define SYMM_P2P_RING_SHIFT 24u
// SymmP2PArgs::mode bit 11 (the sized kernel, p2p:pair=1): every block is
// a send half and a receive half (kernels/sendrecv.cu, "Paired blocks");
// SymmP2POp::first_block / blocks then count half blocks within the
// operation's direction. Either end of a pair may set it alone.
#define SYMM_P2P_PAIRED 2048u
#define SYMM_P2P_GROUP 128u                 // threads per warp group by default
// SymmP2PArgs::mode bits 12-15 (the sized kernel): log2 of the threads per
// warp group (6-9: 64-512), 0 for SYMM_P2P_GROUP. Sender and receiver may
// differ: only the chunks carry flags.
#define SYMM_P2P_GROUP_SHIFT 12u
#define SYMM_P2P_GROUP_MIN 64u               // the named barriers: at most 8 groups of a 512-thread block
#define SYMM_P2P_DIRECT_MIN (1ull << 20)    // messages from this size offer the receiver's buffer for a direct push
// SymmP2PArgs::mode bits 16-20 (the sized kernel): log2 of the KiB from
// which messages offer the direct push (p2p:direct=KIB), 0 for
// SYMM_P2P_DIRECT_MIN. Both ends of a pair must agree (same SYMM_ALGO).
#define SYMM_P2P_DIRECT_SHIFT 16u
// SymmP2PArgs::mode bits 21-23 (the sized kernel): log2 of the stride, the
// ring chunks a warp group moves between its flags (p2p:stride=S: 1-16;
// 0: one chunk, the kernel of before). Sender and receiver may differ.
#define SYMM_P2P_STRIDE_SHIFT 21u
#define SYMM_P2P_STRIDE_MAX 16u
// SymmP2PArgs::mode bits 28-31 (the sized kernel): log2 of the KiB up to
// which a message goes as LL packets (p2p:ll=KIB: 1-10), 0: never. Both
// ends of a pair must agree (same SYMM_ALGO), as for the direct size.
#define SYMM_P2P_LL_SHIFT 28u
#define SYMM_P2P_NO_DIRECT (~0ull)
#define SYMM_P2P_SIZE_TAG 0xFE000000u       // SymmStatus mine[0]/theirs[0]: a send and its receive disagree on the size
#define SYMM_P2P_SIZED_DELTA 10752u          // words from the fixed kernel's flags to the sized kernel's
#define SYMM_P2PS_READY(sender, slot) ((sender) * SYMM_P2P_RING_MAX + (slot))    // receiver's pad: chunk seq + 1
#define SYMM_P2PS_DONE(receiver, slot) ((SYMM_MAX_RANKS + (receiver)) * SYMM_P2P_RING_MAX + (slot))  // sender's pad
// sender's pad, per receiver: {call + 1, offset bits 0-31, offset bits 32-39 (0xff: no direct push) | receiver's
// bytes bits 32-55 << 8, receiver's bytes bits 0-31}. The sender compares the receiver's bytes with its own before
// storing anything (a larger send would write past a directly pushed-into buffer).
#define SYMM_P2PS_XDESC(receiver) (2 * SYMM_MAX_RANKS * SYMM_P2P_RING_MAX + (receiver) * 4)
#define SYMM_P2PS_ARRIVED(sender) (2 * SYMM_MAX_RANKS * SYMM_P2P_RING_MAX + 32 + (sender))    // receiver's pad: direct chunks
#define SYMM_P2PS_LOCAL(kind, peer) (2 * SYMM_MAX_RANKS * SYMM_P2P_RING_MAX + 40 + (kind) * SYMM_MAX_RANKS + (peer))
#define SYMM_P2PS_SEND_SEQ 0     // local: staged chunks sent on the channel to peer
#define SYMM_P2PS_RECV_SEQ 1     // local: staged chunks taken from peer
#define SYMM_P2PS_SEND_CALL 2    // local: calls >= SYMM_P2P_DIRECT_MIN sent to peer
#define SYMM_P2PS_RECV_CALL 3    // local: ... received from peer
#define SYMM_P2PS_RECV_DIRECT 4  // local: chunks peer pushed directly
#define SYMM_P2PS_SEND_FIN 5     // local: blocks of the current send to peer that finished
#define SYMM_P2PS_RECV_FIN 6     // local: ... of the current receive
// Receiver's pad, written by a sender whose size differs from the receiver's
// descriptor: {call + 1, the sender's bytes (low, high)}, so that the
// receiver fails with the mismatch too instead of waiting for its timeout.
#define SYMM_P2PS_NACK(sender) (2 * SYMM_MAX_RANKS * SYMM_P2P_RING_MAX + 40 + 7 * SYMM_MAX_RANKS + (sender) * 4)
// LL messages (sendrecv.cu): calls per channel, local to each end, and in
// the sender's pad the LL calls its receiver has finished reading (the
// sender reuses a [parity] slot only after the call before the last).
#define SYMM_P2PS_LL_LOCAL(kind, peer) (2 * SYMM_MAX_RANKS * SYMM_P2P_RING_MAX + 40 + (11 + (kind)) * SYMM_MAX_RANKS + (peer))
#define SYMM_P2PS_LL_SEND_CALL 0  // local: LL calls sent to peer
#define SYMM_P2PS_LL_RECV_CALL 1  // local: LL calls received from peer
#define SYMM_P2PS_LL_TAKEN(receiver) (2 * SYMM_MAX_RANKS * SYMM_P2P_RING_MAX + 40 + 13 * SYMM_MAX_RANKS + (receiver))
#define SYMM_P2PS_WORDS (2 * SYMM_MAX_RANKS * SYMM_P2P_RING_MAX + 40 + 14 * SYMM_MAX_RANKS)
