//! Writes through the index: [`Index::apply`] turns a [`Batch`] into a new
//! snapshot with every sidecar carried forward, [`Index::commit`] moves a
//! named root to it by compare-and-swap.
//!
//! Order of a write (nothing is published before the last step, so a
//! reader of the root sees the old snapshot or the new one, never a mix):
//!
//! 1. the batch is checked and prepared ([`Batch`]: key length, dimension,
//!    finiteness, duplicate keys) and classified against the current
//!    records (insert, move, value-only, delete, absent delete); a
//!    canonical HNSW sidecar under [`CanonicalHnsw::Refuse`] fails here;
//! 2. the map is edited (`ProximityMap::apply`: localized copy-on-write,
//!    the descriptor byte-identical to a fresh build of the new records);
//! 3. each sidecar is carried to the new descriptor: rebound unchanged when
//!    no vector changed; otherwise a fast HNSW graph gets the removals
//!    (compacted with neighbour repair) and inserts, PQ codes and
//!    fast-scan lists are dropped and appended, each written as a splice of
//!    its tree; a canonical graph is rebuilt or dropped as asked;
//! 4. the new [`Index`] is assembled from the carried layouts (no sidecar
//!    is read back from the store);
//! 5. [`Index::commit`]: the store makes every block durable, then the root
//!    moves by one compare-and-swap against the expected descriptor
//!    ([`Index::write`] re-applies the batch to a newer snapshot when
//!    another writer moved the root first; `rebase.rs`).

use super::batch::{Batch, CanonicalHnsw, WriteOptions};
use super::open::{Cell, Index, Loaded};
use super::profile::Profile;
use crate::accel::{self, hnsw::GraphEdit, Accelerators, Hnsw, HnswParams};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::proximity::{
    self, ApplyStats, HnswManifest, Mutation, PqManifest, ProximityMap, Sidecars,
};
use crate::store::{BlockStore, Lease, RetainStats, Verified};
use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a write did to one sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SidecarWrite {
    /// The map has no such sidecar.
    Absent,
    /// The batch changed nothing: same descriptor, same sidecar.
    Unchanged,
    /// No vector changed (value-only edits): the same graph or codes,
    /// bound to the new descriptor by a new manifest.
    Rebound,
    /// Carried forward incrementally. For PQ, `relinked` is 0.
    Updated {
        /// Records added (a moved record counts here and in `removed`).
        inserted: usize,
        /// Records removed.
        removed: usize,
        /// HNSW: surviving nodes whose neighbour lists changed.
        relinked: usize,
    },
    /// A canonical HNSW graph rebuilt over the new records
    /// ([`CanonicalHnsw::Rebuild`]).
    Rebuilt,
    /// Not carried: the new map publishes no such sidecar.
    Dropped(DropReason),
}

/// Why a write dropped a sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// [`CanonicalHnsw::Drop`] on a canonical HNSW sidecar.
    Requested,
    /// The map has no record left (a sidecar needs one).
    Empty,
    /// A search layout derived from the old hierarchy: the new snapshot
    /// builds its own when opened (or persists it again with `prox accel
    /// build --layout`).
    Derived,
}

