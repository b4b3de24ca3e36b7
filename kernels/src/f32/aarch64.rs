//! NEON tier (aarch64): four 4-lane accumulators (16 components per step),
//! fused multiply-add, scalar tail after the horizontal sum.

use std::arch::aarch64::*;

/// `Σ (a_i − b_i)²` over `min(a.len(), b.len())` components.
///
/// # Safety
/// The CPU must support NEON.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: i + 4k + 4 <= i + 16 <= n.
            let (x, y) = unsafe { (vld1q_f32(pa.add(i + 4 * k)), vld1q_f32(pb.add(i + 4 * k))) };
            let d = vsubq_f32(x, y);
            *acc = vfmaq_f32(*acc, d, d);
        }
        i += 16;
    }
    while i + 4 <= n {
        // SAFETY: i + 4 <= n.
        let (x, y) = unsafe { (vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i))) };
        let d = vsubq_f32(x, y);
        acc[0] = vfmaq_f32(acc[0], d, d);
        i += 4;
    }
    let mut s = vaddvq_f32(vaddq_f32(
        vaddq_f32(acc[0], acc[1]),
        vaddq_f32(acc[2], acc[3]),
    ));
    while i < n {
        let d = a[i] - b[i];
        s += d * d;
        i += 1;
    }
    s
}

/// `Σ a_i · b_i`.
///
/// # Safety
/// The CPU must support NEON.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: i + 4k + 4 <= n.
            let (x, y) = unsafe { (vld1q_f32(pa.add(i + 4 * k)), vld1q_f32(pb.add(i + 4 * k))) };
            *acc = vfmaq_f32(*acc, x, y);
        }
        i += 16;
    }
    while i + 4 <= n {
        // SAFETY: i + 4 <= n.
        let (x, y) = unsafe { (vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i))) };
        acc[0] = vfmaq_f32(acc[0], x, y);
        i += 4;
    }
    let mut s = vaddvq_f32(vaddq_f32(
        vaddq_f32(acc[0], acc[1]),
        vaddq_f32(acc[2], acc[3]),
    ));
    while i < n {
        s += a[i] * b[i];
        i += 1;
    }
    s
}

/// `(Σ a_i·b_i, Σ b_i²)` in one pass.
///
/// # Safety
/// The CPU must support NEON.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_norm(a: &[f32], b: &[f32]) -> (f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut d = [vdupq_n_f32(0.0); 2];
    let mut nb = [vdupq_n_f32(0.0); 2];
    let mut i = 0;
    while i + 8 <= n {
        for k in 0..2 {
            // SAFETY: i + 4k + 4 <= i + 8 <= n.
            let (x, y) = unsafe { (vld1q_f32(pa.add(i + 4 * k)), vld1q_f32(pb.add(i + 4 * k))) };
            d[k] = vfmaq_f32(d[k], x, y);
            nb[k] = vfmaq_f32(nb[k], y, y);
        }
        i += 8;
    }
    while i + 4 <= n {
        // SAFETY: i + 4 <= n.
        let (x, y) = unsafe { (vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i))) };
        d[0] = vfmaq_f32(d[0], x, y);
        nb[0] = vfmaq_f32(nb[0], y, y);
        i += 4;
    }
    let mut sd = vaddvq_f32(vaddq_f32(d[0], d[1]));
    let mut sn = vaddvq_f32(vaddq_f32(nb[0], nb[1]));
    while i < n {
        sd += a[i] * b[i];
        sn += b[i] * b[i];
        i += 1;
    }
    (sd, sn)
}

/// `l2sq(q, row)` for every row.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn l2sq_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    // SAFETY: same target features as this function.
    super::scalar::for_rows(q, rows, out, |q, r| unsafe { l2sq(q, r) });
}

/// `dot(q, row)` for every row.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    // SAFETY: same target features as this function.
    super::scalar::for_rows(q, rows, out, |q, r| unsafe { dot(q, r) });
}

/// Cosine distance of `q` (squared norm `q_norm2`) against every row.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn cosine_many(q: &[f32], q_norm2: f32, rows: &[f32], out: &mut [f32]) {
    super::scalar::for_rows(q, rows, out, |q, r| {
        // SAFETY: same target features as this function.
        let (d, nr) = unsafe { dot_norm(q, r) };
        super::cosine_from_parts(d, q_norm2, nr)
    });
}
