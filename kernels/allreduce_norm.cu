// All-reduce + residual add + RMSNorm (symmAllReduceAddRMSNorm), the step
// every tensor-parallel transformer layer ends with at inference:
//   residual_out = allreduce(input) + residual
//   out          = residual_out / sqrt(mean(residual_out^2) + eps) * weight
//
// One block per row (token), grid-stride over rows; a thread holds up to
// SYMM_NORM_MAX_UNITS 8-byte units of its row in registers, so the row is
// read once, normalised with one block reduction, and written once.
//
// Three forms (src/coll/allreduce_norm.rs picks one):
//  - allreduce_norm_ll: for messages that fit the LL slots (decode sizes).
//    Every rank sends its rows to every peer as LL packets (ll.cuh), then
//    sums each unit over the ranks in rank order in fp32 (so every rank
//    gets the same bits), adds the residual and normalises. One kernel, no
//    cross-rank sync, any input buffer.
//  - allreduce_norm_ll2 (two-shot, from 3 ranks, SYMM_ALGO=ll): for
//    messages up to about nranks / 2 times the slots. Rank p owns rows
//    [rows * p / n, rows * (p + 1) / n); every rank sends each peer the rows
//    that peer owns, the owner sums them (rank order, fp32), adds its
//    residual and sends the rounded residual_out rows back to every peer,
//    with each row's sum of squares (taken before rounding, as in the other
//    forms); every rank normalises every row from those, so out has the
//    same bits everywhere and as in the one-shot form. Each rank sends
//    (n - 1) / n of the message twice instead of n - 1 times. A slot holds
//    the owner's share twice, the input rows coming in and the residual_out
//    rows going back; the sums of squares, a packet a row, go to the
//    receiver's own slot (source = itself), which no other form writes. The residual is the
//    owner's: the same on every rank in tensor parallelism, which this
//    form assumes.
//  - add_norm: reads the sums from coll.send, where the library's
//    all-reduce has left them in `out` (any size, any algorithm; or the
//    input itself at one rank), adds and normalises into coll.recv.
// Each form has a batched entry too (SYMM_ALGO `batch`, opt-in): a
// thread's loads issued together instead of a unit at a time.
//
// Both keep the sum of squares in fp32 before rounding the residual, and
// normalise the rounded residual (as vLLM's fused_add_rms_norm does).
// fp8 e4m3 outputs (n.quant): y divided by a per-tensor scale the caller
// gives, or by a per-row scale the kernel computes and writes.
// Aliasing: residual_out may be residual and out may be input; each unit
// is read and then written by the same thread, and peers only ever read
// the LL packets, never the input. The one-shot form spread in place is
// the exception (a row's units are sent by other blocks than the one that
// writes it): its fenced entry holds every block's writes until all
// blocks have sent (the batched entry: its own fence, or its entry with
// OWN until the row's own packets are back).
#include "norm.cuh"
#include "pipe.cuh"  // SYMM_FOR_EACH_OPT_IN_TYPE: fp16, fp32, bf16

// With SYMM_NORM_PREFETCH (SYMM_ALGO token `prefetch`): ask for the
// part's residual units (with `residual`) and weight units in this SM's L1
// before the block waits for its peers' packets. Both are loaded only
// after the wait, each a dependent round trip to L2 or HBM on the critical
// path at decode sizes (the norm kernels run at the 64-register bound of
// 1,024 threads: no room to load them early). The form by stores has the
// one-row form of this loop (allreduce_norm_write.cu norm_write_prefetch).
// Kept apart on purpose (twenty-fourth session, ptxas -v, sm_90): one
// helper a row, used twice here, spills the one-shot LL kernel 48 B more,
// one helper over two rows 52 B stored and 76 loaded more, and the form by
// stores, without the flag test inside its loop's caller, from nothing to
// 20 B stored and 56 loaded (a spill there cost 0.8-3.7 us a call).
__device__ __forceinline__ void norm_prefetch(const SymmNormArgs& n, const NormPart& p, bool residual) {
  if (!(n.flags & SYMM_NORM_PREFETCH)) return;
#pragma unroll
  for (uint32_t k = 0; k < SYMM_NORM_MAX_UNITS; ++k) {
    const uint64_t j = p.unit(k);
    if (j >= p.hi) break;
    if (residual) asm volatile("prefetch.L1 [%0];" ::"l"(n.residual + (p.row * p.upr + j) * 8));
    asm volatile("prefetch.L1 [%0];" ::"l"(n.weight + j * 8));
  }
}

// Both steps for a whole row whose sums are in x.
template <typename T, int Q>
__device__ __forceinline__ void norm_finish_row(const SymmNormArgs& n, const NormPart& p,
                                                float (&x)[SYMM_NORM_MAX_UNITS][8 / sizeof(T)]) {
  const float ss = norm_add_residual<T>(n, p, x, [](uint64_t, uint2) {});
  norm_scale_row<T, Q>(n, p, x, norm_block_reduce<false>(ss));
}