/// What [`Index::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReport {
    /// Records inserted (new keys).
    pub inserted: u64,
    /// Records whose vector changed.
    pub moved: u64,
    /// Records whose value alone changed, or re-put unchanged.
    pub value_only: u64,
    /// Records deleted.
    pub deleted: u64,
    /// Deletes of keys the map did not hold (no-ops).
    pub absent_deletes: u64,
    /// The map edit's own counters (hierarchy nodes decoded and encoded,
    /// records reassigned).
    pub map: ApplyStats,
    /// New blocks written to the store (map and sidecars; blocks already
    /// present are not counted).
    pub blocks_written: u64,
    /// Bytes of those blocks.
    pub bytes_written: u64,
    /// The HNSW sidecar.
    pub hnsw: SidecarWrite,
    /// The PQ sidecar.
    pub pq: SidecarWrite,
    /// The persisted native search layouts, arena and adaptive (kept only
    /// when the descriptor is unchanged, else [`DropReason::Derived`]).
    pub layout: SidecarWrite,
    /// The persisted fast-scan lists of a 4-bit PQ sidecar (carried with
    /// the sidecar and persisted again; dropped with it).
    pub ivf: SidecarWrite,
    /// The recall profile (carried to the new snapshot with its count of
    /// changed records).
    pub profile: SidecarWrite,
    /// The carried profile is due to be measured again
    /// ([`super::Profile::is_stale`]): the writer should call
    /// [`Index::measure_profile`] and [`Index::publish_profile`] (`prox
    /// update` and `prox serve` do). Until then it keeps answering.
    pub profile_stale: bool,
    /// Time carrying the sidecars (within `elapsed`).
    pub sidecar_time: Duration,
    /// Wall time of the whole apply.
    pub elapsed: Duration,
}

/// The result of [`Index::apply`]: the new snapshot (not yet published)
/// and what the write did.
#[derive(Debug)]
pub struct Applied {
    /// The new snapshot; publish it with [`Index::commit`].
    pub index: Index,
    /// What was written.
    pub report: WriteReport,
}

/// The batch classified against the current records.
#[derive(Default)]
struct Plan {
    mutations: Vec<Mutation>,
    /// Keys whose old point leaves the sidecars (deletes and moves).
    removed: Vec<Vec<u8>>,
    /// New points (inserts and moves), prepared, in key order.
    inserted: Vec<(Vec<u8>, Vec<f32>)>,
    report_counts: [u64; 5],
}

