//! Communicator configuration, split and shrink.

use std::ffi::{c_int, c_uint};
use std::sync::Arc;

use super::handle::ArcHandle;
use super::{boundary, comm_arg, not_null, types::*};
use crate::error::{bail, symmResult_t, Result};
use crate::group;
use crate::split::{self, ChildConfig};

/// `color` for ranks that take part in symmCommSplit but join no new
/// communicator (as NCCL_SPLIT_NOCOLOR): they get NULL.
pub const SYMM_SPLIT_NOCOLOR: c_int = -1;
const _: () = assert!(SYMM_SPLIT_NOCOLOR == split::NOCOLOR);

/// symmCommShrink flags (as NCCL_SHRINK_DEFAULT / NCCL_SHRINK_ABORT).
/// Default: the parent's work is complete.
pub const SYMM_SHRINK_DEFAULT: c_int = 0;
/// Abort: first make kernels still waiting on the parent (for a rank that
/// died) exit; the parent can then only be destroyed.
pub const SYMM_SHRINK_ABORT: c_int = 1;

/// `symmConfig_t.magic` as written by symmConfigInit.
pub const SYMM_CONFIG_MAGIC: c_uint = 0x4346_4753;
/// A `symmConfig_t` setting left at this value is inherited from the
/// parent communicator.
pub const SYMM_CONFIG_UNDEF: i64 = -1;

/// Settings of a new communicator (symmCommSplit, symmCommShrink). Fill it
/// with `symmConfigInit(&cfg, sizeof cfg)`, then change the settings you
/// want; the rest are inherited from the parent. Every rank that ends up in
/// the same new communicator must pass the same settings (or NULL).
/// Later versions only append fields; `size` says which ones the caller has.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct symmConfig_t {
    /// sizeof(symmConfig_t) as the caller compiled it.
    pub size: usize,
    /// SYMM_CONFIG_MAGIC.
    pub magic: c_uint,
    /// SYMM_VERSION_CODE of the header the caller compiled with.
    pub version: c_uint,
    /// Bytes of staging scratch (SYMM_SCRATCH_BYTES for new communicators):
    /// 1 MiB to 4 GiB, the same on every rank.
    pub scratchBytes: i64,
    /// Longest device-side wait for a peer, in milliseconds (SYMM_TIMEOUT):
    /// 1 to 86,400,000.
    pub timeoutMs: i64,
    /// 1: all-gather and reduce-scatter on the copy engines, 0: on SMs
    /// (SYMM_COPY_ENGINE, symmCommSetCopyEngine).
    pub copyEngine: i64,
}

/// Where each field ends: a caller's `size` covers the fields it knows.
const FIELDS_V1_END: usize = std::mem::size_of::<symmConfig_t>();
const HEADER_END: usize = 16;

/// Initialise `*config` (`size` = sizeof(symmConfig_t) as the caller
/// compiled it, at least the header and every field of version 0.1):
/// every setting SYMM_CONFIG_UNDEF, i.e. inherited.
#[no_mangle]
pub extern "C" fn symmConfigInit(config: *mut symmConfig_t, size: usize) -> symmResult_t {
    boundary("symmConfigInit", std::ptr::null_mut(), || {
        not_null(config, "config")?;
        if size < FIELDS_V1_END {
            bail!(symmInvalidArgument, "size is {size}; sizeof(symmConfig_t) is at least {FIELDS_V1_END}");
        }
        let c = symmConfig_t {
            size,
            magic: SYMM_CONFIG_MAGIC,
            version: SYMM_VERSION_CODE as c_uint,
            scratchBytes: SYMM_CONFIG_UNDEF,
            timeoutMs: SYMM_CONFIG_UNDEF,
            copyEngine: SYMM_CONFIG_UNDEF,
        };
        // SAFETY: checked non-null; the caller's struct is `size` >= our
        // size bytes long. Fields a newer caller has beyond ours stay as
        // they are (it initialised them, or they read as its defaults).
        unsafe { config.write_unaligned(c) };
        Ok(())
    })
}

