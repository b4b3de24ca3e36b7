//! A write batch for [`super::Index::apply`] and how it is applied
//! ([`WriteOptions`]); the checks every batch passes before anything is
//! written.

use crate::error::{Error, Result};
use crate::proximity::math::prepare;
use crate::proximity::search::ExactLayout;
use prox_kernels::Metric;

/// Longest key a write accepts, in bytes.
pub const MAX_KEY_LEN: usize = 4096;

/// Insert a record, or replace the vector and value of an existing one.
#[derive(Debug, Clone, PartialEq)]
pub struct Upsert {
    /// Record key (at most [`MAX_KEY_LEN`] bytes).
    pub key: Vec<u8>,
    /// Raw vector (prepared with the map's metric, as a build does).
    pub vector: Vec<f32>,
    /// Opaque value.
    pub value: Vec<u8>,
}

/// Upserts and deletes applied together as one new snapshot. A key may
/// appear once per batch (an upsert and a delete of the same key are a
/// duplicate); deleting an absent key is a no-op.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    /// Records to insert or replace.
    pub upserts: Vec<Upsert>,
    /// Keys to remove.
    pub deletes: Vec<Vec<u8>>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Adds an upsert.
    pub fn upsert(
        &mut self,
        key: impl Into<Vec<u8>>,
        vector: Vec<f32>,
        value: impl Into<Vec<u8>>,
    ) -> &mut Batch {
        self.upserts.push(Upsert {
            key: key.into(),
            vector,
            value: value.into(),
        });
        self
    }

    /// Adds a delete.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Batch {
        self.deletes.push(key.into());
        self
    }

    /// Upserts plus deletes.
    pub fn len(&self) -> usize {
        self.upserts.len() + self.deletes.len()
    }

    /// True when the batch holds no edit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch's edits in key order with every upsert's vector prepared
    /// for `metric` and `dims`, after every check: key length, dimension,
    /// finiteness (and a non-zero vector under cosine), no key twice. The
    /// first failure is a typed error naming the key.
    pub(super) fn checked(&self, metric: Metric, dims: u32) -> Result<Vec<Checked<'_>>> {
        let mut out: Vec<Checked<'_>> = Vec::with_capacity(self.len());
        for u in &self.upserts {
            check_key(&u.key)?;
            let prepared = prepare(metric, dims, &u.vector, Some(&u.key))?;
            out.push(Checked {
                key: &u.key,
                upsert: Some((u, prepared)),
            });
        }
        for k in &self.deletes {
            check_key(k)?;
            out.push(Checked {
                key: k,
                upsert: None,
            });
        }
        out.sort_by(|a, b| a.key.cmp(b.key));
        if let Some(w) = out.windows(2).find(|w| w[0].key == w[1].key) {
            return Err(Error::DuplicateKey {
                key: w[0].key.to_vec(),
            });
        }
        Ok(out)
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLong {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

/// One checked edit: an upsert with its prepared vector, or a delete.
pub(super) struct Checked<'a> {
    pub(super) key: &'a [u8],
    pub(super) upsert: Option<(&'a Upsert, Vec<f32>)>,
}

/// What a write does with a canonical (flag `01`) HNSW sidecar when the
/// batch changes the record set: the spec's canonical graph of the new
/// records cannot be derived incrementally.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CanonicalHnsw {
    /// Fail with [`Error::CanonicalHnsw`] before writing anything.
    #[default]
    Refuse,
    /// Build the canonical graph of the new record set (quadratic in the
    /// map's size).
    Rebuild,
    /// Publish the new map without an HNSW sidecar.
    Drop,
}

impl std::str::FromStr for CanonicalHnsw {
    type Err = Error;

    fn from_str(s: &str) -> Result<CanonicalHnsw> {
        match s {
            "refuse" => Ok(CanonicalHnsw::Refuse),
            "rebuild" => Ok(CanonicalHnsw::Rebuild),
            "drop" => Ok(CanonicalHnsw::Drop),
            other => Err(Error::InvalidArgument(format!(
                "canonical HNSW policy {other:?} (expected refuse, rebuild or drop)"
            ))),
        }
    }
}

/// How [`super::Index::apply`] writes and opens the new snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Policy for a canonical HNSW sidecar (default: refuse).
    pub canonical_hnsw: CanonicalHnsw,
    /// Build the new snapshot's native load-time layouts before returning
    /// (as [`super::Options::warm`]); when false (the default) the first
    /// native search, or [`super::Index::warm`], builds them. Sidecar
    /// layouts are always carried over, ready.
    pub warm: bool,
    /// Exact-L2 layout of the new snapshot's native search.
    pub exact_layout: ExactLayout,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            canonical_hnsw: CanonicalHnsw::Refuse,
            warm: false,
            exact_layout: ExactLayout::Auto,
        }
    }
}
