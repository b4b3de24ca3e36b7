//! Canonical scalar math for proximity maps (proximity-format.md 11, 12.3).
//!
//! Everything here is plain IEEE-754 round-to-nearest-even arithmetic in a
//! fixed order: no fused multiply-add (Rust never contracts `a * b + c`, and
//! this module never calls `mul_add`), no reassociation, no extended
//! precision. These functions produce every persisted number (prepared
//! vectors, covering radii) and the bounds search relies on, so they must be
//! bit-identical on every machine.

use crate::error::{Error, Result};
use prox_kernels::Metric;

/// Smallest f64 strictly greater than `x` (for `x = ±0` the smallest
/// positive subnormal). `x` must be finite.
pub fn next_up(x: f64) -> f64 {
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let b = x.to_bits();
    if x > 0.0 {
        f64::from_bits(b + 1)
    } else {
        f64::from_bits(b - 1)
    }
}

/// Largest f64 strictly smaller than `x` (for `x = ±0` the negative
/// smallest subnormal). `x` must be finite.
pub fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

/// `x = m · 2^e` with an integer significand (x finite, > 0).
fn split(x: f64) -> (u128, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if exp == 0 {
        (u128::from(frac), -1074)
    } else {
        (u128::from(frac | (1u64 << 52)), exp - 1075)
    }
}

/// Exact comparison of `a_m·2^a_e` with `b_m·2^b_e` (both significands
/// non-zero and below 2^107).
fn cmp_scaled(a_m: u128, a_e: i32, b_m: u128, b_e: i32) -> std::cmp::Ordering {
    let a_top = (128 - a_m.leading_zeros()) as i32 + a_e;
    let b_top = (128 - b_m.leading_zeros()) as i32 + b_e;
    if a_top != b_top {
        return a_top.cmp(&b_top);
    }
    // Same top bit position: shift the one with the larger exponent left by
    // the exponent difference; it then has the other's bit length (< 128).
    if a_e >= b_e {
        (a_m << (a_e - b_e) as u32).cmp(&b_m)
    } else {
        a_m.cmp(&(b_m << (b_e - a_e) as u32))
    }
}

/// True when `r·r > x` in exact real arithmetic (`r >= 0`, `x > 0`, finite).
fn square_exceeds(r: f64, x: f64) -> bool {
    if r == 0.0 {
        return false;
    }
    let (rm, re) = split(r);
    let (xm, xe) = split(x);
    cmp_scaled(rm * rm, 2 * re, xm, xe) == std::cmp::Ordering::Greater
}

/// The largest f64 `r` with `r·r <= x` exactly (`x` finite and `>= 0`);
/// `sqrt_floor(0) = 0`. Starts from the correctly rounded hardware square
/// root and corrects it by exact significand comparisons, so the result
/// does not depend on the platform's `sqrt`.
pub fn sqrt_floor(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        // Callers pass finite non-negative values only; 0 (and, defensively,
        // anything outside the domain) maps to 0.
        return 0.0;
    }
    let mut r = x.sqrt();
    while r > 0.0 && square_exceeds(r, x) {
        r = next_down(r);
    }
    loop {
        let up = next_up(r);
        if square_exceeds(up, x) {
            return r;
        }
        r = up;
    }
}

/// Conservative covering radius of a child of radius `child` whose centre
/// is at squared Euclidean distance `d2`: `child` when `d2 == 0`, else
/// `next_up(next_up(sqrt_floor(d2)) + child)`.
pub fn radius_up(d2: f64, child: f64) -> f64 {
    if d2 == 0.0 {
        return child;
    }
    next_up(next_up(sqrt_floor(d2)) + child)
}

/// Runtime lower bound on the squared Euclidean distance from a query to
/// any record under an entry whose centre is at squared distance `d2` and
/// whose covering radius is `radius`: `(sqrt_floor(d2) − radius)` clamped
/// at 0, squared, then one ulp down, clamped at 0 (section 11.3).
pub fn lower_bound(d2: f64, radius: f64) -> f64 {
    let gap = sqrt_floor(d2) - radius;
    if gap <= 0.0 {
        return 0.0;
    }
    let sq = gap * gap;
    if sq <= 0.0 {
        return 0.0;
    }
    let down = next_down(sq);
    if down <= 0.0 {
        0.0
    } else {
        down
    }
}

/// Promotion level of `key` (section 12.3):
/// `clz64(XXH64(key, seed)) div bits`, in `0..=64`.
pub fn promotion_level(key: &[u8], bits: u8, seed: u64) -> u8 {
    debug_assert!(bits > 0);
    let h = xxhash_rust::xxh64::xxh64(key, seed);
    (h.leading_zeros() / u32::from(bits.max(1))) as u8
}

/// Squared L2 norm `Σ f64(v_i)·f64(v_i)` in order.
fn norm2(v: &[f32]) -> f64 {
    let mut acc = 0.0f64;
    for &x in v {
        let x = f64::from(x);
        acc += x * x;
    }
    acc
}

