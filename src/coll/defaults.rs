//! What `auto` chooses, per rank count, collective and size: every
//! measured default in one place, each with the measurement it came from
//! (docs/PERFORMANCE.md has the tables). Elsewhere: the LL launches and
//! block syncs of `Algo::AUTO` (`pdl`, `lightsync`; src/comm/algo.rs), the
//! send/recv engine's shape (`P2PShape::AUTO`).

use super::{Algo, CollId};
use crate::cuda::abi::{OpId, MODE_CLASSIC};

/// What `auto` means at each rank count. The balanced and deep loops at
/// every rank count since the twenty-ninth session. From 2026-11-24 the
/// classic ones ran at 2 ranks: on 2 x H200 they beat the balanced loops
/// by 3-13 % from 32 MiB, but that balanced loop stored each load to the
/// stack as it returned (SASS of that day's bf16 reduce-scatter: 88
/// loads), the fault the twenty-eighth session removed. With the ranks
/// co-resident on one H100 the balanced and deep loops now take 3-25 %
/// less time than the classic ones at 2 ranks from 4 to 256 MiB on plain
/// buffers (reduce-scatter, all-reduce, all-gather; the all-to-all where
/// it does not run the send/recv engine) and 0-19 % on symmetric ones,
/// the symmetric reduce-scatter in place at 256 MiB excepted (+3 %); the
/// kernels without these loops (push, the engine) unchanged
/// (docs/PERFORMANCE.md, twenty-ninth session). `classic2` gives the
/// loops of before back at 2 ranks, keeping `auto`'s other choices, for
/// the A/B across GPUs.
/// `grid=N`, `spread`, `nospread`, `prefetch`, `nopdl` and `fullsync` tune kernels and
/// leave the choice `auto` ([`Algo::is_auto`]).
pub(super) fn default_algo(chosen: Algo, nranks: usize) -> Algo {
    if chosen.is_auto() && nranks == 2 && chosen.classic_two_ranks {
        // is_auto: everything else is auto's, the tunings are kept.
        Algo { classic: true, ..chosen }
    } else {
        chosen
    }
}

/// From this size an all-reduce whose send and receive buffers are both
/// symmetric/registered runs the two-shot push kernel by default at the
/// rank counts of [`PUSH_DEFAULT_RANKS`]: on 2 x H200 1.02-1.60x NCCL from
/// 1 MiB to 1 GiB against 0.88-1.21x for the one-shot; on 4 x H100
/// (2026-11-27, bf16) in place 20.2 against 27.4 us at 1 MiB and 5.01
/// against 5.67 ms at 1 GiB for `auto`'s two-shot, and out of place
/// 0.89-1.02x NCCL against 0.56-0.93x at 4 ranks and 1.02-1.22x against
/// 0.92-1.13x at 2 (faster at every size from 1 MiB, slower at 256 KiB,
/// where LL packets serve it; docs/PERFORMANCE.md). Out of place the choice
/// also depends on the recvbuff's class: ranks that pass different classes
/// run different kernels, which the protocol check at the first sync
/// reports as symmInvalidUsage (c_tests/coll/coll_mismatch.c), the same
/// rule as for the sendbuff.
const PUSH_DEFAULT_MIN_BYTES: u64 = 1 << 20;

/// The rank counts where the push default was measured; 5-8 ranks keep
/// the two-shot loops until a sweep there says otherwise. At 3 ranks on
/// 4 x H100 (2026-11-27, ninth session, bf16, symmetric buffers, graph
/// replayed), the two-shot loops `auto` ran before against the push
/// kernel: 1 MiB 22.6 against 14.1 us, 4 MiB 36.6 against 28.6, 16 MiB
/// 97.7 against 85.4 (NCCL's best / it 0.71, 0.94, 0.94x before, 1.09,
/// 1.20, 1.08x after); from 64 MiB the write kernel takes over
/// ([`WRITE_DEFAULT_FROM`]).
const PUSH_DEFAULT_RANKS: [usize; 3] = [2, 3, 4];

/// The rank counts where the all-gather push default was measured. At 3
/// ranks on 4 x H100 (2026-11-28, eleventh session, after the misaligned
/// blocks' fix, bf16, symmetric buffers, graph replayed) the push against
/// the pull, the faster NCCL column over each: 1 MiB 0.99 / 0.79x, 4 MiB
/// 1.03 / 0.90x, 16 MiB 1.15 / 1.03x, 64 MiB - 1 GiB 1.25-1.27 /
/// 1.13-1.14x (docs/perf/measure-4xH100-2026-11-28-s11.md).
const ALLGATHER_PUSH_DEFAULT_RANKS: [usize; 3] = [2, 3, 4];

/// Whether `auto` runs the two-shot push kernel for this all-reduce (the
/// kernel still needs both buffers symmetric or registered, and a 16- or
/// 32-bit float: the caller checks those).
pub(crate) fn push_by_default(defaulted: bool, nranks: usize, bytes: u64) -> bool {
    defaulted && PUSH_DEFAULT_RANKS.contains(&nranks) && bytes >= PUSH_DEFAULT_MIN_BYTES
}

/// From these sizes an all-reduce whose receive buffer is symmetric or
/// registered runs the write-only two-shot kernel (allreduce_write.rs) by
/// default, whatever the send buffer: (ranks, bytes). On 4 x H100
/// (2026-11-27, ninth session, bf16, symmetric buffers, graph replayed /
/// eager) at 4 ranks: 16 MiB 90.4 / 93.3 us against the push kernel's
/// 93.1 / 95.0, 64 MiB 308.1 / 310.2 against 335.6 / 338.4, 1 GiB 4.57 /
/// 4.57 ms against 4.99 / 4.99 (the faster NCCL column 1.09, 1.05, 0.99x
/// against 1.07, 0.96, 0.91x); a plain send buffer into a symmetric
/// receive buffer 1.15-1.22x `auto`'s staged two-shot from 16 MiB; below
/// 16 MiB it loses (1 MiB 19.9 against 15.1-16.3 us, 4 MiB 34.6 against
/// 31.8). Graph-replayed at 3 ranks: 64 MiB 287.9 against the push
/// kernel's 312.7 us (16 MiB 88.0 against 85.4), 256 MiB 1.087 against
/// 1.201 ms (1.03x and 1.00x NCCL's best); at 2 ranks even at 64 MiB
/// (207.5 against 208.3 us), 256 MiB 759.7 against 796.0 (1.17x NCCL
/// against 1.11x). Other rank counts: not measured, no default. Where the
/// push kernel can also run (both buffers symmetric/registered), it goes
/// first below [`PUSH_BEFORE_WRITE_BELOW`] (twelfth session).
const WRITE_DEFAULT_FROM: [(usize, u64); 3] = [(2, 256 << 20), (3, 64 << 20), (4, 16 << 20)];

