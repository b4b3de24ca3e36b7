//! Key filters for accelerated search.
//!
//! Because [`SearchGraph`] numbers nodes in key order, a key range or prefix
//! is an id interval (two binary searches) and an eligible-key set is a
//! sorted id list plus a bitset for O(1) membership during traversal.

use super::graph::SearchGraph;
use crate::keys::{Filter, IdSet, KeySet};
use std::sync::Arc;

/// A filter resolved against one graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Ids `lo..hi` minus masked nodes.
    Interval(u32, u32),
    /// These ids (ascending, unmasked), with their bitset.
    Set(Arc<IdSet>),
}

/// Resolves `filter` against `g`. A key set's ids (masked nodes removed)
/// are computed once per graph and kept with the set, so every query
/// sharing the filter reuses them.
pub(crate) fn resolve(filter: &Filter, g: &SearchGraph) -> Resolved {
    let n = g.node_count() as u32;
    let Filter::Keys(keys) = filter else {
        // A range or a prefix: an id interval.
        let (start, end) = filter.interval().unwrap_or((&[], None));
        let lo = g.lower_bound(start);
        let hi = end.map_or(n, |e| g.lower_bound(&e));
        return Resolved::Interval(lo, hi.max(lo));
    };
    Resolved::Set(g.id_set(keys))
}

/// Number of unmasked ids in `lo..hi`.
pub(crate) fn interval_count(g: &SearchGraph, lo: u32, hi: u32) -> usize {
    let a = g.masked_ids.partition_point(|&m| m < lo);
    let b = g.masked_ids.partition_point(|&m| m < hi);
    (hi - lo) as usize - (b - a)
}

impl SearchGraph {
    /// The live node ids of `keys` (masked nodes removed), computed once
    /// per graph and kept with the key set for every query sharing it.
    pub(crate) fn id_set(&self, keys: &KeySet) -> Arc<IdSet> {
        let g = self;
        let n = g.node_count() as u32;
        // Keys ascending: each search starts where the last one ended.
        let ascending = keys.strictly_ascending();
        keys.ids_for(g.filter_owner, |keys| {
            let mut ids = Vec::with_capacity(keys.len());
            let mut from = 0u32;
            for k in keys {
                let id = g.lower_bound_from(if ascending { from } else { 0 }, k);
                // Masked duplicates of a key sort next to the live one.
                let mut j = id;
                while j < n && g.key(j) == k.as_slice() {
                    if !g.is_masked(j) {
                        ids.push(j);
                    }
                    j += 1;
                }
                from = id;
            }
            ids.sort_unstable();
            ids.dedup();
            IdSet::new(ids, n as usize)
        })
    }
}
