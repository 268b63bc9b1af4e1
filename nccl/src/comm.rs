//! The communicator this library hands out: a symmcomm communicator (the
//! native path), a real NCCL one (the fallback), or both, and which of them
//! serves the communicator's calls.

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::config::{self, Mode};
use crate::error::{bail, from_symm, symm_result, Error, Result, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE};
use crate::id::{self, Ids};
use crate::real::{self, Real, RawId, RealComm};
use crate::symm::{self, SymmComm, SymmUniqueId};

/// `ncclComm_t` as C sees it: a number looked up in [`TABLE`], never dereferenced.
pub type NcclComm = *mut c_void;

/// The null communicator: what an export passes to `boundary` when it has
/// none (errors then go to the calling thread).
pub fn null() -> NcclComm {
    std::ptr::null_mut()
}

pub struct Comm {
    /// The native communicator; null when this one is served by NCCL only.
    pub symm: SymmComm,
    /// The real NCCL communicator; null when there is none.
    pub real: RealComm,
    pub rank: c_int,
    pub nranks: c_int,
    pub device: c_int,
    /// Why the communicator takes its path (for SYMM_DEBUG and errors).
    pub reason: String,
    pub last_error: Mutex<CString>,
    /// Call kinds already forwarded (each is logged the first time).
    forwarded: Mutex<Vec<&'static str>>,
}

// SAFETY: the raw handles are thread-safe handles of symmcomm and NCCL
// (both allow calls from any thread, as NCCL does).
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

impl Comm {
    pub fn native(&self) -> bool {
        !self.symm.is_null()
    }

    /// The real NCCL and this communicator's NCCL communicator, for a call
    /// symmcomm does not serve; `kind` names the call (logged once).
    pub fn forward(&self, kind: &'static str) -> Result<(&'static Real, RealComm)> {
        if self.real.is_null() {
            let why = match real::get() {
                Err(e) => e.msg,
                Ok(_) => "this communicator has no NCCL communicator".to_string(),
            };
            bail!(NCCL_INVALID_USAGE, "{kind} needs the real NCCL, which is not available: {why}");
        }
        let mut seen = self.forwarded.lock();
        if !seen.contains(&kind) {
            seen.push(kind);
            log::info!(target: "symmcomm::init", "rank {}/{}: {kind} forwarded to NCCL ({})", self.rank, self.nranks,
                if self.native() { "not served natively" } else { "NCCL-only communicator" });
        }
        Ok((real::loaded().expect("a communicator with a real NCCL comm implies a loaded library"), self.real))
    }
}

static TABLE: RwLock<Option<HashMap<usize, Arc<Comm>>>> = RwLock::new(None);

/// Hand a communicator to C. Handles are never reused, so a destroyed
/// handle can never reach a newer communicator.
pub fn register(c: Arc<Comm>) -> NcclComm {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    let key = (0x5cc1 << 32) | (NEXT.fetch_add(1, Ordering::Relaxed) << 4);
    TABLE.write().get_or_insert_with(HashMap::new).insert(key, c);
    key as NcclComm
}

pub fn get(h: NcclComm) -> Result<Arc<Comm>> {
    if h.is_null() {
        bail!(NCCL_INVALID_ARGUMENT, "comm is NULL");
    }
    match TABLE.read().as_ref().and_then(|m| m.get(&(h as usize))) {
        Some(c) => Ok(c.clone()),
        None => bail!(NCCL_INVALID_ARGUMENT, "comm ({h:p}) is not a live communicator (already destroyed, or never created)"),
    }
}

pub fn release(h: NcclComm) -> Result<Arc<Comm>> {
    get(h)?;
    match TABLE.write().as_mut().and_then(|m| m.remove(&(h as usize))) {
        Some(c) => Ok(c),
        None => bail!(NCCL_INVALID_ARGUMENT, "comm ({h:p}) is not a live communicator (already destroyed)"),
    }
}

