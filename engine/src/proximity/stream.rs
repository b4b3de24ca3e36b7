//! The bounded-memory build: the canonical map of section 12, computed
//! from records pushed one at a time, with sorting and grouping spilled to
//! disk so that memory stays near a given limit whatever the input size.
//!
//! Phases (each reported to a [`Progress`]):
//!
//! 1. **read** ([`StreamBuild::push`]): records are buffered; a full buffer
//!    (half the limit) is sorted by key, its vectors prepared (11.1), and
//!    written as one run.
//! 2. **sort**: the runs are merged in key order. Duplicates are refused.
//!    Each record streams into the ordered directory (the prolly chunker
//!    writes a leaf as soon as it closes). Records promoted to level 1 or
//!    above (12.3; about `n / 2^log_chunk_size`) stay in memory; level-0
//!    records go to a sequential file.
//! 3. **cluster**: the group assignment of 12.4 is computed for the
//!    promoted records in memory. Level-0 records only ever join a level-0
//!    group and never shape any other decision, so each one's descent
//!    depends only on the promoted records: they are read back in chunks,
//!    assigned in parallel, and written as runs sorted by (group, key).
//! 4. **write**: the runs are merged by group; every leaf (a level-0
//!    group: its representative plus the level-0 records that joined it,
//!    in key order) is stored and summarized exactly as the in-memory
//!    build does it. The route nodes above are then built from the promoted
//!    records and the leaf summaries, and the descriptor last.
//!
//! The result is byte-identical to [`ProximityMap::build`] of the same
//! records and configuration. What stays in memory: the run buffer, the
//! promoted records and their hierarchy, two key/vector pairs per leaf
//! (its smallest and largest key, which its parent's entry names), and one
//! batch of leaves being written; a single leaf group is held whole.

use super::build::{Ent, Hierarchy, Records, Writer};
use super::format::{
    typed_root_config, ContentRoot, Descriptor, DirectoryBlock, NodeKind, ProximityConfig, Record,
    RootKind,
};
use super::map::ProximityMap;
use super::math::{prepare, promotion_level};
use super::spill::{item_bytes, Item, Run, SortBy, Spill};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::manifest::RootManifest;
use crate::prolly;
use crate::store::BlockStore;
use rayon::prelude::*;
use std::path::Path;
use std::time::Instant;

/// The phases of a build, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Reading and checking the input (driven by the caller's pushes).
    Read,
    /// Merging the sorted runs; writing the ordered directory.
    Sort,
    /// Assigning records to nearest-representative groups.
    Cluster,
    /// Writing the PRXN hierarchy.
    Write,
    /// Building the HNSW/PQ sidecars.
    Sidecars,
    /// Persisting the search layouts (scan arena, adaptive lists, fast-scan
    /// lists).
    Layouts,
}

impl Phase {
    /// Lower-case name ("read", "sort", ...).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Read => "read",
            Phase::Sort => "sort",
            Phase::Cluster => "cluster",
            Phase::Write => "write",
            Phase::Sidecars => "sidecars",
            Phase::Layouts => "layouts",
        }
    }
}

/// Receives the progress of a build. Called from the building thread;
/// [`Progress::advance`] also from worker threads.
pub trait Progress: Sync {
    /// `phase` starts with `total` units of work (records) if known.
    fn start(&self, phase: Phase, total: Option<u64>);
    /// `n` more units of the current phase are done.
    fn advance(&self, n: u64);
    /// The current phase is over.
    fn finish(&self, phase: Phase);
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: Phase, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
    fn finish(&self, _: Phase) {}
}

/// What a streaming build did besides the map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamStats {
    /// Records in the map.
    pub records: u64,
    /// Sorted runs written to disk by the read phase (0: all fit).
    pub runs: u64,
    /// Bytes written to spill files.
    pub spilled_bytes: u64,
    /// Records promoted above level 0 (kept in memory).
    pub promoted: u64,
    /// Level-0 records whose leaf group came from a cluster checkpoint
    /// instead of a descent (resumed builds).
    pub reused_assignments: u64,
    /// Seconds per phase after the read phase: sort, cluster, write.
    pub seconds: [f64; 3],
}

