//! Collectives and point-to-point, with NCCL's signatures and semantics:
//! counts in elements, in place when sendbuff == recvbuff, enqueued on
//! `stream`. Every argument is checked before anything is enqueued.

use std::ffi::{c_int, c_void};

use super::{boundary, comm_arg, types::*};
use crate::coll::{self, one_rank, Blocks, CollId, Request};
use crate::error::symmResult_t;
use crate::group;

fn collective(
    api: &'static str,
    comm: symmComm_t,
    stream: *mut CUstream_st,
    req: Request,
    run: impl FnOnce(&coll::Call) -> crate::error::Result<()>,
) -> symmResult_t {
    boundary(api, comm, || {
        let c = comm_arg(comm)?;
        // Current for the checks and the launch (one switch per call).
        let _cur = c.device.make_current()?;
        match req.validate(&c, stream.cast())? {
            // A pre-multiplied sum's op scales the input, then `run` sums.
            Some(call) => coll::premul_sum::run(&call, run),
            None => Ok(()),
        }
    })
}

/// recvbuff = op over ranks of sendbuff (count elements).
#[no_mangle]
pub extern "C" fn symmAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: RawDataType,
    op: RawRedOp,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = Request::new(CollId::AllReduce, sendbuff, recvbuff, count, datatype).op(op);
    collective("symmAllReduce", comm, stream, req, one_rank::or(coll::allreduce::all_reduce))
}

/// All-reduce, residual add and RMSNorm in one call, as a tensor-parallel
/// layer ends at inference: `residualOut = allreduce(input) + residual`,
/// `out = residualOut / sqrt(mean(residualOut^2) + eps) * weight`, per row
/// of `hidden` elements (`tokens` rows; `weight` has `hidden`), fp32
/// arithmetic, symmBfloat16, symmFloat16 or symmFloat32. Every rank gets
/// the whole output. `out` may be `input` and `residualOut` may be
/// `residual`; nothing else may overlap. Every pointer 16-byte aligned,
/// rows a multiple of 16 bytes, at most 64 KiB. `residual` is expected to
/// be the same on every rank, as tensor parallelism keeps it: the forms
/// where a rank owns rows (the two-shot LL form, by default at 4 ranks;
/// above the LL forms the form by stores) add it on the rank that owns the
/// row and copy the result to the others.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn symmAllReduceAddRMSNorm(
    input: *const c_void,
    residual: *const c_void,
    weight: *const c_void,
    out: *mut c_void,
    residualOut: *mut c_void,
    tokens: usize,
    hidden: usize,
    eps: f32,
    datatype: RawDataType,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let output = coll::allreduce_norm::NormOutput::SameType;
    let req = coll::allreduce_norm::NormRequest { input, residual, weight, out, residual_out: residualOut, tokens, hidden, eps, dtype: datatype, output };
    fused_norm("symmAllReduceAddRMSNorm", comm, stream, &req)
}

/// Both fused-norm exports: the communicator, its context, the op.
fn fused_norm(api: &'static str, comm: symmComm_t, stream: *mut CUstream_st, req: &coll::allreduce_norm::NormRequest) -> symmResult_t {
    boundary(api, comm, || {
        let c = comm_arg(comm)?;
        let _cur = c.device.make_current()?;
        coll::allreduce_norm::all_reduce_add_rms_norm(&c, stream.cast(), req)
    })
}

/// symmAllReduceAddRMSNorm with `out` in fp8 e4m3 (one byte an element),
/// for the fp8 GEMM that follows: with `perTokenScales` 0, `out = y /
/// scales[0]` (a device float the caller gives: a static per-tensor scale);
/// otherwise the call writes `scales[t] = max(max|y_t| / 448, 1/(448*512))`
/// for each row t and `out = y_t / scales[t]` (dynamic per-token scales, as
/// scaled_mm consumes them). Saturated to +-448. `out` may not be `input`;
/// above the LL limit the call uses `input` as its workspace (its contents
/// afterwards are the all-reduced sums). `scales` 4-byte aligned, device
/// memory.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn symmAllReduceAddRMSNormFp8(
    input: *const c_void,
    residual: *const c_void,
    weight: *const c_void,
    out: *mut c_void,
    residualOut: *mut c_void,
    scales: *mut f32,
    perTokenScales: c_int,
    tokens: usize,
    hidden: usize,
    eps: f32,
    datatype: RawDataType,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    use coll::allreduce_norm::NormOutput;
    let output = if perTokenScales != 0 { NormOutput::Fp8Token(scales) } else { NormOutput::Fp8Tensor(scales) };
    let req = coll::allreduce_norm::NormRequest { input, residual, weight, out, residual_out: residualOut, tokens, hidden, eps, dtype: datatype, output };
    fused_norm("symmAllReduceAddRMSNormFp8", comm, stream, &req)
}

