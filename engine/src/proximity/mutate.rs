//! Batched mutation of a proximity map (proximity-format.md 12.13).
//!
//! Contract: the map returned by [`ProximityMap::apply`] is byte-identical
//! (same descriptor CID, same object set) to a fresh
//! [`ProximityMap::build`] of the resulting record set with the same
//! configuration. The spec allows any method that keeps that equality; this
//! one works as follows.
//!
//! * The batch is validated first (sorted, no duplicate keys, every `Put`
//!   vector prepared with the map's metric, errors naming the record), so a
//!   bad batch writes nothing.
//! * The ordered directory is edited with [`prolly::Tree::batch`], which is
//!   canonical and copy-on-write: only the chunks around edited keys and
//!   their ancestors are rewritten.
//! * A batch whose every effective edit keeps the record's prepared vector
//!   bit for bit (value-only edits) keeps the PRXN root: the hierarchy does
//!   not depend on values.
//! * Otherwise only the affected part of the hierarchy is recomputed
//!   ([`Incremental`]), unless an edit touches the root group (see below).
//!
//! Locality argument (12.4). A record `x` of promotion level `ℓ` is a
//! member of exactly one group at level `ℓ`, `G[ℓ][path(x)]`, and a
//! representative of the chain of groups below itself. The descent of any
//! record `r` reads only the members of groups at levels above `r`'s level,
//! so `x` can influence the group of `r` only if `r` has a lower level and
//! its descent enters `G[ℓ][path(x)]`, i.e. `r` lies in the subtree of that
//! logical node. Hence, processing the hierarchy top-down:
//!
//! * at a logical node of level `L` none of whose members is edited, the
//!   members (and so the representatives the entries carry) are unchanged,
//!   and every edited record of lower level is routed to the child its
//!   canonical descent chooses there: the removal of an old record with its
//!   old vector, the insertion of a new one with its new vector;
//! * a level-0 node (a logical leaf) only gains or loses points;
//! * a node of level `L >= 1` with an edited member is rebuilt from the
//!   points of its subtree with the canonical assignment restricted to it
//!   ([`Hierarchy::assign_below`]), which equals the global assignment
//!   there;
//! * every touched node is re-stored from its (updated) entries and
//!   re-summarized, up to the root; untouched children keep their entries
//!   (CID, count, radius, key bounds) as decoded.
//!
//! An edit at the root's level (inserting a record promoted to or above the
//! top level, deleting or moving a top-level record) changes the root
//! group, which every record's descent reads: that is provably global, and
//! the hierarchy is then recomputed from the whole directory (as the
//! reference does). With `log_chunk_size = b`, a random key is promoted to
//! level `>= l` with probability `2^(-b·l)`, so a single-record edit costs
//! one root-to-leaf path (two for a move) with probability `1 − 2^(-b)`,
//! a level-`l` subtree of about `2^(b·l)` records with probability about
//! `2^(-b·l)`, and a full recomputation only for the top-level keys (about
//! `n·2^(-b·top)` of the `n` keys, a handful).

use super::build::{build_hierarchy, Ent, Hierarchy, Records, Writer};
use super::format::{Descriptor, DirectoryBlock, NodeEntry, NodeKind, ProximityConfig, Record};
use super::map::ProximityMap;
use super::math::{prepare, promotion_level};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::prolly;
use prox_kernels::canonical;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// One edit of a proximity map.
#[derive(Debug, Clone, PartialEq)]
pub enum Mutation {
    /// Insert `key`, or replace its vector and value.
    Put {
        /// Record key.
        key: Vec<u8>,
        /// Raw vector (prepared with the map's metric).
        vector: Vec<f32>,
        /// Opaque value.
        value: Vec<u8>,
    },
    /// Remove `key` (an absent key is ignored).
    Delete {
        /// Record key.
        key: Vec<u8>,
    },
}

impl Mutation {
    /// The key this mutation edits.
    pub fn key(&self) -> &[u8] {
        match self {
            Mutation::Put { key, .. } | Mutation::Delete { key } => key,
        }
    }
}

