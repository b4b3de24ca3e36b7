//! Deterministic choice of a search path, and a small facade over the
//! accelerators for the map's search engine.
//!
//! Rules for [`Mode::Auto`], in order (first match wins):
//! 1. `k == 0` or an empty map: [`Path::Native`].
//! 2. A filter whose eligible count is at most 2048: [`Path::Native`] (the
//!    exact, filter-aware search is cheaper than any index for so few
//!    candidates, and exact).
//! 3. A filter admitting at most `records / 8`, on a PQ sidecar with 4-bit
//!    codes (IVF fast scan) when the caller gives [`Planner::pq_filtered`]
//!    (the index takes it from the map's recall profile): [`Path::Pq`],
//!    each eligible row of the probed lists costing a masked code read.
//!    `nprobe` and the rerank multiplier are the request's, else
//!    `pq_filtered`'s; the plan's `min_seen` makes the scan probe at least
//!    the lists that hold [`SEEN_PER_K`]` · k` eligible rows on average,
//!    and on past them until the lists it read held that many.
//! 4. Otherwise a filter admitting at most `records / 16`: [`Path::Native`]
//!    (a graph traversal would mostly walk ineligible nodes).
//! 5. An HNSW sidecar: [`Path::Hnsw`] with `ef = max(requested or the
//!    manifest's ef_search, k)`.
//! 6. A PQ sidecar: [`Path::Pq`] with the requested or the manifest's
//!    rerank multiplier and the requested `nprobe` (`0` in the plan: the
//!    index's default, [`super::pq::FastScan::default_nprobe`]; only 4-bit
//!    sidecars, which search with IVF fast-scan, use it).
//! 7. Otherwise [`Path::Native`].
//!
//! [`Mode::Exact`] always plans [`Path::Native`]; forcing a path whose
//! sidecar is missing is an error. The plan depends only on the request and
//! which sidecars exist, so equal requests always take the same path.

use super::hnsw::{Filter, HnswSearchContext, IdHit, SearchGraph, SearchOptions};
use super::pq::{Pq, PqOptions, PqSearchContext};
use crate::error::{Error, Result};
use std::time::Instant;

/// What the caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Exact results; never uses an accelerator.
    Exact,
    /// Let the planner choose.
    #[default]
    Auto,
    /// Force the native (exact PRXN) search.
    Native,
    /// Force the HNSW sidecar.
    Hnsw,
    /// Force the PQ sidecar.
    Pq,
}

impl Mode {
    /// Parses `exact`, `auto`, `native`, `hnsw`, `pq` (the CLI's `--path`).
    pub fn parse(s: &str) -> Result<Mode> {
        Ok(match s {
            "exact" => Mode::Exact,
            "auto" => Mode::Auto,
            "native" => Mode::Native,
            "hnsw" => Mode::Hnsw,
            "pq" => Mode::Pq,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "search path must be auto, exact, native, hnsw or pq, got {s:?}"
                )))
            }
        })
    }
}

/// The path a search runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The map's own exact search (run by the caller).
    Native,
    /// HNSW traversal with canonical rerank.
    Hnsw,
    /// PQ ADC scan with exact rerank.
    Pq,
}

impl Path {
    /// Lowercase name (`native`, `hnsw`, `pq`).
    pub fn name(self) -> &'static str {
        match self {
            Path::Native => "native",
            Path::Hnsw => "hnsw",
            Path::Pq => "pq",
        }
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A search request as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Request {
    /// Requested mode.
    pub mode: Mode,
    /// Results wanted.
    pub k: usize,
    /// Explicit HNSW candidate-list size (`--ef`), if any.
    pub ef: Option<usize>,
    /// Explicit PQ rerank multiplier, if any.
    pub rerank: Option<usize>,
    /// Explicit number of coarse lists the PQ fast-scan path probes, if any.
    pub nprobe: Option<usize>,
    /// Records in the map.
    pub records: usize,
    /// Eligible records under the request's filter (`None`: no filter).
    pub eligible: Option<usize>,
}

/// The planner's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Chosen path.
    pub path: Path,
    /// HNSW `ef` (0 for other paths).
    pub ef: usize,
    /// PQ rerank multiplier (0 for other paths).
    pub rerank: usize,
    /// PQ fast-scan lists to probe (0: the index's default; 0 for other
    /// paths).
    pub nprobe: usize,
    /// Eligible rows a filtered PQ fast scan reads before it stops probing
    /// ([`super::pq::PqOptions::min_seen`]; 0: no floor).
    pub min_seen: usize,
    /// Why (stable, short, for reports).
    pub reason: &'static str,
}

