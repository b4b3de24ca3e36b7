//! The stores a node works on: the visible block store, a staging store for
//! blocks of unfinished pulls, and the pins that keep a pull's blocks alive.
//!
//! Invariant (the closure invariant): a block is in `main` only if every
//! block it references is in `main`. Sessions write to `main` strictly
//! descendant-first and keep everything else in `staging`, so "present in
//! `main`" always means "whole subtree present" and a resumed pull may skip
//! such a subtree without looking inside. Staged blocks are durable (the
//! staging store is committed after every batch) but invisible: nothing
//! outside a session reads `staging`, and garbage collection of `main`
//! never sees them.

use prox_engine::store::Pins;
use prox_engine::BlockStore;
use std::sync::Arc;

/// The visible store, the staging store and the pin registry of one node.
#[derive(Clone)]
pub struct Stores {
    /// Visible blocks and named roots.
    pub main: Arc<dyn BlockStore>,
    /// Blocks of unfinished pulls. Its only named roots are the durable
    /// pending-sync records of [`crate::pending`] (`pending-sync:<name>`).
    pub staging: Arc<dyn BlockStore>,
    /// CIDs that garbage collection of `main` must keep: a pull pins every
    /// block of `main` its new root depends on (skipped subtree roots, and
    /// each block it publishes, before putting it) until its
    /// compare-and-swap is done. Pass the same registry to `prox_engine::gc`.
    pub pins: Pins,
    /// Serialises staging puts against the staging cleanup after a pull,
    /// which lists staging and then retains what is not yet visible: a put
    /// of a concurrent pull landing in between would otherwise be dropped.
    staging_lock: Arc<std::sync::Mutex<()>>,
}

impl Stores {
    /// Bundles two stores with a fresh pin registry.
    pub fn new(main: Arc<dyn BlockStore>, staging: Arc<dyn BlockStore>) -> Stores {
        Stores {
            main,
            staging,
            pins: Pins::default(),
            staging_lock: Arc::default(),
        }
    }

    /// Holds off staging puts and the staging cleanup of other pulls.
    pub(crate) fn lock_staging(&self) -> std::sync::MutexGuard<'_, ()> {
        self.staging_lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("pins", &self.pins.len())
            .finish_non_exhaustive()
    }
}
