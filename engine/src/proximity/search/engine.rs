//! The best-first traversal and its reusable per-thread state.

use super::arena::{l2_prune_limit, limit_int, Arena};
use super::catalogue::Catalogue;
use super::fast4::Fast4;
use super::filter::Compiled;
use super::frames::{FrameQuery, Frames};
use super::lists::Lists;
use super::node::Node;
use super::quant::{
    approx_dot, approx_l2, down, l2_lower, quantize, quantize_uniform, up, QuantStats, EPS,
};
use super::rotated::{RotQuery, Rotated};
use super::{Completion, Hit, Mode, SearchRequest, SearchResult, SearchStats, Searcher};
use crate::error::Result;
use crate::numeric::fastscan::query_lut;
use crate::numeric::kernel::det_score;
use crate::numeric::topk::{best_with_ties, shrink};
use prox_kernels::pq::fastscan::{self, Lut, BLOCK, CODES};
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

    /// Quantizes the query with the arena's uniform scale into `self.ucodes`;
    /// returns `(Σ q̂², bound on ‖q − s·q̂‖)`.
    /// Scores arena page `p` (records `a..b`, returned) against the
    /// quantized query into `self.dots` with one kernel call, counting the
    /// page and its records in `stats`.
    fn scan_page(
        &mut self,
        arena: &Arena,
        p: usize,
        d: usize,
        stats: &mut SearchStats,
    ) -> (usize, usize) {
        let (a, b) = visit_page(arena, p, stats);
        self.dots.resize(b - a, 0);
        prox_kernels::i8scan::dots(&self.ucodes, &arena.codes[a * d..b * d], &mut self.dots);
        (a, b)
    }

    /// Appends `(centroid code distance, list)` of every list of group `g`
    /// to `self.lrank` (one kernel call).
    fn rank_lists(
        &mut self,
        lists: &Lists,
        fast: Option<&Fast4>,
        g: usize,
        code_dist: &impl Fn(i32, i32) -> i64,
        stats: &mut SearchStats,
    ) {
        let (a, b) = (lists.group_start[g], lists.group_start[g + 1]);
        let d = self.ucodes.len();
        stats.distance_evals += (b - a) as u64;
        if let (Some(f), Some(lut)) = (fast, rank_lut(&self.lut, &self.rlut, fast)) {
            // The list means' 4-bit sums.
            let bb = fastscan::block_bytes(f.rank.m);
            let (b0, b1) = (f.cent_start[g] as usize, f.cent_start[g + 1] as usize);
            self.sums.resize((b1 - b0) * BLOCK, 0);
            fastscan::scan(lut, &f.cent_blocks[b0 * bb..b1 * bb], &mut self.sums);
            for (i, &s) in self.sums[..b - a].iter().enumerate() {
                self.lrank.push((i64::from(s), (a + i) as u32));
            }
            return;
        }
        self.ldots.resize(b - a, 0);
        prox_kernels::i8scan::dots(&self.ucodes, &lists.cent[a * d..b * d], &mut self.ldots);
        for (i, &dot) in self.ldots.iter().enumerate() {
            self.lrank
                .push((code_dist(lists.cent_norm[a + i], dot), (a + i) as u32));
        }
    }

    fn quantize_uniform(&mut self, arena: &Arena, v: &[f32]) -> (i64, f64) {
        self.ucodes.resize(v.len(), 0);
        quantize_uniform(v, arena.scale, &mut self.ucodes)
    }

    /// The adaptive search, IVF style over the sub-lists
    /// ([`super::lists::Lists`]: k-means clusters of about 32 records inside
    /// each logical leaf): rank the logical leaves the filter can reach by
    /// the integer code distance from the query to their mean codes, rank
    /// the lists of the nearest `2·probes` leaves by their centroids, scan
    /// the best `probes` lists' codes (more lists, from every reachable
    /// leaf, while fewer than `k` eligible records were seen, so filters
    /// never under-fill), keep the best `rerank·k` records by integer code
    /// distance and rescore those canonically.
    ///
    /// Maps with the 4-bit first pass ([`super::fast4`]) rank the groups
    /// and lists with the means' table and scan the lists with the
    /// records' table (integer sums of the query's u8 tables), keep the
    /// best `rerank·k` records by `(sum, slot)`, cut those to the best
    /// [`MID_KEEP`]`·k` by 8-bit code distance, score the rest with the
    /// deterministic f32 kernel, and score canonically the best `k` of
    /// them plus any tied with the `k`-th.
    ///
    /// Every decision derives from exact integer code dots or sums and
    /// fixed-order f32 arithmetic, ties broken by list index, slot and
    /// key, so the hits are the same on every ISA.
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
        // Presets are tuned per first pass (the 4-bit pass needs a deeper
        // pool and affords more lists at equal cost).
        let (rerank, preset_probes) = if s.fast4()?.is_some() {
            preset.fast_params()
        } else {
            preset.params()
        };
        let pool_cap = k.saturating_mul(rerank);
        let mut stats = SearchStats::default();
        let cat = s.catalogue()?;
        let arena = s.arena()?;
        let lists = s.lists()?;

        // L2 ranks lists and records by the integer
        // `D = ‖q̂‖² + ‖x̂‖² − 2·q̂·x̂` (uniform scale); cosine and inner
        // product by `−q̂·x̂`, with the query's own-scale codes (a positive
        // factor away from the real approximate dot).
        let l2 = q.metric == Metric::L2;
        let qn = if l2 {
            self.quantize_uniform(arena, q.v).0
        } else {
            self.ucodes.clear();
            self.ucodes.extend_from_slice(&self.codes);
            0
        };
        let code_dist = |norm: i32, dot: i32| {
            if l2 {
                qn + i64::from(norm) - 2 * i64::from(dot)
            } else {
                -i64::from(dot)
            }
        };

        // Rank the groups (logical leaves) the filter can reach by their
        // mean codes, then the lists of the nearest `leaves` groups by
        // their centroids.
        let groups = lists.group_start.len() - 1;
        stats.distance_evals += groups as u64;
        // The 4-bit pass (ranking and scanning) when the map has one and
        // the query's table quantises (finite partials); 8-bit codes
        // otherwise.
        let fast = match s.fast4()? {
            Some(f) => {
                let lut = |b: &super::fast4::Book, table: &mut Vec<f32>, lut: &mut Option<Lut>| {
                    query_lut(q.metric, q.v, b.m, &b.books_t, CODES, table, lut).is_some()
                };
                // One table when the records share the means' quantizer.
                (lut(&f.scan, &mut self.table, &mut self.lut)
                    && (f.shared() || lut(&f.rank, &mut self.table, &mut self.rlut)))
                .then_some(f)
            }
            None => None,
        };
        self.dots.resize(groups, 0);
        match (fast, rank_lut(&self.lut, &self.rlut, fast)) {
            (Some(f), Some(lut)) => {
                self.sums.resize(groups.div_ceil(BLOCK) * BLOCK, 0);
                fastscan::scan(lut, &f.group_blocks, &mut self.sums);
                for (d, &s) in self.dots.iter_mut().zip(&self.sums) {
                    *d = i32::from(s);
                }
            }
            _ => prox_kernels::i8scan::dots(&self.ucodes, &lists.group_cent, &mut self.dots),
        }
        self.grank.clear();
        for (g, &dot) in self.dots.iter().enumerate() {
            let ok = cat.len() == 0 || {
                let (min, max) = cat.bounds(g);
                filter.overlaps(min, max)
            };
            if ok {
                let dist = match fast {
                    Some(_) => i64::from(dot),
                    None => code_dist(lists.group_norm[g], dot),
                };
                self.grank.push((dist, g as u32));
            }
        }
        let probes = req.probes.unwrap_or(preset_probes).max(1);
        let leaves = group_probes(probes).min(self.grank.len());
        if leaves < self.grank.len() && leaves > 0 {
            self.grank.select_nth_unstable(leaves - 1);
        }
        self.lrank.clear();
        for gi in 0..leaves {
            let g = self.grank[gi].1 as usize;
            self.rank_lists(lists, fast, g, &code_dist, &mut stats);
        }
        let probes = probes.min(self.lrank.len().max(1));
        if probes < self.lrank.len() {
            self.lrank.select_nth_unstable(probes - 1);
        }
        let head = probes.min(self.lrank.len());
        self.lrank[..head].sort_unstable();

        let depth = match fast {
            Some(_) => k.saturating_mul(rerank).max(1),
            None => pool_cap.max(1),
        };

        let by_dist = |a: &(i64, u32, u32), b: &(i64, u32, u32)| {
            a.0.cmp(&b.0).then_with(|| {
                let ka = arena.pages[a.1 as usize].key(a.2 as usize);
                let kb = arena.pages[b.1 as usize].key(b.2 as usize);
                ka.cmp(kb)
            })
        };
        // `cands` holds candidates by (distance, key); once it has been cut
        // to the best `pool_cap`, `limit` is the largest kept distance and
        // anything farther can never enter the final pool. The 4-bit pass
        // keeps `(sum, slot)` in `fcands` the same way, cut to `depth`
        // below `bound`.
        self.cands.clear();
        self.fcands.clear();
        let mut limit = i64::MAX;
        let mut bound = u16::MAX;
        let unfiltered = matches!(filter, Compiled::All);
        let mut next = 0;
        loop {
            if next >= head {
                if self.cands.len() + self.fcands.len() >= k {
                    break;
                }
                if next == head {
                    // A filter left too few candidates: rank the lists of
                    // the other reachable groups too and continue in order
                    // until `k` eligible records were seen.
                    for gi in leaves..self.grank.len() {
                        let g = self.grank[gi].1 as usize;
                        self.rank_lists(lists, fast, g, &code_dist, &mut stats);
                    }
                    self.lrank[head..].sort_unstable();
                }
            }
            if next >= self.lrank.len() {
                break;
            }
            let l = self.lrank[next].1 as usize;
            next += 1;
            let (a, b) = (lists.start[l], lists.start[l + 1]);
            stats.nodes_visited += 1;
            stats.distance_evals += (b - a) as u64;
            if let (Some(f), Some(lut)) = (fast, self.lut.as_ref()) {
                let bb = fastscan::block_bytes(f.scan.m);
                if let Some(&(_, n)) = self.lrank.get(next + LIST_AHEAD - 1) {
                    let n = n as usize;
                    let (c0, c1) = (f.block_start[n] as usize, f.block_start[n + 1] as usize);
                    prox_kernels::prefetch::prefetch_read(&f.blocks[c0 * bb..c1 * bb]);
                }
                let (b0, b1) = (f.block_start[l] as usize, f.block_start[l + 1] as usize);
                self.sums.resize((b1 - b0) * BLOCK, 0);
                fastscan::scan(lut, &f.blocks[b0 * bb..b1 * bb], &mut self.sums);
                for (i, &sum) in self.sums[..b - a].iter().enumerate() {
                    if sum > bound {
                        continue;
                    }
                    let slot = a + i;
                    if !unfiltered && {
                        let page = &arena.pages[lists.page[slot] as usize];
                        !filter.accepts(page.key(lists.entry[slot] as usize))
                    } {
                        continue;
                    }
                    self.fcands.push((sum, slot as u32));
                    if self.fcands.len() >= 2 * depth {
                        bound = shrink(&mut self.fcands, depth);
                    }
                }
                continue;
            }
            self.dots.resize(b - a, 0);
            prox_kernels::i8scan::dots(&self.ucodes, &lists.codes[a * d..b * d], &mut self.dots);
            for (i, &dot) in self.dots.iter().enumerate() {
                let dist = code_dist(lists.norms[a + i], dot);
                if dist > limit {
                    continue;
                }
                let (p, e) = (lists.page[a + i], lists.entry[a + i]);
                if !filter.accepts(arena.pages[p as usize].key(e as usize)) {
                    continue;
                }
                self.cands.push((dist, p, e));
                if self.cands.len() >= 2 * pool_cap.max(1) {
                    self.cands.select_nth_unstable_by(pool_cap - 1, by_dist);
                    self.cands.truncate(pool_cap);
                    limit = self.cands[pool_cap - 1].0;
                }
            }
        }
        if self.cands.len() > pool_cap {
            self.cands.select_nth_unstable_by(pool_cap - 1, by_dist);
            self.cands.truncate(pool_cap);
        }
        for &(_, p, i) in &self.cands {
            let node = &arena.pages[p as usize];
            let score = prox_kernels::canonical::score(q.metric, q.v, node.vector(i as usize, d));
            self.rescore.push(Cand {
                score,
                node: node.clone(),
                idx: i,
            });
        }
        if !self.fcands.is_empty() {
            // 4-bit candidates: cut to the best `MID_KEEP·k` by their 8-bit
            // code distance, then the deterministic f32 score of each, then
            // canonical scores for the best `k` of those and their ties.
            shrink(&mut self.fcands, depth);
            let keep = MID_KEEP.saturating_mul(k);
            if self.fcands.len() > keep {
                // One 8-bit row (d bytes) per candidate instead of its f32
                // vector (4·d bytes): the candidates are scattered, so this
                // stage is bound by the rows' memory traffic.
                for &(_, slot) in &self.fcands {
                    let slot = slot as usize;
                    prox_kernels::prefetch::prefetch_read(&lists.codes[slot * d..(slot + 1) * d]);
                }
                stats.distance_evals += self.fcands.len() as u64;
                self.mids.clear();
                let mut dot = [0i32];
                for &(_, slot) in &self.fcands {
                    let i = slot as usize;
                    let row = &lists.codes[i * d..(i + 1) * d];
                    prox_kernels::i8scan::dots(&self.ucodes, row, &mut dot);
                    self.mids.push((code_dist(lists.norms[i], dot[0]), slot));
                }
                self.mids.select_nth_unstable(keep - 1);
                self.fcands.clear();
                self.fcands
                    .extend(self.mids[..keep].iter().map(|&(_, slot)| (0, slot)));
            }
            let vector = |slot: u32| {
                let slot = slot as usize;
                arena.pages[lists.page[slot] as usize].vector(lists.entry[slot] as usize, d)
            };
            for &(_, slot) in &self.fcands {
                prox_kernels::prefetch::prefetch_read(vector(slot));
            }
            self.rescored.clear();
            for &(_, slot) in &self.fcands {
                self.rescored
                    .push((det_score(q.metric, q.v, vector(slot)), slot));
            }
            let keep = best_with_ties(&mut self.rescored, k);
            for &(_, slot) in &self.rescored[..keep] {
                let slot = slot as usize;
                let node = &arena.pages[lists.page[slot] as usize];
                let i = lists.entry[slot];
                let score =
                    prox_kernels::canonical::score(q.metric, q.v, node.vector(i as usize, d));
                self.rescore.push(Cand {
                    score,
                    node: node.clone(),
                    idx: i,
                });
            }
        }
        stats.rescored += (self.rescore.len() + self.rescored.len()) as u64;
        self.rescore.sort_unstable();
        let hits = self.rescore.iter().take(k).map(Cand::hit).collect();
        Ok(SearchResult {
            hits,
            completion: Completion::Approximate,
            stats,
        })
    }

    /// Exact L2 search over the scan arena: logical leaves in increasing
    /// order of their covering-ball lower bound (the search ends at the
    /// first one bounded above the k-th score), every record of a leaf
    /// screened in bulk by its integer code distance against
    /// [`l2_prune_limit`] for the current k-th canonical score (with the
    /// largest record residual; survivors are checked again with their
    /// own), and the rest scored canonically. Pruning is rigorous, so the
    /// hits are exactly the brute-force top k by `(score, key)`, ties
    /// included; which records get rescored depends on integers and fixed
    /// f64 arithmetic only, so the work is the same on every ISA too.
    fn exact_l2(
        &mut self,
        s: &Searcher<'_>,
        q: &Query<'_>,
        k: usize,
        filter: &Compiled<'_>,
    ) -> Result<SearchResult> {
        let mut stats = SearchStats::default();
        let cat = s.catalogue()?;
        let arena = s.arena()?;
        if matches!(filter, Compiled::All) {
            if let Some(fr) = s.frames()? {
                if fr.prepare(q.v, &mut self.fq) {
                    self.exact_l2_frames(arena, fr, q, k, &mut stats);
                    let hits = self.best.iter().map(Cand::hit).collect();
                    return Ok(SearchResult {
                        hits,
                        completion: Completion::Exact,
                        stats,
                    });
                }
            }
        }
        self.rank_groups(cat, filter, &mut stats, |x, dot, i| {
            let (node, idx) = &cat.parents[i];
            q.lower_bound(x, dot, node.radius[*idx as usize])
        });
        self.rank
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        match s.rotated()? {
            Some(rot) => self.exact_l2_rotated(arena, rot, q, k, filter, &mut stats),
            None => self.exact_l2_plain(arena, q, k, filter, &mut stats),
        }
        let hits = self.best.iter().map(Cand::hit).collect();
        Ok(SearchResult {
            hits,
            completion: Completion::Exact,
            stats,
        })
    }

    /// The loop of [`Self::exact_l2`] over the plain arena: leaves in
    /// bound order until one is bounded above the k-th score, each page
    /// screened by the integer code distance against the bulk limit (the
    /// largest residual), survivors checked with their own residual, then
    /// scored canonically into `self.best`.
    fn exact_l2_plain(
        &mut self,
        arena: &Arena,
        q: &Query<'_>,
        k: usize,
        filter: &Compiled<'_>,
        stats: &mut SearchStats,
    ) {
        let d = q.v.len();
        let (qn, eq) = self.quantize_uniform(arena, q.v);
        let scale = arena.scale;
        // Pruning state for the current k-th score `kth`: records with
        // `D > bulk` are excluded (largest residual), survivors with
        // `D > l2_prune_limit(kth, .., err_r, ..)`.
        let mut kth = f64::INFINITY;
        let mut bulk = i64::MAX;
        for r in 0..self.rank.len() {
            let (lb, g) = self.rank[r];
            if lb > kth {
                // Every later leaf is bounded above the k-th hit.
                break;
            }
            let g = g as usize;
            for p in arena.group_page[g]..arena.group_page[g + 1] {
                let page = &arena.pages[p];
                let (a, b) = self.scan_page(arena, p, d, stats);
                for i in 0..b - a {
                    let dist = arena.l2_code_dist(qn, a + i, self.dots[i]);
                    if dist > bulk {
                        continue;
                    }
                    if kth.is_finite()
                        && dist as f64 > l2_prune_limit(kth, q.rel, eq, arena.err[a + i], scale)
                    {
                        continue;
                    }
                    if !filter.accepts(page.key(i)) {
                        continue;
                    }
                    stats.rescored += 1;
                    let score = prox_kernels::canonical::score(q.metric, q.v, page.vector(i, d));
                    if insert_sorted(&mut self.best, k, score, page, i) && self.best.len() == k {
                        kth = self.best[k - 1].score;
                        bulk = limit_int(l2_prune_limit(kth, q.rel, eq, arena.err_max, scale));
                    }
                }
            }
        }
    }

    /// The loop of [`Self::exact_l2`] over the rotated split arena
    /// ([`super::rotated`]): the same leaf order and stopping rule, each
    /// page screened by its records' leading rotated components
    /// ([`Rotated::bulk_limit`] with the largest residual), survivors
    /// checked with their own residuals and the remaining components
    /// ([`Rotated::beats`]), then scored canonically into `self.best`.
    fn exact_l2_rotated(
        &mut self,
        arena: &Arena,
        rot: &Rotated,
        q: &Query<'_>,
        k: usize,
        filter: &Compiled<'_>,
        stats: &mut SearchStats,
    ) {
        let d = q.v.len();
        rot.prepare(q.v, &mut self.rq);
        let mut kth = f64::INFINITY;
        let (mut bulk, mut ra) = (i64::MAX, f64::INFINITY);
        for r in 0..self.rank.len() {
            let (lb, g) = self.rank[r];
            if lb > kth {
                break;
            }
            let g = g as usize;
            for p in arena.group_page[g]..arena.group_page[g + 1] {
                let page = &arena.pages[p];
                let (a, b) = visit_page(arena, p, stats);
                rot.screen(&self.rq, a, b, bulk, &mut self.pass, &mut self.dots);
                self.survivors.clear();
                for (&i, &v) in self.pass.iter().zip(&self.dots) {
                    let da = rot.dist_a(&self.rq, v);
                    if rot.own_a(a + i as usize, da, ra) {
                        self.survivors.push((i, da));
                    }
                }
                if self.survivors.is_empty() {
                    continue;
                }
                rot.dots_b(&mut self.rq, a, &self.survivors);
                for (j, &(i, da)) in self.survivors.iter().enumerate() {
                    let i = i as usize;
                    // `kth` may have tightened since the page's screen.
                    if da > bulk
                        || !rot.full(&self.rq, a + i, da, self.rq.dot_b(j), kth, q.rel)
                        || !filter.accepts(page.key(i))
                    {
                        continue;
                    }
                    stats.rescored += 1;
                    let score = prox_kernels::canonical::score(q.metric, q.v, page.vector(i, d));
                    if insert_sorted(&mut self.best, k, score, page, i) && self.best.len() == k {
                        kth = self.best[k - 1].score;
                        (bulk, ra) = rot.limits(&self.rq, kth, q.rel);
                    }
                }
            }
        }
    }

    /// The loop of [`Self::exact_l2`] over local frames
    /// ([`super::frames`]): frames nearest centre first, skipping those
    /// whose lower bound exceeds the k-th score, each screened whole by the
    /// fused kernel with the frame's limit, survivors checked with their
    /// own bound, then with the plain arena's full-width codes, then scored
    /// canonically into `self.best`.
    fn exact_l2_frames(
        &mut self,
        arena: &Arena,
        fr: &Frames,
        q: &Query<'_>,
        k: usize,
        stats: &mut SearchStats,
    ) {
        let d = q.v.len();
        let (qn, eq) = self.quantize_uniform(arena, q.v);
        let mut kth = f64::INFINITY;
        let mut tau = f64::INFINITY;
        let mut fq = std::mem::take(&mut self.fq);
        for o in 0..fq.order().len() {
            let (_, lb, f) = fq.order()[o];
            if lb > tau {
                continue;
            }
            let f = f as usize;
            fr.enter(f, &mut fq);
            stats.nodes_visited += 1;
            self.fsurv.clear();
            fr.block_limits(f, &fq, tau, &mut self.flims);
            for j in 0..self.flims.len() {
                let y = self.flims[j];
                if y < 0.0 {
                    continue;
                }
                let limit = limit_int(y);
                let (b, range) = fr.block(f, j);
                let base = range.start;
                stats.distance_evals += range.len() as u64;
                fr.screen(f, range, &fq, limit, &mut self.pass, &mut self.dots);
                if fr.two_stage() {
                    // The screen limit already holds the block's bound;
                    // the second stage computes each survivor's own.
                    self.fsurv.extend(
                        self.pass
                            .iter()
                            .zip(&self.dots)
                            .map(|(&i, &v)| ((base + i as usize) as u32, 0.0, v)),
                    );
                    continue;
                }
                for (&i, &v) in self.pass.iter().zip(&self.dots) {
                    let i = base + i as usize;
                    let lb = fr.lower1(f, b, v, &fq);
                    if lb <= tau {
                        self.fsurv.push((i as u32, lb, v));
                    }
                }
            }
            fr.refine(f, &mut fq, &mut self.fsurv, tau);
            if self.fsurv.is_empty() {
                continue;
            }
            self.gather.clear();
            // The survivors' rows are scattered over the arena: hint a few
            // rows ahead so their misses overlap.
            const AHEAD: usize = 8;
            for &(i, _, _) in self.fsurv.iter().take(AHEAD) {
                let r = fr.record(i as usize);
                prox_kernels::prefetch::prefetch_read(&arena.codes[r * d..(r + 1) * d]);
            }
            for j in 0..self.fsurv.len() {
                if let Some(&(i, _, _)) = self.fsurv.get(j + AHEAD) {
                    let r = fr.record(i as usize);
                    prox_kernels::prefetch::prefetch_read(&arena.codes[r * d..(r + 1) * d]);
                }
                let r = fr.record(self.fsurv[j].0 as usize);
                self.gather
                    .extend_from_slice(&arena.codes[r * d..(r + 1) * d]);
            }
            self.dots.resize(self.fsurv.len(), 0);
            prox_kernels::i8scan::dots(&self.ucodes, &self.gather, &mut self.dots);
            for j in 0..self.fsurv.len() {
                let (i, lb, _) = self.fsurv[j];
                let (norm, err) = fr.plain(i as usize);
                let dist = qn + i64::from(norm) - 2 * i64::from(self.dots[j]);
                // `tau` may have tightened since the screen.
                if lb > tau
                    || (kth.is_finite()
                        && dist as f64 > l2_prune_limit(kth, q.rel, eq, err, arena.scale))
                {
                    continue;
                }
                let (p, e) = arena.locate(fr.record(i as usize));
                let page = &arena.pages[p];
                stats.rescored += 1;
                let score = prox_kernels::canonical::score(q.metric, q.v, page.vector(e, d));
                if insert_sorted(&mut self.best, k, score, page, e) && self.best.len() == k {
                    kth = self.best[k - 1].score;
                    tau = up(kth / (1.0 - q.rel));
                }
            }
        }
        self.fq = fq;
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

/// The query's table for the means' quantizer of `fast`: the records' own
/// `lut` when they share it, `rlut` otherwise.
fn rank_lut<'a>(
    lut: &'a Option<Lut>,
    rlut: &'a Option<Lut>,
    fast: Option<&Fast4>,
) -> Option<&'a Lut> {
    match fast {
        Some(f) if f.shared() => lut.as_ref(),
        _ => rlut.as_ref(),
    }
}

