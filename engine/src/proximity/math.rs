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
/// makes it a unit vector that is a fixed point of the normalisation step,
/// so preparing it again returns it unchanged. Errors name `key` when given.
///
/// A vector whose iteration reaches a fixed point within the spec's 16
/// rounds gets exactly the reference's result. For the others (the
/// reference rejects them) a finishing step sets the largest component so
/// that the vector is a fixed point (`finish_unit`).
pub fn prepare(metric: Metric, dims: u32, vector: &[f32], key: Option<&[u8]>) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    prepare_into(metric, dims, vector, key, &mut out, &mut Vec::new())?;
    Ok(out)
}

/// [`prepare`] into `out`, with `work` as the second buffer cosine needs:
/// both keep their capacity, so a caller that reuses them prepares
/// without allocating (only the rare `finish_unit` step allocates). `out`
/// holds the prepared vector on success and is unspecified on error.
pub fn prepare_into(
    metric: Metric,
    dims: u32,
    vector: &[f32],
    key: Option<&[u8]>,
    out: &mut Vec<f32>,
    work: &mut Vec<f32>,
) -> Result<()> {
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
    out.clear();
    out.extend(vector.iter().map(|&x| if x == 0.0 { 0.0 } else { x }));
    if metric != Metric::Cosine {
        return Ok(());
    }
    work.clear();
    work.resize(out.len(), 0.0);
    for _ in 0..SPEC_ROUNDS {
        if !unit_step(out, work) {
            return Err(Error::ZeroCosineVector { key: key_owned() });
        }
        let fixed = same_bits(work, out);
        std::mem::swap(out, work);
        if fixed {
            return Ok(());
        }
    }
    *out = finish_unit(std::mem::take(out))
        .ok_or_else(|| Error::NoUnitFixedPoint { key: key_owned() })?;
    Ok(())
}

/// Rounds the spec runs before it gives up (11.1); a fixed point reached
/// within them is the reference's answer.
const SPEC_ROUNDS: usize = 16;

