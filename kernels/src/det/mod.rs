//! Deterministic `f32` kernels: one fixed summation order on every ISA.
//!
//! Used where an `f32` result feeds something persisted (the fast HNSW
//! build ranks and selects neighbours with it), so the result must not
//! depend on the machine. The order: 16 lanes, lane `i` accumulates the
//! products (or squared differences) of components `i, i + 16, ...` over
//! the whole 16-wide chunks, each step a separate multiply then add (never
//! an FMA); the `< 16` tail components are added into lanes `0..tail`; the
//! lanes are then reduced by the fixed tree `16 -> 8 -> 4 -> 2 -> 1`
//! (`lane[i] += lane[i + w]` for `w = 8, 4, 2, 1`).
//!
//! Every tier performs exactly these IEEE-754 operations, so results are
//! bit-identical to [`scalar`](Isa::Scalar) on every machine and ISA (tested
//! bit for bit, not within a tolerance). AVX2 holds the 16 lanes in two
//! 256-bit registers; the portable tier in four `wide::f32x4`.

mod portable;
mod scalar;

#[cfg(target_arch = "x86_64")]
mod x86;

use crate::{isa, Isa};

/// Number of lanes of the fixed order.
pub const LANES: usize = 16;

fn dot_on(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    match isa {
        // SAFETY: `isa` is available (cached detection), so AVX2 is present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot(a, b) },
        Isa::Scalar => scalar::dot(a, b),
        _ => portable::dot(a, b),
    }
}

fn l2sq_on(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    match isa {
        // SAFETY: `isa` is available (cached detection), so AVX2 is present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::l2sq(a, b) },
        Isa::Scalar => scalar::l2sq(a, b),
        _ => portable::l2sq(a, b),
    }
}

/// Deterministic dot product over `min(a.len(), b.len())` components.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_on(isa(), a, b)
}

/// Deterministic squared Euclidean distance over `min(a.len(), b.len())`
/// components.
#[inline]
pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    l2sq_on(isa(), a, b)
}

/// [`dot`] on an explicit ISA; `None` if unavailable.
pub fn dot_with(isa: Isa, a: &[f32], b: &[f32]) -> Option<f32> {
    isa.is_available().then(|| dot_on(isa, a, b))
}

/// [`l2sq`] on an explicit ISA; `None` if unavailable.
pub fn l2sq_with(isa: Isa, a: &[f32], b: &[f32]) -> Option<f32> {
    isa.is_available().then(|| l2sq_on(isa, a, b))
}

/// The fixed reduction tree over the 16 lanes.
#[inline]
pub(crate) fn reduce(mut acc: [f32; LANES]) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            acc[i] += acc[i + width];
        }
        width /= 2;
    }
    acc[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 20_001) as f32 / 997.0 - 10.0
            })
            .collect()
    }

    #[test]
    fn every_isa_is_bit_identical_to_scalar() {
        for (s, n) in [
            0usize, 1, 7, 15, 16, 17, 31, 32, 33, 100, 128, 384, 385, 768,
        ]
        .into_iter()
        .enumerate()
        {
            let a = data(n, 2 * s as u32 + 1);
            let b = data(n, 2 * s as u32 + 2);
            let (d, l) = (scalar::dot(&a, &b), scalar::l2sq(&a, &b));
            for isa in crate::available_isas() {
                assert_eq!(dot_with(isa, &a, &b).map(f32::to_bits), Some(d.to_bits()));
                assert_eq!(l2sq_with(isa, &a, &b).map(f32::to_bits), Some(l.to_bits()));
            }
            let exact = crate::canonical::dot(&a, &b);
            assert!((f64::from(d) - exact).abs() <= 1e-4 * (1.0 + n as f64) * 100.0);
        }
    }
}
