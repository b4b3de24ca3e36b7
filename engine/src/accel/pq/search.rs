//! PQ search entry points.
//!
//! * 4-bit sidecars (`centroids ≤ 16`, `subquantizers ≤ 256`): the IVF
//!   fast-scan search of [`super::ivf`], its index built once per `Pq` at
//!   first use (or by [`Pq::prepare_fast_scan`]).
//! * Otherwise, and for small filtered sets: a flat ADC scan of every
//!   eligible code with `prox_kernels::pq` (table from the dispatched f32
//!   kernels, bit-exact sums), keeping the best `k · rerank`, then exact
//!   rerank with the canonical score, ordered by `(score, key)`. The flat
//!   candidate set may differ across ISAs only where two table sums tie to
//!   the last bit; the IVF path is bit-identical everywhere.

use super::ivf::{Eligible, FastScan, IvfContext, IvfParams, IvfQuery};
use super::{ivf_layout, Pq};
use crate::accel::hnsw::{IdHit, Scored};
use crate::accel::vectors::check_vector;
use crate::cid::Cid;
use crate::deadline::Watch;
use crate::error::Result;
use crate::keys::{Filter, IdSet, KeySet};
use crate::store::BlockStore;
use prox_kernels::canonical;
use prox_kernels::pq::{adc_scan, AdcTable};
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Instant;

/// Rows per flat ADC scan call (bounds the distance buffer).
const FLAT_CHUNK: usize = 1024;

/// What scoring one scattered row with the flat ADC table costs, in rows
/// of a fast-scan list scan (a random code read and `m` scalar lookups,
/// against 32 codes per SIMD shuffle pass).
const FLAT_ROW_COST: usize = 48;

/// The rows a flat scan reads.
#[derive(Debug, Clone, Copy)]
enum Rows<'a> {
    /// These row ids, ascending.
    Ids(&'a [u32]),
    /// Rows `lo..hi`.
    Interval(usize, usize),
}

/// Reusable per-thread PQ query buffers.
#[derive(Debug, Default, Clone)]
pub struct PqSearchContext {
    heap: BinaryHeap<Scored>,
    dists: Vec<f32>,
    pub(super) ivf: IvfContext,
}

impl PqSearchContext {
    /// A fresh context.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Per-query PQ options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PqOptions {
    /// Results wanted.
    pub k: usize,
    /// Coarse lists probed by the fast-scan path (`None`:
    /// [`FastScan::default_nprobe`]); ignored by the flat path.
    pub nprobe: Option<usize>,
    /// Candidates reranked exactly per result (`None`: the manifest's).
    pub rerank: Option<usize>,
    /// A filtered fast-scan search probes on past `nprobe`, one list at a
    /// time in coarse order, until the probed lists held at least this many
    /// eligible rows (0: no such floor). A selective filter leaves few
    /// eligible rows in each list, and its nearest eligible records lie
    /// further out than the unfiltered ones.
    pub min_seen: usize,
}

impl Pq {
    /// True if the fast-scan path applies (4-bit codes, `m ≤ 256`).
    pub fn fast_scan_supported(&self) -> bool {
        usize::from(self.params.centroids) <= prox_kernels::pq::fastscan::CODES
            && self.layout.len() <= prox_kernels::pq::fastscan::MAX_SUBSPACES
    }

    /// True once the fast-scan index has been built (by [`Pq::fast_scan`],
    /// [`Pq::prepare_fast_scan`] or a write that carried it).
    pub fn fast_scan_built(&self) -> bool {
        matches!(self.fast.get(), Some(Some(_)))
    }

    /// Builds the fast-scan index with `params` unless one exists already
    /// (the first build wins); returns it, or `None` if unsupported.
    pub fn prepare_fast_scan(&self, params: &IvfParams) -> Option<&FastScan> {
        if !self.fast_scan_supported() {
            return None;
        }
        self.fast
            .get_or_init(|| FastScan::build(self, params).map(std::sync::Arc::new))
            .as_deref()
    }

    /// The fast-scan index (built with [`IvfParams::default`] on first use).
    pub fn fast_scan(&self) -> Option<&FastScan> {
        self.prepare_fast_scan(&IvfParams::default())
    }