/// Lists ahead of the one being scanned whose 4-bit codes are prefetched
/// (the hardware prefetcher does not cross from one list to the next).
const LIST_AHEAD: usize = 2;

/// The adaptive 4-bit pass keeps its best `MID_KEEP·k` candidates by 8-bit
/// code distance for the f32 stage. On debian-minilm (d = 384) the cut
/// from `10·k` to `2·k` left recall@10 unchanged at every preset
/// (docs/performance.md, session 8).
const MID_KEEP: usize = 2;

/// Groups (logical leaves) whose lists are ranked when the adaptive search
/// scans `probes` lists: twice as many (one ranked group per probe lost
/// 0.01-0.02 recall at equal work on synth-gmm-200k).
fn group_probes(probes: usize) -> usize {
    probes.saturating_mul(2)
}

/// Inserts entry `i` of `node` with canonical `score` into the sorted top-k
/// list `best`; returns whether it entered.
/// Arena page `p`'s record range `a..b`, counted in `stats` as one node
/// visited and `b − a` distance evaluations.
fn visit_page(arena: &Arena, p: usize, stats: &mut SearchStats) -> (usize, usize) {
    let (a, b) = (arena.page_start[p], arena.page_start[p + 1]);
    stats.nodes_visited += 1;
    stats.distance_evals += (b - a) as u64;
    (a, b)
}

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
