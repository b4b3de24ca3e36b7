//! The fused screen over rows stored in groups of eight, interleaved four
//! bytes at a time, so that a SIMD lane accumulates one row's dot product
//! and no horizontal reduction is needed.
//!
//! # Layout
//!
//! Rows of `w` codes (`w` a multiple of 4; shorter rows are padded with
//! zero codes) are stored in groups of [`GROUP`] rows, `8·w` bytes per
//! group: chunk `c` of a group (32 bytes) holds bytes `4c..4c + 4` of its
//! rows `0, 1, ..., 7` in turn. Code `d` of row `i` is at
//! `(i / 8)·8w + (d / 4)·32 + (i % 8)·4 + d % 4`. The last group of a run is
//! padded with zero rows.
//!
//! # Tiers
//!
//! scalar (the reference); AVX2 (`vpsignb`/`vpmaddubsw`/`vpmaddwd` per 32
//! bytes, the query's four bytes broadcast); on CPUs with AVX-512 VNNI and
//! VL, the AVX2 tier uses `vpdpbusd` on 256-bit registers instead (rows
//! biased to unsigned bytes, the bias taken off once). Every tier gives
//! the scalar model's integers exactly.

use super::{scalar, SCREEN_MAX_DIMS};
#[cfg(target_arch = "x86_64")]
use crate::isa::vnni;
use crate::{isa, Isa};

/// Rows per group.
pub const GROUP: usize = 8;

/// Row width in the layout for `dims` codes: `dims` rounded up to a
/// multiple of 4.
pub const fn width(dims: usize) -> usize {
    dims.next_multiple_of(4)
}

/// Bytes of the layout for `n` rows of `dims` codes.
pub const fn bytes(dims: usize, n: usize) -> usize {
    n.div_ceil(GROUP) * GROUP * width(dims)
}

/// Appends `rows` (`n` row-major rows of `dims` codes) to `out` in the
/// grouped layout (`bytes(dims, n)` bytes, padding zero).
///
/// # Panics
/// If `rows.len()` is not a multiple of `dims` (for `dims > 0`).
#[track_caller]
pub fn push_rows(rows: &[i8], dims: usize, out: &mut Vec<i8>) {
    if dims == 0 {
        return;
    }
    assert!(
        rows.len().is_multiple_of(dims),
        "grouped push_rows: {} codes are not rows of {dims}",
        rows.len()
    );
    let (w, n) = (width(dims), rows.len() / dims);
    let start = out.len();
    out.resize(start + bytes(dims, n), 0);
    let dst = &mut out[start..];
    for (i, row) in rows.chunks_exact(dims).enumerate() {
        for (d, &x) in row.iter().enumerate() {
            dst[(i / GROUP) * GROUP * w + (d / 4) * 32 + (i % GROUP) * 4 + d % 4] = x;
        }
    }
}

#[track_caller]
fn check(q: &[i8], groups: &[i8], bias: &[i32]) {
    assert!(
        q.len() <= SCREEN_MAX_DIMS
            && q.len().is_multiple_of(4)
            && groups.len() == bytes(q.len(), bias.len())
            && u32::try_from(bias.len()).is_ok(),
        "grouped screen: query {} (a multiple of 4, at most {SCREEN_MAX_DIMS}), groups {} \
         (want {} for {} rows)",
        q.len(),
        groups.len(),
        bytes(q.len(), bias.len()),
        bias.len()
    );
    assert!(
        !q.contains(&i8::MIN),
        "grouped screen: query codes must lie in -127..=127"
    );
}

fn screen_on(
    isa: Isa,
    q: &[i8],
    groups: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present (and VNNI with VL
        // when `vnni()`); `check` held.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if vnni() => unsafe {
            super::x86::screen_grouped_vnni(q, groups, bias, limit, out, vals)
        },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { super::x86::screen_grouped(q, groups, bias, limit, out, vals) },
        _ => scalar::screen_grouped(q, groups, bias, limit, out, vals),
    }
}

