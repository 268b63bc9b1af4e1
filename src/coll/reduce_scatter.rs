//! symmReduceScatter: rank r gets the reduction of block r of every rank's
//! input; LL packets for small blocks. In place (recvbuff = sendbuff + rank * recvcount) is safe
//! zero-copy: a rank writes only its own block, which no peer reads.

use super::{reduce_kernel, Call, FAMILY_REDUCE_SCATTER, FAMILY_REDUCE_SCATTER_LL};
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
    let mut a = call.args();
    if !call.direct(&mut a) {
        call.staged(&mut a, call.scratch_elems(n))?;
    }
    let grid = call.grid((call.count * call.elem_size()).min(a.chunk * call.elem_size()));
    call.launch(reduce_kernel(FAMILY_REDUCE_SCATTER, call.dtype), grid, &mut a)
}
