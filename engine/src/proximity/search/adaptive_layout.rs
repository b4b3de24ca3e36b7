//! The adaptive search's sub-lists and 4-bit first pass persisted as a
//! `PRLY` layout of kind [`LayoutKind::Adaptive`]
//! (docs/formats-proximity.md, "Layout sidecars"), so a map opens without
//! clustering its leaves or training its codebooks.
//!
//! Kind header: `uv lists | uv groups | u8 fast4 (0 or 1) | uv scan m |
//! uv rank m | uv blocks | uv centroid blocks`. Payload (little-endian,
//! fixed width): `u32` first slot of each list then `n` (`lists + 1`),
//! `u32` group of each list, `u32` first list of each group then `lists`
//! (`groups + 1`), list centroid codes (`i8`, `lists·d`), group mean codes
//! (`i8`, `groups·d`), `u32` arena page and `u32` entry of each slot
//! (`n` each); then, with the 4-bit pass, the two transposed codebooks
//! (`f32`, `16·d` each, records' then means'), `u32` first block of each
//! list (`lists + 1`), the packed record blocks, `u32` first centroid
//! block of each group (`groups + 1`), the packed centroid blocks and the
//! packed group blocks. Code norms and the lists' copies of the record
//! codes are recomputed from the arena at load (integer sums and copies).
//!
//! Every count, offset and index is checked against the arena before use,
//! so a damaged layout is [`Error::Corrupt`], never a panic in a search.

use super::arena::ScanArena;
use super::fast4::{rank_subspaces, scan_subspaces, Book, Fast4};
use super::lists::Lists;
use crate::cid::Cid;
use crate::codec::{put_uv, Reader};
use crate::error::{Error, Result};
use crate::numeric::kmeans::code_norm;
use crate::proximity::format::LayoutKind;
use crate::proximity::layout_io::{manifest, mismatch, payload, persist_payload, Chunks};
use crate::store::BlockStore;
use prox_kernels::pq::fastscan::{self, BLOCK, CODES};

const OBJ: &str = "PRLY";

fn put_u32s(out: &mut Vec<u8>, v: impl IntoIterator<Item = usize>) -> Result<()> {
    for x in v {
        let x = u32::try_from(x).map_err(|_| Error::invalid(OBJ, "offset exceeds u32"))?;
        out.extend_from_slice(&x.to_le_bytes());
    }
    Ok(())
}

