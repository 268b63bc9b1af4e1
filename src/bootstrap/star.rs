//! Hub-and-spoke byte-blob collectives. Rank 0 is the hub; every other rank
//! has one TCP connection to it.
//!
//! Every collective is the same exchange: each spoke sends the hub one DATA
//! frame {seq, op, its contribution}; the hub reads them all (concurrently,
//! so that a dead or mismatched rank is noticed at once), checks that every
//! rank is in the same call, then sends each spoke what that call returns.
//! Any failure the hub sees is forwarded as an ERROR frame so the other
//! ranks fail fast with the real cause instead of timing out. After a
//! failure the star is out of step and stays failed.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::net::{
    connect_retry, decode_error, encode_error, poll_until, pollfd, recv_frame, secs, send_all, send_frame, FrameReader,
    Header, Interrupt, Kind, NetError,
};
use super::TARGET;
use crate::error::{bail, err, Error, Result};

/// Largest blob one rank may contribute.
pub(crate) const MAX_BLOB: u64 = 1 << 40;
/// Set-up messages are tiny.
const MAX_CTRL: u64 = 4096;
/// Spokes wait this much longer than the hub, so that the hub's error
/// (which knows *which* rank is missing) reaches them before their own timeout.
const HUB_GRACE: Duration = Duration::from_secs(1);
/// How long we try to deliver an ERROR frame to a peer.
const ERROR_WAIT: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Allgather,
    Broadcast(usize),
    Barrier,
}

impl Op {
    /// Wire code: the operation in the low byte, the broadcast root above it,
    /// so that ranks disagreeing about the root are caught too.
    fn code(self) -> u32 {
        match self {
            Op::Allgather => 1,
            Op::Broadcast(root) => 2 | (root as u32) << 8,
            Op::Barrier => 3,
        }
    }
}

fn describe(code: u32) -> String {
    match code & 0xff {
        1 => "allgather".into(),
        2 => format!("broadcast(root={})", code >> 8),
        3 => "barrier".into(),
        _ => format!("unknown operation {code:#x}"),
    }
}

enum Links {
    /// nranks == 1: nothing to talk to.
    Alone,
    /// Rank 0: connection to every other rank, indexed by rank (`[0]` is `None`).
    Hub(Vec<Option<TcpStream>>),
    Spoke(TcpStream),
}

pub(crate) struct Star {
    rank: usize,
    nranks: usize,
    timeout: Duration,
    /// Number of the collective in progress / last started (1-based).
    seq: u64,
    links: Links,
    broken: Option<Error>,
}

/// A failure while the hub runs a collective, and the rank whose
/// connection broke, if that is what happened (it is not sent the ERROR).
type HubFailure = (Error, Option<usize>);

impl Star {
    pub(crate) fn alone(timeout: Duration) -> Star {
        Star { rank: 0, nranks: 1, timeout, seq: 0, links: Links::Alone, broken: None }
    }

    /// Rank 0: accepts one connection from each other rank.
    pub(crate) fn hub(listener: TcpListener, tag: u64, nranks: usize, timeout: Duration) -> Result<Star> {
        let mut peers: Vec<Option<TcpStream>> = (0..nranks).map(|_| None).collect();
        let r = accept_spokes(&listener, tag, &mut peers, timeout).and_then(|()| {
            let deadline = Instant::now() + timeout;
            for (r, s) in peers.iter().enumerate().skip(1) {
                let s = s.as_ref().expect("every spoke joined");
                send_frame(s.as_raw_fd(), Header::new(Kind::Ready, 0, 0, 0), &[], deadline, None, false)
                    .map_err(|e| err!(symmRemoteError, "bootstrap: rank {r} went away during set-up ({e:?})"))?;
            }
            Ok(())
        });
        if let Err(e) = r {
            forward_error(&peers, &e, None);
            return Err(e);
        }
        Ok(Star { rank: 0, nranks, timeout, seq: 0, links: Links::Hub(peers), broken: None })
    }

