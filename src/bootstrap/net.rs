//! TCP plumbing shared by the rendezvous and the star: address parsing,
//! bounded waits, and the frame format.
//!
//! Every wait here has a deadline and, where a [`Interrupt`] is given, also
//! ends when `abort` fires: a bootstrap must never hang a process. Sockets
//! stay in blocking mode; every send/recv passes `MSG_DONTWAIT` and waits with
//! `poll`, and every send passes `MSG_NOSIGNAL` (a library must not raise
//! SIGPIPE in its host process).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::TARGET;
use crate::error::{bail, symmResult_t, Error, Result};

/// Where the root listens when `SYMM_BOOTSTRAP_ADDR` is unset: loopback, any free port.
pub(crate) const DEFAULT_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// Parses `ip`, `ip:port`, `[v6]` or `[v6]:port`; a missing port means "any".
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr> {
    let s = s.trim();
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok(sa);
    }
    let bare = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(s);
    match bare.parse::<IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, 0)),
        Err(_) => bail!(
            symmInvalidArgument,
            "bootstrap address {s:?} (SYMM_BOOTSTRAP_ADDR) is not of the form ip, ip:port, [ipv6] or [ipv6]:port"
        ),
    }
}

/// Encoded size of an address: family u16 (4/6), port u16, 16 IP bytes.
pub(crate) const SOCKADDR_LEN: usize = 20;

pub(crate) fn encode_sockaddr(a: &SocketAddr) -> [u8; SOCKADDR_LEN] {
    let mut b = [0u8; SOCKADDR_LEN];
    let family: u16 = if a.is_ipv4() { 4 } else { 6 };
    b[0..2].copy_from_slice(&family.to_le_bytes());
    b[2..4].copy_from_slice(&a.port().to_le_bytes());
    match a.ip() {
        IpAddr::V4(ip) => b[4..8].copy_from_slice(&ip.octets()),
        IpAddr::V6(ip) => b[4..20].copy_from_slice(&ip.octets()),
    }
    b
}

/// `None` for an unknown family or an IPv4 address with junk after its 4 bytes.
pub(crate) fn decode_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let b: &[u8; SOCKADDR_LEN] = b.try_into().ok()?;
    let port = u16::from_le_bytes([b[2], b[3]]);
    let ip = match u16::from_le_bytes([b[0], b[1]]) {
        4 if b[8..].iter().all(|&x| x == 0) => IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])),
        6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[4..20]).unwrap())),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Why a network step did not complete. Callers turn it into an [`Error`]
/// with the context only they know (which rank, which operation).
#[derive(Debug)]
pub(crate) enum NetError {
    Timeout,
    /// `abort` fired.
    Aborted,
    /// The peer closed or reset the connection.
    Closed,
    /// Data arrived while we were sending (see [`send_all`]'s `watch_incoming`).
    Incoming,
    /// The peer sent something that is not our protocol.
    Protocol(String),
    Io(io::Error),
}

pub(crate) type NetResult<T> = std::result::Result<T, NetError>;

/// Wakes every wait of one bootstrap at once (for `abort`): a flag plus an
/// eventfd that is part of every poll set and never drained once fired.
pub(crate) struct Interrupt {
    fired: AtomicBool,
    efd: OwnedFd,
}

