//! Reduction ops, collectives and point-to-point: each call goes native
//! (symmcomm) when the communicator has that path and the arguments are
//! ones symmcomm serves (decided from them alone, so every rank routes
//! alike), else to the real NCCL. Gather and scatter are sends and
//! receives in one group, as NCCL builds them.

use std::ffi::{c_int, c_void};

use crate::boundary::*;
use crate::comm::{self, NcclComm};
use crate::error::*;
use crate::real::{self, RealComm};
use crate::symm::{self, Stream, SymmComm};

/// NCCL's built-in datatypes and reduction ops (ncclNumTypes, ncclNumOps).
const NUM_TYPES: c_int = 12;
const NUM_OPS: c_int = 5;

nccl_api!(ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum(op: *mut c_int, scalar: *mut c_void, datatype: c_int, residence: c_int, comm: NcclComm) -> c_int {
    // The op is the communicator's path's: symmcomm's on a native one (a
    // number >= ncclNumOps that only its collectives know), else NCCL's.
    // Collectives follow the communicator, so they find it either way.
    boundary("ncclRedOpCreatePreMulSum", comm, || {
        let c = comm::get(comm)?;
        not_null(op, "op")?;
        if c.native() {
            // SAFETY: NCCL's signature, passed through; symmcomm checks the rest.
            return symm_result(unsafe { symm::symmRedOpCreatePreMulSum(op, scalar, datatype, residence, c.symm) }, c.symm, "symmcomm");
        }
        let (r, rc) = c.forward("ncclRedOpCreatePreMulSum")?;
        let f = real::func(r, r.api.ncclRedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum")?;
        // SAFETY: NCCL's signature.
        real::check(r, unsafe { f(op, scalar, datatype, residence, rc) }, rc, "ncclRedOpCreatePreMulSum")
    })
});

nccl_api!(ncclRedOpDestroy / pncclRedOpDestroy(op: c_int, comm: NcclComm) -> c_int {
    boundary("ncclRedOpDestroy", comm, || {
        let c = comm::get(comm)?;
        if c.native() {
            // SAFETY: a plain value and the communicator's handle.
            return symm_result(unsafe { symm::symmRedOpDestroy(op, c.symm) }, c.symm, "symmcomm");
        }
        let (r, rc) = c.forward("ncclRedOpDestroy")?;
        let f = real::func(r, r.api.ncclRedOpDestroy, "ncclRedOpDestroy")?;
        // SAFETY: NCCL's signature.
        real::check(r, unsafe { f(op, rc) }, rc, "ncclRedOpDestroy")
    })
});

/// Route one call: natively when the communicator has a symmcomm path and
/// `native_ok` (decided from the arguments alone), else to the real NCCL.
fn dispatch(
    api: &'static str,
    comm: NcclComm,
    native_ok: bool,
    native: impl FnOnce(SymmComm) -> c_int,
    forward: impl FnOnce(&'static real::Real, RealComm) -> Result<c_int>,
) -> c_int {
    dispatch_with(api, comm, native_ok, |s| symm_result(native(s), s, "symmcomm"), forward)
}

/// `dispatch` for a native path that words its own errors.
fn dispatch_with(
    api: &'static str,
    comm: NcclComm,
    native_ok: bool,
    native: impl FnOnce(SymmComm) -> Result<()>,
    forward: impl FnOnce(&'static real::Real, RealComm) -> Result<c_int>,
) -> c_int {
    boundary(api, comm, || {
        let c = comm::get(comm)?;
        if c.native() && native_ok {
            return native(c.symm);
        }
        let (r, rc) = c.forward(api)?;
        let code = forward(r, rc)?;
        real::check(r, code, rc, api)
    })
}

fn builtin(datatype: c_int, op: Option<c_int>) -> bool {
    (0..NUM_TYPES).contains(&datatype) && op.is_none_or(|op| (0..NUM_OPS).contains(&op))
}

/// A reduction's op on a native communicator: a built-in op, or any number
/// past them, which only ncclRedOpCreatePreMulSum on this communicator gave
/// out (symmcomm refuses one it did not make, with a message).
fn native_op(datatype: c_int, op: c_int) -> bool {
    builtin(datatype, None) && op >= 0
}

nccl_api!(ncclAllReduce / pncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclAllReduce", comm, native_op(datatype, op),
        // SAFETY (both closures): the caller's arguments, passed through.
        |s| unsafe { symm::symmAllReduce(sendbuff, recvbuff, count, datatype, op, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclAllReduce, "ncclAllReduce")?(sendbuff, recvbuff, count, datatype, op, rc, stream) }))
});

nccl_api!(ncclReduce / pncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclReduce", comm, native_op(datatype, op),
        |s| unsafe { symm::symmReduce(sendbuff, recvbuff, count, datatype, op, root, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclReduce, "ncclReduce")?(sendbuff, recvbuff, count, datatype, op, root, rc, stream) }))
});

