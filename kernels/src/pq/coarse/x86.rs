//! AVX2 coarse dots: per query component pair, one broadcast `i32` (two
//! `i16`) and, per block of 8 rows, one `vpmaddwd` with the block's 16
//! `i16` for that pair, accumulated in `i32` lanes (lane `r` = row `r`).
//! Four blocks share each broadcast. Sums are exact (see the module docs).

use std::arch::x86_64::*;

use super::ROWS;

/// The query pair `p` as two `i16` in one `i32` (low = component `2p`).
#[inline]
fn pair(q: &[i8], p: usize) -> i32 {
    let lo = i32::from(q[2 * p]) & 0xffff;
    let hi = q.get(2 * p + 1).map_or(0, |&x| i32::from(x));
    lo | (hi << 16)
}

/// Dots of `q` against `n` rows in transposed blocks.
///
/// # Safety
/// The CPU must support AVX2; `data.len() == ⌈n / 8⌉ · ⌈q.len() / 2⌉ · 16`
/// and `out.len() == n`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dots(q: &[i8], data: &[i16], n: usize, out: &mut [i32]) {
    let pairs = q.len().div_ceil(2);
    let stride = pairs * 2 * ROWS;
    let nblocks = n.div_ceil(ROWS);
    debug_assert_eq!(data.len(), nblocks * stride);
    let mut b = 0;
    while b < nblocks {
        let group = (nblocks - b).min(4);
        let mut acc = [_mm256_setzero_si256(); 4];
        let base = data.as_ptr();
        for p in 0..pairs {
            let qv = _mm256_set1_epi32(pair(q, p));
            for (g, acc) in acc.iter_mut().enumerate().take(group) {
                // SAFETY: block b + g < nblocks and p < pairs, so these 16
                // i16 lie inside `data`.
                let c =
                    unsafe { _mm256_loadu_si256(base.add((b + g) * stride + p * 2 * ROWS).cast()) };
                *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(c, qv));
            }
        }
        for (g, acc) in acc.iter().enumerate().take(group) {
            let mut lanes = [0i32; ROWS];
            // SAFETY: `lanes` holds 8 i32.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), *acc) };
            let r0 = (b + g) * ROWS;
            let len = (n - r0).min(ROWS);
            out[r0..r0 + len].copy_from_slice(&lanes[..len]);
        }
        b += group;
    }
}

/// The query quad `p` as four `i8` in one `i32` (low byte = component
/// `4p`; zero past the end).
#[inline]
fn quad(q: &[i8], p: usize) -> i32 {
    (0..4).fold(0i32, |acc, t| {
        let x = q.get(4 * p + t).map_or(0, |&x| i32::from(x as u8));
        acc | (x << (8 * t))
    })
}

/// Query quad pairs [`dots_vnni`] keeps on the stack (dims up to 512).
const STACK_PAIRS: usize = 64;

/// Query quads `2j` (low half) and `2j + 1` (high half), each broadcast
/// over eight lanes.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn pair_vector(q: &[i8], j: usize) -> __m512i {
    let lo = _mm256_set1_epi32(quad(q, 2 * j));
    let hi = _mm256_set1_epi32(quad(q, 2 * j + 1));
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// Dots of `q` against `n` rows in biased quad blocks (`vpdpbusd`).
///
/// # Safety
/// The CPU must support AVX2, AVX-512 F, VNNI and VL; `data.len() ==
/// ⌈n / 8⌉ · ⌈q.len() / 4⌉ · 32` and `out.len() == n`.
#[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
pub(crate) unsafe fn dots_vnni(q: &[i8], data: &[u8], n: usize, out: &mut [i32]) {
    let quads = q.len().div_ceil(4);
    let stride = quads * 4 * ROWS;
    let nblocks = n.div_ceil(ROWS);
    debug_assert_eq!(data.len(), nblocks * stride);
    // Σ (c + 128)·q = Σ c·q + 128·Σq, wrapping; the true dot fits in i32.
    let shift = 128i32.wrapping_mul(q.iter().map(|&x| i32::from(x)).sum::<i32>());
    // Quads 2j and 2j + 1 of a block are 64 contiguous bytes: one 512-bit
    // multiply-add serves both (quad 2j in the low 8 lanes, 2j + 1 in the
    // high 8), the halves summed at the end; an odd last quad runs 256-bit.
    let pairs = quads / 2;
    // The query's pair vectors, built once on the stack (no allocation per
    // query) when they fit, else per block group.
    let mut held = [_mm512_setzero_si512(); STACK_PAIRS];
    let stacked = pairs <= STACK_PAIRS;
    if stacked {
        for (j, v) in held.iter_mut().enumerate().take(pairs) {
            *v = pair_vector(q, j);
        }
    }
    let base = data.as_ptr();
    let mut b = 0;
    while b < nblocks {
        let group = (nblocks - b).min(4);
        let mut wide = [_mm512_setzero_si512(); 4];
        let mut tail = [_mm256_setzero_si256(); 4];
        // `kept` is the held pair vector when stacked, unused otherwise.
        for (j, &kept) in held
            .iter()
            .chain(std::iter::repeat(&held[0]))
            .take(pairs)
            .enumerate()
        {
            let qv = if stacked { kept } else { pair_vector(q, j) };
            for (g, acc) in wide.iter_mut().enumerate().take(group) {
                // SAFETY: block b + g < nblocks and 2j + 1 < quads, so these
                // 64 bytes lie inside the block's `stride` bytes of `data`.
                let c =
                    unsafe { _mm512_loadu_si512(base.add((b + g) * stride + j * 8 * ROWS).cast()) };
                *acc = _mm512_dpbusd_epi32(*acc, c, qv);
            }
        }
        if quads % 2 == 1 {
            let p = quads - 1;
            let qv = _mm256_set1_epi32(quad(q, p));
            for (g, acc) in tail.iter_mut().enumerate().take(group) {
                // SAFETY: block b + g < nblocks and p < quads.
                let c =
                    unsafe { _mm256_loadu_si256(base.add((b + g) * stride + p * 4 * ROWS).cast()) };
                *acc = _mm256_dpbusd_epi32(*acc, c, qv);
            }
        }
        for g in 0..group {
            let halves = _mm256_add_epi32(
                _mm512_castsi512_si256(wide[g]),
                _mm512_extracti64x4_epi64::<1>(wide[g]),
            );
            let sum = _mm256_add_epi32(halves, tail[g]);
            let mut lanes = [0i32; ROWS];
            // SAFETY: `lanes` holds 8 i32.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sum) };
            let r0 = (b + g) * ROWS;
            let len = (n - r0).min(ROWS);
            for (o, &l) in out[r0..r0 + len].iter_mut().zip(&lanes) {
                *o = l.wrapping_sub(shift);
            }
        }
        b += group;
    }
}
