//! HNSW sidecar: construction (canonical and fast), incremental mutation,
//! persistence (`HNSW` manifest + `HNSN` values in a `CRAB` tree) and the
//! compact search layout.
//!
//! Node ids are dense `u32` indexes. An [`Hnsw`] built from scratch numbers
//! its nodes in key order, so id order equals key order and the spec's key
//! tie-break is an id comparison; incremental inserts append ids (their key
//! order is restored by a permutation when the graph is persisted or laid out
//! for search). [`SearchGraph`] always numbers nodes in key order.

mod build_canonical;
mod build_fast;
mod filter;
mod graph;
mod persist;
mod search;
mod update;

pub use crate::keys::Filter;
pub use graph::SearchGraph;
pub use persist::{load, HnswSidecar};
pub(crate) use persist::{load_search_rows, read_leaves, sidecar_tree_config};
pub(crate) use search::top_k;
pub use search::{HnswSearchContext, HnswStats, IdHit, SearchOptions};
pub use update::GraphEdit;
// The former names, only until engine/tests/accel.rs moves to the new ones.
use super::params::{BuildKind, HnswParams};
use super::vectors::{check_records, check_vector, Arena};
use crate::error::{Error, Result};
use prox_kernels::Metric;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// Promotion level of a key (spec 12.3 with `level_bits` and `seed`),
/// capped at 64: `clz64(XXH64(key, seed)) / level_bits`.
pub(crate) fn node_level(key: &[u8], level_bits: u8, seed: u64) -> u8 {
    let h = xxhash_rust::xxh64::xxh64(key, seed);
    let level = h.leading_zeros() / u32::from(level_bits.max(1));
    level.min(64) as u8
}

/// A node id with a ranking score; ordered by `(score, id)` (total order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scored {
    pub(crate) score: f32,
    pub(crate) id: u32,
}

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(self.id.cmp(&other.id))
    }
}

/// Neighbour lists by `(node, layer)`.
pub(crate) trait Adjacency {
    /// The node's list on `layer` (empty when the node is below `layer`).
    fn neighbours(&self, node: u32, layer: usize) -> &[u32];

    /// Hints the cache lines of the node's list on `layer` without reading
    /// them (no-op unless the layout can do it without a load).
    #[inline]
    fn prefetch_list(&self, _node: u32, _layer: usize) {}
}

/// Visited set as a bitset (one bit per node, so 125 KB at a million nodes
/// stays in L2 where a word per node would miss on most probes) plus the
/// list of ids set since the last reset. Invariant: exactly the bits of
/// `touched` are set; `reset` clears only their words, so a traversal costs
/// time proportional to what it visited, not to `n`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Visited {
    bits: Vec<u64>,
    touched: Vec<u32>,
}

impl Visited {
    /// Starts a new traversal over `n` nodes.
    pub(crate) fn reset(&mut self, n: usize) {
        for &id in &self.touched {
            self.bits[id as usize >> 6] = 0;
        }
        self.touched.clear();
        let words = n.div_ceil(64);
        if self.bits.len() < words {
            self.bits.resize(words, 0);
        }
    }

    /// Marks `id`; returns `true` if it was not yet visited.
    #[inline]
    pub(crate) fn insert(&mut self, id: u32) -> bool {
        let (w, b) = (id as usize >> 6, 1u64 << (id & 63));
        let word = &mut self.bits[w];
        if *word & b != 0 {
            false
        } else {
            *word |= b;
            self.touched.push(id);
            true
        }
    }
}

/// Reusable best-first layer search state (heaps keep their capacity).
#[derive(Debug, Default, Clone)]
pub(crate) struct LayerSearch {
    pub(crate) visited: Visited,
    candidates: BinaryHeap<Reverse<Scored>>,
    pub(crate) results: BinaryHeap<Scored>,
    scratch: Vec<u32>,
}

impl LayerSearch {
    /// Greedy descent on one layer from `cur` (ef = 1).
    pub(crate) fn greedy<A: Adjacency, S: FnMut(u32) -> f32>(
        adj: &A,
        layer: usize,
        mut cur: Scored,
        score: &mut S,
    ) -> Scored {
        loop {
            let mut moved = false;
            for &nb in adj.neighbours(cur.id, layer) {
                let c = Scored {
                    score: score(nb),
                    id: nb,
                };
                if c < cur {
                    cur = c;
                    moved = true;
                }
            }
            if !moved {
                return cur;
            }
        }
    }

