//! [`Snapshot`]: one published version of a named map, fully loaded.
//!
//! A snapshot owns (a shared handle to) the store it was loaded from, the
//! map's native [`Searcher`] with every `PRXN` node decoded, and the loaded
//! accelerator layouts ([`Accelerators`]). It never changes after
//! [`Snapshot::load`] returns, so a request that holds an `Arc<Snapshot>`
//! reads one descriptor from start to end, whatever is published meanwhile.
//!
//! Path choice is the engine's [`accel::Planner`]; this module only maps the
//! API's mode/path words onto it and runs the plan (native search for
//! [`Path::Native`], [`Accelerators::run`] otherwise).

use prox_engine::accel::{self, AccelContext, Accelerators, Path, SearchGraph};
use prox_engine::proximity::search::{self as native, SearchContext, SearchRequest, Searcher};
use prox_engine::proximity::{HnswManifest, ProximityMap, Sidecars};
use prox_engine::{BlockStore, Cid, Error, Result};
use prox_kernels::Metric;
use std::sync::Arc;

/// The map handles that borrow the store; kept next to their owner.
struct Loaded<'s> {
    map: ProximityMap<'s>,
    searcher: Searcher<'s>,
}

self_cell::self_cell!(
    /// The store handle and the map handles borrowing it.
    struct Cell {
        owner: Arc<dyn BlockStore>,
        #[covariant]
        dependent: Loaded,
    }
);

/// How hard a search works (the API's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueryMode {
    /// The planner picks the path; a native search uses the balanced preset.
    #[default]
    Auto,
    /// Provably exact (native, never an accelerator).
    Exact,
    /// Native adaptive search, fastest preset.
    Fast,
    /// Native adaptive search, balanced preset.
    Balanced,
    /// Native adaptive search, high-recall preset.
    High,
}

impl QueryMode {
    /// Parses `auto`, `exact`, `fast`, `balanced`, `high`.
    pub fn parse(s: &str) -> Option<QueryMode> {
        Some(match s {
            "auto" => QueryMode::Auto,
            "exact" => QueryMode::Exact,
            "fast" => QueryMode::Fast,
            "balanced" => QueryMode::Balanced,
            "high" => QueryMode::High,
            _ => return None,
        })
    }

    fn preset(self) -> native::Mode {
        match self {
            QueryMode::Exact => native::Mode::Exact,
            QueryMode::Fast => native::Mode::Adaptive(native::Preset::Fast),
            QueryMode::Auto | QueryMode::Balanced => {
                native::Mode::Adaptive(native::Preset::Balanced)
            }
            QueryMode::High => native::Mode::Adaptive(native::Preset::HighRecall),
        }
    }
}

/// Which path the caller forces (the API's `path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathChoice {
    /// Let the planner choose (a native preset in `mode` means native).
    #[default]
    Auto,
    /// The native `PRXN` search.
    Native,
    /// The HNSW sidecar.
    Hnsw,
    /// The PQ sidecar.
    Pq,
}

impl PathChoice {
    /// Parses `auto`, `native`, `hnsw`, `pq`.
    pub fn parse(s: &str) -> Option<PathChoice> {
        Some(match s {
            "auto" => PathChoice::Auto,
            "native" => PathChoice::Native,
            "hnsw" => PathChoice::Hnsw,
            "pq" => PathChoice::Pq,
            _ => return None,
        })
    }
}

/// One validated query, minus its vector.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Query {
    /// Hits wanted (>= 1).
    pub k: usize,
    /// Search effort.
    pub mode: QueryMode,
    /// Forced path.
    pub path: PathChoice,
    /// HNSW `ef` (PQ: rerank multiplier); default from the sidecar manifest.
    pub ef: Option<usize>,
    /// Eligible keys (engine filter; `Keys` sorted strictly ascending).
    pub filter: Option<native::Filter>,
    /// Return each hit's value.
    pub with_values: bool,
}

/// The answer to one query.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// Hits ordered by `(score, key)`, values filled when requested.
    pub hits: Vec<native::Hit>,
    /// How the search ended (`exact`, `approximate`, `budget_exhausted`).
    pub completion: &'static str,
    /// The path that ran.
    pub path: Path,
}

