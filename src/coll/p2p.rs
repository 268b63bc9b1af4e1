//! symmSend / symmRecv. The sender pushes data into staging slots in the
//! receiver's memory, which copies it out (see kernels/sendrecv.cu). Inside a group, a
//! communicator's sends and receives on one stream are launched together
//! at symmGroupEnd, so exchanges in both directions (and rings) progress at
//! once instead of deadlocking.
//!
//! Two kernels: the sized one (the default, and SYMM_ALGO=p2p with its
//! shape knobs): blocks per operation by its bytes, warp groups with
//! per-chunk flags, a direct push into a receive buffer that lies in
//! the symmetric heap, and messages up to the shape's LL size as LL
//! packets into the receiver's LL slots; and the fixed one (16 blocks per operation, the
//! default before 2026-11-27), which any other explicit SYMM_ALGO choice
//! (e.g. `oneshot`, `classic`) keeps for A/B measurements.

use std::ffi::c_void;

use cudarc::driver::sys::CUstream;

use super::algo::{Algo, P2PShape};
use crate::comm::Comm;
use crate::cuda::abi::{
    OpId, P2POp, P2PArgs, COLL_THREADS, MODE_CLASSIC, P2P_BLOCKS, P2P_DIRECT_OFFSET_LIMIT,
    P2P_GROUP, P2P_MAX_OPS, P2P_NO_DIRECT, P2P_PAIRED, P2P_RING, P2P_RING_MAX, P2P_RING_SHIFT,
};
use crate::cuda::launch::{self, LaunchConfig};
use crate::error::{bail, Result};
use crate::types::{symmDataType_t, RawDataType};

/// The fixed kernel's staging slots, two per channel: 2 MiB, as before the
/// ring became a setting (SYMM_P2P_RING_BYTES), so the kernel of before
/// stays what it was for A/B runs whatever the ring (each channel's region
/// holds at least 4 MiB). With the 16 MiB ring's 8 MiB slots it spread a
/// 256 KiB - 1 MiB message over one block of its sixteen (0.50-0.55x NCCL
/// against 0.77-1.06x, 2 x H200, thirteenth session).
const FIXED_SLOT_BYTES: u64 = 2 << 20;

/// Validate one send or receive; `None` when there is nothing to move.
pub fn request(
    comm: &Comm,
    buf: *const c_void,
    count: usize,
    dtype: RawDataType,
    peer: i32,
    is_send: bool,
    stream: CUstream,
) -> Result<Option<P2POp>> {
    let name = if is_send { "sendbuff" } else { "recvbuff" };
    let Some(dt) = symmDataType_t::from_raw(dtype) else {
        bail!(symmInvalidArgument, "datatype {dtype} is not a symmDataType_t (0..{})", symmDataType_t::ALL.len() - 1);
    };
    if peer < 0 || peer as usize >= comm.nranks {
        bail!(symmInvalidArgument, "peer {peer} is out of range for {} ranks", comm.nranks);
    }
    let Some(bytes) = count.checked_mul(dt.size()).filter(|&b| b <= isize::MAX as usize) else {
        bail!(symmInvalidArgument, "count {count} x {} bytes overflows", dt.size());
    };
    if comm.is_aborted() {
        bail!(symmInvalidUsage, "the communicator was aborted");
    }
    let _cur = comm.device.make_current()?;
    launch::check_stream(&comm.device, stream)?;
    if count == 0 {
        return Ok(None);
    }
    if buf.is_null() {
        bail!(symmInvalidArgument, "{name} is NULL with count {count}");
    }
    let found = comm.mem.find(buf as u64, bytes as u64);
    if found.is_none() {
        launch::check_device_buffer(&comm.device, buf, bytes, name)?;
    }
    let heap_offset = if is_send { P2P_NO_DIRECT } else { direct_offset(comm, buf as u64, found.is_some()) };
    Ok(Some(P2POp { buf: buf as u64, bytes: bytes as u64, peer: peer as u32, is_send: is_send as u32, heap_offset, ..Default::default() }))
}

/// A receive buffer in this rank's symmetric heap slot (symmMemAlloc, or a
/// registration of such memory; `known`: the registry holds it) is mapped
/// at the same offset in every peer's view of this rank's slot: the sized
/// kernel's sender may store into it directly. Its offset (below what the
/// kernel's descriptor carries), else `P2P_NO_DIRECT`.
pub(crate) fn direct_offset(comm: &Comm, buf: u64, known: bool) -> u64 {
    let slot = comm.mem.space.slot(comm.rank);
    if known && buf >= slot && buf - slot < (comm.mem.space.stride as u64).min(P2P_DIRECT_OFFSET_LIMIT) {
        buf - slot
    } else {
        P2P_NO_DIRECT
    }
}

