//! Extraction, full builds and incremental deltas of secondary indexes
//! (secondary-index.md 3.3, 7, 8.1, 8.2), and the catalog and control
//! trees that name them.
//!
//! Every tree here is written by the canonical prolly writers, so an index
//! root, the catalog root and the control root are functions of the source
//! records and the definitions alone, however the source was written. The
//! catalog of a snapshot holds exactly what a fresh `ensure_index` of every
//! active definition writes: `format`, one `definitions` record per active
//! index, one `checkpoints` record per active index for the current source
//! version, and `current` (older checkpoints are not kept: the map's own
//! history roots carry older versions).

use super::layout::{
    catalog_checkpoint_key, catalog_current_key, catalog_definition_key, catalog_format_key,
    control_key, physical_key, version_id, CATALOG_FORMAT,
};
use super::record::{Checkpoint, Control, Descriptor, Head, IndexValue, Projection};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::prolly::{build, build_sorted, Config, Mutation, Tree};
use crate::store::BlockStore;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One emission of an extractor: a term, with projection bytes for an
/// Include index.
pub type Term = (Vec<u8>, Option<Vec<u8>>);

/// The extraction semantics of an index: terms of one source record. The
/// callback itself is never stored; its identity is the descriptor's
/// extractor id.
pub trait Extract: Send + Sync {
    /// Terms of `(primary_key, value)`; an `Err` names why extraction failed.
    fn terms(&self, primary_key: &[u8], value: &[u8]) -> std::result::Result<Vec<Term>, String>;
}

/// A runtime index definition: persisted identity plus extractor.
#[derive(Clone)]
pub struct Definition {
    /// What is persisted (`PSID`).
    pub descriptor: Descriptor,
    /// The extraction callback.
    pub extractor: Arc<dyn Extract>,
}

impl std::fmt::Debug for Definition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Definition")
            .field("descriptor", &self.descriptor)
            .finish_non_exhaustive()
    }
}

/// Extraction limits enforced per record (secondary-index.md 3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest term.
    pub max_term_bytes: usize,
    /// Longest projection.
    pub max_projection_bytes: usize,
    /// Longest source value of an All index.
    pub max_all_value_bytes: usize,
    /// Most emissions per record.
    pub max_terms_per_record: usize,
    /// Most projection bytes per record.
    pub max_projected_bytes_per_record: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_term_bytes: 4096,
            max_projection_bytes: 65536,
            max_all_value_bytes: 1 << 20,
            max_terms_per_record: 1024,
            max_projected_bytes_per_record: 1 << 20,
        }
    }
}

fn limit(resource: &'static str, limit: usize, actual: usize) -> Error {
    Error::IndexResourceLimit {
        resource,
        limit,
        actual,
    }
}

/// The physical entries of one source record in one index (3.3), sorted by
/// key. Zero terms give no entries (the index is sparse).
pub fn record_entries(
    def: &Definition,
    limits: &Limits,
    primary_key: &[u8],
    value: &[u8],
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let projection = def.descriptor.projection;
    if projection == Projection::All && value.len() > limits.max_all_value_bytes {
        return Err(limit(
            "all_source_value_bytes",
            limits.max_all_value_bytes,
            value.len(),
        ));
    }
    let name = || String::from_utf8_lossy(&def.descriptor.name).into_owned();
    let emitted =
        def.extractor
            .terms(primary_key, value)
            .map_err(|reason| Error::IndexExtractionFailed {
                name: name(),
                key: primary_key.to_vec(),
                reason,
            })?;
    if emitted.len() > limits.max_terms_per_record {
        return Err(limit(
            "terms_per_record",
            limits.max_terms_per_record,
            emitted.len(),
        ));
    }
    let mut terms: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    let mut projected = 0usize;
    for (term, proj) in emitted {
        if term.len() > limits.max_term_bytes {
            return Err(limit("term_bytes", limits.max_term_bytes, term.len()));
        }
        if proj.is_some() != (projection == Projection::Include) {
            return Err(Error::InvalidIndexDefinition(format!(
                "index {}: projection bytes do not match its mode",
                name()
            )));
        }
        if let Some(p) = &proj {
            if p.len() > limits.max_projection_bytes {
                return Err(limit(
                    "projection_bytes",
                    limits.max_projection_bytes,
                    p.len(),
                ));
            }
            projected += p.len();
        }
        match terms.get(&term) {
            Some(prev) if *prev != proj => {
                return Err(Error::InvalidIndexDefinition(format!(
                    "index {}: one term emitted with two projections",
                    name()
                )))
            }
            Some(_) => {}
            None => {
                terms.insert(term, proj);
            }
        }
    }
    if projected > limits.max_projected_bytes_per_record {
        return Err(limit(
            "projected_bytes_per_record",
            limits.max_projected_bytes_per_record,
            projected,
        ));
    }
    terms
        .into_iter()
        .map(|(term, proj)| {
            let v = match projection {
                Projection::KeysOnly => IndexValue::KeysOnly,
                Projection::Include => IndexValue::Include(proj.unwrap_or_default()),
                Projection::All => IndexValue::All(value.to_vec()),
            };
            Ok((physical_key(&term, primary_key), v.encode()?))
        })
        .collect()
}

