//! Native k-nearest-neighbour search over a map's `PRXN` hierarchy.
//!
//! The hierarchy is a tree of nearest-representative groups whose entries
//! carry a representative vector, a Euclidean covering radius and the
//! `[min_key, max_key]` of the records below (proximity-format.md 5, 12.4,
//! 12.5). Exact and budgeted search is best-first: a frontier of subtrees,
//! expanded one node at a time, ordered by a lower bound on the score of
//! anything below them. Adaptive search is IVF-like over load-time
//! sub-lists (k-means clusters inside each logical leaf, `lists.rs`): the
//! leaves are ranked by their mean codes, the lists of the nearest leaves
//! by their centroids, and the nearest `probes` lists are scanned. Maps
//! with at least 1 024 records and at most 513 dimensions do all three
//! with a load-time 4-bit product quantisation and the fast-scan kernel
//! (`fast4.rs`); the others with the 8-bit codes.
//!
//! * **Ranking** uses per-vector 8-bit codes built when a node is first
//!   loaded ([`quant`]): one SIMD integer kernel call scores a whole node,
//!   and the integer results are bit-exact on every ISA, so every traversal
//!   decision is the same on every machine.
//! * **Reported scores** are always canonical
//!   ([`prox_kernels::canonical::score`] of the prepared query, 11.1, 11.2),
//!   and hits are ordered by `(score, key)`.
//! * **Scanning** (adaptive leaves, exact L2) reads the load-time scan
//!   arena (`arena.rs`): every record's code with one uniform scale, in
//!   leaf-catalogue order, so a leaf is one contiguous range, the query is
//!   quantized once and record distances are exact integers.
//! * [`Mode::Exact`] prunes only with rigorous bounds (the 11.3 bound,
//!   widened by the code error and the f64 summation error) and scores
//!   canonically every record whose bound does not exclude it, so it returns
//!   exactly the brute-force top k, ties included, for every metric.
//!   [`Mode::Budgeted`] is the same search with caps. [`Mode::Adaptive`]
//!   scans a preset number of sub-lists, ranks their records by their codes,
//!   keeps `rerank·k` candidates and rescores those canonically.
//! * **Filters** ([`Filter`]) prune subtrees by their key bounds and gate
//!   records by key, so a filtered search fills `min(k, eligible)` hits
//!   unless a budget cap stops it (reported as
//!   [`Completion::BudgetExhausted`]). Tiny key sets skip the hierarchy and
//!   score the records from the directory.
//! * Nodes are decoded once per [`Searcher`] and shared by all threads;
//!   [`Searcher::search_batch`] runs queries on rayon with one reusable
//!   [`SearchContext`] per worker.

mod adaptive_layout;
mod arena;
mod arena_layout;
mod catalogue;
mod engine;
mod fast4;
mod filter;
mod frames;
mod levels;
mod lists;
mod node;
mod pages;
mod quant;
mod rotated;
mod rotated_layout;

pub use crate::keys::Filter;
pub use engine::SearchContext;
pub use rotated::ExactLayout;

use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::prolly::Tree;
use crate::proximity::format::{Descriptor, LayoutKind, Record};
use crate::proximity::Layouts;
use crate::store::BlockStore;
use arena::ScanArena;
use catalogue::Catalogue;
use fast4::Fast4;
use frames::Frames;
use lists::Lists;
use node::{Loader, Node};
use prox_kernels::Metric;
use rayon::prelude::*;
use rotated::Rotated;
use std::sync::{Arc, OnceLock};

/// Adaptive search presets, from fastest to most thorough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// Few candidates, stops early.
    Fast,
    /// The default trade-off.
    Balanced,
    /// Tuned for recall@10 >= 0.95 on clustered data.
    HighRecall,
}

impl Preset {
    /// `(rerank multiplier, lists scanned)`: the search scans the `probes`
    /// sub-lists (k-means clusters of about 32 records inside each logical
    /// leaf) whose centroids are nearest and rescores the best `rerank·k`
    /// records canonically. The recall each preset reaches on the benchmark
    /// datasets is in docs/performance.md.
    pub(crate) fn params(self) -> (usize, usize) {
        match self {
            Preset::Fast => (4, 48),
            Preset::Balanced => (4, 160),
            Preset::HighRecall => (8, 384),
        }
    }