    /// Ranks 1..n: connects to the hub and waits until every rank has.
    pub(crate) fn spoke(hub: SocketAddr, tag: u64, rank: usize, nranks: usize, timeout: Duration) -> Result<Star> {
        let deadline = Instant::now() + timeout;
        let s = connect_retry(hub, deadline).map_err(|e| match e {
            NetError::Timeout => err!(
                symmTimeout,
                "bootstrap: timed out after {} connecting to rank 0 at {hub} (SYMM_BOOTSTRAP_TIMEOUT)",
                secs(timeout)
            ),
            e => err!(symmSystemError, "bootstrap: cannot connect to rank 0 at {hub}: {e:?}"),
        })?;
        let mut join = tag.to_le_bytes().to_vec();
        join.extend_from_slice(&(rank as u32).to_le_bytes());
        let fd = s.as_raw_fd();
        let gone = || err!(symmRemoteError, "bootstrap: rank 0 closed the connection during set-up");
        send_frame(fd, Header::new(Kind::Join, 0, 0, join.len()), &join, deadline, None, false).map_err(|e| match e {
            NetError::Closed => gone(),
            e => err!(symmSystemError, "bootstrap: sending JOIN to rank 0: {e:?}"),
        })?;
        let (h, payload) = recv_frame(fd, MAX_CTRL, deadline + HUB_GRACE, None).map_err(|e| match e {
            NetError::Timeout => err!(
                symmTimeout,
                "bootstrap: timed out after {} waiting for rank 0 to finish connecting all ranks (SYMM_BOOTSTRAP_TIMEOUT)",
                secs(timeout)
            ),
            NetError::Closed => gone(),
            e => err!(symmSystemError, "bootstrap: waiting for rank 0: {e:?}"),
        })?;
        match h.kind {
            Kind::Ready => Ok(Star { rank, nranks, timeout, seq: 0, links: Links::Spoke(s), broken: None }),
            Kind::Error => Err(reported(decode_error(&payload), 0)),
            k => bail!(symmInternalError, "bootstrap: unexpected {k:?} from rank 0 during set-up"),
        }
    }

    /// The sockets `abort` must shut down.
    pub(crate) fn raw_fds(&self) -> Vec<RawFd> {
        match &self.links {
            Links::Alone => Vec::new(),
            Links::Hub(peers) => peers.iter().flatten().map(|s| s.as_raw_fd()).collect(),
            Links::Spoke(s) => vec![s.as_raw_fd()],
        }
    }

    /// Best effort, never blocks: tell peers why our sockets are about to
    /// close. Only called when no collective is in flight (a frame written
    /// now cannot interleave with another).
    pub(crate) fn send_abort(&self) {
        let h = Header::new(Kind::Abort, self.seq, 0, 0).encode();
        for fd in self.raw_fds() {
            let _ = send_all(fd, &h, Instant::now(), None, false);
        }
    }

    /// Runs one collective. Returns: allgather, every rank's blob; broadcast,
    /// the root's blob alone; barrier, nothing.
    pub(crate) fn run(&mut self, op: Op, mine: &[u8], intr: &Interrupt) -> Result<Vec<Vec<u8>>> {
        if let Some(e) = &self.broken {
            bail_sticky(e)?;
        }
        if let Op::Broadcast(root) = op {
            if root >= self.nranks {
                bail!(symmInvalidArgument, "broadcast root {root} is out of range for nranks {}", self.nranks);
            }
        }
        if mine.len() as u64 > MAX_BLOB {
            bail!(symmInvalidArgument, "bootstrap blob of {} bytes exceeds the limit of {MAX_BLOB}", mine.len());
        }
        self.seq += 1;
        let r = match self.links {
            Links::Alone => Ok(match op {
                Op::Allgather | Op::Broadcast(_) => vec![mine.to_vec()],
                Op::Barrier => Vec::new(),
            }),
            Links::Hub(_) => self.run_hub(op, mine, intr),
            Links::Spoke(_) => self.run_spoke(op, mine, intr),
        };
        r.map_err(|e| {
            let e = if intr.fired() {
                err!(symmRemoteError, "bootstrap aborted during {} (#{})", describe(op.code()), self.seq)
            } else {
                e
            };
            log::warn!(target: TARGET, "bootstrap rank {}: {}", self.rank, e.msg);
            self.broken = Some(e.clone());
            e
        })
    }