/// `ncclGetUniqueId`: symmcomm's id unless the process is forced to NCCL,
/// NCCL's id when the real library is there (and not forced to symmcomm).
pub fn new_unique_id() -> Result<[u8; 128]> {
    let mode = config::get().mode;
    let mut ids = Ids { symm: None, nccl: None };
    if mode != Mode::Symm {
        match real::get() {
            Ok(r) => {
                let f = real::func(r, r.api.ncclGetUniqueId, "ncclGetUniqueId")?;
                let mut b = [0u8; 128];
                // SAFETY: NCCL writes 128 bytes.
                real::check(r, unsafe { f(b.as_mut_ptr()) }, std::ptr::null_mut(), "ncclGetUniqueId")?;
                ids.nccl = Some(b);
            }
            Err(e) if mode == Mode::Nccl => return Err(e),
            Err(e) => log::info!(target: "symmcomm::init", "unique id without an NCCL part: {}", e.msg),
        }
    }
    if mode != Mode::Nccl {
        let mut s = SymmUniqueId { internal: [0; 128] };
        // SAFETY: symmGetUniqueId writes the 128-byte id.
        symm_result(unsafe { symm::symmGetUniqueId(&mut s) }, std::ptr::null_mut(), "symmGetUniqueId")?;
        ids.symm = Some(s.internal);
    }
    id::pack(&ids)
}

/// `ncclConfig_t`, copied so that the real NCCL gets `blocking = 1`: every
/// call of this library finishes before it returns (which NCCL allows for
/// non-blocking communicators too).
pub struct ConfigCopy {
    bytes: [u64; 32],
    pub blocking: bool,
}

const CONFIG_MAGIC: u32 = 0xcafe_beef;
const CONFIG_BLOCKING_AT: usize = 16;

impl ConfigCopy {
    /// # Safety
    /// `p` is NULL or points to an `ncclConfig_t` of its stated size.
    pub unsafe fn from_ptr(p: *const c_void) -> Result<Option<ConfigCopy>> {
        if p.is_null() {
            return Ok(None);
        }
        let size = (p as *const usize).read_unaligned();
        let magic = (p as *const u8).add(8).cast::<u32>().read_unaligned();
        if magic != CONFIG_MAGIC {
            bail!(NCCL_INVALID_ARGUMENT, "config is not initialised with NCCL_CONFIG_INITIALIZER (magic {magic:#x})");
        }
        if !(CONFIG_BLOCKING_AT + 4..=256).contains(&size) {
            bail!(NCCL_INVALID_ARGUMENT, "config->size is {size}; expected sizeof(ncclConfig_t)");
        }
        let mut bytes = [0u64; 32];
        std::ptr::copy_nonoverlapping(p as *const u8, bytes.as_mut_ptr().cast::<u8>(), size);
        let at = bytes.as_mut_ptr().cast::<u8>().add(CONFIG_BLOCKING_AT).cast::<i32>();
        let blocking = at.read() != 0; // NCCL_CONFIG_UNDEF_INT (INT_MIN, unset) also means blocking
        at.write(1);
        Ok(Some(ConfigCopy { bytes, blocking }))
    }

    pub fn as_ptr(&mut self) -> *mut c_void {
        self.bytes.as_mut_ptr().cast()
    }
}

