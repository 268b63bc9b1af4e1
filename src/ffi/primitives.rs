//! Stream-ordered primitives on device memory.

use std::ffi::{c_int, c_void};

use super::{boundary, comm_arg, not_null, types::*};
use crate::error::symmResult_t;
use crate::error::bail;

/// Fill `count` 32-bit words at `dst` with `value`, ordered on `stream`.
/// `dst` must be 4-byte aligned device memory on the communicator's GPU.
#[no_mangle]
pub extern "C" fn symmMemset32(dst: *mut c_void, value: u32, count: usize, comm: symmComm_t, stream: *mut CUstream_st) -> symmResult_t {
    boundary("symmMemset32", comm, || {
        let c = comm_arg(comm)?;
        if count == 0 {
            return Ok(());
        }
        if dst.is_null() {
            bail!(symmInvalidArgument, "dst is NULL with count {count}");
        }
        if !(dst as usize).is_multiple_of(4) {
            bail!(symmInvalidArgument, "dst ({dst:p}) is not 4-byte aligned");
        }
        let Some(bytes) = count.checked_mul(4) else {
            bail!(symmInvalidArgument, "count {count} words overflows the address space");
        };
        crate::prims::memset32(&c, dst, value, count, bytes, stream.cast())
    })
}

/// Device-side barrier of all ranks, ordered on `stream`: later work on the
/// stream sees everything every rank's stream did before its barrier.
#[no_mangle]
pub extern "C" fn symmBarrier(comm: symmComm_t, stream: *mut CUstream_st) -> symmResult_t {
    boundary("symmBarrier", comm, || crate::prims::barrier(&*comm_arg(comm)?, stream.cast()))
}

/// Signal `peer` on `channel` (0 .. SYMM_SIGNAL_CHANNELS-1): sets this
/// rank's flag in the peer's pad with release semantics at system scope,
/// after the previous signal on that channel was consumed.
#[no_mangle]
pub extern "C" fn symmPutSignal(comm: symmComm_t, peer: c_int, channel: c_int, stream: *mut CUstream_st) -> symmResult_t {
    boundary("symmPutSignal", comm, || crate::prims::put_signal(&*comm_arg(comm)?, peer, channel, stream.cast()))
}

/// Wait on `stream` for `peer`'s signal on `channel` and consume it
/// (acquire, system scope). Bounded by SYMM_TIMEOUT.
#[no_mangle]
pub extern "C" fn symmWaitSignal(comm: symmComm_t, peer: c_int, channel: c_int, stream: *mut CUstream_st) -> symmResult_t {
    boundary("symmWaitSignal", comm, || crate::prims::wait_signal(&*comm_arg(comm)?, peer, channel, stream.cast()))
}

/// Store `value` at `addr` once the stream's earlier work is done (release,
/// system scope). `addr`: 4-byte aligned, this GPU's memory or any rank's
/// copy of a symmetric or registered buffer.
#[no_mangle]
pub extern "C" fn symmStreamWriteValue32(comm: symmComm_t, addr: *mut c_void, value: u32, stream: *mut CUstream_st) -> symmResult_t {
    boundary("symmStreamWriteValue32", comm, || {
        let c = comm_arg(comm)?;
        not_null(addr, "addr")?;
        crate::prims::write_value32(&c, addr, value, stream.cast())
    })
}

/// Hold `stream` until `*addr == value` (symmCmpEq) or `*addr` is at or
/// after `value` in wrap-around order (symmCmpGeq). Bounded by SYMM_TIMEOUT.
#[no_mangle]
pub extern "C" fn symmStreamWaitValue32(comm: symmComm_t, addr: *const c_void, value: u32, cond: RawCmp, stream: *mut CUstream_st) -> symmResult_t {
    boundary("symmStreamWaitValue32", comm, || {
        let c = comm_arg(comm)?;
        not_null(addr, "addr")?;
        crate::prims::wait_value32(&c, addr, value, cond, stream.cast())
    })
}
