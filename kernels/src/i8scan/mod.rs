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
//! components per step, the query loaded once per step for all four).
//! Portable and NEON use the scalar model.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_isa_equals_scalar_and_sq8() {
        let seed = std::env::var("PROX_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5ca9_u64);
        let mut x = seed;
        let mut next = move || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
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

    #[test]
    #[should_panic(expected = "-127..=127")]
    fn rejects_minus_128_in_the_query() {
        dots(&[-128, 0], &[1, 1], &mut [0]);
    }
}
