//! The communicator's collective resources and settings, made at init:
//! every rank's scratch, point-to-point and LL slots as this rank sees
//! them, the largest grid, the algorithm choice (`SYMM_ALGO`,
//! `symmCommSetAlgorithm`) and what the per-call checks remember. The
//! collectives (src/coll) read it through `Comm::coll`; it lives here,
//! below them, because the communicator owns it.

use cudarc::driver::sys::CUstream;

use crate::config;
use crate::cuda::abi::{TlEvent, COLL_MAX_BLOCKS, MAX_RANKS, TL_EVENTS};
use crate::cuda::buffer::DeviceBuffer;
use crate::error::Result;
use crate::memory::symmetric;

use super::algo::{Algo, AlgoCell};
use super::Parts;

/// Per-communicator state of the collectives, made at init.
pub struct CollState {
    /// Rank r's scratch base, as seen here: [in 0][in 1][out 0][out 1].
    pub scratch: [u64; MAX_RANKS],
    /// Bytes of one scratch half.
    pub half: u64,
    /// Rank r's point-to-point staging slots, as seen here.
    pub p2p_slots: [u64; MAX_RANKS],
    pub p2p_slot_bytes: u64,
    /// Rank r's LL packet slots [parity][source], as seen here.
    pub ll: [u64; MAX_RANKS],
    /// Bytes of one LL slot: twice the data it holds (8 data bytes in a
    /// 16-byte packet; [`CollState::ll_max`]).
    pub ll_slot: u64,
    /// The send/recv engine's LL packet area (kernels/sendrecv.cu): its
    /// offset in every rank's heap slot, and the bytes of each of its
    /// [parity][sender] slots (an LL slot's, plus the header packet).
    pub p2p_ll_offset: u64,
    pub p2p_ll_slot: u64,
    /// Largest grid: the same on every rank.
    pub max_grid: u32,
    pub check: bool,
    /// The LL kernels may go out as programmatic dependents (`pdl`): on a
    /// GPU that has it (compute capability 9.0; the sm_80 code has no
    /// griddepcontrol), and not with SYMM_TEST_SHARED_DEVICES: there a
    /// rank's next kernel, resident early at its wait, could hold the SMs
    /// that another rank of the same GPU needs for the kernel this one
    /// waits on (one GPU a rank, as in use, has no such cycle).
    pub programmatic_launch: bool,
    pub algo: AlgoCell,
    /// SYMM_TIMELINE=1: the kernels' per-block phase events
    /// (COLL_MAX_BLOCKS x (1 + TL_EVENTS) `TlEvent`s).
    pub timeline: Option<crate::cuda::buffer::DeviceBuffer>,
    /// All-gather and reduce-scatter on the copy engines (symmCommSetCopyEngine).
    pub copy_engine: std::sync::atomic::AtomicBool,
    pub checks: CheckCache,
    /// Input paths already logged at INFO, one bit per (collective, path).
    pub paths: std::sync::atomic::AtomicU64,
}

impl CollState {
    /// Data bytes one LL slot holds, one rank's contribution to one LL
    /// call (SYMM_LL_MAX_BYTES, default 1 MiB at 2 ranks, 512 KiB from 3).
    pub fn ll_max(&self) -> u64 {
        self.ll_slot / 2
    }

    /// Chunk slots of the send/recv engine's ring per channel: a channel's
    /// two staging slots are the ring (SYMM_P2P_RING_BYTES).
    pub fn p2p_ring_slots(&self) -> u64 {
        2 * self.p2p_slot_bytes / crate::cuda::abi::P2P_CHUNK
    }

