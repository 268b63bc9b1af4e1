//! Device communicators: what users' own CUDA kernels synchronise through
//! (`symmDevCommCreate`, `include/symmcomm_device.cuh`).
//!
//! A device communicator is a small struct passed **by value** to kernels.
//! Its layout is the device ABI: frozen within a device-API major version
//! (`SYMM_DEVICE_API_VERSION`), checked here against what the caller's
//! headers say (`apiVersion`, `devCommSize` in the requirements) and
//! pinned field by field by `static_assert`s in the device header.
//!
//! Creation is collective. Every rank reserves the same resources in one
//! symmetric allocation (so a peer's copy of any of them is found by
//! arithmetic, like every symmetric address):
//!
//! | part | words | written by |
//! |---|---|---|
//! | barrier inboxes `[blockCount][nRanks]` u32 | arrivals of rank p at slot b | rank p |
//! | barrier epochs `[blockCount][nRanks]` u32 | this rank's arrivals shared with p | this rank |
//! | LL epochs `[blockCount]` u32 | launches of slot b (LL flags) | this rank |
//! | signals `[signalCount][nRanks]` u64 | signal slot s from rank p | rank p |
//! | signal shadows `[signalCount][nRanks]` u64 | counts consumed by `symmDevSignalWaitNext` | this rank |
//! | LL buffer, `llBytes` | packets | peers |
//!
//! All of it starts zeroed and is only ever advanced by kernels (epochs and
//! counters compared wrap-safely), so kernels and graph replays reuse it
//! with no host reset. Device-side waits bound themselves with the
//! communicator's `SYMM_TIMEOUT` and abort flag and record failures in the
//! communicator's status block, in the same record the library's kernels
//! write (`symmDevStatus`, the layout of `kernels/abi.cuh`'s `SymmStatus`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::comm::Comm;
use crate::cuda::abi;
use crate::error::{bail, symmResult_t, Error, Result};
use crate::memory::{pad, symmetric, HostOp};

/// Major version of the device API: kernels built against a header of
/// this major version work with every library of the same major version.
pub const SYMM_DEVICE_API_MAJOR: c_int = 1;
/// Minor version: grows when fields are appended or functions added.
pub const SYMM_DEVICE_API_MINOR: c_int = 0;
/// `SYMM_DEVICE_API_MAJOR * 100 + SYMM_DEVICE_API_MINOR`; the version of
/// the `symmDevComm` layout these headers describe.
pub const SYMM_DEVICE_API_VERSION: c_int = 100;
const _: () = assert!(SYMM_DEVICE_API_VERSION == SYMM_DEVICE_API_MAJOR * 100 + SYMM_DEVICE_API_MINOR);

/// Most barrier/LL slots (`blockCount`) one device communicator reserves.
pub const SYMM_DEV_MAX_BLOCKS: c_int = 4096;
/// Most signal slots (`signalCount`) one device communicator reserves.
pub const SYMM_DEV_MAX_SIGNALS: c_int = 65536;
/// Largest LL buffer (`llBytes`, per rank) one device communicator reserves.
pub const SYMM_DEV_MAX_LL_BYTES: u64 = 1073741824;

/// What a kernel author asks `symmDevCommCreate` for. Start from
/// `SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER` (it fills the first three
/// fields from the caller's headers), then set the counts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct symmDevCommRequirements {
    /// `sizeof(symmDevCommRequirements)` as the caller compiled it.
    pub size: u32,
    /// `SYMM_DEVICE_API_VERSION` of the caller's headers.
    pub apiVersion: u32,
    /// `sizeof(symmDevComm)` as the caller compiled it.
    pub devCommSize: u32,
    /// Barrier slots, each also an LL epoch slot: one per block that
    /// synchronises across ranks (usually the grid size). 1 ..
    /// SYMM_DEV_MAX_BLOCKS.
    pub blockCount: u32,
    /// Signal slots (each holds one 64-bit signal per source rank). 0 ..
    /// SYMM_DEV_MAX_SIGNALS.
    pub signalCount: u32,
    /// Must be 0.
    pub reserved: u32,
    /// Bytes of LL packet buffer per rank (`symmDevComm::llBuffer`), a
    /// multiple of 16 up to SYMM_DEV_MAX_LL_BYTES; 0 for none.
    pub llBytes: u64,
}

