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
    launch_as(f, cfg, stream, params, false)
}

/// `launch`, and with `dependent` as a programmatic dependent launch
/// (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): the kernel may
/// start before the stream's previous kernel ends, and must wait for it
/// (`griddepcontrol.wait`) before touching memory. Captured into a graph
/// it becomes a programmatic edge.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn launch_as(f: Function, cfg: LaunchConfig, stream: CUstream, params: &mut [*mut c_void], dependent: bool) -> Result<()> {
    if dependent {
        // SAFETY: a plain-data union; the attribute reads only this member.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: cfg.block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: cfg.shared_mem,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        cu!(cuLaunchKernelEx(&config, f.0, params.as_mut_ptr(), std::ptr::null_mut()))?;
        return Ok(());
    }
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

/// Check that `[ptr, ptr + bytes)` is device memory of `dev`: one driver
/// query (this is on every collective's path). Returns the allocation's
/// `[start, end)`.
pub fn check_device_buffer(dev: &Device, ptr: *const c_void, bytes: usize, what: &str) -> Result<(u64, u64)> {
    let addr = ptr as CUdeviceptr;
    // Unlike cuPointerGetAttribute, this succeeds for unknown memory and
    // leaves memory type 0 and an empty range.
    let mut mem_type: u32 = 0;
    let mut ordinal: i32 = -1;
    let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
    let mut attrs = [
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut data: [*mut c_void; 4] = [
        (&mut mem_type as *mut u32).cast(),
        (&mut ordinal as *mut i32).cast(),
        (&mut base as *mut CUdeviceptr).cast(),
        (&mut size as *mut usize).cast(),
    ];
    // SAFETY: four attributes, each with an out pointer of its documented type.
    let res = unsafe { sys::cuPointerGetAttributes(4, attrs.as_mut_ptr(), data.as_mut_ptr(), addr) };
    if res != sys::CUresult::CUDA_SUCCESS || mem_type == 0 || size == 0 {
        bail!(symmInvalidArgument, "{what} ({ptr:p}) is not memory known to CUDA");
    }
    if ordinal != dev.ordinal {
        bail!(symmInvalidArgument, "{what} ({ptr:p}) is on CUDA device {ordinal}, but the communicator uses device {}", dev.ordinal);
    }
    if bytes > 0 {
        let end = addr.checked_add(bytes as u64);
        if end.is_none_or(|end| end > base + size as u64) {
            bail!(
                symmInvalidArgument,
                "{what} ({ptr:p}) + {bytes} bytes runs past the end of its allocation ({size} bytes at {base:#x})"
            );
        }
    }
    Ok((base, base + size as u64))
}

/// Whether the host may read `ptr`: anything but device memory that is not
/// managed (a device pointer read on the host faults instead of failing).
/// Memory CUDA does not know (pageable host memory) is the host's.
pub fn host_readable(ptr: *const c_void) -> bool {
    let mut mem_type: u32 = 0;
    let mut managed: u32 = 0;
    let mut attrs = [CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED];
    let mut data: [*mut c_void; 2] = [(&mut mem_type as *mut u32).cast(), (&mut managed as *mut u32).cast()];
    // SAFETY: two attributes, each with an out pointer of its documented type.
    let res = unsafe { sys::cuPointerGetAttributes(2, attrs.as_mut_ptr(), data.as_mut_ptr(), ptr as CUdeviceptr) };
    res != sys::CUresult::CUDA_SUCCESS || mem_type != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 || managed != 0
}
