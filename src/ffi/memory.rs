//! Symmetric memory, registration and signal pads.

use std::ffi::{c_int, c_void};

use super::{boundary, comm_arg, not_null, types::*};
use crate::error::{bail, symmResult_t};
use crate::group;
use crate::memory::{pad, register, symmetric};

/// A caller's output pointer, carried to the thread that runs a deferred
/// (grouped) call.
struct Out<T>(*mut T);
// SAFETY: the caller keeps the output alive until symmGroupEnd returns.
unsafe impl<T> Send for Out<T> {}
impl<T> Out<T> {
    /// SAFETY: the pointer was checked non-null and is still valid.
    unsafe fn write(self, v: T) {
        self.0.write(v)
    }
}

/// Collective: allocate `size` bytes of symmetric memory on every rank and
/// write this rank's address to `*ptr`. Inside symmGroupStart/End the
/// address is written at symmGroupEnd.
#[no_mangle]
pub extern "C" fn symmMemAlloc(comm: symmComm_t, size: usize, ptr: *mut *mut c_void) -> symmResult_t {
    boundary("symmMemAlloc", comm, || {
        let c = comm_arg(comm)?;
        not_null(ptr, "ptr")?;
        if size == 0 {
            bail!(symmInvalidArgument, "size is 0");
        }
        let out = Out(ptr);
        let cc = c.clone();
        let run = move || {
            let addr = symmetric::alloc(&cc.mem, &cc.link, size, false)?;
            // SAFETY: checked non-null above.
            unsafe { out.write(addr as *mut c_void) };
            Ok(())
        };
        if group::active() {
            group::defer(c, "symmMemAlloc", Box::new(run));
            Ok(())
        } else {
            run()
        }
    })
}

/// Collective: free memory from symmMemAlloc. Waits for this device's
/// work and for every rank to arrive, then unmaps.
#[no_mangle]
pub extern "C" fn symmMemFree(comm: symmComm_t, ptr: *mut c_void) -> symmResult_t {
    boundary("symmMemFree", comm, || {
        let c = comm_arg(comm)?;
        not_null(ptr, "ptr")?;
        let (cc, addr) = (c.clone(), ptr as u64);
        let run = move || symmetric::free(&cc.mem, &cc.link, addr);
        if group::active() {
            group::defer(c, "symmMemFree", Box::new(run));
            Ok(())
        } else {
            run()
        }
    })
}

/// Writes to `*peerPtr` the address (in this process) of `peer`'s copy of
/// `ptr`, which must lie in a symmetric or registered buffer.
#[no_mangle]
pub extern "C" fn symmMemGetPeerPtr(comm: symmComm_t, ptr: *const c_void, peer: c_int, peerPtr: *mut *mut c_void) -> symmResult_t {
    boundary("symmMemGetPeerPtr", comm, || {
        let c = comm_arg(comm)?;
        not_null(ptr, "ptr")?;
        not_null(peerPtr, "peerPtr")?;
        if peer < 0 {
            bail!(symmInvalidArgument, "peer {peer} is negative");
        }
        let p = c.mem.peer_ptr(ptr as u64, peer as usize)?;
        // SAFETY: checked non-null.
        unsafe { peerPtr.write(p as *mut c_void) };
        Ok(())
    })
}

/// Writes to `*tableDev` a device array of nranks pointers: the start of the
/// buffer holding `ptr` on each rank (PyTorch's `buffer_ptrs_dev`). Valid
/// until the buffer is freed or deregistered.
#[no_mangle]
pub extern "C" fn symmMemGetPeerTable(comm: symmComm_t, ptr: *const c_void, tableDev: *mut *mut *mut c_void) -> symmResult_t {
    boundary("symmMemGetPeerTable", comm, || {
        let c = comm_arg(comm)?;
        not_null(ptr, "ptr")?;
        not_null(tableDev, "tableDev")?;
        let Some(e) = c.mem.find(ptr as u64, 1) else {
            bail!(symmInvalidArgument, "{ptr:p} is not inside a symmetric or registered buffer of this communicator");
        };
        // SAFETY: checked non-null.
        unsafe { tableDev.write(e.table as *mut *mut c_void) };
        Ok(())
    })
}

/// Collective: make `[buff, buff + size)` (cudaMalloc, cuMem or symmetric
/// memory of this communicator's GPU) reachable by the peers without
/// copying. Every rank registers the same size. `*handle` is for
/// symmCommDeregister. Inside a group it is written at symmGroupEnd.
#[no_mangle]
pub extern "C" fn symmCommRegister(comm: symmComm_t, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> symmResult_t {
    boundary("symmCommRegister", comm, || {
        let c = comm_arg(comm)?;
        not_null(buff, "buff")?;
        not_null(handle, "handle")?;
        if size == 0 {
            bail!(symmInvalidArgument, "size is 0");
        }
        let (out, cc, addr) = (Out(handle), c.clone(), buff as u64);
        let run = move || {
            let id = register::register(&cc.mem, &cc.link, addr, size)?;
            // SAFETY: checked non-null above; ids start at 1, so never NULL.
            unsafe { out.write(id as usize as *mut c_void) };
            Ok(())
        };
        if group::active() {
            group::defer(c, "symmCommRegister", Box::new(run));
            Ok(())
        } else {
            run()
        }
    })
}

/// Release a registration (local to this rank; waits for this device's work).
#[no_mangle]
pub extern "C" fn symmCommDeregister(comm: symmComm_t, handle: *mut c_void) -> symmResult_t {
    boundary("symmCommDeregister", comm, || {
        let c = comm_arg(comm)?;
        not_null(handle, "handle")?;
        register::deregister(&c.mem, handle as usize as u64)
    })
}

/// Writes to `*pad` the address (in this process) of `peer`'s user signal
/// area and to `*bytes` its size. The area starts zeroed and belongs to the
/// caller's own kernels; the library never touches it.
#[no_mangle]
pub extern "C" fn symmCommGetSignalPad(comm: symmComm_t, peer: c_int, pad: *mut *mut c_void, bytes: *mut usize) -> symmResult_t {
    boundary("symmCommGetSignalPad", comm, || {
        let c = comm_arg(comm)?;
        not_null(pad, "pad")?;
        not_null(bytes, "bytes")?;
        if peer < 0 || peer as usize >= c.nranks {
            bail!(symmInvalidArgument, "peer {peer} is out of range for {} ranks", c.nranks);
        }
        let addr = c.pads.local(peer as usize, pad::USER_OFFSET);
        // SAFETY: both checked non-null.
        unsafe {
            pad.write(addr as *mut c_void);
            bytes.write(pad::USER_BYTES);
        }
        Ok(())
    })
}

/// Writes to `*tableDev` a device array of nranks pointers to each rank's
/// user signal area (PyTorch's `signal_pad_ptrs_dev`).
#[no_mangle]
pub extern "C" fn symmCommGetSignalPadTable(comm: symmComm_t, tableDev: *mut *mut *mut c_void) -> symmResult_t {
    boundary("symmCommGetSignalPadTable", comm, || {
        let c = comm_arg(comm)?;
        not_null(tableDev, "tableDev")?;
        // SAFETY: checked non-null.
        unsafe { tableDev.write(c.pads.user_table.ptr as *mut *mut c_void) };
        Ok(())
    })
}
