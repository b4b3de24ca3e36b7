//! [`Snapshot`]: one published version of a named map: the engine's
//! [`Index`] (an immutable snapshot of one descriptor, with its sidecars
//! and native layouts loaded or read from the store) stamped with the name and the registry
//! generation it is served under.
//!
//! A request that holds an `Arc<Snapshot>` reads one descriptor from start
//! to end, whatever is published meanwhile. Searching is the index's: this
//! crate never chooses a path itself.

use prox_engine::proximity::{self, Sidecars};
use prox_engine::refs::META_SECONDARY_PREFIX;
use prox_engine::{index, BlockStore, Cid, Index, Result};
use std::sync::Arc;

/// A served version of a named map.
#[derive(Debug, Clone)]
pub struct Snapshot {
    name: String,
    generation: u64,
    index: Arc<Index>,
    /// The root's `prox.si.*` metadata this snapshot's field indexes were
    /// read from (a change reloads the map even when its descriptor did not).
    field_meta: proximity::Metadata,
}

impl Snapshot {
    /// Loads the map `descriptor` with its `sidecars` from `store`, with
    /// every native layout built (so requests do no decoding). Expensive;
    /// call it off the request path, then publish the result.
    pub fn load(store: Arc<dyn BlockStore>, descriptor: Cid, sidecars: Sidecars) -> Result<Self> {
        let index = Index::load(store, descriptor, sidecars, &index::Options::default())?;
        Ok(Snapshot::new(Arc::new(index)))
    }

    /// The map the root `name` publishes now, read in one resolve with its
    /// sidecars, its persisted search layouts (read, not built) and its
    /// payload field indexes (`Index::open`); native layouts the root does
    /// not persist are built. Expensive; off the request path.
    pub fn load_named(store: Arc<dyn BlockStore>, name: &str) -> Result<Self> {
        let field_meta = proximity::resolve_metadata(&*store, name, META_SECONDARY_PREFIX)?;
        let index = Index::open(store, name, &index::Options::default())?;
        let mut snap = Snapshot::new(Arc::new(index));
        snap.field_meta = field_meta;
        Ok(snap)
    }

    /// The `prox.si.*` metadata the field indexes were read from.
    pub fn field_meta(&self) -> &proximity::Metadata {
        &self.field_meta
    }

    /// An unpublished snapshot of `index`.
    pub fn new(index: Arc<Index>) -> Snapshot {
        Snapshot {
            name: String::new(),
            generation: 0,
            index,
            field_meta: proximity::Metadata::new(),
        }
    }

    /// Sets the name and registry generation (done by the registry before
    /// the snapshot becomes visible).
    pub(crate) fn stamp(&mut self, name: &str, generation: u64) {
        self.name = name.to_string();
        self.generation = generation;
    }

    /// The root name it is published under (empty before publishing).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registry's publication counter for this snapshot (strictly
    /// increasing across every publish of the registry; 0 before).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The index it serves.
    pub fn index(&self) -> &Arc<Index> {
        &self.index
    }
}

impl std::ops::Deref for Snapshot {
    type Target = Index;
    fn deref(&self) -> &Index {
        &self.index
    }
}

#[cfg(test)]
mod tests {
    use super::Snapshot;
    use prox_engine::accel::PqParams;
    use prox_engine::index::{self, Build};
    use prox_engine::{BlockStore, MemStore};
    use std::sync::Arc;

    /// A served snapshot reads the layouts the build persisted (the same
    /// CIDs, the fast-scan lists already in place) instead of building
    /// them.
    #[test]
    fn a_named_snapshot_uses_the_persisted_layouts() {
        let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
        let records = (0..2000u64)
            .map(|i| {
                let x = i as f32;
                let v = (0..8)
                    .map(|j| ((x * 0.37 + j as f32) * 1.3).sin())
                    .collect();
                (i.to_be_bytes().to_vec(), v, Vec::new())
            })
            .collect();
        let mut b = Build::new(8);
        b.pq = Some(PqParams {
            subquantizers: 4,
            centroids: 16,
            iterations: 4,
            ..PqParams::default()
        });
        b.layouts = true;
        let built = index::build(&*store, Some("m"), &b, records).unwrap();
        assert!(built.layouts.ivf.is_some() && built.layouts.arena.is_some());
        let snap = Snapshot::load_named(store, "m").unwrap();
        assert_eq!(snap.index().layouts(), built.layouts);
        assert_eq!(snap.descriptor(), built.descriptor);
        let pq = snap.index().accelerators().pq.as_ref().unwrap();
        assert!(pq.fast_scan_built());
    }
}