// The part's sums into x: every rank's units in rank order, this rank's
// from its input, the peers' from their LL packets in this rank's slots
// (the row's first unit at packet `at`). False in a thread that gave up
// (or that started with `ok` false: it waits for nothing more).
template <typename T>
__device__ __forceinline__ bool norm_gather_row(const SymmCollArgs& a, const LLState& s, const NormPart& p,
                                                uint64_t at, bool ok, float (&x)[SYMM_NORM_MAX_UNITS][8 / sizeof(T)]) {
  constexpr uint32_t E = 8 / sizeof(T);
#pragma unroll
  for (uint32_t k = 0; k < SYMM_NORM_MAX_UNITS; ++k) {
    const uint64_t j = p.unit(k);
    if (j >= p.hi) break;
    for (uint32_t r = 0; r < a.nranks; ++r) {
      LLUnit<T> in;
      if (r == a.rank) in.u = *reinterpret_cast<const uint2*>(a.send + (p.row * p.upr + j) * 8);
      else if (!ok || !ll_get(a, ll_slot(a, a.rank, s.parity, r) + at + j, s.flag, r, &in.u)) {
        ok = false;
        in.u = make_uint2(0, 0);
      }
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) x[k][e] = r == 0 ? to_acc(in.e[e]) : x[k][e] + to_acc(in.e[e]);
    }
  }
  return ok;
}

// The fence of the one-shot form spread in place (out = input): the
// fenced entry's and the batched entry's. A block's units were read by its
// threads before they stored them into the peers' packets, so once every
// block has counted itself as sent no block can still read an input unit
// that a row's block overwrites. Every block of the grid is resident by
// then (ll_begin's note; the host keeps the grid within max_grid), so the
// wait is for sends already under way, bounded like every wait. The counts
// are the two words after the LL epoch and ll_end's count (the pad's
// COLL_LL_COUNTERS + 2, `sent`, and + 3, `through`).
#define SYMM_NORM_WAIT_SEND_FENCE 0x8000u
__device__ __forceinline__ uint32_t* norm_sent_count(const SymmCollArgs& a) {
  return a.epochs + SYMM_COLL_LL_COUNTERS + 2;
}

// Thread 0 of a block that has counted itself in `sent` (with release):
// wait until every block of the grid has. The last block through clears
// both counts for the next call, which counts only after this grid has
// ended (stream order; a programmatic dependent waits in ll_begin first).
// False on timeout, which names this rank as the peer and
// SYMM_NORM_WAIT_SEND_FENCE | block as the wait detail (the LL waits'
// details are bare block indices); the counts then stay as they are (a
// broken communicator stays broken).
__device__ __forceinline__ bool norm_wait_all_sent(const SymmCollArgs& a) {
  uint32_t* const sent = norm_sent_count(a);
  uint32_t* const through = sent + 1;
  SymmSpin spin(a.wait, a.rank, SYMM_NORM_WAIT_SEND_FENCE | blockIdx.x);
  for (;;) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(sent) : "memory");  // the others' reads first
    if (v >= gridDim.x) break;
    if (spin.give_up()) return false;
  }
  if (atomicAdd(through, 1u) == gridDim.x - 1) {
    *sent = 0;
    *through = 0;
  }
  return true;
}

// In every thread of the block after its sends: count the block in
// `sent` (thread 0, with release: the block's reads first).
__device__ __forceinline__ void norm_count_sent(const SymmCollArgs& a) {
  __syncthreads();  // this block's sends are issued, so their input loads are done
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(norm_sent_count(a)) : "memory");
}

// The fenced entry's fence, in every thread of the block after its sends.
// True in every thread unless it timed out.
__device__ __forceinline__ bool norm_send_fence(const SymmCollArgs& a) {
  __shared__ int timed_out;
  norm_count_sent(a);
  if (threadIdx.x == 0) timed_out = !norm_wait_all_sent(a);
  __syncthreads();
  return !timed_out;
}

// This block's equal contiguous share [*lo, *hi) of the `total` units the
// one-shot form sends spread over the grid. In 32 bits, as the units fit
// an LL slot: a 64-bit division is a software routine on the GPU, though
// measured against one (twenty-third session) it made no difference.
__device__ __forceinline__ void norm_spread_share(uint64_t total, uint32_t* lo, uint32_t* hi) {
  const uint32_t t = (uint32_t)total, per = (t + gridDim.x - 1) / gridDim.x;
  *lo = min(t, blockIdx.x * per);
  *hi = min(t, *lo + per);
}