/// A bounded-memory canonical build in progress: push every record, then
/// [`StreamBuild::finish`].
pub struct StreamBuild<'s> {
    store: &'s dyn BlockStore,
    config: ProximityConfig,
    limit: u64,
    spill: Spill,
    buf: Vec<Item>,
    buf_bytes: usize,
    runs: Vec<Run>,
    count: u64,
    /// Named root to write the checkpoint under (see [`StreamBuild::checkpoint_as`]).
    checkpoint: Option<String>,
    /// Resuming: the directory of the checkpoint replaces the input.
    resumed: Option<Cid>,
}

/// Metadata key of a checkpoint's `CRMF`: the map configuration's
/// fingerprint (6.4), so a resume with other options is refused.
const META_PENDING_CONFIG: &[u8] = b"prox.pending-build.config";

impl<'s> StreamBuild<'s> {
    /// Starts a build into `store` that keeps its own memory near
    /// `memory_limit` bytes, spilling into `spill_dir` (created if missing;
    /// the files this build creates there are removed when it ends).
    ///
    /// Errors: an invalid configuration ([`Error::InvalidConfig`]); a limit
    /// below 1 MiB ([`Error::InvalidArgument`]); a spill directory that
    /// cannot be created.
    pub fn new(
        store: &'s dyn BlockStore,
        config: &ProximityConfig,
        memory_limit: u64,
        spill_dir: &Path,
    ) -> Result<StreamBuild<'s>> {
        config.validate()?;
        if memory_limit < 1 << 20 {
            return Err(Error::InvalidArgument(format!(
                "memory limit {memory_limit} bytes is below the 1 MiB minimum"
            )));
        }
        Ok(StreamBuild {
            store,
            config: config.clone(),
            limit: memory_limit,
            spill: Spill::new(spill_dir, config.dims as usize)?,
            buf: Vec::new(),
            buf_bytes: 0,
            runs: Vec::new(),
            count: 0,
            checkpoint: None,
            resumed: None,
        })
    }

    /// Writes a checkpoint under the named root `root` once the sort phase
    /// is done: the directory (ordinary blocks, committed) named by a typed
    /// `CRMF` of kind ordered node whose metadata carries the configuration
    /// fingerprint. The cluster phase then saves its progress after every
    /// chunk under `ROOT.cluster` (the leaf group of each level-0 record so
    /// far, as a prolly tree), so a resume repeats at most one chunk of
    /// descents. Garbage collection keeps both like any named root;
    /// [`StreamBuild::resume`] continues from it; [`clear_checkpoint`]
    /// removes it once the map is published.
    pub fn checkpoint_as(mut self, root: &str) -> Result<StreamBuild<'s>> {
        crate::store::validate_root_name(root)?;
        self.checkpoint = Some(root.to_string());
        Ok(self)
    }

    /// A build that continues from the checkpoint under `root`, or `None`
    /// when there is none. Nothing is pushed to it: its records are the
    /// checkpoint's directory, and [`StreamBuild::finish`] starts at the
    /// cluster phase (after re-deriving the promoted records from the
    /// directory). Errors: a checkpoint made with another configuration
    /// ([`Error::InvalidArgument`]); a damaged checkpoint.
    pub fn resume(
        store: &'s dyn BlockStore,
        config: &ProximityConfig,
        memory_limit: u64,
        spill_dir: &Path,
        root: &str,
    ) -> Result<Option<StreamBuild<'s>>> {
        let Some(bytes) = store.root(root)? else {
            return Ok(None);
        };
        let manifest = RootManifest::decode(&bytes)?;
        let Some(cid) = manifest.root else {
            return Ok(None);
        };
        let bytes = store.get(&cid)?.ok_or(Error::NotFound { cid })?;
        let crmf = ContentRoot::decode(&bytes)?;
        let made_with = crmf.metadata.get(META_PENDING_CONFIG);
        if crmf.kind != RootKind::OrderedNode || made_with.is_none() {
            return Err(Error::InvalidArgument(format!(
                "root {root:?} is not a build checkpoint"
            )));
        }
        if made_with.map(Vec::as_slice) != Some(config.fingerprint().as_bytes().as_slice()) {
            return Err(Error::InvalidArgument(format!(
                "the checkpoint under {root:?} was made with another map configuration; \
                 resume with the options of the interrupted build, or build afresh"
            )));
        }
        let mut b = StreamBuild::new(store, config, memory_limit, spill_dir)?;
        b.checkpoint = Some(root.to_string());
        b.resumed = Some(crmf.root);
        Ok(Some(b))
    }

    /// True when this build continues from a checkpoint.
    pub fn is_resumed(&self) -> bool {
        self.resumed.is_some()
    }

    /// Bytes one run may hold before it is sorted and spilled.
    fn run_budget(&self) -> usize {
        (self.limit / 2) as usize
    }

    /// Bytes of one batch in the cluster and write phases.
    fn batch_budget(&self) -> usize {
        (self.limit / 4) as usize
    }

    /// Adds one record. The vector is checked when its run is sorted (a
    /// wrong dimension right away); errors name the record's key.
    pub fn push(&mut self, key: Vec<u8>, vector: Vec<f32>, value: Vec<u8>) -> Result<()> {
        if vector.len() != self.config.dims as usize {
            return Err(Error::WrongDimension {
                expected: self.config.dims as usize,
                got: vector.len(),
                key: Some(key),
            });
        }
        if self.count >= u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(
                "more than 2^32 - 1 records exceed the builder's limit".into(),
            ));
        }
        self.count += 1;
        let item = Item {
            group: 0,
            index: 0,
            key,
            vector,
            value,
        };
        self.buf_bytes += item.bytes();
        self.buf.push(item);
        if self.buf_bytes >= self.run_budget() {
            let run = std::mem::take(&mut self.buf);
            self.buf_bytes = 0;
            let run = self.prepared(run)?;
            self.runs.push(self.spill.write_run(run, SortBy::Key)?);
        }
        Ok(())
    }

    /// Records pushed so far.
    pub fn records(&self) -> u64 {
        self.count
    }

    /// Prepares every vector of a run (11.1) in parallel. When several are
    /// bad, the one with the smallest key is reported.
    fn prepared(&self, mut run: Vec<Item>) -> Result<Vec<Item>> {
        let (metric, dims) = (self.config.metric, self.config.dims);
        let errors: Vec<Error> = run
            .par_iter_mut()
            .filter_map(
                |it| match prepare(metric, dims, &it.vector, Some(&it.key)) {
                    Ok(v) => {
                        it.vector = v;
                        None
                    }
                    Err(e) => Some(e),
                },
            )
            .collect();
        match errors
            .into_iter()
            .min_by(|a, b| error_key(a).cmp(&error_key(b)))
        {
            Some(e) => Err(e),
            None => Ok(run),
        }
    }

    /// Merges, clusters and writes; returns the map and what it took.
    /// Errors are those of [`ProximityMap::build`] plus spill-file I/O.
    pub fn finish(mut self, progress: &dyn Progress) -> Result<(ProximityMap<'s>, StreamStats)> {
        let tail = std::mem::take(&mut self.buf);
        let tail = self.prepared(tail)?;
        let mut runs = std::mem::take(&mut self.runs);
        if runs.is_empty() {
            runs.push(Spill::mem_run(tail, SortBy::Key));
        } else if !tail.is_empty() {
            runs.push(self.spill.write_run(tail, SortBy::Key)?);
        }
        let spilled_runs = runs.iter().filter(|r| matches!(r, Run::File(_))).count() as u64;
        let dims = self.config.dims as usize;
        let mut stats = StreamStats {
            runs: spilled_runs,
            ..StreamStats::default()
        };

        // Sort: merge, directory, promoted records, level-0 file.
        let t = Instant::now();
        progress.start(Phase::Sort, self.resumed.is_none().then_some(self.count));
        let dir_config = prolly::Config::default();
        let mut chunker = prolly::Chunker::new(self.store, &dir_config, 0);
        let mut upper = Records {
            keys: Vec::new(),
            vectors: Vec::new(),
            dims,
        };
        let mut upper_levels: Vec<u8> = Vec::new();
        let mut upper_index: Vec<u32> = Vec::new();
        let mut level0 = self.spill.sequential()?;
        let mut prev: Option<Vec<u8>> = None;
        let mut index = 0u32;
        let source: Box<dyn Iterator<Item = Result<Item>>> = match self.resumed {
            None => Box::new(self.spill.merge(runs, SortBy::Key, self.run_budget())?),
            Some(dir) => {
                let dims_u32 = self.config.dims;
                let tree = prolly::Tree::open(self.store, dir_config.clone(), Some(dir))?;
                Box::new(tree.iter().map(move |e| {
                    let (key, bytes) = e?;
                    let r = Record::decode(&bytes, dims_u32)?;
                    Ok(Item {
                        group: 0,
                        index: 0,
                        key,
                        vector: r.vector,
                        value: Vec::new(),
                    })
                }))
            }
        };
        for item in source {
            let mut item = item?;
            if prev.as_deref() == Some(item.key.as_slice()) {
                return Err(Error::DuplicateKey { key: item.key });
            }
            if self.resumed.is_none() {
                chunker.push(
                    item.key.clone(),
                    Record::encode_parts(&item.vector, &item.value)?,
                )?;
            }
            let level = promotion_level(
                &item.key,
                self.config.log_chunk_size,
                self.config.level_hash_seed,
            );
            if level > 0 {
                upper.keys.push(item.key.clone());
                upper.vectors.extend_from_slice(&item.vector);
                upper_levels.push(level);
                upper_index.push(index);
            } else {
                item.index = index;
                item.value = Vec::new();
                level0.push(&item)?;
            }
            prev = Some(item.key);
            index += 1;
            if index.is_multiple_of(4096) {
                progress.advance(4096);
            }
        }
        progress.advance(u64::from(index % 4096));
        level0.finish()?;
        self.spill.account(&level0);
        let n = u64::from(index);
        stats.records = n;
        if n == 0 {
            progress.finish(Phase::Sort);
            // The empty map (12.9) has no groups to stream.
            let map = ProximityMap::build(self.store, &self.config, Vec::new())?;
            return Ok((map, stats));
        }
        let dir_root = match self.resumed {
            Some(dir) => Some(dir),
            None => prolly::grow(self.store, &dir_config, 0, chunker.finish()?)?,
        };
        if let (Some(name), Some(dir), None) = (&self.checkpoint, dir_root, self.resumed) {
            write_checkpoint(self.store, name, &self.config, dir)?;
        }
        progress.finish(Phase::Sort);
        stats.seconds[0] = t.elapsed().as_secs_f64();
        stats.promoted = upper.len() as u64;

        // Cluster: the promoted hierarchy, then every level-0 record.
        let t = Instant::now();
        progress.start(Phase::Cluster, Some(n));
        let top = upper_levels.iter().copied().max().unwrap_or(0);
        let h = Hierarchy::assign_below(self.config.metric, &upper, &upper_levels, top, None);
        progress.advance(upper.len() as u64);
        drop(upper_levels);
        let mut group_runs = Vec::new();
        let mut chunk: Vec<Item> = Vec::new();
        let mut chunk_bytes = 0usize;
        let mut file = self.spill.reader(&level0.path)?;
        // Assignments of earlier attempts (resuming), and those to save.
        let mut saved: Vec<(Vec<u8>, Vec<u8>)> = match (&self.checkpoint, self.resumed) {
            (Some(root), Some(_)) => read_assignments(self.store, &cluster_root(root))?,
            _ => Vec::new(),
        };
        loop {
            let next = file.next().transpose()?;
            let full = chunk_bytes >= self.batch_budget();
            if (next.is_none() || full) && !chunk.is_empty() {
                if self.assign_chunk(&h, &upper, &mut chunk, &mut saved)? {
                    stats.reused_assignments += chunk.len() as u64;
                }
                progress.advance(chunk.len() as u64);
                let done = std::mem::take(&mut chunk);
                chunk_bytes = 0;
                if next.is_none() && group_runs.is_empty() {
                    group_runs.push(Spill::mem_run(done, SortBy::Group));
                } else {
                    group_runs.push(self.spill.write_run(done, SortBy::Group)?);
                }
            }
            match next {
                Some(it) => {
                    chunk_bytes += it.bytes();
                    chunk.push(it);
                }
                None => break,
            }
        }
        progress.finish(Phase::Cluster);
        stats.seconds[1] = t.elapsed().as_secs_f64();

        // Write: the leaves in group order, then the route nodes.
        let t = Instant::now();
        progress.start(Phase::Write, Some(n));
        let mut merge = self
            .spill
            .merge(group_runs, SortBy::Group, self.batch_budget())?;
        let mut done: Vec<Option<Ent>> = vec![None; h.group_count()];
        let mut batch: Vec<Leaf> = Vec::new();
        let mut batch_bytes = 0usize;
        let leaf_groups = h.leaf_groups();
        for (i, &(g, rep)) in leaf_groups.iter().enumerate() {
            let mut members = Vec::new();
            while merge.peek_group() == Some(g) {
                let it = merge.next().transpose()?.expect("peeked an item");
                batch_bytes += it.bytes();
                members.push(it);
            }
            if let Some(r) = rep {
                members.push(Item {
                    group: g,
                    index: upper_index[r as usize],
                    key: upper.keys[r as usize].clone(),
                    vector: upper.vector(r).to_vec(),
                    value: Vec::new(),
                });
                batch_bytes += item_bytes(upper.keys[r as usize].len(), dims, 0);
            }
            batch.push(Leaf {
                group: g,
                rep,
                rep_index: rep.map(|r| upper_index[r as usize]),
                members,
            });
            if batch_bytes >= self.batch_budget() || i + 1 == leaf_groups.len() {
                let written = std::mem::take(&mut batch)
                    .into_par_iter()
                    .map(|leaf| leaf.write(self.store, &self.config))
                    .collect::<Result<Vec<_>>>()?;
                for w in written {
                    progress.advance(w.members);
                    let g = w.group as usize;
                    done[g] = Some(w.into_upper(&mut upper));
                }
                batch_bytes = 0;
            }
        }
        if let Some(it) = merge.next() {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("spill file holds a record of unknown group {}", it?.group),
            )));
        }
        let root = if top == 0 {
            done[0].and_then(|e| e.child)
        } else {
            Writer::new(self.store, &self.config, &upper)
                .with_done(&done)
                .node(&h, 0)?
                .child
        }
        .expect("every group is stored and summarized with its child");
        let descriptor = Descriptor {
            config: self.config.clone(),
            record_count: n,
            directory: DirectoryBlock {
                root: dir_root,
                config: dir_config,
            },
            root,
        };
        let cid = self.store.put(&descriptor.encode()?)?;
        progress.finish(Phase::Write);
        stats.seconds[2] = t.elapsed().as_secs_f64();
        stats.spilled_bytes = self.spill.written();
        Ok((ProximityMap::from_parts(self.store, cid, descriptor), stats))
    }
}

