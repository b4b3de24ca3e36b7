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
    let s = match metric {
        Metric::L2 => l2sq(a, b),
        Metric::Cosine => 1.0 - dot(a, b).clamp(-1.0, 1.0),
        Metric::InnerProduct => -dot(a, b),
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
