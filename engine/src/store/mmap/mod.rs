//! `MmapStore`: the embedded, crash-safe block store.
//!
//! # Layout
//!
//! A store is a directory:
//!
//! * `LOCK`: held with an exclusive advisory lock by the one writer
//!   ([`MmapStore::open`]); a second writer gets [`Error::Locked`].
//! * `NNNNNNNN.seg` (8 hex digits, the segment id): append-only segment
//!   files of framed block records ([`format`]). Only the segment with the
//!   highest id is ever appended to; it rolls over at
//!   [`MmapOptions::segment_bytes`].
//! * `ROOTS`: the named roots, replaced atomically (write temp, fsync,
//!   rename, fsync directory).
//!
//! # Index
//!
//! The CID -> (segment, offset, length) index lives in memory and is rebuilt
//! by scanning every segment on open (segments are scanned in parallel; the
//! scan checks xxh64 frame checksums at memory bandwidth, not SHA-256).
//! There is no persisted index to fall out of sync with the segments.
//!
//! # Durability
//!
//! `put` appends the record with `pwrite` and makes the block visible to
//! every reader of this `MmapStore` at once, but promises nothing about a
//! crash: after a crash an uncommitted block is either fully present and
//! valid or absent. [`BlockStore::commit`] appends a commit marker and
//! fsyncs the segment; every block put before `commit` returned survives any
//! later crash. Named-root changes are durable when the call returns.
//!
//! # Recovery
//!
//! On open the writer scans each segment. Bytes after the last valid item
//! of the newest segment are a torn append and are truncated (before the
//! file is mapped). Damage elsewhere is never truncated: the scanner
//! resynchronises on the next valid record; a record whose header is intact
//! but whose payload is not stays in the index as *damaged*.
//!
//! # Verification
//!
//! Every block is checked against its CID (SHA-256) before it is returned.
//! The check is done once per block per open store and remembered (blocks
//! written by this process are known good); set
//! [`MmapOptions::verify_every_read`] to hash on every read. A block that
//! fails is remembered as damaged: `get` returns [`Error::Corrupt`] naming
//! it, `has` reports `false` (so replication fetches it again) and `put` of
//! the same bytes repairs it by appending a fresh copy. The store assumes it
//! owns its files: bytes changed behind its back after they were verified
//! are outside this model.
//!
//! # Concurrency
//!
//! All methods take `&self`. Readers share a `RwLock` over the index and the
//! segment table and never wait for I/O of the writer; writes serialise on a
//! mutex. `get` returns a [`Bytes`] that owns an `Arc` of the segment
//! mapping, so a block stays readable after compaction retires its segment.
//!
//! # Garbage collection
//!
//! [`BlockStore::retain`] copies the live records of every segment that holds
//! a dead one into new segments, fsyncs them and the directory, switches the
//! index, and only then unlinks the old segments. A crash at any point
//! leaves every live block in at least one complete segment (duplicates are
//! harmless and disappear at the next collection).

mod compact;
pub mod faults;
pub mod format;
mod io;
mod roots;
mod scan;
mod segment;
mod writer;

pub use self::roots::{RootsReport, SlotState};

use self::faults::Faults;
use self::format::{BLOCK_HEADER_LEN, BLOCK_OVERHEAD, SEGMENT_HEADER_LEN};
use self::io::Io;
use self::scan::{damaged, list_segments};
use self::segment::{BlockRef, Segment};
use self::writer::{Active, Writer};
use super::{validate_root_name, BlockStore, Lease, Leases, RetainStats, Verified};
use crate::cid::Cid;
use crate::error::{Error, Result};
use bytes::Bytes;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

const LOCK_FILE: &str = "LOCK";
const SEGMENT_EXT: &str = "seg";

