// Send and receive, any number of each (up to SYMM_P2P_MAX_OPS) in one
// launch, so that a group's sends and receives progress together in both
// directions. The host puts at most one send and one receive per peer in a
// launch. Two kernels:
//  - symm_sendrecv (fixed, the default): SYMM_P2P_BLOCKS blocks serve each
//    operation, block j of a send pairing with block j of the matching
//    receive, two slots per channel;
//  - symm_sendrecv_sized (SYMM_ALGO=p2p, below): blocks by the bytes, warp
//    groups with their own flags over a ring of chunk slots, a direct
//    push into a receive buffer in the symmetric heap, and small messages
//    as LL packets (p2p:ll=KIB).
//
// The fixed kernel:
//
// Per chunk k of a channel (sender -> receiver, block j): the sender waits
// until the receiver has taken chunk k-2 (it reuses that slot), writes its
// slice into slot k%2 in the receiver's memory, and publishes ready = k+1;
// the receiver waits for it, copies the slice out of its own memory and
// publishes done = k+1. Pushing (remote stores, which need no round trip)
// rather than pulling keeps the link busy with few blocks. The counters
// persist in device memory, so later launches (and graph replays) continue
// the series.
#include "ll.cuh"

SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_sendrecv(SymmP2PArgs a) {
  const uint32_t op_index = blockIdx.x / SYMM_P2P_BLOCKS, j = blockIdx.x % SYMM_P2P_BLOCKS;
  if (op_index >= a.nops) return;
  const SymmP2POp op = a.ops[op_index];
  const uint32_t peer = op.peer;
  __shared__ uint32_t start;
  __shared__ int failed;
  uint32_t* counter = op.is_send ? SYMM_P2P_SENT(a.flags, j, peer) : SYMM_P2P_TAKEN(a.flags, j, peer);
  if (threadIdx.x == 0) {
    start = *counter;
    failed = 0;
  }
  __syncthreads();
  const uint64_t nchunks = (op.bytes + a.slot_bytes - 1) / a.slot_bytes;
  for (uint64_t c = 0; c < nchunks; ++c) {
    const uint32_t k = start + (uint32_t)c;
    const uint64_t off = c * a.slot_bytes, len = min(a.slot_bytes, op.bytes - off);
    // Block j always owns the same bytes of a slot, whatever this chunk's
    // length: its wait on done[j] must cover exactly what it overwrites.
    uint64_t lo, hi;
    split_range(a.slot_bytes, 16, SYMM_P2P_BLOCKS, j, &lo, &hi);
    lo = min(lo, len);
    hi = min(hi, len);
    if (op.is_send) {
      char* slot = a.peer_slots[peer] + ((uint64_t)a.rank * 2 + (k & 1)) * a.slot_bytes;
      if (threadIdx.x == 0) {
        // Slot k%2 last held chunk k-2: wait until the receiver took it
        // (done >= k-1; trivially true for the first two chunks).
        SymmSpin spin(a.wait, peer, j);
        while (!symm_seq_geq(symm_ld_acquire_sys(SYMM_P2P_DONE(a.flags, j, peer)), k - 1))
          if (spin.give_up()) { failed = 1; break; }
      }
      __syncthreads();
      if (failed) return;
      copy_any(a.mode & SYMM_COLL_CLASSIC, slot + lo, reinterpret_cast<const char*>(op.buf) + off + lo, hi - lo);
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence_system();
        symm_st_release_sys(SYMM_P2P_READY(a.peer_flags[peer], j, a.rank), k + 1);
      }
    } else {
      if (threadIdx.x == 0) {
        SymmSpin spin(a.wait, peer, j);
        while (!symm_seq_geq(symm_ld_acquire_sys(SYMM_P2P_READY(a.flags, j, peer)), k + 1))
          if (spin.give_up()) { failed = 1; break; }
      }
      __syncthreads();
      if (failed) return;
      const char* slot = a.slots + ((uint64_t)peer * 2 + (k & 1)) * a.slot_bytes;
      copy_any(a.mode & SYMM_COLL_CLASSIC, reinterpret_cast<char*>(op.buf) + off + lo, slot + lo, hi - lo);
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence_system();
        symm_st_release_sys(SYMM_P2P_DONE(a.peer_flags[peer], j, a.rank), k + 1);
      }
    }
  }
  if (threadIdx.x == 0) *counter = start + (uint32_t)nchunks;
}

