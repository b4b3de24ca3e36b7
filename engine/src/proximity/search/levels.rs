//! Loading a hierarchy level by level.
//!
//! Every child the current frontier still lacks is fetched with one
//! [`crate::store::BlockStore::get_many`] (and one more for external
//! vectors, when the map stores them apart), then the frontier moves one
//! level down. A cold walk therefore costs as many dependent requests as
//! the hierarchy is deep, not one per node: on a remote store the requests
//! of a level run in parallel, on a local one the batch is a loop.

use super::node::{Loader, Node};
use crate::cid::Cid;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// Loads the subtrees below `start`, level by level, descending into every
/// node with children for which `descend` holds; returns the number of
/// node positions reached (the start nodes included, a shared subtree once
/// per position). Nodes already loaded are not fetched again.
pub(crate) fn expand(
    start: &[Arc<Node>],
    loader: &Loader<'_>,
    descend: impl Fn(&Node) -> bool,
) -> Result<usize> {
    let mut frontier: Vec<Arc<Node>> = start.to_vec();
    let mut reached = 0;
    while !frontier.is_empty() {
        reached += frontier.len();
        let parents: Vec<&Arc<Node>> = frontier.iter().filter(|n| !n.leafy && descend(n)).collect();
        let mut want: Vec<Cid> = Vec::new();
        let mut slot: HashMap<Cid, usize> = HashMap::new();
        for p in &parents {
            for i in (0..p.len).filter(|&i| p.loaded_child(i).is_none()) {
                let cid = *child_cid(p, i)?;
                slot.entry(cid).or_insert_with(|| {
                    want.push(cid);
                    want.len() - 1
                });
            }
        }
        if !want.is_empty() {
            let loaded: Vec<Arc<Node>> =
                loader.load_many(&want)?.into_iter().map(Arc::new).collect();
            for p in &parents {
                for i in (0..p.len).filter(|&i| p.loaded_child(i).is_none()) {
                    p.adopt(i, loaded[slot[child_cid(p, i)?]].clone())?;
                }
            }
        }
        frontier = parents
            .iter()
            .flat_map(|p| (0..p.len).filter_map(|i| p.loaded_child(i).cloned()))
            .collect();
    }
    Ok(reached)
}

/// Entry `i`'s child CID of a node with children.
fn child_cid(node: &Node, i: usize) -> Result<&Cid> {
    node.child_cid(i).ok_or_else(|| Error::Corrupt {
        cid: node.cid,
        reason: format!("PRXN entry {i} has no child"),
    })
}

/// True for the nodes whose children are above level 0 or summarize a
/// logical leaf: the part of the hierarchy the leaf catalogue reads.
pub(crate) fn upper(node: &Node) -> bool {
    node.level > 1 || (node.level == 1 && node.directory)
}
