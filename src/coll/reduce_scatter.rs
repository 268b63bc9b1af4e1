//! symmReduceScatter: rank r gets the reduction of block r of every rank's
//! input; LL packets for small blocks. In place (recvbuff = sendbuff + rank * recvcount) is safe
//! zero-copy: a rank writes only its own block, which no peer reads.
//! Symmetric/registered inputs are read where they are (a sync at entry
//! and exit only); plain ones are staged through scratch in rounds, or
//! with SYMM_ALGO=pipe (16- and 32-bit floats) pipelined with per-chunk
//! flags. `write` (reduce_scatter_write.rs, 16- and 32-bit floats) stores
//! every block into its owner's scratch instead, for any buffers: `auto`'s
//! where defaults.rs `reduce_scatter_write_by_default` says.

use super::{
    even_rounds, opt_in_dtype, reduce_kernel, reduce_scatter_write_by_default, Call, FAMILY_REDUCE_SCATTER,
    FAMILY_REDUCE_SCATTER_LL, FAMILY_REDUCE_SCATTER_PIPE,
};
use super::ranges::overlaps;
use crate::cuda::abi::{MODE_OWN_DIRECT, MODE_PIPE, MODE_STAGED};
use crate::error::Result;

pub fn reduce_scatter(call: &Call) -> Result<()> {
    if call.comm.coll.copy_engine() {
        return super::copy_engine::reduce_scatter(call);
    }
    let n = call.comm.nranks as u64;
    let bytes = call.count * call.elem_size();
    if call.use_ll(bytes) {
        return call.launch_ll(reduce_kernel(FAMILY_REDUCE_SCATTER_LL, call.dtype), bytes);
    }
    let staged_input = call.send_buf.is_none();
    let write =
        call.algo.write || reduce_scatter_write_by_default(call.defaulted, call.comm.nranks, bytes * n, staged_input);
    if write && opt_in_dtype(call.dtype) {
        if let Some(launched) = super::reduce_scatter_write::launch(call) {
            return launched;
        }
    }
    let mut a = call.args();
    if !call.direct(&mut a) {
        if call.algo.pipe && opt_in_dtype(call.dtype) {
            // One scratch half per slot, holding the chunk of all n blocks.
            a.mode |= MODE_STAGED | MODE_PIPE;
            a.chunk = even_rounds(call.count, call.scratch_elems(n), call.vec_elems());
            let grid = call.grid(bytes.min(a.chunk * call.elem_size()));
            return call.launch(reduce_kernel(FAMILY_REDUCE_SCATTER_PIPE, call.dtype), grid, &mut a);
        }
        call.staged(&mut a, call.scratch_elems(n))?;
        // The own block, which no peer reads, reduced from the input (unless
        // `ownstaged`): in place (recvbuff = sendbuff + rank * recvcount)
        // each element is read and then written by the same thread; with
        // any other overlap the kernel's writes could meet another block's
        // reads.
        let block = bytes;
        let own = call.send + call.comm.rank as u64 * block;
        if !call.algo.own_staged && (call.recv == own || !overlaps((call.send, n * block), (call.recv, block))) {
            a.mode |= MODE_OWN_DIRECT;
        }
    }
    let grid = call.grid((call.count * call.elem_size()).min(a.chunk * call.elem_size()));
    call.launch(reduce_kernel(FAMILY_REDUCE_SCATTER, call.dtype), grid, &mut a)
}