/// Tuning knobs for [`MmapStore::open_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MmapOptions {
    /// Size at which the writer starts a new segment (default 256 MiB). A
    /// single block larger than this gets a segment of its own.
    pub segment_bytes: u64,
    /// Hash every block on every read instead of once per open store.
    pub verify_every_read: bool,
    /// Routes every file operation that changes the disk through this
    /// injector (tests only; see [`faults`]).
    pub faults: Option<Faults>,
}

impl Default for MmapOptions {
    fn default() -> Self {
        MmapOptions {
            segment_bytes: 256 << 20,
            verify_every_read: false,
            faults: None,
        }
    }
}

/// Counters describing a store (see [`MmapStore::stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MmapStats {
    /// Segment files.
    pub segments: u64,
    /// Readable (not damaged) blocks.
    pub blocks: u64,
    /// Payload bytes of those blocks.
    pub block_bytes: u64,
    /// Blocks known to be damaged.
    pub damaged: u64,
    /// Damaged byte ranges found at open (see [`DamagedRange`]).
    pub damaged_ranges: u64,
    /// Bytes of all segment files (framing, dead and damaged records
    /// included).
    pub file_bytes: u64,
}

const UNVERIFIED: u8 = 0;
const VERIFIED: u8 = 1;
const DAMAGED: u8 = 2;

/// Where a block's payload lives.
#[derive(Debug)]
struct Loc {
    seg: u32,
    /// Offset of the record (not the payload) in the segment file.
    off: u64,
    len: u32,
    /// `UNVERIFIED`, `VERIFIED` or `DAMAGED`.
    state: AtomicU8,
}

impl Loc {
    fn new(seg: u32, off: u64, len: u32, state: u8) -> Loc {
        Loc {
            seg,
            off,
            len,
            state: AtomicU8::new(state),
        }
    }

    fn record_len(&self) -> u64 {
        BLOCK_OVERHEAD as u64 + u64::from(self.len)
    }

    fn damaged(&self) -> bool {
        self.state.load(Ordering::Acquire) == DAMAGED
    }
}

/// CIDs are SHA-256 outputs: their first 8 bytes are already a good hash.
#[derive(Default)]
struct CidHasher(u64);

impl Hasher for CidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        if let Some(head) = bytes.first_chunk::<8>() {
            self.0 ^= u64::from_le_bytes(*head);
        } else {
            for &b in bytes {
                self.0 = self.0.rotate_left(8) ^ u64::from(b);
            }
        }
    }
}

type Index = HashMap<Cid, Loc, BuildHasherDefault<CidHasher>>;

/// Index and segment table, updated together under one lock so a reader
/// that finds a location also finds its segment.
#[derive(Debug, Default)]
struct State {
    index: Index,
    segments: BTreeMap<u32, Arc<Segment>>,
    /// Damaged byte ranges found by the open scan, per segment id.
    garbage: BTreeMap<u32, Vec<(u64, u64)>>,
}

/// A byte range of a segment file that holds no readable record, found by
/// the scan at open: a damaged segment header, a record whose header is
/// damaged (its block reads as absent), or bytes the scan skipped to
/// resynchronise. Such a range may hide a block some root needs, which is
/// why garbage collection refuses to run while a reachable block is
/// missing. The range disappears when compaction rewrites its segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRange {
    /// The segment file.
    pub segment: PathBuf,
    /// First damaged byte (file offset).
    pub start: u64,
    /// One past the last damaged byte.
    pub end: u64,
}

/// The memory-mapped block store. See the [module docs](self).
#[derive(Debug)]
pub struct MmapStore {
    dir: PathBuf,
    opts: MmapOptions,
    read_only: bool,
    /// Held for the store's lifetime; the lock is released on drop.
    _lock: Option<File>,
    state: RwLock<State>,
    writer: Mutex<Writer>,
    roots: Mutex<RootsState>,
    /// How the roots were found at open.
    roots_report: RootsReport,
    io: Io,
    /// Set by the first failed write or fsync: the store then refuses every
    /// write until it is reopened (what reached the disk is unknown).
    poison: Mutex<Option<String>>,
    /// Write leases of the roots (this process is the store's one writer).
    leases: Arc<Leases>,
}

