//! The 2-D (expert-major) device-count all-to-all-v and its inverse, for
//! mixture-of-experts dispatch and combine: PyTorch's
//! `torch.ops.symm_mem.all_to_all_vdev_2d` and `all_to_all_vdev_2d_offset`.
//! n ranks hold `ne` local experts each; every rank has n x ne blocks.
//! Counts, offsets, capacities and `majorAlign` are in rows of `rowElems`
//! elements (1: elements), as PyTorch counts rows along dim 0.
//!
//! - symmAllToAllvDevice2d (dispatch): `sendSplits[q*ne+e]` rows go to
//!   expert e of rank q, the blocks back to back in sendbuff in that order
//!   (rank-major). Rank r's output is expert-major: for e, for p, the block
//!   from rank p for expert e; each expert's group starts at a multiple of
//!   `majorAlign` rows and at least that long (PyTorch's rule; 0: packed). `outSplitsOffsets[0][e*n+p]`
//!   and `[1][e*n+p]` get each block's count and offset in recvbuff.
//! - symmAllToAllvDevice2dOffset (combine): `inSplitsOffsets[0][e*n+p]`
//!   rows at `inSplitsOffsets[1][e*n+p]` of sendbuff go back from this
//!   rank's expert e to rank p (offsets given, so the dispatch's padding may
//!   stay). Rank p's output is rank-major and packed: for q, for e, the
//!   block from rank q's expert e; `outSplitsOffsets[.][q*ne+e]` get the
//!   counts and offsets (as PyTorch's `all_to_all_vdev_2d_offset`).
//!
//! Both run one kernel (kernels/alltoallv_device.cu) with the 1-D form's
//! structure and checks (src/coll/alltoallv_device.rs, shared): the input
//! in a symmetric or registered buffer (the receivers pull from it), the
//! counts never on the host (CUDA graphs replay with new counts), and
//! counts that cannot be honoured move nothing and leave an asynchronous
//! symmInvalidUsage. n x ne is at most `A2AV_2D_MAX_SPLITS` (1024): each
//! rank's table of 2 x n x ne + 1 words goes through its scratch, and each
//! block keeps the n x ne entries it receives in shared memory.

use std::ffi::c_void;

use cudarc::driver::sys::CUstream;

use super::alltoallv_device::{check_dev_a2a, launch_dev_a2a, DevA2ABuffers};
use crate::comm::Comm;
use crate::cuda::abi::{A2AV2dArgs, A2AV_2D_MAX_SPLITS};
use crate::error::{bail, Result};
use crate::types::RawDataType;

/// One call of either form, as C passes it. `splits`: the dispatch's
/// `sendSplits` (n x ne words) or the combine's `inSplitsOffsets` (2 x n x
/// ne words).
pub struct A2AV2dRequest {
    pub send: *const c_void,
    pub splits: *const i64,
    pub recv: *mut c_void,
    pub recv_capacity: usize,
    pub out_splits_offsets: *mut i64,
    pub local_experts: i64,
    /// The dispatch's `majorAlign`; 0 for the combine.
    pub major_align: i64,
    /// Elements per row: counts, offsets, capacity and alignment count rows.
    pub row_elems: usize,
    pub dtype: RawDataType,
}

/// Which of the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum A2AV2dForm {
    Dispatch,
    Combine,
}

/// Blocks per rank (nranks x localExperts), checked against the limit.
pub(crate) fn splits_per_rank(nranks: usize, local_experts: i64) -> Result<usize> {
    if local_experts < 1 {
        bail!(symmInvalidArgument, "localExperts is {local_experts}; it must be at least 1");
    }
    match (local_experts as u64).checked_mul(nranks as u64) {
        Some(ns) if ns <= A2AV_2D_MAX_SPLITS as u64 => Ok(ns as usize),
        _ => bail!(
            symmInvalidArgument,
            "localExperts is {local_experts}: {nranks} ranks x {local_experts} experts is more than the \
             {A2AV_2D_MAX_SPLITS} blocks per rank the 2-D all-to-all-v supports"
        ),
    }
}

/// Enqueue either form on `stream` (the communicator's context current).
/// Everything the host can check is checked before.
pub fn all_to_all_v_2d(comm: &Comm, stream: CUstream, form: A2AV2dForm, r: &A2AV2dRequest) -> Result<()> {
    let ns = splits_per_rank(comm.nranks, r.local_experts)?;
    if r.major_align < 0 {
        bail!(symmInvalidArgument, "majorAlign is {}; it must be 0 or more (0: packed groups)", r.major_align);
    }
    let (counts, kernel) = match form {
        A2AV2dForm::Dispatch => (("sendSplits", r.splits, ns), c"symm_alltoallv_2d"),
        A2AV2dForm::Combine => (("inSplitsOffsets", r.splits, 2 * ns), c"symm_alltoallv_2d_offset"),
    };
    // The kernel's table goes through the front of each rank's scratch.
    if (2 * ns as u64 + 1) * 8 > comm.coll.half {
        bail!(symmInternalError, "the scratch ({} bytes a half) cannot hold {ns} blocks' counts", comm.coll.half);
    }
    let b = DevA2ABuffers {
        send: r.send,
        recv: r.recv,
        recv_capacity: r.recv_capacity,
        row_elems: r.row_elems,
        dtype: r.dtype,
        counts,
        out: ("outSplitsOffsets", r.out_splits_offsets, 2 * ns),
    };
    let Some(c) = check_dev_a2a(comm, stream, &b)? else {
        return Ok(());
    };
    let mut coll = c.coll;
    // SYMM_CHECK compares the count: ranks must agree on localExperts.
    coll.count = r.local_experts as u64;
    let mut v = A2AV2dArgs {
        coll,
        splits: r.splits as u64,
        out_splits_offsets: r.out_splits_offsets as u64,
        send_capacity: c.send_capacity,
        recv_capacity: r.recv_capacity as u64,
        major_align: if form == A2AV2dForm::Dispatch { r.major_align as u64 } else { 0 },
        experts: r.local_experts as u32,
        pad: 0,
    };
    launch_dev_a2a(comm, stream, kernel, &mut v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_per_rank_are_bounded() {
        assert_eq!(splits_per_rank(8, 4).unwrap(), 32);
        assert_eq!(splits_per_rank(8, 128).unwrap(), A2AV_2D_MAX_SPLITS);
        assert_eq!(splits_per_rank(1, 1024).unwrap(), 1024);
        for (n, ne, says) in [(8, 0, "at least 1"), (2, -3, "at least 1"), (8, 129, "1024 blocks"), (2, i64::MAX, "1024")]
        {
            let e = splits_per_rank(n, ne).unwrap_err();
            assert_eq!(e.code, crate::error::symmResult_t::symmInvalidArgument);
            assert!(e.msg.contains(says), "{e}");
        }
    }
}
