//! The compact, read-only search layout of an HNSW graph.
//!
//! Invariants: node ids are dense `u32` in key order (so a key range is an id
//! interval); vectors live in one 64-byte-aligned arena (`Arena`); layer 0 is
//! one fixed-stride, 64-byte-aligned *block* per node ([`Layer0`]: link count,
//! links, then optionally the node's traversal code: SQ8 plus its norm, or
//! an m-byte PQ code), so one
//! expansion reads one contiguous block and scoring a neighbour pulls in the
//! links it will need if it is expanded later; each upper layer is a CSR over
//! its member ids (sorted, found by binary search, which only the short
//! greedy descent uses); keys are one byte arena with offsets. Queries touch
//! no hash map.

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

/// Layer 0 as fixed-stride byte blocks, one per node.
///
/// Block `i` starts at `base + i * stride` (a multiple of 64 bytes from a
/// 64-byte-aligned start) and holds, little endian: `count: u32`, `cap`
/// link slots (`u32`, the first `count` used, ascending), then `code_len`
/// traversal code bytes: with SQ8, `dims` `i8` bytes followed by the code's
/// exact `Σ c²` as `i32` (`has_norm`); with PQ, the node's `m` PQ code
/// bytes (no norm); without codes, nothing. `cap` is the longest layer-0
/// list of the graph, so every list fits.
#[derive(Debug, Clone, Default)]
pub(crate) struct Layer0 {
    data: Vec<u8>,
    base: usize,
    stride: usize,
    cap: usize,
    code_len: usize,
    has_norm: bool,
}

/// Writes node `i`'s code bytes into the buffer.
type Encoder<'a> = dyn FnMut(usize, &mut [u8]) + 'a;

/// Block alignment in bytes.
const BLOCK_ALIGN: usize = 64;

impl Layer0 {
    /// Block stride for lists of up to `cap` links and `code_len` code bytes
    /// (plus a 4-byte norm if `has_norm`).
    fn stride_for(cap: usize, code_len: usize, has_norm: bool) -> usize {
        let used = 4 + 4 * cap + code_len + if has_norm { 4 } else { 0 };
        used.div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN
    }

    /// Writes node `i`'s code (`codes(i, ..)`) and, if `has_norm`, its `Σ c²`
    /// (code read as `i8`) into block `b` after `cap` link slots.
    fn write_code(
        b: &mut [u8],
        i: usize,
        cap: usize,
        code: &mut [u8],
        has_norm: bool,
        codes: &mut Encoder<'_>,
    ) {
        codes(i, code);
        let at = 4 + 4 * cap;
        b[at..at + code.len()].copy_from_slice(code);
        if has_norm {
            let norm: i32 = prox_kernels::cast::as_i8(code)
                .iter()
                .map(|&c| i32::from(c) * i32::from(c))
                .sum();
            b[at + code.len()..at + code.len() + 4].copy_from_slice(&norm.to_le_bytes());
        }
    }

    /// Blocks for `n` nodes with lists of at most `cap` links, node `i`'s
    /// written by `lists(i, buf)` into the cleared `buf` (one reused buffer:
    /// no per-node list is held next to the blocks) and, if `codes` is
    /// given, each node's code (`code_len` bytes) written by `codes(i, out)`,
    /// followed, if `has_norm`, by the code's `Σ c²` read as `i8` (SQ8).
    fn build(
        n: usize,
        cap: usize,
        lists: &mut dyn FnMut(usize, &mut Vec<u32>),
        code_len: usize,
        has_norm: bool,
        mut codes: Option<&mut Encoder<'_>>,
    ) -> Layer0 {
        let has_norm = has_norm && code_len > 0;
        let stride = Self::stride_for(cap, code_len, has_norm);
        let mut data = vec![0u8; n * stride + BLOCK_ALIGN];
        // Searches probe blocks at random: huge pages keep them in the TLB.
        prox_kernels::prefetch::advise_huge_pages(&data, false);
        // align_offset may legally return usize::MAX; then fall back to 0.
        let base = match data.as_ptr().align_offset(BLOCK_ALIGN) {
            off if off < BLOCK_ALIGN => off,
            _ => 0,
        };
        let mut code = vec![0u8; code_len];
        let mut list: Vec<u32> = Vec::with_capacity(cap);
        for i in 0..n {
            list.clear();
            lists(i, &mut list);
            assert!(list.len() <= cap, "layer-0 list longer than its cap");
            let b = &mut data[base + i * stride..base + (i + 1) * stride];
            b[..4].copy_from_slice(&(list.len() as u32).to_le_bytes());
            for (slot, &id) in b[4..4 + 4 * list.len()].chunks_exact_mut(4).zip(&list) {
                slot.copy_from_slice(&id.to_le_bytes());
            }
            if let Some(f) = codes.as_mut() {
                Self::write_code(b, i, cap, &mut code, has_norm, f);
            }
        }
        Layer0 {
            data,
            base,
            stride,
            cap,
            code_len,
            has_norm,
        }
    }

