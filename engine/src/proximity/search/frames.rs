//! Local frames for exact L2: the records clustered (load-time k-means)
//! into frames of about a thousand, each frame with its own centre `c` and
//! a basis `A` (`m × d`, rows close to orthonormal) of its leading
//! principal axes. A record is screened by the 8-bit codes of its local
//! coordinates `A·(x − c)` plus the length of what the basis leaves out,
//! `‖P⊥(x − c)‖`, in two stages: the leading `s = min(m, 32)` axes first
//! (one 32-byte row per record, in blocks), then all `m` axes for the
//! first stage's survivors only.
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
//! `A`; `P⊥ = I − QᵀQ`. With `ε ≥ ‖A·Aᵀ − I‖₂` (bounded by the
//! Frobenius norm of `AAᵀ − I`, every entry's f64 rounding added to its
//! magnitude), `‖A·u‖² / (1 + ε) ≤ ‖Q·u‖² ≤
//! ‖A·u‖² / (1 − ε)` for every `u`. For a query `q` and a record `x` of the
//! frame, `q − x = v_q − v_x`, so
//!
//! ```text
//! ‖q − x‖² = ‖Q(v_q − v_x)‖² + ‖P⊥(v_q − v_x)‖²
//!          ≥ ‖A(v_q − v_x)‖² / (1 + ε) + (‖P⊥v_q‖ − ‖P⊥v_x‖)²
//! ```
//!
//! (reverse triangle inequality on the projector's range). The same holds
//! for the first `s` rows of `A` alone (their `ε` is at most the whole
//! basis's, and their `‖·‖_F` and `σ_max` too), with `P⊥` then the
//! complement of those `s` axes: that is the first stage's bound.
//!
//! * **The basis** is stored in fixed point, `A_ji = k_ji·2^-15` with
//!   `i16` `k_ji` (half the bytes of f32 to read per query; the entries are
//!   at most 1 in magnitude). Every constant below (`ε`, `‖A‖_F`) is
//!   computed from the stored entries, so rounding the principal axes to
//!   fixed point costs a slightly larger `ε`, never a wrong bound.
//! * **Local coordinates** are computed in f32: `v̂ = fl(w − c)` (relative
//!   error at most `u = 2^-24` per component, never inexact below the
//!   normal range), then `ŷ_j = Σ_i A_ji·v̂_i` summed sequentially in `i`
//!   (each `ŷ_j` is the same IEEE sequence on every ISA,
//!   [`prox_kernels::project`]; the entry's conversion is exact). So `‖ŷ − A·v‖ ≤ e_rot = (γ_d·‖A‖_F +
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
//!   record gets that interval (for the first stage's `s` axes and for all
//!   `m`), the query gets them per frame, and the gap between two
//!   intervals bounds `|‖P⊥v_q‖ − ‖P⊥v_x‖|` from below.
//! * **Blocks**: a frame's members are sorted by their first-stage
//!   interval and cut into blocks of [`BLOCK`]; a block keeps the hull of
//!   its members' intervals and their largest `e_x`. One screen limit per
//!   block then holds for every member in it (the members of a block have
//!   nearly the same interval, so it is close to each one's own), and a
//!   block whose gap alone exceeds the k-th score is skipped unread.
//!   The members' first-stage codes are kept in groups of eight,
//!   interleaved four bytes at a time ([`prox_kernels::i8scan::grouped`]):
//!   one SIMD register then accumulates eight members' dots at once, with
//!   no horizontal sum per member.
//! * **Second stage**: a first-stage survivor's own full-width bound (all
//!   `m` codes, its full-width interval and `e_x`, stored as f32 rounded
//!   outwards, one row per member) replaces the block's; the query's other
//!   `m − s` coordinates are projected only in frames with survivors.
//! * **Frame bound**: every frame keeps the per-axis range (box) of its
//!   records' first `s` coordinates, their largest `e_rot` and the hull of
//!   their first-stage intervals. The distance from the query's
//!   coordinates to the box, minus both rotation errors, bounds
//!   `‖A_s(v_q − v_x)‖` for every record inside, so whole frames are
//!   skipped without reading a code. (Boxes over kd-split chunks of 64 to
//!   256 records were measured too: they skip more records but cost more
//!   than they save.)
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
//! fixed order), the fixed-point rounding and every projection are the
//! same on every machine, ISA and thread count, so the frames, the work
//! and the hits are too.

