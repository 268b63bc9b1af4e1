//! Host-side rendezvous and byte-blob collectives among a communicator's
//! ranks, plus file-descriptor passing between local processes.
//!
//! How a communicator comes together:
//!
//! 1. One process calls [`create_root`] (C: `symmGetUniqueId`): it binds a
//!    TCP listener (`SYMM_BOOTSTRAP_ADDR`, default 127.0.0.1 with a free
//!    port), starts the detached `symm-root` thread and returns a
//!    [`UniqueId`] naming that listener. No CUDA is touched.
//! 2. Every rank calls [`Bootstrap::connect`] with that id. Each says HELLO
//!    to the root (`root.rs`); when all `nranks` have, the root tells each
//!    where rank 0 listens and exits. Inconsistent calls (nranks mismatch,
//!    duplicate or out-of-range rank) fail on *every* rank with one message.
//! 3. Ranks 1..n connect to rank 0, which becomes the hub of a star
//!    (`star.rs`) that carries [`allgather`](Bootstrap::allgather),
//!    [`broadcast`](Bootstrap::broadcast) and [`barrier`](Bootstrap::barrier).
//! 4. [`send_fds`](Bootstrap::send_fds)/[`recv_fds`](Bootstrap::recv_fds)
//!    pass descriptors (e.g. exported GPU memory handles) over Unix sockets
//!    (`fdpass.rs`).
//!
//! Communicators created together in one process (`symmCommInitAll`) skip
//! all of this and exchange blobs in memory ([`local`]); [`Transport`] is
//! what the layers above hold, either way.
//!
//! Every wait is bounded by `SYMM_BOOTSTRAP_TIMEOUT` and fails with
//! `symmTimeout` naming what is missing; [`Bootstrap::abort`] interrupts any
//! of them from another thread. All sockets are close-on-exec, and dropping
//! a [`Bootstrap`] closes everything it opened (it starts no threads).
//!
//! Log target: `symmcomm::bootstrap` (TRACE frames, DEBUG steps, INFO
//! rendezvous done, WARN failures).

mod fdpass;
pub mod local;
mod net;
mod root;
mod star;
mod transport;
mod unique_id;

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{OwnedFd, RawFd};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{bail, Error, Result};
use fdpass::{BindError, FdChannel};
use net::{secs, Interrupt};
use root::{Hello, FLAG_DUPLICATE, FLAG_OUT_OF_RANGE};
use star::{Op, Star};

pub(crate) use net::{decode_sockaddr, encode_sockaddr, SOCKADDR_LEN};
pub use root::create_root;
pub use transport::Transport;
pub use unique_id::UniqueId;

/// Log target of everything in this module.
pub(crate) const TARGET: &str = "symmcomm::bootstrap";

/// How long an out-of-range rank spends telling the root about itself.
const BAD_RANK_REPORT: Duration = Duration::from_secs(2);

/// Bootstrap settings; [`from_env`](Self::from_env) reads `SYMM_BOOTSTRAP_*`.
#[derive(Clone, Debug)]
pub struct BootstrapConfig {
    /// Root listen address: `ip`, `ip:port` or `[ipv6]:port`; `None` means
    /// 127.0.0.1 with a free port. Rank 0's hub listens on the same IP.
    pub addr: Option<String>,
    /// Longest wait for other ranks in any one step.
    pub timeout: Duration,
}

impl BootstrapConfig {
    pub fn from_env() -> Self {
        let c = crate::config::get();
        BootstrapConfig { addr: c.bootstrap_addr.clone(), timeout: c.bootstrap_timeout }
    }
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig { addr: None, timeout: Duration::from_secs(60) }
    }
}

/// One rank's membership in a communicator's bootstrap.
///
/// Methods take `&self` and may be called from any thread; collectives are
/// serialised internally, and every rank must call them in the same order.
pub struct Bootstrap {
    rank: usize,
    nranks: usize,
    tag: u64,
    intr: Interrupt,
    star: Mutex<Star>,
    fds: FdChannel,
    /// Every socket, for `abort` to shut down while other threads use them.
    /// Owned by `star`/`fds`, which live as long as `self`.
    sockets: Vec<RawFd>,
}