/// `ncclCommInitRank[Config]` on the calling thread's current device.
pub fn init_rank(nranks: c_int, raw_id: &[u8; 128], rank: c_int, mut config: Option<ConfigCopy>) -> Result<Arc<Comm>> {
    if nranks < 1 {
        bail!(NCCL_INVALID_ARGUMENT, "nranks is {nranks}; it must be at least 1");
    }
    if !(0..nranks).contains(&rank) {
        bail!(NCCL_INVALID_ARGUMENT, "rank {rank} is outside 0..{nranks}");
    }
    let mode = config::get().mode;
    let ids = match id::unpack(raw_id)? {
        Some(ids) => ids,
        // Not ours: an id from a real NCCL (NCCL_COMM_ID, another library).
        None if mode != Mode::Symm => Ids { symm: None, nccl: Some(*raw_id) },
        None => bail!(NCCL_INVALID_ARGUMENT, "the unique id was not made by this library's ncclGetUniqueId"),
    };
    let want_symm = ids.symm.is_some() && mode != Mode::Nccl;
    let real_comm = match ids.nccl {
        Some(n) if mode != Mode::Symm => Some(real_init(nranks, n, rank, config.as_mut())?),
        _ if mode == Mode::Nccl => bail!(NCCL_INVALID_USAGE, "SYMM_NCCL_MODE=nccl, but the unique id has no NCCL part (made with SYMM_NCCL_MODE=symm, or where no real NCCL was found)"),
        _ => None,
    };
    let mut reason = if mode == Mode::Nccl { "SYMM_NCCL_MODE=nccl".to_string() } else { "the unique id has no symmcomm part".to_string() };
    let mut symm_comm: SymmComm = std::ptr::null_mut();
    if want_symm {
        let single_host = match &real_comm {
            Some((r, rc)) => all_on_one_host(r, *rc, rank, nranks),
            None => Ok(true), // symmcomm's own init checks it
        };
        match single_host {
            Err(e) => {
                destroy_real(&real_comm);
                return Err(e);
            }
            Ok(false) => reason = "its ranks span hosts".into(),
            Ok(true) => {
                let sid = SymmUniqueId { internal: ids.symm.unwrap() };
                // SAFETY: symmCommInitRank writes the handle on success.
                let code = unsafe { symm::symmCommInitRank(&mut symm_comm, nranks, sid, rank) };
                if code != 0 {
                    let e = Error::new(from_symm(code), format!("symmCommInitRank: {}", symm::last_error(std::ptr::null_mut())));
                    // symmcomm gives every rank the same outcome. Usage
                    // errors and timeouts would fail NCCL too; anything else
                    // (no peer access, too many ranks, no usable GPU pair)
                    // is a communicator symmcomm cannot serve.
                    let fall_back = real_comm.is_some() && !matches!(code, 4 | 5 | 8);
                    if !fall_back {
                        destroy_real(&real_comm);
                        return Err(e);
                    }
                    symm_comm = std::ptr::null_mut();
                    reason = format!("symmcomm cannot serve it ({})", e.msg);
                } else {
                    reason = "all ranks on one host with peer access".into();
                }
            }
        }
    }
    let device = if !symm_comm.is_null() {
        let mut d = -1;
        // SAFETY: live comm, one int out.
        unsafe { symm::symmCommCuDevice(symm_comm, &mut d) };
        d
    } else {
        real_comm.as_ref().map(|(r, rc)| real_query(r, *rc, r.api.ncclCommCuDevice)).unwrap_or(-1)
    };
    let comm = Comm {
        symm: symm_comm,
        real: real_comm.map_or(std::ptr::null_mut(), |(_, rc)| rc),
        rank,
        nranks,
        device,
        reason,
        last_error: Mutex::new(CString::default()),
        forwarded: Mutex::new(Vec::new()),
    };
    log_path(&comm, "ncclCommInitRank");
    Ok(Arc::new(comm))
}

fn log_path(c: &Comm, how: &str) {
    let path = match (c.native(), c.real.is_null()) {
        (true, false) => "symmcomm (NCCL for the rest)",
        (true, true) => "symmcomm (no NCCL fallback)",
        _ => "NCCL",
    };
    log::info!(target: "symmcomm::init", "{how}: rank {}/{} on device {}: path {path}: {}", c.rank, c.nranks, c.device, c.reason);
}

fn real_init(nranks: c_int, nccl_id: [u8; 128], rank: c_int, config: Option<&mut ConfigCopy>) -> Result<(&'static Real, RealComm)> {
    let r = real::get()?;
    let mut rc: RealComm = std::ptr::null_mut();
    let id = RawId { internal: nccl_id };
    let code = match config {
        // SAFETY: NCCL's signature; the config copy outlives the call.
        Some(cfg) => unsafe { real::func(r, r.api.ncclCommInitRankConfig, "ncclCommInitRankConfig")?(&mut rc, nranks, id, rank, cfg.as_ptr()) },
        None => unsafe { real::func(r, r.api.ncclCommInitRank, "ncclCommInitRank")?(&mut rc, nranks, id, rank) },
    };
    real::check(r, code, rc, "ncclCommInitRank")?;
    Ok((r, rc))
}

