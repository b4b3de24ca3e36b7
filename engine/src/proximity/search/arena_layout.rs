//! The scan arena persisted as a `PRLY` layout of kind
//! [`LayoutKind::ScanArena`] (docs/formats-proximity.md, "Layout
//! sidecars"), so a map opens by reading its codes instead of quantizing
//! every record.
//!
//! Payload (little-endian, fixed width, in this order): `u32` records per
//! leaf page (`pages`), `u32` pages per group (`groups`), each page's
//! `PRXN` CID (`pages × 32` bytes), `i32` code norm per record, `f64`
//! residual bound per record, then the `n·d` codes (`i8`), record-major.
//! The manifest's kind header is `f64 scale | uv pages | uv groups`.
//!
//! Loading matches every stored page CID, page length and group boundary
//! against the hierarchy's nodes above the pages, so a layout can only be
//! used with the hierarchy it was derived from; the pages (keys, vectors
//! and values) are decoded when a search first needs them. The payload bytes are a
//! function of the arena, itself a function of the descriptor, so the
//! layout of a map is the same on every machine.

use super::arena::ScanArena;
use super::catalogue::Catalogue;
use super::node::{Loader, Node};
use super::pages::PagesBuilder;
use crate::cid::Cid;
use crate::codec::{put_f64, put_uv, Reader};
use crate::error::{Error, Result};
use crate::proximity::format::LayoutKind;
use crate::proximity::layout_io::{manifest, mismatch, payload, persist_payload, short};
use crate::store::BlockStore;
use std::sync::Arc;

const OBJ: &str = "PRLY";

/// Deepest chain of directories followed to reach a page (a guard against
/// crafted hierarchies; real maps nest one or two).
const MAX_NESTING: usize = 64;

/// The arena's kind header and payload bytes.
pub(crate) fn encode(arena: &ScanArena) -> Result<(Vec<u8>, Vec<u8>)> {
    let pages = arena.pages.len();
    let groups = arena.group_page.len().saturating_sub(1);
    let n = arena.norms.len();
    let mut params = Vec::with_capacity(24);
    put_f64(&mut params, OBJ, arena.scale)?;
    put_uv(&mut params, pages as u64);
    put_uv(&mut params, groups as u64);
    let mut out =
        Vec::with_capacity(8 * pages + 4 * groups + 32 * pages + 12 * n + arena.codes.len());
    for p in 0..pages {
        out.extend_from_slice(&u32_of(arena.pages.len_of(p))?.to_le_bytes());
    }
    for w in arena.group_page.windows(2) {
        out.extend_from_slice(&u32_of(w[1] - w[0])?.to_le_bytes());
    }
    for p in 0..pages {
        out.extend_from_slice(&arena.pages.cid(p)?.0);
    }
    for &v in &arena.norms {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for &e in &arena.err {
        out.extend_from_slice(&e.to_le_bytes());
    }
    out.extend(arena.codes.iter().map(|&c| c as u8));
    Ok((params, out))
}

/// XXH64 (seed 0) of the arena's code norms (`i32`) then residual bounds
/// (`f64`), little-endian in record order: what the layouts derived from
/// the arena (local frames, the rotated arena) are bound to.
pub(crate) fn digest(arena: &ScanArena) -> u64 {
    let mut h = xxhash_rust::xxh64::Xxh64::new(0);
    for v in &arena.norms {
        h.update(&v.to_le_bytes());
    }
    for v in &arena.err {
        h.update(&v.to_le_bytes());
    }
    h.digest()
}

/// The first `uv` of the kind header of layout `cid` (the width of an
/// exact-L2 layout: local frames or the rotated arena), read from its
/// manifest alone, so a caller can tell whether it serves the width asked
/// for without reading the payload.
pub(crate) fn header_width(
    store: &dyn BlockStore,
    cid: Cid,
    kind: LayoutKind,
    source: Cid,
    dims: usize,
) -> Result<usize> {
    let m = manifest(store, cid, kind, source, dims)?;
    Reader::new(&m.params, OBJ).uv_usize()
}

/// [`Error::Corrupt`] unless `want` (a layout's stored digest) is the
/// [`digest`] of `arena`.
pub(crate) fn check_digest(cid: Cid, want: u64, arena: &ScanArena) -> Result<()> {
    if want == digest(arena) {
        Ok(())
    } else {
        Err(mismatch(
            cid,
            "built over another scan arena (digest differs)".into(),
        ))
    }
}

fn u32_of(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid(OBJ, format!("count {v} exceeds u32")))
}