/// The settings a config asks for (NULL: all inherited).
fn decode_config(config: *const symmConfig_t) -> Result<ChildConfig> {
    if config.is_null() {
        return Ok(ChildConfig::default());
    }
    // SAFETY: non-null; the caller's struct starts with the header.
    let (size, magic) = unsafe { ((*config).size, (*config).magic) };
    if magic != SYMM_CONFIG_MAGIC {
        bail!(symmInvalidArgument, "config was not initialised with symmConfigInit (magic {magic:#x})");
    }
    if size < HEADER_END {
        bail!(symmInvalidArgument, "config->size is {size}; it must be sizeof(symmConfig_t)");
    }
    // Each field is read through the raw pointer, only when the caller's
    // struct (`size` bytes) holds it: no reference spans a shorter struct.
    let field = |end: usize, v: unsafe fn(*const symmConfig_t) -> i64| {
        // SAFETY: non-null, and the field ends within the caller's `size` bytes.
        if size >= end { unsafe { v(config) } } else { SYMM_CONFIG_UNDEF }
    };
    // SAFETY (the three readers): called by `field` only when the field is in bounds.
    let scratch = field(24, |c| unsafe { std::ptr::addr_of!((*c).scratchBytes).read_unaligned() });
    let timeout = field(32, |c| unsafe { std::ptr::addr_of!((*c).timeoutMs).read_unaligned() });
    let copy = field(40, |c| unsafe { std::ptr::addr_of!((*c).copyEngine).read_unaligned() });
    let mut out = ChildConfig::default();
    if scratch != SYMM_CONFIG_UNDEF {
        if !(1 << 20..=4 << 30).contains(&scratch) {
            bail!(symmInvalidArgument, "config->scratchBytes is {scratch}; it must be 1 MiB to 4 GiB (or SYMM_CONFIG_UNDEF)");
        }
        out.scratch_bytes = Some(scratch as usize);
    }
    if timeout != SYMM_CONFIG_UNDEF {
        if !(1..=86_400_000).contains(&timeout) {
            bail!(symmInvalidArgument, "config->timeoutMs is {timeout}; it must be 1 to 86400000 (or SYMM_CONFIG_UNDEF)");
        }
        out.timeout_ns = Some(timeout as u64 * 1_000_000);
    }
    if copy != SYMM_CONFIG_UNDEF {
        if !(0..=1).contains(&copy) {
            bail!(symmInvalidArgument, "config->copyEngine is {copy}; it must be 0, 1 or SYMM_CONFIG_UNDEF");
        }
        out.copy_engine = Some(copy == 1);
    }
    Ok(out)
}

/// A caller's output pointer, carried to the thread that runs a deferred
/// (grouped) call.
struct Out(*mut symmComm_t);
// SAFETY: the caller keeps the output alive until symmGroupEnd returns.
unsafe impl Send for Out {}

/// Collective over `comm`: the ranks passing the same `color` (>= 0) form a
/// new communicator, ranked by `key`, then by rank in `comm`; `*newcomm`
/// is NULL for `SYMM_SPLIT_NOCOLOR`. Every rank of `comm` must call it
/// (one failing rank fails all of them). `config` may be NULL: the new
/// communicator inherits `comm`'s settings. It shares nothing with `comm`:
/// either may be destroyed first. Inside symmGroupStart/End, `*newcomm` is
/// written at symmGroupEnd.
#[no_mangle]
pub extern "C" fn symmCommSplit(
    comm: symmComm_t,
    color: c_int,
    key: c_int,
    config: *const symmConfig_t,
    newcomm: *mut symmComm_t,
) -> symmResult_t {
    boundary("symmCommSplit", comm, || {
        let c = comm_arg(comm)?;
        // Bad arguments still take part, so that every rank fails.
        let cfg = not_null(newcomm, "newcomm").and_then(|_| decode_config(config));
        let (out, parent) = (Out(newcomm), c.clone());
        let run = move || {
            let out = out;
            let child = split::split(&parent, color, key, cfg)?;
            let h = child.map_or(std::ptr::null_mut(), symmComm::register);
            // SAFETY: checked non-null (else split failed above).
            unsafe { out.0.write(h) };
            Ok(())
        };
        if group::active() {
            group::defer(c, "symmCommSplit", Box::new(run));
            Ok(())
        } else {
            run()
        }
    })
}