/// [`super::screen`] over the grouped layout: for every row `i <
/// bias.len()` with `v_i = bias[i] − 2·Σ_d q_d·x_id ≤ limit`, appends `i`
/// to `out` and `v_i` to `vals`, in row order. `q` has the layout's width
/// (pad it with zero codes).
///
/// # Panics
/// If `q.len()` is not a multiple of 4 or above [`SCREEN_MAX_DIMS`],
/// `groups.len() != bytes(q.len(), bias.len())`, there are more than
/// `u32::MAX` rows or a query code is `−128`.
#[track_caller]
pub fn screen(
    q: &[i8],
    groups: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    check(q, groups, bias);
    screen_on(isa(), q, groups, bias, limit, out, vals)
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
    groups: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) -> bool {
    check(q, groups, bias);
    isa.is_available() && {
        screen_on(isa, q, groups, bias, limit, out, vals);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tier (and on x86 both the AVX2 and the VNNI kernel where the
    /// CPU has them) equals the row-major screen of the same rows: awkward
    /// widths and row counts, limits at and beside the values, extremes.
    #[test]
    fn every_tier_equals_the_row_major_screen() {
        let seed = prox_testkit::seed(0x9a0_u64);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let mut next = || rng.next();
        let mut cases: Vec<(Vec<i8>, Vec<i8>, usize)> = Vec::new();
        for dims in [1usize, 3, 4, 5, 8, 31, 32, 33, 64, 128] {
            for n in [0usize, 1, 7, 8, 9, 16, 17, 64, 65] {
                let rows: Vec<i8> = (0..n * dims).map(|_| next() as i8).collect();
                let q: Vec<i8> = (0..dims)
                    .map(|_| ((next() % 255) as i32 - 127) as i8)
                    .collect();
                cases.push((q, rows, n));
            }
        }
        for (qv, rv) in [(127i8, -128i8), (-127, -128), (127, 127), (-127, 127)] {
            cases.push((vec![qv; 384], vec![rv; 384 * 17], 17));
        }
        for (q, rows, n) in cases {
            let dims = q.len();
            let bias: Vec<i32> = (0..n)
                .map(|i| {
                    rows[i * dims..(i + 1) * dims]
                        .iter()
                        .map(|&c| i32::from(c) * i32::from(c))
                        .sum()
                })
                .collect();
            let mut groups = vec![5i8];
            push_rows(&rows, dims, &mut groups);
            let groups = &groups[1..];
            let mut qw = q.clone();
            qw.resize(width(dims), 0);
            let mut dv = vec![0i32; n];
            super::super::dots(&q, &rows, &mut dv);
            let vs: Vec<i32> = bias.iter().zip(&dv).map(|(b, d)| b - 2 * d).collect();
            let mut limits = vec![i32::MIN, i32::MAX, 0];
            for &v in vs.iter().take(3) {
                limits.extend([v - 1, v, v + 1]);
            }
            for limit in limits {
                let what = format!("dims {dims} n {n} limit {limit} (PROX_SEED={seed})");
                let (mut wi, mut wv) = (vec![9u32], vec![9i32]);
                super::super::screen(&q, &rows, &bias, limit, &mut wi, &mut wv);
                let mut got: Vec<(&str, Vec<u32>, Vec<i32>)> = Vec::new();
                for isa in crate::available_isas() {
                    let (mut gi, mut gv) = (vec![9u32], vec![9i32]);
                    assert!(screen_with(
                        isa, &qw, groups, &bias, limit, &mut gi, &mut gv
                    ));
                    got.push((isa.name(), gi, gv));
                }
                #[cfg(target_arch = "x86_64")]
                if Isa::Avx2.is_available() {
                    let (mut gi, mut gv) = (vec![9u32], vec![9i32]);
                    // SAFETY: AVX2 is present; `check` holds for these inputs.
                    unsafe {
                        super::super::x86::screen_grouped(
                            &qw, groups, &bias, limit, &mut gi, &mut gv,
                        )
                    };
                    got.push(("avx2 without vnni", gi, gv));
                    if vnni() {
                        let (mut gi, mut gv) = (vec![9u32], vec![9i32]);
                        // SAFETY: AVX2, VNNI and VL are present.
                        unsafe {
                            super::super::x86::screen_grouped_vnni(
                                &qw, groups, &bias, limit, &mut gi, &mut gv,
                            )
                        };
                        got.push(("vnni", gi, gv));
                    }
                }
                for (name, gi, gv) in got {
                    assert_eq!((&gi, &gv), (&wi, &wv), "{name} {what}");
                }
            }
        }
    }

    #[test]
    fn layout_places_each_code() {
        let rows: Vec<i8> = (0..9 * 5).map(|x| x as i8).collect();
        let mut g = Vec::new();
        push_rows(&rows, 5, &mut g);
        assert_eq!(g.len(), bytes(5, 9));
        assert_eq!(g.len(), 2 * 8 * 8);
        for i in 0..9 {
            for d in 0..8 {
                let want = if d < 5 { rows[i * 5 + d] } else { 0 };
                assert_eq!(scalar::grouped_at(&g, 8, i, d), want, "row {i} code {d}");
            }
        }
        // The second group's padding rows are zero.
        for i in 9..16 {
            for d in 0..8 {
                assert_eq!(scalar::grouped_at(&g, 8, i, d), 0, "padding row {i}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "multiple of 4")]
    fn rejects_a_width_not_a_multiple_of_four() {
        screen(
            &[1, 2, 3],
            &[0; 24],
            &[0],
            0,
            &mut Vec::new(),
            &mut Vec::new(),
        );
    }
}