/// Whether a message of `bytes` goes as LL packets on the sized kernel:
/// at most `shape`'s LL size, and its packets plus the header packet fit
/// an LL slot of `ll_slot` bytes (kernels/sendrecv.cu p2p_is_ll decides
/// alike). Each end decides from its own bytes.
#[allow(clippy::int_plus_one)] // "+ 1": the header packet, as the sentence above counts it
pub(crate) fn is_ll(bytes: u64, shape: P2PShape, ll_slot: u64) -> bool {
    bytes <= shape.ll_max() && bytes.div_ceil(8) + 1 <= ll_slot / 16
}

/// Blocks the sized kernel gives one operation when the launch has room:
/// one per `shape`'s bytes (512 KiB), at most its cap (16). A receive the
/// sender will push into directly (from `shape`'s direct size, 1 MiB) only
/// waits for the data: one block. An LL message: a thread per 8 bytes up
/// to the cap (each thread then moves several packets).
pub(crate) fn sized_blocks(op: &P2POp, shape: P2PShape, ll_slot: u64) -> u32 {
    if is_ll(op.bytes, shape, ll_slot) {
        return op.bytes.div_ceil(8).div_ceil(COLL_THREADS as u64).clamp(1, shape.blocks_cap() as u64) as u32;
    }
    if only_waits(op, shape, ll_slot) {
        return 1;
    }
    op.bytes.div_ceil(shape.bytes_per_block()).clamp(1, shape.blocks_cap() as u64) as u32
}

/// A receive the sender pushes into directly (not LL, in the symmetric
/// heap, from `shape`'s direct size): its block only waits for the data.
fn only_waits(op: &P2POp, shape: P2PShape, ll_slot: u64) -> bool {
    op.is_send == 0
        && op.heap_offset != P2P_NO_DIRECT
        && op.bytes >= shape.direct_min()
        && !is_ll(op.bytes, shape, ll_slot)
}

/// Blocks of every operation of one sized launch, scaled down in place
/// (each keeps at least one) so that the grid fits `max_grid`, which every
/// block must (they wait on each other across ranks while resident).
/// Nothing pairs blocks across ranks in the sized kernel, so each rank may
/// choose alone.
pub(crate) fn fit_blocks(blocks: &mut [u32], max_grid: u32) {
    let total: u64 = blocks.iter().map(|&b| b as u64).sum();
    if total <= max_grid as u64 {
        return;
    }
    for b in blocks.iter_mut() {
        *b = ((*b as u64 * max_grid as u64) / total).max(1) as u32;
    }
    while blocks.iter().sum::<u32>() > max_grid {
        match blocks.iter_mut().filter(|b| **b > 1).max_by_key(|b| **b) {
            Some(b) => *b -= 1,
            None => break, // more operations than blocks: one each
        }
    }
}

/// Half blocks of a paired launch (`p2p:pair=1`) for an operation that
/// would get `blocks` whole ones: twice as many, the same threads, except a
/// receive the sender pushes into directly, whose one waiting thread needs
/// no more than a half.
pub(crate) fn paired_half_blocks(op: &P2POp, blocks: u32, shape: P2PShape, ll_slot: u64) -> u32 {
    if only_waits(op, shape, ll_slot) { 1 } else { 2 * blocks }
}

/// Lay out one sized launch: `ops[i].blocks` holds what operation i wants
/// on entry and what it gets on return, with its `first_block`; returns the
/// grid. Unpaired: one run of blocks, fitted together into `max_grid`.
/// Paired: each direction numbers its half blocks from 0, fitted apart into
/// `max_grid` (block b holds send half b and receive half b); the grid is
/// the longer direction. No allocation: a launch holds at most
/// P2P_MAX_OPS operations.
pub(crate) fn layout_blocks(ops: &mut [P2POp], paired: bool, max_grid: u32) -> u32 {
    debug_assert!(ops.len() <= P2P_MAX_OPS);
    let mut grid = 0;
    let directions: &[Option<u32>] = if paired { &[Some(1), Some(0)] } else { &[None] };
    for &direction in directions {
        let mut picked = [0usize; P2P_MAX_OPS];
        let mut counts = [0u32; P2P_MAX_OPS];
        let mut n = 0;
        for (i, op) in ops.iter().enumerate() {
            if direction.is_none_or(|d| op.is_send == d) {
                (picked[n], counts[n]) = (i, op.blocks);
                n += 1;
            }
        }
        fit_blocks(&mut counts[..n], max_grid);
        let mut first = 0;
        for (&i, &b) in picked[..n].iter().zip(&counts[..n]) {
            (ops[i].first_block, ops[i].blocks) = (first, b);
            first += b;
        }
        grid = grid.max(first);
    }
    grid
}