/// Below these sizes an all-reduce for which `auto` would take both the
/// push and the write kernel runs the push (both buffers
/// symmetric/registered): (ranks, bytes). On 4 x H200 (2026-11-28, twelfth
/// session, bf16, graph replayed, 4 ranks) 16 MiB push 91.4 against write
/// 100.0 us (1.05x and 0.96x NCCL's best), 64 MiB 333.7 against 313.9; on
/// 4 x H100 the same session 16 MiB push 93.6 us, and the write kernel
/// 102.1 the session before (the ninth's 90.4 against 93.1 predates the
/// pipelined write kernel). A plain sendbuff keeps the write kernel from
/// 16 MiB ([`WRITE_DEFAULT_FROM`]: the push cannot take it).
const PUSH_BEFORE_WRITE_BELOW: [(usize, u64); 1] = [(4, 64 << 20)];

/// Whether `auto` tries the push kernel before the write kernel for this
/// all-reduce (both its defaults; the push still needs both buffers
/// symmetric/registered: the caller checks).
pub(crate) fn push_before_write(defaulted: bool, nranks: usize, bytes: u64) -> bool {
    defaulted && PUSH_BEFORE_WRITE_BELOW.iter().any(|&(n, below)| n == nranks && bytes < below)
}

/// Whether `auto` runs the write-only two-shot kernel for this all-reduce
/// (the kernel still needs the output symmetric or registered and a 16- or
/// 32-bit float: the caller checks those; otherwise the push default).
pub(crate) fn write_by_default(defaulted: bool, nranks: usize, bytes: u64) -> bool {
    defaulted && WRITE_DEFAULT_FROM.iter().any(|&(n, from)| n == nranks && bytes >= from)
}

/// From these sizes (the whole input, bytes) a reduce-scatter whose input
/// is not symmetric or registered runs the store-only kernel
/// (reduce_scatter_write.rs) by default: (ranks, bytes). On 2 x H200
/// (2026-11-27, tenth session, bf16, graph replayed), a plain input: 1 GiB
/// 1704 us against the staged pull's 1899 (1.20x against 1.08x the faster
/// NCCL column), 256 MiB 474 against 481; below it loses (64 MiB 148
/// against 129, 4 MiB 16.8 against 14.3). A symmetric input keeps the pull
/// (1 GiB 1608 against 1697). At 4 ranks on 4 x H200 (2026-11-28, twelfth
/// session, bf16, graph replayed, a plain input): 64 MiB 205.6 against the
/// staged pull's 220.9 us, 256 MiB 696.1 against 794.4, 1 GiB 2523 against
/// 2823 (0.91-0.99x NCCL's best against 0.84-0.88x); 16 MiB 66.8 against
/// 59.3. At 3 ranks (the same run, blocks not multiples of 16 bytes): 256
/// MiB 777.1 against 781.9 (1.01x and 1.00x), 1 GiB 2917 against 3194
/// (1.01x and 0.93x); 64 MiB 237.1 against 215.6. 5-8 ranks: not measured,
/// no default. 2 ranks left the table in the eighteenth session: since the
/// fifteenth inlined the synced pull's copy loop it is the faster of the
/// two there (2 x H200, 2026-11-29, `sweep:2`, one process, bf16, eager /
/// graph-replayed): 256 MiB 483.7 / 484.2 us against the store-only
/// kernel's 518.3 / 517.2, 1 GiB 1879.8 / 1876.9 against 1901.9 / 1904.7
/// (NCCL's faster column 590.2 and 2034.3 eager).
///
/// As for the push all-reduce, ranks that pass inputs of different
/// classes run different kernels, which the protocol check at the first
/// sync reports as symmInvalidUsage.
const REDUCE_SCATTER_WRITE_FROM: [(usize, u64); 2] = [(3, 256 << 20), (4, 64 << 20)];

/// Whether `auto` runs the store-only reduce-scatter for an input of
/// `bytes` (all blocks) that is `staged` (not symmetric or registered;
/// the kernel still needs a 16- or 32-bit float: the caller checks).
pub(crate) fn reduce_scatter_write_by_default(defaulted: bool, nranks: usize, bytes: u64, staged: bool) -> bool {
    defaulted && staged && REDUCE_SCATTER_WRITE_FROM.iter().any(|&(n, from)| n == nranks && bytes >= from)
}

/// The mode bits of a store-only (`write`) kernel under `auto`: those
/// kernels were measured and tested with the deep copies at every rank
/// count (`twoshot+write`, `write`), so `classic2`'s classic loops at 2
/// ranks ([`default_algo`]) do not apply to them; an explicit `classic`
/// does.
pub(super) fn store_only_mode(defaulted: bool, mode: u32) -> u32 {
    if defaulted {
        mode & !MODE_CLASSIC
    } else {
        mode
    }
}

/// Whether `auto` runs the all-gather push kernel above the LL limit (the
/// kernel still needs the recvbuff symmetric or registered: the caller
/// checks). Measured on 4 x H100 (2026-11-27, fourth session, symmetric
/// buffers): at 2 ranks 0.85x NCCL's best at 4 MiB and 1.13-1.30x from
/// 16 MiB, against 0.78x and 1.05-1.16x pulling; at 4 ranks 0.80x, 0.90x
/// and 0.99-1.00x from 64 MiB, against 0.70x, 0.79x and 0.87-0.88x; the
/// same within 2 % graph-replayed (docs/PERFORMANCE.md). Every rank stores
/// its block into every output once instead of staging or pulling n - 1
/// blocks, with the same two syncs.
pub(crate) fn allgather_push_by_default(defaulted: bool, nranks: usize) -> bool {
    defaulted && ALLGATHER_PUSH_DEFAULT_RANKS.contains(&nranks)
}