/// A comm made by the real NCCL (split, shrink, scalable init).
pub fn wrap_real(r: &'static Real, rc: RealComm, how: &str, reason: &str) -> Arc<Comm> {
    let q = |f| real_query(r, rc, f);
    let c = Comm {
        symm: std::ptr::null_mut(),
        real: rc,
        rank: q(r.api.ncclCommUserRank),
        nranks: q(r.api.ncclCommCount),
        device: q(r.api.ncclCommCuDevice),
        reason: reason.to_string(),
        last_error: Mutex::new(CString::default()),
        forwarded: Mutex::new(Vec::new()),
    };
    log_path(&c, how);
    Arc::new(c)
}

type Query = Option<unsafe extern "C" fn(RealComm, *mut c_int) -> c_int>;

fn real_query(_r: &Real, rc: RealComm, f: Query) -> c_int {
    let mut v = -1;
    if let Some(f) = f {
        // SAFETY: a live NCCL comm and one int out.
        unsafe { f(rc, &mut v) };
    }
    v
}

fn destroy_real(rc: &Option<(&'static Real, RealComm)>) {
    if let Some((r, rc)) = rc {
        if let Some(f) = r.api.ncclCommDestroy {
            // SAFETY: a live NCCL comm, destroyed once.
            unsafe { f(*rc) };
        }
    }
}

/// Whether every rank runs on this host: each rank's host hash, all-gathered
/// over the NCCL communicator (8 bytes; the same answer on every rank).
fn all_on_one_host(r: &Real, rc: RealComm, rank: c_int, nranks: c_int) -> Result<bool> {
    use crate::error::cuda;
    use cudarc::driver::sys;
    let gather = real::func(r, r.api.ncclAllGather, "ncclAllGather")?;
    let n = nranks as usize;
    let mine = symmcomm::comm::host_hash().to_le_bytes();
    let mut all = vec![0u8; 8 * n];
    let mut buf: sys::CUdeviceptr = 0;
    // SAFETY: driver calls on the current context (the NCCL comm's device)
    // with sizes that match the buffers.
    unsafe {
        cuda(sys::cuMemAlloc_v2(&mut buf, 8 * n), "cuMemAlloc")?;
        let run = (|| {
            let at = buf + 8 * rank as u64;
            cuda(sys::cuMemcpyHtoD_v2(at, mine.as_ptr().cast(), 8), "cuMemcpyHtoD")?;
            let code = gather(at as *const c_void, buf as *mut c_void, 8, 1 /* ncclUint8 */, rc, std::ptr::null_mut());
            real::check(r, code, rc, "ncclAllGather (host check)")?;
            cuda(sys::cuCtxSynchronize(), "cuCtxSynchronize")?;
            cuda(sys::cuMemcpyDtoH_v2(all.as_mut_ptr().cast(), buf, 8 * n), "cuMemcpyDtoH")
        })();
        sys::cuMemFree_v2(buf);
        run?;
    }
    Ok(all.chunks(8).all(|h| h == mine))
}

/// `ncclCommSplit`. A native parent gives a native child (symmcomm's split,
/// collective over the parent, the same verdict on every rank), with the
/// real NCCL's split alongside when the parent has an NCCL half, so that
/// the child's forwarded calls still work; an NCCL-only parent gives an
/// NCCL-only child. `None` for NCCL_SPLIT_NOCOLOR.
pub fn split(parent: &Comm, color: c_int, key: c_int, mut config: Option<ConfigCopy>) -> Result<Option<Arc<Comm>>> {
    let how = "ncclCommSplit";
    let cfg_ptr = |c: &mut Option<ConfigCopy>| c.as_mut().map_or(std::ptr::null_mut(), |c| c.as_ptr());
    let real_split = |config: &mut Option<ConfigCopy>| -> Result<RealComm> {
        let (r, rc) = parent.forward(how)?;
        let f = real::func(r, r.api.ncclCommSplit, how)?;
        let mut child: RealComm = std::ptr::null_mut();
        // SAFETY: NCCL's signature; the config copy outlives the call.
        real::check(r, unsafe { f(rc, color, key, &mut child, cfg_ptr(config)) }, rc, how)?;
        Ok(child)
    };
    if !parent.native() {
        let child = real_split(&mut config)?;
        let r = real::loaded().expect("an NCCL-only communicator implies a loaded NCCL");
        return Ok((!child.is_null()).then(|| wrap_real(r, child, how, "split of an NCCL-only communicator")));
    }
    let mut s: SymmComm = std::ptr::null_mut();
    // SAFETY: a live symmcomm comm; NULL config (the parent's settings); one handle out.
    symm_result(unsafe { symm::symmCommSplit(parent.symm, color, key, std::ptr::null(), &mut s) }, parent.symm, "symmCommSplit")?;
    let real_child = if parent.real.is_null() { Ok(std::ptr::null_mut()) } else { real_split(&mut config) };
    Ok(native_child(parent, s, real_child, how, "split of a native communicator")?.made())
}

/// `ncclCommShrink`, called by the ranks that stay: like [`split`], a
/// native child for a native parent (NCCL's shrink alongside when there is
/// an NCCL half), an NCCL-only child otherwise.
pub fn shrink(parent: &Comm, exclude: &[c_int], mut config: Option<ConfigCopy>, flags: c_int) -> Result<Arc<Comm>> {
    let how = "ncclCommShrink";
    let mut real_shrink = || -> Result<RealComm> {
        let (r, rc) = parent.forward(how)?;
        let f = real::func(r, r.api.ncclCommShrink, how)?;
        let mut child: RealComm = std::ptr::null_mut();
        let cfg = config.as_mut().map_or(std::ptr::null_mut(), |c| c.as_ptr());
        let mut list = exclude.to_vec();
        // SAFETY: NCCL's signature; the list and config copy outlive the call.
        real::check(r, unsafe { f(rc, list.as_mut_ptr(), list.len() as c_int, &mut child, cfg, flags) }, rc, how)?;
        Ok(child)
    };
    if !parent.native() {
        let child = real_shrink()?;
        let r = real::loaded().expect("an NCCL-only communicator implies a loaded NCCL");
        return Ok(wrap_real(r, child, how, "shrink of an NCCL-only communicator"));
    }
    let mut s: SymmComm = std::ptr::null_mut();
    // SAFETY: a live comm; `exclude` has exclude.len() ints; NULL config.
    let code = unsafe { symm::symmCommShrink(parent.symm, exclude.as_ptr(), exclude.len() as c_int, std::ptr::null(), flags, &mut s) };
    symm_result(code, parent.symm, "symmCommShrink")?;
    let real_child = if parent.real.is_null() { Ok(std::ptr::null_mut()) } else { real_shrink() };
    native_child(parent, s, real_child, how, "shrink of a native communicator")?
        .made()
        .ok_or_else(|| Error::new(crate::error::NCCL_INTERNAL_ERROR, "symmCommShrink gave no communicator"))
}

enum Child {
    Made(Arc<Comm>),
    None,
}

impl Child {
    fn made(self) -> Option<Arc<Comm>> {
        match self {
            Child::Made(c) => Some(c),
            Child::None => None,
        }
    }
}

/// Wrap a symmcomm child (NULL: no child) and its NCCL half; if the NCCL
/// half failed, the symmcomm child is destroyed and the failure returned.
fn native_child(parent: &Comm, s: SymmComm, real_child: Result<RealComm>, how: &str, reason: &str) -> Result<Child> {
    let rc = match real_child {
        Ok(rc) => rc,
        Err(e) => {
            if !s.is_null() {
                // SAFETY: the child made above, destroyed once.
                unsafe { symm::symmCommDestroy(s) };
            }
            return Err(e);
        }
    };
    if s.is_null() {
        log::info!(target: "symmcomm::init", "{how}: rank {}/{}: no color, no communicator", parent.rank, parent.nranks);
        if !rc.is_null() {
            // Cannot happen (both splits saw the same color); never leak it.
            destroy_real(&real::loaded().map(|r| (r, rc)));
        }
        return Ok(Child::None);
    }
    let (mut rank, mut nranks) = (-1, -1);
    // SAFETY: a live comm; ints out.
    unsafe {
        symm::symmCommUserRank(s, &mut rank);
        symm::symmCommCount(s, &mut nranks);
    }
    let c = Comm {
        symm: s,
        real: rc,
        rank,
        nranks,
        device: parent.device,
        reason: format!("{reason} (parent rank {}/{})", parent.rank, parent.nranks),
        last_error: Mutex::new(CString::default()),
        forwarded: Mutex::new(Vec::new()),
    };
    log_path(&c, how);
    Ok(Child::Made(Arc::new(c)))
}

/// `ncclCommInitAll`: symmcomm's InitAll for the native path and NCCL's for
/// the fallback (each builds its own group from the same device list).
pub fn init_all(devices: &[c_int]) -> Result<Vec<Arc<Comm>>> {
    let mode = config::get().mode;
    let n = devices.len();
    let mut reals: Vec<RealComm> = vec![std::ptr::null_mut(); n];
    let real = if mode == Mode::Symm { None } else { real::get().ok() };
    if mode == Mode::Nccl && real.is_none() {
        real::get()?;
    }
    if let Some(r) = real {
        let f = real::func(r, r.api.ncclCommInitAll, "ncclCommInitAll")?;
        // SAFETY: room for n comms; n device ordinals.
        real::check(r, unsafe { f(reals.as_mut_ptr(), n as c_int, devices.as_ptr()) }, std::ptr::null_mut(), "ncclCommInitAll")?;
    }
    let mut symms: Vec<SymmComm> = vec![std::ptr::null_mut(); n];
    let mut reason = "SYMM_NCCL_MODE=nccl".to_string();
    if mode != Mode::Nccl {
        // SAFETY: room for n comms; n device ordinals.
        let code = unsafe { symm::symmCommInitAll(symms.as_mut_ptr(), n as c_int, devices.as_ptr()) };
        if code == 0 {
            reason = "all devices in this process with peer access".into();
        } else {
            let e = Error::new(from_symm(code), format!("symmCommInitAll: {}", symm::last_error(std::ptr::null_mut())));
            if real.is_none() || matches!(code, 4 | 5) {
                reals.iter().for_each(|rc| destroy_real(&real.map(|r| (r, *rc))));
                return Err(e);
            }
            symms.iter_mut().for_each(|s| *s = std::ptr::null_mut());
            reason = format!("symmcomm cannot serve it ({})", e.msg);
        }
    }
    Ok((0..n)
        .map(|i| {
            let c = Comm {
                symm: symms[i],
                real: reals[i],
                rank: i as c_int,
                nranks: n as c_int,
                device: devices[i],
                reason: reason.clone(),
                last_error: Mutex::new(CString::default()),
                forwarded: Mutex::new(Vec::new()),
            };
            log_path(&c, "ncclCommInitAll");
            Arc::new(c)
        })
        .collect())
}

/// Destroy or abort both halves; the first failure is returned, both run.
pub fn teardown(c: &Comm, abort: bool) -> Result<()> {
    let mut first: Result<()> = Ok(());
    if c.native() {
        // SAFETY: a live symmcomm comm, released once (the handle was taken).
        let code = unsafe { if abort { symm::symmCommAbort(c.symm) } else { symm::symmCommDestroy(c.symm) } };
        first = symm_result(code, std::ptr::null_mut(), if abort { "symmCommAbort" } else { "symmCommDestroy" });
    }
    if !c.real.is_null() {
        let r = real::loaded().expect("loaded");
        let f = if abort { r.api.ncclCommAbort } else { r.api.ncclCommDestroy };
        let f = real::func(r, f, if abort { "ncclCommAbort" } else { "ncclCommDestroy" })?;
        // SAFETY: a live NCCL comm, released once.
        let res = real::check(r, unsafe { f(c.real) }, std::ptr::null_mut(), if abort { "ncclCommAbort" } else { "ncclCommDestroy" });
        if first.is_ok() {
            first = res;
        }
    }
    first
}
