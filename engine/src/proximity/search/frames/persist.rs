//! The local frames persisted as a `PRLY` layout of kind
//! [`LayoutKind::LocalFrames`] (docs/formats-proximity.md, "Layout
//! sidecars"), so `--exact-layout localM` opens without clustering the
//! records and fitting a basis per frame.
//!
//! Kind header: `uv m | uv s | uv frames | uv blocks | u64le arena
//! digest` (XXH64, seed 0, of the scan arena's per-record code norms,
//! `i32`, then residual bounds, `f64`, little-endian in record order: the
//! frames are only used over the arena they were built on). Payload
//! (little-endian, fixed width, in this order): per frame `u32` member
//! count and nine `f64` (scale, `1 + ε`, its reciprocal bound, `1 − ε`,
//! `rot`, `abs`, largest member `e_rot`, first-stage interval hull low and
//! high); the centres (`f32`, `frames·d`); the basis in fixed point
//! (`i16`, first stage `frames·d·s`, then `frames·d·(m − s)`); the frame
//! boxes (`f32`, `frames·2s`); the members' arena records (`u32`) and
//! first-stage code norms (`i32`), `n` each; the blocks (`f64` error,
//! interval low, interval high); the grouped first-stage codes (`i8`, each
//! frame's members padded to whole groups); the second-stage rows (`n`
//! rows of `m − s + 16` bytes, none when `s = m`).
//!
//! A frame's first member, block and group follow from the member counts,
//! so they are not stored. Loading checks every count against the arena
//! (the members are a permutation of its records) and every bound constant
//! for NaN; the plain arena's norms and residuals the recheck reads are
//! copied from the arena. The bytes are a function of the frames, which
//! are a function of the descriptor and `m`.

use super::layout::SecondRow;
use super::{Block, Frame, Frames, Members, BLOCK, S1};
use crate::cid::Cid;
use crate::codec::{put_uv, Reader};
use crate::error::{Error, Result};
use crate::proximity::format::LayoutKind;
use crate::proximity::layout_io::{manifest, mismatch, payload, persist_payload, short};
use crate::proximity::search::arena::ScanArena;
use crate::proximity::search::arena_layout::{check_digest, digest as arena_digest};
use crate::store::BlockStore;
use prox_kernels::i8scan::grouped::{self, GROUP};

const OBJ: &str = "PRLY";

/// `f64` constants stored per frame.
const FRAME_F64: usize = 9;

/// Bytes stored per block.
const BLOCK_BYTES: usize = 24;

fn u32_of(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid(OBJ, format!("count {v} exceeds u32")))
}

