//! AVX2 streaming dots: per 32 components, `|row|` (`vpabsb`) times the
//! query with the row's signs (`vpsignb`) through `vpmaddubsw` (exact pair
//! sums, see the module docs), widened by `vpmaddwd` with ones and
//! accumulated in `i32`; four rows share each query load and one
//! horizontal reduction.

use std::arch::x86_64::*;

/// `Σ q·r` of one 32-byte step, as 8 `i32` partial sums.
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn step(qv: __m256i, r: __m256i, ones: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_abs_epi8(r), _mm256_sign_epi8(qv, r));
    _mm256_madd_epi16(p, ones)
}

/// Dots of `q` against the contiguous rows of `rows`.
///
/// # Safety
/// The CPU must support AVX2; `rows.len() == q.len() · out.len()` and no
/// query code is `−128`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dots(q: &[i8], rows: &[i8], out: &mut [i32]) {
    let d = q.len();
    if d == 0 {
        out.fill(0);
        return;
    }
    let n = out.len();
    debug_assert_eq!(rows.len(), d * n);
    let full = d - d % 32;
    let ones = _mm256_set1_epi16(1);
    let (pq, pr) = (q.as_ptr(), rows.as_ptr());
    let tail = |row: &[i8]| super::scalar::tail(&q[full..], &row[full..]);
    let mut i = 0;
    while i + 4 <= n {
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut j = 0;
        while j < full {
            // SAFETY: j + 32 <= full <= d, so the query bytes and each of
            // the four rows' bytes (row i + r starts at (i + r)·d, and
            // i + r < n) lie in bounds.
            let qv = unsafe { _mm256_loadu_si256(pq.add(j).cast()) };
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let rv = unsafe { _mm256_loadu_si256(pr.add((i + r) * d + j).cast()) };
                // SAFETY: same target features as this function.
                *acc = _mm256_add_epi32(*acc, unsafe { step(qv, rv, ones) });
            }
            j += 32;
        }
        // Lane sums of the four accumulators in one pass: hadd within each
        // 128-bit half, then add the halves.
        let h01 = _mm256_hadd_epi32(acc[0], acc[1]);
        let h23 = _mm256_hadd_epi32(acc[2], acc[3]);
        let h = _mm256_hadd_epi32(h01, h23);
        let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        let mut lanes = [0i32; 4];
        // SAFETY: `lanes` holds 4 i32.
        unsafe { _mm_storeu_si128(lanes.as_mut_ptr().cast(), s) };
        for (r, lane) in lanes.iter().enumerate() {
            let row = &rows[(i + r) * d..(i + r + 1) * d];
            out[i + r] = lane.wrapping_add(tail(row));
        }
        i += 4;
    }
    while i < n {
        let mut acc = _mm256_setzero_si256();
        let mut j = 0;
        while j < full {
            // SAFETY: j + 32 <= full <= d and row i < n.
            let (qv, rv) = unsafe {
                (
                    _mm256_loadu_si256(pq.add(j).cast()),
                    _mm256_loadu_si256(pr.add(i * d + j).cast()),
                )
            };
            // SAFETY: same target features as this function.
            acc = _mm256_add_epi32(acc, unsafe { step(qv, rv, ones) });
            j += 32;
        }
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(acc),
            _mm256_extracti128_si256::<1>(acc),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        let row = &rows[i * d..(i + 1) * d];
        out[i] = _mm_cvtsi128_si32(s).wrapping_add(tail(row));
        i += 1;
    }
}