    fn run_hub(&self, op: Op, mine: &[u8], intr: &Interrupt) -> Result<Vec<Vec<u8>>> {
        let (seq, code, n, timeout) = (self.seq, op.code(), self.nranks, self.timeout);
        let Links::Hub(peers) = &self.links else { unreachable!() };
        let outcome = gather(peers, seq, code, Instant::now() + timeout, timeout, intr).and_then(|mut got| {
            for (s, peer) in peers.iter().enumerate().skip(1) {
                let fd = peer.as_ref().expect("every spoke joined").as_raw_fd();
                let deadline = Instant::now() + timeout;
                let pick = |r: usize| if r == 0 { mine } else { got[r].as_slice() };
                let frames: Vec<&[u8]> = match op {
                    Op::Allgather => (0..n).filter(|&r| r != s).map(pick).collect(),
                    Op::Broadcast(root) if root != s => vec![pick(root)],
                    Op::Broadcast(_) | Op::Barrier => vec![&[]],
                };
                for f in frames {
                    send_frame(fd, Header::new(Kind::Data, seq, code, f.len()), f, deadline, Some(intr), false)
                        .map_err(|e| (peer_error(e, s, &describe(code), seq, timeout, "sending results to"), Some(s)))?;
                }
            }
            Ok(match op {
                Op::Allgather => {
                    got[0] = mine.to_vec();
                    got
                }
                Op::Broadcast(0) => vec![mine.to_vec()],
                Op::Broadcast(root) => vec![std::mem::take(&mut got[root])],
                Op::Barrier => Vec::new(),
            })
        });
        outcome.map_err(|(e, culprit)| {
            if !intr.fired() {
                forward_error(peers, &e, culprit);
            }
            e
        })
    }

    fn run_spoke(&self, op: Op, mine: &[u8], intr: &Interrupt) -> Result<Vec<Vec<u8>>> {
        let (seq, code, rank, n, timeout) = (self.seq, op.code(), self.rank, self.nranks, self.timeout);
        let Links::Spoke(s) = &self.links else { unreachable!() };
        let fd = s.as_raw_fd();
        let what = describe(code);
        let first_deadline = Instant::now() + timeout + HUB_GRACE;
        let contribution = match op {
            Op::Allgather => mine,
            Op::Broadcast(root) if root == rank => mine,
            Op::Broadcast(_) | Op::Barrier => &[],
        };
        let h = Header::new(Kind::Data, seq, code, contribution.len());
        match send_frame(fd, h, contribution, first_deadline, Some(intr), true) {
            // The hub spoke first (it can only be an ERROR/ABORT), or hung
            // up, maybe right after an ERROR: either way the reply says why.
            Ok(()) | Err(NetError::Incoming | NetError::Closed) => {}
            Err(e) => return Err(peer_error(e, 0, &what, seq, timeout, "sending to")),
        }
        let expect = if op == Op::Allgather { n - 1 } else { 1 };
        let mut out = Vec::with_capacity(n);
        for i in 0..expect {
            let deadline = if i == 0 { first_deadline } else { Instant::now() + timeout };
            let (h, payload) = recv_frame(fd, MAX_BLOB, deadline, Some(intr)).map_err(|e| match e {
                NetError::Timeout => err!(
                    symmTimeout,
                    "bootstrap {what} (#{seq}) timed out after {} at rank {rank} waiting for rank 0 (SYMM_BOOTSTRAP_TIMEOUT); does every rank call it?",
                    secs(timeout)
                ),
                e => peer_error(e, 0, &what, seq, timeout, "waiting for"),
            })?;
            match h.kind {
                Kind::Data if h.seq == seq && h.op == code => out.push(payload),
                Kind::Data => bail!(
                    symmInternalError,
                    "bootstrap: rank 0 answered {} (#{}) while rank {rank} is in {what} (#{seq})",
                    describe(h.op),
                    h.seq
                ),
                Kind::Error => return Err(reported(decode_error(&payload), 0)),
                Kind::Abort => bail!(symmRemoteError, "rank 0 aborted its communicator during bootstrap {what} (#{seq})"),
                k => bail!(symmInternalError, "bootstrap: unexpected {k:?} frame from rank 0 during {what} (#{seq})"),
            }
        }
        Ok(match op {
            Op::Allgather => {
                out.insert(rank, mine.to_vec());
                out
            }
            Op::Broadcast(root) if root == rank => vec![mine.to_vec()],
            Op::Broadcast(_) => out,
            Op::Barrier => Vec::new(),
        })
    }
}

