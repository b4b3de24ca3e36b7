//! The best-first traversal and its reusable per-thread state.

use super::filter::Compiled;
use super::node::Node;
use super::quant::{approx_dot, approx_l2, down, l2_lower, quantize, up, QuantStats, EPS};
use super::{Completion, Hit, Mode, SearchRequest, SearchResult, SearchStats, Searcher};
use crate::error::Result;
use prox_kernels::Metric;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Bound on `|‖v‖ − 1|` for prepared cosine vectors: a unit fixed point
/// satisfies `fl32(v_i·inv) = v_i`, so `|inv − 1| <= 2^-24` up to f64
/// rounding (take the largest component, which is normal), giving this
/// margin with room to spare.
const UNIT_DELTA: f64 = 1.0 / (1u64 << 23) as f64;

/// A subtree waiting in the frontier.
struct Item {
    /// Primary order: lower bound on the canonical score of any record
    /// below.
    lb: f64,
    /// Approximate score of the subtree's representative (tie-break).
    approx: f64,
    /// Push order (final tie-break, keeps the order deterministic).
    seq: u64,
    node: Arc<Node>,
    idx: u32,
}

impl Item {
    fn key(&self) -> (f64, f64, u64) {
        (self.lb, self.approx, self.seq)
    }
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    /// Reversed, so `BinaryHeap` pops the smallest `(lb, approx, seq)`.
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.key(), other.key());
        b.0.total_cmp(&a.0)
            .then(b.1.total_cmp(&a.1))
            .then(b.2.cmp(&a.2))
    }
}

/// A record candidate: a logical-leaf entry and its score.
struct Cand {
    score: f64,
    node: Arc<Node>,
    idx: u32,
}

impl Cand {
    fn key(&self) -> &[u8] {
        self.node.key(self.idx as usize)
    }

    /// The reported hit (values are attached by the caller when asked).
    fn hit(&self) -> Hit {
        Hit {
            key: self.key().to_vec(),
            score: self.score,
            value: None,
        }
    }

    fn order(&self, score: f64, key: &[u8]) -> Ordering {
        self.score
            .total_cmp(&score)
            .then_with(|| self.key().cmp(key))
    }
}

impl PartialEq for Cand {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Cand {
    /// By `(score, key)`: a max-heap of these keeps the worst on top.
    fn cmp(&self, other: &Self) -> Ordering {
        self.order(other.score, other.key())
    }
}

/// Reusable per-thread search state: the prepared query, its codes, the
/// frontier and the candidate sets. Create one per worker and pass it to
/// [`Searcher::search_with`]; after the first few queries the buffers have
/// reached their working size and a search allocates only its result.
#[derive(Default)]
pub struct SearchContext {
    codes: Vec<i8>,
    dots: Vec<i32>,
    frontier: BinaryHeap<Item>,
    /// Exact modes: the current top k by canonical `(score, key)`, sorted.
    best: Vec<Cand>,
    /// Adaptive mode: the `rerank·k` best by approximate `(score, key)`.
    pool: BinaryHeap<Cand>,
    rescore: Vec<Cand>,
    /// Exact modes: eligible entries of the current logical leaf with
    /// their lower bounds, visited in `(bound, index)` order.
    order: Vec<(f64, u32)>,
    /// Adaptive mode: `(priority, catalogue index)` of eligible leaves.
    rank: Vec<(f64, u32)>,
}

impl std::fmt::Debug for SearchContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchContext")
            .field("frontier_capacity", &self.frontier.capacity())
            .finish()
    }
}

/// Query-wide constants of one search.
struct Query<'a> {
    metric: Metric,
    v: &'a [f32],
    stats: QuantStats,
    /// Relative f64 summation error bound of canonical scores, `(d+4)·2^-52`.
    rel: f64,
}

