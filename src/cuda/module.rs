//! The kernel fatbin (built from `kernels/*.cu` by build.rs), embedded in the
//! library and loaded once per device with `cuModuleLoadData`.

use std::collections::HashMap;
use std::ffi::CStr;

use cudarc::driver::sys::{CUfunction, CUmodule};
use parking_lot::RwLock;

use super::cu;
use crate::error::{Error, Result};

/// The driver wants the image suitably aligned; include_bytes! gives align 1.
#[repr(C, align(64))]
struct Aligned<B: ?Sized>(B);

static FATBIN: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/symmcomm_kernels.fatbin")));

/// Size of the embedded fatbin in bytes (for diagnostics and tests).
pub fn fatbin_len() -> usize {
    FATBIN.0.len()
}

/// A kernel entry point. `CUfunction` is a driver handle valid on any thread.
#[derive(Clone, Copy, Debug)]
pub struct Function(pub CUfunction);
// SAFETY: driver function handles may be used from any thread.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

/// The loaded module of one device, with a cache of resolved entry points.
pub struct Module {
    raw: CUmodule,
    functions: RwLock<HashMap<&'static str, Function>>,
}

// SAFETY: CUmodule is a driver handle usable from any thread.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Module {
    /// Load the embedded fatbin into the current context (of device `ordinal`).
    pub(crate) fn load(ordinal: i32) -> Result<Module> {
        let mut raw: CUmodule = std::ptr::null_mut();
        cu!(cuModuleLoadData(&mut raw, FATBIN.0.as_ptr().cast())).map_err(|e| {
            Error::from(e).context(format!(
                "loading symmcomm's kernels on device {ordinal} (the library carries sm_80 and sm_90 code and compute_90 PTX)"
            ))
        })?;
        log::info!(target: "symmcomm::cuda", "device {ordinal}: loaded kernel module ({} bytes)", fatbin_len());
        Ok(Module { raw, functions: RwLock::new(HashMap::new()) })
    }

    /// Resolve a kernel by its `extern "C"` name, cached after the first call.
    pub fn function(&self, name: &'static CStr) -> Result<Function> {
        let key = name.to_str().unwrap_or("?");
        if let Some(f) = self.functions.read().get(key) {
            return Ok(*f);
        }
        let mut f: CUfunction = std::ptr::null_mut();
        cu!(cuModuleGetFunction(&mut f, self.raw, name.as_ptr()))
            .map_err(|e| Error::from(e).context(format!("kernel {key} is missing from the module")))?;
        self.functions.write().insert(key, Function(f));
        Ok(Function(f))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if let Err(e) = cu!(cuModuleUnload(self.raw)) {
            log::warn!(target: "symmcomm::cuda", "unloading the kernel module: {e}");
        }
    }
}
