//! PQ codes as the traversal codes of an HNSW search graph: the one place
//! that joins the two sidecars (the graph itself knows nothing of PQ
//! sidecars, only of codebooks).

use super::Pq;
use crate::accel::hnsw::SearchGraph;
use crate::error::{Error, Result};
use crate::proximity::PqManifest;

impl SearchGraph {
    /// [`with_pq`](Self::with_pq) from a PQ sidecar: the codebooks of its
    /// `PQPQ` manifest (`manifest`, e.g. from [`Pq::persist`]
    /// or a loaded sidecar) and the codes of `pq`, matched to nodes by key.
    /// Nodes the sidecar lacks (masked nodes, or records added to the graph
    /// since) are encoded with the same codebooks.
    ///
    /// Errors: manifest and sidecar disagree with the graph (metric,
    /// dimensions, subquantizers) or the codebooks are malformed.
    pub fn with_pq_sidecar(self, pq: &Pq, manifest: &PqManifest) -> Result<SearchGraph> {
        let bad = |why: String| Error::InvalidArgument(format!("pq traversal: {why}"));
        if pq.metric() != self.metric || manifest.metric != self.metric {
            return Err(bad("metric differs from the graph's".into()));
        }
        if pq.dims() != self.dims() || manifest.dims as usize != self.dims() {
            return Err(bad("dimensions differ from the graph's".into()));
        }
        let m = manifest.codebooks.len();
        if m != pq.params().subquantizers as usize {
            return Err(bad("manifest and sidecar disagree on subquantizers".into()));
        }
        let k = usize::from(manifest.config.centroids);
        let data: Vec<f32> = manifest
            .codebooks
            .iter()
            .flat_map(|b| b.centroids.iter().copied())
            .collect();
        let codebooks = prox_kernels::pq::Codebooks::new(self.dims(), m, k, data)
            .map_err(|e| bad(format!("codebooks: {e}")))?;
        // Both sides are in key order: one merge walk matches them.
        let n = self.node_count();
        let mut codes = vec![0u8; n * m];
        let mut j = 0usize;
        for (i, out) in codes.chunks_exact_mut(m).enumerate() {
            let key = self.key(i as u32);
            while j < pq.len() && pq.key(j) < key {
                j += 1;
            }
            if j < pq.len() && pq.key(j) == key {
                out.copy_from_slice(pq.code(j));
            } else {
                codebooks.encode(self.vectors.row(i), out);
            }
        }
        self.with_pq(codebooks, &codes)
    }
}
