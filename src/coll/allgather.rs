//! symmAllGather (LL packets for small blocks), optionally with a progress
//! flag per landed chunk. Above the LL limit, where the recvbuff is
//! symmetric/registered, every rank stores its own block into every rank's
//! output (the push: `auto` at 2 and 4 ranks, `SYMM_ALGO=push` anywhere);
//! with `SYMM_ALGO=write` it stores into the peers' scratch instead, any
//! buffers (allgather_write.rs); otherwise it pulls the peers' blocks (from
//! their symmetric/registered input, or staged through scratch).

use super::Call;
use crate::cuda::abi::{CollArgs, MODE_END_SYNC, MODE_PROGRESS, MODE_PUSH};
use crate::error::{bail, Result};

/// In place means sendbuff = recvbuff + rank * count: each rank's input
/// then sits at a different offset, so peers find it from the recvbuff.
fn direct_in_place(call: &Call, a: &mut CollArgs) -> bool {
    let block = call.count * call.elem_size();
    let recv_start = call.recv;
    if call.send != recv_start + call.comm.rank as u64 * block {
        return false;
    }
    let Some(e) = call.comm.mem.find(recv_start, block * call.comm.nranks as u64) else { return false };
    // Same token and peer addresses as if every rank passed recvbuff itself.
    let whole = Call { send: recv_start, send_buf: Some(e), ..*call };
    if !whole.direct(a) {
        return false;
    }
    for r in 0..call.comm.nranks {
        a.src[r] += r as u64 * block;
    }
    true
}

fn setup(call: &Call, a: &mut CollArgs, unit: u64) -> Result<()> {
    if direct_in_place(call, a) || call.direct(a) {
        return Ok(());
    }
    let mut chunk = call.scratch_elems(1);
    if unit > 0 {
        // Rounds hold whole progress chunks (a chunk larger than the whole
        // input is just the input).
        let unit = unit.min(call.count);
        chunk = chunk / unit * unit;
        if chunk == 0 {
            bail!(
                symmNotSupported,
                "chunkCount {unit} elements is larger than a staging round ({} bytes); use a symmetric or registered \
                 sendbuff, or smaller chunks",
                call.comm.coll.half
            );
        }
    }
    call.staged_in_steps(a, chunk, if unit > 0 { unit.min(call.count) } else { call.vec_elems() })
}

/// The push reads only this rank's own input (any buffer) and stores it into
/// every rank's output, so only the output must be symmetric or registered.
/// The token names the output alone: in place, each rank's input sits at a
/// different offset of it (sendbuff = recvbuff + rank * count), which a
/// token over both buffers would report as ranks disagreeing.
fn push_output(call: &Call, a: &mut CollArgs) -> bool {
    let Some((rid, roff)) = call.peer_outputs(a) else { return false };
    a.token = super::layout_token(&[rid, roff, 0x4147_5055]);
    true
}

pub fn all_gather(call: &Call) -> Result<()> {
    if call.comm.coll.copy_engine() {
        return super::copy_engine::all_gather(call);
    }
    let bytes = call.count * call.elem_size();
    if call.use_ll(bytes) {
        return call.launch_ll(c"symm_allgather_ll", bytes);
    }
    if call.algo.push || super::allgather_push_by_default(call.defaulted, call.comm.nranks) {
        let mut p = call.args();
        if push_output(call, &mut p) {
            p.mode |= MODE_PUSH | MODE_END_SYNC;
            return call.launch(c"symm_allgather_push", call.grid(bytes), &mut p);
        }
    }
    // `write` (where `push` is not named): stores into the peers' scratch,
    // any buffers (allgather_write.rs); not a default until measured.
    if call.algo.write && !call.algo.push {
        if let Some(launched) = super::allgather_write::launch(call) {
            return launched;
        }
    }
    let mut a = call.args();
    setup(call, &mut a, 0)?;
    let grid = call.grid((call.count * call.elem_size()).min(a.chunk * call.elem_size()));
    call.launch(c"symm_allgather", grid, &mut a)
}

/// All-gather that sets `flags[r * ceil(count / chunk_count) + c] = 1`
/// (release, system scope) once chunk c of rank r's block is in recvbuff.
pub fn all_gather_progress(call: &Call, flags: u64, chunk_count: u64) -> Result<()> {
    let mut a = call.args();
    setup(call, &mut a, chunk_count)?;
    a.mode |= MODE_PROGRESS;
    a.unit = chunk_count;
    a.progress = flags;
    let units = call.count.div_ceil(chunk_count);
    let grid = call.grid(call.count * call.elem_size()).min(units.min(u32::MAX as u64) as u32).max(1);
    call.launch(c"symm_allgather", grid, &mut a)
}
