//! The best-first traversal of the `PRXN` hierarchy: the exact search for
//! every metric, with optional caps (budgeted).

use super::{
    emit, insert_sorted, Compiled, Item, Query, Result, SearchContext, SearchResult, SearchStats,
    Searcher,
};
use crate::proximity::search::{Budget, Completion};

impl SearchContext {
    /// The exact search (with optional caps): best-first by lower bound.
    pub(super) fn traverse(
        &mut self,
        s: &Searcher<'_>,
        q: &Query<'_>,
        k: usize,
        budget: Budget,
        filter: &Compiled<'_>,
    ) -> Result<SearchResult> {
        let d = s.dims();
        let mut stats = SearchStats::default();
        let mut seq = 0u64;
        let mut completion = Completion::Exact;

        let mut node = s.root.clone();
        loop {
            // ---- expand `node` ----
            self.watch.tick(node.len * d)?;
            stats.nodes_visited += 1;
            stats.distance_evals += node.len as u64;
            self.dots.resize(node.len, 0);
            let quant = node.quant();
            prox_kernels::sq8::dot_i8_many(&self.codes, &quant.codes, &mut self.dots);
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
                        let lb = q.lower_bound(&quant.stats[i], self.dots[i], 0.0);
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
                    self.watch.tick(d + k)?;
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
                    let x = &quant.stats[i];
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

        let hits = emit(
            self.best.iter(),
            std::mem::take(&mut self.hits),
            &mut self.spare_keys,
        );
        Ok(SearchResult {
            hits,
            completion,
            stats,
        })
    }
}
