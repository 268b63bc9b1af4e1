// All-to-all-v with the counts on the device (symmAllToAllvDevice, PyTorch's
// all_to_all_vdev): rank p's input holds its blocks for ranks 0..n-1 back to
// back, splits_p[q] elements for rank q; rank q's output receives them in
// rank order, and out_splits_offsets gets the counts it received and where
// each block starts. The counts never reach the host, so a CUDA graph
// replays with new counts each time.
//
// Receivers pull: the inputs are symmetric or registered (src[p] is rank
// p's input as seen here). Three cross-rank syncs:
//   1. entry: every peer has started this call, so no earlier kernel of its
//      still reads this rank's scratch;
//   2. every block writes this rank's counts (and its input's capacity) to
//      the front of its scratch and syncs with the same block of every peer
//      (each block publishes its own copy: a sync orders only its own
//      block's stores); then each block reads every rank's counts and works
//      out its offsets;
//   3. exit: every peer has finished reading this rank's input and counts.
// Counts that cannot be honoured move nothing, and the call records an
// asynchronous error after the exit sync (so peers are not left waiting):
// a negative count, or a rank whose counts run past its input, on every
// rank (all see the same counts); more than recv_capacity elements for this
// rank, on this rank only.
#include "coll.cuh"

SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_alltoallv_device(SymmA2AVDevArgs v) {
  const SymmCollArgs& a = v.coll;
  SYMM_COLL_PROLOGUE(a, s)
  const uint32_t n = a.nranks, me = a.rank;
  const uint64_t es = a.elem_size;
  if (!block_sync(a, s)) return;
  int64_t* mine = reinterpret_cast<int64_t*>(scratch_in(a, me, 0));
  if (threadIdx.x < n) mine[threadIdx.x] = v.splits[threadIdx.x];
  if (threadIdx.x == n) mine[n] = (int64_t)v.send_capacity;
  if (!block_sync(a, s)) return;
  __shared__ uint64_t cnt[SYMM_MAX_RANKS], in_off[SYMM_MAX_RANKS], out_off[SYMM_MAX_RANKS];
  __shared__ uint64_t total, bad_detail;
  __shared__ uint32_t bad;  // 0: fine; 1: rank bad_detail's counts are wrong; 2: too much for recv
  if (threadIdx.x == 0) {
    bad = 0;
    total = 0;
    for (uint32_t p = 0; p < n; ++p) {
      const int64_t* theirs = reinterpret_cast<const int64_t*>(scratch_in(a, p, 0));
      int64_t before = 0, all = 0;
      bool negative = false;
      for (uint32_t q = 0; q < n; ++q) {
        const int64_t c = theirs[q];
        negative |= c < 0;
        if (q < me) before += c;
        all += c;
      }
      if (!bad && (negative || all > theirs[n])) {
        bad = 1;
        bad_detail = p;
      }
      cnt[p] = negative ? 0 : (uint64_t)theirs[me];
      in_off[p] = (uint64_t)before;
      out_off[p] = total;
      total += cnt[p];
    }
    if (!bad && total > v.recv_capacity) {
      bad = 2;
      bad_detail = total;
    }
    if (blockIdx.x == 0)
      for (uint32_t p = 0; p < n; ++p) {
        v.out_splits_offsets[p] = (int64_t)cnt[p];
        v.out_splits_offsets[n + p] = (int64_t)out_off[p];
      }
  }
  __syncthreads();
  if (!bad) {
    uint64_t lo, hi;
    split_range(total * es, 16, gridDim.x, blockIdx.x, &lo, &hi);
    s.tl.mark(SYMM_PHASE_GATHER);
    for (uint32_t k = 0; k < n; ++k) {
      const uint32_t p = (me + k) % n;  // spread the pulls over the peers
      const uint64_t b0 = out_off[p] * es, b1 = b0 + cnt[p] * es;
      const uint64_t x0 = max(lo, b0), x1 = min(hi, b1);
      if (x0 < x1) copy_bytes(a.recv + x0, a.src[p] + in_off[p] * es + (x0 - b0), x1 - x0);
    }
  }
  if (!block_sync(a, s)) return;
  sync_end(a, s);
  if (bad && blockIdx.x == 0 && threadIdx.x == 0) {
    const uint32_t m[4] = {SYMM_A2AV_TAG, (uint32_t)bad_detail, (uint32_t)(bad_detail >> 32), bad};
    const uint32_t t[4] = {SYMM_A2AV_TAG, (uint32_t)v.recv_capacity, (uint32_t)(v.recv_capacity >> 32), bad};
    SymmSpin(a.wait, me, 0).record_mismatch(m, t);
  }
}
