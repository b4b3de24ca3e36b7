//! The per-thread search state ([`SearchContext`]) and the query-wide
//! bounds every strategy shares; one file per strategy:
//!
//! * `best_first.rs`: best-first over the `PRXN` hierarchy (exact for
//!   every metric, budgeted with caps);
//! * `exact_l2.rs`: exact L2 over the scan arena (plain, rotated or local
//!   frames);
//! * `adaptive.rs`: the IVF-style adaptive search over the sub-lists.

mod adaptive;
mod best_first;
mod exact_l2;

use super::arena::ScanArena;
use super::catalogue::Catalogue;
use super::filter::Compiled;
use super::frames::FrameQuery;
use super::node::Node;
use super::quant::{
    approx_dot, approx_l2, down, l2_lower, quantize, quantize_uniform, up, QuantStats, EPS,
};
use super::rotated::RotQuery;
use super::{Hit, Mode, SearchRequest, SearchResult, SearchStats, Searcher};
use crate::deadline::Watch;
use crate::error::Result;
use prox_kernels::pq::fastscan::Lut;
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

    /// Writes this candidate as a reported hit into `hit`, reusing its key
    /// buffer (values are attached by the caller when asked).
    fn write(&self, hit: &mut Hit) {
        hit.key.clear();
        hit.key.extend_from_slice(self.key());
        hit.score = self.score;
        hit.value = None;
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

/// `cands` as hits in `out`, reusing the elements (and key buffers) `out`
/// already holds and the key buffers in `spare`; keys of elements no
/// longer needed go to `spare`. With a recycled `out` this allocates
/// nothing in steady state, even when the hit count varies.
fn emit<'a>(
    cands: impl Iterator<Item = &'a Cand>,
    mut out: Vec<Hit>,
    spare: &mut Vec<Vec<u8>>,
) -> Vec<Hit> {
    let mut n = 0;
    for c in cands {
        if n == out.len() {
            out.push(Hit {
                key: spare.pop().unwrap_or_default(),
                score: 0.0,
                value: None,
            });
        }
        c.write(&mut out[n]);
        n += 1;
    }
    while out.len() > n {
        if let Some(h) = out.pop() {
            spare.push(h.key);
        }
    }
    out
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
    /// Query codes with the arena's uniform scale (L2), or a copy of
    /// `codes` (cosine, inner product), for scanning the arena.
    ucodes: Vec<i8>,
    /// Exact L2 with the rotated split arena: the rotated query.
    rq: RotQuery,
    /// Exact L2 with local frames: the query in every frame.
    fq: FrameQuery,
    /// Exact L2 with local frames: `(member, lower bound)` of one frame's
    /// screen survivors, and their plain-arena codes gathered.
    fsurv: Vec<(u32, f64, i32)>,
    /// Exact L2 with local frames: the current frame's block limits.
    flims: Vec<f64>,
    gather: Vec<i8>,
    /// Exact L2 with the rotated split arena: offsets of one page's
    /// records that passed the fused screen (their values in `dots`).
    pass: Vec<u32>,
    /// Exact L2 with the rotated split arena: `(offset, D_A)` of one
    /// page's records that also passed the screen with their own residual.
    survivors: Vec<(u32, i64)>,
    /// Adaptive mode: `(code distance, page, entry)` candidates.
    cands: Vec<(i64, u32, u32)>,
    rescore: Vec<Cand>,
    /// Exact modes: eligible entries of the current logical leaf with
    /// their lower bounds, visited in `(bound, index)` order.
    order: Vec<(f64, u32)>,
    /// Exact L2: `(priority, catalogue index)` of eligible leaves.
    rank: Vec<(f64, u32)>,
    /// Adaptive mode: `(centroid code distance, list)` of ranked lists.
    lrank: Vec<(i64, u32)>,
    /// Adaptive mode: `(mean code distance, group)` of eligible groups.
    grank: Vec<(i64, u32)>,
    /// Adaptive mode: centroid dots of one group's lists.
    ldots: Vec<i32>,
    /// Adaptive 4-bit pass: the query's f32 table and its u8 forms for the
    /// records' quantizer (`lut`) and the means' (`rlut`).
    table: Vec<f32>,
    lut: Option<Lut>,
    rlut: Option<Lut>,
    /// Adaptive 4-bit pass: one list's sums.
    sums: Vec<u16>,
    /// Adaptive 4-bit pass: `(sum, slot)` candidates.
    fcands: Vec<(u16, u32)>,
    /// Adaptive 4-bit pass: `(f32 score, slot)` of the kept candidates.
    rescored: Vec<(f32, u32)>,
    /// Adaptive 4-bit pass: `(8-bit code distance, slot)` of the candidates.
    mids: Vec<(i64, u32)>,
    /// The current search's deadline, ticked by every long loop.
    watch: Watch,
    /// The prepared query and the second buffer its preparation needs.
    pub(super) prepared: Vec<f32>,
    pub(super) prep_work: Vec<f32>,
    /// Hits handed back by [`SearchContext::recycle`], reused by the next
    /// result, and key buffers of hits not needed by the last one.
    hits: Vec<Hit>,
    spare_keys: Vec<Vec<u8>>,
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
    #[inline(always)]
    fn approx(&self, x: &QuantStats, dot: i32) -> f64 {
        match self.metric {
            Metric::L2 => approx_l2(&self.stats, x, dot).0.max(0.0),
            Metric::Cosine => 1.0 - approx_dot(&self.stats, x, dot),
            Metric::InnerProduct => -approx_dot(&self.stats, x, dot),
        }
    }

    /// Rigorous lower bound on the canonical score of every record within
    /// real Euclidean distance `radius` of the entry vector `x`.
    #[inline(always)]
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

    /// Hands a result's hits back so the next search reuses their buffers
    /// (a caller that copies the hits out then allocates nothing per
    /// search in steady state).
    pub fn recycle(&mut self, hits: Vec<Hit>) {
        if hits.capacity() >= self.hits.capacity() {
            self.hits = hits;
        }
    }

    fn clear(&mut self) {
        self.frontier.clear();
        self.best.clear();
        self.cands.clear();
        self.rescore.clear();
        self.order.clear();
        self.rank.clear();
        self.lrank.clear();
        self.grank.clear();
        self.fcands.clear();
        self.rescored.clear();
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
        self.watch = Watch::new(req.deadline);
        let d = s.dims();
        self.codes.resize(d, 0);
        let q = Query {
            metric: s.metric(),
            v: prepared,
            stats: quantize(prepared, &mut self.codes),
            rel: (d as f64 + 4.0) * EPS,
        };
        let out = match req.mode {
            // An uncapped budget is the exact search.
            Mode::Exact
            | Mode::Budgeted(super::Budget {
                max_nodes: None,
                max_distance_evals: None,
                max_frontier: None,
            }) if q.metric == Metric::L2 => self.exact_l2(s, &q, req.k, filter),
            Mode::Exact => self.traverse(s, &q, req.k, super::Budget::default(), filter),
            Mode::Budgeted(b) => self.traverse(s, &q, req.k, b, filter),
            Mode::Adaptive(p) => self.probe(s, &q, req, p, filter),
        };
        self.clear();
        out
    }

    /// Ranks the catalogue entries the filter can reach into `self.rank`
    /// by `prio(stats, dot, catalogue index)` (one kernel call over the
    /// catalogue; the root alone, priority 0, when the catalogue is empty).
    fn rank_groups(
        &mut self,
        cat: &Catalogue,
        filter: &Compiled<'_>,
        stats: &mut SearchStats,
        prio: impl Fn(&QuantStats, i32, usize) -> f64,
    ) {
        self.rank.clear();
        if cat.len() == 0 {
            self.rank.push((0.0, 0));
            return;
        }
        stats.distance_evals += cat.len() as u64;
        self.dots.resize(cat.len(), 0);
        prox_kernels::sq8::dot_i8_many(&self.codes, &cat.codes, &mut self.dots);
        for i in 0..cat.len() {
            let (min, max) = cat.bounds(i);
            if filter.overlaps(min, max) {
                self.rank
                    .push((prio(&cat.stats[i], self.dots[i], i), i as u32));
            }
        }
    }

    /// Scores arena page `p` (records `a..b`, returned) against the
    /// quantized query into `self.dots` with one kernel call, counting the
    /// page and its records in `stats`.
    fn scan_page(
        &mut self,
        arena: &ScanArena,
        p: usize,
        d: usize,
        stats: &mut SearchStats,
    ) -> (usize, usize) {
        let (a, b) = visit_page(arena, p, stats);
        self.dots.resize(b - a, 0);
        prox_kernels::i8scan::dots(&self.ucodes, &arena.codes[a * d..b * d], &mut self.dots);
        (a, b)
    }

    /// Quantizes the query with the arena's uniform scale into `self.ucodes`;
    /// returns `(Σ q̂², bound on ‖q − s·q̂‖)`.
    fn quantize_uniform(&mut self, arena: &ScanArena, v: &[f32]) -> (i64, f64) {
        self.ucodes.resize(v.len(), 0);
        quantize_uniform(v, arena.scale, &mut self.ucodes)
    }
}

/// Arena page `p`'s record range `a..b`, counted in `stats` as one node
/// visited and `b − a` distance evaluations.
fn visit_page(arena: &ScanArena, p: usize, stats: &mut SearchStats) -> (usize, usize) {
    let (a, b) = (arena.page_start[p], arena.page_start[p + 1]);
    stats.nodes_visited += 1;
    stats.distance_evals += (b - a) as u64;
    (a, b)
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