/// Block r (sendcount elements) of every rank's recvbuff = rank r's sendbuff.
#[no_mangle]
pub extern "C" fn symmAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: RawDataType,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = Request::new(CollId::AllGather, sendbuff, recvbuff, sendcount, datatype).blocks(Blocks::One, Blocks::PerRank);
    collective("symmAllGather", comm, stream, req, one_rank::or(coll::allgather::all_gather))
}

/// All-gather that also reports progress: `flags` is a device array of
/// nranks * ceil(sendcount / chunkCount) words, zero before the call; once
/// chunk c (chunkCount elements) of rank r's block is in recvbuff, flag
/// r * ceil(sendcount / chunkCount) + c is set to 1 (release, system scope),
/// so a kernel on another stream can consume chunks as they arrive.
#[no_mangle]
pub extern "C" fn symmAllGatherWithProgress(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: RawDataType,
    flags: *mut u32,
    chunkCount: usize,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = Request::new(CollId::AllGather, sendbuff, recvbuff, sendcount, datatype).blocks(Blocks::One, Blocks::PerRank);
    collective("symmAllGatherWithProgress", comm, stream, req, |call| {
        if chunkCount == 0 {
            crate::error::bail!(symmInvalidArgument, "chunkCount is 0");
        }
        if flags.is_null() {
            crate::error::bail!(symmInvalidArgument, "flags is NULL");
        }
        if !(flags as usize).is_multiple_of(4) {
            crate::error::bail!(symmInvalidArgument, "flags ({flags:p}) is not 4-byte aligned");
        }
        coll::allgather::all_gather_progress(call, flags as u64, chunkCount as u64)
    })
}

/// recvbuff (recvcount elements) = op over ranks of block `rank` of sendbuff.
#[no_mangle]
pub extern "C" fn symmReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: RawDataType,
    op: RawRedOp,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = Request::new(CollId::ReduceScatter, sendbuff, recvbuff, recvcount, datatype).op(op).blocks(Blocks::PerRank, Blocks::One);
    collective("symmReduceScatter", comm, stream, req, one_rank::or(coll::reduce_scatter::reduce_scatter))
}

/// Every rank's recvbuff = root's sendbuff (sendbuff is only read on root).
#[no_mangle]
pub extern "C" fn symmBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: RawDataType,
    root: c_int,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = Request::new(CollId::Broadcast, sendbuff, recvbuff, count, datatype).root(root).blocks(Blocks::RootOnly, Blocks::One);
    collective("symmBroadcast", comm, stream, req, one_rank::or(coll::broadcast::broadcast))
}

/// root's recvbuff = op over ranks of sendbuff (recvbuff is only written on root).
#[no_mangle]
pub extern "C" fn symmReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: RawDataType,
    op: RawRedOp,
    root: c_int,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = Request::new(CollId::Reduce, sendbuff, recvbuff, count, datatype).op(op).root(root).blocks(Blocks::One, Blocks::RootOnly);
    collective("symmReduce", comm, stream, req, one_rank::or(coll::reduce::reduce))
}

/// Equal-block all-to-all: block r (count elements) of recvbuff = block
/// `rank` of rank r's sendbuff.
#[no_mangle]
pub extern "C" fn symmAllToAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: RawDataType,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = Request::new(CollId::AllToAll, sendbuff, recvbuff, count, datatype).blocks(Blocks::PerRank, Blocks::PerRank);
    collective("symmAllToAll", comm, stream, req, one_rank::or(coll::alltoall::all_to_all))
}

