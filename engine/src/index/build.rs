//! Building a map from records: the map, its sidecars and (optionally) the
//! named root that publishes them. The one build path of every front end
//! (`prox build`, `prox demo`, the Python `Index.build`).

use crate::accel::{build_layouts, build_sidecars_and_lists, HnswParams, PqParams};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::proximity::search::ExactLayout;
use crate::proximity::{
    self, InputRecord, Layouts, Phase, Progress, ProximityConfig, ProximityMap, Sidecars,
    StreamBuild, StreamStats,
};
use crate::secondary::{FieldIndex, FieldIndexes};
use crate::store::{validate_root_name, BlockStore};
use std::time::Instant;

/// SQ8 group size (components per scale) when SQ8 codes are asked for
/// without one (`prox build --sq8`, Python `sq8=True`).
pub const DEFAULT_SQ8_GROUP: u32 = 32;

/// What to build besides the records.
#[derive(Debug, Clone, PartialEq)]
pub struct Build {
    /// The map's configuration (dimensions, metric, paging, SQ8).
    pub config: ProximityConfig,
    /// Also build an HNSW sidecar with these parameters.
    pub hnsw: Option<HnswParams>,
    /// Also train a PQ sidecar with these parameters.
    pub pq: Option<PqParams>,
    /// Build threads (`None`: rayon's global pool, i.e. every core).
    pub threads: Option<usize>,
    /// Payload field indexes to build with the map (docs/payloads.md).
    pub indexes: Vec<FieldIndex>,
    /// Also persist the search layouts (scan arena, adaptive lists and a
    /// 4-bit PQ sidecar's fast-scan lists), so the map opens without
    /// building them; they need about [`layout_memory`] bytes while built.
    pub layouts: bool,
    /// With `layouts`, an [`ExactLayout::Local`] here also persists the
    /// exact-L2 local frames of that width (L2 maps only), which exact
    /// searches then read instead of building ([`ExactLayout::Auto`], the
    /// default when opening, uses them); other values persist none.
    pub exact_layout: ExactLayout,
}

impl Build {
    /// A map of `dims` dimensions with the default configuration, no
    /// sidecars, every core.
    pub fn new(dims: u32) -> Build {
        Build {
            config: ProximityConfig::new(dims),
            hnsw: None,
            pq: None,
            threads: None,
            indexes: Vec::new(),
            layouts: false,
            exact_layout: ExactLayout::Auto,
        }
    }
}

/// What a build produced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Built {
    /// The `PRXI` descriptor.
    pub descriptor: Cid,
    /// The sidecar manifests built with it.
    pub sidecars: Sidecars,
    /// Records in the map.
    pub records: u64,
    /// Seconds spent building the map.
    pub map_seconds: f64,
    /// Seconds spent building the sidecars.
    pub sidecar_seconds: f64,
    /// The persisted search layouts ([`Build::layouts`]).
    pub layouts: Layouts,
    /// Seconds spent persisting the layouts.
    pub layout_seconds: f64,
}

/// Builds a map of `records` (and the sidecars `build` asks for) into
/// `store`, commits it and, when `name` is given, publishes it under that
/// root. Every record and parameter is checked before anything is written
/// (the errors of [`ProximityMap::build`], [`Error::InvalidRootName`],
/// [`Error::InvalidConfig`] for sidecar parameters, [`Error::InvalidArgument`]
/// for zero threads); a failure leaves the root untouched. The descriptor
/// depends only on the records and the configuration, not on the thread
/// count.
pub fn build(
    store: &dyn BlockStore,
    name: Option<&str>,
    build: &Build,
    records: Vec<InputRecord>,
) -> Result<Built> {
    if let Some(name) = name {
        validate_root_name(name)?;
    }
    build.config.validate()?;
    if let Some(h) = &build.hnsw {
        h.validate()?;
    }
    if let Some(p) = &build.pq {
        p.validate(build.config.dims as usize)?;
    }
    match build.threads {
        None => run(store, name, build, records),
        Some(0) => Err(Error::InvalidArgument(
            "build threads must be at least 1".into(),
        )),
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot start {n} build threads: {e}")))?
            .install(|| run(store, name, build, records)),
    }
}

fn run(
    store: &dyn BlockStore,
    name: Option<&str>,
    build: &Build,
    records: Vec<InputRecord>,
) -> Result<Built> {
    let n = records.len() as u64;
    let t = Instant::now();
    let map = ProximityMap::build(store, &build.config, records)?;
    complete(
        store,
        name,
        build,
        &map,
        n,
        t.elapsed().as_secs_f64(),
        &crate::proximity::NoProgress,
    )
}

