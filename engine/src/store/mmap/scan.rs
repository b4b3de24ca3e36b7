//! Opening a store: listing segment files, mapping and scanning each one,
//! repairing the torn tail of the newest, and building the index.

use super::format::{self, Item, SEGMENT_HEADER_LEN};
use super::io::Io;
use super::segment::Segment;
use super::{Loc, MmapOptions, State, DAMAGED, UNVERIFIED};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(super) fn list_segments(dir: &Path) -> Result<Vec<(u32, PathBuf)>> {
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
pub(super) struct Loaded {
    pub(super) seg: Arc<Segment>,
    pub(super) items: Vec<Item>,
    /// Writable handle, for the newest segment of a writer.
    pub(super) file: Option<File>,
    /// Byte ranges `[start, end)` holding no valid item: a damaged header,
    /// damage the scan resynchronised past, or an untruncated tail.
    pub(super) garbage: Vec<(u64, u64)>,
}

pub(super) fn damaged(path: &Path, reason: impl Into<String>) -> Error {
    Error::StoreDamaged {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Maps and scans one segment. `recover` (writer, newest segment): truncate
/// a torn tail and keep a writable handle.
fn load_segment(
    io: &Io,
    id: u32,
    path: &Path,
    opts: &MmapOptions,
    recover: bool,
) -> Result<Loaded> {
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
            io.set_len(&file, path, 0)?;
            io.write_at(&file, path, &format::segment_header(u64::from(id)), 0)?;
            io.sync(&file, path)?;
            let seg = Segment::map(&file, id, path, cap, SEGMENT_HEADER_LEN as u64)?;
            return Ok(Loaded {
                seg: Arc::new(seg),
                items,
                file: Some(file),
                garbage: Vec::new(),
            });
        }
        tracing::warn!(path = %path.display(), "segment header is damaged; scanning records anyway");
    }
    let mut garbage: Vec<(u64, u64)> = Vec::new();
    if !header_ok {
        garbage.push((0, (SEGMENT_HEADER_LEN as u64).min(file_len)));
    }
    garbage.extend(items.iter().filter_map(|i| match *i {
        Item::Garbage { start, end } => Some((start as u64, end as u64)),
        _ => None,
    }));
    let end = (SEGMENT_HEADER_LEN + scan.end) as u64;
    if recover && header_ok && end < file_len {
        tracing::info!(
            path = %path.display(),
            torn_bytes = file_len - end,
            "truncating torn tail"
        );
        // Recovery happens before anything else maps this file.
        drop(seg);
        io.set_len(&file, path, end)?;
        io.sync(&file, path)?;
        let seg = Segment::map(&file, id, path, cap, end)?;
        report_garbage(path, &garbage);
        return Ok(Loaded {
            seg: Arc::new(seg),
            items,
            file: Some(file),
            garbage,
        });
    }
    if end < file_len {
        // Not the newest segment of a writer (or its header is damaged):
        // bytes past the last valid item are damage, never truncated.
        garbage.push((end, file_len));
    }
    report_garbage(path, &garbage);
    Ok(Loaded {
        seg: Arc::new(seg),
        items,
        file: recover.then_some(file),
        garbage,
    })
}

fn report_garbage(path: &Path, garbage: &[(u64, u64)]) {
    if garbage.is_empty() {
        return;
    }
    tracing::warn!(
        path = %path.display(),
        ranges = garbage.len(),
        bytes = garbage.iter().map(|(s, e)| e - s).sum::<u64>(),
        "segment holds damaged ranges; records in them are unreadable (prox verify lists them)"
    );
}

/// Scans all segments and builds the index. With `recover`, the newest
/// segment is repaired and returned with its writable handle.
pub(super) fn load(
    io: &Io,
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
        .map(|(id, path)| load_segment(io, *id, path, opts, false))
        .collect::<Result<_>>()?;
    if let Some((id, path)) = newest {
        loaded.push(load_segment(io, *id, path, opts, true)?);
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
        if !l.garbage.is_empty() {
            state.garbage.insert(l.seg.id, l.garbage.clone());
        }
        state.segments.insert(l.seg.id, l.seg.clone());
    }
    let last = if newest.is_some() { loaded.pop() } else { None };
    Ok((state, last))
}
