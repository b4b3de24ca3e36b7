//! Product quantization: codebooks, ADC lookup tables and table scans.
//!
//! A vector of `dim` components is split into `m` subspaces; subspace `s`
//! covers components `[⌊s·dim/m⌋, ⌊(s+1)·dim/m⌋)` (spec 12.11). Each subspace
//! has `k ≤ 256` centroids stored centroid-major (`k · width` f32, as in
//! `PQPQ`). A code is `m` bytes, byte `s` = centroid index in subspace `s`.
//!
//! Asymmetric distance computation (ADC): [`adc_table_l2`] / [`adc_table_dot`]
//! tabulate the partial distance from the query to every centroid
//! (`m × 256` f32, using the dispatched [`crate::f32`] kernels), then
//! [`adc_scan`] sums `m` table entries per code row. Every ISA sums one row's
//! entries in subspace order starting from `0.0` and adds the table's bias
//! last, so **scans are bit-exact across ISAs** for a given table. Table
//! slots for centroid indices `≥ k` hold `+inf`, so an out-of-range code
//! yields `+inf` rather than reading out of bounds.
//!
//! Tiers for the scan: scalar (row by row); portable and NEON (8 / 4 rows in
//! vector lanes, entries fetched with scalar loads, since neither has a
//! gather); AVX2 (four rows interleaved with scalar accumulators: AVX2
//! gathers measured slower than scalar lookups on Zen 3).
//!
//! [`fastscan`]: the 4-bit variant for `k ≤ 16` (codes packed two per byte
//! in blocks of 32 rows, u8-quantised tables, `pshufb` / `tbl` lookups,
//! exact integer sums on every ISA).

pub mod coarse;

pub mod fastscan;

mod scalar;

mod portable;

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "aarch64")]
mod aarch64;

use std::ops::Range;

use crate::error::{Error, Result};
use crate::{canonical, isa, Isa, Metric};

/// Table slots per subspace (the largest legal centroid count).
pub const SLOTS: usize = 256;

/// `m` codebooks of `k` centroids each.
#[derive(Debug, Clone, PartialEq)]
pub struct Codebooks {
    dim: usize,
    m: usize,
    k: usize,
    /// Subspace `s` occupies `data[k·start(s) .. k·start(s+1)]`, centroid-major.
    data: Vec<f32>,
}

/// First component of subspace `s` (spec 12.11 split).
fn start(dim: usize, m: usize, s: usize) -> usize {
    s * dim / m
}

impl Codebooks {
    /// Codebooks from the concatenation of every subspace's centroid-major
    /// block (`k · dim` floats in total).
    ///
    /// Requires `1 ≤ m ≤ dim`, `1 ≤ k ≤ 256`, finite values.
    pub fn new(dim: usize, m: usize, k: usize, data: Vec<f32>) -> Result<Self> {
        if m == 0 || m > dim {
            return Err(Error::InvalidParameter {
                what: "pq subquantizers",
                reason: format!("need 1 <= m <= dim, got m = {m}, dim = {dim}"),
            });
        }
        if k == 0 || k > SLOTS {
            return Err(Error::InvalidParameter {
                what: "pq centroids",
                reason: format!("need 1 <= k <= 256, got {k}"),
            });
        }
        if data.len() != k * dim {
            return Err(Error::WrongDimension {
                what: "pq codebook data (k * dim floats)",
                expected: k * dim,
                got: data.len(),
            });
        }
        if let Some(index) = data.iter().position(|x| !x.is_finite()) {
            return Err(Error::NonFinite {
                what: "pq codebooks",
                index,
            });
        }
        Ok(Codebooks { dim, m, k, data })
    }

    /// Components per vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of subspaces (bytes per code).
    pub fn m(&self) -> usize {
        self.m
    }

    /// Centroids per subspace.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Components covered by subspace `s < m`.
    pub fn subspace(&self, s: usize) -> Range<usize> {
        start(self.dim, self.m, s)..start(self.dim, self.m, s + 1)
    }

    /// All `k` centroids of subspace `s`, centroid-major.
    pub fn centroids(&self, s: usize) -> &[f32] {
        let r = self.subspace(s);
        &self.data[self.k * r.start..self.k * r.end]
    }

    /// Centroid `j < k` of subspace `s < m`.
    pub fn centroid(&self, s: usize, j: usize) -> &[f32] {
        let w = self.subspace(s).len();
        &self.centroids(s)[j * w..(j + 1) * w]
    }

    /// The raw concatenated data.
    pub fn data(&self) -> &[f32] {
        &self.data
    }

