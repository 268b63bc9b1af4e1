//! Communicators made from another's ranks: split (NCCL's ncclCommSplit:
//! the ranks of one color form a child, ordered by key, then by parent
//! rank) and shrink (ncclCommShrink: every rank but the excluded ones, in
//! parent order).
//!
//! **Split is collective over the parent.** Every rank contributes its
//! color, key, the child's settings and whether it can go on (its own
//! arguments, the parent's state) to one all-gather on the parent's host
//! link, numbered with the parent's other collective host calls. So a rank
//! in another collective host call, a rank whose parent is aborted or has
//! an asynchronous error, or bad arguments anywhere fail every rank with
//! one message, and no rank waits for a child that will never form.
//! **Shrink is collective over the ranks that stay**: the excluded ones
//! never call it, so there is nothing to all-gather over the parent.
//!
//! The child shares nothing with its parent or siblings that ties their
//! lifetimes together: it gets its own host link, symmetric space, signal
//! pads and scratch; only the GPU (a reference-counted device handle) is
//! common, so either may be destroyed first. How a child's ranks meet:
//! - ranks in separate processes (or threads that each called
//!   symmCommInitRank): the child's rank 0 binds a fresh hub listener and
//!   draws a fresh tag, and hands both to every other member over the
//!   parent's fd-passing channel (a pipe holding the offer, one per
//!   member); the members then form a rootless bootstrap
//!   (`Bootstrap::join_direct`) and set up the child exactly as
//!   symmCommInitRank does;
//! - ranks of one process (symmCommInitAll): the first member to arrive
//!   makes the child's in-process group and symmetric space and leaves
//!   them, for the other members, in a process-wide table under (parent
//!   group, call number, color).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::bootstrap::local::LocalGroup;
use crate::bootstrap::{self, Bootstrap, BootstrapConfig, Hub, Transport};
use crate::comm::{Comm, CommSettings, Parts};
use crate::config;
use crate::cuda::device::Device;
use crate::error::{bail, err, symmResult_t, Error, Result};
use crate::memory::{agree, Agreement, CommMemory, HostOp, SymmSpace};

/// The color of ranks that join no child (NCCL_SPLIT_NOCOLOR).
pub(crate) const NOCOLOR: i32 = -1;

/// What a caller asks of a child; `None` keeps the parent's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildConfig {
    pub scratch_bytes: Option<usize>,
    pub timeout_ns: Option<u64>,
    pub copy_engine: Option<bool>,
}

impl ChildConfig {
    /// The child's settings: the requested ones, else the parent's as they
    /// are now (symmCommSetCopyEngine may have changed the copy-engine mode).
    pub fn settings(&self, parent: &Comm) -> CommSettings {
        CommSettings {
            scratch_bytes: self.scratch_bytes.unwrap_or(parent.settings.scratch_bytes),
            timeout_ns: self.timeout_ns.unwrap_or(parent.timeout_ns),
            copy_engine: self.copy_engine.unwrap_or_else(|| parent.coll.copy_engine()),
        }
    }
}

/// Who forms this rank's child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Parent ranks of the child's members, in child rank order.
    pub members: Vec<usize>,
    /// This rank's rank in the child.
    pub rank: usize,
    /// Tells this child from its siblings made by the same call (the color,
    /// or a hash of the members for a shrink).
    pub label: u64,
}

