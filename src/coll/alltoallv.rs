//! symmAllToAllv: all-to-all with a count and a displacement per peer, in
//! elements (MPI's and RCCL's `ncclAllToAllv` arguments): rank p receives
//! `sendcounts[p]` elements from `sendbuff + sdispls[p]` into its
//! `recvbuff + rdispls[me]`, with `recvcounts[me]` its count. The
//! point-to-point kernels move it, a send and a receive per peer with data
//! (self included), as symmSend/symmRecv in a group would: one launch on
//! the sized kernel (the default, and `SYMM_ALGO=p2p`; it also stores into a
//! symmetric output directly), a few on the fixed one (`launch_blocks`). Like the
//! collectives it is enqueued at once, also inside symmGroupStart/End.

use std::ffi::c_void;

use cudarc::driver::sys::CUstream;

use super::p2p::{direct_offset, launch_ops, sized_shape};
use crate::comm::Comm;
use crate::cuda::abi::{OpId, P2POp, P2P_BLOCKS, P2P_NO_DIRECT};
use crate::error::{bail, Result};
use crate::types::{symmDataType_t, RawDataType};

/// One side's layout: per peer (bytes at, bytes), and the extent from the
/// buffer's start that the blocks with data cover.
fn layout(counts: &[usize], displs: &[usize], es: usize, side: &str) -> Result<(Vec<(u64, u64)>, u64)> {
    let mut blocks = Vec::with_capacity(counts.len());
    let mut extent = 0u64;
    for (p, (&count, &displ)) in counts.iter().zip(displs).enumerate() {
        let at = displ.checked_mul(es);
        let bytes = count.checked_mul(es);
        let end = displ.checked_add(count).and_then(|e| e.checked_mul(es)).filter(|&e| e <= isize::MAX as usize);
        let (Some(at), Some(bytes), Some(end)) = (at, bytes, end) else {
            bail!(symmInvalidArgument, "{side}: peer {p}'s displacement {displ} + count {count} (elements of {es} bytes) overflows");
        };
        if count > 0 {
            extent = extent.max(end as u64);
        }
        blocks.push((at as u64, bytes as u64));
    }
    Ok((blocks, extent))
}

