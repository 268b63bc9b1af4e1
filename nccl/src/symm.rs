//! symmcomm's C API, called through its stable `extern "C"` symbols (linked
//! in from the symmcomm crate) rather than through Rust module paths, so this
//! crate depends only on what `include/symmcomm.h` promises. Enum arguments
//! and results are plain ints, as they are in the C ABI.

use std::ffi::{c_char, c_int, c_void};

/// `symmComm_t`.
pub type SymmComm = *mut c_void;
/// `struct CUstream_st *`.
pub type Stream = *mut c_void;

/// `symmUniqueId`: 128 plain bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SymmUniqueId {
    pub internal: [u8; 128],
}

extern "C" {
    pub fn symmGetErrorString(result: c_int) -> *const c_char;
    pub fn symmGetLastError(comm: SymmComm) -> *const c_char;
    pub fn symmGetUniqueId(id: *mut SymmUniqueId) -> c_int;
    pub fn symmCommInitRank(comm: *mut SymmComm, nranks: c_int, id: SymmUniqueId, rank: c_int) -> c_int;
    pub fn symmCommInitAll(comms: *mut SymmComm, ndev: c_int, devlist: *const c_int) -> c_int;
    pub fn symmCommDestroy(comm: SymmComm) -> c_int;
    pub fn symmCommAbort(comm: SymmComm) -> c_int;
    pub fn symmCommGetAsyncError(comm: SymmComm, err: *mut c_int) -> c_int;
    pub fn symmCommCuDevice(comm: SymmComm, device: *mut c_int) -> c_int;
    pub fn symmCommCount(comm: SymmComm, count: *mut c_int) -> c_int;
    pub fn symmCommUserRank(comm: SymmComm, rank: *mut c_int) -> c_int;
    pub fn symmCommSplit(comm: SymmComm, color: c_int, key: c_int, config: *const c_void, newcomm: *mut SymmComm) -> c_int;
    pub fn symmCommShrink(
        comm: SymmComm,
        exclude: *const c_int,
        count: c_int,
        config: *const c_void,
        flags: c_int,
        newcomm: *mut SymmComm,
    ) -> c_int;
    pub fn symmCommRegister(comm: SymmComm, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> c_int;
    pub fn symmCommDeregister(comm: SymmComm, handle: *mut c_void) -> c_int;
    pub fn symmGroupStart() -> c_int;
    pub fn symmGroupEnd() -> c_int;
    pub fn symmAllReduce(s: *const c_void, r: *mut c_void, n: usize, dt: c_int, op: c_int, c: SymmComm, st: Stream) -> c_int;
    pub fn symmAllGather(s: *const c_void, r: *mut c_void, n: usize, dt: c_int, c: SymmComm, st: Stream) -> c_int;
    pub fn symmReduceScatter(s: *const c_void, r: *mut c_void, n: usize, dt: c_int, op: c_int, c: SymmComm, st: Stream) -> c_int;
    pub fn symmBroadcast(s: *const c_void, r: *mut c_void, n: usize, dt: c_int, root: c_int, c: SymmComm, st: Stream) -> c_int;
    pub fn symmReduce(s: *const c_void, r: *mut c_void, n: usize, dt: c_int, op: c_int, root: c_int, c: SymmComm, st: Stream) -> c_int;
    pub fn symmRedOpCreatePreMulSum(op: *mut c_int, scalar: *mut c_void, dt: c_int, residence: c_int, c: SymmComm) -> c_int;
    pub fn symmRedOpDestroy(op: c_int, c: SymmComm) -> c_int;
    pub fn symmAllToAll(s: *const c_void, r: *mut c_void, n: usize, dt: c_int, c: SymmComm, st: Stream) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn symmAllToAllv(
        s: *const c_void,
        sc: *const usize,
        sd: *const usize,
        r: *mut c_void,
        rc: *const usize,
        rd: *const usize,
        dt: c_int,
        c: SymmComm,
        st: Stream,
    ) -> c_int;
    pub fn symmSend(s: *const c_void, n: usize, dt: c_int, peer: c_int, c: SymmComm, st: Stream) -> c_int;
    pub fn symmRecv(r: *mut c_void, n: usize, dt: c_int, peer: c_int, c: SymmComm, st: Stream) -> c_int;
}

/// symmcomm's message for its last failure on `comm` (or this thread).
pub fn last_error(comm: SymmComm) -> String {
    // SAFETY: symmGetLastError never returns NULL; the string is NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr(symmGetLastError(comm)) }.to_string_lossy().into_owned()
}
