//! `PRLY` / `PRLC`: persisted search layouts (docs/formats-proximity.md,
//! "Layout sidecars").
//!
//! A search layout is derived data the native search otherwise computes
//! when a map is opened (the scan arena, ...). It is stored as one `PRLY`
//! manifest bound to the map's `PRXI` descriptor and a payload split into
//! `PRLC` chunks of at most [`LAYOUT_CHUNK`] bytes, so every block stays
//! small enough for sync and object stores. The payload's meaning depends
//! on the manifest's [`LayoutKind`]; this module only frames it.

use super::{read_header, FORMAT_VERSION};
use crate::cid::Cid;
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};

const OBJ: &str = "PRLY";
const CHUNK_OBJ: &str = "PRLC";

/// Magic of `PRLY` layout manifests.
pub const MAGIC_LAYOUT: &[u8; 4] = b"PRLY";
/// Magic of `PRLC` layout payload chunks.
pub const MAGIC_LAYOUT_CHUNK: &[u8; 4] = b"PRLC";
/// Payload bytes per `PRLC` chunk (every chunk but the last is full).
pub const LAYOUT_CHUNK: usize = 1 << 20;
/// Largest kind-specific header a manifest may carry.
const MAX_PARAMS: usize = 4096;

/// What a layout payload holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LayoutKind {
    /// 1: the native scan arena (every record's uniform-scale 8-bit code,
    /// norm and residual bound, in leaf-catalogue order).
    ScanArena,
    /// 2: the adaptive search's sub-lists and 4-bit first pass.
    Adaptive,
    /// 3: the coarse lists of a 4-bit PQ sidecar's IVF fast-scan index
    /// (centroids and every record's list).
    IvfLists,
    /// 4: the recall profile: each search path's measured recall and time
    /// per setting, the table `--recall` chooses from.
    RecallProfile,
    /// 5: the exact-L2 local frames (`--exact-layout localM`): every
    /// frame's centre, basis and bound constants and its members' codes.
    LocalFrames,
    /// 6: the exact-L2 rotated split arena (`--exact-layout splitM`): the
    /// rotation and every record's rotated codes and residuals.
    RotatedArena,
}

impl LayoutKind {
    /// The wire id.
    pub fn id(self) -> u8 {
        match self {
            LayoutKind::ScanArena => 1,
            LayoutKind::Adaptive => 2,
            LayoutKind::IvfLists => 3,
            LayoutKind::RecallProfile => 4,
            LayoutKind::LocalFrames => 5,
            LayoutKind::RotatedArena => 6,
        }
    }

    /// The kind with wire id `id`.
    pub fn from_id(id: u8) -> Option<LayoutKind> {
        match id {
            1 => Some(LayoutKind::ScanArena),
            2 => Some(LayoutKind::Adaptive),
            3 => Some(LayoutKind::IvfLists),
            4 => Some(LayoutKind::RecallProfile),
            5 => Some(LayoutKind::LocalFrames),
            6 => Some(LayoutKind::RotatedArena),
            _ => None,
        }
    }

    /// The `CRMF` metadata key naming a map's layout of this kind.
    pub fn meta_key(self) -> &'static [u8] {
        match self {
            LayoutKind::ScanArena => META_LAYOUT_ARENA,
            LayoutKind::Adaptive => META_LAYOUT_ADAPTIVE,
            LayoutKind::IvfLists => META_LAYOUT_IVF,
            LayoutKind::RecallProfile => META_LAYOUT_PROFILE,
            LayoutKind::LocalFrames => META_LAYOUT_FRAMES,
            LayoutKind::RotatedArena => META_LAYOUT_ROTATED,
        }
    }
}

/// `CRMF` metadata key naming the map's scan-arena `PRLY` manifest.
pub const META_LAYOUT_ARENA: &[u8] = b"prox.layout.arena";
/// `CRMF` metadata key naming the map's adaptive-lists `PRLY` manifest.
pub const META_LAYOUT_ADAPTIVE: &[u8] = b"prox.layout.adaptive";
/// `CRMF` metadata key naming the map's IVF-lists `PRLY` manifest.
pub const META_LAYOUT_IVF: &[u8] = b"prox.layout.ivf";
/// `CRMF` metadata key naming the map's recall-profile `PRLY` manifest.
pub const META_LAYOUT_PROFILE: &[u8] = b"prox.layout.profile";
/// `CRMF` metadata key naming the map's local-frames `PRLY` manifest.
pub const META_LAYOUT_FRAMES: &[u8] = b"prox.layout.frames";
/// `CRMF` metadata key naming the map's rotated-arena `PRLY` manifest.
pub const META_LAYOUT_ROTATED: &[u8] = b"prox.layout.rotated";
/// Prefix of every layout metadata key.
pub const META_LAYOUT_PREFIX: &[u8] = b"prox.layout.";

/// A decoded `PRLY` manifest.
///
/// Invariants (encode and decode): `chunks.len() == ⌈payload_len /
/// LAYOUT_CHUNK⌉`, `params` at most 4 KiB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutManifest {
    /// What the payload holds.
    pub kind: LayoutKind,
    /// The `PRXI` descriptor the layout was derived from.
    pub source: Cid,
    /// The source map's dimensions.
    pub dims: u32,
    /// The source map's record count.
    pub records: u64,
    /// Kind-specific header (for [`LayoutKind::ScanArena`]: scale, page
    /// and group counts; see the docs).
    pub params: Vec<u8>,
    /// Total payload bytes.
    pub payload_len: u64,
    /// The `PRLC` chunks, in payload order.
    pub chunks: Vec<Cid>,
}