use super::arena::Arena;
use super::quant::{down, quantize_uniform, up, EPS};
use crate::numeric::kmeans::{self, Empty};
use prox_kernels::i8scan::grouped::{self, GROUP};
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
/// Members per block: a frame's members are sorted by their out-of-basis
/// interval and screened in blocks, each with its own interval hull and
/// largest residual, so the screen limit is close to every member's own
/// and blocks whose out-of-basis gap alone exceeds the k-th score are
/// skipped without reading a code.
const BLOCK: usize = 64;
/// Local coordinates in the first-stage screen (at most `m`): members are
/// screened by their leading `S1` codes and the out-of-basis length of
/// those `S1` axes, and only the survivors read the other `m − S1` codes.
/// 32 is one AVX2 register of codes per member.
const S1: usize = 32;
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
    /// Upper bound on `1 + ε`, and a lower bound on its reciprocal (the
    /// per-member bounds multiply by it rather than divide).
    one_eps: f64,
    inv_one_eps: f64,
    /// Lower bound on `1 − ε` (positive).
    one_eps_lo: f64,
    /// `e_rot(v̂) = up(rot·‖v̂‖ + abs)`.
    rot: f64,
    abs: f64,
    /// Largest member `e_rot`, hull of the members' first-stage
    /// out-of-basis intervals.
    erot: f64,
    tail1: [f64; 2],
    /// First block (`blocks[block..]`, one per [`BLOCK`] members).
    block: u32,
    /// First group of the first-stage codes in [`Frames::grouped`].
    group: u32,
}

/// One block of a frame's members (see [`BLOCK`]), first-stage values.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// Largest member first-stage `e_x`.
    err: f64,
    /// Hull of the members' first-stage out-of-basis intervals.
    tail: [f64; 2],
}

/// Per-member data, frame-major; within a frame sorted by first-stage
/// out-of-basis interval (lower end, then upper end, then record). The
/// first stage covers the leading `s` local coordinates, the second all
/// `m` (`rest` holds the other `m − s` codes; empty when `s = m`).
#[derive(Debug, Default)]
struct Members {
    /// Arena record.
    rec: Vec<u32>,
    /// First-stage codes, `s` each (build time only: the search reads
    /// [`Frames::grouped`], made from them frame by frame).
    codes: Vec<i8>,
    /// Their `Σŷ̂²`.
    norms: Vec<i32>,
    /// First-stage `e_x` and out-of-basis interval (build time only: the
    /// search reads the [`Block`]s made from them, and this is emptied
    /// once they are).
    first: Vec<Residual>,
    /// Second-stage rows ([`SecondRow`], `m − s + 16` bytes each; empty
    /// when `s = m`): everything the second stage reads of a member in
    /// one place, one cache miss per first-stage survivor.
    second: Vec<u8>,
}

/// A member's second-stage row: the other `m − s` codes, then their
/// `Σŷ̂²` (i32), the full-width `e_x` rounded up and the full-width
/// out-of-basis interval rounded outwards (f32 each), little-endian.
struct SecondRow;

impl SecondRow {
    /// Row bytes for `r` codes.
    const fn stride(r: usize) -> usize {
        r + 16
    }

    fn push(out: &mut Vec<u8>, codes: &[i8], norm: i32, res: Residual) {
        out.extend(codes.iter().map(|&c| c as u8));
        out.extend_from_slice(&norm.to_le_bytes());
        out.extend_from_slice(&f32_up(res.err).to_le_bytes());
        out.extend_from_slice(&f32_down(res.tail[0]).to_le_bytes());
        out.extend_from_slice(&f32_up(res.tail[1]).to_le_bytes());
    }