impl Index {
    /// Applies `batch` and returns the new snapshot with every sidecar
    /// carried forward (see the [module docs](self) for the order and
    /// guarantees), plus a [`WriteReport`]. Nothing is published: the
    /// blocks are in the store, unreferenced until [`Index::commit`].
    /// `self` stays valid and keeps answering on the old snapshot.
    ///
    /// Errors, before anything is written: [`Error::KeyTooLong`],
    /// [`Error::WrongDimension`], [`Error::NonFiniteVector`],
    /// [`Error::ZeroCosineVector`], [`Error::DuplicateKey`] (a key twice
    /// in the batch), [`Error::CanonicalHnsw`] (a canonical HNSW sidecar
    /// under [`CanonicalHnsw::Refuse`]), [`Error::InvalidArgument`] (the
    /// index was opened with [`super::Options::sidecars`] false although
    /// its root names sidecars).
    pub fn apply(&self, batch: &Batch, options: &WriteOptions) -> Result<Applied> {
        if self.sidecars_skipped {
            return Err(Error::InvalidArgument(
                "this index was opened without the sidecars its root names \
                 (Options::sidecars = false or Options::only); a write from it would \
                 publish the map without them: reopen it with every sidecar to write"
                    .into(),
            ));
        }
        let start = Instant::now();
        let store = Arc::clone(self.store());
        let counting = Counting::new(&*store);
        let plan = self.plan(batch)?;
        let structural = !plan.removed.is_empty() || !plan.inserted.is_empty();
        let hnsw_manifest = match self.sidecars.hnsw {
            Some(c) => Some((c, HnswManifest::decode(&fetch(&*store, c)?)?)),
            None => None,
        };
        if let Some((cid, m)) = &hnsw_manifest {
            if m.canonical && structural && options.canonical_hnsw == CanonicalHnsw::Refuse {
                return Err(Error::CanonicalHnsw { manifest: *cid });
            }
        }
        let map = ProximityMap::load(&counting, self.descriptor)?;
        let (next, stats) = map.apply_with_stats(plan.mutations)?;
        let descriptor = next.descriptor_cid();
        let metric = next.metric();
        let dims = next.dims() as usize;
        drop(next);
        let unchanged = descriptor == self.descriptor;

        let sidecar_start = Instant::now();
        let mut accel = Accelerators::default();
        let mut sidecars = Sidecars::default();
        // HNSW.
        let hnsw = match (hnsw_manifest, &self.accel.hnsw) {
            (None, _) | (_, None) => SidecarWrite::Absent,
            (Some((cid, _)), Some((g, ef))) if unchanged => {
                accel.hnsw = Some((g.clone(), *ef));
                sidecars.hnsw = Some(cid);
                SidecarWrite::Unchanged
            }
            (Some((_, m)), Some((g, ef))) if !structural => {
                let rebound = HnswManifest {
                    source: descriptor,
                    ..m
                };
                sidecars.hnsw = Some(counting.put(&rebound.encode()?)?);
                accel.hnsw = Some((g.clone(), *ef));
                SidecarWrite::Rebound
            }
            (Some((_, m)), Some(_)) if m.canonical => match options.canonical_hnsw {
                CanonicalHnsw::Refuse | CanonicalHnsw::Drop => {
                    SidecarWrite::Dropped(DropReason::Requested)
                }
                CanonicalHnsw::Rebuild => {
                    let (_, records) = accel::map_records(&counting, descriptor)?;
                    if records.is_empty() {
                        SidecarWrite::Dropped(DropReason::Empty)
                    } else {
                        let params = HnswParams::from_config(&m.config, true);
                        let h = Hnsw::build(metric, dims, &records, &params)?;
                        sidecars.hnsw = Some(h.persist(&counting, descriptor)?.manifest_cid);
                        accel.hnsw = Some((h.into_search_graph(), m.config.ef_search as usize));
                        SidecarWrite::Rebuilt
                    }
                }
            },
            (Some((_, m)), Some((g, ef))) => {
                let mut h = Hnsw::from_search_graph(g, &m);
                match h.apply_write(g, &counting, &m, descriptor, &plan.removed, &plan.inserted)? {
                    None => SidecarWrite::Dropped(DropReason::Empty),
                    Some((side, edit)) => {
                        sidecars.hnsw = Some(side.manifest_cid);
                        accel.hnsw = Some((h.into_search_graph(), *ef));
                        updated(edit)
                    }
                }
            }
        };
        // PQ.
        let pq = match (self.sidecars.pq, &self.accel.pq) {
            (None, _) | (_, None) => SidecarWrite::Absent,
            (Some(cid), Some(p)) if unchanged => {
                accel.pq = Some(p.clone());
                sidecars.pq = Some(cid);
                SidecarWrite::Unchanged
            }
            (Some(cid), Some(p)) => {
                let old = PqManifest::decode(&fetch(&*store, cid)?)?;
                if !structural {
                    let rebound = PqManifest {
                        source: descriptor,
                        ..old
                    };
                    sidecars.pq = Some(counting.put(&rebound.encode()?)?);
                    accel.pq = Some(p.clone());
                    SidecarWrite::Rebound
                } else {
                    let next = p.edited(&plan.removed, &plan.inserted)?;
                    let keys: Vec<Vec<u8>> = plan.inserted.iter().map(|r| r.0.clone()).collect();
                    match next.persist_write(&counting, &old, descriptor, &plan.removed, &keys)? {
                        None => SidecarWrite::Dropped(DropReason::Empty),
                        Some(side) => {
                            sidecars.pq = Some(side.manifest_cid);
                            accel.pq = Some(next);
                            SidecarWrite::Updated {
                                inserted: plan.inserted.len(),
                                removed: plan.removed.len(),
                                relinked: 0,
                            }
                        }
                    }
                }
            }
        };
        // The fast-scan lists layout follows the PQ sidecar: the write
        // carried its lists in memory (coarse centroids kept, new records
        // in their nearest list), so they are persisted again for the new
        // descriptor (unchanged chunks dedupe).
        let (ivf_layout, ivf) = match (self.layouts.ivf, &accel.pq) {
            (None, _) => (None, SidecarWrite::Absent),
            (Some(c), _) if unchanged => (Some(c), SidecarWrite::Unchanged),
            (Some(_), Some(p)) if p.fast_scan_built() => (
                p.persist_fast_scan(&counting, descriptor)?,
                SidecarWrite::Updated {
                    inserted: plan.inserted.len(),
                    removed: plan.removed.len(),
                    relinked: 0,
                },
            ),
            // Dropped with the sidecar (for its reason), or not carried.
            (Some(_), _) => (
                None,
                SidecarWrite::Dropped(match pq {
                    SidecarWrite::Dropped(why) => why,
                    _ => DropReason::Derived,
                }),
            ),
        };
        let sidecar_time = sidecar_start.elapsed();
        let (blocks_written, bytes_written) = counting.totals();
        let fields = match &self.fields {
            Some(f) if !unchanged => {
                let next = ProximityMap::load(&counting, descriptor)?;
                let mut keys: Vec<Vec<u8>> = batch.upserts.iter().map(|u| u.key.clone()).collect();
                keys.extend(batch.deletes.iter().cloned());
                keys.sort_unstable();
                Some(Arc::new(f.apply(
                    &counting,
                    &map.directory()?,
                    &next.directory()?,
                    &keys,
                )?))
            }
            other => other.clone(),
        };
        // Layouts are derived from the hierarchy: kept while the
        // descriptor is unchanged, otherwise dropped (rebuilt on demand,
        // `prox accel build --layout` persists them again).
        let (mut layouts, layout) = match self.layouts.has_native() {
            false => (proximity::Layouts::default(), SidecarWrite::Absent),
            true if unchanged => (self.layouts, SidecarWrite::Unchanged),
            true => (
                proximity::Layouts::default(),
                SidecarWrite::Dropped(DropReason::Derived),
            ),
        };
        layouts.ivf = ivf_layout;
        let [inserted, moved, value_only, deleted, absent_deletes] = plan.report_counts;
        let records = self.len() + inserted - deleted;
        let (carried, profile) = match &self.profile() {
            None => (None, SidecarWrite::Absent),
            Some(p) if unchanged => (Some(Arc::clone(p)), SidecarWrite::Unchanged),
            Some(p) => {
                let mut next = Profile {
                    edits: p.edits + inserted + moved + deleted,
                    hnsw: sidecars.hnsw,
                    pq: sidecars.pq,
                    ..(**p).clone()
                };
                // Entries of a sidecar the write dropped go with it.
                next.entries.retain(|e| match e.setting.path {
                    accel::Path::Native => true,
                    accel::Path::Hnsw => next.hnsw.is_some(),
                    accel::Path::Pq => next.pq.is_some(),
                });
                let write = if structural {
                    SidecarWrite::Updated {
                        inserted: plan.inserted.len(),
                        removed: plan.removed.len(),
                        relinked: 0,
                    }
                } else {
                    SidecarWrite::Rebound
                };
                (Some(Arc::new(next)), write)
            }
        };
        let profile_stale = carried.as_ref().is_some_and(|p| p.is_stale(records));
        // Persisted from the profile in use, which `set_profile` may have
        // replaced since the snapshot was opened (an equal one is the same
        // block).
        layouts.profile = match &carried {
            Some(p) => Some(p.persist(&counting, descriptor, dims, records)?),
            None => None,
        };
        let mut index = assemble(store, descriptor, sidecars, accel, &layouts, options)?;
        index.fields = fields;
        index.filters.clear();
        index.profile = std::sync::RwLock::new(carried);
        Ok(Applied {
            index,
            report: WriteReport {
                inserted,
                moved,
                value_only,
                deleted,
                absent_deletes,
                map: stats,
                blocks_written,
                bytes_written,
                hnsw,
                pq,
                layout,
                ivf,
                profile,
                profile_stale,
                sidecar_time,
                elapsed: start.elapsed(),
            },
        })
    }

