//! The canonical builder (proximity-format.md 12.1-12.10).
//!
//! Pipeline: validate the configuration; sort records by key and refuse
//! duplicates; prepare every vector (11.1); bulk-build the ordered
//! directory (key -> `PRVR`) with [`prolly::build_sorted`] and the default
//! ordered config; compute promotion levels (12.3); assign records to
//! nearest-representative groups level by level (12.4); build logical nodes
//! bottom-up with their summaries (12.5); store each one in its physical
//! form with optional SQ8 quantizers and external vectors (12.6, 12.7),
//! paging oversized nodes into overflow pages and directories (12.8); and
//! finally write the descriptor (12.10).
//!
//! Determinism. Records are addressed by their index in key order, so
//! "smaller key" is "smaller index" everywhere. Parallel work (vector
//! preparation, the nearest-representative descent of every record of a
//! level, sibling subtrees) only computes values; every decision that shapes
//! the output is a pure function of the sorted records. Persisted numbers
//! (radii, SQ8 scales) come from [`super::math`] and the canonical kernels.
//!
//! The descent's argmin must equal the canonical argmin exactly, so it is
//! computed with canonical scores only: `canonical::scores` evaluates the
//! canonical score of one record against several candidates at once, with
//! one sequential f64 accumulator per candidate. Each accumulator performs
//! exactly the operations of `canonical::score` in the same order, so the
//! results are bit-identical to it (checked by a unit test), while the
//! independent accumulators keep the FPU pipeline busy. No approximate
//! shortlist is involved, hence no error-margin argument is needed.

use super::format::{
    entry_len, header_len, Descriptor, DirectoryBlock, ExternalVector, NodeEntry, NodeKind,
    ProxNode, ProximityConfig, Quantizer, Record, VectorRef,
};
use super::map::{InputRecord, ProximityMap};
use super::math::{prepare, promotion_level, radius_up};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::prolly;
use crate::store::BlockStore;
use prox_kernels::{canonical, Metric};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Prepared records in key order; index `i` is the `i`-th smallest key.
pub(crate) struct Records {
    pub(crate) keys: Vec<Vec<u8>>,
    /// `n · dims` prepared components, row-major.
    pub(crate) vectors: Vec<f32>,
    pub(crate) dims: usize,
}

impl Records {
    /// Records from `(key, prepared vector)` rows already sorted by key
    /// (strictly increasing; the caller guarantees it).
    pub(crate) fn from_sorted(rows: Vec<(Vec<u8>, Vec<f32>)>, dims: usize) -> Records {
        let mut keys = Vec::with_capacity(rows.len());
        let mut vectors = Vec::with_capacity(rows.len() * dims);
        for (k, v) in rows {
            debug_assert_eq!(v.len(), dims);
            keys.push(k);
            vectors.extend_from_slice(&v);
        }
        Records {
            keys,
            vectors,
            dims,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn vector(&self, i: u32) -> &[f32] {
        let d = self.dims;
        &self.vectors[i as usize * d..(i as usize + 1) * d]
    }

    pub(crate) fn key(&self, i: u32) -> &[u8] {
        &self.keys[i as usize]
    }
}

/// Sorts by key, refuses duplicates and prepares every vector. Errors name
/// the record; when several records are bad, the smallest key is reported.
pub(crate) fn prepare_records(
    config: &ProximityConfig,
    mut records: Vec<InputRecord>,
) -> Result<(Records, Vec<Vec<u8>>)> {
    if records.len() > u32::MAX as usize {
        return Err(Error::InvalidArgument(format!(
            "{} records exceed the builder's limit of 2^32 - 1",
            records.len()
        )));
    }
    records.par_sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = records.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::DuplicateKey {
            key: w[0].0.clone(),
        });
    }
    let dims = config.dims as usize;
    let prepared: Vec<Result<Vec<f32>>> = records
        .par_iter()
        .map(|(k, v, _)| prepare(config.metric, config.dims, v, Some(k)))
        .collect();
    let mut vectors = Vec::with_capacity(records.len() * dims);
    for p in prepared {
        vectors.extend_from_slice(&p?);
    }
    let mut keys = Vec::with_capacity(records.len());
    let mut values = Vec::with_capacity(records.len());
    for (k, _, v) in records {
        keys.push(k);
        values.push(v);
    }
    Ok((
        Records {
            keys,
            vectors,
            dims,
        },
        values,
    ))
}

