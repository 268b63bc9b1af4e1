//! The 128-byte `ncclUniqueId` this library hands out carries both ids a
//! rank may need: symmcomm's (for the native communicator) and the real
//! NCCL's (for the fallback one).
//!
//! | bytes      | field                                                   |
//! |------------|---------------------------------------------------------|
//! | `0..8`     | magic `"SYMMNCCL"`                                      |
//! | `8`        | flags: bit 0 symmcomm id present, bit 1 NCCL id present |
//! | `9..16`    | zero                                                    |
//! | `16..56`   | the real NCCL id's bytes `0..40` (the rest must be zero)|
//! | `56..96`   | symmcomm's id bytes `0..40` (its `40..120` are zero)    |
//! | `96..104`  | symmcomm's id checksum (its bytes `120..128`)           |
//! | `104..120` | zero                                                    |
//! | `120..128` | FNV-1a 64 of bytes `0..120`                             |
//!
//! NCCL's id is its bootstrap handle (a magic and a socket address, 36
//! bytes in 2.28) zero-padded to 128; the packing refuses one that is not.

use crate::error::{bail, Result, NCCL_INTERNAL_ERROR, NCCL_INVALID_ARGUMENT};

const MAGIC: &[u8; 8] = b"SYMMNCCL";
const HAS_SYMM: u8 = 1;
const HAS_NCCL: u8 = 2;
const NCCL_AT: usize = 16;
const NCCL_LEN: usize = 40;
const SYMM_AT: usize = 56;
const SYMM_LEN: usize = 40;
const SYMM_SUM_AT: usize = 96;
const SUM_AT: usize = 120;

/// What a unique id names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Ids {
    pub symm: Option<[u8; 128]>,
    pub nccl: Option<[u8; 128]>,
}

pub fn pack(ids: &Ids) -> Result<[u8; 128]> {
    let mut b = [0u8; 128];
    b[..8].copy_from_slice(MAGIC);
    if let Some(n) = &ids.nccl {
        if n[NCCL_LEN..].iter().any(|&x| x != 0) {
            bail!(NCCL_INTERNAL_ERROR, "the real NCCL's unique id uses more than {NCCL_LEN} bytes; it cannot share the 128-byte id with symmcomm's (use SYMM_NCCL_MODE=nccl)");
        }
        b[8] |= HAS_NCCL;
        b[NCCL_AT..NCCL_AT + NCCL_LEN].copy_from_slice(&n[..NCCL_LEN]);
    }
    if let Some(s) = &ids.symm {
        if s[SYMM_LEN..120].iter().any(|&x| x != 0) {
            bail!(NCCL_INTERNAL_ERROR, "symmcomm's unique id uses more than {SYMM_LEN} bytes before its checksum");
        }
        b[8] |= HAS_SYMM;
        b[SYMM_AT..SYMM_AT + SYMM_LEN].copy_from_slice(&s[..SYMM_LEN]);
        b[SYMM_SUM_AT..SYMM_SUM_AT + 8].copy_from_slice(&s[120..]);
    }
    let sum = fnv1a64(&b[..SUM_AT]);
    b[SUM_AT..].copy_from_slice(&sum.to_le_bytes());
    Ok(b)
}

/// The ids inside; `None` when these bytes are not an id of this library
/// (a caller may then treat them as a plain NCCL id).
pub fn unpack(b: &[u8; 128]) -> Result<Option<Ids>> {
    if &b[..8] != MAGIC {
        return Ok(None);
    }
    if u64::from_le_bytes(b[SUM_AT..].try_into().unwrap()) != fnv1a64(&b[..SUM_AT]) {
        bail!(NCCL_INVALID_ARGUMENT, "corrupted unique id (checksum mismatch); pass the bytes from ncclGetUniqueId unchanged to every rank");
    }
    let mut ids = Ids { symm: None, nccl: None };
    if b[8] & HAS_NCCL != 0 {
        let mut n = [0u8; 128];
        n[..NCCL_LEN].copy_from_slice(&b[NCCL_AT..NCCL_AT + NCCL_LEN]);
        ids.nccl = Some(n);
    }
    if b[8] & HAS_SYMM != 0 {
        let mut s = [0u8; 128];
        s[..SYMM_LEN].copy_from_slice(&b[SYMM_AT..SYMM_AT + SYMM_LEN]);
        s[120..].copy_from_slice(&b[SYMM_SUM_AT..SYMM_SUM_AT + 8]);
        ids.symm = Some(s);
    }
    Ok(Some(ids))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ids {
        let mut n = [0u8; 128];
        n[..36].iter_mut().enumerate().for_each(|(i, x)| *x = i as u8 + 1);
        let mut s = [0u8; 128];
        s[..40].iter_mut().enumerate().for_each(|(i, x)| *x = 200 - i as u8);
        s[120..].copy_from_slice(&[9; 8]);
        Ids { symm: Some(s), nccl: Some(n) }
    }

    #[test]
    fn round_trip() {
        for ids in [sample(), Ids { symm: None, ..sample() }, Ids { nccl: None, ..sample() }] {
            assert_eq!(unpack(&pack(&ids).unwrap()).unwrap(), Some(ids));
        }
    }

    #[test]
    fn corruption_and_foreign_ids() {
        let mut b = pack(&sample()).unwrap();
        b[20] ^= 1;
        assert_eq!(unpack(&b).unwrap_err().code, NCCL_INVALID_ARGUMENT);
        assert_eq!(unpack(&[7u8; 128]).unwrap(), None);
    }

    #[test]
    fn oversized_ids_are_refused() {
        let mut ids = sample();
        ids.nccl.as_mut().unwrap()[100] = 1;
        assert!(pack(&ids).is_err());
        let mut ids = sample();
        ids.symm.as_mut().unwrap()[60] = 1;
        assert!(pack(&ids).is_err());
    }
}
