//! The fixed order on AVX2: lanes `0..8` in one `__m256`, `8..16` in
//! another; `vmulps` then `vaddps` (no FMA), so every lane sees exactly the
//! scalar reference's operations.

use super::{reduce, LANES};
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2")]
fn lanes(lo: __m256, hi: __m256) -> [f32; LANES] {
    let mut out = [0f32; LANES];
    let (a, b) = out.split_at_mut(8);
    // SAFETY: `a` and `b` are 8 writable floats each; storeu is unaligned.
    unsafe {
        _mm256_storeu_ps(a.as_mut_ptr(), lo);
        _mm256_storeu_ps(b.as_mut_ptr(), hi);
    }
    out
}

/// Deterministic dot product.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let full = n - n % LANES;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= full <= n and both slices hold >= n floats.
        let (x0, x1, y0, y1) = unsafe {
            (
                _mm256_loadu_ps(pa.add(i)),
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i)),
                _mm256_loadu_ps(pb.add(i + 8)),
            )
        };
        lo = _mm256_add_ps(lo, _mm256_mul_ps(x0, y0));
        hi = _mm256_add_ps(hi, _mm256_mul_ps(x1, y1));
        i += LANES;
    }
    let mut l = lanes(lo, hi);
    for (j, (x, y)) in a[full..n].iter().zip(&b[full..n]).enumerate() {
        l[j] += x * y;
    }
    reduce(l)
}

/// Deterministic squared L2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let full = n - n % LANES;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= full <= n and both slices hold >= n floats.
        let (x0, x1, y0, y1) = unsafe {
            (
                _mm256_loadu_ps(pa.add(i)),
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i)),
                _mm256_loadu_ps(pb.add(i + 8)),
            )
        };
        let (d0, d1) = (_mm256_sub_ps(x0, y0), _mm256_sub_ps(x1, y1));
        lo = _mm256_add_ps(lo, _mm256_mul_ps(d0, d0));
        hi = _mm256_add_ps(hi, _mm256_mul_ps(d1, d1));
        i += LANES;
    }
    let mut l = lanes(lo, hi);
    for (j, (x, y)) in a[full..n].iter().zip(&b[full..n]).enumerate() {
        let d = x - y;
        l[j] += d * d;
    }
    reduce(l)
}
