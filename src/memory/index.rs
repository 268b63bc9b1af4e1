//! Sorted table of this communicator's symmetric and registered buffers,
//! with each buffer's address on every rank.

use crate::cuda::abi::MAX_RANKS;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// Allocated by symmMemAlloc: peers at fixed strides.
    Symmetric,
    /// An existing buffer made reachable by symmCommRegister.
    Registered,
}

/// One buffer: `[start, start + len)` here, `peers[r]` on rank r.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferEntry {
    pub start: u64,
    pub len: u64,
    pub kind: BufferKind,
    pub peers: [u64; MAX_RANKS],
    /// Device array of the `peers` addresses (nranks entries).
    pub table: u64,
    /// The same on every rank for corresponding buffers (symmetric: heap
    /// offset; registered: the registration's sequence number).
    pub id: u64,
}

impl BufferEntry {
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.start && addr.checked_add(len).is_some_and(|end| end <= self.start + self.len)
    }
}

#[derive(Default, Debug)]
pub struct BufferIndex {
    entries: Vec<BufferEntry>, // sorted by start
}

impl BufferIndex {
    pub fn new(mut entries: Vec<BufferEntry>) -> Self {
        entries.sort_by_key(|e| (e.start, e.len));
        BufferIndex { entries }
    }

    /// The buffer holding `[addr, addr + len)`; overlapping registrations
    /// are allowed, any one that holds the whole range will do.
    pub fn find(&self, addr: u64, len: u64) -> Option<&BufferEntry> {
        let upto = self.entries.partition_point(|e| e.start <= addr);
        self.entries[..upto].iter().rev().find(|e| e.contains(addr, len.max(1)))
    }

    /// Whether `[addr, addr + len)` lies in any rank's copy of a buffer.
    pub fn reachable(&self, addr: u64, len: u64, nranks: usize) -> bool {
        self.entries.iter().any(|e| {
            e.peers[..nranks].iter().any(|&p| addr >= p && addr.checked_add(len).is_some_and(|end| end <= p + e.len))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(start: u64, len: u64) -> BufferEntry {
        BufferEntry { start, len, kind: BufferKind::Registered, peers: [0; MAX_RANKS], table: 0, id: 0 }
    }

    #[test]
    fn lookup() {
        let idx = BufferIndex::new(vec![e(1000, 100), e(0, 10), e(1050, 500), e(5000, 1)]);
        assert_eq!(idx.find(0, 10).unwrap().start, 0);
        assert!(idx.find(5, 10).is_none());
        assert_eq!(idx.find(1090, 20).unwrap().start, 1050); // only the larger one holds it
        assert_eq!(idx.find(1000, 100).unwrap().start, 1000);
        assert_eq!(idx.find(5000, 0).unwrap().start, 5000);
        assert!(idx.find(5001, 1).is_none());
        assert!(idx.find(u64::MAX, 2).is_none());
    }
}
