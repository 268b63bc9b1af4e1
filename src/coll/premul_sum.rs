//! NCCL's pre-multiplied sum (`ncclRedOpCreatePreMulSum`) on the
//! collectives that reduce: all-reduce, reduce-scatter and reduce compute
//! the sum over ranks of s_r · x_r, each rank with its own scalar s_r (FSDP2
//! reduce-scatters gradients this way with s = 1/factor; nccl-tests' `-o
//! all` gives every rank another scalar). A scale after the sum is wrong
//! whenever the scalars differ, so each rank scales its own input first.
//!
//! Two steps on the caller's stream: a kernel (kernels/premul_sum.cu)
//! writes the scaled input, then the sum collective runs on it. Where the
//! output can hold the input (all-reduce; reduce on its root) the scaled
//! copy goes there and the sum runs in place. Otherwise (reduce-scatter's
//! larger input; reduce off the root) the copy is a stream-ordered
//! allocation (cuMemAllocAsync, freed on the stream after the sum: memory
//! nodes under graph capture). The sum treats every buffer as plain memory
//! (staged through scratch): the copies are in memory of different kinds on
//! different ranks (a symmetric output here, an allocation there), and
//! peers may only read each other's input in place when all agree.
//! Against NCCL, which applies the scalar as its kernels load, this costs
//! one extra pass over the input and the zero-copy paths; folding the
//! scalar into each kernel family waits for a measurement that says it
//! matters.

use std::ffi::c_void;

use cudarc::driver::sys::CUdeviceptr;

use super::{reduce_kernel, Call, CollId, FAMILY_PREMUL_SCALE};
use crate::comm::red_ops::{PreMulSum, Scalar};
use crate::comm::Comm;
use crate::cuda::cu;
use crate::cuda::launch::{self, LaunchConfig};
use crate::error::{bail, Error, Result};
use crate::types::{symmDataType_t, symmRedOp_t, symmScalarResidence_t, RawDataType, RawRedOp, RawScalarResidence};

const BLOCK: u32 = 256;

/// `symmRedOpCreatePreMulSum`: check the scalar and keep the op on `comm`.
/// A host scalar is copied now; a device scalar is read by every
/// collective that uses the op, when it runs.
pub fn create(comm: &Comm, scalar: *const c_void, dtype: RawDataType, residence: RawScalarResidence) -> Result<RawRedOp> {
    let Some(dtype) = symmDataType_t::from_raw(dtype) else {
        bail!(symmInvalidArgument, "datatype {dtype} is not a symmDataType_t (0..{})", symmDataType_t::ALL.len() - 1);
    };
    if scalar.is_null() {
        bail!(symmInvalidArgument, "scalar is NULL");
    }
    let size = dtype.size();
    let _cur = comm.device.make_current()?;
    let scalar = match residence {
        r if r == symmScalarResidence_t::symmScalarHostImmediate as RawScalarResidence => {
            if !launch::host_readable(scalar) {
                bail!(symmInvalidArgument, "scalar ({scalar:p}) is device memory; pass it with symmScalarDevice");
            }
            let mut bytes = [0u8; 8];
            // SAFETY: one element of `dtype` at `scalar`, readable on the
            // host (checked above), is the caller's contract, as NCCL's.
            unsafe { std::ptr::copy_nonoverlapping(scalar.cast::<u8>(), bytes.as_mut_ptr(), size) };
            Scalar::Immediate(u64::from_le_bytes(bytes))
        }
        r if r == symmScalarResidence_t::symmScalarDevice as RawScalarResidence => {
            launch::check_device_buffer(&comm.device, scalar, size, "scalar")?;
            if !(scalar as usize).is_multiple_of(size) {
                bail!(symmInvalidArgument, "scalar ({scalar:p}) is not aligned to its type's {size} bytes");
            }
            Scalar::Device(scalar as u64)
        }
        r => bail!(symmInvalidArgument, "residence {r} is not a symmScalarResidence_t (0..1)"),
    };
    comm.red_ops.create(PreMulSum { dtype, scalar })
}

/// The op of a call of `dtype`: a built-in op, or a pre-multiplied sum
/// made on `comm` for that type (the call is then a sum, with the scalar).
pub(super) fn resolve(comm: &Comm, raw: RawRedOp, dtype: symmDataType_t) -> Result<(symmRedOp_t, Option<Scalar>)> {
    if let Some(op) = symmRedOp_t::from_raw(raw) {
        return Ok((op, None));
    }
    match comm.red_ops.get(raw) {
        Some(p) if p.dtype == dtype => Ok((symmRedOp_t::symmSum, Some(p.scalar))),
        Some(p) => bail!(symmInvalidArgument, "op {raw} was created for {:?}, but the call's datatype is {dtype:?}", p.dtype),
        None => bail!(
            symmInvalidArgument,
            "op {raw} is not a symmRedOp_t (0..{}) nor a live op created on this communicator",
            symmRedOp_t::ALL.len() - 1
        ),
    }
}

/// Run `sum` (the collective) on this rank's input scaled by its scalar;
/// a call without one goes to `sum` as it is.
pub fn run(call: &Call, sum: impl FnOnce(&Call) -> Result<()>) -> Result<()> {
    let Some(scalar) = call.premul else { return sum(call) };
    let in_output = call.coll == CollId::AllReduce || (call.coll == CollId::Reduce && call.comm.rank == call.root);
    if in_output {
        scale(call, call.recv, call.send, call.count, scalar)?;
        return sum(&Call { send: call.recv, send_buf: None, recv_buf: None, premul: None, ..*call });
    }
    let elems = match call.coll {
        CollId::ReduceScatter => call.count * call.comm.nranks as u64,
        _ => call.count,
    };
    let mut copy: CUdeviceptr = 0;
    cu!(cuMemAllocAsync(&mut copy, (elems * call.elem_size()) as usize, call.stream)).map_err(Error::from)?;
    let result = scale(call, copy, call.send, elems, scalar)
        .and_then(|()| sum(&Call { send: copy, send_buf: None, recv_buf: None, premul: None, ..*call }));
    // Freed on the stream after the sum, whether or not it was enqueued.
    let freed = cu!(cuMemFreeAsync(copy, call.stream)).map_err(Error::from);
    result.and(freed)
}

/// `dst[i] = scalar * src[i]` for `count` elements of the call's type.
fn scale(call: &Call, dst: u64, src: u64, count: u64, scalar: Scalar) -> Result<()> {
    let dev = &call.comm.device;
    let (bits, at) = match scalar {
        Scalar::Immediate(bits) => (bits, 0),
        Scalar::Device(at) => (0, at),
    };
    let grid = count.div_ceil(call.vec_elems()).div_ceil(BLOCK as u64).clamp(1, dev.sm_count as u64 * 4) as u32;
    let cfg = LaunchConfig { grid, block: BLOCK, shared_mem: 0 };
    let f = dev.module().function(reduce_kernel(FAMILY_PREMUL_SCALE, call.dtype))?;
    let mut params = [dst, src, count, bits, at];
    let mut ptrs = params.each_mut().map(|p| (p as *mut u64).cast::<c_void>());
    launch::launch(f, cfg, call.stream, &mut ptrs)
}
