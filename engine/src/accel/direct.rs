//! Exhaustive scoring of an eligible key set from a loaded sidecar's
//! vectors: the exact filtered top k without touching the map's directory.
//!
//! Both sidecars keep every record's vector in key order. The fast kernel
//! ranks every eligible row; the best few are rescored with canonical math,
//! which orders and reports them, so the answer is the canonical top k.

use super::hnsw::top_k;
use super::planner::{AccelContext, Accelerators};
use crate::deadline::Watch;
use crate::error::Result;
use crate::keys::KeySet;
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
