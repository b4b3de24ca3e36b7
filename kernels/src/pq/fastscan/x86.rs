//! AVX2 fast-scan: one 256-bit load covers two subspaces of a block (16
//! bytes each) and is looked up with `vpshufb` in the two matching 16-byte
//! table rows (one per 128-bit lane). Low and high nibbles select rows
//! `0..16` and `16..32`; each lookup result is widened into `u16` words as
//! even bytes (`& 0x00ff`) and odd bytes (`>> 8`), giving four `u16x16`
//! accumulators. At the end the two lanes (even / odd subspaces) are added
//! and even/odd words interleaved back into row order. Every word holds at
//! most `255 · mp ≤ 65 280`, so the wrapping `u16` adds are exact.

use std::arch::x86_64::*;

use super::{BLOCK, CODES};

/// Scan of every block (`16·mp` bytes each) into 32 outputs per block.
///
/// # Safety
/// The CPU must support AVX2; `mp` is even, `lut.len() ≥ 16·mp`,
/// `blocks.len()` is a multiple of `16·mp` and `out` has 32 slots per block.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scan(lut: &[u8], mp: usize, blocks: &[u8], out: &mut [u16]) {
    debug_assert!(mp.is_multiple_of(2) && lut.len() >= CODES * mp);
    let nib = _mm256_set1_epi8(0x0f);
    let low_bytes = _mm256_set1_epi16(0x00ff);
    for (block, out) in blocks
        .chunks_exact(CODES * mp)
        .zip(out.chunks_exact_mut(BLOCK))
    {
        let mut lo_even = _mm256_setzero_si256();
        let mut lo_odd = _mm256_setzero_si256();
        let mut hi_even = _mm256_setzero_si256();
        let mut hi_odd = _mm256_setzero_si256();
        for p in 0..mp / 2 {
            // SAFETY: 32·p + 32 <= 16·mp = block.len() <= lut.len().
            let (c, t) = unsafe {
                (
                    _mm256_loadu_si256(block.as_ptr().add(32 * p).cast()),
                    _mm256_loadu_si256(lut.as_ptr().add(32 * p).cast()),
                )
            };
            let lo = _mm256_and_si256(c, nib);
            let hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), nib);
            let rl = _mm256_shuffle_epi8(t, lo);
            let rh = _mm256_shuffle_epi8(t, hi);
            lo_even = _mm256_add_epi16(lo_even, _mm256_and_si256(rl, low_bytes));
            lo_odd = _mm256_add_epi16(lo_odd, _mm256_srli_epi16(rl, 8));
            hi_even = _mm256_add_epi16(hi_even, _mm256_and_si256(rh, low_bytes));
            hi_odd = _mm256_add_epi16(hi_odd, _mm256_srli_epi16(rh, 8));
        }
        let fold =
            |a: __m256i| _mm_add_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        let (le, lo, he, ho) = (fold(lo_even), fold(lo_odd), fold(hi_even), fold(hi_odd));
        let rows = [
            _mm_unpacklo_epi16(le, lo),
            _mm_unpackhi_epi16(le, lo),
            _mm_unpacklo_epi16(he, ho),
            _mm_unpackhi_epi16(he, ho),
        ];
        for (i, r) in rows.iter().enumerate() {
            // SAFETY: `out` has 32 u16 = four 16-byte stores.
            unsafe { _mm_storeu_si128(out.as_mut_ptr().add(8 * i).cast(), *r) };
        }
    }
}
