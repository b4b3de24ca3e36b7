//! The query side of the frames: the query's coordinates in every frame,
//! frame and block limits, the fused first-stage screen and the
//! second-stage refinement.

use super::bounds::{bound, box_dist, box_lower, gap, norm_up, sq_sum, tail_interval};
use super::layout::project;
use super::{FrameQuery, Frames, SecondRow, BLOCK};
use crate::proximity::search::quant::{down, quantize_uniform, up};
use prox_kernels::i8scan::grouped::{self, GROUP};

impl Frames {
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
