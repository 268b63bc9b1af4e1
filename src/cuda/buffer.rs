//! Small owned allocations the library itself needs: device buffers
//! (pointer tables, per-communicator device state) and host-pinned memory
//! mapped into the device (status words the host reads without syncing).

use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;

use super::cu;
use super::device::Device;
use crate::error::Result;

/// `cuMemAlloc` memory on one device, zeroed at creation.
pub struct DeviceBuffer {
    pub ptr: CUdeviceptr,
    pub size: usize,
    device: Arc<Device>,
}

impl DeviceBuffer {
    pub fn zeroed(device: &Arc<Device>, size: usize) -> Result<DeviceBuffer> {
        let _cur = device.make_current()?;
        let mut ptr: CUdeviceptr = 0;
        cu!(cuMemAlloc_v2(&mut ptr, size.max(1)))?;
        let buf = DeviceBuffer { ptr, size, device: device.clone() };
        cu!(cuMemsetD8_v2(ptr, 0, size.max(1)))?;
        wait_legacy_stream()?;
        Ok(buf)
    }

    /// Copy `data` into the start of the buffer; done when this returns.
    pub fn write<T: Copy>(&self, data: &[T]) -> Result<()> {
        let bytes = std::mem::size_of_val(data);
        assert!(bytes <= self.size, "DeviceBuffer::write past the end");
        let _cur = self.device.make_current()?;
        cu!(cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast(), bytes))?;
        wait_legacy_stream()
    }
}

/// Wait for the memsets and copies just issued on the legacy default
/// stream (the current context's). A device memset, and a copy from
/// pageable host memory, may return before the device has done them
/// (CUDA's "API synchronization behavior"), and kernels on non-blocking
/// streams, the kind callers pass, do not wait for the legacy stream: a
/// collective enqueued right after `symmCommRegister` could otherwise read
/// a pointer table not yet written. The copy itself already waited for the
/// legacy stream's earlier work, so this adds only the copy.
pub(crate) fn wait_legacy_stream() -> Result<()> {
    cu!(cuStreamSynchronize(std::ptr::null_mut()))?;
    Ok(())
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Ok(_cur) = self.device.make_current() {
            if let Err(e) = cu!(cuMemFree_v2(self.ptr)) {
                log::warn!(target: "symmcomm::cuda", "cuMemFree: {e}");
            }
        }
    }
}

/// Page-locked host memory that every context can read and write through
/// its own address (UVA: host and device addresses are equal).
pub struct HostMapped {
    ptr: *mut u8,
    pub size: usize,
    device: Arc<Device>,
}

// SAFETY: plain pinned memory; concurrent access is through volatile ops.
unsafe impl Send for HostMapped {}
unsafe impl Sync for HostMapped {}

impl HostMapped {
    /// Zeroed; allocated from `device`'s context, usable from every one.
    pub fn zeroed(device: &Arc<Device>, size: usize) -> Result<HostMapped> {
        let _cur = device.make_current()?;
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
        cu!(cuMemHostAlloc(&mut p, size, 0x01 | 0x02))?;
        // SAFETY: just allocated `size` bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, size) };
        Ok(HostMapped { ptr: p.cast(), size, device: device.clone() })
    }

    pub fn host_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The address kernels use.
    pub fn device_ptr(&self) -> Result<CUdeviceptr> {
        let _cur = self.device.make_current()?;
        let mut d: CUdeviceptr = 0;
        cu!(cuMemHostGetDevicePointer_v2(&mut d, self.ptr.cast(), 0))?;
        Ok(d)
    }
}

impl Drop for HostMapped {
    fn drop(&mut self) {
        let _cur = self.device.make_current();
        if let Err(e) = cu!(cuMemFreeHost(self.ptr.cast())) {
            log::warn!(target: "symmcomm::cuda", "cuMemFreeHost: {e}");
        }
    }
}
