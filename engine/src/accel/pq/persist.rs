//! Persistence: `CRAB` code tree (key -> `subquantizers` code bytes, pinned
//! sidecar tree config) then the `PQPQ` manifest (12.11 step 6).

use super::Pq;
use crate::accel::hnsw::{read_leaves, sidecar_tree_config};
use crate::accel::params::PqParams;
use crate::accel::vectors::{check_records, Arena, Rows};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::numeric::pq::layout;
use crate::prolly;
use crate::proximity::{Codebook, PqConfig, PqManifest};
use crate::store::BlockStore;
use prox_kernels::Metric;

/// A persisted PQ sidecar.
#[derive(Debug, Clone, PartialEq)]
pub struct PqSidecar {
    /// CID of the `PQPQ` manifest.
    pub manifest_cid: Cid,
    /// The manifest.
    pub manifest: PqManifest,
}

impl Pq {
    /// The manifest of these codes stored under `code_root`, bound to
    /// `source`.
    pub(super) fn manifest(&self, source: Cid, code_root: Cid) -> Result<PqManifest> {
        Ok(PqManifest {
            source,
            dims: u32::try_from(self.dims())
                .map_err(|_| Error::InvalidArgument("dimensions exceed u32".into()))?,
            metric: self.metric,
            config: PqConfig {
                subquantizers: self.params.subquantizers,
                centroids: self.params.centroids,
                iterations: self.params.iterations,
                rerank_multiplier: self.params.rerank,
                seed: self.params.seed,
            },
            code_root,
            codebooks: self
                .layout
                .iter()
                .zip(&self.books)
                .map(|(&(a, b), book)| Codebook {
                    width: (b - a) as u32,
                    centroids: book.clone(),
                })
                .collect(),
            mean_squared_error: self.mse,
            max_squared_error: self.max_se,
        })
    }

    /// Writes the code tree and the manifest bound to descriptor `source`.
    pub fn persist(&self, store: &dyn BlockStore, source: Cid) -> Result<PqSidecar> {
        let m = self.layout.len();
        let entries = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), self.codes[i * m..(i + 1) * m].to_vec()));
        let code_root =
            prolly::build_sorted(store, &sidecar_tree_config(), entries)?.ok_or_else(|| {
                Error::InvalidArgument("a PQ sidecar needs at least one record".into())
            })?;
        let manifest = self.manifest(source, code_root)?;
        let bytes = manifest.encode()?;
        let manifest_cid = store.put(&bytes)?;
        Ok(PqSidecar {
            manifest_cid,
            manifest,
        })
    }
}

/// Loads a persisted PQ sidecar over the map's records (key order, prepared
/// vectors): decodes and validates the manifest, checks source, metric and
/// dimensions, that the codebooks use the floor layout of 12.11, that the
/// code tree holds exactly the records' keys, and that every code has
/// `subquantizers` bytes each below the centroid count.
pub fn load(
    store: &dyn BlockStore,
    manifest_cid: Cid,
    source: Option<Cid>,
    metric: Metric,
    dims: usize,
    records: &[(Vec<u8>, Vec<f32>)],
) -> Result<Pq> {
    check_records(records, dims)?;
    let rows = Rows {
        keys: records.iter().map(|(k, _)| k.clone()).collect(),
        vectors: Arena::from_rows(dims, records.iter().map(|(_, v)| v.as_slice())),
    };
    load_rows(store, manifest_cid, source, metric, rows)
}

/// [`load`] over the rows `source::map_rows` read (keys
/// ascending, vectors checked), kept by the sidecar without a copy.
pub(crate) fn load_rows(
    store: &dyn BlockStore,
    manifest_cid: Cid,
    source: Option<Cid>,
    metric: Metric,
    rows: Rows,
) -> Result<Pq> {
    let dims = rows.vectors.dims();
    let corrupt = |reason: String| Error::Corrupt {
        cid: manifest_cid,
        reason,
    };
    let bytes = store
        .get(&manifest_cid)?
        .ok_or(Error::NotFound { cid: manifest_cid })?;
    let man = PqManifest::decode(&bytes)?;
    man.config.validate(man.dims)?;
    if let Some(s) = source {
        if man.source != s {
            return Err(corrupt(format!(
                "sidecar belongs to descriptor {}, not {s}",
                man.source
            )));
        }
    }
    if man.metric != metric || man.dims as usize != dims {
        return Err(corrupt(format!(
            "sidecar is {} x {}, map is {} x {}",
            man.metric, man.dims, metric, dims
        )));
    }
    let m = man.config.subquantizers as usize;
    let k = usize::from(man.config.centroids);
    let lay = layout(dims, m);
    for (s, (&(a, b), book)) in lay.iter().zip(&man.codebooks).enumerate() {
        if book.width as usize != b - a {
            return Err(corrupt(format!(
                "subspace {s} has width {}, the floor layout needs {}",
                book.width,
                b - a
            )));
        }
    }
    // Each leaf's keys (concatenated, with their ends) and codes, checked
    // as they are read; then every key against the record of its rank.
    let leaves = read_leaves(store, man.code_root, |bytes| {
        let (mut keys, mut ends, mut codes) = (Vec::new(), Vec::new(), Vec::new());
        crate::prolly::visit(&bytes, |key, code| {
            if code.len() != m || code.iter().any(|&c| usize::from(c) >= k) {
                return Err(corrupt(format!("bad code for key {}", hex::encode(key))));
            }
            keys.extend_from_slice(key);
            ends.push(keys.len());
            codes.extend_from_slice(code);
            Ok(())
        })?;
        Ok((keys, ends, codes))
    })?;
    let entries: usize = leaves.iter().map(|(_, ends, _)| ends.len()).sum();
    if entries != rows.keys.len() {
        return Err(corrupt(format!(
            "code tree has {entries} entries, map has {} records",
            rows.keys.len()
        )));
    }
    let mut codes = Vec::with_capacity(entries * m);
    let mut rank = 0;
    for (keys, ends, leaf_codes) in &leaves {
        let mut start = 0;
        for &end in ends {
            let key = &keys[start..end];
            if key != rows.keys[rank].as_slice() {
                return Err(corrupt(format!(
                    "code key {} is not a record key",
                    hex::encode(key)
                )));
            }
            start = end;
            rank += 1;
        }
        codes.extend_from_slice(leaf_codes);
    }
    let books: Vec<Vec<f32>> = man.codebooks.into_iter().map(|b| b.centroids).collect();
    let codebooks = super::kernel_codebooks(dims, m, k, &books)?;
    Ok(Pq {
        metric,
        params: PqParams {
            subquantizers: man.config.subquantizers,
            centroids: man.config.centroids,
            iterations: man.config.iterations,
            rerank: man.config.rerank_multiplier,
            seed: man.config.seed,
        },
        layout: lay,
        books,
        codes,
        keys: rows.keys,
        vectors: rows.vectors,
        mse: man.mean_squared_error,
        max_se: man.max_squared_error,
        codebooks,
        fast: std::sync::OnceLock::new(),
        filter_owner: crate::keys::new_owner(),
    })
}
