//! symmAllToAllvDevice: all-to-all-v with the send counts in device memory
//! (PyTorch's `all_to_all_vdev`, for mixture-of-experts dispatch, whose
//! counts come from the router on the GPU). Rank p's input holds its block
//! for each rank q back to back (`sendSplits[q]` rows, q in order); rank
//! q's output receives the blocks in rank order, and `outSplitsOffsets`
//! (2 x nranks, device) gets the count received from each rank and the
//! offset where its block starts. Nothing goes through the host: one kernel
//! (kernels/alltoallv_device.cu) exchanges the counts and pulls the blocks
//! from the peers' inputs, so a CUDA graph replays with new counts.
//!
//! Counts, offsets and `recvCapacity` are in rows of `rowElems` elements
//! (PyTorch's rows along dim 0; 1: elements). The input must lie in a
//! symmetric or registered buffer (the receivers read it), as PyTorch
//! requires of `all_to_all_vdev`'s input; the output may be any device
//! memory of `recvCapacity` rows. Counts that do not
//! fit move nothing, leave `outSplitsOffsets` as it was, and record an
//! asynchronous error (`symmInvalidUsage`, the message naming the rank and
//! the size).

use std::ffi::{c_void, CStr};

use cudarc::driver::sys::CUstream;

use super::ranges::check_disjoint;
use super::{CollId, Request};
use crate::comm::Comm;
use crate::cuda::abi::{A2AVDevArgs, CollArgs, COLL_THREADS};
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
    /// Elements per row: the counts, offsets and capacity count rows.
    pub row_elems: usize,
    pub dtype: RawDataType,
}

