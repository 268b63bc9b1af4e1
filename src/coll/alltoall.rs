//! symmAllToAll with equal blocks: block r of rank q's output is block q of
//! rank r's input. In place goes through scratch (a rank would overwrite a
//! block a peer still reads). With SYMM_ALGO=p2p, out of place, the
//! point-to-point engine moves the blocks (p2p.rs).

use super::{p2p, Call};
use crate::error::Result;

pub fn all_to_all(call: &Call) -> Result<()> {
    let n = call.comm.nranks as u64;
    let in_place = call.send == call.recv;
    // In place the engine's receives would overwrite blocks its sends still
    // read; that case keeps the staged kernel.
    if call.algo.p2p && !in_place {
        return p2p::all_to_all(call);
    }
    let mut a = call.args();
    if in_place || !call.direct(&mut a) {
        call.staged(&mut a, call.scratch_elems(n))?;
    }
    let grid = call.grid((n * call.count * call.elem_size()).min(n * a.chunk * call.elem_size()));
    call.launch(c"symm_alltoall", grid, &mut a)
}
