//! symmAllReduce: LL packets for small messages (and the two-shot LL
//! kernel, up to about twice as far: by default at 4 ranks, with
//! `SYMM_ALGO=ll` from 3; `Call::ll_two_shot_allowed`); above,
//! one-shot (every rank reduces everything) or two-shot (reduce-scatter,
//! then all-gather), chosen by size and rank count unless SYMM_ALGO says
//! otherwise. Two-shot
//! has two opt-in kernels with fewer cross-rank syncs (SYMM_ALGO tokens):
//! `push` where send and recv are both symmetric/registered (a sync at
//! entry and exit only), `pipe` otherwise (per-chunk flags through scratch
//! slots instead of two whole-grid syncs per round), for 16- and 32-bit
//! floats. `write` (allreduce_write.rs) stores only: any input, a
//! symmetric/registered output; `auto` takes it from 16 MiB at 4 ranks
//! (64 MiB where the push kernel applies), 64 MiB at 3 and 256 MiB at 2
//! (defaults.rs). `rsag` (allreduce_rsag.rs) runs it as a reduce-scatter
//! and an all-gather instead, each with `auto`'s choices.

use super::{
    even_rounds, opt_in_dtype, push_before_write, push_by_default, reduce_kernel, write_by_default, Base, Call, FAMILY_ALLREDUCE, FAMILY_ALLREDUCE_LL,
    FAMILY_ALLREDUCE_LL_TWO_SHOT, FAMILY_ALLREDUCE_PIPE, FAMILY_ALLREDUCE_PUSH, TWO_SHOT_MIN_BYTES,
};
use super::ranges::overlaps;
use crate::cuda::abi::{MODE_END_SYNC, MODE_OWN_DIRECT, MODE_PIPE, MODE_PUSH, MODE_STAGED, MODE_TWO_SHOT, PIPE_SLOTS};
use crate::error::Result;

/// The two-shot push kernel, where send and recv are both
/// symmetric/registered (else None). Safe in place too: rank j reads and
/// writes element i of every rank only in slice j (kernels/allreduce_push.cu).
fn launch_push(call: &Call, bytes: u64) -> Option<Result<()>> {
    let mut p = call.args();
    if !(call.direct(&mut p) && call.direct_output(&mut p)) {
        return None;
    }
    p.mode |= MODE_TWO_SHOT | MODE_PUSH | MODE_END_SYNC;
    let grid = call.grid(bytes);
    Some(call.launch(reduce_kernel(FAMILY_ALLREDUCE_PUSH, call.dtype), grid, &mut p))
}

pub fn all_reduce(call: &Call) -> Result<()> {
    let n = call.comm.nranks;
    let bytes = call.count * call.elem_size();
    if call.use_ll(bytes) {
        return call.launch_ll(reduce_kernel(FAMILY_ALLREDUCE_LL, call.dtype), bytes);
    }
    if call.use_ll_two_shot(bytes) {
        return call.launch_ll(reduce_kernel(FAMILY_ALLREDUCE_LL_TWO_SHOT, call.dtype), bytes);
    }
    let algo = call.algo;
    if algo.rsag {
        if let Some(launched) = super::allreduce_rsag::launch(call) {
            // The elements left after the equal blocks, if any, with `rsag` off.
            return match launched? {
                Some(tail) => all_reduce(&tail),
                None => Ok(()),
            };
        }
    }
    let two_shot = n > 1
        && match algo.base {
            Base::Auto | Base::Ll => n > 2 && bytes > TWO_SHOT_MIN_BYTES,
            Base::OneShot => false,
            Base::TwoShot => true,
        };
    let mut a = call.args();
    let in_place = call.send == call.recv;
    // The opt-in kernels exist for 16- and 32-bit floats (opt_in_dtype).
    let opt_in = opt_in_dtype(call.dtype);
    // The measured default at 2-4 ranks (defaults.rs), wherever both
    // buffers are symmetric/registered (call.direct below).
    let default_push = push_by_default(call.defaulted, n, bytes);
    // The measured default at 2-4 ranks from 16-256 MiB (defaults.rs), a
    // two-shot kernel even where `auto` runs one-shot loops (2 ranks): any
    // input, the output symmetric/registered, else the choices below.
    let default_write = write_by_default(call.defaulted, n, bytes);
    // Where both kernels are `auto`'s, the push first below the size
    // defaults.rs gives (4 ranks: the write kernel from 64 MiB when both
    // buffers are symmetric/registered, from 16 MiB otherwise).
    let push_first = default_push && default_write && push_before_write(call.defaulted, n, bytes) && opt_in;
    if push_first {
        if let Some(launched) = launch_push(call, bytes) {
            return launched;
        }
    }
    if (two_shot && algo.write || default_write) && opt_in {
        if let Some(launched) = super::allreduce_write::launch(call, bytes) {
            return launched;
        }
    }
    // (Not again where it was tried first: the buffers have not changed.)
    if (two_shot && algo.push || default_push) && opt_in && !push_first {
        if let Some(launched) = launch_push(call, bytes) {
            return launched;
        }
    }
    if two_shot && algo.pipe && opt_in {
        // Scratch halves in0, in1 hold the input slots, out0, out1 the output slots.
        let slot_elems = (2 * call.comm.coll.half / PIPE_SLOTS) / 16 * 16 / call.elem_size();
        if in_place || !call.direct(&mut a) {
            a.mode |= MODE_STAGED;
        }
        a.mode |= MODE_TWO_SHOT | MODE_PIPE;
        a.chunk = even_rounds(call.count, slot_elems, call.vec_elems());
        let grid = call.grid(bytes.min(a.chunk * call.elem_size()));
        return call.launch(reduce_kernel(FAMILY_ALLREDUCE_PIPE, call.dtype), grid, &mut a);
    }
    // In place, a rank would overwrite its input while peers still read it.
    if in_place || !call.direct(&mut a) {
        call.staged(&mut a, call.scratch_elems(1))?;
        // Two-shot: this rank's slice, which only it reduces, read from the
        // input (unless `ownstaged`). In place the block that reads a slice
        // gathers over it later; with any other overlap its gather could
        // meet another block's reads.
        if two_shot && !call.algo.own_staged && (in_place || !overlaps((call.send, bytes), (call.recv, bytes))) {
            a.mode |= MODE_OWN_DIRECT;
        }
    } else if two_shot {
        // The reduced slices go through scratch, in rounds.
        a.chunk = even_rounds(call.count, call.scratch_elems(1), call.vec_elems());
    }
    if two_shot {
        a.mode |= MODE_TWO_SHOT;
    }
    let grid = call.grid(bytes.min(a.chunk * call.elem_size()));
    call.launch(reduce_kernel(FAMILY_ALLREDUCE, call.dtype), grid, &mut a)
}