    /// Best-first search of `layer` from `entries` keeping the `ef` best
    /// *eligible* nodes in `self.results` (a max-heap). Ineligible nodes are
    /// traversed but never kept. `n` bounds the node ids.
    /// `prefetch` is called for every unvisited neighbour of an expanded
    /// node before any of them is scored.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn search_layer<A, S, E, P>(
        &mut self,
        adj: &A,
        n: usize,
        layer: usize,
        entries: &[Scored],
        ef: usize,
        score: &mut S,
        eligible: &E,
        prefetch: &P,
    ) where
        A: Adjacency,
        S: FnMut(u32) -> f32,
        E: Fn(u32) -> bool,
        P: Fn(u32),
    {
        self.candidates.clear();
        self.results.clear();
        self.visited.reset(n);
        let ef = ef.max(1);
        for &e in entries {
            if self.visited.insert(e.id) {
                self.candidates.push(Reverse(e));
                if eligible(e.id) {
                    self.results.push(e);
                    if self.results.len() > ef {
                        self.results.pop();
                    }
                }
            }
        }
        while let Some(Reverse(c)) = self.candidates.pop() {
            if self.results.len() >= ef {
                if let Some(worst) = self.results.peek() {
                    if c.score > worst.score {
                        break;
                    }
                }
            }
            // The likely next expansion: its list loads while `c`'s
            // neighbours are scored.
            if let Some(Reverse(next)) = self.candidates.peek() {
                adj.prefetch_list(next.id, layer);
            }
            self.scratch.clear();
            for &nb in adj.neighbours(c.id, layer) {
                if self.visited.insert(nb) {
                    prefetch(nb);
                    self.scratch.push(nb);
                }
            }
            for i in 0..self.scratch.len() {
                let nb = self.scratch[i];
                let s = Scored {
                    score: score(nb),
                    id: nb,
                };
                let full = self.results.len() >= ef;
                let worst = self.results.peek().map_or(f32::INFINITY, |w| w.score);
                if !full || s.score < worst {
                    self.candidates.push(Reverse(s));
                    if eligible(nb) {
                        self.results.push(s);
                        if self.results.len() > ef {
                            self.results.pop();
                        }
                    }
                }
            }
        }
    }

    /// Drains the results into `out`, ascending by `(score, id)`.
    pub(crate) fn drain_sorted(&mut self, out: &mut Vec<Scored>) {
        out.clear();
        out.extend(self.results.drain());
        out.sort_unstable();
    }
}

/// The diversifying neighbour heuristic (Malkov & Yashunin, algorithm 4,
/// without extension or pruned-connection refill): walk `cands` in
/// ascending `(score, id)` order and keep a candidate only if it is at least
/// as close to the base as to every neighbour kept so far. Deterministic.
pub(crate) fn select_heuristic<D: FnMut(u32, u32) -> f32>(
    cands: &[Scored],
    cap: usize,
    dist: &mut D,
) -> Vec<u32> {
    let mut kept: Vec<u32> = Vec::with_capacity(cap);
    for c in cands {
        if kept.len() >= cap {
            break;
        }
        if kept.iter().all(|&s| dist(c.id, s) >= c.score) {
            kept.push(c.id);
        }
    }
    kept
}

/// Mutable graph used while building: `links[node][layer]`.
#[derive(Debug, Clone, Default)]
pub(crate) struct BuildGraph {
    pub(crate) levels: Vec<u8>,
    pub(crate) links: Vec<Vec<Vec<u32>>>,
    pub(crate) entry: Option<u32>,
    pub(crate) max_level: u8,
}

impl Adjacency for BuildGraph {
    #[inline]
    fn neighbours(&self, node: u32, layer: usize) -> &[u32] {
        self.links[node as usize]
            .get(layer)
            .map_or(&[], Vec::as_slice)
    }
}

impl BuildGraph {
    /// Appends a node with empty lists on layers `0..=level`.
    pub(crate) fn push_node(&mut self, level: u8) {
        self.levels.push(level);
        self.links.push(vec![Vec::new(); usize::from(level) + 1]);
    }

    /// Number of nodes.
    pub(crate) fn len(&self) -> usize {
        self.levels.len()
    }
}

/// An HNSW graph with its keys and vectors, ready to mutate, persist or lay
/// out for search.
#[derive(Debug, Clone)]
pub struct Hnsw {
    metric: Metric,
    params: HnswParams,
    keys: Vec<Vec<u8>>,
    vectors: Arena,
    graph: BuildGraph,
    deleted: Vec<bool>,
    deleted_count: usize,
    /// Key-sorted live ids; rebuilt after every mutation.
    order: Vec<u32>,
    canonical: bool,
}