nccl_api!(ncclBroadcast / pncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclBroadcast", comm, builtin(datatype, None),
        |s| unsafe { symm::symmBroadcast(sendbuff, recvbuff, count, datatype, root, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclBroadcast, "ncclBroadcast")?(sendbuff, recvbuff, count, datatype, root, rc, stream) }))
});

nccl_api!(ncclBcast / pncclBcast(buff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclBcast", comm, builtin(datatype, None),
        |s| unsafe { symm::symmBroadcast(buff, buff, count, datatype, root, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclBcast, "ncclBcast")?(buff, count, datatype, root, rc, stream) }))
});

nccl_api!(ncclReduceScatter / pncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclReduceScatter", comm, native_op(datatype, op),
        |s| unsafe { symm::symmReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclReduceScatter, "ncclReduceScatter")?(sendbuff, recvbuff, recvcount, datatype, op, rc, stream) }))
});

nccl_api!(ncclAllGather / pncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclAllGather", comm, builtin(datatype, None),
        |s| unsafe { symm::symmAllGather(sendbuff, recvbuff, sendcount, datatype, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclAllGather, "ncclAllGather")?(sendbuff, recvbuff, sendcount, datatype, rc, stream) }))
});

nccl_api!(ncclAlltoAll / pncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclAlltoAll", comm, builtin(datatype, None),
        |s| unsafe { symm::symmAllToAll(sendbuff, recvbuff, count, datatype, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclAlltoAll, "ncclAlltoAll")?(sendbuff, recvbuff, count, datatype, rc, stream) }))
});

// RCCL's all-to-all-v (NCCL has none): natively one symmAllToAllv launch;
// forwarded, the real NCCL's sends and receives in one group, as RCCL and
// PyTorch build it.
nccl_api!(ncclAllToAllv / pncclAllToAllv(sendbuff: *const c_void, sendcounts: *const usize, sdispls: *const usize, recvbuff: *mut c_void, recvcounts: *const usize, rdispls: *const usize, datatype: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclAllToAllv", comm, builtin(datatype, None),
        // SAFETY (both closures): the caller's arguments; the forward path reads nranks entries of each array.
        |s| unsafe { symm::symmAllToAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype, s, stream) },
        |r, rc| {
            let c = comm::get(comm)?;
            let n = c.nranks.max(0) as usize;
            for (p, name) in [(sendcounts, "sendcounts"), (sdispls, "sdispls"), (recvcounts, "recvcounts"), (rdispls, "rdispls")] {
                not_null(p, name)?;
            }
            let size = type_size(datatype);
            if size == 0 {
                return Err(Error::new(NCCL_INVALID_ARGUMENT, format!("datatype {datatype} is not one of NCCL's types")));
            }
            let at = |displ: usize, name: &str| {
                displ.checked_mul(size).ok_or_else(|| Error::new(NCCL_INVALID_ARGUMENT, format!("{name}: displacement {displ} overflows")))
            };
            // Every offset first: nothing may fail between group start and end.
            let mut plan = Vec::with_capacity(n);
            for p in 0..n {
                let (scount, sdispl, rcount, rdispl) = unsafe { (*sendcounts.add(p), *sdispls.add(p), *recvcounts.add(p), *rdispls.add(p)) };
                plan.push((scount, at(sdispl, "sdispls")?, rcount, at(rdispl, "rdispls")?));
            }
            let (send, recv) = (real::func(r, r.api.ncclSend, "ncclSend")?, real::func(r, r.api.ncclRecv, "ncclRecv")?);
            let (start, end) = (real::func(r, r.api.ncclGroupStart, "ncclGroupStart")?, real::func(r, r.api.ncclGroupEnd, "ncclGroupEnd")?);
            real::check(r, unsafe { start() }, rc, "ncclGroupStart")?;
            let mut code = 0;
            for (p, &(scount, soff, rcount, roff)) in plan.iter().enumerate() {
                if code == 0 && scount > 0 {
                    code = unsafe { send((sendbuff as *const u8).wrapping_add(soff).cast(), scount, datatype, p as c_int, rc, stream) };
                }
                if code == 0 && rcount > 0 {
                    code = unsafe { recv((recvbuff as *mut u8).wrapping_add(roff).cast(), rcount, datatype, p as c_int, rc, stream) };
                }
            }
            // The group ends whatever happened inside it.
            let end = unsafe { end() };
            Ok(if code != 0 { code } else { end })
        })
});

