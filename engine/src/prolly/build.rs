//! Canonical bulk construction (prolly-core.md section 5).
//!
//! A level is chunked left to right with chunk-local counting (5.1); each
//! chunk becomes one node carrying the full config header; the next level
//! chunks the `(first key, CID)` pairs of those nodes, until one node
//! remains. The root is therefore a function of the entries and the config
//! alone. Within a level, boundary hashes and node encoding run in parallel
//! (rayon); only the boundary scan itself is sequential, so the output is
//! identical to a sequential build.

use super::boundary::{hash_test, is_boundary};
use super::{Config, Node};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::store::BlockStore;
use rayon::prelude::*;

/// A written node as its parent sees it: first key and CID.
pub(crate) type NodeRef = (Vec<u8>, Cid);

/// Items below which a level is built sequentially (rayon overhead).
const PAR_MIN_ITEMS: usize = 4096;

/// Canonical build from entries that are already sorted by key and unique.
///
/// Returns `None` for no entries (nothing is written). Unsorted input is
/// [`Error::InvalidArgument`], a repeated key [`Error::DuplicateKey`].
pub fn build_sorted<I: IntoIterator<Item = (Vec<u8>, Vec<u8>)>>(
    store: &dyn BlockStore,
    cfg: &Config,
    entries: I,
) -> Result<Option<Cid>> {
    cfg.validate()?;
    let entries: Vec<(Vec<u8>, Vec<u8>)> = entries.into_iter().collect();
    check_sorted_unique(&entries)?;
    build_checked(store, cfg, entries)
}