impl Hnsw {
    /// Builds a graph over `records` (prepared vectors, strictly ascending
    /// keys) with the construction `params.build` selects.
    pub fn build(
        metric: Metric,
        dims: usize,
        records: &[(Vec<u8>, Vec<f32>)],
        params: &HnswParams,
    ) -> Result<Hnsw> {
        params.validate()?;
        check_records(records, dims)?;
        let vectors = Arena::from_rows(dims, records.iter().map(|(_, v)| v.as_slice()));
        let keys: Vec<Vec<u8>> = records.iter().map(|(k, _)| k.clone()).collect();
        Ok(Self::build_parts(metric, keys, vectors, params))
    }

    /// [`build`](Self::build) consuming `records`: each vector is freed as
    /// soon as it is copied into the arena, so peak memory holds one copy of
    /// the vectors instead of two.
    pub fn build_owned(
        metric: Metric,
        dims: usize,
        records: Vec<(Vec<u8>, Vec<f32>)>,
        params: &HnswParams,
    ) -> Result<Hnsw> {
        params.validate()?;
        check_records(&records, dims)?;
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(records.len());
        let vectors = Arena::from_owned_rows(
            dims,
            records.into_iter().map(|(k, v)| {
                keys.push(k);
                v
            }),
        );
        Ok(Self::build_parts(metric, keys, vectors, params))
    }

    /// [`build`](Self::build) from keys (strictly ascending) and their
    /// vectors as one row-major buffer of `keys.len() * dims` floats, which
    /// becomes the vector arena without a copy when `dims` is a multiple of
    /// 16: the lowest-memory way to build from a large file.
    pub fn build_flat(
        metric: Metric,
        dims: usize,
        keys: Vec<Vec<u8>>,
        flat: Vec<f32>,
        params: &HnswParams,
    ) -> Result<Hnsw> {
        params.validate()?;
        if dims == 0 {
            return Err(Error::InvalidArgument("dimensions must be > 0".into()));
        }
        if flat.len() != keys.len() * dims {
            return Err(Error::WrongDimension {
                expected: keys.len() * dims,
                got: flat.len(),
                key: None,
            });
        }
        for (i, k) in keys.iter().enumerate() {
            if i > 0 && keys[i - 1] >= *k {
                return Err(if keys[i - 1] == *k {
                    Error::DuplicateKey { key: k.clone() }
                } else {
                    Error::InvalidArgument(format!(
                        "keys are not in ascending order at key {}",
                        hex::encode(k)
                    ))
                });
            }
            check_vector(&flat[i * dims..(i + 1) * dims], dims, Some(k))?;
        }
        let vectors = Arena::from_flat(dims, flat);
        Ok(Self::build_parts(metric, keys, vectors, params))
    }

    fn build_parts(
        metric: Metric,
        keys: Vec<Vec<u8>>,
        vectors: Arena,
        params: &HnswParams,
    ) -> Hnsw {
        let graph = match params.build {
            BuildKind::Canonical => build_canonical::build(metric, &keys, &vectors, params),
            BuildKind::Fast => {
                let mut g = BuildGraph::default();
                build_fast::insert(&mut g, metric, &keys, &vectors, params, 0);
                g
            }
        };
        let n = keys.len();
        Hnsw {
            metric,
            params: *params,
            keys,
            vectors,
            graph,
            deleted: vec![false; n],
            deleted_count: 0,
            order: (0..n as u32).collect(),
            canonical: params.build == BuildKind::Canonical,
        }
    }