/// Finishes a [`StreamBuild`] (the bounded-memory build of the same map
/// [`build()`] makes from records in memory): merges, clusters and writes
/// the map, then builds the sidecars `build` asks for and publishes as
/// [`build()`] does. `build.config` must be the configuration the stream
/// was started with. Sidecar builds hold every vector in memory; callers
/// bound them with [`sidecar_memory`] first. Reports its phases to
/// `progress`.
pub fn build_streamed(
    store: &dyn BlockStore,
    name: Option<&str>,
    build: &Build,
    stream: StreamBuild<'_>,
    progress: &dyn Progress,
) -> Result<(Built, StreamStats)> {
    if let Some(name) = name {
        validate_root_name(name)?;
    }
    if let Some(h) = &build.hnsw {
        h.validate()?;
    }
    if let Some(p) = &build.pq {
        p.validate(build.config.dims as usize)?;
    }
    let go = || -> Result<(Built, StreamStats)> {
        let t = Instant::now();
        let n = stream.records();
        let (map, stats) = stream.finish(progress)?;
        let map_seconds = t.elapsed().as_secs_f64();
        let built = complete(store, name, build, &map, n, map_seconds, progress)?;
        Ok((built, stats))
    };
    match build.threads {
        None => go(),
        Some(0) => Err(Error::InvalidArgument(
            "build threads must be at least 1".into(),
        )),
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot start {n} build threads: {e}")))?
            .install(go),
    }
}

/// Bytes the sidecars of `build` need in memory for `records` records:
/// every prepared vector (sidecar builds load the whole map), plus the
/// HNSW graph's neighbour lists and the PQ codes. An estimate that errs
/// high; `None` when `build` asks for no sidecar.
pub fn sidecar_memory(build: &Build, records: u64) -> Option<u64> {
    if build.hnsw.is_none() && build.pq.is_none() {
        return None;
    }
    let dims = u64::from(build.config.dims);
    // Key, vector (twice: the records and the aligned arena), bookkeeping.
    let mut per = 64 + 8 * dims.div_ceil(16) * 16;
    if let Some(h) = &build.hnsw {
        // Level-0 lists of 2·M plus the upper levels (a 1/M tail), u32 ids,
        // and a lock and level per node.
        per += 4 * (2 * h.max_connections as u64 + 2) + 32;
    }
    if let Some(p) = &build.pq {
        per += p.subquantizers as u64 + 8;
    }
    Some(records.saturating_mul(per))
}

/// Bytes the search layouts of a map of `records` x `dims` need in memory
/// while [`Build::layouts`] persists them: the decoded hierarchy (vectors,
/// keys, entry buffers), the scan arena, the adaptive lists with their
/// 4-bit codes, and the pages of the store read through its memory map.
/// An estimate that errs high (a 1M x 128 build peaks about 0.8 GB above
/// the same build without layouts; this says 2.2 GB).
pub fn layout_memory(dims: u32, records: u64) -> u64 {
    let d = u64::from(dims);
    records.saturating_mul(16 * d + 200)
}

/// Commits a built map, builds its sidecars (and layouts) and publishes it.
fn complete(
    store: &dyn BlockStore,
    name: Option<&str>,
    build: &Build,
    map: &ProximityMap<'_>,
    n: u64,
    map_seconds: f64,
    progress: &dyn Progress,
) -> Result<Built> {
    let descriptor = map.descriptor_cid();
    store.commit()?;
    let t = Instant::now();
    let mut sidecars = Sidecars::default();
    let layouts_wanted = build.layouts && n > 0;
    // The PQ sidecar's fast-scan lists come from the sidecar as trained.
    let mut ivf = None;
    if build.hnsw.is_some() || build.pq.is_some() {
        progress.start(Phase::Sidecars, Some(n));
        let (side, lists) = build_sidecars_and_lists(
            store,
            descriptor,
            build.hnsw.as_ref(),
            build.pq.as_ref(),
            layouts_wanted,
        )?;
        ivf = lists;
        sidecars.hnsw = side.hnsw.map(|s| s.manifest_cid);
        sidecars.pq = side.pq.map(|s| s.manifest_cid);
        store.commit()?;
        progress.advance(n);
        progress.finish(Phase::Sidecars);
    }
    let sidecar_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let layouts = if layouts_wanted {
        progress.start(Phase::Layouts, Some(n));
        let mut l = build_layouts(store, descriptor, None, build.exact_layout)?;
        l.ivf = ivf;
        store.commit()?;
        progress.advance(n);
        progress.finish(Phase::Layouts);
        l
    } else {
        Layouts::default()
    };
    let layout_seconds = t.elapsed().as_secs_f64();
    let meta = if build.indexes.is_empty() {
        proximity::Metadata::new()
    } else {
        let dir = map.directory()?;
        let fields = FieldIndexes::build(store, &dir, map.dims(), &build.indexes)?;
        let meta = fields.metadata(store, &dir)?;
        store.commit()?;
        meta
    };
    let meta = {
        let mut meta = meta;
        meta.extend(layouts.to_metadata());
        meta
    };
    if let Some(name) = name {
        proximity::publish_with(store, name, map, &sidecars, &meta)?;
    }
    Ok(Built {
        descriptor,
        sidecars,
        layouts,
        records: n,
        map_seconds,
        sidecar_seconds,
        layout_seconds,
    })
}
