//! `CRMF`: typed content-root manifest (section 9).

use super::{check_key, read_key, MAGIC_CONTENT_ROOT};
use crate::cid::Cid;
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};
use crate::prolly::{self, Encoding};
use std::collections::BTreeMap;

const OBJ: &str = "CRMF";

/// The `CRMF` version byte (independent of the proximity format version).
pub const CONTENT_ROOT_VERSION: u8 = 1;
/// Maximum number of metadata pairs.
pub const MAX_METADATA: u64 = 1_000_000;

/// Custom encoding name of a typed-root `RootManifest` config.
pub const TYPED_ROOT_ENCODING: &str = "typed-content-root-v1";
/// `CRMF` metadata key naming the map's `HNSW` manifest (32-byte CID).
pub const META_HNSW: &[u8] = b"prox.hnsw";
/// `CRMF` metadata key naming the map's `PQPQ` manifest (32-byte CID).
pub const META_PQ: &[u8] = b"prox.pq";
/// Prefix of the `CRMF` metadata keys naming the map's secondary-index
/// trees (each value a 32-byte root CID of a `CRAB` tree): `prox.si.catalog`,
/// `prox.si.control` and `prox.si.index.<field>` (docs/payloads.md).
pub const META_SECONDARY_PREFIX: &[u8] = b"prox.si.";

/// True when `config` is the typed-root `RootManifest` config.
pub fn is_typed_root_config(config: &prolly::Config) -> bool {
    config.min_chunk_size == 1
        && config.max_chunk_size == 1
        && config.chunking_factor == 1
        && config.hash_seed == 0
        && config.encoding == Encoding::Custom(TYPED_ROOT_ENCODING.to_string())
}

/// The typed-root `RootManifest` config: min 1, max 1, factor 1, seed 0,
/// custom `typed-content-root-v1`, cache limits `Some(0)`/`Some(0)`.
pub fn typed_root_config() -> prolly::Config {
    prolly::Config {
        min_chunk_size: 1,
        max_chunk_size: 1,
        chunking_factor: 1,
        hash_seed: 0,
        encoding: Encoding::Custom(TYPED_ROOT_ENCODING.to_string()),
        node_cache_max_nodes: Some(0),
        node_cache_max_bytes: Some(0),
    }
}

/// The kind of object a content root points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RootKind {
    /// 1: an ordered `CRAB` node.
    OrderedNode,
    /// 2: a `PRXI` descriptor.
    ProximityDescriptor,
    /// 3: a `PRXN` node of any physical kind.
    ProximityNode,
    /// 4: a `PRXN` overflow directory.
    OverflowDirectory,
    /// 5: a `PRXN` overflow page.
    OverflowPage,
    /// 6: a `PRXV` external vector.
    ExternalVector,
    /// 7: a `PQS8` scalar quantizer.
    ScalarQuantizer,
    /// 8: a `PQPQ` manifest.
    PqManifest,
    /// 9: an `HNSW` manifest.
    HnswManifest,
    /// 10: an HNSW graph page (`CRAB` node of the graph tree).
    HnswPage,
}

impl RootKind {
    /// The wire id (1..=10).
    pub fn id(self) -> u8 {
        match self {
            RootKind::OrderedNode => 1,
            RootKind::ProximityDescriptor => 2,
            RootKind::ProximityNode => 3,
            RootKind::OverflowDirectory => 4,
            RootKind::OverflowPage => 5,
            RootKind::ExternalVector => 6,
            RootKind::ScalarQuantizer => 7,
            RootKind::PqManifest => 8,
            RootKind::HnswManifest => 9,
            RootKind::HnswPage => 10,
        }
    }

    /// Parses a wire id.
    pub fn from_id(id: u8) -> Option<RootKind> {
        Some(match id {
            1 => RootKind::OrderedNode,
            2 => RootKind::ProximityDescriptor,
            3 => RootKind::ProximityNode,
            4 => RootKind::OverflowDirectory,
            5 => RootKind::OverflowPage,
            6 => RootKind::ExternalVector,
            7 => RootKind::ScalarQuantizer,
            8 => RootKind::PqManifest,
            9 => RootKind::HnswManifest,
            10 => RootKind::HnswPage,
            _ => return None,
        })
    }