/// One group `G[L][path]` of section 12.4. Groups form a tree: member `c`
/// of a group at level `L >= 1` owns the child group `chain[c][L-1]`.
struct Group {
    level: u8,
    /// Representative: last element of the path; `None` for the root.
    rep: Option<u32>,
    /// Member record indices (unsorted until the node is built).
    members: Vec<u32>,
}

/// Assignment of records to groups (12.3, 12.4).
pub(crate) struct Hierarchy {
    groups: Vec<Group>,
    /// `chain[r][L]`: the group at level `L` that record `r` represents, for
    /// every `L` below its promotion level.
    chain: Vec<Vec<u32>>,
    pub(crate) top: u8,
}

impl Hierarchy {
    /// Computes promotion levels and the group assignment.
    pub(crate) fn assign(config: &ProximityConfig, recs: &Records) -> Hierarchy {
        let levels: Vec<u8> = recs
            .keys
            .par_iter()
            .map(|k| promotion_level(k, config.log_chunk_size, config.level_hash_seed))
            .collect();
        let top = levels.iter().copied().max().unwrap_or(0);
        Self::assign_below(config.metric, recs, &levels, top, None)
    }

    /// The assignment of 12.4 for the subtree of one logical node at level
    /// `top` (group 0): `levels[i]` must be `min(promotion level, top)`.
    /// With `root_rep = Some(r)` the node is `G[top][p]` of a larger map
    /// whose path `p` ends with `r` (so `r`, promoted above `top`, is a
    /// member like the level-`top` records); `None` is the whole map.
    ///
    /// Why this equals the global assignment restricted to the subtree:
    /// a record's group at level `ℓ` depends only on the members of the
    /// groups its descent visits above `ℓ`, and the descent of every record
    /// of the subtree enters it through this node, whose members are
    /// exactly the records of the subtree with level `top`.
    pub(crate) fn assign_below(
        metric: Metric,
        recs: &Records,
        levels: &[u8],
        top: u8,
        root_rep: Option<u32>,
    ) -> Hierarchy {
        let n = recs.len();
        let mut h = Hierarchy {
            groups: vec![Group {
                level: top,
                rep: root_rep,
                members: Vec::new(),
            }],
            chain: vec![Vec::new(); n],
            top,
        };
        let mut by_level: Vec<Vec<u32>> = vec![Vec::new(); usize::from(top) + 1];
        for (i, &l) in levels.iter().enumerate() {
            by_level[usize::from(l)].push(i as u32);
        }
        for level in (0..=top).rev() {
            let members = std::mem::take(&mut by_level[usize::from(level)]);
            // All paths of this level against the current groups first ...
            let targets: Vec<u32> = members
                .par_iter()
                .map_init(Vec::new, |buf, &r| h.descend(metric, recs, r, level, buf))
                .collect();
            // ... then register them, in key order.
            for (&r, &g) in members.iter().zip(&targets) {
                h.groups[g as usize].members.push(r);
                let mut chain = vec![0u32; usize::from(level)];
                for l in (0..level).rev() {
                    chain[usize::from(l)] = h.groups.len() as u32;
                    h.groups.push(Group {
                        level: l,
                        rep: Some(r),
                        members: vec![r],
                    });
                }
                h.chain[r as usize] = chain;
            }
        }
        h
    }

    /// Greedy nearest-representative descent of record `r` (level `level`)
    /// from the root down to level `level + 1`; returns the group at
    /// `level` it joins. Ties go to the smaller key (index).
    fn descend(
        &self,
        metric: Metric,
        recs: &Records,
        r: u32,
        level: u8,
        buf: &mut Vec<f64>,
    ) -> u32 {
        self.descend_vector(metric, recs, recs.vector(r), level, buf)
    }

    /// [`Hierarchy::descend`] of a record given by its prepared vector `q`
    /// (a record of `level` that is not in `recs`: the streaming build
    /// assigns level-0 records this way).
    pub(crate) fn descend_vector(
        &self,
        metric: Metric,
        recs: &Records,
        q: &[f32],
        level: u8,
        buf: &mut Vec<f64>,
    ) -> u32 {
        let mut g = 0u32;
        let mut rows: Vec<&[f32]> = Vec::new();
        for l in ((level + 1)..=self.top).rev() {
            let cands = &self.groups[g as usize].members;
            rows.clear();
            rows.extend(cands.iter().map(|&c| recs.vector(c)));
            buf.clear();
            buf.resize(rows.len(), 0.0);
            canonical::scores(metric, q, &rows, buf);
            let mut best = 0usize;
            for j in 1..cands.len() {
                let (s, b) = (buf[j], buf[best]);
                if s < b || (s == b && cands[j] < cands[best]) {
                    best = j;
                }
            }
            g = self.chain[cands[best] as usize][usize::from(l) - 1];
        }
        g
    }
}

