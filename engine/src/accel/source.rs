//! Reading a proximity map's records for sidecar builds, and building both
//! sidecars in one call (used by `prox build --hnsw/--pq` and
//! `prox accel build`), and persisting the search layouts.

use super::hnsw::{read_leaves, Hnsw, HnswSidecar};
use super::params::{HnswParams, PqParams};
use super::pq::{Pq, PqSidecar};
use super::vectors::{Arena, Rows};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::proximity::search::ExactLayout;
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
        Some(root) => {
            let leaves = read_leaves(store, root, |bytes| {
                let mut out = Vec::new();
                crate::prolly::visit(&bytes, |key, value| {
                    out.push((key.to_vec(), Record::decode_vector(value, dims)?));
                    Ok(())
                })?;
                Ok(out)
            })?;
            let mut out = Vec::with_capacity(leaves.iter().map(Vec::len).sum());
            for leaf in leaves {
                out.extend(leaf);
            }
            out
        }
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

/// [`map_records`] decoded straight into [`Rows`]: each directory leaf's
/// entry count is read from its header, so every leaf decodes its vectors
/// in parallel into its own range of one buffer. Keys ascend across the
/// whole directory, else [`Error::Corrupt`].
pub(crate) fn map_rows(store: &dyn BlockStore, descriptor: Cid) -> Result<(Descriptor, Rows)> {
    let bytes = store
        .get(&descriptor)?
        .ok_or(Error::NotFound { cid: descriptor })?;
    let desc = Descriptor::decode(&bytes)?;
    let dims = desc.config.dims as usize;
    let leaves = match desc.directory.root {
        None => Vec::new(),
        Some(root) => read_leaves(store, root, |b| {
            let n = crate::prolly::entry_count(&b)?;
            Ok((b, n))
        })?,
    };
    let n: usize = leaves.iter().map(|(_, n)| *n).sum();
    if n as u64 != desc.record_count {
        return Err(Error::Corrupt {
            cid: descriptor,
            reason: format!(
                "descriptor counts {} records, directory holds {n}",
                desc.record_count
            ),
        });
    }
    let mut vectors = Arena::zeroed(dims, n);
    let (buf, stride) = vectors.rows_mut();
    let mut jobs = Vec::with_capacity(leaves.len());
    let mut rest = buf;
    for (b, count) in &leaves {
        let (mine, tail) = rest.split_at_mut(count * stride);
        jobs.push((b, *count, mine));
        rest = tail;
    }
    let keys = jobs
        .into_par_iter()
        .map(|(b, count, out)| {
            let mut keys = Vec::with_capacity(count);
            crate::prolly::visit(b, |key, value| {
                let i = keys.len();
                let row = out
                    .get_mut(i * stride..i * stride + dims)
                    .ok_or(Error::Corrupt {
                        cid: descriptor,
                        reason: "a directory leaf holds more entries than its header".into(),
                    })?;
                Record::decode_vector_into(value, row)?;
                keys.push(key.to_vec());
                Ok(())
            })?;
            Ok(keys)
        })
        .collect::<Result<Vec<Vec<Vec<u8>>>>>()?;
    let keys: Vec<Vec<u8>> = keys.into_iter().flatten().collect();
    if keys.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::Corrupt {
            cid: descriptor,
            reason: "directory keys do not ascend across leaves".into(),
        });
    }
    Ok((desc, Rows { keys, vectors }))
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
/// and adaptive sub-lists; with `exact` [`ExactLayout::Local`] or
/// [`ExactLayout::Split`] on an L2 map, its local frames or rotated split
/// arena; and, when `pq` names a 4-bit PQ sidecar of the
/// map (read from the store: a sidecar trained in the same step gives
/// them through [`build_sidecars_and_lists`]), its fast-scan coarse lists.
/// Each is bound to the descriptor; returns their manifest CIDs. The bytes
/// are a function of the descriptor (and the frame width) alone.
pub fn build_layouts(
    store: &dyn BlockStore,
    descriptor: Cid,
    pq: Option<Cid>,
    exact: ExactLayout,
) -> Result<Layouts> {
    let map = crate::proximity::ProximityMap::load(store, descriptor)?;
    let exact = match exact {
        ExactLayout::Local(_) | ExactLayout::Split(_) => exact,
        ExactLayout::Auto | ExactLayout::Off => ExactLayout::Off,
    };
    let searcher = map.searcher()?.exact_layout(exact);
    let arena = Some(searcher.persist_arena(store, descriptor)?);
    let adaptive = Some(searcher.persist_adaptive(store, descriptor)?);
    let frames = searcher.persist_frames(store, descriptor)?;
    let rotated = searcher.persist_rotated(store, descriptor)?;
    drop(searcher);
    let ivf = match pq {
        None => None,
        Some(cid) => {
            let (desc, rows) = map_rows(store, descriptor)?;
            let q = super::pq::load_rows(store, cid, Some(descriptor), desc.config.metric, rows)?;
            q.persist_fast_scan(store, descriptor)?
        }
    };
    Ok(Layouts {
        arena,
        adaptive,
        ivf,
        profile: None,
        frames,
        rotated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proximity::{ProximityConfig, ProximityMap};
    use crate::MemStore;
    use prox_testkit::SplitMix64;

    /// The flat read gives exactly the records the per-record read gives,
    /// over directories of many leaves, at a width the arena reuses (16)
    /// and at one it copies (7); an empty map gives no rows.
    #[test]
    fn map_rows_equals_map_records() {
        let seed = prox_testkit::seed(0x20_5e);
        let mut rng = SplitMix64::new(seed);
        for (dims, n) in [(16usize, 3000u64), (7, 2500), (5, 0)] {
            let store = MemStore::new();
            let recs: Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> = (0..n)
                .map(|i| {
                    let v = (0..dims).map(|_| rng.gauss()).collect();
                    (i.to_be_bytes().to_vec(), v, vec![i as u8; (i % 3) as usize])
                })
                .collect();
            let cfg = ProximityConfig::new(dims as u32);
            let map = ProximityMap::build(&store, &cfg, recs).unwrap();
            let d = map.descriptor_cid();
            let (_, records) = map_records(&store, d).unwrap();
            let (desc, rows) = map_rows(&store, d).unwrap();
            assert_eq!(desc.record_count, n);
            assert_eq!(rows.keys.len(), records.len(), "PROX_SEED={seed}");
            assert_eq!(rows.vectors.len(), records.len());
            assert_eq!(rows.vectors.dims(), dims);
            for (i, (k, v)) in records.iter().enumerate() {
                assert_eq!(&rows.keys[i], k, "PROX_SEED={seed} record {i}");
                assert_eq!(
                    rows.vectors.row(i),
                    v.as_slice(),
                    "PROX_SEED={seed} record {i}"
                );
            }
        }
    }
}
