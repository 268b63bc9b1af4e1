//! Fused matmul ops: a GEMM pipelined with an all-gather or a
//! reduce-scatter (src/fused). Checks run in this order, so that each
//! answer is the same with or without a GPU: the descriptor and plain
//! arguments, then whether cuBLASLt can be loaded (symmNotSupported naming
//! it), then the communicator and the buffers.

use std::ffi::c_void;

use super::{boundary, comm_arg, not_null, types::*};
use crate::error::{bail, symmResult_t, Result};
use crate::fused::{self, allgather_matmul as ag, desc, matmul_reduce_scatter as rs, state};
use crate::group;

pub use crate::fused::desc::{symmMatmulDesc_t, symmScaleMode_t, RawScaleMode};

/// Fill `desc` with the defaults for `dtype` inputs: structSize, A, B and
/// C of type `dtype` (fp8 inputs: C bf16), transB 0, packed leading
/// dimensions, beta 0, no scales, no aGathered, default chunks.
#[no_mangle]
pub extern "C" fn symmMatmulDescInit(desc: *mut symmMatmulDesc_t, dtype: RawDataType) -> symmResult_t {
    boundary("symmMatmulDescInit", std::ptr::null_mut(), || {
        not_null(desc, "desc")?;
        let d = desc::init(dtype)?;
        // SAFETY: checked non-null; the caller passes a whole descriptor.
        unsafe { desc.write(d) };
        Ok(())
    })
}

/// Read the caller's descriptor (only its first structSize bytes may be ours).
fn read_desc(d: *const symmMatmulDesc_t) -> Result<symmMatmulDesc_t> {
    not_null(d, "desc")?;
    // SAFETY: non-null; structSize is the first field of every version.
    let size = unsafe { std::ptr::read_unaligned(d.cast::<usize>()) };
    if size < std::mem::size_of::<symmMatmulDesc_t>() {
        bail!(
            symmInvalidArgument,
            "desc->structSize is {size} but sizeof(symmMatmulDesc_t) is {}; fill the descriptor with symmMatmulDescInit",
            std::mem::size_of::<symmMatmulDesc_t>()
        );
    }
    // SAFETY: at least our size is readable (the caller says so).
    Ok(unsafe { std::ptr::read_unaligned(d) })
}

/// Pointers carried to the thread of a deferred (grouped) first call.
#[derive(Clone, Copy)]
struct Raw(u64);
// SAFETY: device addresses and a stream handle, only passed to CUDA.
unsafe impl Send for Raw {}

/// Run `enqueue` now, or at symmGroupEnd when inside a group and the
/// communicator's fused state does not exist yet or must grow its
/// workspace to the call's `want` bytes (both are collective).
fn run_or_defer(
    api: &'static str,
    comm: symmComm_t,
    stream: *mut CUstream_st,
    want: usize,
    enqueue: impl FnOnce(&crate::comm::Comm, &mut state::State) -> Result<()> + Send + 'static,
) -> Result<()> {
    let c = comm_arg(comm)?;
    let stream = Raw(stream as u64);
    let run = {
        let c = c.clone();
        move || -> Result<()> {
            let _cur = c.device.make_current()?;
            let mut g = state::lock(&c, stream.0 as _, want)?;
            enqueue(&c, g.get())
        }
    };
    if group::active() && !state::ready(&c, want, stream.0 as _)? {
        group::defer(c, api, Box::new(run));
        return Ok(());
    }
    run()
}

/// C ((nranks * mShard) x n) = all_gather(aShard (mShard x k)) * B, on
/// `stream`. B is k x n (desc->transB 0) or n x k (1). Collective: every
/// rank calls it with the same shapes and descriptor fields. See README
/// "Fused matmul ops".
#[no_mangle]
pub extern "C" fn symmAllGatherMatmul(
    aShard: *const c_void,
    b: *const c_void,
    c: *mut c_void,
    mShard: usize,
    n: usize,
    k: usize,
    desc: *const symmMatmulDesc_t,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    boundary("symmAllGatherMatmul", comm, || {
        let d = read_desc(desc)?;
        let mm = desc::check(&d, n, k, true)?;
        args([(aShard, "aShard"), (b, "b"), (c as *const c_void, "c")], k, comm)?;
        fused::blaslt::library()?;
        let call = ag::Call { a: aShard as u64, b: b as u64, c: c as u64, m_shard: mShard, n, k, mm, stream: stream.cast() };
        let want = {
            let cc = comm_arg(comm)?;
            let _cur = cc.device.make_current()?;
            if !ag::check(&cc, &call)? {
                return Ok(());
            }
            ag::workspace_want(&cc, &call)
        };
        run_or_defer("symmAllGatherMatmul", comm, stream, want, move |cc, st| ag::run(cc, st, &call))
    })
}

/// cShard ((m / nranks) x n) = rows [rank * m / nranks, ...) of the sum over
/// ranks of A (m x kShard) * B (kShard x n, or n x kShard with transB), on
/// `stream`. Collective, like symmAllGatherMatmul.
#[no_mangle]
pub extern "C" fn symmMatmulReduceScatter(
    a: *const c_void,
    b: *const c_void,
    cShard: *mut c_void,
    m: usize,
    n: usize,
    kShard: usize,
    desc: *const symmMatmulDesc_t,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    boundary("symmMatmulReduceScatter", comm, || {
        let d = read_desc(desc)?;
        let mm = desc::check(&d, n, kShard, false)?;
        args([(a, "a"), (b, "b"), (cShard as *const c_void, "cShard")], kShard, comm)?;
        fused::blaslt::library()?;
        let call = rs::Call { a: a as u64, b: b as u64, c: cShard as u64, m, n, k_shard: kShard, mm, stream: stream.cast() };
        let want = {
            let cc = comm_arg(comm)?;
            let _cur = cc.device.make_current()?;
            if !rs::check(&cc, &call)? {
                return Ok(());
            }
            rs::workspace_want(&cc, &call)
        };
        run_or_defer("symmMatmulReduceScatter", comm, stream, want, move |cc, st| rs::run(cc, st, &call))
    })
}

/// The checks that need neither the communicator nor cuBLASLt.
fn args(ptrs: [(*const c_void, &str); 3], k: usize, comm: symmComm_t) -> Result<()> {
    if comm.is_null() {
        bail!(symmInvalidArgument, "comm is NULL");
    }
    for (p, name) in ptrs {
        not_null(p, name)?;
    }
    if k == 0 {
        bail!(symmInvalidArgument, "the inner dimension k is 0");
    }
    Ok(())
}
