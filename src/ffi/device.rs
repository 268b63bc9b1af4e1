//! The device API's host half: device communicators for users' kernels
//! (include/symmcomm_device.cuh).

use super::{boundary, comm_arg, not_null, types::*};
use crate::devcomm::{self, symmDevComm, symmDevCommRequirements};
use crate::error::{err, symmResult_t};
use crate::group;

/// The caller's output, carried to the thread that runs a grouped call.
struct Out(*mut symmDevComm);
// SAFETY: the caller keeps the output alive until symmGroupEnd returns.
unsafe impl Send for Out {}
impl Out {
    /// Writes the caller's `v.size` bytes of `v` (its header's layout, at
    /// most this library's), never more.
    /// SAFETY: the pointer was checked non-null and is still valid.
    unsafe fn write(self, v: symmDevComm) {
        let n = (v.size as usize).min(std::mem::size_of::<symmDevComm>());
        std::ptr::copy_nonoverlapping((&v as *const symmDevComm).cast::<u8>(), self.0.cast::<u8>(), n);
    }
}

/// Collective: reserve, on every rank, the barrier, signal and LL slots
/// `req` asks for in symmetric memory, and write to `*devComm` the device
/// communicator that kernels take by value. Initialise `req` with
/// SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER: a header whose device API
/// version or struct sizes differ from the library's is refused
/// (symmInvalidUsage). Every rank passes the same requirements; a rank
/// that fails makes every rank fail. Inside symmGroupStart/End the output
/// is written at symmGroupEnd.
#[no_mangle]
pub extern "C" fn symmDevCommCreate(comm: symmComm_t, req: *const symmDevCommRequirements, devComm: *mut symmDevComm) -> symmResult_t {
    boundary("symmDevCommCreate", comm, || {
        let c = comm_arg(comm)?;
        // Argument problems go through the collective step, so that the
        // other ranks fail at once instead of waiting for this one.
        let requirements = if req.is_null() {
            Err(err!(symmInvalidArgument, "req is NULL"))
        } else if devComm.is_null() {
            Err(err!(symmInvalidArgument, "devComm is NULL"))
        } else {
            // SAFETY: checked non-null; read_requirements reads no more than the struct's own size field allows.
            Ok(unsafe { devcomm::read_requirements(req) })
        };
        let (out, cc) = (Out(devComm), c.clone());
        let run = move || {
            let dc = devcomm::create(&cc, requirements)?;
            // SAFETY: checked non-null above (create fails otherwise).
            unsafe { out.write(dc) };
            Ok(())
        };
        if group::active() {
            group::defer(c, "symmDevCommCreate", Box::new(run));
            Ok(())
        } else {
            run()
        }
    })
}

/// Collective: release a device communicator's slots. Waits for this
/// device's work and for every rank first (as symmMemFree). Kernels must
/// no longer use `devComm` afterwards.
#[no_mangle]
pub extern "C" fn symmDevCommDestroy(comm: symmComm_t, devComm: *const symmDevComm) -> symmResult_t {
    boundary("symmDevCommDestroy", comm, || {
        let c = comm_arg(comm)?;
        not_null(devComm, "devComm")?;
        // SAFETY: checked non-null; only the handle is read.
        let handle = unsafe { std::ptr::addr_of!((*devComm).handle).read_unaligned() };
        let cc = c.clone();
        let run = move || devcomm::destroy(&cc, handle);
        if group::active() {
            group::defer(c, "symmDevCommDestroy", Box::new(run));
            Ok(())
        } else {
            run()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_only_the_callers_layout() {
        // A caller whose header's symmDevComm is 64 bytes: nothing past them is touched.
        let mut buf = [0xAAu8; std::mem::size_of::<symmDevComm>() + 16];
        // SAFETY: all-zero bytes are a valid symmDevComm (integers and null pointers).
        let mut dc: symmDevComm = unsafe { std::mem::zeroed() };
        dc.version = 100;
        dc.size = 64;
        dc.rank = 3;
        // SAFETY: buf is larger than a symmDevComm; the write copies 64 bytes.
        unsafe { Out(buf.as_mut_ptr().cast()).write(dc) };
        assert_eq!(&buf[..4], &100u32.to_ne_bytes());
        assert_eq!(&buf[8..12], &3i32.to_ne_bytes());
        assert!(buf[64..].iter().all(|&b| b == 0xAA));
    }
}
