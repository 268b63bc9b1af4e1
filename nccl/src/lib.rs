//! `libnccl.so.2` over symmcomm: every host function of NCCL 2.28's nccl.h
//! (and its `pnccl*` profiling alias), with NCCL's ABI.
//!
//! Each communicator takes one of two paths, the same on every rank:
//! - **native** (symmcomm) when all its ranks share a host with peer
//!   access: collectives with built-in ops and dtypes, gather, scatter,
//!   send/recv, groups, split and shrink (native children), window
//!   registration, PreMulSum ops, async errors and abort run on symmcomm;
//!   the rest is forwarded to the real NCCL communicator made (or split)
//!   alongside it;
//! - **NCCL** for everything else (ranks on several hosts, children of NCCL
//!   communicators, `SYMM_NCCL_MODE=nccl`).
//!
//! `ncclMemAlloc`/`ncclMemFree` belong to no communicator: served here.
//! Routing depends only on the communicator and the call's arguments, never
//! on rank-local state, so every rank takes the same path for the same call.
//! Files: [`real`] finds and loads the real NCCL, [`id`] packs both unique
//! ids into one, [`comm`] builds communicators, [`group`] spans groups over
//! both paths, [`mem`] is the allocator, [`error`] is the boundary,
//! [`symm`] declares symmcomm's C API.
#![allow(non_snake_case, clippy::not_unsafe_ptr_arg_deref, clippy::too_many_arguments)]

pub mod boundary;
pub mod comm;
pub mod config;
pub mod error;
pub mod group;
pub mod id;
pub mod mem;
pub mod real;
pub mod symm;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use boundary::*;
use comm::{Comm, ConfigCopy, NcclComm};
use error::*;
use parking_lot::Mutex;
use real::{RawId, RealComm};
use symm::{Stream, SymmComm};

/// The NCCL version this library stands in for (nccl.h 2.28.9, the pinned
/// header it is checked against).
pub const NCCL_VERSION_CODE: c_int = 22809;
const NUM_TYPES: c_int = 12;
const NUM_OPS: c_int = 5;

/// symmcomm's logger (SYMM_DEBUG), plus this library's config warnings.
pub(crate) fn debug_init() {
    symmcomm::debug::init();
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cfg = config::get();
        cfg.warnings.iter().for_each(|w| log::warn!(target: "symmcomm::config", "{w}"));
        log::info!(target: "symmcomm::config", "NCCL stand-in {NCCL_VERSION_CODE}, SYMM_NCCL_MODE={:?}, SYMM_NCCL_LIB={:?}", cfg.mode, cfg.lib);
    });
}

/// Defines `ncclX` and its profiling alias `pncclX` (the same function).
macro_rules! nccl_api {
    ($name:ident / $pname:ident ( $($a:ident : $t:ty),* ) -> $ret:ty $body:block) => {
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> $ret {
            // Every call, for finding what a runtime calls per step
            // (SYMM_DEBUG=TRACE SYMM_DEBUG_SUBSYS=API); off, one load.
            log::trace!(target: "symmcomm::api", stringify!($name));
            $body
        }
        #[no_mangle]
        pub extern "C" fn $pname($($a: $t),*) -> $ret { $name($($a),*) }
    };
}

fn null() -> NcclComm {
    std::ptr::null_mut()
}

// ---- version, errors ------------------------------------------------------

nccl_api!(ncclGetVersion / pncclGetVersion(version: *mut c_int) -> c_int {
    boundary("ncclGetVersion", null(), || {
        not_null(version, "version")?;
        // SAFETY: checked non-null.
        unsafe { version.write(NCCL_VERSION_CODE) };
        Ok(())
    })
});

nccl_api!(ncclGetErrorString / pncclGetErrorString(result: c_int) -> *const c_char {
    boundary_value(c"internal error".as_ptr(), || {
        match result {
            0 => c"no error",
            1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO or SYMM_DEBUG=INFO for details)",
            2 => c"unhandled system error (run with NCCL_DEBUG=INFO or SYMM_DEBUG=INFO for details)",
            3 => c"internal error - please report this issue to the symmcomm developers",
            4 => c"invalid argument (run with SYMM_DEBUG=INFO for details)",
            5 => c"invalid usage (run with SYMM_DEBUG=INFO for details)",
            6 => c"remote process exited or there was a network error",
            7 => c"NCCL operation in progress",
            _ => c"unknown result code",
        }
        .as_ptr()
    })
});

nccl_api!(ncclGetLastError / pncclGetLastError(comm: NcclComm) -> *const c_char {
    boundary_value(c"".as_ptr(), || match comm::get(comm) {
        Ok(c) if !comm.is_null() => c.last_error.lock().as_ptr(),
        _ => thread_last_error(),
    })
});

nccl_api!(ncclResetDebugInit / pncclResetDebugInit() -> () {
    // symmcomm reads SYMM_DEBUG once; the real NCCL, when loaded, resets its own.
    boundary_value((), || {
        if let Some(f) = real::loaded().and_then(|r| r.api.ncclResetDebugInit) {
            // SAFETY: no arguments.
            unsafe { f() }
        }
    })
});

