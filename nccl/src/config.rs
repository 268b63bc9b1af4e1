//! The `SYMM_NCCL_*` environment variables, read once per process through
//! one helper (as symmcomm's own `SYMM_*` settings are), the NCCL version
//! this library stands in for, and the logger's set-up at the first call.

use std::ffi::c_int;
use std::sync::OnceLock;

/// The NCCL version this library stands in for (nccl.h 2.28.9, the pinned
/// header it is checked against).
pub const NCCL_VERSION_CODE: c_int = 22809;

/// `SYMM_NCCL_MODE`: which path communicators take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Native where symmcomm can serve the communicator and the call, the
    /// real NCCL for the rest (default).
    Auto,
    /// symmcomm only; the real NCCL is never loaded and calls symmcomm
    /// cannot serve fail with ncclInvalidUsage.
    Symm,
    /// Everything goes to the real NCCL.
    Nccl,
}

#[derive(Debug)]
pub struct Config {
    pub mode: Mode,
    /// `SYMM_NCCL_LIB`: path of the real libnccl.so.2 (default: search).
    pub lib: Option<String>,
    /// Unusable values, logged once the logger is up.
    pub warnings: Vec<String>,
}

pub fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let mut warnings = Vec::new();
        let mode = match param("NCCL_MODE").map(|s| s.to_ascii_lowercase()).as_deref() {
            None | Some("auto") => Mode::Auto,
            Some("symm") => Mode::Symm,
            Some("nccl") => Mode::Nccl,
            Some(other) => {
                warnings.push(format!("SYMM_NCCL_MODE={other:?} is not auto, symm or nccl; using auto"));
                Mode::Auto
            }
        };
        Config { mode, lib: param("NCCL_LIB"), warnings }
    })
}

/// `SYMM_<name>`, trimmed; None when unset or empty. The one place that
/// reads the environment.
fn param(name: &str) -> Option<String> {
    let v = std::env::var(format!("{}{name}", symmcomm::config::PREFIX)).ok()?;
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// symmcomm's logger (SYMM_DEBUG), plus this library's config warnings.
pub(crate) fn debug_init() {
    symmcomm::debug::init();
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cfg = get();
        cfg.warnings.iter().for_each(|w| log::warn!(target: "symmcomm::config", "{w}"));
        log::info!(target: "symmcomm::config", "NCCL stand-in {NCCL_VERSION_CODE}, SYMM_NCCL_MODE={:?}, SYMM_NCCL_LIB={:?}", cfg.mode, cfg.lib);
    });
}
