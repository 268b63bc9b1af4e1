//! Stream-ordered primitives: fills, the device barrier, point-to-point
//! signals and 32-bit stream write/wait. All are kernels on the caller's
//! stream: nothing blocks the host and everything is graph-capturable.
//! Arguments arrive already checked for null pointers by the C boundary.

use std::ffi::c_void;

use cudarc::driver::sys::CUstream;

use crate::comm::Comm;
use crate::cuda::abi::{FlagArgs, OpId};
use crate::cuda::launch::{self, LaunchConfig};
use crate::error::{bail, Result};
use crate::memory::pad;

const BLOCK: u32 = 256;
/// One warp: flag kernels use a thread per peer at most.
const FLAG_BLOCK: LaunchConfig = LaunchConfig { grid: 1, block: 32, shared_mem: 0 };

/// Pointer to a kernel argument, for cuLaunchKernel's parameter array.
fn arg<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

/// Make the device current, check the stream, and launch `kernel`.
fn enqueue(comm: &Comm, stream: CUstream, kernel: &'static std::ffi::CStr, cfg: LaunchConfig, params: &mut [*mut c_void]) -> Result<()> {
    let dev = &comm.device;
    let _cur = dev.make_current()?;
    launch::check_stream(dev, stream)?;
    let f = dev.module().function(kernel)?;
    launch::launch(f, cfg, stream, params)
}

/// A 32-bit fill of `count` words at `dst` (`bytes` = 4 * count).
pub fn memset32(comm: &Comm, dst: *mut c_void, value: u32, count: usize, bytes: usize, stream: CUstream) -> Result<()> {
    {
        let _cur = comm.device.make_current()?;
        launch::check_device_buffer(&comm.device, dst, bytes, "dst")?;
    }
    // One 16-byte store per thread per pass; a few waves at most.
    let vec_count = (count as u64).div_ceil(4);
    let grid = vec_count.div_ceil(BLOCK as u64).clamp(1, comm.device.sm_count as u64 * 4) as u32;
    let (mut p_dst, mut p_value, mut p_count) = (dst as u64, value, count as u64);
    let cfg = LaunchConfig { grid, block: BLOCK, shared_mem: 0 };
    enqueue(comm, stream, c"symm_memset32", cfg, &mut [arg(&mut p_dst), arg(&mut p_value), arg(&mut p_count)])
}

/// Device-side barrier of all ranks.
pub fn barrier(comm: &Comm, stream: CUstream) -> Result<()> {
    let mut a: FlagArgs = comm.flag_args(OpId::Barrier, pad::BARRIER_OFFSET, 0);
    launch_flag_kernel(comm, stream, c"symm_barrier", &mut a)
}

/// Launch one of the flag-exchange kernels (kernels/signal.cu).
pub fn launch_flag_kernel(comm: &Comm, stream: CUstream, kernel: &'static std::ffi::CStr, a: &mut FlagArgs) -> Result<()> {
    enqueue(comm, stream, kernel, FLAG_BLOCK, &mut [arg(a)])
}

fn check_peer_channel(comm: &Comm, peer: i32, channel: i32) -> Result<(usize, usize)> {
    if peer < 0 || peer as usize >= comm.nranks {
        bail!(symmInvalidArgument, "peer {peer} is out of range for {} ranks", comm.nranks);
    }
    if peer as usize == comm.rank {
        bail!(symmInvalidArgument, "peer {peer} is this rank; signal another rank");
    }
    if channel < 0 || channel as usize >= pad::SIGNAL_CHANNELS {
        bail!(symmInvalidArgument, "channel {channel} is out of range [0, {})", pad::SIGNAL_CHANNELS);
    }
    Ok((peer as usize, channel as usize))
}

/// Set this rank's flag on `channel` in `peer`'s pad (release, system
/// scope), after waiting until `peer` consumed the previous one.
pub fn put_signal(comm: &Comm, peer: i32, channel: i32, stream: CUstream) -> Result<()> {
    let (peer, channel) = check_peer_channel(comm, peer, channel)?;
    let offset = pad::SIGNALS_OFFSET + channel * pad::ROW_BYTES;
    let mut a = comm.flag_args(OpId::PutSignal, offset, peer);
    enqueue(comm, stream, c"symm_put_signal", FLAG_BLOCK, &mut [arg(&mut a)])
}

/// Wait for and consume `peer`'s flag on `channel` (acquire, system scope).
pub fn wait_signal(comm: &Comm, peer: i32, channel: i32, stream: CUstream) -> Result<()> {
    let (peer, channel) = check_peer_channel(comm, peer, channel)?;
    let offset = pad::SIGNALS_OFFSET + channel * pad::ROW_BYTES;
    let mut a = comm.flag_args(OpId::WaitSignal, offset, peer);
    enqueue(comm, stream, c"symm_wait_signal", FLAG_BLOCK, &mut [arg(&mut a)])
}

/// `addr` must be 4-byte aligned memory this device can reach: any copy
/// (ours or a peer's) of a symmetric or registered buffer, or plain memory
/// of this device.
fn check_word(comm: &Comm, addr: *const c_void) -> Result<()> {
    if !(addr as usize).is_multiple_of(4) {
        bail!(symmInvalidArgument, "address {addr:p} is not 4-byte aligned");
    }
    if comm.mem.reachable(addr as u64, 4) {
        return Ok(());
    }
    let _cur = comm.device.make_current()?;
    launch::check_device_buffer(&comm.device, addr, 4, "address").map(|_| ())
}

/// Store `value` at `addr` after the stream's earlier work (release, system scope).
pub fn write_value32(comm: &Comm, addr: *mut c_void, value: u32, stream: CUstream) -> Result<()> {
    check_word(comm, addr)?;
    let (mut p_addr, mut p_value) = (addr as u64, value);
    enqueue(comm, stream, c"symm_write_value32", FLAG_BLOCK, &mut [arg(&mut p_addr), arg(&mut p_value)])
}

/// Wait until `*addr == value` (cond 0) or `*addr` is at or after `value`
/// in wrap-safe order (cond 1), bounded by SYMM_TIMEOUT.
pub fn wait_value32(comm: &Comm, addr: *const c_void, value: u32, cond: i32, stream: CUstream) -> Result<()> {
    if !(0..=1).contains(&cond) {
        bail!(symmInvalidArgument, "cond {cond} is not symmCmpEq (0) or symmCmpGeq (1)");
    }
    check_word(comm, addr)?;
    let (mut p_addr, mut p_value, mut p_cond) = (addr as u64, value, cond as u32);
    let mut wait = comm.wait_ctx(OpId::WaitValue);
    enqueue(
        comm,
        stream,
        c"symm_wait_value32",
        FLAG_BLOCK,
        &mut [arg(&mut p_addr), arg(&mut p_value), arg(&mut p_cond), arg(&mut wait)],
    )
}
