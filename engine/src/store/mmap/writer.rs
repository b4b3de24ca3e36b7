//! The write path: batching records, appending them to the active segment,
//! rolling over to a new segment, and the commit marker plus fsync.

use super::format::{self, BLOCK_OVERHEAD, SEGMENT_HEADER_LEN};
use super::scan::damaged;
use super::segment::Segment;
use super::{lock, read, segment_path, write, CidHasher, Loc, MmapStore, VERIFIED};
use crate::cid::Cid;
use crate::error::{Error, Result};
use std::collections::HashSet;
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

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
pub(super) struct Active {
    pub(super) seg: Arc<Segment>,
    pub(super) file: File,
    pub(super) len: u64,
}

#[derive(Debug, Default)]
pub(super) struct Writer {
    /// Invariant: when set, the active segment has the highest id.
    pub(super) active: Option<Active>,
    pub(super) next_id: u32,
    /// Records were appended to the active segment since its last fsync.
    pub(super) dirty: bool,
    /// Length of the active segment at its last successful fsync: records
    /// at or past it are not durable yet.
    pub(super) synced_len: u64,
}

impl MmapStore {
    /// Creates segment `w.next_id` with room for at least `need` bytes.
    pub(super) fn new_segment(&self, w: &mut Writer, need: u64) -> Result<()> {
        let id = w.next_id;
        w.next_id = id
            .checked_add(1)
            .ok_or_else(|| damaged(&self.dir, "segment ids exhausted"))?;
        let path = segment_path(&self.dir, id);
        let file = self.io.create_new(&path)?;
        self.io
            .write_at(&file, &path, &format::segment_header(u64::from(id)), 0)?;
        self.io.sync(&file, &path)?;
        self.io.sync_dir(&self.dir)?;
        let len = SEGMENT_HEADER_LEN as u64;
        let cap = self.opts.segment_bytes.max(len + need);
        let seg = Arc::new(Segment::map(&file, id, &path, cap, len)?);
        write(&self.state).segments.insert(id, seg.clone());
        w.active = Some(Active { seg, file, len });
        w.synced_len = len;
        Ok(())
    }

    /// Appends a commit marker to the active segment and fsyncs it, if
    /// anything was appended since the last sync.
    pub(super) fn sync_active(&self, w: &mut Writer) -> Result<()> {
        if !w.dirty {
            return Ok(());
        }
        if let Some(a) = w.active.as_mut() {
            let mut marker = Vec::with_capacity(format::COMMIT_LEN);
            format::encode_commit(&mut marker);
            // The marker may run past the mapping's capacity: it is never
            // read through this mapping, only by the scan of a later open.
            self.io.write_at(&a.file, &a.seg.path, &marker, a.len)?;
            a.len += marker.len() as u64;
            self.io.sync(&a.file, &a.seg.path)?;
            w.synced_len = a.len;
        }
        w.dirty = false;
        Ok(())
    }

    /// Writes `buf` (whole records) at the end of the active segment,
    /// rolling over first if it does not fit. Returns (segment, offset).
    pub(super) fn append(&self, w: &mut Writer, buf: &[u8]) -> Result<(u32, u64)> {
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
        self.io.write_at(&a.file, &a.seg.path, buf, off)?;
        a.len += need;
        a.seg.set_written(a.len);
        w.dirty = true;
        Ok((a.seg.id, off))
    }

    pub(super) fn write_blocks(&self, blocks: &[(Cid, &[u8])]) -> Result<()> {
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
        if let Err(e) = self.write_batch(&mut w, &todo, &mut batch) {
            // Nothing of a failed call is published: its records may not
            // have reached the disk (and after a failed write, neither may
            // anything else not yet fsynced).
            return Err(self.fail(&mut w, e));
        }
        let mut st = write(&self.state);
        for (cid, seg, off, len) in batch.placed {
            st.index.insert(cid, Loc::new(seg, off, len, VERIFIED));
        }
        Ok(())
    }

    /// Handles a failed write path operation: an I/O error poisons the
    /// store and withdraws every record not yet fsynced from the index, so
    /// `has` never claims a block the disk may not hold.
    pub(super) fn fail(&self, w: &mut Writer, e: Error) -> Error {
        if !matches!(e, Error::Io(_)) {
            return e;
        }
        let e = self.poison_on_io(e);
        if let Some(a) = w.active.take() {
            let (seg, synced) = (a.seg.id, w.synced_len);
            write(&self.state)
                .index
                .retain(|_, l| l.seg != seg || l.off < synced);
        }
        w.dirty = false;
        e
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
    pub(super) fn commit_locked(&self, w: &mut Writer) -> Result<()> {
        self.sync_active(w).map_err(|e| self.fail(w, e))
    }
}
