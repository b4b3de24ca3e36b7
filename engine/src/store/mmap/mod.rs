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

pub mod format;
mod roots;
mod segment;

use self::format::{Item, BLOCK_HEADER_LEN, BLOCK_OVERHEAD, SEGMENT_HEADER_LEN};
use self::segment::{BlockRef, Segment};
use super::{validate_root_name, BlockStore, RetainStats, Verified};
use crate::cid::Cid;
use crate::error::{Error, Result};
use bytes::Bytes;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::os::unix::fs::FileExt;
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
}

impl Default for MmapOptions {
    fn default() -> Self {
        MmapOptions {
            segment_bytes: 256 << 20,
            verify_every_read: false,
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
}

/// A live record to copy during compaction: (cid, segment, record offset,
/// payload length, verification state).
type KeepEntry = (Cid, u32, u64, u32, u8);

/// Largest run of records written with one `pwrite`.
const MAX_BATCH_BYTES: usize = 4 << 20;

/// Records of one `put_many` on their way to the active segment.
#[derive(Debug, Default)]
struct Batch {
    /// Encoded records not yet written.
    buf: Vec<u8>,
    /// (cid, offset in `buf`, payload length) of the records in `buf`.
    pending: Vec<(Cid, u64, u32)>,
    /// (cid, segment, record offset, payload length) of written records.
    placed: Vec<(Cid, u32, u64, u32)>,
}

/// The segment being appended to.
#[derive(Debug)]
struct Active {
    seg: Arc<Segment>,
    file: File,
    len: u64,
}

#[derive(Debug, Default)]
struct Writer {
    /// Invariant: when set, the active segment has the highest id.
    active: Option<Active>,
    next_id: u32,
    /// Records were appended to the active segment since its last fsync.
    dirty: bool,
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
    roots: Mutex<roots::Roots>,
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

/// Fsyncs a directory so renames, creations and unlinks in it are durable.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

fn segment_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:08x}.{SEGMENT_EXT}"))
}

fn list_segments(dir: &Path) -> Result<Vec<(u32, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".seg") else {
            continue;
        };
        if stem.len() != 8 {
            continue;
        }
        if let Ok(id) = u32::from_str_radix(stem, 16) {
            out.push((id, entry.path()));
        }
    }
    out.sort_unstable_by_key(|(id, _)| *id);
    Ok(out)
}

/// A scanned segment: the mapping and the items found in it (offsets
/// relative to the file start).
struct Loaded {
    seg: Arc<Segment>,
    items: Vec<Item>,
    /// Writable handle, for the newest segment of a writer.
    file: Option<File>,
}

