//! A value readers load without locking or allocating, replaced as a whole
//! by writers (who serialise among themselves). Used for the buffer index
//! that collectives consult on every call.
//!
//! Reclamation: readers announce themselves in a counter before loading the
//! pointer. A writer swaps the pointer, then frees the retired versions only
//! if no reader is in flight; otherwise they wait for a later write or for
//! drop. (SeqCst on both sides: a reader that increments after the writer's
//! check must load after the swap, so it never sees a freed version.)

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};

use parking_lot::Mutex;

pub struct SnapshotCell<T> {
    current: AtomicPtr<T>,
    readers: AtomicUsize,
    retired: Mutex<Vec<Box<T>>>,
}

impl<T> SnapshotCell<T> {
    pub fn new(value: T) -> Self {
        SnapshotCell {
            current: AtomicPtr::new(Box::into_raw(Box::new(value))),
            readers: AtomicUsize::new(0),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// Run `f` on the current version.
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.readers.fetch_add(1, SeqCst);
        let _done = ReaderGuard(&self.readers);
        // SAFETY: the version cannot be freed while readers > 0 (see module doc).
        f(unsafe { &*self.current.load(SeqCst) })
    }

    /// Replace the value with `make(current)`. Writers must be serialised
    /// by the caller (they are: the memory module holds its state lock).
    pub fn update(&self, make: impl FnOnce(&T) -> T) {
        let mut retired = self.retired.lock();
        // SAFETY: only writers replace the pointer, and they hold `retired`.
        let next = make(unsafe { &*self.current.load(SeqCst) });
        let old = self.current.swap(Box::into_raw(Box::new(next)), SeqCst);
        // SAFETY: old came from Box::into_raw and is no longer reachable.
        retired.push(unsafe { Box::from_raw(old) });
        if self.readers.load(SeqCst) == 0 {
            retired.clear();
        }
    }
}

impl<T> Drop for SnapshotCell<T> {
    fn drop(&mut self) {
        // SAFETY: &mut self: no readers remain.
        drop(unsafe { Box::from_raw(*self.current.get_mut()) });
    }
}

// SAFETY: readers get &T from any thread; T moves between threads on update.
unsafe impl<T: Send + Sync> Send for SnapshotCell<T> {}
unsafe impl<T: Send + Sync> Sync for SnapshotCell<T> {}

struct ReaderGuard<'a>(&'a AtomicUsize);

impl Drop for ReaderGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn readers_see_whole_versions() {
        use std::sync::atomic::AtomicBool;
        let cell = Arc::new(SnapshotCell::new(vec![0u64; 64]));
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (cell, stop, reads) = (cell.clone(), stop.clone(), reads.clone());
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        cell.read(|v| {
                            // Every version is uniform: a torn or freed one would not be.
                            assert!(v.iter().all(|&x| x == v[0]));
                        });
                        reads.fetch_add(1, SeqCst);
                    }
                })
            })
            .collect();
        // Keep writing until the readers have overlapped with many updates.
        let mut i = 0u64;
        while i < 2000 || reads.load(SeqCst) < 20_000 {
            i += 1;
            cell.update(|_| vec![i; 64]);
        }
        stop.store(true, SeqCst);
        for r in readers {
            r.join().unwrap();
        }
        cell.read(|v| assert_eq!(v[0], i));
    }
}
