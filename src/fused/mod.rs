//! Fused compute and communication: `symmAllGatherMatmul` and
//! `symmMatmulReduceScatter`, GEMMs by cuBLASLt pipelined with the data
//! movement on the copy engines.
//!
//! - [`blaslt`]: cuBLASLt loaded at run time, plans cached per shape.
//! - [`desc`]: the C descriptor (`symmMatmulDesc_t`) and the argument checks.
//! - [`state`]: per-communicator resources, made at the first fused call.
//! - [`allgather_matmul`], [`matmul_reduce_scatter`]: the two pipelines.
//!
//! Everything is enqueued on the caller's stream: the call forks two
//! internal streams (one for the chunk GEMMs, one for copies and flag
//! kernels) off it with an event and joins them back with events, which
//! CUDA graphs capture like any other work. Data moves on the copy engines
//! (`cuMemcpy2DAsync` from or to peer memory), so the SMs stay with the
//! GEMMs; only one-warp flag kernels and the reduce-scatter's final local
//! reduction use them. Ordering between this rank's streams uses events;
//! ordering with peers uses the bounded flag kernels of kernels/fused.cu.

pub mod allgather_matmul;
pub mod blaslt;
pub mod desc;
pub mod matmul_reduce_scatter;
pub mod state;

/// Fused-op ids in the call descriptors the start sync compares (after the
/// collectives' ids, see coll::CollId; comm.rs names them in messages).
pub(crate) const FUSED_ALLGATHER_MATMUL: u32 = 7;
pub(crate) const FUSED_MATMUL_REDUCE_SCATTER: u32 = 8;

/// Default pipeline chunks per rank's shard, before the workspace bound.
///
/// Prediction (H100/H200 class; bf16 ~700 TFLOP/s, one copy-engine pull
/// ~400 GB/s; fp8 and TF32 scale bytes and FLOP rate together, so the
/// same holds): moving one shard takes about 1750 / `inner` of the time of
/// its GEMM, where `inner` is n for all-gather-matmul (bytes per row k,
/// FLOPs per row 2nk) and kShard for matmul-reduce-scatter (bytes per row
/// n, FLOPs 2nk). Below ~4096 the first remote chunk would arrive after the
/// local GEMM ends, so the shard is cut into ceil(4096 / inner) chunks (at
/// most 8) and the first remote GEMM waits for a fraction of it. Reduce-
/// scatter always takes at least 2: its last round's reduction is exposed,
/// and halving it pays for one more GEMM launch. Chunks keep >= 128 rows
/// so every GEMM still fills the GPU. Measure before changing: see
/// docs/PERFORMANCE.md.
pub fn default_chunks(rows: usize, inner: usize, reduce_scatter: bool) -> usize {
    let by_ratio = 4096usize.div_ceil(inner.max(1)).clamp(1, 8);
    let want = if reduce_scatter { by_ratio.max(2) } else { by_ratio };
    want.min((rows / 128).max(1))
}

/// Rows per chunk for `rows` rows in `chunks` chunks: a multiple of 16
/// where the shard allows (row-wise scales and fp8 operands stay 16-byte
/// aligned), the last chunk taking the remainder.
pub fn chunk_rows(rows: usize, chunks: usize) -> usize {
    let per = rows.div_ceil(chunks.clamp(1, rows.max(1)));
    if per >= 16 {
        per.next_multiple_of(16).min(rows)
    } else {
        per.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_chunk_counts() {
        assert_eq!(default_chunks(8192, 8192, false), 1);
        assert_eq!(default_chunks(8192, 2048, false), 2);
        assert_eq!(default_chunks(8192, 512, false), 8);
        assert_eq!(default_chunks(8192, 8192, true), 2);
        assert_eq!(default_chunks(100, 512, false), 1, "a small shard is one GEMM");
        assert_eq!(default_chunks(300, 512, true), 2);
    }

    #[test]
    fn chunk_rows_cover_the_shard() {
        for (rows, chunks) in [(8192, 4), (1000, 3), (17, 4), (5, 8), (1, 1), (4096, 7)] {
            let per = chunk_rows(rows, chunks);
            assert!(per >= 1 && per <= rows, "{rows} in {chunks}: {per}");
            let n = rows.div_ceil(per);
            assert!(n <= chunks.max(1), "{rows} in {chunks}: {per} rows gives {n} chunks");
        }
        assert_eq!(chunk_rows(8192, 4), 2048);
        assert_eq!(chunk_rows(1000, 3), 336);
    }
}