/// `symmCommSplit`: this rank's child, or `None` for `NOCOLOR`. `cfg`
/// carries the caller's configuration, or what is wrong with its arguments
/// (which still takes part in the exchange, so that every rank fails).
pub fn split(parent: &Comm, color: i32, key: i32, cfg: Result<ChildConfig>) -> Result<Option<Arc<Comm>>> {
    let seq = parent.mem.next_op_seq();
    let local = usable(parent).and(cfg).and_then(|c| {
        if color < 0 && color != NOCOLOR {
            bail!(symmInvalidArgument, "color {color} is negative; colors are >= 0, or SYMM_SPLIT_NOCOLOR (-1) for no child");
        }
        Ok(c.settings(parent))
    });
    let mut mine = Agreement::new(HostOp::Split, seq, color as u32 as u64, key as u32 as u64);
    match &local {
        Ok(s) => mine.blob = encode_settings(s),
        Err(e) => mine.error = Some(e.clone()),
    }
    // Fails on every rank alike: out of step, or any rank's error.
    let all = agree(&parent.link, &mine)?;
    let asks: Vec<(i32, i32, CommSettings)> = all
        .iter()
        .map(|a| Ok((a.a as u32 as i32, a.b as u32 as i32, decode_settings(&a.blob)?)))
        .collect::<Result<_>>()?;
    let settings = local?;
    let Some(plan) = plan_split(&asks, parent.rank)? else {
        log::info!(target: "symmcomm::init", "split #{seq}: rank {}/{} has no color: no child", parent.rank, parent.nranks);
        return Ok(None);
    };
    let child = make_child(parent, &plan, seq, settings)?;
    log::info!(
        target: "symmcomm::init",
        "split #{seq}: rank {}/{} is rank {}/{} of color {color} (key {key}; parent ranks {:?})",
        parent.rank, parent.nranks, child.rank, child.nranks, plan.members
    );
    Ok(Some(child))
}

/// `symmCommShrink`: the child of every rank but `exclude`, called by
/// those ranks only. With `abort_parent`, kernels still waiting on the
/// parent (for a rank that died, say) exit first and the parent is left
/// only to be destroyed.
pub fn shrink(parent: &Comm, exclude: &[i32], cfg: Result<ChildConfig>, abort_parent: bool) -> Result<Arc<Comm>> {
    if abort_parent {
        parent.abort_device();
    }
    // Take the sequence number first: a rank whose arguments fail below
    // stays in step with the ranks that went on, for the parent's later calls.
    let seq = parent.mem.next_op_seq();
    let plan = plan_shrink(parent.nranks, parent.rank, exclude)?;
    let settings = cfg?.settings(parent);
    let child = make_child(parent, &plan, seq, settings)?;
    log::info!(
        target: "symmcomm::init",
        "shrink #{seq}: rank {}/{} is rank {}/{} (excluded {exclude:?})",
        parent.rank, parent.nranks, child.rank, child.nranks
    );
    Ok(child)
}

/// Whether the parent can still make children.
fn usable(parent: &Comm) -> Result<()> {
    if parent.is_aborted() {
        bail!(symmInvalidUsage, "rank {}'s parent communicator was aborted", parent.rank);
    }
    if let Err(e) = parent.async_error() {
        bail!(symmInvalidUsage, "rank {}'s parent communicator has an asynchronous error: {}", parent.rank, e.msg);
    }
    Ok(())
}

/// Every rank's (color, key, settings), indexed by parent rank, to this
/// rank's child. Every rank evaluates the whole table, so a conflict in
/// any color fails every rank with the same message.
pub(crate) fn plan_split(asks: &[(i32, i32, CommSettings)], me: usize) -> Result<Option<Plan>> {
    let mut colors: Vec<i32> = asks.iter().map(|a| a.0).filter(|&c| c != NOCOLOR).collect();
    colors.sort_unstable();
    colors.dedup();
    let mut mine = None;
    for color in colors {
        let mut members: Vec<usize> = (0..asks.len()).filter(|&r| asks[r].0 == color).collect();
        members.sort_by_key(|&r| (asks[r].1, r));
        let first = members[0];
        if let Some(&other) = members.iter().find(|&&r| asks[r].2 != asks[first].2) {
            bail!(
                symmInvalidUsage,
                "ranks {first} and {other} of color {color} ask for different child settings ({} vs {}); \
                 pass the same config (or NULL) on every rank of a color",
                describe(&asks[first].2),
                describe(&asks[other].2)
            );
        }
        if let Some(rank) = members.iter().position(|&r| r == me) {
            mine = Some(Plan { members, rank, label: color as u32 as u64 });
        }
    }
    Ok(mine)
}

