//! File-descriptor passing between the ranks of one host (SCM_RIGHTS).
//!
//! Each rank listens on an abstract-namespace `SOCK_SEQPACKET` Unix socket
//! named `\0symmcomm-<tag:016x>-<rank>`; the per-communicator tag keeps
//! communicators (and leftover sockets of dead ones) apart, and the abstract
//! namespace leaves nothing behind in the file system. Abstract sockets are
//! per network namespace: ranks in different namespaces cannot pass fds.
//!
//! A send is one connection carrying one or more records (at most
//! [`MAX_FDS_PER_MSG`] fds each); SEQPACKET keeps each record and its fds
//! together. Records are {magic u64, src u32, nfds u32, msg_tag u64,
//! total u32, reserved u32}. Whole messages that arrive for a (src, tag)
//! nobody is waiting for yet are queued, fds and all, for a later `recv`.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use super::net::{poll_until, pollfd, secs, Interrupt, NetError};
use super::TARGET;
use crate::error::{bail, err, Error, Result};

/// The kernel's own limit (SCM_MAX_FD) is 253; 64 keeps control buffers small.
pub(crate) const MAX_FDS_PER_MSG: usize = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"SYMMFDS1");
const REC_LEN: usize = 32;
/// Longest a `recv_fds` holds the inbox while other threads may be waiting.
const RECV_SLICE: Duration = Duration::from_millis(20);

/// The abstract socket name of `rank` in communicator `tag` (without the leading NUL).
pub(crate) fn socket_name(tag: u64, rank: usize) -> String {
    format!("symmcomm-{tag:016x}-{rank}")
}

pub(crate) enum BindError {
    /// The name is taken: a live process already is this rank of this communicator.
    InUse,
    Other(Error),
}

pub(crate) struct FdChannel {
    tag: u64,
    rank: usize,
    nranks: usize,
    timeout: Duration,
    listener: OwnedFd,
    inbox: Mutex<Inbox>,
}

#[derive(Default)]
struct Inbox {
    /// Complete messages nobody asked for yet, by (src, msg_tag), oldest first.
    ready: HashMap<(usize, u64), VecDeque<Vec<OwnedFd>>>,
    /// Accepted connections whose message is not complete yet.
    partial: Vec<Incoming>,
}

struct Incoming {
    conn: OwnedFd,
    /// (src, msg_tag, total fds), from the first record.
    key: Option<(usize, u64, usize)>,
    fds: Vec<OwnedFd>,
}

enum Progress {
    Pending,
    Complete((usize, u64), Vec<OwnedFd>),
    /// The connection is unusable; the message key if it was known.
    Dead(Option<(usize, u64)>, String),
}

