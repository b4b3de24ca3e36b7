//! Local frames for exact L2: the records clustered (load-time k-means)
//! into frames of about a thousand, each frame with its own centre `c` and
//! a basis `A` (`m × d`, rows close to orthonormal) of its leading
//! principal axes. A record is screened by the 8-bit codes of its `m`
//! local coordinates `A·(x − c)` plus the length of what the basis leaves
//! out, `‖P⊥(x − c)‖`.
//!
//! Data that looks flat globally is often low-rank locally (a mixture of
//! low-rank clusters, embeddings on a curved manifold): one global rotation
//! (`rotated.rs`) needs most of the components to bound a distance, a
//! frame's own axes need few, and the out-of-basis lengths, stored per
//! record, separate the records of other clusters.
//!
//! # Bounds
//!
//! Fix a frame and write `v = w − c` for a vector `w` (real arithmetic).
//! `Q = (A·Aᵀ)^(-1/2)·A` has exactly orthonormal rows and the row space of
//! `A`; `P⊥ = I − QᵀQ`. With `ε ≥ ‖A·Aᵀ − I‖₂` (bounded by `Σ|(AAᵀ − I)_ij|`
//! plus the f64 rounding of every entry), `‖A·u‖² / (1 + ε) ≤ ‖Q·u‖² ≤
//! ‖A·u‖² / (1 − ε)` for every `u`. For a query `q` and a record `x` of the
//! frame, `q − x = v_q − v_x`, so
//!
//! ```text
//! ‖q − x‖² = ‖Q(v_q − v_x)‖² + ‖P⊥(v_q − v_x)‖²
//!          ≥ ‖A(v_q − v_x)‖² / (1 + ε) + (‖P⊥v_q‖ − ‖P⊥v_x‖)²
//! ```
//!
//! (reverse triangle inequality on the projector's range).
//!
//! * **Local coordinates** are computed in f32: `v̂ = fl(w − c)` (relative
//!   error at most `u = 2^-24` per component, never inexact below the
//!   normal range), then `ŷ_j = Σ_i A_ji·v̂_i` summed sequentially in `i`
//!   (each `ŷ_j` is the same IEEE sequence on every ISA; the loop
//!   vectorizes across `j` only). So `‖ŷ − A·v‖ ≤ e_rot = (γ_d·‖A‖_F +
//!   σ·u/(1 − u))·‖v̂‖ + m·d·2^-149` with `γ_d = d·u / (1 − d·u)`,
//!   `σ = √(1 + ε) ≥ σ_max(A)` (the product's underflow adds at most
//!   `2^-150` a term).
//! * **Codes** of `ŷ` with the frame's uniform scale `s` and residual
//!   `e_code ≥ ‖ŷ − s·ŷ̂‖` ([`quantize_uniform`]); a record keeps `e_x =
//!   e_code + e_rot`, the query `e_q` likewise, so `‖A(v_q − v_x)‖ ≥
//!   s·√D − e_q − e_x` with `D` the exact integer code distance.
//! * **Out-of-basis lengths**: from `‖v‖² ∈ ‖v̂‖²·[1/(1+u)², 1/(1−u)²]`
//!   and `‖A·v‖ ∈ ‖ŷ‖ ± e_rot`, `‖P⊥v‖² = ‖v‖² − ‖Q·v‖²` lies in
//!   `[‖v‖²_lo − ‖Av‖²_hi / (1 − ε), ‖v‖²_hi − ‖Av‖²_lo / (1 + ε)]`; each
//!   record stores that interval, the query gets one per frame, and the gap
//!   between the two intervals bounds `|‖P⊥v_q‖ − ‖P⊥v_x‖|` from below.
//! * **Frame bound**: every frame keeps the per-axis range (box) of its
//!   records' `ŷ`, their largest `e_rot` and `e_x` and the hull of their
//!   out-of-basis intervals. The distance from the query's `ŷ` to the box,
//!   minus both rotation errors, bounds `‖A(v_q − v_x)‖` for every record
//!   inside, so whole frames are skipped without reading a code. (Boxes
//!   over kd-split chunks of 64 to 256 records were measured too: they
//!   skip more records but cost more than they save.)
//!
//! Every computed bound is pushed down (and every limit up) with
//! [`super::quant::up`]/[`down`] margins far above the roundings involved,
//! and canonical scores are at least `real²·(1 − rel)`, so a record is
//! dropped only when its canonical score provably exceeds the current k-th
//! one: the hits are exactly brute force's, ties included. Survivors are
//! checked once more with the plain arena's full-width codes before they
//! are scored canonically.
//!
//! **Determinism.** The k-means (deterministic f32 kernel, f64 sums in a
//! fixed order), the covariance and power iterations (scalar f64 in a
//! fixed order) and every projection are the same on every machine, ISA and thread count, so the
//! frames, the work and the hits are too.

