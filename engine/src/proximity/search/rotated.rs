//! The rotated split arena for exact L2 search: every record rotated onto
//! the principal axes of the data, its first `m` rotated components coded
//! in one dense buffer (the screen) and the other `d − m` in another (read
//! only for the few records that pass the screen).
//!
//! On data whose distances concentrate (no covering ball ever excludes a
//! leaf), exact L2 has to look at every record; what it can save is bytes.
//! After a rotation `W` onto the eigenvectors of the data's covariance, the
//! leading components carry most of the spread, so the partial distance
//! over them alone already exceeds the k-th score for almost every record.
//!
//! **Bounds.** Write `y = W·x` (real arithmetic) and `fl(y)` for the f64
//! rotation actually computed. For a segment `S` (the first `m` components
//! or the rest) with uniform scale `s_S` and codes `ŷ_S`, the residual
//! `e_S ≥ ‖y_S − s_S·ŷ_S‖` is the quantization residual of `fl(y)_S` plus
//! the rotation's rounding, `‖fl(y)_S − y_S‖ ≤ (d+1)·2^-52·‖W_S‖_F·‖x‖`
//! (each component is a sequential f64 dot of length `d`). Then
//!
//! * `‖W(q − x)‖_S ≥ L_S = s_S·√D_S − e_S(q) − e_S(x)` (triangle
//!   inequality; `D_S` the exact integer code distance), and
//! * `‖q − x‖ ≥ ‖W(q − x)‖ / σ ≥ √(L_A² + L_B²) / σ`, where `σ² ≥
//!   σ_max(W)²` is bounded at build time by `1 + Σ_ij |(W·Wᵀ − I)_ij|`
//!   (every term rounded up), since `λ_max(WᵀW) ≤ 1 + ‖WWᵀ − I‖_2`.
//!
//! The screen uses `L_A` alone through [`super::arena::l2_prune_limit`]
//! with the threshold scaled by `σ²`; survivors are checked with both
//! segments ([`Rotated::beats`]) and then scored canonically on their
//! original vectors. `W` need not be exactly orthogonal or even converged:
//! any `W` gives valid bounds, a good one gives tight ones.
//!
//! **Determinism.** The sample, covariance (fixed chunks summed in order),
//! Jacobi sweeps and rotations are plain scalar f64 operations in a fixed
//! order (Rust never contracts or reassociates them), so the arena is the
//! same on every machine, ISA and thread count, like the plain arena.

use super::arena::{l2_prune_limit, limit_int, ScanArena};
use super::node::Node;
use super::quant::{down, quantize_uniform, up, EPS};
use rayon::prelude::*;
use std::sync::Arc;

/// Most records whose covariance defines the rotation.
const SAMPLE: usize = 32_768;
/// Chunks of the covariance sum (fixed, so the sum is independent of the
/// thread count).
const CHUNKS: usize = 64;
/// Cyclic Jacobi sweeps at most.
const SWEEPS: usize = 40;

/// The layout exact L2 search screens (the CLI's `--exact-layout`:
/// `auto`, `off`, `splitM`, `localM`): the plain arena, the rotated split
/// arena or local frames.
///
/// By default ([`ExactLayout::Auto`]) the local frames or the rotated
/// arena are used only when the map persists them (`prox build
/// --exact-layout localM|splitM`): the rotated
/// and local layouts pay off only where covering balls prune little
/// (distances that concentrate), and building them at open makes `warm()`
/// several times slower; docs/performance.md compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExactLayout {
    /// The local frames or rotated arena the map's root persists, at their
    /// width, else the plain arena (nothing is built at open).
    #[default]
    Auto,
    /// Exact L2 screens the plain arena's codes.
    Off,
    /// Screen with the first `m` rotated components (clamped to
    /// `1..=dims` and to the fused screen's
    /// `prox_kernels::i8scan::SCREEN_MAX_DIMS`), then the rest for
    /// survivors.
    Split(usize),
    /// Local frames (`frames/`): records clustered into frames of about
    /// a thousand, each screened by `m` coordinates on its frame's own
    /// principal axes plus its out-of-basis length (clamped like `Split`),
    /// the first 32 of them for every record and the rest for the first
    /// stage's survivors.
    Local(usize),
}

impl std::str::FromStr for ExactLayout {
    type Err = String;