    /// `(Σ q_j·x_j over the codes, Σx̂², e_x, interval)` of one row.
    #[inline]
    fn read(row: &[u8], q: &[i8]) -> (i32, i32, f64, [f64; 2]) {
        let r = q.len();
        // Exact in i32 (at most 127·128 per term).
        let dot: i32 = q
            .iter()
            .zip(&row[..r])
            .map(|(&a, &b)| i32::from(a) * i32::from(b as i8))
            .sum();
        let word =
            |k: usize| -> [u8; 4] { row[r + 4 * k..r + 4 * k + 4].try_into().unwrap_or([0; 4]) };
        let norm = i32::from_le_bytes(word(0));
        let err = f64::from(f32::from_le_bytes(word(1)));
        let tail = [
            f64::from(f32::from_le_bytes(word(2))),
            f64::from(f32::from_le_bytes(word(3))),
        ];
        (dot, norm, err, tail)
    }
}

/// The smallest f32 at least `x`.
fn f32_up(x: f64) -> f32 {
    let y = x as f32;
    if f64::from(y) < x {
        y.next_up()
    } else {
        y
    }
}

/// The largest f32 at most `x`.
fn f32_down(x: f64) -> f32 {
    let y = x as f32;
    if f64::from(y) > x {
        y.next_down()
    } else {
        y
    }
}

/// A member's residual `e_x` and out-of-basis interval at one width.
#[derive(Debug, Clone, Copy)]
struct Residual {
    err: f64,
    tail: [f64; 2],
}

impl Members {
    fn append(&mut self, o: &Members) {
        self.rec.extend_from_slice(&o.rec);
        self.codes.extend_from_slice(&o.codes);
        self.norms.extend_from_slice(&o.norms);
        self.first.extend_from_slice(&o.first);
        self.second.extend_from_slice(&o.second);
    }

    /// The members reordered by `perm` (`s` and `r = m − s` codes each).
    fn permuted(&self, perm: &[usize], s: usize, r: usize) -> Members {
        fn rows<T: Copy>(v: &[T], w: usize, perm: &[usize]) -> Vec<T> {
            perm.iter()
                .flat_map(|&i| v[i * w..(i + 1) * w].iter().copied())
                .collect()
        }
        fn pick<T: Copy>(v: &[T], perm: &[usize]) -> Vec<T> {
            perm.iter().map(|&i| v[i]).collect()
        }
        Members {
            rec: pick(&self.rec, perm),
            codes: rows(&self.codes, s, perm),
            norms: pick(&self.norms, perm),
            first: pick(&self.first, perm),
            second: if r == 0 {
                Vec::new()
            } else {
                rows(&self.second, SecondRow::stride(r), perm)
            },
        }
    }

    /// The blocks of members `0..len` (every [`BLOCK`], the last shorter).
    fn blocks(&self) -> Vec<Block> {
        self.first
            .chunks(BLOCK)
            .map(|rs| Block {
                err: rs.iter().fold(0.0, |a: f64, r| a.max(r.err)),
                tail: rs.iter().fold([f64::INFINITY, 0.0], |a, r| {
                    [a[0].min(r.tail[0]), a[1].max(r.tail[1])]
                }),
            })
            .collect()
    }
}