/// Canonical build from entries in any order: sorts them, then builds.
/// A key given twice is [`Error::DuplicateKey`].
pub fn build(
    store: &dyn BlockStore,
    cfg: &Config,
    mut entries: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Option<Cid>> {
    cfg.validate()?;
    if entries.len() >= PAR_MIN_ITEMS {
        entries.par_sort_by(|a, b| a.0.cmp(&b.0));
    } else {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
    }
    check_sorted_unique(&entries)?;
    build_checked(store, cfg, entries)
}

fn check_sorted_unique(entries: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
    for w in entries.windows(2) {
        match w[0].0.cmp(&w[1].0) {
            std::cmp::Ordering::Less => {}
            std::cmp::Ordering::Equal => {
                return Err(Error::DuplicateKey {
                    key: w[1].0.clone(),
                })
            }
            std::cmp::Ordering::Greater => {
                return Err(Error::InvalidArgument(format!(
                    "entries not sorted: key {} after {}",
                    hex::encode(&w[1].0),
                    hex::encode(&w[0].0)
                )))
            }
        }
    }
    Ok(())
}

fn build_checked(
    store: &dyn BlockStore,
    cfg: &Config,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Option<Cid>> {
    if entries.is_empty() {
        return Ok(None);
    }
    let leaves = build_level(store, cfg, 0, entries)?;
    grow(store, cfg, 0, leaves)
}

/// Builds parent levels over the nodes of `level` until one node remains
/// and returns its CID (`None` for no nodes).
pub(crate) fn grow(
    store: &dyn BlockStore,
    cfg: &Config,
    mut level: u8,
    mut refs: Vec<NodeRef>,
) -> Result<Option<Cid>> {
    while refs.len() > 1 {
        level = next_level(level)?;
        let items = refs.into_iter().map(|(k, c)| (k, c.0.to_vec())).collect();
        refs = build_level(store, cfg, level, items)?;
    }
    Ok(refs.pop().map(|(_, c)| c))
}

/// `level + 1`, or an error past 255 (a config that does not converge).
pub(crate) fn next_level(level: u8) -> Result<u8> {
    level.checked_add(1).ok_or_else(|| {
        Error::InvalidConfig("tree would exceed 256 levels; the config does not converge".into())
    })
}

/// Chunk boundaries of one level: exclusive end index of every chunk.
fn chunk_ends(cfg: &Config, items: &[(Vec<u8>, Vec<u8>)]) -> Vec<usize> {
    let flags: Vec<bool> = if items.len() >= PAR_MIN_ITEMS {
        items
            .par_iter()
            .map(|(k, v)| hash_test(cfg, k, v))
            .collect()
    } else {
        items.iter().map(|(k, v)| hash_test(cfg, k, v)).collect()
    };
    let mut ends = Vec::new();
    let mut start = 0;
    for (i, &hit) in flags.iter().enumerate() {
        let count = i - start + 1;
        if count >= cfg.min_chunk_size && (count >= cfg.max_chunk_size || hit) {
            ends.push(i + 1);
            start = i + 1;
        }
    }
    if start < items.len() {
        ends.push(items.len());
    }
    ends
}

/// Chunks one level of items into nodes, writes them, returns their refs.
fn build_level(
    store: &dyn BlockStore,
    cfg: &Config,
    level: u8,
    items: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Vec<NodeRef>> {
    let ends = chunk_ends(cfg, &items);
    let mut chunks: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::with_capacity(ends.len());
    let mut it = items.into_iter();
    let mut start = 0;
    for &end in &ends {
        chunks.push(it.by_ref().take(end - start).collect());
        start = end;
    }
    let encode = |chunk: Vec<(Vec<u8>, Vec<u8>)>| -> (Vec<u8>, Vec<u8>) {
        let mut node = Node::empty(cfg, level);
        let (keys, vals) = chunk.into_iter().unzip();
        node.keys = keys;
        node.vals = vals;
        let first = node.keys[0].clone();
        (first, node.encode())
    };
    let encoded: Vec<(Vec<u8>, Vec<u8>)> = if chunks.len() > 1 && start >= PAR_MIN_ITEMS {
        chunks.into_par_iter().map(encode).collect()
    } else {
        chunks.into_iter().map(encode).collect()
    };
    let blocks: Vec<&[u8]> = encoded.iter().map(|(_, b)| b.as_slice()).collect();
    let cids = store.put_many(&blocks)?;
    Ok(encoded.into_iter().map(|(k, _)| k).zip(cids).collect())
}

/// Sequential chunker for incremental rebuilds: feeds items one at a time
/// and writes each node as soon as its chunk closes.
pub(crate) struct Chunker<'a> {
    store: &'a dyn BlockStore,
    cfg: &'a Config,
    node: Node,
    /// Nodes written so far, in order.
    pub(crate) out: Vec<NodeRef>,
}

impl<'a> Chunker<'a> {
    pub(crate) fn new(store: &'a dyn BlockStore, cfg: &'a Config, level: u8) -> Self {
        Chunker {
            store,
            cfg,
            node: Node::empty(cfg, level),
            out: Vec::new(),
        }
    }

    /// Appends one item; returns true when it closed a chunk.
    pub(crate) fn push(&mut self, key: Vec<u8>, val: Vec<u8>) -> Result<bool> {
        let closes = is_boundary(self.cfg, self.node.len() + 1, &key, &val);
        self.node.keys.push(key);
        self.node.vals.push(val);
        if closes {
            self.flush()?;
        }
        Ok(closes)
    }

    /// True when no item is pending (the last push closed a chunk).
    pub(crate) fn at_boundary(&self) -> bool {
        self.node.is_empty()
    }

    fn flush(&mut self) -> Result<()> {
        let level = self.node.level;
        let node = std::mem::replace(&mut self.node, Node::empty(self.cfg, level));
        let bytes = node.encode();
        let cid = self.store.put(&bytes)?;
        let first = node.keys.into_iter().next().unwrap_or_default();
        self.out.push((first, cid));
        Ok(())
    }

    /// Emits the pending tail chunk (if any) and returns every node written.
    pub(crate) fn finish(mut self) -> Result<Vec<NodeRef>> {
        if !self.node.is_empty() {
            self.flush()?;
        }
        Ok(self.out)
    }
}