use super::arena::{limit_int, Arena};
use super::quant::{down, quantize_uniform, up, EPS};
use rayon::prelude::*;

/// Records per frame the clustering aims at.
const FRAME: usize = 1024;
/// k-means training rows per frame.
const TRAIN: usize = 64;
/// Lloyd iterations.
const LLOYD: usize = 8;
/// Members of a frame in its covariance at most.
const COV: usize = 256;
/// Subspace (block power) iterations.
const POWER: usize = 8;
/// f32 unit roundoff `2^-24`.
const U: f64 = 1.0 / 16_777_216.0;
/// Smallest positive subnormal f32, `2^-149`.
const SUB: f64 = 1.401_298_464_324_817e-45;

/// One frame's constants.
#[derive(Debug, Clone, Copy)]
struct Frame {
    /// Members `start..end`.
    start: u32,
    end: u32,
    /// Uniform code scale of the local coordinates.
    scale: f64,
    /// Upper bound on `1 + ε`.
    one_eps: f64,
    /// Lower bound on `1 − ε` (positive).
    one_eps_lo: f64,
    /// `e_rot(v̂) = up(rot·‖v̂‖ + abs)`.
    rot: f64,
    abs: f64,
    /// Largest member `e_rot` and `e_x`, hull of the members'
    /// out-of-basis intervals.
    erot: f64,
    err: f64,
    tail: [f64; 2],
}

/// Per-member data, frame-major (ascending records within a frame).
#[derive(Debug, Default)]
struct Members {
    /// Arena record.
    rec: Vec<u32>,
    /// `m` codes each.
    codes: Vec<i8>,
    /// `Σŷ̂²`.
    norms: Vec<i32>,
    /// `e_x`.
    err: Vec<f64>,
    /// Out-of-basis interval.
    tail: Vec<[f64; 2]>,
}

impl Members {
    fn append(&mut self, o: &Members) {
        self.rec.extend_from_slice(&o.rec);
        self.codes.extend_from_slice(&o.codes);
        self.norms.extend_from_slice(&o.norms);
        self.err.extend_from_slice(&o.err);
        self.tail.extend_from_slice(&o.tail);
    }
}

/// The local frames of one map (exact L2 only).
#[derive(Debug)]
pub(crate) struct Frames {
    dims: usize,
    m: usize,
    frames: Vec<Frame>,
    /// `d` f32 per frame.
    centre: Vec<f32>,
    /// `d·m` f32 per frame, `basis[f·d·m + i·m + j] = A_f[j][i]`.
    basis: Vec<f32>,
    /// `2m` f32 per frame (lower corner, then upper).
    frame_box: Vec<f32>,
    members: Members,
    /// The plain arena's code norm and residual of every member, copied in
    /// member order (the survivors' recheck reads them without a random
    /// access into the arena).
    plain: Vec<(i32, f64)>,
}

/// A query's view of every frame (reusable buffers).
#[derive(Debug, Default)]
pub(crate) struct FrameQuery {
    /// `m` local coordinates per frame.
    y: Vec<f32>,
    /// Per frame: `e_rot` of the query and its out-of-basis interval.
    erot: Vec<f64>,
    tail: Vec<[f64; 2]>,
    /// `(squared distance to the centre, lower bound, frame)` in visiting
    /// order (nearest centre first).
    order: Vec<(f64, f64, u32)>,
    v: Vec<f32>,
    yd: Vec<f64>,
    /// The current frame's query codes, `Σq̂²` and `e_q`.
    codes: Vec<i8>,
    qn: i64,
    eq: f64,
}

