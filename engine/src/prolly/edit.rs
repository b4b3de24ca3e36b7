//! Canonical writes: `put`, `delete` and `batch` as a splice (prolly-core.md
//! section 5.5).
//!
//! The result always equals a fresh [`build`](super::build) of the final
//! entries (history independence), while only the affected region is
//! re-chunked:
//!
//! * Level 0: chunking restarts at the first entry of the leaf the smallest
//!   mutation key routes to. Every earlier leaf closed on a boundary that
//!   depends only on its own entries, so it is reused untouched. The merged
//!   stream (old entries with the mutations applied) is chunked until all
//!   mutations are consumed AND a chunk has just closed exactly where an old
//!   leaf starts: from there the old chunking restarts fresh on identical
//!   input, so every later leaf is reused.
//! * Level `L > 0`: the items are the `(first key, CID)` pairs of level
//!   `L - 1`. The new sequence is `old[..a] ++ new ++ old[a + r..]`, where
//!   `new` replaced `r` old nodes starting at the path node `a`. Chunking
//!   restarts at the first child of the path's level-`L` node and stops by
//!   the same rule.
//! * Climbing stops when a level collapses to one node (the new root), when
//!   a level's new refs equal the refs they replace (nothing above changes),
//!   or at the old root's level, above which fresh levels are built.
//!
//! Reads are O(height + changed region) per level and writes are the new
//! nodes only. The splice assumes the input tree is canonical for its config
//! (every prox writer produces such trees); every node it reads must carry
//! the tree config's header, otherwise it fails with
//! [`Error::InvalidConfig`] instead of producing a non-canonical result.

use super::build::{build_sorted, grow, Chunker, NodeRef};
use super::tree::{load, load_child, Tree};
use super::{Config, Node};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::store::BlockStore;
use std::sync::Arc;

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Insert or replace `key` with `value` (an empty value is a value).
    Put(Vec<u8>, Vec<u8>),
    /// Remove `key` (absent keys are ignored).
    Delete(Vec<u8>),
}

impl Mutation {
    /// The key this mutation targets.
    pub fn key(&self) -> &[u8] {
        match self {
            Mutation::Put(k, _) | Mutation::Delete(k) => k,
        }
    }
}

impl<'s> Tree<'s> {
    /// A new snapshot with `key = value`.
    pub fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<Tree<'s>> {
        self.batch([Mutation::Put(key.into(), value.into())])
    }

    /// A new snapshot without `key`.
    pub fn delete(&self, key: impl Into<Vec<u8>>) -> Result<Tree<'s>> {
        self.batch([Mutation::Delete(key.into())])
    }

    /// Applies puts and deletes in one canonical splice. A key appearing
    /// twice in one batch is [`Error::DuplicateKey`].
    pub fn batch<I: IntoIterator<Item = Mutation>>(&self, mutations: I) -> Result<Tree<'s>> {
        let mut muts: Vec<Mutation> = mutations.into_iter().collect();
        muts.sort_by(|a, b| a.key().cmp(b.key()));
        for w in muts.windows(2) {
            if w[0].key() == w[1].key() {
                return Err(Error::DuplicateKey {
                    key: w[0].key().to_vec(),
                });
            }
        }
        if muts.is_empty() {
            return Ok(self.clone());
        }
        // One splice per group of mutations that route to the same leaf:
        // a splice re-chunks everything between its first and last
        // mutation, so grouping keeps a batch of k scattered keys at
        // O(k * height) node writes instead of O(span of the keys).
        let mut root = self.root;
        let mut rest: &[Mutation] = &muts;
        while !rest.is_empty() {
            let Some(r) = root else {
                let puts = rest.iter().filter_map(|m| match m {
                    Mutation::Put(k, v) => Some((k.clone(), v.clone())),
                    Mutation::Delete(_) => None,
                });
                root = build_sorted(self.store, &self.cfg, puts)?;
                break;
            };
            let n = match leaf_upper_bound(self.store, r, rest[0].key())? {
                Some(bound) => rest.partition_point(|m| m.key() < bound.as_slice()).max(1),
                None => rest.len(),
            };
            root = splice(self.store, &self.cfg, r, rest[..n].to_vec())?;
            rest = &rest[n..];
        }
        Ok(self.with_root(root))
    }
}

/// First key of the leaf after the one `key` routes to (`None` for the
/// last leaf): mutations below it start their splice in the same leaf.
fn leaf_upper_bound(store: &dyn BlockStore, root: Cid, key: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut node = load(store, &root)?;
    let mut bound = None;
    loop {
        if node.leaf || node.is_empty() {
            return Ok(bound);
        }
        let i = node.route(key).unwrap_or(0);
        if let Some(next) = node.keys.get(i + 1) {
            bound = Some(next.clone());
        }
        node = load_child(store, &node, i)?;
    }
}

