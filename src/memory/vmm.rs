//! RAII wrappers over the CUDA virtual-memory API: physical allocations that
//! can be exported as POSIX file descriptors, address reservations and
//! mappings. Dropping a wrapper releases exactly what it holds.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use cudarc::driver::sys::{
    CUdevice, CUdeviceptr, CUmemAccessDesc, CUmemAccess_flags, CUmemAllocationGranularity_flags,
    CUmemAllocationHandleType, CUmemAllocationProp, CUmemAllocationType, CUmemGenericAllocationHandle, CUmemLocation,
    CUmemLocationType,
};

use crate::cuda::cu;
use crate::error::{Error, Result};

const FD_HANDLE: CUmemAllocationHandleType = CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

fn location(dev: CUdevice) -> CUmemLocation {
    CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: dev }
}

fn alloc_prop(dev: CUdevice) -> CUmemAllocationProp {
    // SAFETY: the struct is plain data; all-zero is a valid starting point.
    let mut prop: CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = FD_HANDLE;
    prop.location = location(dev);
    prop
}

/// The size unit of exportable physical allocations on `dev`.
pub fn granularity(dev: CUdevice) -> Result<usize> {
    let prop = alloc_prop(dev);
    let mut g = 0usize;
    cu!(cuMemGetAllocationGranularity(
        &mut g,
        &prop,
        CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
    ))?;
    Ok(g.max(1))
}

/// Device memory, exportable as a file descriptor. Freed once every mapping
/// of it and this handle are gone.
pub struct PhysMem {
    handle: CUmemGenericAllocationHandle,
    pub size: usize,
}

impl PhysMem {
    /// `size` must be a multiple of `granularity(dev)`.
    pub fn create(dev: CUdevice, size: usize) -> Result<PhysMem> {
        let prop = alloc_prop(dev);
        let mut handle: CUmemGenericAllocationHandle = 0;
        cu!(cuMemCreate(&mut handle, size, &prop, 0))
            .map_err(|e| Error::from(e).context(format!("allocating {size} bytes of device memory")))?;
        Ok(PhysMem { handle, size })
    }

    pub fn export_fd(&self) -> Result<OwnedFd> {
        let mut fd: i32 = -1;
        cu!(cuMemExportToShareableHandle((&mut fd as *mut i32).cast(), self.handle, FD_HANDLE, 0))?;
        // SAFETY: the driver returned a new file descriptor that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Import memory another process exported. The fd may be closed after.
    pub fn import_fd(fd: &OwnedFd, size: usize) -> Result<PhysMem> {
        let mut handle: CUmemGenericAllocationHandle = 0;
        let raw = fd.as_raw_fd() as usize as *mut std::ffi::c_void;
        cu!(cuMemImportFromShareableHandle(&mut handle, raw, FD_HANDLE))?;
        Ok(PhysMem { handle, size })
    }

    /// The allocation backing a mapped address (a new reference; dropping
    /// the result releases only that reference).
    pub fn retain_at(addr: CUdeviceptr, size: usize) -> Result<PhysMem> {
        let mut handle: CUmemGenericAllocationHandle = 0;
        cu!(cuMemRetainAllocationHandle(&mut handle, addr as *mut std::ffi::c_void))?;
        Ok(PhysMem { handle, size })
    }
}

impl Drop for PhysMem {
    fn drop(&mut self) {
        if let Err(e) = cu!(cuMemRelease(self.handle)) {
            log::warn!(target: "symmcomm::memory", "cuMemRelease: {e}");
        }
    }
}

/// A reserved range of virtual addresses (no memory behind it until mapped).
pub struct VaRange {
    pub base: CUdeviceptr,
    pub size: usize,
}

impl VaRange {
    pub fn reserve(size: usize, align: usize) -> Result<VaRange> {
        let mut base: CUdeviceptr = 0;
        cu!(cuMemAddressReserve(&mut base, size, align, 0, 0))
            .map_err(|e| Error::from(e).context(format!("reserving {size} bytes of virtual address space")))?;
        Ok(VaRange { base, size })
    }
}

impl Drop for VaRange {
    fn drop(&mut self) {
        if let Err(e) = cu!(cuMemAddressFree(self.base, self.size)) {
            log::warn!(target: "symmcomm::memory", "cuMemAddressFree: {e}");
        }
    }
}

/// `mem` mapped at `addr` (inside a reservation), readable and writable by
/// the listed devices. Unmapped on drop; holds its own reference to `mem`.
pub struct Mapping {
    pub addr: CUdeviceptr,
    pub size: usize,
    _mem: PhysMem,
}

impl Mapping {
    pub fn new(addr: CUdeviceptr, mem: PhysMem, devices: &[CUdevice]) -> Result<Mapping> {
        let size = mem.size;
        cu!(cuMemMap(addr, size, 0, mem.handle, 0))?;
        let mapping = Mapping { addr, size, _mem: mem };
        set_access(addr, size, devices)?;
        Ok(mapping)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Err(e) = cu!(cuMemUnmap(self.addr, self.size)) {
            log::warn!(target: "symmcomm::memory", "cuMemUnmap: {e}");
        }
    }
}

/// Grant read/write access to `[addr, addr + size)` to each device.
pub fn set_access(addr: CUdeviceptr, size: usize, devices: &[CUdevice]) -> Result<()> {
    let descs: Vec<CUmemAccessDesc> = devices
        .iter()
        .map(|&d| CUmemAccessDesc { location: location(d), flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE })
        .collect();
    cu!(cuMemSetAccess(addr, size, descs.as_ptr(), descs.len()))?;
    Ok(())
}
