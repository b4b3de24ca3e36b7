//! Queries over the search layout.
//!
//! Traversal ranks with the fast SIMD kernels (`kernel::fast_score`); the
//! best candidates are then rescored with the canonical f64 math and ordered
//! by `(score, key)`, so reported scores are exact and reproducible. A
//! [`SearchContext`] owns every buffer a query needs (visited stamps, heaps,
//! candidate and id lists), so steady-state queries allocate nothing.

use super::filter::{interval_count, Filter, Resolved};
use super::graph::SearchGraph;
use super::{LayerSearch, Scored};
use crate::accel::kernel::{fast_score, touch};
use crate::accel::vectors::check_vector;
use crate::error::Result;
use prox_kernels::{canonical, Metric};

/// A search result: node id in the graph (key order) and canonical score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Node id; the key is [`SearchGraph::key`].
    pub id: u32,
    /// Canonical score (spec 11.2), lower is better.
    pub score: f64,
}

/// Per-query knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchOptions {
    /// Results wanted.
    pub k: usize,
    /// Candidate-list size on layer 0 (raised to `k` if smaller).
    pub ef: usize,
}

/// What a query did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Eligible nodes (all unmasked nodes without a filter).
    pub eligible: usize,
    /// Layer-0 candidate-list size actually used (0 for a pure exact scan).
    pub ef_used: usize,
    /// True if the eligible set was scored exhaustively.
    pub exact_scan: bool,
}

/// Reusable per-thread query state.
#[derive(Debug, Default, Clone)]
pub struct SearchContext {
    ls: LayerSearch,
    cands: Vec<Scored>,
    set_ids: Vec<u32>,
    bits: Vec<u64>,
    qcodes: Vec<i8>,
}

impl SearchContext {
    /// A fresh context (buffers grow on first use and are then reused).
    pub fn new() -> Self {
        Self::default()
    }
}

/// Eligible sets at most this large (or at most 1/16 of the graph) are
/// scored exhaustively instead of traversed.
const EXACT_SCAN_MIN: usize = 2048;

impl SearchGraph {
    /// The `k` nearest nodes to the prepared `query` (unfiltered), written
    /// to `out` ascending by `(score, key)`.
    pub fn search(
        &self,
        ctx: &mut SearchContext,
        query: &[f32],
        opts: SearchOptions,
        out: &mut Vec<Hit>,
    ) -> Result<SearchStats> {
        self.search_filtered(ctx, query, opts, None, out)
    }

    /// Filtered search: returns exactly `min(k, eligible)` results. Small
    /// eligible sets are scanned exactly; otherwise the traversal keeps only
    /// eligible nodes and widens `ef` by `nodes / eligible`; if the graph
    /// still yields too few, the eligible set is scanned.
    pub fn search_filtered(
        &self,
        ctx: &mut SearchContext,
        query: &[f32],
        opts: SearchOptions,
        filter: Option<&Filter>,
        out: &mut Vec<Hit>,
    ) -> Result<SearchStats> {
        check_vector(query, self.dims(), None)?;
        out.clear();
        let n = self.node_count();
        let k = opts.k;
        let ef = opts.ef.max(k).max(1);
        let resolved = match filter {
            None => Resolved::Interval(0, n as u32),
            Some(f) => f.resolve(self, &mut ctx.set_ids, &mut ctx.bits),
        };
        let eligible = match resolved {
            Resolved::Interval(lo, hi) => interval_count(self, lo, hi),
            Resolved::Set => ctx.set_ids.len(),
        };
        let mut stats = SearchStats {
            eligible,
            ..SearchStats::default()
        };
        if k > 0 && eligible > 0 {
            let want = k.min(eligible);
            let unfiltered = filter.is_none();
            let scan = !unfiltered && (eligible <= EXACT_SCAN_MIN || eligible * 16 <= n);
            if !scan {
                let widened = if unfiltered {
                    ef
                } else {
                    (ef as u64 * n as u64).div_ceil(eligible as u64) as usize
                };
                stats.ef_used = widened.min(n).max(ef);
                match resolved {
                    Resolved::Interval(lo, hi) => {
                        let all = lo == 0 && hi as usize == n && self.masked_ids.is_empty();
                        if all {
                            self.traverse(ctx, query, k, stats.ef_used, &|_| true, out);
                        } else {
                            let elig = |id: u32| id >= lo && id < hi && !self.is_masked(id);
                            self.traverse(ctx, query, k, stats.ef_used, &elig, out);
                        }
                    }
                    Resolved::Set => {
                        let bits = std::mem::take(&mut ctx.bits);
                        let elig = |id: u32| bits[id as usize / 64] >> (id % 64) & 1 == 1;
                        self.traverse(ctx, query, k, stats.ef_used, &elig, out);
                        ctx.bits = bits;
                    }
                }
            }
            if out.len() < want {
                stats.exact_scan = true;
                self.scan(ctx, query, k, resolved, out);
            }
        }
        if let Resolved::Set = resolved {
            for &id in &ctx.set_ids {
                ctx.bits[id as usize / 64] = 0;
            }
        }
        Ok(stats)
    }

