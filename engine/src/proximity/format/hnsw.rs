//! `HNSW` graph manifest and `HNSN` graph values (section 8).

use super::{
    check_key, read_header, read_key, read_metric, FORMAT_VERSION, MAGIC_HNSN, MAGIC_HNSW,
    MAX_ENTRIES, MAX_KEY,
};
use crate::cid::Cid;
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};
use prox_kernels::Metric;

const OBJ_MANIFEST: &str = "HNSW";
const OBJ_NODE: &str = "HNSN";

/// Largest legal graph level.
pub const MAX_LEVEL: u8 = 64;

/// HNSW construction/search configuration (`C_h`); its bytes are
/// fingerprinted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HnswConfig {
    /// `M`: neighbours kept per node and layer.
    pub max_connections: u16,
    /// `ef_construction` (persisted; the canonical graph does not use it).
    pub ef_construction: u32,
    /// Default `ef_search`.
    pub ef_search: u32,
    /// Hash bits per graph level (1..=63).
    pub level_bits: u8,
    /// Re-rank overfetch multiplier.
    pub overfetch_multiplier: u32,
    /// Seed of the level hash.
    pub seed: u64,
}

impl Default for HnswConfig {
    /// 16, 128, 64, 4, 8, 0.
    fn default() -> Self {
        HnswConfig {
            max_connections: 16,
            ef_construction: 128,
            ef_search: 64,
            level_bits: 4,
            overfetch_multiplier: 8,
            seed: 0,
        }
    }
}

impl HnswConfig {
    /// The `C_h` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        put_uv(&mut out, u64::from(self.max_connections));
        put_uv(&mut out, u64::from(self.ef_construction));
        put_uv(&mut out, u64::from(self.ef_search));
        out.push(self.level_bits);
        put_uv(&mut out, u64::from(self.overfetch_multiplier));
        out.extend_from_slice(&self.seed.to_le_bytes());
        out
    }

    /// SHA-256 of [`to_bytes`](Self::to_bytes).
    pub fn fingerprint(&self) -> Cid {
        Cid::of(&self.to_bytes())
    }

    /// Loader checks: `M > 0`, `ef_construction >= M`, `ef_search > 0`,
    /// overfetch > 0, `1 <= level_bits <= 63`.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidConfig(format!("HNSW: {m}")));
        if self.max_connections == 0 {
            return bad("max_connections must be > 0");
        }
        if self.ef_construction < u32::from(self.max_connections) {
            return bad("ef_construction must be >= max_connections");
        }
        if self.ef_search == 0 {
            return bad("ef_search must be > 0");
        }
        if self.overfetch_multiplier == 0 {
            return bad("overfetch_multiplier must be > 0");
        }
        if !(1..=63).contains(&self.level_bits) {
            return bad("level_bits must be in 1..=63");
        }
        Ok(())
    }

    fn read(r: &mut Reader<'_>) -> Result<HnswConfig> {
        Ok(HnswConfig {
            max_connections: r.uv16()?,
            ef_construction: r.uv32()?,
            ef_search: r.uv32()?,
            level_bits: r.u8()?,
            overfetch_multiplier: r.uv32()?,
            seed: r.u64le()?,
        })
    }
}

/// A decoded `HNSW` manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HnswManifest {
    /// `true` for the canonical graph (flag 1), `false` for a disposable one.
    pub canonical: bool,
    /// The PRXI this graph indexes.
    pub source: Cid,
    /// Vector dimensions.
    pub dims: u32,
    /// Metric of the source map.
    pub metric: Metric,
    /// Configuration.
    pub config: HnswConfig,
    /// `CRAB` tree: record key -> `HNSN`.
    pub graph_root: Cid,
    /// Key of the entry point (non-empty).
    pub entry_point: Vec<u8>,
    /// Level of the entry point (<= 64).
    pub max_level: u8,
}

impl HnswManifest {
    /// Encodes the manifest.
    pub fn encode(&self) -> Result<Vec<u8>> {
        if self.entry_point.is_empty() {
            return Err(Error::invalid(OBJ_MANIFEST, "empty entry point"));
        }
        check_key(OBJ_MANIFEST, &self.entry_point)?;
        if self.max_level > MAX_LEVEL {
            return Err(Error::invalid(OBJ_MANIFEST, "maximum level above 64"));
        }
        let mut out = Vec::with_capacity(160);
        out.extend_from_slice(MAGIC_HNSW);
        out.push(FORMAT_VERSION);
        out.push(u8::from(self.canonical));
        out.extend_from_slice(self.source.as_bytes());
        put_uv(&mut out, u64::from(self.dims));
        out.push(self.metric.id());
        let cfg = self.config.to_bytes();
        out.extend_from_slice(&cfg);
        out.extend_from_slice(self.graph_root.as_bytes());
        put_blob(&mut out, &self.entry_point);
        out.push(self.max_level);
        out.extend_from_slice(Cid::of(&cfg).as_bytes());
        Ok(out)
    }