    /// Writes the fast-scan index's coarse lists (built first if needed) as
    /// a layout bound to the descriptor `source` (the map this sidecar
    /// belongs to); returns the manifest CID, or `None` when fast scan
    /// does not apply (more than 16 centroids per subspace, or no records).
    pub fn persist_fast_scan(&self, store: &dyn BlockStore, source: Cid) -> Result<Option<Cid>> {
        match self.fast_scan() {
            Some(fs) => ivf_layout::persist(fs, self, store, source).map(Some),
            None => Ok(None),
        }
    }

    /// Uses the persisted coarse lists `layout` (bound to `source`) for the
    /// fast-scan index instead of training them; a no-op when the index
    /// exists. Errors as [`super::ivf_layout`]'s loader: another
    /// descriptor's layout or a sidecar without 4-bit codes is
    /// [`crate::error::Error::InvalidArgument`], a layout that does not fit
    /// the sidecar [`crate::error::Error::Corrupt`].
    pub fn load_fast_scan(&self, store: &dyn BlockStore, layout: Cid, source: Cid) -> Result<()> {
        if self.fast.get().is_some() {
            return Ok(());
        }
        let fs = ivf_layout::load(store, layout, source, self)?;
        let _ = self.fast.set(Some(std::sync::Arc::new(fs)));
        Ok(())
    }

    /// The `k` best records for the prepared `query` with the manifest's or
    /// the given rerank multiplier and the default `nprobe`; see
    /// [`Pq::search_with`].
    pub fn search(
        &self,
        ctx: &mut PqSearchContext,
        query: &[f32],
        k: usize,
        rerank: Option<usize>,
        filter: Option<&Filter>,
        out: &mut Vec<IdHit>,
    ) -> Result<()> {
        let opts = PqOptions {
            k,
            nprobe: None,
            rerank,
            min_seen: 0,
        };
        self.search_with(ctx, query, &opts, filter, out)
    }

    /// The `opts.k` best records for the prepared `query`: `min(k,
    /// eligible)` hits with canonical scores, ascending by `(score, key)`,
    /// ids being record indexes in key order ([`Pq::key`]).
    pub fn search_with(
        &self,
        ctx: &mut PqSearchContext,
        query: &[f32],
        opts: &PqOptions,
        filter: Option<&Filter>,
        out: &mut Vec<IdHit>,
    ) -> Result<()> {
        self.search_until(ctx, query, opts, filter, None, out)
    }

    /// [`Pq::search_with`] stopped at `deadline` with
    /// [`crate::Error::DeadlineExceeded`] (`out` then holds nothing
    /// useful); the same hits when it finishes in time.
    pub fn search_until(
        &self,
        ctx: &mut PqSearchContext,
        query: &[f32],
        opts: &PqOptions,
        filter: Option<&Filter>,
        deadline: Option<Instant>,
        out: &mut Vec<IdHit>,
    ) -> Result<()> {
        check_vector(query, self.dims(), None)?;
        let mut watch = Watch::new(deadline);
        out.clear();
        let k = opts.k;
        if k == 0 || self.is_empty() {
            return Ok(());
        }
        let depth = k.saturating_mul(opts.rerank.unwrap_or(self.params.rerank as usize).max(1));
        // Eligible rows: an interval, or an id set (computed once per key
        // set and this index, then shared by every query using it).
        let mut interval = (0, self.len());
        let mut listed = None;
        match filter {
            None => {}
            Some(Filter::Keys(keys)) => {
                listed = Some(self.id_set(keys));
            }
            Some(f) => {
                if let Some((start, end)) = f.interval() {
                    let lo = self.lower_bound(start);
                    let hi = end.map_or(self.len(), |e| self.lower_bound(&e));
                    interval = (lo, hi.max(lo));
                }
            }
        }
        let count = if let Some(set) = &listed {
            set.ids.len()
        } else {
            interval.1 - interval.0
        };
        if count == 0 {
            return Ok(());
        }
        if let Some(fs) = self.fast_scan() {
            // At least the lists that hold `min_seen` eligible rows on
            // average (the scan probes on past them for a query whose lists
            // hold fewer).
            let nprobe = opts
                .nprobe
                .unwrap_or_else(|| fs.default_nprobe())
                .max(opts.min_seen.saturating_mul(fs.nlist()).div_ceil(count))
                .clamp(1, fs.nlist());
            // Expected rows the probed lists hold; a filter admitting so few
            // rows that scoring each one flat costs less scans flat.
            let expected = self.len().saturating_mul(nprobe) / fs.nlist();
            if filter.is_none() || count.saturating_mul(FLAT_ROW_COST) > expected {
                // A key set's rows as per-block masks of this layout,
                // computed once per key set and layout.
                let masks = match filter {
                    Some(Filter::Keys(keys)) => listed
                        .as_ref()
                        .map(|set| keys.derived(fs.owner(), |_| fs.block_masks(set))),
                    _ => None,
                };
                let eligible = if let Some(masks) = &masks {
                    Eligible::Masked(masks)
                } else if filter.is_some() {
                    Eligible::Interval(interval.0, interval.1)
                } else {
                    Eligible::All
                };
                let q = IvfQuery {
                    k,
                    nprobe,
                    depth,
                    eligible,
                    count,
                    min_seen: opts.min_seen,
                };
                if self.search_ivf(fs, &mut ctx.ivf, query, &q, &mut watch, out)? {
                    return Ok(());
                }
            }
        }
        let rows = match &listed {
            Some(set) => Rows::Ids(&set.ids),
            None => Rows::Interval(interval.0, interval.1),
        };
        self.search_flat(ctx, query, (k, depth), rows, &mut watch, out)
    }

