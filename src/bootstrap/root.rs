//! The rendezvous: the root thread that `create_root` starts, and each
//! rank's side of it ([`join`]).
//!
//! Every rank sends the root one HELLO; once `nranks` distinct valid ranks
//! are connected the root answers each with OK (carrying rank 0's hub
//! address) and exits. Any inconsistency (nranks mismatch, duplicate or
//! out-of-range rank) *poisons* the rendezvous: every connected rank, and
//! every rank that connects later, gets the same ERROR, so that one bad
//! rank produces one clear message everywhere instead of N timeouts.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::net::{
    connect_retry, decode_error, decode_sockaddr, encode_error, encode_sockaddr, parse_addr, poll_until, pollfd,
    recv_frame, secs, send_frame, FrameReader, Header, Kind, NetError, DEFAULT_ADDR, SOCKADDR_LEN,
};
use super::unique_id::{random_u64, UniqueId, MAGIC, VERSION};
use super::{BootstrapConfig, TARGET};
use crate::error::{err, Error, Result};

/// HELLO flag: the sender's rank is outside [0, nranks).
pub(crate) const FLAG_OUT_OF_RANGE: u32 = 1;
/// HELLO flag: the sender found its rank's fd-passing socket already bound
/// on this host, i.e. another live rank uses the same rank number.
pub(crate) const FLAG_DUPLICATE: u32 = 2;

/// Rendezvous messages are tiny; anything bigger is not a symmcomm peer.
const MAX_MSG: u64 = 4096;
/// The root's grace beyond the ranks' own timeout, so that a rank's timeout
/// (not the root closing on it) is what ends a rendezvous that never completes.
const ROOT_GRACE: Duration = Duration::from_secs(1);
/// How long the root spends delivering one small reply.
const REPLY_WAIT: Duration = Duration::from_secs(2);

/// What a rank tells the root. Wire layout (52 bytes): magic u64, version
/// u32, flags u32, tag u64, nranks i32, rank i32, hub address (20 bytes,
/// family 0 when absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub flags: u32,
    pub tag: u64,
    pub nranks: i32,
    pub rank: i32,
    /// Rank 0's star hub listener.
    pub hub: Option<SocketAddr>,
}

const HELLO_LEN: usize = 32 + SOCKADDR_LEN;