/// Receive blocks that overlap would be written by two peers at once.
fn check_disjoint(blocks: &[(u64, u64)]) -> Result<()> {
    let mut used: Vec<(u64, u64, usize)> =
        blocks.iter().enumerate().filter(|(_, b)| b.1 > 0).map(|(p, &(at, n))| (at, at + n, p)).collect();
    used.sort_unstable();
    for w in used.windows(2) {
        if w[1].0 < w[0].1 {
            bail!(
                symmInvalidArgument,
                "recvbuff: the blocks of peers {} and {} overlap (rdispls and recvcounts must describe disjoint blocks)",
                w[0].2,
                w[1].2
            );
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub fn all_to_all_v(
    comm: &Comm,
    send: *const c_void,
    sendcounts: &[usize],
    sdispls: &[usize],
    recv: *mut c_void,
    recvcounts: &[usize],
    rdispls: &[usize],
    dtype: RawDataType,
    stream: CUstream,
) -> Result<()> {
    let Some(dt) = symmDataType_t::from_raw(dtype) else {
        bail!(symmInvalidArgument, "datatype {dtype} is not a symmDataType_t (0..{})", symmDataType_t::ALL.len() - 1);
    };
    comm.check_usable()?;
    let _cur = comm.device.make_current()?;
    comm.check_stream(stream)?;
    let es = dt.size();
    let (sends, send_extent) = layout(sendcounts, sdispls, es, "sendbuff")?;
    let (recvs, recv_extent) = layout(recvcounts, rdispls, es, "recvbuff")?;
    check_disjoint(&recvs)?;
    let (s0, r0) = (send as u64, recv as u64);
    if send_extent > 0 && recv_extent > 0 && s0 < r0 + recv_extent && r0 < s0 + send_extent {
        bail!(symmInvalidArgument, "sendbuff and recvbuff overlap: symmAllToAllv works out of place only");
    }
    if send_extent > 0 {
        comm.check_buffer(send, send_extent as usize, "sendbuff")?;
    }
    let recv_known = recv_extent > 0 && comm.check_buffer(recv, recv_extent as usize, "recvbuff")?.is_some();
    launch_blocks(comm, stream, s0, &sends, r0, &recvs, recv_known)
}

/// Send block `sends[p]` (bytes at, bytes, from `send`) to every rank p and
/// receive block `recvs[p]` (into `recv`) from it, zero-byte blocks left
/// out; `recv_known`: the output is a symmetric/registered buffer (a
/// block in the symmetric heap may then be pushed into directly). Launched
/// by ring shift s (send to rank + s, receive from rank - s), so that every
/// rank's launch holds the partners of its peers' launches of the same
/// shifts: one launch when the sized kernel fits its blocks to the grid;
/// the fixed kernel's 16 blocks an operation must all be resident, so it
/// takes the shifts a few at a time. Shared by symmAllToAllv and the
/// equal-block all-to-all on the engine (alltoall.rs).
pub(crate) fn launch_blocks(
    comm: &Comm,
    stream: CUstream,
    send: u64,
    sends: &[(u64, u64)],
    recv: u64,
    recvs: &[(u64, u64)],
    recv_known: bool,
) -> Result<()> {
    let (n, me) = (comm.nranks, comm.rank);
    let per_launch = shifts_per_launch(sized_shape(comm.coll.algo.get()).is_some(), n, comm.coll.max_grid);
    for first in (0..n).step_by(per_launch) {
        let mut ops = Vec::with_capacity(2 * per_launch);
        for s in first..(first + per_launch).min(n) {
            let (to, from) = ((me + s) % n, (me + n - s) % n);
            let (at, bytes) = sends[to];
            if bytes > 0 {
                ops.push(P2POp { buf: send + at, bytes, peer: to as u32, is_send: 1, ..Default::default() });
            }
            let (at, bytes) = recvs[from];
            if bytes > 0 {
                let heap_offset = if recv_known { direct_offset(comm, recv + at, true) } else { P2P_NO_DIRECT };
                ops.push(P2POp { buf: recv + at, bytes, peer: from as u32, is_send: 0, heap_offset, ..Default::default() });
            }
        }
        if !ops.is_empty() {
            launch_ops(comm, stream, &ops, OpId::Collective)?;
        }
    }
    Ok(())
}

/// Ring shifts one launch may hold: all with the sized kernel, else as many
/// as keep two fixed-kernel operations of P2P_BLOCKS blocks each within the
/// grid every block of which must be resident.
fn shifts_per_launch(sized: bool, nranks: usize, max_grid: u32) -> usize {
    if sized {
        nranks
    } else {
        ((max_grid / (2 * P2P_BLOCKS)) as usize).clamp(1, nranks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_give_blocks_and_the_extent_of_those_with_data() {
        let (b, ext) = layout(&[2, 0, 3], &[0, 100, 2], 4, "sendbuff").unwrap();
        assert_eq!(b, vec![(0, 8), (400, 0), (8, 12)]);
        assert_eq!(ext, 20, "a peer without data does not extend the buffer");
        assert!(layout(&[usize::MAX], &[1], 2, "sendbuff").unwrap_err().msg.contains("overflows"));
    }

    #[test]
    fn fixed_kernel_launches_take_the_shifts_the_grid_holds() {
        assert_eq!(shifts_per_launch(true, 8, 66), 8, "the sized kernel fits its blocks itself");
        assert_eq!(shifts_per_launch(false, 8, 528), 8);
        assert_eq!(shifts_per_launch(false, 8, 66), 2, "8 ranks sharing one GPU");
        assert_eq!(shifts_per_launch(false, 4, 20), 1, "at least one");
    }

    #[test]
    fn receive_blocks_must_not_overlap() {
        assert!(check_disjoint(&[(0, 8), (8, 8), (16, 0), (4, 0)]).is_ok());
        let e = check_disjoint(&[(0, 8), (16, 8), (4, 8)]).unwrap_err();
        assert!(e.msg.contains("peers 0 and 2"), "{}", e.msg);
    }
}
