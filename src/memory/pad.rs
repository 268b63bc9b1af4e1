//! Signal pads: a zero-initialised symmetric allocation per communicator for
//! flags and epochs. Kernels advance every word in it, never the host, so
//! replaying a captured graph stays correct. The pad belongs to one
//! communicator, so two communicators on the same GPUs never share a slot.
//!
//! Layout (bytes):
//! - `[0, 1 MiB)`: the library's own flags (barrier row, error guard,
//!   point-to-point signal channels, collective flags, the pipelined
//!   collectives' and the sized send/recv kernel's flags, the fused
//!   matmul ops' flags);
//! - `[1 MiB, 2 MiB)`: the user area, handed out by symmCommGetSignalPad.

use crate::cuda::abi::{
    COLL_LL_COUNTERS, COLL_MAX_BLOCKS, DESC_WORDS, MAX_RANKS, P2PS_WORDS, P2P_FLAG_WORDS, P2P_SIZED_DELTA, PIPE_DELTA, PIPE_WORDS,
};

pub(crate) const PAD_BYTES: usize = 2 << 20;
pub(crate) const USER_OFFSET: usize = 1 << 20;
pub(crate) const USER_BYTES: usize = PAD_BYTES - USER_OFFSET;

/// symmBarrier's row: word p is set by rank p.
pub(crate) const BARRIER_OFFSET: usize = 0;
/// One word of the local pad: the first device-side error claims it.
pub(crate) const ERROR_GUARD_OFFSET: usize = 256;
/// The copy-engine collectives' barrier row (apart from symmBarrier's).
pub(crate) const CE_BARRIER_OFFSET: usize = 512;
/// symmPutSignal/symmWaitSignal: channel c's row at SIGNALS_OFFSET + c * ROW.
pub(crate) const SIGNALS_OFFSET: usize = 4096;
pub(crate) const SIGNAL_CHANNELS: usize = 1024;
/// A row of one word per rank.
pub(crate) const ROW_BYTES: usize = 4 * MAX_RANKS;
/// Collectives' area.
pub(crate) const COLL_OFFSET: usize = 64 << 10;
/// Sync flags [block][peer].
pub(crate) const COLL_FLAGS_OFFSET: usize = COLL_OFFSET;
/// Per-block counters: sync epochs, staged rounds, kernels run; then the
/// LL call epoch (`COLL_LL_COUNTERS`) and three more LL counts.
pub(crate) const COLL_EPOCHS_OFFSET: usize = COLL_FLAGS_OFFSET + COLL_MAX_BLOCKS * ROW_BYTES;
/// Call descriptors [parity][block][peer][DESC_WORDS].
pub(crate) const COLL_CHECK_OFFSET: usize = COLL_EPOCHS_OFFSET + 4 * COLL_MAX_BLOCKS * 4;
/// Point-to-point flags and counters.
pub(crate) const P2P_OFFSET: usize = COLL_CHECK_OFFSET + 2 * COLL_MAX_BLOCKS * MAX_RANKS * DESC_WORDS * 4;
const COLL_END: usize = P2P_OFFSET + P2P_FLAG_WORDS * 4;
/// The pipelined collectives' flags and chunk counters (kernels/pipe.cuh),
/// at a fixed distance from the sync flags (the kernels find them there).
const PIPE_OFFSET: usize = COLL_FLAGS_OFFSET + 4 * PIPE_DELTA;
const PIPE_END: usize = PIPE_OFFSET + 4 * PIPE_WORDS;
/// The sized send/recv kernel's ring flags, descriptors and counters
/// (kernels/sendrecv.cu), at a fixed distance from the fixed kernel's.
const P2P_SIZED_OFFSET: usize = P2P_OFFSET + 4 * P2P_SIZED_DELTA;
const P2P_SIZED_END: usize = P2P_SIZED_OFFSET + 4 * P2PS_WORDS;

/// The fused matmul ops (src/fused): their start sync's flag row and the
/// call descriptors it compares ([rank][4 words]), a barrier row, and the
/// matmul-reduce-scatter's "partial landed" and "slot free" rows, one per
/// slot parity.
pub(crate) const FUSED_OFFSET: usize = 256 << 10;
pub(crate) const FUSED_SYNC_OFFSET: usize = FUSED_OFFSET;
pub(crate) const FUSED_DESC_OFFSET: usize = FUSED_OFFSET + 256;
pub(crate) const FUSED_BARRIER_OFFSET: usize = FUSED_OFFSET + 512;
pub(crate) const FUSED_DATA_OFFSET: usize = FUSED_OFFSET + 768;
pub(crate) const FUSED_FREE_OFFSET: usize = FUSED_OFFSET + 1024;
const FUSED_END: usize = FUSED_FREE_OFFSET + 2 * ROW_BYTES;


const _: () = assert!(SIGNALS_OFFSET + SIGNAL_CHANNELS * ROW_BYTES <= COLL_OFFSET);
const _: () = assert!(COLL_END <= PIPE_OFFSET);
const _: () = assert!(PIPE_END <= P2P_SIZED_OFFSET);
const _: () = assert!(P2P_SIZED_END <= FUSED_OFFSET);
const _: () = assert!(FUSED_DESC_OFFSET + MAX_RANKS * 16 <= FUSED_BARRIER_OFFSET);
const _: () = assert!(FUSED_DATA_OFFSET + 2 * ROW_BYTES <= FUSED_FREE_OFFSET);
const _: () = assert!(FUSED_END <= USER_OFFSET);
// The LL epoch and ll_end's count of blocks, then the fused norm's fenced
// entry's two counts (kernels/allreduce_norm.cu norm_send_fence).
const _: () = assert!(COLL_LL_COUNTERS + 4 <= 4 * COLL_MAX_BLOCKS);

/// Rank r's pad address for each r, plus the device table of user areas.
pub struct SignalPads {
    pub pads: [u64; MAX_RANKS],
    pub user_table: crate::cuda::buffer::DeviceBuffer,
}

impl SignalPads {
    pub fn local(&self, rank: usize, offset: usize) -> u64 {
        self.pads[rank] + offset as u64
    }
}