impl FdChannel {
    pub(crate) fn bind(tag: u64, rank: usize, nranks: usize, timeout: Duration) -> std::result::Result<Self, BindError> {
        let name = socket_name(tag, rank);
        let sys = |what: &str| BindError::Other(Error::last_os(format_args!("bootstrap: {what} fd-passing socket {name:?}")));
        let listener = seqpacket_socket().map_err(|e| BindError::Other(Error::from_io("bootstrap: socket(AF_UNIX)", e)))?;
        let (addr, len) = abstract_addr(&name);
        // SAFETY: addr is a valid sockaddr_un of `len` bytes.
        if unsafe { libc::bind(listener.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) } != 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EADDRINUSE) {
                return Err(BindError::InUse);
            }
            return Err(sys("bind"));
        }
        // SAFETY: plain syscall on our socket.
        if unsafe { libc::listen(listener.as_raw_fd(), libc::SOMAXCONN) } != 0 {
            return Err(sys("listen on"));
        }
        Ok(FdChannel { tag, rank, nranks, timeout, listener, inbox: Mutex::new(Inbox::default()) })
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Sends duplicates of `fds` to `peer`; the caller keeps its own.
    pub(crate) fn send(&self, peer: usize, msg_tag: u64, fds: &[RawFd], intr: &Interrupt) -> Result<()> {
        if peer >= self.nranks {
            bail!(symmInvalidArgument, "send_fds: peer rank {peer} is out of range for nranks {}", self.nranks);
        }
        if let Some(bad) = fds.iter().find(|&&fd| fd < 0) {
            bail!(symmInvalidArgument, "send_fds: {bad} is not a file descriptor");
        }
        let total = u32::try_from(fds.len()).map_err(|_| err!(symmInvalidArgument, "send_fds: too many fds"))?;
        let deadline = Instant::now() + self.timeout;
        let aborted = || err!(symmRemoteError, "bootstrap aborted during send_fds to rank {peer}");
        let conn = self.connect(peer, deadline, intr)?;
        // An empty message still needs one record to arrive.
        let chunks: Vec<&[RawFd]> = if fds.is_empty() { vec![&[]] } else { fds.chunks(MAX_FDS_PER_MSG).collect() };
        for chunk in chunks {
            let mut rec = [0u8; REC_LEN];
            rec[0..8].copy_from_slice(&MAGIC.to_le_bytes());
            rec[8..12].copy_from_slice(&(self.rank as u32).to_le_bytes());
            rec[12..16].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
            rec[16..24].copy_from_slice(&msg_tag.to_le_bytes());
            rec[24..28].copy_from_slice(&total.to_le_bytes());
            loop {
                match send_record(conn.as_raw_fd(), &rec, chunk) {
                    Ok(()) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                        match poll_until(&mut [pollfd(conn.as_raw_fd(), libc::POLLOUT)], deadline, Some(intr)) {
                            Ok(()) => {}
                            Err(NetError::Aborted) => return Err(aborted()),
                            Err(NetError::Timeout) => bail!(
                                symmTimeout,
                                "send_fds to rank {peer} timed out after {}: it is not reading its fd-passing socket (SYMM_BOOTSTRAP_TIMEOUT)",
                                secs(self.timeout)
                            ),
                            Err(e) => bail!(symmSystemError, "send_fds to rank {peer}: {e:?}"),
                        }
                    }
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) => {
                        bail!(symmRemoteError, "send_fds: rank {peer} closed its fd-passing socket")
                    }
                    Err(e) => return Err(Error::from_io(format_args!("send_fds to rank {peer}: sendmsg"), e)),
                }
            }
        }
        log::trace!(target: TARGET, "rank {} sent {} fd(s) to rank {peer} (tag {msg_tag})", self.rank, fds.len());
        Ok(())
    }

    /// Connects to `peer`'s socket, retrying while it does not exist yet or
    /// its backlog is full.
    fn connect(&self, peer: usize, deadline: Instant, intr: &Interrupt) -> Result<OwnedFd> {
        let name = socket_name(self.tag, peer);
        let (addr, len) = abstract_addr(&name);
        let mut backoff = Duration::from_millis(5);
        loop {
            let s = seqpacket_socket().map_err(|e| Error::from_io("send_fds: socket(AF_UNIX)", e))?;
            // SAFETY: addr is a valid sockaddr_un of `len` bytes.
            if unsafe { libc::connect(s.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) } == 0 {
                return Ok(s);
            }
            let e = io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOENT | libc::EAGAIN | libc::EINTR)) {
                return Err(Error::from_io(format_args!("send_fds: connect to rank {peer} ({name:?})"), e));
            }
            // Sleep, but wake up at once on abort.
            let wake = deadline.min(Instant::now() + backoff);
            match poll_until(&mut [], wake, Some(intr)) {
                Err(NetError::Aborted) => bail!(symmRemoteError, "bootstrap aborted during send_fds to rank {peer}"),
                _ if Instant::now() >= deadline => bail!(
                    symmTimeout,
                    "send_fds to rank {peer} timed out after {}: its fd-passing socket {name:?} is not accepting ({e}) (SYMM_BOOTSTRAP_TIMEOUT)",
                    secs(self.timeout)
                ),
                _ => backoff = (backoff * 2).min(Duration::from_millis(100)),
            }
        }
    }

    /// The fds of the next message from `src` tagged `msg_tag`.
    pub(crate) fn recv(&self, src: usize, msg_tag: u64, intr: &Interrupt) -> Result<Vec<OwnedFd>> {
        if src >= self.nranks {
            bail!(symmInvalidArgument, "recv_fds: source rank {src} is out of range for nranks {}", self.nranks);
        }
        let want = (src, msg_tag);
        let deadline = Instant::now() + self.timeout;
        let mut inbox = self.inbox.lock();
        loop {
            if let Some(fds) = inbox.take(want) {
                log::trace!(target: TARGET, "rank {} received {} fd(s) from rank {src} (tag {msg_tag})", self.rank, fds.len());
                return Ok(fds);
            }
            let mut fds: Vec<_> = std::iter::once(pollfd(self.listener.as_raw_fd(), libc::POLLIN))
                .chain(inbox.partial.iter().map(|p| pollfd(p.conn.as_raw_fd(), libc::POLLIN)))
                .collect();
            // In slices, handing the inbox to any other thread waiting in
            // recv_fds in between: its message may be queued already.
            let slice = deadline.min(Instant::now() + RECV_SLICE);
            match poll_until(&mut fds, slice, Some(intr)) {
                Ok(()) => {}
                Err(NetError::Aborted) => bail!(symmRemoteError, "bootstrap aborted during recv_fds from rank {src}"),
                Err(NetError::Timeout) if Instant::now() < deadline => {
                    MutexGuard::bump(&mut inbox);
                    continue;
                }
                Err(NetError::Timeout) => bail!(
                    symmTimeout,
                    "recv_fds: timed out after {} waiting for fds from rank {src} with tag {msg_tag} (SYMM_BOOTSTRAP_TIMEOUT)",
                    secs(self.timeout)
                ),
                Err(e) => bail!(symmSystemError, "recv_fds: poll failed: {e:?}"),
            }
            let polled = inbox.partial.len();
            if fds[0].revents != 0 {
                self.accept_all(&mut inbox)?;
            }
            // In accept order, so that two messages with the same (src, tag)
            // are queued in the order they were sent.
            let mut failed = None;
            let mut done = vec![false; polled];
            for i in 0..polled {
                if fds[i + 1].revents == 0 {
                    continue;
                }
                match inbox.partial[i].pump(self.nranks) {
                    Progress::Pending => {}
                    Progress::Complete(key, got) => {
                        done[i] = true;
                        inbox.ready.entry(key).or_default().push_back(got);
                    }
                    Progress::Dead(key, why) => {
                        done[i] = true;
                        if key == Some(want) {
                            failed = Some(why);
                        } else {
                            log::warn!(target: TARGET, "rank {}: dropping an fd-passing connection: {why}", self.rank);
                        }
                    }
                }
            }
            let mut i = 0;
            inbox.partial.retain(|_| {
                i += 1;
                !done.get(i - 1).copied().unwrap_or(false)
            });
            if let Some(why) = failed {
                bail!(symmSystemError, "recv_fds from rank {src} (tag {msg_tag}): {why}");
            }
        }
    }

    fn accept_all(&self, inbox: &mut Inbox) -> Result<()> {
        loop {
            // SAFETY: accepting on our own listener; no peer address wanted.
            let fd = unsafe {
                libc::accept4(
                    self.listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                )
            };
            if fd >= 0 {
                // SAFETY: fresh descriptor from accept4.
                let conn = unsafe { OwnedFd::from_raw_fd(fd) };
                inbox.partial.push(Incoming { conn, key: None, fds: Vec::new() });
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR | libc::ECONNABORTED) => {}
                Some(libc::EAGAIN) => return Ok(()),
                // EMFILE and friends: the caller cannot receive fds anyway.
                _ => return Err(Error::from_io("recv_fds: accept", e)),
            }
        }
    }
}

