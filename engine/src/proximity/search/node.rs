//! The decoded, search-ready form of PRXN nodes, loaded lazily and once.
//!
//! A [`Node`] holds its entries column-wise: keys in one buffer, vectors
//! contiguous (`n·d` f32, external `PRXV` vectors resolved), their 8-bit
//! codes contiguous (`n·d` i8, see [`super::quant`]) so one kernel call
//! ranks a whole node, and per-entry scalars. Children are resolved on first
//! use into a `OnceLock`, so a hot hierarchy is walked through plain
//! pointers with no hashing, decoding or locking, and every node is decoded
//! at most once per [`super::Searcher`] (a racing duplicate load is
//! discarded).

use super::quant::{quantize, QuantStats, EPS};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::proximity::format::{ExternalVector, NodeKind, ProxNode, VectorRef};
use crate::store::BlockStore;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Inflation of stored covering radii that absorbs the f64 summation error
/// of the canonical distances they were derived from, compounded over up to
/// 64 levels plus directory summaries: a radius `r` covers every record
/// below within real Euclidean distance `r·(1 + RADIUS_SLACK_PER_DIM·(d+4))`.
const RADIUS_SLACK_PER_DIM: f64 = 256.0 * EPS;

/// `(min_key, max_key)` of an entry.
type KeyBounds = (Box<[u8]>, Box<[u8]>);

/// One search-ready PRXN node.
#[derive(Debug)]
pub(crate) struct Node {
    /// CID of the PRXN object.
    pub(crate) cid: Cid,
    /// Hierarchy level.
    pub(crate) level: u8,
    /// True when entries are records (point summaries).
    pub(crate) leafy: bool,
    /// True for overflow directories.
    pub(crate) directory: bool,
    /// Number of entries.
    pub(crate) len: usize,
    keys: Vec<u8>,
    /// `key_end[i]` = end of entry `i`'s key in `keys` (start is `key_end[i-1]`).
    key_end: Vec<usize>,
    /// `[min_key, max_key]` of each entry (empty for logical leaves, whose
    /// bounds equal their key).
    bounds: Vec<KeyBounds>,
    /// `len·dims` prepared components, entry-major.
    pub(crate) vectors: Vec<f32>,
    /// The entries' 8-bit codes: quantized at decode for route nodes, on
    /// first use for leaf pages (which the arena-based searches never rank
    /// by these codes, so opening a map does not quantize every record
    /// twice).
    quant: OnceLock<Quant>,
    /// Per-entry covering radius, inflated by the safety slack.
    pub(crate) radius: Vec<f64>,
    /// Records below each entry.
    pub(crate) count: Vec<u64>,
    child_cid: Vec<Cid>,
    children: Vec<OnceLock<Arc<Node>>>,
}

/// A node's entry codes and their scalars.
#[derive(Debug)]
pub(crate) struct Quant {
    /// `len·dims` codes, entry-major.
    pub(crate) codes: Vec<i8>,
    /// Per-entry code scalars.
    pub(crate) stats: Vec<QuantStats>,
}

impl Quant {
    /// The codes of `n` entries of `d` components in `vectors`.
    fn of(vectors: &[f32], n: usize, d: usize) -> Quant {
        let mut codes = vec![0; n * d];
        let stats = (0..n)
            .map(|i| quantize(&vectors[i * d..(i + 1) * d], &mut codes[i * d..(i + 1) * d]))
            .collect();
        Quant { codes, stats }
    }
}

impl Node {
    /// The entries' codes and scalars (quantized now on a leaf page's
    /// first use; a racing duplicate is discarded).
    #[inline]
    pub(crate) fn quant(&self) -> &Quant {
        self.quant.get_or_init(|| {
            let d = self.vectors.len().checked_div(self.len).unwrap_or(0);
            Quant::of(&self.vectors, self.len, d)
        })
    }

