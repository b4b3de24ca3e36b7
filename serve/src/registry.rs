//! [`MapRegistry`]: root name -> the current [`Snapshot`], swapped
//! atomically.
//!
//! Invariants:
//! * a snapshot is fully loaded before it becomes visible ([`publish`]
//!   takes a finished [`Snapshot`]); readers never wait for a load;
//! * each name's slot is an `ArcSwap`: a reader gets one `Arc<Snapshot>`
//!   and keeps it for the whole request; the old snapshot (its store handle,
//!   node cache and sidecar layouts) is dropped when its last reader ends;
//! * generations come from one counter, so a later publish (of any name)
//!   always carries a larger generation.
//!
//! [`publish`]: MapRegistry::publish

use crate::snapshot::Snapshot;
use arc_swap::ArcSwap;
use prox_engine::proximity::{self, Sidecars};
use prox_engine::store::MmapStore;
use prox_engine::{BlockStore, Cid};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

type Slots = BTreeMap<String, Arc<ArcSwap<Snapshot>>>;

/// The maps a server answers for. Cheap to clone (shared state).
#[derive(Clone, Default)]
pub struct MapRegistry {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Held for reading only long enough to clone one slot's `Arc`.
    slots: RwLock<Slots>,
    generation: AtomicU64,
    /// Serialises refreshes (one loader at a time).
    refreshing: Mutex<()>,
}

impl std::fmt::Debug for MapRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.snapshots()).finish()
    }
}

/// What [`MapRegistry::refresh_from_store`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Names (re)loaded and published.
    pub loaded: Vec<String>,
    /// Names removed because their root disappeared or emptied.
    pub removed: Vec<String>,
    /// Names whose new version failed to load (the old snapshot, if any,
    /// stays published), with the error.
    pub failed: Vec<(String, String)>,
}

/// Where a server's background refresh reads named roots from.
#[derive(Clone)]
pub enum Source {
    /// A store shared with its writer in this process (the daemon's main
    /// store: sync pulls move its roots in place).
    Store(Arc<dyn BlockStore>),
    /// A store directory written by other processes (`prox update`,
    /// `prox accel build`): reopened read-only whenever one of its roots files
    /// is replaced.
    Directory(PathBuf),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Store(_) => f.write_str("Source::Store"),
            Source::Directory(d) => write!(f, "Source::Directory({})", d.display()),
        }
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl MapRegistry {
    /// An empty registry.
    pub fn new() -> MapRegistry {
        MapRegistry::default()
    }

    /// Makes `snapshot` the current version of `name` in one atomic swap
    /// and returns its generation.
    pub fn publish(&self, name: &str, mut snapshot: Snapshot) -> u64 {
        let mut slots = write(&self.inner.slots);
        // Taken under the write lock so generations follow visibility order.
        let generation = self.inner.generation.fetch_add(1, Ordering::SeqCst) + 1;
        snapshot.stamp(name, generation);
        let snapshot = Arc::new(snapshot);
        match slots.get(name) {
            Some(slot) => slot.store(snapshot),
            None => {
                slots.insert(name.to_string(), Arc::new(ArcSwap::new(snapshot)));
            }
        }
        generation
    }

    /// Stops serving `name`; true if it was served. Requests holding its
    /// snapshot finish on it.
    pub fn remove(&self, name: &str) -> bool {
        write(&self.inner.slots).remove(name).is_some()
    }

    /// The current snapshot of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Snapshot>> {
        let slot = read(&self.inner.slots).get(name).cloned()?;
        Some(slot.load_full())
    }

    /// Every current snapshot, by name.
    pub fn snapshots(&self) -> Vec<Arc<Snapshot>> {
        read(&self.inner.slots)
            .values()
            .map(|s| s.load_full())
            .collect()
    }

    /// Makes the registry mirror the proximity maps named in `store`: loads
    /// (off the caller's request path) every root whose descriptor or
    /// sidecars differ from the published snapshot, publishes each with one
    /// swap, and removes names whose root is gone or empty. Roots that are
    /// not proximity maps are ignored. A map that fails to load keeps its
    /// previous snapshot and is reported in [`RefreshReport::failed`].
    pub fn refresh_from_store(
        &self,
        store: &Arc<dyn BlockStore>,
    ) -> prox_engine::Result<RefreshReport> {
        let _one = self
            .inner
            .refreshing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut report = RefreshReport::default();
        let mut wanted: BTreeMap<String, (Cid, Sidecars)> = BTreeMap::new();
        for (name, _) in store.roots()? {
            match proximity::resolve(&**store, &name) {
                Ok(Some(p)) => {
                    wanted.insert(name, p);
                }
                Ok(None) => {}
                Err(e) => tracing::trace!(%name, %e, "root is not a proximity map"),
            }
        }
        let current: Vec<String> = read(&self.inner.slots).keys().cloned().collect();
        for name in current {
            if !wanted.contains_key(&name) && self.remove(&name) {
                tracing::info!(%name, "map no longer published; removed");
                report.removed.push(name);
            }
        }
        for (name, (descriptor, sidecars)) in wanted {
            if let Some(s) = self.get(&name) {
                let meta = proximity::resolve_metadata(
                    &**store,
                    &name,
                    prox_engine::refs::META_SECONDARY_PREFIX,
                )
                .unwrap_or_default();
                if s.descriptor() == descriptor
                    && s.sidecars() == sidecars
                    && *s.field_meta() == meta
                {
                    continue;
                }
            }
            match Snapshot::load_named(store.clone(), &name) {
                Ok(snap) => {
                    // The root may have moved since it was resolved above:
                    // the snapshot is of what it publishes now.
                    let descriptor = snap.descriptor();
                    let generation = self.publish(&name, snap);
                    tracing::info!(%name, %descriptor, generation, "map published");
                    report.loaded.push(name);
                }
                Err(e) => {
                    tracing::warn!(%name, %descriptor, %e, "cannot load map; keeping the previous version");
                    report.failed.push((name, e.to_string()));
                }
            }
        }
        Ok(report)
    }
}