/// Writes the arena's chunks and its manifest bound to `source`; returns
/// the manifest CID.
pub(crate) fn persist(
    arena: &ScanArena,
    store: &dyn BlockStore,
    source: Cid,
    dims: usize,
) -> Result<Cid> {
    let (params, payload) = encode(arena)?;
    let records = arena.norms.len() as u64;
    persist_payload(
        store,
        LayoutKind::ScanArena,
        source,
        dims,
        records,
        params,
        payload,
    )
}

/// Loads the layout `manifest_cid` (bound to `source`) as the arena of the
/// hierarchy below `root`: fetches the chunks (in parallel, hash-checked
/// by the store) and matches every stored page CID, page length and group
/// boundary against the entries of the loaded nodes above the pages. The
/// pages themselves are not read: each is decoded on first use and must
/// then be a leaf page of the stored length (`pages.rs`).
///
/// Errors: [`Error::NotFound`] for a missing block,
/// [`Error::InvalidArgument`] when the layout was derived from another
/// descriptor or has another kind, [`Error::Corrupt`] when it disagrees
/// with the hierarchy or its own counts.
pub(crate) fn load(
    store: &dyn BlockStore,
    manifest_cid: Cid,
    source: Cid,
    root: &Arc<Node>,
    cat: &Catalogue,
    loader: &Loader<'_>,
    dims: usize,
) -> Result<ScanArena> {
    let m = manifest(store, manifest_cid, LayoutKind::ScanArena, source, dims)?;
    let mut r = Reader::new(&m.params, OBJ);
    let scale = r.f64()?;
    let pages = r.uv_usize()?;
    let groups = r.uv_usize()?;
    r.finish()?;
    if scale.is_nan() || scale <= 0.0 {
        return Err(mismatch(manifest_cid, format!("scale {scale}")));
    }
    let n = usize::try_from(m.records).map_err(|_| short(manifest_cid))?;
    let want = pages
        .checked_mul(36)
        .and_then(|b| b.checked_add(groups.checked_mul(4)?))
        .and_then(|b| b.checked_add(n.checked_mul(12 + dims)?));
    if want != Some(m.payload_len as usize) {
        return Err(mismatch(
            manifest_cid,
            format!("payload of {} bytes for its counts", m.payload_len),
        ));
    }
    let expect_groups = cat.len().max(1);
    if groups != expect_groups {
        return Err(mismatch(
            manifest_cid,
            format!("{groups} groups, hierarchy has {expect_groups}"),
        ));
    }
    let mut c = payload(store, &m, manifest_cid)?;
    let lens = c.values(pages, u32::from_le_bytes)?;
    let gp = c.values(groups, u32::from_le_bytes)?;
    let cids = c.values(pages, Cid)?;
    let claims = Claims {
        cids: &cids,
        lens: &lens,
        manifest: manifest_cid,
        loader,
    };
    let mut out = PagesBuilder::new();
    let mut group_page = Vec::with_capacity(groups + 1);
    if cat.len() == 0 {
        group_page.push(0);
        if root.leafy {
            claims.root(root, &mut out)?;
        } else {
            for j in 0..root.len {
                claims.below(root, j, &mut out, 0)?;
            }
        }
    } else {
        for (node, i) in &cat.parents {
            group_page.push(out.len());
            claims.below(node, *i as usize, &mut out, 0)?;
        }
    }
    let walked = out.finish();
    group_page.push(walked.len());
    if walked.len() != pages {
        return Err(mismatch(
            manifest_cid,
            format!("{pages} pages, hierarchy has {}", walked.len()),
        ));
    }
    for (g, w) in group_page.windows(2).enumerate() {
        if gp[g] as usize != w[1] - w[0] {
            return Err(mismatch(manifest_cid, format!("group {g} differs")));
        }
    }
    let mut page_start = Vec::with_capacity(pages + 1);
    let mut total = 0usize;
    for &l in &lens {
        page_start.push(total);
        total = total.saturating_add(l as usize);
    }
    page_start.push(total);
    if total != n {
        return Err(mismatch(manifest_cid, "record count differs".into()));
    }
    let norms = c.values(n, i32::from_le_bytes)?;
    let err = c.values(n, f64::from_le_bytes)?;
    if err.iter().any(|e| !(e.is_finite() && *e >= 0.0)) {
        return Err(mismatch(
            manifest_cid,
            "a residual bound is not finite and >= 0".into(),
        ));
    }
    let mut codes = Vec::with_capacity(n * dims);
    // Exact search reads survivors' codes at random offsets: huge pages
    // spare most of the TLB misses (advised before the first write).
    prox_kernels::prefetch::advise_huge_pages(codes.spare_capacity_mut(), false);
    c.visit(n * dims, |s| codes.extend(s.iter().map(|&b| b as i8)))?;
    if codes.contains(&i8::MIN) {
        return Err(mismatch(manifest_cid, "a code is -128".into()));
    }
    let err_max = err.iter().fold(0.0f64, |m, &x| m.max(x));
    Ok(ScanArena {
        scale,
        codes,
        norms,
        err,
        err_max,
        pages: walked,
        page_start,
        group_page,
    })
}