impl StreamBuild<'_> {
    /// Assigns every level-0 record of `chunk` to its leaf group: from the
    /// cluster checkpoint when an earlier attempt saved this very chunk
    /// (same first record, same length), else by the descent of 12.4, then
    /// saved to the checkpoint (when checkpointing). True when the
    /// checkpoint supplied them.
    fn assign_chunk(
        &self,
        h: &Hierarchy,
        upper: &Records,
        chunk: &mut [Item],
        saved: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<bool> {
        let key = chunk[0].index.to_be_bytes().to_vec();
        if let Some((_, groups)) = saved.iter().find(|(k, _)| *k == key) {
            if groups.len() == 4 * chunk.len() {
                for (it, g) in chunk.iter_mut().zip(groups.chunks_exact(4)) {
                    it.group = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
                }
                return Ok(true);
            }
        }
        let metric = self.config.metric;
        chunk.par_iter_mut().for_each_init(Vec::new, |buf, it| {
            it.group = h.descend_vector(metric, upper, &it.vector, 0, buf);
        });
        if let Some(root) = &self.checkpoint {
            saved.retain(|(k, _)| *k != key);
            saved.push((
                key,
                chunk.iter().flat_map(|it| it.group.to_le_bytes()).collect(),
            ));
            let cfg = prolly::Config::default();
            let tree = prolly::build(self.store, &cfg, saved.clone())?;
            self.store.commit()?;
            let manifest = RootManifest::new(tree, cfg).encode();
            self.store.set_root(&cluster_root(root), Some(&manifest))?;
        }
        Ok(false)
    }
}

