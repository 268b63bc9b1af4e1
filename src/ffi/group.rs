//! Group calls.

use super::boundary;
use crate::error::symmResult_t;
use crate::group;

/// Start queuing collective host calls of this thread (nestable).
#[no_mangle]
pub extern "C" fn symmGroupStart() -> symmResult_t {
    boundary("symmGroupStart", std::ptr::null_mut(), || {
        group::start();
        Ok(())
    })
}

/// Run the calls queued since the outermost symmGroupStart, one thread per
/// communicator, and return the first failure (each failing communicator
/// also records its own message).
#[no_mangle]
pub extern "C" fn symmGroupEnd() -> symmResult_t {
    boundary("symmGroupEnd", std::ptr::null_mut(), group::end)
}
