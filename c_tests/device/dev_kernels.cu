// Kernels of the device-API tests (c_tests/device/dev_*.c): users' kernels
// written against include/symmcomm_device.cuh alone. Compiled by nvcc into
// a fatbin at build time and launched through the driver API with the
// symmDevComm passed by value, as any user's kernel receives it.
//
// Results go to a small device array `res` the host reads back:
// res[0] counts mismatches, res[1] holds the first bad value seen, res[2]
// counts device calls that returned an error, res[3] the first such code.
#include "symmcomm_device.cuh"

#define DK extern "C" __global__

__device__ __forceinline__ void dk_bad(unsigned* res, unsigned got) {
  if (atomicAdd(&res[0], 1u) == 0) res[1] = got;
}
__device__ __forceinline__ bool dk_ok(unsigned* res, symmResult_t rc) {
  if (rc == symmSuccess) return true;
  if (threadIdx.x == 0 && atomicAdd(&res[2], 1u) == 0) res[3] = (unsigned)rc;
  return false;
}

// ---- Barrier stress ------------------------------------------------------
//
// `cells` is a symmetric buffer of gridDim.x words per rank; `rounds`
// (plain device memory, gridDim.x words) counts the iterations each block
// finished over every launch and graph replay. Iteration r of block b:
// write r into our cell b, arrive, wait, then every member's cell b must be
// r (they wrote it before arriving), then a second barrier so nobody
// writes r + 1 while a peer still reads r. Every third iteration uses the
// team of ranks of our parity (0, 2, 4, ... or 1, 3, ...) instead of the
// world, so the world barriers that follow check that per-pair epochs stay
// in step when teams differ.
DK void dk_barrier_stress(symmDevComm dc, unsigned* cells, unsigned* rounds, unsigned iters, unsigned* res) {
  const unsigned b = blockIdx.x;
  const symmDevTeam world = symmDevTeamWorld(dc);
  const symmDevTeam parity = symmDevTeamStrided(dc, dc.rank & 1, (dc.nRanks - (dc.rank & 1) + 1) / 2, 2);
  unsigned r = rounds[b];
  for (unsigned it = 0; it < iters; ++it) {
    ++r;
    const symmDevTeam& team = it % 3 == 2 ? parity : world;
    if (threadIdx.x == 0) *reinterpret_cast<volatile unsigned*>(cells + b) = r;
    if (!dk_ok(res, symmDevBarrierArrive(dc, b, team))) return;
    if (!dk_ok(res, symmDevBarrierWait(dc, b, team))) return;
    for (int i = threadIdx.x; i < team.nRanks; i += blockDim.x) {
      const int p = symmDevTeamRankToWorld(team, i);
      const unsigned v = *reinterpret_cast<volatile unsigned*>(symmDevPeerPtr(dc, cells + b, p));
      if (v != r) dk_bad(res, v);
    }
    if (!dk_ok(res, symmDevBarrier(dc, b, team))) return;
  }
  if (threadIdx.x == 0) rounds[b] = r;
}

// ---- Signals, put-with-signal, LL packets, peer tables ------------------
//
// One launch = one exchange: block b of every rank sends `words` words
// (value pattern of (sender, receiver, launch, i)) to every peer with
// symmDevBlockPutSignal (add 1 on slot b), into the peer's `inbox` at
// [b][sender]; then waits for every peer's next signal on slot b
// (symmDevBlockSignalWaitNext: survives relaunches and graph replays with
// no reset) and checks what landed. `launch` lives in device memory
// (launches[b]) so graph replays see a new value each time. Then the same
// exchange with LL packets in dc.llBuffer ([parity][sender][block][lane]),
// and finally a read of every peer's registered buffer through its table
// (symmMemGetPeerTable), which each rank filled with rank + 1. A closing
// barrier keeps the next launch from overwriting what a peer still reads.
// inbox: symmetric, gridDim.x * nRanks * words words; staging: the same,
// plain; 2 * gridDim.x signal slots; llBytes >= 2 * nRanks * gridDim.x *
// blockDim.x * 16.
__device__ __forceinline__ unsigned dk_word(int from, int to, unsigned launch, unsigned i) {
  return (unsigned)from * 0x9E3779B1u ^ (unsigned)to * 0x85EBCA77u ^ launch * 0xC2B2AE3Du ^ i;
}