    /// Replaces every block's code section with `code_len` bytes from
    /// `codes(i, out)` (+ norm if `has_norm`), keeping the links. When the
    /// blocks grow (adding codes to bare blocks), this happens in place: the
    /// buffer is extended and blocks move up from the last one down, so the
    /// old and new layouts never coexist in memory (at a million nodes that
    /// was the build's peak RSS). Shrinking builds fresh blocks.
    fn recode(&mut self, code_len: usize, has_norm: bool, codes: &mut Encoder<'_>) {
        let has_norm = has_norm && code_len > 0;
        let n = self.data.len().saturating_sub(BLOCK_ALIGN) / self.stride.max(1);
        let (cap, old_stride) = (self.cap, self.stride);
        let stride = Self::stride_for(cap, code_len, has_norm);
        if stride < old_stride || old_stride == 0 {
            let old = std::mem::take(self);
            let mut lists = |i: usize, out: &mut Vec<u32>| out.extend(old.links(i as u32));
            *self = Layer0::build(n, cap, &mut lists, code_len, has_norm, Some(codes));
            return;
        }
        let len = n * stride + BLOCK_ALIGN;
        self.data.reserve_exact(len - self.data.len());
        prox_kernels::prefetch::advise_huge_pages(self.data.spare_capacity_mut(), false);
        self.data.resize(len, 0);
        // The allocation may have moved: the old blocks keep their offset
        // `self.base`, the new ones align to the new address.
        let base = match self.data.as_ptr().align_offset(BLOCK_ALIGN) {
            off if off < BLOCK_ALIGN => off,
            _ => 0,
        };
        self.relocate(n, base, stride, code_len, has_norm, codes);
    }

    /// The in-place part of [`recode`](Self::recode): moves the `n` blocks
    /// (`self.base`, `self.stride`) to `base` and `stride` (equal, or at
    /// least 64 bytes larger) in the already extended buffer, writing each
    /// one's new code.
    fn relocate(
        &mut self,
        n: usize,
        base: usize,
        stride: usize,
        code_len: usize,
        has_norm: bool,
        codes: &mut Encoder<'_>,
    ) {
        let (cap, old_stride, old_base) = (self.cap, self.stride, self.base);
        // Each block's links are moved (`copy_within` handles the overlap
        // with its own old place) before its code is written, so block i is
        // safe to move once no old block it overlaps still waits. The new
        // block i can overlap old blocks i - 1, i and i + 1 (bases differ by
        // less than 64 bytes, strides are equal or grow by at least 64):
        // * stride grew, or equal strides with `base >= old_base`: new block
        //   i starts at or past old block i and ends before old block i + 2,
        //   so moving from the last block down never overwrites a block not
        //   yet moved;
        // * equal strides with `base < old_base` (a cloned graph's buffer
        //   sits at another alignment): new block i starts before old block
        //   i and ends before old block i + 1, so moving from the first
        //   block up is the safe order. (Descending there overwrote the tail
        //   of old block i - 1, its last links when they reach past
        //   `stride - (old_base - base)`, before it had moved.)
        let head = 4 + 4 * cap;
        let mut code = vec![0u8; code_len];
        let data = &mut self.data;
        let mut relocate = |i: usize| {
            let (from, to) = (old_base + i * old_stride, base + i * stride);
            data.copy_within(from..from + head, to);
            let b = &mut data[to..to + stride];
            b[head..].fill(0);
            Self::write_code(b, i, cap, &mut code, has_norm, codes);
        };
        if stride == old_stride && base < old_base {
            (0..n).for_each(&mut relocate);
        } else {
            (0..n).rev().for_each(&mut relocate);
        }
        self.data[..base].fill(0);
        self.data[base + n * stride..].fill(0);
        self.base = base;
        self.stride = stride;
        self.code_len = code_len;
        self.has_norm = has_norm;
    }