// ---- unique ids, communicators -------------------------------------------

nccl_api!(ncclGetUniqueId / pncclGetUniqueId(uniqueId: *mut RawId) -> c_int {
    boundary("ncclGetUniqueId", null(), || {
        not_null(uniqueId, "uniqueId")?;
        let b = comm::new_unique_id()?;
        // SAFETY: checked non-null; 128 bytes.
        unsafe { (*uniqueId).internal = b };
        Ok(())
    })
});

/// Shared by ncclCommInitRank and ncclCommInitRankConfig.
fn init_rank(api: &'static str, out: *mut NcclComm, nranks: c_int, id: RawId, rank: c_int, config: *mut c_void) -> c_int {
    boundary(api, null(), || {
        not_null(out, "comm")?;
        // SAFETY: NULL or an ncclConfig_t of its stated size.
        let cfg = unsafe { ConfigCopy::from_ptr(config) }?;
        if group::active() {
            // Written at the outermost ncclGroupEnd, as NCCL does.
            let out = out as usize;
            return group::defer_init(Box::new(move || {
                let c = comm::init_rank(nranks, &id.internal, rank, cfg)?;
                // SAFETY: the caller keeps *comm valid until ncclGroupEnd.
                unsafe { (out as *mut NcclComm).write(comm::register(c)) };
                Ok(())
            }));
        }
        let c = comm::init_rank(nranks, &id.internal, rank, cfg)?;
        // SAFETY: checked non-null.
        unsafe { out.write(comm::register(c)) };
        Ok(())
    })
}

nccl_api!(ncclCommInitRank / pncclCommInitRank(comm: *mut NcclComm, nranks: c_int, commId: RawId, rank: c_int) -> c_int {
    init_rank("ncclCommInitRank", comm, nranks, commId, rank, std::ptr::null_mut())
});

nccl_api!(ncclCommInitRankConfig / pncclCommInitRankConfig(comm: *mut NcclComm, nranks: c_int, commId: RawId, rank: c_int, config: *mut c_void) -> c_int {
    init_rank("ncclCommInitRankConfig", comm, nranks, commId, rank, config)
});

nccl_api!(ncclCommInitAll / pncclCommInitAll(comms: *mut NcclComm, ndev: c_int, devlist: *const c_int) -> c_int {
    boundary("ncclCommInitAll", null(), || {
        not_null(comms, "comm")?;
        if ndev < 1 {
            bail!(NCCL_INVALID_ARGUMENT, "ndev is {ndev}; it must be at least 1");
        }
        let devices: Vec<c_int> = if devlist.is_null() {
            (0..ndev).collect()
        } else {
            // SAFETY: the caller provides ndev ints.
            unsafe { std::slice::from_raw_parts(devlist, ndev as usize) }.to_vec()
        };
        if let Some((i, d)) = devices.iter().enumerate().find(|(_, d)| **d < 0) {
            bail!(NCCL_INVALID_ARGUMENT, "devlist[{i}] is {d}");
        }
        for (i, c) in comm::init_all(&devices)?.into_iter().enumerate() {
            // SAFETY: room for ndev handles.
            unsafe { comms.add(i).write(comm::register(c)) };
        }
        Ok(())
    })
});

nccl_api!(ncclCommInitRankScalable / pncclCommInitRankScalable(newcomm: *mut NcclComm, nranks: c_int, myrank: c_int, nId: c_int, commIds: *mut RawId, config: *mut c_void) -> c_int {
    boundary("ncclCommInitRankScalable", null(), || {
        not_null(newcomm, "newcomm")?;
        not_null(commIds, "commIds")?;
        if nId < 1 {
            bail!(NCCL_INVALID_ARGUMENT, "nId is {nId}; it must be at least 1");
        }
        // SAFETY: NULL or an ncclConfig_t.
        let mut cfg = unsafe { ConfigCopy::from_ptr(config) }?;
        // SAFETY: the caller provides nId ids.
        let ids = unsafe { std::slice::from_raw_parts(commIds, nId as usize) };
        let mut real_ids = Vec::with_capacity(ids.len());
        for (i, b) in ids.iter().enumerate() {
            real_ids.push(match id::unpack(&b.internal)? {
                Some(ids) => RawId { internal: ids.nccl.ok_or_else(|| Error::new(NCCL_INVALID_USAGE, format!("commIds[{i}] has no NCCL part (no real NCCL where it was made)")))? },
                None => *b,
            });
        }
        let r = real::get()?;
        let f = real::func(r, r.api.ncclCommInitRankScalable, "ncclCommInitRankScalable")?;
        let mut rc: RealComm = std::ptr::null_mut();
        let cfg_ptr = cfg.as_mut().map_or(std::ptr::null_mut(), |c| c.as_ptr());
        // SAFETY: NCCL's signature; buffers outlive the call.
        real::check(r, unsafe { f(&mut rc, nranks, myrank, nId, real_ids.as_mut_ptr(), cfg_ptr) }, rc, "ncclCommInitRankScalable")?;
        let c = comm::wrap_real(r, rc, "ncclCommInitRankScalable", "made by ncclCommInitRankScalable (NCCL only)");
        // SAFETY: checked non-null.
        unsafe { newcomm.write(comm::register(c)) };
        Ok(())
    })
});

