//! Encoding vectors with trained codebooks (canonical nearest centroid per
//! subspace, ties to the lowest index), and incremental growth.

use super::Pq;
use crate::accel::vectors::check_vector;
use crate::error::{Error, Result};
use crate::numeric::pq::{nearest, quality};

impl Pq {
    /// The code of a prepared vector: per subspace, the canonical nearest
    /// centroid (the rule training used for its final codes).
    pub fn encode(&self, v: &[f32]) -> Result<Vec<u8>> {
        check_vector(v, self.dims(), None)?;
        let k = usize::from(self.params.centroids);
        let mut dists = vec![0f32; k];
        Ok(self
            .layout
            .iter()
            .zip(&self.books)
            .map(|(&(a, b), book)| nearest(&v[a..b], book, &mut dists) as u8)
            .collect())
    }

    /// Adds records with the existing codebooks (no retraining); keys must be
    /// new. The result equals what a map holding these records would get from
    /// re-encoding, but not a fresh training: retrain for canonical bytes.
    pub fn insert(&mut self, records: &[(Vec<u8>, Vec<f32>)]) -> Result<()> {
        let mut all: Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> =
            Vec::with_capacity(self.len() + records.len());
        for (i, k) in self.keys.iter().enumerate() {
            all.push((
                k.clone(),
                self.vectors.row(i).to_vec(),
                self.code(i).to_vec(),
            ));
        }
        for (k, v) in records {
            let code = self.encode(v).map_err(|e| match e {
                Error::WrongDimension { expected, got, .. } => Error::WrongDimension {
                    expected,
                    got,
                    key: Some(k.clone()),
                },
                Error::NonFiniteVector { index, .. } => Error::NonFiniteVector {
                    index,
                    key: Some(k.clone()),
                },
                other => other,
            })?;
            all.push((k.clone(), v.clone(), code));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = all.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::DuplicateKey {
                key: w[0].0.clone(),
            });
        }
        let dims = self.dims();
        self.vectors =
            crate::accel::vectors::Arena::from_rows(dims, all.iter().map(|r| r.1.as_slice()));
        self.codes = all.iter().flat_map(|r| r.2.iter().copied()).collect();
        self.keys = all.into_iter().map(|r| r.0).collect();
        self.refresh_quality();
        self.fast = std::sync::OnceLock::new();
        self.filter_owner = crate::keys::new_owner();
        Ok(())
    }

    /// Removes records by key; returns how many were present.
    pub fn delete(&mut self, keys: &[Vec<u8>]) -> usize {
        let mut gone = vec![false; self.len()];
        let mut n = 0;
        for k in keys {
            if let Ok(i) = self.keys.binary_search(k) {
                if !gone[i] {
                    gone[i] = true;
                    n += 1;
                }
            }
        }
        if n == 0 {
            return 0;
        }
        let keep: Vec<u32> = (0..self.len() as u32)
            .filter(|&i| !gone[i as usize])
            .collect();
        let m = self.layout.len();
        self.vectors = self.vectors.permuted(&keep);
        self.codes = keep
            .iter()
            .flat_map(|&i| self.codes[i as usize * m..(i as usize + 1) * m].to_vec())
            .collect();
        self.keys = keep
            .iter()
            .map(|&i| self.keys[i as usize].clone())
            .collect();
        self.refresh_quality();
        self.fast = std::sync::OnceLock::new();
        self.filter_owner = crate::keys::new_owner();
        n
    }

    /// Recomputes the quality statistics over the current records.
    pub(super) fn refresh_quality(&mut self) {
        let vectors = &self.vectors;
        let (mse, max_se) = quality(
            vectors.len(),
            &|i| vectors.row(i),
            &self.layout,
            &self.books,
            &self.codes,
        );
        self.mse = mse;
        self.max_se = max_se;
    }
}
