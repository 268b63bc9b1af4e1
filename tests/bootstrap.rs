//! Integration tests of `symmcomm::bootstrap`: ranks as threads of this
//! process and as child processes.
//!
//! Child processes re-run this test binary on `child_main`, which does
//! nothing unless `BSTEST_ROLE` is set. The unique id reaches them
//! hex-encoded in `BSTEST_ID`. Timing asserts are upper bounds only, with
//! generous slack for a loaded 2-core machine.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use symmcomm::bootstrap::{create_root, Bootstrap, BootstrapConfig, UniqueId};
use symmcomm::error::symmResult_t;

const ROLE: &str = "BSTEST_ROLE";
const ID: &str = "BSTEST_ID";
const NRANKS: &str = "BSTEST_NRANKS";
const RANK: &str = "BSTEST_RANK";
const ARG: &str = "BSTEST_ARG";

fn cfg(timeout_s: f64) -> BootstrapConfig {
    BootstrapConfig { addr: None, timeout: Duration::from_secs_f64(timeout_s) }
}

fn connect(id: &UniqueId, nranks: usize, rank: usize, c: &BootstrapConfig) -> Bootstrap {
    Bootstrap::connect(id, nranks as i32, rank as i32, c).unwrap_or_else(|e| panic!("rank {rank}: {e}"))
}