impl FrameQuery {
    /// The frames in visiting order (nearest centre first) with their
    /// lower bounds on `real²`: `(centre distance², bound, frame)`.
    pub(crate) fn order(&self) -> &[(f64, f64, u32)] {
        &self.order
    }
}

/// `y = A·v̂` in f32 over `at = Aᵀ` (`d × m`): each `y_j` is summed in `i`
/// order, the loop vectorizes across `j` without reordering any sum.
fn project(at: &[f32], m: usize, v: &[f32], y: &mut [f32]) {
    y.iter_mut().for_each(|x| *x = 0.0);
    for (row, &vi) in at.chunks_exact(m).zip(v) {
        for (yj, &a) in y.iter_mut().zip(row) {
            *yj += a * vi;
        }
    }
}

/// `Σ x²` in f64 of f32 values (each square exact).
fn sq_sum(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
}

/// `[lo, hi] ∋ ‖P⊥v‖` from the computed `Σv̂²` (`nv2`, `d` terms), `Σŷ²`
/// (`ny2`, `m` terms) and the rotation error `erot` (module docs).
fn tail_interval(nv2: f64, ny2: f64, erot: f64, f: &Frame, d: usize, m: usize) -> [f64; 2] {
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
fn gap(a: [f64; 2], b: [f64; 2]) -> f64 {
    let g = (a[0] - b[1]).max(b[0] - a[1]);
    if g > 0.0 {
        down(g)
    } else {
        0.0
    }
}

/// Lower bound on the distance from `y` to the box `lo..hi` (per axis).
fn box_dist(y: &[f32], bx: &[f32], m: usize) -> f64 {
    let (lo, hi) = bx.split_at(m);
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
fn box_lower(bd: f64, eq: f64, ex: f64, g: f64, one_eps: f64) -> f64 {
    let e = up(eq + ex);
    let la = if bd > e { down(bd - e) } else { 0.0 };
    down(down(down(la * la) / one_eps) + down(g * g))
}

/// Upper bound on `‖v̂‖` from `Σv̂²`.
#[inline]
fn norm_up(nv2: f64, d: usize) -> f64 {
    up(up(nv2 * (1.0 + (d as f64 + 2.0) * EPS)).sqrt())
}

/// `(1 + ε)` upper bound for `A` given as `at = Aᵀ` (`d × m`):
/// `1 + Σ_ij |(A·Aᵀ − I)_ij|` with every entry's f64 error added.
fn one_plus_eps(at: &[f32], d: usize, m: usize) -> f64 {
    let gamma = (d as f64 + 2.0) * EPS;
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
            sum = up(sum + up((dot - delta).abs() + e));
        }
    }
    up(1.0 + sum)
}

/// Lloyd k-means of `rows` (accessed through `row`) into the centroids
/// `cent` (`k × d`, initialized by the caller), `rounds` times, each row
/// assigned by `assign`; f64 sums in row order, an empty cluster keeps its
/// centroid.
fn lloyd<'a>(
    rows: &[usize],
    row: &(impl Fn(usize) -> &'a [f32] + Sync),
    cent: &mut [f32],
    d: usize,
    rounds: usize,
    assign: impl Fn(&[f32], &[f32]) -> u32 + Sync,
) {
    let k = cent.len() / d;
    for _ in 0..rounds {
        let of: Vec<u32> = rows.par_iter().map(|&r| assign(row(r), cent)).collect();
        let mut sums = vec![0.0f64; k * d];
        let mut counts = vec![0usize; k];
        for (&r, &a) in rows.iter().zip(&of) {
            let a = a as usize;
            counts[a] += 1;
            for (s, &x) in sums[a * d..(a + 1) * d].iter_mut().zip(row(r)) {
                *s += f64::from(x);
            }
        }
        for (j, &c) in counts.iter().enumerate() {
            if c > 0 {
                for (o, s) in cent[j * d..(j + 1) * d]
                    .iter_mut()
                    .zip(&sums[j * d..(j + 1) * d])
                {
                    *o = (s / c as f64) as f32;
                }
            }
        }
    }
}

