//! Fused compute and communication: `symmAllGatherMatmul` and
//! `symmMatmulReduceScatter`, GEMMs by cuBLASLt pipelined with the data
//! movement on the copy engines.
//!
//! - [`blaslt`]: cuBLASLt loaded at run time, plans cached per shape.
//! - [`desc`]: the C descriptor (`symmMatmulDesc_t`) and the argument checks.
//! - [`state`]: per-communicator resources, made at the first fused call.
//! - [`allgather_matmul`], [`matmul_reduce_scatter`]: the two pipelines.
//!
//! Everything is enqueued on the caller's stream: the call forks three
//! internal streams (two that the chunk GEMMs alternate between, one for
//! copies and flag kernels) off it with an event and joins them back with
//! events, which CUDA graphs capture like any other work. Data moves on the
//! copy engines (`cuMemcpy2DAsync` from or to peer memory), so the SMs stay
//! with the GEMMs; only one-warp flag kernels and the reduce-scatter's
//! final local reduction use them. Ordering between this rank's streams uses events;
//! ordering with peers uses the bounded flag kernels of kernels/fused.cu.

pub mod allgather_matmul;
pub mod blaslt;
pub mod desc;
pub mod matmul_reduce_scatter;
pub mod state;

/// Fused-op ids in the call descriptors the start sync compares (defined
/// in cuda::abi, where src/comm names them in messages).
pub(crate) use crate::cuda::abi::{DESC_ALLGATHER_MATMUL as FUSED_ALLGATHER_MATMUL, DESC_MATMUL_REDUCE_SCATTER as FUSED_MATMUL_REDUCE_SCATTER};

/// Default pipeline chunks per rank's shard for all-gather-matmul, before
/// the workspace bound.
///
/// Prediction (H100/H200 class; bf16 ~700 TFLOP/s, one copy-engine pull
/// ~400 GB/s; fp8 and TF32 scale bytes and FLOP rate together, so the
/// same holds): moving one shard takes about 1750 / n of the time of its
/// GEMM (bytes per row k, FLOPs per row 2nk). Below n ~ 4096 the first
/// remote chunk would arrive after the local GEMM ends, so the shard is
/// cut into ceil(4096 / n) chunks (at most 8) and the first remote GEMM
/// waits for a fraction of it. Chunks keep >= 128 rows so every GEMM still
/// fills the GPU. Measured on one H100 (docs/PERFORMANCE.md): 97-101 % of
/// one GEMM at the seed shapes.
pub fn default_chunks(rows: usize, n: usize) -> usize {
    4096usize.div_ceil(n.max(1)).clamp(1, 8).min((rows / 128).max(1))
}

/// Default chunks per destination rank for matmul-reduce-scatter: one.
/// Each destination's partial already is a pipeline stage (its push
/// overlaps the next destination's GEMM), so more chunks only add GEMMs:
/// measured on one H100 (docs/PERFORMANCE.md), one chunk per destination
/// keeps 97-100 % of one GEMM at m = 32768 and 65536, n = 8192, kShard
/// 1024-4096 (alternating GEMM streams), where 2-4 chunks per destination
/// gave 79-95 % (one stream). A workspace bound below one round still
/// forces more (see `bounded_chunk_rows` and matmul_reduce_scatter).
pub(crate) const REDUCE_SCATTER_DEFAULT_CHUNKS: usize = 1;

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

/// Rows per chunk for `rows` rows in `want` chunks, where at most `fit`
/// rows fit a workspace slot (`fit` >= 1). When the slots force smaller
/// chunks, the shard is cut into the fewest chunks that fit and those are
/// balanced (not `fit`-row chunks and a sliver: a tail GEMM of a few rows
/// costs a launch and a wave for nothing).
pub fn bounded_chunk_rows(rows: usize, want: usize, fit: usize) -> usize {
    let rc = chunk_rows(rows, want);
    if rc <= fit {
        return rc;
    }
    // chunk_rows rounds up to a multiple of 16: aim below a multiple of 16
    // that fits, so the rounding cannot push a chunk past `fit`.
    let aim = if fit >= 16 { fit / 16 * 16 } else { fit.max(1) };
    chunk_rows(rows, rows.div_ceil(aim))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_chunk_counts() {
        assert_eq!(default_chunks(8192, 8192), 1);
        assert_eq!(default_chunks(8192, 2048), 2);
        assert_eq!(default_chunks(8192, 512), 8);
        assert_eq!(default_chunks(100, 512), 1, "a small shard is one GEMM");
        assert_eq!(default_chunks(300, 512), 2);
        assert_eq!(REDUCE_SCATTER_DEFAULT_CHUNKS, 1);
    }

    #[test]
    fn bounded_chunks_fit_and_balance() {
        // Unbounded: as asked.
        assert_eq!(bounded_chunk_rows(8192, 1, 10_000), 8192);
        assert_eq!(bounded_chunk_rows(8192, 4, 10_000), 2048);
        // 1638 rows fit: six balanced chunks of 1376 (the last 1312), not
        // five of 1632 and one of 32.
        assert_eq!(bounded_chunk_rows(8192, 1, 1638), 1376);
        for (rows, want, fit) in [(8192, 1, 1638), (300, 1, 17), (300, 4, 15), (100, 1, 1), (4096, 2, 1170), (1000, 3, 16)] {
            let rc = bounded_chunk_rows(rows, want, fit);
            assert!(rc >= 1 && rc <= fit && rc <= rows, "{rows} rows, {want} wanted, {fit} fit: {rc}");
            let chunks = rows.div_ceil(rc);
            let fewest = rows.div_ceil(fit);
            assert!(chunks <= fewest + 1, "{rows} rows, {fit} fit: {chunks} chunks of {rc}, {fewest} would do");
        }
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
