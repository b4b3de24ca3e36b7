//! Building the frames: cluster, then per frame its centre, basis,
//! fixed-point constants, member codes, residuals and blocks.

use super::bounds::{norm_up, one_plus_eps, sq_sum, tail_interval};
use super::cluster::cluster;
use super::layout::{entry, project, to_fixed};
use super::pca::principal;
use super::{Block, Frame, Frames, Members, Residual, SecondRow, COV, FRAME, S1, SUB, U};
use crate::proximity::search::arena::ScanArena;
use crate::proximity::search::node::Node;
use crate::proximity::search::quant::{down, quantize_uniform, up};
use prox_kernels::i8scan::grouped::{self, GROUP};
use rayon::prelude::*;
use std::sync::Arc;

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
fn build_frame(
    arena: &ScanArena,
    pages: &[Arc<Node>],
    d: usize,
    m: usize,
    members: &[u32],
) -> Option<Part> {
    let k = members.len();
    // Centre: the f64 mean rounded to f32.
    let mut mean = vec![0.0f64; d];
    for &r in members {
        for (s, &x) in mean.iter_mut().zip(arena.record(pages, r as usize, d)) {
            *s += f64::from(x);
        }
    }
    let centre: Vec<f32> = mean.iter().map(|s| (s / k as f64) as f32).collect();
    // Centred f32 rows v̂ of every member.
    let mut v = vec![0.0f32; k * d];
    for (row, &r) in v.chunks_exact_mut(d).zip(members) {
        for ((o, &x), &c) in row
            .iter_mut()
            .zip(arena.record(pages, r as usize, d))
            .zip(&centre)
        {
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
    /// the plain arena. `pages` are the arena's pages, all decoded.
    pub(crate) fn build(
        arena: &ScanArena,
        pages: &[Arc<Node>],
        dims: usize,
        m: usize,
    ) -> Option<Frames> {
        let d = dims;
        let m = m.clamp(1, d.max(1));
        let n = *arena.page_start.last().unwrap_or(&0);
        if n == 0 || d == 0 {
            return None;
        }
        let nf = (n + FRAME / 2) / FRAME;
        let nf = nf.clamp(1, n);
        let of = cluster(arena, pages, d, n, nf);
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); nf];
        for (r, &f) in of.iter().enumerate() {
            members[f as usize].push(r as u32);
        }
        members.retain(|x| !x.is_empty());
        let parts: Vec<Option<Part>> = members
            .par_iter()
            .map(|mem| build_frame(arena, pages, d, m, mem))
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
}
