//! Node codec: `CRAB` v1 (read and write) and legacy packed CBOR (read only).
//!
//! Layout (prolly-core.md section 2.2): `"CRAB"`, varint version 1, varint
//! leaf flag, varint level, varint min/max/factor/seed, one raw encoding tag
//! byte (+ varint-length UTF-8 name for custom), varint entry count, then per
//! entry `varint shared, varint suffix_len, suffix` and a leaf value
//! (`varint len, bytes`) or an internal pointer (`00` + 32 CID bytes, or
//! `01` + varint len + bytes for a non-CID legacy payload).
//!
//! The decoder is strict: besides everything the reference rejects it
//! rejects overlong varints, keys that are not strictly ascending, shared
//! prefixes that are not maximal, a tag-01 value of exactly 32 bytes and a
//! leaf flag that disagrees with the level. Together these make
//! `decode(b).encode() == b` for every accepted `CRAB` input, so a node's
//! CID is a function of its logical content.

use super::cbor;
use super::{Config, Encoding};
use crate::cid::Cid;
use crate::codec::{put_uv, uv_len, Reader};
use crate::error::{Error, Result};

const OBJECT: &str = "CRAB node";
const LEGACY: &str = "legacy CBOR node";

/// Magic bytes of a `CRAB` node.
pub const MAGIC: &[u8; 4] = b"CRAB";
/// The only `CRAB` format version.
pub const VERSION: u64 = 1;

/// One prolly tree node: a sorted run of entries plus the config header.
///
/// Invariants of every node this crate decodes or builds: `keys` strictly
/// ascending, `keys.len() == vals.len()`, `leaf == (level == 0)`. Leaf
/// values are user values; internal values are child CIDs (32 bytes) except
/// in legacy nodes, which may carry other payloads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// True for leaves (level 0).
    pub leaf: bool,
    /// Height above the leaves.
    pub level: u8,
    /// Header: `min_chunk_size` of the writing config.
    pub min_chunk_size: usize,
    /// Header: `max_chunk_size` of the writing config.
    pub max_chunk_size: usize,
    /// Header: `chunking_factor` of the writing config.
    pub chunking_factor: u32,
    /// Header: `hash_seed` of the writing config.
    pub hash_seed: u64,
    /// Header: encoding tag of the writing config.
    pub encoding: Encoding,
    /// Keys, strictly ascending. Internal nodes: the first key of each child.
    pub keys: Vec<Vec<u8>>,
    /// Values parallel to `keys`. Internal nodes: child CIDs.
    pub vals: Vec<Vec<u8>>,
}

impl Node {
    /// An empty node at `level` carrying `cfg`'s header.
    pub fn empty(cfg: &Config, level: u8) -> Node {
        Node {
            leaf: level == 0,
            level,
            min_chunk_size: cfg.min_chunk_size,
            max_chunk_size: cfg.max_chunk_size,
            chunking_factor: cfg.chunking_factor,
            hash_seed: cfg.hash_seed,
            encoding: cfg.encoding.clone(),
            keys: Vec::new(),
            vals: Vec::new(),
        }
    }

