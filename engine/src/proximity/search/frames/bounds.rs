//! The frames' error bounds (module docs of `frames`): out-of-basis
//! intervals and their gaps, box distances, `1 + ε` of a stored basis and
//! the per-record lower bound.

use super::{Frame, U};
use crate::proximity::search::quant::{down, up, EPS};

/// `Σ x²` in f64 of f32 values (each square exact).
pub(super) fn sq_sum(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
}

/// `[lo, hi] ∋ ‖P⊥v‖` from the computed `Σv̂²` (`nv2`, `d` terms), `Σŷ²`
/// (`ny2`, `m` terms) and the rotation error `erot` (module docs).
pub(super) fn tail_interval(
    nv2: f64,
    ny2: f64,
    erot: f64,
    f: &Frame,
    d: usize,
    m: usize,
) -> [f64; 2] {
    let gv = (d as f64 + 2.0) * EPS;
    let gy = (m as f64 + 2.0) * EPS;
    let v2_lo = down(down(nv2 * (1.0 - gv)) / up((1.0 + U) * (1.0 + U)));
    let v2_hi = up(up(nv2 * (1.0 + gv)) / down((1.0 - U) * (1.0 - U)));
    let y_lo = down(down(ny2 * (1.0 - gy)).sqrt());
    let y_hi = up(up(ny2 * (1.0 + gy)).sqrt());
    let a_lo = if y_lo > erot { down(y_lo - erot) } else { 0.0 };
    let a_hi = up(y_hi + erot);
    let lo2 = down(v2_lo - up(up(a_hi * a_hi) / f.one_eps_lo));
    let hi2 = up((v2_hi - down(down(a_lo * a_lo) / f.one_eps)).max(0.0));
    [down(lo2.sqrt()), up(hi2.sqrt())]
}

/// Lower bound on `|‖P⊥v_q‖ − ‖P⊥v_x‖|` from the two intervals.
#[inline]
pub(super) fn gap(a: [f64; 2], b: [f64; 2]) -> f64 {
    let g = (a[0] - b[1]).max(b[0] - a[1]);
    if g > 0.0 {
        down(g)
    } else {
        0.0
    }
}

/// Lower bound on the distance from `y` to the box `lo..hi` (per axis).
pub(super) fn box_dist(y: &[f32], lo: &[f32], hi: &[f32]) -> f64 {
    let m = y.len();
    let mut s = 0.0f64;
    for ((&y, &l), &h) in y.iter().zip(lo).zip(hi) {
        let (y, l, h) = (f64::from(y), f64::from(l), f64::from(h));
        // Branch-free (it vectorizes): at most one difference is positive.
        let t = (l - y).max(y - h).max(0.0);
        s += t * t;
    }
    down(down(s * (1.0 - (m as f64 + 4.0) * EPS)).sqrt())
}

/// Lower bound on `real²` for a box (`bd` from [`box_dist`]) with query and
/// box rotation errors `eq`, `ex` and out-of-basis gap `g`.
#[inline]
pub(super) fn box_lower(bd: f64, eq: f64, ex: f64, g: f64, one_eps: f64) -> f64 {
    let e = up(eq + ex);
    let la = if bd > e { down(bd - e) } else { 0.0 };
    down(down(down(la * la) / one_eps) + down(g * g))
}

/// Upper bound on `‖v̂‖` from `Σv̂²`.
#[inline]
pub(super) fn norm_up(nv2: f64, d: usize) -> f64 {
    up(up(nv2 * (1.0 + (d as f64 + 2.0) * EPS)).sqrt())
}

/// `(1 + ε)` upper bound for `A` given as `at = Aᵀ` (`d × m`):
/// `1 + ‖A·Aᵀ − I‖_F` with every entry's f64 error added to its magnitude.
pub(super) fn one_plus_eps(at: &[f32], d: usize, m: usize) -> f64 {
    let gamma = (d as f64 + 2.0) * EPS;
    // `‖E‖₂ ≤ ‖E‖_F`, with every entry's magnitude bounded above.
    let mut sum = 0.0f64;
    for i in 0..m {
        for j in 0..m {
            let (mut dot, mut abs) = (0.0f64, 0.0f64);
            for row in at.chunks_exact(m).take(d) {
                let p = f64::from(row[i]) * f64::from(row[j]);
                dot += p;
                abs += p.abs();
            }
            let delta = if i == j { 1.0 } else { 0.0 };
            let e = up(gamma * up(abs + delta)) + d as f64 * f64::MIN_POSITIVE;
            let bound = up((dot - delta).abs() + e);
            sum = up(sum + up(bound * bound));
        }
    }
    up(1.0 + up(sum.sqrt()))
}

