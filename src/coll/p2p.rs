//! symmSend / symmRecv. The sender pushes data into staging slots in the
//! receiver's memory, which copies it out (see kernels/sendrecv.cu). Inside a group, a
//! communicator's sends and receives on one stream are launched together
//! at symmGroupEnd, so exchanges in both directions (and rings) progress at
//! once instead of deadlocking.

use std::ffi::c_void;

use cudarc::driver::sys::CUstream;

use crate::comm::Comm;
use crate::cuda::abi::{OpId, P2POp, P2PArgs, COLL_THREADS, P2P_BLOCKS, P2P_MAX_OPS};
use crate::cuda::launch::{self, LaunchConfig};
use crate::error::{bail, Result};
use crate::types::{symmDataType_t, RawDataType};

/// Validate one send or receive; `None` when there is nothing to move.
pub fn request(
    comm: &Comm,
    buf: *const c_void,
    count: usize,
    dtype: RawDataType,
    peer: i32,
    is_send: bool,
    stream: CUstream,
) -> Result<Option<P2POp>> {
    let name = if is_send { "sendbuff" } else { "recvbuff" };
    let Some(dt) = symmDataType_t::from_raw(dtype) else {
        bail!(symmInvalidArgument, "datatype {dtype} is not a symmDataType_t (0..{})", symmDataType_t::ALL.len() - 1);
    };
    if peer < 0 || peer as usize >= comm.nranks {
        bail!(symmInvalidArgument, "peer {peer} is out of range for {} ranks", comm.nranks);
    }
    let Some(bytes) = count.checked_mul(dt.size()).filter(|&b| b <= isize::MAX as usize) else {
        bail!(symmInvalidArgument, "count {count} x {} bytes overflows", dt.size());
    };
    if comm.is_aborted() {
        bail!(symmInvalidUsage, "the communicator was aborted");
    }
    let _cur = comm.device.make_current()?;
    launch::check_stream(&comm.device, stream)?;
    if count == 0 {
        return Ok(None);
    }
    if buf.is_null() {
        bail!(symmInvalidArgument, "{name} is NULL with count {count}");
    }
    if comm.mem.find(buf as u64, bytes as u64).is_none() {
        launch::check_device_buffer(&comm.device, buf, bytes, name)?;
    }
    Ok(Some(P2POp { buf: buf as u64, bytes: bytes as u64, peer: peer as u32, is_send: is_send as u32 }))
}

/// Launch `ops` (in call order) on `stream`. Each launch holds at most one
/// send and one receive per peer; later ones with the same peer go to later
/// launches, which keeps each pair's messages matched in order.
pub fn launch_ops(comm: &Comm, stream: CUstream, ops: &[P2POp]) -> Result<()> {
    let mut rounds: Vec<Vec<P2POp>> = Vec::new();
    let mut lane_depth = std::collections::HashMap::new();
    for op in ops {
        let depth = lane_depth.entry((op.peer, op.is_send)).or_insert(0usize);
        if rounds.len() <= *depth {
            rounds.push(Vec::new());
        }
        rounds[*depth].push(*op);
        *depth += 1;
    }
    let dev = &comm.device;
    let _cur = dev.make_current()?;
    let f = dev.module().function(c"symm_sendrecv")?;
    for round in rounds {
        debug_assert!(round.len() <= P2P_MAX_OPS);
        let mut a: P2PArgs = comm.p2p_template(OpId::Collective);
        a.nops = round.len() as u32;
        a.ops[..round.len()].copy_from_slice(&round);
        let grid = round.len() as u32 * P2P_BLOCKS;
        let mut params = [(&mut a as *mut P2PArgs).cast::<c_void>()];
        launch::launch(f, LaunchConfig { grid, block: COLL_THREADS, shared_mem: 0 }, stream, &mut params)?;
    }
    Ok(())
}
