//! Canonical PQ training (proximity-format.md 12.11).
//!
//! Subspace `s` covers `[⌊s·d/m⌋, ⌊(s+1)·d/m⌋)`. Initial centroids come from
//! XXH64 probing; each of `iterations` Lloyd rounds assigns every record to
//! its nearest centroid per subspace (squared L2 in f64, ties to the lowest
//! index) and moves every non-empty centroid to `fl32(sum / count)` with f64
//! sums in record order. The result is byte-identical with the reference.
//!
//! Speed without changing a bit: assignment first ranks all centroids with
//! the SIMD f32 kernel, then rescores canonically only the centroids whose
//! f32 distance lies within a proven error margin of the best one. For a
//! subspace of width `w`, any f32 evaluation order of `Σ (x−y)²` (with or
//! without FMA) is within relative error `(w + 3)·2⁻²⁴` of the exact value
//! (each term carries at most 3 roundings, a sum of `w` non-negative terms at
//! most `w − 1`, to first order), plus an absolute `w·2⁻¹⁴⁹`-scale term for
//! underflow. With `rel = (w + 4)·2⁻²³` (twice that) and `abs = w·1e-37`, a
//! centroid `j` that could beat the f32 winner `i` canonically satisfies
//! `f32_j ≤ (f32_i·(1+rel) + abs)·(1+rel) + abs`; all such `j` are rescored
//! canonically in index order. If any f32 distance is not finite (overflow),
//! the subspace is scanned canonically. Records are assigned in parallel;
//! sums run per subspace in parallel, each in record order.

use crate::error::{Error, Result};
use crate::numeric::kernel::fast_l2sq;
use crate::numeric::kmeans;
use rayon::prelude::*;

/// What to train: `m` subspaces of `k` centroids, `iterations` Lloyd
/// rounds, initial centroids seeded by `seed` (the training part of the
/// spec's `C_pq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Subspaces (1..=dimensions).
    pub(crate) m: usize,
    /// Centroids per subspace (1..=256).
    pub(crate) k: usize,
    /// Lloyd rounds (> 0).
    pub(crate) iterations: usize,
    /// Seed of the centroid initialisation.
    pub(crate) seed: u64,
}

/// Trained codebooks and codes.
#[derive(Debug, Clone)]
pub(crate) struct Trained {
    /// Per subspace: `k * width` centroid components, centroid-major.
    pub(crate) books: Vec<Vec<f32>>,
    /// `n * m` codes, record-major.
    pub(crate) codes: Vec<u8>,
    /// Mean squared reconstruction error.
    pub(crate) mse: f64,
    /// Maximum squared reconstruction error.
    pub(crate) max_se: f64,
}

/// Subspace bounds `[a, b)` for `m` subspaces of `d` dimensions.
pub(crate) fn layout(d: usize, m: usize) -> Vec<(usize, usize)> {
    (0..m).map(|s| (s * d / m, (s + 1) * d / m)).collect()
}

/// Canonical squared L2 of two slices (f64, in order).
#[inline]
fn canon_l2(a: &[f32], b: &[f32]) -> f64 {
    prox_kernels::canonical::l2sq(a, b)
}

/// Index of the canonical nearest centroid of `part` in `book` (`k`
/// centroids of `part.len()` components); `dists` is scratch of length `k`.
pub(crate) fn nearest(part: &[f32], book: &[f32], dists: &mut [f32]) -> usize {
    let w = part.len();
    let k = dists.len();
    for (j, d) in dists.iter_mut().enumerate() {
        *d = fast_l2sq(part, &book[j * w..(j + 1) * w]);
    }
    let (mut best_f, mut finite) = (f32::INFINITY, true);
    for &d in dists.iter() {
        finite &= d.is_finite();
        if d < best_f {
            best_f = d;
        }
    }
    let mut best = 0usize;
    let mut best_d = f64::INFINITY;
    if !finite {
        for j in 0..k {
            let d = canon_l2(part, &book[j * w..(j + 1) * w]);
            if d < best_d {
                best = j;
                best_d = d;
            }
        }
        return best;
    }
    let rel = (w as f64 + 4.0) * f64::powi(2.0, -23);
    let abs = w as f64 * 1e-37;
    let limit = (f64::from(best_f) * (1.0 + rel) + abs) * (1.0 + rel) + abs;
    for j in 0..k {
        if f64::from(dists[j]) <= limit {
            let d = canon_l2(part, &book[j * w..(j + 1) * w]);
            if d < best_d {
                best = j;
                best_d = d;
            }
        }
    }
    best
}