    /// `auto`, `off`, `splitM` (or `M`) or `localM`, e.g. `local64`.
    fn from_str(s: &str) -> Result<ExactLayout, String> {
        let width = |t: &str| {
            t.parse::<usize>()
                .ok()
                .filter(|&m| m > 0)
                .ok_or_else(|| format!("{s:?}: want auto, off, localM or splitM with M >= 1"))
        };
        match s {
            "auto" => Ok(ExactLayout::Auto),
            "off" => Ok(ExactLayout::Off),
            _ if s.starts_with("local") => width(&s[5..]).map(ExactLayout::Local),
            _ if s.starts_with("split") => width(&s[5..]).map(ExactLayout::Split),
            _ => width(s).map(ExactLayout::Split),
        }
    }
}

impl ExactLayout {
    /// The screen width for a map in `dims` dimensions, or `None` when the
    /// plain arena is used.
    pub(crate) fn split(self, dims: usize) -> Option<usize> {
        match self {
            ExactLayout::Auto | ExactLayout::Off | ExactLayout::Local(_) => None,
            ExactLayout::Split(m) => Some(
                m.clamp(1, dims.max(1))
                    .min(prox_kernels::i8scan::SCREEN_MAX_DIMS),
            ),
        }
    }
}

impl ExactLayout {
    /// The local-frame width for a map in `dims` dimensions, or `None`
    /// when local frames are not used.
    pub(crate) fn local(self, dims: usize) -> Option<usize> {
        match self {
            ExactLayout::Local(m) => Some(
                m.clamp(1, dims.max(1))
                    .min(prox_kernels::i8scan::SCREEN_MAX_DIMS),
            ),
            _ => None,
        }
    }
}

/// A query prepared for the rotated arena (reusable buffers).
#[derive(Debug, Default)]
pub(crate) struct RotQuery {
    y: Vec<f64>,
    codes_a: Vec<i8>,
    codes_b: Vec<i8>,
    qn_a: i64,
    qn_b: i64,
    eq_a: f64,
    eq_b: f64,
    dot_b: Vec<i32>,
    /// Second-segment codes of one page's screen survivors, contiguous.
    gather: Vec<i8>,
}

impl RotQuery {
    /// The `j`-th dot of the last [`Rotated::dots_b`] (0 past its end,
    /// which only a map with no second segment reaches).
    #[inline]
    pub(crate) fn dot_b(&self, j: usize) -> i32 {
        self.dot_b.get(j).copied().unwrap_or(0)
    }
}

/// The rotated split arena; records are indexed like the plain arena's.
#[derive(Debug)]
pub(crate) struct Rotated {
    pub(super) dims: usize,
    /// Screen width `m` (`1..=dims`).
    pub(super) m: usize,
    /// `Wᵀ`, row-major: `wt[i·d + j] = W_ji`, row `j` of `W` the `j`-th
    /// principal axis (eigenvalues descending).
    pub(super) wt: Vec<f64>,
    /// `(d+1)·2^-52·‖W_A‖_F` and the same for `B`, rounded up.
    pub(super) rot_a: f64,
    pub(super) rot_b: f64,
    /// Upper bound on `σ_max(W)²`.
    pub(super) sigma2: f64,
    pub(super) scale_a: f64,
    pub(super) scale_b: f64,
    pub(super) codes_a: Vec<i8>,
    pub(super) codes_b: Vec<i8>,
    pub(super) norms_a: Vec<i32>,
    pub(super) norms_b: Vec<i32>,
    pub(super) err_a: Vec<f64>,
    pub(super) err_b: Vec<f64>,
    pub(super) err_a_max: f64,
}

/// `out = fl(W·x)`: for every `j`, `Σ_i W_ji·x_i` summed in `i` order (the
/// loop runs over `j` innermost so it vectorizes without reordering any
/// sum).
fn rotate(wt: &[f64], d: usize, x: impl Fn(usize) -> f64, out: &mut [f64]) {
    out.iter_mut().for_each(|v| *v = 0.0);
    for i in 0..d {
        let xi = x(i);
        if xi == 0.0 {
            // Adding `0·w` (exactly ±0) changes no partial sum's value.
            continue;
        }
        for (o, &w) in out.iter_mut().zip(&wt[i * d..(i + 1) * d]) {
            *o += w * xi;
        }
    }
}

/// Upper bound on `‖x‖`.
fn norm_up(x: impl Iterator<Item = f64>) -> f64 {
    let mut n2 = 0.0f64;
    for v in x {
        n2 += v * v;
    }
    up(up(n2).sqrt())
}