    /// [`Preset::params`] for maps with the 4-bit first pass (`fast4.rs`:
    /// at least 1 024 records and 2..=513 dimensions): `(candidates kept
    /// per hit, lists scanned)`. The 4-bit sums rank records less
    /// precisely than 8-bit codes, so the pool is deeper, but a list costs
    /// far less, so more lists are scanned.
    pub(crate) fn fast_params(self) -> (usize, usize) {
        match self {
            Preset::Fast => (10, 96),
            Preset::Balanced => (10, 256),
            Preset::HighRecall => (40, 768),
        }
    }

    /// The CLI spelling (`fast`, `balanced`, `high`).
    pub fn name(self) -> &'static str {
        match self {
            Preset::Fast => "fast",
            Preset::Balanced => "balanced",
            Preset::HighRecall => "high",
        }
    }
}

/// Caps for [`Mode::Budgeted`]; `None` means uncapped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    /// Most PRXN nodes expanded.
    pub max_nodes: Option<u64>,
    /// Most approximate distance evaluations (one per entry of an expanded node).
    pub max_distance_evals: Option<u64>,
    /// Most subtrees waiting in the frontier; further ones are dropped.
    pub max_frontier: Option<usize>,
}

/// How a search trades work for completeness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Provably the brute-force top k.
    Exact,
    /// The exact search, stopped by caps.
    Budgeted(Budget),
    /// Approximate search with a preset stopping rule.
    Adaptive(Preset),
}

/// One query's parameters; the filter may be borrowed (`'f`) so a caller
/// that keeps its own does not copy it per query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest<'f> {
    /// Hits wanted (>= 1).
    pub k: usize,
    /// Search mode.
    pub mode: Mode,
    /// Eligible keys; `None` means every record.
    pub filter: Option<std::borrow::Cow<'f, Filter>>,
    /// Fetch each hit's value from the directory.
    pub with_values: bool,
    /// [`Mode::Adaptive`] only: sub-lists to scan, overriding the
    /// preset's count (`None`: the preset's; values below 1 count as 1).
    /// More are scanned when a filter leaves fewer than `k` candidates.
    pub probes: Option<usize>,
    /// When the search must stop with [`Error::DeadlineExceeded`] (`None`:
    /// no limit); checked at bounded intervals of work.
    pub deadline: Option<std::time::Instant>,
}

impl<'f> SearchRequest<'f> {
    /// `k` nearest, [`Mode::Adaptive`]`(`[`Preset::Balanced`]`)`, no filter,
    /// no values.
    pub fn new(k: usize) -> SearchRequest<'f> {
        SearchRequest {
            k,
            mode: Mode::Adaptive(Preset::Balanced),
            filter: None,
            with_values: false,
            probes: None,
            deadline: None,
        }
    }

    /// The same request scanning `probes` sub-lists in adaptive mode.
    pub fn probes(mut self, probes: usize) -> SearchRequest<'f> {
        self.probes = Some(probes);
        self
    }

    /// The same request with another mode.
    pub fn mode(mut self, mode: Mode) -> SearchRequest<'f> {
        self.mode = mode;
        self
    }

    /// The same request with a filter.
    pub fn filter(mut self, filter: Filter) -> SearchRequest<'f> {
        self.filter = Some(std::borrow::Cow::Owned(filter));
        self
    }

    /// The same request with a borrowed filter.
    pub fn filter_ref(mut self, filter: &'f Filter) -> SearchRequest<'f> {
        self.filter = Some(std::borrow::Cow::Borrowed(filter));
        self
    }

    /// The same request, stopped at `at`.
    pub fn deadline(mut self, at: std::time::Instant) -> SearchRequest<'f> {
        self.deadline = Some(at);
        self
    }

    /// The same request, fetching values.
    pub fn with_values(mut self) -> SearchRequest<'f> {
        self.with_values = true;
        self
    }
}

/// One result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Record key.
    pub key: Vec<u8>,
    /// Canonical score (lower is better).
    pub score: f64,
    /// Record value, when requested.
    pub value: Option<Vec<u8>>,
}

/// How a search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Completion {
    /// The hits are provably the exact top `min(k, eligible)`.
    Exact,
    /// A [`Budget`] cap stopped the search; hits are the best found.
    BudgetExhausted,
    /// An adaptive stopping rule ended the search.
    Approximate,
}

impl Completion {
    /// Stable lower-case name (`exact`, `budget_exhausted`, `approximate`).
    pub fn name(self) -> &'static str {
        match self {
            Completion::Exact => "exact",
            Completion::BudgetExhausted => "budget_exhausted",
            Completion::Approximate => "approximate",
        }
    }
}