// FENCE (the fenced entry, its own kernel so that the others keep their
// registers: they run at the 64-register bound) holds the rows' writes
// until every block has sent.
template <typename T, int Q, bool FENCE = false>
__device__ void allreduce_norm_ll_body(const SymmNormArgs& n) {
  const SymmCollArgs& a = n.coll;
  constexpr uint32_t E = 8 / sizeof(T);
  const LLState s = ll_begin(a);
  const uint64_t upr = (uint64_t)n.hidden * sizeof(T) / 8;  // units per row
  const bool spread = n.flags & SYMM_NORM_SPREAD;
  auto send = [&](uint64_t u) {
    const uint2 v = *reinterpret_cast<const uint2*>(a.send + u * 8);
    for (uint32_t k = 1; k < a.nranks; ++k) ll_put(ll_slot(a, (a.rank + k) % a.nranks, s.parity, a.rank) + u, v, s.flag);
  };
  // Everything this block sends goes before it waits for anything, so no
  // rank waits on a packet that a block of its own has not sent yet: its
  // own rows, or with SYMM_NORM_SPREAD an equal contiguous share of all the
  // units (a row's packets then leave from several SMs; the grid may have
  // more blocks than rows, and those only send). Spread, a row's input may
  // still be unsent when its block writes out, so when out is the input
  // the host spreads only on the fenced entry (allreduce_norm.rs
  // one_shot_sends).
  if (spread) {
    uint32_t lo, hi;
    norm_spread_share(n.rows * upr, &lo, &hi);
    for (uint32_t u = lo + threadIdx.x; u < hi; u += blockDim.x) send(u);
  } else {
    for (uint64_t row = blockIdx.x; row < n.rows; row += gridDim.x)
      for (uint64_t j = threadIdx.x; j < upr; j += blockDim.x) send(row * upr + j);
  }
  bool ok = !FENCE || norm_send_fence(a);
  for (uint64_t row = blockIdx.x; (!FENCE || ok) && row < n.rows; row += gridDim.x) {
    float x[SYMM_NORM_MAX_UNITS][E];
    const NormPart p = whole_row(row, upr);
    norm_prefetch(n, p, true);
    ok = norm_gather_row<T>(a, s, p, row * upr, ok, x);
    // A thread that gave up stops the whole block before anything is
    // written from what it did not receive.
    if (__syncthreads_or(!ok)) {
      ok = false;
      break;
    }
    norm_finish_row<T, Q>(n, p, x);
  }
  ll_end(a, s, ok);
}

// The batched one-shot entry (SYMM_ALGO token `batch`): a row over fewer
// threads, several units each (the host picks blockDim from the units a
// thread is to hold), and a thread's loads issued together instead of one
// unit after another. In the entry above a thread's units are finished one
// at a time: each unit's poll is a spin loop, so the next unit's packet is
// not asked for until this one's has come, and the residual and weight
// loads follow. With ranks co-resident on one GPU (tests/torch/
// norm_coresident_bench.py, H200, 2026-11-29) that entry costs 2.7-3.0 us
// over the all-reduce alone at hidden 4096 and 4.1-4.6 at 8192 (two units
// a thread): about 1.4 us for each unit a thread holds, three dependent
// round trips to L2. Here a thread holds its units' input, residual and
// weight in registers, asked for before it polls; it polls all its
// packets from a peer at once and looks again only for those not yet
// there; so the chain after the packets land is one L2 round trip, the
// block reduction and the stores, whatever the units a thread. At most
// SYMM_NORM_BATCH_THREADS threads a block, so that it keeps 128 registers
// (the 1,024-thread entries run at 64 and spill). Whole rows or spread
// sends; spread in place (out = input) with SYMM_NORM_FENCE: a block
// counts itself in the pad's sent word once it has sent, and a row's
// thread 0 waits for the whole grid's count before it polls (so the wait
// hides behind the peers' packets, which come later), and so before any
// of the row's input is overwritten; the last block through ll_end clears
// the count for the next call. (Its block and units a thread:
// norm.cuh's SYMM_NORM_BATCH_THREADS and SYMM_NORM_BATCH_UNITS.)
// flags: the batched entry spreads in place behind its fence (a bit of
// this family's own: abi.cuh's flags keep bits 0-1 and 8-15).
#define SYMM_NORM_FENCE 4u
// OWN (SYMM_ALGO token `loopback`; `auto`'s wherever it batches since the
// twenty-sixth session; its own entry, symm_allreduce_norm_ll_batch_own_*,
// so that the batched entry's code stays as it was): the batched entry
// spread in place without the fence. Each sender also puts its units as
// packets into this rank's own slot (source = this rank), and a row's
// block takes this rank's units from those packets instead of the input:
// once they have all come, every block that sends the row has read its
// input units (each packet carries a value loaded before it was stored, as
// every LL packet does), so the row may be overwritten. Why: the fence's count is
// a release after the block's stores into the peers' memory, which waits
// for those stores to be acknowledged across NVLink (a round trip) before
// the count is seen; the own packets need only local stores. Spread in
// place at 2 ranks across GPUs the fence cost 0.5 us over the same
// kernel out of place (twenty-fourth session); prediction: with the own
// packets in place costs what out of place does, within 0.1 us.

// Packets `at(k)` for the k in `pending` into v[k] (peer `peer` sends
// them): all are asked for at once, then those not yet carrying the flag
// again, bounded. False on timeout or abort (v then holds zeros where
// nothing came). Not ll_try_get in a loop: its load and its flag test sit
// together, and the loads issued first, all of them, then tested are the
// point here.
template <uint32_t K, typename At>
__device__ __forceinline__ bool norm_poll_packets(const SymmCollArgs& a, uint32_t flag, uint32_t peer, uint32_t pending,
                                                  At at, uint2 (&v)[K]) {
#pragma unroll
  for (uint32_t k = 0; k < K; ++k) v[k] = make_uint2(0, 0);
  SymmSpin spin(a.wait, peer, blockIdx.x);
  while (pending) {
    uint4 q[K];
#pragma unroll
    for (uint32_t k = 0; k < K; ++k)
      if (pending & (1u << k))
        asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(q[k].x), "=r"(q[k].y), "=r"(q[k].z), "=r"(q[k].w)
                     : "l"(at(k))
                     : "memory");
#pragma unroll
    for (uint32_t k = 0; k < K; ++k)
      if ((pending & (1u << k)) && q[k].y == flag && q[k].w == flag) {
        v[k] = make_uint2(q[k].x, q[k].z);
        pending &= ~(1u << k);
      }
    if (pending && spin.give_up()) return false;
  }
  return true;
}

