//! Result codes and the crate's error type (the boundary helper every
//! export runs its body through is in boundary.rs).

use std::ffi::c_int;

pub const NCCL_SUCCESS: c_int = 0;
pub const NCCL_UNHANDLED_CUDA_ERROR: c_int = 1;
pub const NCCL_SYSTEM_ERROR: c_int = 2;
pub const NCCL_INTERNAL_ERROR: c_int = 3;
pub const NCCL_INVALID_ARGUMENT: c_int = 4;
pub const NCCL_INVALID_USAGE: c_int = 5;
pub const NCCL_REMOTE_ERROR: c_int = 6;
pub const NCCL_IN_PROGRESS: c_int = 7;

#[derive(Debug, Clone)]
pub struct Error {
    pub code: c_int,
    pub msg: String,
}

pub type Result<T> = std::result::Result<T, Error>;

macro_rules! bail {
    ($code:expr, $($fmt:tt)*) => { return Err($crate::error::Error { code: $code, msg: format!($($fmt)*) }) };
}
pub(crate) use bail;

impl Error {
    pub fn new(code: c_int, msg: impl Into<String>) -> Self {
        Error { code, msg: msg.into() }
    }
}

/// A symmcomm error in NCCL's numbering, with its message.
impl From<symmcomm::Error> for Error {
    fn from(e: symmcomm::Error) -> Self {
        Error::new(from_symm(e.code as i32), e.msg)
    }
}

/// A CUDA driver call's result: ncclUnhandledCudaError naming `what`.
pub fn cuda(res: cudarc::driver::sys::CUresult, what: &str) -> Result<()> {
    if res == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(Error::new(NCCL_UNHANDLED_CUDA_ERROR, format!("{what} failed: {res:?}")))
}

/// symmcomm's result codes in NCCL's numbering: 0-7 are the same; the two
/// NCCL lacks become the nearest NCCL code (the message says what happened).
pub fn from_symm(code: c_int) -> c_int {
    match code {
        0..=7 => code,
        8 => NCCL_REMOTE_ERROR,  // symmTimeout: a peer did not arrive in time
        9 => NCCL_INVALID_USAGE, // symmNotSupported
        _ => NCCL_INTERNAL_ERROR,
    }
}

/// A symmcomm call's result as a Result, with symmcomm's message.
pub fn symm_result(code: c_int, comm: crate::symm::SymmComm, what: &str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    Err(Error::new(from_symm(code), format!("{what}: {}", crate::symm::last_error(comm))))
}

/// Reject a NULL pointer argument.
pub fn not_null<T>(p: *const T, name: &str) -> Result<()> {
    if p.is_null() {
        bail!(NCCL_INVALID_ARGUMENT, "{name} is NULL");
    }
    Ok(())
}