/// Identity of a store directory's roots files (see
/// [`MmapStore::roots_paths`](prox_engine::MmapStore::roots_paths)): a hash
/// of their contents (a few KiB), since slots are rewritten in place, maybe
/// within one mtime tick and at the same length.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint(u64);

fn fingerprint(dir: &std::path::Path) -> Option<Fingerprint> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut any = false;
    for p in prox_engine::MmapStore::roots_paths(dir) {
        let bytes = std::fs::read(p).ok();
        any |= bytes.is_some();
        bytes.hash(&mut h);
    }
    any.then(|| Fingerprint(h.finish()))
}

/// Runs [`MapRegistry::refresh_from_store`] against a [`Source`], reopening
/// a [`Source::Directory`] store only when its roots changed.
#[derive(Debug)]
pub(crate) struct Refresher {
    source: Source,
    seen: Option<Fingerprint>,
    first: bool,
}

impl Refresher {
    pub(crate) fn new(source: Source) -> Refresher {
        Refresher {
            source,
            seen: None,
            first: true,
        }
    }

    /// One refresh pass (blocking: run it off the async executor).
    pub(crate) fn tick(&mut self, maps: &MapRegistry) -> prox_engine::Result<RefreshReport> {
        let first = std::mem::replace(&mut self.first, false);
        match &self.source {
            Source::Store(s) => maps.refresh_from_store(s),
            Source::Directory(dir) => {
                let now = fingerprint(dir);
                if !first && now == self.seen {
                    return Ok(RefreshReport::default());
                }
                let store: Arc<dyn BlockStore> = Arc::new(MmapStore::open_read_only(dir)?);
                let report = maps.refresh_from_store(&store)?;
                // Retry next tick if a map failed (e.g. a writer mid-update).
                self.seen = if report.failed.is_empty() { now } else { None };
                Ok(report)
            }
        }
    }
}