/// Lower bound on `real²` from a code distance `dist ≥ 0` (an integer,
/// as f64; scale `scale`), the summed residuals `e = e_q + e_x` and the
/// out-of-basis gap `g` (module docs), with `inv ≤ 1 / (1 + ε)`. Without
/// branches, so the second stage's loop vectorizes; every clamp at zero
/// is `down`'s own.
#[inline]
pub(super) fn bound(scale: f64, inv: f64, dist: f64, e: f64, g: f64) -> f64 {
    let la = down(down(scale * down(dist.sqrt())) - e);
    down(down(down(la * la) * inv) + down(g * g))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proximity::search::frames::layout::{entry, project, to_fixed};

    #[test]
    fn one_plus_eps_covers_a_non_orthogonal_basis() {
        // Rows (1, 0) and (0.6, 0.8): A·Aᵀ = [[1, .6], [.6, 1]], ‖E‖₂ = 0.6.
        let at = vec![1.0f32, 0.6, 0.0, 0.8];
        let b = one_plus_eps(&at, 2, 2);
        assert!(b >= 1.6, "{b}");
        let id = vec![1.0f32, 0.0, 0.0, 1.0];
        let b = one_plus_eps(&id, 2, 2);
        assert!((1.0..1.0 + 1e-12).contains(&b), "{b}");
    }

    #[test]
    fn tail_interval_contains_the_true_length() {
        // A = first two axes of R^4; v = (3, 4, 1, 2): ‖P⊥v‖ = √5.
        let (d, m) = (4, 2);
        // Stored in fixed point: 1.0 becomes 32767·2^-15, rows still along
        // the first two axes.
        let fixed = to_fixed(&[1.0f32, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        let at: Vec<f32> = fixed.iter().map(|&k| entry(k)).collect();
        let one_eps = one_plus_eps(&at, d, m);
        assert!(one_eps > 1.0 && one_eps < 1.0 + 1e-4, "{one_eps}");
        let f = Frame {
            start: 0,
            end: 0,
            scale: 1.0,
            one_eps,
            inv_one_eps: down(1.0 / one_eps),
            one_eps_lo: down(1.0 - up(one_eps - 1.0)),
            rot: 1e-6,
            abs: 0.0,
            erot: 0.0,
            tail1: [0.0; 2],
            block: 0,
            group: 0,
        };
        let v = [3.0f32, 4.0, 1.0, 2.0];
        let mut y = [0.0f32; 2];
        project(&fixed, m, &v, &mut y);
        let one = entry(32_767);
        assert_eq!(y, [3.0 * one, 4.0 * one]);
        let t = tail_interval(sq_sum(&v), sq_sum(&y), 1e-6, &f, d, m);
        let want = 5.0f64.sqrt();
        assert!(t[0] <= want && want <= t[1], "{t:?}");
        assert!(t[1] - t[0] < 1e-3, "{t:?}");
    }

    /// The branch-free bound equals the plain formula (branches, a
    /// division by `1 + ε`) up to the reciprocal's rounding, never above
    /// it, and is zero where that is: at distance 0 and when the residuals
    /// cover the distance.

    #[test]
    fn bound_matches_the_plain_formula() {
        fn plain(scale: f64, one_eps: f64, dist: i64, e: f64, g: f64) -> f64 {
            let la = if dist <= 0 {
                0.0
            } else {
                let s = down(scale * down((dist as f64).sqrt()));
                if s > e {
                    down(s - e)
                } else {
                    0.0
                }
            };
            down(down(down(la * la) / one_eps) + down(g * g))
        }
        let seed = prox_testkit::seed(0x2545_f491_4f6c_dd1d);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let mut next = || rng.unit_f64();
        for _ in 0..10_000 {
            let one_eps = 1.0 + next() * 1e-3;
            let inv = down(1.0 / one_eps);
            let scale = 1e-3 + next();
            let dist = (next() * 1e6) as i64 - 1_000;
            let (e, g) = (next() * 50.0, next() * 20.0);
            let want = plain(scale, one_eps, dist, e, g);
            let got = bound(scale, inv, dist.max(0) as f64, e, g);
            assert!(
                got <= want && got >= want * (1.0 - 1e-12),
                "PROX_SEED={seed}: {got} {want}"
            );
            assert_eq!(bound(scale, inv, 0.0, e, g), plain(scale, one_eps, 0, e, g));
        }
    }
}