/// Under `auto`, on a 16 MiB ring (1024 slots: the default at 2 to 4
/// ranks, config::p2p_ring_bytes), a send/recv launch whose largest operation has
/// at least this many bytes moves 4 ring chunks between a warp group's
/// flags (`p2p:...:stride=4`; the kernel lowers it to the chunks per group
/// of smaller operations). On 2 x H200 (2026-11-28, thirteenth session,
/// plain buffers, NCCL's faster column over each, eager / graph-replayed):
/// send/recv stride 1 against 4: 16 MiB 0.92 / 0.88x and 0.95 / 0.91x (so
/// not there), 64 MiB 0.97 / 0.98x and 0.98 / 0.99x, 256 MiB 0.96 / 1.00x
/// and 0.96 / 1.00x, 1 GiB 0.94 / 0.99x and 0.94 / 0.99x; the all-to-all
/// on the engine with stride 4 0.98-1.00x from 64 MiB (its operations 32
/// MiB and up). On the 4 MiB ring stride 4 gained nothing (0.72-0.77x
/// either way): the ring, not the flags, bounded the bytes in flight. At 4
/// ranks on the 16 MiB ring (4 x H200, 2026-11-28, sixteenth session,
/// `p2p:4`, plain buffers, eager) `auto` with this rule 1.09 / 0.99 /
/// 0.99x at 64 MiB / 256 MiB / 1 GiB, stride 2 1.10 / 0.99 / 0.98x.
const P2P_STRIDE4_FROM: u64 = 32 << 20;

/// log2 of the stride `auto` gives a send/recv launch on a ring of
/// `ring_slots` whose largest operation has `largest` bytes (0: one chunk).
pub(crate) fn p2p_stride_log2_by_default(ring_slots: u64, largest: u64) -> u8 {
    if ring_slots >= 1024 && largest >= P2P_STRIDE4_FROM { 2 } else { 0 }
}

/// log2 of the KiB up to which `auto` sends a symmSend/symmRecv message (and
/// the drop-in's grouped send/recv) as LL packets: 1 MiB, capped by what
/// send/recv's LL slot holds (config::p2p_ll_max_bytes: 1 MiB at 2 to 4
/// ranks since the seventeenth session, 512 KiB from 5; SYMM_LL_MAX_BYTES
/// where set).
/// On 4 x H200 (2026-11-28, fourteenth session, `scripts/device-measure
/// ll:2 ll:4`, NCCL's faster column over each), `p2p:...:ll=1024` against
/// `auto` without it, eager, plain buffers: at 2 ranks 1.62-1.91x from 4
/// KiB to 256 KiB, 1.40x at 512 KiB and 1.22x at 1 MiB (against 0.80-0.90x
/// from 64 KiB); at 4 ranks 1.48-2.02x to 512 KiB (against 0.78-1.34x);
/// symmetric buffers and graph replays alike (1.59-2.36x where LL
/// applies). Above the cap nothing changes (2-4 MiB within 1 %). The
/// all-to-all's blocks on the engine keep the ring and the direct push:
/// not measured as LL.
const P2P_LL_LOG2_KIB: u8 = 10;

/// The LL size `auto` gives a launch of `api`'s operations (0: none).
pub(crate) fn p2p_ll_log2_by_default(api: OpId) -> u8 {
    if api == OpId::SendRecv { P2P_LL_LOG2_KIB } else { 0 }
}

/// From these total bytes (rank count, bytes of the whole output) `auto`
/// runs the out-of-place all-to-all of a plain recvbuff on the send/recv
/// engine too (through the ring, [`p2p_stride_log2_by_default`]'s stride),
/// where the ring is 16 MiB. On 2 x H200 (2026-11-28, thirteenth session,
/// NCCL's faster column over each, eager / graph-replayed) the engine with
/// stride 4 against the synced kernel: 64 MiB 1.00 / 0.84x and 1.00 /
/// 0.84x, 256 MiB 0.98 / 0.81x and 0.98 / 0.81x, 1 GiB 0.98 / 0.81x and
/// 0.98 / 0.81x; at 16 MiB 0.81 / 0.85x (so not there). At 4 ranks (4 x
/// H200, 2026-11-28, sixteenth session, `p2p:4` on the 16 MiB ring, eager)
/// the engine with stride 4 against the synced kernel: 256 MiB 0.98 /
/// 0.88x, 1 GiB 0.92 / 0.83x; at 64 MiB (16 MiB blocks, which `auto`
/// sends with stride 1) stride 1-4 0.91-0.97x against 0.91x: not clearly
/// there. As the default, against the synced kernel in the next process
/// (call 4 of that session): eager 256 MiB 659 against 715 us, 1 GiB 2505
/// against 2804; graph-replayed 699 against 710 and 2896 against 2809 (3 %
/// slower there: the one cell it loses). At 3 ranks the synced kernel is
/// 1.20-1.23x NCCL from 64 MiB (that run's `sweep:3`): no engine.
const ALLTOALL_ENGINE_STAGED_FROM: [(usize, u64); 2] = [(2, 64 << 20), (4, 256 << 20)];

/// Whether `auto` sends an out-of-place all-to-all with a plain recvbuff
/// of `bytes` (the whole output) on the engine (ring of `ring_slots`).
pub(crate) fn alltoall_engine_staged_by_default(defaulted: bool, nranks: usize, bytes: u64, ring_slots: u64) -> bool {
    defaulted
        && ring_slots >= 1024
        && ALLTOALL_ENGINE_STAGED_FROM.iter().any(|&(n, from)| n == nranks && bytes >= from)
}

/// Largest message (per rank's contribution) sent as LL packets by default
/// with two ranks, and at the rank counts and collectives of [`LL_FULL`]. On 2 x H200 (docs/PERFORMANCE.md)
/// LL all-reduce still beats the synced one-shot at 512 KiB (6.2 vs 9.2 us
/// graph-replayed); on 4 x H200, eager back to back, 10.1 against 16.9 us
/// at 256 KiB and 14.5 against 22.4 at 512 KiB (NCCL 11.9 and 14.6).
const LL_AUTO_BYTES: u64 = 512 << 10;

