//! Top-k selection over `(rank, id)` candidate pairs, shared by the PQ fast
//! scan and the native adaptive search: both keep the best integer sums of a
//! scan, rescore them in f32 and keep the best `k` of those with their ties.
//! Every order is total (ties to the lower id), so results do not depend on
//! the order candidates arrived in.

/// Orders `(sum, id)` candidates (ties to the lower id).
#[inline]
fn cand_cmp(a: &(u16, u32), b: &(u16, u32)) -> std::cmp::Ordering {
    a.cmp(b)
}

/// Orders `(score, id)` pairs by score, then id (ties to the lower id).
pub(crate) fn rescored_cmp(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// Moves the best `k` of `rescored` by `(score, id)` to its front, followed
/// by every other entry tied with the `k`-th score, and returns how many
/// that is (all of them when there are at most `k`). Callers score those
/// canonically: the canonical top `k` is among them whenever the f32
/// ranking agrees with the canonical one up to ties.
pub(crate) fn best_with_ties(rescored: &mut [(f32, u32)], k: usize) -> usize {
    let mut keep = rescored.len();
    if k > 0 && k < keep {
        rescored.select_nth_unstable_by(k - 1, rescored_cmp);
        let kth = rescored[k - 1].0;
        keep = k;
        for i in k..rescored.len() {
            if rescored[i].0 == kth {
                rescored.swap(keep, i);
                keep += 1;
            }
        }
    }
    keep
}

/// Keeps the `depth` smallest candidates; returns the new admission bound.
pub(crate) fn shrink(cands: &mut Vec<(u16, u32)>, depth: usize) -> u16 {
    if cands.len() > depth {
        cands.select_nth_unstable_by(depth - 1, cand_cmp);
        cands.truncate(depth);
    }
    cands.iter().map(|c| c.0).max().unwrap_or(u16::MAX)
}