/// The local frames of one map (exact L2 only).
#[derive(Debug)]
pub(crate) struct Frames {
    dims: usize,
    m: usize,
    /// First-stage width `min(m, S1)`.
    s: usize,
    frames: Vec<Frame>,
    /// `d` f32 per frame.
    centre: Vec<f32>,
    /// The basis (fixed point, [`to_fixed`]) split by stage: `d·s` entries
    /// per frame with `basis1[f·d·s + i·s + j] = A_f[j][i]` (the first `s`
    /// rows), `d·(m − s)` with `basis2[f·d·r + i·r + j] = A_f[s + j][i]`
    /// (the others).
    basis1: Vec<i16>,
    basis2: Vec<i16>,
    /// `2s` f32 per frame (lower corner, then upper) over the first
    /// stage's coordinates.
    frame_box: Vec<f32>,
    members: Members,
    blocks: Vec<Block>,
    /// First-stage codes in the grouped layout
    /// ([`prox_kernels::i8scan::grouped`]), each frame's members from a
    /// group boundary.
    grouped: Vec<i8>,
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
    /// Per frame: `Σv̂²`, `e_rot` of the query and its out-of-basis
    /// intervals (full width, set by the second stage; first stage).
    nv2: Vec<f64>,
    erot: Vec<f64>,
    tail: Vec<[f64; 2]>,
    tail1: Vec<[f64; 2]>,
    /// `(squared distance to the centre, lower bound, frame)` in visiting
    /// order (nearest centre first).
    order: Vec<(f64, f64, u32)>,
    /// The query.
    q: Vec<f32>,
    v: Vec<f32>,
    yd: Vec<f64>,
    /// The current frame's query codes (`m`), `Σq̂²` and `e_q` over all
    /// of them and over the first stage's.
    codes: Vec<i8>,
    /// The first-stage codes padded to the grouped layout's width.
    qw: Vec<i8>,
    /// Second-stage scratch, one per survivor: code distance, summed
    /// residual, out-of-basis gap (then the bound).
    sd: Vec<f64>,
    se: Vec<f64>,
    sg: Vec<f64>,
    qn: i64,
    eq: f64,
    qn1: i64,
    eq1: f64,
}

impl FrameQuery {
    /// The frames in visiting order (nearest centre first) with their
    /// lower bounds on `real²`: `(centre distance², bound, frame)`.
    pub(crate) fn order(&self) -> &[(f64, f64, u32)] {
        &self.order
    }
}

/// The stored basis entries: `A_ji = k_ji · 2^-15` for an `i16` `k_ji`
/// (half the bytes of f32 per query projection; the conversion is exact,
/// so every bound below holds for the stored basis as it is).
fn to_fixed(at: &[f32]) -> Vec<i16> {
    at.iter()
        .map(|&a| (f64::from(a) * 32_768.0).round().clamp(-32_767.0, 32_767.0) as i16)
        .collect()
}

/// The f32 value of a stored entry (exact).
#[inline]
fn entry(k: i16) -> f32 {
    f32::from(k) * prox_kernels::project::SCALE
}