nccl_api!(ncclCommFinalize / pncclCommFinalize(comm: NcclComm) -> c_int {
    boundary("ncclCommFinalize", comm, || {
        let c = comm::get(comm)?;
        // symmcomm's destroy already waits for the device; NCCL's finalize
        // flushes its own outstanding work.
        if !c.real.is_null() {
            let (r, rc) = c.forward("ncclCommFinalize")?;
            let f = real::func(r, r.api.ncclCommFinalize, "ncclCommFinalize")?;
            // SAFETY: a live NCCL comm.
            real::check(r, unsafe { f(rc) }, rc, "ncclCommFinalize")?;
        }
        Ok(())
    })
});

nccl_api!(ncclCommDestroy / pncclCommDestroy(comm: NcclComm) -> c_int {
    boundary("ncclCommDestroy", null(), || { let c = comm::release(comm)?; comm::teardown(&c, false) })
});

nccl_api!(ncclCommAbort / pncclCommAbort(comm: NcclComm) -> c_int {
    boundary("ncclCommAbort", null(), || { let c = comm::release(comm)?; comm::teardown(&c, true) })
});

nccl_api!(ncclCommRevoke / pncclCommRevoke(comm: NcclComm, revokeFlags: c_int) -> c_int {
    boundary("ncclCommRevoke", comm, || {
        let c = comm::get(comm)?;
        let (r, rc) = c.forward("ncclCommRevoke")?;
        let f = real::func(r, r.api.ncclCommRevoke, "ncclCommRevoke")?;
        // SAFETY: a live NCCL comm.
        real::check(r, unsafe { f(rc, revokeFlags) }, rc, "ncclCommRevoke")
    })
});

nccl_api!(ncclCommSplit / pncclCommSplit(comm: NcclComm, color: c_int, key: c_int, newcomm: *mut NcclComm, config: *mut c_void) -> c_int {
    // A native parent gives a native child (comm::split says how).
    boundary("ncclCommSplit", comm, || {
        let c = comm::get(comm)?;
        not_null(newcomm, "newcomm")?;
        // SAFETY: NULL or an ncclConfig_t.
        let cfg = unsafe { ConfigCopy::from_ptr(config) }?;
        let out = newcomm as usize;
        let run = move || {
            let child = comm::split(&c, color, key, cfg)?;
            // SAFETY: checked non-null; the caller keeps it valid until the call (or ncclGroupEnd) returns.
            unsafe { (out as *mut NcclComm).write(child.map_or(null(), comm::register)) };
            Ok(())
        };
        if group::active() {
            // Written at the outermost ncclGroupEnd, each split on its own
            // thread (one thread may split every GPU's communicator).
            return group::defer_init(Box::new(run));
        }
        run()
    })
});

nccl_api!(ncclCommShrink / pncclCommShrink(comm: NcclComm, excludeRanksList: *mut c_int, excludeRanksCount: c_int, newcomm: *mut NcclComm, config: *mut c_void, shrinkFlags: c_int) -> c_int {
    // Called by the ranks that stay; a native parent gives a native child.
    boundary("ncclCommShrink", comm, || {
        let c = comm::get(comm)?;
        not_null(newcomm, "newcomm")?;
        if excludeRanksCount < 0 {
            bail!(NCCL_INVALID_ARGUMENT, "excludeRanksCount is {excludeRanksCount}");
        }
        if excludeRanksCount > 0 {
            not_null(excludeRanksList, "excludeRanksList")?;
        }
        if !(0..=1).contains(&shrinkFlags) {
            bail!(NCCL_INVALID_ARGUMENT, "shrinkFlags is {shrinkFlags}; use NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT");
        }
        let exclude: Vec<c_int> = if excludeRanksCount == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller provides excludeRanksCount ints.
            unsafe { std::slice::from_raw_parts(excludeRanksList, excludeRanksCount as usize) }.to_vec()
        };
        // SAFETY: NULL or an ncclConfig_t.
        let cfg = unsafe { ConfigCopy::from_ptr(config) }?;
        let out = newcomm as usize;
        let run = move || {
            let child = comm::shrink(&c, &exclude, cfg, shrinkFlags)?;
            // SAFETY: checked non-null; valid until the call (or ncclGroupEnd) returns.
            unsafe { (out as *mut NcclComm).write(comm::register(child)) };
            Ok(())
        };
        if group::active() {
            return group::defer_init(Box::new(run));
        }
        run()
    })
});

