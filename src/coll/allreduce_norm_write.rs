//! The fused all-reduce + RMSNorm above its LL forms as one kernel by
//! stores (`SYMM_ALGO` token `normwrite`, twenty-first session; `auto`'s
//! at 2 ranks since the twenty-fourth, measured across GPUs, and from 3
//! since the twenty-sixth: defaults.rs `NORM_BATCH_DEFAULT_MIN_RANKS`):
//! kernels/allreduce_norm_write.cu.
//! Each rank stores the rows every peer owns into that owner's scratch;
//! after a block sync the owner sums, adds its residual and normalises its
//! rows, storing the rounded residual_out rows and their sums of squares
//! into every peer's scratch; after a second sync every rank normalises
//! those. It replaces the library's all-reduce and the norm kernel after
//! it (allreduce_norm.rs), where the scratch holds the message and a row
//! fits one block of the batched layout.
//!
//! Predicted (before any run): with the ranks co-resident on one H200,
//! 128 tokens of 8192 in bf16 (2 MiB), at 2 ranks about 13-14 us against
//! `batch=1`'s 18.9 (the all-reduce alone 12.1: the norm in the reduce
//! step costs what a row's loads and the block reduction cost, about 1-2
//! us, and the second launch and pass go); at 4 ranks about 27-29 us
//! against 37.7 (the all-reduce alone 25.6). Across GPUs, where the norm
//! kernel's pass over 2 MiB is a smaller share, about 3-5 us less than the
//! two-kernel form at 2 and 4 ranks; `scripts/device-measure norm:2:normwrite
//! norm:4:normwrite` has the columns.

use super::{layout_token, Call, InputPath};
use crate::cuda::abi::NormArgs;

/// Mixed into the layout token, so that ranks running another kernel
/// with block syncs cannot match this one.
const TOKEN_SALT: u64 = 0x4e52_4d57;

/// Bytes of a scratch half the kernel's layout takes (the in-half and the
/// out-half alike hold `nranks` shares of rows; the out-half also the
/// rows' sums of squares): `nranks` x the largest share x (a row + 4).
pub(super) fn scratch_bytes(nranks: usize, tokens: usize, row_bytes: usize) -> u64 {
    let share = tokens.div_ceil(nranks.max(1)) as u64;
    nranks as u64 * share * (row_bytes as u64 + 4)
}

/// Whether the kernel serves `tokens` rows of `row_bytes` at `nranks`
/// ranks with scratch halves of `half` bytes (rows of at most
/// `max_row_bytes`: a thread holds its units in registers).
pub(super) fn fits(nranks: usize, tokens: usize, row_bytes: usize, max_row_bytes: usize, half: u64) -> bool {
    nranks >= 2 && tokens >= 1 && row_bytes <= max_row_bytes && scratch_bytes(nranks, tokens, row_bytes) <= half
}

/// The grid: a block for each row of the largest share, within `max_grid`
/// (a block takes the rows i, i + grid, ... of every share).
pub(super) fn grid(nranks: usize, tokens: usize, max_grid: u32) -> u32 {
    (tokens.div_ceil(nranks.max(1)) as u64).clamp(1, max_grid as u64) as u32
}

/// Fill in what the kernel needs beyond the norm's arguments: the token
/// that the first block sync compares (ranks that chose another kernel
/// fail it instead of misreading this one's scratch).
pub(super) fn prepare(call: &Call, n: &mut NormArgs) {
    n.coll.token = layout_token(&[TOKEN_SALT]);
    call.note(InputPath::Staged);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_half_holds_every_share_and_its_squares() {
        let half = 16u64 << 20; // the default scratch (64 MiB) in quarters
        // 512 tokens of 8192 bf16 (8 MiB) at 2 to 8 ranks.
        for n in 2..=8 {
            assert!(fits(n, 512, 16384, 16384, half), "{n} ranks");
        }
        assert_eq!(scratch_bytes(4, 128, 16384), 4 * 32 * 16388);
        assert_eq!(scratch_bytes(3, 7, 16), 3 * 3 * 20, "shares of at most 3 rows");
        assert!(!fits(2, 1024, 16384, 16384, half), "16 MiB and the squares overflow a half");
        assert!(!fits(4, 4, 16400, 16384, half), "rows wider than a block holds");
        assert!(!fits(1, 4, 16, 16384, half), "one rank runs the norm kernel alone");
        assert!(fits(4, 1, 16, 16384, half), "ranks without rows still sync");
    }

    #[test]
    fn a_block_per_row_of_the_largest_share() {
        assert_eq!(grid(4, 128, 132), 32);
        assert_eq!(grid(2, 512, 128), 128, "at most max_grid");
        assert_eq!(grid(8, 3, 128), 1);
        assert_eq!(grid(3, 7, 128), 3);
    }
}