/// All-to-all with a count and a displacement per peer, in elements (the
/// arguments of MPI_Alltoallv and RCCL's ncclAllToAllv): sendcounts[p]
/// elements at sendbuff + sdispls[p] go to rank p, which receives them at
/// its recvbuff + rdispls[this rank], recvcounts[this rank] being that same
/// count. Each array has one entry per rank; zero counts move nothing.
/// Out of place only; receive blocks must not overlap. The counts are on the
/// host; nothing synchronizes. Enqueued at once, inside symmGroupStart/End
/// too, as the collectives are.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn symmAllToAllv(
    sendbuff: *const c_void,
    sendcounts: *const usize,
    sdispls: *const usize,
    recvbuff: *mut c_void,
    recvcounts: *const usize,
    rdispls: *const usize,
    datatype: RawDataType,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    boundary("symmAllToAllv", comm, || {
        let c = comm_arg(comm)?;
        let n = c.nranks;
        let array = |p: *const usize, name: &str| -> crate::error::Result<&[usize]> {
            if p.is_null() {
                crate::error::bail!(symmInvalidArgument, "{name} is NULL (it needs one entry per rank, {n})");
            }
            // SAFETY: the caller passes nranks entries (documented); checked non-null.
            Ok(unsafe { std::slice::from_raw_parts(p, n) })
        };
        let (sc, sd) = (array(sendcounts, "sendcounts")?, array(sdispls, "sdispls")?);
        let (rc, rd) = (array(recvcounts, "recvcounts")?, array(rdispls, "rdispls")?);
        coll::alltoallv::all_to_all_v(&c, sendbuff, sc, sd, recvbuff, rc, rd, datatype, stream.cast())
    })
}

/// All-to-all-v with the send counts in device memory (PyTorch's
/// all_to_all_vdev): `sendSplits` (nranks int64, device) gives the rows
/// for each rank, whose blocks lie back to back in sendbuff, rank order;
/// the blocks received land back to back in recvbuff in rank order, and
/// `outSplitsOffsets` (2 x nranks int64, device) gets the rows received
/// from each rank, then each block's offset in recvbuff (rows). A row is
/// `rowElems` elements of `datatype` (PyTorch's rows along dim 0, e.g. the
/// hidden size; 1: the counts count elements). sendbuff must be in a
/// symmetric or registered buffer (the receivers read it); recvbuff holds
/// `recvCapacity` rows. Nothing crosses the host: CUDA graphs replay
/// with new counts. Counts that do not fit move nothing, leave
/// outSplitsOffsets as it was, and leave an asynchronous error
/// (symmInvalidUsage) naming the rank and the size.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn symmAllToAllvDevice(
    sendbuff: *const c_void,
    sendSplits: *const i64,
    recvbuff: *mut c_void,
    recvCapacity: usize,
    outSplitsOffsets: *mut i64,
    rowElems: usize,
    datatype: RawDataType,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = coll::alltoallv_device::A2AVDevRequest {
        send: sendbuff,
        splits: sendSplits,
        recv: recvbuff,
        recv_capacity: recvCapacity,
        out_splits_offsets: outSplitsOffsets,
        row_elems: rowElems,
        dtype: datatype,
    };
    boundary("symmAllToAllvDevice", comm, || {
        let c = comm_arg(comm)?;
        let _cur = c.device.make_current()?;
        coll::alltoallv_device::all_to_all_v_device(&c, stream.cast(), &req)
    })
}

/// The 2-D all-to-all-v with the counts in device memory, expert-major
/// (PyTorch's all_to_all_vdev_2d; mixture-of-experts dispatch). With n
/// ranks and `localExperts` (ne) experts on each, `sendSplits` (n*ne int64,
/// device) gives the rows (`rowElems` elements each; 1: elements) for
/// expert e of rank q at [q*ne+e], the blocks
/// back to back in sendbuff in that order (rank-major). Each rank receives
/// expert-major: for e in 0..ne, for p in 0..n, the block from rank p for
/// its expert e, back to back, each expert's group starting at a multiple
/// of `majorAlign` rows and, as in PyTorch, at least `majorAlign`
/// long, also when the expert receives nothing (0: packed, no alignment;
/// the padding is not written). `outSplitsOffsets` (2 x n*ne int64,
/// device) gets, at [e*n+p], the count received (row 0) and its offset in
/// recvbuff (row 1); it is written only when the call moves its data.
/// n*ne is at most 1024; sendbuff
/// must be in a symmetric or registered buffer (the receivers read it),
/// recvbuff holds `recvCapacity` rows. Nothing crosses the host: CUDA
/// graphs replay with new counts. Counts that do not fit move nothing and
/// leave an asynchronous error (symmInvalidUsage): on the rank whose output
/// is too small, or on every rank when a rank's counts are negative or run
/// past its sendbuff.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn symmAllToAllvDevice2d(
    sendbuff: *const c_void,
    sendSplits: *const i64,
    recvbuff: *mut c_void,
    recvCapacity: usize,
    outSplitsOffsets: *mut i64,
    localExperts: i64,
    majorAlign: i64,
    rowElems: usize,
    datatype: RawDataType,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = coll::alltoallv_2d::A2AV2dRequest {
        send: sendbuff,
        splits: sendSplits,
        recv: recvbuff,
        recv_capacity: recvCapacity,
        out_splits_offsets: outSplitsOffsets,
        local_experts: localExperts,
        major_align: majorAlign,
        row_elems: rowElems,
        dtype: datatype,
    };
    all_to_all_v_2d("symmAllToAllvDevice2d", comm, stream, coll::alltoallv_2d::A2AV2dForm::Dispatch, &req)
}

