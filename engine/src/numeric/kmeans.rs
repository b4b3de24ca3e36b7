//! Lloyd's k-means, the one implementation behind every clustering in the
//! engine: PQ codebooks (spec 12.11, `numeric::pq`), the PQ fast scan's
//! coarse lists, the exact-L2 frames and the adaptive search's sub-lists.
//!
//! Callers choose what differs between them and nothing else: the initial
//! centroids, the rows and their order, the assignment rule (each brings
//! its own distance and tie rule) and what an empty cluster does.
//!
//! * Over f32 rows ([`lloyd`], [`update`]): each round assigns every row in
//!   parallel, then sums the members of each cluster in f64 in row order
//!   and moves every cluster with members to `fl32(sum / count)`. The sums
//!   never depend on the thread count, so neither do the centroids.
//! * Over i8 codes ([`lloyd_codes`]): integer distances and integer sums,
//!   means rounded half away from zero, bit-exact on every ISA.

use rayon::prelude::*;

/// What a round does with a cluster no row was assigned to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Empty {
    /// The cluster keeps its centroid.
    Keep,
    /// The cluster splits the largest one (first largest on ties) unless
    /// that one has fewer than two members: both centroids move apart by
    /// a relative 1/1024 with alternating signs per component.
    SplitLargest,
}

/// Moves every cluster with members to the mean of its rows and returns
/// the member count of each cluster. `rows` yields `(cluster, row)` pairs;
/// the f64 sums run in that order. With `positive_zero` a mean that rounds
/// to zero is written as `+0.0` (the canonical PQ rule, 12.11); otherwise
/// it keeps the sign the division gives it.
pub(crate) fn update<'a>(
    rows: impl IntoIterator<Item = (usize, &'a [f32])>,
    cent: &mut [f32],
    d: usize,
    positive_zero: bool,
) -> Vec<usize> {
    let k = cent.len().checked_div(d).unwrap_or(0);
    let mut sums = vec![0f64; k * d];
    let mut counts = vec![0usize; k];
    for (c, v) in rows {
        counts[c] += 1;
        for (s, &x) in sums[c * d..(c + 1) * d].iter_mut().zip(v) {
            *s += f64::from(x);
        }
    }
    for (j, &n) in counts.iter().enumerate() {
        if n > 0 {
            for (o, s) in cent[j * d..(j + 1) * d]
                .iter_mut()
                .zip(&sums[j * d..(j + 1) * d])
            {
                let val = (s / n as f64) as f32;
                *o = if positive_zero && val == 0.0 {
                    0.0
                } else {
                    val
                };
            }
        }
    }
    counts
}

/// What a round does with the centroids after moving them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Centroids are the members' means.
    Mean,
    /// Spherical k-means: every mean is scaled to unit L2 norm (the norm
    /// summed in f64 in component order; a zero mean stays zero). For
    /// inner-product data the nearest unit centroid by L2 is the one with
    /// the largest inner product, so assignment and probing agree.
    Unit,
}

/// Scales every `d`-component row of `cent` to unit L2 norm ([`Shape::Unit`]).
pub(crate) fn normalize(cent: &mut [f32], d: usize) {
    if d == 0 {
        return;
    }
    for c in cent.chunks_exact_mut(d) {
        let norm = c
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt();
        if norm > 0.0 && norm.is_finite() {
            for x in c.iter_mut() {
                *x = (f64::from(*x) / norm) as f32;
            }
        }
    }
}

/// `rounds` Lloyd rounds over `rows` (indexes read through `row`, summed in
/// the order given) on the centroids `cent` (`k × d`, initialised by the
/// caller). Each round first calls `prepare(cent)` once (an index of the
/// current centroids, or `()`), then `assign(&prepared, row, cent)` names
/// the cluster of every row; empty clusters follow `empty`; `shape` says
/// what becomes of each mean.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lloyd<'a, P: Sync>(
    rows: &[usize],
    row: &(impl Fn(usize) -> &'a [f32] + Sync),
    cent: &mut [f32],
    d: usize,
    rounds: usize,
    prepare: impl Fn(&[f32]) -> P,
    assign: impl Fn(&P, &[f32], &[f32]) -> u32 + Sync,
    empty: Empty,
    shape: Shape,
) {
    for _ in 0..rounds {
        let prepared = prepare(cent);
        let of: Vec<u32> = rows
            .par_iter()
            .map(|&r| assign(&prepared, row(r), cent))
            .collect();
        let mut counts = update(
            rows.iter().zip(&of).map(|(&r, &a)| (a as usize, row(r))),
            cent,
            d,
            false,
        );
        if empty == Empty::SplitLargest {
            split_empty(cent, d, &mut counts);
        }
        if shape == Shape::Unit {
            normalize(cent, d);
        }
    }
}

