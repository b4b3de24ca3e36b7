//! The benchmark result schema shared by `prox bench`, `prox demo` and the
//! peer script (benches/peers/peers.py), one JSON object per line.
//!
//! Required fields (always present, `null` where marked optional):
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `engine` | string | `prox`, `hnswlib`, `faiss`, `usearch`, ... |
//! | `path` | string | search path within the engine: `native`, `hnsw`, `pq`, `brute`, `ivfpq-fs`, ... |
//! | `dataset` | string | dataset name (directory name) |
//! | `mode` | string | the setting that produced the point (`exact`, `fast`, `budget=2000`, `ef=64`, ...) |
//! | `ef` | int or null | the path's main effort knob (efSearch, nprobe); null if none |
//! | `recall` | float | recall@k against the ground truth, averaged over queries |
//! | `qps` | float | queries per second over the whole query set |
//! | `threads` | int | search threads |
//! | `build_seconds` | float or null | index build time, if measured in this run |
//! | `index_bytes` | int or null | index size in bytes, if known |
//!
//! Optional fields: `k`, `budget`, `mean_distance_evals`, `mean_nodes`,
//! `p50_us`, `p99_us`, `completion`. Readers ignore unknown fields.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRecord {
    /// Engine name.
    pub engine: String,
    /// Search path within the engine.
    pub path: String,
    /// Dataset name.
    pub dataset: String,
    /// The setting that produced this point.
    pub mode: String,
    /// Main effort knob (efSearch, nprobe), if any.
    pub ef: Option<u64>,
    /// Recall@k.
    pub recall: f64,
    /// Queries per second.
    pub qps: f64,
    /// Search threads.
    pub threads: u32,
    /// Index build seconds, if measured.
    pub build_seconds: Option<f64>,
    /// Index bytes, if known.
    pub index_bytes: Option<u64>,
    /// Neighbours per query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<u32>,
    /// Budget (distance evaluations) of a budgeted native search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
    /// Mean distance evaluations per query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_distance_evals: Option<f64>,
    /// Mean index nodes visited per query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_nodes: Option<f64>,
    /// Median per-query latency in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<f64>,
    /// 99th-percentile per-query latency in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    /// How the searches completed (e.g. `exact`, `budget_exhausted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
    /// The filter every query carried (its JSON form), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Records the filter admits (when it is a field filter or key set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible: Option<u64>,
    /// Answers with fewer than `min(k, eligible)` hits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underfilled: Option<u64>,
}

impl BenchRecord {
    /// The curve this point belongs to: `engine/path` (plus the thread
    /// count when `with_threads`).
    pub fn series(&self, with_threads: bool) -> String {
        if with_threads {
            format!("{}/{} ({}t)", self.engine, self.path, self.threads)
        } else {
            format!("{}/{}", self.engine, self.path)
        }
    }
}

/// Reads a JSON-lines results file (blank lines skipped); errors name the
/// line.
pub fn read(path: &Path) -> Result<Vec<BenchRecord>> {
    let mut out = Vec::new();
    for item in crate::io::JsonLines::<BenchRecord>::open(path)? {
        let (_, rec) = item.context("not a bench record (see docs/cli.md for the schema)")?;
        out.push(rec);
    }
    Ok(out)
}