/// The communicator's device-side status block, written by the first wait
/// that gives up (library kernels and the device API alike) and read by
/// `symmCommGetAsyncError`. Part of the frozen device ABI (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct symmDevStatus {
    /// Set by the host (symmCommAbort); waits poll it.
    pub abort: u32,
    /// 0 = none, 1 = timeout, 2 = aborted, 3 = ranks called different
    /// collectives, 4 = bad argument to a device function.
    pub error: u32,
    /// Rank that recorded the error.
    pub rank: u32,
    /// What failed: 1-5 library operations, 6 (`SYMM_DEV_STATUS_OP`) a
    /// device-API function.
    pub op: u32,
    /// The rank being waited for.
    pub peer: u32,
    /// Device API: `function << 24 | slot` (waits) or `function << 24 |
    /// argument` (bad arguments), numbers as in symmcomm_device.cuh.
    pub detail: u32,
    /// How long the wait lasted, in nanoseconds.
    pub waitedNs: u64,
    /// Device API: block index, the value waited for (low, high word), the
    /// value seen (low, high), the comparison, the thread index, 0.
    pub info: [u32; 8],
}

/// `symmDevStatus::op` of device-API records.
pub const SYMM_DEV_STATUS_OP: c_int = 6;

/// A device communicator: pass it **by value** to kernels that include
/// `symmcomm_device.cuh`. Filled by `symmDevCommCreate`; valid until
/// `symmDevCommDestroy` or the communicator's destruction. Its layout is
/// frozen for device API major version 1 (the device header asserts every
/// offset); pointers are this rank's copies, in this process.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct symmDevComm {
    /// `SYMM_DEVICE_API_VERSION` of the layout written: the caller's (`req->apiVersion`).
    pub version: u32,
    /// `sizeof(symmDevComm)` of that layout (`req->devCommSize`): bytes written.
    pub size: u32,
    /// This rank.
    pub rank: c_int,
    /// Ranks in the communicator.
    pub nRanks: c_int,
    /// Where rank 0's copy of the symmetric heap starts in this process;
    /// rank r's copy of a symmetric address x is x + (r - rank) * symmStride.
    pub symmBase: u64,
    /// Bytes between consecutive ranks' copies of the symmetric heap.
    pub symmStride: u64,
    /// Barrier / LL epoch slots reserved.
    pub blockCount: u32,
    /// Signal slots reserved.
    pub signalCount: u32,
    /// `[blockCount][nRanks]`: word [b][p] counts rank p's arrivals at barrier b.
    pub barrierInbox: *mut u32,
    /// `[blockCount][nRanks]`: this rank's arrivals at barrier b shared with rank p.
    pub barrierEpochs: *mut u32,
    /// `[blockCount]`: LL epoch of slot b.
    pub llEpochs: *mut u32,
    /// `[signalCount][nRanks]`: signal slot s as set or added to by rank p.
    pub signals: *mut u64,
    /// `[signalCount][nRanks]`: how much of signal [s][p] symmDevSignalWaitNext consumed.
    pub signalShadows: *mut u64,
    /// This rank's LL packet buffer (symmetric; NULL when llBytes is 0).
    pub llBuffer: *mut c_void,
    /// Bytes of `llBuffer`.
    pub llBytes: u64,
    /// The communicator's status block (host memory mapped into the device).
    pub status: *mut symmDevStatus,
    /// Device word that makes the first recorded error the one kept.
    pub errorGuard: *mut u32,
    /// SYMM_TIMEOUT in nanoseconds: how long any device-side wait lasts.
    pub timeoutNs: u64,
    /// Identifies the device communicator to symmDevCommDestroy.
    pub handle: u64,
}