    /// Node `i`'s whole block.
    #[inline]
    pub(crate) fn block(&self, i: u32) -> &[u8] {
        let at = self.base + i as usize * self.stride;
        &self.data[at..at + self.stride]
    }

    /// Node `i`'s links as little-endian `u32` bytes (`4 * count` bytes).
    #[inline]
    pub(crate) fn link_bytes(&self, i: u32) -> &[u8] {
        let b = self.block(i);
        let count = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        &b[4..4 + 4 * count.min(self.cap)]
    }

    /// Node `i`'s code bytes (SQ8 `i8` bytes or PQ codes; empty without).
    #[inline]
    pub(crate) fn code_bytes(&self, i: u32) -> &[u8] {
        let at = 4 + 4 * self.cap;
        &self.block(i)[at..at + self.code_len]
    }

    /// Node `i`'s SQ8 code (empty without codes).
    #[inline]
    pub(crate) fn code(&self, i: u32) -> &[i8] {
        prox_kernels::cast::as_i8(self.code_bytes(i))
    }

    /// `Σ c²` of node `i`'s code (0 without SQ8).
    #[inline]
    pub(crate) fn norm(&self, i: u32) -> i32 {
        if !self.has_norm {
            return 0;
        }
        let at = 4 + 4 * self.cap + self.code_len;
        let b = self.block(i);
        i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// Node `i`'s links, decoded.
    pub(crate) fn links(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        self.link_bytes(i)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    fn heap_bytes(&self) -> usize {
        self.data.capacity()
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
    pub(crate) l0: Layer0,
    upper: Vec<UpperLayer>,
    pub(crate) entry: Option<u32>,
    pub(crate) max_level: u8,
    /// `masked[i]`: node `i` routes but is never returned (empty if none).
    pub(crate) masked: Vec<bool>,
    /// Ids of masked nodes, ascending.
    pub(crate) masked_ids: Vec<u32>,
    /// SQ8 quantizer when layer-0 blocks carry traversal codes (exact
    /// rerank from `vectors`).
    pub(crate) sq8: Option<prox_kernels::sq8::Quantizer>,
    /// PQ codebooks when layer-0 blocks carry PQ codes (traversal by ADC
    /// table lookups, exact rerank from `vectors`); never set with `sq8`.
    pub(crate) pq: Option<prox_kernels::pq::Codebooks>,
    /// Identity of this graph's id space for key sets' cached id sets
    /// ([`crate::keys::KeySet::ids_for`]); the graph is never mutated, so a
    /// clone may share it.
    pub(crate) filter_owner: u64,
}

impl Adjacency for SearchGraph {
    #[inline]
    fn neighbours(&self, node: u32, layer: usize) -> &[u32] {
        // Layer 0 lives in byte blocks and is walked by the search loop
        // directly; this view serves the upper layers only.
        if layer == 0 {
            return &[];
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

/// Node ids of `h` sorted by key.
fn key_order(h: &Hnsw) -> Vec<u32> {
    let mut perm: Vec<u32> = (0..h.keys.len() as u32).collect();
    perm.sort_by(|&a, &b| h.keys[a as usize].cmp(&h.keys[b as usize]));
    perm
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
        // Every search probes rows of the arena at random; a loaded sidecar
        // (unlike a fresh build) has not asked for huge pages yet.
        vectors.advise_huge_pages();
        let mut key_bytes = Vec::with_capacity(keys.iter().map(|k| k.len()).sum());
        let mut key_offsets = Vec::with_capacity(n + 1);
        key_offsets.push(0);
        for k in &keys {
            key_bytes.extend_from_slice(k);
            key_offsets.push(key_bytes.len());
        }
        let top = levels.iter().copied().max().unwrap_or(0).max(max_level);
        let mut upper: Vec<UpperLayer> = (0..top).map(|_| UpperLayer::default()).collect();
        for l in &mut upper {
            l.offsets.push(0);
        }
        let mut cap = 0;
        for (i, &level) in levels.iter().enumerate() {
            cap = cap.max(lists(i, 0).len());
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
            l0: Layer0::build(
                n,
                cap,
                &mut |i, out| out.extend(lists(i, 0)),
                0,
                false,
                None,
            ),
            upper,
            entry,
            max_level,
            masked,
            masked_ids,
            sq8: None,
            pq: None,
            filter_owner: crate::keys::new_owner(),
        }
    }

    /// Adds SQ8 codes (one global scale `max|x| / 127`) to the layer-0
    /// blocks and makes queries traverse with the exact integer `i8 · i8`
    /// kernel instead of f32; the best candidates are then reranked from the
    /// f32 vectors (fast kernel, then canonical). Codes take a quarter of the
    /// f32 vectors' memory traffic and sit next to the links they route. Dimensions above 130 000 are refused (i32 accumulator bound
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
        let vectors = &self.vectors;
        let mut buf = vec![0i8; d];
        let mut encode = |i: usize, out: &mut [u8]| {
            quantizer.encode(vectors.row(i), &mut buf);
            out.copy_from_slice(prox_kernels::cast::as_u8(&buf));
        };
        self.l0.recode(d, true, &mut encode);
        self.sq8 = Some(quantizer);
        self.pq = None;
        Ok(self)
    }

    /// Puts PQ codes in the layer-0 blocks instead of SQ8 codes: node `i`'s
    /// code is `codes[i*m..(i+1)*m]` (`m = codebooks.m()`, nodes in id order,
    /// which is key order, masked nodes included). Queries then build one
    /// ADC table per query (`prox_kernels::pq`, `m × 256` f32) and score
    /// neighbours by `m` table lookups (a fixed-order scalar sum), then
    /// rescore every layer-0 result with the f32 kernel from the arena and
    /// the best canonically, as with SQ8: reported hits and scores are exact.
    /// A block carries `m` code bytes instead of `dims + 4`.
    ///
    /// Errors: codebooks of other dimensions, or `codes.len()` not
    /// `node_count() * m`.
    pub fn with_pq(
        mut self,
        codebooks: prox_kernels::pq::Codebooks,
        codes: &[u8],
    ) -> crate::error::Result<SearchGraph> {
        let (n, m) = (self.node_count(), codebooks.m());
        if codebooks.dim() != self.dims() {
            return Err(crate::error::Error::InvalidArgument(format!(
                "pq traversal: codebooks of {} dimensions for a graph of {}",
                codebooks.dim(),
                self.dims()
            )));
        }
        if m == 0 || n.checked_mul(m) != Some(codes.len()) {
            return Err(crate::error::Error::InvalidArgument(format!(
                "pq traversal: {} code bytes for {n} nodes of {m} subquantizers",
                codes.len()
            )));
        }
        let mut copy = |i: usize, out: &mut [u8]| out.copy_from_slice(&codes[i * m..(i + 1) * m]);
        self.l0.recode(m, false, &mut copy);
        self.pq = Some(codebooks);
        self.sq8 = None;
        Ok(self)
    }

    /// The search layout of `h`: all nodes (masked ones flagged) renumbered
    /// in key order.
    pub(crate) fn from_hnsw(h: &Hnsw) -> SearchGraph {
        let perm = key_order(h);
        let vectors = h.vectors.permuted(&perm);
        Self::from_hnsw_with(h, &perm, vectors)
    }

    /// As [`from_hnsw`](Self::from_hnsw), moving the arena out of `h` when
    /// its ids are already in key order.
    pub(crate) fn from_hnsw_owned(mut h: Hnsw) -> SearchGraph {
        let perm = key_order(&h);
        let identity = perm.iter().enumerate().all(|(i, &p)| p as usize == i);
        let vectors = if identity {
            std::mem::replace(&mut h.vectors, Arena::from_rows(0, std::iter::empty()))
        } else {
            h.vectors.permuted(&perm)
        };
        Self::from_hnsw_with(&h, &perm, vectors)
    }

    fn from_hnsw_with(h: &Hnsw, perm: &[u32], vectors: Arena) -> SearchGraph {
        let n = perm.len();
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
            vectors,
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

    /// Each node's level (the highest upper layer listing it; 0 if none).
    pub(crate) fn levels(&self) -> Vec<u8> {
        let mut levels = vec![0u8; self.node_count()];
        for (l, layer) in self.upper.iter().enumerate() {
            for &id in &layer.nodes {
                levels[id as usize] = (l + 1) as u8;
            }
        }
        levels
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
        self.lower_bound_from(0, key)
    }

    /// [`Self::lower_bound`] when it is known to be at least `from`.
    pub(crate) fn lower_bound_from(&self, from: u32, key: &[u8]) -> u32 {
        let n = self.node_count();
        let (mut lo, mut hi) = ((from as usize).min(n), n);
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

    /// Approximate heap bytes of the layout (vectors, blocks, PQ codebooks,
    /// keys).
    pub fn heap_bytes(&self) -> usize {
        self.vectors.heap_bytes()
            + self.l0.heap_bytes()
            + self.pq.as_ref().map_or(0, |c| c.data().len() * 4)
            + self.key_bytes.capacity()
            + self.key_offsets.capacity() * 8
            + self
                .upper
                .iter()
                .map(|l| l.nodes.capacity() * 4 + l.offsets.capacity() * 8 + l.links.capacity() * 4)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists of `n` nodes with 0..=cap links each, a pure function of `i`.
    fn list(i: usize, cap: usize) -> Vec<u32> {
        (0..(i * 7 + 3) % (cap + 1))
            .map(|j| ((i * 31 + j * 17) % 997) as u32)
            .collect()
    }

    fn code(i: usize, out: &mut [u8]) {
        for (j, b) in out.iter_mut().enumerate() {
            *b = (i * 13 + j * 5) as u8;
        }
    }

    #[test]
    fn recode_in_place_equals_a_fresh_build() {
        let (n, cap) = (300, 9);
        let bare = || {
            Layer0::build(
                n,
                cap,
                &mut |i, out| out.extend(list(i, cap)),
                0,
                false,
                None,
            )
        };
        for (code_len, norm) in [
            (0, false),
            (40, true),
            (100, true),
            (16, false),
            (300, true),
        ] {
            let fresh = Layer0::build(
                n,
                cap,
                &mut |i, out| out.extend(list(i, cap)),
                code_len,
                norm,
                Some(&mut code),
            );
            // From bare blocks (grows in place, or keeps the stride).
            let mut grown = bare();
            grown.recode(code_len, norm, &mut code);
            // From the largest coded blocks (shrinks: fresh path).
            let mut shrunk = bare();
            shrunk.recode(400, true, &mut code);
            shrunk.recode(code_len, norm, &mut code);
            for l0 in [&grown, &shrunk] {
                assert_eq!(
                    (l0.stride, l0.cap, l0.code_len),
                    (fresh.stride, fresh.cap, fresh.code_len)
                );
                for i in 0..n as u32 {
                    assert_eq!(
                        l0.block(i),
                        fresh.block(i),
                        "block {i}, code_len {code_len}"
                    );
                    assert_eq!(l0.links(i).collect::<Vec<_>>(), list(i as usize, cap));
                    assert_eq!(l0.norm(i), fresh.norm(i));
                }
            }
            assert_eq!(grown.data[..grown.base], vec![0u8; grown.base][..]);
        }
    }

    /// Bug: a cloned graph's buffer sits at another alignment than the one
    /// its `base` was computed for; recoding it with an unchanged stride
    /// moved the blocks down in descending order and overwrote the last
    /// links of a block before it had moved (PQ traversal hits then depended
    /// on where the allocator put the clone). Every pair of old and new
    /// bases must give the blocks of a fresh build.
    #[test]
    fn recode_with_equal_stride_between_any_alignments_equals_a_fresh_build() {
        // cap 20: 84 bytes of links, stride 128 bare and with a 6-byte code.
        let (n, cap, code_len) = (200, 20, 6);
        let lists = |i: usize, out: &mut Vec<u32>| out.extend(list(i, cap));
        let fresh = Layer0::build(n, cap, &mut { lists }, code_len, false, Some(&mut code));
        let bare = Layer0::build(n, cap, &mut { lists }, 0, false, None);
        assert_eq!(bare.stride, fresh.stride, "the case needs equal strides");
        let body = bare.stride * n;
        for old_base in 0..BLOCK_ALIGN {
            for base in 0..BLOCK_ALIGN {
                let mut data = vec![0u8; body + BLOCK_ALIGN];
                data[old_base..old_base + body]
                    .copy_from_slice(&bare.data[bare.base..bare.base + body]);
                let mut l0 = Layer0 {
                    data,
                    base: old_base,
                    ..bare.clone()
                };
                l0.relocate(n, base, bare.stride, code_len, false, &mut code);
                for i in 0..n as u32 {
                    assert_eq!(
                        l0.block(i),
                        fresh.block(i),
                        "block {i}, old base {old_base}, new base {base}"
                    );
                }
            }
        }
    }
}