/// The inverse of symmAllToAllvDevice2d (PyTorch's
/// all_to_all_vdev_2d_offset; mixture-of-experts combine). `inSplitsOffsets`
/// (2 x n*ne int64, device) is indexed expert-major, [e*n+p], like the
/// dispatch's output: row 0 the rows (`rowElems` elements each) this rank (owner of its local
/// expert e) sends back to rank p, row 1 where that block starts in
/// sendbuff (any offsets, so the dispatch's padding may stay). Each rank
/// receives rank-major, packed: for q in 0..n, for e in 0..ne, the block
/// from rank q's expert e; `outSplitsOffsets` (2 x n*ne int64, device) gets
/// at [q*ne+e] the count received (row 0) and its offset in recvbuff (row
/// 1), as PyTorch's; it is written only when the call moves its data.
/// After a dispatch, passing its outSplitsOffsets (and its output, or a
/// buffer laid out the same) returns every element to where it came from.
/// n*ne is at most 1024; sendbuff in a symmetric or registered buffer.
/// Nothing crosses the host. A negative count or offset, or a block past
/// the end of a rank's sendbuff, moves nothing and leaves an asynchronous
/// error (symmInvalidUsage) on every rank; more than `recvCapacity`
/// rows, on the rank that receives them.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn symmAllToAllvDevice2dOffset(
    sendbuff: *const c_void,
    inSplitsOffsets: *const i64,
    recvbuff: *mut c_void,
    recvCapacity: usize,
    outSplitsOffsets: *mut i64,
    localExperts: i64,
    rowElems: usize,
    datatype: RawDataType,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    let req = coll::alltoallv_2d::A2AV2dRequest {
        send: sendbuff,
        splits: inSplitsOffsets,
        recv: recvbuff,
        recv_capacity: recvCapacity,
        out_splits_offsets: outSplitsOffsets,
        local_experts: localExperts,
        major_align: 0,
        row_elems: rowElems,
        dtype: datatype,
    };
    all_to_all_v_2d("symmAllToAllvDevice2dOffset", comm, stream, coll::alltoallv_2d::A2AV2dForm::Combine, &req)
}

fn all_to_all_v_2d(
    api: &'static str,
    comm: symmComm_t,
    stream: *mut CUstream_st,
    form: coll::alltoallv_2d::A2AV2dForm,
    req: &coll::alltoallv_2d::A2AV2dRequest,
) -> symmResult_t {
    boundary(api, comm, || {
        let c = comm_arg(comm)?;
        let _cur = c.device.make_current()?;
        coll::alltoallv_2d::all_to_all_v_2d(&c, stream.cast(), form, req)
    })
}

/// Send count elements to `peer`, matched in order with its symmRecv.
/// Inside symmGroupStart/End, launched with the group's other sends and
/// receives at symmGroupEnd.
#[no_mangle]
pub extern "C" fn symmSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: RawDataType,
    peer: c_int,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    point_to_point("symmSend", sendbuff, count, datatype, peer, true, comm, stream)
}

/// Receive count elements from `peer` (the same count it sends).
#[no_mangle]
pub extern "C" fn symmRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: RawDataType,
    peer: c_int,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    point_to_point("symmRecv", recvbuff, count, datatype, peer, false, comm, stream)
}

