//! Identifiers, catalog keys, physical keys and term bounds of secondary
//! indexes (secondary-index.md 1.2, 2.2, 4.1, 5, 9.2).

use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::keys::{decode_segments, encode_segment, encode_segment_prefix, prefix_end, KeyBuilder};
use crate::manifest::RootManifest;
use crate::prolly::Config;
use sha2::{Digest, Sha256};

/// `MapVersionId`: SHA-256 of the timestamp-free `RootManifest` of a tree.
pub fn version_id(root: Option<Cid>, cfg: &Config) -> [u8; 32] {
    Sha256::digest(RootManifest::new(root, cfg.clone()).encode()).into()
}

/// `seg("system") || seg("secondary-index-catalog") || seg(source)`.
pub fn catalog_map_id(source_map_id: &[u8]) -> Vec<u8> {
    let mut k = KeyBuilder::new();
    k.push_str("system")
        .push_str("secondary-index-catalog")
        .push_segment(source_map_id);
    k.build()
}

/// `seg("system") || seg("secondary-index") || seg(source) || seg(name) || seg(fp)`.
pub fn index_map_id(source_map_id: &[u8], name: &[u8], fingerprint: &[u8; 32]) -> Vec<u8> {
    let mut k = KeyBuilder::new();
    k.push_str("system")
        .push_str("secondary-index")
        .push_segment(source_map_id)
        .push_segment(name)
        .push_segment(fingerprint);
    k.build()
}

/// Named root of a versioned map's head: `maps/versioned/<hex id>/head`.
pub fn head_root_name(map_id: &[u8]) -> Vec<u8> {
    format!("maps/versioned/{}/head", hex::encode(map_id)).into_bytes()
}

/// Named root of one version: `maps/versioned/<hex id>/versions/` + 32 raw bytes.
pub fn version_root_name(map_id: &[u8], version: &[u8; 32]) -> Vec<u8> {
    let mut n = format!("maps/versioned/{}/versions/", hex::encode(map_id)).into_bytes();
    n.extend_from_slice(version);
    n
}

/// Named root of the control record: `maps/versioned/<hex source>/secondary-index-control`.
pub fn control_root_name(source_map_id: &[u8]) -> Vec<u8> {
    format!(
        "maps/versioned/{}/secondary-index-control",
        hex::encode(source_map_id)
    )
    .into_bytes()
}

/// Key of the one record of the control tree: `seg("control")`.
pub fn control_key() -> Vec<u8> {
    encode_segment(b"control")
}

/// Catalog key of the format record.
pub fn catalog_format_key() -> Vec<u8> {
    encode_segment(b"format")
}

/// The format record's value.
pub const CATALOG_FORMAT: [u8; 4] = [0, 0, 0, 1];

/// Catalog key of the `current` (`PSIH`) record.
pub fn catalog_current_key() -> Vec<u8> {
    encode_segment(b"current")
}

/// Catalog key `definitions/<name>/<generation>`.
pub fn catalog_definition_key(name: &[u8], generation: u64) -> Vec<u8> {
    let mut k = KeyBuilder::new();
    k.push_str("definitions")
        .push_segment(name)
        .push_u64(generation);
    k.build()
}

/// Catalog key `checkpoints/<source version>/<name>/<generation>`.
pub fn catalog_checkpoint_key(source_version: &[u8; 32], name: &[u8], generation: u64) -> Vec<u8> {
    let mut k = KeyBuilder::new();
    k.push_str("checkpoints")
        .push_segment(source_version)
        .push_segment(name)
        .push_u64(generation);
    k.build()
}

/// Catalog key `retired/<name>/<generation>`.
pub fn catalog_retired_key(name: &[u8], generation: u64) -> Vec<u8> {
    let mut k = KeyBuilder::new();
    k.push_str("retired")
        .push_segment(name)
        .push_u64(generation);
    k.build()
}

/// `seg(term) || seg(primary_key)`.
pub fn physical_key(term: &[u8], primary_key: &[u8]) -> Vec<u8> {
    let mut k = encode_segment(term);
    k.extend_from_slice(&encode_segment(primary_key));
    k
}

/// Splits a physical key into (term, primary key); anything but exactly
/// two segments is an error.
pub fn decode_physical_key(key: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut segs = decode_segments(key)?;
    if segs.len() != 2 {
        return Err(Error::invalid(
            "physical index key",
            format!("{} segments, expected 2", segs.len()),
        ));
    }
    let pk = segs.pop().unwrap_or_default();
    let term = segs.pop().unwrap_or_default();
    Ok((term, pk))
}

/// A half-open physical key range `[start, end)`; `end: None` is unbounded.
pub type Bounds = (Vec<u8>, Option<Vec<u8>>);

/// Every entry whose term equals `term`.
pub fn exact_bounds(term: &[u8]) -> Bounds {
    let start = encode_segment(term);
    let end = prefix_end(&start);
    (start, end)
}

/// Every entry whose term starts with `prefix`.
pub fn prefix_bounds(prefix: &[u8]) -> Bounds {
    let start = encode_segment_prefix(prefix);
    let end = prefix_end(&start);
    (start, end)
}

/// Every entry whose term is in `[start, end)` (`end: None`: unbounded).
pub fn range_bounds(start: &[u8], end: Option<&[u8]>) -> Result<Bounds> {
    if let Some(e) = end {
        if start > e {
            return Err(Error::InvalidIndexDefinition(
                "term range start exceeds end".into(),
            ));
        }
    }
    Ok((encode_segment(start), end.map(encode_segment)))
}
