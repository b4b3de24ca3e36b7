//! Eight `j` per `__m256`, up to four registers per pass over the rows;
//! `vcvtdq2ps`, `vmulps` by the scale, `vmulps` by `v_i`, `vaddps`: the
//! scalar reference's operations lane by lane.

use super::SCALE;
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2, and `k.len() == v.len() · y.len()`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn fixed(k: &[i16], v: &[f32], y: &mut [f32]) {
    let w = y.len();
    let d = v.len();
    let vec = w - w % 8;
    let scale = _mm256_set1_ps(SCALE);
    let mut j = 0;
    while j < vec {
        let n = ((vec - j) / 8).min(4);
        let mut acc = [_mm256_setzero_ps(); 4];
        for (i, &vi) in v.iter().enumerate() {
            let b = _mm256_set1_ps(vi);
            for (r, a) in acc.iter_mut().enumerate().take(n) {
                // SAFETY: i·w + j + 8r + 8 <= (i + 1)·w <= k.len() (j + 8n <= vec <= w).
                let raw = unsafe { _mm_loadu_si128(k.as_ptr().add(i * w + j + 8 * r).cast()) };
                let e = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(raw)), scale);
                *a = _mm256_add_ps(*a, _mm256_mul_ps(e, b));
            }
        }
        for (r, a) in acc.iter().enumerate().take(n) {
            // SAFETY: j + 8r + 8 <= vec <= y.len().
            unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(j + 8 * r), *a) };
        }
        j += 8 * n;
    }
    if vec < w {
        for yj in &mut y[vec..] {
            *yj = 0.0;
        }
        for i in 0..d {
            let vi = v[i];
            let row = &k[i * w + vec..(i + 1) * w];
            for (yj, &a) in y[vec..].iter_mut().zip(row) {
                *yj += (f32::from(a) * SCALE) * vi;
            }
        }
    }
}
