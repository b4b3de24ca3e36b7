//! Opening a map (section 6.6), exact lookups through the ordered
//! directory, the node/vector/quantizer accessors a search needs, and the
//! whole-index audit of section 13.

use super::format::{
    Descriptor, ExternalVector, NodeKind, ProxNode, ProximityConfig, Quantizer, Record, VectorRef,
};
use super::math::{promotion_level, radius_up};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::prolly;
use crate::store::{BlockStore, MemStore};
use bytes::Bytes;
use prox_kernels::{canonical, Metric};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};

/// A record as given to the builder (and returned by
/// [`ProximityMap::records`]): key, raw vector, value.
pub type InputRecord = (Vec<u8>, Vec<f32>, Vec<u8>);

/// An opened proximity map: a descriptor and the store holding its objects.
///
/// Cheap to clone; holds no caches. Every PRXN read is limited to the
/// descriptor's `max_page_bytes` and every fetched block is verified against
/// its CID by the store.
#[derive(Clone)]
pub struct ProximityMap<'s> {
    store: &'s dyn BlockStore,
    cid: Cid,
    descriptor: Descriptor,
}

impl std::fmt::Debug for ProximityMap<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProximityMap")
            .field("descriptor", &self.cid)
            .field("records", &self.descriptor.record_count)
            .field("dims", &self.descriptor.config.dims)
            .field("metric", &self.descriptor.config.metric)
            .finish()
    }
}

/// What [`ProximityMap::verify`] examined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records in the directory.
    pub records: u64,
    /// Ordered directory nodes.
    pub directory_nodes: u64,
    /// PRXN nodes (all physical kinds).
    pub nodes: u64,
    /// Distinct `PRXV` objects.
    pub external_vectors: u64,
    /// Distinct `PQS8` objects.
    pub quantizers: u64,
}

fn corrupt(cid: Cid, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        cid,
        reason: reason.into(),
    }
}

impl<'s> ProximityMap<'s> {
    pub(crate) fn from_parts(store: &'s dyn BlockStore, cid: Cid, descriptor: Descriptor) -> Self {
        ProximityMap {
            store,
            cid,
            descriptor,
        }
    }

    /// Opens the map whose descriptor is `descriptor_cid` (section 6.6):
    /// fetches and decodes the descriptor (a legacy one fails with
    /// [`Error::UnsupportedProximityVersion`]), fetches the PRXN root
    /// (refused above `max_page_bytes`), decodes it with the descriptor's
    /// dimensions and requires its subtree count to equal the record count.
    pub fn load(store: &'s dyn BlockStore, descriptor_cid: Cid) -> Result<ProximityMap<'s>> {
        let bytes = fetch(store, &descriptor_cid)?;
        let descriptor = Descriptor::decode(&bytes)?;
        let map = ProximityMap::from_parts(store, descriptor_cid, descriptor);
        let root = map.node(&map.descriptor.root)?;
        if root.subtree_count != map.descriptor.record_count {
            return Err(corrupt(
                map.descriptor.root,
                format!(
                    "root subtree count {} differs from descriptor record count {}",
                    root.subtree_count, map.descriptor.record_count
                ),
            ));
        }
        Ok(map)
    }

    /// [`ProximityMap::load`] without reading the root node: the caller
    /// checks the root's subtree count (as [`super::search::Searcher::new`]
    /// does), so a cold open reads the root once.
    pub(crate) fn load_unchecked(
        store: &'s dyn BlockStore,
        descriptor_cid: Cid,
    ) -> Result<ProximityMap<'s>> {
        let bytes = fetch(store, &descriptor_cid)?;
        let descriptor = Descriptor::decode(&bytes)?;
        Ok(ProximityMap::from_parts(store, descriptor_cid, descriptor))
    }