/// The LL limit at two ranks for the collectives of [`LL_FULL`]
/// (the slots hold that much there by default: config::ll_max_bytes). On
/// 2 x H200 (2026-11-27, sixth session, symmetric buffers, eager / graph
/// replayed): all-reduce of 1 MiB 11.70 / 10.34 us as LL against 13.94 /
/// 12.36 for the synced kernels (NCCL 14.25 / 13.53); reduce-scatter,
/// all-gather and all-to-all of 2 MiB (1 MiB a rank) 12.18, 11.23 and
/// 11.13 us eager against 15.15, 12.95 and 12.42.
const LL_AUTO_BYTES_TWO_RANKS: u64 = 1 << 20;

/// The LL limit per rank count for the collectives measured with it (2
/// ranks: [`LL_AUTO_BYTES_TWO_RANKS`]; 3 and 4: [`LL_AUTO_BYTES`]).
/// Elsewhere (5 ranks and more, the other collectives; not measured with
/// the larger limit) each rank sends n - 1 copies, so the limit shrinks by
/// n - 1, as before.
///
/// 4 ranks: reduce-scatter, all-gather and all-to-all joined all-reduce
/// on 4 x H100 (2026-11-27, fourth session; docs/PERFORMANCE.md):
/// predicted for reduce-scatter and all-gather at 1 MiB, 10-11 us with LL
/// against the synced kernels' 19-21; measured eager 10.48 and 10.33 us
/// against 21.5 and 19.3 (NCCL's best 10.85 and 10.94: 1.04x and 1.06x,
/// from 0.50x and 0.57x), graph-replayed 1.00x and 0.96x (from 0.45x and
/// 0.48x); the LL all-to-all at 1 MiB (256 KiB a peer) 10.31 us against
/// 18.8, 1.37x NCCL eager and 1.50x graph-replayed.
///
/// 3 ranks: on 4 x H200 (2026-11-28, sixteenth session, `sweep:3`, bf16,
/// 1 MiB, blocks of 341 KiB, NCCL's faster column over each) `ll` against
/// `auto`'s synced kernels, staged eager / graph-replayed and symmetric
/// eager / graph-replayed: reduce-scatter 1.46 / 1.40 / 1.39 / 1.42x
/// against 0.77 / 0.72 / 0.70 / 0.74x, all-gather 1.22 / 1.25 / 1.24 /
/// 1.24x against 0.76 / 0.82 / 0.95 / 1.05x (the push kernel there), the
/// all-to-all 1.95x against 1.12x (staged eager). The all-reduce at 3
/// ranks joined them on 4 x H200 (2026-11-28, seventeenth session,
/// `SYMM_ALGO=ll` against the defaults in the next process, NCCL's faster
/// column over each): 512 KiB as one-shot LL 10.30 / 9.49 us (staged eager
/// / graph-replayed) against the synced kernels' 18.75 / 17.11, 1.21 /
/// 1.25x from 0.67 / 0.69x (symmetric buffers 1.21 / 1.25x from 0.63 /
/// 0.65x); 256 KiB was LL already. (That process's 1 MiB went as the
/// two-shot LL form: 0.98x against 0.80x staged but 0.98 / 0.98x against
/// 1.07 / 1.15x symmetric, so 3 ranks stay out of
/// [`LL_TWO_SHOT_DEFAULT_RANKS`].) The fused all-reduce + RMSNorm follows
/// the all-reduce's limit (not measured at 3 ranks from 256 KiB).
const LL_FULL: [(usize, u64, &[CollId]); 3] = [
    (2, LL_AUTO_BYTES_TWO_RANKS, &ALL_LL_COLLS),
    (3, LL_AUTO_BYTES, &ALL_LL_COLLS),
    (4, LL_AUTO_BYTES, &ALL_LL_COLLS),
];

/// The collectives measured with the larger LL limits at 2, 3 and 4 ranks.
const ALL_LL_COLLS: [CollId; 4] = [CollId::AllReduce, CollId::ReduceScatter, CollId::AllGather, CollId::AllToAll];

/// The LL limit of `auto` (per rank's contribution, bytes): the measured
/// one of [`LL_FULL`], else [`LL_AUTO_BYTES`] shared among the n - 1 copies
/// a rank sends (all of it at 1 or 2 ranks).
pub(super) fn ll_auto_limit(coll: CollId, nranks: usize) -> u64 {
    match LL_FULL.iter().find(|&&(n, _, colls)| n == nranks && colls.contains(&coll)) {
        Some(&(_, limit, _)) => limit,
        None => LL_AUTO_BYTES / (nranks.max(2) as u64 - 1),
    }
}

/// The rank count at which `auto` takes the two-shot LL forms above the
/// one-shot LL limit, where they fit (up to 1 MiB at 4 ranks). On 4 x H200
/// (2026-11-27, sixth session, bf16, eager / graph-replayed), 1 MiB:
/// all-reduce on staged buffers 17.37 / 16.11 us against `auto`'s 23.52 /
/// 21.64 (best NCCL / it 1.04 / 1.08 from 0.76 / 0.80), on symmetric
/// buffers 17.19 / 16.66 against the push kernel's 17.63 / 16.02 (1.05 /
/// 1.04 against 1.02 / 1.09); the fused norm 26.12 us against 27.66 at
/// hidden 4096 and 23.33 against 28.04 at 8192 (graph). The choice cannot
/// depend on the buffers' class (ranks may differ), so one rule serves
/// both. Other rank counts keep their forms until measured.
pub(super) const LL_TWO_SHOT_DEFAULT_RANKS: usize = 4;

