// All-to-all-v with the counts on the device (symmAllToAllvDevice, PyTorch's
// all_to_all_vdev): rank p's input holds its blocks for ranks 0..n-1 back to
// back, splits_p[q] rows for rank q (a row: a.elem_size bytes, the host's
// rowElems elements; the kernels only move bytes); rank q's output receives them in
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
// rank (all see the same counts); more than recv_capacity rows for this
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
    // Written only when the call moves its data (as the 2-D forms).
    if (blockIdx.x == 0 && !bad)
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

// ---- The 2-D forms (symmAllToAllvDevice2d / symmAllToAllvDevice2dOffset,
// PyTorch's all_to_all_vdev_2d and all_to_all_vdev_2d_offset) -------------
// n ranks with ne local experts each; ns = n * ne blocks per rank.
//   dispatch: rank p's input holds its blocks for (rank q, expert e) back to
//     back in q-major order (splits[q*ne+e] rows each); rank r's output
//     is expert-major: for e, for p, the block from rank p for expert e,
//     each expert's group starting at a multiple of major_align.
//   combine: rank r (owner of expert e) sends back to rank p the block of
//     splits[e*n+p] rows at offset splits[ns+e*n+p] of its input; rank
//     p's output is rank-major, packed: for q, for e, the block from q's e.
// The same three syncs as the 1-D kernel. Between the first two, every
// block publishes this rank's table in its scratch: [0, ns) the counts,
// [ns, 2ns) where each block starts in this rank's input (the dispatch's
// prefix sums, the combine's given offsets), both in this rank's order,
// and [2ns] 1 when they cannot be honoured (a negative count or offset, a
// block past the input's end), worked out here so that each receiver reads
// only its own blocks of each table and n flags. After the second sync each
// block reads what it receives and its offsets; rows of out_splits_offsets
// are written (block 0) only when the call moves its data.

__device__ __forceinline__ uint64_t sat_add(uint64_t x, uint64_t y) {
  const uint64_t z = x + y;
  return z < x ? ~0ull : z;
}

// x[0, n) (shared memory) becomes its exclusive prefix sum, saturating at
// 2^64 - 1; returns the sum (in every thread). Every thread of the block
// calls it; blockDim.x is a multiple of 32, at most SYMM_COLL_THREADS.
__device__ __noinline__ uint64_t block_exclusive_scan(uint64_t* x, uint32_t n) {
  __shared__ uint64_t warp_sum[SYMM_COLL_THREADS / 32];
  __shared__ uint64_t all;
  const uint32_t t = threadIdx.x, nt = blockDim.x, lane = t & 31, w = t >> 5, nw = nt >> 5;
  const uint32_t per = (n + nt - 1) / nt;
  const uint32_t b = min(t * per, n), e = min(b + per, n);
  uint64_t mine = 0;
  for (uint32_t i = b; i < e; ++i) mine = sat_add(mine, x[i]);
  uint64_t inc = mine;
  for (uint32_t d = 1; d < 32; d <<= 1) {
    const uint64_t o = __shfl_up_sync(0xffffffffu, inc, d);
    if (lane >= d) inc = sat_add(inc, o);
  }
  uint64_t run = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) run = 0;
  if (lane == 31) warp_sum[w] = inc;
  __syncthreads();
  if (w == 0) {
    uint64_t ws = lane < nw ? warp_sum[lane] : 0;
    for (uint32_t d = 1; d < 32; d <<= 1) {
      const uint64_t o = __shfl_up_sync(0xffffffffu, ws, d);
      if (lane >= d) ws = sat_add(ws, o);
    }
    if (lane < nw) warp_sum[lane] = ws;  // inclusive
    if (lane == nw - 1) all = ws;
  }
  __syncthreads();
  if (w > 0) run = sat_add(warp_sum[w - 1], run);
  for (uint32_t i = b; i < e; ++i) {
    const uint64_t c = x[i];
    x[i] = run;
    run = sat_add(run, c);
  }
  __syncthreads();
  return all;
}

__device__ __forceinline__ uint64_t round_up_sat(uint64_t x, uint64_t align) {
  if (align <= 1) return x;
  const uint64_t r = x % align;
  return r == 0 ? x : sat_add(x, align - r);
}

