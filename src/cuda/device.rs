//! Devices, their retained primary contexts, and peer-capability checks.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdevice_attribute, CUdevice_P2PAttribute};
use parking_lot::Mutex;

use super::module::Module;
use super::{cu, driver};
use crate::error::{bail, Result};

/// One GPU as used by symmcomm: its retained primary context and the kernel
/// module loaded into it. Shared by every communicator on that GPU in this
/// process and kept for the rest of the process (see `open`), so the module
/// is loaded once per device.
pub struct Device {
    pub ordinal: i32,
    pub handle: CUdevice,
    pub name: String,
    pub sm_count: i32,
    pub compute_capability: (i32, i32),
    /// `dddd:bb:dd.f`, unique per physical GPU on a host.
    pub pci_bus_id: String,
    ctx: CUcontext,
    module: Option<Module>,
    /// A small allocation made with the modules: gone if the context was
    /// reset, which is how `open` notices (see `still_loaded`).
    marker: sys::CUdeviceptr,
    /// Set when the context was found reset: the modules and the marker
    /// went with it, so Drop must not touch their stale handles.
    reset: std::sync::atomic::AtomicBool,
}

// SAFETY: CUcontext is a driver handle usable from any thread.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// The device behind the calling thread's current context; device 0 when
    /// no context is current (NCCL's cudaGetDevice rule).
    pub fn current_ordinal() -> Result<i32> {
        driver()?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        cu!(cuCtxGetCurrent(&mut ctx))?;
        if ctx.is_null() {
            return Ok(0);
        }
        let mut dev: CUdevice = 0;
        cu!(cuCtxGetDevice(&mut dev))?;
        Ok(dev)
    }

    /// Open (or share) device `ordinal`: retain its primary context and load
    /// the kernel module into it, once per process. A device stays open after
    /// its last communicator is destroyed: loading costs ~100 ms, and each
    /// unload and reload while the context lived on (the application holds
    /// it) left ~12 MiB of device memory and ~4 MiB of host memory behind
    /// (driver 580, one H100: symm_leaks' init cycles with the ranks sharing
    /// the GPU). Reopened if the primary context was reset meanwhile
    /// (cudaDeviceReset), which unloads the modules with it.
    pub fn open(ordinal: i32) -> Result<Arc<Device>> {
        static OPEN: Mutex<Option<HashMap<i32, Arc<Device>>>> = Mutex::new(None);
        let count = super::device_count()?;
        if ordinal < 0 || ordinal >= count {
            bail!(symmInvalidArgument, "CUDA device {ordinal} does not exist ({count} visible)");
        }
        let mut open = OPEN.lock();
        let map = open.get_or_insert_with(HashMap::new);
        if let Some(dev) = map.get(&ordinal) {
            if dev.still_loaded()? {
                return Ok(dev.clone());
            }
            log::info!(target: "symmcomm::cuda", "device {ordinal}: the primary context was reset; loading the kernels again");
            dev.reset.store(true, std::sync::atomic::Ordering::Relaxed);
            map.remove(&ordinal);
        }
        let dev = Arc::new(Self::retain(ordinal)?);
        map.insert(ordinal, dev.clone());
        Ok(dev)
    }

    /// Whether the primary context still holds what we loaded into it: a
    /// reset leaves it inactive until its next use, and then active but
    /// empty, so the marker allocation is asked for too (the driver answers
    /// an error, not a crash, for an address it does not know).
    fn still_loaded(&self) -> Result<bool> {
        let (mut flags, mut active) = (0u32, 0i32);
        cu!(cuDevicePrimaryCtxGetState(self.handle, &mut flags, &mut active))?;
        if active == 0 {
            return Ok(false);
        }
        let mut ctx: CUcontext = std::ptr::null_mut();
        let attr = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_CONTEXT;
        let known = cu!(cuPointerGetAttribute((&mut ctx as *mut CUcontext).cast(), attr, self.marker)).is_ok();
        Ok(known && ctx == self.ctx)
    }

    fn retain(ordinal: i32) -> Result<Device> {
        let mut handle: CUdevice = 0;
        cu!(cuDeviceGet(&mut handle, ordinal))?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        cu!(cuDevicePrimaryCtxRetain(&mut ctx, handle))?;
        // From here on Drop releases the context.
        let mut dev = Device {
            ordinal,
            handle,
            name: String::new(),
            sm_count: 0,
            compute_capability: (0, 0),
            pci_bus_id: String::new(),
            ctx,
            module: None,
            marker: 0,
            reset: std::sync::atomic::AtomicBool::new(false),
        };
        dev.name = device_name(handle)?;
        dev.sm_count = attribute(handle, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        dev.compute_capability = (
            attribute(handle, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(handle, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        dev.pci_bus_id = pci_bus_id(handle)?;
        if dev.compute_capability.0 < 8 {
            bail!(
                symmNotSupported,
                "CUDA device {ordinal} ({}) has compute capability {}.{}; symmcomm needs 8.0 or newer",
                dev.name,
                dev.compute_capability.0,
                dev.compute_capability.1
            );
        }
        {
            let _cur = dev.make_current()?;
            dev.module = Some(Module::load(ordinal)?);
            cu!(cuMemAlloc_v2(&mut dev.marker, 256))?;
        }
        log::info!(
            target: "symmcomm::cuda",
            "device {ordinal}: {} sm_{}{} with {} SMs, PCI {}",
            dev.name, dev.compute_capability.0, dev.compute_capability.1, dev.sm_count, dev.pci_bus_id
        );
        Ok(dev)
    }

    pub fn module(&self) -> &Module {
        self.module.as_ref().expect("module is loaded in Device::retain before the Device is shared")
    }

    pub fn context(&self) -> CUcontext {
        self.ctx
    }

    /// Make this device's context current on the calling thread until the
    /// guard drops, then restore whatever the caller had current.
    pub fn make_current(&self) -> Result<CurrentGuard> {
        let mut prev: CUcontext = std::ptr::null_mut();
        cu!(cuCtxGetCurrent(&mut prev))?;
        if prev != self.ctx {
            cu!(cuCtxSetCurrent(self.ctx))?;
        }
        Ok(CurrentGuard { prev, changed: prev != self.ctx })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if *self.reset.get_mut() {
            // Freed by the reset; unloading stale handles could fault.
            std::mem::forget(self.module.take());
        }
        if let Some(m) = self.module.take() {
            if let Ok(_cur) = self.make_current() {
                drop(m);
                if self.marker != 0 {
                    let _ = cu!(cuMemFree_v2(self.marker));
                }
            }
        }
        if let Err(e) = cu!(cuDevicePrimaryCtxRelease_v2(self.handle)) {
            log::warn!(target: "symmcomm::cuda", "releasing the primary context of device {}: {e}", self.ordinal);
        }
    }
}

/// Restores the previously current context on drop.
pub struct CurrentGuard {
    prev: CUcontext,
    changed: bool,
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        if self.changed {
            let _ = cu!(cuCtxSetCurrent(self.prev));
        }
    }
}

fn attribute(dev: CUdevice, attr: CUdevice_attribute) -> Result<i32> {
    let mut v = 0;
    cu!(cuDeviceGetAttribute(&mut v, attr, dev))?;
    Ok(v)
}

fn device_name(dev: CUdevice) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    cu!(cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev))?;
    // SAFETY: the driver NUL-terminates within the buffer.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

fn pci_bus_id(dev: CUdevice) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 64];
    cu!(cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev))?;
    // SAFETY: the driver NUL-terminates within the buffer.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().to_ascii_lowercase())
}