impl Hierarchy {
    /// The level-0 groups in id order, each with its representative (`None`
    /// only for the root of a map without promoted records).
    pub(crate) fn leaf_groups(&self) -> Vec<(u32, Option<u32>)> {
        self.groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.level == 0)
            .map(|(i, g)| (i as u32, g.rep))
            .collect()
    }

    /// Number of groups.
    pub(crate) fn group_count(&self) -> usize {
        self.groups.len()
    }
}

/// A logical or physical entry whose key and vector are records' (by
/// index): a point, or a summary of a stored child.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ent {
    /// Record whose key and vector the entry carries.
    pub(crate) rec: u32,
    pub(crate) child: Option<Cid>,
    pub(crate) count: u64,
    pub(crate) radius: f64,
    /// Record with the smallest key below.
    pub(crate) min: u32,
    /// Record with the largest key below.
    pub(crate) max: u32,
}

impl Ent {
    pub(crate) fn point(rec: u32) -> Ent {
        Ent {
            rec,
            child: None,
            count: 1,
            radius: 0.0,
            min: rec,
            max: rec,
        }
    }
}

/// Writes the physical hierarchy.
pub(crate) struct Writer<'a> {
    store: &'a dyn BlockStore,
    config: &'a ProximityConfig,
    recs: &'a Records,
    external: bool,
    /// Physical PRXN nodes encoded so far (stored or already present).
    encoded: AtomicU64,
    /// Summaries of groups already stored elsewhere, by group id: the
    /// streaming build writes the leaves itself and hands them in.
    done: Option<&'a [Option<Ent>]>,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(
        store: &'a dyn BlockStore,
        config: &'a ProximityConfig,
        recs: &'a Records,
    ) -> Writer<'a> {
        Writer {
            store,
            config,
            recs,
            external: config.external_vectors(),
            encoded: AtomicU64::new(0),
            done: None,
        }
    }

    /// Uses `done[g]`, where present, as the entry of group `g` instead of
    /// building it (see [`Writer::node`]).
    pub(crate) fn with_done(mut self, done: &'a [Option<Ent>]) -> Writer<'a> {
        self.done = Some(done);
        self
    }

    /// Physical PRXN nodes this writer has encoded.
    pub(crate) fn encoded(&self) -> u64 {
        self.encoded.load(Ordering::Relaxed)
    }

    /// `summarize(cid, entries, rep)` of 12.5.
    pub(crate) fn summarize(&self, cid: Cid, entries: &[Ent], rep: u32) -> Ent {
        let rv = self.recs.vector(rep);
        let mut radius = 0.0f64;
        let mut count = 0u64;
        let (mut min, mut max) = (rep, rep);
        for (i, e) in entries.iter().enumerate() {
            let r = radius_up(canonical::l2sq(rv, self.recs.vector(e.rec)), e.radius);
            if r > radius {
                radius = r;
            }
            count += e.count;
            // Keys, not indices: in incremental rebuilds the arena is not in
            // key order (in a full build both orders agree).
            if i == 0 || self.recs.key(e.min) < self.recs.key(min) {
                min = e.min;
            }
            if i == 0 || self.recs.key(e.max) > self.recs.key(max) {
                max = e.max;
            }
        }
        Ent {
            rec: rep,
            child: Some(cid),
            count,
            radius,
            min,
            max,
        }
    }

    /// Stored size of one entry in a node of `kind` at `level`.
    fn entry_size(&self, kind: NodeKind, level: u8, e: &Ent) -> usize {
        let vector = if self.external {
            Cid::LEN
        } else {
            4 * self.recs.dims
        };
        entry_len(
            self.recs.key(e.rec).len(),
            vector,
            kind.has_children(level),
            e.count,
            self.recs.key(e.min).len(),
            self.recs.key(e.max).len(),
        )
    }

    fn header_size(&self, count: u64, n: usize) -> usize {
        header_len(count, n, self.config.sq8_group_size.is_some())
    }

    /// Stored size of a node of `kind` at `level` holding `entries` (12.6).
    fn size(&self, kind: NodeKind, level: u8, entries: &[Ent]) -> usize {
        let count: u64 = entries.iter().map(|e| e.count).sum();
        self.header_size(count, entries.len())
            + entries
                .iter()
                .map(|e| self.entry_size(kind, level, e))
                .sum::<usize>()
    }

    fn too_large(&self, level: u8, size: usize) -> Error {
        Error::NodeTooLarge {
            level,
            size,
            max: self.config.max_page_bytes as usize,
        }
    }

    /// Emits the physical node (plus its PQS8 and PRXV objects) and returns
    /// its CID.
    fn persist(&self, kind: NodeKind, level: u8, entries: &[Ent]) -> Result<Cid> {
        let quantizer = match self.config.sq8_group_size {
            Some(g) => {
                let q = Quantizer::derive(
                    entries.iter().map(|e| self.recs.vector(e.rec)),
                    self.config.dims,
                    g,
                )?;
                Some(self.store.put(&q.encode()?)?)
            }
            None => None,
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let v = self.recs.vector(e.rec);
            let vector = if self.external {
                VectorRef::External(self.store.put(&ExternalVector::encode_parts(v, None)?)?)
            } else {
                VectorRef::Inline(v.to_vec())
            };
            out.push(NodeEntry {
                key: self.recs.key(e.rec).to_vec(),
                vector,
                child: e.child,
                count: e.count,
                radius: e.radius,
                min_key: self.recs.key(e.min).to_vec(),
                max_key: self.recs.key(e.max).to_vec(),
            });
        }
        let node = ProxNode {
            kind,
            level,
            subtree_count: entries.iter().map(|e| e.count).sum(),
            quantizer,
            entries: out,
        };
        let bytes = node.encode()?;
        self.encoded.fetch_add(1, Ordering::Relaxed);
        if bytes.len() > self.config.max_page_bytes as usize {
            return Err(self.too_large(level, bytes.len()));
        }
        self.store.put(&bytes)
    }

    /// Persists a physical node and summarizes it around its first entry.
    fn persist_summary(&self, kind: NodeKind, level: u8, entries: &[Ent]) -> Result<Ent> {
        let cid = self.persist(kind, level, entries)?;
        Ok(self.summarize(cid, entries, entries[0].rec))
    }

    /// Greedy content-defined split of 12.8.
    fn split(
        &self,
        entries: &[Ent],
        kind: NodeKind,
        level: u8,
    ) -> Result<Vec<std::ops::Range<usize>>> {
        let max = self.config.max_page_bytes as usize;
        let target = self.config.target_page_bytes as usize;
        let min = self.config.min_page_bytes as usize;
        let mut groups = Vec::new();
        let mut start = 0usize;
        let (mut sum, mut count) = (0usize, 0u64);
        for (i, e) in entries.iter().enumerate() {
            let es = self.entry_size(kind, level, e);
            if i > start && self.header_size(count + e.count, i - start + 1) + sum + es > max {
                groups.push(start..i);
                start = i;
                sum = 0;
                count = 0;
            }
            sum += es;
            count += e.count;
            let s = self.header_size(count, i - start + 1) + sum;
            if s > max {
                return Err(self.too_large(level, s));
            }
            let hash =
                xxhash_rust::xxh64::xxh64(self.recs.key(e.rec), self.config.overflow_hash_seed);
            if s >= target || (s >= min && hash % (target as u64) < s as u64) {
                groups.push(start..i + 1);
                start = i + 1;
                sum = 0;
                count = 0;
            }
        }
        if start < entries.len() {
            groups.push(start..entries.len());
        }
        Ok(groups)
    }

    /// `store_directory(L, E)` of 12.8; returns the top directory's CID.
    fn store_directory(&self, level: u8, entries: Vec<Ent>) -> Result<Cid> {
        let kind = NodeKind::OverflowDirectory;
        let size = self.size(kind, level, &entries);
        if size <= self.config.max_page_bytes as usize {
            return self.persist(kind, level, &entries);
        }
        let groups = self.split(&entries, kind, level)?;
        if groups.len() <= 1 {
            return Err(self.too_large(level, size));
        }
        let parents = groups
            .into_par_iter()
            .map(|r| self.persist_summary(kind, level, &entries[r]))
            .collect::<Result<Vec<_>>>()?;
        if parents.len() >= entries.len() {
            return Err(self.too_large(level, size));
        }
        self.store_directory(level, parents)
    }

    /// `store_logical(kind, L, entries)` of 12.8.
    pub(crate) fn store_logical(&self, kind: NodeKind, level: u8, entries: &[Ent]) -> Result<Cid> {
        if self.size(kind, level, entries) <= self.config.max_page_bytes as usize {
            return self.persist(kind, level, entries);
        }
        let pages = self
            .split(entries, NodeKind::OverflowPage, level)?
            .into_par_iter()
            .map(|r| self.persist_summary(NodeKind::OverflowPage, level, &entries[r]))
            .collect::<Result<Vec<_>>>()?;
        self.store_directory(level, pages)
    }

    /// `node(L, prefix)` of 12.5 for group `g`: builds and stores the
    /// subtree and returns the entry its parent stores.
    pub(crate) fn node(&self, h: &Hierarchy, g: u32) -> Result<Ent> {
        if let Some(Some(e)) = self.done.and_then(|d| d.get(g as usize)) {
            return Ok(*e);
        }
        let group = &h.groups[g as usize];
        let mut members = group.members.clone();
        members.sort_unstable();
        let rep = group.rep.unwrap_or(members[0]);
        let level = group.level;
        let entries: Vec<Ent> = if level == 0 {
            members.iter().map(|&m| Ent::point(m)).collect()
        } else {
            members
                .par_iter()
                .map(|&m| self.node(h, h.chain[m as usize][usize::from(level) - 1]))
                .collect::<Result<Vec<_>>>()?
        };
        let kind = if level == 0 {
            NodeKind::Leaf
        } else {
            NodeKind::Route
        };
        let cid = self.store_logical(kind, level, &entries)?;
        Ok(self.summarize(cid, &entries, rep))
    }

    /// The empty map's root (12.9).
    fn empty_root(&self) -> Result<Cid> {
        let quantizer = match self.config.sq8_group_size {
            Some(g) => {
                let q = Quantizer::derive(std::iter::empty::<&[f32]>(), self.config.dims, g)?;
                Some(self.store.put(&q.encode()?)?)
            }
            None => None,
        };
        self.store.put(&ProxNode::empty_leaf(quantizer).encode()?)
    }
}

