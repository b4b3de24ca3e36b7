//! The adaptive search: IVF-style over the load-time sub-lists, with the
//! 4-bit first pass where the map has one.

use super::{
    emit, Cand, Compiled, Query, Result, SearchContext, SearchRequest, SearchResult, SearchStats,
    Searcher,
};
use crate::numeric::fastscan::query_lut;
use crate::numeric::kernel::det_score;
use crate::numeric::topk::{best_with_ties, shrink};
use crate::proximity::search::arena::ScanArena;
use crate::proximity::search::catalogue::Catalogue;
use crate::proximity::search::fast4::{Book, Fast4};
use crate::proximity::search::lists::Lists;
use crate::proximity::search::node::Loader;
use crate::proximity::search::{Completion, Preset};
use prox_kernels::pq::fastscan::{self, Lut, BLOCK, CODES};
use prox_kernels::Metric;

/// The integer code distance the 8-bit paths rank lists and records by:
/// L2 by `D = ‖q̂‖² + ‖x̂‖² − 2·q̂·x̂` (uniform scale), cosine and inner
/// product by `−q̂·x̂` with the query's own-scale codes (a positive factor
/// away from the real approximate dot).
#[derive(Debug, Clone, Copy)]
struct CodeDist {
    l2: bool,
    /// `‖q̂‖²` (L2 only).
    qn: i64,
}

impl CodeDist {
    #[inline]
    fn of(self, norm: i32, dot: i32) -> i64 {
        if self.l2 {
            self.qn + i64::from(norm) - 2 * i64::from(dot)
        } else {
            -i64::from(dot)
        }
    }
}

/// What one adaptive search reads: the arena, the sub-lists, their 4-bit
/// codes when the query's tables quantised (`None`: the 8-bit codes) and
/// the query's code distance.
#[derive(Clone, Copy)]
struct Coded<'a> {
    arena: &'a ScanArena,
    loader: &'a Loader<'a>,
    lists: &'a Lists,
    fast: Option<&'a Fast4>,
    cd: CodeDist,
}

/// How far one adaptive search scans: `head` ranked lists (more while
/// fewer than `k` eligible candidates were seen), keeping `pool_cap` 8-bit
/// or `depth` 4-bit candidates.
#[derive(Debug, Clone, Copy)]
struct Scan {
    k: usize,
    leaves: usize,
    head: usize,
    pool_cap: usize,
    depth: usize,
}

/// Orders 8-bit candidates `(distance, page, entry)` by distance, then key
/// (every candidate's page is decoded before it becomes a candidate).
fn by_dist(arena: &ScanArena, a: &(i64, u32, u32), b: &(i64, u32, u32)) -> std::cmp::Ordering {
    a.0.cmp(&b.0).then_with(|| {
        let key = |p: u32, e: u32| {
            arena
                .pages
                .loaded_page(p as usize)
                .map_or(&[][..], |n| n.key(e as usize))
        };
        key(a.1, a.2).cmp(key(b.1, b.2))
    })
}