// Rank r's units of the part into v: its packets in this rank's slot r
// (the row's first unit at packet `at`), polled together.
__device__ __forceinline__ bool norm_batch_poll(const SymmCollArgs& a, const LLState& s, const NormPart& p, uint32_t r,
                                                uint64_t at, uint2 (&v)[SYMM_NORM_BATCH_UNITS]) {
  const uint4* slot = ll_slot(a, a.rank, s.parity, r) + at;
  uint32_t pending = 0;
#pragma unroll
  for (uint32_t k = 0; k < SYMM_NORM_BATCH_UNITS; ++k)
    if (p.unit(k) < p.hi) pending |= 1u << k;
  return norm_poll_packets(a, s.flag, r, pending, [&](uint32_t k) { return slot + p.unit(k); }, v);
}

// The part's sums into x, every rank's units in rank order (so every rank
// gets the same bits): this rank's from `mine`, a peer's from its packets
// (the part's first unit at packet `at` of this rank's slot for it), each
// peer's polled together. False in a thread that gave up (or started with
// `ok` false: it waits for nothing more; zeros stand in).
template <typename T>
__device__ __forceinline__ bool norm_batch_gather(const SymmCollArgs& a, const LLState& s, const NormPart& p, uint64_t at,
                                                  bool ok, const uint2 (&mine)[SYMM_NORM_BATCH_UNITS],
                                                  float (&x)[SYMM_NORM_BATCH_UNITS][8 / sizeof(T)]) {
  for (uint32_t r = 0; r < a.nranks; ++r) {
    uint2 v[SYMM_NORM_BATCH_UNITS];
    if (r == a.rank) {
#pragma unroll
      for (uint32_t k = 0; k < SYMM_NORM_BATCH_UNITS; ++k) v[k] = mine[k];
    } else if (ok) {
      ok = norm_batch_poll(a, s, p, r, at, v);
    } else {
#pragma unroll
      for (uint32_t k = 0; k < SYMM_NORM_BATCH_UNITS; ++k) v[k] = make_uint2(0, 0);
    }
    norm_accumulate<T>(x, v, r);
  }
  return ok;
}

template <typename T, int Q, bool OWN = false>
__device__ void allreduce_norm_ll_batch_body(const SymmNormArgs& n) {
  const SymmCollArgs& a = n.coll;
  constexpr uint32_t E = 8 / sizeof(T);
  const LLState s = ll_begin(a);
  const uint64_t upr = (uint64_t)n.hidden * sizeof(T) / 8;  // units per row
  auto send = [&](uint64_t u) {
    const uint2 v = *reinterpret_cast<const uint2*>(a.send + u * 8);
    for (uint32_t k = 1; k < a.nranks; ++k) ll_put(ll_slot(a, (a.rank + k) % a.nranks, s.parity, a.rank) + u, v, s.flag);
    if constexpr (OWN) ll_put(ll_slot(a, a.rank, s.parity, a.rank) + u, v, s.flag);  // this rank's own slot too
  };
  // The sends first, as allreduce_norm_ll_body does them (and why).
  const bool fenced = (n.flags & SYMM_NORM_SPREAD) && (n.flags & SYMM_NORM_FENCE);
  if (n.flags & SYMM_NORM_SPREAD) {
    uint32_t lo, hi;
    norm_spread_share(n.rows * upr, &lo, &hi);
    for (uint32_t u = lo + threadIdx.x; u < hi; u += blockDim.x) send(u);
    if (fenced) norm_count_sent(a);
  } else {
    for (uint64_t row = blockIdx.x; row < n.rows; row += gridDim.x)
      for (uint64_t j = threadIdx.x; j < upr; j += blockDim.x) send(row * upr + j);
  }
  bool ok = true;
  for (uint64_t row = blockIdx.x; row < n.rows; row += gridDim.x) {
    const NormPart p = whole_row(row, upr);
    // This rank's units, the residual's and the weight's, asked for
    // together before the first poll. In place, this thread reads its
    // input units here and writes them below; no other thread writes them
    // and the peers have them as packets. (OWN: not the input, below.)
    uint2 mine[SYMM_NORM_BATCH_UNITS], res[SYMM_NORM_BATCH_UNITS], w[SYMM_NORM_BATCH_UNITS];
    if constexpr (OWN) norm_batch_load(n, p, nullptr, res, w);
    else norm_batch_load(n, p, mine, res, w);
    // Fenced, before the polls: the grid's sends are under way already and
    // the peers' packets come later, so this wait costs little.
    if (fenced && row == blockIdx.x && threadIdx.x == 0) ok = norm_wait_all_sent(a);
    // OWN: this rank's units from its own packets, before the peers'
    // packets: local stores, they come first, so the wait hides behind the
    // peers'. (In rank order they would be polled after a lower rank's
    // packets had come: one more round trip to L2 on the critical path.)
    // ok is true here: a failed row ends the loop.
    if constexpr (OWN) ok = norm_batch_poll(a, s, p, a.rank, row * upr, mine);
    float x[SYMM_NORM_BATCH_UNITS][E];
    ok = norm_batch_gather<T>(a, s, p, row * upr, ok, mine, x);
    // A thread that gave up stops the whole block before anything is
    // written from what it did not receive.
    if (__syncthreads_or(!ok)) {
      ok = false;
      break;
    }
    const float ss = norm_add_residual<T>(n, p, x, [](uint64_t, uint2) {}, [&](uint32_t k) { return res[k]; });
    norm_scale_row<T, Q>(n, p, x, norm_block_reduce<false>(ss), [&](uint32_t k) { return w[k]; });
  }
  // A block without a row (the spread grid may have more blocks than rows)
  // still passes the fence: the last block through clears the counts.
  if (fenced && blockIdx.x >= n.rows && threadIdx.x == 0) ok = norm_wait_all_sent(a);
  ll_end(a, s, ok);
}

