//! Streaming exact `i8` dot products of one query against many contiguous
//! rows: the scan kernel of the native search's flat arena.
//!
//! Same result as [`crate::sq8::dot_i8_many`] (exact `Σ q_d·row_d` in
//! `i32`), restricted to query codes in `−127..=127` (the symmetric 8-bit
//! codes every quantizer in the workspace produces), which lets the AVX2
//! tier multiply bytes directly instead of widening both sides to `i16`:
//!
//! * `|row_d|` as an unsigned byte (at most 128) times `sign(row_d)·q_d`
//!   (`vpsignb`, at most 127 in magnitude: the reason `q_d ≠ −128`) is the
//!   product `q_d·row_d`; `vpmaddubsw` adds adjacent pairs into `i16`
//!   lanes, at most `2·128·127 = 32 512 < 2^15` in magnitude, so its
//!   saturation never triggers and the pair sums are exact;
//! * `vpmaddwd` with ones widens them to `i32`, accumulated per row.
//!
//! Sums are exact for `dims ≤ 131 072` ([`MAX_DIMS`]), so every tier is
//! bit-identical to the scalar model (`sq8::dot_i8_many`'s definition).
//!
//! # Tiers
//!
//! scalar (the reference, one row at a time); AVX2 (four rows per pass, 32
//! components per step, the query loaded once per step for all four;
//! eight rows per pass for [`screen`], whose dots are reduced together and
//! compared in one vector). Portable and NEON use the scalar model.

pub mod grouped;
mod scalar;

#[cfg(target_arch = "x86_64")]
mod x86;

use crate::{isa, Isa};

/// Largest row length whose `i32` sums cannot overflow.
pub const MAX_DIMS: usize = 1 << 17;

#[track_caller]
fn check(q: &[i8], rows: &[i8], out: &[i32]) {
    assert!(
        q.len() <= MAX_DIMS && rows.len() == q.len() * out.len(),
        "i8scan dots: query {} (at most {MAX_DIMS}), rows {} (want {}·{})",
        q.len(),
        rows.len(),
        q.len(),
        out.len()
    );
    assert!(
        !q.contains(&i8::MIN),
        "i8scan dots: query codes must lie in -127..=127"
    );
}

fn dots_on(isa: Isa, q: &[i8], rows: &[i8], out: &mut [i32]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `check` held.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dots(q, rows, out) },
        _ => scalar::dots(q, rows, out),
    }
}

/// `out[i] = Σ_d q_d · rows[i·dims + d]` (`dims = q.len()`), exact in
/// `i32`, for every row.
///
/// # Panics
/// If `rows.len() != q.len() · out.len()`, `q.len() > MAX_DIMS` or a query
/// code is `−128`.
#[track_caller]
pub fn dots(q: &[i8], rows: &[i8], out: &mut [i32]) {
    check(q, rows, out);
    dots_on(isa(), q, rows, out)
}

/// [`dots`] on an explicit ISA; `false` (and `out` untouched) if
/// unavailable.
///
/// # Panics
/// As [`dots`].
#[track_caller]
pub fn dots_with(isa: Isa, q: &[i8], rows: &[i8], out: &mut [i32]) -> bool {
    check(q, rows, out);
    isa.is_available() && {
        dots_on(isa, q, rows, out);
        true
    }
}

/// Largest row length for [`screen`]: `|bias − 2·dot| ≤ 128²·d +
/// 2·128·127·d = 48 896·d` must fit in `i32` (`d ≤ 43 919`).
pub const SCREEN_MAX_DIMS: usize = 1 << 15;

#[track_caller]
fn check_screen(q: &[i8], rows: &[i8], bias: &[i32]) {
    assert!(
        q.len() <= SCREEN_MAX_DIMS
            && rows.len() == q.len() * bias.len()
            && u32::try_from(bias.len()).is_ok(),
        "i8scan screen: query {} (at most {SCREEN_MAX_DIMS}), rows {} (want {}·{})",
        q.len(),
        rows.len(),
        q.len(),
        bias.len()
    );
    assert!(
        !q.contains(&i8::MIN),
        "i8scan screen: query codes must lie in -127..=127"
    );
}

fn screen_on(
    isa: Isa,
    q: &[i8],
    rows: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `check_screen`
        // held.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::screen(q, rows, bias, limit, out, vals) },
        _ => scalar::screen(q, rows, bias, limit, out, vals),
    }
}

/// The fused screen of the exact L2 loops: for every row `i` (`dims =
/// q.len()`) with `v_i = bias[i] − 2·Σ_d q_d·rows[i·dims + d] ≤ limit`,
/// appends `i` to `out` and `v_i` to `vals`, in row order.
///
/// With `bias[i] = Σ x̂²` of the row's codes, `v_i + Σ q̂²` is the integer
/// code distance, so `limit = bulk − Σ q̂²` keeps the rows with distance
/// at most `bulk`. Every `v_i` is exact in `i32` when `|bias[i]| ≤ 128²·dims`
/// (true for any sum of squared `i8` codes) and `dims ≤`
/// [`SCREEN_MAX_DIMS`]; a caller with a wider `i64` limit clamps it to
/// `i32` without changing the result, since `|v_i| < 2^31 − 1`.
///
/// # Panics
/// If `rows.len() != q.len() · bias.len()`, `q.len() > SCREEN_MAX_DIMS`,
/// there are more than `u32::MAX` rows or a query code is `−128`.
#[track_caller]
pub fn screen(
    q: &[i8],
    rows: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    check_screen(q, rows, bias);
    screen_on(isa(), q, rows, bias, limit, out, vals)
}