impl SearchContext {
    /// Appends `(centroid code distance, list)` of every list of group `g`
    /// to `self.lrank` (one kernel call).
    fn rank_lists(&mut self, on: &Coded<'_>, g: usize, stats: &mut SearchStats) {
        let Coded {
            lists, fast, cd, ..
        } = *on;
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
                .push((cd.of(lists.cent_norm[a + i], dot), (a + i) as u32));
        }
    }

    /// The adaptive search, IVF style over the sub-lists
    /// ([`Lists`]: k-means clusters of about 32 records inside
    /// each logical leaf): rank the logical leaves the filter can reach by
    /// the integer code distance from the query to their mean codes, rank
    /// the lists of the nearest `2·probes` leaves by their centroids, scan
    /// the best `probes` lists' codes (more lists, from every reachable
    /// leaf, while fewer than `k` eligible records were seen, so filters
    /// never under-fill), keep the best `rerank·k` records by integer code
    /// distance and rescore those canonically.
    ///
    /// Maps with the 4-bit first pass (`fast4.rs`) rank the groups
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
    pub(super) fn probe(
        &mut self,
        s: &Searcher<'_>,
        q: &Query<'_>,
        req: &SearchRequest,
        preset: Preset,
        filter: &Compiled<'_>,
    ) -> Result<SearchResult> {
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
        let cd = self.code_dist(arena, q);
        let fast = self.fast_tables(s.fast4()?, q);
        let on = Coded {
            arena,
            loader: &s.loader,
            lists,
            fast,
            cd,
        };
        let probes = req.probes.unwrap_or(preset_probes).max(1);
        let (leaves, head) = self.rank_probes(&on, cat, filter, probes, &mut stats);
        let depth = match fast {
            Some(_) => k.saturating_mul(rerank).max(1),
            None => pool_cap.max(1),
        };
        let plan = Scan {
            k,
            leaves,
            head,
            pool_cap,
            depth,
        };
        self.scan_lists(&on, filter, plan, &mut stats)?;
        if self.cands.len() > pool_cap {
            self.cands
                .select_nth_unstable_by(pool_cap - 1, |a, b| by_dist(arena, a, b));
            self.cands.truncate(pool_cap);
        }
        let d = s.dims();
        for &(_, p, i) in &self.cands {
            self.watch.tick(d)?;
            let node = arena.pages.get(p as usize, &s.loader)?;
            let score = prox_kernels::canonical::score(q.metric, q.v, node.vector(i as usize, d));
            self.rescore.push(Cand {
                score,
                node: node.clone(),
                idx: i,
            });
        }
        if !self.fcands.is_empty() {
            self.rescore_fast(&on, q, plan, &mut stats)?;
        }
        stats.rescored += (self.rescore.len() + self.rescored.len()) as u64;
        self.rescore.sort_unstable();
        let hits = emit(
            self.rescore.iter().take(k),
            std::mem::take(&mut self.hits),
            &mut self.spare_keys,
        );
        Ok(SearchResult {
            hits,
            completion: Completion::Approximate,
            stats,
        })
    }

    /// The query's [`CodeDist`]: for L2 its codes with the arena's uniform
    /// scale in `self.ucodes`, otherwise a copy of its own-scale codes.
    fn code_dist(&mut self, arena: &ScanArena, q: &Query<'_>) -> CodeDist {
        let l2 = q.metric == Metric::L2;
        let qn = if l2 {
            self.quantize_uniform(arena, q.v).0
        } else {
            self.ucodes.clear();
            self.ucodes.extend_from_slice(&self.codes);
            0
        };
        CodeDist { l2, qn }
    }

    /// The 4-bit pass (ranking and scanning) when the map has one and the
    /// query's tables quantise (finite partials), with the tables in
    /// `self.lut` / `self.rlut`; `None` means 8-bit codes.
    fn fast_tables<'f>(&mut self, fast4: Option<&'f Fast4>, q: &Query<'_>) -> Option<&'f Fast4> {
        let f = fast4?;
        let lut = |b: &Book, table: &mut Vec<f32>, lut: &mut Option<Lut>| {
            query_lut(q.metric, q.v, b.m, &b.books_t, CODES, table, lut).is_some()
        };
        // One table when the records share the means' quantizer.
        (lut(&f.scan, &mut self.table, &mut self.lut)
            && (f.shared() || lut(&f.rank, &mut self.table, &mut self.rlut)))
        .then_some(f)
    }

    /// Ranks the groups (logical leaves) the filter can reach by their
    /// mean codes into `self.grank`, then the lists of the nearest
    /// `leaves` groups by their centroids into `self.lrank`, the best
    /// `head` of them sorted first. Returns `(leaves, head)`.
    fn rank_probes(
        &mut self,
        on: &Coded<'_>,
        cat: &Catalogue,
        filter: &Compiled<'_>,
        probes: usize,
        stats: &mut SearchStats,
    ) -> (usize, usize) {
        let Coded {
            lists, fast, cd, ..
        } = *on;
        let groups = lists.group_start.len() - 1;
        stats.distance_evals += groups as u64;
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
                    None => cd.of(lists.group_norm[g], dot),
                };
                self.grank.push((dist, g as u32));
            }
        }
        let leaves = group_probes(probes).min(self.grank.len());
        if leaves < self.grank.len() && leaves > 0 {
            self.grank.select_nth_unstable(leaves - 1);
        }
        self.lrank.clear();
        for gi in 0..leaves {
            let g = self.grank[gi].1 as usize;
            self.rank_lists(on, g, stats);
        }
        let probes = probes.min(self.lrank.len().max(1));
        if probes < self.lrank.len() {
            self.lrank.select_nth_unstable(probes - 1);
        }
        let head = probes.min(self.lrank.len());
        self.lrank[..head].sort_unstable();
        (leaves, head)
    }

    /// Scans the ranked lists in order: the first `head`, then more while
    /// fewer than `k` eligible candidates were seen. 8-bit candidates go to
    /// `self.cands` as `(distance, page, entry)`, cut to the best
    /// `pool_cap` by `(distance, key)` whenever twice that many gathered;
    /// once cut, the largest kept distance is a limit nothing farther can
    /// pass. The 4-bit pass keeps `(sum, slot)` in `self.fcands` the same
    /// way, cut to `depth` below a bound.
    fn scan_lists(
        &mut self,
        on: &Coded<'_>,
        filter: &Compiled<'_>,
        plan: Scan,
        stats: &mut SearchStats,
    ) -> Result<()> {
        let Coded {
            arena,
            lists,
            fast,
            cd,
            ..
        } = *on;
        let d = self.ucodes.len();
        let Scan {
            k,
            leaves,
            head,
            pool_cap,
            depth,
        } = plan;
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
                        let lists_in = lists.group_start[g + 1] - lists.group_start[g];
                        self.watch.tick(lists_in * d)?;
                        self.rank_lists(on, g, stats);
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
            self.watch.tick((b - a) * d)?;
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
                        let page = arena.pages.get(lists.page[slot] as usize, on.loader)?;
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
                let dist = cd.of(lists.norms[a + i], dot);
                if dist > limit {
                    continue;
                }
                let (p, e) = (lists.page[a + i], lists.entry[a + i]);
                if !filter.accepts(arena.pages.get(p as usize, on.loader)?.key(e as usize)) {
                    continue;
                }
                self.cands.push((dist, p, e));
                if self.cands.len() >= 2 * pool_cap.max(1) {
                    self.cands
                        .select_nth_unstable_by(pool_cap - 1, |a, b| by_dist(arena, a, b));
                    self.cands.truncate(pool_cap);
                    limit = self.cands[pool_cap - 1].0;
                }
            }
        }
        Ok(())
    }

    /// Rescores the 4-bit candidates into `self.rescore`: cut to the best
    /// `MID_KEEP·k` by their 8-bit code distance, then the deterministic
    /// f32 score of each, then canonical scores for the best `k` of those
    /// and their ties.
    fn rescore_fast(
        &mut self,
        on: &Coded<'_>,
        q: &Query<'_>,
        plan: Scan,
        stats: &mut SearchStats,
    ) -> Result<()> {
        let Coded {
            arena,
            loader,
            lists,
            cd,
            ..
        } = *on;
        let (k, d) = (plan.k, q.v.len());
        shrink(&mut self.fcands, plan.depth);
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
                self.watch.tick(d)?;
                let i = slot as usize;
                let row = &lists.codes[i * d..(i + 1) * d];
                prox_kernels::i8scan::dots(&self.ucodes, row, &mut dot);
                self.mids.push((cd.of(lists.norms[i], dot[0]), slot));
            }
            self.mids.select_nth_unstable(keep - 1);
            self.fcands.clear();
            self.fcands
                .extend(self.mids[..keep].iter().map(|&(_, slot)| (0, slot)));
        }
        let vector = |slot: u32| -> Result<&[f32]> {
            let slot = slot as usize;
            let page = arena.pages.get(lists.page[slot] as usize, loader)?;
            Ok(page.vector(lists.entry[slot] as usize, d))
        };
        for &(_, slot) in &self.fcands {
            prox_kernels::prefetch::prefetch_read(vector(slot)?);
        }
        self.rescored.clear();
        for &(_, slot) in &self.fcands {
            self.watch.tick(d)?;
            self.rescored
                .push((det_score(q.metric, q.v, vector(slot)?), slot));
        }
        let keep = best_with_ties(&mut self.rescored, k);
        for &(_, slot) in &self.rescored[..keep] {
            let slot = slot as usize;
            let node = arena.pages.get(lists.page[slot] as usize, loader)?;
            let i = lists.entry[slot];
            let score = prox_kernels::canonical::score(q.metric, q.v, node.vector(i as usize, d));
            self.rescore.push(Cand {
                score,
                node: node.clone(),
                idx: i,
            });
        }
        Ok(())
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
/// code distance for the f32 stage: the 8-bit codes rank far more
/// precisely than the 4-bit sums, so a short pool keeps the true
/// neighbours while the f32 stage reads few vectors.
const MID_KEEP: usize = 2;

/// Groups (logical leaves) whose lists are ranked when the adaptive search
/// scans `probes` lists: twice as many, because a query's nearest lists
/// are often not in its nearest groups.
fn group_probes(probes: usize) -> usize {
    probes.saturating_mul(2)
}
