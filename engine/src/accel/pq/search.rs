//! ADC search: per-query distance table, one pass over all codes keeping the
//! best `k * rerank` approximate candidates, then exact rerank of those from
//! the full vectors with the canonical score, ordered by `(score, key)`.

use super::Pq;
use crate::accel::hnsw::{Filter, Hit};
use crate::accel::kernel::{fast_l2sq, fast_score};
use crate::accel::vectors::check_vector;
use crate::error::Result;
use prox_kernels::{canonical, Metric};
use std::collections::BinaryHeap;

use crate::accel::hnsw::{prefix_end, Scored};

/// Reusable per-thread PQ query buffers.
#[derive(Debug, Default, Clone)]
pub struct PqSearchContext {
    table: Vec<f32>,
    heap: BinaryHeap<Scored>,
    ids: Vec<u32>,
}

impl PqSearchContext {
    /// A fresh context.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Pq {
    /// Fills `table[s*k + j]` with the query's ranking distance to centroid
    /// `j` of subspace `s` (L2: squared distance; cosine and inner product:
    /// negative dot, whose sum ranks like the full score).
    fn fill_table(&self, q: &[f32], table: &mut Vec<f32>) {
        let k = usize::from(self.params.centroids);
        table.clear();
        for (&(a, b), book) in self.layout.iter().zip(&self.books) {
            let w = b - a;
            let part = &q[a..b];
            for j in 0..k {
                let c = &book[j * w..(j + 1) * w];
                table.push(match self.metric {
                    Metric::L2 => fast_l2sq(part, c),
                    Metric::Cosine | Metric::InnerProduct => {
                        fast_score(Metric::InnerProduct, part, c)
                    }
                });
            }
        }
    }

    /// Approximate distance of record `i` from the table.
    #[inline]
    fn adc(&self, table: &[f32], i: usize) -> f32 {
        let k = usize::from(self.params.centroids);
        let code = self.code(i);
        let mut acc = 0f32;
        for (s, &c) in code.iter().enumerate() {
            acc += table[s * k + usize::from(c)];
        }
        acc
    }

    /// The `k` best records for the prepared `query`: ADC over every
    /// eligible code, the best `k * rerank` (default: the manifest's
    /// multiplier) reranked exactly. Returns `min(k, eligible)` hits, ids
    /// being record indexes in key order ([`Pq::key`]).
    pub fn search(
        &self,
        ctx: &mut PqSearchContext,
        query: &[f32],
        k: usize,
        rerank: Option<usize>,
        filter: Option<&Filter>,
        out: &mut Vec<Hit>,
    ) -> Result<()> {
        check_vector(query, self.dims(), None)?;
        out.clear();
        if k == 0 || self.is_empty() {
            return Ok(());
        }
        let depth = k.saturating_mul(rerank.unwrap_or(self.params.rerank as usize).max(1));
        let mut table = std::mem::take(&mut ctx.table);
        self.fill_table(query, &mut table);
        ctx.heap.clear();
        let consider = |i: u32, heap: &mut BinaryHeap<Scored>| {
            let s = Scored {
                score: self.adc(&table, i as usize),
                id: i,
            };
            if heap.len() < depth {
                heap.push(s);
            } else if let Some(top) = heap.peek() {
                if s < *top {
                    heap.pop();
                    heap.push(s);
                }
            }
        };
        let mut heap = std::mem::take(&mut ctx.heap);
        match filter {
            None => (0..self.len() as u32).for_each(|i| consider(i, &mut heap)),
            Some(Filter::Range { start, end }) => {
                let lo = start.as_deref().map_or(0, |s| self.lower_bound(s));
                let hi = end.as_deref().map_or(self.len(), |e| self.lower_bound(e));
                (lo..hi.max(lo)).for_each(|i| consider(i as u32, &mut heap));
            }
            Some(Filter::Prefix(p)) => {
                let lo = self.lower_bound(p);
                let hi = prefix_end(p).map_or(self.len(), |e| self.lower_bound(&e));
                (lo..hi.max(lo)).for_each(|i| consider(i as u32, &mut heap));
            }
            Some(Filter::Keys(keys)) => {
                ctx.ids.clear();
                ctx.ids.extend(
                    keys.iter()
                        .filter_map(|key| self.keys.binary_search(key).ok().map(|i| i as u32)),
                );
                ctx.ids.sort_unstable();
                ctx.ids.dedup();
                for &i in &ctx.ids {
                    consider(i, &mut heap);
                }
            }
        }
        out.extend(heap.drain().map(|c| Hit {
            id: c.id,
            score: canonical::score(self.metric, query, self.vectors.row(c.id as usize)),
        }));
        out.sort_unstable_by(|a, b| a.score.total_cmp(&b.score).then(a.id.cmp(&b.id)));
        out.truncate(k);
        ctx.heap = heap;
        ctx.table = table;
        Ok(())
    }

    fn lower_bound(&self, key: &[u8]) -> usize {
        self.keys.partition_point(|k| k.as_slice() < key)
    }
}
