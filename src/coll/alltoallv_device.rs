//! symmAllToAllvDevice: all-to-all-v with the send counts in device memory
//! (PyTorch's `all_to_all_vdev`, for mixture-of-experts dispatch, whose
//! counts come from the router on the GPU). Rank p's input holds its block
//! for each rank q back to back (`sendSplits[q]` elements, q in order); rank
//! q's output receives the blocks in rank order, and `outSplitsOffsets`
//! (2 x nranks, device) gets the count received from each rank and the
//! offset where its block starts. Nothing goes through the host: one kernel
//! (kernels/alltoallv_device.cu) exchanges the counts and pulls the blocks
//! from the peers' inputs, so a CUDA graph replays with new counts.
//!
//! The input must lie in a symmetric or registered buffer (the receivers
//! read it), as PyTorch requires of `all_to_all_vdev`'s input; the output
//! may be any device memory of `recvCapacity` elements. Counts that do not
//! fit move nothing and record an asynchronous error (`symmInvalidUsage`,
//! the message naming the rank and the size).

use std::ffi::c_void;

use cudarc::driver::sys::CUstream;

use super::ranges::check_disjoint;
use super::{CollId, Request};
use crate::comm::Comm;
use crate::cuda::abi::{A2AVDevArgs, COLL_THREADS};
use crate::cuda::launch::{self, LaunchConfig};
use crate::error::{bail, Result};
use crate::types::{symmDataType_t, RawDataType};

/// The arguments of one call, as C passes them.
pub struct A2AVDevRequest {
    pub send: *const c_void,
    pub splits: *const i64,
    pub recv: *mut c_void,
    pub recv_capacity: usize,
    pub out_splits_offsets: *mut i64,
    pub dtype: RawDataType,
}

/// Enqueue the all-to-all-v on `stream` (the communicator's context
/// current). Everything the host can check is checked before.
pub fn all_to_all_v_device(comm: &Comm, stream: CUstream, r: &A2AVDevRequest) -> Result<()> {
    let Some(dtype) = symmDataType_t::from_raw(r.dtype) else {
        bail!(symmInvalidArgument, "datatype {} is not a symmDataType_t", r.dtype);
    };
    let (n, es) = (comm.nranks, dtype.size());
    for (name, p) in [("sendSplits", r.splits as usize), ("outSplitsOffsets", r.out_splits_offsets as usize)] {
        if p == 0 {
            bail!(symmInvalidArgument, "{name} is NULL (it holds {} int64 in device memory)", if name == "sendSplits" { n } else { 2 * n });
        }
        if p % 8 != 0 {
            bail!(symmInvalidArgument, "{name} ({p:#x}) is not 8-byte aligned");
        }
    }
    if r.send.is_null() {
        bail!(symmInvalidArgument, "sendbuff is NULL");
    }
    if r.recv.is_null() {
        bail!(symmInvalidArgument, "recvbuff is NULL");
    }
    let Some(recv_bytes) = r.recv_capacity.checked_mul(es).filter(|&b| b <= isize::MAX as usize) else {
        bail!(symmInvalidArgument, "recvCapacity {} x {es} bytes overflows", r.recv_capacity);
    };
    let Some(entry) = comm.mem.find(r.send as u64, 1) else {
        bail!(
            symmInvalidArgument,
            "sendbuff ({:p}) is not in a symmetric or registered buffer: the receivers read their blocks from it \
             (allocate it with symmMemAlloc or register it with symmCommRegister)",
            r.send
        );
    };
    let send_capacity = (entry.start + entry.len - r.send as u64) / es as u64;
    let ranges = [
        ("sendbuff", r.send as u64, send_capacity * es as u64),
        ("recvbuff", r.recv as u64, recv_bytes as u64),
        ("sendSplits", r.splits as u64, 8 * n as u64),
        ("outSplitsOffsets", r.out_splits_offsets as u64, 16 * n as u64),
    ];
    // The counts may sit in the input's buffer (read before anything moves).
    check_disjoint(&ranges, |a, b, _| a == "sendbuff" && b == "sendSplits")?;
    comm.check_buffer(r.splits.cast(), 8 * n, "sendSplits")?;
    comm.check_buffer(r.out_splits_offsets.cast(), 16 * n, "outSplitsOffsets")?;
    // The communicator, the stream and both buffers, as for any collective
    // (one element each; the counts are only known on the device).
    let recv_for_checks = if r.recv_capacity == 0 { r.send as *mut c_void } else { r.recv };
    let Some(call) = Request::new(CollId::AllToAll, r.send, recv_for_checks, 1, r.dtype).validate(comm, stream)? else {
        return Ok(());
    };
    let mut a = call.args();
    if !call.direct(&mut a) {
        bail!(symmInternalError, "sendbuff is in a symmetric or registered buffer but has no peer addresses");
    }
    a.recv = r.recv as u64;
    a.count = 0;
    let mut v = A2AVDevArgs {
        coll: a,
        splits: r.splits as u64,
        out_splits_offsets: r.out_splits_offsets as u64,
        send_capacity,
        recv_capacity: r.recv_capacity as u64,
    };
    // The same grid on every rank (the block syncs pair blocks by index).
    let grid = comm.coll.max_grid;
    let f = comm.device.module().function(c"symm_alltoallv_device")?;
    let mut params = [(&mut v as *mut A2AVDevArgs).cast::<c_void>()];
    launch::launch(f, LaunchConfig { grid, block: COLL_THREADS, shared_mem: 0 }, stream, &mut params)
}
