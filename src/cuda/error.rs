//! `CUresult` → crate error, keeping the raw code and the failing call.

use std::ffi::CStr;
use std::fmt;

use cudarc::driver::sys;

use crate::error::{symmResult_t, Error};

/// A failed driver call: the raw `CUresult` value, its name and the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaError {
    pub code: i32,
    pub call: &'static str,
}

impl CudaError {
    /// The driver has no such symbol or kernel (CUDA_ERROR_NOT_FOUND).
    pub fn is_not_found(&self) -> bool {
        self.code == sys::CUresult::CUDA_ERROR_NOT_FOUND as i32
    }

    /// `CUDA_ERROR_*` name from the driver, or the number if it has none.
    pub fn name(&self) -> String {
        let mut s: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: only called once the driver loaded (a CudaError exists only
        // after a driver call returned); cuGetErrorName accepts any value and
        // writes a static string or leaves s null.
        let res = unsafe { sys::cuGetErrorName(raw_to_result(self.code), &mut s) };
        if res == sys::CUresult::CUDA_SUCCESS && !s.is_null() {
            // SAFETY: the driver returns a static NUL-terminated string.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            format!("CUDA error {}", self.code)
        }
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name(), self.code)
    }
}

impl From<CudaError> for Error {
    fn from(e: CudaError) -> Self {
        let code = if e.code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY as i32 {
            // Matches NCCL: out of device memory is a system-resource failure.
            symmResult_t::symmSystemError
        } else {
            symmResult_t::symmUnhandledCudaError
        };
        Error::new(code, e.to_string())
    }
}

/// Turn a `CUresult` into `Result<(), CudaError>`.
pub fn check(res: sys::CUresult, call: &'static str) -> Result<(), CudaError> {
    if res == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        let e = CudaError { code: res as i32, call };
        log::debug!(target: "symmcomm::cuda", "{e}");
        Err(e)
    }
}

fn raw_to_result(code: i32) -> sys::CUresult {
    // cuGetErrorName only needs the numeric value; the enum is repr(C) u32-sized.
    // SAFETY: code came from a CUresult the driver returned.
    unsafe { std::mem::transmute::<i32, sys::CUresult>(code) }
}

/// Call a driver function and map its result: `cu!(cuInit(0))?`.
macro_rules! cu {
    ($f:ident ( $($arg:expr),* $(,)? )) => {
        $crate::cuda::error::check(
            // SAFETY: the caller upholds the driver function's contract; the
            // driver library is loaded (see cuda::driver()).
            unsafe { cudarc::driver::sys::$f($($arg),*) },
            stringify!($f),
        )
    };
}
pub(crate) use cu;