    /// Decodes an `HNSW` manifest (loaders additionally call
    /// [`HnswConfig::validate`] and check the entry point's level).
    pub fn decode(bytes: &[u8]) -> Result<HnswManifest> {
        let mut r = Reader::new(bytes, OBJ_MANIFEST);
        read_header(&mut r, MAGIC_HNSW)?;
        let canonical = match r.u8()? {
            0 => false,
            1 => true,
            f => return Err(r.invalid(format!("unknown canonical flag {f}"))),
        };
        let source = r.cid()?;
        let dims = r.uv32()?;
        let metric = read_metric(&mut r)?;
        let config = HnswConfig::read(&mut r)?;
        let graph_root = r.cid()?;
        let entry_point = read_key(&mut r)?;
        let max_level = r.u8()?;
        if entry_point.is_empty() {
            return Err(r.invalid("empty entry point"));
        }
        if max_level > MAX_LEVEL {
            return Err(r.invalid(format!("maximum level {max_level} above 64")));
        }
        if r.cid()? != config.fingerprint() {
            return Err(r.invalid("configuration fingerprint mismatch"));
        }
        r.finish()?;
        Ok(HnswManifest {
            canonical,
            source,
            dims,
            metric,
            config,
            graph_root,
            entry_point,
            max_level,
        })
    }
}

/// A decoded `HNSN` value: a node's level and its neighbour keys per layer.
///
/// Invariants: `layers.len() == level + 1` (so at most 65 layers) and each
/// layer's keys strictly ascend. Neighbour existence, self-loops and list
/// lengths are not checked here (section 16.3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HnswNode {
    /// The node's level.
    pub level: u8,
    /// Neighbour keys of layers `0..=level`.
    pub layers: Vec<Vec<Vec<u8>>>,
}

/// An `HNSN` value decoded without copying its neighbour keys (they
/// borrow the value's bytes); [`HnswNode::decode`] is this plus a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HnswNodeRef<'a> {
    /// The node's level.
    pub level: u8,
    /// Neighbour keys of layers `0..=level`.
    pub layers: Vec<Vec<&'a [u8]>>,
}

/// The rules every `HNSN` value obeys: one layer per level `0..=level`,
/// each at most `MAX_ENTRIES` strictly ascending keys.
fn validate_layers<K: AsRef<[u8]>>(level: u8, layers: &[Vec<K>]) -> Result<()> {
    if layers.len() != usize::from(level) + 1 {
        return Err(Error::invalid(
            OBJ_NODE,
            format!("{} layers for level {level}", layers.len()),
        ));
    }
    for (l, layer) in layers.iter().enumerate() {
        if layer.len() as u64 > MAX_ENTRIES {
            return Err(Error::invalid(
                OBJ_NODE,
                format!("layer {l}: too many neighbours"),
            ));
        }
        if layer.windows(2).any(|w| w[0].as_ref() >= w[1].as_ref()) {
            return Err(Error::invalid(
                OBJ_NODE,
                format!("layer {l}: neighbours not strictly ascending"),
            ));
        }
    }
    Ok(())
}

impl<'a> HnswNodeRef<'a> {
    /// Decodes an `HNSN` value, borrowing its keys.
    pub fn decode(bytes: &'a [u8]) -> Result<HnswNodeRef<'a>> {
        let mut r = Reader::new(bytes, OBJ_NODE);
        read_header(&mut r, MAGIC_HNSN)?;
        let flags = r.u8()?;
        if flags != 0 {
            return Err(r.invalid(format!("unknown flags {flags:#04x}")));
        }
        let level = r.u8()?;
        let n_layers = r.uv()?;
        if n_layers > 65 {
            return Err(r.invalid(format!("{n_layers} layers exceed 65")));
        }
        let mut layers = Vec::with_capacity(n_layers as usize);
        for _ in 0..n_layers {
            let n = r.uv()?;
            if n > MAX_ENTRIES {
                return Err(r.invalid(format!("{n} neighbours exceed {MAX_ENTRIES}")));
            }
            // Every key takes at least its one-byte length.
            let mut layer = Vec::with_capacity((n as usize).min(r.remaining()));
            for _ in 0..n {
                layer.push(r.blob(MAX_KEY)?);
            }
            layers.push(layer);
        }
        r.finish()?;
        validate_layers(level, &layers)?;
        Ok(HnswNodeRef { level, layers })
    }

    /// The owned node.
    pub fn to_owned(&self) -> HnswNode {
        HnswNode {
            level: self.level,
            layers: self
                .layers
                .iter()
                .map(|l| l.iter().map(|k| k.to_vec()).collect())
                .collect(),
        }
    }
}

impl HnswNode {
    fn validate(&self) -> Result<()> {
        validate_layers(self.level, &self.layers)
    }

    /// Encodes the value.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC_HNSN);
        out.push(FORMAT_VERSION);
        out.push(0);
        out.push(self.level);
        put_uv(&mut out, self.layers.len() as u64);
        for layer in &self.layers {
            put_uv(&mut out, layer.len() as u64);
            for k in layer {
                check_key(OBJ_NODE, k)?;
                put_blob(&mut out, k);
            }
        }
        Ok(out)
    }

    /// Decodes an `HNSN` value.
    pub fn decode(bytes: &[u8]) -> Result<HnswNode> {
        HnswNodeRef::decode(bytes).map(|r| r.to_owned())
    }
}
