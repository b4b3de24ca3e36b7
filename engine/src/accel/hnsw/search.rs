//! Queries over the search layout.
//!
//! Traversal ranks with the fast SIMD kernels (`kernel::fast_score`); the
//! best candidates are then rescored with the canonical f64 math and ordered
//! by `(score, key)`, so reported scores are exact and reproducible. A
//! [`HnswSearchContext`] owns every buffer a query needs (visited set, heaps,
//! candidate and id lists), so steady-state queries allocate nothing.

use super::filter::{interval_count, resolve, Resolved};
use super::graph::SearchGraph;
use super::{LayerSearch, Scored, Visited};
use crate::accel::vectors::{check_vector, Arena};
use crate::deadline::Watch;
use crate::error::Result;
use crate::keys::Filter;
use crate::numeric::kernel::{canonical_each, fast_score};
use prox_kernels::prefetch::{prefetch_first, prefetch_read};
use prox_kernels::Metric;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// A search result: node id in the graph (key order) and canonical score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdHit {
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

/// What an HNSW query did (the native search reports its own
/// [`SearchStats`](crate::proximity::search::SearchStats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HnswStats {
    /// Eligible nodes (all unmasked nodes without a filter).
    pub eligible: usize,
    /// Layer-0 candidate-list size actually used (0 for a pure exact scan).
    pub ef_used: usize,
    /// True if the eligible set was scored exhaustively.
    pub exact_scan: bool,
}

/// Reusable per-thread query state.
#[derive(Debug, Default, Clone)]
pub struct HnswSearchContext {
    l0: L0State,
    cands: Vec<Scored>,
    qcodes: Vec<i8>,
    /// PQ traversal: the query's ADC table (`m × 256` f32, subspace-major),
    /// refilled in place per query.
    adc: Vec<f32>,
}

/// Layer-0 search state: the visited set (a bitset, 125 KB at a million
/// nodes so it stays in L2, reset through the ids it set), both heaps and
/// the neighbour scratch list, all kept at their high-water capacity
/// between queries.
#[derive(Debug, Default, Clone)]
struct L0State {
    visited: Visited,
    candidates: BinaryHeap<Reverse<Scored>>,
    results: BinaryHeap<Scored>,
    scratch: Vec<u32>,
}

impl L0State {
    fn reset(&mut self, n: usize) {
        self.visited.reset(n);
        self.candidates.clear();
        self.results.clear();
    }

    /// Marks `id`; `true` if it was not yet visited in this query.
    #[inline]
    fn visit(&mut self, id: u32) -> bool {
        self.visited.insert(id)
    }
}

impl HnswSearchContext {
    /// A fresh context (buffers grow on first use and are then reused).
    pub fn new() -> Self {
        Self::default()
    }
}

thread_local! {
    /// One reusable context per thread for [`SearchGraph::search_batch`]
    /// (its buffers stay sized for the largest graph searched on the thread).
    static BATCH_CONTEXT: std::cell::RefCell<HnswSearchContext> =
        std::cell::RefCell::new(HnswSearchContext::new());
}

/// Eligible sets at most this large (or at most 1/16 of the graph) are
/// scored exhaustively instead of traversed.
const EXACT_SCAN_MIN: usize = 2048;

impl SearchGraph {
    /// The `k` nearest nodes to the prepared `query` (unfiltered), written
    /// to `out` ascending by `(score, key)`.
    pub fn search(
        &self,
        ctx: &mut HnswSearchContext,
        query: &[f32],
        opts: SearchOptions,
        out: &mut Vec<IdHit>,
    ) -> Result<HnswStats> {
        self.search_filtered(ctx, query, opts, None, out)
    }