/// The child of a shrink, from the exclusion list every remaining rank passes.
pub(crate) fn plan_shrink(nranks: usize, me: usize, exclude: &[i32]) -> Result<Plan> {
    let mut out = vec![false; nranks];
    for &x in exclude {
        if x < 0 || x as usize >= nranks {
            bail!(symmInvalidArgument, "excludeRanks holds {x}, which is not a rank of the {nranks}-rank parent");
        }
        if std::mem::replace(&mut out[x as usize], true) {
            bail!(symmInvalidArgument, "excludeRanks lists rank {x} twice");
        }
    }
    if out[me] {
        bail!(symmInvalidArgument, "rank {me} is in excludeRanks: excluded ranks must not call symmCommShrink");
    }
    let members: Vec<usize> = (0..nranks).filter(|&r| !out[r]).collect();
    let rank = members.iter().position(|&r| r == me).expect("this rank stays");
    let label = fnv(members.iter().map(|&r| r as u64)) | 1 << 63;
    Ok(Plan { members, rank, label })
}

/// The child of `plan` (called by each of its members).
fn make_child(parent: &Comm, plan: &Plan, seq: u64, settings: CommSettings) -> Result<Arc<Comm>> {
    match parent.link.local_group_id() {
        Some(group) => in_process_child(parent, plan, (group, seq, plan.label), settings),
        None => separate_child(parent, plan, seq, settings),
    }
}

// ---- members in separate processes ------------------------------------------

/// fd messages of split/shrink #seq on the parent carry this tag (symmetric
/// allocation uses 1 << 62, registration 2 << 60).
fn offer_tag(seq: u64) -> u64 {
    (3 << 60) | seq
}

/// What the child's rank 0 tells the other members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    Join { hub: std::net::SocketAddr, tag: u64, members: u64 },
    Failed(Error),
}

impl Offer {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![1u8];
        match self {
            Offer::Join { hub, tag, members } => {
                b.push(0);
                b.extend_from_slice(&bootstrap::encode_sockaddr(hub));
                b.extend_from_slice(&tag.to_le_bytes());
                b.extend_from_slice(&members.to_le_bytes());
            }
            Offer::Failed(e) => {
                b.push(1);
                b.extend_from_slice(&(e.code as i32).to_le_bytes());
                b.extend_from_slice(e.msg.as_bytes());
            }
        }
        b
    }

    fn decode(b: &[u8]) -> Result<Offer> {
        let bad = || err!(symmInternalError, "malformed split offer ({} bytes)", b.len());
        match b {
            [1, 0, rest @ ..] if rest.len() == bootstrap::SOCKADDR_LEN + 16 => {
                let hub = bootstrap::decode_sockaddr(&rest[..bootstrap::SOCKADDR_LEN]).ok_or_else(bad)?;
                let at = bootstrap::SOCKADDR_LEN;
                let tag = u64::from_le_bytes(rest[at..at + 8].try_into().unwrap());
                let members = u64::from_le_bytes(rest[at + 8..].try_into().unwrap());
                Ok(Offer::Join { hub, tag, members })
            }
            [1, 1, rest @ ..] if rest.len() >= 4 => {
                let code = symmResult_t::from_raw(i32::from_le_bytes(rest[..4].try_into().unwrap()))
                    .unwrap_or(symmResult_t::symmInternalError);
                Ok(Offer::Failed(Error::new(code, String::from_utf8_lossy(&rest[4..]).into_owned())))
            }
            _ => Err(bad()),
        }
    }
}

fn separate_child(parent: &Comm, plan: &Plan, seq: u64, settings: CommSettings) -> Result<Arc<Comm>> {
    let cfg = BootstrapConfig::from_env();
    let boot = rendezvous(&parent.link, plan, seq, &cfg)?;
    Comm::from_bootstrap(boot, Ok(parent.device.clone()), settings)
}