    /// Flat ADC over the eligible `rows`, best `depth` reranked
    /// canonically.
    fn search_flat(
        &self,
        ctx: &mut PqSearchContext,
        query: &[f32],
        (k, depth): (usize, usize),
        rows: Rows<'_>,
        watch: &mut Watch,
        out: &mut Vec<IdHit>,
    ) -> Result<()> {
        let table = AdcTable::for_metric(self.metric, query, &self.codebooks);
        let m = self.layout.len();
        let mut heap = std::mem::take(&mut ctx.heap);
        heap.clear();
        let mut consider = |score: f32, id: u32| {
            let s = Scored { score, id };
            if heap.len() < depth {
                heap.push(s);
            } else if let Some(top) = heap.peek() {
                if s < *top {
                    heap.pop();
                    heap.push(s);
                }
            }
        };
        match rows {
            Rows::Ids(ids) => {
                for ids in ids.chunks(FLAT_CHUNK) {
                    watch.tick(ids.len() * m)?;
                    for &i in ids {
                        consider(table.distance(self.code(i as usize)), i);
                    }
                }
            }
            Rows::Interval(mut lo, end) => {
                while lo < end {
                    let hi = (lo + FLAT_CHUNK).min(end);
                    watch.tick((hi - lo) * m)?;
                    ctx.dists.resize(hi - lo, 0.0);
                    adc_scan(&table, &self.codes[lo * m..hi * m], &mut ctx.dists);
                    for (j, &d) in ctx.dists.iter().enumerate() {
                        consider(d, (lo + j) as u32);
                    }
                    lo = hi;
                }
            }
        }
        out.extend(heap.drain().map(|c| IdHit {
            id: c.id,
            score: canonical::score(self.metric, query, self.vectors.row(c.id as usize)),
        }));
        out.sort_unstable_by(|a, b| a.score.total_cmp(&b.score).then(a.id.cmp(&b.id)));
        out.truncate(k);
        ctx.heap = heap;
        Ok(())
    }

    /// The rows of `keys` (absent keys skipped), computed once per index
    /// and kept with the key set for every query sharing it.
    pub(crate) fn id_set(&self, keys: &KeySet) -> Arc<IdSet> {
        keys.ids_for(self.filter_owner, |keys| {
            let mut ids: Vec<u32> = keys
                .iter()
                .filter_map(|key| self.keys.binary_search(key).ok().map(|i| i as u32))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            IdSet::new(ids, self.len())
        })
    }

    /// The full vectors, in key order.
    pub(crate) fn vectors(&self) -> &crate::accel::vectors::Arena {
        &self.vectors
    }

    pub(crate) fn lower_bound(&self, key: &[u8]) -> usize {
        self.keys.partition_point(|k| k.as_slice() < key)
    }
}
