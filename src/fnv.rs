//! FNV-1a, 64-bit: the one hash behind unique-id checksums, host hashes,
//! split labels and the call descriptors' buffer tokens. Every step is a
//! bijection of the state, so changing any single byte changes the result.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a of a byte sequence.
pub(crate) fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// FNV-1a of words, each as its 8 little-endian bytes.
pub(crate) fn fnv1a64_words(words: impl IntoIterator<Item = u64>) -> u64 {
    fnv1a64(words.into_iter().flat_map(u64::to_le_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(fnv1a64(*b""), OFFSET);
        assert_eq!(fnv1a64(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(*b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a64_words([0x6162u64]), fnv1a64([0x62, 0x61, 0, 0, 0, 0, 0, 0]));
    }
}
