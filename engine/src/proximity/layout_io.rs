//! Storing and fetching persisted search layouts (`PRLY` manifests and
//! their `PRLC` chunks; docs/formats-proximity.md, "Layout sidecars"): the
//! framing every layout kind shares. What a payload means is up to its
//! kind's module (`search/arena_layout.rs`, `search/adaptive_layout.rs`,
//! `accel/pq/ivf_layout.rs`).

use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::proximity::format::{
    chunk_count, decode_chunk, encode_chunk, LayoutKind, LayoutManifest, LAYOUT_CHUNK,
};
use crate::store::BlockStore;
use bytes::Bytes;
use rayon::prelude::*;

/// Cuts `payload` into `PRLC` chunks and writes them and their `PRLY`
/// manifest; returns the manifest CID.
pub(crate) fn persist_payload(
    store: &dyn BlockStore,
    kind: LayoutKind,
    source: Cid,
    dims: usize,
    records: u64,
    params: Vec<u8>,
    payload: Vec<u8>,
) -> Result<Cid> {
    let blocks = payload
        .chunks(LAYOUT_CHUNK)
        .map(encode_chunk)
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&[u8]> = blocks.iter().map(Vec::as_slice).collect();
    let chunks = store.put_many(&refs)?;
    let manifest = LayoutManifest {
        kind,
        source,
        dims: dims as u32,
        records,
        params,
        payload_len: payload.len() as u64,
        chunks,
    };
    store.put(&manifest.encode()?)
}

/// Fetches and decodes the manifest `cid`, which must be a `kind` layout
/// of `source` with `dims` dimensions and as many chunks as its payload
/// needs.
pub(crate) fn manifest(
    store: &dyn BlockStore,
    cid: Cid,
    kind: LayoutKind,
    source: Cid,
    dims: usize,
) -> Result<LayoutManifest> {
    let bytes = store.get(&cid)?.ok_or(Error::NotFound { cid })?;
    let m = LayoutManifest::decode(&bytes)?;
    if m.kind != kind {
        return Err(Error::InvalidArgument(format!(
            "layout {cid} is a {:?} layout, not a {kind:?} one",
            m.kind
        )));
    }
    if m.source != source {
        return Err(Error::InvalidArgument(format!(
            "layout {cid} was derived from {}, not {source}",
            m.source
        )));
    }
    if m.dims as usize != dims || chunk_count(m.payload_len) != m.chunks.len() as u64 {
        return Err(mismatch(
            cid,
            format!(
                "{} dimensions and {} chunks for a {dims}-dimensional map",
                m.dims,
                m.chunks.len()
            ),
        ));
    }
    Ok(m)
}

/// The payload of `m` (manifest `cid`), its chunks fetched in parallel
/// (hash-checked by the store).
pub(crate) fn payload(store: &dyn BlockStore, m: &LayoutManifest, cid: Cid) -> Result<Chunks> {
    let parts = m
        .chunks
        .par_iter()
        .map(|c| {
            let b = store.get(c)?.ok_or(Error::NotFound { cid: *c })?;
            decode_chunk(&b)?;
            Ok(b)
        })
        .collect::<Result<Vec<Bytes>>>()?;
    Ok(Chunks {
        parts,
        part: 0,
        at: 0,
        manifest: cid,
    })
}

/// Reads payload bytes across chunk boundaries.
pub(crate) struct Chunks {
    parts: Vec<Bytes>,
    part: usize,
    at: usize,
    manifest: Cid,
}

impl Chunks {
    /// Hands the next `len` payload bytes to `f`, one contiguous slice at
    /// a time (a slice never spans two chunks).
    pub(crate) fn visit(&mut self, mut len: usize, mut f: impl FnMut(&[u8])) -> Result<()> {
        let manifest = self.manifest;
        while len > 0 {
            let Some(p) = self.parts.get(self.part) else {
                return Err(short(manifest));
            };
            // Past the checked `PRLC 02` header.
            let body = &p[5..];
            let take = (body.len() - self.at).min(len);
            f(&body[self.at..self.at + take]);
            len -= take;
            self.at += take;
            if self.at == body.len() {
                self.part += 1;
                self.at = 0;
            }
        }
        Ok(())
    }

    /// `count` little-endian values of `N` bytes each, decoded by `f`.
    pub(crate) fn values<const N: usize, T>(
        &mut self,
        count: usize,
        f: fn([u8; N]) -> T,
    ) -> Result<Vec<T>> {
        let mut raw = Vec::with_capacity(count * N);
        self.visit(count * N, |s| raw.extend_from_slice(s))?;
        Ok(raw
            .chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunks_exact yields N bytes")))
            .collect())
    }
}

pub(crate) fn short(manifest: Cid) -> Error {
    Error::Corrupt {
        cid: manifest,
        reason: "layout payload is shorter than its counts".into(),
    }
}

pub(crate) fn mismatch(manifest: Cid, what: String) -> Error {
    Error::Corrupt {
        cid: manifest,
        reason: format!("layout does not match its map: {what}"),
    }
}
