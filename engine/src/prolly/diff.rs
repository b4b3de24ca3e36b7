//! Diff between two snapshots, pruning equal subtrees by CID.
//!
//! Each side is a stream of "heads": either a subtree (first key, CID,
//! level) not yet read, or an entry of a leaf that was read. Rules, applied
//! to the two heads until both streams end:
//!
//! * two subtrees with the same CID hold the same entries: skip both
//!   without reading them;
//! * otherwise the head with the smaller first key that is an entry can be
//!   emitted (the other stream holds no key that small); a subtree in that
//!   position is expanded (read) one level;
//! * equal first keys: two entries are compared; otherwise the higher
//!   subtree (or both, at equal levels) is expanded.
//!
//! Output is the sorted logical merge (prolly-core.md 7.3): strictly
//! ascending keys, each at most once. For two canonical trees differing in
//! `d` keys the reads are O(height * d) nodes.

use super::tree::{load, load_child, Tree};
use super::Node;
use crate::cid::Cid;
use crate::error::Result;
use crate::store::BlockStore;
use std::cmp::Ordering;
use std::sync::Arc;

/// One difference between a base tree and another tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffEntry {
    /// Key only in the other tree.
    Added {
        /// The key.
        key: Vec<u8>,
        /// Its value in the other tree.
        value: Vec<u8>,
    },
    /// Key only in the base tree.
    Removed {
        /// The key.
        key: Vec<u8>,
        /// Its value in the base tree.
        value: Vec<u8>,
    },
    /// Key in both with different values.
    Changed {
        /// The key.
        key: Vec<u8>,
        /// Value in the base tree.
        old: Vec<u8>,
        /// Value in the other tree.
        new: Vec<u8>,
    },
}

impl DiffEntry {
    /// The key this difference is about.
    pub fn key(&self) -> &[u8] {
        match self {
            DiffEntry::Added { key, .. }
            | DiffEntry::Removed { key, .. }
            | DiffEntry::Changed { key, .. } => key,
        }
    }
}

/// One side of a diff: a stack of nodes whose index points at the next
/// head. Internal frames yield subtree heads, leaf frames yield entries.
struct Side<'s> {
    store: &'s dyn BlockStore,
    stack: Vec<(Arc<Node>, usize)>,
}

enum Head<'a> {
    Entry(&'a [u8], &'a [u8]),
    Subtree(&'a [u8], Cid, u8),
}

impl<'s> Side<'s> {
    fn new(store: &'s dyn BlockStore, root: Option<Cid>) -> Result<Self> {
        let mut stack = Vec::new();
        if let Some(root) = root {
            stack.push((load(store, &root)?, 0));
        }
        let mut side = Side { store, stack };
        side.settle();
        Ok(side)
    }

    /// Pops exhausted frames.
    fn settle(&mut self) {
        while let Some((n, i)) = self.stack.last() {
            if *i < n.len() {
                return;
            }
            self.stack.pop();
        }
    }

    fn head(&self) -> Result<Option<Head<'_>>> {
        let Some((n, i)) = self.stack.last() else {
            return Ok(None);
        };
        Ok(Some(if n.leaf {
            Head::Entry(&n.keys[*i], &n.vals[*i])
        } else {
            Head::Subtree(&n.keys[*i], n.child(*i)?, n.level - 1)
        }))
    }

    fn advance(&mut self) {
        if let Some((_, i)) = self.stack.last_mut() {
            *i += 1;
        }
        self.settle();
    }

    /// Replaces the subtree head by its node's items.
    fn expand(&mut self) -> Result<()> {
        let (n, i) = self.stack.last().expect("expand needs a subtree head");
        let child = load_child(self.store, n, *i)?;
        self.advance_frame_only();
        self.stack.push((child, 0));
        self.settle();
        Ok(())
    }

    fn advance_frame_only(&mut self) {
        if let Some((_, i)) = self.stack.last_mut() {
            *i += 1;
        }
    }

    fn take_entry(&mut self) -> (Vec<u8>, Vec<u8>) {
        let (n, i) = self.stack.last().expect("entry head");
        let e = (n.keys[*i].clone(), n.vals[*i].clone());
        self.advance();
        e
    }
}

/// Lazy diff iterator; see [`Tree::diff`]. Yields `Err` at most once.
pub struct Diff<'s> {
    base: Side<'s>,
    other: Side<'s>,
    done: bool,
    pending: Option<crate::Error>,
}

impl std::fmt::Debug for Diff<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Diff").field("done", &self.done).finish()
    }
}

