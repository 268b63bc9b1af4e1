//! The one boundary helper every exported function runs its body through:
//! panics become ncclInternalError, and the message goes to
//! ncclGetLastError (on the communicator when it is a live one, else on
//! the calling thread).

use std::cell::RefCell;
use std::ffi::{c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, Result, NCCL_INTERNAL_ERROR, NCCL_SUCCESS};

thread_local! {
    static THREAD_LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Run an exported function's body; an error is recorded on `comm` when it
/// is a live communicator, else on the calling thread.
pub fn boundary(api: &'static str, comm: crate::comm::NcclComm, body: impl FnOnce() -> Result<()>) -> c_int {
    crate::config::debug_init();
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
    crate::config::debug_init();
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
