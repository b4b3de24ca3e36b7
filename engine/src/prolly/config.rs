//! Tree configuration: chunking parameters and the header encoding tag.

use crate::error::{Error, Result};

/// Value encoding recorded in every node header (tags 0..=3).
///
/// It is metadata only: it never changes chunk boundaries or value bytes,
/// but it is part of each node's bytes, so it changes every CID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Encoding {
    /// Tag 0: opaque bytes.
    #[default]
    Raw,
    /// Tag 1: CBOR values.
    Cbor,
    /// Tag 2: JSON values.
    Json,
    /// Tag 3: an application-defined encoding named by a UTF-8 string.
    Custom(String),
}

impl Encoding {
    /// The wire tag (0 raw, 1 cbor, 2 json, 3 custom).
    pub fn tag(&self) -> u8 {
        match self {
            Encoding::Raw => 0,
            Encoding::Cbor => 1,
            Encoding::Json => 2,
            Encoding::Custom(_) => 3,
        }
    }

    /// Name of a custom encoding, `None` for the three built-in kinds.
    pub fn custom_name(&self) -> Option<&str> {
        match self {
            Encoding::Custom(name) => Some(name),
            _ => None,
        }
    }

    /// Parses `raw`, `cbor`, `json` or `custom:NAME` (the CLI spelling).
    pub fn parse(s: &str) -> Result<Encoding> {
        match s {
            "raw" => Ok(Encoding::Raw),
            "cbor" => Ok(Encoding::Cbor),
            "json" => Ok(Encoding::Json),
            _ => match s.strip_prefix("custom:") {
                Some(name) => Ok(Encoding::Custom(name.to_string())),
                None => Err(Error::InvalidArgument(format!(
                    "unknown encoding {s:?} (expected raw, cbor, json or custom:NAME)"
                ))),
            },
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Encoding::Raw => f.write_str("raw"),
            Encoding::Cbor => f.write_str("cbor"),
            Encoding::Json => f.write_str("json"),
            Encoding::Custom(name) => write!(f, "custom:{name}"),
        }
    }
}

/// Chunking configuration of a prolly tree.
///
/// The first five fields are copied into every node header; the two cache
/// knobs are runtime hints that only reach `RootManifest` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// A chunk may close only once it holds at least this many entries.
    pub min_chunk_size: usize,
    /// A chunk always closes when it reaches this many entries.
    pub max_chunk_size: usize,
    /// A hash boundary fires with probability about `1 / chunking_factor`.
    pub chunking_factor: u32,
    /// xxHash64 seed of the boundary predicate.
    pub hash_seed: u64,
    /// Header encoding tag.
    pub encoding: Encoding,
    /// Optional node-cache bound in nodes (manifest metadata).
    pub node_cache_max_nodes: Option<usize>,
    /// Optional node-cache bound in bytes (manifest metadata).
    pub node_cache_max_bytes: Option<usize>,
}

impl Default for Config {
    /// The reference defaults: 4 / 1048576 / 128 / seed 0 / raw / no cache limits.
    fn default() -> Self {
        Config {
            min_chunk_size: 4,
            max_chunk_size: 1024 * 1024,
            chunking_factor: 128,
            hash_seed: 0,
            encoding: Encoding::Raw,
            node_cache_max_nodes: None,
            node_cache_max_bytes: None,
        }
    }
}

impl Config {
    /// A config with the given chunking parameters and defaults elsewhere.
    pub fn new(
        min_chunk_size: usize,
        max_chunk_size: usize,
        chunking_factor: u32,
        hash_seed: u64,
    ) -> Self {
        Config {
            min_chunk_size,
            max_chunk_size,
            chunking_factor,
            hash_seed,
            ..Config::default()
        }
    }

    /// Largest low-32-bit hash value that counts as a boundary
    /// (`floor(u32::MAX / chunking_factor)`); `None` when the factor is 0.
    pub fn threshold(&self) -> Option<u32> {
        u32::MAX.checked_div(self.chunking_factor)
    }

    /// Rejects configs a tree cannot be built with.
    ///
    /// * `chunking_factor == 0` (division by zero in the predicate);
    /// * `min_chunk_size == 0` (no lower bound; the reference rejects it);
    /// * `min_chunk_size > max_chunk_size`;
    /// * `min_chunk_size == 1` together with `max_chunk_size == 1` or
    ///   `chunking_factor == 1`: every item would close its own chunk, so
    ///   levels never shrink and building never terminates.
    pub fn validate(&self) -> Result<()> {
        if self.chunking_factor == 0 {
            return Err(Error::InvalidConfig(
                "chunking_factor must be at least 1".into(),
            ));
        }
        if self.min_chunk_size == 0 {
            return Err(Error::InvalidConfig(
                "min_chunk_size must be at least 1".into(),
            ));
        }
        if self.min_chunk_size > self.max_chunk_size {
            return Err(Error::InvalidConfig(format!(
                "min_chunk_size {} exceeds max_chunk_size {}",
                self.min_chunk_size, self.max_chunk_size
            )));
        }
        if self.min_chunk_size == 1 && (self.max_chunk_size == 1 || self.chunking_factor == 1) {
            return Err(Error::InvalidConfig(
                "min_chunk_size 1 with max_chunk_size 1 or chunking_factor 1 closes every chunk after one item; the tree never converges"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let d = Config::default();
        assert_eq!(
            (d.min_chunk_size, d.max_chunk_size, d.chunking_factor),
            (4, 1 << 20, 128)
        );
        d.validate().unwrap();
        assert_eq!(Config::new(2, 4, 2, 0).threshold(), Some(0x7fff_ffff));
        assert_eq!(d.threshold(), Some(0x01ff_ffff));
        for bad in [
            Config::new(2, 4, 0, 0),
            Config::new(0, 4, 2, 0),
            Config::new(5, 4, 2, 0),
            Config::new(1, 4, 1, 0),
            Config::new(1, 1, 2, 0),
        ] {
            assert!(
                matches!(bad.validate(), Err(Error::InvalidConfig(_))),
                "{bad:?}"
            );
        }
        Config::new(1, 4, 2, 0).validate().unwrap();
        Config::new(2, 2, 1, 0).validate().unwrap();
    }

    #[test]
    fn encoding_names_round_trip() {
        for e in [
            Encoding::Raw,
            Encoding::Cbor,
            Encoding::Json,
            Encoding::Custom("a/b".into()),
        ] {
            assert_eq!(Encoding::parse(&e.to_string()).unwrap(), e);
        }
        assert!(Encoding::parse("yaml").is_err());
    }
}