impl Interrupt {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::last_os("bootstrap: eventfd"));
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(Interrupt { fired: AtomicBool::new(false), efd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    pub(crate) fn fire(&self) {
        self.fired.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

pub(crate) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}

/// Polls `fds` until at least one has events, the deadline passes or `intr`
/// fires. Entries with `fd < 0` are ignored (poll(2) semantics).
pub(crate) fn poll_until(fds: &mut [libc::pollfd], deadline: Instant, intr: Option<&Interrupt>) -> NetResult<()> {
    let mut all = Vec::with_capacity(fds.len() + 1);
    loop {
        if intr.is_some_and(Interrupt::fired) {
            return Err(NetError::Aborted);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(NetError::Timeout);
        }
        all.clear();
        all.extend(fds.iter().map(|p| pollfd(p.fd, p.events)));
        if let Some(i) = intr {
            all.push(pollfd(i.efd.as_raw_fd(), libc::POLLIN));
        }
        // SAFETY: `all` is a valid array of `all.len()` pollfds.
        let rc = unsafe { libc::poll(all.as_mut_ptr(), all.len() as libc::nfds_t, ceil_ms(deadline - now)) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(NetError::Io(e));
        }
        if rc == 0 {
            continue; // the top of the loop decides whether the deadline passed
        }
        if intr.is_some() && all.pop().is_some_and(|p| p.revents != 0) {
            return Err(NetError::Aborted);
        }
        for (dst, src) in fds.iter_mut().zip(&all) {
            dst.revents = src.revents;
        }
        if fds.iter().any(|p| p.revents != 0) {
            return Ok(());
        }
    }
}

/// Rounded up so that a wait never returns early and spins.
fn ceil_ms(d: Duration) -> libc::c_int {
    d.as_nanos().div_ceil(1_000_000).min(libc::c_int::MAX as u128) as libc::c_int
}

/// Sends all of `buf`. With `watch_incoming`, stops with [`NetError::Incoming`]
/// as soon as the peer has something for us while we are blocked: the star
/// hub may answer a half-sent blob with an error, and we must not wait for it
/// to drain a blob it will never read.
pub(crate) fn send_all(
    fd: RawFd,
    mut buf: &[u8],
    deadline: Instant,
    intr: Option<&Interrupt>,
    watch_incoming: bool,
) -> NetResult<()> {
    while !buf.is_empty() {
        if intr.is_some_and(Interrupt::fired) {
            return Err(NetError::Aborted);
        }
        // SAFETY: buf is valid for buf.len() readable bytes.
        let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            buf = &buf[n as usize..];
            continue;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => {
                let events = libc::POLLOUT | if watch_incoming { libc::POLLIN } else { 0 };
                let mut p = [pollfd(fd, events)];
                poll_until(&mut p, deadline, intr)?;
                if watch_incoming && p[0].revents & libc::POLLIN != 0 {
                    return Err(NetError::Incoming);
                }
            }
            Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => return Err(NetError::Closed),
            _ => return Err(NetError::Io(e)),
        }
    }
    Ok(())
}

/// Connects to `addr`, retrying while nobody listens yet (the peer may not
/// have reached its `listen` call), until `deadline`.
pub(crate) fn connect_retry(addr: SocketAddr, deadline: Instant) -> NetResult<TcpStream> {
    let mut backoff = Duration::from_millis(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(NetError::Timeout);
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                s.set_nodelay(true).map_err(NetError::Io)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => return Err(NetError::Timeout),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::EINTR | libc::EAGAIN)) => {
                log::trace!(target: TARGET, "connect to {addr}: {e}; retrying");
                std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
            Err(e) => return Err(NetError::Io(e)),
        }
    }
}

// ---------------------------------------------------------------- frames

/// Frame header: kind u32, seq u64, op u32, len u64 (little endian, packed).
pub(crate) const HDR_LEN: usize = 24;

/// Frame kinds. DATA/ERROR/ABORT are star traffic; the rest are used only
/// while a communicator is being set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Kind {
    Data = 1,
    Error = 2,
    Abort = 3,
    /// rank -> root: who I am.
    Hello = 4,
    /// root -> rank: everyone is here.
    Ok = 5,
    /// spoke -> hub: who I am.
    Join = 6,
    /// hub -> spoke: the star is complete.
    Ready = 7,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        use Kind::*;
        [Data, Error, Abort, Hello, Ok, Join, Ready].into_iter().find(|k| *k as u32 == v)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    /// Collective sequence number (0 outside collectives).
    pub seq: u64,
    /// Collective operation code (0 outside collectives).
    pub op: u32,
    pub len: u64,
}