/// Walks the items of every node at one level, left to right, starting at
/// the first item of a given node. Frames run from the root down to the
/// current node at `level`; each ancestor's index points at the child
/// below it.
struct Walker<'a> {
    store: &'a dyn BlockStore,
    cfg: &'a Config,
    level: u8,
    stack: Vec<(Arc<Node>, usize)>,
    /// Level-`level` nodes entered so far (including the start node).
    entered: usize,
}

impl<'a> Walker<'a> {
    fn new(
        store: &'a dyn BlockStore,
        cfg: &'a Config,
        path: &[(Arc<Node>, usize)],
        level: u8,
    ) -> Self {
        let depth = path.len() - level as usize;
        let mut stack: Vec<(Arc<Node>, usize)> = path[..depth].to_vec();
        if let Some(top) = stack.last_mut() {
            top.1 = 0;
        }
        Walker {
            store,
            cfg,
            level,
            stack,
            entered: 1,
        }
    }

    /// Moves to the next item if the current node is exhausted. Afterwards
    /// the stack is empty (end of level) or its top is a level node with an
    /// item at its index.
    fn settle(&mut self) -> Result<()> {
        loop {
            let Some((node, idx)) = self.stack.last() else {
                return Ok(());
            };
            if *idx < node.len() {
                if node.level == self.level {
                    return Ok(());
                }
                let child = load_child(self.store, node, *idx)?;
                if !self.cfg.matches_header(&child) {
                    return Err(header_mismatch(&child));
                }
                if child.level == self.level {
                    self.entered += 1;
                }
                self.stack.push((child, 0));
                continue;
            }
            self.stack.pop();
            if let Some((_, i)) = self.stack.last_mut() {
                *i += 1;
            }
        }
    }

    fn peek_key(&mut self) -> Result<Option<&[u8]>> {
        self.settle()?;
        Ok(self.stack.last().map(|(n, i)| n.keys[*i].as_slice()))
    }

    fn take(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.settle()?;
        let Some((node, i)) = self.stack.last_mut() else {
            return Ok(None);
        };
        let item = (node.keys[*i].clone(), node.vals[*i].clone());
        *i += 1;
        Ok(Some(item))
    }

    /// True when the next item starts a node (or the level is exhausted).
    fn at_node_start(&mut self) -> Result<bool> {
        self.settle()?;
        Ok(self.stack.last().is_none_or(|(_, i)| *i == 0))
    }

    /// Level nodes fully consumed so far (call after `at_node_start`).
    fn consumed(&self) -> usize {
        if self.stack.is_empty() {
            self.entered
        } else {
            self.entered - 1
        }
    }

    fn exhausted(&self) -> bool {
        self.stack.is_empty()
    }
}

fn header_mismatch(node: &Node) -> Error {
    Error::InvalidConfig(format!(
        "tree node at level {} was written under config {:?}, not the tree's config; a canonical splice needs matching headers",
        node.level,
        node.config()
    ))
}

/// The level-`level` result of a splice: the refs that replace `consumed`
/// old nodes starting at the path node, and whether old nodes exist before
/// (`prefix`) and after (`suffix`) the replaced run.
struct LevelEdit {
    new: Vec<NodeRef>,
    consumed: usize,
    prefix: bool,
    suffix: bool,
}

fn splice(
    store: &dyn BlockStore,
    cfg: &Config,
    root: Cid,
    muts: Vec<Mutation>,
) -> Result<Option<Cid>> {
    let root_node = load(store, &root)?;
    if !cfg.matches_header(&root_node) {
        return Err(header_mismatch(&root_node));
    }
    let height = root_node.level;
    let root_first = root_node.keys.first().cloned().unwrap_or_default();
    // Path root -> leaf along the smallest mutation key.
    let first_key = muts[0].key().to_vec();
    let mut path: Vec<(Arc<Node>, usize)> = Vec::with_capacity(height as usize + 1);
    let mut node = root_node;
    while !node.leaf {
        if node.is_empty() {
            return Err(Error::invalid("prolly tree", "empty internal node"));
        }
        let i = node.route(&first_key).unwrap_or(0);
        let child = load_child(store, &node, i)?;
        if !cfg.matches_header(&child) {
            return Err(header_mismatch(&child));
        }
        path.push((node, i));
        node = child;
    }
    path.push((node, 0));
    // path[j] is at level height - j.
    let prefix_at = |level: u8| {
        path[..path.len() - 1 - level as usize]
            .iter()
            .any(|(_, i)| *i > 0)
    };

    let mut edit = splice_leaves(store, cfg, &path, muts, prefix_at(0))?;
    let mut level = 0u8;
    let top = loop {
        if !edit.prefix && !edit.suffix && edit.new.len() <= 1 {
            break edit.new.pop().map(|(_, c)| c);
        }
        if level == height {
            // The root level has no prefix; a suffix can only be the old
            // root itself (the splice resynchronised before reaching it).
            let mut refs = edit.new;
            if edit.suffix {
                refs.push((root_first.clone(), root));
            }
            break grow(store, cfg, level, refs)?;
        }
        level += 1;
        let skip_at = path[path.len() - 1 - level as usize].1;
        match splice_internal(store, cfg, &path, level, skip_at, edit, prefix_at(level))? {
            Some(next) => edit = next,
            None => return Ok(Some(root)),
        }
    };
    collapse(store, top)
}