    /// Entry `i`'s key.
    #[inline]
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.key_end[i - 1] };
        &self.keys[start..self.key_end[i]]
    }

    /// Entry `i`'s `[min_key, max_key]`.
    #[inline]
    pub(crate) fn bounds(&self, i: usize) -> (&[u8], &[u8]) {
        if self.leafy {
            let k = self.key(i);
            (k, k)
        } else {
            let (a, b) = &self.bounds[i];
            (a, b)
        }
    }

    /// Entry `i`'s prepared vector.
    #[inline]
    pub(crate) fn vector(&self, i: usize, dims: usize) -> &[f32] {
        &self.vectors[i * dims..(i + 1) * dims]
    }

    /// Entry `i`'s child node, loading it on first use.
    pub(crate) fn child(&self, i: usize, loader: &Loader<'_>) -> Result<&Arc<Node>> {
        let cell = &self.children[i];
        if let Some(n) = cell.get() {
            return Ok(n);
        }
        let node = Arc::new(loader.load(&self.child_cid[i])?);
        self.adopt(i, node)
    }

    /// Entry `i`'s child once loaded (`None` before).
    #[inline]
    pub(crate) fn loaded_child(&self, i: usize) -> Option<&Arc<Node>> {
        self.children.get(i)?.get()
    }

    /// Entry `i`'s child CID (`None` for records).
    #[inline]
    pub(crate) fn child_cid(&self, i: usize) -> Option<&Cid> {
        self.child_cid.get(i)
    }

    /// Installs `node` as entry `i`'s child after checking its level; a
    /// racing duplicate load is discarded.
    pub(crate) fn adopt(&self, i: usize, node: Arc<Node>) -> Result<&Arc<Node>> {
        // Directories keep their children at their own level; every other
        // node with children sits exactly one level above them. (Child
        // levels therefore never rise, so descent always terminates.)
        let expected = if self.directory {
            Some(self.level)
        } else {
            self.level.checked_sub(1)
        };
        if Some(node.level) != expected {
            return Err(Error::Corrupt {
                cid: node.cid,
                reason: format!(
                    "PRXN child at level {} under a node at level {}",
                    node.level, self.level
                ),
            });
        }
        let cell = &self.children[i];
        let _ = cell.set(node);
        Ok(cell.get().expect("OnceLock was just set"))
    }
}

/// Fetches and decodes PRXN nodes for one map.
#[derive(Clone, Copy)]
pub(crate) struct Loader<'s> {
    /// Where the objects live.
    pub(crate) store: &'s dyn BlockStore,
    /// The map's dimensions.
    pub(crate) dims: u32,
    /// PRXN read limit (`max_page_bytes`, section 6.6).
    pub(crate) max_page: usize,
}

impl std::fmt::Debug for Loader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("dims", &self.dims)
            .field("max_page", &self.max_page)
            .finish()
    }
}

