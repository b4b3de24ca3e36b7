//! `PRXI`: the descriptor, a proximity map's identity (section 6).

use super::{
    read_header, read_metric, FORMAT_VERSION, MAGIC_DESCRIPTOR, MAGIC_FINGERPRINT, MAX_KEY,
    VECTOR_F32_LE,
};
use crate::cid::Cid;
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};
use crate::prolly::{Config, Encoding};
use prox_kernels::Metric;

const OBJ: &str = "PRXI";

/// The build configuration of a proximity map (sections 6.1, 6.3, 6.5).
///
/// Everything here is persisted in the descriptor and committed to by the
/// `PCFG` fingerprint; runtime search settings are not part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProximityConfig {
    /// Vector dimensions (> 0).
    pub dims: u32,
    /// Distance metric.
    pub metric: Metric,
    /// Hash bits per hierarchy level (1..=63).
    pub log_chunk_size: u8,
    /// Seed of the promotion-level hash.
    pub level_hash_seed: u64,
    /// Smallest page at which overflow splitting may cut (> 0).
    pub min_page_bytes: u32,
    /// Page size at which overflow splitting always cuts.
    pub target_page_bytes: u32,
    /// Largest stored PRXN node (>= 64); also the read limit for PRXN.
    pub max_page_bytes: u32,
    /// Seed of the overflow split hash.
    pub overflow_hash_seed: u64,
    /// Vectors of more than this many bytes (`4·dims`) are stored as PRXV.
    pub inline_threshold_bytes: u32,
    /// SQ8 group size when node-local quantizers are written.
    pub sq8_group_size: Option<u32>,
}

impl ProximityConfig {
    /// The defaults of section 6.5 for `dims` dimensions: L2, 8 bits per
    /// level, seeds 0, pages 4 KiB / 64 KiB / 4 MiB, inline threshold 64 KiB,
    /// no SQ8.
    pub fn new(dims: u32) -> ProximityConfig {
        ProximityConfig {
            dims,
            metric: Metric::L2,
            log_chunk_size: 8,
            level_hash_seed: 0,
            min_page_bytes: 4096,
            target_page_bytes: 65536,
            max_page_bytes: 4 * 1024 * 1024,
            overflow_hash_seed: 0,
            inline_threshold_bytes: 65536,
            sq8_group_size: None,
        }
    }

    /// Normalization id: 1 (unit f32 fixed point) for cosine, else 0.
    pub fn normalization(&self) -> u8 {
        u8::from(self.metric == Metric::Cosine)
    }

    /// True when every vector of the map is stored as a `PRXV` object.
    pub fn external_vectors(&self) -> bool {
        4 * u64::from(self.dims) > u64::from(self.inline_threshold_bytes)
    }

    /// Checks the rules of section 6.3.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidConfig(m.to_string()));
        if self.dims == 0 {
            return bad("dimensions must be > 0");
        }
        if !(1..=63).contains(&self.log_chunk_size) {
            return bad("log_chunk_size must be in 1..=63");
        }
        if self.max_page_bytes < 64 {
            return bad("max_page_bytes must be >= 64");
        }
        if !(0 < self.min_page_bytes
            && self.min_page_bytes <= self.target_page_bytes
            && self.target_page_bytes <= self.max_page_bytes)
        {
            return bad("page sizes must satisfy 0 < min <= target <= max");
        }
        if !(1..=self.max_page_bytes).contains(&self.inline_threshold_bytes) {
            return bad("inline_threshold_bytes must be in 1..=max_page_bytes");
        }
        if self.sq8_group_size == Some(0) {
            return bad("SQ8 group size must be > 0");
        }
        Ok(())
    }

    fn put_shape(&self, out: &mut Vec<u8>) {
        put_uv(out, u64::from(self.dims));
        out.push(self.metric.id());
        out.push(self.normalization());
    }

    fn put_tail(&self, out: &mut Vec<u8>) {
        out.push(self.log_chunk_size);
        out.extend_from_slice(&self.level_hash_seed.to_le_bytes());
        put_uv(out, u64::from(self.min_page_bytes));
        put_uv(out, u64::from(self.target_page_bytes));
        put_uv(out, u64::from(self.max_page_bytes));
        out.extend_from_slice(&self.overflow_hash_seed.to_le_bytes());
        put_uv(out, u64::from(self.inline_threshold_bytes));
        match self.sq8_group_size {
            None => out.push(0),
            Some(g) => {
                out.push(1);
                put_uv(out, u64::from(g));
            }
        }
    }

    /// The `PCFG` pre-image of section 6.4.
    pub fn fingerprint_preimage(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48);
        out.extend_from_slice(MAGIC_FINGERPRINT);
        out.push(FORMAT_VERSION);
        self.put_shape(&mut out);
        self.put_tail(&mut out);
        out
    }

    /// The configuration fingerprint: SHA-256 of the `PCFG` pre-image.
    pub fn fingerprint(&self) -> Cid {
        Cid::of(&self.fingerprint_preimage())
    }
}