nccl_api!(ncclCommGetAsyncError / pncclCommGetAsyncError(comm: NcclComm, asyncError: *mut c_int) -> c_int {
    boundary("ncclCommGetAsyncError", comm, || {
        let c = comm::get(comm)?;
        not_null(asyncError, "asyncError")?;
        let mut code = NCCL_SUCCESS;
        if c.native() {
            let mut e = 0;
            // SAFETY: a live symmcomm comm; one int out.
            symm_result(unsafe { symm::symmCommGetAsyncError(c.symm, &mut e) }, c.symm, "symmCommGetAsyncError")?;
            if e != 0 {
                code = from_symm(e);
                let msg = symm::last_error(c.symm);
                log::info!(target: "symmcomm::coll", "rank {}/{}: {msg}", c.rank, c.nranks);
                record(comm, msg);
            }
        }
        if code == NCCL_SUCCESS && !c.real.is_null() {
            let r = real::loaded().expect("loaded");
            let f = real::func(r, r.api.ncclCommGetAsyncError, "ncclCommGetAsyncError")?;
            // SAFETY: a live NCCL comm; one int out.
            real::check(r, unsafe { f(c.real, &mut code) }, c.real, "ncclCommGetAsyncError")?;
        }
        // SAFETY: checked non-null.
        unsafe { asyncError.write(code) };
        Ok(())
    })
});

fn query(api: &'static str, comm: NcclComm, out: *mut c_int, f: impl FnOnce(&Comm) -> c_int) -> c_int {
    boundary(api, comm, || {
        let c = comm::get(comm)?;
        not_null(out, "output pointer")?;
        // SAFETY: checked non-null.
        unsafe { out.write(f(&c)) };
        Ok(())
    })
}

nccl_api!(ncclCommCount / pncclCommCount(comm: NcclComm, count: *mut c_int) -> c_int {
    query("ncclCommCount", comm, count, |c| c.nranks)
});
nccl_api!(ncclCommCuDevice / pncclCommCuDevice(comm: NcclComm, device: *mut c_int) -> c_int {
    query("ncclCommCuDevice", comm, device, |c| c.device)
});
nccl_api!(ncclCommUserRank / pncclCommUserRank(comm: NcclComm, rank: *mut c_int) -> c_int {
    query("ncclCommUserRank", comm, rank, |c| c.rank)
});

// ---- registration, memory -------------------------------------------------

/// A buffer registration (ncclCommRegister) or window (ncclCommWindowRegister).
struct Registration {
    comm: Arc<Comm>,
    window: bool,
    /// symmCommRegister's handle (windows on native communicators), in a
    /// slot of its own: inside a group, symmcomm writes it at ncclGroupEnd.
    symm: Box<*mut c_void>,
    /// The real NCCL's handle or window.
    real: *mut c_void,
}
// SAFETY: opaque handles of thread-safe libraries.
unsafe impl Send for Registration {}

static REGISTRATIONS: Mutex<Option<HashMap<usize, Registration>>> = Mutex::new(None);

fn add_registration(r: Registration) -> *mut c_void {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    let key = (0x5ec1 << 32) | (NEXT.fetch_add(1, Ordering::Relaxed) << 4);
    REGISTRATIONS.lock().get_or_insert_with(HashMap::new).insert(key, r);
    key as *mut c_void
}

fn take_registration(c: &Arc<Comm>, handle: *mut c_void, window: bool) -> Result<Registration> {
    let mut table = REGISTRATIONS.lock();
    let m = table.get_or_insert_with(HashMap::new);
    match m.get(&(handle as usize)) {
        Some(r) if Arc::ptr_eq(&r.comm, c) && r.window == window => Ok(m.remove(&(handle as usize)).unwrap()),
        Some(_) => bail!(NCCL_INVALID_ARGUMENT, "handle {handle:p} belongs to another communicator or is not a {}", if window { "window" } else { "registration" }),
        None => bail!(NCCL_INVALID_ARGUMENT, "handle {handle:p} is not a live {}", if window { "window" } else { "registration" }),
    }
}