#[allow(clippy::too_many_arguments)]
fn point_to_point(
    api: &'static str,
    buf: *const c_void,
    count: usize,
    datatype: RawDataType,
    peer: c_int,
    is_send: bool,
    comm: symmComm_t,
    stream: *mut CUstream_st,
) -> symmResult_t {
    boundary(api, comm, || {
        let c = comm_arg(comm)?;
        let Some(op) = coll::p2p::request(&c, buf, count, datatype, peer, is_send, stream.cast())? else {
            return Ok(());
        };
        if group::active() {
            group::defer_p2p(c, stream.cast(), op);
            Ok(())
        } else {
            coll::p2p::launch_send_recv(&c, stream.cast(), &[op])
        }
    })
}

/// Move all-gather and reduce-scatter data of this communicator with the
/// copy engines (enable = 1) or with SM kernels (0, the default unless
/// SYMM_COPY_ENGINE=1). The copy-engine path leaves the SMs to concurrent
/// work: only its rank barriers (one warp) and reduce-scatter's final local
/// reduction use them. Set it the same on every rank.
#[no_mangle]
pub extern "C" fn symmCommSetCopyEngine(comm: symmComm_t, enable: c_int) -> symmResult_t {
    boundary("symmCommSetCopyEngine", comm, || {
        let c = comm_arg(comm)?;
        if !(0..=1).contains(&enable) {
            crate::error::bail!(symmInvalidArgument, "enable is {enable}; pass 0 or 1");
        }
        c.coll.copy_engine.store(enable == 1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    })
}

/// FOR TESTS AND BENCHMARKS: choose this communicator's collective and
/// send/recv kernels as SYMM_ALGO would (e.g. "auto", "classic",
/// "twoshot+push", "pipe+p2p", "p2p:blocks=64:kib=128", "twoshot+push+grid=32"; tokens joined by
/// '+' or ','), so that one process can compare algorithms side by side. Every rank must set the
/// same, with no operation of the communicator in flight (synchronize its
/// streams first). NULL restores the SYMM_ALGO the process started with
/// (`auto` where that was invalid, as at init).
#[no_mangle]
pub extern "C" fn symmCommSetAlgorithm(comm: symmComm_t, algo: *const std::ffi::c_char) -> symmResult_t {
    boundary("symmCommSetAlgorithm", comm, || {
        let c = comm_arg(comm)?;
        let a = if algo.is_null() {
            coll::Algo::from_env()
        } else {
            // SAFETY: the caller passes a NUL-terminated string (checked non-null).
            let text = unsafe { std::ffi::CStr::from_ptr(algo) }
                .to_str()
                .map_err(|_| crate::error::err!(symmInvalidArgument, "algo is not UTF-8"))?;
            coll::Algo::parse(text).map_err(|m| crate::error::err!(symmInvalidArgument, "{m}"))?
        };
        c.coll.algo.set(a);
        Ok(())
    })
}

/// DIAGNOSTIC (SYMM_TIMELINE=1 only): the phases every block of this
/// communicator's last synced collective kernel went through, from
/// %globaltimer stamps the kernel took at each phase boundary. Writes up to
/// `capacity` events (block by block, in time order) and the number
/// available to *count (capacity 0 only sizes the array; a call with
/// capacity > 0 also clears the record, so a later call sees nothing unless
/// another synced kernel ran). Copies synchronously from device memory:
/// call it after the collective's stream is synchronized. LL
/// (small-message) and send/recv kernels record no timeline.
/// symmInvalidUsage when the process runs without SYMM_TIMELINE=1.
#[no_mangle]
pub extern "C" fn symmCommGetTimeline(
    comm: symmComm_t,
    events: *mut coll::timeline::symmTimelineEvent_t,
    capacity: usize,
    count: *mut usize,
) -> symmResult_t {
    boundary("symmCommGetTimeline", comm, || {
        let c = comm_arg(comm)?;
        if count.is_null() {
            crate::error::bail!(symmInvalidArgument, "count is NULL");
        }
        if events.is_null() && capacity > 0 {
            crate::error::bail!(symmInvalidArgument, "events is NULL with capacity {capacity}");
        }
        let all = coll::timeline::read(&c, capacity > 0)?;
        let n = all.len().min(capacity);
        if n > 0 {
            // SAFETY: the caller provides `capacity` writable events (checked non-null).
            unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), events, n) };
        }
        // SAFETY: checked non-null.
        unsafe { *count = all.len() };
        Ok(())
    })
}