    /// The store the map lives in.
    pub fn store(&self) -> &'s dyn BlockStore {
        self.store
    }

    /// The decoded descriptor.
    pub fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    /// The descriptor's CID: the map's version identity.
    pub fn descriptor_cid(&self) -> Cid {
        self.cid
    }

    /// The build configuration.
    pub fn config(&self) -> &ProximityConfig {
        &self.descriptor.config
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.descriptor.record_count
    }

    /// True when the map has no records.
    pub fn is_empty(&self) -> bool {
        self.descriptor.record_count == 0
    }

    /// Vector dimensions.
    pub fn dims(&self) -> u32 {
        self.descriptor.config.dims
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.descriptor.config.metric
    }

    /// The PRXN root CID.
    pub fn root_cid(&self) -> Cid {
        self.descriptor.root
    }

    /// The ordered directory (key -> `PRVR` bytes) as a prolly tree.
    pub fn directory(&self) -> Result<prolly::Tree<'s>> {
        let d = &self.descriptor.directory;
        prolly::Tree::open(self.store, d.config.clone(), d.root)
    }

    /// The record stored under `key`: its prepared vector and its value.
    pub fn get(&self, key: &[u8]) -> Result<Option<(Vec<f32>, Vec<u8>)>> {
        match self.directory()?.get(key)? {
            None => Ok(None),
            Some(bytes) => {
                let r = Record::decode(&bytes, self.dims())?;
                Ok(Some((r.vector, r.value)))
            }
        }
    }

    /// True when a record with `key` exists.
    pub fn contains_key(&self, key: &[u8]) -> Result<bool> {
        self.directory()?.contains(key)
    }

    /// Every record in key order: `(key, prepared vector, value)`.
    pub fn records(&self) -> Result<Vec<InputRecord>> {
        let mut out = Vec::with_capacity(self.len().min(1 << 20) as usize);
        for item in self.directory()?.iter() {
            let (k, v) = item?;
            let r = Record::decode(&v, self.dims())?;
            out.push((k, r.vector, r.value));
        }
        Ok(out)
    }

    /// Fetches and decodes the PRXN node `cid`, refusing nodes longer than
    /// `max_page_bytes` (section 6.6).
    pub fn node(&self, cid: &Cid) -> Result<ProxNode> {
        let bytes = fetch(self.store, cid)?;
        let max = self.descriptor.config.max_page_bytes as usize;
        if bytes.len() > max {
            return Err(corrupt(
                *cid,
                format!(
                    "PRXN node of {} bytes exceeds max_page_bytes {max}",
                    bytes.len()
                ),
            ));
        }
        ProxNode::decode(&bytes, self.dims())
    }

    /// The components of an entry's vector, fetching a `PRXV` when the
    /// vector is external (its dimensions must match the map's).
    pub fn resolve_vector(&self, v: &VectorRef) -> Result<Vec<f32>> {
        match v {
            VectorRef::Inline(x) => Ok(x.clone()),
            VectorRef::External(cid) => {
                let x = ExternalVector::decode(&fetch(self.store, cid)?)?;
                if x.vector.len() != self.dims() as usize {
                    return Err(corrupt(
                        *cid,
                        format!(
                            "external vector has {} components, map has {}",
                            x.vector.len(),
                            self.dims()
                        ),
                    ));
                }
                Ok(x.vector)
            }
        }
    }

    /// Fetches and decodes a node's `PQS8` quantizer, checking its shape
    /// against the map's configuration.
    pub fn quantizer(&self, cid: &Cid) -> Result<Quantizer> {
        let q = Quantizer::decode(&fetch(self.store, cid)?)?;
        if q.dims != self.dims() || Some(q.group_size) != self.descriptor.config.sq8_group_size {
            return Err(corrupt(
                *cid,
                "quantizer dimensions/group size differ from the descriptor",
            ));
        }
        Ok(q)
    }

    /// The whole-index audit of section 13 plus the decode-time rules of
    /// every reachable object. Returns the first violation as
    /// [`Error::Corrupt`] naming the offending object's CID.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        let desc_bytes = fetch(self.store, &self.cid)?;
        let again =
            Descriptor::decode(&desc_bytes).map_err(|e| corrupt(self.cid, e.to_string()))?;
        if again != self.descriptor {
            return Err(corrupt(self.cid, "descriptor differs from the loaded one"));
        }
        let dir = self.verify_directory(&mut report)?;
        let mut audit = Audit {
            map: self,
            dir: &dir,
            seen_nodes: HashSet::new(),
            seen_vectors: HashSet::new(),
            seen_quantizers: HashSet::new(),
            leaf_seen: vec![false; dir.keys.len()],
            report: &mut report,
        };
        let root = self.descriptor.root;
        let node = audit.fetch_node(&root)?;
        let below = audit.visit(root, node, None, None)?;
        if below.len() as u64 != self.descriptor.record_count {
            return Err(corrupt(
                root,
                format!(
                    "hierarchy holds {} records, descriptor says {}",
                    below.len(),
                    self.descriptor.record_count
                ),
            ));
        }
        if let Some(i) = audit.leaf_seen.iter().position(|s| !s) {
            return Err(corrupt(
                root,
                format!(
                    "record {} is missing from the hierarchy",
                    hex::encode(&dir.keys[i])
                ),
            ));
        }
        report.records = dir.keys.len() as u64;
        Ok(report)
    }

    /// Reads every directory record, checks the tree is the canonical build
    /// of its entries (12.2) and the record count.
    fn verify_directory(&self, report: &mut VerifyReport) -> Result<DirRecords> {
        let d = &self.descriptor.directory;
        let at = d.root.unwrap_or(self.cid);
        let mut keys = Vec::new();
        let mut vectors = Vec::new();
        let mut entries = Vec::new();
        let dims = self.dims();
        let tree = self
            .directory()
            .map_err(|e| corrupt(self.cid, e.to_string()))?;
        for item in tree.iter() {
            let (k, v) = item.map_err(|e| corrupt(at, format!("directory: {e}")))?;
            let r = Record::decode(&v, dims)
                .map_err(|e| corrupt(at, format!("record {}: {e}", hex::encode(&k))))?;
            let again = super::math::prepare(self.metric(), dims, &r.vector, Some(&k))
                .map_err(|e| corrupt(at, format!("record {}: {e}", hex::encode(&k))))?;
            if again != r.vector {
                return Err(corrupt(
                    at,
                    format!("record {}: vector is not prepared (11.1)", hex::encode(&k)),
                ));
            }
            vectors.extend_from_slice(&r.vector);
            keys.push(k.clone());
            entries.push((k, v));
        }
        if keys.len() as u64 != self.descriptor.record_count {
            return Err(corrupt(
                at,
                format!(
                    "directory holds {} records, descriptor says {}",
                    keys.len(),
                    self.descriptor.record_count
                ),
            ));
        }
        // The directory must be the canonical tree of its entries; rebuild
        // it in a scratch store and compare roots.
        let scratch = MemStore::new();
        let rebuilt = prolly::build_sorted(&scratch, &d.config, entries)
            .map_err(|e| corrupt(at, format!("directory: {e}")))?;
        if rebuilt != d.root {
            return Err(corrupt(
                at,
                "directory is not the canonical tree of its records",
            ));
        }
        report.directory_nodes = scratch.cids()?.len() as u64;
        let index = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), i as u32))
            .collect();
        Ok(DirRecords {
            keys,
            vectors,
            index,
            dims: dims as usize,
        })
    }
}