// The two-shot form's first step: the peers' rows to their owners first,
// so no owner waits on a row a block of ours has not sent yet. A block
// sends, and later writes, the rows blockIdx.x + k * gridDim.x: out may be
// the input.
__device__ __forceinline__ void norm_send_to_owners(const SymmCollArgs& a, const LLState& s, uint64_t rows, uint64_t upr) {
  for (uint64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const uint32_t p = norm_owner(rows, a.nranks, row);
    if (p == a.rank) continue;
    uint4* slot = ll_slot(a, p, s.parity, a.rank) + (row - norm_owner_begin(rows, a.nranks, p)) * upr;
    for (uint64_t j = threadIdx.x; j < upr; j += blockDim.x)
      ll_put(slot + j, *reinterpret_cast<const uint2*>(a.send + (row * upr + j) * 8), s.flag);
  }
}

// The two-shot form's layout, the same in both its entries. Each row in
// `parts` pieces, a block each (1 but with SYMM_NORM_SPREAD, where the host
// gives every owned piece its own block: a piece waits for its siblings'
// sums of squares; at most 8). A slot, in packets: the input rows an owner
// receives [0, back), the residual_out rows coming back from it [back, 2 *
// back) (the host checked that they fit, and that a rank's own slot holds
// a packet per piece of every row: the pieces' sums of squares, at
// squares_in[row * parts + piece]). This rank owns rows [mine0, mine1).
struct NormTwoShot {
  uint64_t upr, per, back, mine0, mine1;
  uint32_t parts;
  uint4* squares_in;
  __device__ __forceinline__ NormTwoShot(const SymmNormArgs& n, const LLState& s, uint64_t upr_) : upr(upr_) {
    const SymmCollArgs& a = n.coll;
    parts = max(1u, (n.flags >> SYMM_NORM_PARTS_SHIFT) & 0xffu);
    per = (upr + parts - 1) / parts;
    back = (n.rows + a.nranks - 1) / a.nranks * upr;
    mine0 = norm_owner_begin(n.rows, a.nranks, a.rank);
    mine1 = norm_owner_begin(n.rows, a.nranks, a.rank + 1);
    squares_in = ll_slot(a, a.rank, s.parity, a.rank);
  }
  __device__ __forceinline__ NormPart piece(uint64_t row, uint32_t c) const {
    return NormPart{row, upr, min(upr, c * per), min(upr, (c + 1) * per)};
  }
};

// The two-shot form's owner, after summing a piece: residual_out unit j
// of the piece's row (its first packet at `at` of the peers' slots for
// this rank) to every peer.
__device__ __forceinline__ void norm_send_back(const SymmCollArgs& a, const LLState& s, uint64_t at, uint64_t j, uint2 v) {
  for (uint32_t k = 1; k < a.nranks; ++k) ll_put(ll_slot(a, (a.rank + k) % a.nranks, s.parity, a.rank) + at + j, v, s.flag);
}

// ... and, in thread 0, the piece's sum of squares to every rank's own
// slot (its own too when a row has several pieces: the owner adds them up
// like everyone else).
__device__ __forceinline__ void norm_send_squares(const SymmCollArgs& a, const LLState& s, uint64_t row, uint32_t parts,
                                                  uint32_t c, float squares) {
  if (threadIdx.x == 0)
    for (uint32_t k = parts == 1 ? 1 : 0; k < a.nranks; ++k) {
      const uint32_t q = (a.rank + k) % a.nranks;
      ll_put(ll_slot(a, q, s.parity, q) + row * parts + c, make_uint2(__float_as_uint(squares), 0u), s.flag);
    }
}

