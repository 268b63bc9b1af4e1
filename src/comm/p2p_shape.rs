//! The sized send/recv kernel's shape (`p2p:blocks=N:kib=K:...`, a part
//! of `SYMM_ALGO` and symmCommSetAlgorithm): parsed from its token, packed
//! into the bits `Algo` stores and the kernel reads (kernels/abi.cuh), and
//! printed back.

use crate::cuda::abi::{
    P2P_DIRECT_MIN, P2P_DIRECT_SHIFT, P2P_GROUP_SHIFT, P2P_LL_SHIFT, P2P_PAIRED, P2P_STRIDE_MAX, P2P_STRIDE_SHIFT,
};

/// The sized kernel's shape, settable per communicator for sweeps
/// (SYMM_ALGO / symmCommSetAlgorithm token `p2p:blocks=N:kib=K:warps=W`,
/// every part optional): at most `blocks` blocks per operation (1-64;
/// default 16), one per `kib` KiB of it (a power of two, 16-65536; default
/// 512), `warps` warps per warp group (2, 4, 8 or 16; default 4: each group
/// moves whole 16 KiB chunks between its flags, so fewer, larger groups put
/// the same bytes in flight with fewer flags).
/// The measured ceiling of 16 blocks is about 14.5 GB/s per SM across
/// NVLink, 233 GB/s (docs/PERFORMANCE.md): more blocks put more bytes in
/// flight. Any count is correct: every chunk carries its own flags and a
/// wait only ever points at an earlier chunk of the channel, so up to the
/// ring's 256 warp groups (64 blocks x 4) may share it, each with one
/// chunk of slack at 64.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct P2PShape {
    /// 0: the default.
    pub max_blocks: u8,
    /// log2 of the KiB per block; 0: the default.
    pub kib_log2: u8,
    /// log2 of the threads per warp group (6-9); 0: the default (128).
    pub group_log2: u8,
    /// log2 of the KiB from which a message whose receive buffer is in the
    /// symmetric heap goes as a direct push (4-16); 0: the default (1 MiB).
    pub direct_log2: u8,
    /// log2 of the stride: the 16 KiB ring chunks a warp group moves
    /// between its flags (0-4: 1-16); 0: one, the kernel of before.
    /// Only the ring (staged) path has per-chunk flags: a direct push
    /// publishes once per group and call whatever the stride.
    pub stride_log2: u8,
    /// log2 of the KiB up to which a message goes as LL packets (1-10:
    /// 2 KiB - 1 MiB, at most what the communicator's LL slots hold); 0:
    /// never (the ring or the direct push at every size).
    pub ll_log2: u8,
    /// `pair=1`: every block is a send half and a receive half (kernels/
    /// sendrecv.cu "Paired blocks"), an operation getting twice its blocks
    /// in halves; false: a block serves one operation, as before.
    pub pair: bool,
}

impl P2PShape {
    /// What `auto` runs send/recv (and the all-to-alls on the engine) with:
    /// `p2p:blocks=64:kib=32:direct=64`. The first knob sweep on 4 x H100
    /// (2026-11-27, third session, docs/PERFORMANCE.md) chose
    /// `blocks=64:kib=128` (0.99-1.22x NCCL's faster column from 1 MiB at
    /// 2 ranks, 0.99-1.25x at 4, where the fixed kernel made 0.57-0.92x);
    /// the direct push from 64 KiB (not 1 MiB) and a block per 32 KiB were
    /// predicted to close the 64-256 KiB holes, where a message waited on
    /// the ring's staging round trip with one or two blocks. The fourth
    /// session's sweep (symmetric buffers, eager): at 256 KiB 0.98x at 2
    /// ranks and 1.09x at 4 (from 0.61x and 0.69x), at 1 MiB 1.23x and
    /// 1.28x (from 1.15x and 1.22x), at 64 KiB 0.85x and 0.92x (from 0.76x
    /// and 0.82x), the same from 4 MiB; graph-replayed 0.76-1.33x (from
    /// 0.54-1.27x). Staged receive buffers take the ring either way; only
    /// the block count changed for them (not yet swept).
    pub const AUTO: P2PShape =
        P2PShape { max_blocks: 64, kib_log2: 5, group_log2: 0, direct_log2: 6, stride_log2: 0, ll_log2: 0, pair: false };
    const DEFAULT_BLOCKS: u32 = 16;
    const MAX_BLOCKS: u32 = 64;
    const DEFAULT_KIB_LOG2: u32 = 9;
    const KIB_LOG2: std::ops::RangeInclusive<u32> = 4..=16;
    const WARPS: [u32; 4] = [2, 4, 8, 16];