/// The checks and arguments every device-count all-to-all shares (this
/// form and the 2-D ones, src/coll/alltoallv_2d.rs): the buffers of a call,
/// as C passes them.
pub(crate) struct DevA2ABuffers {
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub recv_capacity: usize,
    /// Elements per row (at least 1): counts, offsets, capacities and the
    /// 2-D form's alignment count rows of this many elements, PyTorch's
    /// rows along dim 0. The kernels take a row as their unit (its bytes in
    /// `elem_size`: they only move bytes), so nothing scales the counts.
    pub row_elems: usize,
    pub dtype: RawDataType,
    /// The counts the call reads: name, pointer, int64 words (device memory).
    /// They may lie in sendbuff's buffer (read before anything moves).
    pub counts: (&'static str, *const i64, usize),
    /// What it writes: name, pointer, int64 words (device memory).
    pub out: (&'static str, *mut i64, usize),
}

/// A checked call: the collective arguments (peer addresses of the inputs,
/// `recv` set, `count` 0, `elem_size` a row's bytes) and sendbuff's
/// capacity in rows.
pub(crate) struct DevA2AChecked {
    pub coll: CollArgs,
    pub send_capacity: u64,
}

/// Everything the host can check of a device-count all-to-all, before
/// anything is enqueued; `None` when the call has nothing to do.
pub(crate) fn check_dev_a2a(comm: &Comm, stream: CUstream, b: &DevA2ABuffers) -> Result<Option<DevA2AChecked>> {
    let Some(dtype) = symmDataType_t::from_raw(b.dtype) else {
        bail!(symmInvalidArgument, "datatype {} is not a symmDataType_t", b.dtype);
    };
    if b.row_elems == 0 {
        bail!(symmInvalidArgument, "rowElems is 0; it must be at least 1 (1: the counts count elements)");
    }
    // A row is the kernels' unit: its bytes go in the 32-bit elem_size.
    let Some(es) = b.row_elems.checked_mul(dtype.size()).filter(|&x| x <= u32::MAX as usize) else {
        bail!(symmInvalidArgument, "rowElems {} x {} bytes is more than 4 GiB a row", b.row_elems, dtype.size());
    };
    let (counts, out) = (b.counts, b.out);
    for (name, p, words) in [(counts.0, counts.1 as usize, counts.2), (out.0, out.1 as usize, out.2)] {
        if p == 0 {
            bail!(symmInvalidArgument, "{name} is NULL (it holds {words} int64 in device memory)");
        }
        if p % 8 != 0 {
            bail!(symmInvalidArgument, "{name} ({p:#x}) is not 8-byte aligned");
        }
    }
    if b.send.is_null() {
        bail!(symmInvalidArgument, "sendbuff is NULL");
    }
    if b.recv.is_null() {
        bail!(symmInvalidArgument, "recvbuff is NULL");
    }
    let Some(recv_bytes) = b.recv_capacity.checked_mul(es).filter(|&x| x <= isize::MAX as usize) else {
        bail!(symmInvalidArgument, "recvCapacity {} rows x {es} bytes overflows", b.recv_capacity);
    };
    let Some(entry) = comm.mem.find(b.send as u64, 1) else {
        bail!(
            symmInvalidArgument,
            "sendbuff ({:p}) is not in a symmetric or registered buffer: the receivers read their blocks from it \
             (allocate it with symmMemAlloc or register it with symmCommRegister)",
            b.send
        );
    };
    let send_capacity = (entry.start + entry.len - b.send as u64) / es as u64;
    let ranges = [
        ("sendbuff", b.send as u64, send_capacity * es as u64),
        ("recvbuff", b.recv as u64, recv_bytes as u64),
        (counts.0, counts.1 as u64, 8 * counts.2 as u64),
        (out.0, out.1 as u64, 8 * out.2 as u64),
    ];
    // The counts may sit in the input's buffer (read before anything moves).
    check_disjoint(&ranges, |x, y, _| x == "sendbuff" && y == counts.0)?;
    comm.check_buffer(counts.1.cast(), 8 * counts.2, counts.0)?;
    comm.check_buffer(out.1.cast_const().cast(), 8 * out.2, out.0)?;
    // The communicator, the stream and both buffers, as for any collective
    // (one element each; the counts are only known on the device).
    let recv_for_checks = if b.recv_capacity == 0 { b.send as *mut c_void } else { b.recv };
    let Some(call) = Request::new(CollId::AllToAll, b.send, recv_for_checks, 1, b.dtype).validate(comm, stream)? else {
        return Ok(None);
    };
    let mut a = call.args();
    if !call.direct(&mut a) {
        bail!(symmInternalError, "sendbuff is in a symmetric or registered buffer but has no peer addresses");
    }
    a.recv = b.recv as u64;
    a.count = 0;
    a.elem_size = es as u32;
    // Ranks must agree on the row, the kernels' unit (a byte offset is
    // counts x row): it joins the token peers compare at the first sync,
    // so a disagreement stops the call instead of moving the wrong bytes.
    a.token = super::layout_token(&[a.token as u64, es as u64]);
    Ok(Some(DevA2AChecked { coll: a, send_capacity }))
}

/// Launch `kernel` (one of kernels/alltoallv_device.cu) with its argument
/// struct, on the same grid on every rank (the block syncs pair blocks by
/// index).
pub(crate) fn launch_dev_a2a<T>(comm: &Comm, stream: CUstream, kernel: &'static CStr, args: &mut T) -> Result<()> {
    let f = comm.device.module().function(kernel)?;
    let mut params = [(args as *mut T).cast::<c_void>()];
    launch::launch(f, LaunchConfig { grid: comm.coll.max_grid, block: COLL_THREADS, shared_mem: 0 }, stream, &mut params)
}

/// Enqueue the all-to-all-v on `stream` (the communicator's context
/// current). Everything the host can check is checked before.
pub fn all_to_all_v_device(comm: &Comm, stream: CUstream, r: &A2AVDevRequest) -> Result<()> {
    let n = comm.nranks;
    let b = DevA2ABuffers {
        send: r.send,
        recv: r.recv,
        recv_capacity: r.recv_capacity,
        row_elems: r.row_elems,
        dtype: r.dtype,
        counts: ("sendSplits", r.splits, n),
        out: ("outSplitsOffsets", r.out_splits_offsets, 2 * n),
    };
    let Some(c) = check_dev_a2a(comm, stream, &b)? else {
        return Ok(());
    };
    let mut v = A2AVDevArgs {
        coll: c.coll,
        splits: r.splits as u64,
        out_splits_offsets: r.out_splits_offsets as u64,
        send_capacity: c.send_capacity,
        recv_capacity: r.recv_capacity as u64,
    };
    launch_dev_a2a(comm, stream, c"symm_alltoallv_device", &mut v)
}