impl Header {
    pub(crate) fn new(kind: Kind, seq: u64, op: u32, len: usize) -> Self {
        Header { kind, seq, op, len: len as u64 }
    }

    pub(crate) fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..4].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[4..12].copy_from_slice(&self.seq.to_le_bytes());
        b[12..16].copy_from_slice(&self.op.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8; HDR_LEN]) -> std::result::Result<Header, String> {
        let raw = u32::from_le_bytes(b[0..4].try_into().unwrap());
        let kind = Kind::from_u32(raw).ok_or_else(|| format!("unknown frame kind {raw:#x}"))?;
        Ok(Header {
            kind,
            seq: u64::from_le_bytes(b[4..12].try_into().unwrap()),
            op: u32::from_le_bytes(b[12..16].try_into().unwrap()),
            len: u64::from_le_bytes(b[16..24].try_into().unwrap()),
        })
    }
}

/// Small frames go out in one send (one segment, no Nagle interplay); big
/// ones as header + payload to avoid copying the payload.
pub(crate) fn send_frame(
    fd: RawFd,
    h: Header,
    payload: &[u8],
    deadline: Instant,
    intr: Option<&Interrupt>,
    watch_incoming: bool,
) -> NetResult<()> {
    debug_assert_eq!(h.len, payload.len() as u64);
    log::trace!(target: TARGET, "fd {fd}: send {:?} seq={} op={:#x} len={}", h.kind, h.seq, h.op, h.len);
    if payload.len() <= 64 * 1024 {
        let mut buf = Vec::with_capacity(HDR_LEN + payload.len());
        buf.extend_from_slice(&h.encode());
        buf.extend_from_slice(payload);
        send_all(fd, &buf, deadline, intr, watch_incoming)
    } else {
        send_all(fd, &h.encode(), deadline, intr, watch_incoming)?;
        send_all(fd, payload, deadline, intr, watch_incoming)
    }
}

/// Reassembles one frame at a time from a socket without blocking, so that
/// one thread can read from many peers at once (root, hub).
pub(crate) struct FrameReader {
    hdr: [u8; HDR_LEN],
    hdr_got: usize,
    header: Option<Header>,
    payload: Vec<u8>,
    got: usize,
    max_len: u64,
}

impl FrameReader {
    pub(crate) fn new(max_len: u64) -> Self {
        FrameReader { hdr: [0; HDR_LEN], hdr_got: 0, header: None, payload: Vec::new(), got: 0, max_len }
    }

    /// Reads what is available; `Some` once a whole frame is in. Never reads
    /// past the end of the current frame.
    pub(crate) fn pump(&mut self, fd: RawFd) -> NetResult<Option<(Header, Vec<u8>)>> {
        loop {
            let Some(h) = self.header else {
                let n = match recv_some(fd, &mut self.hdr[self.hdr_got..])? {
                    Some(n) => n,
                    None => return Ok(None),
                };
                self.hdr_got += n;
                if self.hdr_got == HDR_LEN {
                    let h = Header::decode(&self.hdr).map_err(NetError::Protocol)?;
                    if h.len > self.max_len {
                        return Err(NetError::Protocol(format!(
                            "{:?} frame of {} bytes exceeds the limit of {}",
                            h.kind, h.len, self.max_len
                        )));
                    }
                    self.header = Some(h);
                }
                continue;
            };
            let len = h.len as usize;
            if self.got == len {
                log::trace!(target: TARGET, "fd {fd}: recv {:?} seq={} op={:#x} len={}", h.kind, h.seq, h.op, h.len);
                let payload = std::mem::take(&mut self.payload);
                *self = FrameReader::new(self.max_len);
                return Ok(Some((h, payload)));
            }
            // Grow with the data actually received, not with the length a
            // (possibly broken) peer claims, so a bogus length cannot make
            // us allocate terabytes.
            if self.got == self.payload.len() {
                let grow = self.payload.len().clamp(64 * 1024, 256 << 20);
                self.payload.resize(len.min(self.got + grow), 0);
            }
            match recv_some(fd, &mut self.payload[self.got..])? {
                Some(n) => self.got += n,
                None => return Ok(None),
            }
        }
    }
}

