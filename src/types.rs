//! Element types and reduction operations: what the collectives compute on.
//! They appear in the C header (re-exported by `ffi::types`); their numbers
//! follow NCCL's so a framework can pass its own values straight through,
//! and they never change.

use std::ffi::c_int;

/// Element types, numbered as `ncclDataType_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum symmDataType_t {
    symmInt8 = 0,
    symmUint8 = 1,
    symmInt32 = 2,
    symmUint32 = 3,
    symmInt64 = 4,
    symmUint64 = 5,
    symmFloat16 = 6,
    symmFloat32 = 7,
    symmFloat64 = 8,
    symmBfloat16 = 9,
    symmFloat8e4m3 = 10,
    symmFloat8e5m2 = 11,
}

/// NCCL's alias names for the same values.
pub const symmChar: c_int = 0;
pub const symmInt: c_int = 2;
pub const symmHalf: c_int = 6;
pub const symmFloat: c_int = 7;
pub const symmDouble: c_int = 8;
/// Number of data types; one past the highest value.
pub const symmNumTypes: c_int = 12;

/// Reduction operations, numbered as `ncclRedOp_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum symmRedOp_t {
    symmSum = 0,
    symmProd = 1,
    symmMax = 2,
    symmMin = 3,
    symmAvg = 4,
}
/// Number of reduction operations; one past the highest value.
pub const symmNumOps: c_int = 5;

/// Where the scalar of a pre-multiplied sum lives, numbered as
/// `ncclScalarResidence_t`: read from device memory when each collective
/// runs, or copied from the host when the op is created.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum symmScalarResidence_t {
    symmScalarDevice = 0,
    symmScalarHostImmediate = 1,
}

// Inputs arrive as plain ints (a C caller can pass any value, and an
// out-of-range value in a Rust enum is undefined behaviour). cbindgen
// renames these aliases to the enum names in the header (cbindgen.toml).
pub type RawDataType = c_int;
pub type RawRedOp = c_int;
pub type RawScalarResidence = c_int;

impl symmDataType_t {
    pub(crate) const ALL: [symmDataType_t; symmNumTypes as usize] = [
        Self::symmInt8,
        Self::symmUint8,
        Self::symmInt32,
        Self::symmUint32,
        Self::symmInt64,
        Self::symmUint64,
        Self::symmFloat16,
        Self::symmFloat32,
        Self::symmFloat64,
        Self::symmBfloat16,
        Self::symmFloat8e4m3,
        Self::symmFloat8e5m2,
    ];

    pub fn from_raw(raw: RawDataType) -> Option<Self> {
        Self::ALL.get(usize::try_from(raw).ok()?).copied()
    }

    /// Element size in bytes.
    pub fn size(self) -> usize {
        use symmDataType_t::*;
        match self {
            symmInt8 | symmUint8 | symmFloat8e4m3 | symmFloat8e5m2 => 1,
            symmFloat16 | symmBfloat16 => 2,
            symmInt32 | symmUint32 | symmFloat32 => 4,
            symmInt64 | symmUint64 | symmFloat64 => 8,
        }
    }
}

impl symmRedOp_t {
    pub(crate) const ALL: [symmRedOp_t; symmNumOps as usize] =
        [Self::symmSum, Self::symmProd, Self::symmMax, Self::symmMin, Self::symmAvg];

    pub fn from_raw(raw: RawRedOp) -> Option<Self> {
        Self::ALL.get(usize::try_from(raw).ok()?).copied()
    }
}