/// The size of `symmDevComm` for each minor version of major version 1.
const DEV_COMM_SIZES: [u32; 1] = [128];
const REQUIREMENTS_SIZE: u32 = 32;
const _: () = assert!(std::mem::size_of::<symmDevComm>() == DEV_COMM_SIZES[SYMM_DEVICE_API_MINOR as usize] as usize);
const _: () = assert!(std::mem::size_of::<symmDevCommRequirements>() == REQUIREMENTS_SIZE as usize);
const _: () = assert!(std::mem::size_of::<symmDevStatus>() == std::mem::size_of::<abi::Status>());
// The public status record is the library's, field for field.
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(symmDevStatus, abort) == offset_of!(abi::Status, abort));
    assert!(offset_of!(symmDevStatus, error) == offset_of!(abi::Status, error));
    assert!(offset_of!(symmDevStatus, rank) == offset_of!(abi::Status, rank));
    assert!(offset_of!(symmDevStatus, op) == offset_of!(abi::Status, op));
    assert!(offset_of!(symmDevStatus, peer) == offset_of!(abi::Status, peer));
    assert!(offset_of!(symmDevStatus, detail) == offset_of!(abi::Status, detail));
    assert!(offset_of!(symmDevStatus, waitedNs) == offset_of!(abi::Status, waited_ns));
    assert!(offset_of!(symmDevStatus, info) == offset_of!(abi::Status, mine));
    assert!(offset_of!(abi::Status, theirs) == offset_of!(abi::Status, mine) + 16);
    assert!(SYMM_DEV_STATUS_OP as u32 == abi::OpId::Device as u32);
};

/// Where each part lives in a device communicator's allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    inbox: usize,
    epochs: usize,
    ll_epochs: usize,
    signals: usize,
    shadows: usize,
    ll: usize,
    total: usize,
}

impl Layout {
    fn new(nranks: usize, blocks: usize, signals: usize, ll_bytes: usize) -> Layout {
        let align = |x: usize| x.next_multiple_of(256);
        let inbox = 0;
        let epochs = align(inbox + 4 * blocks * nranks);
        let ll_epochs = align(epochs + 4 * blocks * nranks);
        let signals_at = align(ll_epochs + 4 * blocks);
        let shadows = align(signals_at + 8 * signals * nranks);
        let ll = (shadows + 8 * signals * nranks).next_multiple_of(4096);
        Layout { inbox, epochs, ll_epochs, signals: signals_at, shadows, ll, total: ll + ll_bytes }
    }
}

