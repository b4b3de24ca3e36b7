//! The leaf catalogue: every logical leaf's representative in one flat,
//! contiguous table, so the adaptive search ranks all leaves with a single
//! kernel call instead of walking the routes node by node.
//!
//! A logical leaf (level 0, possibly split into overflow pages under a
//! directory) is summarized by exactly one entry of a level-1 node that is
//! not a directory: a route, or an overflow page of an oversized level-1
//! node. The catalogue lists those entries in hierarchy order (the order of
//! a depth-first walk over entry indexes), which is a function of the
//! descriptor only, so rankings and tie-breaks are the same everywhere.
//! (Covering radii are not kept: ranking by `distance − α·radius` lowered
//! recall for every `α > 0` tried on the benchmark datasets.)
//! Building it loads every node above level 0 (a small fraction of the
//! hierarchy: about one node in `2^log_chunk_size`), level by level.

use super::node::{Loader, Node};
use super::quant::QuantStats;
use crate::error::Result;
use std::sync::Arc;

/// All level-1 entries that summarize a logical leaf.
///
/// Invariants: `parents` and `stats` have one element per entry,
/// `codes` holds `len·dims` codes (entry-major) copied from the parents,
/// and `parents[i].0.child(parents[i].1)` is a level-0 node (a leaf, or a
/// directory of leaf pages).
#[derive(Debug, Default)]
pub(crate) struct Catalogue {
    /// `(level-1 node, entry index)` of each leaf summary.
    pub(crate) parents: Vec<(Arc<Node>, u32)>,
    /// The entries' codes, contiguous.
    pub(crate) codes: Vec<i8>,
    /// The entries' code scalars.
    pub(crate) stats: Vec<QuantStats>,
}

impl Catalogue {
    /// Collects the leaf summaries below `root`. Empty when the root itself
    /// is at level 0 (the whole map is one logical leaf).
    pub(crate) fn build(root: &Arc<Node>, loader: &Loader<'_>, dims: usize) -> Result<Catalogue> {
        // One batched read per level for whatever is not loaded yet.
        super::levels::expand(std::slice::from_ref(root), loader, super::levels::upper)?;
        let mut cat = Catalogue::default();
        // Explicit stack in reverse entry order, so entries are listed in
        // depth-first, entry-index order.
        let mut stack: Vec<Arc<Node>> = vec![root.clone()];
        while let Some(node) = stack.pop() {
            if node.level == 0 {
                continue;
            }
            if node.level == 1 && !node.directory {
                let quant = node.quant();
                for i in 0..node.len {
                    cat.parents.push((node.clone(), i as u32));
                    cat.codes
                        .extend_from_slice(&quant.codes[i * dims..(i + 1) * dims]);
                    cat.stats.push(quant.stats[i]);
                }
                continue;
            }
            for i in (0..node.len).rev() {
                stack.push(node.child(i, loader)?.clone());
            }
        }
        Ok(cat)
    }

    /// Number of leaf summaries.
    pub(crate) fn len(&self) -> usize {
        self.parents.len()
    }

    /// `[min_key, max_key]` of summary `i`'s leaf.
    #[inline]
    pub(crate) fn bounds(&self, i: usize) -> (&[u8], &[u8]) {
        let (node, idx) = &self.parents[i];
        node.bounds(*idx as usize)
    }
}
