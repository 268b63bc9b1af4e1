//! The bootstrap of communicators created together by `symmCommInitAll`:
//! every rank lives in this process, so blobs are exchanged through shared
//! memory instead of sockets. Each call blocks until every rank of the group
//! has made its matching call (from its own thread, or from the worker
//! threads `symmGroupEnd` starts), bounded by the bootstrap timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{bail, Result};

/// Shared state of one in-process group.
pub struct LocalGroup {
    /// Unique in this process, never reused: names the group for
    /// communicators made from its ranks (split, shrink).
    id: u64,
    nranks: usize,
    timeout: Duration,
    state: Mutex<Round>,
    changed: Condvar,
}

/// One all-gather at a time: ranks deposit, the last one publishes, and the
/// round resets after everyone has taken the result.
struct Round {
    seq: u64,
    slots: Vec<Option<Vec<u8>>>,
    result: Option<Arc<Vec<Vec<u8>>>>,
    taken: usize,
    broken: Option<String>,
}

impl LocalGroup {
    pub fn new(nranks: usize, timeout: Duration) -> Arc<LocalGroup> {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Arc::new(LocalGroup {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            nranks,
            timeout,
            state: Mutex::new(Round { seq: 0, slots: vec![None; nranks], result: None, taken: 0, broken: None }),
            changed: Condvar::new(),
        })
    }

    /// Rank `rank`'s handle on the group.
    pub fn member(self: &Arc<Self>, rank: usize) -> LocalPeer {
        assert!(rank < self.nranks);
        LocalPeer { group: self.clone(), rank }
    }
}

/// One rank's side of an in-process group.
pub struct LocalPeer {
    group: Arc<LocalGroup>,
    rank: usize,
}

impl LocalPeer {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn nranks(&self) -> usize {
        self.group.nranks
    }

    /// The group's process-unique id (the same for every rank of it).
    pub fn group_id(&self) -> u64 {
        self.group.id
    }

    /// Every rank's blob, in rank order.
    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let g = &*self.group;
        let deadline = Instant::now() + g.timeout;
        let mut st = g.state.lock();
        // Wait for the previous round to be fully collected.
        while st.result.is_some() || st.slots[self.rank].is_some() {
            self.wait(&mut st, deadline)?;
        }
        let seq = st.seq;
        st.slots[self.rank] = Some(mine.to_vec());
        if st.slots.iter().all(Option::is_some) {
            let all: Vec<Vec<u8>> = st.slots.iter_mut().map(|s| s.take().unwrap_or_default()).collect();
            st.result = Some(Arc::new(all));
            g.changed.notify_all();
        }
        while st.seq == seq && st.result.is_none() {
            if let Err(e) = self.wait(&mut st, deadline) {
                // Withdraw, so that a later call can still line up.
                if st.seq == seq && st.result.is_none() {
                    st.slots[self.rank] = None;
                }
                return Err(e);
            }
        }
        let out = st.result.as_ref().map(|r| (**r).clone()).unwrap_or_default();
        st.taken += 1;
        if st.taken == g.nranks {
            st.result = None;
            st.taken = 0;
            st.seq += 1;
            g.changed.notify_all();
        }
        Ok(out)
    }

    pub fn barrier(&self) -> Result<()> {
        self.allgather(&[]).map(|_| ())
    }

    /// Make every waiting and later call of the group fail.
    pub fn abort(&self) {
        let mut st = self.group.state.lock();
        st.broken.get_or_insert_with(|| format!("rank {} aborted the group", self.rank));
        self.group.changed.notify_all();
    }

    fn wait(&self, st: &mut parking_lot::MutexGuard<'_, Round>, deadline: Instant) -> Result<()> {
        if let Some(why) = &st.broken {
            bail!(symmRemoteError, "in-process group is unusable: {why}");
        }
        if self.group.changed.wait_until(st, deadline).timed_out() {
            let missing: Vec<usize> = (0..self.group.nranks).filter(|&r| st.slots[r].is_none()).collect();
            bail!(
                symmTimeout,
                "rank {} waited {:.1} s for ranks {missing:?} of its symmCommInitAll group (SYMM_BOOTSTRAP_TIMEOUT); \
                 when one thread drives several communicators, wrap collective host calls \
                 (symmMemAlloc, symmMemFree, symmCommRegister) in symmGroupStart/symmGroupEnd",
                self.rank,
                self.group.timeout.as_secs_f64()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::symmResult_t;

    #[test]
    fn allgather_rounds() {
        let g = LocalGroup::new(4, Duration::from_secs(10));
        let handles: Vec<_> = (0..4)
            .map(|r| {
                let p = g.member(r);
                std::thread::spawn(move || {
                    for round in 0..200u32 {
                        let blob = vec![r as u8; (r + round as usize) % 7];
                        let all = p.allgather(&blob).unwrap();
                        for (q, b) in all.iter().enumerate() {
                            assert_eq!(b, &vec![q as u8; (q + round as usize) % 7]);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn lone_rank_times_out_and_group_recovers() {
        let g = LocalGroup::new(2, Duration::from_millis(200));
        let (a, b) = (g.member(0), g.member(1));
        let e = a.allgather(b"x").unwrap_err();
        assert_eq!(e.code, symmResult_t::symmTimeout);
        assert!(e.msg.contains("symmGroupStart"), "{}", e.msg);
        // Both arrive now: works.
        let t = std::thread::spawn(move || b.allgather(b"b").unwrap());
        assert_eq!(a.allgather(b"a").unwrap(), vec![b"a".to_vec(), b"b".to_vec()]);
        t.join().unwrap();
    }

    #[test]
    fn abort_wakes_waiters() {
        let g = LocalGroup::new(2, Duration::from_secs(30));
        let (a, b) = (g.member(0), g.member(1));
        let t = std::thread::spawn(move || a.allgather(b"x"));
        std::thread::sleep(Duration::from_millis(100));
        b.abort();
        let e = t.join().unwrap().unwrap_err();
        assert_eq!(e.code, symmResult_t::symmRemoteError);
    }
}