/// The rank counts at which `auto` runs the fused all-reduce + RMSNorm on
/// its batched entries, and above its LL forms as one kernel by stores
/// (`normwrite`). On 2 x H200 (2026-11-29, twenty-fourth session,
/// `scripts/device-measure norm:2 norm:2:batch=1
/// norm:2:normwrite+batch=1`, bf16, graph-replayed, one call), the fused
/// call's cost over symmAllReduce alone, hidden 4096 / 8192: 1 token 1.70
/// / 2.72 us batched (`batch=1`) against 2.46 / 3.91, 16 tokens 1.12 / 1.33
/// against 1.77 / 2.59; from 2 MiB, with the form by stores, 1.23 / 1.30
/// us against 6.30 / 4.88 and at 512 tokens 0.65 / 0.68 against 11.94 /
/// 20.82 (4 MiB at 4096: 23.3 us against 34.5, NCCL + norm 74.3). No row
/// slower (within 0.03 us at 32-128 tokens). How many units a thread, and
/// where the sends spread: [`NORM_FEW_TOKENS`]. From 3 ranks too since the
/// twenty-sixth session, on the figures with every rank on one GPU (a
/// local ceiling: not yet measured across GPUs; docs/PERFORMANCE.md
/// "Twenty-sixth session"): batched, the entries took 0.7-3.4 us off
/// every 1-32-token row at 4 ranks and 9.5 off 1 MiB, and the form by
/// stores 5-31 us off every shape it runs at 2/3/4/8 ranks; at 2 ranks
/// the same wins held across GPUs. `nobatch+nonormwrite` runs what ran
/// before.
const NORM_BATCH_DEFAULT_MIN_RANKS: usize = 2;

/// From 3 ranks `auto`'s batched entries take one unit a thread at every
/// size (with every rank on one GPU, 4 ranks, four units lost 1.0-1.7 us
/// at 64-128 tokens, twentieth session); at 2 ranks four above
/// [`NORM_FEW_TOKENS`], as measured across GPUs there.
const NORM_FOUR_UNITS_RANKS: usize = 2;

/// Where `auto` batches ([`NORM_BATCH_DEFAULT_MIN_RANKS`] and up), up to
/// this many tokens its batched entries take one unit a thread and the
/// one-shot LL form spreads its sends over the grid (in place up to
/// [`NORM_FEW_TOKENS_IN_PLACE`] behind the fence); above it, at 2 ranks
/// four units a thread (`batch`; [`NORM_FOUR_UNITS_RANKS`]) and whole
/// rows (at 4 ranks out of place spread at every size:
/// [`NORM_SPREAD_DEFAULT_RANKS`]). With few rows a row per block leaves
/// few SMs sending; from 32 rows there are as many
/// senders as the spread grid gives. On 2 x H200 (same session, the next
/// call: `norm:2:batch=1+spread norm:2:batch norm:2:batch=2`), cost over
/// the all-reduce alone, out of place, hidden 4096 / 8192: 1 token 1.09 /
/// 1.29 us spread against 1.69 / 2.72 with whole rows, 16 tokens 1.00 /
/// 1.14 against 1.11 / 1.33; at 32 tokens spread loses (0.96 / 1.19
/// against 0.95 / 1.04). Four units a thread against one at 4096: 32
/// tokens 0.73 against 0.95, 128 tokens -0.41 against -0.25, 256 and 512
/// tokens (the form by stores) 0.95 and 0.29 against 1.23-1.38 and
/// 0.65-0.67; at 1-16 tokens 1.90-1.26 against 1.69-1.11, so not there. At
/// 8192 the two are one kernel (2,048 units fill 512 threads four each).
const NORM_FEW_TOKENS: usize = 16;

/// In place (`out` = the input) without its own packets ([`norm_loopback`]
/// off: `noloopback`) the batched one-shot entry spreads behind its fence
/// (allreduce_norm.rs `one_shot_sends`) where `auto` batches, up to this
/// many tokens. On 2 x H200 (twenty-fourth session), the same calls, in
/// place, hidden 4096 / 8192, spread and fenced against whole rows: 1
/// token 1.64 / 1.82 us against 1.69 / 2.71, 8 tokens 1.53 / 1.88 against
/// 1.41 / 2.16, 16 tokens 1.71 / 1.81 against 1.07 / 1.47. The fence loses
/// 0.1 us at 8 tokens of 4096 and gains 0.3-0.9 at 1-8 of 8192; at 16 it
/// loses at both. With the own packets (no fence, `auto`'s there) in place
/// spreads as out of place does, up to [`NORM_FEW_TOKENS`].
const NORM_FEW_TOKENS_IN_PLACE: usize = 8;

/// The rank count at which `auto` spreads the fused norm's LL forms as
/// `spread` does, at every token count. On 4 x H200 (2026-11-27, seventh
/// session, bf16, graph-replayed, the same run;
/// docs/perf/measure-4xH200-2026-11-27-s7.md): hidden 4096, 1 token 5.86
/// us spread against 6.86, 1 MiB 19.76 against 27.71 (NCCL + norm 30.4:
/// 1.54x against 1.10x), every other size within 1 % or faster; hidden
/// 8192, 1 token 7.84 against 9.89, 256 KiB - 8 MiB within 3 % either way
/// (13.11 against 12.75 at 256 KiB the widest). 3 ranks were not measured
/// side by side and keep whole rows unless asked; `nospread` keeps them
/// at 4 too.
const NORM_SPREAD_DEFAULT_RANKS: usize = 4;

/// Whether `auto` spreads the fused norm's LL forms for `tokens` rows:
/// at [`NORM_SPREAD_DEFAULT_RANKS`] (where in place the unbatched entries,
/// `nobatch`, keep whole rows: allreduce_norm.rs `one_shot_sends`), and
/// wherever `auto` batches up to [`NORM_FEW_TOKENS`]
/// ([`NORM_FEW_TOKENS_IN_PLACE`] `in_place` behind the fence, without
/// [`norm_loopback`]) with its own batched layout (as measured: not with
/// `nobatch` or a `batch=N` named).
/// Batched at [`NORM_SPREAD_DEFAULT_RANKS`], in place spreads only up to
/// [`NORM_FEW_TOKENS`] too: with every rank on one GPU (twenty-sixth
/// session) 64 tokens of 4096 in place took 18.50 us spread with the own
/// packets against 17.55 for the unbatched entry's whole rows, where out
/// of place spread took 15.71 against 20.91.
pub(crate) fn norm_spread_by_default(algo: Algo, defaulted: bool, nranks: usize, tokens: usize, in_place: bool) -> bool {
    let batched = auto_batches(algo, defaulted, nranks);
    let fenced = in_place && !norm_loopback(algo, defaulted, nranks);
    let few = tokens <= if fenced { NORM_FEW_TOKENS_IN_PLACE } else { NORM_FEW_TOKENS };
    let every_size = defaulted && nranks == NORM_SPREAD_DEFAULT_RANKS && !(batched && in_place);
    every_size || (batched && few)
}

