//! Exhaustive scoring of an eligible key set from a loaded sidecar's
//! vectors: the exact filtered top k without touching the map's directory.
//!
//! Both sidecars keep every record's vector in key order. The fast kernel
//! ranks every eligible row; the best few are rescored with canonical math,
//! which orders and reports them, so the answer is the canonical top k.

use super::hnsw::{IdHit, Scored};
use super::planner::{AccelContext, Accelerators};
use super::vectors::Arena;
use crate::deadline::Watch;
use crate::error::Result;
use crate::keys::KeySet;
use crate::numeric::kernel::{canonical_each, fast_score};
use prox_kernels::Metric;
use std::time::Instant;

impl Accelerators {
    /// The exact top `k` of `keys` for the prepared `query`, scored from
    /// the HNSW graph's vectors (else the PQ sidecar's), reported through
    /// `each` best first; `false` (nothing reported) when neither sidecar
    /// is loaded. Keys the map does not hold are skipped.
    pub fn score_set(
        &self,
        ctx: &mut AccelContext,
        query: &[f32],
        k: usize,
        keys: &KeySet,
        deadline: Option<Instant>,
        mut each: impl FnMut(&[u8], f64),
    ) -> Result<bool> {
        let mut watch = Watch::new(deadline);
        let (cands, hits) = ctx.direct_buffers();
        if let Some((g, _)) = &self.hnsw {
            let ids = g.id_set(keys);
            top_k(
                g.metric,
                &g.vectors,
                query,
                ids.ids.iter().copied(),
                k,
                &mut watch,
                cands,
                hits,
            )?;
            hits.iter().for_each(|h| each(g.key(h.id), h.score));
            return Ok(true);
        }
        if let Some(p) = &self.pq {
            let ids = p.id_set(keys);
            top_k(
                p.metric(),
                p.vectors(),
                query,
                ids.ids.iter().copied(),
                k,
                &mut watch,
                cands,
                hits,
            )?;
            hits.iter()
                .for_each(|h| each(p.key(h.id as usize), h.score));
            return Ok(true);
        }
        Ok(false)
    }
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
