//! The host half of NCCL's device API (`nccl_device/*.h`): device
//! communicators, teams, barrier and LL all-to-all requirements. symmcomm
//! has no device API of its own, so these serve the real NCCL communicator
//! made beside every symmcomm one. They must exist because runtimes link
//! them: PyTorch's libtorch_cuda needs `ncclDevCommCreate` and
//! `ncclDevCommDestroy` from whatever `libnccl.so.2` is loaded, and with
//! this library preloaded that is this library.
//!
//! Teams need no NCCL to be described: on one host the world and the LSA
//! team (ranks that can load/store each other's memory) are every rank,
//! and the rail team is this rank alone. Without a real NCCL they are
//! computed from the communicator; with one, NCCL answers.

use std::ffi::{c_int, c_void};

use crate::comm::{self, NcclComm};
use crate::boundary::*;
use crate::error::*;
use crate::real::{self, Team};

nccl_api!(ncclDevCommCreate / pncclDevCommCreate(comm: NcclComm, reqs: *const c_void, outDevComm: *mut c_void) -> c_int {
    boundary("ncclDevCommCreate", comm, || {
        let c = comm::get(comm)?;
        not_null(reqs, "reqs")?;
        not_null(outDevComm, "outDevComm")?;
        let (r, rc) = c.forward("ncclDevCommCreate")?;
        let f = real::func(r, r.api.ncclDevCommCreate, "ncclDevCommCreate")?;
        // SAFETY: NCCL's signature; pointers checked non-null.
        real::check(r, unsafe { f(rc, reqs, outDevComm) }, rc, "ncclDevCommCreate")
    })
});

nccl_api!(ncclDevCommDestroy / pncclDevCommDestroy(comm: NcclComm, devComm: *const c_void) -> c_int {
    boundary("ncclDevCommDestroy", comm, || {
        let c = comm::get(comm)?;
        not_null(devComm, "devComm")?;
        let (r, rc) = c.forward("ncclDevCommDestroy")?;
        let f = real::func(r, r.api.ncclDevCommDestroy, "ncclDevCommDestroy")?;
        // SAFETY: NCCL's signature; pointer checked non-null.
        real::check(r, unsafe { f(rc, devComm) }, rc, "ncclDevCommDestroy")
    })
});

/// Which team a `ncclTeam*` call asks for.
#[derive(Clone, Copy)]
enum Which {
    World,
    Lsa,
    Rail,
}

/// A team of `comm`: NCCL's answer when it has a communicator, else the
/// single-host description. An unknown communicator gives an empty team
/// (the functions have no result code) and records why.
fn team(name: &'static str, comm: NcclComm, which: Which) -> Team {
    let empty = Team { n_ranks: 0, rank: 0, stride: 0 };
    let mut out = empty;
    let rc = boundary(name, comm, || {
        let c = comm::get(comm)?;
        if let Ok(r) = real::get() {
            let f = match which {
                Which::World => r.api.ncclTeamWorld,
                Which::Lsa => r.api.ncclTeamLsa,
                Which::Rail => r.api.ncclTeamRail,
            };
            if let (Some(f), false) = (f, c.real.is_null()) {
                // SAFETY: NCCL's signature, with its own communicator.
                out = unsafe { f(c.real) };
                return Ok(());
            }
        }
        out = match which {
            Which::World | Which::Lsa => Team { n_ranks: c.nranks, rank: c.rank, stride: 1 },
            Which::Rail => Team { n_ranks: 1, rank: 0, stride: c.nranks },
        };
        Ok(())
    });
    if rc == NCCL_SUCCESS {
        out
    } else {
        empty
    }
}

nccl_api!(ncclTeamWorld / pncclTeamWorld(comm: NcclComm) -> Team { team("ncclTeamWorld", comm, Which::World) });
nccl_api!(ncclTeamLsa / pncclTeamLsa(comm: NcclComm) -> Team { team("ncclTeamLsa", comm, Which::Lsa) });
nccl_api!(ncclTeamRail / pncclTeamRail(comm: NcclComm) -> Team { team("ncclTeamRail", comm, Which::Rail) });

/// World (or LSA, the same on one host) rank of `rank` of `t`, a team this
/// rank belongs to; -1 when the communicator is unknown or `rank` is out of
/// the team.
fn team_rank(name: &'static str, comm: NcclComm, t: Team, rank: c_int, to_lsa: bool) -> c_int {
    let mut out = -1;
    boundary(name, comm, || {
        let c = comm::get(comm)?;
        if let (Ok(r), false) = (real::get(), c.real.is_null()) {
            let f = if to_lsa { r.api.ncclTeamRankToLsa } else { r.api.ncclTeamRankToWorld };
            if let Some(f) = f {
                // SAFETY: NCCL's signature, with its own communicator.
                out = unsafe { f(c.real, t, rank) };
                return Ok(());
            }
        }
        if rank < 0 || rank >= t.n_ranks {
            bail!(NCCL_INVALID_ARGUMENT, "rank {rank} is not in a team of {} ranks", t.n_ranks);
        }
        out = c.rank - t.rank * t.stride + rank * t.stride;
        Ok(())
    });
    out
}