/// Work counters of one search.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// PRXN nodes expanded.
    pub nodes_visited: u64,
    /// Approximate (code) distance evaluations.
    pub distance_evals: u64,
    /// Canonical f64 scores computed.
    pub rescored: u64,
    /// Largest frontier size.
    pub frontier_peak: usize,
}

/// The answer to one query.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    /// Hits ordered by `(score, key)`.
    pub hits: Vec<Hit>,
    /// How the search ended.
    pub completion: Completion,
    /// Work done.
    pub stats: SearchStats,
}

/// Key sets at most this large are scored straight from the directory.
const DIRECT_KEYS: usize = 32;

/// A map opened for search: its descriptor and the decoded-node cache.
///
/// Cheap to share across threads (`&Searcher` is `Sync`); nodes are decoded
/// the first time any search reaches them and kept for the searcher's life.
pub struct Searcher<'s> {
    store: &'s dyn BlockStore,
    descriptor: Descriptor,
    loader: Loader<'s>,
    root: Arc<Node>,
    /// Leaf summaries for the adaptive search, built on first use.
    catalogue: OnceLock<Catalogue>,
    /// Every record's uniform-scale code in catalogue order, built on
    /// first use (adaptive and exact L2 search scan it).
    arena: OnceLock<ScanArena>,
    /// The adaptive search's sub-lists (k-means inside each logical leaf),
    /// built from the arena on first use.
    lists: OnceLock<Lists>,
    /// The adaptive search's 4-bit first pass over the sub-lists (`None`:
    /// not applicable to this map), built from the lists on first use.
    fast4: OnceLock<Option<Fast4>>,
    /// When exact L2 uses the rotated split arena.
    layout: ExactLayout,
    /// The rotated split arena (`None`: not used for this map), built on
    /// first exact L2 use.
    rotated: OnceLock<Option<Rotated>>,
    /// The local frames (`None`: not used for this map), built on first
    /// exact L2 use.
    frames: OnceLock<Option<Frames>>,
    /// Persisted layouts to read instead of building the arena and the
    /// adaptive lists ([`Searcher::use_layouts`]), read on first use.
    persisted: OnceLock<Persisted>,
}

/// The persisted layouts a searcher reads on first use.
#[derive(Debug, Clone, Copy)]
struct Persisted {
    arena: Option<Cid>,
    adaptive: Option<Cid>,
    frames: Option<Cid>,
    rotated: Option<Cid>,
    source: Cid,
}

impl std::fmt::Debug for Searcher<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Searcher")
            .field("root", &self.root.cid)
            .field("dims", &self.descriptor.config.dims)
            .field("metric", &self.descriptor.config.metric)
            .finish()
    }
}

impl<'s> Searcher<'s> {
    /// Opens the hierarchy of `descriptor`: loads the root (limited to
    /// `max_page_bytes`) and the levels above the leaves, one batched read
    /// per level, and checks its subtree count against the record
    /// count (section 6.6).
    pub fn new(store: &'s dyn BlockStore, descriptor: Descriptor) -> Result<Searcher<'s>> {
        let dims = descriptor.config.dims;
        if dims as usize > quant::MAX_CODE_DIMS {
            return Err(Error::InvalidArgument(format!(
                "search supports at most {} dimensions, map has {dims}",
                quant::MAX_CODE_DIMS
            )));
        }
        let loader = Loader {
            store,
            dims,
            max_page: descriptor.config.max_page_bytes as usize,
        };
        let root = Arc::new(loader.load(&descriptor.root)?);
        // The levels above the leaves (about one node in
        // 2^log_chunk_size), so a cold search reads only leaf pages.
        levels::expand(std::slice::from_ref(&root), &loader, levels::upper)?;
        let total: u64 = root.count.iter().sum();
        if total != descriptor.record_count {
            return Err(Error::Corrupt {
                cid: descriptor.root,
                reason: format!(
                    "root subtree count {total} differs from record count {}",
                    descriptor.record_count
                ),
            });
        }
        Ok(Searcher {
            store,
            descriptor,
            loader,
            root,
            catalogue: OnceLock::new(),
            arena: OnceLock::new(),
            lists: OnceLock::new(),
            fast4: OnceLock::new(),
            layout: ExactLayout::default(),
            rotated: OnceLock::new(),
            frames: OnceLock::new(),
            persisted: OnceLock::new(),
        })
    }

    /// Reads the scan arena, the adaptive lists, the local frames and the
    /// rotated arena from these persisted layouts (bound to `source`, this
    /// searcher's descriptor CID) when they are first needed, instead of
    /// building them; a search that needs none (a sidecar path) reads
    /// nothing. An exact-L2 layout is read under [`ExactLayout::Auto`] or
    /// when its width is the one the exact layout asks for. The first call
    /// wins. A layout that does not match is the error of that first use,
    /// as for [`Searcher::load_arena`] and [`Searcher::load_adaptive`]
    /// ([`Searcher::warm`] surfaces it at once).
    pub fn use_layouts(&self, layouts: &Layouts, source: Cid) {
        let _ = self.persisted.set(Persisted {
            arena: layouts.arena,
            adaptive: layouts.adaptive,
            frames: layouts.frames,
            rotated: layouts.rotated,
            source,
        });
    }

    /// The same searcher with another exact-L2 layout (default
    /// [`ExactLayout::Auto`]). Results are identical either way; only
    /// the work differs.
    pub fn exact_layout(mut self, layout: ExactLayout) -> Searcher<'s> {
        self.layout = layout;
        self.rotated = OnceLock::new();
        self.frames = OnceLock::new();
        self
    }