/// One non-blocking recv: `None` when nothing is available right now.
fn recv_some(fd: RawFd, buf: &mut [u8]) -> NetResult<Option<usize>> {
    loop {
        // SAFETY: buf is valid for buf.len() writable bytes.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n > 0 {
            return Ok(Some(n as usize));
        }
        if n == 0 {
            return Err(NetError::Closed);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(None),
            Some(libc::ECONNRESET | libc::ENOTCONN | libc::EPIPE) => return Err(NetError::Closed),
            _ => return Err(NetError::Io(e)),
        }
    }
}

/// Blocking receive of one frame, bounded by `deadline`.
pub(crate) fn recv_frame(
    fd: RawFd,
    max_len: u64,
    deadline: Instant,
    intr: Option<&Interrupt>,
) -> NetResult<(Header, Vec<u8>)> {
    let mut r = FrameReader::new(max_len);
    loop {
        if let Some(f) = r.pump(fd)? {
            return Ok(f);
        }
        poll_until(&mut [pollfd(fd, libc::POLLIN)], deadline, intr)?;
    }
}

/// ERROR payload: code u32, then the UTF-8 message.
pub(crate) fn encode_error(e: &Error) -> Vec<u8> {
    let mut b = (e.code as i32 as u32).to_le_bytes().to_vec();
    b.extend_from_slice(e.msg.as_bytes());
    b
}

pub(crate) fn decode_error(b: &[u8]) -> Error {
    let code = b
        .get(..4)
        .and_then(|c| symmResult_t::from_raw(u32::from_le_bytes(c.try_into().unwrap()) as i32))
        .filter(|c| *c != symmResult_t::symmSuccess)
        .unwrap_or(symmResult_t::symmRemoteError);
    Error::new(code, String::from_utf8_lossy(b.get(4..).unwrap_or_default()).into_owned())
}