/// The child's bootstrap: rank 0 offers a hub and a tag over the parent's
/// fd-passing channel; everyone joins it.
pub(crate) fn rendezvous(link: &Transport, plan: &Plan, seq: u64, cfg: &BootstrapConfig) -> Result<Bootstrap> {
    let n = plan.members.len();
    let members = fnv(plan.members.iter().map(|&r| r as u64));
    let (hub, tag) = if plan.rank == 0 {
        let tag = bootstrap::new_tag();
        let made = if n > 1 { bootstrap::bind_hub(cfg).map(Some) } else { Ok(None) };
        if n > 1 {
            let offer = match (&made, &tag) {
                (Ok(Some((_, hub))), Ok(tag)) => Offer::Join { hub: *hub, tag: *tag, members },
                (Err(e), _) | (_, Err(e)) => Offer::Failed(e.clone()),
                (Ok(None), _) => unreachable!("n > 1 binds a hub"),
            };
            for &m in &plan.members[1..] {
                // A pipe each: readers of one pipe would share its bytes.
                let pipe = offer_pipe(&offer.encode())?;
                link.send_fds(m, offer_tag(seq), &[pipe.as_raw_fd()])
                    .map_err(|e| e.context(format!("offering the child's hub to parent rank {m}")))?;
            }
        }
        match made? {
            Some((listener, _)) => (Hub::Listener(listener), tag?),
            None => (Hub::Alone, tag?),
        }
    } else {
        let leader = plan.members[0];
        let fds = link.recv_fds(leader, offer_tag(seq))?;
        let fd = fds.into_iter().next().ok_or_else(|| err!(symmRemoteError, "parent rank {leader} sent no split offer"))?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut bytes).map_err(|e| Error::from_io("reading the split offer", e))?;
        match Offer::decode(&bytes)? {
            Offer::Failed(e) => {
                return Err(Error::new(symmResult_t::symmRemoteError, format!("parent rank {leader} could not host the child: {}", e.msg)))
            }
            Offer::Join { members: theirs, .. } if theirs != members => bail!(
                symmInvalidUsage,
                "parent rank {leader} forms a child of other ranks than this rank's {:?} (different colors, keys or excludeRanks?)",
                plan.members
            ),
            Offer::Join { hub, tag, .. } => (Hub::At(hub), tag),
        }
    };
    Bootstrap::join_direct(hub, tag, plan.rank, n, cfg)
}

/// A pipe's read end holding `bytes` (its write end already closed, so a
/// reader gets them and then end of file).
fn offer_pipe(bytes: &[u8]) -> Result<OwnedFd> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two new fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os("split: pipe2"));
    }
    // SAFETY: both fds are fresh and owned here from now on.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Far below the pipe's capacity: never blocks.
    std::fs::File::from(write).write_all(bytes).map_err(|e| Error::from_io("split: writing the offer", e))?;
    Ok(read)
}

// ---- members in one process -------------------------------------------------

/// What the members of an in-process child share, made by the first to arrive.
struct LocalChild {
    group: Arc<LocalGroup>,
    space: Arc<SymmSpace>,
    devices: Vec<Arc<Device>>,
}

/// A child being set up, for the members still to arrive. Weak: if the
/// member that made it gives up, nothing stays behind.
struct Pending {
    made: std::result::Result<(Weak<LocalGroup>, Weak<SymmSpace>), Error>,
    devices: Vec<i32>,
    left: usize,
}

type ChildKey = (u64, u64, u64);

static PENDING: Mutex<Option<HashMap<ChildKey, Pending>>> = Mutex::new(None);

