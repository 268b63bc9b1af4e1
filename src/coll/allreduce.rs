//! symmAllReduce: LL packets for small messages; above, one-shot (every
//! rank reduces everything) or two-shot (reduce-scatter into scratch, then
//! all-gather), chosen by size and rank count unless SYMM_ALGO says otherwise.

use super::{reduce_kernel, Algo, Call, FAMILY_ALLREDUCE, FAMILY_ALLREDUCE_LL, TWO_SHOT_MIN_BYTES};
use crate::cuda::abi::MODE_TWO_SHOT;
use crate::error::Result;

pub fn all_reduce(call: &Call) -> Result<()> {
    let n = call.comm.nranks;
    let bytes = call.count * call.elem_size();
    if call.use_ll(bytes) {
        return call.launch_ll(reduce_kernel(FAMILY_ALLREDUCE_LL, call.dtype), bytes);
    }
    let two_shot = n > 1
        && match call.comm.coll.algo {
            Algo::Auto | Algo::Ll => n > 2 && bytes > TWO_SHOT_MIN_BYTES,
            Algo::OneShot => false,
            Algo::TwoShot => true,
        };
    let mut a = call.args();
    // In place, a rank would overwrite its input while peers still read it.
    let in_place = call.send == call.recv;
    if in_place || !call.direct(&mut a) {
        call.staged(&mut a, call.scratch_elems(1))?;
    } else if two_shot {
        // The reduced slices go through scratch, in rounds.
        a.chunk = super::even_rounds(call.count, call.scratch_elems(1), call.vec_elems());
    }
    if two_shot {
        a.mode |= MODE_TWO_SHOT;
    }
    let grid = call.grid(bytes.min(a.chunk * call.elem_size()));
    call.launch(reduce_kernel(FAMILY_ALLREDUCE, call.dtype), grid, &mut a)
}
