//! The reference form of the fixed order: a plain 16-lane array.

use super::{reduce, LANES};

/// Deterministic dot product (reference).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let full = n - n % LANES;
    let mut acc = [0f32; LANES];
    for (i, (x, y)) in a[..full].iter().zip(&b[..full]).enumerate() {
        acc[i % LANES] += x * y;
    }
    for (i, (x, y)) in a[full..n].iter().zip(&b[full..n]).enumerate() {
        acc[i] += x * y;
    }
    reduce(acc)
}

/// Deterministic squared L2 (reference).
pub(crate) fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let full = n - n % LANES;
    let mut acc = [0f32; LANES];
    for (i, (x, y)) in a[..full].iter().zip(&b[..full]).enumerate() {
        let d = x - y;
        acc[i % LANES] += d * d;
    }
    for (i, (x, y)) in a[full..n].iter().zip(&b[full..n]).enumerate() {
        let d = x - y;
        acc[i] += d * d;
    }
    reduce(acc)
}
