//! The device API's host half through the exported functions: argument
//! checks that need no GPU (every rank of CI), and with a GPU a one-rank
//! device communicator: made, refused for a mismatched header, destroyed.

use std::ffi::CStr;

use symmcomm::devcomm::{symmDevComm, symmDevCommRequirements, SYMM_DEVICE_API_VERSION, SYMM_DEV_MAX_BLOCKS};
use symmcomm::error::symmResult_t::*;
use symmcomm::ffi::device::*;
use symmcomm::ffi::init::*;
use symmcomm::ffi::types::*;

fn last_error(comm: symmComm_t) -> String {
    // SAFETY: the library returns a NUL-terminated string.
    unsafe { CStr::from_ptr(symmGetLastError(comm)) }.to_string_lossy().into_owned()
}

/// What SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER gives, plus blocks.
fn requirements(blocks: u32) -> symmDevCommRequirements {
    symmDevCommRequirements {
        size: std::mem::size_of::<symmDevCommRequirements>() as u32,
        apiVersion: SYMM_DEVICE_API_VERSION as u32,
        devCommSize: std::mem::size_of::<symmDevComm>() as u32,
        blockCount: blocks,
        ..Default::default()
    }
}

#[test]
fn device_comm_calls_check_the_communicator_first() {
    let req = requirements(4);
    // SAFETY: plain old data; the pattern shows whether anything was written.
    let mut dc: symmDevComm = unsafe { std::mem::transmute([0x5au8; 128]) };
    for (code, comm) in [(symmInvalidArgument, std::ptr::null_mut()), (symmInvalidUsage, 0x1000 as symmComm_t)] {
        assert_eq!(symmDevCommCreate(comm, &req, &mut dc), code);
        let msg = last_error(std::ptr::null_mut());
        assert!(msg.starts_with("symmDevCommCreate") && msg.contains("comm"), "{msg}");
        assert_eq!(symmDevCommCreate(comm, std::ptr::null(), std::ptr::null_mut()), code);
        assert_eq!(symmDevCommDestroy(comm, &dc), code);
        let msg = last_error(std::ptr::null_mut());
        assert!(msg.starts_with("symmDevCommDestroy") && msg.contains("comm"), "{msg}");
    }
    assert_eq!(dc.handle, 0x5a5a_5a5a_5a5a_5a5a, "output written on failure");
}

#[test]
fn one_rank_device_comm() {
    if !symmcomm::cuda::device_count().map(|n| n > 0).unwrap_or(false) {
        eprintln!("skipped: no CUDA device");
        return;
    }
    let mut comm: symmComm_t = std::ptr::null_mut();
    assert_eq!(symmCommInitAll(&mut comm, 1, std::ptr::null()), symmSuccess, "{}", last_error(std::ptr::null_mut()));
    // SAFETY: plain old data.
    let mut dc: symmDevComm = unsafe { std::mem::zeroed() };
    let bad = [
        (symmDevCommRequirements { apiVersion: 200, ..requirements(4) }, symmInvalidUsage, "device API 2.0"),
        (symmDevCommRequirements { devCommSize: 64, ..requirements(4) }, symmInvalidUsage, "layout"),
        (requirements(0), symmInvalidArgument, "blockCount is 0"),
        (requirements(SYMM_DEV_MAX_BLOCKS as u32 + 1), symmInvalidArgument, "SYMM_DEV_MAX_BLOCKS"),
    ];
    for (req, code, words) in bad {
        assert_eq!(symmDevCommCreate(comm, &req, &mut dc), code);
        let msg = last_error(comm);
        assert!(msg.starts_with("symmDevCommCreate") && msg.contains(words), "{msg}");
        assert_eq!(dc.handle, 0, "output written on failure");
    }
    assert_eq!(symmDevCommCreate(comm, &requirements(4), &mut dc), symmSuccess, "{}", last_error(comm));
    assert_eq!((dc.rank, dc.nRanks, dc.blockCount, dc.size), (0, 1, 4, 128));
    assert!(!dc.barrierInbox.is_null() && !dc.status.is_null() && dc.timeoutNs > 0);
    assert_eq!(symmDevCommDestroy(comm, &dc), symmSuccess, "{}", last_error(comm));
    assert_eq!(symmDevCommDestroy(comm, &dc), symmInvalidArgument);
    assert!(last_error(comm).contains("not a live device communicator"), "{}", last_error(comm));
    assert_eq!(symmCommDestroy(comm), symmSuccess);
}