template <typename T, int Q>
__device__ void allreduce_norm_ll2_body(const SymmNormArgs& n) {
  const SymmCollArgs& a = n.coll;
  constexpr uint32_t E = 8 / sizeof(T);
  const LLState s = ll_begin(a);
  const uint64_t upr = (uint64_t)n.hidden * sizeof(T) / 8;  // units per row
  const uint64_t rows = n.rows;
  const NormTwoShot l(n, s, upr);
  const uint32_t parts = l.parts;
  const uint64_t back = l.back, mine0 = l.mine0, mine1 = l.mine1;
  uint4* const squares_in = l.squares_in;
  auto piece = [&](uint64_t row, uint32_t c) { return l.piece(row, c); };
  // 1. The peers' rows to their owners first (norm_send_to_owners).
  norm_send_to_owners(a, s, rows, upr);
  bool ok = true;
  // 2. Our rows' pieces: every rank's part in rank order, plus the
  //    residual; the rounded residual_out goes back to every peer as it is
  //    stored, and the piece's sum of squares to every rank (its own too,
  //    when the row has several pieces); the row's sum is the pieces' in
  //    order, the same bits everywhere.
  for (uint64_t w = blockIdx.x; w < (mine1 - mine0) * parts; w += gridDim.x) {
    const uint64_t row = mine0 + w / parts;
    const uint32_t c = (uint32_t)(w % parts);
    const NormPart p = piece(row, c);
    float x[SYMM_NORM_MAX_UNITS][E];
    norm_prefetch(n, p, true);
    ok = norm_gather_row<T>(a, s, p, (row - mine0) * upr, ok, x);
    if (__syncthreads_or(!ok)) {
      ok = false;
      break;
    }
    const uint64_t at = back + (row - mine0) * upr;
    const float ss = norm_add_residual<T>(n, p, x, [&](uint64_t j, uint2 v) { norm_send_back(a, s, at, j, v); });
    float squares = norm_block_reduce<false>(ss);
    norm_send_squares(a, s, row, parts, c, squares);
    if (parts > 1) {
      squares = 0.f;
      for (uint32_t d = 0; d < parts; ++d) {
        uint2 v = make_uint2(0u, 0u);
        ok = ok && ll_get(a, squares_in + row * parts + d, s.flag, a.rank, &v);
        squares += __uint_as_float(v.x);
      }
      if (__syncthreads_or(!ok)) {
        ok = false;
        break;
      }
    }
    norm_scale_row<T, Q>(n, p, x, squares);
  }
  // 3. The peers' rows, piece by piece: residual_out from their owner,
  //    normalised here with the sum of the owner's pieces' squares.
  for (uint64_t w = blockIdx.x; ok && w < rows * parts; w += gridDim.x) {
    const uint64_t row = w / parts;
    const uint32_t owner = norm_owner(rows, a.nranks, row);
    if (owner == a.rank) continue;
    const NormPart p = piece(row, (uint32_t)(w % parts));
    norm_prefetch(n, p, false);  // the owner's residual_out comes as packets
    const uint4* from = ll_slot(a, a.rank, s.parity, owner) + back + (row - norm_owner_begin(rows, a.nranks, owner)) * upr;
    float squares = 0.f;
    for (uint32_t d = 0; d < parts; ++d) {
      uint2 v = make_uint2(0u, 0u);
      ok = ok && ll_get(a, squares_in + row * parts + d, s.flag, owner, &v);
      squares += __uint_as_float(v.x);
    }
    float x[SYMM_NORM_MAX_UNITS][E];
#pragma unroll
    for (uint32_t k = 0; k < SYMM_NORM_MAX_UNITS; ++k) {
      const uint64_t j = p.unit(k);
      if (j >= p.hi) break;
      LLUnit<T> in;
      if (!ok || !ll_get(a, from + j, s.flag, owner, &in.u)) {
        ok = false;
        in.u = make_uint2(0, 0);
      }
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) x[k][e] = to_acc(in.e[e]);
    }
    // Nothing is written from a row a thread did not receive whole.
    if (__syncthreads_or(!ok)) {
      ok = false;
      break;
    }
#pragma unroll
    for (uint32_t k = 0; k < SYMM_NORM_MAX_UNITS; ++k) {
      const uint64_t j = p.unit(k);
      if (j >= p.hi) break;
      LLUnit<T> out;
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) out.e[e] = from_acc<T>(x[k][e]);  // exact: x came from T
      *reinterpret_cast<uint2*>(n.residual_out + (row * upr + j) * 8) = out.u;
    }
    norm_scale_row<T, Q>(n, p, x, squares);
  }
  ll_end(a, s, ok);
}

