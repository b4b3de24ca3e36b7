//! Per-vector 8-bit codes for ranking, and the error bounds that let exact
//! search prune with them.
//!
//! Every vector (entry vectors at load time, the query once per search) is
//! quantized with one symmetric scale `s = max|x_i| / 127` (f64):
//! `c_i = roundTiesEven(x_i / s)` in `−127..=127`, reconstructing
//! `x̂ = s·c`. Products of codes are summed by the SIMD integer kernel
//! [`prox_kernels::sq8::dot_i8_many`], which is bit-exact on every ISA, and
//! everything after that is a fixed sequence of scalar f64 operations. So
//! every approximate score, bound and therefore every traversal decision is
//! identical on every machine and ISA.
//!
//! Alongside the codes each vector keeps `err ≥ ‖x − x̂‖` (Euclidean,
//! rounded up) and `norm ≥ ‖x‖`; exact search turns the approximate
//! distances into rigorous lower bounds with them (see [`l2_lower`]).

/// `2^-52`: one f64 ulp at 1.
pub(crate) const EPS: f64 = f64::EPSILON;

/// Largest dimension for which `Σ c_i·d_i` of valid codes cannot overflow
/// the kernel's `i32` accumulator (`(2^31 − 1) / 127²`).
pub(crate) const MAX_CODE_DIMS: usize = 133_143;

/// One quantized vector's scalars (its codes live in a caller's buffer).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct QuantStats {
    /// The scale `s` (0 for the zero vector).
    pub scale: f64,
    /// `Σ c_i²` (exact integer, held in f64).
    pub code_norm2: f64,
    /// Upper bound on `‖x − x̂‖`.
    pub err: f64,
    /// Upper bound on `‖x‖`.
    pub norm: f64,
}

/// Rounds a non-negative f64 computed with a few roundings upward by a
/// relative margin far above their error (and never to 0 when positive).
#[inline]
pub(crate) fn up(x: f64) -> f64 {
    x * (1.0 + 16.0 * EPS) + f64::MIN_POSITIVE
}

/// Rounds a non-negative f64 downward by the same margin (clamped at 0).
#[inline]
pub(crate) fn down(x: f64) -> f64 {
    let y = x * (1.0 - 16.0 * EPS) - f64::MIN_POSITIVE;
    if y > 0.0 {
        y
    } else {
        0.0
    }
}

/// `x` rounded to the nearest integer, ties to even, for `|x| < 2^51`:
/// adding and subtracting `1.5·2^52` leaves no fraction bits, and IEEE
/// round-to-nearest-even does the rounding (Rust never reassociates or
/// contracts these operations). Same result as `f64::round_ties_even`,
/// without a libm call.
#[inline]
pub(crate) fn round_ties_even_small(x: f64) -> f64 {
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    (x + SHIFT) - SHIFT
}

/// An upper bound on the real residual norm `‖x − s·x̂‖` from the computed
/// `err2 = Σ fl(x_i − fl(s·x̂_i))²` and `norm2 = Σ x_i²`.
///
/// Each computed residual component differs from the real one by at most
/// the rounding of `s·x̂_i` plus that of the subtraction, both at most
/// `2^-53` relative to `|s·x̂_i| ≤ |x_i| + |e_i|` (the subtraction is exact
/// or rounds a result no larger). That error is absolute, not relative to
/// the residual (cancellation: a large component with a tiny residual), so
/// by the triangle inequality the real norm is at most
/// `‖e_computed‖ + 2^-52·(‖x‖ + ‖e_computed‖)`; the sums' own relative
/// rounding is covered by the `up` margins.
#[inline]
fn residual_bound(err2: f64, norm2: f64) -> f64 {
    let e = up(up(err2).sqrt());
    up(e + up(2.0 * EPS * (up(up(norm2).sqrt()) + e)))
}

/// Quantizes `x` into `codes` (same length) and returns its scalars.
pub(crate) fn quantize(x: &[f32], codes: &mut [i8]) -> QuantStats {
    debug_assert_eq!(x.len(), codes.len());
    let max = x.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
    let mut norm2 = 0.0f64;
    for &v in x {
        let v = f64::from(v);
        norm2 += v * v;
    }
    if max == 0.0 {
        codes.iter_mut().for_each(|c| *c = 0);
        return QuantStats {
            scale: 0.0,
            code_norm2: 0.0,
            err: 0.0,
            norm: up(norm2.sqrt()),
        };
    }
    let scale = max / 127.0;
    let mut code_norm2 = 0i64;
    let mut err2 = 0.0f64;
    for (c, &v) in codes.iter_mut().zip(x) {
        let v = f64::from(v);
        let q = round_ties_even_small(v / scale).clamp(-127.0, 127.0);
        *c = q as i8;
        code_norm2 += (q as i64) * (q as i64);
        let e = v - scale * q;
        err2 += e * e;
    }
    QuantStats {
        scale,
        code_norm2: code_norm2 as f64,
        err: residual_bound(err2, norm2),
        norm: up(up(norm2).sqrt()),
    }
}