/// "1.5 s", for messages.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    #[test]
    fn parse_addresses() {
        let p = |s| parse_addr(s).unwrap();
        assert_eq!(p("127.0.0.1"), "127.0.0.1:0".parse().unwrap());
        assert_eq!(p(" 10.1.2.3:5000 "), "10.1.2.3:5000".parse().unwrap());
        assert_eq!(p("[::1]:0"), "[::1]:0".parse().unwrap());
        assert_eq!(p("[::1]:7"), "[::1]:7".parse().unwrap());
        assert_eq!(p("[::1]"), "[::1]:0".parse().unwrap());
        assert_eq!(p("::1"), "[::1]:0".parse().unwrap());
        assert_eq!(p("0.0.0.0"), "0.0.0.0:0".parse().unwrap());
        for bad in ["", "localhost:5", "1.2.3", "1.2.3.4:99999", "[::1", "::1:5000x", "1.2.3.4:"] {
            let e = parse_addr(bad).unwrap_err();
            assert_eq!(e.code, symmResult_t::symmInvalidArgument, "{bad}");
            assert!(e.msg.contains("SYMM_BOOTSTRAP_ADDR"));
        }
    }

    #[test]
    fn sockaddr_round_trip() {
        for s in ["127.0.0.1:1", "10.0.0.255:65535", "[::1]:80", "[fe80::1:2:3:4]:9"] {
            let a: SocketAddr = s.parse().unwrap();
            assert_eq!(decode_sockaddr(&encode_sockaddr(&a)), Some(a));
        }
        let mut b = encode_sockaddr(&"1.2.3.4:5".parse().unwrap());
        b[10] = 1;
        assert_eq!(decode_sockaddr(&b), None);
        b[10] = 0;
        b[0] = 9;
        assert_eq!(decode_sockaddr(&b), None);
        assert_eq!(decode_sockaddr(&b[..5]), None);
    }

    #[test]
    fn header_round_trip_and_layout() {
        let h = Header { kind: Kind::Error, seq: 0x1122_3344_5566_7788, op: 0x0302, len: 1 << 40 };
        let b = h.encode();
        assert_eq!(&b[0..4], &2u32.to_le_bytes());
        assert_eq!(&b[4..12], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[12..16], &0x0302u32.to_le_bytes());
        assert_eq!(&b[16..24], &(1u64 << 40).to_le_bytes());
        assert_eq!(Header::decode(&b), Ok(h));
        let mut bad = b;
        bad[0] = 99;
        assert!(Header::decode(&bad).unwrap_err().contains("unknown frame kind"));
    }

    #[test]
    fn error_payload_round_trip() {
        let e = Error::new(symmResult_t::symmInvalidUsage, "nranks mismatch: ü");
        assert_eq!(decode_error(&encode_error(&e)), e);
        assert_eq!(decode_error(&[]).code, symmResult_t::symmRemoteError);
        assert_eq!(decode_error(&0u32.to_le_bytes()).code, symmResult_t::symmRemoteError);
        assert_eq!(decode_error(&77u32.to_le_bytes()).code, symmResult_t::symmRemoteError);
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn frames_over_a_socket_byte_by_byte_and_large() {
        let (a, mut b) = pair();
        let deadline = Instant::now() + Duration::from_secs(20);
        // Byte-at-a-time delivery exercises partial header and payload reads.
        let h = Header::new(Kind::Data, 3, 1, 5);
        let mut wire = h.encode().to_vec();
        wire.extend_from_slice(b"hello");
        let t = std::thread::spawn(move || {
            for x in wire {
                b.write_all(&[x]).unwrap();
                b.flush().unwrap();
            }
            b
        });
        let (got, payload) = recv_frame(a.as_raw_fd(), 1 << 20, deadline, None).unwrap();
        assert_eq!((got, payload.as_slice()), (h, &b"hello"[..]));
        let b = t.join().unwrap();

        // 32 MiB in one frame, sent while the other side reads.
        let big: Vec<u8> = (0..32u32 << 20).map(|i| (i * 7 + 1) as u8).collect();
        let expect = big.clone();
        let bfd = b.as_raw_fd();
        let t = std::thread::spawn(move || {
            send_frame(bfd, Header::new(Kind::Data, 4, 2, big.len()), &big, deadline, None, false).unwrap();
            b
        });
        let (h, payload) = recv_frame(a.as_raw_fd(), 1 << 30, deadline, None).unwrap();
        assert_eq!(h.len, 32 << 20);
        assert!(payload == expect);
        drop(t.join().unwrap());
        // The peer closed: EOF reads as Closed, sends as Closed.
        assert!(matches!(recv_frame(a.as_raw_fd(), 1, deadline, None), Err(NetError::Closed)));
    }

    #[test]
    fn limits_timeouts_and_interrupts() {
        let (a, b) = pair();
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(matches!(recv_frame(a.as_raw_fd(), 8, soon, None), Err(NetError::Timeout)));
        let h = Header::new(Kind::Data, 0, 0, 100);
        send_all(b.as_raw_fd(), &h.encode(), soon + Duration::from_secs(5), None, false).unwrap();
        let far = Instant::now() + Duration::from_secs(5);
        assert!(matches!(recv_frame(a.as_raw_fd(), 8, far, None), Err(NetError::Protocol(_))));

        let intr = Interrupt::new().unwrap();
        intr.fire();
        let t0 = Instant::now();
        assert!(matches!(recv_frame(a.as_raw_fd(), 8, far, Some(&intr)), Err(NetError::Aborted)));
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn connect_retry_gives_up_at_the_deadline() {
        // Bind then drop to get a port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let t0 = Instant::now();
        let r = connect_retry(SocketAddr::from(([127, 0, 0, 1], port)), t0 + Duration::from_millis(300));
        assert!(matches!(r, Err(NetError::Timeout)));
        assert!(t0.elapsed() >= Duration::from_millis(300));
    }
}
