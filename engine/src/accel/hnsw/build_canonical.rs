//! Canonical HNSW construction (proximity-format.md 12.12, manifest flag
//! `01`): byte-identical with the reference.
//!
//! Records are processed in key order (= id order). Each insertion ranks
//! *all* earlier nodes, so the build is quadratic; the ranking scores of a
//! new node against every earlier node are computed in parallel with the
//! canonical f64 math, which is bit-exact, so the thread count cannot change
//! the result. Scores are symmetric bit-for-bit (`(a-b)² = (b-a)²` and
//! `a·b = b·a` in IEEE arithmetic), so the score a neighbour's list needs for
//! the new node is the one already computed, and each list caches its
//! members' scores.

use super::{node_level, BuildGraph};
use crate::accel::params::HnswParams;
use crate::accel::vectors::Arena;
use prox_kernels::{canonical, Metric};
use rayon::prelude::*;

/// Ranking key `(score, id)`; scores are finite and `+0`-normalised, so
/// `total_cmp` is numeric order.
fn rank(a: &(f64, u32), b: &(f64, u32)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// Builds the canonical graph over `keys`/`vectors` (ascending keys).
pub(super) fn build(
    metric: Metric,
    keys: &[Vec<u8>],
    vectors: &Arena,
    params: &HnswParams,
) -> BuildGraph {
    let n = keys.len();
    let m = usize::from(params.max_connections);
    let levels: Vec<u8> = keys
        .iter()
        .map(|k| node_level(k, params.level_bits, params.seed))
        .collect();
    // lists[node][layer]: (score to node, member id), ascending by id.
    let mut lists: Vec<Vec<Vec<(f64, u32)>>> = Vec::with_capacity(n);
    let mut scores = vec![0f64; n];
    let mut entry: Option<u32> = None;
    let mut top = 0u8;
    let mut cands: Vec<(f64, u32)> = Vec::new();
    for r in 0..n {
        let level = levels[r];
        let vr = vectors.row(r);
        scores[..r]
            .par_iter_mut()
            .with_min_len(256)
            .enumerate()
            .for_each(|(x, s)| *s = canonical::score(metric, vr, vectors.row(x)));
        let mut own: Vec<Vec<(f64, u32)>> = Vec::with_capacity(usize::from(level) + 1);
        for layer in 0..=level {
            cands.clear();
            cands.extend(
                (0..r)
                    .filter(|&x| levels[x] >= layer)
                    .map(|x| (scores[x], x as u32)),
            );
            if cands.len() > m {
                cands.select_nth_unstable_by(m - 1, rank);
                cands.truncate(m);
            }
            let mut list = cands.clone();
            list.sort_unstable_by_key(|c| c.1);
            own.push(list);
        }
        // Reverse updates: r joins each chosen neighbour's list if it ranks
        // among that node's best `m`.
        for (layer, list) in own.iter().enumerate() {
            for &(s, x) in list {
                let theirs = &mut lists[x as usize][layer];
                theirs.push((s, r as u32));
                if theirs.len() > m {
                    theirs.sort_unstable_by(rank);
                    theirs.truncate(m);
                }
                theirs.sort_unstable_by_key(|c| c.1);
            }
        }
        lists.push(own);
        // The reference's rule: the first record, replaced by any later
        // record of strictly greater level (an empty first key counts as
        // "no entry yet", as in the reference model).
        if entry.is_none_or(|e| keys[e as usize].is_empty()) || level > top {
            entry = Some(r as u32);
            top = level;
        }
    }
    BuildGraph {
        levels,
        links: lists
            .into_iter()
            .map(|node| {
                node.into_iter()
                    .map(|l| l.into_iter().map(|(_, id)| id).collect())
                    .collect()
            })
            .collect(),
        entry,
        max_level: top,
    }
}
