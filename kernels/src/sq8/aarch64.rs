//! NEON SQ8 tier: codes widened `i8 → i16 → i32 → f32` four at a time for the
//! asymmetric kernels; `vmull_s8` (exact `i16` products, |·| ≤ 2^14) plus
//! `vpadalq_s16` (pairwise widening accumulate, wrapping `i32`) for the
//! integer kernel, which therefore equals the scalar reference bit for bit.

use std::arch::aarch64::*;

/// 8 codes at `p` as two `f32x4`.
///
/// # Safety
/// NEON required; `p..p+8` must be readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn codes8(p: *const i8) -> (float32x4_t, float32x4_t) {
    // SAFETY: the caller guarantees 8 readable bytes at `p`.
    let w = vmovl_s8(unsafe { vld1_s8(p) });
    (
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))),
        vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))),
    )
}

/// `Σ (q_i − s_i·c_i)²`.
///
/// # Safety
/// The CPU must support NEON.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn l2sq(q: &[f32], s: &[f32], c: &[i8]) -> f32 {
    let n = q.len().min(s.len()).min(c.len());
    let (pq, ps, pc) = (q.as_ptr(), s.as_ptr(), c.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); 2];
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n and all three slices hold >= n items.
        let (c0, c1, x0, x1, s0, s1) = unsafe {
            let (c0, c1) = codes8(pc.add(i));
            (
                c0,
                c1,
                vld1q_f32(pq.add(i)),
                vld1q_f32(pq.add(i + 4)),
                vld1q_f32(ps.add(i)),
                vld1q_f32(ps.add(i + 4)),
            )
        };
        let d0 = vfmsq_f32(x0, s0, c0);
        let d1 = vfmsq_f32(x1, s1, c1);
        acc[0] = vfmaq_f32(acc[0], d0, d0);
        acc[1] = vfmaq_f32(acc[1], d1, d1);
        i += 8;
    }
    vaddvq_f32(vaddq_f32(acc[0], acc[1])) + super::scalar::l2sq(&q[i..n], &s[i..n], &c[i..n])
}

/// `Σ qs_i · c_i`.
///
/// # Safety
/// The CPU must support NEON.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot(qs: &[f32], c: &[i8]) -> f32 {
    let n = qs.len().min(c.len());
    let (pq, pc) = (qs.as_ptr(), c.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); 2];
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let (c0, c1, x0, x1) = unsafe {
            let (c0, c1) = codes8(pc.add(i));
            (c0, c1, vld1q_f32(pq.add(i)), vld1q_f32(pq.add(i + 4)))
        };
        acc[0] = vfmaq_f32(acc[0], x0, c0);
        acc[1] = vfmaq_f32(acc[1], x1, c1);
        i += 8;
    }
    vaddvq_f32(vaddq_f32(acc[0], acc[1])) + super::scalar::dot(&qs[i..n], &c[i..n])
}

/// `Σ a_i · b_i` in `i32`, wrapping.
///
/// # Safety
/// The CPU must support NEON.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [vdupq_n_s32(0); 2];
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n.
        let (x, y) = unsafe { (vld1q_s8(pa.add(i)), vld1q_s8(pb.add(i))) };
        acc[0] = vpadalq_s16(acc[0], vmull_s8(vget_low_s8(x), vget_low_s8(y)));
        acc[1] = vpadalq_s16(acc[1], vmull_s8(vget_high_s8(x), vget_high_s8(y)));
        i += 16;
    }
    vaddvq_s32(vaddq_s32(acc[0], acc[1])).wrapping_add(super::scalar::dot_i8(&a[i..n], &b[i..n]))
}

/// [`l2sq`] against every row of `codes`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn l2sq_many(q: &[f32], s: &[f32], codes: &[i8], out: &mut [f32]) {
    // SAFETY: same target features as this function.
    super::scalar::for_rows(q.len(), codes, out, |r| unsafe { l2sq(q, s, r) });
}

/// [`dot`] against every row of `codes`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_many(qs: &[f32], codes: &[i8], out: &mut [f32]) {
    // SAFETY: same target features as this function.
    super::scalar::for_rows(qs.len(), codes, out, |r| unsafe { dot(qs, r) });
}

/// [`dot_i8`] against every row of `codes`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_i8_many(q: &[i8], codes: &[i8], out: &mut [i32]) {
    // SAFETY: same target features as this function.
    super::scalar::for_rows(q.len(), codes, out, |r| unsafe { dot_i8(q, r) });
}