// ---- The sized kernel (SYMM_ALGO=p2p) ---------------------------------------
//
// Blocks. The host gives each operation blocks by its bytes (p2p.rs), the
// grid being the sum (every block resident, as the cross-rank waits need);
// block counts need not match between sender and receiver, because nothing
// pairs blocks: every chunk carries its own flags.
//
// Chunks. A channel (sender -> receiver) numbers its staged chunks q = 0,
// 1, ... across calls (counters in each side's pad, advanced by kernels, so
// graph replays continue the series). Chunk q of SYMM_P2P_CHUNK bytes goes
// to ring slot q % RING of the channel's SYMM_P2P_RING_BYTES (4 MiB, 256
// slots, by default; up to 16 MiB, 1024 slots: mode bits 24-27) in the
// receiver's memory. Warp groups of SYMM_P2P_GROUP threads take an operation's chunks
// in turn (group g of G: chunks g, g + G, ...), each on its own:
//   sender:   wait until DONE[slot] >= q + 1 - RING (the receiver took chunk
//             q - RING out of the slot), store the chunk into the slot,
//             group barrier, READY[slot] = q + 1 (release);
//   receiver: wait until READY[slot] >= q + 1, copy the chunk out, group
//             barrier, DONE[slot] = q + 1 (release).
// The barrier orders the group's stores (or loads) before its leader's
// release store, which publishes them: no separate fence. A group stalled
// in that release does not hold up the block's other groups, which keep
// copying. With 16 blocks of 4 groups on a 256-chunk ring each group has 4
// chunks of slack before it waits for the receiver.
//
// Stride (p2p:stride=S, mode bits 21-23). A group may take S consecutive
// chunks at a time (steps g, g + G, ... of S chunks): S lanes wait for the
// S slots at once, the group copies the S chunks, and one fence publishes
// them all (the S flags then go out as plain stores after it, the release
// pattern fence + strong store). S adapts to the message: at most the
// operation's chunks per group (G groups on this side), so that messages of
// fewer than G x S chunks keep every group working (one GPU, ranks
// co-resident: a fixed S = 4 took 256 KiB - 4 MiB 1.3-1.7x longer). The flags stay per chunk, so the ring,
// the counters and the other side are as with S = 1, and sender and
// receiver may use different strides. What it changes: the release, which
// waits until the group's stores across NVLink have landed, is paid once
// per S chunks instead of once per chunk, and the S slots' waits overlap.
// S = 1 is the kernel of before, flag for flag.
//
// Blocks with no chunk (more groups than chunks) leave at once; the last of
// the others to finish advances the channel's counters for the next call.
//
// Direct push. From SYMM_P2P_DIRECT_MIN bytes (or the launch's p2p:direct=
// KIB, mode bits 16-20) the receiver tells the
// sender, at the start of every call, where its buffer is: the offset in
// its symmetric heap slot when the buffer lies in the symmetric heap
// (symmMemAlloc, or a registration of such memory), else "none", and how
// many bytes it receives (a descriptor {call + 1, offset, bytes} in the
// sender's pad). A sender whose bytes differ stores nothing, records a
// size mismatch and writes {call + 1, its bytes} to NACK in the receiver's
// pad, which the receiver's waits watch: both ends fail with the mismatch
// (naming both sizes) instead of the receiver waiting for its timeout.
// With an offset, the sender's groups store straight into the receiver's
// buffer (no ring, no per-chunk flags) and each adds its chunk count to
// ARRIVED in the receiver's pad (release); the receiver waits for the
// call's total. The
// receiver's kernel has started when it publishes the descriptor, so its
// stream is done with the buffer. A receiver's next call cannot begin
// before every chunk of this one arrived, which every sender block with
// chunks sends only after reading this call's descriptor: one descriptor
// word per channel suffices.

// Chunk numbers wrap at 2^32; q % RING continues across the wrap only when
// RING divides 2^32: a power of two (the host passes its log2).
static_assert((SYMM_P2P_RING & (SYMM_P2P_RING - 1)) == 0, "SYMM_P2P_RING must be a power of two");
static_assert((SYMM_P2P_RING_MAX & (SYMM_P2P_RING_MAX - 1)) == 0, "SYMM_P2P_RING_MAX must be a power of two");

// Chunk slots of the channel's ring (mode bits 24-27), at most RING_MAX.
__device__ __forceinline__ uint32_t p2p_ring(uint32_t mode) {
  const uint32_t log2 = (mode >> SYMM_P2P_RING_SHIFT) & 15u;
  return log2 ? min(1u << log2, SYMM_P2P_RING_MAX) : SYMM_P2P_RING;
}

