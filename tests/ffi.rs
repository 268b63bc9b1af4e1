//! The C boundary, exercised through the exported functions themselves:
//! result codes, messages, null/range checks, outputs untouched on failure.
//! Runs without a GPU; where a GPU is present the init tests expect success.

use std::ffi::{c_int, CStr};
use std::thread;

use symmcomm::error::symmResult_t::{self, *};
use symmcomm::ffi::init::*;
use symmcomm::ffi::group::{symmGroupEnd, symmGroupStart};
use symmcomm::ffi::memory::*;
use symmcomm::ffi::primitives::*;
use symmcomm::ffi::types::*;

fn last_error(comm: symmComm_t) -> String {
    let p = symmGetLastError(comm);
    assert!(!p.is_null());
    // SAFETY: the library returns a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A handle that was never returned by the library.
fn fake_comm() -> symmComm_t {
    0x1000 as symmComm_t
}

fn has_gpu() -> bool {
    symmcomm::cuda::device_count().map(|n| n > 0).unwrap_or(false)
}

#[test]
fn version_and_error_strings() {
    let mut v: c_int = -1;
    assert_eq!(symmGetVersion(&mut v), symmSuccess);
    assert_eq!(v, SYMM_VERSION_CODE);
    assert_eq!(symmGetVersion(std::ptr::null_mut()), symmInvalidArgument);
    assert!(last_error(std::ptr::null_mut()).contains("version is NULL"));

    let mut seen = std::collections::HashSet::new();
    for code in 0..symmcomm::error::SYMM_NUM_RESULTS {
        let s = unsafe { CStr::from_ptr(symmGetErrorString(code)) }.to_str().unwrap().to_string();
        assert!(!s.is_empty());
        assert!(seen.insert(s), "duplicate error string for {code}");
    }
    for bad in [-1, 10, 99, i32::MAX] {
        let s = unsafe { CStr::from_ptr(symmGetErrorString(bad)) }.to_str().unwrap();
        assert_eq!(s, "unknown result code");
    }
}

#[test]
fn null_and_stale_handles() {
    let mut out: c_int = 12345;
    for (code, comm) in [(symmInvalidArgument, std::ptr::null_mut()), (symmInvalidUsage, fake_comm())] {
        assert_eq!(symmCommCount(comm, &mut out), code);
        assert_eq!(symmCommUserRank(comm, &mut out), code);
        assert_eq!(symmCommCuDevice(comm, &mut out), code);
        assert_eq!(out, 12345, "output written on failure");
        let mut ae = symmSuccess;
        assert_eq!(symmCommGetAsyncError(comm, &mut ae), code);
        assert_eq!(symmCommDestroy(comm), code);
        assert_eq!(symmCommAbort(comm), code);
        assert_eq!(symmMemset32(0x10 as *mut _, 0, 1, comm, std::ptr::null_mut()), code);
        let msg = last_error(std::ptr::null_mut());
        assert!(msg.contains("comm"), "{msg}");
    }
    assert!(last_error(std::ptr::null_mut()).contains("not a live communicator"));
}

#[test]
fn unique_id_and_init_argument_checks() {
    assert_eq!(symmGetUniqueId(std::ptr::null_mut()), symmInvalidArgument);
    let mut id = symmUniqueId { internal: [0; 128] };
    assert_eq!(symmGetUniqueId(&mut id), symmSuccess);
    assert!(id.internal.iter().any(|&b| b != 0));

    let mut comm: symmComm_t = std::ptr::null_mut();
    assert_eq!(symmCommInitRank(std::ptr::null_mut(), 1, id, 0), symmInvalidArgument);
    for n in [0, -1, i32::MIN] {
        assert_eq!(symmCommInitRank(&mut comm, n, id, 0), symmInvalidArgument);
        assert!(last_error(std::ptr::null_mut()).contains("nranks"));
    }
    assert!(comm.is_null(), "output written on failure");

    let zero = symmUniqueId { internal: [0; 128] };
    assert_eq!(symmCommInitRank(&mut comm, 1, zero, 0), symmInvalidArgument);
    assert!(comm.is_null());

    let mut comms = [std::ptr::null_mut(); 2];
    assert_eq!(symmCommInitAll(std::ptr::null_mut(), 1, std::ptr::null()), symmInvalidArgument);
    assert_eq!(symmCommInitAll(comms.as_mut_ptr(), 0, std::ptr::null()), symmInvalidArgument);
    let bad = [0, -3];
    assert_eq!(symmCommInitAll(comms.as_mut_ptr(), 2, bad.as_ptr()), symmInvalidArgument);
    assert!(last_error(std::ptr::null_mut()).contains("devlist[1]"));
    let dup = [0, 0];
    let rc = symmCommInitAll(comms.as_mut_ptr(), 2, dup.as_ptr());
    assert_ne!(rc, symmSuccess);
    assert!(comms.iter().all(|c| c.is_null()), "outputs written on failure");
}

/// A one-rank group forms without any GPU; the CUDA step then decides.
#[test]
fn single_rank_init() {
    let mut id = symmUniqueId { internal: [0; 128] };
    assert_eq!(symmGetUniqueId(&mut id), symmSuccess);
    let mut comm: symmComm_t = std::ptr::null_mut();
    let rc = symmCommInitRank(&mut comm, 1, id, 0);
    if has_gpu() {
        assert_eq!(rc, symmSuccess, "{}", last_error(std::ptr::null_mut()));
        let mut n = 0;
        assert_eq!(symmCommCount(comm, &mut n), symmSuccess);
        assert_eq!(n, 1);
        assert_eq!(symmCommDestroy(comm), symmSuccess);
        assert_eq!(symmCommDestroy(comm), symmInvalidUsage, "double destroy must be caught");
    } else {
        assert_eq!(rc, symmUnhandledCudaError);
        let msg = last_error(std::ptr::null_mut());
        assert!(msg.contains("CUDA"), "{msg}");
        assert!(comm.is_null());
    }
}

/// Two ranks as two threads: both reach the same verdict.
#[test]
fn two_thread_init_agrees() {
    let mut id = symmUniqueId { internal: [0; 128] };
    assert_eq!(symmGetUniqueId(&mut id), symmSuccess);
    let results: Vec<(symmResult_t, usize)> = (0..2)
        .map(|r| {
            thread::spawn(move || {
                let mut comm: symmComm_t = std::ptr::null_mut();
                let rc = symmCommInitRank(&mut comm, 2, id, r);
                if rc == symmSuccess {
                    symmCommDestroy(comm);
                }
                (rc, comm as usize)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    if !has_gpu() {
        for (rc, comm) in results {
            assert_eq!(rc, symmUnhandledCudaError);
            assert_eq!(comm, 0);
        }
    } else {
        // Two ranks on one GPU are rejected unless the test-only mode is on.
        assert_eq!(results[0].0, results[1].0);
    }
}

#[test]
fn thread_errors_stay_on_their_thread() {
    assert_eq!(symmGetVersion(std::ptr::null_mut()), symmInvalidArgument);
    let here = last_error(std::ptr::null_mut());
    thread::spawn(|| {
        assert_eq!(last_error(std::ptr::null_mut()), "");
        let mut out = 0;
        assert_eq!(symmCommCount(std::ptr::null_mut(), &mut out), symmInvalidArgument);
    })
    .join()
    .unwrap();
    assert_eq!(last_error(std::ptr::null_mut()), here);
}

/// Every memory, signal and primitive entry point rejects a NULL or stale
/// communicator before touching anything, with a message.
#[test]
fn memory_and_signal_calls_check_the_communicator() {
    let mut p: *mut std::ffi::c_void = 0x77 as *mut _;
    let mut t: *mut *mut std::ffi::c_void = 0x77 as *mut _;
    let mut n: usize = 77;
    let dummy = 0x1000 as *mut std::ffi::c_void;
    for (code, comm) in [(symmInvalidArgument, std::ptr::null_mut()), (symmInvalidUsage, fake_comm())] {
        let check = |name: &str, rc: symmResult_t| {
            assert_eq!(rc, code, "{name}");
            let msg = last_error(std::ptr::null_mut());
            assert!(msg.starts_with(name) && msg.contains("comm"), "{name}: {msg}");
        };
        check("symmMemAlloc", symmMemAlloc(comm, 64, &mut p));
        check("symmMemFree", symmMemFree(comm, dummy));
        check("symmMemGetPeerPtr", symmMemGetPeerPtr(comm, dummy, 0, &mut p));
        check("symmMemGetPeerTable", symmMemGetPeerTable(comm, dummy, &mut t));
        check("symmCommRegister", symmCommRegister(comm, dummy, 64, &mut p));
        check("symmCommDeregister", symmCommDeregister(comm, dummy));
        check("symmCommGetSignalPad", symmCommGetSignalPad(comm, 0, &mut p, &mut n));
        check("symmCommGetSignalPadTable", symmCommGetSignalPadTable(comm, &mut t));
        check("symmBarrier", symmBarrier(comm, std::ptr::null_mut()));
        check("symmPutSignal", symmPutSignal(comm, 0, 0, std::ptr::null_mut()));
        check("symmWaitSignal", symmWaitSignal(comm, 0, 0, std::ptr::null_mut()));
        check("symmStreamWriteValue32", symmStreamWriteValue32(comm, dummy, 1, std::ptr::null_mut()));
        check("symmStreamWaitValue32", symmStreamWaitValue32(comm, dummy, 1, 0, std::ptr::null_mut()));
        assert_eq!(p as usize, 0x77, "output written on failure");
        assert_eq!(t as usize, 0x77, "output written on failure");
        assert_eq!(n, 77, "output written on failure");
    }
}

#[test]
fn group_calls_nest_and_balance() {
    assert_eq!(symmGroupEnd(), symmInvalidUsage);
    assert!(last_error(std::ptr::null_mut()).contains("without a matching symmGroupStart"));
    assert_eq!(symmGroupStart(), symmSuccess);
    assert_eq!(symmGroupStart(), symmSuccess);
    assert_eq!(symmGroupEnd(), symmSuccess);
    assert_eq!(symmGroupEnd(), symmSuccess);
    assert_eq!(symmGroupEnd(), symmInvalidUsage);
}
