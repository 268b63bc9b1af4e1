//! The kernels: one fatbin per family (`kernels/<family>.cu`, built by
//! build.rs), embedded in the library and loaded once per device, each
//! family as its own module. Separate modules let build.rs compile and cache
//! each family on its own; a launch costs the same whichever module its
//! `CUfunction` came from.

use std::collections::HashMap;
use std::ffi::CStr;

use cudarc::driver::sys::{CUfunction, CUmodule};
use parking_lot::RwLock;

use super::cu;
use crate::error::{symmResult_t, Error, Result};

/// The driver wants the image suitably aligned; include_bytes! gives align 1.
#[repr(C, align(64))]
struct Aligned<B: ?Sized>(B);

/// (family, fatbin) for every `kernels/*.cu`, in file-name order.
static FAMILIES: &[(&str, &Aligned<[u8]>)] = include!(concat!(env!("OUT_DIR"), "/kernel_families.rs"));

/// Total size of the embedded fatbins in bytes (for diagnostics and tests).
pub fn fatbin_len() -> usize {
    FAMILIES.iter().map(|(_, f)| f.0.len()).sum()
}

/// A kernel entry point. `CUfunction` is a driver handle valid on any thread.
#[derive(Clone, Copy, Debug)]
pub struct Function(pub CUfunction);
// SAFETY: driver function handles may be used from any thread.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

/// The loaded kernel modules of one device (one per family), with a cache
/// of resolved entry points.
pub struct Module {
    raw: Vec<CUmodule>,
    functions: RwLock<HashMap<&'static str, Function>>,
}

// SAFETY: CUmodule is a driver handle usable from any thread.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Module {
    /// Load every embedded family into the current context (of device `ordinal`).
    pub(crate) fn load(ordinal: i32) -> Result<Module> {
        // Built up in place so Drop unloads whatever loaded before a failure.
        let mut module = Module { raw: Vec::with_capacity(FAMILIES.len()), functions: RwLock::new(HashMap::new()) };
        let mut kernels = 0;
        for (family, fatbin) in FAMILIES {
            let mut raw: CUmodule = std::ptr::null_mut();
            cu!(cuModuleLoadData(&mut raw, fatbin.0.as_ptr().cast())).map_err(|e| {
                Error::from(e).context(format!(
                    "loading symmcomm's {family} kernels on device {ordinal} (the library carries sm_80 and sm_90 code and compute_90 PTX)"
                ))
            })?;
            module.raw.push(raw);
            kernels += load_all_functions(raw)?;
        }
        log::info!(target: "symmcomm::cuda",
            "device {ordinal}: loaded {} kernel modules ({} bytes, {kernels} kernels)", FAMILIES.len(), fatbin_len());
        Ok(module)
    }

    /// Resolve a kernel by its `extern "C"` name, cached after the first call.
    pub fn function(&self, name: &'static CStr) -> Result<Function> {
        let key = name.to_str().unwrap_or("?");
        if let Some(f) = self.functions.read().get(key) {
            return Ok(*f);
        }
        for &raw in &self.raw {
            let mut f: CUfunction = std::ptr::null_mut();
            match cu!(cuModuleGetFunction(&mut f, raw, name.as_ptr())) {
                Ok(()) => {
                    self.functions.write().insert(key, Function(f));
                    return Ok(Function(f));
                }
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(Error::from(e).context(format!("looking up kernel {key}"))),
            }
        }
        Err(Error::new(symmResult_t::symmInternalError, format!("kernel {key} is missing from every kernel module")))
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
        for &raw in &self.raw {
            if let Err(e) = cu!(cuModuleUnload(raw)) {
                log::warn!(target: "symmcomm::cuda", "unloading a kernel module: {e}");
            }
        }
    }
}
