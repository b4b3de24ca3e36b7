//! Opening an [`Index`]: the map, its sidecars and the native layouts,
//! loaded once over a shared store handle.

use super::profile::Profile;
use crate::accel::{self, AccelContext, Accelerators, Path};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::proximity::search::{ExactLayout, SearchContext, Searcher};
use crate::proximity::{self, Layouts, ProximityMap, Sidecars};
use crate::refs::META_SECONDARY_PREFIX;
use crate::secondary::FieldIndexes;
use crate::store::BlockStore;
use prox_kernels::Metric;
use std::sync::{Arc, RwLock};

/// The map's dimensions.
fn map_dims(cell: &Cell) -> usize {
    cell.borrow_dependent().map.dims() as usize
}

/// The map handles that borrow the store, kept next to their owner.
pub(super) struct Loaded<'s> {
    pub(super) map: ProximityMap<'s>,
    pub(super) searcher: Searcher<'s>,
}

self_cell::self_cell!(
    /// The store handle and the map handles borrowing it.
    pub(super) struct Cell {
        owner: Arc<dyn BlockStore>,
        #[covariant]
        dependent: Loaded,
    }
);

/// How an [`Index`] is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Exact-L2 layout of the native search (results are identical either
    /// way; only the work differs).
    pub exact_layout: ExactLayout,
    /// Build every native load-time layout while opening ([`Index::warm`]);
    /// when false they are built by the first native search that needs
    /// them.
    pub warm: bool,
    /// Load the sidecars the root names (the default). When false the map
    /// opens as if its root named none: nothing of them is read, and a
    /// request for the `hnsw` or `pq` path fails as on a map without one.
    /// For callers whose requests only run native searches.
    pub sidecars: bool,
    /// With `sidecars`, load only the sidecar of this path
    /// ([`Path::Hnsw`] or [`Path::Pq`]; [`Path::Native`]: none); `None`
    /// loads every sidecar the root names. A request for a sidecar left
    /// out fails as on a map without it. For callers that run one path.
    pub only: Option<Path>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            exact_layout: ExactLayout::Auto,
            warm: true,
            sidecars: true,
            only: None,
        }
    }
}

/// Per-thread search buffers, reused across queries (with
/// [`Index::search_into`] a search allocates nothing in steady state). Not
/// shared between threads.
#[derive(Debug, Default)]
pub struct Scratch {
    pub(super) native: Option<SearchContext>,
    pub(super) accel: AccelContext,
    /// The prepared query of a sidecar search and its second buffer.
    pub(super) prepared: Vec<f32>,
    pub(super) prep_work: Vec<f32>,
    /// Key buffers of hits an answer no longer needed.
    pub(super) spare_keys: Vec<Vec<u8>>,
}

/// One proximity map opened for queries: an immutable snapshot of one
/// descriptor with its sidecars (see the [module docs](crate::index)).
/// `Send + Sync`; share it behind an `Arc`.
pub struct Index {
    pub(super) descriptor: Cid,
    pub(super) sidecars: Sidecars,
    /// Opened without some sidecar its root names ([`Options::sidecars`]
    /// false, or [`Options::only`]): a write from it would publish the map
    /// without it.
    pub(super) sidecars_skipped: bool,
    pub(super) accel: Accelerators,
    /// The map's payload field indexes (`None`: none declared).
    pub(super) fields: Option<Arc<FieldIndexes>>,
    /// The persisted search layouts in use (republished by
    /// [`Index::commit`] while the descriptor is unchanged).
    pub(super) layouts: Layouts,
    /// The recall profile `recall` requests choose from, when the root
    /// names one measured on this map's sidecars.
    pub(super) profile: RwLock<Option<Arc<Profile>>>,
    /// Why the profile the root names did not load, if it did not.
    pub(super) profile_error: Option<String>,
    /// Recently resolved field and boolean filters.
    pub(super) filters: super::filter_cache::FilterCache,
    pub(super) cell: Cell,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("descriptor", &self.descriptor)
            .field("sidecars", &self.sidecars)
            .field("records", &self.len())
            .finish()
    }
}