/// The nearest of the centroids `cands` by the deterministic f32 distance
/// (ties to the first listed, which callers keep ascending).
fn nearest(x: &[f32], cent: &[f32], d: usize, cands: impl IntoIterator<Item = usize>) -> u32 {
    let mut best = (f32::INFINITY, u32::MAX);
    for j in cands {
        let dist = prox_kernels::det::l2sq(x, &cent[j * d..(j + 1) * d]);
        if dist < best.0 || best.1 == u32::MAX {
            best = (dist, j as u32);
        }
    }
    best.1
}

/// A two-level index over frame centroids for assignment: the centroids
/// clustered into about `√k` groups; a vector is compared with every group
/// centre, then with the centroids of its [`PROBE`] nearest groups.
struct Coarse {
    cent: Vec<f32>,
    members: Vec<Vec<usize>>,
}

/// Groups a vector's assignment looks into.
const PROBE: usize = 3;

impl Coarse {
    fn build(cent: &[f32], d: usize) -> Coarse {
        let k = cent.len() / d;
        let g = ((k as f64).sqrt().ceil() as usize).clamp(1, k);
        let rows: Vec<usize> = (0..k).collect();
        let row = |r: usize| &cent[r * d..(r + 1) * d];
        let mut gc: Vec<f32> = (0..g)
            .flat_map(|j| row(j * k / g).iter().copied())
            .collect();
        lloyd(&rows, &row, &mut gc, d, LLOYD, |x, c| {
            nearest(x, c, d, 0..g)
        });
        let mut members = vec![Vec::new(); g];
        for r in 0..k {
            members[nearest(row(r), &gc, d, 0..g) as usize].push(r);
        }
        Coarse { cent: gc, members }
    }

