//! Reading a tree: point lookups, cursors, lazy ranges, prefixes.
//!
//! A [`Tree`] is an immutable snapshot: a store, a config and an optional
//! root CID. Writes ([`Tree::batch`] and friends, see `edit.rs`) return a
//! new snapshot and leave the old one readable.
//!
//! Traversal trusts nothing it reads: a missing block is
//! [`Error::NotFound`], undecodable bytes are the codec's error, and a child
//! whose level is not exactly one below its parent (which would also let a
//! malicious store build cycles) is [`Error::InvalidObject`].

use super::manifest::RootManifest;
use super::{Config, Node};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::store::BlockStore;
use std::sync::Arc;

/// Loads and decodes the node `cid`.
pub(crate) fn load(store: &dyn BlockStore, cid: &Cid) -> Result<Arc<Node>> {
    let bytes = store.get(cid)?.ok_or(Error::NotFound { cid: *cid })?;
    Ok(Arc::new(Node::decode(&bytes)?))
}

/// Loads child `i` of `parent` and checks its level.
pub(crate) fn load_child(store: &dyn BlockStore, parent: &Node, i: usize) -> Result<Arc<Node>> {
    let cid = parent.child(i)?;
    let child = load(store, &cid)?;
    if u16::from(child.level) + 1 != u16::from(parent.level) {
        return Err(Error::invalid(
            "prolly tree",
            format!(
                "child {cid} has level {} under a parent of level {}",
                child.level, parent.level
            ),
        ));
    }
    Ok(child)
}

/// An immutable snapshot of a prolly tree over a borrowed block store.
///
/// Cheap to clone (a reference, a config and a CID). Every write method
/// returns a new `Tree`; the receiver is unchanged.
#[derive(Clone)]
pub struct Tree<'s> {
    pub(crate) store: &'s dyn BlockStore,
    pub(crate) cfg: Config,
    pub(crate) root: Option<Cid>,
}

impl std::fmt::Debug for Tree<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tree")
            .field("root", &self.root)
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl<'s> Tree<'s> {
    /// An empty tree with config `cfg` (validated).
    pub fn new(store: &'s dyn BlockStore, cfg: Config) -> Result<Self> {
        cfg.validate()?;
        Ok(Tree {
            store,
            cfg,
            root: None,
        })
    }

    /// A snapshot at `root`, written under `cfg` (validated). Nothing is read yet.
    pub fn open(store: &'s dyn BlockStore, cfg: Config, root: Option<Cid>) -> Result<Self> {
        cfg.validate()?;
        Ok(Tree { store, cfg, root })
    }

    /// The snapshot a manifest names.
    pub fn from_manifest(store: &'s dyn BlockStore, m: &RootManifest) -> Result<Self> {
        Tree::open(store, m.config.clone(), m.root)
    }

    /// A manifest for this snapshot (no timestamps).
    pub fn manifest(&self) -> RootManifest {
        RootManifest::new(self.root, self.cfg.clone())
    }

    /// Root CID; `None` for the empty tree.
    pub fn root(&self) -> Option<Cid> {
        self.root
    }

    /// The tree's config.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The backing store.
    pub fn store(&self) -> &'s dyn BlockStore {
        self.store
    }

    /// True for the empty tree.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// The same tree at another root.
    pub fn with_root(&self, root: Option<Cid>) -> Tree<'s> {
        Tree {
            store: self.store,
            cfg: self.cfg.clone(),
            root,
        }
    }

    /// The value stored under `key` (an empty value is `Some(vec![])`).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some(root) = self.root else {
            return Ok(None);
        };
        let mut node = load(self.store, &root)?;
        loop {
            let Some(i) = node.route(key) else {
                return Ok(None);
            };
            if node.leaf {
                return Ok((node.keys[i] == key).then(|| node.vals[i].clone()));
            }
            node = load_child(self.store, &node, i)?;
        }
    }

    /// True when `key` is present.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Lookups for many keys, answered in input order. Keys are visited in
    /// sorted order through one cursor so shared paths are read once.
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by(|&a, &b| keys[a].as_ref().cmp(keys[b].as_ref()));
        let mut out = vec![None; keys.len()];
        let mut cur = self.cursor();
        for i in order {
            let k = keys[i].as_ref();
            cur.seek(k)?;
            if let Some((ck, v)) = cur.peek()? {
                if ck == k {
                    out[i] = Some(v.to_vec());
                }
            }
        }
        Ok(out)
    }

    /// A cursor over the whole tree, positioned before the first entry.
    pub fn cursor(&self) -> Cursor<'s> {
        Cursor {
            store: self.store,
            root: self.root,
            stack: Vec::new(),
            positioned: false,
        }
    }

    /// Lazy ascending iteration over `start <= key < end` (`end = None`:
    /// to the last key). `end <= start` is empty. Nothing is read until the
    /// first `next`.
    pub fn range(&self, start: &[u8], end: Option<&[u8]>) -> Range<'s> {
        Range {
            cursor: self.cursor(),
            start: start.to_vec(),
            end: end.map(|e| e.to_vec()),
            started: false,
            done: end.is_some_and(|e| e <= start),
        }
    }

    /// Every entry, ascending.
    pub fn iter(&self) -> Range<'s> {
        self.range(&[], None)
    }

    /// Entries whose key starts with `prefix`: `range(prefix, prefix_end(prefix))`.
    pub fn prefix(&self, prefix: &[u8]) -> Range<'s> {
        let end = crate::keys::prefix_end(prefix);
        self.range(prefix, end.as_deref())
    }

    /// Smallest entry.
    pub fn first(&self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.iter().next().transpose()
    }

    /// Largest entry (follows the last slot at every level).
    pub fn last(&self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let Some(root) = self.root else {
            return Ok(None);
        };
        let mut node = load(self.store, &root)?;
        loop {
            let Some(i) = node.len().checked_sub(1) else {
                return Ok(None);
            };
            if node.leaf {
                return Ok(Some((node.keys[i].clone(), node.vals[i].clone())));
            }
            node = load_child(self.store, &node, i)?;
        }
    }
}