impl Index {
    /// Opens the map published under the root `name` with every sidecar it
    /// names. [`Error::UnknownMap`] when the root is absent or empty.
    pub fn open(store: Arc<dyn BlockStore>, name: &str, options: &Options) -> Result<Index> {
        let (descriptor, sidecars, meta) =
            proximity::resolve_full(&*store, name)?.ok_or_else(|| Error::UnknownMap {
                name: name.to_string(),
            })?;
        let layouts = Layouts::from_metadata(&meta)?;
        let mut index = Index::load_with_layouts(store, descriptor, sidecars, &layouts, options)?;
        index.set_field_indexes(&meta)?;
        Ok(index)
    }

    /// Reads the field indexes the root `name` publishes for this map
    /// (none when it publishes none). They must belong to this map's
    /// records, else [`Error::InvalidObject`] (the root moved on: reload).
    pub fn load_field_indexes(&mut self, name: &str) -> Result<()> {
        let meta = proximity::resolve_metadata(&**self.store(), name, META_SECONDARY_PREFIX)?;
        self.set_field_indexes(&meta)
    }

    /// Loads the field indexes named by the root metadata `meta` (keys
    /// outside [`META_SECONDARY_PREFIX`] are ignored).
    fn set_field_indexes(&mut self, meta: &proximity::Metadata) -> Result<()> {
        let meta: proximity::Metadata = meta
            .iter()
            .filter(|(k, _)| k.starts_with(META_SECONDARY_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let fields = {
            let map = self.map();
            FieldIndexes::load(&**self.store(), &meta, &map.directory()?, map.dims())?
        };
        self.fields = fields.map(Arc::new);
        self.filters.clear();
        Ok(())
    }

    /// Opens the map `descriptor` with `sidecars` (each must have been
    /// built from this descriptor). Expensive: run it off any request path
    /// and share the result.
    pub fn load(
        store: Arc<dyn BlockStore>,
        descriptor: Cid,
        sidecars: Sidecars,
        options: &Options,
    ) -> Result<Index> {
        Index::load_with_layouts(store, descriptor, sidecars, &Layouts::default(), options)
    }

    /// [`Index::load`] reading the persisted search `layouts` (each must
    /// have been derived from this descriptor) instead of building them:
    /// the fast-scan lists with the PQ sidecar, the native arena and
    /// adaptive lists when a native search first needs them (at once with
    /// [`Options::warm`]). A layout that does not match the map is an
    /// error, never silently rebuilt: [`Error::InvalidArgument`] for
    /// another descriptor's, [`Error::Corrupt`] for one that disagrees
    /// with the hierarchy, [`Error::NotFound`] for a missing block.
    pub fn load_with_layouts(
        store: Arc<dyn BlockStore>,
        descriptor: Cid,
        sidecars: Sidecars,
        layouts: &Layouts,
        options: &Options,
    ) -> Result<Index> {
        let named = sidecars;
        let sidecars = match (options.sidecars, options.only) {
            (false, _) => Sidecars::default(),
            (true, None) => sidecars,
            (true, Some(path)) => Sidecars {
                hnsw: sidecars.hnsw.filter(|_| path == Path::Hnsw),
                pq: sidecars.pq.filter(|_| path == Path::Pq),
            },
        };
        let sidecars_skipped = (sidecars.hnsw.is_none() && named.hnsw.is_some())
            || (sidecars.pq.is_none() && named.pq.is_some());
        let cell = Cell::try_new(store, |s| -> Result<Loaded<'_>> {
            // The searcher checks the root's subtree count as
            // `ProximityMap::load` would, from the root it loads anyway.
            let map = ProximityMap::load_unchecked(&**s, descriptor)?;
            let searcher = map.searcher()?.exact_layout(options.exact_layout);
            Ok(Loaded { map, searcher })
        })?;
        let store = &**cell.borrow_owner();
        let metric = cell.borrow_dependent().map.metric();
        let mut accel = Accelerators::default();
        if sidecars.hnsw.is_some() || sidecars.pq.is_some() {
            let (_, rows) = accel::map_rows(store, descriptor)?;
            // Each sidecar keeps its own rows: the second one loaded gets
            // the buffers themselves, the first a copy.
            let (for_hnsw, for_pq) = match (sidecars.hnsw, sidecars.pq) {
                (Some(_), Some(_)) => (Some(rows.clone()), Some(rows)),
                (Some(_), None) => (Some(rows), None),
                _ => (None, Some(rows)),
            };
            if let (Some(h), Some(rows)) = (sidecars.hnsw, for_hnsw) {
                let (manifest, graph) =
                    accel::hnsw::load_search_rows(store, h, Some(descriptor), metric, rows)?;
                accel.hnsw = Some((graph, manifest.config.ef_search as usize));
            }
            if let (Some(p), Some(rows)) = (sidecars.pq, for_pq) {
                let pq = accel::pq::load_rows(store, p, Some(descriptor), metric, rows)?;
                if let Some(ivf) = layouts.ivf {
                    pq.load_fast_scan(store, ivf, descriptor)?;
                }
                accel.pq = Some(pq);
            }
        }
        // A profile that does not load fails only the `recall` requests
        // (with its error); one of other sidecars (rebuilt since) is stale.
        let (profile, profile_error) = match layouts.profile {
            Some(cid) => match Profile::load(store, cid, descriptor, map_dims(&cell)) {
                Ok(p) => (p.matches(named.hnsw, named.pq).then(|| Arc::new(p)), None),
                Err(e) => (None, Some(e.to_string())),
            },
            None => (None, None),
        };
        let index = Index {
            descriptor,
            sidecars,
            sidecars_skipped,
            accel,
            fields: None,
            layouts: *layouts,
            profile: RwLock::new(profile),
            profile_error,
            filters: Default::default(),
            cell,
        };
        // Read on first native use (a sidecar-only caller reads nothing).
        index.searcher().use_layouts(layouts, descriptor);
        if options.warm {
            index.warm()?;
        }
        Ok(index)
    }

    /// Builds every load-time layout now (decoded nodes, scan arena,
    /// adaptive sub-lists, the exact-L2 layout, and a 4-bit PQ sidecar's
    /// IVF fast-scan tables) so later searches do no I/O or decoding;
    /// returns the number of native nodes. Idempotent.
    pub fn warm(&self) -> Result<usize> {
        if let Some(pq) = &self.accel.pq {
            pq.fast_scan();
        }
        self.searcher().warm()
    }

    /// Reads or builds the load-time layouts as [`Index::warm`] (or, with
    /// `exact`, [`Index::warm_exact`]) does, but decodes only the leaf
    /// pages that building them needs: with persisted layouts the pages
    /// are decoded by the searches that reach them (Searcher::prepare).
    /// For a one-shot caller whose first answer matters more than its
    /// later ones.
    pub fn prepare(&self, exact: bool) -> Result<()> {
        if !exact {
            if let Some(pq) = &self.accel.pq {
                pq.fast_scan();
            }
        }
        self.searcher().prepare(exact)
    }

    /// [`Index::warm`] for a caller whose requests only run exact native
    /// searches: the adaptive layouts those never use are not built.
    pub fn warm_exact(&self) -> Result<usize> {
        self.searcher().warm_exact()
    }

    /// The `PRXI` descriptor CID.
    pub fn descriptor(&self) -> Cid {
        self.descriptor
    }

    /// The sidecar manifests loaded with the map.
    pub fn sidecars(&self) -> Sidecars {
        self.sidecars
    }

    /// The recall profile `recall` requests choose from, if the root names
    /// one measured on the sidecars it publishes.
    pub fn profile(&self) -> Option<Arc<Profile>> {
        self.profile
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The persisted search layouts loaded with the map.
    pub fn layouts(&self) -> Layouts {
        self.layouts
    }

    /// The map's payload field indexes, if any were declared.
    pub fn field_indexes(&self) -> Option<&FieldIndexes> {
        self.fields.as_deref()
    }

    /// The loaded sidecar layouts.
    pub fn accelerators(&self) -> &Accelerators {
        &self.accel
    }

    /// The store the index reads.
    pub fn store(&self) -> &Arc<dyn BlockStore> {
        self.cell.borrow_owner()
    }

    /// The map.
    pub fn map(&self) -> &ProximityMap<'_> {
        &self.cell.borrow_dependent().map
    }

    /// The native searcher (its layouts' sizes, for reports).
    pub fn searcher(&self) -> &Searcher<'_> {
        &self.cell.borrow_dependent().searcher
    }

    /// Records in the map.
    pub fn len(&self) -> u64 {
        self.map().len()
    }

    /// True if the map holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        self.map().dims() as usize
    }

    /// The map's metric.
    pub fn metric(&self) -> Metric {
        self.map().metric()
    }

    /// `(vector, value)` of the record `key`, or `None`.
    pub fn get(&self, key: &[u8]) -> Result<Option<(Vec<f32>, Vec<u8>)>> {
        self.map().get(key)
    }
}
