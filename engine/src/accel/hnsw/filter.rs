//! Key filters for accelerated search.
//!
//! Because [`SearchGraph`] numbers nodes in key order, a key range or prefix
//! is an id interval (two binary searches) and an eligible-key set is a
//! sorted id list plus a bitset for O(1) membership during traversal.

use super::graph::SearchGraph;
use crate::keys::Filter;

/// A filter resolved against one graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Ids `lo..hi` minus masked nodes.
    Interval(u32, u32),
    /// The ids in the context's `set_ids` (ascending, unmasked), also set in
    /// its bitset.
    Set,
}

/// Resolves `filter` against `g`. For sets, fills `set_ids` (sorted,
/// deduplicated, masked nodes removed; the keys may come in any order) and
/// sets their bits in `bits` (which must be all zero and is grown to cover
/// the graph).
pub(crate) fn resolve(
    filter: &Filter,
    g: &SearchGraph,
    set_ids: &mut Vec<u32>,
    bits: &mut Vec<u64>,
) -> Resolved {
    let n = g.node_count() as u32;
    let Filter::Keys(keys) = filter else {
        // A range or a prefix: an id interval.
        let (start, end) = filter.interval().unwrap_or((&[], None));
        let lo = g.lower_bound(start);
        let hi = end.map_or(n, |e| g.lower_bound(&e));
        return Resolved::Interval(lo, hi.max(lo));
    };
    set_ids.clear();
    for k in keys {
        let id = g.lower_bound(k);
        // Masked duplicates of a key sort next to the live one.
        let mut j = id;
        while j < n && g.key(j) == k.as_slice() {
            if !g.is_masked(j) {
                set_ids.push(j);
            }
            j += 1;
        }
    }
    set_ids.sort_unstable();
    set_ids.dedup();
    let words = (n as usize).div_ceil(64);
    if bits.len() < words {
        bits.resize(words, 0);
    }
    for &id in set_ids.iter() {
        bits[id as usize / 64] |= 1u64 << (id % 64);
    }
    Resolved::Set
}

/// Number of unmasked ids in `lo..hi`.
pub(crate) fn interval_count(g: &SearchGraph, lo: u32, hi: u32) -> usize {
    let a = g.masked_ids.partition_point(|&m| m < lo);
    let b = g.masked_ids.partition_point(|&m| m < hi);
    (hi - lo) as usize - (b - a)
}