/// [`Empty::SplitLargest`] for every empty cluster, in index order.
fn split_empty(cent: &mut [f32], d: usize, counts: &mut [usize]) {
    let k = counts.len();
    for l in 0..k {
        if counts[l] > 0 {
            continue;
        }
        let big = (0..k).fold(0, |b, j| if counts[j] > counts[b] { j } else { b });
        if counts[big] < 2 {
            break;
        }
        for x in 0..d {
            let v = cent[big * d + x];
            let e = v / 1024.0 * if x % 2 == 0 { 1.0 } else { -1.0 };
            cent[l * d + x] = v + e;
            cent[big * d + x] = v - e;
        }
        counts[l] = counts[big] / 2;
        counts[big] -= counts[l];
    }
}

/// Clusters of i8 codes: centroid codes (cluster-major) and, per non-empty
/// cluster, its members as row indexes (ascending).
#[derive(Debug)]
pub(crate) struct CodeClusters {
    /// Centroid codes of the non-empty clusters, cluster-major.
    pub(crate) cent: Vec<i8>,
    /// Members of each non-empty cluster, ascending.
    pub(crate) members: Vec<Vec<u32>>,
}

/// `round(num / den)`, halves away from zero, for `den > 0`.
#[inline]
pub(crate) fn round_div(num: i64, den: i64) -> i64 {
    if num >= 0 {
        (2 * num + den) / (2 * den)
    } else {
        -((-2 * num + den) / (2 * den))
    }
}

/// `Σ c_i²` of a code.
pub(crate) fn code_norm(c: &[i8]) -> i64 {
    c.iter().map(|&v| i64::from(v) * i64::from(v)).sum()
}

/// Integer k-means of the `m = norms.len()` codes `codes` (`m × d`, norms
/// `Σ x_i²`) into `c` clusters (`2 <= c <= m`, `d > 0`): seeds are the rows
/// at evenly spaced positions (`j·m / c`), squared code distances come from
/// [`prox_kernels::i8scan::dots`] (bit-exact on every ISA), ties go to the
/// lowest cluster, centroids are the members' mean codes
/// ([`mean_codes`]), an empty cluster keeps its centroid and is dropped
/// from the result, and the rounds stop after `rounds` or when no
/// assignment changes.
pub(crate) fn lloyd_codes(
    codes: &[i8],
    norms: &[i32],
    d: usize,
    c: usize,
    rounds: usize,
) -> CodeClusters {
    let m = norms.len();
    let mut cent = Vec::with_capacity(c * d);
    for j in 0..c {
        let r = j * m / c;
        cent.extend_from_slice(&codes[r * d..(r + 1) * d]);
    }
    let mut assign = vec![u32::MAX; m];
    let mut best = vec![i64::MAX; m];
    let mut dots = vec![0i32; m];
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); c];
    for _ in 0..rounds {
        best.fill(i64::MAX);
        let mut next = vec![0u32; m];
        for j in 0..c {
            let cj = &cent[j * d..(j + 1) * d];
            let cn = code_norm(cj);
            prox_kernels::i8scan::dots(cj, codes, &mut dots);
            for i in 0..m {
                let dist = i64::from(norms[i]) + cn - 2 * i64::from(dots[i]);
                if dist < best[i] {
                    best[i] = dist;
                    next[i] = j as u32;
                }
            }
        }
        let changed = next != assign;
        assign = next;
        members.iter_mut().for_each(Vec::clear);
        for (i, &j) in assign.iter().enumerate() {
            members[j as usize].push(i as u32);
        }
        // Centroids follow the members (empty clusters keep theirs and are
        // dropped below).
        let means = mean_codes(codes, d, &members);
        for (j, mem) in members.iter().enumerate() {
            if !mem.is_empty() {
                cent[j * d..(j + 1) * d].copy_from_slice(&means[j * d..(j + 1) * d]);
            }
        }
        if !changed {
            break;
        }
    }
    let mut out = CodeClusters {
        cent: Vec::new(),
        members: Vec::new(),
    };
    for (j, mem) in members.into_iter().enumerate() {
        if !mem.is_empty() {
            out.cent.extend_from_slice(&cent[j * d..(j + 1) * d]);
            out.members.push(mem);
        }
    }
    out
}