    /// Searches every query of `queries` (unfiltered) in parallel on the
    /// current rayon pool; `result[i]` answers `queries[i]`. Each pool
    /// thread reuses one thread-local [`HnswSearchContext`] across queries and
    /// batches (no per-batch or per-split setup; no two threads share a
    /// buffer), and work is split in runs of at least 4 queries.
    pub fn search_batch<Q: AsRef<[f32]> + Sync>(
        &self,
        queries: &[Q],
        opts: SearchOptions,
    ) -> Result<Vec<Vec<IdHit>>> {
        use rayon::prelude::*;
        queries
            .par_iter()
            .with_min_len(4)
            .map(|q| {
                BATCH_CONTEXT.with(|ctx| {
                    let mut out = Vec::with_capacity(opts.k);
                    self.search(&mut ctx.borrow_mut(), q.as_ref(), opts, &mut out)?;
                    Ok(out)
                })
            })
            .collect()
    }

    /// Filtered search: returns exactly `min(k, eligible)` results. Small
    /// eligible sets are scanned exactly; otherwise the traversal routes
    /// through every node but keeps only eligible ones, until it holds `ef`
    /// of them; if the graph still yields too few, the eligible set is
    /// scanned.
    pub fn search_filtered(
        &self,
        ctx: &mut HnswSearchContext,
        query: &[f32],
        opts: SearchOptions,
        filter: Option<&Filter>,
        out: &mut Vec<IdHit>,
    ) -> Result<HnswStats> {
        self.search_filtered_until(ctx, query, opts, filter, None, out)
    }

    /// [`SearchGraph::search_filtered`] stopped at `deadline` with
    /// [`crate::Error::DeadlineExceeded`] (`out` then holds nothing
    /// useful); the same hits when it finishes in time.
    pub fn search_filtered_until(
        &self,
        ctx: &mut HnswSearchContext,
        query: &[f32],
        opts: SearchOptions,
        filter: Option<&Filter>,
        deadline: Option<Instant>,
        out: &mut Vec<IdHit>,
    ) -> Result<HnswStats> {
        check_vector(query, self.dims(), None)?;
        let mut watch = Watch::new(deadline);
        out.clear();
        let n = self.node_count();
        let k = opts.k;
        let ef = opts.ef.max(k).max(1);
        let resolved = match filter {
            None => Resolved::Interval(0, n as u32),
            Some(f) => resolve(f, self),
        };
        let eligible = match resolved {
            Resolved::Interval(lo, hi) => interval_count(self, lo, hi),
            Resolved::Set(ref set) => set.ids.len(),
        };
        let mut stats = HnswStats {
            eligible,
            ..HnswStats::default()
        };
        let mut done = Ok(());
        if k > 0 && eligible > 0 {
            let want = k.min(eligible);
            let unfiltered = filter.is_none();
            let scan = !unfiltered && (eligible <= EXACT_SCAN_MIN || eligible * 16 <= n);
            if !scan {
                // Ineligible nodes route but never enter the results, so
                // the search runs until `ef` eligible nodes are found: `ef`
                // means what it means unfiltered.
                stats.ef_used = ef.min(n);
                match &resolved {
                    &Resolved::Interval(lo, hi) => {
                        let all = lo == 0 && hi as usize == n && self.masked_ids.is_empty();
                        let ef = stats.ef_used;
                        done = if all {
                            self.traverse(ctx, query, (k, ef), &|_| true, &mut watch, out)
                        } else {
                            let elig = |id: u32| id >= lo && id < hi && !self.is_masked(id);
                            self.traverse(ctx, query, (k, ef), &elig, &mut watch, out)
                        };
                    }
                    Resolved::Set(set) => {
                        let elig = |id: u32| set.contains(id);
                        let ef = stats.ef_used;
                        done = self.traverse(ctx, query, (k, ef), &elig, &mut watch, out);
                    }
                }
            }
            if done.is_ok() && out.len() < want {
                stats.exact_scan = true;
                done = self.scan(ctx, query, k, resolved, &mut watch, out);
            }
        }
        done?;
        Ok(stats)
    }