    pub fn copy_engine(&self) -> bool {
        self.copy_engine.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl CollState {
    pub fn max_grid(min_sm_count: usize, ranks_on_my_gpu: usize) -> u32 {
        // Ranks sharing a GPU (test-only mode) must all fit at once: their
        // kernels wait on each other. A block may need a whole SM (the
        // all-gather's 512 threads at 128 registers each), so each sharing
        // rank also leaves one SM for whatever else it runs beside the
        // collective (a progress consumer, a norm): filling every SM lets
        // that side kernel's blocks take the SMs the last ranks' blocks wait
        // for, and then no rank moves.
        let ranks = ranks_on_my_gpu.max(1);
        let usable = if ranks > 1 { min_sm_count.saturating_sub(ranks) } else { min_sm_count };
        (usable / ranks).clamp(1, COLL_MAX_BLOCKS) as u32
    }
}

/// What the per-call checks of plain buffers and streams learned, so a
/// training loop that passes the same buffers and stream each step pays
/// for the driver queries once (SYMM_CHECK=1 queries every call). A stale
/// entry lets a call through unchecked: a destroyed stream's handle fails
/// at the launch, but a freed buffer passed again reaches the kernel (as
/// with NCCL, which checks nothing); SYMM_CHECK=1 catches both.
#[derive(Default)]
pub struct CheckCache {
    stream: std::sync::atomic::AtomicUsize,
    /// Plain allocations of this device, [start, end), most recent first.
    ranges: parking_lot::Mutex<[(u64, u64); CHECK_CACHE_RANGES]>,
}

/// Plain allocations the check cache remembers: enough for the op with the
/// most buffers (the fused norm: input, out, residual, residualOut, weight)
/// and a few more, so a step that passes the same tensors asks the driver
/// nothing.
const CHECK_CACHE_RANGES: usize = 8;

impl CheckCache {
    pub(crate) fn knows_range(&self, ptr: u64, bytes: u64) -> bool {
        let end = ptr.saturating_add(bytes);
        self.ranges.lock().iter().any(|&(s, e)| s < e && s <= ptr && end <= e)
    }

    pub(crate) fn remember_range(&self, range: (u64, u64)) {
        let mut r = self.ranges.lock();
        r.rotate_right(1);
        r[0] = range;
    }

    pub(crate) fn knows_stream(&self, stream: CUstream) -> bool {
        self.stream.load(std::sync::atomic::Ordering::Relaxed) == stream as usize
    }

    pub(crate) fn remember_stream(&self, stream: CUstream) {
        self.stream.store(stream as usize, std::sync::atomic::Ordering::Relaxed);
    }
}


/// Collective: the staging scratch and point-to-point slots, and the
/// collective settings every rank derives identically.
pub(super) fn coll_state(p: &Parts) -> Result<CollState> {
    let nranks = p.peers.len();
    let cfg = config::get();
    let half = (p.settings.scratch_bytes / 4 / 4096 * 4096).max(4096);
    let base = symmetric::alloc(&p.mem, &p.link, 4 * half, true)? - p.mem.space.slot(p.rank);
    // Point-to-point: a channel per sender, two staging slots of the fixed
    // kernel that are also the sized kernel's ring (SYMM_P2P_RING_BYTES).
    let p2p_slot_bytes = config::p2p_ring_bytes(cfg, nranks) / 2;
    let p2p = symmetric::alloc(&p.mem, &p.link, nranks * 2 * p2p_slot_bytes as usize, true)? - p.mem.space.slot(p.rank);
    let ll_slot = 2 * config::ll_max_bytes(cfg, nranks) as usize; // a packet carries 8 data bytes in 16
    let ll = symmetric::alloc(&p.mem, &p.link, 2 * nranks * ll_slot, true)? - p.mem.space.slot(p.rank);
    // Send/recv's own LL slots (a pair's messages need not follow the
    // collectives' lockstep): 1 MiB of data at 2 to 4 ranks (measured
    // there), else as large as the collectives'; plus a header packet,
    // 256-aligned.
    let p2p_ll_slot = 2 * config::p2p_ll_max_bytes(cfg, nranks) as usize + 256;
    let p2p_ll = symmetric::alloc(&p.mem, &p.link, 2 * nranks * p2p_ll_slot, true)? - p.mem.space.slot(p.rank);
    let mut scratch = [0u64; MAX_RANKS];
    let mut p2p_slots = [0u64; MAX_RANKS];
    let mut ll_slots = [0u64; MAX_RANKS];
    for r in 0..nranks {
        scratch[r] = p.mem.space.slot(r) + base;
        p2p_slots[r] = p.mem.space.slot(r) + p2p;
        ll_slots[r] = p.mem.space.slot(r) + ll;
    }
    let min_sm = p.peers.iter().map(|q| q.sm_count as usize).min().unwrap_or(1);
    let sharing = busiest_gpu_ranks(p.peers.iter().map(|q| &q.pci_bus_id));
    let algo = Algo::from_env();
    let timeline = if cfg.timeline {
        let bytes = COLL_MAX_BLOCKS * (1 + TL_EVENTS) * std::mem::size_of::<TlEvent>();
        Some(DeviceBuffer::zeroed(&p.device, bytes)?)
    } else {
        None
    };
    Ok(CollState {
        scratch,
        half: half as u64,
        p2p_slots,
        p2p_slot_bytes,
        ll: ll_slots,
        ll_slot: ll_slot as u64,
        p2p_ll_offset: p2p_ll,
        p2p_ll_slot: p2p_ll_slot as u64,
        max_grid: CollState::max_grid(min_sm, sharing),
        check: cfg.check,
        programmatic_launch: p.device.compute_capability.0 >= 9 && !cfg.test_shared_devices,
        algo: AlgoCell::new(algo),
        timeline,
        copy_engine: p.settings.copy_engine.into(),
        checks: Default::default(),
        paths: Default::default(),
    })
}

/// The most ranks any one GPU holds (more than 1 only in the test-only
/// shared-device mode). The grid is divided by it on every rank: blocks
/// pair up across ranks by index and split ranges by the grid size, so a
/// grid must not depend on which GPU a rank shares (a rank alone on its GPU
/// launching more blocks than its peers made them read unwritten ranges).
fn busiest_gpu_ranks<T: PartialEq>(gpu_of_rank: impl Iterator<Item = T> + Clone) -> usize {
    gpu_of_rank.clone().map(|g| gpu_of_rank.clone().filter(|o| *o == g).count()).max().unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_divisor_is_the_same_on_every_rank() {
        // 3 ranks on 2 GPUs: GPU "a" holds two, so every rank divides by 2,
        // including rank 1, alone on "b".
        assert_eq!(busiest_gpu_ranks(["a", "b", "a"].iter()), 2);
        assert_eq!(busiest_gpu_ranks(["a", "b", "c", "d"].iter()), 1);
        assert_eq!(busiest_gpu_ranks(["a", "b", "a", "b", "a", "b", "a", "b"].iter()), 4);
        assert_eq!(busiest_gpu_ranks(std::iter::empty::<&str>()), 1);
    }

    #[test]
    fn max_grid_leaves_an_sm_per_sharing_rank() {
        assert_eq!(CollState::max_grid(132, 1), COLL_MAX_BLOCKS as u32, "one rank a GPU: capped, nothing left out");
        assert_eq!(CollState::max_grid(108, 1), 108, "one rank a GPU uses every SM");
        assert_eq!(CollState::max_grid(132, 2), 65);
        assert_eq!(CollState::max_grid(132, 8), 15, "8 x 15 blocks + 8 spare SMs <= 132");
        assert_eq!(CollState::max_grid(4, 8), 1, "at least one block");
    }

    #[test]
    fn check_cache_remembers_recent_ranges() {
        let c = CheckCache::default();
        assert!(!c.knows_range(0, 1), "an empty cache knows nothing, not even address 0");
        c.remember_range((0x1000, 0x2000));
        assert!(c.knows_range(0x1000, 0x1000));
        assert!(c.knows_range(0x1800, 16));
        assert!(!c.knows_range(0x1800, 0x801), "past the end");
        assert!(!c.knows_range(0xfff, 2), "before the start");
        assert!(!c.knows_range(u64::MAX - 1, 8));
        for k in 0..CHECK_CACHE_RANGES as u64 {
            c.remember_range((0x10_0000 * (k + 1), 0x10_0000 * (k + 1) + 64));
        }
        assert!(!c.knows_range(0x1000, 1), "the oldest of CHECK_CACHE_RANGES + 1 ranges is forgotten");
        assert!(c.knows_range(0x10_0000, 64));
        let s = 0x5555usize as CUstream;
        assert!(!c.knows_stream(s));
        c.remember_stream(s);
        assert!(c.knows_stream(s));
    }
}