/// Hub side of set-up: accept until every rank 1..n has sent a valid JOIN.
fn accept_spokes(listener: &TcpListener, tag: u64, peers: &mut [Option<TcpStream>], timeout: Duration) -> Result<()> {
    listener.set_nonblocking(true).map_err(|e| Error::from_io("bootstrap: hub listener", e))?;
    let deadline = Instant::now() + timeout;
    let n = peers.len();
    let mut pending: Vec<(TcpStream, FrameReader)> = Vec::new();
    loop {
        let missing: Vec<usize> = (1..n).filter(|&r| peers[r].is_none()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut fds: Vec<_> = std::iter::once(pollfd(listener.as_raw_fd(), libc::POLLIN))
            .chain(pending.iter().map(|(s, _)| pollfd(s.as_raw_fd(), libc::POLLIN)))
            .collect();
        match poll_until(&mut fds, deadline, None) {
            Ok(()) => {}
            Err(NetError::Timeout) => bail!(
                symmTimeout,
                "bootstrap: timed out after {} waiting for rank(s) {} to connect to rank 0 (SYMM_BOOTSTRAP_TIMEOUT)",
                secs(timeout),
                list(&missing)
            ),
            Err(e) => bail!(symmSystemError, "bootstrap: hub poll failed: {e:?}"),
        }
        let polled = pending.len();
        if fds[0].revents != 0 {
            loop {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nodelay(true);
                        pending.push((s, FrameReader::new(MAX_CTRL)));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // E.g. EMFILE: the listener stays readable, so pause
                        // rather than spin until the deadline.
                        log::warn!(target: TARGET, "bootstrap hub: accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(50));
                        break;
                    }
                }
            }
        }
        // Backwards, so that removing entry i leaves entries < i in place.
        for i in (0..polled).rev() {
            if fds[i + 1].revents == 0 {
                continue;
            }
            let (s, reader) = &mut pending[i];
            let frame = match reader.pump(s.as_raw_fd()) {
                Ok(None) => continue,
                Ok(Some(f)) => f,
                Err(e) => {
                    log::debug!(target: TARGET, "bootstrap hub: dropping a connection before JOIN: {e:?}");
                    pending.remove(i);
                    continue;
                }
            };
            let (s, _) = pending.remove(i);
            let (h, p) = frame;
            if h.kind != Kind::Join || p.len() != 12 {
                log::warn!(target: TARGET, "bootstrap hub: dropping a connection that sent {:?} instead of JOIN", h.kind);
                continue;
            }
            let their_tag = u64::from_le_bytes(p[..8].try_into().unwrap());
            let r = u32::from_le_bytes(p[8..].try_into().unwrap()) as usize;
            if their_tag != tag {
                log::warn!(target: TARGET, "bootstrap hub: dropping a JOIN from another communicator (tag {their_tag:016x})");
                continue;
            }
            if r == 0 || r >= n {
                bail!(symmInvalidUsage, "bootstrap: rank {r} (out of range for nranks {n}) connected to rank 0");
            }
            if peers[r].is_some() {
                bail!(symmInvalidUsage, "rank {r} joined twice (duplicate rank)");
            }
            peers[r] = Some(s);
        }
    }
}

/// Hub side of a collective: one DATA frame from every spoke, read concurrently.
/// Returns the contributions indexed by rank (`[0]` empty).
fn gather(
    peers: &[Option<TcpStream>],
    seq: u64,
    code: u32,
    deadline: Instant,
    timeout: Duration,
    intr: &Interrupt,
) -> std::result::Result<Vec<Vec<u8>>, HubFailure> {
    let n = peers.len();
    let what = describe(code);
    let fd = |r: usize| peers[r].as_ref().unwrap().as_raw_fd();
    let mut got: Vec<Option<Vec<u8>>> = (0..n).map(|r| (r == 0).then(Vec::new)).collect();
    let mut readers: Vec<FrameReader> = (0..n).map(|_| FrameReader::new(MAX_BLOB)).collect();
    loop {
        let missing: Vec<usize> = (1..n).filter(|&r| got[r].is_none()).collect();
        if missing.is_empty() {
            return Ok(got.into_iter().map(Option::unwrap_or_default).collect());
        }
        let mut fds: Vec<_> =
            (0..n).map(|r| if got[r].is_none() { pollfd(fd(r), libc::POLLIN) } else { pollfd(-1, 0) }).collect();
        match poll_until(&mut fds, deadline, Some(intr)) {
            Ok(()) => {}
            Err(NetError::Timeout) => {
                let e = err!(
                    symmTimeout,
                    "bootstrap {what} (#{seq}) timed out after {} at rank 0: rank(s) {} did not call it (SYMM_BOOTSTRAP_TIMEOUT)",
                    secs(timeout),
                    list(&missing)
                );
                return Err((e, None));
            }
            Err(e) => return Err((err!(symmSystemError, "bootstrap {what} (#{seq}): poll failed: {e:?}"), None)),
        }
        for r in missing {
            if fds[r].revents == 0 {
                continue;
            }
            // Rank r is told too unless its connection is what failed.
            let fail = |e: Error| Err((e, None));
            match readers[r].pump(fd(r)) {
                Ok(None) => {}
                Ok(Some((h, payload))) => match h.kind {
                    Kind::Data if h.seq == seq && h.op == code => got[r] = Some(payload),
                    Kind::Data => {
                        return fail(err!(
                            symmInvalidUsage,
                            "bootstrap collective mismatch: rank 0 called {what} (#{seq}) but rank {r} called {} (#{})",
                            describe(h.op),
                            h.seq
                        ))
                    }
                    Kind::Abort => {
                        return fail(err!(symmRemoteError, "rank {r} aborted its communicator during bootstrap {what} (#{seq})"))
                    }
                    k => return fail(err!(symmInternalError, "bootstrap: unexpected {k:?} frame from rank {r} in {what} (#{seq})")),
                },
                Err(e) => return Err((peer_error(e, r, &what, seq, timeout, "waiting for"), Some(r))),
            }
        }
    }
}

