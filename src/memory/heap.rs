//! Offset allocator for the symmetric heap. Every rank runs its own copy on
//! the same sequence of (collective) calls, so every rank picks the same
//! offset without talking; the collective call then checks that they agree.

use std::collections::BTreeMap;

/// First-fit over a free list kept sorted by offset. Deterministic.
#[derive(Debug, Clone)]
pub struct OffsetAllocator {
    capacity: usize,
    free: BTreeMap<usize, usize>, // offset -> length
}

impl OffsetAllocator {
    pub fn new(capacity: usize) -> Self {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        OffsetAllocator { capacity, free }
    }

    /// Lowest offset with `size` free bytes (`size` already rounded by the caller).
    pub fn alloc(&mut self, size: usize) -> Option<usize> {
        let (&off, &len) = self.free.iter().find(|(_, &len)| len >= size)?;
        self.free.remove(&off);
        if len > size {
            self.free.insert(off + size, len - size);
        }
        Some(off)
    }

    /// Return `[off, off + size)`, merging with free neighbours.
    pub fn free(&mut self, off: usize, size: usize) {
        debug_assert!(off + size <= self.capacity);
        let (mut start, mut len) = (off, size);
        if let Some((&prev, &plen)) = self.free.range(..off).next_back() {
            if prev + plen == off {
                self.free.remove(&prev);
                start = prev;
                len += plen;
            }
        }
        if let Some(&nlen) = self.free.get(&(off + size)) {
            self.free.remove(&(off + size));
            len += nlen;
        }
        self.free.insert(start, len);
    }

    pub fn free_bytes(&self) -> usize {
        self.free.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_and_coalesce() {
        let mut a = OffsetAllocator::new(100);
        assert_eq!(a.alloc(10), Some(0));
        assert_eq!(a.alloc(20), Some(10));
        assert_eq!(a.alloc(30), Some(30));
        a.free(10, 20);
        assert_eq!(a.alloc(5), Some(10)); // reuses the hole
        a.free(10, 5);
        a.free(0, 10);
        a.free(30, 30);
        assert_eq!(a.free_bytes(), 100);
        assert_eq!(a.alloc(100), Some(0));
        assert_eq!(a.alloc(1), None);
    }

    #[test]
    fn replicas_agree() {
        // Two replicas fed the same sequence give the same offsets.
        let ops: Vec<(bool, usize)> = (0..200).map(|i| (i % 3 != 2, 1 + (i * 7919) % 13)).collect();
        let run = || {
            let mut a = OffsetAllocator::new(10_000);
            let mut live = Vec::new();
            let mut out = Vec::new();
            for (i, (alloc, size)) in ops.iter().enumerate() {
                if *alloc || live.is_empty() {
                    let off = a.alloc(*size).unwrap();
                    live.push((off, *size));
                    out.push(off);
                } else {
                    let (off, size) = live.remove(i % live.len());
                    a.free(off, size);
                }
            }
            out
        };
        assert_eq!(run(), run());
    }
}