// Named barrier `id` over `threads` threads (a multiple of 32): warp group
// g waits on 1 + g, a paired block's half on 9 + half, a whole block on 0.
__device__ __forceinline__ void named_barrier(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Threads per warp group of this launch (mode bits 12-15; see abi.cuh).
__device__ __forceinline__ uint32_t p2p_group_threads(uint32_t mode) {
  const uint32_t log2 = (mode >> SYMM_P2P_GROUP_SHIFT) & 15u;
  return log2 ? 1u << log2 : SYMM_P2P_GROUP;
}

__device__ __forceinline__ void red_add_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Bytes from which a message offers the direct push (mode bits 16-20).
__device__ __forceinline__ uint64_t p2p_direct_min(uint32_t mode) {
  const uint32_t log2 = (mode >> SYMM_P2P_DIRECT_SHIFT) & 31u;
  return log2 ? 1024ull << log2 : SYMM_P2P_DIRECT_MIN;
}

// Chunks a warp group moves between its flags (mode bits 21-23).
__device__ __forceinline__ uint32_t p2p_stride(uint32_t mode) {
  return 1u << min((mode >> SYMM_P2P_STRIDE_SHIFT) & 7u, 4u);
}

// A receiver's NACK for call `call` (its sender's `bytes` differ): record
// the mismatch, this side the receiver, and say so. `nack` null: never.
__device__ __forceinline__ bool nacked(SymmSpin& spin, const uint32_t* nack, uint32_t call, uint64_t bytes) {
  if (!nack || symm_ld_acquire_sys(nack) != call + 1) return false;
  const uint32_t m[4] = {SYMM_P2P_SIZE_TAG, (uint32_t)bytes, (uint32_t)(bytes >> 32), 1};
  const uint32_t t[4] = {SYMM_P2P_SIZE_TAG, ((const volatile uint32_t*)nack)[1], ((const volatile uint32_t*)nack)[2], 0};
  spin.record_mismatch(m, t);
  return true;
}

// Wait (bounded) until *p reaches `target` (wrap-safe); false if given up.
// A receiver's wait also watches the NACK its sender writes on a size
// mismatch for call `call` (offered calls only; `nack` null otherwise), and
// then records the mismatch and gives up.
__device__ __forceinline__ bool wait_geq_or_nack(const SymmP2PArgs& a, const uint32_t* p, uint32_t target,
                                                 const uint32_t* nack, uint32_t call, uint64_t bytes, uint32_t peer,
                                                 uint32_t detail) {
  SymmSpin spin(a.wait, peer, detail);
  while (!symm_seq_geq(symm_ld_acquire_sys(p), target))
    if (nacked(spin, nack, call, bytes) || spin.give_up()) return false;
  return true;
}

__device__ __forceinline__ bool wait_geq(const SymmP2PArgs& a, const uint32_t* p, uint32_t target, uint32_t peer,
                                         uint32_t detail) {
  return wait_geq_or_nack(a, p, target, nullptr, 0, 0, peer, detail);
}

// A sender whose bytes differ from its receiver's descriptor: record the
// mismatch and tell the receiver ({call + 1, the sender's bytes} in NACK,
// which its waits watch), so that both ends fail with it. Every block of
// the send may write the same words.
__device__ __forceinline__ void send_size_mismatch(const SymmP2PArgs& a, uint32_t* theirs, uint64_t bytes,
                                                   uint64_t their_bytes, uint32_t call, uint32_t peer,
                                                   uint32_t detail) {
  const uint32_t m[4] = {SYMM_P2P_SIZE_TAG, (uint32_t)bytes, (uint32_t)(bytes >> 32), 0};
  const uint32_t t[4] = {SYMM_P2P_SIZE_TAG, (uint32_t)their_bytes, (uint32_t)(their_bytes >> 32), 1};
  SymmSpin(a.wait, peer, detail).record_mismatch(m, t);
  uint32_t* nack = theirs + SYMM_P2PS_NACK(a.rank);
  nack[1] = (uint32_t)bytes;
  nack[2] = (uint32_t)(bytes >> 32);
  symm_st_release_sys(nack, call + 1);
}

// The receiver's bytes from its descriptor (words 2 and 3).
__device__ __forceinline__ uint64_t desc_bytes(const uint32_t* desc) {
  return (uint64_t)((const volatile uint32_t*)desc)[3] | (uint64_t)(((const volatile uint32_t*)desc)[2] >> 8) << 32;
}

// Publish the flags of `n` consecutive chunks q0.. of a channel (the
// group's copies are ordered before by the group barrier): one release
// store for one chunk, else one fence and plain stores.
__device__ __forceinline__ void publish_chunks(uint32_t* flags_of_slot0, uint32_t q0, uint32_t n, uint32_t ring) {
  if (n == 1) {
    symm_st_release_sys(flags_of_slot0 + q0 % ring, q0 + 1);
    return;
  }
  asm volatile("fence.acq_rel.sys;" ::: "memory");
  for (uint32_t u = 0; u < n; ++u)
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(flags_of_slot0 + (q0 + u) % ring), "r"(q0 + u + 1)
                 : "memory");
}