/// The named roots in memory and the generation they were stored as.
#[derive(Debug, Clone, Default)]
struct RootsState {
    roots: roots::Roots,
    generation: u64,
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn segment_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:08x}.{SEGMENT_EXT}"))
}

impl MmapStore {
    /// Opens (creating if absent) the store in `dir` for reading and
    /// writing with default options. Fails with [`Error::Locked`] when
    /// another handle (in any process) has it open for writing.
    pub fn open(dir: impl AsRef<Path>) -> Result<MmapStore> {
        Self::open_with(dir, MmapOptions::default())
    }

    /// [`open`](Self::open) with explicit options.
    pub fn open_with(dir: impl AsRef<Path>, opts: MmapOptions) -> Result<MmapStore> {
        let dir = dir.as_ref().to_path_buf();
        if opts.segment_bytes < (SEGMENT_HEADER_LEN + BLOCK_OVERHEAD) as u64 {
            return Err(Error::InvalidConfig(format!(
                "segment_bytes {} is below the minimum {}",
                opts.segment_bytes,
                SEGMENT_HEADER_LEN + BLOCK_OVERHEAD
            )));
        }
        let io = Io::new(opts.faults.clone());
        create_store_dir(&io, &dir)?;
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))?;
        match lock_file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(Error::Locked { path: dir }),
            Err(fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        io.remove(&dir.join(roots::ROOTS_TMP))?;
        let roots = roots::load(&dir)?;
        let segs = list_segments(&dir)?;
        let (state, last) = scan::load(&io, &segs, &opts, true)?;
        let mut writer = Writer {
            next_id: segs.last().map_or(Ok(0), |(id, _)| {
                id.checked_add(1)
                    .ok_or_else(|| damaged(&dir, "segment ids exhausted"))
            })?,
            ..Writer::default()
        };
        if let Some(mut last) = last {
            if let Some(file) = last.file.take() {
                let len = last.seg.written();
                if len < opts.segment_bytes {
                    writer.active = Some(Active {
                        seg: last.seg,
                        file,
                        len,
                    });
                }
            }
        }
        if let Some(a) = &writer.active {
            writer.synced_len = a.len;
        }
        io.sync_dir(&dir)?;
        Ok(MmapStore {
            dir,
            opts,
            read_only: false,
            _lock: Some(lock_file),
            state: RwLock::new(state),
            writer: Mutex::new(writer),
            roots: Mutex::new(RootsState {
                roots: roots.roots,
                generation: roots.report.generation,
            }),
            roots_report: roots.report,
            io,
            poison: Mutex::new(None),
            leases: Arc::default(),
        })
    }

    /// Opens an existing store for reading only, without taking the write
    /// lock and without repairing anything. The view is a snapshot of the
    /// blocks and roots present at open; writes fail with
    /// [`Error::ReadOnly`].
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<MmapStore> {
        let dir = dir.as_ref().to_path_buf();
        let opts = MmapOptions::default();
        if !dir.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("store directory {} does not exist", dir.display()),
            )
            .into());
        }
        // A concurrent writer may retire a segment between listing and
        // opening it; listing again sees its replacement.
        let mut attempt = 0;
        let (state, roots) = loop {
            attempt += 1;
            let roots = roots::load(&dir)?;
            let segs = list_segments(&dir)?;
            match scan::load(&Io::default(), &segs, &opts, false) {
                Ok((state, _)) => break (state, roots),
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && attempt < 5 => {}
                Err(e) => return Err(e),
            }
        };
        Ok(MmapStore {
            dir,
            opts,
            read_only: true,
            _lock: None,
            state: RwLock::new(state),
            writer: Mutex::new(Writer::default()),
            roots: Mutex::new(RootsState {
                roots: roots.roots,
                generation: roots.report.generation,
            }),
            roots_report: roots.report,
            io: Io::default(),
            poison: Mutex::new(None),
            leases: Arc::default(),
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the store was opened with [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Counters over the current state.
    pub fn stats(&self) -> MmapStats {
        let st = read(&self.state);
        let mut s = MmapStats {
            segments: st.segments.len() as u64,
            file_bytes: st.segments.values().map(|s| s.written()).sum(),
            damaged_ranges: st.garbage.values().map(|v| v.len() as u64).sum(),
            ..MmapStats::default()
        };
        for loc in st.index.values() {
            if loc.damaged() {
                s.damaged += 1;
            } else {
                s.blocks += 1;
                s.block_bytes += u64::from(loc.len);
            }
        }
        s
    }

    /// CIDs of the blocks known to be damaged (found by the open scan or by a
    /// failed verification), sorted.
    pub fn damaged(&self) -> Vec<Cid> {
        let st = read(&self.state);
        let mut v: Vec<Cid> = st
            .index
            .iter()
            .filter(|(_, l)| l.damaged())
            .map(|(c, _)| *c)
            .collect();
        v.sort_unstable();
        v
    }

    /// Damaged byte ranges found by the scan at open, in segment order
    /// (see [`DamagedRange`]); empty for a healthy store. Together with
    /// [`damaged`](Self::damaged) this is everything the store knows to be
    /// unreadable.
    pub fn damaged_ranges(&self) -> Vec<DamagedRange> {
        let st = read(&self.state);
        let mut out = Vec::new();
        for (id, ranges) in &st.garbage {
            let Some(seg) = st.segments.get(id) else {
                continue;
            };
            out.extend(ranges.iter().map(|&(start, end)| DamagedRange {
                segment: seg.path.clone(),
                start,
                end,
            }));
        }
        out
    }

    /// Reads and verifies every block, returning the CIDs that fail (they
    /// are marked damaged). Reads every byte of the store.
    pub fn verify_all(&self) -> Result<Vec<Cid>> {
        let cids: Vec<Cid> = read(&self.state).index.keys().copied().collect();
        let mut bad = Vec::new();
        for cid in cids {
            match self.read_block(&cid, true) {
                Ok(_) => {}
                Err(Error::Corrupt { cid, .. }) => bad.push(cid),
                Err(e) => return Err(e),
            }
        }
        bad.sort_unstable();
        Ok(bad)
    }

    /// Asks the kernel to drop this store's segment files from the page
    /// cache (`posix_fadvise(DONTNEED)`, Linux), so the next reads come from
    /// the device. For cold-read benchmarks; blocks stay readable.
    pub fn drop_page_cache(&self) -> Result<()> {
        let paths: Vec<PathBuf> = read(&self.state)
            .segments
            .values()
            .map(|s| s.path.clone())
            .collect();
        for path in paths {
            let f = File::open(&path)?;
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                // SAFETY: a plain advisory syscall on a descriptor that `f`
                // keeps open for the duration of the call; it touches no
                // memory of this process.
                let rc =
                    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                if rc != 0 {
                    return Err(std::io::Error::from_raw_os_error(rc).into());
                }
            }
            drop(f);
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
            });
        }
        if let Some(reason) = lock(&self.poison).clone() {
            return Err(Error::Poisoned {
                path: self.dir.clone(),
                reason,
            });
        }
        Ok(())
    }

    /// Records a failed write or fsync: from now on every write fails with
    /// [`Error::Poisoned`] until the store is reopened (the PostgreSQL and
    /// SQLite rule: after a failed fsync the kernel may have dropped the
    /// dirty pages, so retrying cannot make them durable). Other errors
    /// pass through unchanged.
    fn poison_on_io(&self, e: Error) -> Error {
        if let Error::Io(io) = &e {
            let mut p = lock(&self.poison);
            if p.is_none() {
                tracing::error!(dir = %self.dir.display(), error = %io, "store write failed; refusing writes until reopened");
                *p = Some(io.to_string());
            }
        }
        e
    }

    /// The files of a store directory that hold its named roots (the two
    /// slots and the legacy single file); watching their metadata tells
    /// when a root changed.
    pub fn roots_paths(dir: &Path) -> [PathBuf; 3] {
        [
            dir.join(roots::SLOT_FILES[0]),
            dir.join(roots::SLOT_FILES[1]),
            dir.join(roots::LEGACY_FILE),
        ]
    }

    /// How the named roots were loaded at open: each roots file's state and
    /// whether a damaged copy made the store fall back to the previous
    /// commit.
    pub fn roots_report(&self) -> &RootsReport {
        &self.roots_report
    }

    /// Writes the current named roots into both slots (two new
    /// generations), replacing a damaged copy. The report of what was found
    /// at open stays available from [`roots_report`](Self::roots_report).
    pub fn rewrite_roots(&self) -> Result<()> {
        self.check_writable()?;
        let mut cur = lock(&self.roots);
        for _ in 0..2 {
            let g = cur.generation + 1;
            roots::store(&self.io, &self.dir, &cur.roots, g).map_err(|e| self.poison_on_io(e))?;
            cur.generation = g;
        }
        Ok(())
    }

    /// Marks `cid` damaged if its index entry still points at `(seg, off)`.
    fn mark(&self, cid: &Cid, seg: u32, off: u64, state: u8) {
        let st = read(&self.state);
        if let Some(loc) = st.index.get(cid) {
            if loc.seg == seg && loc.off == off && loc.state.load(Ordering::Acquire) != DAMAGED {
                loc.state.store(state, Ordering::Release);
            }
        }
    }

    /// Looks up, verifies (unless already verified and `force` is false)
    /// and returns a block.
    fn read_block(&self, cid: &Cid, force: bool) -> Result<Option<Bytes>> {
        let (seg, off, len, state) = {
            let st = read(&self.state);
            let Some(loc) = st.index.get(cid) else {
                return Ok(None);
            };
            let seg = st.segments.get(&loc.seg).cloned();
            (seg, loc.off, loc.len, loc.state.load(Ordering::Acquire))
        };
        let corrupt = |reason: &str| Error::Corrupt {
            cid: *cid,
            reason: reason.to_string(),
        };
        if state == DAMAGED {
            return Err(corrupt("record damaged on disk (frame checksum mismatch)"));
        }
        let Some(seg) = seg else {
            return Err(corrupt("index points to a missing segment"));
        };
        let seg_id = seg.id;
        let Some(handle) = BlockRef::new(seg, off + BLOCK_HEADER_LEN as u64, u64::from(len)) else {
            self.mark(cid, seg_id, off, DAMAGED);
            return Err(corrupt("record extends past the end of its segment"));
        };
        let bytes = Bytes::from_owner(handle);
        if state != VERIFIED || force || self.opts.verify_every_read {
            if !cid.matches(&bytes) {
                self.mark(cid, seg_id, off, DAMAGED);
                return Err(corrupt("content does not hash to the CID"));
            }
            self.mark(cid, seg_id, off, VERIFIED);
        }
        Ok(Some(bytes))
    }

    fn update_roots(&self, f: impl FnOnce(&mut roots::Roots) -> bool) -> Result<bool> {
        self.check_writable()?;
        let mut cur = lock(&self.roots);
        let mut next = cur.roots.clone();
        if !f(&mut next) {
            return Ok(false);
        }
        let generation = cur.generation + 1;
        roots::store(&self.io, &self.dir, &next, generation).map_err(|e| self.poison_on_io(e))?;
        *cur = RootsState {
            roots: next,
            generation,
        };
        Ok(true)
    }
}