/// Strips single-child internal roots. The climb above stops when it sees
/// one node at a level, but a level whose only node is an old (suffix or
/// prefix) node is not recognised as single without counting old nodes, so
/// the climb may stack single-child parents on the true root; a canonical
/// root is never such a node (section 5.2), so descending through them
/// yields the canonical root.
fn collapse(store: &dyn BlockStore, mut root: Option<Cid>) -> Result<Option<Cid>> {
    while let Some(cid) = root {
        let node = load(store, &cid)?;
        if node.leaf || node.len() != 1 {
            break;
        }
        root = Some(node.child(0)?);
    }
    Ok(root)
}

fn splice_leaves(
    store: &dyn BlockStore,
    cfg: &Config,
    path: &[(Arc<Node>, usize)],
    muts: Vec<Mutation>,
    prefix: bool,
) -> Result<LevelEdit> {
    let mut w = Walker::new(store, cfg, path, 0);
    let mut chunker = Chunker::new(store, cfg, 0);
    let mut muts = muts.into_iter().peekable();
    loop {
        if muts.peek().is_none() && chunker.at_boundary() && w.at_node_start()? {
            break;
        }
        let order = match (w.peek_key()?, muts.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(k), Some(m)) => k.cmp(m.key()),
        };
        if order.is_le() {
            let (k, v) = w.take()?.expect("peeked item exists");
            if order.is_lt() {
                chunker.push(k, v)?;
                continue;
            }
        }
        match muts.next().expect("peeked mutation exists") {
            Mutation::Put(k, v) => {
                chunker.push(k, v)?;
            }
            Mutation::Delete(_) => {}
        }
    }
    let consumed = w.consumed();
    let suffix = !w.exhausted();
    Ok(LevelEdit {
        new: chunker.finish()?,
        consumed,
        prefix,
        suffix,
    })
}

/// Re-chunks level `level` given the edit of the level below. `None` when
/// the lower level's new refs equal the ones they replace (tree unchanged
/// from here up).
fn splice_internal(
    store: &dyn BlockStore,
    cfg: &Config,
    path: &[(Arc<Node>, usize)],
    level: u8,
    skip_at: usize,
    below: LevelEdit,
    prefix: bool,
) -> Result<Option<LevelEdit>> {
    let mut w = Walker::new(store, cfg, path, level);
    let mut chunker = Chunker::new(store, cfg, level);
    for _ in 0..skip_at {
        let (k, v) = w
            .take()?
            .ok_or_else(|| Error::invalid("prolly tree", "path index past node end"))?;
        chunker.push(k, v)?;
    }
    let mut replaced = Vec::with_capacity(below.consumed);
    for _ in 0..below.consumed {
        let item = w
            .take()?
            .ok_or_else(|| Error::invalid("prolly tree", "splice ran past the level end"))?;
        replaced.push(item);
    }
    let unchanged = replaced.len() == below.new.len()
        && replaced
            .iter()
            .zip(&below.new)
            .all(|((k, v), (nk, nc))| k == nk && v.as_slice() == nc.as_bytes());
    if unchanged {
        return Ok(None);
    }
    for (k, c) in below.new {
        chunker.push(k, c.0.to_vec())?;
    }
    loop {
        if chunker.at_boundary() && w.at_node_start()? {
            break;
        }
        match w.take()? {
            Some((k, v)) => {
                chunker.push(k, v)?;
            }
            None => break,
        }
    }
    let consumed = w.consumed();
    let suffix = !w.exhausted();
    Ok(Some(LevelEdit {
        new: chunker.finish()?,
        consumed,
        prefix,
        suffix,
    }))
}