/// Check the caller's requirements against this library; `nranks` only
/// shapes messages. Pure, so the CPU tests cover every refusal.
pub(crate) fn validate(req: &symmDevCommRequirements) -> Result<()> {
    let (ours_major, ours_minor) = (SYMM_DEVICE_API_MAJOR as u32, SYMM_DEVICE_API_MINOR as u32);
    let init = "initialise it with SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER";
    if req.apiVersion == 0 || req.size == 0 {
        bail!(symmInvalidUsage, "req->apiVersion is {} and req->size {}: {init}", req.apiVersion, req.size);
    }
    let (major, minor) = (req.apiVersion / 100, req.apiVersion % 100);
    if major != ours_major {
        bail!(
            symmInvalidUsage,
            "the caller's symmcomm_device.cuh is device API {major}.{minor} (SYMM_DEVICE_API_VERSION {}) but this \
             library implements device API {ours_major}.{ours_minor}; rebuild the kernels with this library's headers",
            req.apiVersion
        );
    }
    if minor > ours_minor {
        bail!(
            symmInvalidUsage,
            "the caller's symmcomm_device.cuh is device API {major}.{minor}, newer than this library's \
             {ours_major}.{ours_minor}; use a library at least as new as the headers"
        );
    }
    if req.size != REQUIREMENTS_SIZE {
        bail!(
            symmInvalidUsage,
            "req->size is {} but symmDevCommRequirements of device API {major}.{minor} is {REQUIREMENTS_SIZE} bytes: {init}",
            req.size
        );
    }
    let want = DEV_COMM_SIZES[minor as usize];
    if req.devCommSize != want {
        bail!(
            symmInvalidUsage,
            "req->devCommSize is {} but symmDevComm of device API {major}.{minor} is {want} bytes: the caller's \
             headers and the library disagree on the device communicator's layout",
            req.devCommSize
        );
    }
    if req.blockCount == 0 {
        bail!(
            symmInvalidArgument,
            "req->blockCount is 0; reserve one barrier slot per block that synchronises (usually the grid size)"
        );
    }
    if req.blockCount > SYMM_DEV_MAX_BLOCKS as u32 {
        bail!(symmInvalidArgument, "req->blockCount {} exceeds SYMM_DEV_MAX_BLOCKS ({SYMM_DEV_MAX_BLOCKS})", req.blockCount);
    }
    if req.signalCount > SYMM_DEV_MAX_SIGNALS as u32 {
        bail!(symmInvalidArgument, "req->signalCount {} exceeds SYMM_DEV_MAX_SIGNALS ({SYMM_DEV_MAX_SIGNALS})", req.signalCount);
    }
    if req.llBytes > SYMM_DEV_MAX_LL_BYTES || !req.llBytes.is_multiple_of(16) {
        bail!(
            symmInvalidArgument,
            "req->llBytes {} must be a multiple of 16 (one packet) and at most SYMM_DEV_MAX_LL_BYTES ({SYMM_DEV_MAX_LL_BYTES})",
            req.llBytes
        );
    }
    if req.reserved != 0 {
        bail!(symmInvalidArgument, "req->reserved is {}; it must be 0: {init}", req.reserved);
    }
    Ok(())
}

/// Read the caller's requirements (already checked non-null): the size
/// field first, so a short struct is never read past its end.
///
/// # Safety
/// `req` points to at least 4 readable bytes, and to `req->size` bytes
/// when that is at least our struct's size.
pub(crate) unsafe fn read_requirements(req: *const symmDevCommRequirements) -> symmDevCommRequirements {
    let size = std::ptr::read_unaligned(req.cast::<u32>());
    if size as usize >= std::mem::size_of::<symmDevCommRequirements>() {
        std::ptr::read_unaligned(req)
    } else {
        // Not a struct of ours: keep the size (validate() refuses it).
        symmDevCommRequirements { size, ..Default::default() }
    }
}

/// Collective `symmDevCommCreate`. `req` carries this rank's local verdict
/// on the caller's arguments: every rank learns every rank's verdict, so
/// either all ranks get a device communicator or none does.
pub fn create(comm: &Comm, req: Result<symmDevCommRequirements>) -> Result<symmDevComm> {
    let local = req.and_then(|r| {
        validate(&r)?;
        if comm.is_aborted() {
            bail!(symmInvalidUsage, "the communicator was aborted");
        }
        if let Err(e) = comm.async_error() {
            return Err(Error::new(
                symmResult_t::symmInvalidUsage,
                format!("the communicator has an asynchronous error ({}); destroy or abort it", e.msg),
            ));
        }
        Ok(r)
    });
    let (a, b) = match &local {
        Ok(r) => ((r.blockCount as u64) << 32 | r.signalCount as u64, r.llBytes),
        Err(_) => (0, 0),
    };
    let all = comm.mem.agree_op(&comm.link, HostOp::DevComm, a, b, local.as_ref().err().cloned())?;
    let req = local.expect("agree_op returns this rank's own error first");
    if let Some((r, x)) = all.iter().enumerate().find(|(_, x)| (x.a, x.b) != (a, b)) {
        bail!(
            symmInvalidUsage,
            "ranks asked for different device communicators: rank {} for {} but rank {r} for {} \
             (every rank passes the same requirements)",
            comm.rank,
            describe(a, b),
            describe(x.a, x.b)
        );
    }

    let nranks = comm.nranks;
    let layout = Layout::new(nranks, req.blockCount as usize, req.signalCount as usize, req.llBytes as usize);
    let addr = symmetric::alloc(&comm.mem, &comm.link, layout.total, true)?;
    static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);
    let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    comm.dev_comms.lock().insert(handle, addr);
    let at = |off: usize| addr + off as u64;
    let dc = symmDevComm {
        // The caller's layout (checked above to be one this library knows):
        // a later minor version appends fields the caller has no room for.
        version: req.apiVersion,
        size: req.devCommSize,
        rank: comm.rank as c_int,
        nRanks: nranks as c_int,
        symmBase: comm.mem.space.slot(0),
        symmStride: comm.mem.space.stride as u64,
        blockCount: req.blockCount,
        signalCount: req.signalCount,
        barrierInbox: at(layout.inbox) as *mut u32,
        barrierEpochs: at(layout.epochs) as *mut u32,
        llEpochs: at(layout.ll_epochs) as *mut u32,
        signals: at(layout.signals) as *mut u64,
        signalShadows: at(layout.shadows) as *mut u64,
        llBuffer: if req.llBytes == 0 { std::ptr::null_mut() } else { at(layout.ll) as *mut c_void },
        llBytes: req.llBytes,
        status: comm.status_device_ptr() as *mut symmDevStatus,
        errorGuard: comm.pads.local(comm.rank, pad::ERROR_GUARD_OFFSET) as *mut u32,
        timeoutNs: comm.timeout_ns,
        handle,
    };
    log::info!(
        target: "symmcomm::memory",
        "rank {}: device communicator #{handle}: {} blocks, {} signals, {} LL bytes ({} bytes at {addr:#x})",
        comm.rank, req.blockCount, req.signalCount, req.llBytes, layout.total
    );
    Ok(dc)
}