nccl_api!(ncclCommRegister / pncclCommRegister(comm: NcclComm, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> c_int {
    boundary("ncclCommRegister", comm, || {
        let c = comm::get(comm)?;
        not_null(handle, "handle")?;
        not_null(buff, "buff")?;
        // NCCL's registration is local (not collective), so it cannot become
        // symmcomm's collective one: native collectives read unregistered
        // buffers through their staging path. The real NCCL communicator,
        // when there is one, registers it for the calls it serves.
        let mut real_handle = std::ptr::null_mut();
        if !c.real.is_null() {
            let (r, rc) = c.forward("ncclCommRegister")?;
            let f = real::func(r, r.api.ncclCommRegister, "ncclCommRegister")?;
            // SAFETY: NCCL's signature.
            real::check(r, unsafe { f(rc, buff, size, &mut real_handle) }, rc, "ncclCommRegister")?;
        }
        let h = add_registration(Registration { comm: c, window: false, symm: Box::new(std::ptr::null_mut()), real: real_handle });
        // SAFETY: checked non-null.
        unsafe { handle.write(h) };
        Ok(())
    })
});

nccl_api!(ncclCommDeregister / pncclCommDeregister(comm: NcclComm, handle: *mut c_void) -> c_int {
    boundary("ncclCommDeregister", comm, || {
        let c = comm::get(comm)?;
        let reg = take_registration(&c, handle, false)?;
        if !reg.real.is_null() {
            let (r, rc) = c.forward("ncclCommDeregister")?;
            let f = real::func(r, r.api.ncclCommDeregister, "ncclCommDeregister")?;
            // SAFETY: NCCL's handle from ncclCommRegister.
            real::check(r, unsafe { f(rc, reg.real) }, rc, "ncclCommDeregister")?;
        }
        Ok(())
    })
});

nccl_api!(ncclCommWindowRegister / pncclCommWindowRegister(comm: NcclComm, buff: *mut c_void, size: usize, win: *mut *mut c_void, winFlags: c_int) -> c_int {
    boundary("ncclCommWindowRegister", comm, || {
        let c = comm::get(comm)?;
        not_null(win, "win")?;
        not_null(buff, "buff")?;
        let (mut s, mut rw) = (Box::new(std::ptr::null_mut()), std::ptr::null_mut());
        if c.native() {
            // Collective in both libraries: symmcomm's registration makes
            // the buffer readable by peers in place (zero-copy). Any part
            // of a cuMem allocation (an ncclMemAlloc block a memory pool
            // hands out in pieces) or of a cudaMalloc one will do. Inside
            // a group it runs at ncclGroupEnd and writes the boxed slot.
            // SAFETY: a live comm; one handle out, which outlives the call.
            symm_result(unsafe { symm::symmCommRegister(c.symm, buff, size, &mut *s) }, c.symm, "symmCommRegister")?;
            log::info!(target: "symmcomm::memory", "ncclCommWindowRegister: rank {}/{}: {size} bytes at {buff:p}: symmcomm registration (zero-copy){}",
                c.rank, c.nranks, if group::active() { ", made at ncclGroupEnd" } else { "" });
        } else {
            let (r, rc) = c.forward("ncclCommWindowRegister")?;
            let f = real::func(r, r.api.ncclCommWindowRegister, "ncclCommWindowRegister")?;
            // SAFETY: NCCL's signature.
            real::check(r, unsafe { f(rc, buff, size, &mut rw, winFlags) }, rc, "ncclCommWindowRegister")?;
        }
        let h = add_registration(Registration { comm: c, window: true, symm: s, real: rw });
        // SAFETY: checked non-null.
        unsafe { win.write(h) };
        Ok(())
    })
});

nccl_api!(ncclCommWindowDeregister / pncclCommWindowDeregister(comm: NcclComm, win: *mut c_void) -> c_int {
    boundary("ncclCommWindowDeregister", comm, || {
        let c = comm::get(comm)?;
        let reg = take_registration(&c, win, true)?;
        if !reg.symm.is_null() {
            // SAFETY: symmcomm's handle from symmCommRegister.
            symm_result(unsafe { symm::symmCommDeregister(c.symm, *reg.symm) }, c.symm, "symmCommDeregister")?;
        }
        if !reg.real.is_null() {
            let (r, rc) = c.forward("ncclCommWindowDeregister")?;
            let f = real::func(r, r.api.ncclCommWindowDeregister, "ncclCommWindowDeregister")?;
            // SAFETY: NCCL's window.
            real::check(r, unsafe { f(rc, reg.real) }, rc, "ncclCommWindowDeregister")?;
        }
        Ok(())
    })
});

nccl_api!(ncclMemAlloc / pncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> c_int {
    // Served here, as NCCL makes it (mem.rs): no real NCCL needed, and
    // ncclCommWindowRegister of it is zero-copy. SYMM_NCCL_MODE=nccl
    // forwards it, as everything.
    boundary("ncclMemAlloc", null(), || {
        not_null(ptr, "ptr")?;
        let p = if config::get().mode == config::Mode::Nccl {
            let r = real::get()?;
            let f = real::func(r, r.api.ncclMemAlloc, "ncclMemAlloc")?;
            let mut p = std::ptr::null_mut();
            // SAFETY: NCCL's signature.
            real::check(r, unsafe { f(&mut p, size) }, std::ptr::null_mut(), "ncclMemAlloc")?;
            p
        } else {
            mem::alloc(size)?
        };
        // SAFETY: checked non-null.
        unsafe { ptr.write(p) };
        Ok(())
    })
});

nccl_api!(ncclMemFree / pncclMemFree(ptr: *mut c_void) -> c_int {
    boundary("ncclMemFree", null(), || {
        if config::get().mode == config::Mode::Nccl {
            let r = real::get()?;
            let f = real::func(r, r.api.ncclMemFree, "ncclMemFree")?;
            // SAFETY: NCCL's signature.
            return real::check(r, unsafe { f(ptr) }, std::ptr::null_mut(), "ncclMemFree");
        }
        mem::free(ptr)
    })
});

// ---- reduction ops ------------------------------------------------------

nccl_api!(ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum(op: *mut c_int, scalar: *mut c_void, datatype: c_int, residence: c_int, comm: NcclComm) -> c_int {
    // The op is the communicator's path's: symmcomm's on a native one (a
    // number >= ncclNumOps that only its collectives know), else NCCL's.
    // Collectives follow the communicator, so they find it either way.
    boundary("ncclRedOpCreatePreMulSum", comm, || {
        let c = comm::get(comm)?;
        not_null(op, "op")?;
        if c.native() {
            // SAFETY: NCCL's signature, passed through; symmcomm checks the rest.
            return symm_result(unsafe { symm::symmRedOpCreatePreMulSum(op, scalar, datatype, residence, c.symm) }, c.symm, "symmcomm");
        }
        let (r, rc) = c.forward("ncclRedOpCreatePreMulSum")?;
        let f = real::func(r, r.api.ncclRedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum")?;
        // SAFETY: NCCL's signature.
        real::check(r, unsafe { f(op, scalar, datatype, residence, rc) }, rc, "ncclRedOpCreatePreMulSum")
    })
});

nccl_api!(ncclRedOpDestroy / pncclRedOpDestroy(op: c_int, comm: NcclComm) -> c_int {
    boundary("ncclRedOpDestroy", comm, || {
        let c = comm::get(comm)?;
        if c.native() {
            // SAFETY: a plain value and the communicator's handle.
            return symm_result(unsafe { symm::symmRedOpDestroy(op, c.symm) }, c.symm, "symmcomm");
        }
        let (r, rc) = c.forward("ncclRedOpDestroy")?;
        let f = real::func(r, r.api.ncclRedOpDestroy, "ncclRedOpDestroy")?;
        // SAFETY: NCCL's signature.
        real::check(r, unsafe { f(op, rc) }, rc, "ncclRedOpDestroy")
    })
});

// ---- collectives, point-to-point -----------------------------------------

/// Route one call: natively when the communicator has a symmcomm path and
/// `native_ok` (decided from the arguments alone), else to the real NCCL.
fn dispatch(
    api: &'static str,
    comm: NcclComm,
    native_ok: bool,
    native: impl FnOnce(SymmComm) -> c_int,
    forward: impl FnOnce(&'static real::Real, RealComm) -> Result<c_int>,
) -> c_int {
    dispatch_with(api, comm, native_ok, |s| symm_result(native(s), s, "symmcomm"), forward)
}

/// `dispatch` for a native path that words its own errors.
fn dispatch_with(
    api: &'static str,
    comm: NcclComm,
    native_ok: bool,
    native: impl FnOnce(SymmComm) -> Result<()>,
    forward: impl FnOnce(&'static real::Real, RealComm) -> Result<c_int>,
) -> c_int {
    boundary(api, comm, || {
        let c = comm::get(comm)?;
        if c.native() && native_ok {
            return native(c.symm);
        }
        let (r, rc) = c.forward(api)?;
        let code = forward(r, rc)?;
        real::check(r, code, rc, api)
    })
}

fn builtin(datatype: c_int, op: Option<c_int>) -> bool {
    (0..NUM_TYPES).contains(&datatype) && op.is_none_or(|op| (0..NUM_OPS).contains(&op))
}

/// A reduction's op on a native communicator: a built-in op, or any number
/// past them, which only ncclRedOpCreatePreMulSum on this communicator gave
/// out (symmcomm refuses one it did not make, with a message).
fn native_op(datatype: c_int, op: c_int) -> bool {
    builtin(datatype, None) && op >= 0
}

nccl_api!(ncclAllReduce / pncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclAllReduce", comm, native_op(datatype, op),
        // SAFETY (both closures): the caller's arguments, passed through.
        |s| unsafe { symm::symmAllReduce(sendbuff, recvbuff, count, datatype, op, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclAllReduce, "ncclAllReduce")?(sendbuff, recvbuff, count, datatype, op, rc, stream) }))
});

nccl_api!(ncclReduce / pncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclReduce", comm, native_op(datatype, op),
        |s| unsafe { symm::symmReduce(sendbuff, recvbuff, count, datatype, op, root, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclReduce, "ncclReduce")?(sendbuff, recvbuff, count, datatype, op, root, rc, stream) }))
});