/// Eigenvectors of the symmetric `d×d` matrix `a` (destroyed) by cyclic
/// Jacobi rotations: returns `(eigenvalues, V)` with `V` row-major and
/// column `j` the eigenvector of eigenvalue `j`.
fn jacobi(a: &mut [f64], d: usize) -> (Vec<f64>, Vec<f64>) {
    let mut v = vec![0.0f64; d * d];
    for i in 0..d {
        v[i * d + i] = 1.0;
    }
    let total: f64 = a.iter().map(|x| x * x).sum();
    for _ in 0..SWEEPS {
        let mut off = 0.0f64;
        for p in 0..d {
            for q in p + 1..d {
                off += a[p * d + q] * a[p * d + q];
            }
        }
        if off <= total * 1e-30 || off == 0.0 {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                let apq = a[p * d + q];
                if apq == 0.0 {
                    continue;
                }
                // Zero a_pq with J = [[c, s], [−s, c]] on (p, q): t is the
                // smaller root of t² + 2θt − 1 = 0.
                let theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
                let t = if theta.abs() > 1e150 {
                    0.5 / theta
                } else {
                    let r = 1.0 / (theta.abs() + (theta * theta + 1.0).sqrt());
                    if theta < 0.0 {
                        -r
                    } else {
                        r
                    }
                };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..d {
                    let (akp, akq) = (a[k * d + p], a[k * d + q]);
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let (apk, aqk) = (a[p * d + k], a[q * d + k]);
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
                for k in 0..d {
                    let (vkp, vkq) = (v[k * d + p], v[k * d + q]);
                    v[k * d + p] = c * vkp - s * vkq;
                    v[k * d + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    ((0..d).map(|i| a[i * d + i]).collect(), v)
}

/// Upper bound on `σ_max(W)²` for `W` given as `wt = Wᵀ`:
/// `1 + Σ_ij |(WWᵀ − I)_ij|` with each entry's f64 error (a length-`d`
/// dot, then the subtraction) added and every sum rounded up.
fn sigma2_bound(wt: &[f64], d: usize) -> f64 {
    let gamma = (d as f64 + 2.0) * EPS;
    let mut sum = 0.0f64;
    for i in 0..d {
        for j in 0..d {
            let (mut dot, mut abs) = (0.0f64, 0.0f64);
            for k in 0..d {
                let (a, b) = (wt[k * d + i], wt[k * d + j]);
                dot += a * b;
                abs += (a * b).abs();
            }
            let delta = if i == j { 1.0 } else { 0.0 };
            let g = (dot - delta).abs();
            let e = up(gamma * up(abs + delta)) + d as f64 * f64::MIN_POSITIVE;
            sum = up(sum + up(g + e));
        }
    }
    up(1.0 + sum)
}

impl Rotated {
    /// Builds the rotation from a deterministic sample of the arena's
    /// records and codes every record. `None` when the rotation is not
    /// finite (cannot happen for finite f32 data, kept as a guard).
    /// `pages` are the arena's pages, all decoded.
    pub(crate) fn build(
        arena: &ScanArena,
        pages: &[Arc<Node>],
        dims: usize,
        m: usize,
    ) -> Option<Rotated> {
        let d = dims;
        let m = m.clamp(1, d.max(1));
        let n = *arena.page_start.last().unwrap_or(&0);
        let record = |r: usize| {
            let p = arena.page_start.partition_point(|&s| s <= r) - 1;
            pages[p].vector(r - arena.page_start[p], d)
        };
        // Sample every (n / SAMPLE)-th record, centered covariance.
        let ns = n.min(SAMPLE);
        let sample: Vec<usize> = (0..ns).map(|i| i * n / ns.max(1)).collect();
        let mut mean = vec![0.0f64; d];
        for &r in &sample {
            for (m, &x) in mean.iter_mut().zip(record(r)) {
                *m += f64::from(x);
            }
        }
        mean.iter_mut().for_each(|m| *m /= ns.max(1) as f64);
        let chunk = ns.div_ceil(CHUNKS).max(1);
        let parts: Vec<Vec<f64>> = sample
            .par_chunks(chunk)
            .map(|rs| {
                let mut c = vec![0.0f64; d * d];
                let mut z = vec![0.0f64; d];
                for &r in rs {
                    for ((z, &x), &mu) in z.iter_mut().zip(record(r)).zip(&mean) {
                        *z = f64::from(x) - mu;
                    }
                    for i in 0..d {
                        let zi = z[i];
                        for (c, &zj) in c[i * d + i..(i + 1) * d].iter_mut().zip(&z[i..]) {
                            *c += zi * zj;
                        }
                    }
                }
                c
            })
            .collect();
        let mut cov = vec![0.0f64; d * d];
        for p in &parts {
            for (c, &x) in cov.iter_mut().zip(p) {
                *c += x;
            }
        }
        for i in 0..d {
            for j in 0..i {
                cov[i * d + j] = cov[j * d + i];
            }
        }
        let (vals, v) = jacobi(&mut cov, d);
        let mut order: Vec<usize> = (0..d).collect();
        order.sort_by(|&a, &b| vals[b].total_cmp(&vals[a]).then(a.cmp(&b)));
        // Row j of W is column order[j] of V: wt[i·d + j] = V[i][order[j]].
        let mut wt = vec![0.0f64; d * d];
        for i in 0..d {
            for (j, &o) in order.iter().enumerate() {
                wt[i * d + j] = v[i * d + o];
            }
        }
        if !wt.iter().all(|w| w.is_finite()) {
            return None;
        }
        let sigma2 = sigma2_bound(&wt, d);
        let fro = |cols: std::ops::Range<usize>| {
            let mut s = 0.0f64;
            for i in 0..d {
                for &w in &wt[i * d + cols.start..i * d + cols.end] {
                    s += w * w;
                }
            }
            up((d as f64 + 1.0) * EPS * up(up(s).sqrt()))
        };
        let (rot_a, rot_b) = (fro(0..m), fro(m..d));

        // Per-segment maxima (a first rotation pass; keeping every rotated
        // record would cost 8·d bytes each), then the scales.
        let (max_a, max_b) = pages
            .par_iter()
            .map(|p| {
                let mut y = vec![0.0f64; d];
                let (mut a, mut b) = (0.0f64, 0.0f64);
                for e in 0..p.len {
                    let x = p.vector(e, d);
                    rotate(&wt, d, |i| f64::from(x[i]), &mut y);
                    a = y[..m].iter().fold(a, |a, &v| a.max(v.abs()));
                    b = y[m..].iter().fold(b, |b, &v| b.max(v.abs()));
                }
                (a, b)
            })
            .reduce(|| (0.0, 0.0), |x, y| (x.0.max(y.0), x.1.max(y.1)));
        let scale = |max: f64| if max > 0.0 { max / 127.0 } else { 1.0 };
        let (scale_a, scale_b) = (scale(max_a), scale(max_b));

        let mb = d - m;
        let mut codes_a = vec![0i8; n * m];
        let mut codes_b = vec![0i8; n * mb];
        let (mut norms_a, mut norms_b) = (vec![0i32; n], vec![0i32; n]);
        let (mut err_a, mut err_b) = (vec![0.0f64; n], vec![0.0f64; n]);
        let mut jobs = Vec::with_capacity(pages.len());
        {
            let (mut ca, mut cb) = (&mut codes_a[..], &mut codes_b[..]);
            let (mut na, mut nb) = (&mut norms_a[..], &mut norms_b[..]);
            let (mut ea, mut eb) = (&mut err_a[..], &mut err_b[..]);
            for p in pages {
                let l = p.len;
                let (ca0, ca1) = ca.split_at_mut(l * m);
                let (cb0, cb1) = cb.split_at_mut(l * mb);
                let (na0, na1) = na.split_at_mut(l);
                let (nb0, nb1) = nb.split_at_mut(l);
                let (ea0, ea1) = ea.split_at_mut(l);
                let (eb0, eb1) = eb.split_at_mut(l);
                jobs.push((p, ca0, cb0, na0, nb0, ea0, eb0));
                (ca, cb, na, nb, ea, eb) = (ca1, cb1, na1, nb1, ea1, eb1);
            }
        }
        jobs.into_par_iter()
            .for_each(|(p, ca, cb, na, nb, ea, eb)| {
                let mut y = vec![0.0f64; d];
                for e in 0..p.len {
                    let x = p.vector(e, d);
                    rotate(&wt, d, |i| f64::from(x[i]), &mut y);
                    let xn = norm_up(x.iter().map(|&v| f64::from(v)));
                    let (n, r) = quantize_uniform(&y[..m], scale_a, &mut ca[e * m..(e + 1) * m]);
                    na[e] = n as i32;
                    ea[e] = up(r + rot_err(rot_a, xn, d));
                    let (n, r) = quantize_uniform(&y[m..], scale_b, &mut cb[e * mb..(e + 1) * mb]);
                    nb[e] = n as i32;
                    eb[e] = up(r + rot_err(rot_b, xn, d));
                }
            });
        let err_a_max = err_a.iter().fold(0.0f64, |a, &x| a.max(x));
        Some(Rotated {
            dims: d,
            m,
            wt,
            rot_a,
            rot_b,
            sigma2,
            scale_a,
            scale_b,
            codes_a,
            codes_b,
            norms_a,
            norms_b,
            err_a,
            err_b,
            err_a_max,
        })
    }

    /// Screen width.
    pub(crate) fn split(&self) -> usize {
        self.m
    }

    /// Heap bytes of the rotation and the codes, norms and residuals.
    pub(crate) fn heap_bytes(&self) -> usize {
        8 * self.wt.len() + self.codes_a.len() + self.codes_b.len() + 24 * self.norms_a.len()
    }

    /// Rotates and codes the query `q` into `rq`.
    pub(crate) fn prepare(&self, q: &[f32], rq: &mut RotQuery) {
        let (d, m) = (self.dims, self.m);
        rq.y.resize(d, 0.0);
        rotate(&self.wt, d, |i| f64::from(q[i]), &mut rq.y);
        let qn = norm_up(q.iter().map(|&v| f64::from(v)));
        rq.codes_a.resize(m, 0);
        rq.codes_b.resize(d - m, 0);
        let (n, r) = quantize_uniform(&rq.y[..m], self.scale_a, &mut rq.codes_a);
        rq.qn_a = n;
        rq.eq_a = up(r + rot_err(self.rot_a, qn, d));
        let (n, r) = quantize_uniform(&rq.y[m..], self.scale_b, &mut rq.codes_b);
        rq.qn_b = n;
        rq.eq_b = up(r + rot_err(self.rot_b, qn, d));
    }

    /// Screens records `a..b` in one fused kernel call: `idx` and `vals`
    /// receive (cleared first) the offsets `i` from `a` and the values
    /// `Σx̂² − 2·q̂·x̂` ([`Self::dist_a`] turns one into `D_A`) of the
    /// records with screen code distance `D_A ≤ bulk`, in order.
    ///
    /// Exact: the value is exact in `i32` for `m ≤ SCREEN_MAX_DIMS` and
    /// lies strictly inside the `i32` range, so clamping `bulk − Σq̂²` to
    /// `i32` changes no comparison.
    #[inline]
    pub(crate) fn screen(
        &self,
        rq: &RotQuery,
        a: usize,
        b: usize,
        bulk: i64,
        idx: &mut Vec<u32>,
        vals: &mut Vec<i32>,
    ) {
        let m = self.m;
        idx.clear();
        vals.clear();
        let limit = bulk
            .saturating_sub(rq.qn_a)
            .clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        prox_kernels::i8scan::screen(
            &rq.codes_a,
            &self.codes_a[a * m..b * m],
            &self.norms_a[a..b],
            limit,
            idx,
            vals,
        );
    }

    /// Screen code distance `D_A` from a [`Self::screen`] value.
    #[inline]
    pub(crate) fn dist_a(&self, rq: &RotQuery, val: i32) -> i64 {
        rq.qn_a + i64::from(val)
    }

    /// The screen limits for the k-th score `kth`: `(bulk, ra)`, where
    /// every record with `D_A > bulk` has canonical score above `kth`
    /// (largest screen residual; `i64::MAX` for an infinite `kth`) and
    /// `ra` is the record-independent part of [`Self::own_a`]'s limit.
    pub(crate) fn limits(&self, rq: &RotQuery, kth: f64, rel: f64) -> (i64, f64) {
        if !kth.is_finite() {
            return (i64::MAX, f64::INFINITY);
        }
        // `l2_prune_limit(t, ..)` with its query part hoisted: it computes
        // `up(r + eq + ex)` as `up((r + eq) + ex)`, so [`Self::own_a`]
        // evaluates the same expression bit for bit.
        let t = up(kth * self.sigma2);
        let ra = up(up(t / (1.0 - rel)).sqrt()) + rq.eq_a;
        let bulk = limit_int(l2_prune_limit(
            t,
            rel,
            rq.eq_a,
            self.err_a_max,
            self.scale_a,
        ));
        (bulk, ra)
    }

    /// Whether record `r` (screen distance `da`) passes the screen with
    /// its own residual (`ra` from [`Self::limits`]).
    #[inline]
    pub(crate) fn own_a(&self, r: usize, da: i64, ra: f64) -> bool {
        if !ra.is_finite() {
            return true;
        }
        let z = up(up(ra + self.err_a[r]) / self.scale_a);
        da as f64 <= up(z * z)
    }

    /// Second-segment dots of records `base + i` for every `(i, _)` of
    /// `recs` into `rq.dot_b` (one kernel call over the gathered codes).
    pub(crate) fn dots_b(&self, rq: &mut RotQuery, base: usize, recs: &[(u32, i64)]) {
        let mb = self.dims - self.m;
        rq.gather.clear();
        for &(i, _) in recs {
            let r = base + i as usize;
            rq.gather
                .extend_from_slice(&self.codes_b[r * mb..(r + 1) * mb]);
        }
        rq.dot_b.resize(recs.len(), 0);
        prox_kernels::i8scan::dots(&rq.codes_b, &rq.gather, &mut rq.dot_b);
    }

    /// Whether record `r` (screen distance `da`, second-segment dot
    /// `dot_b`) can still score at most `kth`, bounded with both segments.
    #[inline]
    pub(crate) fn full(
        &self,
        rq: &RotQuery,
        r: usize,
        da: i64,
        dot_b: i32,
        kth: f64,
        rel: f64,
    ) -> bool {
        if !kth.is_finite() || self.dims == self.m {
            return true;
        }
        let db = rq.qn_b + i64::from(self.norms_b[r]) - 2 * i64::from(dot_b);
        let la = seg_lower(da, self.scale_a, rq.eq_a, self.err_a[r]);
        let lb = seg_lower(db, self.scale_b, rq.eq_b, self.err_b[r]);
        let low2 = down(down(la * la) + down(lb * lb));
        let score_lb = down(down(low2 / self.sigma2) * (1.0 - rel));
        score_lb <= kth
    }
}

/// Bound on the rotation's rounding in one segment for a vector of norm at
/// most `xn` (`rot` from [`Rotated::build`]; the absolute term covers
/// underflow).
#[inline]
fn rot_err(rot: f64, xn: f64, d: usize) -> f64 {
    up(rot * xn) + d as f64 * f64::MIN_POSITIVE
}

/// Lower bound on a segment's real distance `s·√D − eq − ex` (0 if not
/// positive), every step rounded down.
#[inline]
fn seg_lower(dist: i64, scale: f64, eq: f64, ex: f64) -> f64 {
    if dist <= 0 {
        return 0.0;
    }
    down(down(scale * down((dist as f64).sqrt())) - up(eq + ex))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Jacobi recovers a known spectrum and the σ bound covers the
    /// computed rotation.
    #[test]
    fn jacobi_diagonalizes_and_sigma_bound_holds() {
        let d = 7;
        let mut a = vec![0.0f64; d * d];
        for i in 0..d {
            for j in 0..d {
                a[i * d + j] = 1.0 / (1.0 + i as f64 + j as f64) + if i == j { 2.0 } else { 0.0 };
            }
        }
        let orig = a.clone();
        let (vals, v) = jacobi(&mut a, d);
        for (j, &lam) in vals.iter().enumerate() {
            for i in 0..d {
                let av: f64 = (0..d).map(|k| orig[i * d + k] * v[k * d + j]).sum();
                assert!((av - lam * v[i * d + j]).abs() < 1e-12, "column {j}");
            }
        }
        let s2 = sigma2_bound(&v, d);
        assert!((1.0..1.0 + 1e-9).contains(&s2), "{s2}");
        // A matrix that is not orthogonal: σ_max(2·I)² = 4 <= bound.
        let mut two = vec![0.0f64; d * d];
        for i in 0..d {
            two[i * d + i] = 2.0;
        }
        assert!(sigma2_bound(&two, d) >= 4.0);
    }

    #[test]
    fn split_policy() {
        assert_eq!(ExactLayout::default().split(128), None);
        assert_eq!("off".parse(), Ok(ExactLayout::Off));
        assert_eq!("auto".parse(), Ok(ExactLayout::Auto));
        assert_eq!(ExactLayout::Auto.local(128), None);
        assert_eq!("local64".parse(), Ok(ExactLayout::Local(64)));
        assert_eq!("split96".parse(), Ok(ExactLayout::Split(96)));
        assert_eq!("96".parse(), Ok(ExactLayout::Split(96)));
        for bad in ["", "local", "local0", "localx", "on", "-3"] {
            assert!(bad.parse::<ExactLayout>().is_err(), "{bad}");
        }
        assert_eq!(ExactLayout::Split(500).split(3), Some(3));
        assert_eq!(ExactLayout::Split(0).split(3), Some(1));
    }
}
