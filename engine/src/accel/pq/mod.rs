//! PQ sidecar: canonical training (spec 12.11), codes, ADC search with exact
//! rerank, persistence (`PQPQ` manifest + `CRAB` code tree), and for 4-bit
//! sidecars (`centroids ≤ 16`) the IVF fast-scan index ([`FastScan`],
//! built at load time, or read from a persisted layout of its coarse
//! lists).

mod encode;
mod ivf;
mod ivf_layout;
mod persist;
mod search;
mod traversal;
mod update;

pub use ivf::{FastScan, IvfParams};
pub(crate) use persist::load_rows;
pub use persist::{load, PqSidecar};
pub use search::{PqOptions, PqSearchContext};

use std::sync::{Arc, OnceLock};

use crate::accel::params::PqParams;
use crate::accel::vectors::{check_records, Arena};
use crate::error::Result;
use crate::numeric::pq::{self as train, Shape};
use prox_kernels::Metric;

/// A trained product quantizer with the codes of every record and the full
/// vectors (kept for exact rerank). Records are in key order; record `i` has
/// code bytes `codes[i*m..(i+1)*m]`.
#[derive(Debug, Clone)]
pub struct Pq {
    metric: Metric,
    params: PqParams,
    layout: Vec<(usize, usize)>,
    books: Vec<Vec<f32>>,
    codes: Vec<u8>,
    keys: Vec<Vec<u8>>,
    vectors: Arena,
    mse: f64,
    max_se: f64,
    /// The same codebooks in the kernel's form (flat ADC scans).
    codebooks: prox_kernels::pq::Codebooks,
    /// The fast-scan index, built once on first use (`None` inside:
    /// unsupported); reset by `insert` / `delete`.
    fast: OnceLock<Option<Arc<FastScan>>>,
    /// Identity of the record numbering for key sets' cached id sets
    /// ([`crate::keys::KeySet::ids_for`]); renewed by `insert` / `delete`.
    filter_owner: u64,
}

/// The kernel's codebooks from per-subspace centroid blocks (their
/// concatenation is the kernel's layout for the same floor split).
fn kernel_codebooks(
    dims: usize,
    m: usize,
    k: usize,
    books: &[Vec<f32>],
) -> Result<prox_kernels::pq::Codebooks> {
    let data: Vec<f32> = books.iter().flatten().copied().collect();
    prox_kernels::pq::Codebooks::new(dims, m, k, data)
        .map_err(|e| crate::error::Error::InvalidConfig(format!("pq codebooks: {e}")))
}

impl Pq {
    /// Trains on `records` (prepared vectors, strictly ascending keys) and
    /// encodes all of them. Canonical: equal inputs give equal codebooks and
    /// codes at any thread count and ISA.
    pub fn train(
        metric: Metric,
        dims: usize,
        records: &[(Vec<u8>, Vec<f32>)],
        params: &PqParams,
    ) -> Result<Pq> {
        check_records(records, dims)?;
        let vectors = Arena::from_rows(dims, records.iter().map(|(_, v)| v.as_slice()));
        params.validate(dims)?;
        let shape = Shape {
            m: params.subquantizers as usize,
            k: usize::from(params.centroids),
            iterations: usize::from(params.iterations),
            seed: params.seed,
        };
        let t = train::train(records.len(), dims, |i| vectors.row(i), &shape)?;
        let codebooks = kernel_codebooks(
            dims,
            params.subquantizers as usize,
            usize::from(params.centroids),
            &t.books,
        )?;
        Ok(Pq {
            metric,
            params: *params,
            layout: train::layout(dims, params.subquantizers as usize),
            books: t.books,
            codes: t.codes,
            keys: records.iter().map(|(k, _)| k.clone()).collect(),
            vectors,
            mse: t.mse,
            max_se: t.max_se,
            codebooks,
            fast: OnceLock::new(),
            filter_owner: crate::keys::new_owner(),
        })
    }

    /// Metric.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Dimensions.
    pub fn dims(&self) -> usize {
        self.vectors.dims()
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when there are no records.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Parameters.
    pub fn params(&self) -> &PqParams {
        &self.params
    }

    /// Mean squared reconstruction error over the records.
    pub fn mean_squared_error(&self) -> f64 {
        self.mse
    }

    /// Largest squared reconstruction error.
    pub fn max_squared_error(&self) -> f64 {
        self.max_se
    }

    /// Code bytes of record `i`.
    pub fn code(&self, i: usize) -> &[u8] {
        let m = self.layout.len();
        &self.codes[i * m..(i + 1) * m]
    }

    /// Key of record `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[i]
    }

    /// Bytes of codes plus codebooks (the memory the ADC scan touches).
    pub fn code_bytes(&self) -> usize {
        self.codes.len() + self.books.iter().map(|b| b.len() * 4).sum::<usize>()
    }
}
