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

/// Lane accumulators of the `R` rows `i..i + R` (row `r` at `(i + r)·d`,
/// `d = q.len()`) over their first `full` components, one query load per
/// 32-byte step shared by all `R` rows; each holds 8 `i32` partial sums.
///
/// # Safety
/// The CPU must support AVX2; `full <= q.len()` is a multiple of 32 and
/// `rows.len() >= (i + R)·q.len()`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn accumulate<const R: usize>(q: &[i8], rows: &[i8], i: usize, full: usize) -> [__m256i; R] {
    let d = q.len();
    debug_assert!(full <= d && full.is_multiple_of(32) && rows.len() >= (i + R) * d);
    let ones = _mm256_set1_epi16(1);
    let (pq, pr) = (q.as_ptr(), rows.as_ptr());
    let mut acc = [_mm256_setzero_si256(); R];
    let mut j = 0;
    while j < full {
        // SAFETY: j + 32 <= full <= d, so the query bytes and each row's
        // bytes (row i + r starts at (i + r)·d, and (i + R)·d <= rows.len())
        // lie in bounds.
        let qv = unsafe { _mm256_loadu_si256(pq.add(j).cast()) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let rv = unsafe { _mm256_loadu_si256(pr.add((i + r) * d + j).cast()) };
            // SAFETY: same target features as this function.
            *acc = _mm256_add_epi32(*acc, unsafe { step(qv, rv, ones) });
        }
        j += 32;
    }
    acc
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
    let tail = |row: &[i8]| super::scalar::dot(&q[full..], &row[full..]);
    let mut i = 0;
    while i + 4 <= n {
        // SAFETY: AVX2 is present; rows i..i + 4 lie in `rows` (i + 4 <= n).
        let acc = unsafe { accumulate::<4>(q, rows, i, full) };
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
            out[i + r] = if full < d {
                lane.wrapping_add(tail(row))
            } else {
                *lane
            };
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
        out[i] = if full < d {
            _mm_cvtsi128_si32(s).wrapping_add(tail(row))
        } else {
            _mm_cvtsi128_si32(s)
        };
        i += 1;
    }
}

/// The fused screen: dots of eight rows per pass (the query loaded once per
/// 32-byte step for all eight), reduced together into one vector of eight
/// dots, turned into `bias − 2·dot` and compared against `limit` in one
/// vector compare; survivors (a movemask) are appended in row order. The
/// last `n % 8` rows go through [`dots`].
///
/// # Safety
/// The CPU must support AVX2; `rows.len() == q.len() · bias.len()`, no
/// query code is `−128` and `q.len() <= SCREEN_MAX_DIMS` (so no value
/// overflows `i32`).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn screen(
    q: &[i8],
    rows: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    let d = q.len();
    let n = bias.len();
    debug_assert_eq!(rows.len(), d * n);
    let full = d - d % 32;
    let lim = _mm256_set1_epi32(limit);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: AVX2 is present; rows i..i + 8 lie in `rows` (i + 8 <= n).
        let acc = unsafe { accumulate::<8>(q, rows, i, full) };
        // hadd tree: after two rounds each 128-bit half holds four rows'
        // half sums ([rows 0-3 | rows 0-3] and [rows 4-7 | rows 4-7]);
        // crossing the halves and adding gives rows 0-7 in order.
        let h01 = _mm256_hadd_epi32(acc[0], acc[1]);
        let h23 = _mm256_hadd_epi32(acc[2], acc[3]);
        let h45 = _mm256_hadd_epi32(acc[4], acc[5]);
        let h67 = _mm256_hadd_epi32(acc[6], acc[7]);
        let lo = _mm256_hadd_epi32(h01, h23);
        let hi = _mm256_hadd_epi32(h45, h67);
        let mut dot = _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(lo, hi),
            _mm256_permute2x128_si256::<0x31>(lo, hi),
        );
        if full < d {
            let mut t = [0i32; 8];
            for (r, t) in t.iter_mut().enumerate() {
                let row = &rows[(i + r) * d..(i + r + 1) * d];
                *t = super::scalar::dot(&q[full..], &row[full..]);
            }
            // SAFETY: `t` holds 8 i32.
            dot = _mm256_add_epi32(dot, unsafe { _mm256_loadu_si256(t.as_ptr().cast()) });
        }
        // SAFETY: i + 8 <= n = bias.len().
        let b = unsafe { _mm256_loadu_si256(bias.as_ptr().add(i).cast()) };
        let v = _mm256_sub_epi32(b, _mm256_slli_epi32::<1>(dot));
        // SAFETY: same target features.
        unsafe { emit(v, lim, 0xff, i, out, vals) };
        i += 8;
    }
    if i < n {
        let mut ds = [0i32; 8];
        let ds = &mut ds[..n - i];
        // SAFETY: the caller's contract, restricted to rows i..n.
        unsafe { dots(q, &rows[i * d..], ds) };
        for (r, &dot) in ds.iter().enumerate() {
            let v = bias[i + r] - 2 * dot;
            if v <= limit {
                out.push((i + r) as u32);
                vals.push(v);
            }
        }
    }
}