/// The stored pages, matched in order against the hierarchy.
struct Claims<'a, 's> {
    cids: &'a [Cid],
    lens: &'a [u32],
    manifest: Cid,
    loader: &'a Loader<'s>,
}

impl Claims<'_, '_> {
    /// The stored page `p` (`None` past the end).
    fn at(&self, p: usize) -> Option<(Cid, usize)> {
        Some((*self.cids.get(p)?, *self.lens.get(p)? as usize))
    }

    /// The root as the only page.
    fn root(&self, root: &Arc<Node>, out: &mut PagesBuilder) -> Result<()> {
        match self.at(out.len()) {
            Some((cid, len)) if cid == root.cid && len == root.len => {
                out.root(root);
                Ok(())
            }
            _ => Err(mismatch(self.manifest, "page 0 differs".into())),
        }
    }

    /// Matches the pages below entry `i` of `parent`. A child the next
    /// stored page names with the entry's record count is taken as that
    /// page without reading it; any other child is read and must be a
    /// directory, whose entries are matched in turn.
    fn below(
        &self,
        parent: &Arc<Node>,
        i: usize,
        out: &mut PagesBuilder,
        depth: usize,
    ) -> Result<()> {
        let p = out.len();
        let differs = || mismatch(self.manifest, format!("page {p} differs"));
        if depth > MAX_NESTING {
            return Err(differs());
        }
        let cid = *parent.child_cid(i).ok_or_else(differs)?;
        let claim = self.at(p);
        if let Some(node) = parent.loaded_child(i) {
            if node.leafy {
                return match claim {
                    Some((c, len)) if c == cid && len == node.len => {
                        out.child(parent, i, len);
                        Ok(())
                    }
                    _ => Err(differs()),
                };
            }
        } else if let Some((c, len)) = claim {
            if c == cid && parent.count[i] == len as u64 {
                out.child(parent, i, len);
                return Ok(());
            }
        }
        let node = parent.child(i, self.loader)?;
        if node.leafy {
            return Err(differs());
        }
        for j in 0..node.len {
            self.below(node, j, out, depth + 1)?;
        }
        Ok(())
    }
}
