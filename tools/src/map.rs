//! Named proximity maps as the CLI sees them: publishing a map (with its
//! sidecars) under a root name, resolving it back, and one search entry
//! point over every path (native PRXN search, HNSW, PQ).
//!
//! A named root holds `RootManifest` bytes with the typed-root config whose
//! root is a `CRMF` content root of kind `ProximityDescriptor` pointing at
//! the `PRXI` descriptor; its metadata maps `prox.hnsw` / `prox.pq` to the
//! 32-byte manifest CIDs of the sidecars (docs/formats-proximity.md).

use anyhow::{anyhow, bail, Context, Result};
use prox_engine::accel::{self, AccelContext, Accelerators, Path, SearchGraph};
use prox_engine::proximity::search::{self, SearchContext, SearchRequest, Searcher};
use prox_engine::proximity::{self, Descriptor, ProximityMap, Sidecars};
use prox_engine::{BlockStore, Cid};

/// What a named root points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The `PRXI` descriptor.
    pub descriptor: Cid,
    /// The `HNSW` manifest, if any.
    pub hnsw: Option<Cid>,
    /// The `PQPQ` manifest, if any.
    pub pq: Option<Cid>,
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
    proximity::publish(store, name, &map, &sidecars)
        .with_context(|| format!("cannot set root {name:?}"))
}

/// Reads root `name` through the engine's resolver
/// ([`prox_engine::proximity::resolve`]).
pub fn resolve(store: &dyn BlockStore, name: &str) -> Result<Published> {
    let (descriptor, side) = proximity::resolve(store, name)
        .with_context(|| format!("root {name:?}"))?
        .ok_or_else(|| anyhow!("no map is published under root {name:?}"))?;
    Ok(Published {
        descriptor,
        hnsw: side.hnsw,
        pq: side.pq,
    })
}

/// The path a query asks for (`--path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PathChoice {
    /// The planner picks (HNSW if present, else PQ, else native).
    Auto,
    /// The native PRXN search.
    Native,
    /// The HNSW sidecar.
    Hnsw,
    /// The PQ sidecar.
    Pq,
}

/// Native search modes (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeChoice {
    /// Provably exact (never uses an accelerator).
    Exact,
    /// Adaptive, fastest preset.
    Fast,
    /// Adaptive, balanced preset.
    Balanced,
    /// Adaptive, high-recall preset.
    High,
}

/// How to run one query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuerySpec {
    /// Hits wanted.
    pub k: usize,
    /// Path.
    pub path: PathChoice,
    /// Native mode.
    pub mode: ModeChoice,
    /// Native budget: caps distance evaluations (turns the native search
    /// into a budgeted exact search).
    pub budget: Option<u64>,
    /// HNSW ef (or PQ rerank multiplier on the PQ path).
    pub ef: Option<usize>,
    /// PQ fast-scan lists probed (None: the index default, nlist/16); on
    /// the native path, sub-lists scanned by the adaptive presets
    /// (None: the preset's count).
    pub nprobe: Option<usize>,
}

/// One answer, whatever the path.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// `(key, canonical score)` ordered by `(score, key)`.
    pub hits: Vec<(Vec<u8>, f64)>,
    /// How the search ended (`exact`, `approximate`, `budget_exhausted`).
    pub completion: &'static str,
    /// The path that ran.
    pub path: Path,
    /// PRXN nodes expanded (native path only).
    pub nodes: u64,
    /// Distance evaluations (native path only).
    pub distance_evals: u64,
}

/// Per-thread scratch for [`OpenMap::query`].
#[derive(Default)]
pub struct QueryContext {
    native: Option<SearchContext>,
    accel: AccelContext,
}

/// A map opened for queries, with its sidecars loaded.
pub struct OpenMap<'s> {
    /// What the root named.
    pub published: Published,
    /// The native searcher.
    pub searcher: Searcher<'s>,
    /// Loaded sidecars.
    pub accel: Accelerators,
}

