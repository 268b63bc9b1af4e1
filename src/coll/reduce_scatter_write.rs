//! Reduce-scatter by stores only (`SYMM_ALGO=write`, and `auto`'s where
//! defaults.rs `reduce_scatter_write_by_default` says; issue 33):
//! kernels/reduce_scatter_write.cu. Each rank stores its copy of every
//! other rank's block into that owner's scratch; each owner reduces its
//! block locally from its own input and those copies. Peers touch only the
//! scratch, so the input and the output may be any buffer (a plain input
//! is read once, by its own rank, with no separate copy-in pass), in place
//! included.
//!
//! Predicted (tenth session, before building): the pull kernel loads from
//! the peers, and at 3 ranks it reached 0.71-0.88x the faster NCCL column
//! from 16 MiB on 4 x H200 (about 170 GB/s into each GPU, half the 4-rank
//! rate); stores are not bound by loads in flight, and the write-only
//! all-reduce, whose first half this is, runs at 1.00-1.04x NCCL at 3
//! ranks from 64 MiB. So about half of that all-reduce's time: 1.2-1.4x
//! NCCL at 3 ranks from 16 MiB; at 4 ranks on a plain input 1.0-1.1x
//! (from 0.89-0.99x staged); measured: docs/PERFORMANCE.md.

use super::{even_rounds, reduce_kernel, store_only_mode, Call, InputPath, FAMILY_REDUCE_SCATTER_WRITE};
use crate::cuda::abi::{CollArgs, MODE_WRITE};
use crate::error::Result;

/// Launch the kernel for `call` when scratch holds a vector a slot; `None`,
/// with nothing launched, otherwise (the caller goes on to the pull, as
/// every rank does: the choice depends only on the call and the
/// communicator). Only for the opt-in types (the caller checks).
pub(super) fn launch(call: &Call) -> Option<Result<()>> {
    let (mut a, grid) = scratch_slot_args(call)?;
    Some(call.launch(reduce_kernel(FAMILY_REDUCE_SCATTER_WRITE, call.dtype), grid, &mut a))
}

/// The arguments and grid of a kernel that stores into the peers' scratch
/// (this one and allgather_write.rs): rounds of `a.chunk` elements of every
/// block, one slot of that per source rank in a scratch half; `None` when a
/// half holds less than a vector a slot.
pub(super) fn scratch_slot_args(call: &Call) -> Option<(CollArgs, u32)> {
    let n = call.comm.nranks as u64;
    let slot = call.scratch_elems(n);
    if slot == 0 {
        return None;
    }
    let mut a = call.args();
    // Peers read none of this rank's buffers: the token stays 0 (staged),
    // and the protocol bits tell these kernels from the pulls at the first sync.
    a.mode = store_only_mode(call.defaulted, a.mode | MODE_WRITE);
    a.chunk = even_rounds(call.count, slot, call.vec_elems());
    call.note(InputPath::Staged);
    Some((a, call.grid(call.count.min(a.chunk) * call.elem_size() * n)))
}