impl Inbox {
    fn take(&mut self, key: (usize, u64)) -> Option<Vec<OwnedFd>> {
        let q = self.ready.get_mut(&key)?;
        let got = q.pop_front();
        if q.is_empty() {
            self.ready.remove(&key);
        }
        got
    }
}

impl Incoming {
    /// Reads every record available now.
    fn pump(&mut self, nranks: usize) -> Progress {
        loop {
            let (rec, mut fds, truncated) = match recv_record(self.conn.as_raw_fd()) {
                Ok(Some(r)) => r,
                Ok(None) => {
                    return Progress::Dead(
                        self.key.map(|k| (k.0, k.1)),
                        format!("the sender closed the connection after {} fd(s)", self.fds.len()),
                    )
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Progress::Pending,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Progress::Dead(self.key.map(|k| (k.0, k.1)), format!("recvmsg: {e}")),
            };
            let u32_at = |i: usize| u32::from_le_bytes(rec[i..i + 4].try_into().unwrap()) as usize;
            let bad = |why: &str| Progress::Dead(None, format!("bad fd-passing record: {why}"));
            if rec.len() != REC_LEN || u64::from_le_bytes(rec[0..8].try_into().unwrap()) != MAGIC {
                return bad("wrong size or magic");
            }
            let key = (u32_at(8), u64::from_le_bytes(rec[16..24].try_into().unwrap()), u32_at(24));
            if truncated {
                // The kernel drops fds that do not fit (e.g. RLIMIT_NOFILE reached).
                return Progress::Dead(Some((key.0, key.1)), "fds were dropped by the kernel (out of file descriptors?)".into());
            }
            if key.0 >= nranks || fds.len() != u32_at(12) || *self.key.get_or_insert(key) != key {
                return bad("inconsistent header");
            }
            self.fds.append(&mut fds);
            if self.fds.len() > key.2 {
                return bad("more fds than announced");
            }
            if self.fds.len() == key.2 {
                return Progress::Complete((key.0, key.1), std::mem::take(&mut self.fds));
            }
        }
    }
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn abstract_addr(name: &str) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace.
    for (dst, &b) in a.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *dst = b as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len().min(a.sun_path.len() - 1);
    (a, len as libc::socklen_t)
}

/// Control buffer for up to [`MAX_FDS_PER_MSG`] fds, aligned for cmsghdr.
#[repr(C, align(8))]
struct CmsgBuf([u8; 512]);

fn cmsg_space(nfds: usize) -> usize {
    // SAFETY: pure arithmetic macro.
    unsafe { libc::CMSG_SPACE((nfds * size_of::<RawFd>()) as u32) as usize }
}

fn send_record(fd: RawFd, rec: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec { iov_base: rec.as_ptr() as *mut libc::c_void, iov_len: rec.len() };
    let mut cbuf = CmsgBuf([0; 512]);
    assert!(cmsg_space(fds.len()) <= cbuf.0.len());
    // SAFETY: msghdr is plain data; every pointer set below outlives sendmsg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = cmsg_space(fds.len()) as _;
        // SAFETY: the control buffer is large enough for one cmsg carrying fds.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), fds.len());
        }
    }
    // SAFETY: msg describes valid buffers.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != rec.len() {
        return Err(io::Error::other("short sendmsg on a SEQPACKET socket"));
    }
    Ok(())
}

