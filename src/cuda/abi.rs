//! Structures shared with the kernels; mirrors `kernels/abi.cuh`. Both sides
//! assert the same sizes, so a change on one side alone fails to build.

use crate::error::{err, Error};

/// Most ranks a communicator may have (one NVLink node).
pub(crate) const MAX_RANKS: usize = 8;

/// Operation ids recorded with a device-side error (`SymmOpId`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpId {
    None = 0,
    Barrier = 1,
    PutSignal = 2,
    WaitSignal = 3,
    WaitValue = 4,
    Collective = 5,
    /// A device-API function in a user's kernel (include/symmcomm_device.cuh).
    Device = 6,
    /// symmSend / symmRecv (alone or grouped) on the point-to-point engine.
    SendRecv = 7,
}

impl OpId {
    pub fn from_raw(v: u32) -> Option<OpId> {
        [
            OpId::None,
            OpId::Barrier,
            OpId::PutSignal,
            OpId::WaitSignal,
            OpId::WaitValue,
            OpId::Collective,
            OpId::Device,
            OpId::SendRecv,
        ]
        .get(v as usize)
            .copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            OpId::None => "operation",
            OpId::Barrier => "symmBarrier",
            OpId::PutSignal => "symmPutSignal",
            OpId::WaitSignal => "symmWaitSignal",
            OpId::WaitValue => "symmStreamWaitValue32",
            OpId::Collective => "collective",
            OpId::Device => "device API wait",
            OpId::SendRecv => "symmSend/symmRecv",
        }
    }
}

/// Collective ids (`SymmCollId`), for descriptors and messages.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollId {
    AllReduce = 1,
    AllGather = 2,
    ReduceScatter = 3,
    Broadcast = 4,
    Reduce = 5,
    AllToAll = 6,
}

impl CollId {
    pub fn from_raw(v: u32) -> Option<CollId> {
        use CollId::*;
        [AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll].into_iter().find(|c| *c as u32 == v)
    }

    pub fn name(self) -> &'static str {
        match self {
            CollId::AllReduce => "symmAllReduce",
            CollId::AllGather => "symmAllGather",
            CollId::ReduceScatter => "symmReduceScatter",
            CollId::Broadcast => "symmBroadcast",
            CollId::Reduce => "symmReduce",
            CollId::AllToAll => "symmAllToAll",
        }
    }
}

/// `SymmErrorKind`.
pub(crate) const DEV_OK: u32 = 0;
pub(crate) const DEV_TIMEOUT: u32 = 1;
pub(crate) const DEV_ABORTED: u32 = 2;
pub(crate) const DEV_MISMATCH: u32 = 3;
/// Only the device API records this one: a bad argument to a device function.
pub(crate) const DEV_INVALID_ARGUMENT: u32 = 4;

/// `SymmStatus`: host-pinned, device-mapped; see kernels/abi.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Status {
    pub abort: u32,
    pub error: u32,
    pub rank: u32,
    pub op: u32,
    pub peer: u32,
    pub detail: u32,
    pub waited_ns: u64,
    /// DEV_MISMATCH: this rank's and the peer's collective descriptors.
    pub mine: [u32; 4],
    pub theirs: [u32; 4],
}

/// `SymmWaitCtx`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WaitCtx {
    pub status: u64,
    pub error_guard: u64,
    pub timeout_ns: u64,
    pub rank: u32,
    pub op: u32,
}

/// `SymmFlagArgs`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FlagArgs {
    pub wait: WaitCtx,
    pub local: u64,
    pub remote: [u64; MAX_RANKS],
    pub nranks: u32,
    pub peer: u32,
}

const _: () = assert!(std::mem::size_of::<Status>() == 64);
const _: () = assert!(std::mem::size_of::<WaitCtx>() == 32);
const _: () = assert!(std::mem::size_of::<FlagArgs>() == 32 + 8 + 8 * MAX_RANKS + 8);