    /// Greedy descent through the upper layers, best-first search of layer 0,
    /// canonical rerank.
    fn traverse<E: Fn(u32) -> bool>(
        &self,
        ctx: &mut HnswSearchContext,
        q: &[f32],
        (k, ef): (usize, usize),
        eligible: &E,
        watch: &mut Watch,
        out: &mut Vec<IdHit>,
    ) -> Result<()> {
        let Some(entry) = self.entry else {
            return Ok(());
        };
        let d = self.dims();
        let metric = self.metric;
        let vectors = &self.vectors;
        let l0 = &self.l0;
        if let Some(quantizer) = &self.sq8 {
            ctx.qcodes.resize(self.dims(), 0);
            quantizer.encode(q, &mut ctx.qcodes);
            let qc = std::mem::take(&mut ctx.qcodes);
            let qn: i64 = qc.iter().map(|&c| i64::from(c) * i64::from(c)).sum();
            let mut score = |id: u32| {
                let dot = i64::from(prox_kernels::sq8::dot_i8(&qc, l0.code(id)));
                match metric {
                    Metric::L2 => (qn + i64::from(l0.norm(id)) - 2 * dot) as f32,
                    Metric::Cosine | Metric::InnerProduct => -dot as f32,
                }
            };
            // One block holds the code being scored and the links used if
            // the node is expanded later.
            let prefetch = |id: u32| prefetch_read(l0.block(id));
            let walked = self.walk(ctx, entry, ef, &mut score, eligible, &prefetch, watch);
            ctx.qcodes = qc;
            walked?;
            // Approximate order: rescore the best `sq8_rescore_depth(k)`
            // with the f32 kernel before the canonical rerank of the best.
            ctx.cands.truncate(sq8_rescore_depth(k));
            for c in &ctx.cands {
                prefetch_read(vectors.row(c.id as usize));
            }
            for c in ctx.cands.iter_mut() {
                watch.tick(d)?;
                c.score = fast_score(metric, q, vectors.row(c.id as usize));
            }
            ctx.cands.sort_unstable();
        } else if let Some(codebooks) = &self.pq {
            // The query's ADC table is refilled in the context's buffer (no
            // allocation once grown); a neighbour costs `m` lookups summed
            // in subspace order, so traversal order depends only on the
            // table.
            let mut table = std::mem::take(&mut ctx.adc);
            let bias = fill_adc(metric, q, codebooks, &mut table);
            let mut score = |id: u32| adc_distance(&table, bias, l0.code_bytes(id));
            // The block holds the code and the links (a few cache lines).
            let prefetch = |id: u32| prefetch_read(l0.block(id));
            let walked = self.walk(ctx, entry, ef, &mut score, eligible, &prefetch, watch);
            ctx.adc = table;
            walked?;
            // PQ distances are coarse: rescore every layer-0 result (at most
            // `ef`) with the f32 kernel before the canonical rerank.
            for c in &ctx.cands {
                prefetch_read(vectors.row(c.id as usize));
            }
            for c in ctx.cands.iter_mut() {
                watch.tick(d)?;
                c.score = fast_score(metric, q, vectors.row(c.id as usize));
            }
            ctx.cands.sort_unstable();
        } else {
            let mut score = |id: u32| fast_score(metric, q, vectors.row(id as usize));
            let prefetch = |id: u32| {
                prefetch_first(l0.block(id));
                prefetch_read(vectors.row(id as usize));
            };
            self.walk(ctx, entry, ef, &mut score, eligible, &prefetch, watch)?;
        }
        self.rerank(q, &ctx.cands, k, rerank_depth(k), out);
        Ok(())
    }