nccl_api!(ncclBroadcast / pncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclBroadcast", comm, builtin(datatype, None),
        |s| unsafe { symm::symmBroadcast(sendbuff, recvbuff, count, datatype, root, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclBroadcast, "ncclBroadcast")?(sendbuff, recvbuff, count, datatype, root, rc, stream) }))
});

nccl_api!(ncclBcast / pncclBcast(buff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclBcast", comm, builtin(datatype, None),
        |s| unsafe { symm::symmBroadcast(buff, buff, count, datatype, root, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclBcast, "ncclBcast")?(buff, count, datatype, root, rc, stream) }))
});

nccl_api!(ncclReduceScatter / pncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclReduceScatter", comm, native_op(datatype, op),
        |s| unsafe { symm::symmReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclReduceScatter, "ncclReduceScatter")?(sendbuff, recvbuff, recvcount, datatype, op, rc, stream) }))
});

nccl_api!(ncclAllGather / pncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclAllGather", comm, builtin(datatype, None),
        |s| unsafe { symm::symmAllGather(sendbuff, recvbuff, sendcount, datatype, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclAllGather, "ncclAllGather")?(sendbuff, recvbuff, sendcount, datatype, rc, stream) }))
});

nccl_api!(ncclAlltoAll / pncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclAlltoAll", comm, builtin(datatype, None),
        |s| unsafe { symm::symmAllToAll(sendbuff, recvbuff, count, datatype, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclAlltoAll, "ncclAlltoAll")?(sendbuff, recvbuff, count, datatype, rc, stream) }))
});