impl BlockStore for MmapStore {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        self.read_block(cid, false)
    }

    fn lease(&self, name: &str, wait: std::time::Duration) -> Result<Option<Lease>> {
        self.check_writable()?;
        self.leases.acquire(name, wait).map(Some)
    }

    /// A loop over [`MmapStore::get`]; a large batch runs on the rayon
    /// pool, since a block's first read hashes it.
    fn get_many(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        if cids.len() > 16 {
            cids.par_iter().map(|c| self.read_block(c, false)).collect()
        } else {
            cids.iter().map(|c| self.read_block(c, false)).collect()
        }
    }

    fn put(&self, data: &[u8]) -> Result<Cid> {
        let cid = Cid::of(data);
        self.check_writable()?;
        if read(&self.state)
            .index
            .get(&cid)
            .is_some_and(|l| !l.damaged())
        {
            return Ok(cid);
        }
        self.write_blocks(&[(cid, data)])?;
        Ok(cid)
    }

    fn put_many(&self, blocks: &[&[u8]]) -> Result<Vec<Cid>> {
        self.check_writable()?;
        let cids: Vec<Cid> = if blocks.len() > 16 {
            blocks.par_iter().map(|b| Cid::of(b)).collect()
        } else {
            blocks.iter().map(|b| Cid::of(b)).collect()
        };
        let pairs: Vec<(Cid, &[u8])> = cids.iter().copied().zip(blocks.iter().copied()).collect();
        self.write_blocks(&pairs)?;
        Ok(cids)
    }

    /// Appends the blocks with their known CIDs (no second hash); same
    /// records, durability and repair-of-damaged semantics as `put_many`.
    fn put_verified_many(&self, blocks: &[Verified]) -> Result<()> {
        let pairs: Vec<(Cid, &[u8])> = blocks.iter().map(|b| (b.cid, &b.bytes[..])).collect();
        self.write_blocks(&pairs)
    }

    fn has(&self, cid: &Cid) -> Result<bool> {
        Ok(read(&self.state)
            .index
            .get(cid)
            .is_some_and(|l| !l.damaged()))
    }

    fn has_many(&self, cids: &[Cid]) -> Result<Vec<bool>> {
        let st = read(&self.state);
        Ok(cids
            .iter()
            .map(|c| st.index.get(c).is_some_and(|l| !l.damaged()))
            .collect())
    }

    fn cids(&self) -> Result<Vec<Cid>> {
        let st = read(&self.state);
        Ok(st
            .index
            .iter()
            .filter(|(_, l)| !l.damaged())
            .map(|(c, _)| *c)
            .collect())
    }

    fn commit(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.check_writable()?;
        let mut w = lock(&self.writer);
        self.commit_locked(&mut w)
    }

    fn root(&self, name: &str) -> Result<Option<Bytes>> {
        validate_root_name(name)?;
        Ok(lock(&self.roots).roots.get(name).cloned())
    }

    fn set_root(&self, name: &str, value: Option<&[u8]>) -> Result<()> {
        validate_root_name(name)?;
        self.update_roots(|r| {
            match value {
                Some(v) => r.insert(name.to_string(), Bytes::copy_from_slice(v)),
                None => r.remove(name),
            };
            true
        })?;
        Ok(())
    }

    fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool> {
        validate_root_name(name)?;
        self.update_roots(|r| {
            if r.get(name).map(|b| b.as_ref()) != expected {
                return false;
            }
            match new {
                Some(v) => r.insert(name.to_string(), Bytes::copy_from_slice(v)),
                None => r.remove(name),
            };
            true
        })
    }

    fn roots(&self) -> Result<Vec<(String, Bytes)>> {
        Ok(lock(&self.roots)
            .roots
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn retain(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        self.compact(live)
    }
}

/// Creates the store directory if absent and fsyncs its parent, so the new
/// directory entry survives a crash.
fn create_store_dir(io: &Io, dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    io.sync_dir(parent)
}
