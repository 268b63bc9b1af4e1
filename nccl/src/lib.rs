//! `libnccl.so.2` over symmcomm: every host function of NCCL 2.28's nccl.h
//! (and its `pnccl*` profiling alias), with NCCL's ABI.
//!
//! Each communicator takes one of two paths, the same on every rank:
//! - **native** (symmcomm) when all its ranks share a host with peer
//!   access: collectives with built-in ops and dtypes, gather, scatter,
//!   send/recv, groups, split and shrink (native children), window
//!   registration, PreMulSum ops, async errors and abort run on symmcomm;
//!   the rest is forwarded to the real NCCL communicator made (or split)
//!   alongside it;
//! - **NCCL** for everything else (ranks on several hosts, children of NCCL
//!   communicators, `SYMM_NCCL_MODE=nccl`).
//!
//! `ncclMemAlloc`/`ncclMemFree` belong to no communicator: served here.
//! Routing depends only on the communicator and the call's arguments, never
//! on rank-local state, so every rank takes the same path for the same call.
//! Files: [`real`] finds and loads the real NCCL, [`id`] packs both unique
//! ids into one, [`comm`] builds communicators, [`group`] spans groups over
//! both paths, [`mem`] is the allocator, [`error`] and [`boundary`] are the
//! boundary, [`symm`] declares symmcomm's C API. The exports live by job,
//! as NCCL's sources do: this file (version, errors), [`init`]
//! (communicators), [`register`] (registration, memory), [`coll`]
//! (reduction ops, collectives, point-to-point), [`group`] (groups),
//! `device_api` (NCCL's device API, host half).
#![allow(non_snake_case, clippy::not_unsafe_ptr_arg_deref, clippy::too_many_arguments)]

use std::ffi::{c_char, c_int};

use boundary::*;
use comm::{null, NcclComm};
use error::*;

/// Defines `ncclX` and its profiling alias `pncclX` (the same function).
/// Before the modules, which use it.
macro_rules! nccl_api {
    ($name:ident / $pname:ident ( $($a:ident : $t:ty),* ) -> $ret:ty $body:block) => {
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> $ret {
            // Every call, for finding what a runtime calls per step
            // (SYMM_DEBUG=TRACE SYMM_DEBUG_SUBSYS=API); off, one load.
            log::trace!(target: "symmcomm::api", stringify!($name));
            $body
        }
        #[no_mangle]
        pub extern "C" fn $pname($($a: $t),*) -> $ret { $name($($a),*) }
    };
}

pub mod boundary;
pub mod coll;
pub mod comm;
pub mod config;
mod device_api;
pub mod error;
pub mod group;
pub mod id;
pub mod init;
pub mod mem;
pub mod real;
pub mod register;
pub mod symm;

pub use config::NCCL_VERSION_CODE;

// ---- version, errors ------------------------------------------------------

nccl_api!(ncclGetVersion / pncclGetVersion(version: *mut c_int) -> c_int {
    boundary("ncclGetVersion", null(), || {
        not_null(version, "version")?;
        // SAFETY: checked non-null.
        unsafe { version.write(NCCL_VERSION_CODE) };
        Ok(())
    })
});

nccl_api!(ncclGetErrorString / pncclGetErrorString(result: c_int) -> *const c_char {
    boundary_value(c"internal error".as_ptr(), || {
        match result {
            0 => c"no error",
            1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO or SYMM_DEBUG=INFO for details)",
            2 => c"unhandled system error (run with NCCL_DEBUG=INFO or SYMM_DEBUG=INFO for details)",
            3 => c"internal error - please report this issue to the symmcomm developers",
            4 => c"invalid argument (run with SYMM_DEBUG=INFO for details)",
            5 => c"invalid usage (run with SYMM_DEBUG=INFO for details)",
            6 => c"remote process exited or there was a network error",
            7 => c"NCCL operation in progress",
            _ => c"unknown result code",
        }
        .as_ptr()
    })
});

nccl_api!(ncclGetLastError / pncclGetLastError(comm: NcclComm) -> *const c_char {
    boundary_value(c"".as_ptr(), || match comm::get(comm) {
        Ok(c) if !comm.is_null() => c.last_error.lock().as_ptr(),
        _ => thread_last_error(),
    })
});

nccl_api!(ncclResetDebugInit / pncclResetDebugInit() -> () {
    // symmcomm reads SYMM_DEBUG once; the real NCCL, when loaded, resets its own.
    boundary_value((), || {
        if let Some(f) = real::loaded().and_then(|r| r.api.ncclResetDebugInit) {
            // SAFETY: no arguments.
            unsafe { f() }
        }
    })
});
