//! Localized recomputation of the PRXN hierarchy after a batch (12.4).
//!
//! Model. Every record's path is its greedy nearest-member descent: at each
//! level above its own it moves to the member (ties to the smaller key)
//! nearest to it among the members of its current group; at its own level
//! `ℓ` it becomes a member of that group and the representative of the
//! chain of groups below (it stays in its own child). So a group at level
//! `L` with representative `rep` holds a set `S` of records, its members
//! are the records of `S` of level `>= L`, and member `m`'s child holds the
//! records of `S` whose nearest member is `m` (plus `m`).
//!
//! [`Incremental::update`] takes a node and the records entering or
//! leaving its `S` (an [`Edit`] each) and recomputes it top-down:
//!
//! * members unchanged: every edit goes to the child its descent chooses
//!   (a removal with its old vector), and only those children are updated;
//! * members changed (a record of level `>= L` enters or leaves): the
//!   children of removed members are dissolved and their records sent to
//!   their nearest new member; records of surviving members' children that
//!   now prefer an added member move to it, found by a scan pruned with the
//!   covering radii (a record below entry `g` can prefer `x` over `c` only
//!   if `d(x,g) − r_g <= d(c,g) + r_g`); an added member's child is built
//!   from scratch from the records routed to it
//!   ([`Hierarchy::assign_below`]), a surviving member's child is updated
//!   recursively with its own edits;
//! * every touched node is re-stored and re-summarized; untouched children
//!   keep their decoded entries.
//!
//! Only a change of the root's level is global: inserting a record promoted
//! above the top level, or deleting the last top-level record. The caller
//! then rebuilds from the directory.

use super::build::{Ent, Hierarchy, Records, Writer};
use super::format::{NodeEntry, NodeKind, ProximityConfig};
use super::map::ProximityMap;
use super::math::promotion_level;
use crate::cid::Cid;
use crate::error::{Error, Result};
use prox_kernels::canonical;
use prox_kernels::Metric;
use rayon::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// One change of a group's record set: the removal of a record with its
/// old prepared vector, or the insertion of one with its new vector.
#[derive(Clone)]
pub(super) struct Edit {
    key: Vec<u8>,
    vector: Vec<f32>,
    /// Promotion level (12.3), not clamped.
    level: u8,
    add: bool,
}