/// Per-thread search buffers, reused across queries.
#[derive(Debug, Default)]
pub struct Scratch {
    native: Option<SearchContext>,
    accel: AccelContext,
}

/// An immutable, fully loaded version of a named map.
pub struct Snapshot {
    name: String,
    generation: u64,
    descriptor: Cid,
    sidecars: Sidecars,
    accel: Accelerators,
    cell: Cell,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("name", &self.name)
            .field("generation", &self.generation)
            .field("descriptor", &self.descriptor)
            .field("records", &self.len())
            .finish()
    }
}

fn hnsw_ef_search(store: &dyn BlockStore, manifest: Cid) -> Result<usize> {
    let bytes = store
        .get(&manifest)?
        .ok_or(Error::NotFound { cid: manifest })?;
    Ok(HnswManifest::decode(&bytes)?.config.ef_search as usize)
}

impl Snapshot {
    /// Loads the map `descriptor` with its `sidecars` from `store`: opens
    /// the searcher, decodes every hierarchy node (so requests do no
    /// decoding), and loads each sidecar's search layout. Expensive; call it
    /// off the request path, then publish the result.
    pub fn load(store: Arc<dyn BlockStore>, descriptor: Cid, sidecars: Sidecars) -> Result<Self> {
        let cell = Cell::try_new(store, |s| -> Result<Loaded<'_>> {
            let map = ProximityMap::load(&**s, descriptor)?;
            let searcher = map.searcher()?;
            searcher.warm()?;
            Ok(Loaded { map, searcher })
        })?;
        let store = &**cell.borrow_owner();
        let (metric, dims) = {
            let m = &cell.borrow_dependent().map;
            (m.metric(), m.dims() as usize)
        };
        let mut accel = Accelerators::default();
        if sidecars.hnsw.is_some() || sidecars.pq.is_some() {
            let (_, records) = accel::map_records(store, descriptor)?;
            if let Some(h) = sidecars.hnsw {
                let g = SearchGraph::load(store, h, Some(descriptor), metric, dims, &records)?;
                accel.hnsw = Some((g, hnsw_ef_search(store, h)?));
            }
            if let Some(p) = sidecars.pq {
                accel.pq = Some(accel::pq::load(
                    store,
                    p,
                    Some(descriptor),
                    metric,
                    dims,
                    &records,
                )?);
            }
        }
        Ok(Snapshot {
            name: String::new(),
            generation: 0,
            descriptor,
            sidecars,
            accel,
            cell,
        })
    }

    /// Sets the name and registry generation (done by the registry before
    /// the snapshot becomes visible).
    pub(crate) fn stamp(&mut self, name: &str, generation: u64) {
        self.name = name.to_string();
        self.generation = generation;
    }

    /// The root name it is published under (empty before publishing).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registry's publication counter for this snapshot (strictly
    /// increasing across every publish of the registry; 0 before).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The `PRXI` descriptor CID.
    pub fn descriptor(&self) -> Cid {
        self.descriptor
    }

    /// The sidecars it was loaded with.
    pub fn sidecars(&self) -> Sidecars {
        self.sidecars
    }

    /// The store the snapshot reads.
    pub fn store(&self) -> &Arc<dyn BlockStore> {
        self.cell.borrow_owner()
    }

    /// Records in the map.
    pub fn len(&self) -> u64 {
        self.cell.borrow_dependent().map.len()
    }

    /// True if the map holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        self.cell.borrow_dependent().map.dims() as usize
    }

    /// The map's metric.
    pub fn metric(&self) -> Metric {
        self.cell.borrow_dependent().map.metric()
    }

    /// `(vector, value)` of the record `key`, or `None`.
    pub fn get(&self, key: &[u8]) -> Result<Option<(Vec<f32>, Vec<u8>)>> {
        self.cell.borrow_dependent().map.get(key)
    }

    /// Records the filter admits, when it can be counted cheaply from a
    /// loaded sidecar's key-ordered ids (the planner's selectivity input).
    fn eligible(&self, filter: &native::Filter) -> Option<usize> {
        type KeyAt<'a> = Box<dyn Fn(usize) -> &'a [u8] + 'a>;
        let (keys, n): (KeyAt<'_>, usize) = match (&self.accel.hnsw, &self.accel.pq) {
            (Some((g, _)), _) => (Box::new(move |i| g.key(i as u32)), g.node_count()),
            (None, Some(p)) => (Box::new(move |i| p.key(i)), p.len()),
            (None, None) => return None,
        };
        let lower = |k: &[u8]| {
            let (mut lo, mut hi) = (0usize, n);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if keys(mid) < k {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let range = |start: &[u8], end: Option<&[u8]>| {
            let lo = lower(start);
            end.map_or(n, lower).saturating_sub(lo)
        };
        Some(match filter {
            native::Filter::Keys(k) => k.len(),
            native::Filter::Range { start, end } => range(start, end.as_deref()),
            native::Filter::Prefix(p) => {
                let end = prefix_end(p);
                range(p, end.as_deref())
            }
        })
    }

    /// Runs one query (`vector` raw, `dims` components). Dimension and
    /// filter errors are [`Error::WrongDimension`] / [`Error::InvalidArgument`].
    pub fn search(&self, scratch: &mut Scratch, vector: &[f32], q: &Query) -> Result<Answer> {
        if vector.len() != self.dims() {
            return Err(Error::WrongDimension {
                expected: self.dims(),
                got: vector.len(),
                key: None,
            });
        }
        let mode = match (q.mode, q.path) {
            (QueryMode::Exact, _) => accel::Mode::Exact,
            (_, PathChoice::Native) => accel::Mode::Native,
            (_, PathChoice::Hnsw) => accel::Mode::Hnsw,
            (_, PathChoice::Pq) => accel::Mode::Pq,
            (QueryMode::Auto, PathChoice::Auto) => accel::Mode::Auto,
            (_, PathChoice::Auto) => accel::Mode::Native,
        };
        let plan = self.accel.planner().plan(&accel::Request {
            mode,
            k: q.k,
            ef: q.ef,
            rerank: q.ef,
            records: self.len() as usize,
            eligible: q.filter.as_ref().and_then(|f| self.eligible(f)),
            ..accel::Request::default()
        })?;
        let loaded = self.cell.borrow_dependent();
        if plan.path == Path::Native {
            let mut req = SearchRequest::new(q.k).mode(q.mode.preset());
            req.filter = q.filter.clone();
            req.with_values = q.with_values;
            let ctx = scratch.native.get_or_insert_with(SearchContext::new);
            let r = loaded.searcher.search_with(ctx, vector, &req)?;
            return Ok(Answer {
                hits: r.hits,
                completion: r.completion.name(),
                path: Path::Native,
            });
        }
        let prepared =
            prox_engine::proximity::math::prepare(self.metric(), self.dims() as u32, vector, None)?;
        let filter = q.filter.as_ref().map(|f| match f {
            native::Filter::Range { start, end } => accel::Filter::Range {
                start: Some(start.clone()),
                end: end.clone(),
            },
            native::Filter::Prefix(p) => accel::Filter::Prefix(p.clone()),
            native::Filter::Keys(k) => accel::Filter::Keys(k.clone()),
        });
        let out = self
            .accel
            .run(&mut scratch.accel, plan, &prepared, q.k, filter.as_ref())?;
        let mut hits = Vec::with_capacity(out.hits.len());
        for (key, score) in out.hits {
            let value = if q.with_values {
                let (_, v) = loaded.map.get(&key)?.ok_or_else(|| Error::Corrupt {
                    cid: self.descriptor,
                    reason: format!(
                        "sidecar key {} is missing from the directory",
                        hex::encode(&key)
                    ),
                })?;
                Some(v)
            } else {
                None
            };
            hits.push(native::Hit { key, score, value });
        }
        Ok(Answer {
            hits,
            completion: native::Completion::Approximate.name(),
            path: plan.path,
        })
    }
}

/// The smallest key above every key starting with `p` (`None`: unbounded).
fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_cases() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff"), None);
    }

    #[test]
    fn words_parse() {
        assert_eq!(QueryMode::parse("high"), Some(QueryMode::High));
        assert_eq!(QueryMode::parse("HIGH"), None);
        assert_eq!(PathChoice::parse("pq"), Some(PathChoice::Pq));
        assert_eq!(PathChoice::parse(""), None);
    }
}
