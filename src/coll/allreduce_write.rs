//! The write-only two-shot all-reduce (`SYMM_ALGO=twoshot+write`, or
//! `write` from 3 ranks where `auto` would run the two-shot; `auto`'s own
//! for large messages, below; issue 33):
//! kernels/allreduce_write.cu. Nothing crosses NVLink but stores: each rank
//! stores the owners' slices of its input into their scratch, each owner
//! reduces its slice locally and stores it into every rank's output. So the
//! output must be symmetric or registered (peers store into it); the input
//! may be any buffer (only its own rank reads it), in place included.
//! Predicted (docs/PERFORMANCE.md, eighth session's hypotheses): at 4
//! ranks 1.00-1.05x the faster NCCL column from 32 MiB to 1 GiB, where the
//! push kernel's remote loads leave it at 0.90-0.98x; nothing gained below
//! 4 MiB. Measured (ninth session, 4 x H100): 1.05x at 64 MiB, 0.99x at
//! 1 GiB, 2-9 % ahead of the push kernel from 16 MiB, behind it below; so
//! `auto` takes it at 4 ranks from 16 MiB, at 3 from 64 MiB and at 2 from
//! 256 MiB (defaults.rs `write_by_default`).

use super::{even_rounds, layout_token, reduce_kernel, store_only_mode, Call, InputPath, FAMILY_ALLREDUCE_WRITE};
use crate::cuda::abi::MODE_WRITE;
use crate::error::Result;

/// Mixed into the layout token, so that ranks running the push kernel on
/// the same output cannot match this one (the protocol bits differ too).
const TOKEN_SALT: u64 = 0x5752_4954;

/// Launch the write-only kernel for `call` (per rank `bytes`) when its
/// output lies in a symmetric or registered buffer and scratch holds a
/// round; `None`, with nothing launched, otherwise (the caller goes on to
/// its next choice, as every rank does with the same buffers).
pub(super) fn launch(call: &Call, bytes: u64) -> Option<Result<()>> {
    let mut a = call.args();
    let (rid, roff) = call.peer_outputs(&mut a)?;
    let chunk = round_elems(call.count, call.scratch_elems(1), call.comm.nranks as u64, call.vec_elems());
    if chunk == 0 {
        return None;
    }
    // The kernel reads only its own input (a.send) and stores into every
    // rank's output: it takes the outputs (which peer_outputs put where the
    // push kernels store) in place of the inputs, and the scratch back.
    a.src = a.scratch;
    a.scratch = call.comm.coll.scratch;
    a.token = layout_token(&[rid, roff, TOKEN_SALT]);
    a.mode = store_only_mode(call.defaulted, a.mode | MODE_WRITE);
    a.chunk = chunk;
    call.note(InputPath::Staged);
    let grid = call.grid(bytes.min(a.chunk * call.elem_size()));
    Some(call.launch(reduce_kernel(FAMILY_ALLREDUCE_WRITE, call.dtype), grid, &mut a))
}

/// Elements of a round: `nranks` slots of chunk / nranks elements, a whole
/// number of `vec`-element vectors each, in one scratch half of
/// `half_elems`, rounds as even as that allows (the kernel's slots are
/// chunk / nranks apart); 0 when a half holds less than a vector a slot.
fn round_elems(count: u64, half_elems: u64, nranks: u64, vec: u64) -> u64 {
    let step = nranks * vec;
    let max_chunk = half_elems / step * step;
    if max_chunk == 0 {
        return 0;
    }
    even_rounds(count, max_chunk, step)
}

#[cfg(test)]
mod tests {
    use super::round_elems;

    #[test]
    fn rounds_fill_at_most_a_half_in_whole_vectors_a_slot() {
        for nranks in 2..=8u64 {
            for vec in [4u64, 8] {
                for half in [4096u64, 131072, 8 << 20, 3 * 7 * 4096 + 5] {
                    for count in [1u64, 7, 65539, 1 << 20, (4 << 20) + 7, 1 << 30] {
                        let chunk = round_elems(count, half, nranks, vec);
                        assert!(chunk > 0 && chunk.is_multiple_of(nranks * vec), "n {nranks} vec {vec} half {half}: {chunk}");
                        assert!(chunk <= half, "n {nranks} half {half}: {chunk} elements do not fit");
                        let rounds = count.div_ceil(chunk);
                        assert!(rounds == 1 || rounds == count.div_ceil(half / (nranks * vec) * nranks * vec));
                    }
                }
            }
        }
        assert_eq!(round_elems(1 << 20, 15, 2, 8), 0, "not a vector a slot");
    }
}
