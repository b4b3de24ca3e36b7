//! Projection onto a fixed-point basis: `y_j = Σ_i (k_ij · 2^-15) · v_i`
//! for an `i16` matrix `k` stored row-major by `i` (`d × w`) and an `f32`
//! vector `v`, the exact-search local frames' query projection.
//!
//! Each `y_j` is one fixed IEEE sequence on every tier: start at `+0.0`,
//! then for `i = 0, 1, ...` convert `k_ij` (exact), scale by `2^-15`
//! (exact), multiply by `v_i` (rounded) and add (rounded): never an FMA,
//! never a reordered sum. The AVX2 tier computes eight `j` at a time; the
//! results are bit-identical to the scalar reference (tested bit for bit).

mod scalar;

#[cfg(target_arch = "x86_64")]
mod x86;

use crate::{isa, Isa};

/// The scale of the fixed-point entries, `2^-15`.
pub const SCALE: f32 = 1.0 / 32_768.0;

#[track_caller]
fn check(k: &[i16], v: &[f32], y: &[f32]) {
    assert!(
        k.len() == v.len() * y.len(),
        "project: basis {} (want {}·{})",
        k.len(),
        v.len(),
        y.len()
    );
}

fn fixed_on(isa: Isa, k: &[i16], v: &[f32], y: &mut [f32]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `check` held.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::fixed(k, v, y) },
        _ => scalar::fixed(k, v, y),
    }
}

/// `y_j = Σ_i (k[i·w + j] · 2^-15) · v_i` (`w = y.len()`), in the fixed
/// order of the module docs.
///
/// # Panics
/// If `k.len() != v.len() · y.len()`.
#[track_caller]
pub fn fixed(k: &[i16], v: &[f32], y: &mut [f32]) {
    check(k, v, y);
    fixed_on(isa(), k, v, y);
}

/// [`fixed`] on an explicit ISA; `false` (and `y` untouched) if
/// unavailable.
///
/// # Panics
/// As [`fixed`].
#[track_caller]
pub fn fixed_with(isa: Isa, k: &[i16], v: &[f32], y: &mut [f32]) -> bool {
    check(k, v, y);
    isa.is_available() && {
        fixed_on(isa, k, v, y);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_isa_is_bit_identical_to_scalar() {
        let seed = prox_testkit::seed(0x9e0_u64);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let mut next = || rng.next();
        for d in [0usize, 1, 3, 17, 128, 384] {
            for w in [0usize, 1, 7, 8, 9, 16, 31, 32, 33, 64, 65, 96] {
                let k: Vec<i16> = (0..d * w).map(|_| next() as i16).collect();
                let v: Vec<f32> = (0..d)
                    .map(|_| ((next() % 20_001) as f32 / 997.0 - 10.0) * 1e-3)
                    .collect();
                let mut want = vec![0f32; w];
                scalar::fixed(&k, &v, &mut want);
                for isa in crate::available_isas() {
                    let mut got = vec![f32::NAN; w];
                    assert!(fixed_with(isa, &k, &v, &mut got));
                    let (g, e): (Vec<u32>, Vec<u32>) = (
                        got.iter().map(|x| x.to_bits()).collect(),
                        want.iter().map(|x| x.to_bits()).collect(),
                    );
                    assert_eq!(g, e, "{isa} d {d} w {w} (PROX_SEED={seed})");
                }
            }
        }
    }

    #[test]
    fn matches_the_definition() {
        // Rows (0.5, -1) and (0, 0.25) of the fixed-point scale.
        let k = [16_384i16, -32_768, 0, 8_192];
        let v = [2.0f32, 4.0];
        let mut y = [0f32; 2];
        fixed(&k, &v, &mut y);
        assert_eq!(y, [1.0, -1.0]);
    }
}
