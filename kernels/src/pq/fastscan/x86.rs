//! AVX2 fast-scan: one 256-bit load covers two subspaces of a block (16
//! bytes each) and is looked up with `vpshufb` in the two matching 16-byte
//! table rows (one per 128-bit lane). Low and high nibbles select rows
//! `0..16` and `16..32`. Each lookup result is added twice into `u16x16`
//! accumulators: once whole (word = even byte + 256 · odd byte, wrapping)
//! and once shifted right by 8 (the odd bytes alone), so the loop needs no
//! mask. At the end the even-byte sums are recovered as
//! `whole − (odd << 8)` (mod 2¹⁶), the two lanes (even / odd subspaces) are
//! added and even/odd words interleaved back into row order. Every true
//! sum is at most `255 · mp ≤ 65 280 < 2¹⁶`, so the odd sums are exact and
//! the wrapped difference is the exact even sum.
//!
//! Table build and quantisation: the 16 slots of one subspace are two
//! `f32x8` registers, so each lane performs exactly the scalar model's
//! operation sequence (no FMA); `min`/`max` are exact, `vdivps` is the IEEE
//! division and the rounding is the scalar's truncate-and-compare, so the
//! bytes equal the scalar model's.

use std::arch::x86_64::*;

use super::{TableKind, BLOCK, CODES};

/// Scan of every block (`16·mp` bytes each) into 32 outputs per block.
///
/// # Safety
/// The CPU must support AVX2; `mp` is even, `lut.len() ≥ 16·mp`,
/// `blocks.len()` is a multiple of `16·mp` and `out` has 32 slots per block.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scan(lut: &[u8], mp: usize, blocks: &[u8], out: &mut [u16]) {
    debug_assert!(mp.is_multiple_of(2) && lut.len() >= CODES * mp);
    let nib = _mm256_set1_epi8(0x0f);
    for (block, out) in blocks
        .chunks_exact(CODES * mp)
        .zip(out.chunks_exact_mut(BLOCK))
    {
        let mut lo_whole = _mm256_setzero_si256();
        let mut lo_odd = _mm256_setzero_si256();
        let mut hi_whole = _mm256_setzero_si256();
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
            lo_whole = _mm256_add_epi16(lo_whole, rl);
            lo_odd = _mm256_add_epi16(lo_odd, _mm256_srli_epi16(rl, 8));
            hi_whole = _mm256_add_epi16(hi_whole, rh);
            hi_odd = _mm256_add_epi16(hi_odd, _mm256_srli_epi16(rh, 8));
        }
        let lo_even = _mm256_sub_epi16(lo_whole, _mm256_slli_epi16(lo_odd, 8));
        let hi_even = _mm256_sub_epi16(hi_whole, _mm256_slli_epi16(hi_odd, 8));
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

/// Per-row finite minimum and maximum (see `scalar::bounds`).
///
/// # Safety
/// The CPU must support AVX2; `table.len() ≥ 16 · lo.len()` and
/// `hi.len() ≥ lo.len()`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn bounds(table: &[f32], lo: &mut [f32], hi: &mut [f32]) {
    let inf = _mm256_set1_ps(f32::INFINITY);
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    for ((row, l), h) in table.chunks_exact(CODES).zip(lo).zip(hi) {
        // SAFETY: `row` has 16 floats.
        let (a, b) = unsafe {
            (
                _mm256_loadu_ps(row.as_ptr()),
                _mm256_loadu_ps(row.as_ptr().add(8)),
            )
        };
        // Entries are finite or +inf (the caller rejected NaN and -inf):
        // +inf never lowers the min and is masked to -inf for the max.
        let fa = _mm256_blendv_ps(a, ninf, _mm256_cmp_ps::<_CMP_EQ_OQ>(a, inf));
        let fb = _mm256_blendv_ps(b, ninf, _mm256_cmp_ps::<_CMP_EQ_OQ>(b, inf));
        let mn = _mm256_min_ps(a, b);
        let mx = _mm256_max_ps(fa, fb);
        let mn = _mm_min_ps(_mm256_castps256_ps128(mn), _mm256_extractf128_ps(mn, 1));
        let mx = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        let mn = _mm_min_ps(mn, _mm_movehl_ps(mn, mn));
        let mx = _mm_max_ps(mx, _mm_movehl_ps(mx, mx));
        let mn = _mm_min_ss(mn, _mm_shuffle_ps::<1>(mn, mn));
        let mx = _mm_max_ss(mx, _mm_shuffle_ps::<1>(mx, mx));
        *l = _mm_cvtss_f32(mn);
        *h = _mm_cvtss_f32(mx);
    }
}