    /// Encodes `v` (length `dim`) into `out` (length `m`): per subspace, the
    /// nearest centroid by canonical f64 squared L2, ties to the lower index
    /// (the spec's assignment rule, so codes match a canonical build).
    ///
    /// # Panics
    /// On a length mismatch.
    #[track_caller]
    pub fn encode(&self, v: &[f32], out: &mut [u8]) {
        assert_eq!(v.len(), self.dim, "pq encode: vector length");
        assert_eq!(out.len(), self.m, "pq encode: output length");
        for (s, o) in out.iter_mut().enumerate() {
            let sub = &v[self.subspace(s)];
            let mut best = (f64::INFINITY, 0usize);
            for j in 0..self.k {
                let d = canonical::l2sq(sub, self.centroid(s, j));
                if d < best.0 {
                    best = (d, j);
                }
            }
            // k <= 256, so the index fits a byte.
            *o = best.1 as u8;
        }
    }

    /// Reconstructs a vector from its code (`m` bytes) into `out` (`dim`).
    ///
    /// # Panics
    /// On a length mismatch or a code byte `≥ k`.
    #[track_caller]
    pub fn decode(&self, code: &[u8], out: &mut [f32]) {
        assert_eq!(code.len(), self.m, "pq decode: code length");
        assert_eq!(out.len(), self.dim, "pq decode: output length");
        for (s, &c) in code.iter().enumerate() {
            assert!(
                usize::from(c) < self.k,
                "pq decode: code {c} >= k {}",
                self.k
            );
            out[self.subspace(s)].copy_from_slice(self.centroid(s, usize::from(c)));
        }
    }
}

/// Partial distances from one query to every centroid: `m × 256` f32,
/// subspace-major, plus a constant `bias` added to every scanned sum.
#[derive(Debug, Clone, PartialEq)]
pub struct AdcTable {
    m: usize,
    bias: f32,
    /// `data[s·256 + j]`: partial distance to centroid `j` of subspace `s`;
    /// `+inf` for `j ≥ k`.
    data: Vec<f32>,
}

impl AdcTable {
    fn build(
        query: &[f32],
        cb: &Codebooks,
        bias: f32,
        f: impl Fn(&[f32], &[f32], &mut [f32]),
    ) -> Self {
        assert_eq!(query.len(), cb.dim(), "pq: query length differs from dim");
        let mut data = vec![f32::INFINITY; cb.m() * SLOTS];
        for (s, slots) in data.chunks_exact_mut(SLOTS).enumerate() {
            f(
                &query[cb.subspace(s)],
                cb.centroids(s),
                &mut slots[..cb.k()],
            );
        }
        AdcTable {
            m: cb.m(),
            bias,
            data,
        }
    }

    /// The ranking table for `metric`, lower is better, ordered like
    /// [`crate::f32::score`]: L2 → squared L2; InnerProduct → `−dot`;
    /// Cosine → `1 − dot` (bias `1`, entries `−dot`; query and centroids are
    /// assumed prepared, i.e. unit-normalised vectors).
    ///
    /// # Panics
    /// If `query.len() != codebooks.dim()`.
    #[track_caller]
    pub fn for_metric(metric: Metric, query: &[f32], codebooks: &Codebooks) -> Self {
        match metric {
            Metric::L2 => adc_table_l2(query, codebooks),
            Metric::InnerProduct | Metric::Cosine => {
                let mut t = adc_table_dot(query, codebooks);
                t.data.iter_mut().for_each(|x| {
                    if x.is_finite() {
                        *x = -*x;
                    }
                });
                if metric == Metric::Cosine {
                    t.bias = 1.0;
                }
                t
            }
        }
    }

    /// Number of subspaces (code bytes per row).
    pub fn m(&self) -> usize {
        self.m
    }

    /// Constant added to every scanned sum.
    pub fn bias(&self) -> f32 {
        self.bias
    }

    /// The `m · 256` entries, subspace-major.
    pub fn entries(&self) -> &[f32] {
        &self.data
    }

    /// Scalar ADC of one code row: `Σ_s entry[s][code_s]` in subspace order,
    /// then `+ bias`.
    ///
    /// # Panics
    /// If `code.len() != m`.
    #[track_caller]
    pub fn distance(&self, code: &[u8]) -> f32 {
        assert_eq!(code.len(), self.m, "pq: code length differs from m");
        scalar::row(&self.data, code) + self.bias
    }
}

/// ADC table of squared L2 partials: `entry[s][j] = ‖q_s − c_{s,j}‖²`.
///
/// # Panics
/// If `query.len() != codebooks.dim()`.
#[track_caller]
pub fn adc_table_l2(query: &[f32], codebooks: &Codebooks) -> AdcTable {
    AdcTable::build(query, codebooks, 0.0, crate::f32::l2sq_many)
}

