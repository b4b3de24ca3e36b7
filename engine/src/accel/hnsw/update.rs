//! Carrying a fast (flag `00`) HNSW sidecar across a write of its map.
//!
//! The loaded search layout is turned back into a mutable [`Hnsw`]
//! (ids in key order, the manifest's parameters); removed keys are masked
//! and compacted at once (every list that named a removed node is
//! re-selected from its survivors plus the removed node's surviving
//! neighbours, so no tombstone outlives the write); new records are
//! inserted with the build's batched procedure. Only the nodes whose
//! stored value changed (new nodes, and survivors whose neighbour key set
//! changed) are written, as one canonical splice of the graph tree
//! (`prolly::Tree::batch`), so the tree equals a fresh persist of the
//! edited graph while the write costs the changed chunks only.

use super::persist::{sidecar_tree_config, HnswSidecar};
use super::{Adjacency, BuildGraph, Hnsw, SearchGraph};
use crate::accel::params::HnswParams;
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::prolly;
use crate::proximity::HnswManifest;
use crate::store::BlockStore;
use rayon::prelude::*;

/// What a write did to an HNSW graph.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphEdit {
    /// Nodes added.
    pub inserted: usize,
    /// Nodes removed (their in-neighbours repaired).
    pub removed: usize,
    /// Surviving nodes whose stored neighbour lists changed: repaired after
    /// a removal or given a reverse link by an insertion.
    pub relinked: usize,
}

impl Hnsw {
    /// The mutable graph of a search layout (ids in key order), with the
    /// parameters and flag of the manifest it was loaded from.
    pub(crate) fn from_search_graph(g: &SearchGraph, manifest: &HnswManifest) -> Hnsw {
        let n = g.node_count();
        let levels = g.levels();
        let links: Vec<Vec<Vec<u32>>> = (0..n as u32)
            .into_par_iter()
            .map(|i| {
                let level = usize::from(levels[i as usize]);
                let mut lists = Vec::with_capacity(level + 1);
                lists.push(g.l0.links(i).collect());
                for layer in 1..=level {
                    lists.push(g.neighbours(i, layer).to_vec());
                }
                lists
            })
            .collect();
        let deleted: Vec<bool> = (0..n as u32).map(|i| g.is_masked(i)).collect();
        let deleted_count = deleted.iter().filter(|&&d| d).count();
        let mut h = Hnsw {
            metric: g.metric,
            params: HnswParams::from_config(&manifest.config, manifest.canonical),
            keys: (0..n as u32).map(|i| g.key(i).to_vec()).collect(),
            vectors: g.vectors.clone(),
            graph: BuildGraph {
                levels,
                links,
                entry: g.entry,
                max_level: g.max_level,
            },
            deleted,
            deleted_count,
            order: Vec::new(),
            canonical: manifest.canonical,
        };
        h.rebuild_order();
        h
    }

    /// Applies one write to a graph made by [`Hnsw::from_search_graph`]
    /// from `before` (so ids are `before`'s, in key order, none masked):
    /// removes `removed` (keys of present nodes), then inserts `inserted`
    /// (prepared vectors, new keys), and writes the changed nodes as an edit
    /// of `old`'s graph tree with a manifest bound to `source`. `None` when
    /// no node is left (a sidecar needs one). Fast graphs only: a canonical
    /// graph is rebuilt, not edited.
    pub(crate) fn apply_write(
        &mut self,
        before: &SearchGraph,
        store: &dyn BlockStore,
        old: &HnswManifest,
        source: Cid,
        removed: &[Vec<u8>],
        inserted: &[(Vec<u8>, Vec<f32>)],
    ) -> Result<Option<(HnswSidecar, GraphEdit)>> {
        if self.canonical || self.deleted_count > 0 || self.keys.len() != before.node_count() {
            return Err(Error::InvalidArgument(
                "an incremental HNSW write needs a fast graph fresh from its search layout".into(),
            ));
        }
        let n = self.keys.len();
        let masked = self.delete(removed);
        if masked != removed.len() {
            return Err(Error::InvalidArgument(format!(
                "{} of the keys to remove are not in the HNSW graph",
                removed.len() - masked
            )));
        }
        // Old id of every survivor: compaction keeps the survivors' id
        // order, and `before`'s ids are in key order.
        let survivors: Vec<u32> = (0..n as u32)
            .filter(|&i| !self.deleted[i as usize])
            .collect();
        self.compact()?;
        self.insert(inserted)?;
        let live = survivors.len();
        let old_id = |c: u32| survivors.get(c as usize).copied();
        // A survivor is rewritten when its sorted neighbour-id set changed
        // on any layer (ids and keys are both in key order among old nodes;
        // a new node among its neighbours always changes the value).
        let changed: Vec<u32> = (0..live as u32)
            .into_par_iter()
            .filter(|&j| {
                let was = survivors[j as usize];
                self.graph.links[j as usize]
                    .iter()
                    .enumerate()
                    .any(|(layer, list)| {
                        let mut now: Vec<Option<u32>> = list.iter().map(|&c| old_id(c)).collect();
                        now.sort_unstable();
                        let mut then: Vec<Option<u32>> = if layer == 0 {
                            before.l0.links(was).map(Some).collect()
                        } else {
                            before
                                .neighbours(was, layer)
                                .iter()
                                .map(|&c| Some(c))
                                .collect()
                        };
                        then.sort_unstable();
                        now != then
                    })
            })
            .collect();
        let edit = GraphEdit {
            inserted: inserted.len(),
            removed: removed.len(),
            relinked: changed.len(),
        };
        let Some(entry) = self.graph.entry else {
            return Ok(None);
        };
        let ids: Vec<u32> = changed
            .iter()
            .copied()
            .chain(live as u32..self.keys.len() as u32)
            .collect();
        let values: Vec<Vec<u8>> = ids
            .par_iter()
            .map(|&id| self.node_value(id))
            .collect::<Result<_>>()?;
        // A moved record is removed and inserted under the same key: one put.
        let again: std::collections::HashSet<&[u8]> =
            inserted.iter().map(|(k, _)| k.as_slice()).collect();
        let mut batch: Vec<prolly::Mutation> = removed
            .iter()
            .filter(|k| !again.contains(k.as_slice()))
            .map(|k| prolly::Mutation::Delete(k.clone()))
            .collect();
        batch.extend(
            ids.iter()
                .zip(values)
                .map(|(&id, v)| prolly::Mutation::Put(self.keys[id as usize].clone(), v)),
        );
        let tree = prolly::Tree::open(store, sidecar_tree_config(), Some(old.graph_root))?;
        let root = tree
            .batch(batch)?
            .root()
            .ok_or_else(|| Error::InvalidArgument("empty HNSW graph".into()))?;
        let manifest = self.manifest(source, root, entry)?;
        let manifest_cid = store.put(&manifest.encode()?)?;
        Ok(Some((
            HnswSidecar {
                manifest_cid,
                manifest,
            },
            edit,
        )))
    }
}
