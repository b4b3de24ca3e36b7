//! Key filters for accelerated search.
//!
//! Because [`SearchGraph`] numbers nodes in key order, a key range or prefix
//! is an id interval (two binary searches) and an eligible-key set is a
//! sorted id list plus a bitset for O(1) membership during traversal.

use super::graph::SearchGraph;

/// Restricts results to eligible keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Keys in `[start, end)`; `None` is unbounded on that side.
    Range {
        /// Inclusive lower bound.
        start: Option<Vec<u8>>,
        /// Exclusive upper bound.
        end: Option<Vec<u8>>,
    },
    /// Keys starting with these bytes.
    Prefix(Vec<u8>),
    /// Exactly these keys (any order, duplicates and unknown keys ignored).
    Keys(Vec<Vec<u8>>),
}

/// Smallest key greater than every key with prefix `p`, or `None` if no such
/// key exists (`p` empty or all `0xff`).
pub(crate) fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A filter resolved against one graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Ids `lo..hi` minus masked nodes.
    Interval(u32, u32),
    /// The ids in the context's `set_ids` (ascending, unmasked), also set in
    /// its bitset.
    Set,
}

impl Filter {
    /// Resolves against `g`. For sets, fills `set_ids` (sorted, deduplicated,
    /// masked nodes removed) and sets their bits in `bits` (which must be all
    /// zero and is grown to cover the graph).
    pub(crate) fn resolve(
        &self,
        g: &SearchGraph,
        set_ids: &mut Vec<u32>,
        bits: &mut Vec<u64>,
    ) -> Resolved {
        let n = g.node_count() as u32;
        match self {
            Filter::Range { start, end } => {
                let lo = start.as_deref().map_or(0, |s| g.lower_bound(s));
                let hi = end.as_deref().map_or(n, |e| g.lower_bound(e));
                Resolved::Interval(lo, hi.max(lo))
            }
            Filter::Prefix(p) => {
                let lo = g.lower_bound(p);
                let hi = prefix_end(p).map_or(n, |e| g.lower_bound(&e));
                Resolved::Interval(lo, hi.max(lo))
            }
            Filter::Keys(keys) => {
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
        }
    }
}

/// Number of unmasked ids in `lo..hi`.
pub(crate) fn interval_count(g: &SearchGraph, lo: u32, hi: u32) -> usize {
    let a = g.masked_ids.partition_point(|&m| m < lo);
    let b = g.masked_ids.partition_point(|&m| m < hi);
    (hi - lo) as usize - (b - a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_rules() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
