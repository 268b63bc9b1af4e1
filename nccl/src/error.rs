//! Result codes, the crate's error type, and the one boundary helper every
//! exported function runs its body through (panics become
//! ncclInternalError; messages go to ncclGetLastError).

use std::cell::RefCell;
use std::ffi::{c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

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

thread_local! {
    static THREAD_LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Run an exported function's body; an error is recorded on `comm` when it
/// is a live communicator, else on the calling thread.
pub fn boundary(api: &'static str, comm: crate::comm::NcclComm, body: impl FnOnce() -> Result<()>) -> c_int {
    crate::debug_init();
    let err = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return NCCL_SUCCESS,
        Ok(Err(e)) => e,
        Err(p) => {
            let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
            Error::new(NCCL_INTERNAL_ERROR, format!("internal error (panic): {}", what.unwrap_or_default()))
        }
    };
    let msg = format!("{api}: {}", err.msg);
    log::info!(target: "symmcomm::ffi", "{msg} (ncclResult {})", err.code);
    record(comm, msg);
    err.code
}

/// For exports returning a value, not a code: a panic yields `fallback`.
pub fn boundary_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    crate::debug_init();
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

pub fn record(comm: crate::comm::NcclComm, msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    match crate::comm::get(comm) {
        Ok(c_comm) => *c_comm.last_error.lock() = c,
        Err(_) => THREAD_LAST_ERROR.with(|s| *s.borrow_mut() = c),
    }
}

/// `ncclGetLastError(NULL)`.
pub fn thread_last_error() -> *const std::ffi::c_char {
    THREAD_LAST_ERROR.with(|s| s.borrow().as_ptr())
}

/// Reject a NULL pointer argument.
pub fn not_null<T>(p: *const T, name: &str) -> Result<()> {
    if p.is_null() {
        bail!(NCCL_INVALID_ARGUMENT, "{name} is NULL");
    }
    Ok(())
}