/// An error about the connection to `peer`, in the words users need.
fn peer_error(e: NetError, peer: usize, what: &str, seq: u64, timeout: Duration, doing: &str) -> Error {
    match e {
        NetError::Closed | NetError::Incoming => err!(symmRemoteError, "rank {peer} disconnected during bootstrap {what} (#{seq})"),
        NetError::Aborted => err!(symmRemoteError, "bootstrap aborted during {what} (#{seq})"),
        NetError::Timeout => err!(
            symmTimeout,
            "bootstrap {what} (#{seq}) timed out after {} {doing} rank {peer} (SYMM_BOOTSTRAP_TIMEOUT)",
            secs(timeout)
        ),
        NetError::Protocol(m) => err!(symmInternalError, "bootstrap {what} (#{seq}): bad frame from rank {peer}: {m}"),
        NetError::Io(io) => err!(symmSystemError, "bootstrap {what} (#{seq}): {doing} rank {peer}: {io}"),
    }
}

/// Best effort: tell every spoke but `except` about `e`, so it fails now.
fn forward_error(peers: &[Option<TcpStream>], e: &Error, except: Option<usize>) {
    let payload = encode_error(e);
    let h = Header::new(Kind::Error, 0, 0, payload.len());
    for (r, s) in peers.iter().enumerate() {
        if let (Some(s), false) = (s, except == Some(r)) {
            let _ = send_frame(s.as_raw_fd(), h, &payload, Instant::now() + ERROR_WAIT, None, false);
        }
    }
}

fn reported(e: Error, by: usize) -> Error {
    Error::new(e.code, format!("{} (reported by rank {by})", e.msg))
}

fn bail_sticky(e: &Error) -> Result<()> {
    Err(Error::new(e.code, format!("the bootstrap is unusable after an earlier failure: {}", e.msg)))
}

fn list(ranks: &[usize]) -> String {
    ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_codes_and_descriptions() {
        assert_eq!(describe(Op::Allgather.code()), "allgather");
        assert_eq!(describe(Op::Barrier.code()), "barrier");
        assert_eq!(describe(Op::Broadcast(5).code()), "broadcast(root=5)");
        assert_ne!(Op::Broadcast(1).code(), Op::Broadcast(2).code());
        assert!(describe(0x77).contains("unknown"));
        assert_eq!(list(&[2, 3]), "2, 3");
    }

    #[test]
    fn alone_needs_no_peers() {
        let intr = Interrupt::new().unwrap();
        let mut s = Star::alone(Duration::from_secs(1));
        assert!(s.raw_fds().is_empty());
        assert_eq!(s.run(Op::Allgather, b"x", &intr).unwrap(), vec![b"x".to_vec()]);
        assert_eq!(s.run(Op::Broadcast(0), b"y", &intr).unwrap(), vec![b"y".to_vec()]);
        assert!(s.run(Op::Barrier, b"", &intr).unwrap().is_empty());
        assert_eq!(s.run(Op::Broadcast(1), b"", &intr).unwrap_err().code, crate::error::symmResult_t::symmInvalidArgument);
        assert_eq!(s.seq, 3);
    }
}
