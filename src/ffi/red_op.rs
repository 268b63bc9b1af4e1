//! Reduction ops made on a communicator, as NCCL's
//! `ncclRedOpCreatePreMulSum` / `ncclRedOpDestroy`.

use std::ffi::c_void;

use super::{boundary, comm_arg, not_null, types::*};
use crate::coll::premul_sum;
use crate::error::symmResult_t;

/// Make a pre-multiplied sum on `comm` and write its number to `*op`: used
/// with symmAllReduce, symmReduceScatter or symmReduce on `datatype`, the
/// result is the sum over ranks of each rank's own scalar times its input.
/// `scalar` is one `datatype` element: with symmScalarHostImmediate on the
/// host, copied now; with symmScalarDevice in this GPU's memory, read each
/// time a collective runs (so it must outlive them; graph replays see its
/// current value). Served as a scaling pass over the input, then the sum.
#[no_mangle]
pub extern "C" fn symmRedOpCreatePreMulSum(
    op: *mut RawRedOp,
    scalar: *mut c_void,
    datatype: RawDataType,
    residence: RawScalarResidence,
    comm: symmComm_t,
) -> symmResult_t {
    boundary("symmRedOpCreatePreMulSum", comm, || {
        let c = comm_arg(comm)?;
        not_null(op, "op")?;
        let made = premul_sum::create(&c, scalar, datatype, residence)?;
        // SAFETY: checked non-null; written only on success. The header's
        // enum holds any int, as ncclRedOp_t does.
        unsafe { op.write(made) };
        Ok(())
    })
}

/// Forget an op made by symmRedOpCreatePreMulSum. Collectives already
/// enqueued with it are unaffected (their scalar is captured at the call,
/// or is the caller's device memory).
#[no_mangle]
pub extern "C" fn symmRedOpDestroy(op: RawRedOp, comm: symmComm_t) -> symmResult_t {
    boundary("symmRedOpDestroy", comm, || comm_arg(comm)?.red_ops.destroy(op))
}