/// One normalisation step `out = fl32(v · (1 / sqrt_floor(|v|²)))` with
/// `+0` normalisation; false when `|v|² = 0`.
fn unit_step(v: &[f32], out: &mut [f32]) -> bool {
    let n2 = norm2(v);
    if n2 == 0.0 {
        return false;
    }
    let inv = 1.0 / sqrt_floor(n2);
    for (o, &x) in out.iter_mut().zip(v) {
        let y = (f64::from(x) * inv) as f32;
        *o = if y == 0.0 { 0.0 } else { y };
    }
    true
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// True when `v` is a fixed point of the normalisation step.
fn is_unit_fixed_point(v: &[f32], scratch: &mut [f32]) -> bool {
    unit_step(v, scratch) && same_bits(scratch, v)
}

/// Ends the preparation of a vector whose iteration found no fixed point in
/// the spec's 16 rounds (`v` is the 16th round's result, a unit vector to
/// within a few ulps). The step can cycle between a few vectors, or drift
/// one ulp per round for millions of rounds when `|v|²` sits just outside
/// the window where every component is stable, so iterating longer is no
/// cure. Instead the largest component (lowest index on ties) is set so
/// that `|v|²` lands as close to 1 as f32 allows:
/// `v_j = ±fl32(sqrt_floor(1 − Σ_{i≠j} v_i²))`. Then `|1/‖v‖ − 1|` is below
/// half an ulp of every component, so the step leaves every component
/// where it is: the result is a fixed point, which the reference would
/// also accept as prepared. Should rounding put it a hair outside, the
/// component's two f32 neighbours are tried, then further rounds of the
/// step; `None` only if all of that fails (no such vector is known).
fn finish_unit(mut v: Vec<f32>) -> Option<Vec<f32>> {
    let mut scratch = vec![0.0f32; v.len()];
    let j = (0..v.len()).fold(
        0,
        |best, i| {
            if v[i].abs() > v[best].abs() {
                i
            } else {
                best
            }
        },
    );
    let mut rest = 0.0f64;
    for (i, &x) in v.iter().enumerate() {
        if i != j {
            rest += f64::from(x) * f64::from(x);
        }
    }
    let residual = 1.0 - rest;
    if residual > 0.0 && v[j] != 0.0 {
        let root = sqrt_floor(residual) as f32;
        let sign = v[j].signum();
        let candidates = [
            root,
            f32::from_bits(root.to_bits().wrapping_sub(1)),
            f32::from_bits(root.to_bits() + 1),
        ];
        let original = v[j];
        for c in candidates {
            if c.is_finite() && c > 0.0 {
                v[j] = sign * c;
                if is_unit_fixed_point(&v, &mut scratch) {
                    return Some(v);
                }
            }
        }
        v[j] = original;
    }
    for _ in 0..FALLBACK_ROUNDS {
        if !unit_step(&v, &mut scratch) {
            return None;
        }
        if same_bits(&scratch, &v) {
            return Some(v);
        }
        std::mem::swap(&mut v, &mut scratch);
    }
    None
}

/// Extra rounds of the step tried when setting the largest component did
/// not give a fixed point.
const FALLBACK_ROUNDS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use prox_testkit::{seed, SplitMix64};

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
        let seed = seed(0x9e37_79b9_7f4a_7c15);
        let mut rng = SplitMix64::new(seed);
        for _ in 0..20_000 {
            let x = f64::from_bits(rng.next() % 0x7FF0_0000_0000_0000);
            let r = sqrt_floor(x);
            assert!(!square_exceeds(r, x), "PROX_SEED={seed} x={x:e} r={r:e}");
            assert!(
                square_exceeds(next_up(r), x),
                "PROX_SEED={seed} x={x:e} r={r:e}"
            );
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

    /// The spec's rule alone (11.1): the fixed point reached within 16
    /// rounds, or `None` where the reference gives up.
    fn spec_prepare(v: &[f32]) -> Option<Vec<f32>> {
        let mut v = v.to_vec();
        let mut w = vec![0.0f32; v.len()];
        for _ in 0..SPEC_ROUNDS {
            assert!(unit_step(&v, &mut w));
            if same_bits(&w, &v) {
                return Some(w);
            }
            std::mem::swap(&mut v, &mut w);
        }
        None
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Seeded Gaussian vectors (the testkit's Box-Muller draws).
    fn gaussians(seed: u64, dims: usize, n: usize) -> Vec<Vec<f32>> {
        let mut r = SplitMix64::new(seed);
        (0..n)
            .map(|_| (0..dims).map(|_| r.gauss_f64() as f32).collect())
            .collect()
    }

    /// Preparation is idempotent over random vectors of many sizes, those
    /// whose iteration cycles or drifts included (found by the seeded
    /// generator); vectors the reference prepares keep the reference's bits.
    #[test]
    fn preparation_is_total_and_idempotent() {
        let seed = seed(28);
        let mut rescued = 0;
        for (dims, n) in [
            (2, 50_000),
            (3, 50_000),
            (8, 50_000),
            (17, 10_000),
            (64, 5_000),
            (384, 2_000),
        ] {
            let mut vectors = gaussians(seed ^ dims as u64, dims, n);
            // Spiky vectors: one component near 1, the others tiny, where
            // the finishing step's rounding margin is thinnest.
            let spikes = gaussians(seed ^ 0x5b1e ^ dims as u64, dims, n / 4);
            vectors.extend(spikes.into_iter().enumerate().map(|(i, mut v)| {
                let j = i % dims;
                v.iter_mut().for_each(|x| *x *= 1e-4);
                v[j] += 1.0;
                v
            }));
            for (i, v) in vectors.into_iter().enumerate() {
                let p = prepare(Metric::Cosine, dims as u32, &v, None)
                    .unwrap_or_else(|e| panic!("seed {seed} dims {dims} row {i}: {e}"));
                let again = prepare(Metric::Cosine, dims as u32, &p, None).unwrap();
                assert_eq!(bits(&again), bits(&p), "seed {seed} dims {dims} row {i}");
                match spec_prepare(&v) {
                    Some(s) => assert_eq!(bits(&s), bits(&p), "seed {seed} dims {dims} row {i}"),
                    None => {
                        // The reference gives up on `v`; the result is
                        // still a fixed point of its step (so the reference
                        // accepts it as prepared) and points where `v` does.
                        rescued += 1;
                        assert_eq!(spec_prepare(&p).map(|s| bits(&s)), Some(bits(&p)));
                        let n = norm2(&v).sqrt();
                        let cos: f64 = v
                            .iter()
                            .zip(&p)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum::<f64>()
                            / n;
                        assert!(
                            cos > 1.0 - 1e-6,
                            "seed {seed} dims {dims} row {i}: cos {cos}"
                        );
                    }
                }
                let n2 = norm2(&p);
                assert!(
                    (n2 - 1.0).abs() < 1e-5,
                    "seed {seed} dims {dims} row {i}: |p|² {n2}"
                );
            }
        }
        assert!(
            rescued >= 10,
            "seed {seed}: only {rescued} vectors the reference rejects"
        );
    }

    /// The prepared bits of a seeded set (vectors the reference rejects
    /// included) hash to
    /// a frozen digest: the same on every machine, and under every
    /// `PROX_ISA` (CI runs this test again with `PROX_ISA=scalar`).
    #[test]
    fn preparation_digest_is_frozen() {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for (dims, n) in [(3, 20_000), (8, 20_000), (384, 200)] {
            for v in gaussians(0x5eed ^ dims as u64, dims, n) {
                let p = prepare(Metric::Cosine, dims as u32, &v, None).unwrap();
                for x in p {
                    h.update(x.to_bits().to_le_bytes());
                }
            }
        }
        assert_eq!(hex::encode(h.finalize()), FROZEN_PREPARATION_DIGEST);
    }

    const FROZEN_PREPARATION_DIGEST: &str =
        "0b7b413fa508363b508c6a43ac7ad842f6dce4ddfadabce0f9b697c0a34da0df";

    /// An 8-d Gaussian vector the reference rejects: after 16 rounds its
    /// iteration drifts one ulp per round in its smallest component (for
    /// about a million rounds). Frozen input and prepared output.
    #[test]
    fn eight_dim_example() {
        let input: [u32; 8] = [
            0x3eef_2891,
            0xbf99_efec,
            0xbe0a_654c,
            0xb7d1_cd50,
            0xbea3_ef31,
            0x3f8d_8bc3,
            0x3e3a_6001,
            0x3e87_1868,
        ];
        let want: [u32; 8] = [
            0x3e87_9839,
            0xbf2e_8dde,
            0xbd9c_ee62,
            0xb76d_e69a,
            0xbe39_e3e8,
            0x3f20_80dc,
            0x3dd3_561f,
            0x3e19_3056,
        ];
        let v: Vec<f32> = input.iter().map(|&b| f32::from_bits(b)).collect();
        assert!(spec_prepare(&v).is_none());
        let p = prepare(Metric::Cosine, 8, &v, None).unwrap();
        assert_eq!(bits(&p), want);
        assert_eq!(spec_prepare(&p).map(|s| bits(&s)), Some(want.to_vec()));
    }
}
