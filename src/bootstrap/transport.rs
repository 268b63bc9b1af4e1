//! A communicator's host-side link to its peers: sockets between processes
//! (`symmCommInitRank`), or shared memory inside one process
//! (`symmCommInitAll`). Layers above use this and never care which.

use std::os::fd::{OwnedFd, RawFd};

use super::local::LocalPeer;
use super::Bootstrap;
use crate::error::{bail, Result};

pub enum Transport {
    Sockets(Box<Bootstrap>),
    InProcess(LocalPeer),
}

impl Transport {
    pub fn rank(&self) -> usize {
        match self {
            Transport::Sockets(b) => b.rank(),
            Transport::InProcess(p) => p.rank(),
        }
    }

    pub fn nranks(&self) -> usize {
        match self {
            Transport::Sockets(b) => b.nranks(),
            Transport::InProcess(p) => p.nranks(),
        }
    }

    /// True when every rank runs in this process and so shares its virtual
    /// address space: memory mapped by one rank is visible to all.
    pub fn shares_address_space(&self) -> bool {
        matches!(self, Transport::InProcess(_))
    }

    /// The in-process group's id (`None` for sockets).
    pub fn local_group_id(&self) -> Option<u64> {
        match self {
            Transport::Sockets(_) => None,
            Transport::InProcess(p) => Some(p.group_id()),
        }
    }

    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        match self {
            Transport::Sockets(b) => b.allgather(mine),
            Transport::InProcess(p) => p.allgather(mine),
        }
    }

    pub fn barrier(&self) -> Result<()> {
        match self {
            Transport::Sockets(b) => b.barrier(),
            Transport::InProcess(p) => p.barrier(),
        }
    }

    pub fn send_fds(&self, peer: usize, tag: u64, fds: &[RawFd]) -> Result<()> {
        match self {
            Transport::Sockets(b) => b.send_fds(peer, tag, fds),
            Transport::InProcess(_) => bail!(symmInternalError, "fd passing inside one process"),
        }
    }

    pub fn recv_fds(&self, peer: usize, tag: u64) -> Result<Vec<OwnedFd>> {
        match self {
            Transport::Sockets(b) => b.recv_fds(peer, tag),
            Transport::InProcess(_) => bail!(symmInternalError, "fd passing inside one process"),
        }
    }

    pub fn abort(&self) {
        match self {
            Transport::Sockets(b) => b.abort(),
            Transport::InProcess(p) => p.abort(),
        }
    }
}
