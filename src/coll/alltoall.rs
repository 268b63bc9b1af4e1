//! symmAllToAll with equal blocks: block r of rank q's output is block q of
//! rank r's input. In place goes through scratch (a rank would overwrite a
//! block a peer still reads).

use super::Call;
use crate::error::Result;

pub fn all_to_all(call: &Call) -> Result<()> {
    let n = call.comm.nranks as u64;
    let mut a = call.args();
    let in_place = call.send == call.recv;
    if in_place || !call.direct(&mut a) {
        call.staged(&mut a, call.scratch_elems(n))?;
    }
    let grid = call.grid((n * call.count * call.elem_size()).min(n * a.chunk * call.elem_size()));
    call.launch(c"symm_alltoall", grid, &mut a)
}