impl<'s> OpenMap<'s> {
    /// Opens the map named `name` and loads the sidecars `path` may need
    /// (all of them for `Auto`, none for `Native`).
    pub fn open(store: &'s dyn BlockStore, name: &str, path: PathChoice) -> Result<OpenMap<'s>> {
        let published = resolve(store, name)?;
        Self::open_published(store, published, path)
    }

    /// [`OpenMap::open`] for an already resolved root.
    pub fn open_published(
        store: &'s dyn BlockStore,
        published: Published,
        path: PathChoice,
    ) -> Result<OpenMap<'s>> {
        let d = published.descriptor;
        let bytes = store
            .get(&d)?
            .ok_or_else(|| anyhow!("descriptor {d} is missing"))?;
        let descriptor = Descriptor::decode(&bytes).with_context(|| format!("descriptor {d}"))?;
        let metric = descriptor.config.metric;
        let dims = descriptor.config.dims as usize;
        let searcher = Searcher::new(store, descriptor).with_context(|| format!("map {d}"))?;
        let want_hnsw = matches!(path, PathChoice::Auto | PathChoice::Hnsw);
        let want_pq = matches!(path, PathChoice::Auto | PathChoice::Pq);
        if path == PathChoice::Hnsw && published.hnsw.is_none() {
            bail!("map {d} has no HNSW sidecar: build one with prox accel build --hnsw");
        }
        if path == PathChoice::Pq && published.pq.is_none() {
            bail!("map {d} has no PQ sidecar: build one with prox accel build --pq");
        }
        let mut accel = Accelerators::default();
        let need = (want_hnsw && published.hnsw.is_some()) || (want_pq && published.pq.is_some());
        if need {
            let (_, records) = accel::map_records(store, d).with_context(|| format!("map {d}"))?;
            if let (true, Some(h)) = (want_hnsw, published.hnsw) {
                let g = SearchGraph::load(store, h, Some(d), metric, dims, &records)
                    .with_context(|| format!("HNSW sidecar {h}"))?;
                let ef = {
                    let b = store
                        .get(&h)?
                        .ok_or_else(|| anyhow!("HNSW manifest {h} missing"))?;
                    prox_engine::proximity::HnswManifest::decode(&b)?
                        .config
                        .ef_search as usize
                };
                accel.hnsw = Some((g, ef));
            }
            if let (true, Some(q)) = (want_pq, published.pq) {
                let p = accel::pq::load(store, q, Some(d), metric, dims, &records)
                    .with_context(|| format!("PQ sidecar {q}"))?;
                accel.pq = Some(p);
            }
        }
        Ok(OpenMap {
            published,
            searcher,
            accel,
        })
    }

    /// Dimensions.
    pub fn dims(&self) -> usize {
        self.searcher.dims()
    }

    /// Records.
    pub fn len(&self) -> u64 {
        self.searcher.descriptor().record_count
    }

    /// True if the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs one query.
    pub fn query(&self, ctx: &mut QueryContext, q: &[f32], spec: &QuerySpec) -> Result<Answer> {
        let exact = spec.mode == ModeChoice::Exact;
        let mode = match (exact, spec.path) {
            (true, _) => accel::Mode::Exact,
            (false, PathChoice::Auto) => accel::Mode::Auto,
            (false, PathChoice::Native) => accel::Mode::Native,
            (false, PathChoice::Hnsw) => accel::Mode::Hnsw,
            (false, PathChoice::Pq) => accel::Mode::Pq,
        };
        let plan = self.accel.planner().plan(&accel::Request {
            mode,
            k: spec.k,
            ef: spec.ef,
            rerank: spec.ef,
            nprobe: spec.nprobe,
            records: self.len() as usize,
            eligible: None,
        })?;
        if plan.path == Path::Native {
            let native = match (spec.mode, spec.budget) {
                (ModeChoice::Exact, None) => search::Mode::Exact,
                (_, Some(b)) => search::Mode::Budgeted(search::Budget {
                    max_distance_evals: Some(b),
                    ..Default::default()
                }),
                (ModeChoice::Fast, None) => search::Mode::Adaptive(search::Preset::Fast),
                (ModeChoice::Balanced, None) => search::Mode::Adaptive(search::Preset::Balanced),
                (ModeChoice::High, None) => search::Mode::Adaptive(search::Preset::HighRecall),
            };
            let mut req = SearchRequest::new(spec.k).mode(native);
            // On the native path `nprobe` is the adaptive search's leaf count.
            req.probes = spec.nprobe;
            let c = ctx.native.get_or_insert_with(SearchContext::new);
            let r = self.searcher.search_with(c, q, &req)?;
            return Ok(Answer {
                hits: r.hits.into_iter().map(|h| (h.key, h.score)).collect(),
                completion: r.completion.name(),
                path: Path::Native,
                nodes: r.stats.nodes_visited,
                distance_evals: r.stats.distance_evals,
            });
        }
        let cfg = &self.searcher.descriptor().config;
        let prepared = prox_engine::proximity::math::prepare(cfg.metric, cfg.dims, q, None)?;
        let out = self
            .accel
            .run(&mut ctx.accel, plan, &prepared, spec.k, None)?;
        Ok(Answer {
            hits: out.hits,
            completion: "approximate",
            path: plan.path,
            nodes: 0,
            distance_evals: 0,
        })
    }
}

/// Row id of an fvecs-built map's key (8-byte big-endian), if it is one.
pub fn key_to_id(key: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}