impl Bootstrap {
    /// Joins the communicator named by `id` as `rank` of `nranks`. Returns
    /// once every rank has joined, or fails on every rank.
    pub fn connect(id: &UniqueId, nranks: i32, rank: i32, cfg: &BootstrapConfig) -> Result<Bootstrap> {
        let start = Instant::now();
        let root = id.root_addr()?;
        let tag = id.tag();
        if nranks < 1 {
            bail!(symmInvalidArgument, "nranks must be at least 1 (got {nranks})");
        }
        let mut hello = Hello { flags: 0, tag, nranks, rank, hub: None };
        if rank < 0 || rank >= nranks {
            // Tell the root so that the other ranks fail now instead of timing out.
            hello.flags |= FLAG_OUT_OF_RANGE;
            root::report_bad_rank(root, &hello, cfg.timeout.min(BAD_RANK_REPORT));
            bail!(symmInvalidArgument, "rank {rank} is out of range for nranks {nranks}");
        }
        let (r, n) = (rank as usize, nranks as usize);
        log::debug!(target: TARGET, "bootstrap: rank {r}/{n} joining {root} (tag {tag:016x})");

        // Everything that peers will connect to exists before the root hears
        // from us, so nobody ever needs to wait for it once the root says OK.
        let fds = match FdChannel::bind(tag, r, n, cfg.timeout) {
            Ok(ch) => Some(ch),
            // Another live rank of this communicator already has our rank:
            // still join, flagged, so the root can tell everyone.
            Err(BindError::InUse) => None,
            Err(BindError::Other(e)) => return Err(e),
        };
        if fds.is_none() {
            hello.flags |= FLAG_DUPLICATE;
        }
        let hub_listener = if r == 0 && n > 1 {
            let l = TcpListener::bind(SocketAddr::new(root.ip(), 0))
                .map_err(|e| Error::from_io(format_args!("bootstrap: cannot listen on {}", root.ip()), e))?;
            hello.hub = Some(l.local_addr().map_err(|e| Error::from_io("bootstrap: hub listener", e))?);
            Some(l)
        } else {
            None
        };

        let joined = root::join(root, &hello, cfg.timeout, start)?;
        let Some(fds) = fds else {
            // The root reports duplicates itself; this is only reached if the
            // other holder of our rank was not part of this rendezvous.
            bail!(symmInvalidUsage, "rank {r} joined twice (duplicate rank): its fd-passing socket is already in use");
        };
        let star = match (hub_listener, joined.hub) {
            _ if n == 1 => Star::alone(cfg.timeout),
            (Some(l), _) => Star::hub(l, tag, n, cfg.timeout)?,
            (None, Some(hub)) => Star::spoke(hub, tag, r, n, cfg.timeout)?,
            (None, None) => bail!(symmInternalError, "bootstrap: the root sent no hub address"),
        };
        let mut sockets = star.raw_fds();
        sockets.push(fds.raw_fd());
        log::info!(target: TARGET, "bootstrap: rank {r}/{n} connected in {} (tag {tag:016x})", secs(start.elapsed()));
        Ok(Bootstrap { rank: r, nranks: joined.nranks, tag, intr: Interrupt::new()?, star: Mutex::new(star), fds, sockets })
    }

    /// Joins a group whose ranks were chosen elsewhere (a communicator made
    /// from another's ranks: split, shrink): no root, no unique id. Rank 0
    /// passes the listener it made with [`bind_hub`] and every other rank
    /// its address, learnt from the parent; the tag (fresh, random) keeps
    /// the group's fd-passing sockets apart from every other group's.
    /// Returns once every rank has joined, or fails (bounded by the timeout).
    pub fn join_direct(hub: Hub, tag: u64, rank: usize, nranks: usize, cfg: &BootstrapConfig) -> Result<Bootstrap> {
        let start = Instant::now();
        if rank >= nranks {
            bail!(symmInternalError, "bootstrap: rank {rank} is out of range for nranks {nranks}");
        }
        let fds = match FdChannel::bind(tag, rank, nranks, cfg.timeout) {
            Ok(ch) => ch,
            Err(BindError::InUse) => {
                bail!(symmInternalError, "bootstrap: the fd-passing socket of rank {rank} (tag {tag:016x}) is already in use")
            }
            Err(BindError::Other(e)) => return Err(e),
        };
        let star = match hub {
            _ if nranks == 1 => Star::alone(cfg.timeout),
            Hub::Listener(l) if rank == 0 => Star::hub(l, tag, nranks, cfg.timeout)?,
            Hub::At(addr) if rank > 0 => Star::spoke(addr, tag, rank, nranks, cfg.timeout)?,
            _ => bail!(symmInternalError, "bootstrap: rank {rank} of {nranks} was given the wrong end of the hub"),
        };
        let mut sockets = star.raw_fds();
        sockets.push(fds.raw_fd());
        log::info!(target: TARGET, "bootstrap: rank {rank}/{nranks} joined directly in {} (tag {tag:016x})", secs(start.elapsed()));
        Ok(Bootstrap { rank, nranks, tag, intr: Interrupt::new()?, star: Mutex::new(star), fds, sockets })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    /// The communicator tag from the unique id (the same on every rank).
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Every rank's blob, indexed by rank; blobs may differ in size.
    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.collective(Op::Allgather, mine)
    }