    /// Metric of the source map.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        self.vectors.dims()
    }

    /// Parameters the graph was built with.
    pub fn params(&self) -> &HnswParams {
        &self.params
    }

    /// Live (unmasked) node count.
    pub fn len(&self) -> usize {
        self.keys.len() - self.deleted_count
    }

    /// True when no live node exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the graph is the spec's canonical construction of its
    /// records (a canonical build that was not mutated incrementally).
    pub fn is_canonical(&self) -> bool {
        self.canonical && self.deleted_count == 0
    }

    /// Highest layer.
    pub fn max_level(&self) -> u8 {
        self.graph.max_level
    }

    fn find(&self, key: &[u8]) -> Option<u32> {
        self.order
            .binary_search_by(|&id| self.keys[id as usize].as_slice().cmp(key))
            .ok()
            .map(|i| self.order[i])
    }

    fn rebuild_order(&mut self) {
        let mut order: Vec<u32> = (0..self.keys.len() as u32)
            .filter(|&i| !self.deleted[i as usize])
            .collect();
        order.sort_unstable_by(|&a, &b| self.keys[a as usize].cmp(&self.keys[b as usize]));
        self.order = order;
    }

    /// Adds records (any order; keys must be new). A fast graph is extended
    /// in place (new nodes are inserted with the same batched procedure as
    /// the build); a canonical graph is rebuilt canonically so that it stays
    /// byte-identical with a clean build (spec 12.13).
    pub fn insert(&mut self, records: &[(Vec<u8>, Vec<f32>)]) -> Result<()> {
        let dims = self.dims();
        let mut sorted: Vec<&(Vec<u8>, Vec<f32>)> = records.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (i, (k, v)) in sorted.iter().enumerate() {
            check_vector(v, dims, Some(k))?;
            if (i > 0 && sorted[i - 1].0 == *k) || self.find(k).is_some() {
                return Err(Error::DuplicateKey { key: k.clone() });
            }
        }
        if self.canonical && self.params.build == BuildKind::Canonical {
            let mut all = self.live_records();
            all.extend(sorted.iter().map(|r| (*r).clone()));
            all.sort_by(|a, b| a.0.cmp(&b.0));
            *self = Hnsw::build(self.metric, dims, &all, &self.params)?;
            return Ok(());
        }
        let start = self.keys.len();
        self.vectors = self
            .vectors
            .extended(sorted.iter().map(|(_, v)| v.as_slice()));
        self.keys.extend(sorted.iter().map(|(k, _)| k.clone()));
        self.deleted.resize(self.keys.len(), false);
        build_fast::insert(
            &mut self.graph,
            self.metric,
            &self.keys,
            &self.vectors,
            &self.params,
            start,
        );
        self.canonical = false;
        self.rebuild_order();
        Ok(())
    }

    /// Masks `keys`: they stay in the graph for routing but are never
    /// returned; [`compact`](Self::compact) (also run by persisting) removes
    /// them. Returns how many live keys were masked.
    pub fn delete(&mut self, keys: &[Vec<u8>]) -> usize {
        let mut n = 0;
        for k in keys {
            if let Some(id) = self.find(k) {
                self.deleted[id as usize] = true;
                self.deleted_count += 1;
                n += 1;
            }
        }
        if n > 0 {
            self.rebuild_order();
        }
        n
    }

    /// Live records in key order (copies).
    fn live_records(&self) -> Vec<(Vec<u8>, Vec<f32>)> {
        self.order
            .iter()
            .map(|&i| {
                (
                    self.keys[i as usize].clone(),
                    self.vectors.row(i as usize).to_vec(),
                )
            })
            .collect()
    }

    /// Removes masked nodes. A canonical graph is rebuilt canonically; a fast
    /// graph is repaired in place: every list that named a removed node is
    /// re-selected (heuristic, then the nearest others up to its former
    /// length) from its surviving members and every live node two hops away
    /// through its members, and the entry point moves to the first
    /// (lowest id) node of the highest remaining level.
    pub fn compact(&mut self) -> Result<()> {
        if self.deleted_count == 0 {
            return Ok(());
        }
        if self.canonical && self.params.build == BuildKind::Canonical {
            let all = self.live_records();
            *self = Hnsw::build(self.metric, self.dims(), &all, &self.params)?;
            return Ok(());
        }
        build_fast::compact(self);
        Ok(())
    }

    /// Builds the read-only search layout (ids renumbered in key order,
    /// masked nodes excluded from results but kept for routing).
    pub fn search_graph(&self) -> SearchGraph {
        SearchGraph::from_hnsw(self)
    }

    /// [`search_graph`](Self::search_graph) consuming the graph: when ids
    /// are already in key order (a build without later inserts) the vector
    /// arena is moved instead of copied.
    pub fn into_search_graph(self) -> SearchGraph {
        SearchGraph::from_hnsw_owned(self)
    }
}

#[cfg(test)]
mod visited_tests {
    use super::Visited;

    #[test]
    fn visited_is_a_set_that_resets() {
        let mut v = Visited::default();
        v.reset(200);
        for round in 0..3u32 {
            let ids: Vec<u32> = (0..200).filter(|i| (i * 7 + round) % 3 == 0).collect();
            for &i in &ids {
                assert!(v.insert(i), "round {round}: {i} fresh");
                assert!(!v.insert(i), "round {round}: {i} seen");
            }
            for i in 0..200 {
                assert_eq!(v.insert(i), !ids.contains(&i), "round {round}: {i}");
            }
            v.reset(if round == 1 { 1000 } else { 200 });
        }
        assert!(v.insert(999));
    }
}
