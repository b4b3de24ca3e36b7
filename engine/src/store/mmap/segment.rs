//! One memory-mapped segment file and the owning handle readers receive.

use crate::error::Result;
use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A segment file mapped read-only over `capacity` bytes.
///
/// The mapping may extend past the end of the file (the active segment is
/// mapped once at its full capacity and then grows by `write`): only the
/// first `written` bytes are ever dereferenced.
///
/// Invariants the `unsafe` code below relies on:
/// * `written <= capacity`, and the first `written` bytes of the file exist
///   (they were read from an existing file at open, or written by this
///   process with `pwrite` before `written` was raised).
/// * The store never truncates a segment file while it is mapped: torn tails
///   are cut by recovery *before* the file is mapped, and compaction retires
///   a segment by unlinking it, which leaves existing mappings intact. Other
///   processes only truncate bytes past the last valid record (recovery of a
///   torn append), which no index entry ever points into.
/// * Segment bytes below `written` are never rewritten (files are
///   append-only), so a slice handed out stays the same bytes while it lives.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) id: u32,
    pub(super) path: PathBuf,
    map: MmapRaw,
    written: AtomicU64,
}

impl Segment {
    /// Maps `file` (at least readable) over `capacity` bytes, of which the
    /// first `written` exist in the file.
    pub(super) fn map(
        file: &File,
        id: u32,
        path: &Path,
        capacity: u64,
        written: u64,
    ) -> Result<Segment> {
        let cap = usize::try_from(capacity.max(written).max(1)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "segment too large")
        })?;
        let map = MmapOptions::new().len(cap).map_raw_read_only(file)?;
        Ok(Segment {
            id,
            path: path.to_path_buf(),
            map,
            written: AtomicU64::new(written),
        })
    }

    /// Mapped capacity in bytes.
    pub(super) fn capacity(&self) -> u64 {
        self.map.len() as u64
    }

    /// Bytes known to exist in the file.
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Records that the file now holds at least `len` bytes. The caller has
    /// already written them (pwrite returned) and `len <= capacity`.
    pub(super) fn set_written(&self, len: u64) {
        debug_assert!(len <= self.capacity());
        self.written.fetch_max(len, Ordering::AcqRel);
    }

    /// The bytes `[off, off + len)` if they lie within the written part.
    pub(super) fn bytes(&self, off: u64, len: u64) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        if end > self.written() || end > self.capacity() {
            return None;
        }
        let off = usize::try_from(off).ok()?;
        let len = usize::try_from(len).ok()?;
        // SAFETY: `off + len <= written <= capacity`, so the range lies inside
        // the mapping and inside the file (first invariant on `Segment`); the
        // file is append-only and never truncated below `written` while
        // mapped (second and third invariants), so the memory stays readable
        // and unchanged for the lifetime of `&self`, which keeps the mapping
        // alive.
        Some(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off), len) })
    }
}

/// An owning handle to one block's bytes inside a segment mapping: the
/// `Arc` keeps the mapping alive even after the segment is retired by
/// compaction, so `Bytes` built from it never dangle.
#[derive(Debug)]
pub(super) struct BlockRef {
    seg: Arc<Segment>,
    off: u64,
    len: u64,
}

impl BlockRef {
    /// A handle to `[off, off + len)` of `seg`, if that range is readable.
    pub(super) fn new(seg: Arc<Segment>, off: u64, len: u64) -> Option<BlockRef> {
        seg.bytes(off, len)?;
        Some(BlockRef { seg, off, len })
    }
}

impl AsRef<[u8]> for BlockRef {
    fn as_ref(&self) -> &[u8] {
        // `new` checked the range, `written` only grows, so this is `Some`.
        self.seg.bytes(self.off, self.len).unwrap_or(&[])
    }
}