fn in_process_child(parent: &Comm, plan: &Plan, key: ChildKey, settings: CommSettings) -> Result<Arc<Comm>> {
    let ordinals: Vec<i32> = plan.members.iter().map(|&r| parent.peers[r].device).collect();
    let shared = join_local(key, &ordinals, || {
        let devices: Vec<Arc<Device>> = ordinals.iter().map(|&d| Device::open(d)).collect::<Result<_>>()?;
        let space = SymmSpace::reserve(devices.len(), &devices)?;
        let group = LocalGroup::new(devices.len(), config::get().bootstrap_timeout);
        Ok(LocalChild { group, space, devices })
    })?;
    let access = shared.devices.iter().map(|d| d.handle).collect();
    let parts = Parts {
        rank: plan.rank,
        peers: plan.members.iter().map(|&r| parent.peers[r].clone()).collect(),
        device: parent.device.clone(),
        link: Transport::InProcess(shared.group.member(plan.rank)),
        mem: CommMemory::new(shared.space.clone(), plan.rank, parent.device.clone(), access),
        local_peers: shared.devices.clone(),
        settings,
    };
    drop(shared);
    Ok(Arc::new(Comm::finish(parts)?))
}

/// The shared parts of child `key`: made by `make` for the first member,
/// found by the others.
fn join_local(key: ChildKey, ordinals: &[i32], make: impl FnOnce() -> Result<LocalChild>) -> Result<LocalChild> {
    let mut table = PENDING.lock();
    let map = table.get_or_insert_with(HashMap::new);
    map.retain(|_, p| p.made.as_ref().map_or(true, |(g, _)| g.strong_count() > 0));
    if let Some(p) = map.get_mut(&key) {
        p.left -= 1;
        let found = match &p.made {
            Err(e) => Err(Error::new(e.code, format!("another member could not set up the child: {}", e.msg))),
            Ok((g, s)) => match (g.upgrade(), s.upgrade()) {
                (Some(group), Some(space)) => {
                    let devices = p.devices.iter().map(|&d| Device::open(d)).collect::<Result<_>>()?;
                    Ok(LocalChild { group, space, devices })
                }
                _ => Err(err!(symmRemoteError, "the member that set up the child gave up before this rank arrived")),
            },
        };
        if p.left == 0 {
            map.remove(&key);
        }
        return found;
    }
    let made = make();
    if ordinals.len() > 1 {
        let weak = made.as_ref().map(|c| (Arc::downgrade(&c.group), Arc::downgrade(&c.space))).map_err(Clone::clone);
        map.insert(key, Pending { made: weak, devices: ordinals.to_vec(), left: ordinals.len() - 1 });
    }
    made
}

// ---- helpers ----------------------------------------------------------------

fn encode_settings(s: &CommSettings) -> Vec<u8> {
    let mut b = (s.scratch_bytes as u64).to_le_bytes().to_vec();
    b.extend_from_slice(&s.timeout_ns.to_le_bytes());
    b.push(s.copy_engine as u8);
    b
}

fn decode_settings(b: &[u8]) -> Result<CommSettings> {
    if b.len() != 17 {
        bail!(symmInternalError, "malformed split settings ({} bytes)", b.len());
    }
    Ok(CommSettings {
        scratch_bytes: u64::from_le_bytes(b[..8].try_into().unwrap()) as usize,
        timeout_ns: u64::from_le_bytes(b[8..16].try_into().unwrap()),
        copy_engine: b[16] != 0,
    })
}

fn describe(s: &CommSettings) -> String {
    format!(
        "scratch {} bytes, timeout {} ms, copy engine {}",
        s.scratch_bytes,
        s.timeout_ns / 1_000_000,
        if s.copy_engine { "on" } else { "off" }
    )
}

