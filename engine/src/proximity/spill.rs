//! Spill files of the bounded-memory build ([`super::stream`]): runs of
//! items sorted in memory, written to disk, and merged back in order.
//!
//! File layout of one item (little-endian, no framing beyond lengths):
//! `group u32, index u32, key_len u32, key, dims × f32, value_len u32,
//! value`. The files are private scratch space of one build: they are
//! created in the spill directory under a name unique to the process and
//! removed when the [`Spill`] is dropped (also on error).

use crate::error::{Error, Result};
use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// Largest key or value a spill file may declare (anything larger is a
/// damaged file, not data this build wrote).
const MAX_FIELD: usize = 1 << 30;

/// Read buffer per run while merging: at most this, at least
/// [`MIN_MERGE_BUFFER`], else an equal share of the merge's budget.
const MERGE_BUFFER: usize = 256 << 10;
const MIN_MERGE_BUFFER: usize = 8 << 10;

/// One record in flight: its key, prepared vector and value, plus the
/// group and key-order index the later phases attach.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Item {
    pub(crate) group: u32,
    pub(crate) index: u32,
    pub(crate) key: Vec<u8>,
    pub(crate) vector: Vec<f32>,
    pub(crate) value: Vec<u8>,
}

/// Memory an item holds (heap bytes plus its inline size), the unit of
/// every memory budget of the streaming build.
pub(crate) fn item_bytes(key: usize, dims: usize, value: usize) -> usize {
    std::mem::size_of::<Item>() + key + 4 * dims + value
}

impl Item {
    pub(crate) fn bytes(&self) -> usize {
        item_bytes(self.key.len(), self.vector.len(), self.value.len())
    }

    fn write(&self, w: &mut impl Write) -> std::io::Result<usize> {
        w.write_all(&self.group.to_le_bytes())?;
        w.write_all(&self.index.to_le_bytes())?;
        w.write_all(&(self.key.len() as u32).to_le_bytes())?;
        w.write_all(&self.key)?;
        for x in &self.vector {
            w.write_all(&x.to_le_bytes())?;
        }
        w.write_all(&(self.value.len() as u32).to_le_bytes())?;
        w.write_all(&self.value)?;
        Ok(16 + self.key.len() + 4 * self.vector.len() + self.value.len())
    }

    /// Reads the next item of `dims` components; `None` at a clean end.
    fn read(r: &mut impl Read, dims: usize) -> Result<Option<Item>> {
        let mut head = [0u8; 4];
        match r.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let group = u32::from_le_bytes(head);
        let index = read_u32(r)?;
        let key = read_blob(r)?;
        let mut raw = vec![0u8; 4 * dims];
        r.read_exact(&mut raw)?;
        let vector = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let value = read_blob(r)?;
        Ok(Some(Item {
            group,
            index,
            key,
            vector,
            value,
        }))
    }
}

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_blob(r: &mut impl Read) -> Result<Vec<u8>> {
    let n = read_u32(r)? as usize;
    if n > MAX_FIELD {
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("spill file declares a {n}-byte field"),
        )));
    }
    let mut v = vec![0u8; n];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// The order of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortBy {
    /// By key (the input runs).
    Key,
    /// By group, then key-order index (the clustering runs).
    Group,
}

impl SortBy {
    fn cmp(self, a: &Item, b: &Item) -> Ordering {
        match self {
            SortBy::Key => a.key.cmp(&b.key),
            SortBy::Group => (a.group, a.index).cmp(&(b.group, b.index)),
        }
    }
}

/// A sorted run: on disk, or still in memory when everything fit.
pub(crate) enum Run {
    File(PathBuf),
    Mem(Vec<Item>),
}

/// The spill directory of one build and the files it created there.
pub(crate) struct Spill {
    dir: PathBuf,
    files: Vec<PathBuf>,
    dims: usize,
    written: AtomicU64,
}

impl Spill {
    /// Spills into `dir` (created if missing) items of `dims` components.
    pub(crate) fn new(dir: &Path, dims: usize) -> Result<Spill> {
        std::fs::create_dir_all(dir)?;
        sweep_stale(dir);
        Ok(Spill {
            dir: dir.to_path_buf(),
            files: Vec::new(),
            dims,
            written: AtomicU64::new(0),
        })
    }