template <bool COMBINE>
__device__ __forceinline__ void alltoallv_2d_body(const SymmA2AV2dArgs& v) {
  const SymmCollArgs& a = v.coll;
  SYMM_COLL_PROLOGUE(a, s)
  const uint32_t n = a.nranks, me = a.rank, ne = v.experts, ns = n * ne;
  const uint32_t t = threadIdx.x, nt = blockDim.x;
  const uint64_t es = a.elem_size, cap = v.send_capacity;
  __shared__ uint64_t cnt[SYMM_A2AV_2D_MAX_SPLITS], src_off[SYMM_A2AV_2D_MAX_SPLITS];
  __shared__ uint64_t out_off[SYMM_A2AV_2D_MAX_SPLITS], grp[SYMM_A2AV_2D_MAX_SPLITS];
  __shared__ uint32_t mine_bad, flag_of[SYMM_MAX_RANKS];
  __shared__ uint64_t total, bad_detail;
  __shared__ uint32_t bad;  // 0: fine; 1: rank bad_detail's table is wrong; 2: too much for recv
  if (!block_sync(a, s)) return;
  // This rank's table, checked.
  if (t == 0) mine_bad = 0;
  __syncthreads();
  for (uint32_t i = t; i < ns; i += nt) {
    const int64_t c = v.splits[i];
    const int64_t o = COMBINE ? v.splits[ns + i] : 0;
    bool ok = c >= 0 && (uint64_t)c <= cap;
    if (COMBINE) ok = ok && o >= 0 && (uint64_t)o + (uint64_t)c <= cap;  // both below 2^63: no wrap
    if (!ok) mine_bad = 1;
    cnt[i] = ok ? (uint64_t)c : 0;
    src_off[i] = COMBINE ? (ok ? (uint64_t)o : 0) : cnt[i];
  }
  __syncthreads();
  if (!COMBINE) {
    const uint64_t sum = block_exclusive_scan(src_off, ns);
    if (t == 0 && sum > cap) mine_bad = 1;
    __syncthreads();
  }
  int64_t* mine = reinterpret_cast<int64_t*>(scratch_in(a, me, 0));
  for (uint32_t i = t; i < ns; i += nt) {
    mine[i] = (int64_t)cnt[i];
    mine[ns + i] = (int64_t)src_off[i];
  }
  if (t == 0) mine[2 * ns] = mine_bad;
  if (!block_sync(a, s)) return;
  // What this rank receives, in output order o: dispatch o = e*n+p (from
  // rank p for expert e, entry me*ne+e of p's table); combine o = q*ne+e
  // (from rank q's expert e, entry e*n+me of q's table).
  if (t < n) flag_of[t] = reinterpret_cast<const int64_t*>(scratch_in(a, t, 0))[2 * ns] != 0;
  for (uint32_t o = t; o < ns; o += nt) {
    const uint32_t p = COMBINE ? o / ne : o % n, e = COMBINE ? o % ne : o / n;
    const uint32_t idx = COMBINE ? e * n + me : me * ne + e;
    const int64_t* theirs = reinterpret_cast<const int64_t*>(scratch_in(a, p, 0));
    const int64_t c = theirs[idx], off = theirs[ns + idx];
    cnt[o] = c > 0 ? (uint64_t)c : 0;  // a bad rank's entries move nothing anyway
    src_off[o] = off > 0 ? (uint64_t)off : 0;
    out_off[o] = cnt[o];
  }
  __syncthreads();
  if (COMBINE) {
    const uint64_t sum = block_exclusive_scan(out_off, ns);
    if (t == 0) total = sum;
  } else {
    // Group e holds the blocks o in [e*n, e*n+n); each group but the last is
    // padded to a multiple of major_align, and a scan of the padded sizes
    // gives the groups' starts. PyTorch's rule, so that its offsets come
    // out here too: from major_align 1 on, a group that receives nothing
    // still takes major_align rows (its grouped GEMMs take no empty group,
    // pytorch/pytorch#152668); 0 packs the groups.
    for (uint32_t e = t; e < ne; e += nt) {
      uint64_t g = 0;
      for (uint32_t p = 0; p < n; ++p) g = sat_add(g, cnt[e * n + p]);
      grp[e] = e + 1 < ne && v.major_align ? max(round_up_sat(g, v.major_align), v.major_align) : g;
    }
    __syncthreads();
    const uint64_t sum = block_exclusive_scan(grp, ne);
    for (uint32_t o = t; o < ns; o += nt) {
      const uint32_t e = o / n;
      uint64_t at = grp[e];
      for (uint32_t k = e * n; k < o; ++k) at = sat_add(at, cnt[k]);
      out_off[o] = at;
    }
    if (t == 0) total = sum;
  }
  __syncthreads();
  if (t == 0) {
    bad = 0;
    bad_detail = 0;
    for (uint32_t p = 0; p < n; ++p)
      if (flag_of[p]) {
        bad = 1;
        bad_detail = p;
        break;
      }
    if (!bad && total > v.recv_capacity) {
      bad = 2;
      bad_detail = total;
    }
  }
  __syncthreads();
  if (!bad) {
    if (blockIdx.x == 0)
      for (uint32_t o = t; o < ns; o += nt) {
        v.out_splits_offsets[o] = (int64_t)cnt[o];
        v.out_splits_offsets[ns + o] = (int64_t)out_off[o];
      }
    uint64_t lo, hi;
    split_range(total * es, 16, gridDim.x, blockIdx.x, &lo, &hi);
    s.tl.mark(SYMM_PHASE_GATHER);
    for (uint32_t o = 0; o < ns; ++o) {
      const uint64_t b0 = out_off[o] * es, b1 = b0 + cnt[o] * es;
      const uint64_t x0 = max(lo, b0), x1 = min(hi, b1);
      const uint32_t p = COMBINE ? o / ne : o % n;
      if (x0 < x1) copy_bytes(a.recv + x0, a.src[p] + src_off[o] * es + (x0 - b0), x1 - x0);
    }
  }
  if (!block_sync(a, s)) return;
  sync_end(a, s);
  if (bad && blockIdx.x == 0 && t == 0) {
    const uint32_t how = bad | (COMBINE ? SYMM_A2AV_FORM_2D_OFFSET : SYMM_A2AV_FORM_2D) << SYMM_A2AV_FORM_SHIFT;
    const uint32_t m[4] = {SYMM_A2AV_TAG, (uint32_t)bad_detail, (uint32_t)(bad_detail >> 32), how};
    const uint32_t th[4] = {SYMM_A2AV_TAG, (uint32_t)v.recv_capacity, (uint32_t)(v.recv_capacity >> 32), how};
    SymmSpin(a.wait, me, 0).record_mismatch(m, th);
  }
}

SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_alltoallv_2d(SymmA2AV2dArgs v) {
  alltoallv_2d_body<false>(v);
}

SYMM_KERNEL void __launch_bounds__(SYMM_COLL_THREADS) symm_alltoallv_2d_offset(SymmA2AV2dArgs v) {
  alltoallv_2d_body<true>(v);
}