/// `SYMM_COLL_MAX_BLOCKS`.
pub(crate) const COLL_MAX_BLOCKS: usize = 128;
/// `SYMM_COLL_LL_COUNTERS`: index of the LL epoch in the per-block counters.
pub(crate) const COLL_LL_COUNTERS: usize = 3 * COLL_MAX_BLOCKS;
/// `SYMM_COLL_THREADS`.
pub(crate) const COLL_THREADS: u32 = 512;
/// `SYMM_DESC_WORDS`: words of a call descriptor in the check slots.
pub(crate) const DESC_WORDS: usize = 4;

/// `SymmCollArgs::mode` bits.
pub(crate) const MODE_STAGED: u32 = 1;
pub(crate) const MODE_END_SYNC: u32 = 2;
pub(crate) const MODE_TWO_SHOT: u32 = 4;
pub(crate) const MODE_PROGRESS: u32 = 8;
pub(crate) const MODE_CHECK: u32 = 16;
pub(crate) const MODE_LOCAL: u32 = 32;
pub(crate) const MODE_PUSH: u32 = 64;
pub(crate) const MODE_PIPE: u32 = 128;
/// The write-only two-shot all-reduce's protocol (kernels/allreduce_write.cu):
/// all three protocol bits, which no other kernel sets together.
pub(crate) const MODE_WRITE: u32 = MODE_TWO_SHOT | MODE_PUSH | MODE_PIPE;

/// Op ids of the fused matmul ops in the call descriptors' top byte, after
/// the collectives' ids (coll::CollId, 1-6).
pub(crate) const DESC_ALLGATHER_MATMUL: u32 = 7;
pub(crate) const DESC_MATMUL_REDUCE_SCATTER: u32 = 8;
/// The kernel protocol a descriptor records: the mode's protocol bits
/// (SYMM_COLL_PROTO_BITS: two-shot, push, pipe) shifted right by 2.
pub(crate) const fn desc_protocol(mode: u32) -> u32 {
    (mode & (MODE_TWO_SHOT | MODE_PUSH | MODE_PIPE)) >> 2
}
pub(crate) const MODE_CLASSIC: u32 = 256;
/// `SYMM_COLL_PDL`: an LL kernel launched as a programmatic dependent
/// (by default on sm_90, not with SYMM_ALGO `nopdl`; kernels/ll.cuh `ll_begin`).
pub(crate) const MODE_PDL: u32 = 512;
/// `SYMM_COLL_LIGHT_SYNC`: block_sync without its system-scope SC fence
/// before the release store (by default, not with SYMM_ALGO `fullsync`;
/// kernels/coll.cuh).
pub(crate) const MODE_LIGHT_SYNC: u32 = 1024;
/// `SYMM_COLL_SERIAL_ROUNDS`: the store-only kernels scatter a round after
/// reducing the one before (SYMM_ALGO `serial`; kernels/write_rounds.cuh).
pub(crate) const MODE_SERIAL_ROUNDS: u32 = 2048;
/// `SYMM_COLL_OWN_DIRECT`: the staged kernels read the part of the input
/// that only this rank reads (the all-to-all's and reduce-scatter's own
/// block, the two-shot all-reduce's own slice) where it is instead of
/// staging it (by default, not with SYMM_ALGO `ownstaged`; twenty-seventh
/// session). Not a protocol bit: no peer reads what it skips.
pub(crate) const MODE_OWN_DIRECT: u32 = 4096;

/// `SYMM_PIPE_SLOTS`, `SYMM_PIPE_DELTA` (words from the collective sync
/// flags to the pipelined kernels' flags), `SYMM_PIPE_WORDS`.
pub(crate) const PIPE_SLOTS: u64 = 4;
pub(crate) const PIPE_DELTA: usize = 16384;
pub(crate) const PIPE_WORDS: usize = 3 * COLL_MAX_BLOCKS * MAX_RANKS + COLL_MAX_BLOCKS;