// Gather and scatter as NCCL builds them: sends and receives in a group.
nccl_api!(ncclGather / pncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch_with("ncclGather", comm, builtin(datatype, None),
        |s| rooted_p2p(s, root, datatype, count, stream, |rank, n, block| {
            // Everyone sends to the root; the root receives block r from rank r.
            let mut ops = vec![P2P::Send(sendbuff, root)];
            if rank == root {
                for r in 0..n {
                    ops.push(P2P::Recv(block_at(recvbuff as usize, r, block, "recvbuff")? as *mut c_void, r));
                }
            }
            Ok(ops)
        }),
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclGather, "ncclGather")?(sendbuff, recvbuff, count, datatype, root, rc, stream) }))
});

nccl_api!(ncclScatter / pncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch_with("ncclScatter", comm, builtin(datatype, None),
        |s| rooted_p2p(s, root, datatype, count, stream, |rank, n, block| {
            // The root sends block r to rank r; everyone receives from the root.
            let mut ops = Vec::new();
            if rank == root {
                for r in 0..n {
                    ops.push(P2P::Send(block_at(sendbuff as usize, r, block, "sendbuff")? as *const c_void, r));
                }
            }
            ops.push(P2P::Recv(recvbuff, root));
            Ok(ops)
        }),
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclScatter, "ncclScatter")?(sendbuff, recvbuff, count, datatype, root, rc, stream) }))
});

enum P2P {
    Send(*const c_void, c_int),
    Recv(*mut c_void, c_int),
}

/// Bytes per element of NCCL's 12 types (numbered as symmcomm's; 0 for
/// anything else, which `builtin` has refused already).
fn type_size(datatype: c_int) -> usize {
    symmcomm::types::symmDataType_t::from_raw(datatype).map_or(0, |t| t.size())
}

/// Run the sends and receives `plan(rank, nranks, element size)` gives
/// (a rooted collective) as one symmcomm group; returns symmcomm's code.
/// Where rank `r`'s block of `block` bytes starts in a buffer at `base`.
fn block_at(base: usize, r: c_int, block: usize, name: &str) -> Result<usize> {
    block.checked_mul(r as usize).and_then(|off| base.checked_add(off)).ok_or_else(|| {
        Error::new(NCCL_INVALID_ARGUMENT, format!("{name}: block {r} of {block} bytes lies past the end of the address space"))
    })
}

/// A gather or scatter as sends and receives in one group: `plan(rank,
/// nranks, bytes per block)` lists them. Arguments are checked before any
/// is posted, so a refused call leaves nothing queued.
fn rooted_p2p(
    s: SymmComm,
    root: c_int,
    datatype: c_int,
    count: usize,
    stream: Stream,
    plan: impl FnOnce(c_int, c_int, usize) -> Result<Vec<P2P>>,
) -> Result<()> {
    let (mut rank, mut n) = (-1, -1);
    // SAFETY: a live comm; ints out.
    unsafe {
        symm_result(symm::symmCommUserRank(s, &mut rank), s, "symmCommUserRank")?;
        symm_result(symm::symmCommCount(s, &mut n), s, "symmCommCount")?;
    }
    if !(0..n).contains(&root) {
        bail!(NCCL_INVALID_ARGUMENT, "root {root} is not a rank of this {n}-rank communicator");
    }
    if count == 0 {
        return Ok(());
    }
    let Some(block) = count.checked_mul(type_size(datatype)) else {
        bail!(NCCL_INVALID_ARGUMENT, "count {count} x {} bytes overflows", type_size(datatype));
    };
    let ops = plan(rank, n, block)?;
    // SAFETY: no arguments; closed below on every path.
    symm_result(unsafe { symm::symmGroupStart() }, s, "symmGroupStart")?;
    let mut first = 0;
    for op in ops {
        // SAFETY: the caller's buffers, offset within the sizes NCCL's API gives them.
        let code = unsafe {
            match op {
                P2P::Send(buf, peer) => symm::symmSend(buf, count, datatype, peer, s, stream),
                P2P::Recv(buf, peer) => symm::symmRecv(buf, count, datatype, peer, s, stream),
            }
        };
        if code != 0 {
            first = code;
            break;
        }
    }
    // SAFETY: closes the level opened above.
    let end = unsafe { symm::symmGroupEnd() };
    symm_result(if first != 0 { first } else { end }, s, "symmcomm")
}

nccl_api!(ncclSend / pncclSend(sendbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclSend", comm, builtin(datatype, None),
        |s| unsafe { symm::symmSend(sendbuff, count, datatype, peer, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclSend, "ncclSend")?(sendbuff, count, datatype, peer, rc, stream) }))
});

nccl_api!(ncclRecv / pncclRecv(recvbuff: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclRecv", comm, builtin(datatype, None),
        |s| unsafe { symm::symmRecv(recvbuff, count, datatype, peer, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclRecv, "ncclRecv")?(recvbuff, count, datatype, peer, rc, stream) }))
});