/// Writes `lists` (and `fast4`, when the map has the 4-bit pass) bound to
/// `source`; returns the manifest CID.
pub(crate) fn persist(
    lists: &Lists,
    fast4: Option<&Fast4>,
    store: &dyn BlockStore,
    source: Cid,
    dims: usize,
) -> Result<Cid> {
    let l = lists.group.len();
    let g = lists.group_start.len().saturating_sub(1);
    let n = lists.norms.len();
    let mut params = Vec::new();
    put_uv(&mut params, l as u64);
    put_uv(&mut params, g as u64);
    params.push(u8::from(fast4.is_some()));
    let (sm, rm, nb, nc) = fast4.map_or((0, 0, 0, 0), |f| {
        (
            f.scan.m,
            f.rank.m,
            f.blocks.len() / fastscan::block_bytes(f.scan.m),
            f.cent_blocks.len() / fastscan::block_bytes(f.rank.m),
        )
    });
    for v in [sm, rm, nb, nc] {
        put_uv(&mut params, v as u64);
    }
    let mut out = Vec::new();
    put_u32s(&mut out, lists.start.iter().copied())?;
    put_u32s(&mut out, lists.group.iter().map(|&x| x as usize))?;
    put_u32s(&mut out, lists.group_start.iter().copied())?;
    out.extend(lists.cent.iter().map(|&c| c as u8));
    out.extend(lists.group_cent.iter().map(|&c| c as u8));
    put_u32s(&mut out, lists.page.iter().map(|&x| x as usize))?;
    put_u32s(&mut out, lists.entry.iter().map(|&x| x as usize))?;
    if let Some(f) = fast4 {
        for b in [&f.scan.books_t, &f.rank.books_t] {
            for x in b.iter() {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        put_u32s(&mut out, f.block_start.iter().map(|&x| x as usize))?;
        out.extend_from_slice(&f.blocks);
        put_u32s(&mut out, f.cent_start.iter().map(|&x| x as usize))?;
        out.extend_from_slice(&f.cent_blocks);
        out.extend_from_slice(&f.group_blocks);
    }
    persist_payload(
        store,
        LayoutKind::Adaptive,
        source,
        dims,
        n as u64,
        params,
        out,
    )
}

/// `v` as offsets: `len` entries from 0, non-decreasing (strictly when
/// `strict`), ending at `end`.
fn offsets(v: &[u32], strict: bool, end: usize) -> bool {
    v.first() == Some(&0)
        && v.last().map(|&x| x as usize) == Some(end)
        && v.windows(2)
            .all(|w| if strict { w[0] < w[1] } else { w[0] <= w[1] })
}

fn codes(c: &mut Chunks, len: usize) -> Result<Vec<i8>> {
    let mut out = Vec::with_capacity(len);
    c.visit(len, |s| out.extend(s.iter().map(|&b| b as i8)))?;
    Ok(out)
}

fn bytes(c: &mut Chunks, len: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    c.visit(len, |s| out.extend_from_slice(s))?;
    Ok(out)
}

/// Loads the layout `cid` (bound to `source`) as the sub-lists and 4-bit
/// pass over `arena`. Errors as [`super::arena_layout::load`].
pub(crate) fn load(
    store: &dyn BlockStore,
    cid: Cid,
    source: Cid,
    arena: &ScanArena,
    dims: usize,
) -> Result<(Lists, Option<Fast4>)> {
    let d = dims;
    let m = manifest(store, cid, LayoutKind::Adaptive, source, d)?;
    let bad = |what: &str| mismatch(cid, what.to_string());
    let mut r = Reader::new(&m.params, OBJ);
    let l = r.uv_usize()?;
    let g = r.uv_usize()?;
    let has4 = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(bad("4-bit flag is not 0 or 1")),
    };
    let (sm, rm, nb, nc) = (r.uv_usize()?, r.uv_usize()?, r.uv_usize()?, r.uv_usize()?);
    r.finish()?;
    let n = arena.norms.len();
    let pages = arena.pages.len();
    if m.records != n as u64 || g + 1 != arena.group_page.len() || l > n.max(g) {
        return Err(bad("record, group or list count differs from the arena"));
    }
    let (bb, rb) = if has4 {
        if rank_subspaces(d) != Some(rm) || scan_subspaces(d) != sm {
            return Err(bad("4-bit subspaces differ from the map's"));
        }
        (fastscan::block_bytes(sm), fastscan::block_bytes(rm))
    } else {
        (0, 0)
    };
    let want = (|| {
        let base = 4 * (l + 1) + 4 * l + 4 * (g + 1) + l.checked_mul(d)? + g.checked_mul(d)?;
        let base = base.checked_add(n.checked_mul(8)?)?;
        if !has4 {
            return Some(base);
        }
        base.checked_add(2 * 4 * CODES * d)?
            .checked_add(4 * (l + 1))?
            .checked_add(nb.checked_mul(bb)?)?
            .checked_add(4 * (g + 1))?
            .checked_add(nc.checked_mul(rb)?)?
            .checked_add(g.div_ceil(BLOCK).checked_mul(rb)?)
    })();
    if want != Some(m.payload_len as usize) {
        return Err(bad("payload size differs from its counts"));
    }
    let mut c = payload(store, &m, cid)?;
    let start = c.values(l + 1, u32::from_le_bytes)?;
    let group = c.values(l, u32::from_le_bytes)?;
    let group_start = c.values(g + 1, u32::from_le_bytes)?;
    if !offsets(&start, true, n) || !offsets(&group_start, false, l) {
        return Err(bad("list or group offsets out of order"));
    }
    for gi in 0..g {
        let (a, b) = (group_start[gi] as usize, group_start[gi + 1] as usize);
        if group[a..b].iter().any(|&x| x as usize != gi) {
            return Err(bad("a list's group differs from its group's range"));
        }
    }
    let cent = codes(&mut c, l * d)?;
    let group_cent = codes(&mut c, g * d)?;
    if cent.iter().chain(&group_cent).any(|&x| x == i8::MIN) {
        return Err(bad("a centroid code is -128"));
    }
    let page = c.values(n, u32::from_le_bytes)?;
    let entry = c.values(n, u32::from_le_bytes)?;
    let mut lcodes = Vec::with_capacity(n * d);
    let mut norms = Vec::with_capacity(n);
    for (&p, &e) in page.iter().zip(&entry) {
        let (p, e) = (p as usize, e as usize);
        if p >= pages || e >= arena.pages.len_of(p) {
            return Err(bad("a slot names no arena record"));
        }
        let rec = arena.page_start[p] + e;
        lcodes.extend_from_slice(&arena.codes[rec * d..(rec + 1) * d]);
        norms.push(arena.norms[rec]);
    }
    let lists = Lists {
        cent_norm: cent.chunks(d.max(1)).map(|x| code_norm(x) as i32).collect(),
        group_norm: group_cent
            .chunks(d.max(1))
            .map(|x| code_norm(x) as i32)
            .collect(),
        cent,
        group,
        group_start: group_start.iter().map(|&x| x as usize).collect(),
        group_cent,
        start: start.iter().map(|&x| x as usize).collect(),
        codes: lcodes,
        norms,
        page,
        entry,
    };
    if d == 0 && (lists.cent_norm.len() != l || lists.group_norm.len() != g) {
        return Err(bad("zero-dimensional lists"));
    }
    if !has4 {
        return Ok((lists, None));
    }
    let sbooks = c.values(CODES * d, f32::from_le_bytes)?;
    let rbooks = c.values(CODES * d, f32::from_le_bytes)?;
    if sbooks.iter().chain(&rbooks).any(|x| !x.is_finite()) {
        return Err(bad("a codebook component is not finite"));
    }
    let block_start = c.values(l + 1, u32::from_le_bytes)?;
    if !offsets(&block_start, false, nb)
        || (0..l).any(|i| {
            (block_start[i + 1] - block_start[i]) as usize
                != (lists.start[i + 1] - lists.start[i]).div_ceil(BLOCK)
        })
    {
        return Err(bad("record block offsets differ from the lists"));
    }
    let blocks = bytes(&mut c, nb * bb)?;
    let cent_start = c.values(g + 1, u32::from_le_bytes)?;
    if !offsets(&cent_start, false, nc)
        || (0..g).any(|i| {
            (cent_start[i + 1] - cent_start[i]) as usize
                != (lists.group_start[i + 1] - lists.group_start[i]).div_ceil(BLOCK)
        })
    {
        return Err(bad("centroid block offsets differ from the groups"));
    }
    let cent_blocks = bytes(&mut c, nc * rb)?;
    let group_blocks = bytes(&mut c, g.div_ceil(BLOCK) * rb)?;
    let fast4 = Fast4 {
        scan: Book {
            m: sm,
            books_t: sbooks,
        },
        rank: Book {
            m: rm,
            books_t: rbooks,
        },
        block_start,
        blocks,
        cent_start,
        cent_blocks,
        group_blocks,
    };
    Ok((lists, Some(fast4)))
}
