//! Assignment of the arena's records to frames: a seeded k-means
//! (`numeric::kmeans`) over a strided sample, every assignment through a
//! two-level index over the centroids.

use super::{LLOYD, TRAIN};
use crate::numeric::kmeans::{self, Empty, Shape};
use crate::proximity::search::arena::ScanArena;
use crate::proximity::search::node::Node;
use rayon::prelude::*;
use std::sync::Arc;

/// The nearest of the centroids `cands` by the deterministic f32 distance
/// (ties to the first listed, which callers keep ascending).
fn nearest(x: &[f32], cent: &[f32], d: usize, cands: impl IntoIterator<Item = usize>) -> u32 {
    let mut best = (f32::INFINITY, u32::MAX);
    for j in cands {
        let dist = prox_kernels::det::l2sq(x, &cent[j * d..(j + 1) * d]);
        if dist < best.0 || best.1 == u32::MAX {
            best = (dist, j as u32);
        }
    }
    best.1
}

/// A two-level index over frame centroids for assignment: the centroids
/// clustered into about `√k` groups; a vector is compared with every group
/// centre, then with the centroids of its [`PROBE`] nearest groups.
struct Coarse {
    cent: Vec<f32>,
    members: Vec<Vec<usize>>,
}

/// Groups a vector's assignment looks into.
const PROBE: usize = 3;

impl Coarse {
    fn build(cent: &[f32], d: usize) -> Coarse {
        let k = cent.len() / d;
        let g = ((k as f64).sqrt().ceil() as usize).clamp(1, k);
        let rows: Vec<usize> = (0..k).collect();
        let row = |r: usize| &cent[r * d..(r + 1) * d];
        let mut gc: Vec<f32> = (0..g)
            .flat_map(|j| row(j * k / g).iter().copied())
            .collect();
        kmeans::lloyd(
            &rows,
            &row,
            &mut gc,
            d,
            LLOYD,
            |_| (),
            |_, x, c| nearest(x, c, d, 0..g),
            Empty::Keep,
            Shape::Mean,
        );
        let mut members = vec![Vec::new(); g];
        for r in 0..k {
            members[nearest(row(r), &gc, d, 0..g) as usize].push(r);
        }
        Coarse { cent: gc, members }
    }

    /// The nearest frame centroid of `x` among the [`PROBE`] nearest
    /// groups' members (ties to the lower frame).
    fn nearest(&self, x: &[f32], cent: &[f32], d: usize) -> u32 {
        let g = self.members.len();
        let mut near: Vec<(f32, usize)> = (0..g)
            .map(|j| {
                (
                    prox_kernels::det::l2sq(x, &self.cent[j * d..(j + 1) * d]),
                    j,
                )
            })
            .collect();
        let t = PROBE.min(g);
        near.select_nth_unstable_by(t - 1, |a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut best = (f32::INFINITY, u32::MAX);
        for &(_, j) in &near[..t] {
            for &f in &self.members[j] {
                let dist = prox_kernels::det::l2sq(x, &cent[f * d..(f + 1) * d]);
                if dist < best.0 || (dist == best.0 && (f as u32) < best.1) {
                    best = (dist, f as u32);
                }
            }
        }
        best.1
    }
}

/// Frames of the arena's records: `nf` centroids from a strided sample
/// refined by [`LLOYD`] rounds, then every record's nearest centroid, both
/// through a [`Coarse`] index rebuilt from the current centroids.
pub(super) fn cluster(
    arena: &ScanArena,
    pages: &[Arc<Node>],
    d: usize,
    n: usize,
    nf: usize,
) -> Vec<u32> {
    let ns = n.min(TRAIN * nf).max(nf);
    let rows: Vec<usize> = (0..ns).map(|i| i * n / ns).collect();
    let row = |r: usize| arena.record(pages, r, d);
    let mut cent: Vec<f32> = (0..nf)
        .flat_map(|j| row(rows[j * ns / nf]).iter().copied())
        .collect();
    for _ in 0..LLOYD {
        let coarse = Coarse::build(&cent, d);
        kmeans::lloyd(
            &rows,
            &row,
            &mut cent,
            d,
            1,
            |_| (),
            |_, x, c| coarse.nearest(x, c, d),
            Empty::Keep,
            Shape::Mean,
        );
    }
    let coarse = Coarse::build(&cent, d);
    let parts: Vec<Vec<u32>> = pages
        .par_iter()
        .map(|p| {
            (0..p.len)
                .map(|e| coarse.nearest(p.vector(e, d), &cent, d))
                .collect()
        })
        .collect();
    parts.concat()
}