    /// Publishes this snapshot under the root `name`: makes every block in
    /// the store durable, then moves the root by one compare-and-swap, only
    /// if it currently names the descriptor `expected` (`None`: no map, the
    /// name absent or empty). Otherwise [`Error::Conflict`] and the root is
    /// unchanged. Returns this snapshot's descriptor CID.
    pub fn commit(&self, name: &str, expected: Option<Cid>) -> Result<Cid> {
        let mut meta = match &self.fields {
            Some(f) => f.metadata(&**self.store(), &self.map().directory()?)?,
            None => proximity::Metadata::new(),
        };
        meta.extend(self.layouts.to_metadata());
        proximity::publish_expecting_with(
            &**self.store(),
            name,
            self.descriptor,
            &self.sidecars,
            &meta,
            expected,
        )?;
        Ok(self.descriptor)
    }

    /// Builds the field indexes of `add` and removes those of `drop`
    /// (both checked first: adding an indexed field or dropping an
    /// unindexed one is an error). Takes effect for this snapshot's
    /// searches at once, and in the store at the next [`Index::commit`].
    pub fn change_field_indexes(
        &mut self,
        add: &[crate::secondary::FieldIndex],
        drop: &[String],
    ) -> Result<()> {
        let (store, map) = (&**self.store(), self.map());
        let directory = map.directory()?;
        let next = match &self.fields {
            Some(f) => f.with_changes(store, &directory, add, drop)?,
            None => {
                if let Some(d) = drop.first() {
                    return Err(Error::UnknownField {
                        field: d.clone(),
                        indexed: String::new(),
                    });
                }
                crate::secondary::FieldIndexes::build(store, &directory, map.dims(), add)?
            }
        };
        self.fields = (!next.fields().is_empty()).then(|| Arc::new(next));
        self.filters.clear();
        Ok(())
    }

