//! The fixed order with four `wide::f32x4` accumulators (lane `4j + l` is
//! element `l` of accumulator `j`).

use super::{reduce, LANES};
use wide::f32x4;

#[inline]
fn load4(x: &[f32; LANES], j: usize) -> f32x4 {
    f32x4::from([x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]])
}

#[inline]
fn lanes(acc: [f32x4; 4]) -> [f32; LANES] {
    let mut out = [0f32; LANES];
    for (j, slot) in acc.iter().enumerate() {
        out[4 * j..4 * j + 4].copy_from_slice(&slot.to_array());
    }
    out
}

/// Deterministic dot product.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ca, ta) = a[..n].as_chunks::<LANES>();
    let (cb, tb) = b[..n].as_chunks::<LANES>();
    let mut acc = [f32x4::ZERO; 4];
    for (x, y) in ca.iter().zip(cb) {
        for (j, slot) in acc.iter_mut().enumerate() {
            *slot += load4(x, j) * load4(y, j);
        }
    }
    let mut l = lanes(acc);
    for (i, (x, y)) in ta.iter().zip(tb).enumerate() {
        l[i] += x * y;
    }
    reduce(l)
}

/// Deterministic squared L2.
pub(crate) fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ca, ta) = a[..n].as_chunks::<LANES>();
    let (cb, tb) = b[..n].as_chunks::<LANES>();
    let mut acc = [f32x4::ZERO; 4];
    for (x, y) in ca.iter().zip(cb) {
        for (j, slot) in acc.iter_mut().enumerate() {
            let d = load4(x, j) - load4(y, j);
            *slot += d * d;
        }
    }
    let mut l = lanes(acc);
    for (i, (x, y)) in ta.iter().zip(tb).enumerate() {
        let d = x - y;
        l[i] += d * d;
    }
    reduce(l)
}