impl Query<'_> {
    /// Approximate score of entry `i` (ranking only).
    #[inline]
    fn approx(&self, x: &QuantStats, dot: i32) -> f64 {
        match self.metric {
            Metric::L2 => approx_l2(&self.stats, x, dot).0.max(0.0),
            Metric::Cosine => 1.0 - approx_dot(&self.stats, x, dot),
            Metric::InnerProduct => -approx_dot(&self.stats, x, dot),
        }
    }

    /// Rigorous lower bound on the canonical score of every record within
    /// real Euclidean distance `radius` of the entry vector `x`.
    #[inline]
    fn lower_bound(&self, x: &QuantStats, dot: i32, radius: f64) -> f64 {
        let q = &self.stats;
        match self.metric {
            Metric::L2 | Metric::Cosine => {
                let (a2, a2_err) = approx_l2(q, x, dot);
                let gap = l2_lower(a2, a2_err, q, x) - up(radius);
                if gap <= 0.0 {
                    return 0.0;
                }
                // Canonical L2 >= real·(1 − rel) (f64 summation error).
                let l2 = down(down(gap * gap) * (1.0 - self.rel));
                if self.metric == Metric::L2 {
                    return l2;
                }
                // Prepared vectors have norms in [1−δ, 1+δ], so the real
                // dot is at most (1+δ)² − ‖q−x‖²/2, and the canonical dot
                // exceeds the real one by at most rel·(1+δ)².
                let n = (1.0 + UNIT_DELTA) * (1.0 + UNIT_DELTA);
                let lb = down(l2 / 2.0 - up((n - 1.0) + self.rel * n));
                lb.min(2.0)
            }
            Metric::InnerProduct => {
                // q·y <= q̂·x̂ + ‖q−q̂‖·‖x‖ + ‖q̂‖·‖x−x̂‖ + ‖q‖·radius, and the
                // canonical dot exceeds the real one by rel·‖q‖·‖y‖.
                let d = approx_dot(q, x, dot);
                let qn_hat = q.norm + q.err;
                let y_norm = x.norm + up(radius);
                let slack = up(q.err * x.norm + qn_hat * x.err + q.norm * up(radius))
                    + up(self.rel * q.norm * y_norm)
                    + up(8.0 * EPS * d.abs());
                let hi = up(d + slack);
                -hi
            }
        }
    }
}

impl SearchContext {
    /// An empty context.
    pub fn new() -> SearchContext {
        SearchContext::default()
    }

    fn clear(&mut self) {
        self.frontier.clear();
        self.best.clear();
        self.pool.clear();
        self.rescore.clear();
        self.order.clear();
        self.rank.clear();
    }

    /// Runs one search of a prepared query.
    pub(super) fn run(
        &mut self,
        s: &Searcher<'_>,
        prepared: &[f32],
        req: &SearchRequest,
        filter: &Compiled<'_>,
    ) -> Result<SearchResult> {
        self.clear();
        let d = s.dims();
        self.codes.resize(d, 0);
        let q = Query {
            metric: s.metric(),
            v: prepared,
            stats: quantize(prepared, &mut self.codes),
            rel: (d as f64 + 4.0) * EPS,
        };
        let out = match req.mode {
            Mode::Exact => self.traverse(s, &q, req.k, super::Budget::default(), filter),
            Mode::Budgeted(b) => self.traverse(s, &q, req.k, b, filter),
            Mode::Adaptive(p) => self.probe(s, &q, req, p, filter),
        };
        self.clear();
        out
    }