/// The rounded mean code of each member list (zeros for an empty one).
/// Means of codes in `−127..=127` stay in that range.
pub(crate) fn mean_codes(codes: &[i8], d: usize, members: &[Vec<u32>]) -> Vec<i8> {
    let mut out = vec![0i8; members.len() * d];
    let mut sum = vec![0i64; d];
    for (j, mem) in members.iter().enumerate() {
        if mem.is_empty() {
            continue;
        }
        sum.fill(0);
        for &i in mem {
            let i = i as usize;
            for (s, &v) in sum.iter_mut().zip(&codes[i * d..(i + 1) * d]) {
                *s += i64::from(v);
            }
        }
        let n = mem.len() as i64;
        for (o, &s) in out[j * d..(j + 1) * d].iter_mut().zip(&sum) {
            *o = round_div(s, n).clamp(-127, 127) as i8;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_div_halves_away_from_zero() {
        assert_eq!(round_div(5, 2), 3);
        assert_eq!(round_div(-5, 2), -3);
        assert_eq!(round_div(4, 3), 1);
        assert_eq!(round_div(-4, 3), -1);
        assert_eq!(round_div(0, 7), 0);
        assert_eq!(round_div(-254, 2), -127);
    }

    /// `rounds` of [`lloyd`] over the 2-d `rows` (all of them, in order)
    /// with `assign(row, centroids)` and no per-round index.
    fn run(
        rows: &[[f32; 2]],
        cent: &mut [f32],
        rounds: usize,
        assign: impl Fn(&[f32], &[f32]) -> u32 + Sync,
        empty: Empty,
        shape: Shape,
    ) {
        let order: Vec<usize> = (0..rows.len()).collect();
        let row = |r: usize| &rows[r][..];
        lloyd(
            &order,
            &row,
            cent,
            2,
            rounds,
            |_| (),
            |_, x, c| assign(x, c),
            empty,
            shape,
        );
    }

    /// Two separated groups of rows, seeded with one row of each: the
    /// rounds move each centroid to its group's mean.
    #[test]
    fn lloyd_converges_to_group_means() {
        let rows = [[0.0, 0.0], [0.0, 2.0], [10.0, 0.0], [10.0, 2.0]];
        let nearest = |x: &[f32], c: &[f32]| {
            let d0 = prox_kernels::det::l2sq(x, &c[..2]);
            let d1 = prox_kernels::det::l2sq(x, &c[2..]);
            u32::from(d1 < d0)
        };
        let mut cent = vec![0.0, 0.0, 10.0, 0.0];
        run(&rows, &mut cent, 3, nearest, Empty::Keep, Shape::Mean);
        assert_eq!(cent, vec![0.0, 1.0, 10.0, 1.0]);
    }

    /// An empty cluster takes half of the largest one with the documented
    /// perturbation; with `Keep` it stays where it was.
    #[test]
    fn empty_clusters_keep_or_split() {
        let rows = [[4.0, 8.0]; 4];
        let mut cent = vec![4.0, 8.0, 100.0, 100.0];
        run(&rows, &mut cent, 1, |_, _| 0, Empty::Keep, Shape::Mean);
        assert_eq!(cent, vec![4.0, 8.0, 100.0, 100.0]);
        run(
            &rows,
            &mut cent,
            1,
            |_, _| 0,
            Empty::SplitLargest,
            Shape::Mean,
        );
        let e = [4.0f32 / 1024.0, -8.0 / 1024.0];
        assert_eq!(cent, vec![4.0 - e[0], 8.0 - e[1], 4.0 + e[0], 8.0 + e[1]]);
    }

    /// `Shape::Unit` scales each mean to unit norm; a zero mean stays zero.
    #[test]
    fn unit_shape_normalizes_every_mean() {
        let rows = [[3.0, 4.0], [6.0, 8.0], [1.0, -1.0], [-1.0, 1.0]];
        let mut cent = vec![3.0, 4.0, 1.0, -1.0];
        let assign = |x: &[f32], _: &[f32]| u32::from(x[0] * x[1] < 0.0);
        run(&rows, &mut cent, 1, assign, Empty::Keep, Shape::Unit);
        assert_eq!(cent, vec![0.6, 0.8, 0.0, 0.0]);
    }

    #[test]
    fn positive_zero_only_when_asked() {
        let rows = [(0usize, &[-1e-45f32][..]), (0, &[0.0][..])];
        let mut cent = vec![1.0f32];
        update(rows, &mut cent, 1, false);
        assert!(cent[0] == 0.0 && cent[0].is_sign_negative());
        update(rows, &mut cent, 1, true);
        assert!(cent[0] == 0.0 && cent[0].is_sign_positive());
    }
}
