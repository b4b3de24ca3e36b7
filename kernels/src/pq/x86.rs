//! AVX2 ADC scan: eight rows in the lanes of a `__m256`. For each subspace,
//! one `vpgatherdd` fetches the eight rows' code bytes (as 32-bit words, low
//! byte kept) and one `vgatherdps` fetches their entries; each lane sums in
//! subspace order, so results equal the scalar reference bit for bit.

use std::arch::x86_64::*;

use super::SLOTS;

/// Scan of `out.len()` rows of `m` bytes.
///
/// # Safety
/// The CPU must support AVX2; `table.len() ≥ 256·m`; `codes.len() = m·out.len()`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn scan(table: &[f32], m: usize, codes: &[u8], out: &mut [f32]) {
    let n = out.len();
    debug_assert!(table.len() >= SLOTS * m && codes.len() == m * n);
    // Word gathers read 4 bytes at row·m + s: only use them for blocks whose
    // furthest read, (i+7)·m + (m−1) + 3, stays inside `codes`; offsets must
    // also fit i32.
    let mi = match i32::try_from(m) {
        Ok(v) if m.checked_mul(8).is_some_and(|x| x <= i32::MAX as usize) => v,
        _ => return super::scalar::scan(table, m, codes, out),
    };
    let row_offsets = _mm256_mullo_epi32(
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        _mm256_set1_epi32(mi),
    );
    let low_byte = _mm256_set1_epi32(0xFF);
    let mut i = 0;
    while i + 8 <= n && (i + 8) * m + 3 <= codes.len() {
        let base = codes.as_ptr().wrapping_add(i * m);
        let mut acc = _mm256_setzero_ps();
        for s in 0..m {
            // SAFETY: reads bytes (i+l)·m + s .. +4 for l < 8, all below
            // (i+8)·m + 3 <= codes.len() (loop condition).
            let words =
                unsafe { _mm256_i32gather_epi32::<1>(base.add(s).cast::<i32>(), row_offsets) };
            let idx = _mm256_and_si256(words, low_byte);
            // SAFETY: idx < 256 and the subspace block s·256 .. s·256+256 lies in `table`.
            let e = unsafe { _mm256_i32gather_ps::<4>(table.as_ptr().add(s * SLOTS), idx) };
            acc = _mm256_add_ps(acc, e);
        }
        // SAFETY: i + 8 <= n = out.len().
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), acc) };
        i += 8;
    }
    super::scalar::scan(table, m, &codes[i * m..], &mut out[i..]);
}