/// Quantizes `x` into `codes` with a caller-chosen uniform scale `scale > 0`
/// (the arena's, [`super::arena`]): `c_i = roundTiesEven(x_i / scale)`
/// clamped to `−127..=127`. Returns `Σ c_i²` (exact) and an upper bound on
/// `‖x − scale·c‖` (clamping included, so it holds for any input). `x` is
/// f32 (vectors) or f64 (rotated vectors, [`super::rotated`]).
pub(crate) fn quantize_uniform<T: Copy + Into<f64>>(
    x: &[T],
    scale: f64,
    codes: &mut [i8],
) -> (i64, f64) {
    debug_assert_eq!(x.len(), codes.len());
    debug_assert!(scale > 0.0 && scale.is_finite());
    let mut norm = 0i64;
    let mut err2 = 0.0f64;
    let mut norm2 = 0.0f64;
    for (c, &v) in codes.iter_mut().zip(x) {
        let v: f64 = v.into();
        norm2 += v * v;
        // `v / scale` is never NaN (`v` finite, `scale > 0`; it may be
        // infinite for a rotated segment with a tiny scale); clamping
        // before rounding keeps it in the range of `round_ties_even_small`,
        // and saturated components are accounted for in the residual.
        let t = (v / scale).clamp(-128.0, 128.0);
        let q = round_ties_even_small(t).clamp(-127.0, 127.0);
        *c = q as i8;
        norm += (q as i64) * (q as i64);
        let e = v - scale * q;
        err2 += e * e;
    }
    (norm, residual_bound(err2, norm2))
}

/// Approximate squared distance `‖q̂ − x̂‖²` from the integer dot `dot` of
/// the codes, and an absolute bound on its f64 rounding error.
#[inline]
pub(crate) fn approx_l2(q: &QuantStats, x: &QuantStats, dot: i32) -> (f64, f64) {
    let t1 = q.scale * q.scale * q.code_norm2;
    let t2 = x.scale * x.scale * x.code_norm2;
    let t3 = 2.0 * (q.scale * x.scale) * f64::from(dot);
    let a2 = t1 + t2 - t3;
    (a2, 8.0 * EPS * (t1 + t2 + t3.abs()))
}

/// Approximate dot product `q̂·x̂` from the integer dot of the codes.
#[inline]
pub(crate) fn approx_dot(q: &QuantStats, x: &QuantStats, dot: i32) -> f64 {
    (q.scale * x.scale) * f64::from(dot)
}

/// A rigorous lower bound on the real Euclidean distance `‖q − x‖` from the
/// approximate squared distance (`a2`, with rounding bound `a2_err`):
/// `‖q − x‖ ≥ ‖q̂ − x̂‖ − ‖q − q̂‖ − ‖x − x̂‖` (triangle inequality).
#[inline]
pub(crate) fn l2_lower(a2: f64, a2_err: f64, q: &QuantStats, x: &QuantStats) -> f64 {
    let lo2 = a2 - a2_err;
    if lo2 <= 0.0 {
        return 0.0;
    }
    down(down(lo2.sqrt()) - up(q.err + x.err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_rounding_matches_round_ties_even() {
        for i in -1_000_000i64..=1_000_000 {
            let x = i as f64 / 4096.0 + if i % 3 == 0 { 0.5 } else { 0.0 };
            assert_eq!(round_ties_even_small(x), x.round_ties_even(), "{x}");
        }
        for x in [0.5, 1.5, 2.5, -0.5, -2.5, 126.5, -126.5, 127.49999999999999] {
            assert_eq!(round_ties_even_small(x), x.round_ties_even(), "{x}");
        }
    }

    #[test]
    fn reconstruction_error_is_bounded() {
        let seed = prox_testkit::seed(0x1234_5678_9abc_def0);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let mut next = || rng.unit();
        for d in [1usize, 3, 16, 97] {
            for _ in 0..50 {
                let x: Vec<f32> = (0..d).map(|_| next() * 3.0).collect();
                let y: Vec<f32> = (0..d).map(|_| next()).collect();
                let mut cx = vec![0i8; d];
                let mut cy = vec![0i8; d];
                let sx = quantize(&x, &mut cx);
                let sy = quantize(&y, &mut cy);
                let real = prox_kernels::canonical::l2sq(&x, &y).sqrt();
                let dot: i32 = cx
                    .iter()
                    .zip(&cy)
                    .map(|(&a, &b)| i32::from(a) * i32::from(b))
                    .sum();
                let (a2, e) = approx_l2(&sx, &sy, dot);
                let lo = l2_lower(a2, e, &sx, &sy);
                assert!(lo <= real, "PROX_SEED={seed} d={d} lo={lo} real={real}");
                assert!((a2.max(0.0).sqrt() - real).abs() <= sx.err + sy.err + 1e-9);
            }
        }
        let mut c = [0i8; 2];
        let z = quantize(&[0.0, 0.0], &mut c);
        assert_eq!((z.scale, z.err, c), (0.0, 0.0, [0, 0]));
    }
}
