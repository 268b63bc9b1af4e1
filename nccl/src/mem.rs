//! `ncclMemAlloc` / `ncclMemFree`, served here with no real NCCL: memory
//! made as NCCL makes it, so that every consumer of NCCL's allocator works
//! unchanged (nccl-tests, the `torch.cuda.MemPool` allocators of PyTorch,
//! Megatron, vLLM):
//! - a cuMem (VMM) allocation on the calling thread's current device whose
//!   handle exports as a POSIX file descriptor (what symmcomm's zero-copy
//!   registration, `ncclCommWindowRegister`, shares with the peers; the
//!   real NCCL's registration accepts it too);
//! - rounded up to the device's recommended granularity;
//! - mapped read/write for that device and for every device that has peer
//!   access to it, so peers may load and store it directly.
//!
//! Without a driver (or a device) the call fails with
//! ncclUnhandledCudaError and says why; it never crashes.

use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::driver::sys::{self, CUdevice};
use parking_lot::Mutex;
use symmcomm::memory::vmm::{self, Mapping, PhysMem, VaRange};

use crate::error::{bail, cuda, Result, NCCL_INVALID_ARGUMENT};

/// One live allocation. Field order is drop order: unmap, then free the
/// addresses.
struct Allocation {
    _map: Mapping,
    _va: VaRange,
    device: CUdevice,
    size: usize,
}

static LIVE: Mutex<Option<HashMap<u64, Allocation>>> = Mutex::new(None);


/// The device of the calling thread's current context; device 0 (made
/// current, as the CUDA runtime does) when there is none.
fn current_device() -> Result<CUdevice> {
    symmcomm::cuda::driver()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the driver is loaded (checked above); one handle out.
    unsafe {
        cuda(sys::cuCtxGetCurrent(&mut ctx), "cuCtxGetCurrent")?;
        if ctx.is_null() {
            let mut dev: CUdevice = 0;
            cuda(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet(0) (no CUDA device?)")?;
            cuda(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
            cuda(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
        }
        let mut dev: CUdevice = 0;
        cuda(sys::cuCtxGetDevice(&mut dev), "cuCtxGetDevice")?;
        Ok(dev)
    }
}

/// `dev` and every device that can access its memory as a peer.
fn accessors(dev: CUdevice) -> Result<Vec<CUdevice>> {
    let mut n = 0;
    // SAFETY: the driver is loaded; ints out.
    unsafe {
        cuda(sys::cuDeviceGetCount(&mut n), "cuDeviceGetCount")?;
        let mut out = vec![dev];
        for ordinal in 0..n {
            let mut other: CUdevice = 0;
            cuda(sys::cuDeviceGet(&mut other, ordinal), "cuDeviceGet")?;
            if other == dev {
                continue;
            }
            let mut can = 0;
            if sys::cuDeviceCanAccessPeer(&mut can, other, dev) == sys::CUresult::CUDA_SUCCESS && can != 0 {
                out.push(other);
            }
        }
        Ok(out)
    }
}

/// `ncclMemAlloc`: `size` bytes (0 gives NULL, as cudaMalloc does).
pub fn alloc(size: usize) -> Result<*mut c_void> {
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    let dev = current_device()?;
    let gran = vmm::granularity(dev)?;
    let Some(rounded) = size.checked_next_multiple_of(gran) else {
        bail!(NCCL_INVALID_ARGUMENT, "size {size} overflows when rounded to the allocation granularity ({gran} bytes)");
    };
    let access = accessors(dev)?;
    let phys = PhysMem::create(dev, rounded)?;
    let va = VaRange::reserve(rounded, gran)?;
    let map = Mapping::new(va.base, phys, &access)?;
    let addr = va.base;
    LIVE.lock().get_or_insert_with(HashMap::new).insert(addr, Allocation { _map: map, _va: va, device: dev, size: rounded });
    log::debug!(target: "symmcomm::memory", "ncclMemAlloc: {size} bytes ({rounded} mapped) at {addr:#x} on device {dev}, accessible by devices {access:?}");
    Ok(addr as *mut c_void)
}

/// `ncclMemFree`: `ptr` from ncclMemAlloc (NULL does nothing). Waits for
/// the device's work first, as cudaFree does.
pub fn free(ptr: *mut c_void) -> Result<()> {
    if ptr.is_null() {
        return Ok(());
    }
    let Some(a) = LIVE.lock().as_mut().and_then(|m| m.remove(&(ptr as u64))) else {
        bail!(NCCL_INVALID_ARGUMENT, "ptr {ptr:p} is not an allocation of this library's ncclMemAlloc (or was freed already)");
    };
    let (device, size) = (a.device, a.size);
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the driver is loaded (the allocation exists). The device's
    // primary context is retained and pushed for the synchronisation and
    // the release, then popped and released.
    let synced = unsafe {
        let retained = cuda(sys::cuDevicePrimaryCtxRetain(&mut ctx, device), "cuDevicePrimaryCtxRetain");
        let pushed = retained.and_then(|_| cuda(sys::cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent"));
        let synced = pushed.clone().and_then(|_| cuda(sys::cuCtxSynchronize(), "cuCtxSynchronize before ncclMemFree"));
        drop(a);
        if pushed.is_ok() {
            let mut popped = std::ptr::null_mut();
            sys::cuCtxPopCurrent_v2(&mut popped);
        }
        if !ctx.is_null() {
            sys::cuDevicePrimaryCtxRelease_v2(device);
        }
        synced
    };
    log::debug!(target: "symmcomm::memory", "ncclMemFree: {size} bytes at {ptr:p}");
    synced
}
