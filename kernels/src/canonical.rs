//! Canonical scalar math (proximity-format.md section 11.2).
//!
//! Every sum is an `f64` accumulator starting at `0.0`, fed left to right in
//! component order; no fused multiply-add and no reassociation. These are the
//! numbers that are persisted and reported, so they must be bit-identical on
//! every machine. Inputs of unequal length are compared over the shorter one;
//! callers check dimensions before scoring.

use crate::Metric;

/// Squared Euclidean distance: `Σ (f64(a_i) − f64(b_i))²` in order.
pub fn l2sq(a: &[f32], b: &[f32]) -> f64 {
    let mut acc = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        let d = f64::from(x) - f64::from(y);
        acc += d * d;
    }
    acc
}

/// Dot product: `Σ f64(a_i) · f64(b_i)` in order.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    let mut acc = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        acc += f64::from(x) * f64::from(y);
    }
    acc
}

/// The canonical score (lower is better) of `a` against `b` under `metric`.
///
/// L2: squared distance; cosine: `1 − clamp(dot, −1, 1)`; inner product:
/// `−dot`. The result is `+0`-normalised (never `-0.0`).
pub fn score(metric: Metric, a: &[f32], b: &[f32]) -> f64 {
    let raw = match metric {
        Metric::L2 => l2sq(a, b),
        Metric::Cosine | Metric::InnerProduct => dot(a, b),
    };
    finish(metric, raw)
}

/// [`score`] of `q` against each of `rows` into `out` (`out.len() ==
/// rows.len()`), bit-identical to scoring them one by one. Rows of `q`'s
/// length go four at a time: each sum still runs alone, left to right,
/// but the four chains overlap, which a single sum's dependent additions
/// cannot.
///
/// # Panics
/// If `out.len() != rows.len()`.
pub fn scores(metric: Metric, q: &[f32], rows: &[&[f32]], out: &mut [f64]) {
    assert_eq!(out.len(), rows.len(), "canonical scores: output length");
    let mut rows_in = rows.chunks_exact(4);
    let mut outs = out.chunks_exact_mut(4);
    for (r, o) in (&mut rows_in).zip(&mut outs) {
        let r: [&[f32]; 4] = [r[0], r[1], r[2], r[3]];
        if r.iter().any(|x| x.len() != q.len()) {
            for (o, x) in o.iter_mut().zip(r) {
                *o = score(metric, q, x);
            }
            continue;
        }
        let raw = match metric {
            Metric::L2 => l2sq4(q, r),
            Metric::Cosine | Metric::InnerProduct => dot4(q, r),
        };
        for (o, s) in o.iter_mut().zip(raw) {
            *o = finish(metric, s);
        }
    }
    for (o, x) in outs.into_remainder().iter_mut().zip(rows_in.remainder()) {
        *o = score(metric, q, x);
    }
}

/// Four [`l2sq`] sums over rows of `q`'s length, each in component order.
fn l2sq4(q: &[f32], r: [&[f32]; 4]) -> [f64; 4] {
    let n = q.len();
    let (r0, r1, r2, r3) = (&r[0][..n], &r[1][..n], &r[2][..n], &r[3][..n]);
    let mut acc = [0.0f64; 4];
    for i in 0..n {
        let x = f64::from(q[i]);
        let d = [
            x - f64::from(r0[i]),
            x - f64::from(r1[i]),
            x - f64::from(r2[i]),
            x - f64::from(r3[i]),
        ];
        for (a, d) in acc.iter_mut().zip(d) {
            *a += d * d;
        }
    }
    acc
}

/// Four [`dot`] sums over rows of `q`'s length, each in component order.
fn dot4(q: &[f32], r: [&[f32]; 4]) -> [f64; 4] {
    let n = q.len();
    let (r0, r1, r2, r3) = (&r[0][..n], &r[1][..n], &r[2][..n], &r[3][..n]);
    let mut acc = [0.0f64; 4];
    for i in 0..n {
        let x = f64::from(q[i]);
        let p = [
            x * f64::from(r0[i]),
            x * f64::from(r1[i]),
            x * f64::from(r2[i]),
            x * f64::from(r3[i]),
        ];
        for (a, p) in acc.iter_mut().zip(p) {
            *a += p;
        }
    }
    acc
}

/// The score of a raw sum (`l2sq` for L2, `dot` otherwise), as [`score`].
fn finish(metric: Metric, raw: f64) -> f64 {
    let s = match metric {
        Metric::L2 => raw,
        Metric::Cosine => 1.0 - raw.clamp(-1.0, 1.0),
        Metric::InnerProduct => -raw,
    };
    if s == 0.0 {
        0.0
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_plus_zero_normalised() {
        let a = [0.0f32, 0.0];
        assert_eq!(score(Metric::InnerProduct, &a, &a).to_bits(), 0);
        assert_eq!(score(Metric::L2, &a, &a).to_bits(), 0);
    }

    /// `scores` equals `score` row by row, bit for bit, for every metric,
    /// counts that are and are not multiples of four, rows of another
    /// length inside a group, and values whose sums round differently when
    /// reordered.
    #[test]
    fn scores_equal_score_bit_for_bit() {
        let seed = prox_testkit::seed(0x9e37_79b9_7f4a_7c15);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let mut i = 0usize;
        let mut next = move || {
            i += 1;
            rng.unit() * [1.0f32, 1e-7, 3e5][i % 3]
        };
        for d in [0usize, 1, 3, 17, 384] {
            let q: Vec<f32> = (0..d).map(|_| next()).collect();
            let rows: Vec<Vec<f32>> = (0..11)
                .map(|i| {
                    let len = if i == 6 { d / 2 } else { d };
                    (0..len).map(|_| next()).collect()
                })
                .collect();
            let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
            for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
                for n in 0..=refs.len() {
                    let mut out = vec![f64::NAN; n];
                    scores(metric, &q, &refs[..n], &mut out);
                    for (o, r) in out.iter().zip(&refs[..n]) {
                        assert_eq!(
                            o.to_bits(),
                            score(metric, &q, r).to_bits(),
                            "{metric:?} d={d}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn known_values() {
        let a = [1.0f32, 2.0, 3.0];
        let b = [4.0f32, 6.0, 8.0];
        assert_eq!(l2sq(&a, &b), 9.0 + 16.0 + 25.0);
        assert_eq!(dot(&a, &b), 4.0 + 12.0 + 24.0);
        assert_eq!(score(Metric::InnerProduct, &a, &b), -40.0);
        assert_eq!(score(Metric::Cosine, &[1.0, 0.0], &[0.0, 1.0]), 1.0);
    }
}
