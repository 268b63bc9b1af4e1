//! `ncclGroupStart`/`ncclGroupEnd`: one group spans both paths. Each level
//! opens a symmcomm group and, when the real NCCL is loaded, a real one, so
//! sends/receives and collectives queue on whichever path serves them.
//! Communicator inits inside a group (several GPUs from one thread, as with
//! NCCL) are queued here and run at the outermost ncclGroupEnd, one thread
//! per init on the device that was current when it was queued.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};

use crate::error::{cuda, from_symm, not_null, Error, Result, NCCL_INVALID_USAGE, NCCL_UNHANDLED_CUDA_ERROR};
use crate::boundary::boundary;
use crate::comm::null;
use crate::{config, real, symm};

pub type Init = Box<dyn FnOnce() -> Result<()> + Send>;

#[derive(Default)]
struct Group {
    depth: u32,
    /// Levels at which the real NCCL's group was opened too.
    real_levels: Vec<bool>,
    inits: Vec<(c_int, Init)>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

pub fn active() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

pub fn start() -> Result<()> {
    // SAFETY: no arguments.
    let code = unsafe { symm::symmGroupStart() };
    if code != 0 {
        return Err(Error::new(from_symm(code), format!("symmGroupStart: {}", symm::last_error(std::ptr::null_mut()))));
    }
    let real = real::loaded().and_then(|r| r.api.ncclGroupStart.map(|f| (r, f)));
    if let Some((r, f)) = real {
        // SAFETY: no arguments.
        if let Err(e) = real::check(r, unsafe { f() }, std::ptr::null_mut(), "ncclGroupStart") {
            // SAFETY: closes the level opened above.
            unsafe { symm::symmGroupEnd() };
            return Err(e);
        }
    }
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.depth += 1;
        g.real_levels.push(real.is_some());
    });
    Ok(())
}

/// Queue an init for the outermost ncclGroupEnd, on the current device.
pub fn defer_init(init: Init) -> Result<()> {
    let device = current_device()?;
    GROUP.with(|g| g.borrow_mut().inits.push((device, init)));
    Ok(())
}

pub fn end() -> Result<()> {
    end_with(None)
}

/// ncclGroupSimulateEnd: the real level ends with `simulate` instead of
/// ncclGroupEnd; symmcomm's level ends as usual.
pub fn simulate_end(simulate: impl FnOnce() -> Result<()>) -> Result<()> {
    end_with(Some(Box::new(simulate)))
}

fn end_with(simulate: Option<Box<dyn FnOnce() -> Result<()> + '_>>) -> Result<()> {
    let (real_level, inits) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::new(NCCL_INVALID_USAGE, "ncclGroupEnd without a matching ncclGroupStart"));
        }
        g.depth -= 1;
        let real_level = g.real_levels.pop().unwrap_or(false);
        Ok((real_level, if g.depth == 0 { std::mem::take(&mut g.inits) } else { Vec::new() }))
    })?;
    // Both paths end their level even if the other fails; the first
    // failure is returned.
    // SAFETY: closes the level ncclGroupStart opened.
    let code = unsafe { symm::symmGroupEnd() };
    let mut first = if code == 0 {
        Ok(())
    } else {
        Err(Error::new(from_symm(code), format!("symmGroupEnd: {}", symm::last_error(std::ptr::null_mut()))))
    };
    if let (false, Some(_)) = (real_level, &simulate) {
        if first.is_ok() {
            first = Err(Error::new(NCCL_INVALID_USAGE, "ncclGroupSimulateEnd: the real NCCL was not loaded when the group started"));
        }
    } else if let (true, Some(sim)) = (real_level, simulate) {
        let res = sim();
        if first.is_ok() {
            first = res;
        }
    } else if real_level {
        let r = real::loaded().expect("opened on a loaded library");
        // SAFETY: closes the real level opened at ncclGroupStart.
        let res = real::check(r, unsafe { (r.api.ncclGroupEnd.expect("checked at start"))() }, std::ptr::null_mut(), "ncclGroupEnd");
        if first.is_ok() {
            first = res;
        }
    }
    let res = run_inits(inits);
    if first.is_ok() {
        first = res;
    }
    first
}

/// Run queued inits together (each rank's init waits for the others).
fn run_inits(inits: Vec<(c_int, Init)>) -> Result<()> {
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = inits
            .into_iter()
            .map(|(dev, init)| {
                s.spawn(move || {
                    set_device(dev)?;
                    init()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::new(crate::error::NCCL_INTERNAL_ERROR, "init thread panicked"))))
            .collect()
    });
    results.into_iter().collect()
}


/// The calling thread's current CUDA device (what cudaSetDevice chose).
pub fn current_device() -> Result<c_int> {
    symmcomm::cuda::driver().map_err(|e| Error::new(NCCL_UNHANDLED_CUDA_ERROR, e.msg))?;
    let mut d = 0;
    // SAFETY: the driver is loaded (checked above); one int out.
    cuda(unsafe { cudarc::driver::sys::cuCtxGetDevice(&mut d) }, "cuCtxGetDevice (no current CUDA device?)")?;
    Ok(d)
}

/// Make `dev`'s primary context current on this thread (cudaSetDevice).
fn set_device(dev: c_int) -> Result<()> {
    use cudarc::driver::sys;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: the driver is loaded (current_device ran at queue time).
    unsafe {
        cuda(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
        cuda(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    }
}

// ---- the exports ----------------------------------------------------------

nccl_api!(ncclGroupStart / pncclGroupStart() -> c_int {
    boundary("ncclGroupStart", null(), || {
        // Load the real NCCL now (if it is used at all), so that a group
        // opened before the first communicator still spans both paths.
        if config::get().mode != config::Mode::Symm {
            let _ = real::get();
        }
        start()
    })
});

nccl_api!(ncclGroupEnd / pncclGroupEnd() -> c_int {
    boundary("ncclGroupEnd", null(), end)
});

nccl_api!(ncclGroupSimulateEnd / pncclGroupSimulateEnd(simInfo: *mut c_void) -> c_int {
    // Only NCCL can estimate; symmcomm-served calls of the group have no
    // simulator, so ending the group runs them (as ncclGroupEnd would).
    boundary("ncclGroupSimulateEnd", null(), || {
        not_null(simInfo, "simInfo")?;
        let r = real::get()?;
        let f = real::func(r, r.api.ncclGroupSimulateEnd, "ncclGroupSimulateEnd")?;
        simulate_end(|| {
            // SAFETY: NCCL's signature; simInfo checked non-null.
            real::check(r, unsafe { f(simInfo) }, std::ptr::null_mut(), "ncclGroupSimulateEnd")
        })
    })
});
