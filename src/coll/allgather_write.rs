//! All-gather by stores only into scratch (`SYMM_ALGO=write`, tenth session;
//! not a default until measured): kernels/allgather_write.cu. Each rank
//! stores its block into every peer's scratch and its own output; after a
//! sync each rank copies the peers' blocks out of its own scratch. Peers
//! touch only scratch, so any input and output: the staged form of the
//! push (which needs a symmetric or registered recvbuff).
//!
//! Predicted (tenth session, before any GPU run): on a plain recvbuff at
//! 3 ranks, where the pull reached 0.56-0.71x NCCL from 4 MiB on 4 x H200,
//! 0.9-1.1x (stores like the push, plus a local copy out that overlaps the
//! next round's stores); at 4 ranks 1.0-1.05x against the pull's 0.84-0.97x.

use super::Call;
use crate::error::Result;

/// Launch the kernel for `call` when scratch holds a vector a slot; `None`,
/// with nothing launched, otherwise (the caller goes on to the pull, as
/// every rank does: the choice depends only on the call and the
/// communicator).
pub(super) fn launch(call: &Call) -> Option<Result<()>> {
    let (mut a, grid) = super::reduce_scatter_write::scratch_slot_args(call)?;
    Some(call.launch(c"symm_allgather_write", grid, &mut a))
}