DK void dk_exchange(symmDevComm dc, unsigned* inbox, unsigned* staging, unsigned words, unsigned* launches,
                    void* const* regTable, unsigned* res) {
  const unsigned b = blockIdx.x;
  const unsigned launch = launches[b] + 1;
  const int n = dc.nRanks;
  // Put with signal.
  for (int p = 0; p < n; ++p) {
    if (p == dc.rank) continue;
    unsigned* src = staging + ((size_t)b * n + p) * words;
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x) src[i] = dk_word(dc.rank, p, launch, i);
    __syncthreads();
    unsigned* dst = inbox + ((size_t)b * n + dc.rank) * words;
    if (!dk_ok(res, symmDevBlockPutSignal(dc, p, dst, src, words * sizeof(unsigned), b, 1, symmDevSignalOpAdd)))
      return;
  }
  for (int p = 0; p < n; ++p) {
    if (p == dc.rank) continue;
    if (!dk_ok(res, symmDevBlockSignalWaitNext(dc, b, p))) return;
    const unsigned* got = inbox + ((size_t)b * n + p) * words;
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x)
      if (got[i] != dk_word(p, dc.rank, launch, i)) dk_bad(res, got[i]);
  }
  // A set-and-compare signal on slot gridDim.x + b: the launch number.
  if (threadIdx.x < (unsigned)n && (int)threadIdx.x != dc.rank)
    dk_ok(res, symmDevSignalSet(dc, threadIdx.x, gridDim.x + b, launch));
  if (threadIdx.x < (unsigned)n && (int)threadIdx.x != dc.rank) {
    uint64_t seen = 0;
    if (dk_ok(res, symmDevSignalWait(dc, gridDim.x + b, threadIdx.x, symmDevCmpGe, launch, &seen)) && seen != launch)
      dk_bad(res, (unsigned)seen);
  }
  // LL packets: lane t of block b sends one packet to every peer.
  const symmDevLLEpoch ep = symmDevLLBegin(dc, b);
  const unsigned lanes = blockDim.x;
  uint4* ll = static_cast<uint4*>(dc.llBuffer);
  auto packet = [&](unsigned parity, int from, unsigned lane) {
    return ll + (((size_t)parity * n + from) * gridDim.x + b) * lanes + lane;
  };
  for (int p = 0; p < n; ++p) {
    if (p == dc.rank) continue;
    const uint64_t v = (uint64_t)dk_word(dc.rank, p, launch, threadIdx.x) << 32 | launch;
    dk_ok(res, symmDevLLStore(dc, symmDevPeerPtr(dc, packet(ep.parity, dc.rank, threadIdx.x), p), v, ep.flag));
  }
  for (int p = 0; p < n; ++p) {
    if (p == dc.rank) continue;
    uint64_t v = 0;
    if (!dk_ok(res, symmDevLLLoad(dc, packet(ep.parity, p, threadIdx.x), ep.flag, &v, p))) continue;
    if (v != ((uint64_t)dk_word(p, dc.rank, launch, threadIdx.x) << 32 | launch)) dk_bad(res, (unsigned)(v >> 32));
  }
  symmDevLLEnd(dc, b, ep);
  // Registered buffers through their table.
  if (regTable && threadIdx.x < (unsigned)n) {
    const int p = threadIdx.x;
    const int v = *symmDevTablePeerPtr<volatile int>(regTable, p, sizeof(int) * b);
    if (v != p + 1) dk_bad(res, (unsigned)v);
  }
  // Nobody starts the next launch (and overwrites inboxes, signal values,
  // packets) before every peer is done reading this one's.
  if (!dk_ok(res, symmDevBarrier(dc, b))) return;
  if (threadIdx.x == 0) launches[b] = launch;
}

// ---- Failures --------------------------------------------------------------

// A world barrier on slot blockIdx.x; every thread stores its return code
// in codes[blockIdx.x * blockDim.x + threadIdx.x] (preset to a sentinel).
DK void dk_barrier_once(symmDevComm dc, unsigned* codes) {
  const symmResult_t rc = symmDevBarrier(dc, blockIdx.x);
  codes[blockIdx.x * blockDim.x + threadIdx.x] = (unsigned)rc;
}

// Thread 0 of block 0 waits for signal `slot` from `peer` to be >= value;
// its code goes to codes[0].
DK void dk_signal_wait(symmDevComm dc, unsigned slot, int peer, unsigned long long value, unsigned* codes) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    codes[0] = (unsigned)symmDevSignalWait(dc, slot, peer, symmDevCmpGe, value);
}

// Bad arguments, one per `which`: 0 signal add to peer nRanks, 1 barrier
// slot blockCount, 2 LL store to a misaligned pointer, 3 a barrier whose
// team lacks this rank; codes[0] gets the (block-uniform) result.
DK void dk_bad_argument(symmDevComm dc, unsigned which, unsigned* scratch, unsigned* codes) {
  symmResult_t rc = symmSuccess;
  if (which == 0) {
    if (threadIdx.x == 0) rc = symmDevSignalAdd(dc, dc.nRanks, 0, 1);
  } else if (which == 1) {
    rc = symmDevBarrier(dc, dc.blockCount);
  } else if (which == 2) {
    if (threadIdx.x == 0) rc = symmDevLLStore(dc, reinterpret_cast<char*>(scratch) + 4, 1, 1);
  } else {
    const symmDevTeam other = symmDevTeamStrided(dc, (dc.rank + 1) % dc.nRanks, 1, 1);
    rc = symmDevBarrier(dc, 0, other);
  }
  if (threadIdx.x == 0) codes[0] = (unsigned)rc;
}
