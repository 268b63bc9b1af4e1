//! Copy-engine paths of all-gather and reduce-scatter, for when SMs are
//! busy (a collective overlapped with a matmul): data moves with
//! cuMemcpyAsync on the GPU's DMA engines. Only the rank barriers (one
//! warp) and reduce-scatter's final reduction of already-local data run on
//! SMs. Selected per communicator (symmCommSetCopyEngine) or with
//! SYMM_COPY_ENGINE=1.
//!
//! Inputs are always staged through scratch, so ranks need not agree on
//! buffer classes. A first barrier makes sure no peer still reads this
//! rank's scratch for an earlier collective. Rounds alternate scratch
//! halves: a rank fills half p for round k+1 while peers may still read half
//! 1-p of round k; round k+1's barrier keeps it from getting further ahead.
//! A last barrier lets the next collective reuse the scratch.

use cudarc::driver::sys::CUdeviceptr;

use super::{reduce_kernel, Call, FAMILY_REDUCE_SCATTER};
use crate::cuda::abi::{OpId, MODE_LOCAL};
use crate::cuda::cu;
use crate::error::{Error, Result};
use crate::memory::pad;

pub(super) fn copy(call: &Call, dst: CUdeviceptr, src: CUdeviceptr, bytes: u64) -> Result<()> {
    if bytes == 0 || dst == src {
        return Ok(());
    }
    cu!(cuMemcpyDtoDAsync_v2(dst, src, bytes as usize, call.stream)).map_err(Error::from)
}

fn barrier(call: &Call) -> Result<()> {
    let mut a = call.comm.flag_args(OpId::Collective, pad::CE_BARRIER_OFFSET, 0);
    crate::prims::launch_flag_kernel(call.comm, call.stream, c"symm_barrier", &mut a)
}

/// Bytes per round that fit `parts` pieces in a scratch half (16-byte multiple).
fn round_bytes(call: &Call, parts: u64) -> u64 {
    (call.comm.coll.half / parts / 16 * 16).max(16)
}

pub fn all_gather(call: &Call) -> Result<()> {
    let c = call.comm;
    let (me, n) = (c.rank, c.nranks);
    let block = call.count * call.elem_size();
    let _cur = c.device.make_current()?;
    copy(call, call.recv + me as u64 * block, call.send, block)?;
    barrier(call)?;
    let step = round_bytes(call, 1);
    let mut off = 0;
    let mut parity = 0;
    while off < block {
        let len = step.min(block - off);
        let half = |r: usize| c.coll.scratch[r] + parity * c.coll.half;
        copy(call, half(me), call.send + off, len)?;
        barrier(call)?;
        for k in 1..n {
            let r = (me + k) % n;
            copy(call, call.recv + r as u64 * block + off, half(r), len)?;
        }
        off += len;
        parity ^= 1;
    }
    barrier(call)
}

pub fn reduce_scatter(call: &Call) -> Result<()> {
    let c = call.comm;
    let (me, n) = (c.rank, c.nranks as u64);
    let sz = call.elem_size();
    let block = call.count * sz;
    let step = round_bytes(call, n) / sz * sz;
    let _cur = c.device.make_current()?;
    let f = reduce_kernel(FAMILY_REDUCE_SCATTER, call.dtype);
    barrier(call)?;
    let mut off = 0;
    let mut parity = 0;
    while off < block {
        let len = step.min(block - off);
        let scratch_in = |r: usize| c.coll.scratch[r] + parity * c.coll.half;
        let scratch_out = c.coll.scratch[me] + (2 + parity) * c.coll.half;
        for j in 0..n {
            copy(call, scratch_in(me) + j * step, call.send + j * block + off, len)?;
        }
        barrier(call)?;
        let mut a = call.args();
        for r in 0..c.nranks {
            let dst = scratch_out + r as u64 * step;
            copy(call, dst, scratch_in(r) + me as u64 * step, len)?;
            a.src[r] = dst;
        }
        a.mode = MODE_LOCAL;
        a.recv = call.recv + off;
        a.count = len / sz;
        call.launch(f, call.grid(len), &mut a)?;
        off += len;
        parity ^= 1;
    }
    barrier(call)
}
