//! Exact L2 search over the scan arena: plain, rotated or local frames.

use super::{
    emit, insert_sorted, up, visit_page, Compiled, Query, Result, SearchContext, SearchResult,
    SearchStats, Searcher,
};
use crate::proximity::search::arena::{l2_prune_limit, limit_int, ScanArena};
use crate::proximity::search::frames::Frames;
use crate::proximity::search::node::Loader;
use crate::proximity::search::rotated::Rotated;
use crate::proximity::search::Completion;

impl SearchContext {
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
    pub(super) fn exact_l2(
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
                    self.exact_l2_frames(arena, &s.loader, fr, q, k, &mut stats)?;
                    let hits = emit(
                        self.best.iter(),
                        std::mem::take(&mut self.hits),
                        &mut self.spare_keys,
                    );
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
            Some(rot) => self.exact_l2_rotated(arena, &s.loader, rot, q, k, filter, &mut stats)?,
            None => self.exact_l2_plain(arena, &s.loader, q, k, filter, &mut stats)?,
        }
        let hits = emit(
            self.best.iter(),
            std::mem::take(&mut self.hits),
            &mut self.spare_keys,
        );
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
        arena: &ScanArena,
        loader: &Loader<'_>,
        q: &Query<'_>,
        k: usize,
        filter: &Compiled<'_>,
        stats: &mut SearchStats,
    ) -> Result<()> {
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
                self.watch.tick(arena.pages.len_of(p) * d)?;
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
                    let page = arena.pages.get(p, loader)?;
                    if !filter.accepts(page.key(i)) {
                        continue;
                    }
                    self.watch.tick(d + k)?;
                    stats.rescored += 1;
                    let score = prox_kernels::canonical::score(q.metric, q.v, page.vector(i, d));
                    if insert_sorted(&mut self.best, k, score, page, i) && self.best.len() == k {
                        kth = self.best[k - 1].score;
                        bulk = limit_int(l2_prune_limit(kth, q.rel, eq, arena.err_max, scale));
                    }
                }
            }
        }
        Ok(())
    }

    /// The loop of [`Self::exact_l2`] over the rotated split arena
    /// (`rotated.rs`): the same leaf order and stopping rule, each
    /// page screened by its records' leading rotated components
    /// ([`Rotated::bulk_limit`] with the largest residual), survivors
    /// checked with their own residuals and the remaining components
    /// ([`Rotated::beats`]), then scored canonically into `self.best`.
    #[allow(clippy::too_many_arguments)]
    fn exact_l2_rotated(
        &mut self,
        arena: &ScanArena,
        loader: &Loader<'_>,
        rot: &Rotated,
        q: &Query<'_>,
        k: usize,
        filter: &Compiled<'_>,
        stats: &mut SearchStats,
    ) -> Result<()> {
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
                self.watch.tick(arena.pages.len_of(p) * d)?;
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
                    if da > bulk || !rot.full(&self.rq, a + i, da, self.rq.dot_b(j), kth, q.rel) {
                        continue;
                    }
                    let page = arena.pages.get(p, loader)?;
                    if !filter.accepts(page.key(i)) {
                        continue;
                    }
                    self.watch.tick(d + k)?;
                    stats.rescored += 1;
                    let score = prox_kernels::canonical::score(q.metric, q.v, page.vector(i, d));
                    if insert_sorted(&mut self.best, k, score, page, i) && self.best.len() == k {
                        kth = self.best[k - 1].score;
                        (bulk, ra) = rot.limits(&self.rq, kth, q.rel);
                    }
                }
            }
        }
        Ok(())
    }

    /// The loop of [`Self::exact_l2`] over local frames
    /// (`frames`): frames nearest centre first, skipping those
    /// whose lower bound exceeds the k-th score, each screened whole by the
    /// fused kernel with the frame's limit, survivors checked with their
    /// own bound, then with the plain arena's full-width codes, then scored
    /// canonically into `self.best`.
    fn exact_l2_frames(
        &mut self,
        arena: &ScanArena,
        loader: &Loader<'_>,
        fr: &Frames,
        q: &Query<'_>,
        k: usize,
        stats: &mut SearchStats,
    ) -> Result<()> {
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
                self.watch.tick(range.len() * d)?;
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
                let page = arena.pages.get(p, loader)?;
                self.watch.tick(d + k)?;
                stats.rescored += 1;
                let score = prox_kernels::canonical::score(q.metric, q.v, page.vector(e, d));
                if insert_sorted(&mut self.best, k, score, page, e) && self.best.len() == k {
                    kth = self.best[k - 1].score;
                    tau = up(kth / (1.0 - q.rel));
                }
            }
        }
        self.fq = fq;
        Ok(())
    }
}