fn describe(a: u64, b: u64) -> String {
    format!("blockCount={}, signalCount={}, llBytes={b}", a >> 32, a & 0xffff_ffff)
}

/// Collective `symmDevCommDestroy`: waits for this device's work and for
/// every rank, then releases the resources.
pub fn destroy(comm: &Comm, handle: u64) -> Result<()> {
    let Some(&addr) = comm.dev_comms.lock().get(&handle) else {
        bail!(
            symmInvalidArgument,
            "devComm (handle {handle}) is not a live device communicator of this communicator (already destroyed, \
             or made by another communicator)"
        );
    };
    symmetric::free_internal(&comm.mem, &comm.link, addr)?;
    comm.dev_comms.lock().remove(&handle);
    log::info!(target: "symmcomm::memory", "rank {}: device communicator #{handle} destroyed", comm.rank);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::symmResult_t::*;

    fn good() -> symmDevCommRequirements {
        symmDevCommRequirements {
            size: 32,
            apiVersion: SYMM_DEVICE_API_VERSION as u32,
            devCommSize: 128,
            blockCount: 4,
            signalCount: 8,
            reserved: 0,
            llBytes: 4096,
        }
    }

    #[test]
    fn requirements_are_checked_with_clear_messages() {
        assert!(validate(&good()).is_ok());
        let cases: Vec<(symmDevCommRequirements, crate::error::symmResult_t, &str)> = vec![
            (symmDevCommRequirements::default(), symmInvalidUsage, "SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER"),
            (symmDevCommRequirements { apiVersion: 200, ..good() }, symmInvalidUsage, "device API 2.0"),
            (symmDevCommRequirements { apiVersion: 7, ..good() }, symmInvalidUsage, "device API 0.7"),
            (symmDevCommRequirements { apiVersion: 101, ..good() }, symmInvalidUsage, "newer than this library"),
            (symmDevCommRequirements { size: 24, ..good() }, symmInvalidUsage, "req->size is 24"),
            (symmDevCommRequirements { devCommSize: 120, ..good() }, symmInvalidUsage, "disagree on the device communicator's layout"),
            (symmDevCommRequirements { blockCount: 0, ..good() }, symmInvalidArgument, "blockCount is 0"),
            (symmDevCommRequirements { blockCount: 4097, ..good() }, symmInvalidArgument, "SYMM_DEV_MAX_BLOCKS"),
            (symmDevCommRequirements { signalCount: 65537, ..good() }, symmInvalidArgument, "SYMM_DEV_MAX_SIGNALS"),
            (symmDevCommRequirements { llBytes: 17, ..good() }, symmInvalidArgument, "multiple of 16"),
            (symmDevCommRequirements { llBytes: 2 << 30, ..good() }, symmInvalidArgument, "SYMM_DEV_MAX_LL_BYTES"),
            (symmDevCommRequirements { reserved: 1, ..good() }, symmInvalidArgument, "reserved"),
        ];
        for (req, code, words) in cases {
            let e = validate(&req).unwrap_err();
            assert_eq!(e.code, code, "{req:?}: {}", e.msg);
            assert!(e.msg.contains(words), "{req:?}: {}", e.msg);
        }
        // Limits themselves are fine.
        let max = symmDevCommRequirements {
            blockCount: SYMM_DEV_MAX_BLOCKS as u32,
            signalCount: SYMM_DEV_MAX_SIGNALS as u32,
            llBytes: SYMM_DEV_MAX_LL_BYTES,
            ..good()
        };
        assert!(validate(&max).is_ok());
    }

    #[test]
    fn short_requirements_are_not_read_past_their_size() {
        let words = [8u32, 100];
        // SAFETY: 8 readable bytes, and the size field says 8.
        let r = unsafe { read_requirements(words.as_ptr().cast()) };
        assert_eq!(r, symmDevCommRequirements { size: 8, ..Default::default() });
        assert!(validate(&r).is_err());
        let g = good();
        // SAFETY: a whole struct.
        assert_eq!(unsafe { read_requirements(&g) }, g);
    }

    #[test]
    fn layout_parts_do_not_overlap() {
        for n in [1, 2, 3, 8] {
            for (b, s, ll) in [(1, 0, 0), (7, 3, 16), (4096, 65536, 1 << 20)] {
                let l = Layout::new(n, b, s, ll);
                assert!(l.epochs >= l.inbox + 4 * b * n);
                assert!(l.ll_epochs >= l.epochs + 4 * b * n);
                assert!(l.signals >= l.ll_epochs + 4 * b);
                assert!(l.shadows >= l.signals + 8 * s * n);
                assert!(l.ll >= l.shadows + 8 * s * n);
                assert_eq!(l.total, l.ll + ll);
                assert!(l.signals.is_multiple_of(8) && l.shadows.is_multiple_of(8) && l.ll.is_multiple_of(16));
            }
        }
    }

    #[test]
    fn device_records_are_described() {
        let mut s = abi::Status { error: abi::DEV_TIMEOUT, rank: 2, op: 6, peer: 1, detail: 2 << 24 | 5, ..Default::default() };
        s.waited_ns = 2_000_000_000;
        s.mine = [3, 42, 41, 0];
        let e = abi::device_status_error(&s, 2_000_000_000);
        assert_eq!(e.code, symmTimeout);
        for w in ["rank 2", "symmDevBarrierWait", "barrier slot 5", "block 3", "rank 1", "#42", "SYMM_TIMEOUT=2.0"] {
            assert!(e.msg.contains(w), "{w}: {}", e.msg);
        }
        s.error = abi::DEV_ABORTED;
        s.detail = 5 << 24 | 9;
        s.mine = [0, 7, 3, 2];
        let e = abi::device_status_error(&s, 1);
        assert_eq!(e.code, symmRemoteError);
        assert!(e.msg.contains("symmDevSignalWait(signal slot 9 from rank 1, until value >= 7)") && e.msg.contains("aborted"), "{}", e.msg);
        s.error = abi::DEV_INVALID_ARGUMENT;
        s.detail = 4 << 24 | 2;
        s.mine = [1, 9, 8, 0];
        let e = abi::device_status_error(&s, 1);
        assert_eq!(e.code, symmInvalidArgument);
        assert!(e.msg.contains("symmDevSignalAdd") && e.msg.contains("peer 9 is out of range for 8 ranks"), "{}", e.msg);
    }
}
