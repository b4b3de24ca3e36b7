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
//!   ([`Incremental`], whose docs give the argument): an edit of a level-0
//!   record re-stores one root-to-leaf path; an edit of a record promoted
//!   to level `l` changes one level-`l` group's members, so only that
//!   node's children that gain or lose records are recomputed (found with
//!   the covering radii), and the child of an added member is built from
//!   the records it attracts.
//! * Only a change of the root's level (a record promoted above the top
//!   level inserted, the last top-level record deleted) or an empty map
//!   recomputes the hierarchy from the whole directory.

use super::build::{build_hierarchy, Records};
use super::format::{Descriptor, DirectoryBlock, Record};
use super::incremental::{Edit, Incremental};
use super::map::ProximityMap;
use super::math::{prepare, promotion_level};
use crate::error::{Error, Result};
use crate::prolly;
use std::sync::atomic::Ordering;

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
    /// Whether the hierarchy was recomputed from the whole record set (the
    /// root's level changed, or the map was or became empty)
    /// rather than locally.
    pub full_rebuild: bool,
    /// PRXN nodes (every physical kind) decoded to apply the batch.
    pub nodes_decoded: u64,
    /// PRXN nodes encoded (new or re-encoded to an existing CID).
    pub nodes_encoded: u64,
    /// Records whose group assignment was recomputed (the whole map for a
    /// full rebuild; otherwise the records placed into newly built children
    /// or moved between children).
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
