//! Named proximity maps as the CLI sees them: publishing a map (with its
//! sidecars) under a root name, resolving it back, and opening it as the
//! engine's [`Index`] (which alone decides how a query runs).
//!
//! A named root holds `RootManifest` bytes with the typed-root config whose
//! root is a `CRMF` content root of kind `ProximityDescriptor` pointing at
//! the `PRXI` descriptor; its metadata maps `prox.hnsw` / `prox.pq` to the
//! 32-byte manifest CIDs of the sidecars (docs/formats-proximity.md).

use anyhow::{anyhow, Context, Result};
use prox_engine::proximity::{self, Layouts, ProximityMap, Sidecars};
use prox_engine::{index, BlockStore, Cid, Index};
use std::sync::Arc;

/// What a named root points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The `PRXI` descriptor.
    pub descriptor: Cid,
    /// The `HNSW` manifest, if any.
    pub hnsw: Option<Cid>,
    /// The `PQPQ` manifest, if any.
    pub pq: Option<Cid>,
    /// The persisted search layouts (`prox.layout.*`), if any.
    pub layouts: Layouts,
}

/// Points root `name` at the map `p` describes (a `CRMF` naming the
/// descriptor and its sidecars), through the engine's one publisher
/// ([`prox_engine::proximity::publish`]). Returns the CRMF CID. Only called
/// after every object of the map is stored.
pub fn publish(store: &dyn BlockStore, name: &str, p: &Published) -> Result<Cid> {
    store.commit()?;
    let map = ProximityMap::load(store, p.descriptor)
        .with_context(|| format!("loading map {}", p.descriptor))?;
    let sidecars = Sidecars {
        hnsw: p.hnsw,
        pq: p.pq,
    };
    proximity::publish_with(store, name, &map, &sidecars, &p.layouts.to_metadata())
        .with_context(|| format!("cannot set root {name:?}"))
}

/// Reads root `name` through the engine's resolver
/// ([`prox_engine::proximity::resolve`]).
pub fn resolve(store: &dyn BlockStore, name: &str) -> Result<Published> {
    let (descriptor, side) = proximity::resolve(store, name)
        .with_context(|| format!("root {name:?}"))?
        .ok_or_else(|| anyhow!("no map is published under root {name:?}"))?;
    let layouts =
        proximity::resolve_layouts(store, name).with_context(|| format!("root {name:?}"))?;
    Ok(Published {
        descriptor,
        hnsw: side.hnsw,
        pq: side.pq,
        layouts,
    })
}

/// Opens the map published under `name` as an [`Index`] (see
/// [`prox_engine::index`]: the one search entry point).
pub fn open(store: Arc<dyn BlockStore>, name: &str, options: &index::Options) -> Result<Index> {
    Index::open(store, name, options).with_context(|| format!("map {name:?}"))
}

/// [`open`] for an already resolved root.
pub fn open_published(
    store: Arc<dyn BlockStore>,
    p: &Published,
    options: &index::Options,
) -> Result<Index> {
    let sidecars = Sidecars {
        hnsw: p.hnsw,
        pq: p.pq,
    };
    Index::load_with_layouts(store, p.descriptor, sidecars, &p.layouts, options)
        .with_context(|| format!("map {}", p.descriptor))
}

/// Row id of an fvecs-built map's key (8-byte big-endian), if it is one.
pub fn key_to_id(key: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}

/// A recall profile measured and published by [`profile`].
pub struct Profiled {
    /// Its `PRLY` manifest.
    pub cid: Cid,
    /// The table.
    pub profile: index::Profile,
    /// Seconds spent opening the map and measuring.
    pub seconds: f64,
}

/// Measures the recall profile of the map published under `name` on
/// `queries` of its records and publishes it beside the map
/// ([`Index::measure_profile`], [`Index::publish_profile`]); `None` when
/// `queries` is 0 or the map is too small to profile (fewer than
/// [`index::PROFILE_K`]` + 2` records), and when another writer moved the
/// root on meanwhile (said on stderr: the newer version is that writer's
/// to profile).
pub fn profile(store: Arc<dyn BlockStore>, name: &str, queries: usize) -> Result<Option<Profiled>> {
    if queries == 0 {
        return Ok(None);
    }
    let sp = crate::progress::spinner("measuring the recall profile");
    let t = std::time::Instant::now();
    let ix = open(store, name, &index::Options::default())?;
    if ix.len() < index::PROFILE_K as u64 + 2 {
        sp.finish_and_clear();
        return Ok(None);
    }
    let measured = ix
        .measure_profile(queries)
        .and_then(|p| Ok((ix.publish_profile(name, &p)?, p)));
    sp.finish_and_clear();
    let (cid, profile) = match measured {
        Err(prox_engine::Error::Conflict { .. }) => {
            crate::progress::note(format_args!(
                "recall profile of map {name:?} not published: another writer moved the root on"
            ));
            return Ok(None);
        }
        other => other.with_context(|| format!("recall profile of map {name:?}"))?,
    };
    Ok(Some(Profiled {
        cid,
        profile,
        seconds: t.elapsed().as_secs_f64(),
    }))
}

/// The profile as JSON: its counts and one object per measured setting.
pub fn profile_json(p: &index::Profile) -> serde_json::Value {
    let entries: Vec<serde_json::Value> = p
        .entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "path": e.setting.path.name(),
                "setting": e.setting.to_string(),
                "recall": p.recall(e),
                "stderr": p.stderr(e),
                "micros": e.micros,
            })
        })
        .collect();
    serde_json::json!({
        "k": p.k, "queries": p.queries, "edits": p.edits, "entries": entries,
    })
}
