//! Fast `f32` distance kernels, dispatched once per process to the best ISA.
//!
//! Accumulation is in `f32` with an ISA-specific order (lanes, FMA), so
//! results differ from the [`scalar`](Isa::Scalar) reference by rounding only:
//! for every kernel here, `|fast − scalar| ≤ F32_REL_TOL · M` where `M` is the
//! sum of the magnitudes of the terms (`Σ (a_i − b_i)²` for L2, `Σ |a_i·b_i|`
//! for dot, `Σ |a_i·b_i| / (‖a‖·‖b‖) ≤ 1` for cosine). Use these for ranking;
//! persisted and reported numbers come from [`crate::canonical`].
//!
//! Slice contracts (checked, panicking with a message, since they are caller
//! bugs rather than input data): one-to-one kernels need `a.len() == b.len()`;
//! one-to-many kernels need `rows.len() == q.len() · out.len()` (rows are
//! contiguous, row-major). Dimension 0 is legal: L2 and dot give 0, cosine 1.

mod scalar;

mod portable;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

#[cfg(target_arch = "aarch64")]
mod aarch64;

use crate::{isa, Isa, Metric};

/// The documented tolerance between any ISA and the scalar reference,
/// relative to the magnitude sum `M` described in the module docs.
pub const F32_REL_TOL: f32 = 1e-4;

/// Cosine distance from its parts: `1 − dot / (‖a‖·‖b‖)`, clamped to `[0, 2]`;
/// `1.0` when either norm is zero.
#[inline]
pub(crate) fn cosine_from_parts(dot: f32, na2: f32, nb2: f32) -> f32 {
    if na2 <= 0.0 || nb2 <= 0.0 {
        return 1.0;
    }
    (1.0 - dot / (na2.sqrt() * nb2.sqrt())).clamp(0.0, 2.0)
}

#[track_caller]
fn check_pair(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "prox_kernels::f32: vector lengths differ");
}

#[track_caller]
fn check_many(q: &[f32], rows: &[f32], out: &[f32]) {
    assert!(
        q.len().checked_mul(out.len()) == Some(rows.len()),
        "prox_kernels::f32: rows.len() = {} but dim {} x {} outputs",
        rows.len(),
        q.len(),
        out.len()
    );
}

fn l2sq_on(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    match isa {
        // SAFETY: `isa` is available (cached detection), so AVX2+FMA are present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::l2sq(a, b) },
        // SAFETY: `isa` is available, so NEON is present.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::l2sq(a, b) },
        Isa::Portable => portable::l2sq(a, b),
        _ => scalar::l2sq(a, b),
    }
}

fn dot_on(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    match isa {
        // SAFETY: `isa` is available, so AVX2+FMA are present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot(a, b) },
        // SAFETY: `isa` is available, so NEON is present.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::dot(a, b) },
        Isa::Portable => portable::dot(a, b),
        _ => scalar::dot(a, b),
    }
}

fn dot_norm_on(isa: Isa, a: &[f32], b: &[f32]) -> (f32, f32) {
    match isa {
        // SAFETY: `isa` is available, so AVX2+FMA are present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_norm(a, b) },
        // SAFETY: `isa` is available, so NEON is present.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::dot_norm(a, b) },
        Isa::Portable => portable::dot_norm(a, b),
        _ => scalar::dot_norm(a, b),
    }
}

fn cosine_on(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    let (_, na) = dot_norm_on(isa, a, a);
    let (d, nb) = dot_norm_on(isa, a, b);
    cosine_from_parts(d, na, nb)
}

fn l2sq_many_on(isa: Isa, q: &[f32], rows: &[f32], out: &mut [f32]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2+FMA are present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::l2sq_many(q, rows, out) },
        // SAFETY: `isa` is available, so NEON is present.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::l2sq_many(q, rows, out) },
        Isa::Portable => portable::l2sq_many(q, rows, out),
        _ => scalar::l2sq_many(q, rows, out),
    }
}

fn dot_many_on(isa: Isa, q: &[f32], rows: &[f32], out: &mut [f32]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2+FMA are present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_many(q, rows, out) },
        // SAFETY: `isa` is available, so NEON is present.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::dot_many(q, rows, out) },
        Isa::Portable => portable::dot_many(q, rows, out),
        _ => scalar::dot_many(q, rows, out),
    }
}