    pub(crate) fn blocks_cap(self) -> u32 {
        if self.max_blocks == 0 { Self::DEFAULT_BLOCKS } else { self.max_blocks as u32 }
    }

    pub(crate) fn bytes_per_block(self) -> u64 {
        let log2 = if self.kib_log2 == 0 { Self::DEFAULT_KIB_LOG2 } else { self.kib_log2 as u32 };
        1024 << log2
    }

    /// Bytes from which a receive into the symmetric heap is offered to its
    /// sender for a direct push (both ends compute it from their own shape).
    pub(crate) fn direct_min(self) -> u64 {
        if self.direct_log2 == 0 { P2P_DIRECT_MIN } else { 1024 << self.direct_log2 }
    }

    /// Bytes up to which a message goes as LL packets (0: never); both
    /// ends compute it from their own shape.
    pub(crate) fn ll_max(self) -> u64 {
        if self.ll_log2 == 0 { 0 } else { 1024 << self.ll_log2 }
    }

    /// `p2p:blocks=N:kib=K:warps=W:direct=D:stride=S:ll=L` (the part after `p2p`, e.g.
    /// ":blocks=64").
    pub fn parse(params: &str) -> std::result::Result<P2PShape, String> {
        let mut shape = P2PShape::default();
        for part in params.split(':').filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| format!("\"{part}\" is not KEY=VALUE"))?;
            let v: u32 = value.parse().map_err(|_| format!("\"{value}\" is not a number"))?;
            match key {
                "blocks" if (1..=Self::MAX_BLOCKS).contains(&v) => shape.max_blocks = v as u8,
                "blocks" => return Err(format!("blocks={v}: 1 to {}", Self::MAX_BLOCKS)),
                "kib" if v.is_power_of_two() && Self::KIB_LOG2.contains(&v.trailing_zeros()) => {
                    shape.kib_log2 = v.trailing_zeros() as u8
                }
                "kib" => return Err(format!("kib={v}: a power of two from 16 to 65536")),
                "direct" if v.is_power_of_two() && Self::KIB_LOG2.contains(&v.trailing_zeros()) => {
                    shape.direct_log2 = v.trailing_zeros() as u8
                }
                "direct" => return Err(format!("direct={v}: a power of two from 16 to 65536 (KiB)")),
                "warps" if Self::WARPS.contains(&v) => shape.group_log2 = (32 * v).trailing_zeros() as u8,
                "warps" => return Err(format!("warps={v}: 2, 4, 8 or 16")),
                "stride" if v.is_power_of_two() && v <= P2P_STRIDE_MAX => shape.stride_log2 = v.trailing_zeros() as u8,
                "stride" => return Err(format!("stride={v}: 1, 2, 4, 8 or 16 (chunks of 16 KiB)")),
                "ll" if v == 0 => shape.ll_log2 = 0,
                "ll" if v.is_power_of_two() && (1..=10).contains(&v.trailing_zeros()) => {
                    shape.ll_log2 = v.trailing_zeros() as u8
                }
                "ll" => return Err(format!("ll={v}: 0 (never) or a power of two from 2 to 1024 (KiB)")),
                "pair" if v <= 1 => shape.pair = v == 1,
                "pair" => return Err(format!("pair={v}: 0 or 1")),
                other => {
                    return Err(format!(
                        "unknown p2p parameter \"{other}\" (blocks, kib, warps, direct, stride, ll, pair)"
                    ))
                }
            }
        }
        Ok(shape)
    }

    /// Seven bits of blocks (0-64), five of the KiB's log2, four of the
    /// group's, five of the direct size's (bits 0-20), three of the
    /// stride's (bits 21-23), four of the LL size's (bits 24-27), one of
    /// pair (bit 28).
    pub fn to_bits(self) -> u32 {
        self.max_blocks as u32
            | (self.kib_log2 as u32) << 7
            | (self.group_log2 as u32) << 12
            | (self.direct_log2 as u32) << 16
            | (self.stride_log2 as u32) << 21
            | (self.ll_log2 as u32) << 24
            | (self.pair as u32) << 28
    }

    pub fn from_bits(b: u32) -> P2PShape {
        P2PShape {
            max_blocks: (b & 0x7f) as u8,
            kib_log2: ((b >> 7) & 0x1f) as u8,
            group_log2: ((b >> 12) & 0xf) as u8,
            direct_log2: ((b >> 16) & 0x1f) as u8,
            stride_log2: ((b >> 21) & 0x7) as u8,
            ll_log2: ((b >> 24) & 0xf) as u8,
            pair: (b >> 28) & 1 != 0,
        }
    }

    /// The launch's mode bits that carry the group size, the direct
    /// push's size, the stride, the LL size and pairing (kernels/abi.cuh
    /// SYMM_P2P_GROUP_SHIFT, SYMM_P2P_DIRECT_SHIFT, SYMM_P2P_STRIDE_SHIFT,
    /// SYMM_P2P_LL_SHIFT, SYMM_P2P_PAIRED).
    pub(crate) fn mode_bits(self) -> u32 {
        (if self.pair { P2P_PAIRED } else { 0 })
            | (self.group_log2 as u32) << P2P_GROUP_SHIFT
            | (self.direct_log2 as u32) << P2P_DIRECT_SHIFT
            | (self.stride_log2 as u32) << P2P_STRIDE_SHIFT
            | (self.ll_log2 as u32) << P2P_LL_SHIFT
    }
}