    /// The nearest frame centroid of `x` among the [`PROBE`] nearest
    /// groups' members (ties to the lower frame).
    fn nearest(&self, x: &[f32], cent: &[f32], d: usize) -> u32 {
        let g = self.members.len();
        let mut near: Vec<(f32, usize)> = (0..g)
            .map(|j| {
                (
                    prox_kernels::det::l2sq(x, &self.cent[j * d..(j + 1) * d]),
                    j,
                )
            })
            .collect();
        let t = PROBE.min(g);
        near.select_nth_unstable_by(t - 1, |a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut best = (f32::INFINITY, u32::MAX);
        for &(_, j) in &near[..t] {
            for &f in &self.members[j] {
                let dist = prox_kernels::det::l2sq(x, &cent[f * d..(f + 1) * d]);
                if dist < best.0 || (dist == best.0 && (f as u32) < best.1) {
                    best = (dist, f as u32);
                }
            }
        }
        best.1
    }
}

/// Frames of the arena's records: `nf` centroids from a strided sample
/// refined by [`LLOYD`] rounds, then every record's nearest centroid, both
/// through a [`Coarse`] index rebuilt from the current centroids.
fn cluster(arena: &Arena, d: usize, n: usize, nf: usize) -> Vec<u32> {
    let ns = n.min(TRAIN * nf).max(nf);
    let rows: Vec<usize> = (0..ns).map(|i| i * n / ns).collect();
    let row = |r: usize| arena.record(r, d);
    let mut cent: Vec<f32> = (0..nf)
        .flat_map(|j| row(rows[j * ns / nf]).iter().copied())
        .collect();
    for _ in 0..LLOYD {
        let coarse = Coarse::build(&cent, d);
        lloyd(&rows, &row, &mut cent, d, 1, |x, c| coarse.nearest(x, c, d));
    }
    let coarse = Coarse::build(&cent, d);
    let parts: Vec<Vec<u32>> = arena
        .pages
        .par_iter()
        .map(|p| {
            (0..p.len)
                .map(|e| coarse.nearest(p.vector(e, d), &cent, d))
                .collect()
        })
        .collect();
    parts.concat()
}

/// An orthonormal basis (f64, `m` vectors of length `d`, row-major) of the
/// leading principal subspace of the centred rows `z` (`k × d`), by block
/// power iteration from the rows themselves; missing directions (fewer
/// independent rows than `m`) are filled with unit vectors.
fn principal(z: &[f64], d: usize, m: usize) -> Vec<f64> {
    let k = z.len() / d;
    let mut cov = vec![0.0f64; d * d];
    for row in z.chunks_exact(d) {
        for i in 0..d {
            let zi = row[i];
            for (c, &zj) in cov[i * d..(i + 1) * d].iter_mut().zip(row) {
                *c += zi * zj;
            }
        }
    }
    let mut basis = vec![0.0f64; m * d];
    for j in 0..m {
        if j < k {
            basis[j * d..(j + 1) * d].copy_from_slice(&z[j * d..(j + 1) * d]);
        }
    }
    orthonormalize(&mut basis, d, m);
    let mut next = vec![0.0f64; m * d];
    for _ in 0..POWER {
        for (b, o) in basis.chunks_exact(d).zip(next.chunks_exact_mut(d)) {
            o.iter_mut().for_each(|x| *x = 0.0);
            for (i, &bi) in b.iter().enumerate() {
                for (x, &c) in o.iter_mut().zip(&cov[i * d..(i + 1) * d]) {
                    *x += c * bi;
                }
            }
        }
        std::mem::swap(&mut basis, &mut next);
        orthonormalize(&mut basis, d, m);
    }
    basis
}

/// Modified Gram-Schmidt (twice) on `m` rows of length `d`; a row that
/// vanishes (zero, or nothing left of it relative to its length) is
/// replaced by the next unit vector that does not.
fn orthonormalize(b: &mut [f64], d: usize, m: usize) {
    let mut unit = 0usize;
    for j in 0..m {
        let mut tries = 0;
        loop {
            let before = b[j * d..(j + 1) * d]
                .iter()
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt();
            for _ in 0..2 {
                for p in 0..j {
                    let (done, rest) = b.split_at_mut(j * d);
                    let prev = &done[p * d..(p + 1) * d];
                    let row = &mut rest[..d];
                    let dot: f64 = prev.iter().zip(row.iter()).map(|(a, b)| a * b).sum();
                    for (x, &p) in row.iter_mut().zip(prev) {
                        *x -= dot * p;
                    }
                }
            }
            let row = &mut b[j * d..(j + 1) * d];
            let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            if norm > 1e-9 * before && norm.is_finite() && tries < d + 2 {
                row.iter_mut().for_each(|x| *x /= norm);
                break;
            }
            if tries >= d + 2 {
                // Cannot happen for m <= d; keeps the loop bounded anyway.
                row.iter_mut().for_each(|x| *x = 0.0);
                break;
            }
            row.iter_mut().for_each(|x| *x = 0.0);
            row[unit % d] = 1.0;
            unit += 1;
            tries += 1;
        }
    }
}

/// One frame's built parts, before concatenation.
struct Part {
    frame: Frame,
    centre: Vec<f32>,
    at: Vec<f32>,
    frame_box: Vec<f32>,
    members: Members,
}

/// The per-axis box of `ys` rows (`m` each) into `out` (`2m`).
fn bounding_box<'a>(rows: impl Iterator<Item = &'a [f32]>, m: usize, out: &mut Vec<f32>) {
    let at = out.len();
    out.extend(std::iter::repeat_n(f32::INFINITY, m));
    out.extend(std::iter::repeat_n(f32::NEG_INFINITY, m));
    for row in rows {
        for (j, &v) in row.iter().enumerate() {
            out[at + j] = out[at + j].min(v);
            out[at + m + j] = out[at + m + j].max(v);
        }
    }
}