nccl_api!(ncclTeamRankToWorld / pncclTeamRankToWorld(comm: NcclComm, team: Team, rank: c_int) -> c_int {
    team_rank("ncclTeamRankToWorld", comm, team, rank, false)
});
nccl_api!(ncclTeamRankToLsa / pncclTeamRankToLsa(comm: NcclComm, team: Team, rank: c_int) -> c_int {
    team_rank("ncclTeamRankToLsa", comm, team, rank, true)
});

nccl_api!(ncclGinBarrierCreateRequirement / pncclGinBarrierCreateRequirement(comm: NcclComm, team: Team, nBarriers: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> c_int {
    boundary("ncclGinBarrierCreateRequirement", comm, || {
        let c = comm::get(comm)?;
        not_null(outHandle, "outHandle")?;
        not_null(outReq, "outReq")?;
        let (r, rc) = c.forward("ncclGinBarrierCreateRequirement")?;
        let f = real::func(r, r.api.ncclGinBarrierCreateRequirement, "ncclGinBarrierCreateRequirement")?;
        // SAFETY: NCCL's signature; pointers checked non-null.
        real::check(r, unsafe { f(rc, team, nBarriers, outHandle, outReq) }, rc, "ncclGinBarrierCreateRequirement")
    })
});

nccl_api!(ncclLsaBarrierCreateRequirement / pncclLsaBarrierCreateRequirement(team: Team, nBarriers: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> c_int {
    boundary("ncclLsaBarrierCreateRequirement", std::ptr::null_mut(), || {
        not_null(outHandle, "outHandle")?;
        not_null(outReq, "outReq")?;
        let r = real::get()?;
        let f = real::func(r, r.api.ncclLsaBarrierCreateRequirement, "ncclLsaBarrierCreateRequirement")?;
        // SAFETY: NCCL's signature; pointers checked non-null.
        real::check(r, unsafe { f(team, nBarriers, outHandle, outReq) }, std::ptr::null_mut(), "ncclLsaBarrierCreateRequirement")
    })
});

nccl_api!(ncclLLA2ACalcSlots / pncclLLA2ACalcSlots(maxElts: c_int, maxEltSize: c_int) -> c_int {
    // No result code: -1 when there is no real NCCL to ask (recorded).
    let mut out = -1;
    boundary("ncclLLA2ACalcSlots", std::ptr::null_mut(), || {
        let r = real::get()?;
        let f = real::func(r, r.api.ncclLLA2ACalcSlots, "ncclLLA2ACalcSlots")?;
        // SAFETY: NCCL's signature (plain integers).
        out = unsafe { f(maxElts, maxEltSize) };
        Ok(())
    });
    out
});

nccl_api!(ncclLLA2ACreateRequirement / pncclLLA2ACreateRequirement(nBlocks: c_int, nSlots: c_int, outHandle: *mut c_void, outReq: *mut c_void) -> c_int {
    boundary("ncclLLA2ACreateRequirement", std::ptr::null_mut(), || {
        not_null(outHandle, "outHandle")?;
        not_null(outReq, "outReq")?;
        let r = real::get()?;
        let f = real::func(r, r.api.ncclLLA2ACreateRequirement, "ncclLLA2ACreateRequirement")?;
        // SAFETY: NCCL's signature; pointers checked non-null.
        real::check(r, unsafe { f(nBlocks, nSlots, outHandle, outReq) }, std::ptr::null_mut(), "ncclLLA2ACreateRequirement")
    })
});

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: ncclGetLastError returns a NUL-terminated string.
        unsafe { CStr::from_ptr(crate::ncclGetLastError(std::ptr::null_mut())) }.to_string_lossy().into_owned()
    }

    #[test]
    fn bad_communicators_and_pointers_are_refused_with_a_message() {
        let bogus = 0x1234_5670 as NcclComm;
        let mut out = [0u8; 64];
        let p = out.as_mut_ptr().cast::<c_void>();
        for comm in [std::ptr::null_mut(), bogus] {
            assert_eq!(ncclDevCommCreate(comm, p, p), NCCL_INVALID_ARGUMENT);
            assert_eq!(ncclDevCommDestroy(comm, p), NCCL_INVALID_ARGUMENT);
            assert!(last_error().starts_with("ncclDevCommDestroy: comm"), "{}", last_error());
            // No result code: an empty team, -1 for a rank, and a message.
            assert_eq!(ncclTeamWorld(comm), Team { n_ranks: 0, rank: 0, stride: 0 });
            assert!(last_error().starts_with("ncclTeamWorld: comm"), "{}", last_error());
            assert_eq!(ncclTeamRankToWorld(comm, Team { n_ranks: 2, rank: 0, stride: 1 }, 1), -1);
            let team = Team { n_ranks: 1, rank: 0, stride: 1 };
            assert_eq!(ncclGinBarrierCreateRequirement(comm, team, 1, p, p), NCCL_INVALID_ARGUMENT);
        }
        let team = Team { n_ranks: 1, rank: 0, stride: 1 };
        assert_eq!(ncclLsaBarrierCreateRequirement(team, 1, std::ptr::null_mut(), p), NCCL_INVALID_ARGUMENT);
        assert!(last_error().contains("outHandle is NULL"), "{}", last_error());
        assert_eq!(ncclLLA2ACreateRequirement(1, 1, p, std::ptr::null_mut()), NCCL_INVALID_ARGUMENT);
        assert!(last_error().contains("outReq is NULL"), "{}", last_error());
        assert_eq!(out, [0u8; 64], "nothing is written on failure");
    }
}