/// Number of chunks a payload of `len` bytes is split into.
pub fn chunk_count(len: u64) -> u64 {
    len.div_ceil(LAYOUT_CHUNK as u64)
}

impl LayoutManifest {
    /// Encodes the manifest.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut out = Vec::with_capacity(64 + self.params.len() + 32 * self.chunks.len());
        out.extend_from_slice(MAGIC_LAYOUT);
        out.push(FORMAT_VERSION);
        out.push(self.kind.id());
        out.extend_from_slice(&self.source.0);
        put_uv(&mut out, u64::from(self.dims));
        put_uv(&mut out, self.records);
        put_blob(&mut out, &self.params);
        put_uv(&mut out, self.payload_len);
        put_uv(&mut out, self.chunks.len() as u64);
        for c in &self.chunks {
            out.extend_from_slice(&c.0);
        }
        Ok(out)
    }

    /// Decodes and validates a manifest.
    pub fn decode(bytes: &[u8]) -> Result<LayoutManifest> {
        let mut r = Reader::new(bytes, OBJ);
        read_header(&mut r, MAGIC_LAYOUT)?;
        let id = r.u8()?;
        let kind = LayoutKind::from_id(id)
            .ok_or_else(|| r.invalid(format!("unknown layout kind {id}")))?;
        let source = r.cid()?;
        let dims = r.uv32()?;
        let records = r.uv()?;
        let params = r.blob(MAX_PARAMS)?.to_vec();
        let payload_len = r.uv()?;
        let count = r.uv()?;
        if count
            .checked_mul(32)
            .is_none_or(|b| b > r.remaining() as u64)
        {
            return Err(Error::Truncated { object: OBJ });
        }
        let chunks = (0..count).map(|_| r.cid()).collect::<Result<Vec<_>>>()?;
        r.finish()?;
        let m = LayoutManifest {
            kind,
            source,
            dims,
            records,
            params,
            payload_len,
            chunks,
        };
        m.validate()?;
        Ok(m)
    }

    fn validate(&self) -> Result<()> {
        if self.params.len() > MAX_PARAMS {
            return Err(Error::invalid(OBJ, "kind header exceeds 4 KiB"));
        }
        if self.chunks.len() as u64 != chunk_count(self.payload_len) {
            return Err(Error::invalid(
                OBJ,
                format!(
                    "{} chunks for a payload of {} bytes (want {})",
                    self.chunks.len(),
                    self.payload_len,
                    chunk_count(self.payload_len)
                ),
            ));
        }
        Ok(())
    }
}

/// Encodes one `PRLC` chunk: magic, version, the payload slice.
pub fn encode_chunk(payload: &[u8]) -> Result<Vec<u8>> {
    if payload.is_empty() || payload.len() > LAYOUT_CHUNK {
        return Err(Error::invalid(
            CHUNK_OBJ,
            format!("chunk of {} bytes (1..={LAYOUT_CHUNK})", payload.len()),
        ));
    }
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(MAGIC_LAYOUT_CHUNK);
    out.push(FORMAT_VERSION);
    out.extend_from_slice(payload);
    Ok(out)
}

/// The payload slice of a `PRLC` chunk (checked magic, version and size).
pub fn decode_chunk(bytes: &[u8]) -> Result<&[u8]> {
    let mut r = Reader::new(bytes, CHUNK_OBJ);
    read_header(&mut r, MAGIC_LAYOUT_CHUNK)?;
    let payload = r.take(r.remaining())?;
    if payload.is_empty() || payload.len() > LAYOUT_CHUNK {
        return Err(Error::invalid(
            CHUNK_OBJ,
            format!("chunk of {} bytes (1..={LAYOUT_CHUNK})", payload.len()),
        ));
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_and_chunk_round_trip_and_refuse_bad_counts() {
        let m = LayoutManifest {
            kind: LayoutKind::ScanArena,
            source: Cid([7; 32]),
            dims: 3,
            records: 10,
            params: vec![1, 2, 3],
            payload_len: LAYOUT_CHUNK as u64 + 1,
            chunks: vec![Cid([1; 32]), Cid([2; 32])],
        };
        let bytes = m.encode().unwrap();
        assert_eq!(LayoutManifest::decode(&bytes).unwrap(), m);
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(matches!(
            LayoutManifest::decode(&extra),
            Err(Error::TrailingBytes { .. })
        ));
        let short = LayoutManifest {
            chunks: vec![Cid([1; 32])],
            ..m.clone()
        };
        assert!(short.encode().is_err());
        let c = encode_chunk(b"abc").unwrap();
        assert_eq!(decode_chunk(&c).unwrap(), b"abc");
        assert!(decode_chunk(b"PRLC\x02").is_err());
        assert!(matches!(
            decode_chunk(b"PRLC\x01abc"),
            Err(Error::UnsupportedProximityVersion { found: 1, .. })
        ));
        for cut in 0..bytes.len() {
            assert!(LayoutManifest::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
    }
}
