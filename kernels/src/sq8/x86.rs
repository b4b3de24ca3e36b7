//! AVX2 + FMA SQ8 tier.
//!
//! Asymmetric kernels: 8 codes per step are sign-extended to `i32`
//! (`vpmovsxbd`) and converted to `f32`, then fused into the sum; two
//! accumulators, 16 components per iteration. Integer kernel: 16 codes per
//! step sign-extended to `i16` and multiplied pairwise into `i32`
//! (`vpmaddwd`, exact for every `i8` pair), accumulated with wrapping `i32`
//! adds, so the result equals the scalar reference bit for bit.

use std::arch::x86_64::*;

use crate::f32::x86::hsum;

/// 8 codes at `p` as `f32` lanes.
///
/// # Safety
/// AVX2 required; `p..p+8` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn codes8(p: *const i8) -> __m256 {
    // SAFETY: the caller guarantees 8 readable bytes at `p`; loadl reads 8 unaligned bytes.
    let raw = unsafe { _mm_loadl_epi64(p.cast::<__m128i>()) };
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw))
}

/// `Σ (q_i − s_i·c_i)²`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn l2sq(q: &[f32], s: &[f32], c: &[i8]) -> f32 {
    let n = q.len().min(s.len()).min(c.len());
    let (pq, ps, pc) = (q.as_ptr(), s.as_ptr(), c.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            // SAFETY: j + 8 <= i + 16 <= n and all three slices hold >= n items.
            let (x, sc, cv) = unsafe {
                (
                    _mm256_loadu_ps(pq.add(j)),
                    _mm256_loadu_ps(ps.add(j)),
                    codes8(pc.add(j)),
                )
            };
            let d = _mm256_fnmadd_ps(sc, cv, x);
            *acc = _mm256_fmadd_ps(d, d, *acc);
        }
        i += 16;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let (x, sc, cv) = unsafe {
            (
                _mm256_loadu_ps(pq.add(i)),
                _mm256_loadu_ps(ps.add(i)),
                codes8(pc.add(i)),
            )
        };
        let d = _mm256_fnmadd_ps(sc, cv, x);
        acc[0] = _mm256_fmadd_ps(d, d, acc[0]);
        i += 8;
    }
    hsum(_mm256_add_ps(acc[0], acc[1])) + super::scalar::l2sq(&q[i..n], &s[i..n], &c[i..n])
}

/// `Σ qs_i · c_i`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot(qs: &[f32], c: &[i8]) -> f32 {
    let n = qs.len().min(c.len());
    let (pq, pc) = (qs.as_ptr(), c.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            // SAFETY: j + 8 <= i + 32 <= n.
            let (x, cv) = unsafe { (_mm256_loadu_ps(pq.add(j)), codes8(pc.add(j))) };
            *acc = _mm256_fmadd_ps(x, cv, *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let (x, cv) = unsafe { (_mm256_loadu_ps(pq.add(i)), codes8(pc.add(i))) };
        acc[0] = _mm256_fmadd_ps(x, cv, acc[0]);
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    hsum(v) + super::scalar::dot(&qs[i..n], &c[i..n])
}

/// `Σ a_i · b_i` in `i32`, wrapping.
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_si256(); 2];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 16 * k;
            // SAFETY: j + 16 <= i + 32 <= n.
            let (x, y) = unsafe {
                (
                    _mm_loadu_si128(pa.add(j).cast::<__m128i>()),
                    _mm_loadu_si128(pb.add(j).cast::<__m128i>()),
                )
            };
            let p = _mm256_madd_epi16(_mm256_cvtepi8_epi16(x), _mm256_cvtepi8_epi16(y));
            *acc = _mm256_add_epi32(*acc, p);
        }
        i += 32;
    }
    while i + 16 <= n {
        // SAFETY: i + 16 <= n.
        let (x, y) = unsafe {
            (
                _mm_loadu_si128(pa.add(i).cast::<__m128i>()),
                _mm_loadu_si128(pb.add(i).cast::<__m128i>()),
            )
        };
        let p = _mm256_madd_epi16(_mm256_cvtepi8_epi16(x), _mm256_cvtepi8_epi16(y));
        acc[0] = _mm256_add_epi32(acc[0], p);
        i += 16;
    }
    let v = _mm256_add_epi32(acc[0], acc[1]);
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s).wrapping_add(super::scalar::dot_i8(&a[i..n], &b[i..n]))
}

/// [`l2sq`] against every row of `codes`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn l2sq_many(q: &[f32], s: &[f32], codes: &[i8], out: &mut [f32]) {
    // SAFETY: same target features as this function.
    super::scalar::for_rows(q.len(), codes, out, |r| unsafe { l2sq(q, s, r) });
}

/// [`dot`] against every row of `codes`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_many(qs: &[f32], codes: &[i8], out: &mut [f32]) {
    // SAFETY: same target features as this function.
    super::scalar::for_rows(qs.len(), codes, out, |r| unsafe { dot(qs, r) });
}

/// [`dot_i8`] against every row of `codes`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_i8_many(q: &[i8], codes: &[i8], out: &mut [i32]) {
    // SAFETY: same target features as this function.
    super::scalar::for_rows(q.len(), codes, out, |r| unsafe { dot_i8(q, r) });
}
