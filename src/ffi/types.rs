//! Types that appear in the C header. Enum numbers follow NCCL's so a
//! framework can pass its own values straight through; they never change.

use std::ffi::{c_char, c_int};

use super::handle::{ArcHandle, HandleTable};
use crate::comm::Comm;

// The element types and reduction ops belong to the core (collectives use
// them); the boundary re-exports them so the header and callers see one set.
pub use crate::types::{
    symmChar, symmDataType_t, symmDouble, symmFloat, symmHalf, symmInt, symmNumOps, symmNumTypes, symmRedOp_t, symmScalarResidence_t,
    RawDataType, RawRedOp, RawScalarResidence,
};

/// Library version, equal to the crate version (checked at compile time).
pub const SYMM_MAJOR: c_int = 0;
pub const SYMM_MINOR: c_int = 1;
pub const SYMM_PATCH: c_int = 0;
/// `SYMM_MAJOR * 10000 + SYMM_MINOR * 100 + SYMM_PATCH`, what `symmGetVersion` returns.
pub const SYMM_VERSION_CODE: c_int = 100;

const fn parse_u32(s: &str) -> i32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as i32;
        i += 1;
    }
    v
}
const _: () = assert!(SYMM_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")), "SYMM_MAJOR != Cargo.toml version");
const _: () = assert!(SYMM_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")), "SYMM_MINOR != Cargo.toml version");
const _: () = assert!(SYMM_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")), "SYMM_PATCH != Cargo.toml version");
const _: () = assert!(SYMM_VERSION_CODE == SYMM_MAJOR * 10000 + SYMM_MINOR * 100 + SYMM_PATCH);

/// Size of `symmUniqueId` in bytes (as NCCL_UNIQUE_ID_BYTES).
pub const SYMM_UNIQUE_ID_BYTES: usize = 128;

/// Opaque rendezvous token: made by `symmGetUniqueId` on one process and
/// passed (by any means) to every rank's `symmCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct symmUniqueId {
    pub internal: [c_char; SYMM_UNIQUE_ID_BYTES],
}

/// Opaque communicator.
pub struct symmComm {
    _private: [u8; 0],
}

/// Communicator handle, as `ncclComm_t`.
pub type symmComm_t = *mut symmComm;

impl ArcHandle for symmComm {
    type Inner = Comm;
    const KIND: &'static str = "communicator";
    fn table() -> &'static HandleTable<Comm> {
        static TABLE: HandleTable<Comm> = HandleTable::new();
        &TABLE
    }
}

/// CUDA stream. Written as `struct CUstream_st *` in the header, which is
/// what both `cudaStream_t` and `CUstream` are, so the header needs no CUDA
/// headers and callers pass either without a cast.
pub enum CUstream_st {}

/// Conditions for symmStreamWaitValue32.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum symmCmp_t {
    /// Wait until the word equals the value.
    symmCmpEq = 0,
    /// Wait until the word is at or after the value, comparing as 32-bit
    /// sequence numbers that may wrap around.
    symmCmpGeq = 1,
}

/// Number of point-to-point signal channels per peer (symmPutSignal).
pub const SYMM_SIGNAL_CHANNELS: c_int = 1024;
const _: () = assert!(SYMM_SIGNAL_CHANNELS as usize == crate::memory::pad::SIGNAL_CHANNELS);

// Inputs arrive as plain ints (a C caller can pass any value, and an
// out-of-range value in a Rust enum is undefined behaviour). cbindgen
// renames these aliases to the enum names in the header (cbindgen.toml).
pub type RawResult = c_int;
pub type RawCmp = c_int;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_match_nccl_numbers() {
        assert_eq!(symmDataType_t::symmBfloat16 as i32, 9);
        assert_eq!(symmDataType_t::symmFloat8e5m2 as i32, 11);
        assert_eq!(symmRedOp_t::symmAvg as i32, 4);
        for (i, t) in symmDataType_t::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i);
            assert_eq!(symmDataType_t::from_raw(i as i32), Some(*t));
        }
        assert_eq!(symmDataType_t::from_raw(symmNumTypes), None);
        assert_eq!(symmDataType_t::from_raw(-1), None);
        assert_eq!(symmRedOp_t::from_raw(symmNumOps), None);
        assert_eq!(std::mem::size_of::<symmUniqueId>(), 128);
    }

    #[test]
    fn version_matches_cargo() {
        let v = format!("{SYMM_MAJOR}.{SYMM_MINOR}.{SYMM_PATCH}");
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
    }
}