    /// Checks `batch` and classifies every edit against the current
    /// records.
    fn plan(&self, batch: &Batch) -> Result<Plan> {
        let map = self.map();
        let edits = batch.checked(map.metric(), map.dims())?;
        let mut plan = Plan::default();
        let [inserted, moved, value_only, deleted, absent] = &mut plan.report_counts;
        for e in edits {
            let old = map.get(e.key)?;
            match (e.upsert, old) {
                (None, None) => *absent += 1,
                (None, Some(_)) => {
                    *deleted += 1;
                    plan.removed.push(e.key.to_vec());
                    plan.mutations.push(Mutation::Delete {
                        key: e.key.to_vec(),
                    });
                }
                (Some((u, prepared)), old) => {
                    let changed = match &old {
                        None => {
                            *inserted += 1;
                            true
                        }
                        Some((v, _)) if bits_equal(v, &prepared) => {
                            *value_only += 1;
                            false
                        }
                        Some(_) => {
                            *moved += 1;
                            plan.removed.push(e.key.to_vec());
                            true
                        }
                    };
                    if changed {
                        plan.inserted.push((e.key.to_vec(), prepared));
                    }
                    plan.mutations.push(Mutation::Put {
                        key: u.key.clone(),
                        vector: u.vector.clone(),
                        value: u.value.clone(),
                    });
                }
            }
        }
        Ok(plan)
    }
}

fn updated(e: GraphEdit) -> SidecarWrite {
    SidecarWrite::Updated {
        inserted: e.inserted,
        removed: e.removed,
        relinked: e.relinked,
    }
}

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn fetch(store: &dyn BlockStore, cid: Cid) -> Result<Bytes> {
    store.get(&cid)?.ok_or(Error::NotFound { cid })
}