/// [`screen`] on an explicit ISA; `false` (and nothing appended) if
/// unavailable.
///
/// # Panics
/// As [`screen`].
#[track_caller]
pub fn screen_with(
    isa: Isa,
    q: &[i8],
    rows: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) -> bool {
    check_screen(q, rows, bias);
    isa.is_available() && {
        screen_on(isa, q, rows, bias, limit, out, vals);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_isa_equals_scalar_and_sq8() {
        let seed = prox_testkit::seed(0x5ca9_u64);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let mut next = || rng.next();
        for dims in [
            0, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 384, 385, 768, 1536,
        ] {
            for n in [0, 1, 3, 4, 5, 8, 9, 33] {
                // Rows may hold -128; the query may not.
                let rows: Vec<i8> = (0..n * dims).map(|_| next() as i8).collect();
                let q: Vec<i8> = (0..dims)
                    .map(|_| ((next() % 255) as i32 - 127) as i8)
                    .collect();
                let mut want = vec![0i32; n];
                scalar::dots(&q, &rows, &mut want);
                let mut sq8 = vec![0i32; n];
                crate::sq8::dot_i8_many(&q, &rows, &mut sq8);
                assert_eq!(want, sq8, "dims {dims} n {n} (PROX_SEED={seed})");
                for isa in crate::available_isas() {
                    let mut got = vec![7i32; n];
                    assert!(dots_with(isa, &q, &rows, &mut got));
                    assert_eq!(got, want, "{isa} dims {dims} n {n} (PROX_SEED={seed})");
                }
            }
        }
        // Extremes: every product at its largest magnitude, both signs.
        for (qv, rv, want) in [
            (127i8, -128i8, -127 * 128),
            (-127, -128, 127 * 128),
            (127, 127, 127 * 127),
            (-127, 127, -127 * 127),
        ] {
            let dims = 1000;
            let rows = vec![rv; 5 * dims];
            let q = vec![qv; dims];
            for isa in crate::available_isas() {
                let mut got = vec![0i32; 5];
                assert!(dots_with(isa, &q, &rows, &mut got));
                assert_eq!(got, vec![want * dims as i32; 5], "{isa}");
            }
        }
    }

    /// The fused screen equals the scalar model bit for bit on every ISA,
    /// and the scalar model equals `dots` plus the comparison: awkward
    /// dims and row counts, limits at and beside the values, extreme codes.
    #[test]
    fn screen_every_isa_equals_scalar() {
        let seed = prox_testkit::seed(0x5c7e_u64);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let mut next = || rng.next();
        let check = |q: &[i8], rows: &[i8], bias: &[i32], limit: i32, what: &str| {
            let n = bias.len();
            let mut dv = vec![0i32; n];
            dots(q, rows, &mut dv);
            let (mut wi, mut wv) = (Vec::new(), Vec::new());
            for (i, (&b, &dot)) in bias.iter().zip(&dv).enumerate() {
                let v = i64::from(b) - 2 * i64::from(dot);
                if v <= i64::from(limit) {
                    wi.push(i as u32);
                    wv.push(v as i32);
                }
            }
            let (mut si, mut sv) = (vec![9u32], vec![9i32]);
            scalar::screen(q, rows, bias, limit, &mut si, &mut sv);
            assert_eq!((&si[1..], &sv[1..]), (&wi[..], &wv[..]), "scalar {what}");
            for isa in crate::available_isas() {
                // Appends after what is already there.
                let (mut gi, mut gv) = (vec![9u32], vec![9i32]);
                assert!(screen_with(isa, q, rows, bias, limit, &mut gi, &mut gv));
                assert_eq!((gi, gv), (si.clone(), sv.clone()), "{isa} {what}");
            }
        };
        for dims in [0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 128, 384] {
            for n in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33] {
                let rows: Vec<i8> = (0..n * dims).map(|_| next() as i8).collect();
                let q: Vec<i8> = (0..dims)
                    .map(|_| ((next() % 255) as i32 - 127) as i8)
                    .collect();
                let bias: Vec<i32> = rows
                    .chunks(dims.max(1))
                    .take(n)
                    .map(|r| r.iter().map(|&c| i32::from(c) * i32::from(c)).sum())
                    .collect();
                let bias = if dims == 0 { vec![0; n] } else { bias };
                let mut dv = vec![0i32; n];
                dots(&q, &rows, &mut dv);
                let vs: Vec<i32> = bias.iter().zip(&dv).map(|(b, d)| b - 2 * d).collect();
                let mut limits = vec![i32::MIN, i32::MAX, 0];
                for &v in vs.iter().take(4) {
                    limits.extend([v - 1, v, v + 1]);
                }
                if let Some(&med) = vs.get(n / 2) {
                    limits.push(med);
                }
                for limit in limits {
                    check(
                        &q,
                        &rows,
                        &bias,
                        limit,
                        &format!("dims {dims} n {n} limit {limit} (PROX_SEED={seed})"),
                    );
                }
            }
        }
        // Extremes: largest products and squared norms, both signs of the
        // dot, at the boundary limit.
        for (qv, rv) in [(127i8, -128i8), (-127, -128), (127, 127), (-127, 127)] {
            let dims = 384;
            let n = 17;
            let rows = vec![rv; n * dims];
            let q = vec![qv; dims];
            let bias = vec![i32::from(rv) * i32::from(rv) * dims as i32; n];
            let v = bias[0] - 2 * i32::from(qv) * i32::from(rv) * dims as i32;
            for limit in [v - 1, v, i32::MIN, i32::MAX] {
                check(
                    &q,
                    &rows,
                    &bias,
                    limit,
                    &format!("extreme {qv} {rv} limit {limit}"),
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "-127..=127")]
    fn rejects_minus_128_in_the_query() {
        dots(&[-128, 0], &[1, 1], &mut [0]);
    }
}