    /// Bytes written to spill files so far.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(AtomicOrdering::Relaxed)
    }

    fn create(&mut self) -> Result<(PathBuf, BufWriter<File>)> {
        let path = self.dir.join(format!(
            "prox-build-{}-{}.spill",
            std::process::id(),
            self.files.len()
        ));
        let f = File::create(&path)?;
        self.files.push(path.clone());
        Ok((path, BufWriter::with_capacity(1 << 20, f)))
    }

    /// Sorts `items` by `by` and writes them as one run file.
    pub(crate) fn write_run(&mut self, mut items: Vec<Item>, by: SortBy) -> Result<Run> {
        items.par_sort_unstable_by(|a, b| by.cmp(a, b));
        let (path, mut w) = self.create()?;
        let mut n = 0u64;
        for it in &items {
            n += it.write(&mut w)? as u64;
        }
        w.flush()?;
        self.written.fetch_add(n, AtomicOrdering::Relaxed);
        Ok(Run::File(path))
    }

    /// Sorts `items` by `by` and keeps them in memory as a run.
    pub(crate) fn mem_run(mut items: Vec<Item>, by: SortBy) -> Run {
        items.par_sort_unstable_by(|a, b| by.cmp(a, b));
        Run::Mem(items)
    }

    /// A file written in arrival order (no sort): [`Spill::reader`] reads
    /// it back in the same order.
    pub(crate) fn sequential(&mut self) -> Result<SeqWriter> {
        let (path, w) = self.create()?;
        Ok(SeqWriter {
            path,
            w,
            written: 0,
        })
    }

    /// Counts the bytes of a finished sequential file.
    pub(crate) fn account(&self, w: &SeqWriter) {
        self.written.fetch_add(w.written, AtomicOrdering::Relaxed);
    }

    /// Reads a file written by this spill, in file order.
    pub(crate) fn reader(&self, path: &Path) -> Result<FileItems> {
        Ok(FileItems {
            r: BufReader::with_capacity(1 << 20, File::open(path)?),
            dims: self.dims,
        })
    }

    /// Merges `runs` (each sorted by `by`) into one stream sorted by `by`,
    /// with read buffers sharing `budget` bytes.
    pub(crate) fn merge(&self, runs: Vec<Run>, by: SortBy, budget: usize) -> Result<Merge> {
        let buffer = (budget / runs.len().max(1)).clamp(MIN_MERGE_BUFFER, MERGE_BUFFER);
        let mut sources = Vec::with_capacity(runs.len());
        for run in runs {
            sources.push(match run {
                Run::File(p) => Source::File(FileItems {
                    r: BufReader::with_capacity(buffer, File::open(p)?),
                    dims: self.dims,
                }),
                Run::Mem(v) => Source::Mem(v.into_iter()),
            });
        }
        let mut m = Merge {
            by,
            heap: BinaryHeap::with_capacity(sources.len()),
            sources,
        };
        for i in 0..m.sources.len() {
            m.refill(i)?;
        }
        Ok(m)
    }
}

/// Removes the spill files of builds whose process is gone (killed before
/// it could clean up), where `/proc` tells which processes run.
fn sweep_stale(dir: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("prox-build-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if rest.ends_with(".spill") && !Path::new(&format!("/proc/{pid}")).exists() {
            // Best effort, like the removal on drop.
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        for f in &self.files {
            // Best effort: a file already gone is fine.
            let _ = std::fs::remove_file(f);
        }
    }
}

/// An unsorted spill file being written.
pub(crate) struct SeqWriter {
    pub(crate) path: PathBuf,
    w: BufWriter<File>,
    written: u64,
}

impl SeqWriter {
    pub(crate) fn push(&mut self, item: &Item) -> Result<()> {
        self.written += item.write(&mut self.w)? as u64;
        Ok(())
    }

    pub(crate) fn finish(&mut self) -> Result<()> {
        self.w.flush()?;
        Ok(())
    }
}

/// Items of one spill file in file order.
pub(crate) struct FileItems {
    r: BufReader<File>,
    dims: usize,
}