/// Runs `f(rank, connect result, seconds connect took)` for each of
/// `ranks` (a list of (nranks, rank) pairs as passed to connect) on its own thread.
fn run_threads<T: Send>(
    id: &UniqueId,
    ranks: &[(i32, i32)],
    c: &BootstrapConfig,
    f: impl Fn(i32, symmcomm::Result<Bootstrap>, Duration) -> T + Sync,
) -> Vec<T> {
    thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .map(|&(n, r)| {
                let f = &f;
                s.spawn(move || {
                    let t0 = Instant::now();
                    let b = Bootstrap::connect(id, n, r, c);
                    f(r, b, t0.elapsed())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank `r`'s blob number `k`: size and contents depend on both.
fn blob(r: usize, k: usize) -> Vec<u8> {
    let len = (r * 37 + k * 11) % 97 + if r == 1 { 0 } else { 3 };
    let len = if r == 1 && k == 0 { 0 } else { len }; // one empty blob
    (0..len).map(|i| (i * 13 + r * 7 + k) as u8).collect()
}

/// allgather, broadcast from every root, barriers: checked on every rank.
fn check_collectives(b: &Bootstrap) {
    let (r, n) = (b.rank(), b.nranks());
    for k in 0..3 {
        let all = b.allgather(&blob(r, k)).unwrap();
        assert_eq!(all.len(), n);
        for (q, got) in all.iter().enumerate() {
            assert_eq!(got, &blob(q, k), "rank {r}: allgather #{k}, blob of rank {q}");
        }
    }
    for root in 0..n {
        // Non-roots pass different data: it must be ignored.
        let data = if r == root { blob(root, 100) } else { vec![0xee; 5] };
        assert_eq!(b.broadcast(root, &data).unwrap(), blob(root, 100), "rank {r}: broadcast from {root}");
    }
    b.barrier().unwrap();
    b.barrier().unwrap();
    assert_eq!(b.allgather(&[r as u8]).unwrap(), (0..n).map(|q| vec![q as u8]).collect::<Vec<_>>());
}

fn memfd(pattern: u8, len: usize) -> OwnedFd {
    // SAFETY: plain syscalls on a fresh memfd.
    unsafe {
        let fd = libc::memfd_create(c"bstest".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0, "memfd_create");
        let data = vec![pattern; len];
        assert_eq!(libc::write(fd, data.as_ptr().cast(), len), len as isize);
        OwnedFd::from_raw_fd(fd)
    }
}

/// Reads the whole file back through a received fd and checks its pattern.
fn assert_pattern(fd: &OwnedFd, pattern: u8, len: usize) {
    let mut buf = vec![0u8; len + 1];
    // SAFETY: reads at most buf.len() bytes into buf.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    assert_eq!(n, len as isize);
    assert!(buf[..len].iter().all(|&x| x == pattern), "pattern {pattern:#x}");
}

/// Every rank sends a memfd to the next and checks the one from the previous.
fn fd_ring(b: &Bootstrap) {
    let (r, n) = (b.rank(), b.nranks());
    let mine = memfd(r as u8 + 1, 8192);
    b.send_fds((r + 1) % n, 42, &[mine.as_raw_fd()]).unwrap();
    drop(mine); // the receiver's copy must outlive ours
    let got = b.recv_fds((r + n - 1) % n, 42).unwrap();
    assert_eq!(got.len(), 1);
    assert_pattern(&got[0], ((r + n - 1) % n) as u8 + 1, 8192);
}

fn assert_err(r: &symmcomm::Result<impl Sized>, code: symmResult_t, needle: &str) {
    match r {
        Ok(_) => panic!("expected {code:?} containing {needle:?}, got Ok"),
        Err(e) => {
            assert_eq!(e.code, code, "{}", e.msg);
            assert!(e.msg.contains(needle), "{:?} does not contain {needle:?}", e.msg);
        }
    }
}

// ------------------------------------------------------------ threads

#[test]
fn threads_1_to_8_ranks() {
    for n in 1..=8usize {
        let c = cfg(30.0);
        let id = create_root(&c).unwrap();
        let ranks: Vec<_> = (0..n as i32).map(|r| (n as i32, r)).collect();
        run_threads(&id, &ranks, &c, |r, b, _| {
            let b = b.unwrap_or_else(|e| panic!("n={n} rank {r}: {e}"));
            assert_eq!((b.rank(), b.nranks(), b.tag()), (r as usize, n, id.tag()));
            check_collectives(&b);
        });
    }
}

#[test]
fn threads_64mib_blobs() {
    let c = cfg(60.0);
    let id = create_root(&c).unwrap();
    // Built once: generating 64 MiB is slow in debug builds.
    let big = |seed: u64| -> Vec<u8> {
        let mut v = vec![0u8; 64 << 20];
        for (i, w) in v.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(seed).to_le_bytes());
        }
        v
    };
    let (big7, big9) = (big(7), big(9));
    let ranks = [(3, 0), (3, 1), (3, 2)];
    run_threads(&id, &ranks, &c, |r, b, _| {
        let b = b.unwrap();
        let mine: &[u8] = if r == 2 { &big7 } else { &[r as u8; 10] };
        let all = b.allgather(mine).unwrap();
        assert_eq!(all[0], vec![0u8; 10]);
        assert_eq!(all[1], vec![1u8; 10]);
        assert!(all[2] == big7, "64 MiB allgather blob differs");
        drop(all);
        let data: &[u8] = if r == 1 { &big9 } else { &[] };
        let got = b.broadcast(1, data).unwrap();
        assert!(got == big9, "64 MiB broadcast differs");
    });
}

#[test]
fn ipv6_loopback_root() {
    let c = BootstrapConfig { addr: Some("[::1]:0".into()), timeout: Duration::from_secs(30) };
    let id = match create_root(&c) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("skipping: no IPv6 loopback here ({e})");
            return;
        }
    };
    assert_eq!(u16::from_le_bytes([id.as_bytes()[12], id.as_bytes()[13]]), 6);
    run_threads(&id, &[(2, 0), (2, 1)], &c, |_, b, _| check_collectives(&b.unwrap()));
}

#[test]
fn one_rank_never_arrives() {
    let c = cfg(2.0);
    let id = create_root(&c).unwrap();
    let res = run_threads(&id, &[(3, 0), (3, 1)], &c, |_, b, took| {
        assert_err(&b, symmResult_t::symmTimeout, "waiting for all 3 ranks to join (SYMM_BOOTSTRAP_TIMEOUT)");
        took
    });
    for took in res {
        assert!(took < Duration::from_millis(3500), "timed out only after {took:?}");
        assert!(took >= Duration::from_millis(1500), "gave up early, after {took:?}");
    }
}

#[test]
fn late_arrival_within_timeout_succeeds() {
    let c = cfg(6.0);
    let id = create_root(&c).unwrap();
    let ranks = [(3, 0), (3, 1), (3, 2)];
    thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .map(|&(n, r)| {
                let (id, c) = (&id, &c);
                s.spawn(move || {
                    if r == 2 {
                        thread::sleep(Duration::from_secs(3));
                    }
                    let b = Bootstrap::connect(id, n, r, c).unwrap();
                    check_collectives(&b);
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
    });
}

#[test]
fn nranks_mismatch_fails_everywhere() {
    let c = cfg(20.0);
    let id = create_root(&c).unwrap();
    let res = run_threads(&id, &[(3, 0), (4, 1)], &c, |_, b, took| {
        assert_err(&b, symmResult_t::symmInvalidUsage, "nranks mismatch: rank ");
        took
    });
    assert!(res.iter().all(|t| *t < Duration::from_secs(10)), "{res:?}");
}

#[test]
fn duplicate_rank_fails_everywhere() {
    let c = cfg(20.0);
    let id = create_root(&c).unwrap();
    let res = run_threads(&id, &[(3, 0), (3, 1), (3, 1)], &c, |_, b, took| {
        assert_err(&b, symmResult_t::symmInvalidUsage, "rank 1 joined twice (duplicate rank)");
        took
    });
    assert!(res.iter().all(|t| *t < Duration::from_secs(10)), "{res:?}");
}

#[test]
fn out_of_range_rank_fails_everywhere() {
    let c = cfg(20.0);
    for bad in [3, -1] {
        let id = create_root(&c).unwrap();
        if bad < 0 {
            // The bad rank first: the ranks that come later are told too.
            assert_err(&Bootstrap::connect(&id, 3, bad, &c), symmResult_t::symmInvalidArgument, "out of range");
        }
        let mut ranks = vec![(3, 0), (3, 1)];
        if bad >= 0 {
            ranks.push((3, bad));
        }
        let res = run_threads(&id, &ranks, &c, |r, b, took| {
            let needle = format!("rank {bad} is out of range for nranks 3");
            assert_err(&b, symmResult_t::symmInvalidArgument, &needle);
            if r != bad {
                assert_err(&b, symmResult_t::symmInvalidArgument, "(reported by the bootstrap root)");
            }
            took
        });
        assert!(res.iter().all(|t| *t < Duration::from_secs(10)), "{res:?}");
    }
}

#[test]
fn corrupted_or_foreign_ids_are_rejected() {
    let c = cfg(10.0);
    let id = create_root(&c).unwrap();
    let t0 = Instant::now();
    assert_err(&Bootstrap::connect(&UniqueId([0; 128]), 2, 0, &c), symmResult_t::symmInvalidArgument, "corrupted or uninitialised unique id");
    let random = UniqueId(std::array::from_fn(|i| (i as u8).wrapping_mul(151).wrapping_add(17)));
    assert_err(&Bootstrap::connect(&random, 2, 0, &c), symmResult_t::symmInvalidArgument, "corrupted");
    for bit in [0, 100, 300, 1023] {
        let mut b = *id.as_bytes();
        b[bit / 8] ^= 1 << (bit % 8);
        assert_err(&Bootstrap::connect(&UniqueId(b), 2, 0, &c), symmResult_t::symmInvalidArgument, "corrupted");
    }
    assert!(t0.elapsed() < Duration::from_secs(2));

    // Well-formed id for the same root but another communicator tag.
    let mut b = *id.as_bytes();
    b[32] ^= 0xff;
    let sum = fnv1a64(&b[..120]);
    b[120..].copy_from_slice(&sum.to_le_bytes());
    let foreign = UniqueId(b);
    foreign.validate().unwrap();
    assert_err(&Bootstrap::connect(&foreign, 1, 0, &c), symmResult_t::symmInvalidArgument, "unique id does not match this root");
    // The root still serves the right id.
    let ok = connect(&id, 1, 0, &c);
    ok.barrier().unwrap();
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

#[test]
fn fd_passing_between_threads_with_queuing() {
    let c = cfg(20.0);
    let id = create_root(&c).unwrap();
    run_threads(&id, &[(2, 0), (2, 1)], &c, |r, b, _| {
        let b = b.unwrap();
        if r == 0 {
            let f1 = memfd(0x11, 100);
            let f2: Vec<OwnedFd> = (0..3).map(|i| memfd(0x20 + i, 200)).collect();
            let f3 = memfd(0x33, 300);
            let many: Vec<OwnedFd> = (0..100).map(|i| memfd(i, 10)).collect();
            b.send_fds(1, 1, &[f1.as_raw_fd()]).unwrap();
            b.send_fds(1, 2, &f2.iter().map(|f| f.as_raw_fd()).collect::<Vec<_>>()).unwrap();
            b.send_fds(1, 3, &[f3.as_raw_fd()]).unwrap();
            b.send_fds(1, 4, &many.iter().map(|f| f.as_raw_fd()).collect::<Vec<_>>()).unwrap();
            b.barrier().unwrap();
            // And the other direction, received before it is sent.
            let back = b.recv_fds(1, 9).unwrap();
            assert_pattern(&back[0], 0x99, 50);
        } else {
            // Out of order: 3, then 1, then 4, then 2.
            assert_pattern(&b.recv_fds(0, 3).unwrap()[0], 0x33, 300);
            assert_pattern(&b.recv_fds(0, 1).unwrap()[0], 0x11, 100);
            let many = b.recv_fds(0, 4).unwrap();
            assert_eq!(many.len(), 100);
            for (i, f) in many.iter().enumerate() {
                assert_pattern(f, i as u8, 10);
            }
            let f2 = b.recv_fds(0, 2).unwrap();
            assert_eq!(f2.len(), 3);
            for (i, f) in f2.iter().enumerate() {
                assert_pattern(f, 0x20 + i as u8, 200);
            }
            b.barrier().unwrap();
            thread::sleep(Duration::from_millis(100));
            b.send_fds(0, 9, &[memfd(0x99, 50).as_raw_fd()]).unwrap();
        }
        fd_ring(&b);
        assert_err(&b.send_fds(2, 0, &[]), symmResult_t::symmInvalidArgument, "out of range");
        assert_err(&b.recv_fds(7, 0), symmResult_t::symmInvalidArgument, "out of range");
    });
}

#[test]
fn abort_unblocks_a_blocked_allgather() {
    let c = cfg(30.0);
    let id = create_root(&c).unwrap();
    let (tx, rx) = mpsc::channel::<Bootstrap>();
    thread::scope(|s| {
        // Rank 1 joins but does not call allgather until rank 0 has aborted.
        let (idr, cr) = (&id, &c);
        let spoke = s.spawn(move || {
            let b = connect(idr, 2, 1, cr);
            rx.recv().unwrap(); // rank 0 aborted
            let t0 = Instant::now();
            let e = b.allgather(b"late").unwrap_err();
            assert_eq!(e.code, symmResult_t::symmRemoteError, "{}", e.msg);
            assert!(e.msg.contains("rank 0"), "{}", e.msg);
            assert!(t0.elapsed() < Duration::from_secs(10));
            b
        });
        let b = connect(&id, 2, 0, &c);
        thread::scope(|s2| {
            let blocked = s2.spawn(|| {
                let t0 = Instant::now();
                (b.allgather(b"x"), t0.elapsed())
            });
            thread::sleep(Duration::from_millis(300));
            b.abort();
            let (r, took) = blocked.join().unwrap();
            assert_err(&r, symmResult_t::symmRemoteError, "aborted");
            assert!(took < Duration::from_secs(10), "{took:?}");
        });
        assert_err(&b.barrier(), symmResult_t::symmInvalidUsage, "bootstrap aborted");
        assert_err(&b.recv_fds(1, 0), symmResult_t::symmInvalidUsage, "bootstrap aborted");
        assert_err(&b.send_fds(1, 0, &[]), symmResult_t::symmInvalidUsage, "bootstrap aborted");
        b.abort(); // idempotent
        tx.send(b).unwrap();
        drop(spoke.join().unwrap());
    });
}

#[test]
fn abort_unblocks_spoke_recv_fds_and_tells_the_hub() {
    let c = cfg(30.0);
    let id = create_root(&c).unwrap();
    let (hub, spoke) = thread::scope(|s| {
        let h = s.spawn(|| connect(&id, 2, 0, &c));
        let spoke = connect(&id, 2, 1, &c);
        (h.join().unwrap(), spoke)
    });
    thread::scope(|s| {
        let blocked = s.spawn(|| spoke.recv_fds(0, 5));
        thread::sleep(Duration::from_millis(300));
        spoke.abort();
        assert_err(&blocked.join().unwrap(), symmResult_t::symmRemoteError, "aborted");
    });
    // Idle abort: the hub learns why the spoke left.
    let t0 = Instant::now();
    let r = hub.allgather(b"x");
    assert_eq!(r.as_ref().unwrap_err().code, symmResult_t::symmRemoteError);
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn collective_mismatch_is_reported() {
    let c = cfg(20.0);
    let id = create_root(&c).unwrap();
    run_threads(&id, &[(3, 0), (3, 1), (3, 2)], &c, |r, b, _| {
        let b = b.unwrap();
        let res = if r == 2 { b.barrier().map(|_| ()) } else { b.allgather(b"a").map(|_| ()) };
        assert_err(&res, symmResult_t::symmInvalidUsage, "bootstrap collective mismatch: rank 0 called allgather (#1) but rank 2 called barrier (#1)");
        // The star stays failed.
        assert_eq!(b.barrier().unwrap_err().code, symmResult_t::symmInvalidUsage);
    });
}

#[test]
fn collective_timeout_names_the_missing_rank() {
    let c = cfg(1.5);
    let id = create_root(&c).unwrap();
    let done = std::sync::Barrier::new(3);
    run_threads(&id, &[(3, 0), (3, 1), (3, 2)], &c, |r, b, _| {
        let b = b.unwrap();
        if r != 2 {
            let t0 = Instant::now();
            let res = b.allgather(b"a");
            // Rank 1 hears it from rank 0, before its own (later) deadline.
            assert_err(&res, symmResult_t::symmTimeout, "rank(s) 2 did not call it");
            assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        }
        done.wait(); // rank 2 stays connected, but idle, until then
    });
}

// ------------------------------------------------------------ processes

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn spawn_child(role: &str, id: &UniqueId, nranks: usize, rank: usize, arg: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_main", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(ID, hex(id.as_bytes()))
        .env(NRANKS, nranks.to_string())
        .env(RANK, rank.to_string())
        .env(ARG, arg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child")
}

/// Exit codes and output of `children`, killing any still running after `limit`.
fn wait_children(children: Vec<Child>, limit: Duration) -> Vec<(Option<i32>, String)> {
    let deadline = Instant::now() + limit;
    let (tx, rx) = mpsc::channel();
    let mut pids = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        pids.push(child.id());
        let tx = tx.clone();
        thread::spawn(move || {
            let out = child.wait_with_output().unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let _ = tx.send((i, out.status.code(), text));
        });
    }
    drop(tx);
    let mut results: Vec<Option<(Option<i32>, String)>> = vec![None; pids.len()];
    let mut killed = false;
    while results.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(if killed { Duration::from_secs(30) } else { left }) {
            Ok((i, code, text)) => results[i] = Some((code, text)),
            Err(_) if !killed => {
                for (i, pid) in pids.iter().enumerate() {
                    if results[i].is_none() {
                        // SAFETY: plain syscall; the child is not reaped yet.
                        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
                    }
                }
                killed = true;
            }
            Err(_) => panic!("children did not die after SIGKILL"),
        }
    }
    let out: Vec<_> = results.into_iter().map(Option::unwrap).collect();
    assert!(!killed, "children still running after {limit:?}:\n{}", dump(&out));
    out
}

fn dump(out: &[(Option<i32>, String)]) -> String {
    out.iter().enumerate().map(|(i, (c, t))| format!("--- child {i} exit {c:?}\n{t}")).collect()
}

fn processes(n: usize) {
    let id = create_root(&cfg(60.0)).unwrap();
    let kids: Vec<_> = (0..n).map(|r| spawn_child("collectives", &id, n, r, "")).collect();
    let out = wait_children(kids, Duration::from_secs(120));
    assert!(out.iter().all(|(c, _)| *c == Some(0)), "{}", dump(&out));
}

#[test]
fn processes_2_ranks() {
    processes(2);
}

#[test]
fn processes_4_ranks() {
    processes(4);
}

#[test]
fn processes_8_ranks() {
    processes(8);
}

/// `dying` exits (without any clean-up) while the others are inside an allgather.
fn peer_death(dying: usize) {
    let n = 4;
    let id = create_root(&cfg(60.0)).unwrap();
    let kids: Vec<_> = (0..n).map(|r| spawn_child("die", &id, n, r, &dying.to_string())).collect();
    let out = wait_children(kids, Duration::from_secs(120));
    for (r, (code, _)) in out.iter().enumerate() {
        let expect = if r == dying { 3 } else { 0 };
        assert_eq!(*code, Some(expect), "rank {r}\n{}", dump(&out));
    }
}

#[test]
fn processes_spoke_death_is_reported_promptly() {
    peer_death(3);
}

#[test]
fn processes_hub_death_is_reported_promptly() {
    peer_death(0);
}

#[test]
fn no_fd_or_thread_leaks_over_100_cycles() {
    // In a child process: other tests running in this one would skew the counts.
    let out = wait_children(vec![spawn_child("leak", &UniqueId([0; 128]), 1, 0, "")], Duration::from_secs(180));
    assert_eq!(out[0].0, Some(0), "{}", dump(&out));
}

/// Entry point of the child processes; a no-op in a normal test run.
#[test]
fn child_main() {
    let Ok(role) = std::env::var(ROLE) else { return };
    let var = |k: &str| std::env::var(k).unwrap();
    let id = UniqueId::from_bytes(&unhex(&var(ID)).try_into().unwrap());
    let (n, r): (usize, usize) = (var(NRANKS).parse().unwrap(), var(RANK).parse().unwrap());
    match role.as_str() {
        "collectives" => {
            let b = connect(&id, n, r, &cfg(60.0));
            check_collectives(&b);
            fd_ring(&b);
            b.barrier().unwrap();
        }
        "die" => {
            let dying: usize = var(ARG).parse().unwrap();
            let b = connect(&id, n, r, &cfg(60.0));
            b.barrier().unwrap();
            if r == dying {
                thread::sleep(Duration::from_millis(300));
                // SAFETY: ends the process at once, as a crash would.
                unsafe { libc::_exit(3) };
            }
            let t0 = Instant::now();
            let e = b.allgather(&vec![r as u8; 1 << 20]).unwrap_err();
            assert_eq!(e.code, symmResult_t::symmRemoteError, "{}", e.msg);
            assert!(e.msg.contains(&format!("rank {dying} disconnected")), "{}", e.msg);
            assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        }
        "leak" => leak_cycles(),
        _ => panic!("unknown role {role}"),
    }
}

fn counts() -> (usize, usize) {
    let n = |p| std::fs::read_dir(p).unwrap().count();
    (n("/proc/self/fd"), n("/proc/self/task"))
}

/// Waits (the root threads exit on their own, shortly after) until `counts()` is `want`.
fn settle(want: (usize, usize), within: Duration) -> (usize, usize) {
    let deadline = Instant::now() + within;
    loop {
        let now = counts();
        if now == want || Instant::now() > deadline {
            return now;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn leak_cycle(i: usize) {
    let c = cfg(10.0);
    let id = create_root(&c).unwrap();
    let (b0, b1) = thread::scope(|s| {
        let h = s.spawn(|| connect(&id, 2, 1, &c));
        let b0 = connect(&id, 2, 0, &c);
        (b0, h.join().unwrap())
    });
    thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(b1.allgather(b"1").unwrap().len(), 2);
            b1.send_fds(0, 1, &[memfd(1, 8).as_raw_fd()]).unwrap();
            b1.barrier().unwrap();
        });
        assert_eq!(b0.allgather(b"0").unwrap().len(), 2);
        assert_pattern(&b0.recv_fds(1, 1).unwrap()[0], 1, 8);
        b0.barrier().unwrap();
    });
    if i.is_multiple_of(10) {
        b1.abort();
    }
    drop((b0, b1));
}

fn leak_cycles() {
    let before = counts();
    leak_cycle(0); // warm-up: lazily created process-wide state
    let base = settle(before, Duration::from_secs(10));
    for i in 0..100 {
        leak_cycle(i);
    }
    // Failed rendezvous must free everything too.
    for _ in 0..3 {
        let c = cfg(0.3);
        let id = create_root(&c).unwrap();
        assert_err(&Bootstrap::connect(&id, 2, 0, &c), symmResult_t::symmTimeout, "timed out");
        let id = create_root(&c).unwrap();
        assert_err(&Bootstrap::connect(&id, 2, 5, &c), symmResult_t::symmInvalidArgument, "out of range");
    }
    let after = settle(base, Duration::from_secs(15));
    assert_eq!(after, base, "(fds, threads) before {base:?}, after {after:?}");
}