/// The ordered directory of a map: tree root (absent when empty) and config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryBlock {
    /// Root `CRAB` node, `None` for an empty map.
    pub root: Option<Cid>,
    /// The tree's chunking configuration (canonical maps: the default
    /// ordered config, min 4, max 1 048 576, factor 128, seed 0, raw, no
    /// cache limits).
    pub config: Config,
}

/// A decoded `PRXI` descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Build configuration.
    pub config: ProximityConfig,
    /// Number of records.
    pub record_count: u64,
    /// Ordered directory: key -> `PRVR`.
    pub directory: DirectoryBlock,
    /// The PRXN hierarchy root.
    pub root: Cid,
}

fn put_option(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        None => out.push(0),
        Some(x) => {
            out.push(1);
            put_uv(out, x);
        }
    }
}

fn read_option(r: &mut Reader<'_>) -> Result<Option<usize>> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(r.uv_usize()?)),
        t => Err(r.invalid(format!("unknown option tag {t}"))),
    }
}

/// The directory block rules of section 6.2: `min >= 1`, `max >= min`,
/// `factor >= 1` (weaker than [`Config::validate`], which also refuses
/// configs a tree cannot be built with; decoding follows the reference).
fn validate_directory(c: &Config) -> Result<()> {
    if c.min_chunk_size == 0 || c.max_chunk_size < c.min_chunk_size || c.chunking_factor == 0 {
        return Err(Error::invalid(OBJ, "invalid directory chunking config"));
    }
    Ok(())
}