impl Edit {
    pub(super) fn new(key: Vec<u8>, vector: Vec<f32>, level: u8, add: bool) -> Edit {
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

type Point = (Vec<u8>, Vec<f32>);

/// A member of a node whose membership changes: an old entry (by index)
/// or an added record.
enum Slot<'e> {
    Old(usize),
    New(&'e Edit),
}

/// Localized recomputation of the PRXN hierarchy (see the module docs).
pub(super) struct Incremental<'m, 's> {
    map: &'m ProximityMap<'s>,
    config: &'m ProximityConfig,
    pub(super) decoded: AtomicU64,
    pub(super) encoded: AtomicU64,
    pub(super) reassigned: AtomicU64,
}

impl<'m, 's> Incremental<'m, 's> {
    pub(super) fn new(map: &'m ProximityMap<'s>, config: &'m ProximityConfig) -> Self {
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

    fn level_of(&self, key: &[u8]) -> u8 {
        promotion_level(key, self.config.log_chunk_size, self.config.level_hash_seed)
    }

    /// Applies the edits and returns the new root; `None` when the root's
    /// level changes, which requires a full recomputation.
    pub(super) fn apply(&self, edits: Vec<Edit>) -> Result<Option<Cid>> {
        let root = self.map.root_cid();
        let top = self.map.node(&root)?.level;
        self.decoded.fetch_add(1, Ordering::Relaxed);
        if edits.iter().any(|e| e.level > top) {
            return Ok(None);
        }
        if edits.iter().any(|e| e.level == top && !e.add) {
            // Deleting every top-level record lowers the root.
            let members = self.logical_entries(root, top)?.len() as i64;
            let delta: i64 = edits
                .iter()
                .filter(|e| e.level == top)
                .map(|e| if e.add { 1 } else { -1 })
                .sum();
            if members + delta <= 0 {
                return Ok(None);
            }
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

    fn child_of(&self, cid: Cid, e: &Entry) -> Result<Cid> {
        e.child
            .ok_or_else(|| self.corrupt(cid, "route entry without a child"))
    }

    /// The records (key, prepared vector) below the logical node at `cid`:
    /// all of them, or with `near = Some((c, xs))` (the node is the child
    /// of member `c`) those that may prefer one of `xs` to `c`, skipping
    /// subtrees that provably cannot (see the module docs); the caller
    /// decides exactly on what is returned.
    fn points(&self, cid: Cid, level: u8, near: Option<(&[f32], &[&[f32]])>) -> Result<Vec<Point>> {
        let entries = self.logical_entries(cid, level)?;
        if level == 0 {
            return Ok(entries.into_iter().map(|e| (e.key, e.vector)).collect());
        }
        let parts = entries
            .par_iter()
            .filter(|g| near.is_none_or(|(c, xs)| self.may_prefer(c, &g.vector, g.radius, xs)))
            .map(|g| self.points(self.child_of(cid, g)?, level - 1, near))
            .collect::<Result<Vec<_>>>()?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// Whether a record within `radius` of `g` may prefer some `x` to `c`.
    /// Sound for metrics that rank by Euclidean distance (L2, and cosine on
    /// normalized vectors, with a margin for their rounding); inner product
    /// is not a distance, so nothing is skipped.
    fn may_prefer(&self, c: &[f32], g: &[f32], radius: f64, xs: &[&[f32]]) -> bool {
        let margin = match self.config.metric {
            Metric::L2 => 0.0,
            Metric::Cosine => 1e-2,
            Metric::InnerProduct => return true,
        };
        let reach = canonical::l2sq(c, g).sqrt() + 2.0 * radius;
        let reach = reach * (1.0 + 1e-9) + margin;
        xs.iter().any(|x| canonical::l2sq(x, g).sqrt() <= reach)
    }

    /// Index of the candidate nearest to `v` (ties to the earlier one;
    /// candidates are in key order, as the canonical descent breaks ties).
    fn nearest(&self, v: &[f32], cands: &[(&[u8], &[f32])]) -> usize {
        let mut best = 0usize;
        let mut best_score = f64::INFINITY;
        for (i, c) in cands.iter().enumerate() {
            let s = canonical::score(self.config.metric, v, c.1);
            if s < best_score {
                best = i;
                best_score = s;
            }
        }
        best
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
        if rep.is_some() && edits.iter().any(|e| e.level > level) {
            return Err(self.corrupt(cid, "an edit above its node's level"));
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
                    Err(i) => entries.insert(i, point_entry(&e.key, &e.vector)),
                }
            }
            if entries.is_empty() {
                // Only the representative's own point can empty a leaf, and
                // removing it is an edit at a higher level.
                return Err(self.corrupt(cid, "a leaf lost its representative"));
            }
        } else if edits.iter().any(|e| e.level >= level) {
            entries = self.reshape(cid, level, entries, edits)?;
        } else {
            // Members are unchanged: route each edit to the child its
            // canonical descent chooses.
            let cands: Vec<(&[u8], &[f32])> = entries
                .iter()
                .map(|x| (x.key.as_slice(), x.vector.as_slice()))
                .collect();
            let mut routed: Vec<Vec<&Edit>> = vec![Vec::new(); entries.len()];
            for &e in edits {
                routed[self.nearest(&e.vector, &cands)].push(e);
            }
            let updated = entries
                .par_iter()
                .zip(&routed)
                .map(|(x, es)| {
                    if es.is_empty() {
                        return Ok(None);
                    }
                    let child = self.child_of(cid, x)?;
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

    /// The new entries of a level-`level` node (level >= 1) whose member
    /// set changes under `edits` (see the module docs).
    fn reshape(&self, cid: Cid, level: u8, old: Vec<Entry>, edits: &[&Edit]) -> Result<Vec<Entry>> {
        let is_member = |e: &Edit| e.level >= level;
        let find_old = |key: &[u8]| old.binary_search_by(|x| x.key.as_slice().cmp(key));
        // The new member list, in key order.
        let mut gone = vec![false; old.len()];
        for e in edits.iter().filter(|e| !e.add && is_member(e)) {
            let i = find_old(&e.key)
                .map_err(|_| self.corrupt(cid, "edited member missing from its node"))?;
            gone[i] = true;
        }
        let mut slots: Vec<(&[u8], &[f32], Slot)> = old
            .iter()
            .enumerate()
            .filter(|(i, _)| !gone[*i])
            .map(|(i, x)| (x.key.as_slice(), x.vector.as_slice(), Slot::Old(i)))
            .collect();
        for e in edits.iter().filter(|e| e.add && is_member(e)) {
            if matches!(find_old(&e.key), Ok(i) if !gone[i]) {
                return Err(self.corrupt(cid, "inserted member already in its node"));
            }
            slots.push((&e.key, &e.vector, Slot::New(e)));
        }
        slots.sort_by(|a, b| a.0.cmp(b.0));
        if slots.is_empty() {
            // A representative stays a member of its own group, so only a
            // damaged node can lose every member.
            return Err(self.corrupt(cid, "a node lost every member"));
        }
        let new_cands: Vec<(&[u8], &[f32])> = slots.iter().map(|s| (s.0, s.1)).collect();
        let old_cands: Vec<(&[u8], &[f32])> = old
            .iter()
            .map(|x| (x.key.as_slice(), x.vector.as_slice()))
            .collect();
        let slot_of_old: Vec<Option<usize>> = {
            let mut m = vec![None; old.len()];
            for (j, s) in slots.iter().enumerate() {
                if let Slot::Old(i) = s.2 {
                    m[i] = Some(j);
                }
            }
            m
        };
        // Per new member: the edits of a surviving child, or the records
        // of an added member's child.
        let mut bucket: Vec<Vec<Edit>> = vec![Vec::new(); slots.len()];
        // Records leaving the dissolved children (never to be re-routed).
        let mut dropped: Vec<HashSet<&[u8]>> = vec![HashSet::new(); old.len()];
        for &e in edits.iter().filter(|e| !is_member(e)) {
            if e.add {
                bucket[self.nearest(&e.vector, &new_cands)].push(e.clone());
            } else {
                let i = self.nearest(&e.vector, &old_cands);
                match slot_of_old[i] {
                    Some(j) => bucket[j].push(e.clone()),
                    None => {
                        dropped[i].insert(&e.key);
                    }
                }
            }
        }
        let mut reassigned = 0u64;
        // Dissolved children: every remaining record to its nearest member.
        let dissolved = old
            .par_iter()
            .enumerate()
            .filter(|(i, _)| gone[*i])
            .map(|(i, y)| Ok((i, self.points(self.child_of(cid, y)?, level - 1, None)?)))
            .collect::<Result<Vec<_>>>()?;
        for (i, points) in dissolved {
            for (key, vector) in points {
                if key == old[i].key || dropped[i].contains(key.as_slice()) {
                    continue;
                }
                let j = self.nearest(&vector, &new_cands);
                let l = self.level_of(&key);
                bucket[j].push(Edit::new(key, vector, l, true));
                // Records sent to an added member count when it is built.
                reassigned += u64::from(matches!(slots[j].2, Slot::Old(_)));
            }
        }
        // Surviving children: records that now prefer an added member.
        let added: Vec<(usize, &[f32])> = slots
            .iter()
            .enumerate()
            .filter(|s| matches!(s.1 .2, Slot::New(_)))
            .map(|(j, s)| (j, s.1))
            .collect();
        if !added.is_empty() {
            let xs: Vec<&[f32]> = added.iter().map(|a| a.1).collect();
            let stolen = slots
                .par_iter()
                .enumerate()
                .filter_map(|(j, s)| match s.2 {
                    Slot::Old(i) => Some((j, i)),
                    Slot::New(_) => None,
                })
                .map(|(j, i)| {
                    let c = &old[i];
                    if !self.may_prefer(&c.vector, &c.vector, c.radius, &xs) {
                        return Ok(Vec::new());
                    }
                    let near = Some((c.vector.as_slice(), xs.as_slice()));
                    let points = self.points(self.child_of(cid, c)?, level - 1, near)?;
                    let leaving: HashSet<&[u8]> = bucket[j]
                        .iter()
                        .filter(|e| !e.add)
                        .map(|e| e.key.as_slice())
                        .collect();
                    // The nearest of {c} ∪ added decides, ties to the smaller key.
                    let mut cands: Vec<(&[u8], &[f32], usize)> =
                        added.iter().map(|&(k, v)| (new_cands[k].0, v, k)).collect();
                    cands.push((&c.key, &c.vector, j));
                    cands.sort_by(|a, b| a.0.cmp(b.0));
                    let pairs: Vec<(&[u8], &[f32])> = cands.iter().map(|c| (c.0, c.1)).collect();
                    let mut moves = Vec::new();
                    for (key, vector) in points {
                        if key == c.key || leaving.contains(key.as_slice()) {
                            continue;
                        }
                        let to = cands[self.nearest(&vector, &pairs)].2;
                        if to != j {
                            moves.push((j, to, key, vector));
                        }
                    }
                    Ok(moves)
                })
                .collect::<Result<Vec<_>>>()?;
            for (from, to, key, vector) in stolen.into_iter().flatten() {
                let l = self.level_of(&key);
                bucket[from].push(Edit::new(key.clone(), vector.clone(), l, false));
                bucket[to].push(Edit::new(key, vector, l, true));
            }
        }
        self.reassigned.fetch_add(reassigned, Ordering::Relaxed);
        slots
            .par_iter()
            .zip(&bucket)
            .map(|(s, es)| match s.2 {
                Slot::Old(i) if es.is_empty() => Ok(old[i].clone()),
                Slot::Old(i) => {
                    let x = &old[i];
                    let refs: Vec<&Edit> = es.iter().collect();
                    self.update(
                        self.child_of(cid, x)?,
                        level - 1,
                        Some((&x.key, &x.vector)),
                        &refs,
                    )
                }
                Slot::New(x) => self.build(level - 1, x, es),
            })
            .collect()
    }

    /// Builds from scratch the level-`level` child of the added member `x`
    /// holding `x` and the records `added` (all insertions).
    fn build(&self, level: u8, x: &Edit, added: &[Edit]) -> Result<Entry> {
        let mut points: Vec<Point> = Vec::with_capacity(added.len() + 1);
        points.push((x.key.clone(), x.vector.clone()));
        points.extend(added.iter().map(|e| (e.key.clone(), e.vector.clone())));
        points.par_sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let recs = Records::from_sorted(points, self.config.dims as usize);
        let rep_idx = recs
            .keys
            .binary_search_by(|k| k.as_slice().cmp(&x.key))
            .map_err(|_| self.corrupt(self.map.root_cid(), "lost an added member"))?;
        let levels: Vec<u8> = recs
            .keys
            .par_iter()
            .map(|k| self.level_of(k).min(level))
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
        let mut rows: Vec<Point> = Vec::with_capacity(3 * n + 1);
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

fn point_entry(key: &[u8], vector: &[f32]) -> Entry {
    Entry {
        key: key.to_vec(),
        vector: vector.to_vec(),
        child: None,
        count: 1,
        radius: 0.0,
        min_key: key.to_vec(),
        max_key: key.to_vec(),
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