// The batched two-shot entry (`batch` where the two-shot form serves):
// allreduce_norm_ll2_body's steps with the batched entry's loads and
// polls. In that entry a thread's units are finished one at a time (each
// poll a spin loop, then the residual's load, then the weight's), and in
// its third step each of a block's pieces waits for the owner's sums of
// squares one piece after another: at 4 ranks, 1 MiB (128 tokens of
// 4096, four pieces a row) it costs 15 us over the all-reduce alone even
// with the ranks co-resident on one GPU (norm_coresident_bench.py,
// 2026-11-29). Here a thread's input, residual and weight units are asked
// for before it polls, a peer's packets and a row's squares are polled
// together, and a block whose pieces keep their place in the row (the
// grid a multiple of the pieces) loads the weight's units once.
template <typename T, int Q>
__device__ void allreduce_norm_ll2_batch_body(const SymmNormArgs& n) {
  const SymmCollArgs& a = n.coll;
  constexpr uint32_t E = 8 / sizeof(T);
  constexpr uint32_t U = SYMM_NORM_BATCH_UNITS;
  const LLState s = ll_begin(a);
  const uint64_t upr = (uint64_t)n.hidden * sizeof(T) / 8;  // units per row
  const uint64_t rows = n.rows;
  const NormTwoShot l(n, s, upr);  // as in allreduce_norm_ll2_body
  const uint32_t parts = l.parts;
  const uint64_t back = l.back, mine0 = l.mine0, mine1 = l.mine1;
  const uint4* const squares_in = l.squares_in;
  auto piece = [&](uint64_t row, uint32_t c) { return l.piece(row, c); };
  // A row's sums of squares, the owner's pieces' in piece order (the same
  // bits everywhere): lane d of every warp polls piece d's packet, all at
  // once, and the warp adds them up in order. False unless every lane got
  // its packet. (Step 3 polls them with the piece's units.)
  auto row_squares = [&](uint64_t row, uint32_t owner, float* squares) {
    const uint32_t lane = threadIdx.x % 32;
    uint2 v = make_uint2(0u, 0u);
    const bool got = lane >= parts || ll_get(a, squares_in + row * parts + lane, s.flag, owner, &v);
    float sum = 0.f;
    for (uint32_t d = 0; d < parts; ++d) sum += __shfl_sync(0xffffffffu, __uint_as_float(v.x), d);
    *squares = sum;
    return __all_sync(0xffffffffu, got) != 0;
  };
  norm_send_to_owners(a, s, rows, upr);
  bool ok = true;
  // 2. Our rows' pieces (allreduce_norm_ll2_body's step 2).
  for (uint64_t w = blockIdx.x; w < (mine1 - mine0) * parts; w += gridDim.x) {
    const uint64_t row = mine0 + w / parts;
    const uint32_t c = (uint32_t)(w % parts);
    const NormPart p = piece(row, c);
    uint2 mine[U], res[U], wt[U];
    norm_batch_load(n, p, mine, res, wt);
    float x[U][E];
    ok = norm_batch_gather<T>(a, s, p, (row - mine0) * upr, ok, mine, x);
    if (__syncthreads_or(!ok)) {
      ok = false;
      break;
    }
    const uint64_t at = back + (row - mine0) * upr;
    const float ss = norm_add_residual<T>(
        n, p, x, [&](uint64_t j, uint2 v) { norm_send_back(a, s, at, j, v); }, [&](uint32_t k) { return res[k]; });
    float squares = norm_block_reduce<false>(ss);
    norm_send_squares(a, s, row, parts, c, squares);
    if (parts > 1) {
      ok = row_squares(row, a.rank, &squares);
      if (__syncthreads_or(!ok)) {
        ok = false;
        break;
      }
    }
    norm_scale_row<T, Q>(n, p, x, squares, [&](uint32_t k) { return wt[k]; });
  }
  // 3. The peers' rows, piece by piece (allreduce_norm_ll2_body's step 3);
  //    the weight's units loaded again only where the piece moved.
  uint2 wt[U];
  uint32_t loaded = ~0u;  // the piece wt holds
  for (uint64_t w = blockIdx.x; ok && w < rows * parts; w += gridDim.x) {
    const uint64_t row = w / parts;
    const uint32_t owner = norm_owner(rows, a.nranks, row);
    if (owner == a.rank) continue;
    const uint32_t c = (uint32_t)(w % parts);
    const NormPart p = piece(row, c);
    if (c != loaded) {
      norm_batch_load(n, p, nullptr, nullptr, wt);
      loaded = c;
    }
    // The piece's packets and, in lane d < parts, the row's piece d's sum
    // of squares, polled together: one round trip once they are there,
    // not one for the squares and then one for the units.
    const uint4* from = ll_slot(a, a.rank, s.parity, owner) + back + (row - norm_owner_begin(rows, a.nranks, owner)) * upr;
    const uint32_t lane = threadIdx.x % 32;
    uint32_t pending = lane < parts ? 1u << U : 0u;
#pragma unroll
    for (uint32_t k = 0; k < U; ++k)
      if (p.unit(k) < p.hi) pending |= 1u << k;
    uint2 v[U + 1];
    ok = norm_poll_packets(a, s.flag, owner, pending,
                           [&](uint32_t k) { return k < U ? from + p.unit(k) : squares_in + row * parts + lane; }, v);
    float squares = 0.f;
    for (uint32_t d = 0; d < parts; ++d) squares += __shfl_sync(0xffffffffu, __uint_as_float(v[U].x), d);
    // Nothing is written from a row a thread did not receive whole.
    if (__syncthreads_or(!ok)) {
      ok = false;
      break;
    }
    float x[U][E];
#pragma unroll
    for (uint32_t k = 0; k < U; ++k) {
      const uint64_t j = p.unit(k);
      if (j < p.hi) *reinterpret_cast<uint2*>(n.residual_out + (row * upr + j) * 8) = v[k];  // the owner's bits
      LLUnit<T> in;
      in.u = v[k];
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) x[k][e] = to_acc(in.e[e]);
    }
    norm_scale_row<T, Q>(n, p, x, squares, [&](uint32_t k) { return wt[k]; });
  }
  ll_end(a, s, ok);
}

template <typename T, int Q>
__device__ void add_norm_body(const SymmNormArgs& n) {
  constexpr uint32_t E = 8 / sizeof(T);
  const uint64_t upr = (uint64_t)n.hidden * sizeof(T) / 8;
  for (uint64_t row = blockIdx.x; row < n.rows; row += gridDim.x) {
    const NormPart p = whole_row(row, upr);
    float x[SYMM_NORM_MAX_UNITS][E];
#pragma unroll
    for (uint32_t k = 0; k < SYMM_NORM_MAX_UNITS; ++k) {
      const uint64_t j = p.unit(k);
      if (j >= p.hi) break;
      LLUnit<T> in;
      in.u = *reinterpret_cast<const uint2*>(n.coll.send + (row * upr + j) * 8);
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) x[k][e] = to_acc(in.e[e]);
    }
    norm_finish_row<T, Q>(n, p, x);
  }
}