/// A new communicator of every rank of `comm` but the `excludeCount` ranks
/// in `excludeRanks`, in `comm`'s order. Called by the remaining ranks only
/// (each with the same list). `flags`: SYMM_SHRINK_DEFAULT, or
/// SYMM_SHRINK_ABORT to end `comm`'s pending work first (after a rank
/// died). `config` as in symmCommSplit. Inside symmGroupStart/End,
/// `*newcomm` is written at symmGroupEnd.
#[no_mangle]
pub extern "C" fn symmCommShrink(
    comm: symmComm_t,
    excludeRanks: *const c_int,
    excludeCount: c_int,
    config: *const symmConfig_t,
    flags: c_int,
    newcomm: *mut symmComm_t,
) -> symmResult_t {
    boundary("symmCommShrink", comm, || {
        let c = comm_arg(comm)?;
        not_null(newcomm, "newcomm")?;
        if excludeCount < 0 {
            bail!(symmInvalidArgument, "excludeCount is {excludeCount}");
        }
        if excludeCount > 0 {
            not_null(excludeRanks, "excludeRanks")?;
        }
        if flags != SYMM_SHRINK_DEFAULT && flags != SYMM_SHRINK_ABORT {
            bail!(symmInvalidArgument, "flags is {flags}; use SYMM_SHRINK_DEFAULT or SYMM_SHRINK_ABORT");
        }
        let exclude: Vec<c_int> = if excludeCount == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller provides excludeCount ints.
            unsafe { std::slice::from_raw_parts(excludeRanks, excludeCount as usize) }.to_vec()
        };
        let cfg = decode_config(config);
        let (out, parent) = (Out(newcomm), c.clone());
        let run = move || {
            let out = out;
            let child: Arc<crate::comm::Comm> = split::shrink(&parent, &exclude, cfg, flags == SYMM_SHRINK_ABORT)?;
            // SAFETY: checked non-null above.
            unsafe { out.0.write(symmComm::register(child)) };
            Ok(())
        };
        if group::active() {
            group::defer(c, "symmCommShrink", Box::new(run));
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
    fn config_layout_and_decoding() {
        assert_eq!(std::mem::size_of::<symmConfig_t>(), 40);
        let mut c = std::mem::MaybeUninit::<symmConfig_t>::zeroed();
        assert_eq!(symmConfigInit(c.as_mut_ptr(), 39), symmResult_t::symmInvalidArgument);
        assert_eq!(symmConfigInit(c.as_mut_ptr(), 40), symmResult_t::symmSuccess);
        // SAFETY: initialised above.
        let mut c = unsafe { c.assume_init() };
        assert_eq!((c.size, c.magic, c.scratchBytes, c.copyEngine), (40, SYMM_CONFIG_MAGIC, -1, -1));
        assert_eq!(decode_config(&c).unwrap(), ChildConfig::default());
        assert_eq!(decode_config(std::ptr::null()).unwrap(), ChildConfig::default());
        c.scratchBytes = 8 << 20;
        c.timeoutMs = 2500;
        c.copyEngine = 1;
        let d = decode_config(&c).unwrap();
        assert_eq!(d, ChildConfig { scratch_bytes: Some(8 << 20), timeout_ns: Some(2_500_000_000), copy_engine: Some(true) });
        // An older caller's struct without the last field: not read.
        c.size = 32;
        assert_eq!(decode_config(&c).unwrap().copy_engine, None);
        c.size = 40;
        for (f, v) in [(0, 1000i64), (1, 0), (2, 2)] {
            let mut bad = c;
            match f {
                0 => bad.scratchBytes = v,
                1 => bad.timeoutMs = v,
                _ => bad.copyEngine = v,
            }
            assert_eq!(decode_config(&bad).unwrap_err().code, symmResult_t::symmInvalidArgument);
        }
        c.magic = 0;
        assert!(decode_config(&c).unwrap_err().msg.contains("symmConfigInit"));
    }
}
