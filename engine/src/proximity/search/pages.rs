//! The scan arena's leaf pages, in arena order, each loaded on first use.
//!
//! A page is reached through the hierarchy node that names it (its parent
//! entry), so the hierarchy and the arena share one decoded copy. An arena
//! built at open loads every page to quantize it; an arena read from a
//! persisted layout only names them, and a search then decodes just the
//! pages whose records it scores or whose keys it reads. A page is checked
//! when it is first handed out: it must be a leaf page with the record
//! count the arena gives it, else [`Error::Corrupt`].

use super::node::{Loader, Node};
use crate::cid::Cid;
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::sync::Arc;

/// Where a page comes from.
#[derive(Debug)]
enum Slot {
    /// The map is a single leaf page: the root itself.
    Root(Arc<Node>),
    /// Entry `entry` of `parent`.
    Child { parent: Arc<Node>, entry: u32 },
}

/// The arena's pages.
///
/// Invariant: `slots` and `lens` have one element per page, and a slot's
/// parent entry names a child (its CID was matched when the slot was made).
pub(crate) struct Pages {
    slots: Vec<Slot>,
    lens: Vec<usize>,
}

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pages")
            .field("pages", &self.slots.len())
            .field("loaded", &self.loaded())
            .finish()
    }
}

/// Collects page slots while walking a hierarchy.
pub(crate) struct PagesBuilder {
    pages: Pages,
}

impl PagesBuilder {
    pub(crate) fn new() -> PagesBuilder {
        PagesBuilder {
            pages: Pages {
                slots: Vec::new(),
                lens: Vec::new(),
            },
        }
    }

    /// Adds the root as the only page.
    pub(crate) fn root(&mut self, root: &Arc<Node>) {
        self.pages.slots.push(Slot::Root(root.clone()));
        self.pages.lens.push(root.len);
    }

    /// Adds entry `entry` of `parent` as a page of `len` records.
    pub(crate) fn child(&mut self, parent: &Arc<Node>, entry: usize, len: usize) {
        self.pages.slots.push(Slot::Child {
            parent: parent.clone(),
            entry: entry as u32,
        });
        self.pages.lens.push(len);
    }

    /// Pages added so far.
    pub(crate) fn len(&self) -> usize {
        self.pages.slots.len()
    }

    pub(crate) fn finish(self) -> Pages {
        self.pages
    }
}

impl Pages {
    /// Number of pages.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Records on page `p` (as the arena gives them; checked at load).
    pub(crate) fn len_of(&self, p: usize) -> usize {
        self.lens[p]
    }

    /// Page `p`'s CID.
    pub(crate) fn cid(&self, p: usize) -> Result<Cid> {
        match &self.slots[p] {
            Slot::Root(n) => Ok(n.cid),
            Slot::Child { parent, entry } => parent
                .child_cid(*entry as usize)
                .copied()
                .ok_or_else(|| no_child(parent, *entry)),
        }
    }

    /// Page `p`, decoded on first use.
    #[inline]
    pub(crate) fn get(&self, p: usize, loader: &Loader<'_>) -> Result<&Arc<Node>> {
        let node = match &self.slots[p] {
            Slot::Root(n) => n,
            Slot::Child { parent, entry } => match parent.loaded_child(*entry as usize) {
                Some(n) => n,
                None => parent.child(*entry as usize, loader)?,
            },
        };
        self.check(p, node)?;
        Ok(node)
    }

    /// Page `p` when it is already decoded.
    #[inline]
    pub(crate) fn loaded_page(&self, p: usize) -> Option<&Arc<Node>> {
        match &self.slots[p] {
            Slot::Root(n) => Some(n),
            Slot::Child { parent, entry } => parent.loaded_child(*entry as usize),
        }
    }

    /// Number of pages decoded so far.
    pub(crate) fn loaded(&self) -> usize {
        (0..self.slots.len())
            .filter(|&p| self.loaded_page(p).is_some())
            .count()
    }

    /// Every page in order, decoding the missing ones in parallel batches
    /// and checking each.
    pub(crate) fn all(&self, loader: &Loader<'_>) -> Result<Vec<Arc<Node>>> {
        let missing: Vec<usize> = (0..self.slots.len())
            .filter(|&p| self.loaded_page(p).is_none())
            .collect();
        for batch in missing.chunks(4096) {
            let cids: Vec<Cid> = batch.iter().map(|&p| self.cid(p)).collect::<Result<_>>()?;
            let nodes = loader.load_many(&cids)?;
            for (&p, node) in batch.iter().zip(nodes) {
                if let Slot::Child { parent, entry } = &self.slots[p] {
                    parent.adopt(*entry as usize, Arc::new(node))?;
                }
            }
        }
        (0..self.slots.len())
            .into_par_iter()
            .map(|p| self.get(p, loader).cloned())
            .collect()
    }

    /// A page must be a leaf page with the arena's record count.
    #[inline]
    fn check(&self, p: usize, node: &Node) -> Result<()> {
        if node.leafy && node.len == self.lens[p] {
            return Ok(());
        }
        Err(Error::Corrupt {
            cid: node.cid,
            reason: format!(
                "scan arena page {p} should be a leaf page of {} records (found {} entries, leaf: {})",
                self.lens[p], node.len, node.leafy
            ),
        })
    }
}

fn no_child(parent: &Node, entry: u32) -> Error {
    Error::Corrupt {
        cid: parent.cid,
        reason: format!("PRXN entry {entry} has no child"),
    }
}