/// ADC table of dot partials: `entry[s][j] = q_s · c_{s,j}`; a scan yields
/// the approximate dot product (higher is more similar).
///
/// # Panics
/// If `query.len() != codebooks.dim()`.
#[track_caller]
pub fn adc_table_dot(query: &[f32], codebooks: &Codebooks) -> AdcTable {
    AdcTable::build(query, codebooks, 0.0, crate::f32::dot_many)
}

#[track_caller]
fn check_scan(table: &AdcTable, codes: &[u8], out: &[f32]) {
    assert!(
        table.m.checked_mul(out.len()) == Some(codes.len()),
        "pq adc_scan: codes.len() = {} but m {} x {} outputs",
        codes.len(),
        table.m,
        out.len()
    );
}

fn scan_on(isa: Isa, table: &AdcTable, codes: &[u8], out: &mut [f32]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `check_scan` held.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::scan(&table.data, table.m, codes, out) },
        // SAFETY: `isa` is available, so NEON is present; `check_scan` held.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::scan(&table.data, table.m, codes, out) },
        Isa::Portable => portable::scan(&table.data, table.m, codes, out),
        _ => scalar::scan(&table.data, table.m, codes, out),
    }
    if table.bias != 0.0 {
        out.iter_mut().for_each(|o| *o += table.bias);
    }
}

/// ADC scan: `out[i] = bias + Σ_s entry[s][codes[i·m + s]]` over
/// `out.len()` code rows of `m` bytes. Bit-exact across ISAs.
///
/// # Panics
/// If `codes.len() != m · out.len()`.
#[track_caller]
pub fn adc_scan(table: &AdcTable, codes: &[u8], out: &mut [f32]) {
    check_scan(table, codes, out);
    scan_on(isa(), table, codes, out)
}

/// [`adc_scan`] on an explicit ISA; `false` (and `out` untouched) if
/// unavailable.
#[track_caller]
pub fn adc_scan_with(isa: Isa, table: &AdcTable, codes: &[u8], out: &mut [f32]) -> bool {
    check_scan(table, codes, out);
    isa.is_available() && {
        scan_on(isa, table, codes, out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Codebooks {
        // dim 3, m 2: subspaces [0,1) and [1,3); k = 2.
        Codebooks::new(3, 2, 2, vec![0.0, 1.0, 0.0, 0.0, 1.0, 1.0]).unwrap()
    }

    #[test]
    fn layout_and_encode() {
        let cb = tiny();
        assert_eq!(cb.subspace(0), 0..1);
        assert_eq!(cb.subspace(1), 1..3);
        assert_eq!(cb.centroid(1, 1), &[1.0, 1.0]);
        let mut code = [9u8; 2];
        cb.encode(&[0.9, 0.6, 0.7], &mut code);
        assert_eq!(code, [1, 1]);
        // Exact tie (0.5 from both centroids) goes to the lower index.
        cb.encode(&[0.5, 0.0, 0.0], &mut code);
        assert_eq!(code, [0, 0]);
        let mut v = [0.0f32; 3];
        cb.decode(&[1, 1], &mut v);
        assert_eq!(v, [1.0, 1.0, 1.0]);
    }

    #[test]
    fn tables_and_scan() {
        let cb = tiny();
        let q = [1.0f32, 2.0, 0.0];
        let t = adc_table_l2(&q, &cb);
        assert_eq!(&t.entries()[..3], &[1.0, 0.0, f32::INFINITY]);
        assert_eq!(&t.entries()[256..258], &[4.0, 2.0]);
        let codes = [0u8, 1, 1, 0, 2, 0];
        for isa in crate::available_isas() {
            let mut out = [0.0f32; 3];
            assert!(adc_scan_with(isa, &t, &codes, &mut out));
            assert_eq!(out, [3.0, 4.0, f32::INFINITY], "{isa}");
        }
        let t = AdcTable::for_metric(Metric::Cosine, &q, &cb);
        assert_eq!(t.bias(), 1.0);
        // dot partials: sub0 {0, 1}, sub1 {0, 2}; code (1, 1) -> 1 - 3.
        assert_eq!(t.distance(&[1, 1]), -2.0);
    }

    #[test]
    fn rejects_bad_codebooks() {
        assert!(Codebooks::new(3, 0, 2, vec![0.0; 6]).is_err());
        assert!(Codebooks::new(3, 4, 2, vec![0.0; 6]).is_err());
        assert!(Codebooks::new(3, 2, 257, vec![0.0; 771]).is_err());
        assert!(Codebooks::new(3, 2, 2, vec![0.0; 5]).is_err());
        assert!(Codebooks::new(3, 2, 2, vec![0.0, 0.0, 0.0, f32::NAN, 0.0, 0.0]).is_err());
    }
}
