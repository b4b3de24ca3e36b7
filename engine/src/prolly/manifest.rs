//! `RootManifest`: what a named root points at (prolly-core.md section 10).
//!
//! Bytes are serde_cbor 0.11 "packed" CBOR of the reference struct, written
//! here by hand so they are byte-exact:
//!
//! ```text
//! map(3 + timestamps) {
//!   0: 1                                version
//!   1: null | array(32) of uint         root CID
//!   2: map(7) {0: min, 1: max, 2: factor, 3: seed,
//!              4: 0|1|2 | {"Custom": text},
//!              5: uint|null, 6: uint|null}   config incl. cache knobs
//!   3: uint                             created_at_millis, omitted when None
//!   4: uint                             updated_at_millis, omitted when None
//! }
//! ```
//! Decoding accepts serde's leniencies (fields by index or name, positional
//! arrays, unknown fields ignored, missing timestamps and cache knobs are
//! `None`) and rejects a version other than 1, duplicates, and trailing bytes.

use super::cbor;
use super::Config;
use crate::cid::Cid;
use crate::error::{Error, Result};

const OBJECT: &str = "RootManifest";
const FIELDS: [&str; 5] = [
    "version",
    "root",
    "config",
    "created_at_millis",
    "updated_at_millis",
];
const CONFIG_FIELDS: [&str; 7] = [
    "min_chunk_size",
    "max_chunk_size",
    "chunking_factor",
    "hash_seed",
    "encoding",
    "node_cache_max_nodes",
    "node_cache_max_bytes",
];

/// The only manifest version.
pub const MANIFEST_VERSION: u64 = 1;

/// A tree root together with the config that built it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootManifest {
    /// Always [`MANIFEST_VERSION`].
    pub version: u64,
    /// Root node CID; `None` for the empty tree.
    pub root: Option<Cid>,
    /// The tree's config (including the cache knobs).
    pub config: Config,
    /// Creation time, Unix milliseconds.
    pub created_at_millis: Option<u64>,
    /// Last update time, Unix milliseconds.
    pub updated_at_millis: Option<u64>,
}

impl RootManifest {
    /// A version-1 manifest without timestamps.
    pub fn new(root: Option<Cid>, config: Config) -> Self {
        RootManifest {
            version: MANIFEST_VERSION,
            root,
            config,
            created_at_millis: None,
            updated_at_millis: None,
        }
    }

    /// Packed CBOR bytes, byte-identical to the reference.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        let n = 3
            + u64::from(self.created_at_millis.is_some())
            + u64::from(self.updated_at_millis.is_some());
        cbor::head(&mut out, 5, n);
        cbor::put_uint(&mut out, 0);
        cbor::put_uint(&mut out, self.version);
        cbor::put_uint(&mut out, 1);
        match &self.root {
            Some(cid) => cbor::put_byte_array(&mut out, cid.as_bytes()),
            None => out.push(cbor::NULL),
        }
        cbor::put_uint(&mut out, 2);
        let c = &self.config;
        cbor::head(&mut out, 5, 7);
        cbor::put_uint(&mut out, 0);
        cbor::put_uint(&mut out, c.min_chunk_size as u64);
        cbor::put_uint(&mut out, 1);
        cbor::put_uint(&mut out, c.max_chunk_size as u64);
        cbor::put_uint(&mut out, 2);
        cbor::put_uint(&mut out, u64::from(c.chunking_factor));
        cbor::put_uint(&mut out, 3);
        cbor::put_uint(&mut out, c.hash_seed);
        cbor::put_uint(&mut out, 4);
        cbor::put_encoding(&mut out, &c.encoding);
        for (idx, v) in [(5, c.node_cache_max_nodes), (6, c.node_cache_max_bytes)] {
            cbor::put_uint(&mut out, idx);
            match v {
                Some(n) => cbor::put_uint(&mut out, n as u64),
                None => out.push(cbor::NULL),
            }
        }
        for (idx, v) in [(3, self.created_at_millis), (4, self.updated_at_millis)] {
            if let Some(t) = v {
                cbor::put_uint(&mut out, idx);
                cbor::put_uint(&mut out, t);
            }
        }
        out
    }

    /// Parses manifest bytes (see the module docs for what is accepted).
    pub fn decode(bytes: &[u8]) -> Result<RootManifest> {
        let f = cbor::Struct::new(cbor::parse(bytes, OBJECT)?, &FIELDS, OBJECT)?;
        let version = cbor::uint(f.required(0)?, OBJECT, "version")?;
        if version != MANIFEST_VERSION {
            return Err(Error::invalid(
                OBJECT,
                format!("unsupported version {version}"),
            ));
        }
        let root = match f.required(1)? {
            ciborium::value::Value::Null => None,
            v => {
                let b = cbor::byte_vec(v, OBJECT, "root")?;
                Some(Cid::from_slice(&b).ok_or_else(|| {
                    Error::invalid(OBJECT, format!("root is {} bytes, not 32", b.len()))
                })?)
            }
        };
        let c = cbor::Struct::new(f.required(2)?.clone(), &CONFIG_FIELDS, OBJECT)?;
        let factor = cbor::uint(c.required(2)?, OBJECT, "chunking_factor")?;
        let config = Config {
            min_chunk_size: cbor::usize(c.required(0)?, OBJECT, "min_chunk_size")?,
            max_chunk_size: cbor::usize(c.required(1)?, OBJECT, "max_chunk_size")?,
            chunking_factor: u32::try_from(factor).map_err(|_| {
                Error::invalid(OBJECT, format!("chunking_factor {factor} exceeds u32"))
            })?,
            hash_seed: cbor::uint(c.required(3)?, OBJECT, "hash_seed")?,
            encoding: cbor::encoding(c.required(4)?, OBJECT)?,
            node_cache_max_nodes: cbor::opt_usize(c.optional(5), OBJECT, "node_cache_max_nodes")?,
            node_cache_max_bytes: cbor::opt_usize(c.optional(6), OBJECT, "node_cache_max_bytes")?,
        };
        let ts = |i: usize, what: &str| -> Result<Option<u64>> {
            match f.optional(i) {
                None | Some(ciborium::value::Value::Null) => Ok(None),
                Some(v) => cbor::uint(v, OBJECT, what).map(Some),
            }
        };
        Ok(RootManifest {
            version,
            root,
            config,
            created_at_millis: ts(3, "created_at_millis")?,
            updated_at_millis: ts(4, "updated_at_millis")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_empty_manifest_bytes() {
        let m = RootManifest::new(None, Config::default());
        let hex = hex::encode(m.encode());
        assert_eq!(hex, "a3000101f602a70004011a001000000218800300040005f606f6");
        assert_eq!(RootManifest::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn rejects_bad_version_and_trailing() {
        let mut b = RootManifest::new(None, Config::default()).encode();
        b[2] = 0x02;
        assert!(RootManifest::decode(&b).is_err());
        let mut t = RootManifest::new(None, Config::default()).encode();
        t.push(0);
        assert!(matches!(
            RootManifest::decode(&t),
            Err(Error::TrailingBytes { .. })
        ));
    }
}