impl Descriptor {
    /// Encodes the descriptor (after validating its configuration).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let c = &self.config;
        c.validate()?;
        validate_directory(&self.directory.config)?;
        let mut out = Vec::with_capacity(160);
        out.extend_from_slice(MAGIC_DESCRIPTOR);
        out.push(FORMAT_VERSION);
        out.push(0);
        out.push(VECTOR_F32_LE);
        c.put_shape(&mut out);
        put_uv(&mut out, self.record_count);
        c.put_tail(&mut out);
        let d = &self.directory;
        match &d.root {
            None => out.push(0),
            Some(root) => {
                out.push(1);
                out.extend_from_slice(root.as_bytes());
            }
        }
        put_uv(&mut out, d.config.min_chunk_size as u64);
        put_uv(&mut out, d.config.max_chunk_size as u64);
        put_uv(&mut out, u64::from(d.config.chunking_factor));
        out.extend_from_slice(&d.config.hash_seed.to_le_bytes());
        match &d.config.encoding {
            Encoding::Raw => out.push(0),
            Encoding::Cbor => out.push(1),
            Encoding::Json => out.push(2),
            Encoding::Custom(name) => {
                if name.len() > MAX_KEY {
                    return Err(Error::invalid(OBJ, "custom encoding name too long"));
                }
                out.push(3);
                put_blob(&mut out, name.as_bytes());
            }
        }
        put_option(&mut out, d.config.node_cache_max_nodes.map(|v| v as u64));
        put_option(&mut out, d.config.node_cache_max_bytes.map(|v| v as u64));
        out.extend_from_slice(self.root.as_bytes());
        out.push(1);
        out.extend_from_slice(c.fingerprint().as_bytes());
        put_uv(&mut out, 0);
        Ok(out)
    }

    /// Decodes and validates a descriptor: fields, end of input, config
    /// (6.3), fingerprint (6.4), then the directory block (6.2), in the
    /// reference's order.
    pub fn decode(bytes: &[u8]) -> Result<Descriptor> {
        let mut r = Reader::new(bytes, OBJ);
        read_header(&mut r, MAGIC_DESCRIPTOR)?;
        let flags = r.u8()?;
        if flags != 0 {
            return Err(r.invalid(format!("unknown required flags {flags:#04x}")));
        }
        let enc = r.u8()?;
        if enc != VECTOR_F32_LE {
            return Err(r.invalid(format!("unknown vector encoding {enc}")));
        }
        let dims = r.uv32()?;
        let metric = read_metric(&mut r)?;
        let norm = r.u8()?;
        if norm != u8::from(metric == Metric::Cosine) {
            return Err(r.invalid(format!(
                "normalization {norm} does not match metric {metric}"
            )));
        }
        let record_count = r.uv()?;
        let log_chunk_size = r.u8()?;
        let level_hash_seed = r.u64le()?;
        let min_page_bytes = r.uv32()?;
        let target_page_bytes = r.uv32()?;
        let max_page_bytes = r.uv32()?;
        let overflow_hash_seed = r.u64le()?;
        let inline_threshold_bytes = r.uv32()?;
        let sq8_group_size = match r.u8()? {
            0 => None,
            1 => Some(r.uv32()?),
            t => return Err(r.invalid(format!("unknown SQ8 tag {t}"))),
        };
        let root_tag = r.u8()?;
        let dir_root = match root_tag {
            0 => None,
            1 => Some(r.cid()?),
            t => return Err(r.invalid(format!("unknown directory root tag {t}"))),
        };
        let min_chunk_size = r.uv_usize()?;
        let max_chunk_size = r.uv_usize()?;
        let chunking_factor = r.uv32()?;
        let hash_seed = r.u64le()?;
        let encoding = match r.u8()? {
            0 => Encoding::Raw,
            1 => Encoding::Cbor,
            2 => Encoding::Json,
            3 => {
                let name = r.blob(MAX_KEY)?;
                let name = std::str::from_utf8(name)
                    .map_err(|_| r.invalid("custom encoding name is not UTF-8"))?;
                Encoding::Custom(name.to_string())
            }
            t => return Err(r.invalid(format!("unknown directory encoding {t}"))),
        };
        let node_cache_max_nodes = read_option(&mut r)?;
        let node_cache_max_bytes = read_option(&mut r)?;
        let root = r.cid()?;
        let policy = r.u8()?;
        if policy != 1 {
            return Err(r.invalid(format!("unknown covering-bound policy {policy}")));
        }
        let fingerprint = r.cid()?;
        let extensions = r.uv()?;
        if extensions != 0 {
            return Err(r.invalid(format!("{extensions} extensions, expected 0")));
        }
        r.finish()?;
        let config = ProximityConfig {
            dims,
            metric,
            log_chunk_size,
            level_hash_seed,
            min_page_bytes,
            target_page_bytes,
            max_page_bytes,
            overflow_hash_seed,
            inline_threshold_bytes,
            sq8_group_size,
        };
        config
            .validate()
            .map_err(|e| Error::invalid(OBJ, format!("configuration: {e}")))?;
        if fingerprint != config.fingerprint() {
            return Err(Error::invalid(OBJ, "configuration fingerprint mismatch"));
        }
        let directory = DirectoryBlock {
            root: dir_root,
            config: Config {
                min_chunk_size,
                max_chunk_size,
                chunking_factor,
                hash_seed,
                encoding,
                node_cache_max_nodes,
                node_cache_max_bytes,
            },
        };
        validate_directory(&directory.config)?;
        Ok(Descriptor {
            config,
            record_count,
            directory,
            root,
        })
    }
}