/// Builds one frame from its members (arena records, ascending).
fn build_frame(arena: &Arena, d: usize, m: usize, members: &[u32]) -> Option<Part> {
    let k = members.len();
    // Centre: the f64 mean rounded to f32.
    let mut mean = vec![0.0f64; d];
    for &r in members {
        for (s, &x) in mean.iter_mut().zip(arena.record(r as usize, d)) {
            *s += f64::from(x);
        }
    }
    let centre: Vec<f32> = mean.iter().map(|s| (s / k as f64) as f32).collect();
    // Centred f32 rows v̂ of every member.
    let mut v = vec![0.0f32; k * d];
    for (row, &r) in v.chunks_exact_mut(d).zip(members) {
        for ((o, &x), &c) in row.iter_mut().zip(arena.record(r as usize, d)).zip(&centre) {
            *o = x - c;
        }
    }
    if !v.iter().all(|x| x.is_finite()) {
        return None;
    }
    let step = k.div_ceil(COV).max(1);
    let z: Vec<f64> = v
        .chunks_exact(d)
        .step_by(step)
        .flat_map(|row| row.iter().map(|&x| f64::from(x)))
        .collect();
    let basis = principal(&z, d, m);
    let mut at = vec![0.0f32; d * m];
    for j in 0..m {
        for i in 0..d {
            at[i * m + j] = basis[j * d + i] as f32;
        }
    }
    let one_eps = one_plus_eps(&at, d, m);
    let eps = one_eps - 1.0;
    if eps.is_nan() || eps >= 0.5 {
        return None;
    }
    let one_eps_lo = down(1.0 - up(eps));
    let mut fro = 0.0f64;
    for &a in &at {
        fro += f64::from(a) * f64::from(a);
    }
    let fro = up(up(fro).sqrt());
    let gamma = up(d as f64 * U / (1.0 - d as f64 * U));
    let sigma = up(one_eps.sqrt());
    let rot = up(up(gamma * fro) + up(sigma * U / (1.0 - U)));
    let abs = up((m * d) as f64 * SUB);
    // Local coordinates of every member.
    let mut y = vec![0.0f32; k * m];
    for (row, yr) in v.chunks_exact(d).zip(y.chunks_exact_mut(m)) {
        project(&at, m, row, yr);
    }
    if !y.iter().all(|x| x.is_finite()) {
        return None;
    }
    let max = y.iter().fold(0.0f64, |a, &x| a.max(f64::from(x).abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    let mut frame = Frame {
        start: 0,
        end: k as u32,
        scale,
        one_eps,
        one_eps_lo,
        rot,
        abs,
        erot: 0.0,
        err: 0.0,
        tail: [f64::INFINITY, 0.0],
    };
    let mut part = Part {
        frame,
        centre,
        at,
        frame_box: Vec::with_capacity(2 * m),
        members: Members {
            rec: members.to_vec(),
            codes: vec![0i8; k * m],
            norms: Vec::with_capacity(k),
            err: Vec::with_capacity(k),
            tail: Vec::with_capacity(k),
        },
    };
    for (i, (vi, yi)) in v.chunks_exact(d).zip(y.chunks_exact(m)).enumerate() {
        let nv2 = sq_sum(vi);
        let erot = up(rot * norm_up(nv2, d) + abs);
        let (norm, ecode) =
            quantize_uniform(yi, scale, &mut part.members.codes[i * m..(i + 1) * m]);
        let tail = tail_interval(nv2, sq_sum(yi), erot, &frame, d, m);
        part.members.norms.push(norm as i32);
        part.members.err.push(up(ecode + erot));
        part.members.tail.push(tail);
        frame.erot = frame.erot.max(erot);
        frame.err = frame.err.max(up(ecode + erot));
        frame.tail = [frame.tail[0].min(tail[0]), frame.tail[1].max(tail[1])];
    }
    bounding_box(y.chunks_exact(m), m, &mut part.frame_box);
    part.frame = frame;
    Some(part)
}

impl Frames {
    /// Clusters the arena's records into frames and codes every record in
    /// its frame. `None` when a frame cannot be built with usable bounds
    /// (non-finite centred data, a degenerate basis); exact L2 then uses
    /// the plain arena.
    pub(crate) fn build(arena: &Arena, dims: usize, m: usize) -> Option<Frames> {
        let d = dims;
        let m = m.clamp(1, d.max(1));
        let n = *arena.page_start.last().unwrap_or(&0);
        if n == 0 || d == 0 {
            return None;
        }
        let nf = (n + FRAME / 2) / FRAME;
        let nf = nf.clamp(1, n);
        let of = cluster(arena, d, n, nf);
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); nf];
        for (r, &f) in of.iter().enumerate() {
            members[f as usize].push(r as u32);
        }
        members.retain(|x| !x.is_empty());
        let parts: Vec<Option<Part>> = members
            .par_iter()
            .map(|mem| build_frame(arena, d, m, mem))
            .collect();
        let mut out = Frames {
            dims: d,
            m,
            frames: Vec::with_capacity(parts.len()),
            centre: Vec::with_capacity(parts.len() * d),
            basis: Vec::with_capacity(parts.len() * d * m),
            frame_box: Vec::with_capacity(parts.len() * 2 * m),
            members: Members::default(),
            plain: Vec::new(),
        };
        for part in parts {
            let mut p = part?;
            let base = out.members.rec.len() as u32;
            p.frame.start = base;
            p.frame.end = base + p.members.rec.len() as u32;
            out.frames.push(p.frame);
            out.centre.extend_from_slice(&p.centre);
            out.basis.extend_from_slice(&p.at);
            out.frame_box.extend_from_slice(&p.frame_box);
            out.members.append(&p.members);
        }
        out.plain = out
            .members
            .rec
            .iter()
            .map(|&r| (arena.norms[r as usize], arena.err[r as usize]))
            .collect();
        Some(out)
    }

    /// Local coordinate count `m`.
    pub(crate) fn width(&self) -> usize {
        self.m
    }

    /// Number of frames.
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    /// Heap bytes of the frames, boxes and per-member data.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Frame>() * self.frames.len()
            + 4 * (self.centre.len() + self.basis.len() + self.frame_box.len())
            + self.members.codes.len()
            + 48 * self.members.rec.len()
    }

    /// Projects `q` into every frame, bounds `real²` for each and orders
    /// them by the query's distance to their centres (the nearest frames
    /// hold the nearest records on clustered data, so the k-th score drops
    /// early; the bounds are not monotone in that order, so every frame's
    /// is checked). `false` when the query's local coordinates are not
    /// finite (a query far outside the data's range): use the plain arena.
    pub(crate) fn prepare(&self, q: &[f32], fq: &mut FrameQuery) -> bool {
        let (d, m) = (self.dims, self.m);
        let nf = self.frames.len();
        fq.y.resize(nf * m, 0.0);
        fq.erot.resize(nf, 0.0);
        fq.tail.resize(nf, [0.0; 2]);
        fq.order.clear();
        fq.v.resize(d, 0.0);
        for (f, fr) in self.frames.iter().enumerate() {
            for ((o, &x), &c) in fq.v.iter_mut().zip(q).zip(&self.centre[f * d..(f + 1) * d]) {
                *o = x - c;
            }
            let y = &mut fq.y[f * m..(f + 1) * m];
            project(&self.basis[f * d * m..(f + 1) * d * m], m, &fq.v, y);
            let nv2 = sq_sum(&fq.v);
            if !nv2.is_finite() || !y.iter().all(|x| x.is_finite()) {
                return false;
            }
            let erot = up(fr.rot * norm_up(nv2, d) + fr.abs);
            fq.erot[f] = erot;
            fq.tail[f] = tail_interval(nv2, sq_sum(y), erot, fr, d, m);
            let bd = box_dist(y, &self.frame_box[f * 2 * m..(f + 1) * 2 * m], m);
            let lb = box_lower(bd, erot, fr.erot, gap(fq.tail[f], fr.tail), fr.one_eps);
            fq.order.push((nv2, lb, f as u32));
        }
        fq.order
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)));
        true
    }

    /// Codes the query in frame `f` (into `fq`'s current-frame fields).
    pub(crate) fn enter(&self, f: usize, fq: &mut FrameQuery) {
        let m = self.m;
        let fr = &self.frames[f];
        fq.yd.clear();
        fq.yd
            .extend(fq.y[f * m..(f + 1) * m].iter().map(|&x| f64::from(x)));
        fq.codes.resize(m, 0);
        let (qn, e) = quantize_uniform(&fq.yd, fr.scale, &mut fq.codes);
        fq.qn = qn;
        fq.eq = up(e + fq.erot[f]);
    }

    /// Arena record of member `i`.
    #[inline]
    pub(crate) fn record(&self, i: usize) -> usize {
        self.members.rec[i] as usize
    }

    /// The plain arena's `(code norm, residual)` of member `i`.
    #[inline]
    pub(crate) fn plain(&self, i: usize) -> (i32, f64) {
        self.plain[i]
    }

    /// The screen limit of frame `f` (entered) for `τ ≥ kth / (1 − rel)`:
    /// a member with code distance `D` above it has a bound above `τ`
    /// (with the frame's out-of-basis hull and largest residual; `None`:
    /// every member has).
    pub(crate) fn limit(&self, f: usize, fq: &FrameQuery, tau: f64) -> Option<i64> {
        if !tau.is_finite() {
            return Some(i64::MAX);
        }
        let fr = &self.frames[f];
        let g = gap(fq.tail[f], fr.tail);
        let rem = tau - down(g * g);
        if rem < 0.0 {
            return None;
        }
        let a = up(up(up(rem) * fr.one_eps).sqrt());
        let z = up(up(a + fq.eq + fr.err) / fr.scale);
        Some(limit_int(up(z * z)))
    }

    /// Member range of frame `f`.
    pub(crate) fn members(&self, f: usize) -> std::ops::Range<usize> {
        let fr = &self.frames[f];
        fr.start as usize..fr.end as usize
    }

    /// Screens members `r` (fused kernel): `idx`/`vals` get the offsets
    /// from `r.start` and `Σx̂² − 2·q̂·x̂` of every member with code
    /// distance at most `limit`.
    pub(crate) fn screen(
        &self,
        r: std::ops::Range<usize>,
        fq: &FrameQuery,
        limit: i64,
        idx: &mut Vec<u32>,
        vals: &mut Vec<i32>,
    ) {
        let m = self.m;
        idx.clear();
        vals.clear();
        let lim = limit
            .saturating_sub(fq.qn)
            .clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        prox_kernels::i8scan::screen(
            &fq.codes,
            &self.members.codes[r.start * m..r.end * m],
            &self.members.norms[r.clone()],
            lim,
            idx,
            vals,
        );
    }

    /// Lower bound on `real²` of member `i` of frame `f` from its screen
    /// value `val`.
    #[inline]
    pub(crate) fn lower(&self, f: usize, i: usize, val: i32, fq: &FrameQuery) -> f64 {
        let fr = &self.frames[f];
        let dist = fq.qn + i64::from(val);
        let la = if dist <= 0 {
            0.0
        } else {
            let s = down(fr.scale * down((dist as f64).sqrt()));
            let e = up(fq.eq + self.members.err[i]);
            if s > e {
                down(s - e)
            } else {
                0.0
            }
        };
        let g = gap(fq.tail[f], self.members.tail[i]);
        down(down(down(la * la) / fr.one_eps) + down(g * g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orthonormalize_fills_missing_directions() {
        let (d, m) = (5, 3);
        // Two parallel rows and a zero row.
        let mut b = vec![
            1.0, 2.0, 0.0, 0.0, 0.0, 2.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ];
        orthonormalize(&mut b, d, m);
        for i in 0..m {
            for j in 0..m {
                let dot: f64 = (0..d).map(|t| b[i * d + t] * b[j * d + t]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-12, "({i},{j}) {dot}");
            }
        }
    }

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
        let at = vec![1.0f32, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
        let one_eps = one_plus_eps(&at, d, m);
        let f = Frame {
            start: 0,
            end: 0,
            scale: 1.0,
            one_eps,
            one_eps_lo: down(1.0 - up(one_eps - 1.0)),
            rot: 1e-6,
            abs: 0.0,
            erot: 0.0,
            err: 0.0,
            tail: [0.0; 2],
        };
        let v = [3.0f32, 4.0, 1.0, 2.0];
        let mut y = [0.0f32; 2];
        project(&at, m, &v, &mut y);
        assert_eq!(y, [3.0, 4.0]);
        let t = tail_interval(sq_sum(&v), sq_sum(&y), 1e-6, &f, d, m);
        let want = 5.0f64.sqrt();
        assert!(t[0] <= want && want <= t[1], "{t:?}");
        assert!(t[1] - t[0] < 1e-3, "{t:?}");
    }
}
