//! Carrying a PQ sidecar across a write of its map: removed records'
//! codes are dropped, new records are encoded with the existing codebooks
//! (no retraining), the quality numbers are recomputed over the result,
//! the 4-bit fast-scan lists (if built) keep their coarse centroids and
//! gain or lose rows, and the code tree is written as one canonical splice.

use super::persist::PqSidecar;
use super::Pq;
use crate::accel::hnsw::sidecar_tree_config;
use crate::accel::vectors::Arena;
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::prolly;
use crate::proximity::PqManifest;
use crate::store::BlockStore;
use rayon::prelude::*;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

impl Pq {
    /// This sidecar after removing the records `removed` (present keys)
    /// and adding `inserted` (prepared vectors, keys absent after the
    /// removals), encoded with the existing codebooks. The fast-scan index,
    /// if it was built, is carried forward ([`super::FastScan`] lists keep
    /// their centroids).
    pub(crate) fn edited(
        &self,
        removed: &[Vec<u8>],
        inserted: &[(Vec<u8>, Vec<f32>)],
    ) -> Result<Pq> {
        let gone: HashSet<&[u8]> = removed.iter().map(Vec::as_slice).collect();
        let mut new: Vec<(&[u8], &[f32], Vec<u8>)> = inserted
            .par_iter()
            .map(|(k, v)| {
                let code = self.encode(v).map_err(|e| with_key(e, k))?;
                Ok((k.as_slice(), v.as_slice(), code))
            })
            .collect::<Result<_>>()?;
        new.sort_by(|a, b| a.0.cmp(b.0));
        let m = self.layout.len();
        let n = (self.len() + new.len()).saturating_sub(removed.len());
        let mut dropped = 0;
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(n);
        let mut codes: Vec<u8> = Vec::with_capacity(n * m);
        let mut rows: Vec<&[f32]> = Vec::with_capacity(n);
        let mut origin: Vec<Option<u32>> = Vec::with_capacity(n);
        let (mut i, mut j) = (0, 0);
        while i < self.len() || j < new.len() {
            let take_old = match (self.keys.get(i), new.get(j)) {
                (Some(a), Some(b)) => match a.as_slice().cmp(b.0) {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Equal if gone.contains(a.as_slice()) => {
                        i += 1;
                        dropped += 1;
                        continue;
                    }
                    std::cmp::Ordering::Equal => {
                        return Err(Error::DuplicateKey { key: a.clone() });
                    }
                },
                (Some(_), None) => true,
                (None, _) => false,
            };
            if take_old {
                if !gone.contains(self.keys[i].as_slice()) {
                    keys.push(self.keys[i].clone());
                    codes.extend_from_slice(self.code(i));
                    rows.push(self.vectors.row(i));
                    origin.push(Some(i as u32));
                } else {
                    dropped += 1;
                }
                i += 1;
            } else {
                let (k, v, c) = &new[j];
                keys.push(k.to_vec());
                codes.extend_from_slice(c);
                rows.push(v);
                origin.push(None);
                j += 1;
            }
        }
        if dropped != removed.len() {
            return Err(Error::InvalidArgument(format!(
                "{} of the keys to remove are not in the PQ sidecar",
                removed.len().saturating_sub(dropped)
            )));
        }
        let mut out = Pq {
            metric: self.metric,
            params: self.params,
            layout: self.layout.clone(),
            books: self.books.clone(),
            codes,
            keys,
            vectors: Arena::from_rows(self.dims(), rows.into_iter()),
            mse: 0.0,
            max_se: 0.0,
            codebooks: self.codebooks.clone(),
            fast: OnceLock::new(),
            filter_owner: crate::keys::new_owner(),
        };
        out.refresh_quality();
        if let Some(Some(fast)) = self.fast.get() {
            let carried = fast.carried(&out, &origin).map(Arc::new);
            let _ = out.fast.set(carried);
        }
        Ok(out)
    }

    /// Writes this sidecar (made by [`Pq::edited`] from the one `old`
    /// describes) as a splice of `old`'s code tree, removing `removed` and
    /// putting the codes of `inserted`, with a manifest bound to `source`.
    /// `None` when no record is left (a sidecar needs one).
    pub(crate) fn persist_write(
        &self,
        store: &dyn BlockStore,
        old: &PqManifest,
        source: Cid,
        removed: &[Vec<u8>],
        inserted: &[Vec<u8>],
    ) -> Result<Option<PqSidecar>> {
        if self.is_empty() {
            return Ok(None);
        }
        let again: HashSet<&[u8]> = inserted.iter().map(Vec::as_slice).collect();
        let mut batch: Vec<prolly::Mutation> = removed
            .iter()
            .filter(|k| !again.contains(k.as_slice()))
            .map(|k| prolly::Mutation::Delete(k.clone()))
            .collect();
        for k in inserted {
            let i = self
                .keys
                .binary_search(k)
                .map_err(|_| Error::InvalidArgument("an inserted key has no PQ code".into()))?;
            batch.push(prolly::Mutation::Put(k.clone(), self.code(i).to_vec()));
        }
        let tree = prolly::Tree::open(store, sidecar_tree_config(), Some(old.code_root))?;
        let code_root = tree
            .batch(batch)?
            .root()
            .ok_or_else(|| Error::InvalidArgument("empty PQ code tree".into()))?;
        let manifest = self.manifest(source, code_root)?;
        let manifest_cid = store.put(&manifest.encode()?)?;
        Ok(Some(PqSidecar {
            manifest_cid,
            manifest,
        }))
    }
}

/// `e` naming the record `key` when it is about a vector.
fn with_key(e: Error, key: &[u8]) -> Error {
    match e {
        Error::WrongDimension { expected, got, .. } => Error::WrongDimension {
            expected,
            got,
            key: Some(key.to_vec()),
        },
        Error::NonFiniteVector { index, .. } => Error::NonFiniteVector {
            index,
            key: Some(key.to_vec()),
        },
        other => other,
    }
}