/// Assigns every record (parallel); `codes` is `n * m`.
fn assign<'a>(
    row: &(impl Fn(usize) -> &'a [f32] + Sync),
    lay: &[(usize, usize)],
    books: &[Vec<f32>],
    k: usize,
    codes: &mut [u8],
) {
    let m = lay.len();
    codes.par_chunks_mut(m).enumerate().for_each_init(
        || vec![0f32; k],
        |dists, (i, code)| {
            let v = row(i);
            for (s, &(a, b)) in lay.iter().enumerate() {
                code[s] = nearest(&v[a..b], &books[s], dists) as u8;
            }
        },
    );
}

/// Trains per 12.11 over the `n` records `row(0..n)` (key order) of `d`
/// dimensions.
pub(crate) fn train<'a>(
    n: usize,
    d: usize,
    row: impl Fn(usize) -> &'a [f32] + Sync,
    shape: &Shape,
) -> Result<Trained> {
    let Shape { m, k, .. } = *shape;
    if m == 0 || m > d || k == 0 || k > 256 || shape.iterations == 0 {
        return Err(Error::InvalidConfig(format!(
            "pq: cannot train {m} subspaces of {k} centroids over {d} dimensions in {} rounds",
            shape.iterations
        )));
    }
    if n == 0 || k > n {
        return Err(Error::InvalidConfig(format!(
            "pq: {k} centroids need at least as many records, have {n}"
        )));
    }
    let lay = layout(d, m);
    // 1-2: seeded initial centroids.
    let mut books: Vec<Vec<f32>> = Vec::with_capacity(m);
    for (s, &(a, b)) in lay.iter().enumerate() {
        let mut used: Vec<usize> = Vec::with_capacity(k);
        let mut book = Vec::with_capacity(k * (b - a));
        for j in 0..k {
            let mut pre = [0u8; 16];
            pre[..8].copy_from_slice(&(s as u64).to_le_bytes());
            pre[8..].copy_from_slice(&(j as u64).to_le_bytes());
            let start = (xxhash_rust::xxh64::xxh64(&pre, shape.seed) % n as u64) as usize;
            // k <= n, so a free index exists within n probes.
            let mut pick = start;
            for off in 0..n {
                pick = (start + off) % n;
                if !used.contains(&pick) {
                    break;
                }
            }
            used.push(pick);
            book.extend_from_slice(&row(pick)[a..b]);
        }
        books.push(book);
    }
    // 3: Lloyd rounds.
    let mut codes = vec![0u8; n * m];
    for _ in 0..shape.iterations {
        assign(&row, &lay, &books, k, &mut codes);
        books.par_iter_mut().enumerate().for_each(|(s, book)| {
            let (a, b) = lay[s];
            let members = (0..n).map(|i| (usize::from(codes[i * m + s]), &row(i)[a..b]));
            kmeans::update(members, book, b - a, true);
        });
    }
    // 4: final codes.
    assign(&row, &lay, &books, k, &mut codes);
    // 5: quality.
    let (mse, max_se) = quality(n, &row, &lay, &books, &codes);
    Ok(Trained {
        books,
        codes,
        mse,
        max_se,
    })
}

/// Codebooks trained by [`train`] on `rows` (each `dims` long), in the
/// `PQPQ` layout: per subspace, `centroids × width` floats, concatenated.
pub(crate) fn train_rows<'a>(
    dims: usize,
    rows: impl ExactSizeIterator<Item = &'a [f32]>,
    shape: &Shape,
) -> Result<Vec<f32>> {
    let rows: Vec<&[f32]> = rows.collect();
    let t = train(rows.len(), dims, |i| &rows[i][..dims], shape)?;
    Ok(t.books.concat())
}

/// Reconstruction quality (12.11 step 5): per record one f64 accumulator of
/// `(v − centroid)²` over all subspaces in order; returns (mean, max).
pub(crate) fn quality<'a>(
    n: usize,
    row: &(impl Fn(usize) -> &'a [f32] + Sync),
    lay: &[(usize, usize)],
    books: &[Vec<f32>],
    codes: &[u8],
) -> (f64, f64) {
    let m = lay.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let errs: Vec<f64> = (0..n)
        .into_par_iter()
        .map(|i| {
            let v = row(i);
            let mut err = 0f64;
            for (s, &(a, b)) in lay.iter().enumerate() {
                let w = b - a;
                let c = usize::from(codes[i * m + s]);
                for (o, &y) in books[s][c * w..(c + 1) * w].iter().enumerate() {
                    let dd = f64::from(v[a + o]) - f64::from(y);
                    err += dd * dd;
                }
            }
            err
        })
        .collect();
    let mut total = 0f64;
    let mut worst = 0f64;
    for &e in &errs {
        total += e;
        if e > worst {
            worst = e;
        }
    }
    (total / n as f64, worst)
}