/// `round_u8((t − lo) / scale)` for finite `t`, 255 otherwise, on 8 lanes
/// (`i32` results in `0..=255`).
#[target_feature(enable = "avx2")]
fn quantize8(t: __m256, lo: __m256, scale: __m256) -> __m256i {
    let x = _mm256_div_ps(_mm256_sub_ps(t, lo), scale);
    // max(x, 0) returns 0 for a NaN x (second operand), like `round_u8`.
    let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_setzero_ps()), _mm256_set1_ps(255.0));
    let i = _mm256_cvttps_epi32(x);
    // x - trunc(x) is exact for 0 <= x <= 255.
    let frac = _mm256_sub_ps(x, _mm256_cvtepi32_ps(i));
    let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5)));
    // `up` is -1 where rounding up; x <= 255 keeps the result <= 255.
    let r = _mm256_sub_epi32(i, up);
    let fin = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_NEQ_UQ>(
        t,
        _mm256_set1_ps(f32::INFINITY),
    ));
    _mm256_blendv_epi8(_mm256_set1_epi32(255), r, fin)
}

/// Quantisation of every row (see `scalar::quantize`).
///
/// # Safety
/// The CPU must support AVX2; `table.len() ≥ 16 · lo.len()` and
/// `out.len() ≥ 16 · lo.len()`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize(table: &[f32], lo: &[f32], scale: f32, out: &mut [u8]) {
    let sc = _mm256_set1_ps(scale);
    for ((row, &l), out) in table
        .chunks_exact(CODES)
        .zip(lo)
        .zip(out.chunks_exact_mut(CODES))
    {
        let lv = _mm256_set1_ps(l);
        // SAFETY: `row` has 16 floats, `out` 16 bytes.
        unsafe {
            let a = quantize8(_mm256_loadu_ps(row.as_ptr()), lv, sc);
            let b = quantize8(_mm256_loadu_ps(row.as_ptr().add(8)), lv, sc);
            // packs works per 128-bit lane: [a0..4 b0..4 | a4..8 b4..8];
            // the permute restores [a0..8 | b0..8] (values fit i16 and u8).
            let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(a, b));
            let bytes = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storeu_si128(out.as_mut_ptr().cast(), bytes);
        }
    }
}

/// Query table (see `scalar::table`): the 16 slots of a subspace in two
/// `f32x8` accumulators.
///
/// # Safety
/// The CPU must support AVX2; `1 ≤ m ≤ query.len()`,
/// `books_t.len() == 16 · query.len()`, `out.len() == 16 · m`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn table(
    kind: TableKind,
    query: &[f32],
    m: usize,
    books_t: &[f32],
    k: usize,
    out: &mut [f32],
) {
    let dim = query.len();
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let kv = _mm256_set1_epi32(k.min(CODES) as i32);
    // Slots j >= k become +inf: masks of lanes j < k.
    let keep0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(kv, lane));
    let keep1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
        kv,
        _mm256_add_epi32(lane, _mm256_set1_epi32(8)),
    ));
    let inf = _mm256_set1_ps(f32::INFINITY);
    let sign = _mm256_set1_ps(-0.0);
    for (s, row) in out.chunks_exact_mut(CODES).enumerate() {
        let (a, b) = (s * dim / m, (s + 1) * dim / m);
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        for (d, &qd) in query.iter().enumerate().take(b).skip(a) {
            // SAFETY: d < dim, so 16·d + 16 <= books_t.len().
            let (c0, c1) = unsafe {
                let p = books_t.as_ptr().add(CODES * d);
                (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
            };
            let q = _mm256_set1_ps(qd);
            match kind {
                TableKind::L2 => {
                    let x0 = _mm256_sub_ps(q, c0);
                    let x1 = _mm256_sub_ps(q, c1);
                    acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(x0, x0));
                    acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(x1, x1));
                }
                TableKind::NegDot => {
                    acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(q, c0));
                    acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(q, c1));
                }
            }
        }
        if kind == TableKind::NegDot {
            acc0 = _mm256_xor_ps(acc0, sign);
            acc1 = _mm256_xor_ps(acc1, sign);
        }
        acc0 = _mm256_blendv_ps(inf, acc0, keep0);
        acc1 = _mm256_blendv_ps(inf, acc1, keep1);
        // SAFETY: `row` has 16 floats.
        unsafe {
            _mm256_storeu_ps(row.as_mut_ptr(), acc0);
            _mm256_storeu_ps(row.as_mut_ptr().add(8), acc1);
        }
    }
}