fn cosine_many_on(isa: Isa, q: &[f32], rows: &[f32], out: &mut [f32]) {
    let (_, qn) = dot_norm_on(isa, q, q);
    match isa {
        // SAFETY: `isa` is available, so AVX2+FMA are present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::cosine_many(q, qn, rows, out) },
        // SAFETY: `isa` is available, so NEON is present.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::cosine_many(q, qn, rows, out) },
        Isa::Portable => portable::cosine_many(q, qn, rows, out),
        _ => scalar::cosine_many(q, qn, rows, out),
    }
}

fn score_on(isa: Isa, metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::L2 => l2sq_on(isa, a, b),
        Metric::Cosine => 1.0 - dot_on(isa, a, b),
        Metric::InnerProduct => -dot_on(isa, a, b),
    }
}

fn score_many_on(isa: Isa, metric: Metric, q: &[f32], rows: &[f32], out: &mut [f32]) {
    match metric {
        Metric::L2 => l2sq_many_on(isa, q, rows, out),
        Metric::Cosine => {
            dot_many_on(isa, q, rows, out);
            out.iter_mut().for_each(|o| *o = 1.0 - *o);
        }
        Metric::InnerProduct => {
            dot_many_on(isa, q, rows, out);
            out.iter_mut().for_each(|o| *o = -*o);
        }
    }
}

/// Squared Euclidean distance `Σ (a_i − b_i)²`.
///
/// # Panics
/// If `a.len() != b.len()`.
#[track_caller]
pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    check_pair(a, b);
    l2sq_on(isa(), a, b)
}

/// Dot product `Σ a_i · b_i`.
///
/// # Panics
/// If `a.len() != b.len()`.
#[track_caller]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    check_pair(a, b);
    dot_on(isa(), a, b)
}

/// Cosine distance `1 − dot/(‖a‖·‖b‖)` in `[0, 2]`; `1.0` if either vector
/// has zero norm (including dimension 0). Works on unnormalised input.
///
/// # Panics
/// If `a.len() != b.len()`.
#[track_caller]
pub fn cosine_distance(a: &[f32], b: &[f32]) -> f32 {
    check_pair(a, b);
    cosine_on(isa(), a, b)
}

/// `out[i] = l2sq(q, row_i)` for the `out.len()` contiguous rows of `q.len()`.
///
/// # Panics
/// If `rows.len() != q.len() · out.len()`.
#[track_caller]
pub fn l2sq_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    check_many(q, rows, out);
    l2sq_many_on(isa(), q, rows, out)
}

/// `out[i] = dot(q, row_i)`.
///
/// # Panics
/// If `rows.len() != q.len() · out.len()`.
#[track_caller]
pub fn dot_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    check_many(q, rows, out);
    dot_many_on(isa(), q, rows, out)
}

/// `out[i] = cosine_distance(q, row_i)` (norms computed on the fly; the
/// query norm once).
///
/// # Panics
/// If `rows.len() != q.len() · out.len()`.
#[track_caller]
pub fn cosine_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    check_many(q, rows, out);
    cosine_many_on(isa(), q, rows, out)
}

/// Ranking score, lower is better, with the same order as
/// [`canonical::score`](crate::canonical::score) on prepared vectors (unit
/// norm for cosine): L2 → `l2sq`, Cosine → `1 − dot`, InnerProduct → `−dot`.
///
/// # Panics
/// If `a.len() != b.len()`.
#[track_caller]
pub fn score(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    check_pair(a, b);
    score_on(isa(), metric, a, b)
}

/// `out[i] = score(metric, q, row_i)`.
///
/// # Panics
/// If `rows.len() != q.len() · out.len()`.
#[track_caller]
pub fn score_many(metric: Metric, q: &[f32], rows: &[f32], out: &mut [f32]) {
    check_many(q, rows, out);
    score_many_on(isa(), metric, q, rows, out)
}

