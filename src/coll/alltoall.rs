//! symmAllToAll with equal blocks: block r of rank q's output is block q of
//! rank r's input. Out of place under `auto`, blocks up to the LL limit go
//! as LL packets (also with SYMM_ALGO=ll); with `ll` also exactly in place
//! (each unit of the buffer is read and then written by the same thread of
//! the LL kernel; a partial overlap is not safe there), `auto`'s choice
//! once measured. Other in-place blocks go through scratch (a rank would
//! overwrite a block a peer still reads). Out of place, larger ones on
//! the point-to-point engine (alltoallv.rs `launch_blocks`) where the
//! recvbuff is symmetric/registered (at every size with SYMM_ALGO=p2p);
//! the rest, and any other explicit SYMM_ALGO, through the synced kernel
//! that pulls the peers' blocks.
//!
//! Measured on 4 x H100 (2026-11-27, fourth session, symmetric buffers;
//! docs/PERFORMANCE.md), before these became `auto`: LL, predicted at
//! 5-7 us at 64-256 KiB on 4 GPUs, took 5.8-6.7 us (NCCL's best 12.8),
//! 1.37-2.34x NCCL up to 1 MiB at 2 and 4 ranks, eager and graph-replayed;
//! the engine 1.00-1.18x from 4 MiB at 2 ranks and 0.92-1.06x at 4, where
//! the synced kernel made 0.78-0.98x.

use super::{alltoallv, defaults, Base, Call};
use crate::cuda::abi::MODE_OWN_DIRECT;
use crate::error::Result;

pub fn all_to_all(call: &Call) -> Result<()> {
    let n = call.comm.nranks as u64;
    let in_place = call.send == call.recv;
    // With any overlap the engine's receives could overwrite blocks its
    // sends still read; that case keeps the staged kernel.
    let block = call.count * call.elem_size();
    let overlap = call.send < call.recv + n * block && call.recv < call.send + n * block;
    // LL under `auto` and `ll` only: an explicit `p2p` or `classic` keeps
    // the path it names at every size (the sweeps compare them).
    // In place with `ll` (eighth session; its tests passed at 2 GPUs in the
    // ninth, not yet timed): through
    // the synced kernel it took 13.6 us a call at 8 B on 4 x H100 against
    // 3.6 out of place, graph-replayed (docs/perf/measure-4xH100-2026-11-27-s8.md).
    let ll_ok = !overlap && (call.defaulted || call.algo.base == Base::Ll) || in_place && call.algo.base == Base::Ll;
    if ll_ok && call.use_ll(block) {
        return call.launch_ll(c"symm_alltoall_ll", block);
    }
    // `auto` takes the engine only where peers may store straight into the
    // output (a symmetric/registered recvbuff): the buffers it was measured
    // on. Like the all-reduce push, ranks must then pass the same class.
    // Never by default with SYMM_CHECK, as LL: only the synced kernel
    // compares the call across ranks.
    // And, on the 16 MiB ring, a plain one from 64 MiB at 2 ranks and 256
    // MiB at 4 (defaults::alltoall_engine_staged_by_default).
    let ring_slots = call.comm.coll.p2p_ring_slots();
    let staged_engine = defaults::alltoall_engine_staged_by_default(call.defaulted, n as usize, n * block, ring_slots);
    let engine_by_default = call.defaulted && (call.recv_buf.is_some() || staged_engine) && !call.comm.coll.check;
    if !overlap && (call.algo.p2p || engine_by_default) {
        // Block p of the input to rank p, block p of the output from it.
        let blocks: Vec<(u64, u64)> = (0..n).map(|p| (p * block, block)).collect();
        return alltoallv::launch_blocks(call.comm, call.stream, call.send, &blocks, call.recv, &blocks, call.recv_buf.is_some());
    }
    let mut a = call.args();
    if in_place || !call.direct(&mut a) {
        call.staged(&mut a, call.scratch_elems(n))?;
        // The own block, which no peer reads, not through scratch (unless
        // `ownstaged`): copied straight into the output, or in place left
        // where it is. Not with any other overlap: the kernel writes the
        // output while other blocks may still stage the input.
        if !call.algo.own_staged && (in_place || !overlap) {
            a.mode |= MODE_OWN_DIRECT;
        }
    }
    let grid = call.grid((n * call.count * call.elem_size()).min(n * a.chunk * call.elem_size()));
    call.launch(c"symm_alltoall", grid, &mut a)
}