/// What one batch changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Records inserted.
    pub inserted: u64,
    /// Records whose vector changed.
    pub moved: u64,
    /// Records whose value alone changed (or that were re-put unchanged).
    pub value_only: u64,
    /// Records deleted.
    pub deleted: u64,
    /// Whether the PRXN hierarchy changed (any insert, move or delete).
    pub hierarchy_rebuilt: bool,
    /// Whether the hierarchy was recomputed from the whole record set (an
    /// edit reached the root group, or the map was or became empty)
    /// rather than locally.
    pub full_rebuild: bool,
    /// PRXN nodes (every physical kind) decoded to apply the batch.
    pub nodes_decoded: u64,
    /// PRXN nodes encoded (new or re-encoded to an existing CID).
    pub nodes_encoded: u64,
    /// Records whose group assignment was recomputed (the whole map for a
    /// full rebuild; the records of rebuilt subtrees otherwise).
    pub records_reassigned: u64,
}

impl<'s> ProximityMap<'s> {
    /// Applies `mutations` as one batch and returns the new map, stored in
    /// the same store (see the module docs for the equality contract).
    /// Duplicate keys in one batch are [`Error::DuplicateKey`].
    pub fn apply(&self, mutations: Vec<Mutation>) -> Result<ProximityMap<'s>> {
        Ok(self.apply_with_stats(mutations)?.0)
    }

    /// [`ProximityMap::apply`], also reporting what changed.
    pub fn apply_with_stats(
        &self,
        mut mutations: Vec<Mutation>,
    ) -> Result<(ProximityMap<'s>, ApplyStats)> {
        let config = self.config().clone();
        mutations.sort_by(|a, b| a.key().cmp(b.key()));
        if let Some(w) = mutations.windows(2).find(|w| w[0].key() == w[1].key()) {
            return Err(Error::DuplicateKey {
                key: w[0].key().to_vec(),
            });
        }
        // Validate and encode everything before writing anything.
        let mut edits = Vec::with_capacity(mutations.len());
        for m in &mutations {
            edits.push(match m {
                Mutation::Put { key, vector, value } => {
                    let v = prepare(config.metric, config.dims, vector, Some(key))?;
                    let bytes = Record::encode_parts(&v, value)?;
                    (key.clone(), Some((v, bytes)))
                }
                Mutation::Delete { key } => (key.clone(), None),
            });
        }
        let dir = self.directory()?;
        let keys: Vec<&[u8]> = edits.iter().map(|e| e.0.as_slice()).collect();
        let old = dir.get_many(&keys)?;
        let mut stats = ApplyStats::default();
        let mut count = self.len();
        let mut batch = Vec::with_capacity(edits.len());
        // Hierarchy edits: removals (old vectors) and insertions.
        let mut moves: Vec<Edit> = Vec::new();
        let level_of = |k: &[u8]| promotion_level(k, config.log_chunk_size, config.level_hash_seed);
        for ((key, new), old) in edits.into_iter().zip(old) {
            let old_vector = match &old {
                Some(bytes) => Some(Record::decode(bytes, config.dims)?.vector),
                None => None,
            };
            match (new, old_vector) {
                (None, None) => {}
                (None, Some(o)) => {
                    stats.deleted += 1;
                    count -= 1;
                    moves.push(Edit::new(key.clone(), o, level_of(&key), false));
                    batch.push(prolly::Mutation::Delete(key));
                }
                (Some((v, bytes)), old_vector) => {
                    match old_vector {
                        None => {
                            stats.inserted += 1;
                            count += 1;
                            moves.push(Edit::new(key.clone(), v, level_of(&key), true));
                        }
                        Some(o) if bits_equal(&o, &v) => stats.value_only += 1,
                        Some(o) => {
                            stats.moved += 1;
                            let l = level_of(&key);
                            moves.push(Edit::new(key.clone(), o, l, false));
                            moves.push(Edit::new(key.clone(), v, l, true));
                        }
                    }
                    batch.push(prolly::Mutation::Put(key, bytes));
                }
            }
        }
        let new_dir = dir.batch(batch)?;
        let structural = stats.inserted + stats.moved + stats.deleted > 0;
        let root = if structural {
            stats.hierarchy_rebuilt = true;
            let local = if count == 0 || self.is_empty() {
                None
            } else {
                let inc = Incremental::new(self, &config);
                let root = inc.apply(moves)?;
                stats.nodes_decoded = inc.decoded.load(Ordering::Relaxed);
                stats.nodes_encoded = inc.encoded.load(Ordering::Relaxed);
                stats.records_reassigned = inc.reassigned.load(Ordering::Relaxed);
                root
            };
            match local {
                Some(root) => root,
                None => {
                    stats.full_rebuild = true;
                    let recs = records_of(&new_dir, config.dims)?;
                    if recs.len() as u64 != count {
                        return Err(Error::Corrupt {
                            cid: self.descriptor_cid(),
                            reason: format!(
                                "directory holds {} records after the batch, expected {count}",
                                recs.len()
                            ),
                        });
                    }
                    stats.records_reassigned = recs.len() as u64;
                    let (root, encoded) = build_hierarchy(self.store(), &config, &recs)?;
                    stats.nodes_encoded = encoded;
                    root
                }
            }
        } else {
            self.descriptor().root
        };
        let descriptor = Descriptor {
            config,
            record_count: count,
            directory: DirectoryBlock {
                root: new_dir.root(),
                config: self.descriptor().directory.config.clone(),
            },
            root,
        };
        let cid = self.store().put(&descriptor.encode()?)?;
        Ok((
            ProximityMap::from_parts(self.store(), cid, descriptor),
            stats,
        ))
    }
}

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The prepared records of a directory, in key order.
fn records_of(dir: &prolly::Tree<'_>, dims: u32) -> Result<Records> {
    let mut keys = Vec::new();
    let mut vectors = Vec::new();
    for item in dir.iter() {
        let (k, v) = item?;
        vectors.extend_from_slice(&Record::decode(&v, dims)?.vector);
        keys.push(k);
    }
    Ok(Records {
        keys,
        vectors,
        dims: dims as usize,
    })
}

