//! symmReduce: the root gets the reduction of every rank's input; other
//! ranks' recvbuff is not used.

use super::{reduce_kernel, Call, FAMILY_REDUCE};
use crate::error::Result;

pub fn reduce(call: &Call) -> Result<()> {
    let mut a = call.args();
    if !call.direct(&mut a) {
        call.staged(&mut a, call.scratch_elems(1))?;
    }
    let grid = call.grid((call.count * call.elem_size()).min(a.chunk * call.elem_size()));
    call.launch(reduce_kernel(FAMILY_REDUCE, call.dtype), grid, &mut a)
}