/// [`l2sq`] on an explicit ISA; `None` if that ISA is unavailable here.
#[track_caller]
pub fn l2sq_with(isa: Isa, a: &[f32], b: &[f32]) -> Option<f32> {
    check_pair(a, b);
    isa.is_available().then(|| l2sq_on(isa, a, b))
}

/// [`dot`] on an explicit ISA; `None` if that ISA is unavailable here.
#[track_caller]
pub fn dot_with(isa: Isa, a: &[f32], b: &[f32]) -> Option<f32> {
    check_pair(a, b);
    isa.is_available().then(|| dot_on(isa, a, b))
}

/// [`cosine_distance`] on an explicit ISA; `None` if unavailable.
#[track_caller]
pub fn cosine_distance_with(isa: Isa, a: &[f32], b: &[f32]) -> Option<f32> {
    check_pair(a, b);
    isa.is_available().then(|| cosine_on(isa, a, b))
}

/// [`score`] on an explicit ISA; `None` if unavailable.
#[track_caller]
pub fn score_with(isa: Isa, metric: Metric, a: &[f32], b: &[f32]) -> Option<f32> {
    check_pair(a, b);
    isa.is_available().then(|| score_on(isa, metric, a, b))
}

/// [`l2sq_many`] on an explicit ISA; returns `false` (and leaves `out`
/// untouched) if that ISA is unavailable here.
#[track_caller]
pub fn l2sq_many_with(isa: Isa, q: &[f32], rows: &[f32], out: &mut [f32]) -> bool {
    check_many(q, rows, out);
    isa.is_available() && {
        l2sq_many_on(isa, q, rows, out);
        true
    }
}

/// [`dot_many`] on an explicit ISA; `false` if unavailable.
#[track_caller]
pub fn dot_many_with(isa: Isa, q: &[f32], rows: &[f32], out: &mut [f32]) -> bool {
    check_many(q, rows, out);
    isa.is_available() && {
        dot_many_on(isa, q, rows, out);
        true
    }
}

/// [`cosine_many`] on an explicit ISA; `false` if unavailable.
#[track_caller]
pub fn cosine_many_with(isa: Isa, q: &[f32], rows: &[f32], out: &mut [f32]) -> bool {
    check_many(q, rows, out);
    isa.is_available() && {
        cosine_many_on(isa, q, rows, out);
        true
    }
}

/// [`score_many`] on an explicit ISA; `false` if unavailable.
#[track_caller]
pub fn score_many_with(isa: Isa, metric: Metric, q: &[f32], rows: &[f32], out: &mut [f32]) -> bool {
    check_many(q, rows, out);
    isa.is_available() && {
        score_many_on(isa, metric, q, rows, out);
        true
    }
}

/// Squared Euclidean norm `Σ a_i²` (dispatched).
pub fn norm2(a: &[f32]) -> f32 {
    dot_norm_on(isa(), a, a).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_parts_edge_cases() {
        assert_eq!(cosine_from_parts(0.0, 0.0, 1.0), 1.0);
        assert_eq!(cosine_from_parts(1.0, 1.0, 1.0), 0.0);
        assert_eq!(cosine_from_parts(-1.0, 1.0, 1.0), 2.0);
        // Rounding past the range is clamped.
        assert_eq!(cosine_from_parts(1.0000001, 1.0, 1.0), 0.0);
    }

    #[test]
    fn every_isa_handles_empty_and_short() {
        for isa in crate::available_isas() {
            assert_eq!(l2sq_with(isa, &[], &[]), Some(0.0));
            assert_eq!(dot_with(isa, &[], &[]), Some(0.0));
            assert_eq!(cosine_distance_with(isa, &[], &[]), Some(1.0));
            assert_eq!(l2sq_with(isa, &[3.0], &[1.0]), Some(4.0));
            let mut out = [9.0f32; 3];
            assert!(cosine_many_with(isa, &[], &[], &mut out));
            assert_eq!(out, [1.0; 3]);
        }
    }

    #[test]
    #[should_panic(expected = "rows.len()")]
    fn many_checks_shape() {
        let mut out = [0.0f32; 2];
        l2sq_many(&[1.0, 2.0], &[1.0, 2.0, 3.0], &mut out);
    }
}