impl Iterator for FileItems {
    type Item = Result<Item>;

    fn next(&mut self) -> Option<Result<Item>> {
        Item::read(&mut self.r, self.dims).transpose()
    }
}

enum Source {
    File(FileItems),
    Mem(std::vec::IntoIter<Item>),
}

struct Head {
    by: SortBy,
    item: Item,
    source: usize,
}

impl PartialEq for Head {
    fn eq(&self, o: &Head) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, o: &Head) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Head {
    /// Reversed, so the max-heap pops the smallest item (ties by source).
    fn cmp(&self, o: &Head) -> Ordering {
        self.by
            .cmp(&o.item, &self.item)
            .then(o.source.cmp(&self.source))
    }
}

/// A k-way merge of sorted runs.
pub(crate) struct Merge {
    by: SortBy,
    heap: BinaryHeap<Head>,
    sources: Vec<Source>,
}

impl Merge {
    fn refill(&mut self, i: usize) -> Result<()> {
        let next = match &mut self.sources[i] {
            Source::File(f) => f.next().transpose()?,
            Source::Mem(v) => v.next(),
        };
        if let Some(item) = next {
            self.heap.push(Head {
                by: self.by,
                item,
                source: i,
            });
        }
        Ok(())
    }

    /// The smallest group number not yet returned (group-sorted merges).
    pub(crate) fn peek_group(&self) -> Option<u32> {
        self.heap.peek().map(|h| h.item.group)
    }
}

impl Iterator for Merge {
    type Item = Result<Item>;

    fn next(&mut self) -> Option<Result<Item>> {
        let head = self.heap.pop()?;
        if let Err(e) = self.refill(head.source) {
            return Some(Err(e));
        }
        Some(Ok(head.item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &[u8], group: u32, index: u32) -> Item {
        Item {
            group,
            index,
            key: key.to_vec(),
            vector: vec![index as f32, -1.5],
            value: key.iter().rev().copied().collect(),
        }
    }

    #[test]
    fn runs_merge_in_order_from_disk_and_memory() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::new(dir.path(), 2).unwrap();
        let a = s
            .write_run(vec![item(b"m", 0, 0), item(b"a", 0, 1)], SortBy::Key)
            .unwrap();
        let b = Spill::mem_run(vec![item(b"z", 0, 2), item(b"c", 0, 3)], SortBy::Key);
        let c = s.write_run(vec![], SortBy::Key).unwrap();
        let keys: Vec<Vec<u8>> = s
            .merge(vec![a, b, c], SortBy::Key, 1 << 20)
            .unwrap()
            .map(|i| i.unwrap().key)
            .collect();
        assert_eq!(
            keys,
            vec![b"a".to_vec(), b"c".to_vec(), b"m".to_vec(), b"z".to_vec()]
        );
        assert!(s.written() > 0);
        let files = s.files.clone();
        drop(s);
        assert!(
            files.iter().all(|f| !f.exists()),
            "spill files removed on drop"
        );
    }

    #[test]
    fn group_order_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::new(dir.path(), 2).unwrap();
        let items = vec![item(b"x", 2, 5), item(b"y", 1, 9), item(b"w", 2, 1)];
        let run = s.write_run(items.clone(), SortBy::Group).unwrap();
        let got: Vec<Item> = s
            .merge(vec![run], SortBy::Group, 1 << 20)
            .unwrap()
            .map(|i| i.unwrap())
            .collect();
        assert_eq!(
            got,
            vec![items[1].clone(), items[2].clone(), items[0].clone()]
        );
    }

    #[test]
    fn damaged_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::new(dir.path(), 2).unwrap();
        let mut w = s.sequential().unwrap();
        w.push(&item(b"k", 0, 0)).unwrap();
        w.finish().unwrap();
        let path = w.path.clone();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let r: Vec<Result<Item>> = s.reader(&path).unwrap().collect();
        assert!(r.len() == 1 && r[0].is_err());
        let mut big = bytes.clone();
        big[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &big).unwrap();
        assert!(s.reader(&path).unwrap().next().unwrap().is_err());
    }
}
