//! The aliasing check the ops with several argument buffers share
//! (symmAllReduceAddRMSNorm, symmAllToAllvDevice): named byte ranges that
//! must not overlap, except the pairs an op allows.

use crate::error::{bail, Result};

/// One argument buffer: its name in messages, its address and its bytes
/// (0: this call does not use it).
pub(crate) type NamedRange<'a> = (&'a str, u64, u64);

/// Whether two ranges share a byte (an empty range shares none).
pub(crate) fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// symmInvalidArgument "A and B overlap" for the first overlapping pair
/// (in the order given) that `allowed(A, B, same_start)` does not allow.
pub(crate) fn check_disjoint(ranges: &[NamedRange], allowed: impl Fn(&str, &str, bool) -> bool) -> Result<()> {
    for (i, &(a, pa, na)) in ranges.iter().enumerate() {
        for &(b, pb, nb) in &ranges[i + 1..] {
            if overlaps((pa, na), (pb, nb)) && !allowed(a, b, pa == pb) {
                bail!(symmInvalidArgument, "{a} and {b} overlap");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap_only_when_they_share_a_byte() {
        assert!(overlaps((0, 16), (8, 16)));
        assert!(!overlaps((0, 16), (16, 16)));
        assert!(!overlaps((0, 0), (0, 16)), "an empty range overlaps nothing");
    }

    #[test]
    fn only_allowed_pairs_may_overlap() {
        let r = [("a", 0, 16), ("b", 0, 16), ("c", 8, 16)];
        assert!(check_disjoint(&r, |_, _, _| true).is_ok());
        let e = check_disjoint(&r, |a, b, same| a == "a" && b == "b" && same).unwrap_err();
        assert!(e.msg.contains("a and c overlap"), "{}", e.msg);
    }
}