// Copy `n` chunks starting at chunk c0 of the operation (ring chunk q0) by
// one warp group: one copy where the ring slots are contiguous, else one per
// chunk. `to_ring`: into the ring (sender), else out of it.
__device__ __forceinline__ void copy_chunks(char* ring, uint32_t slots, char* buf, uint64_t bytes, uint32_t c0,
                                            uint32_t q0, uint32_t n, bool to_ring, uint32_t lane, uint32_t gt) {
  const uint64_t off = (uint64_t)c0 * SYMM_P2P_CHUNK, len = min((uint64_t)n * SYMM_P2P_CHUNK, bytes - off);
  const uint32_t slot = q0 % slots;
  if (slot + n <= slots) {
    char* r = ring + (uint64_t)slot * SYMM_P2P_CHUNK;
    if (to_ring)
      copy_bytes_by(r, buf + off, len, lane, gt, true);
    else
      copy_bytes_by(buf + off, r, len, lane, gt);
    return;
  }
  for (uint32_t u = 0; u < n; ++u) {
    const uint64_t o = off + (uint64_t)u * SYMM_P2P_CHUNK, l = min((uint64_t)SYMM_P2P_CHUNK, bytes - o);
    char* r = ring + (uint64_t)((q0 + u) % slots) * SYMM_P2P_CHUNK;
    if (to_ring)
      copy_bytes_by(r, buf + o, l, lane, gt, true);
    else
      copy_bytes_by(buf + o, r, l, lane, gt);
  }
}

// ---- Paired blocks (p2p:pair=1, mode bit SYMM_P2P_PAIRED) ------------------
//
// Unpaired, a block serves one operation: a send's blocks run on some SMs,
// a receive's on others. Paired, every block is two halves of
// SYMM_COLL_THREADS / 2 threads: the first half is a block of the launch's
// sends, the second a block of its receives (each direction numbers its
// half blocks from 0: SymmP2POp::first_block / blocks), so both directions
// of an exchange move in every block and a send's stores across the link
// come from twice as many SMs for the same threads (the host gives an
// operation twice the half blocks). Nothing pairs across ranks: either end
// may pair alone. A half synchronises on its own named barrier (ids 9 and
// 10; the warp groups' are 1-8), never on __syncthreads, since its other
// half may have left or wait elsewhere.

// One operation's block as the kernel sees it: the whole block, or a half.
struct P2PBlock {
  uint32_t tid;      // thread within it
  uint32_t threads;  // its threads
  uint32_t half;     // 0: the whole block or the send half; 1: the receive half
  uint32_t bar;      // its barrier: 0 (the whole block) or 9 + half
};

__device__ __forceinline__ P2PBlock p2p_block(uint32_t mode) {
  if (!(mode & SYMM_P2P_PAIRED)) return P2PBlock{threadIdx.x, blockDim.x, 0, 0};
  const uint32_t threads = blockDim.x / 2, half = threadIdx.x / threads;
  return P2PBlock{threadIdx.x % threads, threads, half, 9 + half};
}

__device__ __forceinline__ void p2p_sync(const P2PBlock& b) { named_barrier(b.bar, b.threads); }

// p2p_sync, and whether any of the block's threads passed a nonzero `pred`.
__device__ __forceinline__ bool p2p_sync_or(const P2PBlock& b, int pred) {
  uint32_t any;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\t"
      "setp.ne.s32 p, %1, 0;\n\t"
      "bar.red.or.pred q, %2, %3, p;\n\t"
      "selp.u32 %0, 1, 0, q;\n\t}"
      : "=r"(any)
      : "r"(pred), "r"(b.bar), "r"(b.threads)
      : "memory");
  return any != 0;
}