/// Which sidecars exist, with their manifest defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Planner {
    /// `ef_search` of the HNSW manifest, if an HNSW sidecar exists.
    pub hnsw_ef_search: Option<usize>,
    /// Rerank multiplier of the PQ manifest, if a PQ sidecar exists.
    pub pq_rerank: Option<usize>,
    /// The PQ sidecar searches with IVF fast scan (4-bit codes).
    pub pq_fast: bool,
    /// `(nprobe, rerank)` for a filtered PQ plan when the request names
    /// neither; rule 3 of the module docs applies only with it. `nprobe`
    /// 0 is the index's default.
    pub pq_filtered: Option<(usize, usize)>,
}

/// Eligible sets up to this size always go to the exact path.
pub const SMALL_ELIGIBLE: usize = 2048;

/// Eligible sets up to `records / FILTERED_PQ_FRACTION` go to a 4-bit PQ
/// sidecar's masked fast scan.
const FILTERED_PQ_FRACTION: usize = 8;

/// Eligible sets up to `records / FILTERED_NATIVE_FRACTION` go to the exact
/// path when no fast scan takes them.
const FILTERED_NATIVE_FRACTION: usize = 16;

/// Eligible rows per requested hit a filtered PQ plan reads at least.
pub const SEEN_PER_K: usize = 48;

impl Planner {
    /// Plans `req`; see the module docs for the rules.
    pub fn plan(&self, req: &Request) -> Result<Plan> {
        let native = |reason| Plan {
            path: Path::Native,
            ef: 0,
            rerank: 0,
            nprobe: 0,
            min_seen: 0,
            reason,
        };
        let hnsw = |ef_default: usize, reason| Plan {
            path: Path::Hnsw,
            ef: req.ef.unwrap_or(ef_default).max(req.k).max(1),
            rerank: 0,
            nprobe: 0,
            min_seen: 0,
            reason,
        };
        let pq = |default: usize, reason| Plan {
            path: Path::Pq,
            ef: 0,
            rerank: req.rerank.unwrap_or(default).max(1),
            nprobe: req.nprobe.unwrap_or(0),
            min_seen: 0,
            reason,
        };
        match req.mode {
            Mode::Exact => Ok(native("exact mode")),
            Mode::Native => Ok(native("forced")),
            Mode::Hnsw => self
                .hnsw_ef_search
                .map(|ef| hnsw(ef, "forced"))
                .ok_or_else(|| Error::InvalidArgument("no HNSW sidecar for this map".into())),
            Mode::Pq => self
                .pq_rerank
                .map(|r| pq(r, "forced"))
                .ok_or_else(|| Error::InvalidArgument("no PQ sidecar for this map".into())),
            Mode::Auto => {
                if req.k == 0 || req.records == 0 {
                    return Ok(native("empty request"));
                }
                if let Some(e) = req.eligible {
                    if e <= SMALL_ELIGIBLE {
                        return Ok(native("selective filter"));
                    }
                    if let (Some((nprobe, rerank)), Some(_), true) =
                        (self.pq_filtered, self.pq_rerank, self.pq_fast)
                    {
                        if e <= req.records / FILTERED_PQ_FRACTION {
                            return Ok(Plan {
                                path: Path::Pq,
                                ef: 0,
                                rerank: req.rerank.unwrap_or(rerank).max(1),
                                nprobe: req.nprobe.unwrap_or(nprobe),
                                min_seen: SEEN_PER_K.saturating_mul(req.k),
                                reason: "filtered pq",
                            });
                        }
                    }
                    if e <= req.records / FILTERED_NATIVE_FRACTION {
                        return Ok(native("selective filter"));
                    }
                }
                if let Some(ef) = self.hnsw_ef_search {
                    return Ok(hnsw(ef, "hnsw sidecar"));
                }
                if let Some(r) = self.pq_rerank {
                    return Ok(pq(r, "pq sidecar"));
                }
                Ok(native("no sidecar"))
            }
        }
    }
}

