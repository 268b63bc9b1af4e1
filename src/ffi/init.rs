//! Version, error strings, unique ids, communicator creation, destruction
//! and queries.

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use super::handle::ArcHandle;
use super::{boundary, boundary_value, comm_arg, last_error_ptr, not_null};
use super::types::*;
use crate::bootstrap::{self, BootstrapConfig, UniqueId};
use crate::comm::Comm;
use crate::error::{bail, symmResult_t};

/// Writes `SYMM_VERSION_CODE` to `*version`.
#[no_mangle]
pub extern "C" fn symmGetVersion(version: *mut c_int) -> symmResult_t {
    boundary("symmGetVersion", std::ptr::null_mut(), || {
        not_null(version, "version")?;
        // SAFETY: checked non-null; the caller provides a writable int.
        unsafe { version.write(SYMM_VERSION_CODE) };
        Ok(())
    })
}

/// A static description of a result code (never NULL).
#[no_mangle]
pub extern "C" fn symmGetErrorString(result: RawResult) -> *const c_char {
    boundary_value(c"internal error".as_ptr(), || match symmResult_t::from_raw(result) {
        Some(r) => r.description().as_ptr().cast(),
        None => c"unknown result code".as_ptr(),
    })
}

/// The message of the most recent failed call on `comm`, or, when `comm` is
/// NULL, of the most recent failed call on this thread that had no (valid)
/// communicator. "" when there is none. The string stays valid until the
/// next failure recorded in the same place.
#[no_mangle]
pub extern "C" fn symmGetLastError(comm: symmComm_t) -> *const c_char {
    boundary_value(c"".as_ptr(), || last_error_ptr(comm))
}

/// Create a unique id and start the rendezvous root in this process (a
/// background thread that exits when the group has formed or timed out).
/// Needs no GPU.
#[no_mangle]
pub extern "C" fn symmGetUniqueId(uniqueId: *mut symmUniqueId) -> symmResult_t {
    boundary("symmGetUniqueId", std::ptr::null_mut(), || {
        not_null(uniqueId, "uniqueId")?;
        let id = bootstrap::create_root(&BootstrapConfig::from_env())?;
        // SAFETY: checked non-null; symmUniqueId is 128 plain bytes.
        unsafe { std::ptr::copy_nonoverlapping(id.as_bytes().as_ptr(), (*uniqueId).internal.as_mut_ptr().cast(), 128) };
        Ok(())
    })
}

/// Join the group `commId` as `rank` of `nranks`, on the calling thread's
/// current CUDA device. Collective: every rank must call it.
#[no_mangle]
pub extern "C" fn symmCommInitRank(comm: *mut symmComm_t, nranks: c_int, commId: symmUniqueId, rank: c_int) -> symmResult_t {
    boundary("symmCommInitRank", std::ptr::null_mut(), || {
        not_null(comm, "comm")?;
        if nranks < 1 {
            bail!(symmInvalidArgument, "nranks is {nranks}; it must be at least 1");
        }
        // Range checks on rank happen in the rendezvous, so that the root
        // can tell the other ranks instead of leaving them to time out.
        let mut bytes = [0u8; 128];
        bytes.iter_mut().zip(commId.internal.iter()).for_each(|(b, c)| *b = *c as u8);
        let c = Comm::init_rank(nranks, &UniqueId::from_bytes(&bytes), rank)?;
        // SAFETY: checked non-null.
        unsafe { comm.write(symmComm::register(c)) };
        Ok(())
    })
}

/// Create `ndev` communicators, one per device, in this process. `devlist`
/// lists CUDA device ordinals (NULL means devices 0..ndev-1); `comms` must
/// have room for `ndev` handles.
#[no_mangle]
pub extern "C" fn symmCommInitAll(comms: *mut symmComm_t, ndev: c_int, devlist: *const c_int) -> symmResult_t {
    boundary("symmCommInitAll", std::ptr::null_mut(), || {
        not_null(comms, "comms")?;
        if ndev < 1 {
            bail!(symmInvalidArgument, "ndev is {ndev}; it must be at least 1");
        }
        let devices: Vec<c_int> = if devlist.is_null() {
            (0..ndev).collect()
        } else {
            // SAFETY: the caller provides ndev readable ints.
            unsafe { std::slice::from_raw_parts(devlist, ndev as usize) }.to_vec()
        };
        if let Some((i, d)) = devices.iter().enumerate().find(|(_, d)| **d < 0) {
            bail!(symmInvalidArgument, "devlist[{i}] is {d}; device ordinals are >= 0");
        }
        let created = Comm::init_all(&devices)?;
        for (i, c) in created.into_iter().enumerate() {
            // SAFETY: the caller provides room for ndev handles.
            unsafe { comms.add(i).write(symmComm::register(c)) };
        }
        Ok(())
    })
}

/// Release the communicator. Other ranks are not waited for.
#[no_mangle]
pub extern "C" fn symmCommDestroy(comm: symmComm_t) -> symmResult_t {
    boundary("symmCommDestroy", std::ptr::null_mut(), || {
        drop(symmComm::release(comm, "comm")?);
        Ok(())
    })
}

/// Abort: unblock anything waiting on this communicator, then release it.
#[no_mangle]
pub extern "C" fn symmCommAbort(comm: symmComm_t) -> symmResult_t {
    boundary("symmCommAbort", std::ptr::null_mut(), || {
        let c: Arc<Comm> = symmComm::release(comm, "comm")?;
        c.abort();
        drop(c);
        Ok(())
    })
}

/// Writes the communicator's asynchronous error (device timeouts, aborts)
/// to `*asyncError`; `symmSuccess` when there is none.
#[no_mangle]
pub extern "C" fn symmCommGetAsyncError(comm: symmComm_t, asyncError: *mut symmResult_t) -> symmResult_t {
    boundary("symmCommGetAsyncError", comm, || {
        let c = comm_arg(comm)?;
        not_null(asyncError, "asyncError")?;
        let code = match c.async_error() {
            Ok(()) => symmResult_t::symmSuccess,
            Err(e) => {
                // The call itself succeeds; the reason goes to the comm's message.
                c.set_last_error(std::ffi::CString::new(format!("asynchronous error: {}", e.msg)).unwrap_or_default());
                e.code
            }
        };
        // SAFETY: checked non-null.
        unsafe { asyncError.write(code) };
        Ok(())
    })
}

/// Writes the number of ranks to `*count`.
#[no_mangle]
pub extern "C" fn symmCommCount(comm: symmComm_t, count: *mut c_int) -> symmResult_t {
    query("symmCommCount", comm, count, |c| c.nranks as c_int)
}

/// Writes the communicator's CUDA device ordinal to `*device`.
#[no_mangle]
pub extern "C" fn symmCommCuDevice(comm: symmComm_t, device: *mut c_int) -> symmResult_t {
    query("symmCommCuDevice", comm, device, |c| c.device.ordinal)
}

/// Writes the caller's rank to `*rank`.
#[no_mangle]
pub extern "C" fn symmCommUserRank(comm: symmComm_t, rank: *mut c_int) -> symmResult_t {
    query("symmCommUserRank", comm, rank, |c| c.rank as c_int)
}

fn query(api: &'static str, comm: symmComm_t, out: *mut c_int, f: impl FnOnce(&Comm) -> c_int) -> symmResult_t {
    boundary(api, comm, || {
        let c = comm_arg(comm)?;
        not_null(out, "output pointer")?;
        let v = f(&c);
        // SAFETY: checked non-null.
        unsafe { out.write(v) };
        Ok(())
    })
}