/// A position in a tree: the path of nodes from the root to a leaf.
///
/// Invariant once positioned: every frame but the last is an internal node
/// whose index points at the child below it; the last frame is a leaf and
/// its index is the next entry to yield (`== len` only transiently).
pub struct Cursor<'s> {
    store: &'s dyn BlockStore,
    root: Option<Cid>,
    stack: Vec<(Arc<Node>, usize)>,
    positioned: bool,
}

impl std::fmt::Debug for Cursor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("root", &self.root)
            .field("depth", &self.stack.len())
            .finish()
    }
}

impl Cursor<'_> {
    /// Positions the cursor at the first entry with key `>= key`.
    pub fn seek(&mut self, key: &[u8]) -> Result<()> {
        self.stack.clear();
        self.positioned = true;
        let Some(root) = self.root else { return Ok(()) };
        // Reuse nothing: a seek is O(height) reads.
        let mut node = load(self.store, &root)?;
        loop {
            if node.leaf {
                let i = match node.keys.binary_search_by(|k| k.as_slice().cmp(key)) {
                    Ok(i) | Err(i) => i,
                };
                self.stack.push((node, i));
                return self.settle();
            }
            let i = node.route(key).unwrap_or(0);
            if node.is_empty() {
                self.stack.push((node, 0));
                return self.settle();
            }
            let child = load_child(self.store, &node, i)?;
            self.stack.push((node, i));
            node = child;
        }
    }

    /// Positions the cursor at the first entry.
    pub fn seek_first(&mut self) -> Result<()> {
        self.seek(&[])
    }

    /// Moves forward until the top frame has an entry to yield or the
    /// stack is empty (end of tree).
    fn settle(&mut self) -> Result<()> {
        loop {
            let Some((node, i)) = self.stack.last() else {
                return Ok(());
            };
            if *i < node.len() {
                if node.leaf {
                    return Ok(());
                }
                let child = load_child(self.store, node, *i)?;
                self.stack.push((child, 0));
                continue;
            }
            self.stack.pop();
            match self.stack.last_mut() {
                Some((_, i)) => *i += 1,
                None => return Ok(()),
            }
        }
    }

    /// The entry the next call to [`next`](Self::next) returns, without
    /// advancing.
    pub fn peek(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if !self.positioned {
            self.seek_first()?;
        }
        Ok(self
            .stack
            .last()
            .map(|(n, i)| (n.keys[*i].as_slice(), n.vals[*i].as_slice())))
    }

    /// Returns the current entry and advances.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if !self.positioned {
            self.seek_first()?;
        }
        let Some((node, i)) = self.stack.last_mut() else {
            return Ok(None);
        };
        let out = (node.keys[*i].clone(), node.vals[*i].clone());
        *i += 1;
        self.settle()?;
        Ok(Some(out))
    }
}

/// Lazy iterator over a half-open key range. Yields `Err` at most once
/// (then ends) if a block is missing or corrupt.
pub struct Range<'s> {
    cursor: Cursor<'s>,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    started: bool,
    done: bool,
}

impl std::fmt::Debug for Range<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Range")
            .field("start", &hex::encode(&self.start))
            .field("end", &self.end.as_ref().map(hex::encode))
            .finish()
    }
}

impl Iterator for Range<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if !self.started {
            self.started = true;
            if let Err(e) = self.cursor.seek(&self.start) {
                self.done = true;
                return Some(Err(e));
            }
        }
        match self.cursor.next() {
            Ok(Some((k, v))) => {
                if self
                    .end
                    .as_ref()
                    .is_some_and(|e| k.as_slice() >= e.as_slice())
                {
                    self.done = true;
                    return None;
                }
                Some(Ok((k, v)))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
