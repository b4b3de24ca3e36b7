//! Reading a proximity map's records for sidecar builds, and building both
//! sidecars in one call (used by `prox build --hnsw/--pq` and
//! `prox accel build`), and persisting the search layouts.

use super::hnsw::{read_tree, Hnsw, HnswSidecar};
use super::params::{HnswParams, PqParams};
use super::pq::{Pq, PqSidecar};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::proximity::{Descriptor, Layouts, Record, Sidecars};
use crate::store::BlockStore;
use rayon::prelude::*;

/// A map's records in key order: `(key, prepared vector)`.
pub type Records = Vec<(Vec<u8>, Vec<f32>)>;

/// Decodes the `PRXI` descriptor `descriptor` and every `PRVR` record of its
/// directory tree (hash-checked blocks, strict decoders), in key order.
pub fn map_records(store: &dyn BlockStore, descriptor: Cid) -> Result<(Descriptor, Records)> {
    let bytes = store
        .get(&descriptor)?
        .ok_or(Error::NotFound { cid: descriptor })?;
    let desc = Descriptor::decode(&bytes)?;
    let dims = desc.config.dims;
    let out = match desc.directory.root {
        None => Vec::new(),
        Some(root) => read_tree(store, root)?
            .into_par_iter()
            .map(|(key, value)| Ok((key, Record::decode(&value, dims)?.vector)))
            .collect::<Result<Records>>()?,
    };
    if out.len() as u64 != desc.record_count {
        return Err(Error::Corrupt {
            cid: descriptor,
            reason: format!(
                "descriptor counts {} records, directory holds {}",
                desc.record_count,
                out.len()
            ),
        });
    }
    Ok((desc, out))
}

/// Builds and persists the requested sidecars of the map `descriptor`.
pub fn build_sidecars(
    store: &dyn BlockStore,
    descriptor: Cid,
    hnsw: Option<&HnswParams>,
    pq: Option<&PqParams>,
) -> Result<Sidecars<HnswSidecar, PqSidecar>> {
    Ok(build_sidecars_and_lists(store, descriptor, hnsw, pq, false)?.0)
}

/// [`build_sidecars`]; with `lists`, also persists the fast-scan lists of
/// the PQ sidecar trained here (when it has 4-bit codes) from the trained
/// sidecar itself, so the map's records are read once. Returns the lists'
/// layout CID beside the sidecars.
pub fn build_sidecars_and_lists(
    store: &dyn BlockStore,
    descriptor: Cid,
    hnsw: Option<&HnswParams>,
    pq: Option<&PqParams>,
    lists: bool,
) -> Result<(Sidecars<HnswSidecar, PqSidecar>, Option<Cid>)> {
    let (desc, records) = map_records(store, descriptor)?;
    let metric = desc.config.metric;
    let dims = desc.config.dims as usize;
    let mut out = Sidecars::default();
    let mut ivf = None;
    if let Some(p) = hnsw {
        let h = Hnsw::build(metric, dims, &records, p)?;
        out.hnsw = Some(h.persist(store, descriptor)?);
    }
    if let Some(p) = pq {
        let q = Pq::train(metric, dims, &records, p)?;
        out.pq = Some(q.persist(store, descriptor)?);
        if lists {
            ivf = q.persist_fast_scan(store, descriptor)?;
        }
    }
    Ok((out, ivf))
}

/// Builds and persists every search layout of the map `descriptor` that
/// would otherwise be built when the map is opened: the native scan arena
/// and adaptive sub-lists, and, when `pq` names a 4-bit PQ sidecar of the
/// map (read from the store: a sidecar trained in the same step gives
/// them through [`build_sidecars_and_lists`]), its fast-scan coarse lists.
/// Each is bound to the descriptor; returns their manifest CIDs. The bytes
/// are a function of the descriptor alone.
pub fn build_layouts(store: &dyn BlockStore, descriptor: Cid, pq: Option<Cid>) -> Result<Layouts> {
    let map = crate::proximity::ProximityMap::load(store, descriptor)?;
    let searcher = map.searcher()?;
    let arena = Some(searcher.persist_arena(store, descriptor)?);
    let adaptive = Some(searcher.persist_adaptive(store, descriptor)?);
    drop(searcher);
    let ivf = match pq {
        None => None,
        Some(cid) => {
            let (desc, records) = map_records(store, descriptor)?;
            let (metric, dims) = (desc.config.metric, desc.config.dims as usize);
            let q = super::pq::load(store, cid, Some(descriptor), metric, dims, &records)?;
            drop(records);
            q.persist_fast_scan(store, descriptor)?
        }
    };
    Ok(Layouts {
        arena,
        adaptive,
        ivf,
    })
}