/// Prepares a vector for storage or search (section 11.1): checks the
/// dimension and finiteness, turns `-0.0` into `+0.0`, and for cosine maps
/// iterates unit normalisation to its f32 fixed point (at most 16 rounds).
/// Errors name `key` when given.
pub fn prepare(metric: Metric, dims: u32, vector: &[f32], key: Option<&[u8]>) -> Result<Vec<f32>> {
    let key_owned = || key.map(<[u8]>::to_vec);
    if vector.len() != dims as usize {
        return Err(Error::WrongDimension {
            expected: dims as usize,
            got: vector.len(),
            key: key_owned(),
        });
    }
    if let Some(index) = vector.iter().position(|x| !x.is_finite()) {
        return Err(Error::NonFiniteVector {
            index,
            key: key_owned(),
        });
    }
    let mut v: Vec<f32> = vector
        .iter()
        .map(|&x| if x == 0.0 { 0.0 } else { x })
        .collect();
    if metric != Metric::Cosine {
        return Ok(v);
    }
    let mut w = vec![0.0f32; v.len()];
    for _ in 0..16 {
        let n2 = norm2(&v);
        if n2 == 0.0 {
            return Err(Error::ZeroCosineVector { key: key_owned() });
        }
        let inv = 1.0 / sqrt_floor(n2);
        for (o, &x) in w.iter_mut().zip(&v) {
            let y = (f64::from(x) * inv) as f32;
            *o = if y == 0.0 { 0.0 } else { y };
        }
        if w.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()) {
            return Ok(w);
        }
        std::mem::swap(&mut v, &mut w);
    }
    Err(Error::NoUnitFixedPoint { key: key_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_values() {
        assert_eq!(sqrt_floor(4.0), 2.0);
        assert_eq!(sqrt_floor(2.0).to_bits(), 0x3FF6_A09E_667F_3BCC);
        assert_eq!(
            sqrt_floor(f64::from_bits(1)).to_bits(),
            0x1E60_0000_0000_0000
        );
        assert_eq!(sqrt_floor(0.0), 0.0);
        assert_eq!(radius_up(2.0, 0.0).to_bits(), 0x3FF6_A09E_667F_3BCE);
        assert_eq!(radius_up(0.0, 1.5), 1.5);
        assert_eq!(next_up(0.0).to_bits(), 1);
        assert_eq!(xxhash_rust::xxh64::xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(promotion_level(b"", 8, 0), 0);
    }

    /// `sqrt_floor` brackets the exact root on random doubles and perfect squares.
    #[test]
    fn sqrt_floor_is_the_largest_root() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let x = f64::from_bits(seed % 0x7FF0_0000_0000_0000);
            let r = sqrt_floor(x);
            assert!(!square_exceeds(r, x), "x={x:e} r={r:e}");
            assert!(square_exceeds(next_up(r), x), "x={x:e} r={r:e}");
        }
        for k in 0u64..2000 {
            assert_eq!(sqrt_floor((k * k) as f64), k as f64);
            if k > 1 {
                let r = sqrt_floor((k * k - 1) as f64);
                assert!(r < k as f64 && r > (k - 1) as f64);
            }
        }
    }

    #[test]
    fn lower_bound_is_conservative() {
        assert_eq!(lower_bound(4.0, 3.0), 0.0);
        let lb = lower_bound(16.0, 1.0);
        assert!(lb < 9.0 && lb > 8.99);
        assert_eq!(lower_bound(0.0, 0.0), 0.0);
    }

    #[test]
    fn prepare_rules() {
        let v = prepare(Metric::L2, 2, &[-0.0, 2.5], None).unwrap();
        assert_eq!(v[0].to_bits(), 0);
        assert!(matches!(
            prepare(Metric::L2, 3, &[1.0], Some(b"k")),
            Err(Error::WrongDimension {
                expected: 3,
                got: 1,
                key: Some(_)
            })
        ));
        assert!(matches!(
            prepare(Metric::L2, 2, &[1.0, f32::NAN], Some(b"k")),
            Err(Error::NonFiniteVector { index: 1, .. })
        ));
        assert!(matches!(
            prepare(Metric::Cosine, 2, &[0.0, -0.0], Some(b"z")),
            Err(Error::ZeroCosineVector { key: Some(_) })
        ));
        let u = prepare(Metric::Cosine, 3, &[3.0, 4.0, -0.0], None).unwrap();
        assert_eq!(prepare(Metric::Cosine, 3, &u, None).unwrap(), u);
        assert_eq!(u[2].to_bits(), 0);
        assert!((u[0] - 0.6).abs() < 1e-6);
        let big = prepare(Metric::Cosine, 2, &[f32::MAX, f32::MAX], None).unwrap();
        assert_eq!(prepare(Metric::Cosine, 2, &big, None).unwrap(), big);
    }
}