    /// Greedy descent through the upper layers, best-first search of layer 0,
    /// canonical rerank.
    fn traverse<E: Fn(u32) -> bool>(
        &self,
        ctx: &mut SearchContext,
        q: &[f32],
        k: usize,
        ef: usize,
        eligible: &E,
        out: &mut Vec<Hit>,
    ) {
        let Some(entry) = self.entry else {
            return;
        };
        let metric = self.metric;
        let vectors = &self.vectors;
        if let Some(sq) = &self.sq8 {
            let d = self.dims();
            ctx.qcodes.resize(d, 0);
            sq.quantizer.encode(q, &mut ctx.qcodes);
            let qc = std::mem::take(&mut ctx.qcodes);
            let qn: i64 = qc.iter().map(|&c| i64::from(c) * i64::from(c)).sum();
            let mut score = |id: u32| {
                let dot = i64::from(prox_kernels::sq8::dot_i8(&qc, sq.row(id, d)));
                match metric {
                    Metric::L2 => (qn + i64::from(sq.norms[id as usize]) - 2 * dot) as f32,
                    Metric::Cosine | Metric::InnerProduct => -dot as f32,
                }
            };
            let prefetch = |id: u32| {
                std::hint::black_box(sq.codes.get(id as usize * d).copied());
            };
            self.walk(ctx, entry, ef, &mut score, eligible, &prefetch);
            ctx.qcodes = qc;
            // Approximate order: rescore the best `sq8_rescore_depth(k)`
            // with the f32 kernel before the canonical rerank of the best.
            ctx.cands.truncate(sq8_rescore_depth(k));
            for c in ctx.cands.iter_mut() {
                c.score = fast_score(metric, q, vectors.row(c.id as usize));
            }
            ctx.cands.sort_unstable();
        } else {
            let mut score = |id: u32| fast_score(metric, q, vectors.row(id as usize));
            let prefetch = |id: u32| touch(vectors.row(id as usize));
            self.walk(ctx, entry, ef, &mut score, eligible, &prefetch);
        }
        self.rerank(q, &ctx.cands, k, rerank_depth(k), out);
    }

    /// Greedy descent then layer-0 best-first search; leaves the eligible
    /// candidates in `ctx.cands`, ascending.
    fn walk<S, E, P>(
        &self,
        ctx: &mut SearchContext,
        entry: u32,
        ef: usize,
        score: &mut S,
        eligible: &E,
        prefetch: &P,
    ) where
        S: FnMut(u32) -> f32,
        E: Fn(u32) -> bool,
        P: Fn(u32),
    {
        let mut cur = Scored {
            score: score(entry),
            id: entry,
        };
        for layer in (1..=usize::from(self.max_level)).rev() {
            cur = LayerSearch::greedy(self, layer, cur, score);
        }
        ctx.ls.search_layer(
            self,
            self.node_count(),
            0,
            &[cur],
            ef,
            score,
            eligible,
            prefetch,
        );
        ctx.ls.drain_sorted(&mut ctx.cands);
    }

    /// Scores every eligible node with the fast kernel, then reranks the best
    /// canonically.
    fn scan(
        &self,
        ctx: &mut SearchContext,
        q: &[f32],
        k: usize,
        resolved: Resolved,
        out: &mut Vec<Hit>,
    ) {
        let metric = self.metric;
        ctx.cands.clear();
        let mut push = |id: u32| {
            ctx.cands.push(Scored {
                score: fast_score(metric, q, self.vectors.row(id as usize)),
                id,
            })
        };
        match resolved {
            Resolved::Interval(lo, hi) => {
                for id in lo..hi {
                    if !self.is_masked(id) {
                        push(id);
                    }
                }
            }
            Resolved::Set => {
                for &id in &ctx.set_ids {
                    push(id);
                }
            }
        }
        let depth = rerank_depth(k).max(4 * k);
        if ctx.cands.len() > depth {
            ctx.cands.select_nth_unstable(depth - 1);
            ctx.cands.truncate(depth);
        }
        ctx.cands.sort_unstable();
        self.rerank(q, &ctx.cands, k, depth, out);
    }

    /// Rescores the first `depth` candidates canonically and keeps the best
    /// `k` by `(score, key)` (ids are in key order).
    fn rerank(&self, q: &[f32], cands: &[Scored], k: usize, depth: usize, out: &mut Vec<Hit>) {
        out.clear();
        let take = cands.len().min(depth.max(k));
        out.extend(cands[..take].iter().map(|c| Hit {
            id: c.id,
            score: canonical::score(self.metric, q, self.vectors.row(c.id as usize)),
        }));
        out.sort_unstable_by(|a, b| a.score.total_cmp(&b.score).then(a.id.cmp(&b.id)));
        out.truncate(k);
    }
}

/// Candidates rescored canonically per query: enough to absorb the f32
/// ranking error (relative ~1e-7) around the k-th result.
fn rerank_depth(k: usize) -> usize {
    k + k / 2 + 4
}

/// SQ8 traversal candidates rescored with f32: the SQ8 ranking error (one
/// global scale, step `max|x|/127`) is far larger than f32's, so a wider
/// band around the k-th result is rescored.
fn sq8_rescore_depth(k: usize) -> usize {
    3 * k + 8
}