impl Hello {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HELLO_LEN);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.tag.to_le_bytes());
        b.extend_from_slice(&self.nranks.to_le_bytes());
        b.extend_from_slice(&self.rank.to_le_bytes());
        b.extend_from_slice(&self.hub.map(|a| encode_sockaddr(&a)).unwrap_or_default());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> std::result::Result<Hello, String> {
        if b.len() != HELLO_LEN {
            return Err(format!("HELLO of {} bytes (expected {HELLO_LEN})", b.len()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let magic = u64::from_le_bytes(b[0..8].try_into().unwrap());
        if magic != MAGIC || u32_at(8) != VERSION {
            return Err(format!("HELLO with magic {magic:#x} version {} (another program or version?)", u32_at(8)));
        }
        Ok(Hello {
            flags: u32_at(12),
            tag: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            nranks: u32_at(24) as i32,
            rank: u32_at(28) as i32,
            hub: decode_sockaddr(&b[32..]),
        })
    }
}

/// OK payload: nranks u32, hub address (20 bytes).
fn encode_ok(nranks: i32, hub: Option<SocketAddr>) -> Vec<u8> {
    let mut b = (nranks as u32).to_le_bytes().to_vec();
    b.extend_from_slice(&hub.map(|a| encode_sockaddr(&a)).unwrap_or_default());
    b
}

/// Binds the root listener, starts the root thread and returns the id.
pub fn create_root(cfg: &BootstrapConfig) -> Result<UniqueId> {
    let addr = match &cfg.addr {
        Some(s) => parse_addr(s)?,
        None => DEFAULT_ADDR,
    };
    let listener =
        TcpListener::bind(addr).map_err(|e| Error::from_io(format_args!("bootstrap: cannot listen on {addr}"), e))?;
    // Non-blocking so that an accept after poll can never hang the thread
    // (a pending connection may be reset between poll and accept).
    listener.set_nonblocking(true).map_err(|e| Error::from_io("bootstrap: root listener", e))?;
    let local = listener.local_addr().map_err(|e| Error::from_io("bootstrap: root listener", e))?;
    let tag = random_u64()?;
    let id = UniqueId::new(local, tag);
    let root = Root {
        listener,
        tag,
        timeout: cfg.timeout,
        conns: Vec::new(),
        nranks: None,
        poison: None,
        last_activity: Instant::now(),
    };
    std::thread::Builder::new()
        .name("symm-root".into())
        .spawn(move || root.run())
        .map_err(|e| Error::from_io("bootstrap: cannot start the root thread", e))?;
    log::debug!(target: TARGET, "bootstrap root listening on {local} (tag {tag:016x})");
    Ok(id)
}

struct Conn {
    stream: TcpStream,
    reader: FrameReader,
    hello: Option<Hello>,
    /// Set once this connection counts as that rank's arrival.
    rank: Option<i32>,
    /// To be closed at the end of this poll round.
    dead: bool,
}

struct Root {
    listener: TcpListener,
    tag: u64,
    timeout: Duration,
    conns: Vec<Conn>,
    /// (nranks, rank whose HELLO fixed it).
    nranks: Option<(i32, i32)>,
    poison: Option<Error>,
    last_activity: Instant,
}

impl Root {
    fn run(mut self) {
        loop {
            let deadline = self.last_activity + self.timeout + ROOT_GRACE;
            let mut fds: Vec<_> = std::iter::once(pollfd(self.listener.as_raw_fd(), libc::POLLIN))
                .chain(self.conns.iter().map(|c| pollfd(c.stream.as_raw_fd(), libc::POLLIN)))
                .collect();
            match poll_until(&mut fds, deadline, None) {
                Ok(()) => {}
                Err(NetError::Timeout) => {
                    let arrived = self.conns.iter().filter(|c| c.rank.is_some()).count();
                    if self.poison.is_none() {
                        log::warn!(target: TARGET,
                            "bootstrap root (tag {:016x}): giving up after {} without activity; {arrived} of {} ranks had joined",
                            self.tag, secs(self.timeout + ROOT_GRACE),
                            self.nranks.map_or("?".to_string(), |n| n.0.to_string()));
                    }
                    return;
                }
                Err(e) => {
                    log::warn!(target: TARGET, "bootstrap root: poll failed: {e:?}; exiting");
                    return;
                }
            }
            // Only the connections that were polled; new ones are appended.
            let polled = self.conns.len();
            if fds[0].revents != 0 {
                self.accept_all();
            }
            for i in 0..polled {
                if fds[i + 1].revents != 0 && !self.conns[i].dead {
                    self.service(i);
                }
            }
            self.conns.retain(|c| !c.dead);
            if self.complete() {
                self.finish();
                return;
            }
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    log::trace!(target: TARGET, "bootstrap root: connection from {peer}");
                    let _ = stream.set_nodelay(true);
                    self.last_activity = Instant::now();
                    self.conns.push(Conn { stream, reader: FrameReader::new(MAX_MSG), hello: None, rank: None, dead: false });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // E.g. EMFILE: keep serving the others, but pause, as the
                    // listener stays readable and poll would spin.
                    log::warn!(target: TARGET, "bootstrap root: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            }
        }
    }

    fn service(&mut self, i: usize) {
        loop {
            let fd = self.conns[i].stream.as_raw_fd();
            match self.conns[i].reader.pump(fd) {
                Ok(Some((h, payload))) => self.on_frame(i, h, &payload),
                Ok(None) => return,
                Err(e) => {
                    // A rank that gave up (timed out, was killed) no longer counts.
                    let c = &mut self.conns[i];
                    if let Some(r) = c.rank {
                        log::debug!(target: TARGET, "bootstrap root: rank {r} left before the rendezvous completed ({e:?})");
                    }
                    c.dead = true;
                    return;
                }
            }
            if self.conns[i].dead {
                return;
            }
        }
    }

    fn on_frame(&mut self, i: usize, h: Header, payload: &[u8]) {
        let hello = match (h.kind, &self.conns[i].hello) {
            (Kind::Hello, None) => Hello::decode(payload),
            _ => Err(format!("unexpected {:?} frame", h.kind)),
        };
        let hello = match hello {
            Ok(hello) => hello,
            Err(why) => {
                log::warn!(target: TARGET, "bootstrap root: dropping a connection: {why}");
                self.reply_error(i, &err!(symmInvalidArgument, "bootstrap protocol mismatch: {why}"));
                return;
            }
        };
        self.last_activity = Instant::now();
        log::debug!(target: TARGET, "bootstrap root: HELLO rank {} nranks {} flags {:#x}", hello.rank, hello.nranks, hello.flags);
        if hello.tag != self.tag {
            let e = err!(
                symmInvalidArgument,
                "unique id does not match this root (id tag {:016x}, root tag {:016x}); was the id reused after its root exited?",
                hello.tag,
                self.tag
            );
            self.reply_error(i, &e);
            return;
        }
        let (rank, nranks) = (hello.rank, hello.nranks);
        self.conns[i].hello = Some(hello.clone());
        if let Some(p) = self.poison.clone() {
            self.reply_error(i, &p);
            return;
        }
        if hello.flags & FLAG_OUT_OF_RANGE != 0 || rank < 0 || rank >= nranks {
            return self.poison(err!(symmInvalidArgument, "rank {rank} is out of range for nranks {nranks}"));
        }
        match self.nranks {
            Some((n, by)) if n != nranks => {
                return self.poison(err!(
                    symmInvalidUsage,
                    "nranks mismatch: rank {by} passed nranks={n} but rank {rank} passed nranks={nranks}"
                ));
            }
            Some(_) => {}
            None => self.nranks = Some((nranks, rank)),
        }
        let twice = self.conns.iter().any(|c| !c.dead && c.rank == Some(rank));
        if twice || hello.flags & FLAG_DUPLICATE != 0 {
            return self.poison(err!(symmInvalidUsage, "rank {rank} joined twice (duplicate rank)"));
        }
        self.conns[i].rank = Some(rank);
    }

    /// Fails the rendezvous for everyone who said HELLO, now and later.
    fn poison(&mut self, e: Error) {
        log::warn!(target: TARGET, "bootstrap root (tag {:016x}): rendezvous failed: {}", self.tag, e.msg);
        for i in 0..self.conns.len() {
            if self.conns[i].hello.is_some() && !self.conns[i].dead {
                self.reply_error(i, &e);
            }
        }
        self.poison = Some(e);
    }

    fn reply_error(&mut self, i: usize, e: &Error) {
        self.reply(i, Kind::Error, &encode_error(e));
        self.conns[i].dead = true;
    }

    fn reply(&self, i: usize, kind: Kind, payload: &[u8]) {
        let fd = self.conns[i].stream.as_raw_fd();
        let h = Header::new(kind, 0, 0, payload.len());
        if let Err(e) = send_frame(fd, h, payload, Instant::now() + REPLY_WAIT, None, false) {
            log::debug!(target: TARGET, "bootstrap root: could not deliver {kind:?}: {e:?}");
        }
    }

    fn complete(&self) -> bool {
        let arrived = self.conns.iter().filter(|c| c.rank.is_some()).count();
        self.poison.is_none() && self.nranks.is_some_and(|(n, _)| arrived == n as usize)
    }

    fn finish(&mut self) {
        let (nranks, _) = self.nranks.expect("complete() checked nranks");
        let hub = self.conns.iter().find(|c| c.rank == Some(0)).and_then(|c| c.hello.as_ref()?.hub);
        if hub.is_none() && nranks > 1 {
            let e = err!(symmInternalError, "bootstrap: rank 0 did not announce its hub address");
            for i in 0..self.conns.len() {
                self.reply_error(i, &e);
            }
            return;
        }
        let ok = encode_ok(nranks, hub);
        let late = err!(
            symmInvalidUsage,
            "the rendezvous for this unique id already completed with all {nranks} ranks (duplicate rank, or nranks too small?)"
        );
        for i in 0..self.conns.len() {
            // Connections that have not said HELLO yet are not among the
            // ranks that completed it.
            match self.conns[i].rank {
                Some(_) => self.reply(i, Kind::Ok, &ok),
                None => self.reply_error(i, &late),
            }
        }
        log::info!(target: TARGET, "bootstrap root (tag {:016x}): all {nranks} ranks joined", self.tag);
    }
}

// ---------------------------------------------------------------- rank side

/// Rendezvous result for one rank.
pub(crate) struct Joined {
    pub nranks: usize,
    pub hub: Option<SocketAddr>,
}

/// Says HELLO to the root and waits for OK or ERROR until `start + timeout`.
pub(crate) fn join(root: SocketAddr, hello: &Hello, timeout: Duration, start: Instant) -> Result<Joined> {
    let deadline = start + timeout;
    let nranks = hello.nranks;
    let timed_out = || {
        err!(
            symmTimeout,
            "bootstrap: timed out after {} waiting for all {nranks} ranks to join (SYMM_BOOTSTRAP_TIMEOUT); check every rank calls symmCommInitRank with the same unique id and nranks",
            secs(timeout)
        )
    };
    let root_gone = || {
        err!(
            symmRemoteError,
            "bootstrap: the root at {root} closed the connection before all {nranks} ranks joined (did the process that called symmGetUniqueId exit?)"
        )
    };
    let stream = connect_retry(root, deadline).map_err(|e| match e {
        NetError::Timeout => err!(
            symmTimeout,
            "bootstrap: timed out after {} trying to reach the root at {root} (SYMM_BOOTSTRAP_TIMEOUT); is the process that called symmGetUniqueId still running, and did it create the id less than the timeout ago?",
            secs(timeout)
        ),
        e => err!(symmSystemError, "bootstrap: cannot connect to the root at {root}: {e:?}"),
    })?;
    let fd = stream.as_raw_fd();
    let payload = hello.encode();
    send_frame(fd, Header::new(Kind::Hello, 0, 0, payload.len()), &payload, deadline, None, false).map_err(|e| match e {
        NetError::Timeout => timed_out(),
        NetError::Closed => root_gone(),
        e => err!(symmSystemError, "bootstrap: sending HELLO to {root}: {e:?}"),
    })?;
    let (h, payload) = recv_frame(fd, MAX_MSG, deadline, None).map_err(|e| match e {
        NetError::Timeout => timed_out(),
        NetError::Closed => root_gone(),
        e => err!(symmSystemError, "bootstrap: waiting for the root at {root}: {e:?}"),
    })?;
    match h.kind {
        Kind::Ok if payload.len() == 4 + SOCKADDR_LEN => {
            let n = u32::from_le_bytes(payload[..4].try_into().unwrap());
            if n as i32 != nranks {
                return Err(err!(symmInternalError, "bootstrap: the root confirmed nranks {n}, expected {nranks}"));
            }
            Ok(Joined { nranks: n as usize, hub: decode_sockaddr(&payload[4..]) })
        }
        Kind::Error => {
            let e = decode_error(&payload);
            Err(Error::new(e.code, format!("{} (reported by the bootstrap root)", e.msg)))
        }
        k => Err(err!(symmInternalError, "bootstrap: unexpected {k:?} reply from the root")),
    }
}

/// Tells the root about a rank outside [0, nranks) so that it can fail the
/// whole rendezvous; best effort, bounded by `wait`.
pub(crate) fn report_bad_rank(root: SocketAddr, hello: &Hello, wait: Duration) {
    let deadline = Instant::now() + wait;
    let sent = connect_retry(root, deadline).and_then(|s| {
        let p = hello.encode();
        send_frame(s.as_raw_fd(), Header::new(Kind::Hello, 0, 0, p.len()), &p, deadline, None, false)
    });
    if let Err(e) = sent {
        log::debug!(target: TARGET, "bootstrap: could not report rank {} to the root at {root}: {e:?}", hello.rank);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip() {
        let h = Hello { flags: FLAG_OUT_OF_RANGE, tag: 42, nranks: 4, rank: -3, hub: Some("[::1]:77".parse().unwrap()) };
        let b = h.encode();
        assert_eq!(b.len(), HELLO_LEN);
        assert_eq!(Hello::decode(&b), Ok(h.clone()));
        let no_hub = Hello { hub: None, ..h };
        assert_eq!(Hello::decode(&no_hub.encode()), Ok(no_hub));
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert!(Hello::decode(&bad).unwrap_err().contains("magic"));
        assert!(Hello::decode(&b[1..]).is_err());
    }

    #[test]
    fn root_rejects_garbage_and_keeps_serving() {
        let cfg = BootstrapConfig { addr: None, timeout: Duration::from_secs(10) };
        let id = create_root(&cfg).unwrap();
        let root = id.root_addr().unwrap();
        // A port scanner / foreign client: unknown frame kind.
        let s = TcpStream::connect(root).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        super::super::net::send_all(s.as_raw_fd(), &[0xff; 24], deadline, None, false).unwrap();
        // A real rank still completes the rendezvous (nranks 1).
        let hello = Hello { flags: 0, tag: id.tag(), nranks: 1, rank: 0, hub: None };
        let j = join(root, &hello, Duration::from_secs(5), Instant::now()).unwrap();
        assert_eq!(j.nranks, 1);
    }
}