    /// The node's header as a [`Config`] (cache knobs unset).
    pub fn config(&self) -> Config {
        Config {
            min_chunk_size: self.min_chunk_size,
            max_chunk_size: self.max_chunk_size,
            chunking_factor: self.chunking_factor,
            hash_seed: self.hash_seed,
            encoding: self.encoding.clone(),
            node_cache_max_nodes: None,
            node_cache_max_bytes: None,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when the node holds no entry.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Decodes `CRAB` v1 bytes (strictly) or, when the input does not start
    /// with `CRAB`, a legacy packed/string-keyed CBOR node.
    pub fn decode(bytes: &[u8]) -> Result<Node> {
        if bytes.starts_with(MAGIC) {
            decode_crab(bytes)
        } else {
            decode_legacy(bytes)
        }
    }

    /// Serializes as `CRAB` v1 with minimal varints and maximal prefix
    /// sharing. Always `CRAB`, even for nodes read from legacy CBOR.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// Exact length of [`encode`](Self::encode)'s output.
    pub fn encoded_len(&self) -> usize {
        let mut n = 4
            + 1
            + 1
            + uv_len(u64::from(self.level))
            + uv_len(self.min_chunk_size as u64)
            + uv_len(self.max_chunk_size as u64)
            + uv_len(u64::from(self.chunking_factor))
            + uv_len(self.hash_seed)
            + 1
            + uv_len(self.keys.len() as u64);
        if let Encoding::Custom(name) = &self.encoding {
            n += uv_len(name.len() as u64) + name.len();
        }
        let mut prev: &[u8] = &[];
        for (k, v) in self.keys.iter().zip(&self.vals) {
            let shared = common_prefix(prev, k);
            let suffix = k.len() - shared;
            n += uv_len(shared as u64) + uv_len(suffix as u64) + suffix;
            n += if self.leaf {
                uv_len(v.len() as u64) + v.len()
            } else if v.len() == Cid::LEN {
                1 + Cid::LEN
            } else {
                1 + uv_len(v.len() as u64) + v.len()
            };
            prev = k;
        }
        n
    }

    /// Appends the `CRAB` v1 bytes to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        put_uv(out, VERSION);
        put_uv(out, u64::from(self.leaf));
        put_uv(out, u64::from(self.level));
        put_uv(out, self.min_chunk_size as u64);
        put_uv(out, self.max_chunk_size as u64);
        put_uv(out, u64::from(self.chunking_factor));
        put_uv(out, self.hash_seed);
        out.push(self.encoding.tag());
        if let Encoding::Custom(name) = &self.encoding {
            put_uv(out, name.len() as u64);
            out.extend_from_slice(name.as_bytes());
        }
        put_uv(out, self.keys.len() as u64);
        let mut prev: &[u8] = &[];
        for (k, v) in self.keys.iter().zip(&self.vals) {
            let shared = common_prefix(prev, k);
            put_uv(out, shared as u64);
            put_uv(out, (k.len() - shared) as u64);
            out.extend_from_slice(&k[shared..]);
            if self.leaf {
                put_uv(out, v.len() as u64);
            } else if v.len() == Cid::LEN {
                out.push(0);
            } else {
                out.push(1);
                put_uv(out, v.len() as u64);
            }
            out.extend_from_slice(v);
            prev = k;
        }
    }

    /// CID of the `CRAB` encoding.
    pub fn cid(&self) -> Cid {
        Cid::of(&self.encode())
    }

    /// Child CIDs of an internal node, in key order. Errors on a leaf or on
    /// a value that is not exactly 32 bytes (a legacy payload).
    pub fn child_cids(&self) -> Result<Vec<Cid>> {
        if self.leaf {
            return Err(Error::invalid(OBJECT, "leaf node has no children"));
        }
        (0..self.vals.len()).map(|i| self.child(i)).collect()
    }

    /// The child CID in slot `i` of an internal node.
    pub fn child(&self, i: usize) -> Result<Cid> {
        let v = self
            .vals
            .get(i)
            .ok_or_else(|| Error::invalid(OBJECT, format!("slot {i} out of range")))?;
        Cid::from_slice(v).ok_or_else(|| {
            Error::invalid(
                OBJECT,
                format!(
                    "internal value in slot {i} is {} bytes, not a 32-byte CID",
                    v.len()
                ),
            )
        })
    }

    /// Slot whose subtree may contain `key` (section 7.1): the exact match,
    /// else the insertion point minus one; `None` when `key` sorts before
    /// every key of this node.
    pub fn route(&self, key: &[u8]) -> Option<usize> {
        match self.keys.binary_search_by(|k| k.as_slice().cmp(key)) {
            Ok(i) => Some(i),
            Err(0) => None,
            Err(p) => Some(p - 1),
        }
    }

    /// Checks the invariants shared by both decoders.
    fn check(&self, object: &'static str) -> Result<()> {
        if self.leaf != (self.level == 0) {
            return Err(Error::invalid(
                object,
                format!(
                    "leaf flag {} disagrees with level {}",
                    self.leaf, self.level
                ),
            ));
        }
        if self.keys.len() != self.vals.len() {
            return Err(Error::invalid(
                object,
                format!("{} keys but {} values", self.keys.len(), self.vals.len()),
            ));
        }
        for (i, w) in self.keys.windows(2).enumerate() {
            if w[0] >= w[1] {
                return Err(Error::invalid(
                    object,
                    format!("key {} is not greater than key {}", i + 1, i),
                ));
            }
        }
        Ok(())
    }
}

/// Length of the common prefix of `a` and `b`.
pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn varint_usize(r: &mut Reader<'_>, what: &str) -> Result<usize> {
    let v = r.uv()?;
    usize::try_from(v).map_err(|_| r.invalid(format!("{what} {v} does not fit usize")))
}

/// Receives each `(key, value)` of a node being parsed.
type EntrySink<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// A `CRAB` node's header fields.
struct Header {
    leaf: bool,
    level: u8,
    min_chunk_size: usize,
    max_chunk_size: usize,
    chunking_factor: u32,
    hash_seed: u64,
    encoding: Encoding,
}

/// Parses a `CRAB` header up to and including the entry count.
fn parse_header(r: &mut Reader<'_>) -> Result<(Header, usize)> {
    r.expect_magic(MAGIC)?;
    let version = r.uv()?;
    if version != VERSION {
        return Err(r.invalid(format!("unsupported version {version}")));
    }
    let leaf = match r.uv()? {
        0 => false,
        1 => true,
        f => return Err(r.invalid(format!("leaf flag {f} is not 0 or 1"))),
    };
    let level = r.uv()?;
    let level = u8::try_from(level).map_err(|_| r.invalid(format!("level {level} exceeds 255")))?;
    if leaf != (level == 0) {
        return Err(r.invalid(format!("leaf flag {leaf} disagrees with level {level}")));
    }
    let min_chunk_size = varint_usize(r, "min_chunk_size")?;
    let max_chunk_size = varint_usize(r, "max_chunk_size")?;
    let factor = r.uv()?;
    let chunking_factor = u32::try_from(factor)
        .map_err(|_| r.invalid(format!("chunking_factor {factor} exceeds u32")))?;
    let hash_seed = r.uv()?;
    let encoding = match r.u8()? {
        0 => Encoding::Raw,
        1 => Encoding::Cbor,
        2 => Encoding::Json,
        3 => {
            let n = varint_usize(r, "custom name length")?;
            let name = r.take(n)?;
            let name = std::str::from_utf8(name)
                .map_err(|_| r.invalid("custom encoding name is not UTF-8"))?;
            Encoding::Custom(name.to_string())
        }
        t => return Err(r.invalid(format!("unknown encoding tag {t}"))),
    };
    let count = varint_usize(r, "entry count")?;
    Ok((
        Header {
            leaf,
            level,
            min_chunk_size,
            max_chunk_size,
            chunking_factor,
            hash_seed,
            encoding,
        },
        count,
    ))
}

/// Number of entries of the node `bytes`, read from its header alone.
pub fn entry_count(bytes: &[u8]) -> Result<usize> {
    if !bytes.starts_with(MAGIC) {
        return Ok(decode_legacy(bytes)?.len());
    }
    parse_header(&mut Reader::new(bytes, OBJECT)).map(|(_, n)| n)
}

/// Parses `CRAB` v1 bytes strictly, handing each entry to `entry(key,
/// value)` in order: the key rebuilt in one reused buffer, the value
/// borrowed from `bytes`. Checks everything [`Node::decode`] checks, the
/// leaf flag against the level before any entry and each key against the
/// previous one as it is read.
fn parse_crab(bytes: &[u8], entry: &mut EntrySink<'_>) -> Result<Header> {
    let mut r = Reader::new(bytes, OBJECT);
    let (header, count) = parse_header(&mut r)?;
    let leaf = header.leaf;
    let mut key: Vec<u8> = Vec::new();
    for i in 0..count {
        let shared = varint_usize(&mut r, "shared prefix")?;
        let suffix_len = varint_usize(&mut r, "suffix length")?;
        let suffix = r.take(suffix_len)?;
        if shared > key.len() {
            return Err(r.invalid(format!(
                "entry {i}: shared prefix {shared} longer than previous key ({})",
                key.len()
            )));
        }
        if shared < key.len() && suffix.first() == Some(&key[shared]) {
            return Err(r.invalid(format!("entry {i}: shared prefix {shared} is not maximal")));
        }
        // With a maximal shared prefix the new key is greater than the
        // previous one exactly when its first byte after the prefix is
        // greater, or it extends the previous key.
        let ascending = match suffix.first() {
            None => false,
            Some(&b) => shared == key.len() || b > key[shared],
        };
        if i > 0 && !ascending {
            return Err(r.invalid(format!("key {i} is not greater than key {}", i - 1)));
        }
        key.truncate(shared);
        key.extend_from_slice(suffix);
        let val = if leaf {
            let n = varint_usize(&mut r, "value length")?;
            r.take(n)?
        } else {
            match r.u8()? {
                0 => r.take(Cid::LEN)?,
                1 => {
                    let n = varint_usize(&mut r, "value length")?;
                    if n == Cid::LEN {
                        return Err(r.invalid(format!(
                            "entry {i}: 32-byte internal value written with tag 01"
                        )));
                    }
                    r.take(n)?
                }
                t => return Err(r.invalid(format!("entry {i}: unknown internal value tag {t}"))),
            }
        };
        entry(&key, val)?;
    }
    r.finish()?;
    Ok(header)
}

fn decode_crab(bytes: &[u8]) -> Result<Node> {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut vals: Vec<Vec<u8>> = Vec::new();
    let h = parse_crab(bytes, &mut |k, v| {
        keys.push(k.to_vec());
        vals.push(v.to_vec());
        Ok(())
    })?;
    let node = Node {
        leaf: h.leaf,
        level: h.level,
        min_chunk_size: h.min_chunk_size,
        max_chunk_size: h.max_chunk_size,
        chunking_factor: h.chunking_factor,
        hash_seed: h.hash_seed,
        encoding: h.encoding,
        keys,
        vals,
    };
    node.check(OBJECT)?;
    Ok(node)
}

/// The level of the node `bytes` (0 for leaves), read from its header
/// alone; [`visit`] or [`Node::decode`] checks the rest.
pub fn level_of(bytes: &[u8]) -> Result<u8> {
    if !bytes.starts_with(MAGIC) {
        return Ok(decode_legacy(bytes)?.level);
    }
    parse_header(&mut Reader::new(bytes, OBJECT)).map(|(h, _)| h.level)
}

/// Visits the entries of the node `bytes` in order without building a
/// [`Node`], with the checks of [`Node::decode`]: `entry(key, value)` gets
/// each one (for `CRAB`, the value borrowed from `bytes`; legacy CBOR is
/// decoded first). Returns the node's level (0 for leaves). An error from
/// `entry` stops the visit and is returned.
pub fn visit(bytes: &[u8], mut entry: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<u8> {
    if bytes.starts_with(MAGIC) {
        return parse_crab(bytes, &mut entry).map(|h| h.level);
    }
    let node = decode_legacy(bytes)?;
    for (k, v) in node.keys.iter().zip(&node.vals) {
        entry(k, v)?;
    }
    Ok(node.level)
}

const NODE_FIELDS: [&str; 9] = [
    "keys",
    "vals",
    "leaf",
    "level",
    "min_chunk_size",
    "max_chunk_size",
    "chunking_factor",
    "hash_seed",
    "encoding",
];

fn decode_legacy(bytes: &[u8]) -> Result<Node> {
    let value = cbor::parse(bytes, LEGACY)?;
    let f = cbor::Struct::new(value, &NODE_FIELDS, LEGACY)?;
    let leaf = match f.required(2)? {
        ciborium::value::Value::Bool(b) => *b,
        _ => return Err(Error::invalid(LEGACY, "leaf must be a boolean")),
    };
    let level = cbor::uint(f.required(3)?, LEGACY, "level")?;
    let level = u8::try_from(level)
        .map_err(|_| Error::invalid(LEGACY, format!("level {level} exceeds 255")))?;
    let min_chunk_size = cbor::usize(f.required(4)?, LEGACY, "min_chunk_size")?;
    let max_chunk_size = cbor::usize(f.required(5)?, LEGACY, "max_chunk_size")?;
    let factor = cbor::uint(f.required(6)?, LEGACY, "chunking_factor")?;
    let chunking_factor = u32::try_from(factor)
        .map_err(|_| Error::invalid(LEGACY, format!("chunking_factor {factor} exceeds u32")))?;
    let hash_seed = cbor::uint(f.required(7)?, LEGACY, "hash_seed")?;
    let encoding = cbor::encoding(f.required(8)?, LEGACY)?;
    let keys = cbor::byte_vecs(f.required(0)?, LEGACY, "keys")?;
    let vals = cbor::byte_vecs(f.required(1)?, LEGACY, "vals")?;
    let node = Node {
        leaf,
        level,
        min_chunk_size,
        max_chunk_size,
        chunking_factor,
        hash_seed,
        encoding,
        keys,
        vals,
    };
    node.check(LEGACY)?;
    Ok(node)
}

impl Config {
    /// True when `node`'s header carries exactly this config's chunking
    /// parameters and encoding (the cache knobs are not in headers).
    pub fn matches_header(&self, node: &Node) -> bool {
        node.min_chunk_size == self.min_chunk_size
            && node.max_chunk_size == self.max_chunk_size
            && node.chunking_factor == self.chunking_factor
            && node.hash_seed == self.hash_seed
            && node.encoding == self.encoding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(entries: &[(&[u8], &[u8])]) -> Node {
        let mut n = Node::empty(&Config::new(2, 4, 2, 0), 0);
        for (k, v) in entries {
            n.keys.push(k.to_vec());
            n.vals.push(v.to_vec());
        }
        n
    }

    #[test]
    fn round_trip_and_len() {
        let n = leaf(&[(b"", b"x"), (b"ab", b""), (b"abc", b"yy"), (b"b", b"z")]);
        let b = n.encode();
        assert_eq!(b.len(), n.encoded_len());
        assert_eq!(Node::decode(&b).unwrap(), n);
    }

    #[test]
    fn strictness() {
        let n = leaf(&[(b"a", b"1"), (b"b", b"2")]);
        let b = n.encode();
        for cut in 0..b.len() {
            assert!(Node::decode(&b[..cut]).is_err(), "truncated at {cut}");
        }
        let mut t = b.clone();
        t.push(0);
        assert!(matches!(Node::decode(&t), Err(Error::TrailingBytes { .. })));
        // Unsorted keys: swap the two suffix bytes.
        let mut u = b.clone();
        let (i, j) = (
            u.iter().position(|&x| x == b'a').unwrap(),
            u.iter().position(|&x| x == b'b').unwrap(),
        );
        u.swap(i, j);
        assert!(Node::decode(&u).is_err());
        // A hostile entry count is truncation, not a huge allocation.
        let mut h = Node::empty(&Config::new(2, 4, 2, 0), 0).encode();
        assert_eq!(h.pop(), Some(0));
        h.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert!(Node::decode(&h).is_err());
    }

    /// `visit`, `entry_count` and `level_of` agree with `decode` on every
    /// node and on every single-byte corruption of one: the same entries
    /// when it accepts, an error exactly when it rejects.
    #[test]
    fn visit_agrees_with_decode_on_valid_and_damaged_nodes() {
        let mut rng = prox_testkit::SplitMix64::new(prox_testkit::seed(0x7155));
        let mut checked = 0;
        for round in 0..200 {
            let n = 1 + (rng.next() % 12) as usize;
            let mut keys: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    (0..rng.next() % 5)
                        .map(|_| (rng.next() % 4) as u8)
                        .collect()
                })
                .collect();
            keys.sort();
            keys.dedup();
            let level = if round % 3 == 0 { 1 } else { 0 };
            let mut node = Node::empty(&Config::new(2, 4, 2, 0), level);
            for k in keys {
                let v = if level == 0 {
                    (0..rng.next() % 4).map(|_| rng.next() as u8).collect()
                } else {
                    vec![7; Cid::LEN]
                };
                node.keys.push(k);
                node.vals.push(v);
            }
            let good = node.encode();
            let mut inputs = vec![good.clone()];
            for _ in 0..8 {
                let mut bad = good.clone();
                let at = (rng.next() as usize) % bad.len();
                bad[at] ^= 1 << (rng.next() % 8);
                inputs.push(bad);
            }
            for bytes in inputs {
                let mut seen: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                let visited = visit(&bytes, |k, v| {
                    seen.push((k.to_vec(), v.to_vec()));
                    Ok(())
                });
                match Node::decode(&bytes) {
                    Ok(d) => {
                        assert_eq!(visited.unwrap(), d.level, "round {round}");
                        let want: Vec<_> = d.keys.iter().cloned().zip(d.vals.clone()).collect();
                        assert_eq!(seen, want, "round {round}");
                        assert_eq!(entry_count(&bytes).unwrap(), d.len());
                        assert_eq!(level_of(&bytes).unwrap(), d.level);
                    }
                    Err(_) => assert!(visited.is_err(), "round {round}: visit accepted {bytes:?}"),
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 1800);
    }
}
