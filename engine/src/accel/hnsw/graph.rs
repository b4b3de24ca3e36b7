//! The compact, read-only search layout of an HNSW graph.
//!
//! Invariants: node ids are dense `u32` in key order (so a key range is an id
//! interval); vectors live in one 64-byte-aligned arena (`Arena`); layer 0 is
//! a CSR adjacency (`l0_offsets[i]..l0_offsets[i+1]` into `l0_links`); each
//! upper layer is a CSR over its member ids (sorted, found by binary search,
//! which only the short greedy descent uses); keys are one byte arena with
//! offsets. Queries touch no hash map.

use super::{Adjacency, Hnsw};
use crate::accel::vectors::Arena;
use prox_kernels::Metric;

/// One upper layer: members (ascending ids) and their lists.
#[derive(Debug, Clone, Default)]
pub(crate) struct UpperLayer {
    nodes: Vec<u32>,
    offsets: Vec<usize>,
    links: Vec<u32>,
}

/// SQ8 traversal codes: one global symmetric scale, `i8` codes row-major
/// (`dims` per node) and each row's exact `Σ c²` (for L2).
#[derive(Debug, Clone)]
pub(crate) struct Sq8Codes {
    pub(crate) quantizer: prox_kernels::sq8::Quantizer,
    pub(crate) codes: Vec<i8>,
    pub(crate) norms: Vec<i32>,
}

impl Sq8Codes {
    /// Code row of node `id`.
    #[inline]
    pub(crate) fn row(&self, id: u32, dims: usize) -> &[i8] {
        let i = id as usize * dims;
        &self.codes[i..i + dims]
    }
}

/// Read-only HNSW search layout; build with [`Hnsw::search_graph`] or load
/// with [`super::load`].
#[derive(Debug, Clone)]
pub struct SearchGraph {
    pub(crate) metric: Metric,
    pub(crate) vectors: Arena,
    key_bytes: Vec<u8>,
    key_offsets: Vec<usize>,
    l0_offsets: Vec<usize>,
    l0_links: Vec<u32>,
    upper: Vec<UpperLayer>,
    pub(crate) entry: Option<u32>,
    pub(crate) max_level: u8,
    /// `masked[i]`: node `i` routes but is never returned (empty if none).
    pub(crate) masked: Vec<bool>,
    /// Ids of masked nodes, ascending.
    pub(crate) masked_ids: Vec<u32>,
    /// Optional SQ8 codes used for traversal (exact rerank from `vectors`).
    pub(crate) sq8: Option<Sq8Codes>,
}

impl Adjacency for SearchGraph {
    #[inline]
    fn neighbours(&self, node: u32, layer: usize) -> &[u32] {
        if layer == 0 {
            let i = node as usize;
            return &self.l0_links[self.l0_offsets[i]..self.l0_offsets[i + 1]];
        }
        match self.upper.get(layer - 1) {
            Some(l) => match l.nodes.binary_search(&node) {
                Ok(i) => &l.links[l.offsets[i]..l.offsets[i + 1]],
                Err(_) => &[],
            },
            None => &[],
        }
    }
}