/// Builds the PRXN hierarchy of prepared records; returns its root CID and
/// the number of physical nodes encoded.
pub(crate) fn build_hierarchy(
    store: &dyn BlockStore,
    config: &ProximityConfig,
    recs: &Records,
) -> Result<(Cid, u64)> {
    let w = Writer::new(store, config, recs);
    if recs.len() == 0 {
        return Ok((w.empty_root()?, 1));
    }
    let h = Hierarchy::assign(config, recs);
    let root = w
        .node(&h, 0)?
        .child
        .expect("node() always summarizes a stored child");
    Ok((root, w.encoded()))
}

impl<'s> ProximityMap<'s> {
    /// Builds a map canonically (sections 12.1-12.10) and stores every
    /// object in `store`. The descriptor CID depends only on the record set
    /// and `config`: not on input order, thread count or ISA.
    ///
    /// Errors: invalid configuration ([`Error::InvalidConfig`]); duplicate
    /// keys ([`Error::DuplicateKey`]); bad vectors, naming the record
    /// ([`Error::WrongDimension`], [`Error::NonFiniteVector`],
    /// [`Error::ZeroCosineVector`]); a node that cannot fit
    /// `max_page_bytes` ([`Error::NodeTooLarge`]); store failures.
    pub fn build(
        store: &'s dyn BlockStore,
        config: &ProximityConfig,
        records: Vec<InputRecord>,
    ) -> Result<ProximityMap<'s>> {
        config.validate()?;
        let (recs, values) = prepare_records(config, records)?;
        let encoded: Vec<Vec<u8>> = (0..recs.len())
            .into_par_iter()
            .map(|i| Record::encode_parts(recs.vector(i as u32), &values[i]))
            .collect::<Result<_>>()?;
        drop(values);
        let dir_config = prolly::Config::default();
        let dir_root =
            prolly::build_sorted(store, &dir_config, recs.keys.iter().cloned().zip(encoded))?;
        let (root, _) = build_hierarchy(store, config, &recs)?;
        let descriptor = Descriptor {
            config: config.clone(),
            record_count: recs.len() as u64,
            directory: DirectoryBlock {
                root: dir_root,
                config: dir_config,
            },
            root,
        };
        let cid = store.put(&descriptor.encode()?)?;
        Ok(ProximityMap::from_parts(store, cid, descriptor))
    }
}
