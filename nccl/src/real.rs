//! The real NCCL: found once per process, loaded privately, called through
//! a table of its functions.
//!
//! Search order: `SYMM_NCCL_LIB` (a path; nothing else is tried when it is
//! set), else a `libnccl.so*` this process has already loaded that is not
//! this library, else `libnccl.so.2` in the dynamic linker's directories
//! (`LD_LIBRARY_PATH`, `/etc/ld.so.conf`, the system defaults), skipping
//! this file under any name. It is opened with `RTLD_LOCAL` so its symbols
//! never join the global scope, and `RTLD_DEEPBIND` because libnccl calls
//! some of its own exports through the PLT (ncclGetVersion, ncclBroadcast,
//! ...): without it those calls would bind to our same-named exports when
//! we were loaded first (LD_PRELOAD).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::config::{self, Mode};
use crate::error::{bail, Error, Result, NCCL_INVALID_USAGE};

pub type RealComm = *mut c_void;
type R = c_int;
type P = *mut c_void;
type CP = *const c_void;

macro_rules! real_api {
    ($( $name:ident ( $($ty:ty),* ) -> $ret:ty; )*) => {
        /// Every function of NCCL's nccl.h, as found in the real library.
        #[allow(non_snake_case)]
        pub struct RealApi {
            $( pub $name: Option<unsafe extern "C" fn($($ty),*) -> $ret>, )*
        }
        impl RealApi {
            /// SAFETY: `h` is a live dlopen handle of a libnccl of NCCL's ABI.
            unsafe fn load(h: *mut c_void) -> Self {
                // SAFETY: the symbol, when present, is NCCL's function of this signature.
                RealApi { $( $name: dlsym_fn(h, concat!(stringify!($name), "\0")).map(|f| std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> $ret>(f)), )* }
            }
        }
    };
}

real_api! {
    ncclMemAlloc(*mut P, usize) -> R;
    ncclMemFree(P) -> R;
    ncclGetVersion(*mut c_int) -> R;
    ncclGetUniqueId(*mut u8) -> R;
    ncclCommInitRankConfig(*mut RealComm, c_int, RawId, c_int, P) -> R;
    ncclCommInitRank(*mut RealComm, c_int, RawId, c_int) -> R;
    ncclCommInitAll(*mut RealComm, c_int, *const c_int) -> R;
    ncclCommFinalize(RealComm) -> R;
    ncclCommDestroy(RealComm) -> R;
    ncclCommAbort(RealComm) -> R;
    ncclCommRevoke(RealComm, c_int) -> R;
    ncclCommSplit(RealComm, c_int, c_int, *mut RealComm, P) -> R;
    ncclCommShrink(RealComm, *mut c_int, c_int, *mut RealComm, P, c_int) -> R;
    ncclCommInitRankScalable(*mut RealComm, c_int, c_int, c_int, *mut RawId, P) -> R;
    ncclGetErrorString(c_int) -> *const c_char;
    ncclGetLastError(RealComm) -> *const c_char;
    ncclResetDebugInit() -> ();
    ncclCommGetAsyncError(RealComm, *mut c_int) -> R;
    ncclCommCount(RealComm, *mut c_int) -> R;
    ncclCommCuDevice(RealComm, *mut c_int) -> R;
    ncclCommUserRank(RealComm, *mut c_int) -> R;
    ncclCommRegister(RealComm, P, usize, *mut P) -> R;
    ncclCommDeregister(RealComm, P) -> R;
    ncclCommWindowRegister(RealComm, P, usize, *mut P, c_int) -> R;
    ncclCommWindowDeregister(RealComm, P) -> R;
    ncclRedOpCreatePreMulSum(*mut c_int, P, c_int, c_int, RealComm) -> R;
    ncclRedOpDestroy(c_int, RealComm) -> R;
    ncclReduce(CP, P, usize, c_int, c_int, c_int, RealComm, P) -> R;
    ncclBcast(P, usize, c_int, c_int, RealComm, P) -> R;
    ncclBroadcast(CP, P, usize, c_int, c_int, RealComm, P) -> R;
    ncclAllReduce(CP, P, usize, c_int, c_int, RealComm, P) -> R;
    ncclReduceScatter(CP, P, usize, c_int, c_int, RealComm, P) -> R;
    ncclAllGather(CP, P, usize, c_int, RealComm, P) -> R;
    ncclAlltoAll(CP, P, usize, c_int, RealComm, P) -> R;
    ncclGather(CP, P, usize, c_int, c_int, RealComm, P) -> R;
    ncclScatter(CP, P, usize, c_int, c_int, RealComm, P) -> R;
    ncclSend(CP, usize, c_int, c_int, RealComm, P) -> R;
    ncclRecv(P, usize, c_int, c_int, RealComm, P) -> R;
    ncclGroupStart() -> R;
    ncclGroupEnd() -> R;
    ncclGroupSimulateEnd(P) -> R;
    // The host half of NCCL's device API (nccl_device/*.h): PyTorch links
    // against these, so a preloaded libnccl.so.2 must have them.
    ncclDevCommCreate(RealComm, CP, P) -> R;
    ncclDevCommDestroy(RealComm, CP) -> R;
    ncclTeamWorld(RealComm) -> Team;
    ncclTeamLsa(RealComm) -> Team;
    ncclTeamRail(RealComm) -> Team;
    ncclTeamRankToWorld(RealComm, Team, c_int) -> c_int;
    ncclTeamRankToLsa(RealComm, Team, c_int) -> c_int;
    ncclGinBarrierCreateRequirement(RealComm, Team, c_int, P, P) -> R;
    ncclLsaBarrierCreateRequirement(Team, c_int, P, P) -> R;
    ncclLLA2ACalcSlots(c_int, c_int) -> c_int;
    ncclLLA2ACreateRequirement(c_int, c_int, P, P) -> R;
}