/// One change of the hierarchy's point set: the removal of a record with
/// its old prepared vector, or the insertion of one with its new vector.
struct Edit {
    key: Vec<u8>,
    vector: Vec<f32>,
    /// Promotion level (12.3).
    level: u8,
    add: bool,
}

impl Edit {
    fn new(key: Vec<u8>, vector: Vec<f32>, level: u8, add: bool) -> Edit {
        Edit {
            key,
            vector,
            level,
            add,
        }
    }
}

/// A logical entry with its vector resolved: what a parent stores for a
/// child (or a point, in a logical leaf).
#[derive(Clone)]
struct Entry {
    key: Vec<u8>,
    vector: Vec<f32>,
    child: Option<Cid>,
    count: u64,
    radius: f64,
    min_key: Vec<u8>,
    max_key: Vec<u8>,
}

/// Localized recomputation of the PRXN hierarchy (see the module docs).
struct Incremental<'m, 's> {
    map: &'m ProximityMap<'s>,
    config: &'m ProximityConfig,
    decoded: AtomicU64,
    encoded: AtomicU64,
    reassigned: AtomicU64,
}

impl<'m, 's> Incremental<'m, 's> {
    fn new(map: &'m ProximityMap<'s>, config: &'m ProximityConfig) -> Self {
        Incremental {
            map,
            config,
            decoded: AtomicU64::new(0),
            encoded: AtomicU64::new(0),
            reassigned: AtomicU64::new(0),
        }
    }