/// Fetches a block or fails with [`Error::NotFound`].
pub(crate) fn fetch(store: &dyn BlockStore, cid: &Cid) -> Result<Bytes> {
    store.get(cid)?.ok_or(Error::NotFound { cid: *cid })
}

/// The directory's records, indexed by key.
struct DirRecords {
    keys: Vec<Vec<u8>>,
    vectors: Vec<f32>,
    index: HashMap<Vec<u8>, u32>,
    dims: usize,
}

impl DirRecords {
    fn vector(&self, i: u32) -> &[f32] {
        &self.vectors[i as usize * self.dims..(i as usize + 1) * self.dims]
    }
}

/// The parent context of a non-directory node (section 13): the parent
/// entry's record and the records of the parent node's entries.
#[derive(Clone)]
struct Context {
    parent: u32,
    siblings: std::sync::Arc<Vec<u32>>,
}

struct Audit<'a, 's> {
    map: &'a ProximityMap<'s>,
    dir: &'a DirRecords,
    seen_nodes: HashSet<Cid>,
    seen_vectors: HashSet<Cid>,
    seen_quantizers: HashSet<Cid>,
    leaf_seen: Vec<bool>,
    report: &'a mut VerifyReport,
}

impl Audit<'_, '_> {
    fn fetch_node(&mut self, cid: &Cid) -> Result<ProxNode> {
        if !self.seen_nodes.insert(*cid) {
            return Err(corrupt(*cid, "PRXN node reachable twice"));
        }
        self.report.nodes += 1;
        self.map.node(cid).map_err(|e| match e {
            Error::Corrupt { .. } | Error::NotFound { .. } => e,
            other => corrupt(*cid, other.to_string()),
        })
    }