    /// True for the PRXN family (3, 4, 5), whose roots need dimensions.
    pub fn needs_dims(self) -> bool {
        matches!(
            self,
            RootKind::ProximityNode | RootKind::OverflowDirectory | RootKind::OverflowPage
        )
    }
}

/// A decoded `CRMF` manifest.
///
/// Metadata is kept sorted (a `BTreeMap`), which is how writers emit it.
/// Decoding follows the reference: duplicate keys are rejected, but unsorted
/// pairs are accepted (section 16.1), so such input re-encodes sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentRoot {
    /// What `root` is.
    pub kind: RootKind,
    /// The typed root object.
    pub root: Cid,
    /// Dimensions, present for the PRXN family.
    pub dims: Option<u32>,
    /// Application-defined logical version.
    pub logical_version: u64,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: u64,
    /// Sorted metadata pairs (at most 1 000 000).
    pub metadata: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl ContentRoot {
    /// A manifest for `root` with no dimensions, version 0, time 0 and no
    /// metadata.
    pub fn new(kind: RootKind, root: Cid) -> ContentRoot {
        ContentRoot {
            kind,
            root,
            dims: None,
            logical_version: 0,
            created_at_ms: 0,
            metadata: BTreeMap::new(),
        }
    }

    /// Encodes the manifest (metadata in ascending key order).
    pub fn encode(&self) -> Result<Vec<u8>> {
        if self.metadata.len() as u64 > MAX_METADATA {
            return Err(Error::invalid(OBJ, "more than 1 000 000 metadata pairs"));
        }
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC_CONTENT_ROOT);
        out.push(CONTENT_ROOT_VERSION);
        out.push(self.kind.id());
        out.extend_from_slice(self.root.as_bytes());
        match self.dims {
            None => out.push(0),
            Some(d) => {
                out.push(1);
                put_uv(&mut out, u64::from(d));
            }
        }
        put_uv(&mut out, self.logical_version);
        put_uv(&mut out, self.created_at_ms);
        put_uv(&mut out, self.metadata.len() as u64);
        for (k, v) in &self.metadata {
            check_key(OBJ, k)?;
            check_key(OBJ, v)?;
            put_blob(&mut out, k);
            put_blob(&mut out, v);
        }
        Ok(out)
    }

    /// Decodes a `CRMF` manifest. A version other than 1 is an ordinary
    /// invalid-object error (not the proximity version error).
    pub fn decode(bytes: &[u8]) -> Result<ContentRoot> {
        let mut r = Reader::new(bytes, OBJ);
        r.expect_magic(MAGIC_CONTENT_ROOT)?;
        let version = r.u8()?;
        if version != CONTENT_ROOT_VERSION {
            return Err(r.invalid(format!("unsupported CRMF version {version}")));
        }
        let kind_id = r.u8()?;
        let kind = RootKind::from_id(kind_id)
            .ok_or_else(|| r.invalid(format!("unknown root kind {kind_id}")))?;
        let root = r.cid()?;
        let dims = match r.u8()? {
            0 => None,
            1 => Some(r.uv32()?),
            t => return Err(r.invalid(format!("unknown dimensions tag {t}"))),
        };
        let logical_version = r.uv()?;
        let created_at_ms = r.uv()?;
        let n = r.uv()?;
        if n > MAX_METADATA {
            return Err(r.invalid(format!("{n} metadata pairs exceed {MAX_METADATA}")));
        }
        let mut metadata = BTreeMap::new();
        for _ in 0..n {
            let k = read_key(&mut r)?;
            let v = read_key(&mut r)?;
            if metadata.contains_key(&k) {
                return Err(r.invalid(format!("duplicate metadata key {}", hex::encode(&k))));
            }
            metadata.insert(k, v);
        }
        r.finish()?;
        Ok(ContentRoot {
            kind,
            root,
            dims,
            logical_version,
            created_at_ms,
            metadata,
        })
    }
}