use crate::fnv::fnv1a64_words as fnv;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn s(scratch: usize) -> CommSettings {
        CommSettings { scratch_bytes: scratch, timeout_ns: 5_000_000_000, copy_engine: false }
    }

    #[test]
    fn split_orders_by_key_then_parent_rank() {
        // A 2 x 4 grid: rows by color r / 4 with key reversing the order,
        // plus a NOCOLOR rank.
        let asks: Vec<(i32, i32, CommSettings)> =
            (0..8).map(|r| (if r == 7 { NOCOLOR } else { r / 4 }, 10 - (r % 4), s(1 << 20))).collect();
        let p = plan_split(&asks, 1).unwrap().unwrap();
        assert_eq!(p.members, vec![3, 2, 1, 0]);
        assert_eq!(p.rank, 2);
        assert_eq!(p.label, 0);
        let p = plan_split(&asks, 5).unwrap().unwrap();
        assert_eq!(p.members, vec![6, 5, 4]);
        assert_eq!((p.rank, p.label), (1, 1));
        assert_eq!(plan_split(&asks, 7).unwrap(), None);
        // Equal keys: parent rank order.
        let same: Vec<_> = (0..4).map(|_| (3, 0, s(1 << 20))).collect();
        assert_eq!(plan_split(&same, 2).unwrap().unwrap().members, vec![0, 1, 2, 3]);
        // A group of one.
        let alone = vec![(0, 0, s(1 << 20)), (1, 0, s(1 << 20))];
        assert_eq!(plan_split(&alone, 1).unwrap().unwrap(), Plan { members: vec![1], rank: 0, label: 1 });
    }

    #[test]
    fn split_settings_must_agree_within_a_color() {
        let asks = vec![(0, 0, s(1 << 20)), (1, 0, s(1 << 20)), (0, 1, s(2 << 20))];
        // Every rank fails, also rank 1 of the other color.
        for me in 0..3 {
            let e = plan_split(&asks, me).unwrap_err();
            assert_eq!(e.code, symmResult_t::symmInvalidUsage);
            assert!(e.msg.contains("ranks 0 and 2 of color 0"), "{}", e.msg);
        }
    }

    #[test]
    fn shrink_plans() {
        let p = plan_shrink(4, 2, &[1]).unwrap();
        assert_eq!((p.members.clone(), p.rank), (vec![0, 2, 3], 1));
        assert_eq!(plan_shrink(4, 0, &[1]).unwrap().label, p.label);
        assert_ne!(plan_shrink(4, 0, &[3]).unwrap().label, p.label);
        assert_eq!(plan_shrink(3, 1, &[]).unwrap().members, vec![0, 1, 2]);
        for (ex, what) in [(&[4][..], "not a rank"), (&[-1], "not a rank"), (&[0, 0], "twice"), (&[2], "must not call")] {
            let e = plan_shrink(4, 2, ex).unwrap_err();
            assert_eq!(e.code, symmResult_t::symmInvalidArgument);
            assert!(e.msg.contains(what), "{ex:?}: {}", e.msg);
        }
    }

    #[test]
    fn settings_and_offers_round_trip() {
        let x = CommSettings { scratch_bytes: 3 << 20, timeout_ns: 42, copy_engine: true };
        assert_eq!(decode_settings(&encode_settings(&x)).unwrap(), x);
        assert!(decode_settings(&[0; 16]).is_err());
        let o = Offer::Join { hub: "127.0.0.1:5555".parse().unwrap(), tag: 7, members: 9 };
        assert_eq!(Offer::decode(&o.encode()).unwrap(), o);
        let f = Offer::Failed(Error::new(symmResult_t::symmSystemError, "no port"));
        assert_eq!(Offer::decode(&f.encode()).unwrap(), f);
        assert!(Offer::decode(&[1, 0, 1]).is_err());
    }

    /// The whole host side of a split over separate bootstraps (threads
    /// here; no GPU): parent ranks agree, each color's rank 0 offers a hub
    /// through the fd channel, the members join it, and the children's
    /// links work on their own after the parents are gone.
    #[test]
    fn children_meet_through_the_parent() {
        let cfg = BootstrapConfig { addr: None, timeout: Duration::from_secs(20) };
        let id = bootstrap::create_root(&cfg).unwrap();
        let n = 5;
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (cfg, id) = (cfg.clone(), id);
                std::thread::spawn(move || {
                    let parent = Transport::Sockets(Box::new(Bootstrap::connect(&id, n as i32, r as i32, &cfg).unwrap()));
                    // Colors: even / odd parent ranks, keys reversed; rank 4 alone in color 9.
                    let color = if r == 4 { 9 } else { (r % 2) as i32 };
                    let mine = Agreement::new(HostOp::Split, 0, color as u32 as u64, (100 - r) as u64);
                    let mut mine = mine;
                    mine.blob = encode_settings(&s(1 << 20));
                    let all = agree(&parent, &mine).unwrap();
                    let asks: Vec<_> = all.iter().map(|a| (a.a as u32 as i32, a.b as u32 as i32, decode_settings(&a.blob).unwrap())).collect();
                    let plan = plan_split(&asks, r).unwrap().unwrap();
                    let child = rendezvous(&parent, &plan, 0, &cfg).unwrap();
                    drop(parent);
                    let got = child.allgather(&[r as u8]).unwrap();
                    (r, plan, child.rank(), child.nranks(), got)
                })
            })
            .collect();
        for h in handles {
            let (r, plan, crank, cn, got) = h.join().unwrap();
            assert_eq!(crank, plan.rank);
            assert_eq!(cn, plan.members.len());
            let want: Vec<Vec<u8>> = plan.members.iter().map(|&m| vec![m as u8]).collect();
            assert_eq!(got, want, "rank {r}");
            match r {
                0 | 2 => assert_eq!(plan.members, vec![2, 0]),
                1 | 3 => assert_eq!(plan.members, vec![3, 1]),
                _ => assert_eq!(plan.members, vec![4]),
            }
        }
    }

    /// A shrink's members meet without the excluded rank, which never calls.
    #[test]
    fn shrink_meets_without_the_excluded_rank() {
        let cfg = BootstrapConfig { addr: None, timeout: Duration::from_secs(20) };
        let id = bootstrap::create_root(&cfg).unwrap();
        let n = 4;
        let parents: Vec<_> = (0..n)
            .map(|r| {
                let (cfg, id) = (cfg.clone(), id);
                std::thread::spawn(move || Bootstrap::connect(&id, n as i32, r as i32, &cfg).unwrap())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| Transport::Sockets(Box::new(h.join().unwrap())))
            .collect();
        let handles: Vec<_> = parents
            .into_iter()
            .enumerate()
            .filter(|(r, _)| *r != 0)
            .map(|(r, parent)| {
                let cfg = cfg.clone();
                std::thread::spawn(move || {
                    let plan = plan_shrink(n, r, &[0]).unwrap();
                    let child = rendezvous(&parent, &plan, 3, &cfg).unwrap();
                    (child.rank(), child.nranks(), child.allgather(&[r as u8]).unwrap())
                })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let (crank, cn, got) = h.join().unwrap();
            assert_eq!((crank, cn), (i, 3));
            assert_eq!(got, vec![vec![1], vec![2], vec![3]]);
        }
    }

    /// A failed all-gather contribution reaches every rank (the split's
    /// "error on every rank" rule), over an in-process group.
    #[test]
    fn one_bad_rank_fails_every_rank() {
        let g = LocalGroup::new(3, Duration::from_secs(20));
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let link = Transport::InProcess(g.member(r));
                std::thread::spawn(move || {
                    let mut mine = Agreement::new(HostOp::Split, 0, 0, 0);
                    if r == 1 {
                        mine.error = Some(err!(symmInvalidArgument, "color -5 is negative"));
                    } else {
                        mine.blob = encode_settings(&s(1 << 20));
                    }
                    agree(&link, &mine).map(|_| ())
                })
            })
            .collect();
        let res: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(res[1].as_ref().unwrap_err().code, symmResult_t::symmInvalidArgument);
        for r in [0, 2] {
            let e = res[r].as_ref().unwrap_err();
            assert_eq!(e.code, symmResult_t::symmRemoteError);
            assert!(e.msg.contains("rank 1") && e.msg.contains("symmCommSplit"), "{}", e.msg);
        }
    }
}