enum Step {
    Emit(DiffEntry),
    Continue,
    End,
}

impl Diff<'_> {
    fn step(&mut self) -> Result<Step> {
        let (a, b) = match (self.base.head()?, self.other.head()?) {
            (None, None) => return Ok(Step::End),
            (Some(Head::Entry(..)), None) => {
                let (key, value) = self.base.take_entry();
                return Ok(Step::Emit(DiffEntry::Removed { key, value }));
            }
            (None, Some(Head::Entry(..))) => {
                let (key, value) = self.other.take_entry();
                return Ok(Step::Emit(DiffEntry::Added { key, value }));
            }
            (Some(Head::Subtree(..)), None) => {
                self.base.expand()?;
                return Ok(Step::Continue);
            }
            (None, Some(Head::Subtree(..))) => {
                self.other.expand()?;
                return Ok(Step::Continue);
            }
            (Some(a), Some(b)) => (a, b),
        };
        let key_of = |h: &Head<'_>| -> Vec<u8> {
            match h {
                Head::Entry(k, _) | Head::Subtree(k, _, _) => k.to_vec(),
            }
        };
        let (ka, kb) = (key_of(&a), key_of(&b));
        match (&a, &b) {
            (Head::Subtree(_, ca, _), Head::Subtree(_, cb, _)) if ca == cb => {
                self.base.advance();
                self.other.advance();
                return Ok(Step::Continue);
            }
            (Head::Entry(_, va), Head::Entry(_, vb)) if ka == kb => {
                let changed = va != vb;
                let (old, new) = (va.to_vec(), vb.to_vec());
                self.base.advance();
                self.other.advance();
                return Ok(if changed {
                    Step::Emit(DiffEntry::Changed { key: ka, old, new })
                } else {
                    Step::Continue
                });
            }
            _ => {}
        }
        let (la, lb) = (level_of(&a), level_of(&b));
        match ka.cmp(&kb) {
            Ordering::Less => {
                if la.is_none() {
                    let (key, value) = self.base.take_entry();
                    Ok(Step::Emit(DiffEntry::Removed { key, value }))
                } else {
                    self.base.expand()?;
                    Ok(Step::Continue)
                }
            }
            Ordering::Greater => {
                if lb.is_none() {
                    let (key, value) = self.other.take_entry();
                    Ok(Step::Emit(DiffEntry::Added { key, value }))
                } else {
                    self.other.expand()?;
                    Ok(Step::Continue)
                }
            }
            Ordering::Equal => {
                // At least one side is a subtree (equal-key entries and equal
                // CIDs were handled above): expand the higher one(s).
                let (ha, hb) = (la.map_or(-1, i32::from), lb.map_or(-1, i32::from));
                if ha >= hb {
                    self.base.expand()?;
                }
                if hb >= ha {
                    self.other.expand()?;
                }
                Ok(Step::Continue)
            }
        }
    }
}

fn level_of(h: &Head<'_>) -> Option<u8> {
    match h {
        Head::Entry(..) => None,
        Head::Subtree(_, _, l) => Some(*l),
    }
}

impl Iterator for Diff<'_> {
    type Item = Result<DiffEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            self.done = true;
            return Some(Err(e));
        }
        while !self.done {
            match self.step() {
                Ok(Step::Emit(e)) => return Some(Ok(e)),
                Ok(Step::Continue) => {}
                Ok(Step::End) => self.done = true,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

impl<'s> Tree<'s> {
    /// Differences from `self` (base) to `other`, in ascending key order.
    /// Both trees are read from `self`'s store. Identical roots read nothing.
    pub fn diff(&self, other: &Tree<'_>) -> Diff<'s> {
        self.diff_root(other.root)
    }

    /// [`diff`](Self::diff) against a root CID in the same store.
    pub fn diff_root(&self, other: Option<Cid>) -> Diff<'s> {
        let empty = |store| Side {
            store,
            stack: Vec::new(),
        };
        let mut d = Diff {
            base: empty(self.store),
            other: empty(self.store),
            done: self.root == other,
            pending: None,
        };
        if !d.done {
            match (
                Side::new(self.store, self.root),
                Side::new(self.store, other),
            ) {
                (Ok(b), Ok(o)) => {
                    d.base = b;
                    d.other = o;
                }
                (Err(e), _) | (_, Err(e)) => d.pending = Some(e),
            }
        }
        d
    }

    /// All differences collected (stops at the first error).
    pub fn diff_vec(&self, other: &Tree<'_>) -> Result<Vec<DiffEntry>> {
        self.diff(other).collect()
    }
}