/// The local ordinal of the GPU with this PCI bus id, if this process sees it.
pub fn ordinal_by_pci_bus_id(bus_id: &str) -> Result<Option<i32>> {
    let Ok(c) = std::ffi::CString::new(bus_id) else { return Ok(None) };
    let mut dev: CUdevice = 0;
    // SAFETY: c is a valid NUL-terminated string.
    let res = unsafe { sys::cuDeviceGetByPCIBusId(&mut dev, c.as_ptr()) };
    if res == sys::CUresult::CUDA_SUCCESS {
        Ok(Some(dev))
    } else {
        Ok(None)
    }
}

/// Peer access and native peer atomics between two devices, both directions.
/// symmcomm's kernels load, store and signal straight into peer memory, so a
/// pair without either is unusable.
pub fn check_peer_pair(a: CUdevice, b: CUdevice) -> Result<()> {
    if a == b {
        return Ok(());
    }
    for (src, dst) in [(a, b), (b, a)] {
        let mut can = 0;
        cu!(cuDeviceCanAccessPeer(&mut can, src, dst))?;
        if can == 0 {
            bail!(symmNotSupported, "CUDA device {src} cannot access peer device {dst} (no P2P path, e.g. no NVLink)");
        }
        let mut atomics = 0;
        cu!(cuDeviceGetP2PAttribute(
            &mut atomics,
            CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
            src,
            dst
        ))?;
        if atomics == 0 {
            bail!(symmNotSupported, "CUDA devices {src} and {dst} have no native peer atomics, which symmcomm's signals need");
        }
    }
    Ok(())
}

/// Let `from`'s context access `to`'s cudaMalloc memory (both in this
/// process). Idempotent.
pub fn enable_peer_access(from: &Device, to: &Device) -> Result<()> {
    if from.ctx == to.ctx {
        return Ok(());
    }
    let _cur = from.make_current()?;
    // SAFETY: both contexts are retained primary contexts.
    let res = unsafe { sys::cuCtxEnablePeerAccess(to.ctx, 0) };
    if res == sys::CUresult::CUDA_SUCCESS || res == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    super::error::check(res, "cuCtxEnablePeerAccess")?;
    Ok(())
}