    fn corrupt(&self, cid: Cid, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            cid,
            reason: reason.into(),
        }
    }

    /// Applies the edits below the root; `None` when an edit reaches the
    /// root's level, which requires a full recomputation.
    fn apply(&self, edits: Vec<Edit>) -> Result<Option<Cid>> {
        let root = self.map.root_cid();
        let top = self.map.node(&root)?.level;
        self.decoded.fetch_add(1, Ordering::Relaxed);
        if edits.iter().any(|e| e.level >= top) {
            return Ok(None);
        }
        let edits: Vec<&Edit> = edits.iter().collect();
        let entry = self.update(root, top, None, &edits)?;
        Ok(entry.child)
    }

    /// The logical entries of the node stored at `cid` (level `level`):
    /// its own entries, or those of its overflow pages in order.
    fn logical_entries(&self, cid: Cid, level: u8) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        self.collect_pages(cid, level, true, &mut out)?;
        Ok(out)
    }

    fn collect_pages(&self, cid: Cid, level: u8, top: bool, out: &mut Vec<Entry>) -> Result<()> {
        let node = self.map.node(&cid)?;
        self.decoded.fetch_add(1, Ordering::Relaxed);
        if node.level != level {
            return Err(self.corrupt(
                cid,
                format!("node at level {} where {level} was expected", node.level),
            ));
        }
        let logical = if level == 0 {
            NodeKind::Leaf
        } else {
            NodeKind::Route
        };
        match node.kind {
            NodeKind::OverflowDirectory => {
                for e in &node.entries {
                    let child = e
                        .child
                        .ok_or_else(|| self.corrupt(cid, "directory entry without a child"))?;
                    self.collect_pages(child, level, false, out)?;
                }
                Ok(())
            }
            k if k == logical && top || k == NodeKind::OverflowPage && !top => {
                for e in node.entries {
                    out.push(self.resolve(e)?);
                }
                Ok(())
            }
            k => Err(self.corrupt(
                cid,
                format!("unexpected {k:?} node in a level-{level} logical node"),
            )),
        }
    }

    fn resolve(&self, e: NodeEntry) -> Result<Entry> {
        Ok(Entry {
            vector: self.map.resolve_vector(&e.vector)?,
            key: e.key,
            child: e.child,
            count: e.count,
            radius: e.radius,
            min_key: e.min_key,
            max_key: e.max_key,
        })
    }

    /// Every record (key, prepared vector) below the logical node at `cid`.
    fn points(&self, cid: Cid, level: u8) -> Result<Vec<(Vec<u8>, Vec<f32>)>> {
        let entries = self.logical_entries(cid, level)?;
        if level == 0 {
            return Ok(entries.into_iter().map(|e| (e.key, e.vector)).collect());
        }
        let parts = entries
            .par_iter()
            .map(|e| {
                let child = e
                    .child
                    .ok_or_else(|| self.corrupt(cid, "route entry without a child"))?;
                self.points(child, level - 1)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// Recomputes the logical node stored at `cid` (level `level`,
    /// representative `rep`; `None` for the root) under `edits`, all of
    /// which belong to its subtree, and returns the entry its parent
    /// stores for it.
    fn update(
        &self,
        cid: Cid,
        level: u8,
        rep: Option<(&[u8], &[f32])>,
        edits: &[&Edit],
    ) -> Result<Entry> {
        if level > 0 && edits.iter().any(|e| e.level >= level) {
            let rep = rep.ok_or_else(|| self.corrupt(cid, "edit at the root level"))?;
            return self.rebuild(cid, level, rep, edits);
        }
        let mut entries = self.logical_entries(cid, level)?;
        if entries.is_empty() {
            return Err(self.corrupt(cid, "empty logical node in a non-empty map"));
        }
        if level == 0 {
            for e in edits.iter().filter(|e| !e.add) {
                let i = entries
                    .binary_search_by(|x| x.key.as_slice().cmp(&e.key))
                    .map_err(|_| self.corrupt(cid, "edited record missing from its leaf"))?;
                entries.remove(i);
            }
            for e in edits.iter().filter(|e| e.add) {
                match entries.binary_search_by(|x| x.key.as_slice().cmp(&e.key)) {
                    Ok(_) => return Err(self.corrupt(cid, "inserted record already in its leaf")),
                    Err(i) => entries.insert(
                        i,
                        Entry {
                            key: e.key.clone(),
                            vector: e.vector.clone(),
                            child: None,
                            count: 1,
                            radius: 0.0,
                            min_key: e.key.clone(),
                            max_key: e.key.clone(),
                        },
                    ),
                }
            }
            if entries.is_empty() {
                // Only the representative's own point can empty a leaf, and
                // removing it is an edit at a higher level.
                return Err(self.corrupt(cid, "a leaf lost its representative"));
            }
        } else {
            // Members are unchanged: route each edit to the child its
            // canonical descent chooses (ties to the smaller key; entries
            // are in key order).
            let mut routed: Vec<Vec<&Edit>> = vec![Vec::new(); entries.len()];
            for &e in edits {
                let mut best = 0usize;
                let mut best_score = f64::INFINITY;
                for (i, x) in entries.iter().enumerate() {
                    let s = canonical::score(self.config.metric, &e.vector, &x.vector);
                    if s < best_score {
                        best = i;
                        best_score = s;
                    }
                }
                routed[best].push(e);
            }
            let updated = entries
                .par_iter()
                .zip(&routed)
                .map(|(x, es)| {
                    if es.is_empty() {
                        return Ok(None);
                    }
                    let child = x
                        .child
                        .ok_or_else(|| self.corrupt(cid, "route entry without a child"))?;
                    self.update(child, level - 1, Some((&x.key, &x.vector)), es)
                        .map(Some)
                })
                .collect::<Result<Vec<_>>>()?;
            for (slot, u) in entries.iter_mut().zip(updated) {
                if let Some(u) = u {
                    *slot = u;
                }
            }
        }
        self.store(level, entries, rep)
    }

    /// Rebuilds the subtree of a level-`level` node (level >= 1) one of
    /// whose members is edited, from its points and the edits.
    fn rebuild(&self, cid: Cid, level: u8, rep: (&[u8], &[f32]), edits: &[&Edit]) -> Result<Entry> {
        let mut points = self.points(cid, level)?;
        points.par_sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for e in edits.iter().filter(|e| !e.add) {
            let i = points
                .binary_search_by(|x| x.0.as_slice().cmp(&e.key))
                .map_err(|_| self.corrupt(cid, "edited record missing from its subtree"))?;
            points.remove(i);
        }
        for e in edits.iter().filter(|e| e.add) {
            match points.binary_search_by(|x| x.0.as_slice().cmp(&e.key)) {
                Ok(_) => return Err(self.corrupt(cid, "inserted record already in its subtree")),
                Err(i) => points.insert(i, (e.key.clone(), e.vector.clone())),
            }
        }
        let recs = Records::from_sorted(points, self.config.dims as usize);
        let rep_idx = recs
            .keys
            .binary_search_by(|k| k.as_slice().cmp(rep.0))
            .map_err(|_| self.corrupt(cid, "representative missing from its subtree"))?;
        let levels: Vec<u8> = recs
            .keys
            .par_iter()
            .map(|k| {
                promotion_level(k, self.config.log_chunk_size, self.config.level_hash_seed)
                    .min(level)
            })
            .collect();
        let h = Hierarchy::assign_below(
            self.config.metric,
            &recs,
            &levels,
            level,
            Some(rep_idx as u32),
        );
        self.reassigned
            .fetch_add(recs.len() as u64, Ordering::Relaxed);
        let w = Writer::new(self.map.store(), self.config, &recs);
        let ent = w.node(&h, 0)?;
        self.encoded.fetch_add(w.encoded(), Ordering::Relaxed);
        Ok(entry_of(&recs, &ent))
    }

    /// Stores a logical node from its entries (12.6-12.8) and summarizes
    /// it around `rep` (the smallest key for the root), as 12.5 does.
    fn store(&self, level: u8, entries: Vec<Entry>, rep: Option<(&[u8], &[f32])>) -> Result<Entry> {
        // Arena: the entries' (key, vector) rows, then their key bounds,
        // then the representative. Only entry and representative vectors
        // are read; the key-bound rows carry the entry's vector as filler.
        let n = entries.len();
        let mut rows: Vec<(Vec<u8>, Vec<f32>)> = Vec::with_capacity(3 * n + 1);
        let mut ents = Vec::with_capacity(n);
        for (i, e) in entries.iter().enumerate() {
            rows.push((e.key.clone(), e.vector.clone()));
            ents.push(Ent {
                rec: i as u32,
                child: e.child,
                count: e.count,
                radius: e.radius,
                min: (n + 2 * i) as u32,
                max: (n + 2 * i + 1) as u32,
            });
        }
        for e in &entries {
            rows.push((e.min_key.clone(), e.vector.clone()));
            rows.push((e.max_key.clone(), e.vector.clone()));
        }
        let rep_idx = match rep {
            Some((k, v)) => {
                rows.push((k.to_vec(), v.to_vec()));
                (3 * n) as u32
            }
            None => 0,
        };
        drop(entries);
        let recs = Records::from_sorted(rows, self.config.dims as usize);
        let w = Writer::new(self.map.store(), self.config, &recs);
        let kind = if level == 0 {
            NodeKind::Leaf
        } else {
            NodeKind::Route
        };
        let cid = w.store_logical(kind, level, &ents)?;
        self.encoded.fetch_add(w.encoded(), Ordering::Relaxed);
        Ok(entry_of(&recs, &w.summarize(cid, &ents, rep_idx)))
    }
}

fn entry_of(recs: &Records, e: &Ent) -> Entry {
    Entry {
        key: recs.key(e.rec).to_vec(),
        vector: recs.vector(e.rec).to_vec(),
        child: e.child,
        count: e.count,
        radius: e.radius,
        min_key: recs.key(e.min).to_vec(),
        max_key: recs.key(e.max).to_vec(),
    }
}
