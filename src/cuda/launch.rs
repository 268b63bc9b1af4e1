//! Kernel launch on a caller's stream, and stream/pointer checks.

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUpointer_attribute, CUstream};

use super::cu;
use super::device::Device;
use super::module::Function;
use crate::error::{bail, Result};

/// Grid and block shape of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: u32,
    pub block: u32,
    pub shared_mem: u32,
}

// A CUstream is an opaque driver handle, never dereferenced here.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
/// Launch `f` on `stream` with `params` (pointers to each argument, in order).
/// The device's context must be current (see `Device::make_current`).
pub fn launch(f: Function, cfg: LaunchConfig, stream: CUstream, params: &mut [*mut c_void]) -> Result<()> {
    cu!(cuLaunchKernel(
        f.0,
        cfg.grid,
        1,
        1,
        cfg.block,
        1,
        1,
        cfg.shared_mem,
        stream,
        params.as_mut_ptr(),
        std::ptr::null_mut()
    ))?;
    Ok(())
}

/// The special stream handles (legacy and per-thread default streams) that
/// mean "the current context's default stream".
fn is_default_stream(stream: CUstream) -> bool {
    let raw = stream as usize;
    raw == 0 || raw == 1 || raw == 2
}

/// Reject a stream that belongs to another device's context.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn check_stream(dev: &Device, stream: CUstream) -> Result<()> {
    if is_default_stream(stream) {
        return Ok(());
    }
    let mut ctx: CUcontext = std::ptr::null_mut();
    cu!(cuStreamGetCtx(stream, &mut ctx))?;
    if ctx != dev.context() {
        let mut other = -1;
        if !ctx.is_null() {
            let mut cur: CUcontext = std::ptr::null_mut();
            cu!(cuCtxGetCurrent(&mut cur))?;
            // Look up the stream's device through its context.
            cu!(cuCtxPushCurrent_v2(ctx))?;
            let _ = cu!(cuCtxGetDevice(&mut other));
            cu!(cuCtxPopCurrent_v2(&mut cur))?;
        }
        bail!(
            symmInvalidArgument,
            "stream belongs to CUDA device {other} (or another context), but the communicator uses device {}",
            dev.ordinal
        );
    }
    Ok(())
}

/// Check that `[ptr, ptr + bytes)` is device memory usable by `dev`'s
/// context and return the device it lives on.
pub fn check_device_buffer(dev: &Device, ptr: *const c_void, bytes: usize, what: &str) -> Result<()> {
    let addr = ptr as CUdeviceptr;
    let mut ordinal: i32 = -1;
    let res = unsafe {
        // SAFETY: the driver only inspects the address; ordinal is a valid out pointer.
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            addr,
        )
    };
    if res != sys::CUresult::CUDA_SUCCESS {
        bail!(symmInvalidArgument, "{what} ({ptr:p}) is not memory known to CUDA");
    }
    if ordinal != dev.ordinal {
        bail!(symmInvalidArgument, "{what} ({ptr:p}) is on CUDA device {ordinal}, but the communicator uses device {}", dev.ordinal);
    }
    if bytes > 0 {
        let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
        cu!(cuMemGetAddressRange_v2(&mut base, &mut size, addr))?;
        let end = addr.checked_add(bytes as u64);
        if end.is_none_or(|end| end > base + size as u64) {
            bail!(
                symmInvalidArgument,
                "{what} ({ptr:p}) + {bytes} bytes runs past the end of its allocation ({size} bytes at {base:#x})"
            );
        }
    }
    Ok(())
}