    /// Greedy descent through the upper layers then the layer-0 best-first
    /// search; leaves the eligible candidates in `ctx.cands`, ascending.
    #[allow(clippy::too_many_arguments)]
    fn walk<S, E, P>(
        &self,
        ctx: &mut HnswSearchContext,
        entry: u32,
        ef: usize,
        score: &mut S,
        eligible: &E,
        prefetch: &P,
        watch: &mut Watch,
    ) -> Result<()>
    where
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
        self.search_l0(
            &mut ctx.l0,
            cur,
            ef.max(1),
            score,
            eligible,
            prefetch,
            watch,
        )?;
        ctx.cands.clear();
        ctx.cands.extend(ctx.l0.results.drain());
        ctx.cands.sort_unstable();
        Ok(())
    }

    /// Best-first search of layer 0 from `start`, keeping the `ef` best
    /// *eligible* nodes in `st.results` (ineligible nodes route but are never
    /// kept). Each expansion reads one block; its unvisited neighbours are
    /// marked and prefetched first (their misses overlap), then scored.
    #[allow(clippy::too_many_arguments)]
    fn search_l0<S, E, P>(
        &self,
        st: &mut L0State,
        start: Scored,
        ef: usize,
        score: &mut S,
        eligible: &E,
        prefetch: &P,
        watch: &mut Watch,
    ) -> Result<()>
    where
        S: FnMut(u32) -> f32,
        E: Fn(u32) -> bool,
        P: Fn(u32),
    {
        st.reset(self.node_count());
        st.visit(start.id);
        st.candidates.push(Reverse(start));
        if eligible(start.id) {
            st.results.push(start);
        }
        while let Some(Reverse(c)) = st.candidates.pop() {
            if st.results.len() >= ef {
                if let Some(worst) = st.results.peek() {
                    if c.score > worst.score {
                        break;
                    }
                }
            }
            st.scratch.clear();
            for nb in self.l0.links(c.id) {
                if st.visit(nb) {
                    prefetch(nb);
                    st.scratch.push(nb);
                }
            }
            watch.tick(st.scratch.len() * self.dims())?;
            for i in 0..st.scratch.len() {
                let nb = st.scratch[i];
                let s = Scored {
                    score: score(nb),
                    id: nb,
                };
                let full = st.results.len() >= ef;
                if !full || st.results.peek().is_some_and(|w| s.score < w.score) {
                    st.candidates.push(Reverse(s));
                    if eligible(nb) {
                        st.results.push(s);
                        if st.results.len() > ef {
                            st.results.pop();
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Scores every eligible node with the fast kernel, then reranks the best
    /// canonically ([`top_k`]).
    fn scan(
        &self,
        ctx: &mut HnswSearchContext,
        q: &[f32],
        k: usize,
        resolved: Resolved,
        watch: &mut Watch,
        out: &mut Vec<IdHit>,
    ) -> Result<()> {
        let (metric, vectors, cands) = (self.metric, &self.vectors, &mut ctx.cands);
        match resolved {
            Resolved::Interval(lo, hi) => {
                let ids = (lo..hi).filter(|&id| !self.is_masked(id));
                top_k(metric, vectors, q, ids, k, watch, cands, out)
            }
            Resolved::Set(set) => {
                let ids = set.ids.iter().copied();
                top_k(metric, vectors, q, ids, k, watch, cands, out)
            }
        }
    }

    /// Rescores the first `depth` candidates canonically and keeps the best
    /// `k` by `(score, key)` (ids are in key order).
    fn rerank(&self, q: &[f32], cands: &[Scored], k: usize, depth: usize, out: &mut Vec<IdHit>) {
        out.clear();
        let take = cands.len().min(depth.max(k));
        canonical_each(
            self.metric,
            q,
            cands[..take].iter().map(|c| c.id),
            |id| self.vectors.row(id as usize),
            |id, score| out.push(IdHit { id, score }),
        );
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

/// PQ ADC table slots per subspace (`prox_kernels::pq` layout).
const ADC_SLOTS: usize = 256;

/// Fills `table` with the ADC table of `q` exactly as
/// `prox_kernels::pq::AdcTable::for_metric` builds it (same kernels, same
/// entries, `+inf` in unused slots) and returns its bias; `table` is reused
/// across queries, so steady-state queries allocate nothing.
fn fill_adc(
    metric: Metric,
    q: &[f32],
    codebooks: &prox_kernels::pq::Codebooks,
    table: &mut Vec<f32>,
) -> f32 {
    let (m, k) = (codebooks.m(), codebooks.k());
    table.resize(m * ADC_SLOTS, f32::INFINITY);
    for (s, slots) in table.chunks_exact_mut(ADC_SLOTS).enumerate() {
        let sub = &q[codebooks.subspace(s)];
        let (used, unused) = slots.split_at_mut(k);
        match metric {
            Metric::L2 => prox_kernels::f32::l2sq_many(sub, codebooks.centroids(s), used),
            Metric::Cosine | Metric::InnerProduct => {
                prox_kernels::f32::dot_many(sub, codebooks.centroids(s), used);
                used.iter_mut().for_each(|x| {
                    if x.is_finite() {
                        *x = -*x;
                    }
                });
            }
        }
        unused.fill(f32::INFINITY);
    }
    if metric == Metric::Cosine {
        1.0
    } else {
        0.0
    }
}

/// ADC distance of one code: table entries summed in subspace order from
/// `0.0`, then `+ bias` (the order of `prox_kernels::pq::AdcTable::distance`).
#[inline]
fn adc_distance(table: &[f32], bias: f32, code: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (s, &c) in code.iter().enumerate() {
        acc += table[s * ADC_SLOTS + usize::from(c)];
    }
    acc + bias
}

/// The canonical top `k` of rows `ids` of `vectors` into `out`, ascending
/// by `(score, id)`: every row ranked by the fast kernel, the best
/// `max(4k, k + k/2 + 4)` rescored canonically. `cands` is scratch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn top_k(
    metric: Metric,
    vectors: &Arena,
    query: &[f32],
    ids: impl IntoIterator<Item = u32>,
    k: usize,
    watch: &mut Watch,
    cands: &mut Vec<Scored>,
    out: &mut Vec<IdHit>,
) -> Result<()> {
    cands.clear();
    out.clear();
    if k == 0 {
        return Ok(());
    }
    let d = query.len();
    for id in ids {
        watch.tick(d)?;
        cands.push(Scored {
            score: fast_score(metric, query, vectors.row(id as usize)),
            id,
        });
    }
    let depth = (4 * k).max(k + k / 2 + 4);
    if cands.len() > depth {
        cands.select_nth_unstable(depth - 1);
        cands.truncate(depth);
    }
    canonical_each(
        metric,
        query,
        cands.iter().map(|c| c.id),
        |id| vectors.row(id as usize),
        |id, score| out.push(IdHit { id, score }),
    );
    out.sort_unstable_by(|a, b| a.score.total_cmp(&b.score).then(a.id.cmp(&b.id)));
    out.truncate(k);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accel::hnsw::Hnsw;
    use crate::accel::HnswParams;
    use prox_kernels::canonical;
    use prox_testkit::{seed, SplitMix64};

    /// The default seed (`PROX_SEED` overrides it).
    const SEED: u64 = 0x5EED_4E5F;

    /// Seeded clustered data: `n` vectors of `dims` around 12 centres.
    fn data(seed: u64, n: usize, dims: usize) -> Vec<(Vec<u8>, Vec<f32>)> {
        let mut r = SplitMix64::new(seed);
        let mut next = move || 0.5 * r.unit();
        let centres: Vec<Vec<f32>> = (0..12)
            .map(|_| (0..dims).map(|_| 4.0 * next()).collect())
            .collect();
        (0..n)
            .map(|i| {
                let c = &centres[i % centres.len()];
                let v = c.iter().map(|&m| m + next()).collect();
                ((i as u32).to_be_bytes().to_vec(), v)
            })
            .collect()
    }

    /// The in-place ADC table equals `AdcTable::for_metric` entry for entry
    /// and distance for distance (so PQ traversal order is unchanged), and
    /// refilling a table left by larger codebooks leaves no stale entries.
    #[test]
    fn adc_table_refill_matches_the_kernel_table() {
        let seed = seed(SEED);
        let rows = data(seed, 300, 12);
        let mut table = Vec::new();
        for (m, k) in [(4, 256), (3, 16)] {
            let dims = 12;
            let centroids: Vec<f32> = (0..m * k * (dims / m))
                .map(|i| rows[i % rows.len()].1[i % dims])
                .collect();
            let cb = prox_kernels::pq::Codebooks::new(dims, m, k, centroids).unwrap();
            for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
                let q = &rows[(m * k) % rows.len()].1;
                let bias = fill_adc(metric, q, &cb, &mut table);
                let want = prox_kernels::pq::AdcTable::for_metric(metric, q, &cb);
                assert_eq!(table.as_slice(), want.entries(), "{metric:?} seed {seed}");
                assert_eq!(bias, want.bias());
                let mut code = vec![0u8; m];
                for (r, (_, v)) in rows.iter().enumerate().take(50) {
                    cb.encode(v, &mut code);
                    let got = adc_distance(&table, bias, &code);
                    assert_eq!(got.to_bits(), want.distance(&code).to_bits(), "row {r}");
                }
            }
        }
    }

    #[test]
    fn layouts_and_batch_agree() {
        let seed = seed(SEED);
        let (n, dims) = (1200, 24);
        let params = HnswParams::parse("m=8,efc=64").unwrap();
        for metric in [Metric::L2, Metric::InnerProduct] {
            // Inner product on unit vectors (what embedding sets look like).
            let unit = |mut v: Vec<f32>| {
                if metric == Metric::InnerProduct {
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    v.iter_mut().for_each(|x| *x /= norm);
                }
                v
            };
            let records: Vec<(Vec<u8>, Vec<f32>)> = data(seed, n, dims)
                .into_iter()
                .map(|(k, v)| (k, unit(v)))
                .collect();
            let h = Hnsw::build(metric, dims, &records, &params).unwrap();
            let g = h.search_graph();
            // The flat and owned builders make the same graph and layout.
            let keys: Vec<Vec<u8>> = records.iter().map(|r| r.0.clone()).collect();
            let flat: Vec<f32> = records.iter().flat_map(|r| r.1.clone()).collect();
            let f = Hnsw::build_flat(metric, dims, keys, flat, &params)
                .unwrap()
                .into_search_graph();
            let o = Hnsw::build_owned(metric, dims, records.clone(), &params)
                .unwrap()
                .into_search_graph();
            let sq = g.clone().with_sq8().unwrap();
            let quantizer = sq.sq8.clone().unwrap();
            let mut code = vec![0i8; dims];
            for i in 0..n as u32 {
                let links: Vec<u32> = g.l0.links(i).collect();
                assert!(links.windows(2).all(|w| w[0] < w[1]), "seed {seed}");
                assert_eq!(links, f.l0.links(i).collect::<Vec<_>>(), "seed {seed}");
                assert_eq!(links, o.l0.links(i).collect::<Vec<_>>(), "seed {seed}");
                assert_eq!(links, sq.l0.links(i).collect::<Vec<_>>(), "seed {seed}");
                assert_eq!(f.vector(i), g.vector(i));
                quantizer.encode(g.vector(i), &mut code);
                assert_eq!(sq.l0.code(i), code.as_slice(), "seed {seed}");
                let norm: i32 = code.iter().map(|&c| i32::from(c) * i32::from(c)).sum();
                assert_eq!(sq.l0.norm(i), norm);
                assert!(g.l0.code(i).is_empty() && g.l0.norm(i) == 0);
            }
            // Batch = one query at a time, on both layouts; SQ8 traversal
            // with exact rerank keeps recall against brute force.
            let queries: Vec<Vec<f32>> = data(seed ^ 0xABCD, 60, dims)
                .into_iter()
                .map(|r| unit(r.1))
                .collect();
            let opts = SearchOptions { k: 10, ef: 64 };
            let mut found = 0usize;
            for graph in [&g, &sq] {
                let batch = graph.search_batch(&queries, opts).unwrap();
                let mut ctx = HnswSearchContext::new();
                let mut out = Vec::new();
                for (q, b) in queries.iter().zip(&batch) {
                    graph.search(&mut ctx, q, opts, &mut out).unwrap();
                    assert_eq!(&out, b, "seed {seed}");
                    let mut truth: Vec<(f64, u32)> = (0..n as u32)
                        .map(|i| (canonical::score(metric, q, graph.vector(i)), i))
                        .collect();
                    truth.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    found += out
                        .iter()
                        .filter(|h| truth[..10].iter().any(|t| t.1 == h.id))
                        .count();
                }
            }
            let recall = found as f64 / (2 * 10 * queries.len()) as f64;
            assert!(recall >= 0.95, "recall {recall} ({metric:?}, seed {seed})");
        }
    }
}
