//! Whole-tree statistics (reads every node once, level by level).

use super::tree::Tree;
use super::Node;
use crate::cid::Cid;
use crate::error::{Error, Result};

/// Shape and size of a tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TreeStats {
    /// Number of levels (0 for the empty tree, 1 for a single leaf).
    pub height: usize,
    /// Nodes reachable from the root.
    pub nodes: u64,
    /// Leaves among them.
    pub leaves: u64,
    /// Entries stored in the leaves.
    pub entries: u64,
    /// Total encoded bytes of all nodes.
    pub bytes: u64,
    /// Mean entries per leaf.
    pub mean_leaf_fill: f64,
    /// Mean children per internal node (0 without internal nodes).
    pub mean_fanout: f64,
}

impl Tree<'_> {
    /// Walks the whole tree and reports its shape. Missing or corrupt nodes
    /// are errors.
    pub fn stats(&self) -> Result<TreeStats> {
        let mut s = TreeStats::default();
        let Some(root) = self.root else { return Ok(s) };
        let mut level: Vec<Cid> = vec![root];
        let mut expected_level: Option<u8> = None;
        let mut internal_children = 0u64;
        while !level.is_empty() {
            s.height += 1;
            let blocks = self.store.get_many(&level)?;
            let mut next = Vec::new();
            for (cid, block) in level.iter().zip(blocks) {
                let bytes = block.ok_or(Error::NotFound { cid: *cid })?;
                let node = Node::decode(&bytes)?;
                if expected_level.is_some_and(|l| l != node.level) {
                    return Err(Error::invalid(
                        "prolly tree",
                        format!(
                            "node {cid} at level {} among level {:?} nodes",
                            node.level, expected_level
                        ),
                    ));
                }
                expected_level = Some(node.level);
                s.nodes += 1;
                s.bytes += bytes.len() as u64;
                if node.leaf {
                    s.leaves += 1;
                    s.entries += node.len() as u64;
                } else {
                    internal_children += node.len() as u64;
                    next.extend(node.child_cids()?);
                }
            }
            expected_level = expected_level.and_then(|l| l.checked_sub(1));
            if !next.is_empty() && expected_level.is_none() {
                return Err(Error::invalid("prolly tree", "children below a leaf level"));
            }
            level = next;
        }
        if s.leaves > 0 {
            s.mean_leaf_fill = s.entries as f64 / s.leaves as f64;
        }
        let internal = s.nodes - s.leaves;
        if internal > 0 {
            s.mean_fanout = internal_children as f64 / internal as f64;
        }
        Ok(s)
    }

    /// Every CID reachable from the root (for pinning and GC marking).
    pub fn reachable(&self) -> Result<Vec<Cid>> {
        let mut out = Vec::new();
        let Some(root) = self.root else {
            return Ok(out);
        };
        let mut level = vec![root];
        while !level.is_empty() {
            let blocks = self.store.get_many(&level)?;
            let mut next = Vec::new();
            for (cid, block) in level.iter().zip(blocks) {
                let bytes = block.ok_or(Error::NotFound { cid: *cid })?;
                let node = Node::decode(&bytes)?;
                if !node.leaf {
                    next.extend(node.child_cids()?);
                }
            }
            out.append(&mut level);
            level = next;
        }
        Ok(out)
    }
}