    /// `root`'s `data` on every rank (`data` is ignored elsewhere).
    pub fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        Ok(self.collective(Op::Broadcast(root), data)?.pop().unwrap_or_default())
    }

    pub fn barrier(&self) -> Result<()> {
        self.collective(Op::Barrier, &[]).map(drop)
    }

    /// Sends duplicates of `fds` to `peer` (this process keeps its own);
    /// `peer`'s [`recv_fds`](Self::recv_fds) with the same `msg_tag` gets them.
    pub fn send_fds(&self, peer: usize, msg_tag: u64, fds: &[RawFd]) -> Result<()> {
        self.check_live()?;
        self.fds.send(peer, msg_tag, fds, &self.intr)
    }

    /// The fds of the next message `peer` sent with `msg_tag`; messages with
    /// other (peer, tag) pairs that arrive meanwhile are kept for later calls.
    pub fn recv_fds(&self, peer: usize, msg_tag: u64) -> Result<Vec<OwnedFd>> {
        self.check_live()?;
        self.fds.recv(peer, msg_tag, &self.intr)
    }

    /// Makes every operation blocked in another thread return (with
    /// `symmRemoteError`) and every later one fail with `symmInvalidUsage`.
    /// Peers see this rank disconnect. Idempotent; resources are freed on drop.
    pub fn abort(&self) {
        if self.intr.fired() {
            return;
        }
        // If no collective is in flight, say why we leave; otherwise a frame
        // now could interleave with the one being sent.
        if let Some(star) = self.star.try_lock() {
            star.send_abort();
        }
        self.intr.fire();
        for &fd in &self.sockets {
            // SAFETY: the fd is owned by self.star / self.fds, alive until drop;
            // shutdown does not close it, so no other thread can see it reused.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        log::warn!(target: TARGET, "bootstrap: rank {}/{} aborted (tag {:016x})", self.rank, self.nranks, self.tag);
    }

    fn check_live(&self) -> Result<()> {
        if self.intr.fired() {
            bail!(symmInvalidUsage, "bootstrap aborted");
        }
        Ok(())
    }

    fn collective(&self, op: Op, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.check_live()?;
        let mut star = self.star.lock();
        // Checked again: abort may have happened while we waited for the lock.
        self.check_live()?;
        star.run(op, data, &self.intr)
    }
}

/// The hub of a rootless rendezvous ([`Bootstrap::join_direct`]).
pub enum Hub {
    /// Rank 0: the listener it bound with [`bind_hub`].
    Listener(TcpListener),
    /// Every other rank: where rank 0 listens.
    At(SocketAddr),
    /// A group of one rank.
    Alone,
}

/// A listener for the hub of a rootless rendezvous, on the IP of
/// `SYMM_BOOTSTRAP_ADDR` (127.0.0.1 by default) with a free port, and its
/// address for the other ranks.
pub fn bind_hub(cfg: &BootstrapConfig) -> Result<(TcpListener, SocketAddr)> {
    let ip = match &cfg.addr {
        Some(s) => net::parse_addr(s)?.ip(),
        None => net::DEFAULT_ADDR.ip(),
    };
    let l = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| Error::from_io(format_args!("bootstrap: cannot listen on {ip}"), e))?;
    let addr = l.local_addr().map_err(|e| Error::from_io("bootstrap: hub listener", e))?;
    Ok((l, addr))
}

/// A fresh random communicator tag (never 0).
pub fn new_tag() -> Result<u64> {
    unique_id::random_u64()
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap").field("rank", &self.rank).field("nranks", &self.nranks).field("tag", &self.tag).finish()
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Bootstrap>();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::symmResult_t;

    #[test]
    fn single_rank_works_without_peers() {
        let cfg = BootstrapConfig { addr: None, timeout: Duration::from_secs(10) };
        let id = create_root(&cfg).unwrap();
        let b = Bootstrap::connect(&id, 1, 0, &cfg).unwrap();
        assert_eq!((b.rank(), b.nranks(), b.tag()), (0, 1, id.tag()));
        assert_eq!(b.allgather(b"abc").unwrap(), vec![b"abc".to_vec()]);
        assert_eq!(b.broadcast(0, b"z").unwrap(), b"z");
        b.barrier().unwrap();
        b.abort();
        assert_eq!(b.barrier().unwrap_err().code, symmResult_t::symmInvalidUsage);
        assert_eq!(b.recv_fds(0, 0).unwrap_err().msg, "bootstrap aborted");
    }

    #[test]
    fn bad_arguments_fail_fast() {
        let cfg = BootstrapConfig { addr: None, timeout: Duration::from_secs(10) };
        let id = create_root(&cfg).unwrap();
        let e = Bootstrap::connect(&id, 0, 0, &cfg).unwrap_err();
        assert_eq!(e.code, symmResult_t::symmInvalidArgument);
        let e = Bootstrap::connect(&UniqueId([0; 128]), 1, 0, &cfg).unwrap_err();
        assert_eq!(e.code, symmResult_t::symmInvalidArgument);
        let bad_addr = BootstrapConfig { addr: Some("not-an-ip".into()), ..cfg };
        assert_eq!(create_root(&bad_addr).unwrap_err().code, symmResult_t::symmInvalidArgument);
    }
}