/// The named root of a checkpoint's cluster progress: a prolly tree from
/// the key-order index of a chunk's first level-0 record (u32 big-endian)
/// to the chunk's leaf groups (u32 little-endian each).
fn cluster_root(root: &str) -> String {
    format!("{root}.cluster")
}

/// The saved chunks of the cluster checkpoint under `name` (none if absent).
fn read_assignments(store: &dyn BlockStore, name: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let Some(bytes) = store.root(name)? else {
        return Ok(Vec::new());
    };
    let tree = prolly::Tree::from_manifest(store, &RootManifest::decode(&bytes)?)?;
    let mut out = Vec::new();
    for e in tree.iter() {
        let (k, v) = e?;
        if k.len() != 4 || v.len() % 4 != 0 {
            return Err(Error::InvalidArgument(format!(
                "root {name:?} is not a cluster checkpoint"
            )));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// Makes the directory durable, then points `root` at a checkpoint `CRMF`
/// naming it (and drops the cluster progress of any earlier build).
fn write_checkpoint(
    store: &dyn BlockStore,
    root: &str,
    config: &ProximityConfig,
    dir: Cid,
) -> Result<()> {
    let mut crmf = ContentRoot::new(RootKind::OrderedNode, dir);
    crmf.metadata.insert(
        META_PENDING_CONFIG.to_vec(),
        config.fingerprint().as_bytes().to_vec(),
    );
    let cid = store.put(&crmf.encode()?)?;
    // The root must never name a block that a crash could lose.
    store.commit()?;
    store.set_root(&cluster_root(root), None)?;
    let manifest = RootManifest::new(Some(cid), typed_root_config()).encode();
    store.set_root(root, Some(&manifest))
}

/// Removes the checkpoint root `root` (after the map it led to is
/// published); nothing if it is absent.
pub fn clear_checkpoint(store: &dyn BlockStore, root: &str) -> Result<()> {
    for name in [cluster_root(root), root.to_string()] {
        if store.root(&name)?.is_some() {
            store.set_root(&name, None)?;
        }
    }
    Ok(())
}

/// The key an error names, for picking the smallest.
fn error_key(e: &Error) -> Option<&[u8]> {
    match e {
        Error::WrongDimension { key, .. }
        | Error::NonFiniteVector { key, .. }
        | Error::ZeroCosineVector { key, .. } => key.as_deref(),
        _ => None,
    }
}

/// One level-0 group to store: its members in any order (the
/// representative among them).
struct Leaf {
    group: u32,
    /// Representative in the promoted arena.
    rep: Option<u32>,
    /// The representative's key-order index.
    rep_index: Option<u32>,
    members: Vec<Item>,
}

/// A stored leaf: its summary over its own members, and the members the
/// summary names.
struct WrittenLeaf {
    group: u32,
    rep: Option<u32>,
    members: u64,
    ent: Ent,
    /// (key, vector) of the summary's rep, min and max records.
    named: [(Vec<u8>, Vec<f32>); 3],
}

impl Leaf {
    /// Stores the leaf (12.5-12.8 for level 0) and summarizes it.
    fn write(mut self, store: &dyn BlockStore, config: &ProximityConfig) -> Result<WrittenLeaf> {
        self.members.sort_unstable_by_key(|m| m.index);
        let dims = config.dims as usize;
        // The representative by its key-order index; without one (a map
        // with no promoted record), the smallest key, as in 12.5.
        let rep_index = match self.rep_index {
            Some(x) => self
                .members
                .binary_search_by_key(&x, |m| m.index)
                .map_err(|_| {
                    Error::InvalidArgument(format!(
                        "leaf group {} lost its representative",
                        self.group
                    ))
                })?,
            None => 0,
        };
        let mut local = Records {
            keys: Vec::with_capacity(self.members.len()),
            vectors: Vec::with_capacity(self.members.len() * dims),
            dims,
        };
        for m in &self.members {
            local.keys.push(m.key.clone());
            local.vectors.extend_from_slice(&m.vector);
        }
        let entries: Vec<Ent> = (0..local.len() as u32).map(Ent::point).collect();
        let w = Writer::new(store, config, &local);
        let cid = w.store_logical(NodeKind::Leaf, 0, &entries)?;
        let ent = w.summarize(cid, &entries, rep_index as u32);
        let named =
            [ent.rec, ent.min, ent.max].map(|i| (local.key(i).to_vec(), local.vector(i).to_vec()));
        Ok(WrittenLeaf {
            group: self.group,
            rep: self.rep,
            members: self.members.len() as u64,
            ent,
            named,
        })
    }
}

impl WrittenLeaf {
    /// The summary with its records moved into the promoted arena: the
    /// representative is already there (when promoted); min and max are
    /// appended. Appended records are never group members, so the arena's
    /// key order among members is unchanged.
    fn into_upper(self, upper: &mut Records) -> Ent {
        let [rep, min, max] = self.named;
        let mut push = |(k, v): (Vec<u8>, Vec<f32>)| -> u32 {
            upper.keys.push(k);
            upper.vectors.extend_from_slice(&v);
            upper.keys.len() as u32 - 1
        };
        let local_rep = self.ent.rec;
        let rec = match self.rep {
            Some(r) => r,
            None => push(rep),
        };
        let min = if self.ent.min == local_rep {
            rec
        } else {
            push(min)
        };
        let max = if self.ent.max == local_rep {
            rec
        } else {
            push(max)
        };
        Ent {
            rec,
            min,
            max,
            ..self.ent
        }
    }
}