impl std::fmt::Display for P2PShape {
    /// The parameters as `parse` takes them (empty for the defaults).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.max_blocks != 0 {
            write!(f, ":blocks={}", self.max_blocks)?;
        }
        if self.kib_log2 != 0 {
            write!(f, ":kib={}", 1u32 << self.kib_log2)?;
        }
        if self.group_log2 != 0 {
            write!(f, ":warps={}", (1u32 << self.group_log2) / 32)?;
        }
        if self.direct_log2 != 0 {
            write!(f, ":direct={}", 1u32 << self.direct_log2)?;
        }
        if self.stride_log2 != 0 {
            write!(f, ":stride={}", 1u32 << self.stride_log2)?;
        }
        if self.ll_log2 != 0 {
            write!(f, ":ll={}", 1u32 << self.ll_log2)?;
        }
        if self.pair {
            write!(f, ":pair=1")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p2p_shape_tokens() {
        assert_eq!(P2PShape::parse(":kib=128").unwrap().to_string(), ":kib=128");
        let groups = P2PShape::parse(":warps=16").unwrap();
        assert_eq!((groups.group_log2, groups.mode_bits()), (9, 9 << 12), "512 threads: one group a block");
        assert_eq!(P2PShape::parse(":warps=2").unwrap().group_log2, 6);
        for bad in [
            ":blocks=0", ":blocks=65", ":kib=100", ":kib=8", ":kib=131072", ":warps=1", ":warps=3", ":chunk=4", ":blocks",
            ":direct=8", ":direct=100", ":direct=131072", ":stride=0", ":stride=3", ":stride=32", ":ll=1", ":ll=3",
            ":ll=2048", ":pair=2", ":pair",
        ] {
            assert!(P2PShape::parse(bad).is_err(), "{bad}");
        }
        let wide = P2PShape::parse(":blocks=64:kib=128").unwrap();
        let direct = P2PShape::parse(":blocks=64:kib=128:direct=64").unwrap();
        assert_eq!((direct.direct_min(), P2PShape::default().direct_min()), (64 << 10, 1 << 20));
        assert_eq!(direct.mode_bits(), 6 << 16, "the kernel reads log2 of the KiB");
        let widest =
            P2PShape { max_blocks: 64, kib_log2: 16, group_log2: 9, direct_log2: 16, stride_log2: 4, ll_log2: 10, pair: true };
        let narrow =
            P2PShape { max_blocks: 1, kib_log2: 16, group_log2: 6, direct_log2: 4, stride_log2: 0, ll_log2: 1, pair: false };
        let paired = P2PShape::parse(":blocks=32:pair=1").unwrap();
        assert_eq!((paired.pair, paired.mode_bits(), paired.to_string().as_str()), (true, 2048, ":blocks=32:pair=1"));
        assert_eq!(P2PShape::parse(":pair=0").unwrap(), P2PShape::default(), "pair=0: a block an operation");
        for shape in [wide, groups, direct, widest, P2PShape::default(), narrow, paired] {
            assert_eq!(P2PShape::from_bits(shape.to_bits()), shape);
            assert_eq!(P2PShape::parse(&shape.to_string()).unwrap(), shape);
        }
        let strided = P2PShape::parse(":blocks=32:stride=4").unwrap();
        assert_eq!((strided.stride_log2, strided.mode_bits()), (2, 2 << 21), "the kernel reads log2 of the chunks");
        assert_eq!(strided.to_string(), ":blocks=32:stride=4");
        assert_eq!(P2PShape::parse(":stride=1").unwrap(), P2PShape::default(), "one chunk: the kernel of before");
        let ll = P2PShape::parse(":blocks=64:ll=256").unwrap();
        assert_eq!((ll.ll_max(), ll.mode_bits()), (256 << 10, 8 << 28), "the kernel reads log2 of the KiB");
        assert_eq!(ll.to_string(), ":blocks=64:ll=256");
        assert_eq!((P2PShape::parse(":ll=0").unwrap(), P2PShape::default().ll_max()), (P2PShape::default(), 0));
    }
}