    /// The local frames when the policy uses them for this map (L2 only),
    /// read from the persisted layout of that width or built on first
    /// use. A racing duplicate build is discarded.
    fn frames(&self) -> Result<Option<&Frames>> {
        if let Some(f) = self.frames.get() {
            return Ok(f.as_ref());
        }
        let f = match (self.layout, self.layout.local(self.dims())) {
            _ if self.metric() != Metric::L2 => None,
            (ExactLayout::Auto, _) => match self.persisted_exact(LayoutKind::LocalFrames, None)? {
                Some((cid, source)) => Some(self.load_frames(cid, source)?),
                None => None,
            },
            (_, Some(m)) => match self.persisted_exact(LayoutKind::LocalFrames, Some(m))? {
                Some((cid, source)) => Some(self.load_frames(cid, source)?),
                None => {
                    let arena = self.arena()?;
                    Frames::build(arena, &arena.pages.all(&self.loader)?, self.dims(), m)
                }
            },
            _ => None,
        };
        let _ = self.frames.set(f);
        Ok(self.frames.get().expect("OnceLock was just set").as_ref())
    }

    /// The persisted exact-L2 layout of `kind` (local frames or rotated
    /// arena) as (manifest, source) when [`Searcher::use_layouts`] named
    /// one, of width `m` if given (read from its manifest alone).
    fn persisted_exact(&self, kind: LayoutKind, m: Option<usize>) -> Result<Option<(Cid, Cid)>> {
        let Some(p) = self.persisted.get() else {
            return Ok(None);
        };
        let cid = match kind {
            LayoutKind::LocalFrames => p.frames,
            LayoutKind::RotatedArena => p.rotated,
            _ => None,
        };
        let Some(cid) = cid else {
            return Ok(None);
        };
        let fits = match m {
            None => true,
            Some(m) => {
                arena_layout::header_width(self.store, cid, kind, p.source, self.dims())? == m
            }
        };
        Ok(fits.then_some((cid, p.source)))
    }

    /// Reads the persisted local frames `cid` (bound to `source`) over the
    /// scan arena.
    fn load_frames(&self, cid: Cid, source: Cid) -> Result<Frames> {
        frames::persist::load(self.store, cid, source, self.arena()?, self.dims())
    }

    /// Writes the local frames of the exact layout (built first if
    /// needed) as a `PRLY` layout sidecar bound to `source` (this
    /// searcher's descriptor CID); returns the manifest CID, or `None`
    /// when the searcher's exact layout is not [`ExactLayout::Local`] or
    /// the map is not L2 (frames serve exact L2 only).
    pub fn persist_frames(&self, store: &dyn BlockStore, source: Cid) -> Result<Option<Cid>> {
        match self.frames()? {
            Some(f) => Ok(Some(frames::persist::persist(
                f,
                self.arena()?,
                store,
                source,
                self.descriptor.record_count,
            )?)),
            None => Ok(None),
        }
    }

    /// `(decoded, total)` leaf pages of the scan arena (`None` before it
    /// exists): an arena read from a persisted layout decodes a page when
    /// a search first reaches it.
    pub fn arena_pages(&self) -> Option<(usize, usize)> {
        let a = self.arena.get()?;
        Some((a.pages.loaded(), a.pages.len()))
    }