/// The sized kernel's shape when `algo` runs send/recv on it, `None` for
/// the fixed kernel. `auto` takes the sized kernel with [`P2PShape::AUTO`];
/// the choice depends on the communicator's setting only, never on a call,
/// so both ends of every pair run the same kernel (their protocols differ).
pub(crate) fn sized_shape(algo: Algo) -> Option<P2PShape> {
    if algo.p2p {
        Some(algo.p2p_shape)
    } else if algo.is_auto() {
        Some(P2PShape::AUTO)
    } else {
        None
    }
}

/// Launch symmSend / symmRecv `ops` (one call's, or a group's) on `stream`
/// (see [`launch_ops`]); a timeout names them.
pub fn launch_send_recv(comm: &Comm, stream: CUstream, ops: &[P2POp]) -> Result<()> {
    launch_ops(comm, stream, ops, OpId::SendRecv)
}

/// Launch `ops` (in call order) on `stream`. Each launch holds at most one
/// send and one receive per peer; later ones with the same peer go to later
/// launches, which keeps each pair's messages matched in order. `api` names
/// the call in a timeout's message (send/recv, or the collective whose
/// blocks these are).
pub(super) fn launch_ops(comm: &Comm, stream: CUstream, ops: &[P2POp], api: OpId) -> Result<()> {
    let mut rounds: Vec<Vec<P2POp>> = Vec::new();
    // Ops so far per (peer, direction): a linear scan, as a group holds a
    // few lanes (no map to build on every call).
    let mut lane_depth: Vec<((u32, u32), usize)> = Vec::with_capacity(ops.len().min(2 * crate::cuda::abi::MAX_RANKS));
    for op in ops {
        let lane = (op.peer, op.is_send);
        let at = match lane_depth.iter().position(|(l, _)| *l == lane) {
            Some(i) => i,
            None => {
                lane_depth.push((lane, 0));
                lane_depth.len() - 1
            }
        };
        let depth = &mut lane_depth[at].1;
        if rounds.len() <= *depth {
            rounds.push(Vec::new());
        }
        rounds[*depth].push(*op);
        *depth += 1;
    }
    let dev = &comm.device;
    let _cur = dev.make_current()?;
    let algo = comm.coll.algo.get();
    let sized = sized_shape(algo);
    let f = dev.module().function(if sized.is_some() { c"symm_sendrecv_sized" } else { c"symm_sendrecv" })?;
    const _: () = assert!(COLL_THREADS.is_multiple_of(P2P_GROUP) && COLL_THREADS / P2P_GROUP <= 15);
    let ring_slots = comm.coll.p2p_ring_slots();
    debug_assert!(ring_slots.is_power_of_two() && (P2P_RING..=P2P_RING_MAX).contains(&ring_slots));
    let ring_bits = if ring_slots == P2P_RING { 0 } else { ring_slots.trailing_zeros() << P2P_RING_SHIFT };
    for mut round in rounds {
        debug_assert!(round.len() <= P2P_MAX_OPS);
        // `auto`'s stride and LL size follow the launch (defaults.rs); the
        // blocks follow them.
        let shape = sized.map(|mut shape| {
            if algo.is_auto() {
                let largest = round.iter().map(|op| op.bytes).max().unwrap_or(0);
                shape.stride_log2 = super::defaults::p2p_stride_log2_by_default(ring_slots, largest);
                shape.ll_log2 = super::defaults::p2p_ll_log2_by_default(api);
            }
            shape
        });
        let paired = shape.is_some_and(|s| s.pair);
        for op in round.iter_mut() {
            op.blocks = match shape {
                Some(shape) => {
                    let whole = sized_blocks(op, shape, comm.coll.p2p_ll_slot);
                    if paired { paired_half_blocks(op, whole, shape, comm.coll.p2p_ll_slot) } else { whole }
                }
                None => P2P_BLOCKS,
            };
        }
        // The fixed kernel keeps its SYMM_P2P_BLOCKS an operation whatever
        // the grid (its block j pairs with the peer's block j).
        let max_grid = if shape.is_some() { comm.coll.max_grid } else { u32::MAX };
        let grid = layout_blocks(&mut round, paired, max_grid);
        let mut a: P2PArgs = comm.p2p_template(api);
        if sized.is_none() {
            a.slot_bytes = FIXED_SLOT_BYTES.min(comm.coll.p2p_slot_bytes);
        }
        a.nops = round.len() as u32;
        a.ops[..round.len()].copy_from_slice(&round);
        if algo.classic {
            a.mode |= MODE_CLASSIC;
        }
        if let Some(shape) = shape {
            a.mode |= shape.mode_bits() | ring_bits;
        }
        debug_assert_eq!(a.mode & P2P_PAIRED != 0, paired);
        let mut params = [(&mut a as *mut P2PArgs).cast::<c_void>()];
        launch::launch(f, LaunchConfig { grid, block: COLL_THREADS, shared_mem: 0 }, stream, &mut params)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An LL slot at 2 ranks (1 MiB of data, plus the header's 256 bytes).
    const LL_SLOT: u64 = (2 << 20) + 256;

    fn op(bytes: u64, is_send: bool, heap_offset: u64) -> P2POp {
        P2POp { bytes, is_send: is_send as u32, heap_offset, ..Default::default() }
    }

    #[test]
    fn sized_blocks_follow_the_bytes() {
        let d = P2PShape::default();
        assert_eq!(sized_blocks(&op(8, true, P2P_NO_DIRECT), d, LL_SLOT), 1);
        assert_eq!(sized_blocks(&op(512 << 10, true, P2P_NO_DIRECT), d, LL_SLOT), 1);
        assert_eq!(sized_blocks(&op((512 << 10) + 1, false, P2P_NO_DIRECT), d, LL_SLOT), 2);
        assert_eq!(sized_blocks(&op(1 << 30, true, P2P_NO_DIRECT), d, LL_SLOT), 16);
        // A receive pushed into directly waits with one block; a small one
        // (below the direct size) still copies out of the ring.
        assert_eq!(sized_blocks(&op(1 << 30, false, 4096), d, LL_SLOT), 1);
        assert_eq!(sized_blocks(&op(4 << 20, true, 4096), d, LL_SLOT), 8, "only receives know the direct offset");
        assert_eq!(sized_blocks(&op(64 << 10, false, 4096), d, LL_SLOT), 1);
    }

    #[test]
    fn shape_knobs_set_the_cap_and_the_bytes_per_block() {
        let wide = P2PShape::parse(":blocks=64").unwrap();
        assert_eq!(sized_blocks(&op(1 << 30, true, P2P_NO_DIRECT), wide, LL_SLOT), 64);
        assert_eq!(sized_blocks(&op(16 << 20, true, P2P_NO_DIRECT), wide, LL_SLOT), 32, "still one per 512 KiB");
        let fine = P2PShape::parse(":blocks=64:kib=128").unwrap();
        assert_eq!(sized_blocks(&op(4 << 20, true, P2P_NO_DIRECT), fine, LL_SLOT), 32);
        assert_eq!(sized_blocks(&op(1 << 30, false, 4096), fine, LL_SLOT), 1, "a direct receive only waits");
        assert_eq!(sized_blocks(&op(256 << 10, false, 4096), fine, LL_SLOT), 2, "below 1 MiB the ring");
        let early = P2PShape::parse(":blocks=64:kib=128:direct=64").unwrap();
        assert_eq!(sized_blocks(&op(256 << 10, false, 4096), early, LL_SLOT), 1, "direct from 64 KiB");
        assert_eq!(sized_blocks(&op(32 << 10, false, 4096), early, LL_SLOT), 1, "one block either way");
        assert_eq!(sized_blocks(&op(256 << 10, false, P2P_NO_DIRECT), early, LL_SLOT), 2, "not in the heap: the ring");
    }

    #[test]
    fn auto_runs_the_sized_kernel_and_explicit_choices_keep_the_fixed_one() {
        assert_eq!(sized_shape(Algo::AUTO), Some(P2PShape::AUTO));
        let knobs = Algo::parse("p2p:blocks=8").unwrap();
        assert_eq!(sized_shape(knobs), Some(knobs.p2p_shape));
        for fixed in ["oneshot", "classic", "twoshot+push"] {
            assert_eq!(sized_shape(Algo::parse(fixed).unwrap()), None, "{fixed}");
        }
        let auto = P2PShape::AUTO;
        assert_eq!(auto.to_string(), ":blocks=64:kib=32:direct=64");
        assert_eq!(sized_blocks(&op(1 << 20, true, P2P_NO_DIRECT), auto, LL_SLOT), 32, "one block per 32 KiB");
        assert_eq!(sized_blocks(&op(1 << 30, true, P2P_NO_DIRECT), auto, LL_SLOT), 64);
    }

    #[test]
    fn ll_messages_take_a_thread_per_packet_up_to_the_cap() {
        let ll = P2PShape::parse(":blocks=64:kib=32:direct=64:ll=1024").unwrap();
        assert!(is_ll(1 << 20, ll, LL_SLOT) && !is_ll((1 << 20) + 1, ll, LL_SLOT));
        assert!(!is_ll(1 << 20, ll, 2 << 20), "the header packet must fit too");
        assert_eq!(sized_blocks(&op(8, true, P2P_NO_DIRECT), ll, LL_SLOT), 1);
        assert_eq!(sized_blocks(&op(64 << 10, true, P2P_NO_DIRECT), ll, LL_SLOT), 16, "512 threads x 8 bytes a block");
        assert_eq!(sized_blocks(&op(64 << 10, false, 4096), ll, LL_SLOT), 16, "a symmetric receive unpacks too");
        assert_eq!(sized_blocks(&op(1 << 20, false, P2P_NO_DIRECT), ll, LL_SLOT), 64, "the cap");
        let small = P2PShape::parse(":ll=64").unwrap();
        assert!(is_ll(64 << 10, small, LL_SLOT) && !is_ll(128 << 10, small, LL_SLOT));
    }

    #[test]
    fn paired_launches_number_each_direction_apart() {
        let shape = P2PShape::parse(":blocks=64:kib=32:direct=64:pair=1").unwrap();
        // A send gets twice its blocks in halves; a receive pushed into
        // directly one half; a ring receive twice its blocks.
        assert_eq!(paired_half_blocks(&op(1 << 20, true, P2P_NO_DIRECT), 32, shape, LL_SLOT), 64);
        assert_eq!(paired_half_blocks(&op(1 << 20, false, 4096), 1, shape, LL_SLOT), 1);
        assert_eq!(paired_half_blocks(&op(1 << 20, false, P2P_NO_DIRECT), 32, shape, LL_SLOT), 64);
        let ll = P2PShape::parse(":blocks=64:kib=32:direct=64:ll=1024:pair=1").unwrap();
        assert_eq!(paired_half_blocks(&op(64 << 10, false, 4096), 16, ll, LL_SLOT), 32, "an LL receive unpacks");
        // Sends [0, 64) and receives [0, 1) and [1, 65): the grid is the longer direction.
        let (placed, grid) = layout(&[(64, true), (1, false), (64, false)], true, 132);
        assert_eq!((placed, grid), (vec![(0, 64), (0, 1), (1, 64)], 65));
        // Each direction fits the grid alone.
        let (placed, grid) = layout(&[(128, true), (128, false), (128, true)], true, 132);
        assert!(grid <= 132 && placed[0].0 == 0 && placed[1].0 == 0 && placed[2].0 == placed[0].1, "{placed:?}");
        // Unpaired: one run, in order.
        let (placed, grid) = layout(&[(16, true), (1, false), (16, true)], false, 132);
        assert_eq!((placed, grid), (vec![(0, 16), (16, 1), (17, 16)], 33));
        // The fixed kernel's 16 an operation, whatever the grid.
        let (placed, grid) = layout(&[(16, true); 16], false, u32::MAX);
        assert_eq!((placed[15], grid), ((240, 16), 256));
    }

    /// `layout_blocks` on operations that want (blocks, is_send): each
    /// one's (first_block, blocks), and the grid.
    fn layout(want: &[(u32, bool)], paired: bool, max_grid: u32) -> (Vec<(u32, u32)>, u32) {
        let mut ops: Vec<P2POp> =
            want.iter().map(|&(blocks, is_send)| P2POp { blocks, is_send: is_send as u32, ..Default::default() }).collect();
        let grid = layout_blocks(&mut ops, paired, max_grid);
        (ops.iter().map(|op| (op.first_block, op.blocks)).collect(), grid)
    }

    #[test]
    fn blocks_fit_the_grid() {
        let fit = |want: &[u32], max_grid| {
            let mut blocks = want.to_vec();
            fit_blocks(&mut blocks, max_grid);
            blocks
        };
        assert_eq!(fit(&[16, 16], 132), vec![16, 16]);
        let f = fit(&[16; 16], 66);
        assert!(f.iter().sum::<u32>() <= 66 && f.iter().all(|&b| b >= 1), "{f:?}");
        assert_eq!(fit(&[16, 1, 1], 9), vec![7, 1, 1]);
    }
}
