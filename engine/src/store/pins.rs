//! Pins: CIDs that garbage collection must keep although no named root
//! reaches them yet (blocks of a replication pull in progress, a tree being
//! built before its root is published).
//!
//! A pin keeps exactly the pinned block, not what it links to: a writer
//! pins each block it stores (before storing it) and drops the guard once
//! the block is reachable from a named root. Pins live in memory; they
//! protect against collections run through [`crate::gc`] with the same
//! [`Pins`] in the same process (another process cannot collect while this
//! one holds the store's write lock).
//!
//! Ordering guarantee: [`crate::gc`] holds [`Pins::freeze`] from before it
//! snapshots the pins until its `retain` has returned, and `pin`/`add`
//! wait for a running collection to finish. So a block pinned before it is
//! put is never collected, however the two interleave.

use crate::cid::Cid;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock, RwLockWriteGuard};

#[derive(Debug, Default)]
struct Inner {
    /// Pin counts; a CID is pinned while its count is positive.
    counts: Mutex<HashMap<Cid, usize>>,
    /// Shared by pinners, exclusive while a collection runs.
    gate: RwLock<()>,
}

/// A registry of pinned CIDs, cheap to clone (clones share the registry).
#[derive(Debug, Clone, Default)]
pub struct Pins {
    inner: Arc<Inner>,
}

impl Pins {
    /// An empty registry.
    pub fn new() -> Pins {
        Pins::default()
    }

    /// A guard pinning nothing yet; add CIDs with [`PinSet::add`]. Every
    /// CID it holds is unpinned when it drops.
    pub fn set(&self) -> PinSet {
        PinSet {
            pins: self.clone(),
            cids: Vec::new(),
        }
    }

    /// Pins one CID until the returned guard drops.
    pub fn pin(&self, cid: Cid) -> PinSet {
        let mut set = self.set();
        set.add(cid);
        set
    }

    /// True if `cid` is pinned.
    pub fn is_pinned(&self, cid: &Cid) -> bool {
        self.counts().contains_key(cid)
    }

    /// Number of distinct pinned CIDs.
    pub fn len(&self) -> usize {
        self.counts().len()
    }

    /// True when nothing is pinned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pinned CIDs right now.
    pub fn snapshot(&self) -> HashSet<Cid> {
        self.counts().keys().copied().collect()
    }

    /// Blocks new pins until the guard drops (held by a collection between
    /// its pin snapshot and the end of `retain`).
    pub fn freeze(&self) -> PinFreeze<'_> {
        PinFreeze {
            _guard: self.inner.gate.write().unwrap_or_else(|e| e.into_inner()),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<Cid, usize>> {
        self.inner.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, cid: Cid) {
        let _gate = self.inner.gate.read().unwrap_or_else(|e| e.into_inner());
        *self.counts().entry(cid).or_insert(0) += 1;
    }

    fn remove(&self, cids: &[Cid]) {
        let mut counts = self.counts();
        for cid in cids {
            if let Some(n) = counts.get_mut(cid) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(cid);
                }
            }
        }
    }
}

/// RAII guard over a group of pins (see [`Pins::set`]).
#[derive(Debug)]
pub struct PinSet {
    pins: Pins,
    cids: Vec<Cid>,
}

impl PinSet {
    /// Pins `cid` for the life of this guard. Waits while a collection is
    /// running.
    pub fn add(&mut self, cid: Cid) {
        self.pins.add(cid);
        self.cids.push(cid);
    }

    /// CIDs held by this guard (with repetitions, in insertion order).
    pub fn cids(&self) -> &[Cid] {
        &self.cids
    }
}

impl Drop for PinSet {
    fn drop(&mut self) {
        self.pins.remove(&self.cids);
    }
}

/// Guard returned by [`Pins::freeze`].
#[derive(Debug)]
pub struct PinFreeze<'a> {
    _guard: RwLockWriteGuard<'a, ()>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_guards() {
        let pins = Pins::new();
        let a = Cid::of(b"a");
        let b = Cid::of(b"b");
        let g1 = pins.pin(a);
        let mut g2 = pins.set();
        g2.add(a);
        g2.add(b);
        assert_eq!(pins.snapshot(), [a, b].into_iter().collect());
        drop(g1);
        assert!(pins.is_pinned(&a));
        drop(g2);
        assert!(pins.is_empty());
    }

    #[test]
    fn freeze_blocks_new_pins_until_released() {
        let pins = Pins::new();
        let frozen = pins.freeze();
        let p2 = pins.clone();
        let t = std::thread::spawn(move || {
            let g = p2.pin(Cid::of(b"x"));
            std::mem::forget(g);
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(pins.is_empty(), "pin must wait for the freeze");
        drop(frozen);
        t.join().unwrap();
        assert!(pins.is_pinned(&Cid::of(b"x")));
    }
}