    /// `(frames, width)` of the local frames once built (`None` before, or
    /// when exact L2 does not use them).
    pub fn local_frames(&self) -> Option<(usize, usize)> {
        self.frames.get()?.as_ref().map(|f| (f.len(), f.width()))
    }

    /// The rotated split arena when the policy uses one for this map
    /// (L2 only), read from the persisted layout of that width (any width
    /// under [`ExactLayout::Auto`]) or built on first use. A racing
    /// duplicate build is discarded.
    fn rotated(&self) -> Result<Option<&Rotated>> {
        if let Some(r) = self.rotated.get() {
            return Ok(r.as_ref());
        }
        let load = |(cid, source): (Cid, Cid)| -> Result<Rotated> {
            rotated_layout::load(self.store, cid, source, self.arena()?, self.dims())
        };
        let r = match (self.layout, self.layout.split(self.dims())) {
            _ if self.metric() != Metric::L2 => None,
            (ExactLayout::Auto, _) => match self.persisted_exact(LayoutKind::RotatedArena, None)? {
                Some(at) => Some(load(at)?),
                None => None,
            },
            (_, Some(m)) => match self.persisted_exact(LayoutKind::RotatedArena, Some(m))? {
                Some(at) => Some(load(at)?),
                None => {
                    let arena = self.arena()?;
                    Rotated::build(arena, &arena.pages.all(&self.loader)?, self.dims(), m)
                }
            },
            _ => None,
        };
        let _ = self.rotated.set(r);
        Ok(self.rotated.get().expect("OnceLock was just set").as_ref())
    }

    /// Writes the rotated split arena of the exact layout (built first if
    /// needed) as a `PRLY` layout sidecar bound to `source`; `None` when
    /// the exact layout is not [`ExactLayout::Split`] or the map is not
    /// L2.
    pub fn persist_rotated(&self, store: &dyn BlockStore, source: Cid) -> Result<Option<Cid>> {
        match self.rotated()? {
            Some(r) => Ok(Some(rotated_layout::persist(
                r,
                self.arena()?,
                store,
                source,
            )?)),
            None => Ok(None),
        }
    }

    /// Screen width of the rotated split arena once built (`None` before,
    /// or when exact L2 uses the plain arena).
    pub fn rotated_split(&self) -> Option<usize> {
        self.rotated.get()?.as_ref().map(Rotated::split)
    }

    /// The leaf catalogue, built (loading every node above level 0) on
    /// first use. A racing duplicate build is discarded.
    fn catalogue(&self) -> Result<&Catalogue> {
        if let Some(c) = self.catalogue.get() {
            return Ok(c);
        }
        let c = Catalogue::build(&self.root, &self.loader, self.dims())?;
        let _ = self.catalogue.set(c);
        Ok(self.catalogue.get().expect("OnceLock was just set"))
    }

    /// The scan arena, built (loading every leaf page, level by level) on
    /// first use. A racing duplicate build is discarded.
    fn arena(&self) -> Result<&ScanArena> {
        if let Some(a) = self.arena.get() {
            return Ok(a);
        }
        if let Some(Persisted {
            arena: Some(cid),
            source,
            ..
        }) = self.persisted.get()
        {
            self.load_arena(*cid, *source)?;
            return Ok(self.arena.get().expect("load_arena sets it"));
        }
        let a = ScanArena::build(&self.root, self.catalogue()?, &self.loader, self.dims())?;
        let _ = self.arena.set(a);
        Ok(self.arena.get().expect("OnceLock was just set"))
    }

    /// Writes the scan arena (built first if needed) as a `PRLY` layout
    /// sidecar bound to the descriptor `source` (this searcher's own) into
    /// `store`, and returns the manifest CID. The bytes are a function of
    /// the descriptor alone.
    pub fn persist_arena(&self, store: &dyn BlockStore, source: Cid) -> Result<Cid> {
        arena_layout::persist(self.arena()?, store, source, self.dims())
    }

    /// Uses the persisted scan arena `manifest` (bound to `source`, this
    /// searcher's descriptor CID) instead of building the arena; a no-op
    /// when the arena already exists. The layout must match this
    /// hierarchy page for page, else [`Error::Corrupt`]; a layout of
    /// another descriptor is [`Error::InvalidArgument`], a missing block
    /// [`Error::NotFound`].
    pub fn load_arena(&self, manifest: Cid, source: Cid) -> Result<()> {
        if self.arena.get().is_some() {
            return Ok(());
        }
        let a = arena_layout::load(
            self.store,
            manifest,
            source,
            &self.root,
            self.catalogue()?,
            &self.loader,
            self.dims(),
        )?;
        let _ = self.arena.set(a);
        Ok(())
    }