// RCCL's all-to-all-v (NCCL has none): natively one symmAllToAllv launch;
// forwarded, the real NCCL's sends and receives in one group, as RCCL and
// PyTorch build it.
nccl_api!(ncclAllToAllv / pncclAllToAllv(sendbuff: *const c_void, sendcounts: *const usize, sdispls: *const usize, recvbuff: *mut c_void, recvcounts: *const usize, rdispls: *const usize, datatype: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclAllToAllv", comm, builtin(datatype, None),
        // SAFETY (both closures): the caller's arguments; the forward path reads nranks entries of each array.
        |s| unsafe { symm::symmAllToAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype, s, stream) },
        |r, rc| {
            let c = comm::get(comm)?;
            let n = c.nranks.max(0) as usize;
            for (p, name) in [(sendcounts, "sendcounts"), (sdispls, "sdispls"), (recvcounts, "recvcounts"), (rdispls, "rdispls")] {
                not_null(p, name)?;
            }
            let size = type_size(datatype);
            if size == 0 {
                return Err(Error::new(NCCL_INVALID_ARGUMENT, format!("datatype {datatype} is not one of NCCL's types")));
            }
            let at = |displ: usize, name: &str| {
                displ.checked_mul(size).ok_or_else(|| Error::new(NCCL_INVALID_ARGUMENT, format!("{name}: displacement {displ} overflows")))
            };
            // Every offset first: nothing may fail between group start and end.
            let mut plan = Vec::with_capacity(n);
            for p in 0..n {
                let (scount, sdispl, rcount, rdispl) = unsafe { (*sendcounts.add(p), *sdispls.add(p), *recvcounts.add(p), *rdispls.add(p)) };
                plan.push((scount, at(sdispl, "sdispls")?, rcount, at(rdispl, "rdispls")?));
            }
            let (send, recv) = (real::func(r, r.api.ncclSend, "ncclSend")?, real::func(r, r.api.ncclRecv, "ncclRecv")?);
            let (start, end) = (real::func(r, r.api.ncclGroupStart, "ncclGroupStart")?, real::func(r, r.api.ncclGroupEnd, "ncclGroupEnd")?);
            real::check(r, unsafe { start() }, rc, "ncclGroupStart")?;
            let mut code = 0;
            for (p, &(scount, soff, rcount, roff)) in plan.iter().enumerate() {
                if code == 0 && scount > 0 {
                    code = unsafe { send((sendbuff as *const u8).wrapping_add(soff).cast(), scount, datatype, p as c_int, rc, stream) };
                }
                if code == 0 && rcount > 0 {
                    code = unsafe { recv((recvbuff as *mut u8).wrapping_add(roff).cast(), rcount, datatype, p as c_int, rc, stream) };
                }
            }
            // The group ends whatever happened inside it.
            let end = unsafe { end() };
            Ok(if code != 0 { code } else { end })
        })
});

// Gather and scatter as NCCL builds them: sends and receives in a group.
nccl_api!(ncclGather / pncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch_with("ncclGather", comm, builtin(datatype, None),
        |s| rooted_p2p(s, root, datatype, count, stream, |rank, n, block| {
            // Everyone sends to the root; the root receives block r from rank r.
            let mut ops = vec![P2P::Send(sendbuff, root)];
            if rank == root {
                for r in 0..n {
                    ops.push(P2P::Recv(block_at(recvbuff as usize, r, block, "recvbuff")? as *mut c_void, r));
                }
            }
            Ok(ops)
        }),
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclGather, "ncclGather")?(sendbuff, recvbuff, count, datatype, root, rc, stream) }))
});

nccl_api!(ncclScatter / pncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch_with("ncclScatter", comm, builtin(datatype, None),
        |s| rooted_p2p(s, root, datatype, count, stream, |rank, n, block| {
            // The root sends block r to rank r; everyone receives from the root.
            let mut ops = Vec::new();
            if rank == root {
                for r in 0..n {
                    ops.push(P2P::Send(block_at(sendbuff as usize, r, block, "sendbuff")? as *const c_void, r));
                }
            }
            ops.push(P2P::Recv(recvbuff, root));
            Ok(ops)
        }),
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclScatter, "ncclScatter")?(sendbuff, recvbuff, count, datatype, root, rc, stream) }))
});

enum P2P {
    Send(*const c_void, c_int),
    Recv(*mut c_void, c_int),
}