// ---- LL messages (p2p:ll=KIB, mode bits 28-31) ------------------------------
//
// A message of at most the LL size goes as LL packets (ll.cuh): every 8
// bytes travel with the call's flag in one 16-byte store into the
// receiver's LL slot, and the receiver polls the data itself. No ring
// flags, no fence, no staging copy: at 64 KiB - 1 MiB the ring's round
// trips (sender's release, flag, receiver's copy) are most of the time.
//
// Slots: each rank's LL area (a.ll_offset in its heap slot) holds
// [parity][sender] slots of a.ll_slot bytes; packet 0 of a call carries
// the sender's bytes, packets 1.. the data. Call k of a channel (LL calls
// only, counted at both ends) uses parity k & 1 and flag 2k + 1: odd, so
// never the zero of fresh memory, and a slot's packets from call k - 2
// carry another flag. The sender reuses a parity only once the receiver
// has finished call k - 2: the receiver's last block stores LL_TAKEN =
// k + 1 into the sender's pad (two calls of slack: no wait when calls
// alternate directions or the receiver keeps up).
//
// Sizes: the receiver compares packet 0 with its bytes, so it fails with a
// mismatch whichever side is larger. From the direct size an LL call is
// also an offered call, as on the ring: the receiver publishes its
// descriptor (no direct offset) and the sender checks it at its end
// (packets are already out: they stay inside the slot, and the receiver's
// own check fails the call); a sender on the ring (a larger message) reads
// it before storing anything, and its NACK ends the LL receiver's wait.

// Bytes up to which a message goes as LL packets (0: none).
__device__ __forceinline__ uint64_t p2p_ll_max(uint32_t mode) {
  const uint32_t log2 = (mode >> SYMM_P2P_LL_SHIFT) & 15u;
  return log2 ? 1024ull << log2 : 0;
}

// Whether a message of `bytes` goes as LL packets: at most the LL size,
// and its packets and header fit a slot (src/coll/p2p.rs decides alike).
__device__ __forceinline__ bool p2p_is_ll(const SymmP2PArgs& a, uint64_t bytes) {
  return bytes <= p2p_ll_max(a.mode) && (bytes + 7) / 8 + 1 <= a.ll_slot / 16;
}

// Wait (bounded) until packet `p` carries `flag`; with `nack` (a receiver's
// offered call) also watch the sender's NACK, as wait_geq_or_nack does.
__device__ __forceinline__ bool ll_packet_get(const SymmP2PArgs& a, const uint4* p, uint32_t flag,
                                              const uint32_t* nack, uint32_t call, uint64_t bytes, uint32_t peer,
                                              uint32_t detail, uint2* out) {
  SymmSpin spin(a.wait, peer, detail);
  while (!ll_try_get(p, flag, out))
    if (nacked(spin, nack, call, bytes) || spin.give_up()) return false;
  return true;
}

// An offered LL send (channel LL call k), at its end: the receiver's
// descriptor of this call (bounded wait) must name the same bytes. A
// receiver that finished the call (LL_TAKEN past k, or a descriptor past
// this call) checked the header packet and found the sizes equal; its
// next call may meanwhile rewrite the descriptor's words, so a difference
// counts only while it has not. False after recording a mismatch (and
// NACKing the receiver, whose ring or direct wait then ends).
__device__ __forceinline__ bool ll_send_check(const SymmP2PArgs& a, uint32_t* mine, uint32_t* theirs,
                                              uint64_t bytes, uint32_t call, uint32_t k, uint32_t peer,
                                              uint32_t detail) {
  const uint32_t* desc = mine + SYMM_P2PS_XDESC(peer);
  if (!wait_geq(a, desc, call + 1, peer, detail)) return false;
  if (symm_ld_acquire_sys(desc) != call + 1 || desc_bytes(desc) == bytes) return true;
  __threadfence_system();
  if (symm_seq_geq(symm_ld_acquire_sys(mine + SYMM_P2PS_LL_TAKEN(peer)), k + 1) ||
      symm_ld_acquire_sys(desc) != call + 1)
    return true;
  send_size_mismatch(a, theirs, bytes, desc_bytes(desc), call, peer, detail);
  return false;
}

