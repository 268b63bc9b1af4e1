//! Opaque C handles tied to Rust `Arc`s by one trait.
//!
//! A handle is a number that is never reused (it is not an address, so a
//! new object can never inherit a destroyed one's handle) and is never
//! dereferenced: every use looks it up in the type's table of live handles,
//! so a NULL, stale (destroyed) or made-up handle is an error, not a crash.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{bail, Result};

/// Live handles of one type.
pub struct HandleTable<T> {
    live: RwLock<Option<HashMap<usize, Arc<T>>>>,
}

impl<T> HandleTable<T> {
    pub const fn new() -> Self {
        HandleTable { live: RwLock::new(None) }
    }
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Implemented by each opaque C type (`symmComm`, ...) to name the Rust type
/// it stands for and the table that keeps its live handles.
pub trait ArcHandle: Sized + 'static {
    type Inner: Send + Sync + 'static;
    /// What the C API calls it, for error messages ("communicator").
    const KIND: &'static str;
    fn table() -> &'static HandleTable<Self::Inner>;

    /// Hand `inner` to C: returns the handle and keeps `inner` alive until
    /// [`ArcHandle::release`].
    fn register(inner: Arc<Self::Inner>) -> *mut Self {
        // Aligned like a pointer, far from small made-up values, unique for
        // the life of the process.
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let key = (0x5eed << 32) | (NEXT.fetch_add(1, Ordering::Relaxed) << 4);
        Self::table().live.write().get_or_insert_with(HashMap::new).insert(key, inner);
        key as *mut Self
    }

    /// The object behind a handle; `arg` names the argument in errors.
    fn get(handle: *const Self, arg: &str) -> Result<Arc<Self::Inner>> {
        if handle.is_null() {
            bail!(symmInvalidArgument, "{arg} is NULL");
        }
        match Self::table().live.read().as_ref().and_then(|m| m.get(&(handle as usize))) {
            Some(inner) => Ok(inner.clone()),
            None => bail!(symmInvalidUsage, "{arg} ({handle:p}) is not a live {} (already destroyed, or never created)", Self::KIND),
        }
    }

    /// Take a handle back from C; later lookups of it fail.
    fn release(handle: *const Self, arg: &str) -> Result<Arc<Self::Inner>> {
        if handle.is_null() {
            bail!(symmInvalidArgument, "{arg} is NULL");
        }
        match Self::table().live.write().as_mut().and_then(|m| m.remove(&(handle as usize))) {
            Some(inner) => Ok(inner),
            None => bail!(symmInvalidUsage, "{arg} ({handle:p}) is not a live {} (already destroyed, or never created)", Self::KIND),
        }
    }

    /// Number of live handles of this type (for leak tests).
    fn live_count() -> usize {
        Self::table().live.read().as_ref().map_or(0, |m| m.len())
    }
}
