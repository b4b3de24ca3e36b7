//! Distance kernels of the accelerators and the native search, in two roles
//! that never mix.
//!
//! * [`det_score`]: a *deterministic* f32 score used by every builder whose
//!   output is persisted (the fast HNSW build): `prox_kernels::det`, which
//!   accumulates in 16 fixed lanes (lane `i` sums components `i, i+16, ...`),
//!   adds the tail into lanes `0..tail`, then reduces the lanes with a fixed
//!   tree, multiplying and adding separately (no FMA). Every ISA tier
//!   (AVX2 included) performs exactly these operations, so the result is
//!   bit-identical on every machine, ISA and thread count.
//! * [`fast_score`]: the fastest available ranking score (SIMD kernels of
//!   `prox_kernels`, dispatched at run time). Only queries use it; nothing
//!   derived from it is persisted, and every reported score is rescored with
//!   `prox_kernels::canonical::score`.
//!
//! Both return "lower is better" scores with the ordering semantics of the
//! spec for prepared vectors: L2 -> squared distance, cosine -> `1 - dot`
//! (unit vectors), inner product -> `-dot`.

use prox_kernels::Metric;

/// Deterministic f32 dot product (`prox_kernels::det`: 16 fixed lanes, no
/// FMA, fixed reduction tree; AVX2 inside, bit-identical on every ISA).
#[inline]
pub(crate) fn det_dot(a: &[f32], b: &[f32]) -> f32 {
    prox_kernels::det::dot(a, b)
}

/// Deterministic f32 squared Euclidean distance (see [`det_dot`]).
#[inline]
pub(crate) fn det_l2sq(a: &[f32], b: &[f32]) -> f32 {
    prox_kernels::det::l2sq(a, b)
}

/// Deterministic ranking score (lower is better); see the module docs.
#[inline]
pub(crate) fn det_score(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::L2 => det_l2sq(a, b),
        Metric::Cosine => 1.0 - det_dot(a, b),
        Metric::InnerProduct => -det_dot(a, b),
    }
}

/// Fastest available ranking score (lower is better). Not deterministic
/// across ISAs: use only to rank query candidates.
#[inline]
pub(crate) fn fast_score(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    prox_kernels::f32::score(metric, a, b)
}

/// Squared L2 in f32 for PQ shortlists; see `pq::train` for the error margin
/// argument that makes any summation order acceptable there.
#[inline]
pub(crate) fn fast_l2sq(a: &[f32], b: &[f32]) -> f32 {
    prox_kernels::f32::l2sq(a, b)
}

/// Canonical scores of `q` against the rows of `ids` (read through `row`),
/// four sequential chains at a time (`prox_kernels::canonical::scores`,
/// bit-identical to scoring one by one), handed to `each(id, score)` in
/// order. Works in fixed stack buffers: no allocation per query.
pub(crate) fn canonical_each<'a>(
    metric: Metric,
    q: &[f32],
    ids: impl IntoIterator<Item = u32>,
    row: impl Fn(u32) -> &'a [f32],
    mut each: impl FnMut(u32, f64),
) {
    const CHUNK: usize = 16;
    let mut rows: [&[f32]; CHUNK] = [&[]; CHUNK];
    let mut idx = [0u32; CHUNK];
    let mut out = [0f64; CHUNK];
    let mut n = 0;
    let mut flush = |n: usize, rows: &[&[f32]], idx: &[u32], out: &mut [f64]| {
        prox_kernels::canonical::scores(metric, q, &rows[..n], &mut out[..n]);
        for (&id, &s) in idx[..n].iter().zip(&out[..n]) {
            each(id, s);
        }
    };
    for id in ids {
        rows[n] = row(id);
        idx[n] = id;
        n += 1;
        if n == CHUNK {
            flush(n, &rows, &idx, &mut out);
            n = 0;
        }
    }
    if n > 0 {
        flush(n, &rows, &idx, &mut out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `canonical_each` hands every id its canonical score, in order, for
    /// counts around the 16-row buffer.
    #[test]
    fn canonical_each_equals_canonical_score() {
        let mut rng = prox_testkit::SplitMix64::new(prox_testkit::seed(0xca_0e));
        let rows: Vec<Vec<f32>> = (0..40)
            .map(|_| (0..13).map(|_| rng.unit()).collect())
            .collect();
        let q: Vec<f32> = (0..13).map(|_| rng.unit()).collect();
        for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
            for n in [0usize, 1, 15, 16, 17, 33, 40] {
                let ids: Vec<u32> = (0..n as u32).rev().collect();
                let mut got = Vec::new();
                canonical_each(
                    metric,
                    &q,
                    ids.iter().copied(),
                    |i| &rows[i as usize],
                    |i, s| got.push((i, s.to_bits())),
                );
                let want: Vec<(u32, u64)> = ids
                    .iter()
                    .map(|&i| {
                        (
                            i,
                            prox_kernels::canonical::score(metric, &q, &rows[i as usize]).to_bits(),
                        )
                    })
                    .collect();
                assert_eq!(got, want, "{metric:?} n={n}");
            }
        }
    }

    /// The dispatched form must equal the plain 16-lane array form bit for
    /// bit (the order the persisted fast build depends on).
    fn lanes_dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; 16];
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            acc[i % 16] += x * y;
        }
        let mut width = 8;
        while width > 0 {
            for i in 0..width {
                acc[i] += acc[i + width];
            }
            width /= 2;
        }
        acc[0]
    }

    #[test]
    fn vector_form_equals_lane_form() {
        for dims in [1usize, 15, 16, 17, 32, 33, 100, 384, 385] {
            let a: Vec<f32> = (0..dims)
                .map(|i| ((i * 7919 % 101) as f32 - 50.0) / 13.0)
                .collect();
            let b: Vec<f32> = (0..dims)
                .map(|i| ((i * 104_729 % 97) as f32 - 48.0) / 7.0)
                .collect();
            assert_eq!(
                det_dot(&a, &b).to_bits(),
                lanes_dot(&a, &b).to_bits(),
                "dims {dims}"
            );
        }
    }

    #[test]
    fn deterministic_kernels_match_f64_closely() {
        for dims in [0usize, 1, 15, 16, 17, 31, 33, 100, 384] {
            let a: Vec<f32> = (0..dims)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0)
                .collect();
            let b: Vec<f32> = (0..dims)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0)
                .collect();
            let exact_dot = prox_kernels::canonical::dot(&a, &b);
            let exact_l2 = prox_kernels::canonical::l2sq(&a, &b);
            let tol = 1e-5 * (1.0 + dims as f64);
            assert!(
                (f64::from(det_dot(&a, &b)) - exact_dot).abs() <= tol,
                "dims {dims}"
            );
            assert!((f64::from(det_l2sq(&a, &b)) - exact_l2).abs() <= tol * exact_l2.max(1.0));
            assert_eq!(det_score(Metric::InnerProduct, &a, &b), -det_dot(&a, &b));
        }
    }
}