    /// The adaptive search, IVF style: rank every logical leaf by the
    /// approximate distance from the query to its representative (one
    /// kernel call over the [`super::catalogue::Catalogue`]), scan the
    /// best `probes` leaves (more while fewer than `k` eligible records
    /// were seen, so filters never under-fill), keep the best `rerank·k`
    /// records by approximate score and rescore those canonically.
    ///
    /// Every decision derives from the integer code dots and fixed scalar
    /// f64 arithmetic, ties broken by catalogue position and key, so the
    /// hits are the same on every ISA.
    fn probe(
        &mut self,
        s: &Searcher<'_>,
        q: &Query<'_>,
        req: &SearchRequest,
        preset: super::Preset,
        filter: &Compiled<'_>,
    ) -> Result<SearchResult> {
        let d = s.dims();
        let k = req.k;
        let (rerank, preset_probes) = preset.params();
        let pool_cap = k.saturating_mul(rerank);
        let mut stats = SearchStats::default();
        let cat = s.catalogue()?;
        if cat.len() == 0 {
            // The root is at level 0: the whole map is one logical leaf.
            let root = s.root.clone();
            self.scan(s, q, &root, filter, pool_cap, &mut stats)?;
        } else {
            stats.distance_evals += cat.len() as u64;
            self.dots.resize(cat.len(), 0);
            prox_kernels::sq8::dot_i8_many(&self.codes, &cat.codes, &mut self.dots);
            self.rank.clear();
            for i in 0..cat.len() {
                let (min, max) = cat.bounds(i);
                if filter.overlaps(min, max) {
                    // The representative's approximate score; subtracting a
                    // multiple of the covering radius (the lower bound's
                    // shape) lowered recall at every probe count on both
                    // benchmark datasets (docs/search.md).
                    let prio = q.approx(&cat.stats[i], self.dots[i]);
                    self.rank.push((prio, i as u32));
                }
            }
            let probes = req
                .probes
                .unwrap_or(preset_probes)
                .clamp(1, self.rank.len().max(1));
            let by_prio = |a: &(f64, u32), b: &(f64, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
            if probes < self.rank.len() {
                self.rank.select_nth_unstable_by(probes - 1, by_prio);
            }
            let head = probes.min(self.rank.len());
            self.rank[..head].sort_unstable_by(by_prio);
            let mut next = 0;
            while next < self.rank.len() {
                if next >= head {
                    if self.pool.len() >= k {
                        break;
                    }
                    if next == head {
                        // A filter left too few candidates: continue in
                        // order until `k` eligible records were seen.
                        self.rank[head..].sort_unstable_by(by_prio);
                    }
                }
                let (node, idx) = &cat.parents[self.rank[next].1 as usize];
                let leaf = node.child(*idx as usize, &s.loader)?.clone();
                self.scan(s, q, &leaf, filter, pool_cap, &mut stats)?;
                next += 1;
            }
        }

        self.rescore.extend(self.pool.drain());
        for c in &mut self.rescore {
            c.score =
                prox_kernels::canonical::score(q.metric, q.v, c.node.vector(c.idx as usize, d));
        }
        stats.rescored += self.rescore.len() as u64;
        self.rescore.sort_unstable();
        let hits = self.rescore.iter().take(k).map(Cand::hit).collect();
        Ok(SearchResult {
            hits,
            completion: Completion::Approximate,
            stats,
        })
    }

    /// Adds the eligible records of the level-0 subtree `node` (a logical
    /// leaf, or an overflow directory of leaf pages) to the approximate
    /// pool of the best `pool_cap` by `(approximate score, key)`.
    fn scan(
        &mut self,
        s: &Searcher<'_>,
        q: &Query<'_>,
        node: &Arc<Node>,
        filter: &Compiled<'_>,
        pool_cap: usize,
        stats: &mut SearchStats,
    ) -> Result<()> {
        if !node.leafy {
            for i in 0..node.len {
                let (min, max) = node.bounds(i);
                if filter.overlaps(min, max) {
                    let child = node.child(i, &s.loader)?.clone();
                    self.scan(s, q, &child, filter, pool_cap, stats)?;
                }
            }
            return Ok(());
        }
        stats.nodes_visited += 1;
        stats.distance_evals += node.len as u64;
        self.dots.resize(node.len, 0);
        prox_kernels::sq8::dot_i8_many(&self.codes, &node.codes, &mut self.dots);
        for i in 0..node.len {
            let score = q.approx(&node.stats[i], self.dots[i]);
            if self.pool.len() >= pool_cap {
                // Cheap reject before the key comparison and filter.
                let Some(w) = self.pool.peek() else { break };
                if score > w.score {
                    continue;
                }
                let key = node.key(i);
                if w.order(score, key) != Ordering::Greater || !filter.accepts(key) {
                    continue;
                }
                self.pool.pop();
            } else if !filter.accepts(node.key(i)) {
                continue;
            }
            self.pool.push(Cand {
                score,
                node: node.clone(),
                idx: i as u32,
            });
        }
        Ok(())
    }

    /// The exact search (with optional caps): best-first by lower bound.
    fn traverse(
        &mut self,
        s: &Searcher<'_>,
        q: &Query<'_>,
        k: usize,
        budget: super::Budget,
        filter: &Compiled<'_>,
    ) -> Result<SearchResult> {
        let d = s.dims();
        let mut stats = SearchStats::default();
        let mut seq = 0u64;
        let mut completion = Completion::Exact;

        let mut node = s.root.clone();
        loop {
            // ---- expand `node` ----
            stats.nodes_visited += 1;
            stats.distance_evals += node.len as u64;
            self.dots.resize(node.len, 0);
            prox_kernels::sq8::dot_i8_many(&self.codes, &node.codes, &mut self.dots);
            if node.leafy {
                // Points in increasing lower-bound order: the k-th canonical
                // score tightens as early as possible and the first point
                // whose bound exceeds it ends the leaf (every later bound is
                // at least as large). Which points are rescored depends on
                // the codes only, so it is the same on every ISA; the hits
                // are the canonical top k either way.
                // Points already bounded above the k-th score are dropped
                // before sorting, so a leaf far from the query costs one
                // bound per point and no sort.
                self.order.clear();
                let limit = if self.best.len() == k {
                    self.best[k - 1].score
                } else {
                    f64::INFINITY
                };
                for i in 0..node.len {
                    if filter.accepts(node.key(i)) {
                        let lb = q.lower_bound(&node.stats[i], self.dots[i], 0.0);
                        if lb <= limit {
                            self.order.push((lb, i as u32));
                        }
                    }
                }
                if self.order.len() > 1 {
                    self.order
                        .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                }
                for &(lb, i) in &self.order {
                    if self.best.len() == k && lb > self.best[k - 1].score {
                        break;
                    }
                    stats.rescored += 1;
                    let i = i as usize;
                    let score = prox_kernels::canonical::score(q.metric, q.v, node.vector(i, d));
                    insert_sorted(&mut self.best, k, score, &node, i);
                }
            } else {
                for i in 0..node.len {
                    let (min, max) = node.bounds(i);
                    if !filter.overlaps(min, max) {
                        continue;
                    }
                    let x = &node.stats[i];
                    let dot = self.dots[i];
                    let lb = q.lower_bound(x, dot, node.radius[i]);
                    if self.best.len() == k && lb > self.best[k - 1].score {
                        continue;
                    }
                    if budget
                        .max_frontier
                        .is_some_and(|m| self.frontier.len() >= m)
                    {
                        completion = Completion::BudgetExhausted;
                        continue;
                    }
                    seq += 1;
                    self.frontier.push(Item {
                        lb,
                        approx: q.approx(x, dot),
                        seq,
                        node: node.clone(),
                        idx: i as u32,
                    });
                    stats.frontier_peak = stats.frontier_peak.max(self.frontier.len());
                }
            }

            // ---- choose the next node ----
            let Some(item) = self.frontier.pop() else {
                break;
            };
            if self.best.len() == k && item.lb > self.best[k - 1].score {
                // Every remaining subtree is bounded above the k-th hit.
                self.frontier.clear();
                break;
            }
            if budget.max_nodes.is_some_and(|m| stats.nodes_visited >= m) {
                completion = Completion::BudgetExhausted;
                break;
            }
            let child = item.node.child(item.idx as usize, &s.loader)?.clone();
            if budget
                .max_distance_evals
                .is_some_and(|m| stats.distance_evals + child.len as u64 > m)
            {
                completion = Completion::BudgetExhausted;
                break;
            }
            node = child;
        }

        let hits = self.best.iter().map(Cand::hit).collect();
        Ok(SearchResult {
            hits,
            completion,
            stats,
        })
    }
}

/// Inserts entry `i` of `node` with canonical `score` into the sorted top-k
/// list `best`; returns whether it entered.
fn insert_sorted(best: &mut Vec<Cand>, k: usize, score: f64, node: &Arc<Node>, i: usize) -> bool {
    let key = node.key(i);
    if best.len() == k && best[k - 1].order(score, key) != Ordering::Greater {
        return false;
    }
    let pos = best.partition_point(|c| c.order(score, key) == Ordering::Less);
    if best.len() == k {
        best.pop();
    }
    best.insert(
        pos,
        Cand {
            score,
            node: node.clone(),
            idx: i as u32,
        },
    );
    true
}
