//! The only code that talks to the CUDA driver.
//!
//! Layers, as in cudarc: `cudarc::driver::sys` is the raw API; [`error`] maps
//! `CUresult` into the crate error; [`device`], [`module`] and [`launch`] are
//! the safe pieces the rest of the crate uses.
//!
//! The driver library is loaded at run time. `driver()` checks that it exists
//! before anything calls into cudarc, whose loader would otherwise panic.

pub mod abi;
pub mod error;
pub mod device;
pub mod module;
pub mod launch;
pub mod buffer;

use std::sync::OnceLock;

use crate::error::{symmResult_t, Error, Result};
pub(crate) use error::cu;

/// Load libcuda and call `cuInit` once per process; every later call returns
/// the cached outcome. Fails with `symmUnhandledCudaError` and a message
/// saying what is missing when there is no driver or no device.
pub fn driver() -> Result<()> {
    static STATE: OnceLock<Result<()>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            // SAFETY: only probes whether the library can be dlopened.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err(Error::new(
                    symmResult_t::symmUnhandledCudaError,
                    "the CUDA driver library (libcuda.so.1) was not found: symmcomm needs an NVIDIA driver \
                     and a CUDA device; check the driver installation and LD_LIBRARY_PATH",
                ));
            }
            cu!(cuInit(0)).map_err(|e| Error::from(e).context("CUDA driver initialisation failed (no usable GPU?)"))?;
            let mut version = 0;
            cu!(cuDriverGetVersion(&mut version))?;
            log::info!(target: "symmcomm::cuda", "CUDA driver {}.{} loaded", version / 1000, (version % 1000) / 10);
            Ok(())
        })
        .clone()
}

/// Number of visible CUDA devices, or an error if there is no driver.
pub fn device_count() -> Result<i32> {
    driver()?;
    let mut n = 0;
    cu!(cuDeviceGetCount(&mut n))?;
    Ok(n)
}