/// `ncclTeam_t` (nccl_device/core.h), passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Team {
    pub n_ranks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

/// `ncclUniqueId` by value: 128 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawId {
    pub internal: [u8; 128],
}

/// The loaded real NCCL.
pub struct Real {
    pub api: RealApi,
    pub path: PathBuf,
    pub version: c_int,
}

// SAFETY: function pointers and a path; the library stays loaded for the
// life of the process.
unsafe impl Send for Real {}
unsafe impl Sync for Real {}

static REAL: OnceLock<std::result::Result<Real, String>> = OnceLock::new();

/// The real NCCL, loading it on first use; the error says why there is none.
pub fn get() -> Result<&'static Real> {
    REAL.get_or_init(load).as_ref().map_err(|why| Error::new(NCCL_INVALID_USAGE, why.clone()))
}

/// Already loaded (does not try to load it).
pub fn loaded() -> Option<&'static Real> {
    REAL.get().and_then(|r| r.as_ref().ok())
}

fn load() -> std::result::Result<Real, String> {
    let cfg = config::get();
    if cfg.mode == Mode::Symm {
        return Err("SYMM_NCCL_MODE=symm: the real NCCL is not used in this process".into());
    }
    let me = own_file();
    let candidates: Vec<PathBuf> = match &cfg.lib {
        Some(p) => vec![PathBuf::from(p)],
        None => loaded_nccl_objects().into_iter().chain(search_dirs().into_iter().map(|d| d.join("libnccl.so.2"))).collect(),
    };
    let mut tried = Vec::new();
    for path in candidates {
        if me.as_ref().is_some_and(|m| same_file(m, &path)) || !path.exists() {
            if cfg.lib.is_some() {
                tried.push(format!("{} (SYMM_NCCL_LIB: {})", path.display(), if path.exists() { "that is this library" } else { "no such file" }));
            }
            continue;
        }
        match open(&path) {
            Ok(real) => {
                log::info!(target: "symmcomm::init", "real NCCL {} loaded from {}", real.version, path.display());
                return Ok(real);
            }
            Err(e) => tried.push(format!("{}: {e}", path.display())),
        }
    }
    Err(format!(
        "no real NCCL library found (set SYMM_NCCL_LIB to the path of NCCL's libnccl.so.2){}",
        if tried.is_empty() { String::new() } else { format!("; tried {}", tried.join("; ")) }
    ))
}

fn open(path: &Path) -> std::result::Result<Real, String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| "path contains NUL".to_string())?;
    // A libnccl the process already loaded into the global scope (PyTorch
    // preloads its wheel's libnccl.so.2 with RTLD_GLOBAL) binds its calls of
    // its own exports (ncclCommGetAsyncError, ...) to ours, which come first
    // under LD_PRELOAD; dlopen would hand back that instance, and
    // RTLD_DEEPBIND cannot rebind it. Load a private copy instead.
    // SAFETY: dlopen of a NUL-terminated path; RTLD_NOLOAD maps nothing.
    let already = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    let private;
    let c = if already.is_null() {
        c
    } else {
        // SAFETY: the handle RTLD_NOLOAD returned, released once.
        unsafe { libc::dlclose(already) };
        private = private_copy(path)?;
        log::info!(target: "symmcomm::init", "{} is already loaded globally: using a private copy", path.display());
        CString::new(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&private))).unwrap()
    };
    // SAFETY: dlopen of a NUL-terminated path.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND) };
    if h.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated message.
        let e = unsafe { libc::dlerror() };
        return Err(if e.is_null() { "dlopen failed".into() } else { unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned() });
    }
    // SAFETY: h is live and (checked next) exports NCCL's API.
    let api = unsafe { RealApi::load(h) };
    let (Some(get_version), Some(_), Some(_)) = (api.ncclGetVersion, api.ncclCommInitRankConfig, api.ncclAllReduce) else {
        return Err("not an NCCL library (ncclGetVersion/ncclCommInitRankConfig/ncclAllReduce missing)".into());
    };
    let mut version = 0;
    // SAFETY: NCCL's ncclGetVersion writes one int.
    unsafe { get_version(&mut version) };
    if version < 22800 {
        return Err(format!("NCCL version {version} is older than 2.28, whose ABI this library speaks"));
    }
    Ok(Real { api, path: path.to_path_buf(), version })
}

