//! AVX2 + FMA tier (x86-64), selected at run time.
//!
//! Every sum uses four independent 8-lane accumulators (32 components per
//! iteration) combined pairwise at the end; the tail (< 8 components) is added
//! in scalar after the horizontal sum. FMA makes each lane step one rounding.

use std::arch::x86_64::*;

/// Horizontal sum of the eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_movehdup_ps(s);
    let s = _mm_add_ps(s, h);
    let h = _mm_movehl_ps(h, s);
    _mm_cvtss_f32(_mm_add_ss(s, h))
}

/// `Σ (a_i − b_i)²` over `min(a.len(), b.len())` components.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8k + 8 <= i + 32 <= n, and both slices hold >= n floats.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(pa.add(i + 8 * k)),
                    _mm256_loadu_ps(pb.add(i + 8 * k)),
                )
            };
            let d = _mm256_sub_ps(x, y);
            *acc = _mm256_fmadd_ps(d, d, *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
        let d = _mm256_sub_ps(x, y);
        acc[0] = _mm256_fmadd_ps(d, d, acc[0]);
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum(v);
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
/// The CPU must support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8k + 8 <= n.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(pa.add(i + 8 * k)),
                    _mm256_loadu_ps(pb.add(i + 8 * k)),
                )
            };
            *acc = _mm256_fmadd_ps(x, y, *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
        acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum(v);
    while i < n {
        s += a[i] * b[i];
        i += 1;
    }
    s
}

/// `(Σ a_i·b_i, Σ b_i²)` in one pass.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_norm(a: &[f32], b: &[f32]) -> (f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut d = [_mm256_setzero_ps(); 2];
    let mut nb = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    while i + 16 <= n {
        for k in 0..2 {
            // SAFETY: i + 8k + 8 <= i + 16 <= n.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(pa.add(i + 8 * k)),
                    _mm256_loadu_ps(pb.add(i + 8 * k)),
                )
            };
            d[k] = _mm256_fmadd_ps(x, y, d[k]);
            nb[k] = _mm256_fmadd_ps(y, y, nb[k]);
        }
        i += 16;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
        d[0] = _mm256_fmadd_ps(x, y, d[0]);
        nb[0] = _mm256_fmadd_ps(y, y, nb[0]);
        i += 8;
    }
    let mut sd = hsum(_mm256_add_ps(d[0], d[1]));
    let mut sn = hsum(_mm256_add_ps(nb[0], nb[1]));
    while i < n {
        sd += a[i] * b[i];
        sn += b[i] * b[i];
        i += 1;
    }
    (sd, sn)
}

/// Distance ahead (bytes) at which one-to-many scans prefetch rows. DRAM
/// scans of one query are latency-bound; asking early for the lines a few
/// rows ahead keeps more misses in flight than the hardware prefetcher does.
const PREFETCH_AHEAD: usize = 6144;

/// Prefetches the row `ahead` bytes past `row` (clamped to `end`) into L1.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn prefetch(row: *const f32, row_bytes: usize, end: *const f32) {
    let start = row.cast::<u8>().wrapping_add(PREFETCH_AHEAD);
    let end = end.cast::<u8>();
    let mut off = 0;
    while off < row_bytes {
        let p = start.wrapping_add(off);
        if p >= end {
            break;
        }
        // Prefetch never faults and the address is inside `rows` (p < end).
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
        off += 64;
    }
}

/// Applies `f` to every row, prefetching ahead (rows.len() == q.len()·out.len()).
#[inline(always)]
fn scan_rows(q: &[f32], rows: &[f32], out: &mut [f32], f: impl Fn(&[f32], &[f32]) -> f32) {
    let dim = q.len();
    if dim == 0 {
        out.fill(f(&[], &[]));
        return;
    }
    let end = rows.as_ptr_range().end;
    for (o, r) in out.iter_mut().zip(rows.chunks_exact(dim)) {
        // SAFETY: AVX2 (implying SSE) is enabled in every caller.
        unsafe { prefetch(r.as_ptr(), 4 * dim, end) };
        *o = f(q, r);
    }
}

/// `l2sq(q, row)` for every row; `rows.len() == q.len() · out.len()`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn l2sq_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    // SAFETY: same target features as this function.
    scan_rows(q, rows, out, |q, r| unsafe { l2sq(q, r) });
}

/// `dot(q, row)` for every row.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    // SAFETY: same target features as this function.
    scan_rows(q, rows, out, |q, r| unsafe { dot(q, r) });
}

/// Cosine distance of `q` (squared norm `q_norm2`) against every row.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn cosine_many(q: &[f32], q_norm2: f32, rows: &[f32], out: &mut [f32]) {
    scan_rows(q, rows, out, |q, r| {
        // SAFETY: same target features as this function.
        let (d, nr) = unsafe { dot_norm(q, r) };
        super::cosine_from_parts(d, q_norm2, nr)
    });
}
