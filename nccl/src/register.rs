//! Buffer registration (ncclCommRegister), windows
//! (ncclCommWindowRegister: symmcomm's zero-copy registration on a native
//! communicator) and NCCL's allocator (ncclMemAlloc, served by `mem`).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::boundary::*;
use crate::comm::{self, null, Comm, NcclComm};
use crate::error::*;
use crate::{config, group, mem, real, symm};

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
