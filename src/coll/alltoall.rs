//! symmAllToAll with equal blocks: block r of rank q's output is block q of
//! rank r's input. In place goes through scratch (a rank would overwrite a
//! block a peer still reads). With SYMM_ALGO=p2p, out of place, the
//! point-to-point engine moves the blocks (alltoallv.rs `launch_blocks`);
//! with SYMM_ALGO=ll, out of place, blocks up to the LL limit go as LL
//! packets (opt-in until a sweep measures it: predicted 5-7 us at 64-256
//! KiB on 4 GPUs, where the synced kernel takes 16-17 us and NCCL 7.6-12).

use super::{alltoallv, Base, Call};
use crate::error::Result;

pub fn all_to_all(call: &Call) -> Result<()> {
    let n = call.comm.nranks as u64;
    let in_place = call.send == call.recv;
    // With any overlap the engine's receives could overwrite blocks its
    // sends still read; that case keeps the staged kernel.
    let block = call.count * call.elem_size();
    let overlap = call.send < call.recv + n * block && call.recv < call.send + n * block;
    if call.algo.base == Base::Ll && !overlap && call.use_ll(block) {
        return call.launch_ll(c"symm_alltoall_ll", block);
    }
    if call.algo.p2p && !overlap {
        // Block p of the input to rank p, block p of the output from it.
        let blocks: Vec<(u64, u64)> = (0..n).map(|p| (p * block, block)).collect();
        return alltoallv::launch_blocks(call.comm, call.stream, call.send, &blocks, call.recv, &blocks, call.recv_buf.is_some());
    }
    let mut a = call.args();
    if in_place || !call.direct(&mut a) {
        call.staged(&mut a, call.scratch_elems(n))?;
    }
    let grid = call.grid((n * call.count * call.elem_size()).min(n * a.chunk * call.elem_size()));
    call.launch(c"symm_alltoall", grid, &mut a)
}