impl Loader<'_> {
    fn fetch(&self, cid: &Cid) -> Result<bytes::Bytes> {
        self.store.get(cid)?.ok_or(Error::NotFound { cid: *cid })
    }

    /// Loads the PRXN node `cid` into its search form.
    pub(crate) fn load(&self, cid: &Cid) -> Result<Node> {
        let bytes = self.fetch(cid)?;
        let node = self.decode(cid, &bytes)?;
        self.build(*cid, node, &|v| self.fetch(v))
    }

    /// Loads the PRXN nodes `cids` (distinct) with one
    /// [`BlockStore::get_many`], plus one more for the external vectors
    /// they name, if any; decoding runs in parallel. Results are in order.
    pub(crate) fn load_many(&self, cids: &[Cid]) -> Result<Vec<Node>> {
        let blocks = self.store.get_many(cids)?;
        if blocks.len() != cids.len() {
            return Err(Error::InvalidArgument(format!(
                "store answered {} blocks for {} CIDs",
                blocks.len(),
                cids.len()
            )));
        }
        let raw: Vec<ProxNode> = cids
            .par_iter()
            .zip(blocks.into_par_iter())
            .map(|(cid, b)| self.decode(cid, &b.ok_or(Error::NotFound { cid: *cid })?))
            .collect::<Result<_>>()?;
        let mut external: Vec<Cid> = raw
            .iter()
            .flat_map(|n| n.entries.iter().filter_map(|e| e.vector.external()))
            .collect();
        external.sort_unstable();
        external.dedup();
        let vectors: HashMap<Cid, bytes::Bytes> = if external.is_empty() {
            HashMap::new()
        } else {
            let got = self.store.get_many(&external)?;
            external
                .iter()
                .zip(got)
                .filter_map(|(c, b)| Some((*c, b?)))
                .collect()
        };
        let lookup = |c: &Cid| vectors.get(c).cloned().ok_or(Error::NotFound { cid: *c });
        cids.par_iter()
            .zip(raw.into_par_iter())
            .map(|(cid, node)| self.build(*cid, node, &lookup))
            .collect()
    }

    /// Checks the read limit and decodes a PRXN object.
    fn decode(&self, cid: &Cid, bytes: &[u8]) -> Result<ProxNode> {
        if bytes.len() > self.max_page {
            return Err(Error::Corrupt {
                cid: *cid,
                reason: format!(
                    "PRXN node of {} bytes exceeds max_page_bytes {}",
                    bytes.len(),
                    self.max_page
                ),
            });
        }
        ProxNode::decode(bytes, self.dims).map_err(|e| Error::Corrupt {
            cid: *cid,
            reason: e.to_string(),
        })
    }

    /// The search form of `node`; `vector` returns an external vector's
    /// bytes.
    fn build(
        &self,
        cid: Cid,
        node: ProxNode,
        vector: &(dyn Fn(&Cid) -> Result<bytes::Bytes> + Sync),
    ) -> Result<Node> {
        let d = self.dims as usize;
        let n = node.entries.len();
        let leafy = node.is_logical_leaf();
        let slack = 1.0 + RADIUS_SLACK_PER_DIM * (d as f64 + 4.0);
        let mut out = Node {
            cid,
            level: node.level,
            leafy,
            directory: node.kind == NodeKind::OverflowDirectory,
            len: n,
            keys: Vec::with_capacity(node.entries.iter().map(|e| e.key.len()).sum()),
            key_end: Vec::with_capacity(n),
            bounds: Vec::with_capacity(if leafy { 0 } else { n }),
            vectors: Vec::with_capacity(n * d),
            quant: OnceLock::new(),
            radius: Vec::with_capacity(n),
            count: Vec::with_capacity(n),
            child_cid: Vec::with_capacity(n),
            children: Vec::new(),
        };
        for e in node.entries {
            out.keys.extend_from_slice(&e.key);
            out.key_end.push(out.keys.len());
            match e.vector {
                VectorRef::Inline(v) => out.vectors.extend_from_slice(&v),
                VectorRef::External(vcid) => {
                    let bytes = vector(&vcid)?;
                    let v = ExternalVector::decode(&bytes).map_err(|err| Error::Corrupt {
                        cid: vcid,
                        reason: err.to_string(),
                    })?;
                    if v.vector.len() != d {
                        return Err(Error::Corrupt {
                            cid: vcid,
                            reason: format!(
                                "external vector has {} components, map has {d}",
                                v.vector.len()
                            ),
                        });
                    }
                    out.vectors.extend_from_slice(&v.vector);
                }
            }
            out.radius.push(e.radius * slack);
            out.count.push(e.count);
            if !leafy {
                out.bounds
                    .push((e.min_key.into_boxed_slice(), e.max_key.into_boxed_slice()));
            }
            if let Some(c) = e.child {
                out.child_cid.push(c);
            }
        }
        if out.child_cid.len() != if leafy { 0 } else { n } {
            return Err(Error::Corrupt {
                cid,
                reason: "child CIDs do not match the node kind".into(),
            });
        }
        out.children = (0..out.child_cid.len()).map(|_| OnceLock::new()).collect();
        if !leafy {
            let _ = out.quant.set(Quant::of(&out.vectors, n, d));
        }
        Ok(out)
    }
}
