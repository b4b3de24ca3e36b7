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

mod bounds;
mod build;
mod cluster;
mod layout;
mod pca;
pub(super) mod persist;
mod screen;

use layout::SecondRow;

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

/// A member's residual `e_x` and out-of-basis interval at one width.
#[derive(Debug, Clone, Copy)]
struct Residual {
    err: f64,
    tail: [f64; 2],
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

impl Frames {
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
}
