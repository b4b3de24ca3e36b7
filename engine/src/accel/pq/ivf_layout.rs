//! The coarse lists of the IVF fast-scan index ([`super::FastScan`])
//! persisted as a `PRLY` layout of kind [`LayoutKind::IvfLists`]
//! (docs/formats-proximity.md, "Layout sidecars"), so a 4-bit PQ sidecar
//! opens without training its coarse k-means and assigning every record.
//!
//! Kind header: `uv nlist`. Payload (little-endian, fixed width): the
//! `nlist × dims` centroids (`f32`, list-major), then the list of every
//! record (`u32`, in key order, the sidecar's record order). Its size must
//! be `4·nlist·dims + 4·n`. The packed fast-scan blocks, the SQ8 centroid
//! codes and the query tables are rebuilt from these and the sidecar's
//! codes at load (a linear pass). The bytes are a function of the map's
//! vectors: the lists are trained from them alone, so equal descriptors
//! give equal layouts.

use super::ivf::FastScan;
use super::Pq;
use crate::cid::Cid;
use crate::codec::{put_uv, Reader};
use crate::error::{Error, Result};
use crate::proximity::format::LayoutKind;
use crate::proximity::layout_io::{manifest, mismatch, payload, persist_payload};
use crate::store::BlockStore;

const OBJ: &str = "PRLY";

/// Writes the lists of `fs` (the fast-scan index of `pq`) as a layout bound
/// to the descriptor `source`; returns the manifest CID.
pub(super) fn persist(fs: &FastScan, pq: &Pq, store: &dyn BlockStore, source: Cid) -> Result<Cid> {
    let mut params = Vec::with_capacity(4);
    put_uv(&mut params, fs.nlist() as u64);
    let assign = fs.assignment();
    let mut out = Vec::with_capacity(4 * (fs.centroids().len() + assign.len()));
    for &c in fs.centroids() {
        out.extend_from_slice(&c.to_le_bytes());
    }
    for &l in &assign {
        out.extend_from_slice(&l.to_le_bytes());
    }
    persist_payload(
        store,
        LayoutKind::IvfLists,
        source,
        pq.dims(),
        pq.len() as u64,
        params,
        out,
    )
}

/// Loads the layout `cid` (bound to `source`) as the fast-scan index of
/// `pq`. Errors: [`Error::NotFound`] for a missing block,
/// [`Error::InvalidArgument`] for another descriptor's or kind's layout or
/// a sidecar without 4-bit codes, [`Error::Corrupt`] when its counts,
/// centroids or lists do not fit `pq`.
pub(super) fn load(store: &dyn BlockStore, cid: Cid, source: Cid, pq: &Pq) -> Result<FastScan> {
    if !pq.fast_scan_supported() {
        return Err(Error::InvalidArgument(format!(
            "layout {cid} holds fast-scan lists, but the PQ sidecar has {} centroids per \
             subspace (at most 16 use fast scan)",
            pq.params().centroids
        )));
    }
    let dims = pq.dims();
    let m = manifest(store, cid, LayoutKind::IvfLists, source, dims)?;
    let mut r = Reader::new(&m.params, OBJ);
    let nlist = r.uv_usize()?;
    r.finish()?;
    let n = pq.len();
    if m.records != n as u64 {
        return Err(mismatch(
            cid,
            format!("{} records, the PQ sidecar has {n}", m.records),
        ));
    }
    if nlist == 0 || nlist > n.max(1) {
        return Err(mismatch(cid, format!("{nlist} lists for {n} records")));
    }
    let want = nlist
        .checked_mul(dims)
        .and_then(|c| c.checked_add(n))
        .and_then(|c| c.checked_mul(4));
    if want != Some(m.payload_len as usize) {
        return Err(mismatch(
            cid,
            format!("payload of {} bytes for its counts", m.payload_len),
        ));
    }
    let mut c = payload(store, &m, cid)?;
    let centroids = c.values(nlist * dims, f32::from_le_bytes)?;
    if centroids.iter().any(|x| !x.is_finite()) {
        return Err(mismatch(cid, "a centroid is not finite".into()));
    }
    let assign = c.values(n, u32::from_le_bytes)?;
    if assign.iter().any(|&l| l as usize >= nlist) {
        return Err(mismatch(cid, "a record's list is out of range".into()));
    }
    FastScan::assemble(pq, centroids, nlist, &assign)
        .ok_or_else(|| mismatch(cid, "the sidecar's codes cannot be packed".into()))
}