/// Appends lane `r` of `v` as row `base + r` for every lane in `valid` at
/// most `lim` (in lane order): the output step of every screen here.
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn emit(
    v: __m256i,
    lim: __m256i,
    valid: u32,
    base: usize,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    let fail = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(v, lim)));
    let mut pass = !fail as u32 & valid;
    if pass != 0 {
        let mut vs = [0i32; 8];
        // SAFETY: `vs` holds 8 i32.
        unsafe { _mm256_storeu_si256(vs.as_mut_ptr().cast(), v) };
        while pass != 0 {
            let r = pass.trailing_zeros() as usize;
            out.push((base + r) as u32);
            vals.push(vs[r]);
            pass &= pass - 1;
        }
    }
}

/// The biases of group `g` (lanes past `bias.len()` read as 0; the caller
/// masks them) and the mask of its valid lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn group_bias(bias: &[i32], g: usize) -> (__m256i, u32) {
    let n = bias.len();
    if 8 * g + 8 <= n {
        // SAFETY: 8g + 8 <= bias.len().
        (
            unsafe { _mm256_loadu_si256(bias.as_ptr().add(8 * g).cast()) },
            0xff,
        )
    } else {
        let mut t = [0i32; 8];
        let k = n - 8 * g;
        t[..k].copy_from_slice(&bias[8 * g..]);
        // SAFETY: `t` holds 8 i32.
        (
            unsafe { _mm256_loadu_si256(t.as_ptr().cast()) },
            (1u32 << k) - 1,
        )
    }
}

/// The loop shared by the grouped screens: for each group, `$acc`
/// starts at `$init` and takes `$step` once per 32-byte chunk (`$qb` the
/// query's four bytes broadcast, `$x` the chunk), then the group's values
/// `bias − 2·acc` are compared and emitted. Expands inside the caller's
/// `#[target_feature]` function, so the step's intrinsics inline there.
macro_rules! screen_groups {
    ($q:ident, $groups:ident, $bias:ident, $limit:ident, $out:ident, $vals:ident,
     $init:expr, |$acc:ident, $qb:ident, $x:ident| $step:expr) => {{
        let w = $q.len();
        let chunks = w / 4;
        let ng = $bias.len().div_ceil(8);
        debug_assert!(w.is_multiple_of(4) && $groups.len() == ng * 8 * w);
        let lim = _mm256_set1_epi32($limit);
        let (pq, pg) = ($q.as_ptr(), $groups.as_ptr());
        for g in 0..ng {
            let mut $acc = $init;
            for c in 0..chunks {
                // SAFETY: 4c + 4 <= w = q.len(); group g's chunk c is the
                // 32 bytes at g·8w + 32c < ng·8w = groups.len().
                let ($qb, $x) = unsafe {
                    (
                        _mm256_set1_epi32(pq.add(4 * c).cast::<i32>().read_unaligned()),
                        _mm256_loadu_si256(pg.add(g * 8 * w + 32 * c).cast()),
                    )
                };
                $acc = $step;
            }
            let (b, valid) = group_bias($bias, g);
            let v = _mm256_sub_epi32(b, _mm256_slli_epi32::<1>($acc));
            // SAFETY: same target features as the caller.
            unsafe { emit(v, lim, valid, 8 * g, $out, $vals) };
        }
    }};
}

/// [`super::grouped::screen`], AVX2: per 4 components of 8 rows (one
/// 32-byte load), the query's 4 bytes broadcast to every lane; `|row|`
/// times the query with the row's signs through `vpmaddubsw` and
/// `vpmaddwd` as in [`step`], so each lane accumulates its own row's dot
/// and no horizontal reduction is needed.
///
/// # Safety
/// The CPU must support AVX2; `q.len()` is a multiple of 4 and `groups`
/// holds `bias.len().div_ceil(8)` groups of `8·q.len()` bytes.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn screen_grouped(
    q: &[i8],
    groups: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    let ones = _mm256_set1_epi16(1);
    screen_groups!(
        q,
        groups,
        bias,
        limit,
        out,
        vals,
        _mm256_setzero_si256(),
        |acc, qb, x| {
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(qb, x));
            _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones))
        }
    );
}

/// [`screen_grouped`] with AVX-512 VNNI on 256-bit registers: each row
/// byte biased to unsigned (`x ^ 0x80 = x + 128`), `vpdpbusd` adds four
/// `u8·i8` products per lane exactly, and `128·Σq` is taken off once.
///
/// # Safety
/// The CPU must support AVX2, AVX-512 VNNI and AVX-512 VL; as
/// [`screen_grouped`] otherwise.
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
pub(crate) unsafe fn screen_grouped_vnni(
    q: &[i8],
    groups: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    // Exact: |Σq| <= 128·w, and 128·128·w fits i32 for w <= SCREEN_MAX_DIMS.
    let shift: i32 = 128 * q.iter().map(|&x| i32::from(x)).sum::<i32>();
    let flip = _mm256_set1_epi8(i8::MIN);
    screen_groups!(
        q,
        groups,
        bias,
        limit,
        out,
        vals,
        _mm256_set1_epi32(-shift),
        |acc, qb, x| _mm256_dpbusd_epi32(acc, _mm256_xor_si256(x, flip), qb)
    );
}