/// `SYMM_TL_EVENTS`: phase events per block (after one header event).
pub(crate) const TL_EVENTS: usize = 255;

/// `SymmTlEvent`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TlEvent {
    pub phase: u32,
    pub arg: u32,
    pub ns: u64,
}
const _: () = assert!(std::mem::size_of::<TlEvent>() == 16);

/// `SymmCollArgs`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollArgs {
    pub wait: WaitCtx,
    pub flags: u64,
    pub peer_flags: [u64; MAX_RANKS],
    pub epochs: u64,
    pub check: u64,
    pub peer_check: [u64; MAX_RANKS],
    pub src: [u64; MAX_RANKS],
    pub scratch: [u64; MAX_RANKS],
    pub ll: [u64; MAX_RANKS],
    pub send: u64,
    pub recv: u64,
    pub progress: u64,
    pub timeline: u64,
    pub count: u64,
    pub chunk: u64,
    pub unit: u64,
    pub half: u64,
    pub ll_slot: u64,
    pub rank: u32,
    pub nranks: u32,
    pub op: u32,
    pub root: u32,
    pub mode: u32,
    pub coll: u32,
    pub dtype: u32,
    pub elem_size: u32,
    pub token: u32,
    pub pad: u32,
}
const _: () = assert!(std::mem::size_of::<CollArgs>() == 32 + 8 + 64 + 8 + 8 + 64 + 64 + 64 + 64 + 8 + 8 + 8 + 8 + 40 + 32 + 8);

/// `SymmA2AVDevArgs` (kernels/alltoallv_device.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct A2AVDevArgs {
    pub coll: CollArgs,
    pub splits: u64,
    pub out_splits_offsets: u64,
    pub send_capacity: u64,
    pub recv_capacity: u64,
}
const _: () = assert!(std::mem::size_of::<A2AVDevArgs>() == std::mem::size_of::<CollArgs>() + 8 * 4);

/// `SYMM_A2AV_TAG`: `Status::mine[0]` of an all-to-all-v whose counts could
/// not be honoured; `mine[3]` 1: rank `mine[1]`'s counts are negative or run
/// past its input; 2: this rank would receive `mine[1..3]` rows,
/// `theirs[1..3]` is its capacity.
pub(crate) const A2AV_TAG: u32 = 0xFD00_0000;
/// `SYMM_A2AV_FORM_SHIFT`, `SYMM_A2AV_FORM_2D`, `SYMM_A2AV_FORM_2D_OFFSET`:
/// `mine[3]` bits 8-15 say which form recorded the error (0: the 1-D one).
pub(crate) const A2AV_FORM_SHIFT: u32 = 8;
pub(crate) const A2AV_FORM_2D: u32 = 1;
pub(crate) const A2AV_FORM_2D_OFFSET: u32 = 2;

/// `SYMM_A2AV_2D_MAX_SPLITS`: most blocks per rank (nranks x local experts)
/// of the 2-D forms.
pub(crate) const A2AV_2D_MAX_SPLITS: usize = 1024;

/// `SymmA2AV2dArgs` (kernels/alltoallv_device.cu, the 2-D forms).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct A2AV2dArgs {
    pub coll: CollArgs,
    pub splits: u64,
    pub out_splits_offsets: u64,
    pub send_capacity: u64,
    pub recv_capacity: u64,
    pub major_align: u64,
    pub experts: u32,
    pub pad: u32,
}
const _: () = assert!(std::mem::size_of::<A2AV2dArgs>() == std::mem::size_of::<CollArgs>() + 8 * 6);

/// `SymmNormArgs` (kernels/allreduce_norm.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NormArgs {
    pub coll: CollArgs,
    pub residual: u64,
    pub residual_out: u64,
    pub weight: u64,
    pub rows: u64,
    pub hidden: u32,
    pub eps: f32,
    pub scales: u64,
    pub quant: u32,
    /// NORM_SPREAD, NORM_PREFETCH, the pieces (NORM_PARTS_SHIFT).
    pub flags: u32,
}
const _: () = assert!(std::mem::size_of::<NormArgs>() == std::mem::size_of::<CollArgs>() + 8 * 4 + 8 + 16);

