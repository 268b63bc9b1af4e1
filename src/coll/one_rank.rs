//! A communicator of one rank: every collective's result is its input (a
//! sum, product, maximum, minimum or average of one value is that value;
//! the one block gathered, scattered, broadcast or exchanged is the rank's
//! own). As NCCL does at one rank, nothing is launched: in place the call
//! enqueues nothing, out of place one device-to-device copy on the caller's
//! stream (a memcpy node under graph capture). A kernel launch costs about
//! 4 µs of host time on the machines measured (docs/PERFORMANCE.md, host
//! tier), which a distributed program run on one GPU would otherwise pay
//! on every call where NCCL pays none.
//!
//! Every check of the call (communicator, stream, buffers, type, op) has
//! run before: a bad argument fails at one rank as it does at many.

use super::{copy_engine, Call};
use crate::error::Result;
use crate::types::symmRedOp_t;

/// `run` on communicators of several ranks, [`copy`] on one.
pub fn or(run: impl FnOnce(&Call) -> Result<()>) -> impl FnOnce(&Call) -> Result<()> {
    move |call| if call.comm.nranks == 1 && identity_over_one_value(call.op) { copy(call) } else { run(call) }
}

/// Whether `op` over a single value is that value. Exhaustive, so that a
/// new op must decide. (A pre-multiplied sum arrives here as a sum of the
/// already scaled input: src/coll/premul_sum.rs.)
fn identity_over_one_value(op: symmRedOp_t) -> bool {
    match op {
        symmRedOp_t::symmSum | symmRedOp_t::symmProd | symmRedOp_t::symmMax | symmRedOp_t::symmMin => true,
        symmRedOp_t::symmAvg => true, // divided by a count of one
    }
}

/// The call's output is its input: copy it unless it is already there.
fn copy(call: &Call) -> Result<()> {
    copy_engine::copy(call, call.recv, call.send, call.count * call.elem_size())
}