/// One record as received: its bytes, the fds that came with it (owned at
/// once, so that they are closed on every error path), and whether anything
/// was cut off.
type Record = (Vec<u8>, Vec<OwnedFd>, bool);

/// The next record; `None` at end of stream.
fn recv_record(fd: RawFd) -> io::Result<Option<Record>> {
    let mut buf = [0u8; REC_LEN + 1]; // one extra byte: detect oversized records
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = CmsgBuf([0; 512]);
    // SAFETY: msghdr is plain data; every pointer set below outlives recvmsg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cmsg_space(MAX_FDS_PER_MSG) as _;
    // SAFETY: msg describes valid buffers.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into cbuf.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for k in 0..count {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(k));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    let truncated = msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0;
    Ok(Some((buf[..n as usize].to_vec(), fds, truncated)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::symmResult_t;

    fn memfd(pattern: u8) -> OwnedFd {
        // SAFETY: plain syscalls on a fresh memfd.
        unsafe {
            let fd = libc::memfd_create(c"symm-test".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0);
            assert_eq!(libc::write(fd, [pattern; 16].as_ptr().cast(), 16), 16);
            OwnedFd::from_raw_fd(fd)
        }
    }

    fn first_byte(fd: &OwnedFd) -> u8 {
        let mut b = [0u8; 1];
        // SAFETY: reads one byte into b.
        assert_eq!(unsafe { libc::pread(fd.as_raw_fd(), b.as_mut_ptr().cast(), 1, 0) }, 1);
        b[0]
    }

    fn channel(tag: u64, rank: usize, nranks: usize) -> FdChannel {
        FdChannel::bind(tag, rank, nranks, Duration::from_secs(10)).unwrap_or_else(|_| panic!("bind"))
    }

    #[test]
    fn names_and_in_use() {
        assert_eq!(socket_name(0xab, 3), "symmcomm-00000000000000ab-3");
        let tag = super::super::unique_id::random_u64().unwrap();
        let _a = channel(tag, 0, 1);
        assert!(matches!(FdChannel::bind(tag, 0, 1, Duration::from_secs(1)), Err(BindError::InUse)));
        // Another tag, same rank: no collision.
        let _b = channel(tag ^ 1, 0, 1);
    }

    #[test]
    fn to_self_queued_split_and_empty() {
        let intr = Interrupt::new().unwrap();
        let tag = super::super::unique_id::random_u64().unwrap();
        let ch = channel(tag, 0, 1);
        let many: Vec<OwnedFd> = (0..150).map(|i| memfd(i as u8)).collect();
        let raw: Vec<RawFd> = many.iter().map(|f| f.as_raw_fd()).collect();
        ch.send(0, 1, &raw[..1], &intr).unwrap();
        ch.send(0, 2, &raw, &intr).unwrap();
        ch.send(0, 3, &[], &intr).unwrap();
        ch.send(0, 1, &raw[5..7], &intr).unwrap();
        // Out of order: tag 3 first, then 2, then the two tag-1 messages in order.
        assert!(ch.recv(0, 3, &intr).unwrap().is_empty());
        let got = ch.recv(0, 2, &intr).unwrap();
        assert_eq!(got.len(), 150);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(first_byte(f), i as u8);
        }
        assert_eq!(first_byte(&ch.recv(0, 1, &intr).unwrap()[0]), 0);
        let two = ch.recv(0, 1, &intr).unwrap();
        assert_eq!((first_byte(&two[0]), first_byte(&two[1])), (5, 6));
    }

    #[test]
    fn concurrent_receivers_do_not_block_each_other() {
        let intr = Interrupt::new().unwrap();
        let tag = super::super::unique_id::random_u64().unwrap();
        let ch = channel(tag, 0, 1);
        std::thread::scope(|s| {
            let a = s.spawn(|| ch.recv(0, 1, &intr).unwrap().len());
            std::thread::sleep(Duration::from_millis(100)); // A now waits, holding the inbox
            let b = s.spawn(|| {
                let t0 = Instant::now();
                let n = ch.recv(0, 2, &intr).unwrap().len();
                (n, t0.elapsed())
            });
            std::thread::sleep(Duration::from_millis(100));
            ch.send(0, 2, &[memfd(2).as_raw_fd()], &intr).unwrap();
            let (n, took) = b.join().unwrap();
            assert_eq!(n, 1);
            assert!(took < Duration::from_secs(5), "{took:?}");
            ch.send(0, 1, &[memfd(1).as_raw_fd(); 2], &intr).unwrap();
            assert_eq!(a.join().unwrap(), 2);
        });
    }

    #[test]
    fn bad_arguments_timeouts_and_abort() {
        let intr = Interrupt::new().unwrap();
        let tag = super::super::unique_id::random_u64().unwrap();
        let ch = FdChannel::bind(tag, 0, 2, Duration::from_millis(200)).unwrap_or_else(|_| panic!("bind"));
        assert_eq!(ch.send(2, 0, &[], &intr).unwrap_err().code, symmResult_t::symmInvalidArgument);
        assert_eq!(ch.send(0, 0, &[-1], &intr).unwrap_err().code, symmResult_t::symmInvalidArgument);
        assert_eq!(ch.recv(5, 0, &intr).unwrap_err().code, symmResult_t::symmInvalidArgument);
        // Rank 1 never bound its socket.
        let e = ch.send(1, 0, &[], &intr).unwrap_err();
        assert_eq!(e.code, symmResult_t::symmTimeout, "{}", e.msg);
        let e = ch.recv(1, 0, &intr).unwrap_err();
        assert_eq!(e.code, symmResult_t::symmTimeout, "{}", e.msg);
        intr.fire();
        let e = ch.recv(1, 0, &intr).unwrap_err();
        assert_eq!(e.code, symmResult_t::symmRemoteError);
        assert!(e.msg.contains("aborted"));
    }
}