    /// Writes the adaptive sub-lists and 4-bit first pass (built first if
    /// needed, with the arena) as a `PRLY` layout sidecar bound to
    /// `source` (this searcher's descriptor CID); returns the manifest CID.
    pub fn persist_adaptive(&self, store: &dyn BlockStore, source: Cid) -> Result<Cid> {
        let fast4 = self.fast4()?;
        adaptive_layout::persist(self.lists()?, fast4, store, source, self.dims())
    }

    /// Uses the persisted adaptive layout `manifest` (bound to `source`)
    /// instead of clustering the leaves and training the 4-bit codebooks;
    /// a no-op when the lists exist. Reads (or builds) the arena first.
    /// Errors as [`Searcher::load_arena`].
    pub fn load_adaptive(&self, manifest: Cid, source: Cid) -> Result<()> {
        if self.lists.get().is_some() {
            return Ok(());
        }
        let (lists, fast4) =
            adaptive_layout::load(self.store, manifest, source, self.arena()?, self.dims())?;
        let _ = self.lists.set(lists);
        let _ = self.fast4.set(fast4);
        Ok(())
    }

    /// Reads the persisted adaptive layout named by
    /// [`Searcher::use_layouts`], if any; true when it did.
    fn load_persisted_adaptive(&self) -> Result<bool> {
        match self.persisted.get() {
            Some(Persisted {
                adaptive: Some(cid),
                source,
                ..
            }) => {
                self.load_adaptive(*cid, *source)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The adaptive sub-lists, built (clustering every logical leaf, in
    /// parallel) on first use. A racing duplicate build is discarded.
    fn lists(&self) -> Result<&Lists> {
        if let Some(l) = self.lists.get() {
            return Ok(l);
        }
        if self.load_persisted_adaptive()? {
            return Ok(self.lists.get().expect("load_adaptive sets it"));
        }
        let l = Lists::build(self.arena()?, self.dims());
        let _ = self.lists.set(l);
        Ok(self.lists.get().expect("OnceLock was just set"))
    }

    /// The adaptive 4-bit first pass (`None` when it does not apply: see
    /// [`fast4`]), built on first use. A racing duplicate build is
    /// discarded.
    fn fast4(&self) -> Result<Option<&Fast4>> {
        if let Some(f) = self.fast4.get() {
            return Ok(f.as_ref());
        }
        if self.load_persisted_adaptive()? {
            if let Some(f) = self.fast4.get() {
                return Ok(f.as_ref());
            }
        }
        let lists = self.lists()?;
        let f = if fast4::applies(lists, self.dims()) {
            Fast4::build(&self.arena()?.pages.all(&self.loader)?, lists, self.dims())
        } else {
            None
        };
        let _ = self.fast4.set(f);
        Ok(self.fast4.get().expect("OnceLock was just set").as_ref())
    }

    /// Heap bytes of the adaptive sub-lists (0 before the first adaptive
    /// search or [`Searcher::warm`] built them): a second copy of every
    /// record's code in list order, 16 bytes per record and one code per
    /// list centroid, plus the 4-bit first pass when it applies (half a
    /// byte per component, padded to 32-record blocks per list, and the
    /// `64·d`-byte codebooks).
    pub fn lists_bytes(&self) -> usize {
        self.lists.get().map_or(0, Lists::heap_bytes)
            + self
                .fast4
                .get()
                .and_then(Option::as_ref)
                .map_or(0, Fast4::heap_bytes)
    }

    /// Heap bytes of the scan arena (0 before the first adaptive or exact
    /// L2 search or [`Searcher::warm`] built it): one byte per component
    /// plus 12 bytes per record and the page offsets, and for exact L2 with
    /// the rotated split arena another byte per component, 24 bytes per
    /// record and the `8·d²`-byte rotation, or with local frames `m + 48`
    /// bytes per record and `4·d·(m + 1)` bytes per frame.
    pub fn arena_bytes(&self) -> usize {
        self.arena.get().map_or(0, ScanArena::heap_bytes)
            + self
                .rotated
                .get()
                .and_then(Option::as_ref)
                .map_or(0, Rotated::heap_bytes)
            + self
                .frames
                .get()
                .and_then(Option::as_ref)
                .map_or(0, Frames::heap_bytes)
    }

    /// The descriptor being searched.
    pub fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    /// The map's metric.
    pub fn metric(&self) -> Metric {
        self.descriptor.config.metric
    }

    /// The map's dimensions.
    pub fn dims(&self) -> usize {
        self.descriptor.config.dims as usize
    }

    /// The PRXN root CID.
    pub fn root(&self) -> Cid {
        self.root.cid
    }

    /// Levels of the hierarchy (the root's level + 1): the batched reads a
    /// cold walk of it takes, plus one for each overflow directory on the
    /// way down and one per level whose vectors are stored externally.
    pub fn height(&self) -> usize {
        usize::from(self.root.level) + 1
    }

    /// Loads every node of the hierarchy into the cache (level by level,
    /// one batched read each) and
    /// builds the leaf catalogue, the scan arena and the adaptive
    /// sub-lists (and, for L2 maps with an [`ExactLayout::Split`] or
    /// [`ExactLayout::Local`] layout, the rotated split arena or the local
    /// frames; under [`ExactLayout::Auto`] the persisted ones, if any),
    /// so later searches do no I/O,
    /// decoding, quantization or clustering. Returns the number of nodes.
    pub fn warm(&self) -> Result<usize> {
        let nodes = self.walk_nodes()?;
        self.arena()?.pages.all(&self.loader)?;
        self.fast4()?;
        self.rotated()?;
        self.frames()?;
        Ok(nodes)
    }

    /// Reads or builds every load-time layout native searches use (the
    /// leaf catalogue, the scan arena, the adaptive sub-lists and 4-bit
    /// pass, the exact-L2 layout), as [`Searcher::warm`] does, but leaves
    /// the leaf pages that a persisted arena only names to be decoded by
    /// the searches that reach them. `exact`: only what exact searches use
    /// (as [`Searcher::warm_exact`]).
    pub fn prepare(&self, exact: bool) -> Result<()> {
        self.catalogue()?;
        if !exact {
            self.fast4()?;
        } else if self.metric() != Metric::L2 {
            return Ok(());
        }
        self.arena()?;
        // Persisted exact layouts serve exact searches only: a caller that
        // asked for none of them explicitly reads them only for those.
        if exact || self.layout != ExactLayout::Auto {
            self.rotated()?;
            self.frames()?;
        }
        Ok(())
    }

    /// Loads every node of the hierarchy into the cache, level by level
    /// (one batched read per level, decoding in parallel).
    fn walk_nodes(&self) -> Result<usize> {
        levels::expand(std::slice::from_ref(&self.root), &self.loader, |_| true)
    }

    /// [`Searcher::warm`] for a caller that only runs exact searches: the
    /// nodes and, on L2 maps, the scan arena with its exact layout; the
    /// adaptive sub-lists and 4-bit codebooks are left to be built on first
    /// use. Returns the number of nodes.
    pub fn warm_exact(&self) -> Result<usize> {
        let nodes = self.walk_nodes()?;
        if self.metric() == Metric::L2 {
            self.arena()?.pages.all(&self.loader)?;
            self.rotated()?;
            self.frames()?;
        }
        Ok(nodes)
    }

    /// Searches for the `req.k` records nearest to `query` (a raw vector; it
    /// is prepared with the map's metric first).
    pub fn search(&self, query: &[f32], req: &SearchRequest) -> Result<SearchResult> {
        self.search_with(&mut SearchContext::new(), query, req)
    }

    /// [`Searcher::search`] reusing `ctx`'s buffers: in steady state an
    /// unfiltered search allocates nothing but the returned hits, and not
    /// those either when the caller hands them back with
    /// [`SearchContext::recycle`].
    pub fn search_with(
        &self,
        ctx: &mut SearchContext,
        query: &[f32],
        req: &SearchRequest,
    ) -> Result<SearchResult> {
        if req.k == 0 {
            return Err(Error::InvalidArgument("k must be >= 1".into()));
        }
        let mut prepared = std::mem::take(&mut ctx.prepared);
        let mut work = std::mem::take(&mut ctx.prep_work);
        let out = self.search_prepared(ctx, query, req, &mut prepared, &mut work);
        ctx.prepared = prepared;
        ctx.prep_work = work;
        out
    }

    /// [`Searcher::search_with`] with the preparation buffers taken out of
    /// `ctx` (they are lent back by the caller).
    fn search_prepared(
        &self,
        ctx: &mut SearchContext,
        query: &[f32],
        req: &SearchRequest,
        prepared: &mut Vec<f32>,
        work: &mut Vec<f32>,
    ) -> Result<SearchResult> {
        crate::proximity::math::prepare_into(
            self.metric(),
            self.descriptor.config.dims,
            query,
            None,
            prepared,
            work,
        )?;
        let prepared = &prepared[..];
        let filter = filter::Compiled::new(req.filter.as_deref())?;
        let mut result = match &filter {
            _ if filter.is_empty() => SearchResult {
                hits: Vec::new(),
                completion: Completion::Exact,
                stats: SearchStats::default(),
            },
            filter::Compiled::Keys(keys) if keys.len() <= DIRECT_KEYS => {
                self.direct(prepared, keys, req.k)?
            }
            _ => ctx.run(self, prepared, req, &filter)?,
        };
        if req.with_values {
            self.fill_values(&mut result.hits)?;
        }
        Ok(result)
    }

    /// Searches every row of `queries` (`n·dims` components, row-major) in
    /// parallel; results are in query order and identical to sequential
    /// [`Searcher::search`] calls.
    pub fn search_batch(&self, queries: &[f32], req: &SearchRequest) -> Result<Vec<SearchResult>> {
        let d = self.dims();
        if !queries.len().is_multiple_of(d) {
            return Err(Error::WrongDimension {
                expected: d,
                got: queries.len() % d,
                key: None,
            });
        }
        queries
            .par_chunks(d)
            .map_init(SearchContext::new, |ctx, q| self.search_with(ctx, q, req))
            .collect()
    }

    fn directory(&self) -> Result<Tree<'s>> {
        let dir = &self.descriptor.directory;
        Tree::open(self.store, dir.config.clone(), dir.root)
    }

    /// Scores an eligible key set straight from the directory (canonical
    /// scores of the prepared `query`; keys absent from the map are
    /// skipped): the exact filtered top `k`, for tiny sets here and for the
    /// index planner's small sets ([`crate::index`]).
    pub(crate) fn direct(&self, query: &[f32], keys: &[Vec<u8>], k: usize) -> Result<SearchResult> {
        let tree = self.directory()?;
        let values = tree.get_many(keys)?;
        let mut hits = Vec::new();
        for (key, value) in keys.iter().zip(values) {
            let Some(bytes) = value else { continue };
            let record = Record::decode(&bytes, self.descriptor.config.dims)?;
            hits.push(Hit {
                key: key.clone(),
                score: prox_kernels::canonical::score(self.metric(), query, &record.vector),
                value: None,
            });
        }
        let rescored = hits.len() as u64;
        hits.sort_by(|a, b| a.score.total_cmp(&b.score).then_with(|| a.key.cmp(&b.key)));
        hits.truncate(k);
        Ok(SearchResult {
            hits,
            completion: Completion::Exact,
            stats: SearchStats {
                rescored,
                ..SearchStats::default()
            },
        })
    }

    fn fill_values(&self, hits: &mut [Hit]) -> Result<()> {
        if hits.is_empty() {
            return Ok(());
        }
        let tree = self.directory()?;
        let keys: Vec<&[u8]> = hits.iter().map(|h| h.key.as_slice()).collect();
        let values = tree.get_many(&keys)?;
        for (hit, value) in hits.iter_mut().zip(values) {
            let bytes = value.ok_or_else(|| Error::Corrupt {
                cid: self.descriptor.root,
                reason: format!(
                    "hierarchy record {} is missing from the directory",
                    hex::encode(&hit.key)
                ),
            })?;
            hit.value = Some(Record::decode(&bytes, self.descriptor.config.dims)?.value);
        }
        Ok(())
    }
}

impl<'s> crate::proximity::ProximityMap<'s> {
    /// Opens this map for search. Keep the [`Searcher`] for repeated
    /// queries: it owns the decoded-node cache.
    pub fn searcher(&self) -> Result<Searcher<'s>> {
        Searcher::new(self.store(), self.descriptor().clone())
    }

    /// One search through a fresh [`Searcher`] (decodes the nodes it
    /// visits; use [`crate::proximity::ProximityMap::searcher`] for more
    /// than one query).
    pub fn search(&self, query: &[f32], req: &SearchRequest) -> Result<SearchResult> {
        self.searcher()?.search(query, req)
    }
}

#[cfg(test)]
mod tests;