/// The new snapshot from its carried sidecar layouts (nothing of them is
/// read back) and the map loaded at `descriptor`.
fn assemble(
    store: Arc<dyn BlockStore>,
    descriptor: Cid,
    sidecars: Sidecars,
    accel: Accelerators,
    layouts: &proximity::Layouts,
    options: &WriteOptions,
) -> Result<Index> {
    let cell = Cell::try_new(store, |s| -> Result<Loaded<'_>> {
        let map = ProximityMap::load(&**s, descriptor)?;
        let searcher = map.searcher()?.exact_layout(options.exact_layout);
        Ok(Loaded { map, searcher })
    })?;
    let index = Index {
        descriptor,
        sidecars,
        sidecars_skipped: false,
        accel,
        fields: None,
        layouts: *layouts,
        profile: std::sync::RwLock::new(None),
        profile_error: None,
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

/// A store wrapper that counts the new blocks put through it.
struct Counting<'a> {
    inner: &'a dyn BlockStore,
    blocks: AtomicU64,
    bytes: AtomicU64,
}

impl<'a> Counting<'a> {
    fn new(inner: &'a dyn BlockStore) -> Counting<'a> {
        Counting {
            inner,
            blocks: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// New blocks and their bytes so far.
    fn totals(&self) -> (u64, u64) {
        (
            self.blocks.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    fn count<'b>(&self, blocks: impl Iterator<Item = (&'b Cid, usize)>) -> Result<()> {
        let (cids, sizes): (Vec<Cid>, Vec<usize>) = blocks.map(|(c, n)| (*c, n)).unzip();
        for (present, size) in self.inner.has_many(&cids)?.into_iter().zip(sizes) {
            if !present {
                self.blocks.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(size as u64, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

impl BlockStore for Counting<'_> {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        self.inner.get(cid)
    }
    fn get_many(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        self.inner.get_many(cids)
    }
    // Each block is hashed once here and handed on as `Verified`, so the
    // inner store does not hash it again.
    fn put(&self, data: &[u8]) -> Result<Cid> {
        let block = Verified::new(Bytes::copy_from_slice(data));
        let cid = *block.cid();
        self.put_verified_many(std::slice::from_ref(&block))?;
        Ok(cid)
    }
    fn put_many(&self, blocks: &[&[u8]]) -> Result<Vec<Cid>> {
        let verified: Vec<Verified> = blocks
            .iter()
            .map(|b| Verified::new(Bytes::copy_from_slice(b)))
            .collect();
        self.put_verified_many(&verified)?;
        Ok(verified.iter().map(|b| *b.cid()).collect())
    }
    fn put_verified_many(&self, blocks: &[Verified]) -> Result<()> {
        self.count(blocks.iter().map(|b| (b.cid(), b.bytes().len())))?;
        self.inner.put_verified_many(blocks)
    }
    fn has(&self, cid: &Cid) -> Result<bool> {
        self.inner.has(cid)
    }
    fn has_many(&self, cids: &[Cid]) -> Result<Vec<bool>> {
        self.inner.has_many(cids)
    }
    fn cids(&self) -> Result<Vec<Cid>> {
        self.inner.cids()
    }
    fn commit(&self) -> Result<()> {
        self.inner.commit()
    }
    fn root(&self, name: &str) -> Result<Option<Bytes>> {
        self.inner.root(name)
    }
    fn set_root(&self, name: &str, value: Option<&[u8]>) -> Result<()> {
        self.inner.set_root(name, value)
    }
    fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool> {
        self.inner.cas_root(name, expected, new)
    }
    fn lease(&self, name: &str, wait: Duration) -> Result<Option<Lease>> {
        self.inner.lease(name, wait)
    }
    fn roots(&self) -> Result<Vec<(String, Bytes)>> {
        self.inner.roots()
    }
    fn retain(&self, live: &std::collections::HashSet<Cid>) -> Result<RetainStats> {
        self.inner.retain(live)
    }
}
