//! symmBroadcast: every rank gets the root's input. Always staged: only the
//! root knows whether its buffer is symmetric, and the ranks must agree on
//! how data moves, so the root copies into its scratch (a fast local copy).

use super::Call;
use crate::error::Result;

pub fn broadcast(call: &Call) -> Result<()> {
    let mut a = call.args();
    call.staged(&mut a, call.scratch_elems(1))?;
    let grid = call.grid((call.count * call.elem_size()).min(a.chunk * call.elem_size()));
    call.launch(c"symm_broadcast", grid, &mut a)
}