/// Whether the batched one-shot entry, spread in place, takes this rank's
/// units back from its own packets instead of waiting behind its fence
/// (allreduce_norm.rs `OneShotSends::SpreadOwnPackets`): `loopback`, or
/// wherever `auto` batches ([`NORM_BATCH_DEFAULT_MIN_RANKS`] and up)
/// unless `noloopback`. Chosen on one GPU (twenty-fifth and twenty-sixth
/// sessions, ranks co-resident: a local ceiling), in place at 2 ranks,
/// `auto` (fence) against `loopback`, gap over the all-reduce alone:
/// H200 1-8 tokens 0.07-0.30 us less, 16 tokens (whole rows against
/// spread) 0.42 less at 8192 and even at 4096; H100 (the landed entry,
/// three runs) 0.12-0.57 less at 1-8 tokens, 0.13-0.22 / 0.62-0.83 at
/// 16; never more, out of place unchanged. Across GPUs the fence's
/// release also waits for NVLink's acknowledgements (0.43-0.67 us over out
/// of place on 2 x H200, twenty-fourth session), which the own packets do
/// not: the cross-GPU A/B is `scripts/device-measure norm:2
/// norm:2:noloopback`.
pub(crate) fn norm_loopback(algo: Algo, defaulted: bool, nranks: usize) -> bool {
    algo.norm_loopback || (auto_batches(algo, defaulted, nranks) && !algo.no_norm_loopback)
}

/// Whether `auto` picks the fused norm's batched layout itself: from
/// [`NORM_BATCH_DEFAULT_MIN_RANKS`], no `batch=N` and no `nobatch` named.
fn auto_batches(algo: Algo, defaulted: bool, nranks: usize) -> bool {
    defaulted && !algo.no_norm_batch && algo.norm_batch_units().is_none() && nranks >= NORM_BATCH_DEFAULT_MIN_RANKS
}

/// Units a thread of the fused norm's batched entries for `tokens` rows:
/// `batch=N` where named, else under `auto` one, at
/// [`NORM_FOUR_UNITS_RANKS`] four above [`NORM_FEW_TOKENS`], unless
/// `nobatch`; None: the unbatched entries.
pub(crate) fn norm_batch_units(algo: Algo, defaulted: bool, nranks: usize, tokens: usize) -> Option<u64> {
    let four = nranks == NORM_FOUR_UNITS_RANKS && tokens > NORM_FEW_TOKENS;
    algo.norm_batch_units().or_else(|| auto_batches(algo, defaulted, nranks).then_some(if four { 4 } else { 1 }))
}

/// From this many ranks `auto` takes the form by stores only for messages
/// of at least [`NORM_BY_STORES_WIDE_MIN_BYTES`]: with every rank on one
/// GPU (twenty-sixth session), 8 ranks, 16 tokens of 4096 (128 KiB, a
/// row a block and two rows an owner) took 29.46 us by stores against
/// 23.13 for the all-reduce and the norm kernel; from 256 KiB (16 x 8192,
/// 64 x 4096) by stores won by 2.4-12.6 us. 3 and 4 ranks have no such
/// row (their LL forms reach 512 KiB and 1 MiB).
const NORM_BY_STORES_WIDE_RANKS: usize = 5;
const NORM_BY_STORES_WIDE_MIN_BYTES: usize = 256 << 10;

/// Whether the fused norm takes its form by stores above the LL forms for
/// a message of `bytes`: `normwrite`, or under `auto` from
/// [`NORM_BATCH_DEFAULT_MIN_RANKS`] (from [`NORM_BY_STORES_WIDE_RANKS`]
/// from [`NORM_BY_STORES_WIDE_MIN_BYTES`]) unless `nonormwrite`.
pub(crate) fn norm_by_stores(algo: Algo, defaulted: bool, nranks: usize, bytes: usize) -> bool {
    let wide_small = nranks >= NORM_BY_STORES_WIDE_RANKS && bytes < NORM_BY_STORES_WIDE_MIN_BYTES;
    algo.norm_write || defaulted && !algo.no_norm_write && nranks >= NORM_BATCH_DEFAULT_MIN_RANKS && !wide_small
}

/// Threads per block of LL kernels while the grid is not full: small
/// messages are spread over more SMs, each thread handling one packet.
pub(super) const LL_SMALL_BLOCK: u32 = 128;

/// Above this size (bytes) all-reduce over more than two ranks uses
/// two-shot: it moves 2(n-1)/n of the data per rank instead of (n-1).
/// With two ranks both move the same and one-shot syncs less.
pub(super) const TWO_SHOT_MIN_BYTES: u64 = 256 << 10;

