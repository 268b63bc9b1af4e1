//! Unique ids and communicators: init (one rank, every GPU of a process,
//! or NCCL's scalable init), finalize, destroy, abort, revoke, split,
//! shrink, async errors and the rank/size/device queries. `comm` does the
//! building; these exports check the arguments and hand on.

use std::ffi::{c_int, c_void};

use crate::boundary::*;
use crate::comm::{self, null, Comm, ConfigCopy, NcclComm};
use crate::error::*;
use crate::real::{self, RawId, RealComm};
use crate::{group, id, symm};

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