/// `SYMM_NORM_SAME_TYPE`, `SYMM_NORM_FP8_TENSOR`, `SYMM_NORM_FP8_TOKEN`.
pub(crate) const NORM_SAME_TYPE: u32 = 0;
pub(crate) const NORM_FP8_TENSOR: u32 = 1;
pub(crate) const NORM_FP8_TOKEN: u32 = 2;

/// `SYMM_NORM_SPREAD` (NormArgs::flags, SYMM_ALGO token `spread`): the
/// one-shot LL form's sends spread over every block of the grid (the
/// two-shot form's pieces are NORM_PARTS_SHIFT's).
pub(crate) const NORM_SPREAD: u32 = 1;

/// `SYMM_NORM_PREFETCH` (NormArgs::flags, SYMM_ALGO token `prefetch`): the
/// LL forms prefetch the residual and weight into L1 before waiting on
/// their peers.
pub(crate) const NORM_PREFETCH: u32 = 2;

/// `SYMM_NORM_PARTS_SHIFT`: NormArgs::flags bits 8-15 hold the two-shot LL
/// form's pieces a row (0 or 1: whole rows).
pub(crate) const NORM_PARTS_SHIFT: u32 = 8;

/// `SYMM_NORM_MAX_UNITS`, `SYMM_NORM_MAX_THREADS`: a row is at most
/// 8 x 1024 units of 8 bytes.
pub(crate) const NORM_MAX_UNITS: u64 = 8;
pub(crate) const NORM_MAX_THREADS: u64 = 1024;

/// `SYMM_P2P_MAX_OPS`, `SYMM_P2P_BLOCKS`, `SYMM_P2P_FLAG_WORDS`.
pub(crate) const P2P_MAX_OPS: usize = 16;
pub(crate) const P2P_BLOCKS: u32 = 16;
pub(crate) const P2P_FLAG_WORDS: usize = 4 * P2P_BLOCKS as usize * MAX_RANKS;

/// `SYMM_P2P_CHUNK`, `SYMM_P2P_RING`, `SYMM_P2P_GROUP`, `SYMM_P2P_DIRECT_MIN`,
/// `SYMM_P2P_NO_DIRECT`, `SYMM_P2P_SIZED_DELTA` (words from the fixed
/// kernel's flags to the sized kernel's), `SYMM_P2PS_WORDS`.
pub(crate) const P2P_CHUNK: u64 = 16 << 10;
pub(crate) const P2P_RING: u64 = 256;
/// `SYMM_P2P_RING_MAX`: the most ring slots (`SYMM_P2P_RING_BYTES` = 16
/// MiB), what the flags make room for.
pub(crate) const P2P_RING_MAX: u64 = 1024;
/// `SYMM_P2P_RING_SHIFT`: the sized kernel's mode bits 24-27 hold log2 of
/// the ring's chunk slots (0: `P2P_RING`).
pub(crate) const P2P_RING_SHIFT: u32 = 24;
pub(crate) const P2P_GROUP: u32 = 128;
/// `SYMM_P2P_GROUP_SHIFT`: the sized kernel's mode bits 12-15 hold log2 of
/// its threads per warp group (0: `P2P_GROUP`).
pub(crate) const P2P_GROUP_SHIFT: u32 = 12;
/// `SYMM_P2P_DIRECT_SHIFT`: the sized kernel's mode bits 16-20 hold log2 of
/// the KiB from which a message offers the direct push (0: `P2P_DIRECT_MIN`).
pub(crate) const P2P_DIRECT_SHIFT: u32 = 16;
/// `SYMM_P2P_STRIDE_SHIFT`, `SYMM_P2P_STRIDE_MAX`: the sized kernel's mode
/// bits 21-23 hold log2 of the ring chunks a warp group moves between its
/// flags (0: one).
pub(crate) const P2P_STRIDE_SHIFT: u32 = 21;
pub(crate) const P2P_STRIDE_MAX: u32 = 16;
/// `SYMM_P2P_LL_SHIFT`: the sized kernel's mode bits 28-31 hold log2 of the
/// KiB up to which a message goes as LL packets (0: never).
pub(crate) const P2P_LL_SHIFT: u32 = 28;
/// `SYMM_P2P_PAIRED`: the sized kernel's mode bit 11 (`p2p:pair=1`): each
/// block's first half serves the launch's sends and its second half its
/// receives; an operation's `first_block` / `blocks` count half blocks of
/// its direction.
pub(crate) const P2P_PAIRED: u32 = 2048;
pub(crate) const P2P_DIRECT_MIN: u64 = 1 << 20;
pub(crate) const P2P_NO_DIRECT: u64 = u64::MAX;
/// `SYMM_P2P_SIZE_TAG`: `Status::mine[0]` / `theirs[0]` of a send and a
/// receive that disagree on the size ([1], [2]: bytes, low and high words).
pub(crate) const P2P_SIZE_TAG: u32 = 0xFE00_0000;
/// Direct-push offsets the receiver's descriptor can carry (40 bits, the
/// top byte's 0xff meaning "none"); a buffer further into the heap slot
/// goes through the ring.
pub(crate) const P2P_DIRECT_OFFSET_LIMIT: u64 = 0xff << 32;
pub(crate) const P2P_SIZED_DELTA: usize = 10752;
pub(crate) const P2PS_WORDS: usize = 2 * MAX_RANKS * P2P_RING_MAX as usize + 40 + 14 * MAX_RANKS;