/// Bytes each block moves per round before it is worth another block: small,
/// because a block's bytes in flight, not the SM count, bound the rate at
/// which it pulls from a peer.
pub(super) const BYTES_PER_BLOCK: u64 = 16 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ll_limits_by_collective_and_ranks() {
        assert_eq!(ll_auto_limit(CollId::AllReduce, 2), 1 << 20, "measured on 2 GPUs");
        assert_eq!(ll_auto_limit(CollId::AllGather, 2), 1 << 20, "measured on 2 GPUs");
        assert_eq!(ll_auto_limit(CollId::Broadcast, 2), 512 << 10, "not measured at 1 MiB");
        assert_eq!(ll_auto_limit(CollId::AllReduce, 4), 512 << 10, "measured on 4 GPUs");
        assert_eq!(ll_auto_limit(CollId::AllReduce, 3), 512 << 10, "measured on 3 GPUs (seventeenth session)");
        assert_eq!(ll_auto_limit(CollId::AllReduce, 5), (512 << 10) / 4);
        assert_eq!(ll_auto_limit(CollId::ReduceScatter, 4), 512 << 10, "measured on 4 GPUs");
        assert_eq!(ll_auto_limit(CollId::AllGather, 4), 512 << 10, "measured on 4 GPUs");
        assert_eq!(ll_auto_limit(CollId::AllToAll, 4), 512 << 10, "measured on 4 GPUs");
        assert_eq!(ll_auto_limit(CollId::Broadcast, 4), (512 << 10) / 3, "not measured: as before");
        assert_eq!(ll_auto_limit(CollId::AllToAll, 3), 512 << 10, "measured on 3 GPUs (sixteenth session)");
        assert_eq!(ll_auto_limit(CollId::AllGather, 3), 512 << 10, "measured on 3 GPUs");
        assert_eq!(ll_auto_limit(CollId::ReduceScatter, 3), 512 << 10, "measured on 3 GPUs");
        assert_eq!(ll_auto_limit(CollId::Broadcast, 3), 256 << 10, "not measured: as before");
        assert_eq!(ll_auto_limit(CollId::AllReduce, 8), (512 << 10) / 7);
    }

    #[test]
    fn fused_norm_defaults_by_rank_count() {
        let parse = |s: &str| Algo::parse(s).unwrap();
        let auto = Algo::AUTO;
        assert_eq!(norm_batch_units(auto, true, 2, 1), Some(1), "measured on 2 GPUs");
        assert_eq!(norm_batch_units(auto, true, 2, 16), Some(1));
        assert_eq!(norm_batch_units(auto, true, 2, 17), Some(4), "four units a thread above 16 tokens");
        assert!(norm_by_stores(auto, true, 2, 1 << 20));
        assert!(norm_spread_by_default(auto, true, 2, 16, false) && !norm_spread_by_default(auto, true, 2, 17, false));
        assert!(norm_loopback(auto, true, 2), "auto's own packets in place at 2 ranks");
        assert!(norm_spread_by_default(auto, true, 2, 16, true) && !norm_spread_by_default(auto, true, 2, 17, true), "in place to 16");
        let fence = parse("noloopback");
        assert!(!norm_loopback(fence, true, 2) && norm_batch_units(fence, true, 2, 16) == Some(1), "noloopback: the fence");
        assert!(norm_spread_by_default(fence, true, 2, 8, true) && !norm_spread_by_default(fence, true, 2, 9, true), "fenced: in place to 8");
        assert!(norm_spread_by_default(fence, true, 2, 16, false), "noloopback: out of place as auto");
        let lb = parse("loopback");
        assert!(norm_spread_by_default(lb, true, 2, 16, true) && !norm_spread_by_default(lb, true, 2, 17, true), "loopback: in place to 16");
        assert_eq!(norm_batch_units(lb, true, 2, 16), Some(1), "loopback keeps auto's layout");
        assert!(norm_loopback(parse("loopback+batch=1+spread"), true, 4), "named, at any rank count");
        for off in ["batch=1", "nobatch"] {
            assert!(!norm_loopback(parse(off), true, 2), "{off}: not auto's layout, the fence where it spreads in place");
        }
        assert!(!norm_loopback(auto, true, 1) && norm_batch_units(auto, true, 1, 1).is_none(), "one rank: the norm kernel");
        assert!(!norm_by_stores(auto, true, 1, 1 << 20));
        for n in [3, 4, 8] {
            assert!(norm_loopback(auto, true, n), "{n} ranks: auto batches there (twenty-sixth session)");
            for t in [1, 16, 17, 512] {
                assert_eq!(norm_batch_units(auto, true, n, t), Some(1), "{n} ranks, {t} tokens: one unit a thread");
            }
            assert!(norm_by_stores(auto, true, n, 1 << 20), "{n} ranks");
            assert_eq!(norm_by_stores(auto, true, n, 128 << 10), n < 5, "{n} ranks, 128 KiB: by stores only to 4 ranks");
            assert!(norm_spread_by_default(auto, true, n, 16, true), "{n} ranks: spread, in place too, to 16 tokens");
            assert_eq!(norm_spread_by_default(auto, true, n, 17, false), n == 4, "{n} ranks: above 16 only at 4");
            assert!(!norm_spread_by_default(auto, true, n, 17, true), "{n} ranks: in place whole rows above 16");
            let old = parse("nobatch+nonormwrite");
            assert!(norm_batch_units(old, true, n, 1).is_none() && !norm_by_stores(old, true, n, 1 << 20), "{n}: what ran before");
            assert_eq!(norm_spread_by_default(old, true, n, 1, false), n == 4, "{n}: before, spread only at 4");
        }
        assert!(norm_spread_by_default(auto, true, 4, 1, false) && norm_spread_by_default(auto, true, 4, 4096, false), "every size at 4");
        assert_eq!(norm_batch_units(parse("nobatch"), true, 2, 1), None);
        assert!(!norm_spread_by_default(parse("nobatch"), true, 2, 1, false), "nobatch: whole rows, as before");
        assert!(norm_by_stores(parse("nobatch"), true, 2, 1 << 20), "nobatch keeps the form by stores");
        assert!(!norm_by_stores(parse("nonormwrite"), true, 2, 1 << 20));
        assert_eq!(norm_batch_units(parse("nonormwrite"), true, 2, 1), Some(1));
        assert_eq!(norm_batch_units(parse("ll"), false, 2, 1), None, "an explicit algorithm keeps the unbatched entries");
        assert!(!norm_by_stores(parse("ll"), false, 2, 1 << 20) && !norm_spread_by_default(parse("ll"), false, 2, 1, false));
        assert_eq!(norm_batch_units(parse("batch=4"), true, 2, 1), Some(4), "batch=N named wins");
        assert!(!norm_spread_by_default(parse("batch=4"), true, 2, 1, false), "only auto's own batch spreads at 2");
        assert_eq!(norm_batch_units(parse("ll+batch=2"), false, 4, 1), Some(2));
        assert!(norm_by_stores(parse("ll+normwrite"), false, 8, 8192));
    }

    #[test]
    fn p2p_stride_and_staged_all_to_all_on_the_16_mib_ring_only() {
        assert_eq!(p2p_stride_log2_by_default(1024, 32 << 20), 2);
        assert_eq!(p2p_stride_log2_by_default(1024, 16 << 20), 0, "16 MiB measured faster with one chunk");
        assert_eq!(p2p_stride_log2_by_default(256, 1 << 30), 0, "the 4 MiB ring gained nothing");
        assert!(alltoall_engine_staged_by_default(true, 2, 64 << 20, 1024));
        assert!(!alltoall_engine_staged_by_default(true, 2, 16 << 20, 1024), "the synced kernel below 64 MiB");
        assert!(!alltoall_engine_staged_by_default(true, 2, 1 << 30, 256), "measured on the 16 MiB ring");
        assert!(alltoall_engine_staged_by_default(true, 4, 256 << 20, 1024), "4 ranks: from 256 MiB");
        assert!(!alltoall_engine_staged_by_default(true, 4, 64 << 20, 1024), "4 ranks: not clearly faster at 64 MiB");
        assert!(!alltoall_engine_staged_by_default(true, 3, 1 << 30, 1024), "3 ranks: the synced kernel wins");
        assert!(!alltoall_engine_staged_by_default(false, 2, 1 << 30, 1024), "an explicit SYMM_ALGO keeps its path");
    }

    #[test]
    fn send_recv_goes_as_ll_up_to_1_mib_and_the_all_to_alls_keep_the_engine() {
        assert_eq!(p2p_ll_log2_by_default(OpId::SendRecv), 10);
        assert_eq!(p2p_ll_log2_by_default(OpId::Collective), 0, "the all-to-alls' blocks were not measured as LL");
    }

    #[test]
    fn allgather_pushes_by_default_at_measured_rank_counts_only() {
        assert!(allgather_push_by_default(true, 2) && allgather_push_by_default(true, 4));
        assert!(allgather_push_by_default(true, 3), "measured at 3 ranks (eleventh session)");
        assert!(!allgather_push_by_default(true, 8));
        assert!(!allgather_push_by_default(false, 2), "an explicit SYMM_ALGO keeps the pull");
    }

    #[test]
    fn push_default_from_1_mib_at_measured_rank_counts() {
        assert!(push_by_default(true, 2, 1 << 20));
        assert!(push_by_default(true, 4, 1 << 30), "measured on 4 GPUs");
        assert!(!push_by_default(true, 4, (1 << 20) - 2), "below 1 MiB: LL or two-shot");
        assert!(push_by_default(true, 3, 1 << 20), "measured on 3 GPUs");
        assert!(!push_by_default(true, 8, 1 << 20), "not measured at 8 ranks");
        assert!(!push_by_default(false, 4, 1 << 20), "SYMM_ALGO chose");
    }

    #[test]
    fn write_default_from_the_sizes_measured_at_2_to_4_ranks() {
        assert!(write_by_default(true, 4, 16 << 20) && write_by_default(true, 4, 1 << 30));
        assert!(!write_by_default(true, 4, (16 << 20) - 2), "below 16 MiB the push kernel is faster at 4 ranks");
        assert!(write_by_default(true, 3, 64 << 20) && !write_by_default(true, 3, 16 << 20), "3 ranks: from 64 MiB");
        assert!(write_by_default(true, 2, 256 << 20) && !write_by_default(true, 2, 64 << 20), "2 ranks: from 256 MiB");
        assert!(!write_by_default(true, 8, 1 << 30), "not measured at 8 ranks");
        assert!(!write_by_default(false, 4, 1 << 30), "SYMM_ALGO chose");
    }

    #[test]
    fn push_before_write_below_64_mib_at_4_ranks() {
        assert!(push_before_write(true, 4, 16 << 20) && !push_before_write(true, 4, 64 << 20));
        assert!(!push_before_write(true, 3, 16 << 20), "3 ranks: the write kernel starts at 64 MiB anyway");
        assert!(!push_before_write(false, 4, 16 << 20), "SYMM_ALGO chose");
    }

    #[test]
    fn reduce_scatter_writes_by_default_from_the_measured_size_on_plain_inputs() {
        assert!(!reduce_scatter_write_by_default(true, 2, 256 << 20, true), "2 ranks: the inlined pull is faster");
        assert!(!reduce_scatter_write_by_default(true, 2, 1 << 30, true), "2 ranks: the inlined pull is faster");
        assert!(!reduce_scatter_write_by_default(true, 4, 1 << 30, false), "a symmetric input keeps the pull");
        assert!(reduce_scatter_write_by_default(true, 4, 64 << 20, true), "4 ranks: from 64 MiB");
        assert!(!reduce_scatter_write_by_default(true, 4, 16 << 20, true), "4 ranks: below 64 MiB the pull");
        assert!(reduce_scatter_write_by_default(true, 3, 256 << 20, true), "3 ranks: from 256 MiB");
        assert!(!reduce_scatter_write_by_default(true, 3, 64 << 20, true), "3 ranks: below 256 MiB the pull");
        assert!(!reduce_scatter_write_by_default(true, 8, 1 << 30, true), "not measured at 8 ranks");
        assert!(!reduce_scatter_write_by_default(false, 2, 1 << 30, true), "SYMM_ALGO chose");
    }

    #[test]
    fn store_only_kernels_keep_their_measured_copies_under_auto() {
        assert_eq!(store_only_mode(true, MODE_CLASSIC | 1), 1, "classic2's 2-rank classic does not apply");
        assert_eq!(store_only_mode(false, MODE_CLASSIC | 1), MODE_CLASSIC | 1, "an explicit classic does");
    }

    #[test]
    fn measured_defaults_apply_to_auto_only() {
        assert_eq!(default_algo(Algo::AUTO, 2), Algo::AUTO, "the balanced loops at 2 ranks too");
        let before = Algo::parse("classic2").unwrap();
        assert_eq!(default_algo(before, 2), Algo { classic: true, ..before }, "classic2: the classic loops at 2 ranks");
        assert_eq!(default_algo(before, 3), before, "classic2 applies at 2 ranks only");
        let capped = Algo::parse("grid=32+classic2").unwrap();
        assert!(capped.is_auto(), "grid=N and classic2 keep auto's choices");
        assert_eq!(default_algo(capped, 2), Algo { classic: true, ..capped });
        assert!(!Algo::parse("grid=32+push").unwrap().is_auto());
        let spread = Algo::parse("spread").unwrap();
        assert!(spread.is_auto(), "spread alone keeps auto's choices");
        assert_eq!(default_algo(spread, 2), spread);
        assert_eq!(default_algo(spread, 4), spread);
        assert_eq!(default_algo(Algo::AUTO, 3), Algo::AUTO);
        assert_eq!(default_algo(Algo::AUTO, 8), Algo::AUTO);
        let chosen = Algo::parse("twoshot+pipe").unwrap();
        assert_eq!(default_algo(chosen, 2), chosen);
    }
}