/// Loaded accelerators of one map.
#[derive(Debug, Clone, Default)]
pub struct Accelerators {
    /// HNSW search layout and its manifest `ef_search`.
    pub hnsw: Option<(SearchGraph, usize)>,
    /// PQ sidecar.
    pub pq: Option<Pq>,
}

/// Per-thread buffers for [`Accelerators::run`].
#[derive(Debug, Default, Clone)]
pub struct AccelContext {
    hnsw: HnswSearchContext,
    pq: PqSearchContext,
    /// Id hits of the last search, reused across searches.
    hits: Vec<IdHit>,
    /// Candidates of a direct scoring ([`Accelerators::score_set`]).
    cands: Vec<super::hnsw::Scored>,
}

impl AccelContext {
    /// The buffers of a direct scoring: candidates and hits.
    pub(super) fn direct_buffers(&mut self) -> (&mut Vec<super::hnsw::Scored>, &mut Vec<IdHit>) {
        (&mut self.cands, &mut self.hits)
    }
}

/// Result of an accelerated search.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The plan that ran.
    pub plan: Plan,
    /// `(key, canonical score)` ascending by `(score, key)`.
    pub hits: Vec<(Vec<u8>, f64)>,
}

impl Accelerators {
    /// The planner for the loaded sidecars.
    pub fn planner(&self) -> Planner {
        Planner {
            hnsw_ef_search: self.hnsw.as_ref().map(|(_, ef)| *ef),
            pq_rerank: self.pq.as_ref().map(|p| p.params().rerank as usize),
            pq_fast: self.pq.as_ref().is_some_and(|p| p.fast_scan_supported()),
            pq_filtered: None,
        }
    }

    /// Runs an accelerator plan. A [`Path::Native`] plan is the caller's to
    /// run and is rejected here.
    pub fn run(
        &self,
        ctx: &mut AccelContext,
        plan: Plan,
        query: &[f32],
        k: usize,
        filter: Option<&Filter>,
    ) -> Result<Outcome> {
        let mut hits = Vec::new();
        self.run_each(ctx, plan, query, k, filter, None, |key, score| {
            hits.push((key.to_vec(), score))
        })?;
        Ok(Outcome { plan, hits })
    }

    /// [`Accelerators::run`] stopped at `deadline` with
    /// [`Error::DeadlineExceeded`], handing each hit's key (borrowed from
    /// the sidecar) and canonical score to `each` in `(score, key)` order
    /// instead of collecting them: with a reused `ctx` the search itself
    /// allocates nothing in steady state.
    #[allow(clippy::too_many_arguments)]
    pub fn run_each(
        &self,
        ctx: &mut AccelContext,
        plan: Plan,
        query: &[f32],
        k: usize,
        filter: Option<&Filter>,
        deadline: Option<Instant>,
        mut each: impl FnMut(&[u8], f64),
    ) -> Result<()> {
        let hits = &mut ctx.hits;
        match plan.path {
            Path::Native => Err(Error::InvalidArgument(
                "the native path is run by the map's search, not an accelerator".into(),
            )),
            Path::Hnsw => {
                let (g, _) = self
                    .hnsw
                    .as_ref()
                    .ok_or_else(|| Error::InvalidArgument("no HNSW sidecar loaded".into()))?;
                g.search_filtered_until(
                    &mut ctx.hnsw,
                    query,
                    SearchOptions { k, ef: plan.ef },
                    filter,
                    deadline,
                    hits,
                )?;
                hits.iter().for_each(|h| each(g.key(h.id), h.score));
                Ok(())
            }
            Path::Pq => {
                let p = self
                    .pq
                    .as_ref()
                    .ok_or_else(|| Error::InvalidArgument("no PQ sidecar loaded".into()))?;
                let opts = PqOptions {
                    k,
                    nprobe: (plan.nprobe > 0).then_some(plan.nprobe),
                    rerank: Some(plan.rerank),
                    min_seen: plan.min_seen,
                };
                p.search_until(&mut ctx.pq, query, &opts, filter, deadline, hits)?;
                hits.iter()
                    .for_each(|h| each(p.key(h.id as usize), h.score));
                Ok(())
            }
        }
    }
}