impl SearchGraph {
    /// Lays out `parts` (already in key order): keys, vectors, per-node
    /// levels and per-node per-layer lists of ids, entry, masked flags.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn assemble(
        metric: Metric,
        vectors: Arena,
        keys: Vec<&[u8]>,
        levels: &[u8],
        lists: impl Fn(usize, usize) -> Vec<u32>,
        entry: Option<u32>,
        max_level: u8,
        masked: Vec<bool>,
    ) -> SearchGraph {
        let n = keys.len();
        let mut key_bytes = Vec::with_capacity(keys.iter().map(|k| k.len()).sum());
        let mut key_offsets = Vec::with_capacity(n + 1);
        key_offsets.push(0);
        for k in &keys {
            key_bytes.extend_from_slice(k);
            key_offsets.push(key_bytes.len());
        }
        let mut l0_offsets = Vec::with_capacity(n + 1);
        let mut l0_links = Vec::new();
        l0_offsets.push(0);
        let top = levels.iter().copied().max().unwrap_or(0).max(max_level);
        let mut upper: Vec<UpperLayer> = (0..top).map(|_| UpperLayer::default()).collect();
        for l in &mut upper {
            l.offsets.push(0);
        }
        for (i, &level) in levels.iter().enumerate() {
            l0_links.extend(lists(i, 0));
            l0_offsets.push(l0_links.len());
            for layer in 1..=usize::from(level) {
                let l = &mut upper[layer - 1];
                l.nodes.push(i as u32);
                l.links.extend(lists(i, layer));
                l.offsets.push(l.links.len());
            }
        }
        let masked_ids = masked
            .iter()
            .enumerate()
            .filter(|(_, &m)| m)
            .map(|(i, _)| i as u32)
            .collect::<Vec<_>>();
        let masked = if masked_ids.is_empty() {
            Vec::new()
        } else {
            masked
        };
        SearchGraph {
            metric,
            vectors,
            key_bytes,
            key_offsets,
            l0_offsets,
            l0_links,
            upper,
            entry,
            max_level,
            masked,
            masked_ids,
            sq8: None,
        }
    }

    /// Adds SQ8 codes (one global scale `max|x| / 127`) and makes queries
    /// traverse with the exact integer `i8 · i8` kernel instead of f32; the
    /// best candidates are then reranked from the f32 vectors (fast kernel,
    /// then canonical). Codes take a quarter of the f32 vectors' memory
    /// traffic. Dimensions above 130 000 are refused (i32 accumulator bound
    /// of `prox_kernels::sq8::dot_i8`).
    pub fn with_sq8(mut self) -> crate::error::Result<SearchGraph> {
        let d = self.dims();
        if d > 130_000 {
            return Err(crate::error::Error::InvalidArgument(
                "SQ8 traversal supports at most 130000 dimensions".into(),
            ));
        }
        let n = self.node_count();
        let mut max = 0f32;
        for i in 0..n {
            for &x in self.vectors.row(i) {
                max = max.max(x.abs());
            }
        }
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        let quantizer = prox_kernels::sq8::Quantizer::new(d, d, vec![scale])
            .map_err(|e| crate::error::Error::InvalidArgument(format!("sq8 quantizer: {e}")))?;
        let mut codes = vec![0i8; n * d];
        let mut norms = Vec::with_capacity(n);
        for (i, row) in codes.chunks_exact_mut(d).enumerate() {
            quantizer.encode(self.vectors.row(i), row);
            norms.push(row.iter().map(|&c| i32::from(c) * i32::from(c)).sum());
        }
        self.sq8 = Some(Sq8Codes {
            quantizer,
            codes,
            norms,
        });
        Ok(self)
    }

    /// The search layout of `h`: all nodes (masked ones flagged) renumbered
    /// in key order.
    pub(crate) fn from_hnsw(h: &Hnsw) -> SearchGraph {
        let n = h.keys.len();
        let mut perm: Vec<u32> = (0..n as u32).collect();
        perm.sort_by(|&a, &b| h.keys[a as usize].cmp(&h.keys[b as usize]));
        let mut new_of = vec![0u32; n];
        for (new, &old) in perm.iter().enumerate() {
            new_of[old as usize] = new as u32;
        }
        let levels: Vec<u8> = perm.iter().map(|&o| h.graph.levels[o as usize]).collect();
        let keys: Vec<&[u8]> = perm
            .iter()
            .map(|&o| h.keys[o as usize].as_slice())
            .collect();
        let masked: Vec<bool> = perm.iter().map(|&o| h.deleted[o as usize]).collect();
        SearchGraph::assemble(
            h.metric,
            h.vectors.permuted(&perm),
            keys,
            &levels,
            |i, layer| {
                let mut l: Vec<u32> = h.graph.links[perm[i] as usize][layer]
                    .iter()
                    .map(|&c| new_of[c as usize])
                    .collect();
                l.sort_unstable();
                l
            },
            h.graph.entry.map(|e| new_of[e as usize]),
            h.graph.max_level,
            masked,
        )
    }

    /// Number of nodes (including masked ones).
    pub fn node_count(&self) -> usize {
        self.key_offsets.len() - 1
    }

    /// Number of nodes a search may return.
    pub fn len(&self) -> usize {
        self.node_count() - self.masked_ids.len()
    }

    /// True when no node can be returned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        self.vectors.dims()
    }

    /// Metric.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Key of node `id` (ids are in key order).
    #[inline]
    pub fn key(&self, id: u32) -> &[u8] {
        let i = id as usize;
        &self.key_bytes[self.key_offsets[i]..self.key_offsets[i + 1]]
    }

    /// Vector of node `id`.
    #[inline]
    pub fn vector(&self, id: u32) -> &[f32] {
        self.vectors.row(id as usize)
    }

    /// True if node `id` is masked (deleted).
    #[inline]
    pub(crate) fn is_masked(&self, id: u32) -> bool {
        !self.masked.is_empty() && self.masked[id as usize]
    }

    /// First id whose key is `>= key`.
    pub(crate) fn lower_bound(&self, key: &[u8]) -> u32 {
        let n = self.node_count();
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid as u32) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo as u32
    }

    /// Approximate heap bytes of the layout (vectors, links, keys).
    pub fn heap_bytes(&self) -> usize {
        self.vectors.heap_bytes()
            + self
                .sq8
                .as_ref()
                .map_or(0, |q| q.codes.capacity() + q.norms.capacity() * 4)
            + self.key_bytes.capacity()
            + self.key_offsets.capacity() * 8
            + self.l0_offsets.capacity() * 8
            + self.l0_links.capacity() * 4
            + self
                .upper
                .iter()
                .map(|l| l.nodes.capacity() * 4 + l.offsets.capacity() * 8 + l.links.capacity() * 4)
                .sum::<usize>()
    }
}