/// Bytes per element of NCCL's 12 types (numbered as symmcomm's; 0 for
/// anything else, which `builtin` has refused already).
fn type_size(datatype: c_int) -> usize {
    symmcomm::types::symmDataType_t::from_raw(datatype).map_or(0, |t| t.size())
}

/// Run the sends and receives `plan(rank, nranks, element size)` gives
/// (a rooted collective) as one symmcomm group; returns symmcomm's code.
/// Where rank `r`'s block of `block` bytes starts in a buffer at `base`.
fn block_at(base: usize, r: c_int, block: usize, name: &str) -> Result<usize> {
    block.checked_mul(r as usize).and_then(|off| base.checked_add(off)).ok_or_else(|| {
        Error::new(NCCL_INVALID_ARGUMENT, format!("{name}: block {r} of {block} bytes lies past the end of the address space"))
    })
}

/// A gather or scatter as sends and receives in one group: `plan(rank,
/// nranks, bytes per block)` lists them. Arguments are checked before any
/// is posted, so a refused call leaves nothing queued.
fn rooted_p2p(
    s: SymmComm,
    root: c_int,
    datatype: c_int,
    count: usize,
    stream: Stream,
    plan: impl FnOnce(c_int, c_int, usize) -> Result<Vec<P2P>>,
) -> Result<()> {
    let (mut rank, mut n) = (-1, -1);
    // SAFETY: a live comm; ints out.
    unsafe {
        symm_result(symm::symmCommUserRank(s, &mut rank), s, "symmCommUserRank")?;
        symm_result(symm::symmCommCount(s, &mut n), s, "symmCommCount")?;
    }
    if !(0..n).contains(&root) {
        bail!(NCCL_INVALID_ARGUMENT, "root {root} is not a rank of this {n}-rank communicator");
    }
    if count == 0 {
        return Ok(());
    }
    let Some(block) = count.checked_mul(type_size(datatype)) else {
        bail!(NCCL_INVALID_ARGUMENT, "count {count} x {} bytes overflows", type_size(datatype));
    };
    let ops = plan(rank, n, block)?;
    // SAFETY: no arguments; closed below on every path.
    symm_result(unsafe { symm::symmGroupStart() }, s, "symmGroupStart")?;
    let mut first = 0;
    for op in ops {
        // SAFETY: the caller's buffers, offset within the sizes NCCL's API gives them.
        let code = unsafe {
            match op {
                P2P::Send(buf, peer) => symm::symmSend(buf, count, datatype, peer, s, stream),
                P2P::Recv(buf, peer) => symm::symmRecv(buf, count, datatype, peer, s, stream),
            }
        };
        if code != 0 {
            first = code;
            break;
        }
    }
    // SAFETY: closes the level opened above.
    let end = unsafe { symm::symmGroupEnd() };
    symm_result(if first != 0 { first } else { end }, s, "symmcomm")
}

nccl_api!(ncclSend / pncclSend(sendbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclSend", comm, builtin(datatype, None),
        |s| unsafe { symm::symmSend(sendbuff, count, datatype, peer, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclSend, "ncclSend")?(sendbuff, count, datatype, peer, rc, stream) }))
});

nccl_api!(ncclRecv / pncclRecv(recvbuff: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm, stream: Stream) -> c_int {
    dispatch("ncclRecv", comm, builtin(datatype, None),
        |s| unsafe { symm::symmRecv(recvbuff, count, datatype, peer, s, stream) },
        |r, rc| Ok(unsafe { real::func(r, r.api.ncclRecv, "ncclRecv")?(recvbuff, count, datatype, peer, rc, stream) }))
});

// ---- groups -----------------------------------------------------------------

nccl_api!(ncclGroupStart / pncclGroupStart() -> c_int {
    boundary("ncclGroupStart", null(), || {
        // Load the real NCCL now (if it is used at all), so that a group
        // opened before the first communicator still spans both paths.
        if config::get().mode != config::Mode::Symm {
            let _ = real::get();
        }
        group::start()
    })
});

nccl_api!(ncclGroupEnd / pncclGroupEnd() -> c_int {
    boundary("ncclGroupEnd", null(), group::end)
});

nccl_api!(ncclGroupSimulateEnd / pncclGroupSimulateEnd(simInfo: *mut c_void) -> c_int {
    // Only NCCL can estimate; symmcomm-served calls of the group have no
    // simulator, so ending the group runs them (as ncclGroupEnd would).
    boundary("ncclGroupSimulateEnd", null(), || {
        not_null(simInfo, "simInfo")?;
        let r = real::get()?;
        let f = real::func(r, r.api.ncclGroupSimulateEnd, "ncclGroupSimulateEnd")?;
        group::simulate_end(|| {
            // SAFETY: NCCL's signature; simInfo checked non-null.
            real::check(r, unsafe { f(simInfo) }, std::ptr::null_mut(), "ncclGroupSimulateEnd")
        })
    })
});

// After nccl_api!, which it uses.
mod device_api;