/// `SymmP2POp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2POp {
    pub buf: u64,
    pub bytes: u64,
    pub peer: u32,
    pub is_send: u32,
    /// Sized kernel: this operation's blocks.
    pub first_block: u32,
    pub blocks: u32,
    /// Sized kernel, receive: offset of `buf` in this rank's symmetric heap
    /// slot (the sender may store into it directly), or `P2P_NO_DIRECT`.
    pub heap_offset: u64,
}
const _: () = assert!(std::mem::size_of::<P2POp>() == 40);

impl Default for P2POp {
    fn default() -> Self {
        P2POp { buf: 0, bytes: 0, peer: 0, is_send: 0, first_block: 0, blocks: 0, heap_offset: P2P_NO_DIRECT }
    }
}

/// `SymmP2PArgs`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2PArgs {
    pub wait: WaitCtx,
    pub flags: u64,
    pub peer_flags: [u64; MAX_RANKS],
    pub slots: u64,
    pub peer_slots: [u64; MAX_RANKS],
    pub slot_bytes: u64,
    /// Rank r's symmetric heap slot, as seen here.
    pub heap: [u64; MAX_RANKS],
    pub ops: [P2POp; P2P_MAX_OPS],
    pub nops: u32,
    pub rank: u32,
    pub nranks: u32,
    /// `MODE_CLASSIC`: the fixed kernel's copy loop of before.
    pub mode: u32,
    /// The sized kernel's LL packet area: its offset in every rank's heap
    /// slot, and the bytes of each of its [parity][sender] slots.
    pub ll_offset: u64,
    pub ll_slot: u64,
}
const _: () = assert!(std::mem::size_of::<P2PArgs>() == 32 + 8 + 64 + 8 + 64 + 8 + 64 + 40 * P2P_MAX_OPS + 16 + 16);

// ---- Device-API records ------------------------------------------------------
//
// Users' kernels (include/symmcomm_device.cuh) record into the same status
// block with `op == OpId::Device`: `detail` is `function << 24 | slot` for a
// wait, `function << 24 | argument` for a bad argument; `mine` holds the
// block index, the value waited for and the value seen (low words) and the
// comparison; `theirs` the high words. The numbers are the device header's.