/// Full canonical build of one index over `source` (8.1 step 4). Returns
/// the root (`None`: no entries).
pub fn build_index(
    store: &dyn BlockStore,
    source: &Tree<'_>,
    def: &Definition,
    limits: &Limits,
) -> Result<Option<Cid>> {
    let mut entries = Vec::new();
    for item in source.iter() {
        let (k, v) = item?;
        entries.extend(record_entries(def, limits, &k, &v)?);
    }
    build(store, source.config(), entries)
}

/// The index mutations that take one record from `old` to `new` (8.2):
/// deletes of old physical keys that disappear, puts of new or changed ones.
pub fn record_delta(
    def: &Definition,
    limits: &Limits,
    primary_key: &[u8],
    old: Option<&[u8]>,
    new: Option<&[u8]>,
) -> Result<Vec<Mutation>> {
    let old = match old {
        Some(v) => record_entries(def, limits, primary_key, v)?,
        None => Vec::new(),
    };
    let new: BTreeMap<Vec<u8>, Vec<u8>> = match new {
        Some(v) => record_entries(def, limits, primary_key, v)?
            .into_iter()
            .collect(),
        None => BTreeMap::new(),
    };
    let old: BTreeMap<Vec<u8>, Vec<u8>> = old.into_iter().collect();
    let mut out = Vec::new();
    for k in old.keys() {
        if !new.contains_key(k) {
            out.push(Mutation::Delete(k.clone()));
        }
    }
    for (k, v) in new {
        if old.get(&k) != Some(&v) {
            out.push(Mutation::Put(k, v));
        }
    }
    Ok(out)
}

/// One active index of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexState {
    /// The definition's persisted identity.
    pub descriptor: Descriptor,
    /// Root of the hidden index tree (`None`: no entries).
    pub root: Option<Cid>,
    /// `version_id` of that tree.
    pub version: [u8; 32],
}

/// The catalog and control trees of a source version and its indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    /// Version id of the source tree.
    pub source_version: [u8; 32],
    /// One checkpoint per index, in name order.
    pub checkpoints: Vec<Checkpoint>,
    /// Root of the catalog tree.
    pub root: Cid,
    /// `version_id` of the catalog tree.
    pub version: [u8; 32],
    /// `PSIO` bytes; `None` when no index is active.
    pub control: Option<Vec<u8>>,
    /// Root of the one-leaf control tree, when `control` is `Some`.
    pub control_root: Option<Cid>,
}

/// Key-value entries of a tree, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// The catalog records of a snapshot (section 7), in key order, with the
/// checkpoints they hold.
pub fn catalog_entries(
    source_version: &[u8; 32],
    indexes: &[IndexState],
) -> Result<(Vec<Checkpoint>, Entries)> {
    let mut sorted: Vec<&IndexState> = indexes.iter().collect();
    sorted.sort_by(|a, b| a.descriptor.name.cmp(&b.descriptor.name));
    let mut entries = vec![(catalog_format_key(), CATALOG_FORMAT.to_vec())];
    let mut checkpoints = Vec::with_capacity(sorted.len());
    for ix in sorted {
        let d = &ix.descriptor;
        let c = Checkpoint {
            source_map_id: d.source_map_id.clone(),
            source_version: *source_version,
            index_name: d.name.clone(),
            generation: d.generation,
            fingerprint: d.fingerprint,
            index_map_id: d.index_map_id(),
            index_version: ix.version,
        };
        entries.push((catalog_definition_key(&d.name, d.generation), d.encode()?));
        entries.push((
            catalog_checkpoint_key(source_version, &d.name, d.generation),
            c.encode()?,
        ));
        checkpoints.push(c);
    }
    let head = Head {
        source_version: *source_version,
        checkpoints: checkpoints.clone(),
    };
    entries.push((catalog_current_key(), head.encode()?));
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((checkpoints, entries))
}

/// Writes the catalog and control trees of `source_version` with these
/// indexes (all owned by `source_map_id`).
pub fn write_catalog(
    store: &dyn BlockStore,
    cfg: &Config,
    source_map_id: &[u8],
    source_version: &[u8; 32],
    indexes: &[IndexState],
) -> Result<Catalog> {
    if let Some(ix) = indexes
        .iter()
        .find(|ix| ix.descriptor.source_map_id != source_map_id)
    {
        return Err(Error::InvalidIndexDefinition(format!(
            "index {} belongs to another source",
            String::from_utf8_lossy(&ix.descriptor.name)
        )));
    }
    let (checkpoints, entries) = catalog_entries(source_version, indexes)?;
    let root = build_sorted(store, cfg, entries)?
        .ok_or_else(|| Error::invalid("catalog", "empty catalog tree"))?;
    let (control, control_root) = if checkpoints.is_empty() {
        (None, None)
    } else {
        let c = Control {
            source_map_id: source_map_id.to_vec(),
            active: checkpoints
                .iter()
                .map(|c| (c.index_name.clone(), c.fingerprint))
                .collect(),
        }
        .encode()?;
        let r = build_sorted(store, cfg, [(control_key(), c.clone())])?;
        (Some(c), r)
    };
    Ok(Catalog {
        source_version: *source_version,
        checkpoints,
        root,
        version: version_id(Some(root), cfg),
        control,
        control_root,
    })
}
