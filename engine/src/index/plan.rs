//! The filter planner: how a filtered query runs.
//!
//! A field or boolean filter is first resolved to the exact key set it
//! admits, read from the map's secondary indexes
//! ([`crate::secondary::eval`]); its length is the eligible count. Then:
//!
//! * **Small** (no budget, and `eligible <= max(DIRECT_MIN, DIRECT_PER_K ·
//!   k)`, or on path `auto` when a loaded HNSW or PQ sidecar holds every
//!   vector up to `max(2048, n / DIRECT_FRACTION)`, or up to 2048 when the
//!   filtered PQ plan applies, its masked fast scan being faster on larger
//!   sets): the eligible records are scored directly, from
//!   the sidecar's vectors (the fast kernel ranks all of them, the best are
//!   rescored canonically) or else read from the directory. That is the
//!   exact filtered top k in every mode, cheaper than any traversal for so
//!   few records. The key set's ids in the sidecar are computed once and
//!   kept with the set ([`crate::keys::KeySet::ids_for`]).
//! * **Large**: the route of [`crate::index`] picks the path (native, HNSW,
//!   PQ; the accel planner sends sets up to `n/8` to a 4-bit PQ sidecar's
//!   fast scan, and sets up to `max(2048, n/16)` otherwise to the native
//!   search, which only happens without sidecars) and the search takes the
//!   key set as its eligibility filter: native search prunes subtrees by
//!   key bounds and gates records by key, HNSW keeps traversing through
//!   ineligible nodes with a bitset and lets only eligible ones into its
//!   `ef` results, PQ scans only eligible codes.
//! * **Never under-filled**: when a path that is not budget-capped returns
//!   fewer than `min(k, eligible)` hits, the query is answered by direct
//!   scoring instead.
//!
//! Mode `exact` therefore returns exactly the brute-force filtered top k
//! (direct scoring or the native exact search, both canonical).

use super::request::{PathChoice, Request};
use crate::accel::SMALL_ELIGIBLE;
use crate::keys::{Filter, KeySet};

/// Eligible sets at most this large (or [`DIRECT_PER_K`]`· k`) are scored
/// directly.
pub(crate) const DIRECT_MIN: usize = 1024;

/// Per requested hit, eligible records scored directly.
pub(crate) const DIRECT_PER_K: usize = 32;

/// Eligible sets at most `records / DIRECT_FRACTION` are scored directly
/// when a sidecar holds the vectors (the accel planner's bound for leaving
/// the sidecar paths).
pub(crate) const DIRECT_FRACTION: usize = 16;

/// Where a map's vectors are loaded for direct scoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loaded {
    /// Only in the directory.
    Directory,
    /// In a loaded sidecar.
    InMemory,
    /// In a loaded sidecar, and a 4-bit PQ sidecar's masked fast scan takes
    /// mid-sized sets (the accel planner's filtered PQ rule).
    FastScan,
}

/// The eligible key set of a resolved request when it is scored directly
/// (see the module docs); `None` otherwise. With the vectors in memory
/// and path `auto`, sets up to [`SMALL_ELIGIBLE`] are too, and up to
/// `records / DIRECT_FRACTION` unless a fast scan takes the larger ones.
pub(crate) fn direct_keys(req: &Request, records: usize, loaded: Loaded) -> Option<&KeySet> {
    let mut limit = DIRECT_MIN.max(DIRECT_PER_K * req.k);
    // A path the caller names keeps mid-sized sets (its own search decides).
    if req.path == PathChoice::Auto {
        limit = match loaded {
            Loaded::Directory => limit,
            Loaded::InMemory => limit.max(SMALL_ELIGIBLE).max(records / DIRECT_FRACTION),
            Loaded::FastScan => limit.max(SMALL_ELIGIBLE),
        };
    }
    match &req.filter {
        Some(Filter::Keys(keys)) if req.budget.is_none() && keys.len() <= limit => Some(keys),
        _ => None,
    }
}

/// The eligible key set of a resolved request when a search returning
/// `got` hits under-filled it (and no budget excuses that); `None`
/// otherwise.
pub(crate) fn under_filled(req: &Request, got: usize) -> Option<&KeySet> {
    match &req.filter {
        Some(Filter::Keys(keys)) if req.budget.is_none() && got < req.k.min(keys.len()) => {
            Some(keys)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_sets_go_direct_and_short_answers_fall_back() {
        let keys =
            |n: usize| Filter::keys((0..n as u32).map(|i| i.to_be_bytes().to_vec()).collect());
        let small = Request::new(10).filter(keys(DIRECT_MIN));
        assert_eq!(
            direct_keys(&small, 0, Loaded::Directory).map(|k| k.len()),
            Some(DIRECT_MIN)
        );
        // With the vectors in memory, up to 2048 or 1/16 of the map.
        let at = Request::new(10).filter(keys(SMALL_ELIGIBLE));
        assert!(direct_keys(&at, 1000, Loaded::InMemory).is_some());
        let mid = Request::new(10).filter(keys(4096));
        assert!(direct_keys(&mid, 65_536, Loaded::InMemory).is_some());
        assert!(direct_keys(&mid, 65_535, Loaded::InMemory).is_none());
        assert!(direct_keys(&mid, 65_536, Loaded::Directory).is_none());
        let hnsw = mid.clone().path(PathChoice::Hnsw);
        assert!(direct_keys(&hnsw, 65_536, Loaded::InMemory).is_none());
        // A fast scan takes sets past 2048 however large the map.
        assert!(direct_keys(&mid, 1 << 20, Loaded::FastScan).is_none());
        assert!(direct_keys(&at, 1 << 20, Loaded::FastScan).is_some());
        assert!(direct_keys(
            &Request::new(10).filter(keys(DIRECT_MIN + 1)),
            0,
            Loaded::Directory
        )
        .is_none());
        // The limit grows with k.
        let big_k = Request::new(100).filter(keys(DIRECT_MIN + 1));
        assert!(direct_keys(&big_k, 0, Loaded::Directory).is_some());
        // A budget keeps the native budgeted search.
        assert!(direct_keys(&small.clone().budget(5), 0, Loaded::Directory).is_none());
        assert!(direct_keys(&Request::new(10), 0, Loaded::Directory).is_none());
        let r = Request::new(10).filter(keys(5));
        assert!(under_filled(&r, 4).is_some() && under_filled(&r, 5).is_none());
        let r = Request::new(10).filter(keys(5000));
        assert!(under_filled(&r, 9).is_some() && under_filled(&r, 10).is_none());
    }
}