/// Device-API function ids recorded in `symmDevStatus::detail` (top 8
/// bits); the numbers are the device header's and never change.
pub(crate) fn device_function_name(id: u32) -> &'static str {
    match id {
        1 => "symmDevBarrierArrive",
        2 => "symmDevBarrierWait",
        3 => "symmDevSignalSet",
        4 => "symmDevSignalAdd",
        5 => "symmDevSignalWait",
        6 => "symmDevSignalWaitNext",
        7 => "symmDevSignalRead",
        8 => "symmDevLLStore",
        9 => "symmDevLLLoad",
        10 => "symmDevLLBegin",
        11 => "symmDevBlockPutSignal",
        12 => "symmDevPeerPtr",
        _ => "device API function",
    }
}

/// The message of a device-API record (`status.op == SYMM_DEV_STATUS_OP`).
pub(crate) fn device_status_error(s: &Status, timeout_ns: u64) -> Error {
    let func = s.detail >> 24;
    let slot = s.detail & 0x00ff_ffff;
    let name = device_function_name(func);
    let block = s.mine[0];
    let expected = (s.mine[1] as u64) | (s.theirs[0] as u64) << 32;
    let seen = (s.mine[2] as u64) | (s.theirs[1] as u64) << 32;
    let waited = s.waited_ns as f64 / 1e9;
    let what = match func {
        2 => format!(
            "{name}(barrier slot {slot}) in block {block}, waiting for rank {}'s arrival #{expected} (its last was #{seen})",
            s.peer
        ),
        5 => format!(
            "{name}(signal slot {slot} from rank {}, until value {} {expected}) in block {block}; the slot holds {seen}",
            s.peer,
            cmp_name(s.mine[3])
        ),
        6 => format!(
            "{name}(signal slot {slot} from rank {}) in block {block}, waiting for the count to reach {expected}; it is {seen}",
            s.peer
        ),
        9 => format!(
            "{name}(flag {expected}) in block {block}, waiting for rank {}'s packet (its flags read {:#x}, {:#x})",
            s.peer,
            seen & 0xffff_ffff,
            seen >> 32
        ),
        _ => format!("{name}(slot {slot}) in block {block}, waiting for rank {}", s.peer),
    };
    match s.error {
        DEV_TIMEOUT => err!(
            symmTimeout,
            "rank {}: {what}: timed out after {waited:.1} s (SYMM_TIMEOUT={:.1} s); the communicator is unusable, abort it",
            s.rank,
            timeout_ns as f64 / 1e9
        ),
        DEV_ABORTED => err!(symmRemoteError, "rank {}: {what}: stopped because the communicator was aborted", s.rank),
        DEV_INVALID_ARGUMENT => {
            let arg = match slot {
                1 => format!("slot {expected} is out of range (the device communicator reserved {seen})"),
                2 => format!("peer {expected} is out of range for {seen} ranks"),
                3 => "the team does not contain this rank or does not fit the communicator".to_string(),
                4 => format!("pointer {expected:#x} is not 16-byte aligned (LL packets are 16 bytes)"),
                5 => format!("{expected} is not a symmDevSignalOp_t"),
                6 => format!("{expected} is not a symmDevCmp_t"),
                7 => format!("{expected:#x} is not inside this rank's symmetric heap"),
                _ => format!("argument {slot} is invalid"),
            };
            err!(symmInvalidArgument, "rank {}: {name} in block {block}: {arg}; the communicator is unusable", s.rank)
        }
        k => err!(symmInternalError, "unknown device error kind {k} from {name}"),
    }
}

fn cmp_name(c: u32) -> &'static str {
    ["==", "!=", ">=", ">", "<=", "<"].get(c as usize).copied().unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coll_ids_round_trip() {
        for v in 1..=6 {
            assert_eq!(CollId::from_raw(v).unwrap() as u32, v);
        }
        assert!(CollId::from_raw(0).is_none());
    }
}