// The batched two-kernel entry (`batch` where the message is above the LL
// forms): add_norm_body with a thread's units of the sums, the residual
// and the weight asked for together, instead of a round trip to memory
// for each unit's residual and then each unit's weight (stores to
// residual_out and out come between them, which the compiler must assume
// alias them). At 2 ranks, 128 tokens of 8192 (2 MiB) the old entry costs
// 11.4 us over the all-reduce alone with the ranks co-resident on one GPU
// (norm_coresident_bench.py, 2026-11-29). Launched as a programmatic
// dependent of the library's all-reduce (SYMM_COLL_PDL; never at one
// rank, where the previous kernel is the caller's and may write the
// residual), it asks for its first row's residual and weight before it
// waits for the all-reduce's sums: neither is written by the all-reduce
// (check: out and the sums overlap neither), and everything before the
// all-reduce has finished once it runs. (It gained nothing measurable in
// the twentieth session: the all-reduces above the LL limit never let a
// dependent start before they end. It costs nothing either, and pays
// where an all-reduce does.)
template <typename T, int Q>
__device__ void add_norm_batch_body(const SymmNormArgs& n) {
  constexpr uint32_t E = 8 / sizeof(T);
  constexpr uint32_t U = SYMM_NORM_BATCH_UNITS;
  const uint64_t upr = (uint64_t)n.hidden * sizeof(T) / 8;
  bool waited = false;
  for (uint64_t row = blockIdx.x; row < n.rows; row += gridDim.x) {
    const NormPart p = whole_row(row, upr);
    uint2 sums[U], res[U], w[U];
    norm_batch_load(n, p, nullptr, res, w);
    if (!waited) {
#if __CUDA_ARCH__ >= 900
      asm volatile("griddepcontrol.wait;" ::: "memory");
      if (n.coll.mode & SYMM_COLL_PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
      waited = true;
    }
    norm_batch_load(n, p, sums, nullptr, nullptr);
    float x[U][E];
#pragma unroll
    for (uint32_t k = 0; k < U; ++k) {
      LLUnit<T> in;
      in.u = sums[k];
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) x[k][e] = to_acc(in.e[e]);
    }
    const float ss = norm_add_residual<T>(n, p, x, [](uint64_t, uint2) {}, [&](uint32_t k) { return res[k]; });
    norm_scale_row<T, Q>(n, p, x, norm_block_reduce<false>(ss), [&](uint32_t k) { return w[k]; });
  }
}

// The fenced one-shot entry and the batched one with its own packets serve
// outputs of the input's type only: the only ones that may alias the input.
#define SYMM_NORM_KERNELS(family, suffix, T)                                                                  \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_MAX_THREADS) symm_allreduce_norm_ll_##suffix(SymmNormArgs n) { \
    SYMM_NORM_QUANT_SWITCH(allreduce_norm_ll_body, T)                                                          \
  }                                                                                                            \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_MAX_THREADS)                                                    \
      symm_allreduce_norm_ll_fenced_##suffix(SymmNormArgs n) {                                                 \
    allreduce_norm_ll_body<T, SYMM_NORM_SAME_TYPE, true>(n);                                                   \
  }                                                                                                            \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_BATCH_THREADS)                                                  \
      symm_allreduce_norm_ll_batch_##suffix(SymmNormArgs n) {                                                  \
    SYMM_NORM_QUANT_SWITCH(allreduce_norm_ll_batch_body, T)                                                    \
  }                                                                                                            \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_BATCH_THREADS)                                                  \
      symm_allreduce_norm_ll_batch_own_##suffix(SymmNormArgs n) {                                              \
    allreduce_norm_ll_batch_body<T, SYMM_NORM_SAME_TYPE, true>(n);                                             \
  }                                                                                                            \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_MAX_THREADS) symm_allreduce_norm_ll2_##suffix(SymmNormArgs n) { \
    SYMM_NORM_QUANT_SWITCH(allreduce_norm_ll2_body, T)                                                          \
  }                                                                                                            \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_BATCH_THREADS)                                                  \
      symm_allreduce_norm_ll2_batch_##suffix(SymmNormArgs n) {                                                 \
    SYMM_NORM_QUANT_SWITCH(allreduce_norm_ll2_batch_body, T)                                                   \
  }                                                                                                            \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_MAX_THREADS) symm_add_norm_##suffix(SymmNormArgs n) {             \
    SYMM_NORM_QUANT_SWITCH(add_norm_body, T)                                                                   \
  }                                                                                                            \
  SYMM_KERNEL void __launch_bounds__(SYMM_NORM_BATCH_THREADS) symm_add_norm_batch_##suffix(SymmNormArgs n) {     \
    SYMM_NORM_QUANT_SWITCH(add_norm_batch_body, T)                                                             \
  }

SYMM_FOR_EACH_OPT_IN_TYPE(SYMM_NORM_KERNELS, norm)