/// Writes `frames` bound to `source` (records `records`); returns the
/// manifest CID.
pub(crate) fn persist(
    frames: &Frames,
    arena: &ScanArena,
    store: &dyn BlockStore,
    source: Cid,
    records: u64,
) -> Result<Cid> {
    let (d, s, m) = (frames.dims, frames.s, frames.m);
    let mut params = Vec::new();
    for v in [m, s, frames.frames.len(), frames.blocks.len()] {
        put_uv(&mut params, v as u64);
    }
    params.extend_from_slice(&arena_digest(arena).to_le_bytes());
    let n = frames.members.rec.len();
    let mut out = Vec::with_capacity(
        frames.frames.len() * (4 + 8 * FRAME_F64 + 4 * d + 2 * d * m + 8 * s)
            + 8 * n
            + BLOCK_BYTES * frames.blocks.len()
            + frames.grouped.len()
            + frames.members.second.len(),
    );
    for f in &frames.frames {
        out.extend_from_slice(&u32_of((f.end - f.start) as usize)?.to_le_bytes());
        for v in [
            f.scale,
            f.one_eps,
            f.inv_one_eps,
            f.one_eps_lo,
            f.rot,
            f.abs,
            f.erot,
            f.tail1[0],
            f.tail1[1],
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out.extend(frames.centre.iter().flat_map(|v| v.to_le_bytes()));
    out.extend(frames.basis1.iter().flat_map(|v| v.to_le_bytes()));
    out.extend(frames.basis2.iter().flat_map(|v| v.to_le_bytes()));
    out.extend(frames.frame_box.iter().flat_map(|v| v.to_le_bytes()));
    out.extend(frames.members.rec.iter().flat_map(|v| v.to_le_bytes()));
    out.extend(frames.members.norms.iter().flat_map(|v| v.to_le_bytes()));
    for b in &frames.blocks {
        for v in [b.err, b.tail[0], b.tail[1]] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out.extend(frames.grouped.iter().map(|&c| c as u8));
    out.extend_from_slice(&frames.members.second);
    persist_payload(
        store,
        LayoutKind::LocalFrames,
        source,
        d,
        records,
        params,
        out,
    )
}

/// Loads the layout `cid` (bound to `source`) as the frames of `arena`.
///
/// Errors: [`Error::NotFound`] for a missing block,
/// [`Error::InvalidArgument`] when it was derived from another descriptor
/// or has another kind, [`Error::Corrupt`] when it disagrees with the
/// arena or its own counts.
pub(crate) fn load(
    store: &dyn BlockStore,
    cid: Cid,
    source: Cid,
    arena: &ScanArena,
    dims: usize,
) -> Result<Frames> {
    let man = manifest(store, cid, LayoutKind::LocalFrames, source, dims)?;
    let mut r = Reader::new(&man.params, OBJ);
    let (m, s, nf, nb) = (r.uv_usize()?, r.uv_usize()?, r.uv_usize()?, r.uv_usize()?);
    let digest = r.u64le()?;
    r.finish()?;
    let d = dims;
    let n = arena.norms.len();
    if m == 0 || m > d || s != m.min(S1) {
        return Err(mismatch(cid, format!("width {m}, first stage {s}")));
    }
    if man.records != n as u64 || nf == 0 || nf > n || u32::try_from(n).is_err() {
        return Err(mismatch(
            cid,
            format!("{} records in {nf} frames, arena has {n}", man.records),
        ));
    }
    check_digest(cid, digest, arena)?;
    let rest = m - s;
    let stride = if rest == 0 {
        0
    } else {
        SecondRow::stride(rest)
    };
    // Everything but the grouped codes, whose size follows from the
    // member counts (checked below): each term is bounded by the payload
    // length the manifest declares, so overflow means a bad layout.
    let fixed = [
        nf.checked_mul(4 + 8 * FRAME_F64),
        nf.checked_mul(d).and_then(|x| x.checked_mul(4 + 2 * m)),
        nf.checked_mul(8 * s),
        n.checked_mul(8 + stride),
        nb.checked_mul(BLOCK_BYTES),
    ]
    .into_iter()
    .try_fold(0usize, |a, x| x.and_then(|x| a.checked_add(x)))
    .filter(|&b| b as u64 <= man.payload_len)
    .ok_or_else(|| mismatch(cid, format!("payload of {} bytes", man.payload_len)))?;
    let mut c = payload(store, &man, cid)?;
    let mut frames = Vec::with_capacity(nf);
    let (mut start, mut block, mut group_bytes) = (0usize, 0usize, 0usize);
    let gw = GROUP * grouped::width(s);
    for _ in 0..nf {
        let len = c.values(1, u32::from_le_bytes)?[0] as usize;
        let v = c.values(FRAME_F64, f64::from_le_bytes)?;
        if len == 0 || v.iter().any(|x| x.is_nan()) || !(v[0] > 0.0 && v[0].is_finite()) {
            return Err(mismatch(cid, "an empty frame or a NaN constant".into()));
        }
        let end = start
            .checked_add(len)
            .filter(|&e| e <= n)
            .ok_or_else(|| mismatch(cid, "members beyond the arena".into()))?;
        frames.push(Frame {
            start: start as u32,
            end: end as u32,
            scale: v[0],
            one_eps: v[1],
            inv_one_eps: v[2],
            one_eps_lo: v[3],
            rot: v[4],
            abs: v[5],
            erot: v[6],
            tail1: [v[7], v[8]],
            block: block as u32,
            group: (group_bytes / gw.max(1)) as u32,
        });
        start = end;
        block += len.div_ceil(BLOCK);
        group_bytes += grouped::bytes(s, len);
    }
    if start != n || block != nb {
        return Err(mismatch(
            cid,
            format!("{start} members in {block} blocks, want {n} in {nb}"),
        ));
    }
    if fixed.checked_add(group_bytes) != Some(man.payload_len as usize) {
        return Err(mismatch(
            cid,
            format!("payload of {} bytes for its counts", man.payload_len),
        ));
    }
    let centre = c.values(nf * d, f32::from_le_bytes)?;
    let basis1 = c.values(nf * d * s, i16::from_le_bytes)?;
    let basis2 = c.values(nf * d * rest, i16::from_le_bytes)?;
    let frame_box = c.values(nf * 2 * s, f32::from_le_bytes)?;
    if centre.iter().chain(&frame_box).any(|x| x.is_nan()) {
        return Err(mismatch(cid, "a NaN centre or box".into()));
    }
    let rec = c.values(n, u32::from_le_bytes)?;
    let mut seen = vec![false; n];
    for &x in &rec {
        match seen.get_mut(x as usize) {
            Some(b) if !*b => *b = true,
            _ => {
                return Err(mismatch(
                    cid,
                    format!("member {x} repeated or beyond the arena"),
                ))
            }
        }
    }
    let norms = c.values(n, i32::from_le_bytes)?;
    let raw = c.values(3 * nb, f64::from_le_bytes)?;
    if raw.iter().any(|x| x.is_nan()) {
        return Err(mismatch(cid, "a NaN block bound".into()));
    }
    let blocks = raw
        .chunks_exact(3)
        .map(|b| Block {
            err: b[0],
            tail: [b[1], b[2]],
        })
        .collect();
    let mut grouped_codes = Vec::with_capacity(group_bytes);
    c.visit(group_bytes, |b| {
        grouped_codes.extend(b.iter().map(|&x| x as i8))
    })?;
    let mut second = Vec::with_capacity(n * stride);
    c.visit(n * stride, |b| second.extend_from_slice(b))?;
    if grouped_codes.len() != group_bytes || second.len() != n * stride {
        return Err(short(cid));
    }
    let plain = rec
        .iter()
        .map(|&r| (arena.norms[r as usize], arena.err[r as usize]))
        .collect();
    Ok(Frames {
        dims: d,
        m,
        s,
        frames,
        centre,
        basis1,
        basis2,
        frame_box,
        members: Members {
            rec,
            codes: Vec::new(),
            norms,
            first: Vec::new(),
            second,
        },
        blocks,
        grouped: grouped_codes,
        plain,
    })
}