fn damaged(path: &Path, reason: impl Into<String>) -> Error {
    Error::StoreDamaged {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Maps and scans one segment. `recover` (writer, newest segment): truncate
/// a torn tail and keep a writable handle.
fn load_segment(id: u32, path: &Path, opts: &MmapOptions, recover: bool) -> Result<Loaded> {
    let file = OpenOptions::new().read(true).write(recover).open(path)?;
    let file_len = file.metadata()?.len();
    // Only the newest segment of a writer may grow: map it at full size,
    // the others exactly.
    let cap = if recover {
        opts.segment_bytes.max(file_len)
    } else {
        file_len
    };
    let seg = Segment::map(&file, id, path, cap, file_len)?;
    let whole = seg
        .bytes(0, file_len)
        .ok_or_else(|| damaged(path, "segment larger than the address space"))?;
    let header_ok = format::parse_segment_header(whole) == Some(u64::from(id));
    let body = whole.get(SEGMENT_HEADER_LEN..).unwrap_or(&[]);
    let scan = format::scan(body);
    let shift = |i: Item| match i {
        Item::Block {
            cid,
            offset,
            len,
            intact,
        } => Item::Block {
            cid,
            offset: offset + SEGMENT_HEADER_LEN,
            len,
            intact,
        },
        Item::Commit { offset } => Item::Commit {
            offset: offset + SEGMENT_HEADER_LEN,
        },
        Item::Garbage { start, end } => Item::Garbage {
            start: start + SEGMENT_HEADER_LEN,
            end: end + SEGMENT_HEADER_LEN,
        },
    };
    let items: Vec<Item> = scan.items.into_iter().map(shift).collect();
    if !header_ok {
        if recover && items.is_empty() {
            // A segment created just before a crash: start it afresh.
            drop(seg);
            file.set_len(0)?;
            file.write_all_at(&format::segment_header(u64::from(id)), 0)?;
            file.sync_all()?;
            let seg = Segment::map(&file, id, path, cap, SEGMENT_HEADER_LEN as u64)?;
            return Ok(Loaded {
                seg: Arc::new(seg),
                items,
                file: Some(file),
            });
        }
        tracing::warn!(path = %path.display(), "segment header is damaged; scanning records anyway");
    }
    let end = (SEGMENT_HEADER_LEN + scan.end) as u64;
    if recover && header_ok && end < file_len {
        tracing::info!(
            path = %path.display(),
            torn_bytes = file_len - end,
            "truncating torn tail"
        );
        // Recovery happens before anything else maps this file.
        drop(seg);
        file.set_len(end)?;
        file.sync_all()?;
        let seg = Segment::map(&file, id, path, cap, end)?;
        return Ok(Loaded {
            seg: Arc::new(seg),
            items,
            file: Some(file),
        });
    }
    Ok(Loaded {
        seg: Arc::new(seg),
        items,
        file: recover.then_some(file),
    })
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
        fs::create_dir_all(&dir)?;
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
        match fs::remove_file(dir.join(roots::ROOTS_TMP)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let roots = roots::load(&dir)?;
        let segs = list_segments(&dir)?;
        let (state, last) = Self::load(&segs, &opts, true)?;
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
        sync_dir(&dir)?;
        Ok(MmapStore {
            dir,
            opts,
            read_only: false,
            _lock: Some(lock_file),
            state: RwLock::new(state),
            writer: Mutex::new(writer),
            roots: Mutex::new(roots),
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
            match Self::load(&segs, &opts, false) {
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
            roots: Mutex::new(roots),
        })
    }

    /// Scans all segments and builds the index. With `recover`, the newest
    /// segment is repaired and returned with its writable handle.
    fn load(
        segs: &[(u32, PathBuf)],
        opts: &MmapOptions,
        recover: bool,
    ) -> Result<(State, Option<Loaded>)> {
        let (newest, older) = match segs.split_last() {
            Some((n, o)) if recover => (Some(n), o),
            _ => (None, segs),
        };
        let mut loaded: Vec<Loaded> = older
            .par_iter()
            .map(|(id, path)| load_segment(*id, path, opts, false))
            .collect::<Result<_>>()?;
        if let Some((id, path)) = newest {
            loaded.push(load_segment(*id, path, opts, true)?);
        }
        let mut state = State::default();
        for l in &loaded {
            for item in &l.items {
                let Item::Block {
                    cid,
                    offset,
                    len,
                    intact,
                } = *item
                else {
                    continue;
                };
                let st = if intact { UNVERIFIED } else { DAMAGED };
                let loc = Loc::new(l.seg.id, offset as u64, len as u32, st);
                match state.index.get(&cid) {
                    Some(old) if !old.damaged() || !intact => {}
                    _ => {
                        state.index.insert(cid, loc);
                    }
                }
            }
            state.segments.insert(l.seg.id, l.seg.clone());
        }
        let last = if newest.is_some() { loaded.pop() } else { None };
        Ok((state, last))
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

    /// Creates segment `w.next_id` with room for at least `need` bytes.
    fn new_segment(&self, w: &mut Writer, need: u64) -> Result<()> {
        let id = w.next_id;
        w.next_id = id
            .checked_add(1)
            .ok_or_else(|| damaged(&self.dir, "segment ids exhausted"))?;
        let path = segment_path(&self.dir, id);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        file.write_all_at(&format::segment_header(u64::from(id)), 0)?;
        file.sync_all()?;
        sync_dir(&self.dir)?;
        let len = SEGMENT_HEADER_LEN as u64;
        let cap = self.opts.segment_bytes.max(len + need);
        let seg = Arc::new(Segment::map(&file, id, &path, cap, len)?);
        write(&self.state).segments.insert(id, seg.clone());
        w.active = Some(Active { seg, file, len });
        Ok(())
    }

    /// Appends a commit marker to the active segment and fsyncs it, if
    /// anything was appended since the last sync.
    fn sync_active(&self, w: &mut Writer) -> Result<()> {
        if !w.dirty {
            return Ok(());
        }
        if let Some(a) = w.active.as_mut() {
            let mut marker = Vec::with_capacity(format::COMMIT_LEN);
            format::encode_commit(&mut marker);
            // The marker may run past the mapping's capacity: it is never
            // read through this mapping, only by the scan of a later open.
            a.file.write_all_at(&marker, a.len)?;
            a.len += marker.len() as u64;
            a.file.sync_data()?;
        }
        w.dirty = false;
        Ok(())
    }

    /// Writes `buf` (whole records) at the end of the active segment,
    /// rolling over first if it does not fit. Returns (segment, offset).
    fn append(&self, w: &mut Writer, buf: &[u8]) -> Result<(u32, u64)> {
        let need = buf.len() as u64;
        // Records must lie inside the mapping; commit markers may run past
        // it (they are only read by the scan at open, through a new mapping).
        let fits = w
            .active
            .as_ref()
            .is_some_and(|a| a.len + need <= a.seg.capacity());
        if !fits {
            self.sync_active(w)?;
            w.active = None;
            self.new_segment(w, need)?;
        }
        let a = w
            .active
            .as_mut()
            .ok_or_else(|| damaged(&self.dir, "no active segment"))?;
        let off = a.len;
        a.file.write_all_at(buf, off)?;
        a.len += need;
        a.seg.set_written(a.len);
        w.dirty = true;
        Ok((a.seg.id, off))
    }

    fn write_blocks(&self, blocks: &[(Cid, &[u8])]) -> Result<()> {
        self.check_writable()?;
        for (cid, data) in blocks {
            if data.len() > format::MAX_BLOCK_LEN {
                return Err(Error::InvalidArgument(format!(
                    "block {cid} is {} bytes, above the {} byte limit",
                    data.len(),
                    format::MAX_BLOCK_LEN
                )));
            }
        }
        let mut w = lock(&self.writer);
        // Decide what to write under the writer lock: no other writer can
        // add these CIDs meanwhile.
        let mut todo: Vec<(Cid, &[u8])> = Vec::new();
        {
            let st = read(&self.state);
            let mut seen: HashSet<Cid, BuildHasherDefault<CidHasher>> = HashSet::default();
            for (cid, data) in blocks {
                let present = st.index.get(cid).is_some_and(|l| !l.damaged());
                if !present && seen.insert(*cid) {
                    todo.push((*cid, data));
                }
            }
        }
        let mut batch = Batch::default();
        let result = self.write_batch(&mut w, &todo, &mut batch);
        // Publish every record that reached the file, even after an error.
        let mut st = write(&self.state);
        for (cid, seg, off, len) in batch.placed {
            st.index.insert(cid, Loc::new(seg, off, len, VERIFIED));
        }
        result
    }

    /// Encodes `todo` into batches of whole records and appends them,
    /// starting a new batch where the active segment would overflow.
    fn write_batch(&self, w: &mut Writer, todo: &[(Cid, &[u8])], b: &mut Batch) -> Result<()> {
        for (cid, data) in todo {
            let rec = (BLOCK_OVERHEAD + data.len()) as u64;
            let room = w
                .active
                .as_ref()
                .map_or(self.opts.segment_bytes - SEGMENT_HEADER_LEN as u64, |a| {
                    a.seg.capacity().saturating_sub(a.len)
                });
            if !b.buf.is_empty() && b.buf.len() as u64 + rec > room {
                self.flush_batch(w, b)?;
            }
            b.pending
                .push((*cid, b.buf.len() as u64, data.len() as u32));
            format::encode_block(&mut b.buf, cid, data);
            if b.buf.len() >= MAX_BATCH_BYTES {
                self.flush_batch(w, b)?;
            }
        }
        self.flush_batch(w, b)
    }

    fn flush_batch(&self, w: &mut Writer, b: &mut Batch) -> Result<()> {
        if b.buf.is_empty() {
            return Ok(());
        }
        let (seg, off) = self.append(w, &b.buf)?;
        b.placed.extend(
            b.pending
                .drain(..)
                .map(|(c, rel, len)| (c, seg, off + rel, len)),
        );
        b.buf.clear();
        Ok(())
    }

    /// Durability point while holding the writer lock.
    fn commit_locked(&self, w: &mut Writer) -> Result<()> {
        self.sync_active(w)
    }

    fn update_roots(&self, f: impl FnOnce(&mut roots::Roots) -> bool) -> Result<bool> {
        self.check_writable()?;
        let mut cur = lock(&self.roots);
        let mut next = cur.clone();
        if !f(&mut next) {
            return Ok(false);
        }
        roots::store(&self.dir, &next)?;
        *cur = next;
        Ok(true)
    }

    fn compact(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        self.check_writable()?;
        let mut w = lock(&self.writer);
        self.commit_locked(&mut w)?;
        let mut stats = RetainStats::default();
        // Plan: which segments hold something to drop.
        let (victims, keep): (Vec<Arc<Segment>>, Vec<KeepEntry>) = {
            let st = read(&self.state);
            let mut kept_bytes: HashMap<u32, u64> = HashMap::new();
            let mut dirty: HashSet<u32> = HashSet::new();
            for (cid, loc) in &st.index {
                if live.contains(cid) {
                    if loc.damaged() {
                        return Err(Error::Corrupt {
                            cid: *cid,
                            reason: "a live block is damaged; put it again before collecting"
                                .into(),
                        });
                    }
                    stats.kept_blocks += 1;
                    *kept_bytes.entry(loc.seg).or_default() += loc.record_len();
                } else {
                    stats.removed_blocks += 1;
                    if !loc.damaged() {
                        stats.removed_bytes += u64::from(loc.len);
                    }
                    dirty.insert(loc.seg);
                }
            }
            // Also rewrite segments that are mostly waste (duplicates left by
            // an interrupted collection, damaged frames).
            for seg in st.segments.values() {
                let body = seg.written().saturating_sub(SEGMENT_HEADER_LEN as u64);
                let kept = kept_bytes.get(&seg.id).copied().unwrap_or(0);
                if body > 0 && kept < body / 2 {
                    dirty.insert(seg.id);
                }
            }
            let victims: Vec<Arc<Segment>> = st
                .segments
                .values()
                .filter(|s| dirty.contains(&s.id))
                .cloned()
                .collect();
            let mut keep: Vec<_> = st
                .index
                .iter()
                .filter(|(c, l)| dirty.contains(&l.seg) && live.contains(*c))
                .map(|(c, l)| (*c, l.seg, l.off, l.len, l.state.load(Ordering::Acquire)))
                .collect();
            keep.sort_unstable_by_key(|&(_, seg, off, _, _)| (seg, off));
            (victims, keep)
        };
        if victims.is_empty() {
            return Ok(stats);
        }
        // The writer only ever appends to the newest segment: retire the
        // active one so compaction output gets higher ids.
        self.sync_active(&mut w)?;
        w.active = None;
        // Copy live records into fresh segments.
        let mut moved: Vec<(Cid, u32, u64, u32)> = Vec::with_capacity(keep.len());
        let result = (|| -> Result<()> {
            let seg_of: HashMap<u32, &Arc<Segment>> = victims.iter().map(|s| (s.id, s)).collect();
            for &(cid, seg, off, len, state) in &keep {
                let src = seg_of
                    .get(&seg)
                    .and_then(|s| s.bytes(off + BLOCK_HEADER_LEN as u64, u64::from(len)));
                let Some(data) = src else {
                    return Err(Error::Corrupt {
                        cid,
                        reason: "record extends past the end of its segment".into(),
                    });
                };
                if state != VERIFIED && !cid.matches(data) {
                    self.mark(&cid, seg, off, DAMAGED);
                    return Err(Error::Corrupt {
                        cid,
                        reason: "content does not hash to the CID".into(),
                    });
                }
                let mut rec = Vec::with_capacity(BLOCK_OVERHEAD + data.len());
                format::encode_block(&mut rec, &cid, data);
                let (nseg, noff) = self.append(&mut w, &rec)?;
                moved.push((cid, nseg, noff, len));
            }
            self.sync_active(&mut w)?;
            sync_dir(&self.dir)
        })();
        if let Err(e) = result {
            // The index still points at the old segments, which are intact.
            // Output segments hold unindexed duplicates; the next collection
            // rewrites them as waste.
            w.active = None;
            w.dirty = false;
            return Err(e);
        }
        // Everything live is durable in the outputs: switch.
        {
            let mut st = write(&self.state);
            let victim_ids: HashSet<u32> = victims.iter().map(|s| s.id).collect();
            // Every dead entry lives in a victim segment (that is what made
            // it a victim), and the writer lock kept new blocks out.
            st.index.retain(|cid, _| live.contains(cid));
            for (cid, seg, off, len) in moved {
                st.index.insert(cid, Loc::new(seg, off, len, VERIFIED));
            }
            for id in &victim_ids {
                st.segments.remove(id);
            }
        }
        // The active segment (last output) keeps taking appends.
        for seg in &victims {
            if let Err(e) = fs::remove_file(&seg.path) {
                tracing::warn!(path = %seg.path.display(), error = %e, "could not remove retired segment");
            }
        }
        sync_dir(&self.dir)?;
        Ok(stats)
    }
}

impl BlockStore for MmapStore {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        self.read_block(cid, false)
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
        let mut w = lock(&self.writer);
        self.commit_locked(&mut w)
    }

    fn root(&self, name: &str) -> Result<Option<Bytes>> {
        validate_root_name(name)?;
        Ok(lock(&self.roots).get(name).cloned())
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
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn retain(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        self.compact(live)
    }
}