// One LL operation, by its blocks (jb: the block's index among them).
__device__ __forceinline__ void p2p_ll_op(const SymmP2PArgs& a, const SymmP2POp& op, uint32_t jb, const P2PBlock& b) {
  const uint32_t peer = op.peer;
  uint32_t* mine = a.flags + SYMM_P2P_SIZED_DELTA;
  uint32_t* theirs = a.peer_flags[peer] + SYMM_P2P_SIZED_DELTA;
  const bool offered = op.bytes >= p2p_direct_min(a.mode);
  const uint32_t kind = op.is_send ? SYMM_P2PS_LL_SEND_CALL : SYMM_P2PS_LL_RECV_CALL;
  const uint32_t k = *(volatile uint32_t*)(mine + SYMM_P2PS_LL_LOCAL(kind, peer));
  const uint32_t flag = 2 * k + 1;
  const uint32_t call = *(volatile uint32_t*)(mine + SYMM_P2PS_LOCAL(op.is_send ? SYMM_P2PS_SEND_CALL : SYMM_P2PS_RECV_CALL, peer));
  uint4* slot = reinterpret_cast<uint4*>(a.heap[op.is_send ? peer : a.rank] + a.ll_offset +
                                         (uint64_t)((k & 1) * a.nranks + (op.is_send ? a.rank : peer)) * a.ll_slot);
  const uint64_t units = (op.bytes + 7) / 8, stride = (uint64_t)op.blocks * b.threads;
  const uint64_t t = (uint64_t)jb * b.threads + b.tid;
  bool ok = true;
  if (op.is_send) {
    __shared__ int free_slot[2];
    if (b.tid == 0)  // parity k & 1 last carried call k - 2
      free_slot[b.half] = wait_geq(a, mine + SYMM_P2PS_LL_TAKEN(peer), k - 1, peer, jb);
    p2p_sync(b);
    ok = free_slot[b.half];
    const char* src = reinterpret_cast<const char*>(op.buf);
    if (ok && t == 0) ll_put(slot, make_uint2((uint32_t)op.bytes, (uint32_t)(op.bytes >> 32)), flag);
    for (uint64_t u = t; ok && u < units; u += stride) ll_put(slot + 1 + u, ll_load_unit(src, u, op.bytes), flag);
  } else {
    const uint32_t* nack = offered ? mine + SYMM_P2PS_NACK(peer) : nullptr;
    if (t == 0) {
      if (offered) {  // the descriptor, as a ring receiver's (no direct offset)
        uint32_t* desc = theirs + SYMM_P2PS_XDESC(a.rank);
        desc[1] = 0;
        desc[2] = 0xffu | (uint32_t)(op.bytes >> 32) << 8;
        desc[3] = (uint32_t)op.bytes;
        symm_st_release_sys(desc, call + 1);
      }
      uint2 h;
      ok = ll_packet_get(a, slot, flag, nack, call, op.bytes, peer, jb, &h);
      const uint64_t sent = (uint64_t)h.x | (uint64_t)h.y << 32;
      if (ok && sent != op.bytes) {
        const uint32_t m[4] = {SYMM_P2P_SIZE_TAG, (uint32_t)op.bytes, (uint32_t)(op.bytes >> 32), 1};
        const uint32_t th[4] = {SYMM_P2P_SIZE_TAG, h.x, h.y, 0};
        SymmSpin(a.wait, peer, jb).record_mismatch(m, th);
        ok = false;
      }
    }
    char* dst = reinterpret_cast<char*>(op.buf);
    for (uint64_t u = t; ok && u < units; u += stride) {
      uint2 v;
      ok = ll_packet_get(a, slot + 1 + u, flag, nullptr, call, op.bytes, peer, jb, &v);
      if (ok) ll_store_unit(dst, u, op.bytes, v);
    }
  }
  // The operation's last block advances the channel's counters (a broken
  // communicator stays broken: no advance).
  if (p2p_sync_or(b, !ok) || b.tid != 0) return;
  uint32_t* fin = mine + SYMM_P2PS_LOCAL(op.is_send ? SYMM_P2PS_SEND_FIN : SYMM_P2PS_RECV_FIN, peer);
  __threadfence();
  if (atomicAdd(fin, 1u) != op.blocks - 1) return;
  *fin = 0;
  if (op.is_send && offered && !ll_send_check(a, mine, theirs, op.bytes, call, k, peer, jb)) return;
  mine[SYMM_P2PS_LL_LOCAL(kind, peer)] = k + 1;
  if (offered) mine[SYMM_P2PS_LOCAL(op.is_send ? SYMM_P2PS_SEND_CALL : SYMM_P2PS_RECV_CALL, peer)] = call + 1;
  // Every block's loads of the packets returned (their values were stored)
  // before the fence above: a relaxed store frees the parity (as NCCL's
  // receiver posts its step).
  if (!op.is_send)
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(theirs + SYMM_P2PS_LL_TAKEN(a.rank)), "r"(k + 1)
                 : "memory");
}

SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_sendrecv_sized(SymmP2PArgs a) {
  const P2PBlock b = p2p_block(a.mode);
  const bool paired = a.mode & SYMM_P2P_PAIRED;
  // The operation whose blocks hold this one (paired: among those of this
  // half's direction).
  uint32_t oi = 0;
  while (oi < a.nops && ((paired && a.ops[oi].is_send != (b.half == 0)) || blockIdx.x < a.ops[oi].first_block ||
                         blockIdx.x >= a.ops[oi].first_block + a.ops[oi].blocks))
    ++oi;
  if (oi >= a.nops) return;
  const SymmP2POp op = a.ops[oi];
  const uint32_t peer = op.peer, jb = blockIdx.x - op.first_block;
  if (p2p_is_ll(a, op.bytes)) {
    p2p_ll_op(a, op, jb, b);
    return;
  }
  // A warp group is at most the block (a half, paired: warps=16 then
  // takes the half's 8 warps).
  const uint32_t gt = min(p2p_group_threads(a.mode), b.threads);
  const uint32_t per_block = b.threads / gt;
  // `group` numbers the groups of the whole block (their named barriers and
  // group_failed slots); `g` the operation's.
  const uint32_t group = threadIdx.x / gt, lane = threadIdx.x % gt, first_group = (threadIdx.x - b.tid) / gt;
  const uint32_t ngroups = op.blocks * per_block, g = jb * per_block + (group - first_group);
  uint32_t* mine = a.flags + SYMM_P2P_SIZED_DELTA;
  uint32_t* theirs = a.peer_flags[peer] + SYMM_P2P_SIZED_DELTA;
  const uint32_t nchunks = (uint32_t)((op.bytes + SYMM_P2P_CHUNK - 1) / SYMM_P2P_CHUNK);
  const bool offered = op.bytes >= p2p_direct_min(a.mode);
  // Blocks whose groups have no chunk leave at once (they take no part in
  // the call, so they need not know whether it goes direct).
  if (jb * per_block >= nchunks) return;
  const uint32_t working = min(op.blocks, (nchunks + per_block - 1) / per_block);
  // Per half (paired; [0] otherwise).
  __shared__ uint32_t base_of[2], call_of[2], direct_base_of[2];
  __shared__ uint64_t direct_of[2];
  __shared__ int failed_of[2];
  __shared__ int group_failed[SYMM_COLL_THREADS / SYMM_P2P_GROUP_MIN];
  uint32_t& base = base_of[b.half];
  uint32_t& call = call_of[b.half];
  uint32_t& direct_base = direct_base_of[b.half];
  uint64_t& direct = direct_of[b.half];
  int& failed = failed_of[b.half];
  if (b.tid == 0) {
    failed = 0;
    direct = SYMM_P2P_NO_DIRECT;
    if (op.is_send) {
      base = mine[SYMM_P2PS_LOCAL(SYMM_P2PS_SEND_SEQ, peer)];
      call = mine[SYMM_P2PS_LOCAL(SYMM_P2PS_SEND_CALL, peer)];
      if (offered) {
        const uint32_t* desc = mine + SYMM_P2PS_XDESC(peer);
        if (!wait_geq(a, desc, call + 1, peer, jb)) {
          failed = 1;
        } else {
          const uint32_t hi = desc[2];
          const uint64_t their_bytes = desc_bytes(desc);
          if (their_bytes != op.bytes) {
            // Nothing is stored; the NACK ends the receiver's wait.
            send_size_mismatch(a, theirs, op.bytes, their_bytes, call, peer, jb);
            failed = 1;
          } else if ((hi & 0xffu) != 0xffu) {
            direct = (uint64_t)desc[1] | (uint64_t)(hi & 0xffu) << 32;
          }
        }
      }
    } else {
      base = mine[SYMM_P2PS_LOCAL(SYMM_P2PS_RECV_SEQ, peer)];
      call = mine[SYMM_P2PS_LOCAL(SYMM_P2PS_RECV_CALL, peer)];
      direct_base = mine[SYMM_P2PS_LOCAL(SYMM_P2PS_RECV_DIRECT, peer)];
      if (offered) {
        direct = op.heap_offset;
        if (jb == 0) {
          // The host keeps direct offsets below 0xff << 32 (p2p.rs).
          uint32_t* desc = theirs + SYMM_P2PS_XDESC(a.rank);
          const uint32_t off_hi = op.heap_offset == SYMM_P2P_NO_DIRECT ? 0xffu : (uint32_t)(op.heap_offset >> 32) & 0xffu;
          desc[1] = (uint32_t)op.heap_offset;
          desc[2] = off_hi | (uint32_t)(op.bytes >> 32) << 8;
          desc[3] = (uint32_t)op.bytes;
          symm_st_release_sys(desc, call + 1);
        }
      }
    }
  }
  if (b.tid < per_block) group_failed[first_group + b.tid] = 0;
  p2p_sync(b);
  const bool is_direct = direct != SYMM_P2P_NO_DIRECT;
  int fail = failed;
  const char* channel_in = a.slots + (uint64_t)peer * 2 * a.slot_bytes;                // receiver: from peer
  char* channel_out = a.peer_slots[peer] + (uint64_t)a.rank * 2 * a.slot_bytes;        // sender: to peer
  // The stride adapts to the message: at most the knob's, and no more than
  // the operation's chunks per warp group, so that a message with fewer
  // chunks than groups x stride still keeps every group busy.
  const uint32_t stride = max(1u, min(p2p_stride(a.mode), nchunks / ngroups));
  const uint32_t nsteps = (nchunks + stride - 1) / stride, ring = p2p_ring(a.mode);
  // A receiver of an offered call watches its sender's NACK.
  const uint32_t* nack = offered && !op.is_send ? mine + SYMM_P2PS_NACK(peer) : nullptr;
  if (!fail && op.is_send && is_direct) {
    char* dst = a.heap[peer] + direct;
    uint32_t sent = 0;
    for (uint32_t c = g; c < nchunks; c += ngroups, ++sent) {
      const uint64_t off = (uint64_t)c * SYMM_P2P_CHUNK, len = min((uint64_t)SYMM_P2P_CHUNK, op.bytes - off);
      copy_bytes_by(dst + off, reinterpret_cast<const char*>(op.buf) + off, len, lane, gt, true);
    }
    named_barrier(1 + group, gt);
    if (lane == 0 && sent) red_add_release_sys(theirs + SYMM_P2PS_ARRIVED(a.rank), sent);
  } else if (!fail && op.is_send) {
    // Step s: chunks [s * stride, +n) of the operation, ring chunks q0...
    for (uint32_t s = g; s < nsteps; s += ngroups) {
      const uint32_t c0 = s * stride, n = min(stride, nchunks - c0), q0 = base + c0;
      if (lane < n && !wait_geq(a, mine + SYMM_P2PS_DONE(peer, (q0 + lane) % ring), q0 + lane + 1 - ring, peer, jb))
        group_failed[group] = 1;
      named_barrier(1 + group, gt);
      if (group_failed[group]) {
        fail = 1;
        break;
      }
      copy_chunks(channel_out, ring, const_cast<char*>(reinterpret_cast<const char*>(op.buf)), op.bytes, c0, q0, n,
                  true, lane, gt);
      named_barrier(1 + group, gt);
      if (lane == 0) publish_chunks(theirs + SYMM_P2PS_READY(a.rank, 0), q0, n, ring);
    }
  } else if (!fail && is_direct) {
    if (b.tid == 0 &&
        !wait_geq_or_nack(a, mine + SYMM_P2PS_ARRIVED(peer), direct_base + nchunks, nack, call, op.bytes, peer, jb))
      fail = 1;
  } else if (!fail) {
    for (uint32_t s = g; s < nsteps; s += ngroups) {
      const uint32_t c0 = s * stride, n = min(stride, nchunks - c0), q0 = base + c0;
      if (lane < n && !wait_geq_or_nack(a, mine + SYMM_P2PS_READY(peer, (q0 + lane) % ring), q0 + lane + 1, nack,
                                        call, op.bytes, peer, jb))
        group_failed[group] = 1;
      named_barrier(1 + group, gt);
      if (group_failed[group]) {
        fail = 1;
        break;
      }
      copy_chunks(const_cast<char*>(channel_in), ring, reinterpret_cast<char*>(op.buf), op.bytes, c0, q0, n, false,
                  lane, gt);
      named_barrier(1 + group, gt);
      if (lane == 0) publish_chunks(theirs + SYMM_P2PS_DONE(a.rank, 0), q0, n, ring);
    }
  }
  // The operation's last block to finish advances the channel's counters
  // for the next call (a broken communicator stays broken: no advance).
  if (p2p_sync_or(b, fail)) return;
  if (b.tid == 0) {
    uint32_t* fin = mine + SYMM_P2PS_LOCAL(op.is_send ? SYMM_P2PS_SEND_FIN : SYMM_P2PS_RECV_FIN, peer);
    __threadfence();
    if (atomicAdd(fin, 1u) == working - 1) {
      *fin = 0;
      if (!is_direct) mine[SYMM_P2PS_LOCAL(op.is_send ? SYMM_P2PS_SEND_SEQ : SYMM_P2PS_RECV_SEQ, peer)] = base + nchunks;
      if (is_direct && !op.is_send) mine[SYMM_P2PS_LOCAL(SYMM_P2PS_RECV_DIRECT, peer)] = direct_base + nchunks;
      if (offered) mine[SYMM_P2PS_LOCAL(op.is_send ? SYMM_P2PS_SEND_CALL : SYMM_P2PS_RECV_CALL, peer)] = call + 1;
    }
  }
}
