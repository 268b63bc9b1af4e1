//! The all-reduce as a reduce-scatter into this rank's block of the output,
//! then an in-place all-gather of the blocks (`SYMM_ALGO=rsag`, seventeenth
//! session; not a default until measured). Two launches of the existing
//! collectives, each with `auto`'s choices for its size and buffers (or the
//! kernels `SYMM_ALGO` names beside `rsag`): at 3-4
//! ranks on plain buffers the reduce-scatter by stores (no copy-in pass, no
//! grid-wide sync after one) and the all-gather pull or push, instead of
//! the staged two-shot kernel, which spends a third of its time at 1 GiB
//! waiting at the sync after its copy-in (issue 33; docs/PERFORMANCE.md,
//! sixteenth session's timeline).
//!
//! Predicted (seventeenth session, before any run): NCCL's ring all-reduce
//! costs about its reduce-scatter plus its all-gather, so the composition
//! runs at about the two collectives' ratios combined: at 4 ranks on plain
//! buffers from 256 MiB about 0.95x NCCL's faster column (reduce-scatter
//! 0.96-0.99x, all-gather 0.94-0.97x there) against the staged kernel's
//! 0.87x; at 3 ranks about 1.05x (1.0x and 1.2x) against 0.83-0.85x. Below
//! about 4 MiB the second launch and the second set of syncs cost more
//! than they save.

use super::{Algo, Call, CollId};
use crate::error::Result;

/// How an all-reduce of `count` elements of `elem_size` bytes splits over
/// `nranks` ranks: a block per rank of whole 16-byte vectors (so that every
/// block of the output stays as aligned as the output, which the vector
/// loops want) and the tail after the n blocks (fewer than n vectors, any
/// count: the benchmarks' powers of two at 3 ranks), or `None` where a
/// rank's block would hold no vector (the caller runs the all-reduce
/// kernels). The same on every rank: it depends only on the call.
pub(super) fn split(count: u64, elem_size: u64, nranks: usize) -> Option<(u64, u64)> {
    let n = nranks as u64;
    let vec = (16 / elem_size).max(1);
    let block = count / n.max(1) / vec * vec;
    (nranks >= 2 && block > 0).then(|| (block, count - block * n))
}

/// Launch the reduce-scatter and the all-gather of `call`'s blocks, or
/// `None` with nothing launched where a block would hold no vector. What it
/// returns on success is the all-reduce still to run over the elements left
/// after the blocks (fewer than n vectors), if any: the caller's, with
/// `rsag` off (one small all-reduce, LL packets where they fit).
pub(super) fn launch<'a>(call: &Call<'a>) -> Option<Result<Option<Call<'a>>>> {
    let (block, tail) = split(call.count, call.elem_size(), call.comm.nranks)?;
    Some(launch_parts(call, block, tail))
}

/// The parts run under the call's algorithm without `rsag`, which alone
/// leaves every other choice to the defaults (`Algo::is_auto`).
fn launch_parts<'a>(call: &Call<'a>, block: u64, tail: u64) -> Result<Option<Call<'a>>> {
    let es = call.elem_size();
    let algo = Algo { rsag: false, ..call.algo };
    let mine = call.recv + call.comm.rank as u64 * block * es;
    // In place too: the reduce-scatter's output is then this rank's block of
    // its input (NCCL's in-place layout), which only this rank reads.
    super::reduce_scatter::reduce_scatter(&Call { coll: CollId::ReduceScatter, count: block, recv: mine, algo, ..*call })?;
    // In place: sendbuff = recvbuff + rank * count.
    super::allgather::all_gather(&Call {
        coll: CollId::AllGather,
        count: block,
        send: mine,
        send_buf: call.recv_buf,
        algo,
        ..*call
    })?;
    let skip = block * call.comm.nranks as u64 * es;
    Ok((tail > 0).then(|| Call { count: tail, send: call.send + skip, recv: call.recv + skip, algo, ..*call }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_whole_vectors_and_a_tail() {
        assert_eq!(split(4 * 8, 2, 4), Some((8, 0)), "4 blocks of 8 bf16: 16 bytes each");
        assert_eq!(split(1 << 20, 2, 3), Some((349_520, 16)), "powers of two at 3 ranks: a tail of 16");
        assert_eq!(split(65_539, 2, 2), Some((32_768, 3)));
        assert_eq!(split(65_539, 8, 2), Some((32_768, 3)), "fp64: vectors of 2");
        assert_eq!(split(4 * 4, 2, 4), None, "8-byte blocks: no vector a rank");
        assert_eq!(split(7, 1, 2), None);
        assert_eq!(split(1 << 20, 2, 1), None, "one rank has nothing to split");
        for (count, es, n) in [(1u64 << 20, 2u64, 3usize), (65_539, 4, 8), (3 << 20, 1, 3)] {
            let (block, tail) = split(count, es, n).unwrap();
            assert_eq!(block * n as u64 + tail, count);
            assert!(tail < n as u64 * (16 / es) && (block * es) % 16 == 0);
        }
    }
}
