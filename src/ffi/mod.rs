//! The C boundary, and nothing else: every exported `symm*` function is in
//! this folder (one file per API group) and runs its body through
//! [`boundary`], which
//! - installs the logger on first use,
//! - turns a panic into `symmInternalError`,
//! - records the error message for `symmGetLastError` (on the communicator
//!   the call was about, else on the calling thread),
//! - returns the result code.
//!
//! Bodies check pointers and ranges first and write outputs only once
//! nothing else can fail.

// These functions are the unsafe boundary: C hands them raw pointers, which
// they check before use; marking them `unsafe` would mean nothing to C.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod handle;
pub mod types;
pub mod init;
pub mod split;
pub mod primitives;
pub mod memory;
pub mod group;
pub mod coll;
pub mod red_op;
pub mod fused;
pub mod device;

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::comm::Comm;
use crate::error::{bail, symmResult_t, Error, Result};
use handle::ArcHandle;
pub use types::*;

thread_local! {
    static THREAD_LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Run an exported function's body. `comm` (may be null or stale) says where
/// an error message is recorded.
pub(crate) fn boundary(api: &'static str, comm: symmComm_t, body: impl FnOnce() -> Result<()>) -> symmResult_t {
    crate::debug::init();
    let err = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return symmResult_t::symmSuccess,
        Ok(Err(e)) => e,
        Err(panic) => Error::new(symmResult_t::symmInternalError, format!("internal error (panic): {}", panic_message(&panic))),
    };
    record_error(api, comm, &err);
    err.code
}

/// For the few exports that return a value instead of a result code: a
/// panic yields `fallback`.
pub(crate) fn boundary_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    crate::debug::init();
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

fn record_error(api: &'static str, comm: symmComm_t, err: &Error) {
    let msg = format!("{api}: {}", err.msg);
    match err.code {
        symmResult_t::symmInvalidArgument | symmResult_t::symmInvalidUsage | symmResult_t::symmNotSupported => {
            log::info!(target: "symmcomm::ffi", "{msg} ({:?})", err.code)
        }
        _ => log::warn!(target: "symmcomm::ffi", "{msg} ({:?})", err.code),
    }
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    match symmComm::get(comm, "comm") {
        Ok(c_comm) => c_comm.set_last_error(c),
        Err(_) => THREAD_LAST_ERROR.with(|slot| *slot.borrow_mut() = c),
    }
}

/// The message for `symmGetLastError(comm)`; "" when there was none.
pub(crate) fn last_error_ptr(comm: symmComm_t) -> *const c_char {
    if !comm.is_null() {
        if let Ok(c) = symmComm::get(comm, "comm") {
            return c.last_error_ptr();
        }
    }
    THREAD_LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Reject a null pointer argument.
pub(crate) fn not_null<T>(p: *const T, name: &str) -> Result<()> {
    if p.is_null() {
        bail!(symmInvalidArgument, "{name} is NULL");
    }
    Ok(())
}

/// The communicator behind a handle, or an error naming the argument.
pub(crate) fn comm_arg(comm: symmComm_t) -> Result<std::sync::Arc<Comm>> {
    symmComm::get(comm, "comm")
}