/// `y = A·v̂` in f32 over `at = Aᵀ` (`d × w`, stored fixed point): each
/// `y_j` is summed in `i` order, the same IEEE operations on every ISA
/// ([`prox_kernels::project`]).
#[inline]
fn project(at: &[i16], w: usize, v: &[f32], y: &mut [f32]) {
    debug_assert_eq!(y.len(), w);
    prox_kernels::project::fixed(at, v, y);
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
fn box_dist(y: &[f32], lo: &[f32], hi: &[f32]) -> f64 {
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
/// `1 + ‖A·Aᵀ − I‖_F` with every entry's f64 error added to its magnitude.
fn one_plus_eps(at: &[f32], d: usize, m: usize) -> f64 {
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
        kmeans::lloyd(
            &rows,
            &row,
            &mut gc,
            d,
            LLOYD,
            |x, c| nearest(x, c, d, 0..g),
            Empty::Keep,
        );
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
        kmeans::lloyd(
            &rows,
            &row,
            &mut cent,
            d,
            1,
            |x, c| coarse.nearest(x, c, d),
            Empty::Keep,
        );
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
    /// `Aᵀ` (`d × m`, stored fixed point).
    at: Vec<i16>,
    frame_box: Vec<f32>,
    members: Members,
    blocks: Vec<Block>,
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
    let fixed = to_fixed(&at);
    let at: Vec<f32> = fixed.iter().map(|&k| entry(k)).collect();
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
        project(&fixed, m, row, yr);
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
        inv_one_eps: down(1.0 / one_eps),
        one_eps_lo,
        rot,
        abs,
        erot: 0.0,
        tail1: [f64::INFINITY, 0.0],
        block: 0,
        group: 0,
    };
    let mut part = Part {
        frame,
        centre,
        at: fixed,
        frame_box: Vec::with_capacity(2 * m),
        blocks: Vec::new(),
        members: Members::default(),
    };
    let s = m.min(S1);
    let mut codes = vec![0i8; m];
    let mem = &mut part.members;
    mem.rec = members.to_vec();
    for (vi, yi) in v.chunks_exact(d).zip(y.chunks_exact(m)) {
        let nv2 = sq_sum(vi);
        let erot = up(rot * norm_up(nv2, d) + abs);
        // The same codes either way (one scale for every coordinate).
        let (norm, ecode) = quantize_uniform(yi, scale, &mut codes);
        let (norm1, ecode1) = quantize_uniform(&yi[..s], scale, &mut codes[..s]);
        let ny2 = sq_sum(yi);
        let tail = tail_interval(nv2, ny2, erot, &frame, d, m);
        let tail1 = tail_interval(nv2, sq_sum(&yi[..s]), erot, &frame, d, s);
        mem.codes.extend_from_slice(&codes[..s]);
        mem.norms.push(norm1 as i32);
        mem.first.push(Residual {
            err: up(ecode1 + erot),
            tail: tail1,
        });
        if s < m {
            let full = Residual {
                err: up(ecode + erot),
                tail,
            };
            SecondRow::push(&mut mem.second, &codes[s..], (norm - norm1) as i32, full);
        }
        frame.erot = frame.erot.max(erot);
        frame.tail1 = [frame.tail1[0].min(tail1[0]), frame.tail1[1].max(tail1[1])];
    }
    bounding_box(y.chunks_exact(m).map(|r| &r[..s]), s, &mut part.frame_box);
    let t = &part.members.first;
    let mut perm: Vec<usize> = (0..k).collect();
    perm.sort_by(|&a, &b| {
        let (x, y) = (t[a].tail, t[b].tail);
        x[0].total_cmp(&y[0])
            .then(x[1].total_cmp(&y[1]))
            .then(a.cmp(&b))
    });
    part.members = part.members.permuted(&perm, s, m - s);
    part.blocks = part.members.blocks();
    part.members.first = Vec::new();
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
            s: m.min(S1),
            frames: Vec::with_capacity(parts.len()),
            centre: Vec::with_capacity(parts.len() * d),
            basis1: Vec::new(),
            basis2: Vec::new(),
            frame_box: Vec::new(),
            members: Members::default(),
            blocks: Vec::new(),
            grouped: Vec::new(),
            plain: Vec::new(),
        };
        for part in parts {
            let mut p = part?;
            let base = out.members.rec.len() as u32;
            p.frame.start = base;
            p.frame.end = base + p.members.rec.len() as u32;
            p.frame.block = out.blocks.len() as u32;
            p.frame.group = (out.grouped.len() / (GROUP * grouped::width(out.s))) as u32;
            grouped::push_rows(&p.members.codes, out.s, &mut out.grouped);
            // The search reads the grouped copy only.
            p.members.codes = Vec::new();
            out.blocks.extend_from_slice(&p.blocks);
            out.frames.push(p.frame);
            out.centre.extend_from_slice(&p.centre);
            for row in p.at.chunks_exact(m) {
                out.basis1.extend_from_slice(&row[..out.s]);
                out.basis2.extend_from_slice(&row[out.s..]);
            }
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
            + 4 * (self.centre.len() + self.frame_box.len())
            + 2 * (self.basis1.len() + self.basis2.len())
            + std::mem::size_of::<Block>() * self.blocks.len()
            + self.grouped.len()
            + self.members.second.len()
            + 4 * (self.members.rec.len() + self.members.norms.len())
            + std::mem::size_of::<(i32, f64)>() * self.plain.len()
    }

    /// Projects `q` into every frame, bounds `real²` for each and orders
    /// them by the query's distance to their centres (the nearest frames
    /// hold the nearest records on clustered data, so the k-th score drops
    /// early; the bounds are not monotone in that order, so every frame's
    /// is checked). `false` when the query's local coordinates are not
    /// finite (a query far outside the data's range): use the plain arena.
    pub(crate) fn prepare(&self, q: &[f32], fq: &mut FrameQuery) -> bool {
        let (d, m, s) = (self.dims, self.m, self.s);
        let nf = self.frames.len();
        fq.y.resize(nf * m, 0.0);
        fq.nv2.resize(nf, 0.0);
        fq.erot.resize(nf, 0.0);
        fq.tail.resize(nf, [0.0; 2]);
        fq.tail1.resize(nf, [0.0; 2]);
        fq.order.clear();
        fq.q.clear();
        fq.q.extend_from_slice(q);
        fq.v.resize(d, 0.0);
        for (f, fr) in self.frames.iter().enumerate() {
            let nv2 = self.centred(f, q, &mut fq.v);
            let y = &mut fq.y[f * m..f * m + s];
            project(&self.basis1[f * d * s..(f + 1) * d * s], s, &fq.v, y);
            if !nv2.is_finite() || !y.iter().all(|x| x.is_finite()) {
                return false;
            }
            let erot = up(fr.rot * norm_up(nv2, d) + fr.abs);
            fq.nv2[f] = nv2;
            fq.erot[f] = erot;
            fq.tail1[f] = tail_interval(nv2, sq_sum(y), erot, fr, d, s);
            let (lo, hi) = self.frame_box[f * 2 * s..(f + 1) * 2 * s].split_at(s);
            let lb = box_lower(
                box_dist(y, lo, hi),
                erot,
                fr.erot,
                gap(fq.tail1[f], fr.tail1),
                fr.one_eps,
            );
            fq.order.push((nv2, lb, f as u32));
        }
        fq.order
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)));
        true
    }

    /// `v = fl(q − c_f)` and `Σv²`.
    fn centred(&self, f: usize, q: &[f32], v: &mut [f32]) -> f64 {
        let d = self.dims;
        for ((o, &x), &c) in v.iter_mut().zip(q).zip(&self.centre[f * d..(f + 1) * d]) {
            *o = x - c;
        }
        sq_sum(v)
    }

    /// Codes the query's first-stage coordinates in frame `f` (into `fq`'s
    /// current-frame fields).
    pub(crate) fn enter(&self, f: usize, fq: &mut FrameQuery) {
        let (m, s) = (self.m, self.s);
        let fr = &self.frames[f];
        fq.yd.clear();
        fq.yd
            .extend(fq.y[f * m..f * m + s].iter().map(|&x| f64::from(x)));
        fq.codes.resize(m, 0);
        let (qn1, e1) = quantize_uniform(&fq.yd, fr.scale, &mut fq.codes[..s]);
        fq.qn1 = qn1;
        fq.eq1 = up(e1 + fq.erot[f]);
        fq.qw.clear();
        fq.qw.extend_from_slice(&fq.codes[..s]);
        fq.qw.resize(grouped::width(s), 0);
    }

    /// Projects the query onto frame `f`'s other `m − s` axes and codes all
    /// `m` coordinates (the second stage). `false` when a coordinate is not
    /// finite: the first-stage bounds stand.
    fn enter_rest(&self, f: usize, fq: &mut FrameQuery) -> bool {
        let (d, m, s) = (self.dims, self.m, self.s);
        let r = m - s;
        let fr = &self.frames[f];
        let q = std::mem::take(&mut fq.q);
        self.centred(f, &q, &mut fq.v);
        fq.q = q;
        let y = &mut fq.y[f * m..(f + 1) * m];
        project(
            &self.basis2[f * d * r..(f + 1) * d * r],
            r,
            &fq.v,
            &mut y[s..],
        );
        if !y.iter().all(|x| x.is_finite()) {
            return false;
        }
        let ny2 = sq_sum(y);
        fq.tail[f] = tail_interval(fq.nv2[f], ny2, fq.erot[f], fr, d, m);
        fq.yd.clear();
        fq.yd.extend(y.iter().map(|&x| f64::from(x)));
        // The first `s` codes come out the same (one scale throughout).
        let (qn, e) = quantize_uniform(&fq.yd, fr.scale, &mut fq.codes);
        fq.qn = qn;
        fq.eq = up(e + fq.erot[f]);
        true
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

    /// The screen limits of every block of frame `f` (entered) for `τ ≥
    /// kth / (1 − rel)`, as reals (`limit_int` of one is the block's integer
    /// screen limit): negative when every member of the
    /// block has a bound above `τ`. One flat loop (it vectorizes), with
    /// the division by the scale a product with `up(1 / scale)`.
    pub(crate) fn block_limits(&self, f: usize, fq: &FrameQuery, tau: f64, out: &mut Vec<f64>) {
        let fr = &self.frames[f];
        let n = (fr.end - fr.start).div_ceil(BLOCK as u32) as usize;
        let blocks = &self.blocks[fr.block as usize..fr.block as usize + n];
        out.clear();
        if !tau.is_finite() {
            out.resize(n, f64::INFINITY);
            return;
        }
        let (t, eq, one_eps, inv) = (fq.tail1[f], fq.eq1, fr.one_eps, up(1.0 / fr.scale));
        out.extend(blocks.iter().map(|bl| {
            let g = gap(t, bl.tail);
            let rem = tau - down(g * g);
            let a = up(up(up(rem.max(0.0)) * one_eps).sqrt());
            let z = up(up(a + eq + bl.err) * inv);
            if rem < 0.0 {
                -1.0
            } else {
                up(z * z)
            }
        }));
    }

    /// Block `j` of frame `f`: `(block, member range)`.
    #[inline]
    pub(crate) fn block(&self, f: usize, j: usize) -> (usize, std::ops::Range<usize>) {
        let fr = &self.frames[f];
        let s = fr.start as usize + j * BLOCK;
        (fr.block as usize + j, s..(s + BLOCK).min(fr.end as usize))
    }

    /// Screens members `r` of frame `f` (whole blocks from a block start;
    /// fused kernel over the grouped codes): `idx`/`vals` get the offsets
    /// from `r.start` and `Σx̂² − 2·q̂·x̂` of every member with code
    /// distance at most `limit`.
    pub(crate) fn screen(
        &self,
        f: usize,
        r: std::ops::Range<usize>,
        fq: &FrameQuery,
        limit: i64,
        idx: &mut Vec<u32>,
        vals: &mut Vec<i32>,
    ) {
        let s = self.s;
        idx.clear();
        vals.clear();
        let lim = limit
            .saturating_sub(fq.qn1)
            .clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let fr = &self.frames[f];
        debug_assert!((r.start - fr.start as usize).is_multiple_of(GROUP));
        let w = grouped::width(s);
        let g = fr.group as usize + (r.start - fr.start as usize) / GROUP;
        let at = g * GROUP * w;
        prox_kernels::i8scan::grouped::screen(
            &fq.qw,
            &self.grouped[at..at + grouped::bytes(s, r.len())],
            &self.members.norms[r],
            lim,
            idx,
            vals,
        );
    }

    /// Whether first-stage survivors go through [`Self::refine`] (`s < m`).
    #[inline]
    pub(crate) fn two_stage(&self) -> bool {
        self.s < self.m
    }

    /// First-stage lower bound on `real²` of a member of block `b` of
    /// frame `f` from its screen value `val`, with the block's largest
    /// residual and interval hull (no per-member read: a member's own
    /// values would drop about a tenth more, at a cache miss each).
    #[inline]
    pub(crate) fn lower1(&self, f: usize, b: usize, val: i32, fq: &FrameQuery) -> f64 {
        let fr = &self.frames[f];
        let bl = &self.blocks[b];
        bound(
            fr.scale,
            fr.inv_one_eps,
            (fq.qn1 + i64::from(val)).max(0) as f64,
            up(fq.eq1 + bl.err),
            gap(fq.tail1[f], bl.tail),
        )
    }

    /// The second stage over frame `f`'s first-stage survivors `(member,
    /// bound, screen value)`: each bound is replaced by the full-width one
    /// (all `m` codes, the full out-of-basis interval) and members whose
    /// bound exceeds `tau` are dropped. Nothing to do when `s = m`.
    pub(crate) fn refine(
        &self,
        f: usize,
        fq: &mut FrameQuery,
        surv: &mut Vec<(u32, f64, i32)>,
        tau: f64,
    ) {
        let (s, r) = (self.s, self.m - self.s);
        if r == 0 || surv.is_empty() || !self.enter_rest(f, fq) {
            return;
        }
        let stride = SecondRow::stride(r);
        let rows = &self.members.second;
        let row = |i: u32| &rows[i as usize * stride..(i as usize + 1) * stride];
        let q = &fq.codes[s..];
        let fr = &self.frames[f];
        // Survivors are sparse within the frame: hint a few rows ahead.
        const AHEAD: usize = 8;
        for &(i, _, _) in surv.iter().take(AHEAD) {
            prox_kernels::prefetch::prefetch_read(row(i));
        }
        let (sd, se, sg) = (&mut fq.sd, &mut fq.se, &mut fq.sg);
        sd.clear();
        se.clear();
        sg.clear();
        for j in 0..surv.len() {
            if let Some(&(i, _, _)) = surv.get(j + AHEAD) {
                prox_kernels::prefetch::prefetch_read(row(i));
            }
            let (i, _, v) = surv[j];
            let (dot, norm, err, tail) = SecondRow::read(row(i), q);
            let dist = fq.qn + i64::from(v) + i64::from(norm) - 2 * i64::from(dot);
            sd.push(dist.max(0) as f64);
            se.push(up(fq.eq + err));
            sg.push(gap(fq.tail[f], tail));
        }
        let (scale, inv) = (fr.scale, fr.inv_one_eps);
        for ((d, e), g) in sd.iter_mut().zip(se.iter()).zip(sg.iter()) {
            *d = bound(scale, inv, *d, *e, *g);
        }
        // Both are lower bounds on the same distance.
        for (x, &full) in surv.iter_mut().zip(sd.iter()) {
            x.1 = x.1.max(full);
        }
        surv.retain(|&(_, lb, _)| lb <= tau);
    }
}

/// Lower bound on `real²` from a code distance `dist ≥ 0` (an integer,
/// as f64; scale `scale`), the summed residuals `e = e_q + e_x` and the
/// out-of-basis gap `g` (module docs), with `inv ≤ 1 / (1 + ε)`. Without
/// branches, so the second stage's loop vectorizes; every clamp at zero
/// is `down`'s own.
#[inline]
fn bound(scale: f64, inv: f64, dist: f64, e: f64, g: f64) -> f64 {
    let la = down(down(scale * down(dist.sqrt())) - e);
    down(down(down(la * la) * inv) + down(g * g))
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
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..10_000 {
            let one_eps = 1.0 + next() * 1e-3;
            let inv = down(1.0 / one_eps);
            let scale = 1e-3 + next();
            let dist = (next() * 1e6) as i64 - 1_000;
            let (e, g) = (next() * 50.0, next() * 20.0);
            let want = plain(scale, one_eps, dist, e, g);
            let got = bound(scale, inv, dist.max(0) as f64, e, g);
            assert!(got <= want && got >= want * (1.0 - 1e-12), "{got} {want}");
            assert_eq!(bound(scale, inv, 0.0, e, g), plain(scale, one_eps, 0, e, g));
        }
    }
}