/// The library's bytes in an anonymous in-memory file, for a second,
/// separate instance (the loader tells objects apart by file identity).
/// The file may be closed once dlopen has mapped it.
fn private_copy(path: &Path) -> std::result::Result<std::fs::File, String> {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a NUL-terminated name; the fd is owned below.
    let fd = unsafe { libc::memfd_create(c"libnccl-private".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh fd that nothing else owns.
    let mut copy = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut src = std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    std::io::copy(&mut src, &mut copy).map_err(|e| format!("copying {}: {e}", path.display()))?;
    Ok(copy)
}

/// SAFETY: `h` is a live dlopen handle; `name` ends with NUL.
unsafe fn dlsym_fn(h: *mut c_void, name: &str) -> Option<*mut c_void> {
    let p = libc::dlsym(h, name.as_ptr().cast());
    (!p.is_null()).then_some(p)
}

/// This library's own file (to skip it under any name).
pub fn own_file() -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr on an address inside this library.
    let ok = unsafe { libc::dladdr(own_file as *const c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr gives a NUL-terminated name.
    Some(PathBuf::from(unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned()))
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Paths of the `libnccl.so*` objects this process has loaded.
fn loaded_nccl_objects() -> Vec<PathBuf> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, out: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info; `out` is our Vec.
        let name = unsafe { (*info).dlpi_name };
        if !name.is_null() {
            let p = PathBuf::from(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned());
            if p.file_name().is_some_and(|f| f.to_string_lossy().starts_with("libnccl.so")) {
                unsafe { (*(out as *mut Vec<PathBuf>)).push(p) };
            }
        }
        0
    }
    let mut v: Vec<PathBuf> = Vec::new();
    // SAFETY: the callback only reads the info and pushes to `v`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut v as *mut Vec<PathBuf>).cast()) };
    v
}

/// The dynamic linker's directories, in its order (minus RPATHs, which
/// belong to other objects): LD_LIBRARY_PATH, /etc/ld.so.conf (with its
/// includes), the defaults.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect())
        .unwrap_or_default();
    ld_so_conf(Path::new("/etc/ld.so.conf"), &mut dirs, 0);
    for d in ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/cuda/lib64"] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

fn ld_so_conf(file: &Path, dirs: &mut Vec<PathBuf>, depth: u32) {
    let Ok(text) = std::fs::read_to_string(file) else { return };
    for line in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()) {
        if let Some(pattern) = line.strip_prefix("include").map(str::trim) {
            if depth < 4 {
                for f in glob(pattern, file.parent().unwrap_or(Path::new("/"))) {
                    ld_so_conf(&f, dirs, depth + 1);
                }
            }
        } else if line.starts_with('/') {
            dirs.push(PathBuf::from(line));
        }
    }
}

/// Files matching a `dir/prefix*suffix` pattern (what ld.so.conf includes use).
fn glob(pattern: &str, base: &Path) -> Vec<PathBuf> {
    let full = if pattern.starts_with('/') { PathBuf::from(pattern) } else { base.join(pattern) };
    let (Some(dir), Some(name)) = (full.parent(), full.file_name().map(|n| n.to_string_lossy().into_owned())) else { return vec![] };
    let (pre, suf) = name.split_once('*').unwrap_or((&name, ""));
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.file_name().map(|n| n.to_string_lossy()).is_some_and(|n| n.starts_with(pre) && n.ends_with(suf) && n.len() >= pre.len() + suf.len()));
    v.sort();
    v
}

/// A real NCCL call's result; on failure, its message from ncclGetLastError.
pub fn check(real: &Real, code: c_int, comm: RealComm, what: &str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let msg = real.api.ncclGetLastError.map(|f| unsafe { f(comm) }).filter(|p| !p.is_null());
    // SAFETY: NCCL returns a NUL-terminated string.
    let msg = msg.map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()).unwrap_or_default();
    bail!(code, "{what} (real NCCL, {}) failed with ncclResult {code}{}", real.path.display(), if msg.is_empty() { String::new() } else { format!(": {msg}") });
}

/// A function of the real library, or an error naming it.
pub fn func<F: Copy>(real: &Real, f: Option<F>, name: &str) -> Result<F> {
    match f {
        Some(f) => Ok(f),
        None => bail!(NCCL_INVALID_USAGE, "the real NCCL at {} does not export {name}", real.path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_prefix_and_suffix() {
        let d = std::env::temp_dir().join(format!("symm-nccl-glob-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        for f in ["a.conf", "b.conf", "c.txt"] {
            std::fs::write(d.join(f), "").unwrap();
        }
        let got = glob("*.conf", &d);
        assert_eq!(got, vec![d.join("a.conf"), d.join("b.conf")]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn own_file_is_found_and_never_matches_another_file() {
        // In a unit test this is the test binary; it must not equal libc.
        let me = own_file().expect("dladdr finds this object");
        assert!(same_file(&me, &me));
        assert!(!same_file(&me, Path::new("/etc/hostname")));
    }
}
