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
        let module = Module { raw, functions: RwLock::new(HashMap::new()) };
        let n = load_all_functions(raw)?;
        log::info!(target: "symmcomm::cuda", "device {ordinal}: loaded kernel module ({} bytes, {n} kernels)", fatbin_len());
        Ok(module)
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

/// Load every kernel of the module now. Under CUDA's lazy loading (the
/// default) a kernel is otherwise loaded at its first launch, and that can
/// wait for kernels already running in the context; symmcomm's kernels may
/// be spinning on a peer (or a consumer kernel may spin on a progress flag),
/// so a first launch could stall until they time out.
fn load_all_functions(raw: CUmodule) -> Result<usize> {
    // SAFETY: driver() loaded the library before any module exists; `get`
    // only looks symbols up (these need a 12.4+ driver).
    let lib = unsafe { cudarc::driver::sys::culib() };
    let has = |name: &[u8]| unsafe { lib.get::<unsafe extern "C" fn()>(name) }.is_ok();
    if !(has(b"cuModuleGetFunctionCount\0") && has(b"cuModuleEnumerateFunctions\0") && has(b"cuFuncLoad\0")) {
        log::warn!(target: "symmcomm::cuda", "CUDA driver older than 12.4: kernels load lazily at first launch");
        return Ok(0);
    }
    let mut n: u32 = 0;
    cu!(cuModuleGetFunctionCount(&mut n, raw))?;
    let mut functions: Vec<CUfunction> = vec![std::ptr::null_mut(); n as usize];
    cu!(cuModuleEnumerateFunctions(functions.as_mut_ptr(), n, raw))?;
    for f in functions {
        cu!(cuFuncLoad(f))?;
    }
    Ok(n as usize)
}

impl Drop for Module {
    fn drop(&mut self) {
        if let Err(e) = cu!(cuModuleUnload(self.raw)) {
            log::warn!(target: "symmcomm::cuda", "unloading the kernel module: {e}");
        }
    }
}