    /// Audits the subtree of `node` (stored at `cid`) and returns the
    /// records below it. `expected_level` is `None` for the root.
    fn visit(
        &mut self,
        cid: Cid,
        node: ProxNode,
        expected_level: Option<u8>,
        ctx: Option<&Context>,
    ) -> Result<Vec<u32>> {
        let map = self.map;
        let config = map.config();
        if let Some(l) = expected_level {
            if node.level != l {
                return Err(corrupt(
                    cid,
                    format!("node at level {}, expected {l}", node.level),
                ));
            }
        }
        if node.entries.is_empty() && !map.is_empty() {
            return Err(corrupt(cid, "empty node in a non-empty map"));
        }
        // Resolve vectors; every entry's key/vector must be a record's.
        let external = config.external_vectors();
        let mut recs = Vec::with_capacity(node.entries.len());
        let mut vectors: Vec<Vec<f32>> = Vec::with_capacity(node.entries.len());
        for e in &node.entries {
            if external != e.vector.external().is_some() {
                return Err(corrupt(
                    cid,
                    "vector storage differs from inline_threshold_bytes (12.6)",
                ));
            }
            let v = match &e.vector {
                VectorRef::Inline(v) => v.clone(),
                VectorRef::External(vc) => {
                    if self.seen_vectors.insert(*vc) {
                        self.report.external_vectors += 1;
                    }
                    let bytes = fetch(map.store, vc)?;
                    let x = ExternalVector::decode(&bytes)
                        .map_err(|err| corrupt(*vc, err.to_string()))?;
                    if x.vector.len() != self.dir.dims {
                        return Err(corrupt(
                            *vc,
                            "external vector dimensions differ from the map's",
                        ));
                    }
                    x.vector
                }
            };
            let Some(&r) = self.dir.index.get(&e.key) else {
                return Err(corrupt(
                    cid,
                    format!("entry key {} is not a record key", hex::encode(&e.key)),
                ));
            };
            if v.iter()
                .zip(self.dir.vector(r))
                .any(|(a, b)| a.to_bits() != b.to_bits())
            {
                return Err(corrupt(
                    cid,
                    format!(
                        "entry {} vector differs from its record",
                        hex::encode(&e.key)
                    ),
                ));
            }
            recs.push(r);
            vectors.push(v);
        }
        // Quantizer.
        match (node.quantizer, config.sq8_group_size) {
            (None, None) => {}
            (Some(q), Some(g)) => {
                if self.seen_quantizers.insert(q) {
                    self.report.quantizers += 1;
                }
                let got = map.quantizer(&q).map_err(|e| match e {
                    Error::Corrupt { .. } | Error::NotFound { .. } => e,
                    other => corrupt(q, other.to_string()),
                })?;
                let want = Quantizer::derive(vectors.iter().map(|v| v.as_slice()), config.dims, g)?;
                if got != want {
                    return Err(corrupt(
                        q,
                        "quantizer differs from the one derived from the node (12.7)",
                    ));
                }
            }
            _ => {
                return Err(corrupt(
                    cid,
                    "quantizer presence differs from the descriptor's SQ8 setting",
                ))
            }
        }
        let directory = node.kind == NodeKind::OverflowDirectory;
        // Promotion levels (directories exempt).
        if !directory {
            for e in &node.entries {
                let l = promotion_level(&e.key, config.log_chunk_size, config.level_hash_seed);
                if l < node.level {
                    return Err(corrupt(
                        cid,
                        format!(
                            "entry {} has promotion level {l} below node level {}",
                            hex::encode(&e.key),
                            node.level
                        ),
                    ));
                }
            }
        }
        // Nearest-representative invariant (entries checked in parallel; the
        // first violation in entry order is reported).
        if let (false, Some(ctx)) = (directory, ctx) {
            let metric = map.metric();
            let p = ctx.parent;
            let dir = self.dir;
            let bad = recs
                .par_iter()
                .zip(vectors.par_iter())
                .filter(|(&r, _)| r != p)
                .find_map_first(|(&r, v)| {
                    let sp = canonical::score(metric, v, dir.vector(p));
                    ctx.siblings
                        .iter()
                        .find(|&&q| {
                            let sq = canonical::score(metric, v, dir.vector(q));
                            sq < sp || (sq == sp && q < p)
                        })
                        .map(|&q| (r, q))
                });
            if let Some((r, q)) = bad {
                return Err(corrupt(
                    cid,
                    format!(
                        "entry {} is nearer to {} than to its representative {}",
                        hex::encode(&dir.keys[r as usize]),
                        hex::encode(&dir.keys[q as usize]),
                        hex::encode(&dir.keys[p as usize])
                    ),
                ));
            }
        }
        // Children and summaries.
        let mut all = Vec::new();
        if node.is_logical_leaf() {
            for &r in &recs {
                if std::mem::replace(&mut self.leaf_seen[r as usize], true) {
                    return Err(corrupt(
                        cid,
                        format!(
                            "record {} appears twice in the hierarchy",
                            hex::encode(&self.dir.keys[r as usize])
                        ),
                    ));
                }
                all.push(r);
            }
            return Ok(all);
        }
        let child_level = if directory {
            node.level
        } else {
            node.level
                .checked_sub(1)
                .ok_or_else(|| corrupt(cid, "children below level 0"))?
        };
        let siblings = std::sync::Arc::new(recs.clone());
        for (i, e) in node.entries.iter().enumerate() {
            let child = e
                .child
                .expect("validated: entries of this kind have children");
            let child_node = self.fetch_node(&child)?;
            let child_ctx = if directory {
                ctx.cloned()
            } else {
                Some(Context {
                    parent: recs[i],
                    siblings: siblings.clone(),
                })
            };
            let below = self.visit(child, child_node, Some(child_level), child_ctx.as_ref())?;
            if below.len() as u64 != e.count {
                return Err(corrupt(
                    cid,
                    format!(
                        "entry {}: count {} but {} records below",
                        hex::encode(&e.key),
                        e.count,
                        below.len()
                    ),
                ));
            }
            let min = below.iter().copied().min().expect("count >= 1");
            let max = below.iter().copied().max().expect("count >= 1");
            if self.dir.keys[min as usize] != e.min_key || self.dir.keys[max as usize] != e.max_key
            {
                return Err(corrupt(
                    cid,
                    format!(
                        "entry {}: key bounds differ from its subtree",
                        hex::encode(&e.key)
                    ),
                ));
            }
            let centre = &vectors[i];
            let dir = self.dir;
            let uncovered = below.par_iter().find_first(|&&x| {
                e.radius < radius_up(canonical::l2sq(centre, dir.vector(x)), 0.0)
            });
            if let Some(&x) = uncovered {
                return Err(corrupt(
                    cid,
                    format!(
                        "entry {}: radius {} does not cover record {}",
                        hex::encode(&e.key),
                        e.radius,
                        hex::encode(&dir.keys[x as usize])
                    ),
                ));
            }
            all.extend(below);
        }
        Ok(all)
    }
}
