//! Distance kernels used by the accelerators, in two roles that never mix.
//!
//! * [`det_score`]: a *deterministic* f32 score used by every builder whose
//!   output is persisted (the fast HNSW build). It accumulates in 16 fixed
//!   lanes (lane `i` sums components `i, i+16, ...`), adds the tail into lanes
//!   `0..tail`, then reduces the lanes with a fixed tree. Rust never contracts
//!   `a * b + c` into an FMA and never reassociates floats, so the result is
//!   bit-identical on every machine, ISA, optimisation level and thread count,
//!   whatever SIMD width the compiler picks for the lanes.
//! * [`fast_score`]: the fastest available ranking score (SIMD kernels of
//!   `prox_kernels`, dispatched at run time). Only queries use it; nothing
//!   derived from it is persisted, and every reported score is rescored with
//!   `prox_kernels::canonical::score`.
//!
//! Both return "lower is better" scores with the ordering semantics of the
//! spec for prepared vectors: L2 -> squared distance, cosine -> `1 - dot`
//! (unit vectors), inner product -> `-dot`.

use prox_kernels::Metric;
use wide::f32x4;

/// Number of independent accumulators of the deterministic kernels.
const LANES: usize = 16;

#[inline]
fn reduce(mut acc: [f32; LANES]) -> f32 {
    // Fixed pairwise tree: 16 -> 8 -> 4 -> 2 -> 1.
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            acc[i] += acc[i + width];
        }
        width /= 2;
    }
    acc[0]
}

/// Four `f32x4` accumulators = the 16 lanes (lane `4j + l` is element `l`
/// of accumulator `j`), reduced with the same tree as [`reduce`].
#[inline]
fn reduce4(acc: [f32x4; 4]) -> f32 {
    let a = acc[0] + acc[2];
    let b = acc[1] + acc[3];
    let c = (a + b).to_array();
    // Lanes 0..4 hold the 16 -> 8 -> 4 partial sums; finish 4 -> 2 -> 1.
    let (x0, x1) = (c[0] + c[2], c[1] + c[3]);
    x0 + x1
}

#[inline]
fn load4(x: &[f32; LANES], j: usize) -> f32x4 {
    f32x4::from([x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]])
}

/// Deterministic f32 dot product (see the module docs for the fixed order).
#[inline]
pub(crate) fn det_dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ca, ta) = a[..n].as_chunks::<LANES>();
    let (cb, tb) = b[..n].as_chunks::<LANES>();
    let mut acc = [f32x4::ZERO; 4];
    for (x, y) in ca.iter().zip(cb) {
        for (j, slot) in acc.iter_mut().enumerate() {
            *slot += load4(x, j) * load4(y, j);
        }
    }
    if ta.is_empty() {
        return reduce4(acc);
    }
    let mut lanes = [0f32; LANES];
    for (j, slot) in acc.iter().enumerate() {
        lanes[4 * j..4 * j + 4].copy_from_slice(&slot.to_array());
    }
    for (i, (x, y)) in ta.iter().zip(tb).enumerate() {
        lanes[i] += x * y;
    }
    reduce(lanes)
}

/// Deterministic f32 squared Euclidean distance.
#[inline]
pub(crate) fn det_l2sq(a: &[f32], b: &[f32]) -> f32 {
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
    if ta.is_empty() {
        return reduce4(acc);
    }
    let mut lanes = [0f32; LANES];
    for (j, slot) in acc.iter().enumerate() {
        lanes[4 * j..4 * j + 4].copy_from_slice(&slot.to_array());
    }
    for (i, (x, y)) in ta.iter().zip(tb).enumerate() {
        let d = x - y;
        lanes[i] += d * d;
    }
    reduce(lanes)
}

/// Pulls the first cache lines of `row` towards the core without using the
/// values (a safe stand-in for a prefetch instruction: the loads of a whole
/// neighbour list are independent, so their misses overlap instead of being
/// paid one by one inside the distance loop).
#[inline]
pub(crate) fn touch(row: &[f32]) {
    if let Some(x) = row.first() {
        std::hint::black_box(*x);
    }
    if let Some(x) = row.get(16) {
        std::hint::black_box(*x);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector form must equal the plain 16-lane array form bit for bit.
    fn lanes_dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            acc[i % LANES] += x * y;
        }
        reduce(acc)
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
