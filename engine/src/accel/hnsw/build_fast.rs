//! Fast HNSW construction (manifest flag `00`): standard insertion bounded by
//! `ef_construction` with the diversifying heuristic, parallel and
//! deterministic.
//!
//! Determinism at any thread count: nodes are inserted in deterministic
//! batches whose size depends only on the node index. Within a batch,
//! (A) every member searches the graph frozen at the batch start (parallel,
//! read-only) and selects its own lists; (B) the reverse edges are grouped by
//! target list and each target list is recomputed from the frozen list plus
//! its new sources in id order (parallel, read-only); (C) results are written
//! sequentially. All scores come from the deterministic kernel
//! (`numeric::kernel::det_score`) and every ordering is by `(score, id)`, so no step
//! depends on scheduling or ISA. Batch members do not see each other; batches
//! stay below ~3% of the graph so this costs no measurable quality.
//!
//! Layer 0 lists hold up to `2 * max_connections` neighbours, upper layers
//! `max_connections` (the format does not bound list lengths; spec 16.3).
//!
//! Candidate search runs on SQ8 codes (one global symmetric scale,
//! `max|x| / 127`) with the exact integer kernel `prox_kernels::sq8::dot_i8`
//! (bit-exact on every ISA): a quarter of the memory traffic and a fraction
//! of the arithmetic of f32. The `ef_construction` candidates found are then
//! rescored with the deterministic f32 kernel, and neighbour selection
//! (heuristic and reverse-link pruning) uses f32 scores only.

use super::{node_level, select_heuristic, Adjacency, BuildGraph, Hnsw, LayerSearch, Scored};
use crate::accel::params::HnswParams;
use crate::accel::vectors::Arena;
use crate::numeric::kernel::det_score;
use prox_kernels::prefetch::{advise_huge_pages, prefetch_first, prefetch_index, prefetch_read};
use prox_kernels::Metric;
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    static LAYER_SEARCH: RefCell<LayerSearch> = RefCell::new(LayerSearch::default());
}

/// Nodes inserted per batch once `inserted` nodes are in the graph.
fn batch_len(inserted: usize) -> usize {
    (inserted / 32).clamp(1, 256)
}

/// List capacity on `layer`.
fn cap(m: usize, layer: usize) -> usize {
    if layer == 0 {
        2 * m
    } else {
        m
    }
}

/// Layer-0 lists of the graph under construction in one flat array, `stride
/// = 1 + cap` words per node (count, then the links), mirroring
/// `BuildGraph::links[_][0]` exactly: the candidate search reads one
/// contiguous slot per expansion instead of chasing three pointers. Only
/// the memory layout differs from the nested lists, so the graph built is
/// the same.
struct FlatL0 {
    stride: usize,
    words: Vec<u32>,
}

impl FlatL0 {
    fn new(g: &BuildGraph, cap: usize) -> FlatL0 {
        let longest = g.links.iter().map(|l| l.first().map_or(0, Vec::len)).max();
        let stride = 1 + cap.max(longest.unwrap_or(0));
        let mut flat = FlatL0 {
            stride,
            words: vec![0; g.len() * stride],
        };
        advise_huge_pages(&flat.words, false);
        for (i, l) in g.links.iter().enumerate() {
            if let Some(list) = l.first() {
                flat.set(i, list);
            }
        }
        flat
    }

    /// Replaces node `i`'s list (grows the stride if it does not fit).
    fn set(&mut self, i: usize, list: &[u32]) {
        if list.len() + 1 > self.stride {
            let n = self.words.len() / self.stride;
            let stride = list.len() + 1;
            let mut words = vec![0; n * stride];
            advise_huge_pages(&words, false);
            for j in 0..n {
                let old = &self.words[j * self.stride..(j + 1) * self.stride];
                let len = old[0] as usize + 1;
                words[j * stride..j * stride + len].copy_from_slice(&old[..len]);
            }
            self.stride = stride;
            self.words = words;
        }
        let at = i * self.stride;
        self.words[at] = list.len() as u32;
        self.words[at + 1..at + 1 + list.len()].copy_from_slice(list);
    }

    #[inline]
    fn slot(&self, i: u32) -> &[u32] {
        let at = i as usize * self.stride;
        &self.words[at..at + self.stride]
    }
}

/// The frozen graph as the candidate search sees it: layer 0 from the flat
/// mirror, upper layers from the nested lists.
struct View<'a> {
    g: &'a BuildGraph,
    l0: &'a FlatL0,
}

impl Adjacency for View<'_> {
    #[inline]
    fn neighbours(&self, node: u32, layer: usize) -> &[u32] {
        if layer == 0 {
            let s = self.l0.slot(node);
            &s[1..1 + s[0] as usize]
        } else {
            self.g.neighbours(node, layer)
        }
    }

    #[inline]
    fn prefetch_list(&self, node: u32, layer: usize) {
        if layer == 0 {
            prefetch_read(self.l0.slot(node));
        }
    }
}

/// SQ8 codes of every node for the candidate search. Row `i` starts at
/// `base + i * dims`, `base` putting row 0 on a 64-byte boundary (a
/// 128-byte row then spans two cache lines, not three).
struct Codes {
    dims: usize,
    base: usize,
    codes: Vec<i8>,
    norms: Vec<i64>,
}

impl Codes {
    fn new(vectors: &Arena) -> Codes {
        let (n, dims) = (vectors.len(), vectors.dims());
        let mut max = 0f32;
        for i in 0..n {
            for &x in vectors.row(i) {
                max = max.max(x.abs());
            }
        }
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        // Huge pages before the first write (the zeroed allocation is not
        // faulted in yet), so no collapse is needed.
        let mut codes = vec![0i8; n * dims + 64];
        advise_huge_pages(&codes, false);
        // align_offset may legally return usize::MAX; then fall back to 0.
        let base = match codes.as_ptr().align_offset(64) {
            off if off < 64 => off,
            _ => 0,
        };
        let mut norms = Vec::with_capacity(n);
        for (i, row) in codes[base..]
            .chunks_exact_mut(dims.max(1))
            .enumerate()
            .take(n)
        {
            for (c, &x) in row.iter_mut().zip(vectors.row(i)) {
                *c = prox_kernels::sq8::Quantizer::code(x, scale);
            }
            norms.push(row.iter().map(|&c| i64::from(c) * i64::from(c)).sum());
        }
        Codes {
            dims,
            base,
            codes,
            norms,
        }
    }

    #[inline]
    fn row(&self, id: usize) -> &[i8] {
        let at = self.base + id * self.dims;
        &self.codes[at..at + self.dims]
    }

    /// Integer ranking score of nodes `a` and `b` (exact).
    #[inline]
    fn score(&self, metric: Metric, a: usize, b: usize) -> f32 {
        let dot = i64::from(prox_kernels::sq8::dot_i8(self.row(a), self.row(b)));
        match metric {
            Metric::L2 => (self.norms[a] + self.norms[b] - 2 * dot) as f32,
            Metric::Cosine | Metric::InnerProduct => -dot as f32,
        }
    }
}

/// Candidates between an f32 row's prefetch hint and its exact rescoring.
const RESCORE_AHEAD: usize = 4;

/// Inserted nodes get SQ8 build codes only when they are at least
/// 1/`CODES_MIN_SHARE` of the graph.
const CODES_MIN_SHARE: usize = 16;

/// Largest dimension for which `dot_i8`'s i32 accumulator cannot overflow.
const SQ8_MAX_DIMS: usize = 130_000;

/// Inserts nodes `start..keys.len()` (their keys and vectors already in
/// `keys`/`vectors`) into `g`, which holds nodes `0..start`.
pub(super) fn insert(
    g: &mut BuildGraph,
    metric: Metric,
    keys: &[Vec<u8>],
    vectors: &Arena,
    params: &HnswParams,
    start: usize,
) {
    let n = keys.len();
    let m = usize::from(params.max_connections);
    let efc = params.ef_construction as usize;
    for key in &keys[start..] {
        g.push_node(node_level(key, params.level_bits, params.seed));
    }
    let mut i = start;
    if g.entry.is_none() && i < n {
        g.entry = Some(i as u32);
        g.max_level = g.levels[i];
        i += 1;
    }
    if i < n {
        vectors.advise_huge_pages();
    }
    // SQ8 codes speed up a build's scoring but cost a pass over every
    // vector: a batch much smaller than the graph scores in f32 instead.
    let codes = (vectors.dims() <= SQ8_MAX_DIMS && i < n && (n - i) * CODES_MIN_SHARE >= n)
        .then(|| Codes::new(vectors));
    let codes = codes.as_ref();
    let mut flat = FlatL0::new(g, cap(m, 0));
    let mut reverse: Vec<(u32, u8, u32)> = Vec::new();
    while i < n {
        let end = (i + batch_len(i)).min(n);
        let (entry, top) = (g.entry.unwrap_or(0), g.max_level);
        let frozen: &BuildGraph = g;
        let view = View {
            g: frozen,
            l0: &flat,
        };
        // (A) every member's own lists, against the frozen graph.
        let found: Vec<Vec<Vec<u32>>> = (i..end)
            .into_par_iter()
            .map(|r| {
                LAYER_SEARCH.with(|ls| {
                    find_lists(
                        &view,
                        &mut ls.borrow_mut(),
                        metric,
                        vectors,
                        codes,
                        r,
                        entry,
                        top,
                        m,
                        efc,
                    )
                })
            })
            .collect();
        // (B) reverse edges grouped by (target, layer), sources ascending.
        reverse.clear();
        for (off, lists) in found.iter().enumerate() {
            for (layer, list) in lists.iter().enumerate() {
                for &x in list {
                    reverse.push((x, layer as u8, (i + off) as u32));
                }
            }
        }
        reverse.sort_unstable();
        let mut groups: Vec<(usize, usize)> = Vec::new();
        let mut s = 0;
        while s < reverse.len() {
            let mut e = s + 1;
            while e < reverse.len() && reverse[e].0 == reverse[s].0 && reverse[e].1 == reverse[s].1
            {
                e += 1;
            }
            groups.push((s, e));
            s = e;
        }
        let updates: Vec<Vec<u32>> = groups
            .par_iter()
            .map(|&(s, e)| {
                let (x, layer) = (reverse[s].0, usize::from(reverse[s].1));
                let current = &frozen.links[x as usize][layer];
                let srcs = reverse[s..e].iter().map(|t| t.2);
                relink(metric, vectors, x, current, srcs, cap(m, layer))
            })
            .collect();
        // (C) write.
        for (off, lists) in found.into_iter().enumerate() {
            for (layer, list) in lists.into_iter().enumerate() {
                if layer == 0 {
                    flat.set(i + off, &list);
                }
                g.links[i + off][layer] = list;
            }
        }
        for (&(s, _), list) in groups.iter().zip(updates) {
            let (x, layer) = (reverse[s].0, usize::from(reverse[s].1));
            if layer == 0 {
                flat.set(x as usize, &list);
            }
            g.links[x as usize][layer] = list;
        }
        for r in i..end {
            if g.levels[r] > g.max_level {
                g.entry = Some(r as u32);
                g.max_level = g.levels[r];
            }
        }
        i = end;
    }
}

/// New list of `x` after adding `srcs`: append while there is room,
/// otherwise re-select everything with the heuristic.
fn relink(
    metric: Metric,
    vectors: &Arena,
    x: u32,
    current: &[u32],
    srcs: impl Iterator<Item = u32>,
    cap: usize,
) -> Vec<u32> {
    let mut all: Vec<u32> = current.to_vec();
    for s in srcs {
        if !all.contains(&s) && s != x {
            all.push(s);
        }
    }
    if all.len() <= cap {
        return all;
    }
    for &c in &all {
        prefetch_read(vectors.row(c as usize));
    }
    let xv = vectors.row(x as usize);
    let mut cands: Vec<Scored> = all
        .iter()
        .map(|&c| Scored {
            score: det_score(metric, xv, vectors.row(c as usize)),
            id: c,
        })
        .collect();
    cands.sort_unstable();
    select_heuristic(&cands, cap, &mut |a, b| {
        det_score(metric, vectors.row(a as usize), vectors.row(b as usize))
    })
}

/// Lists of node `r` on layers `0..=min(level(r), top)` searched from the
/// frozen entry point.
#[allow(clippy::too_many_arguments)]
fn find_lists(
    view: &View<'_>,
    ls: &mut LayerSearch,
    metric: Metric,
    vectors: &Arena,
    codes: Option<&Codes>,
    r: usize,
    entry: u32,
    top: u8,
    m: usize,
    efc: usize,
) -> Vec<Vec<u32>> {
    let q = vectors.row(r);
    let exact = |id: u32| det_score(metric, q, vectors.row(id as usize));
    let mut score = |id: u32| match codes {
        Some(c) => c.score(metric, r, id as usize),
        None => exact(id),
    };
    // The row scored next and the slot read if it is expanded later.
    // The norm is a separate array: without its own hint, its load was the
    // build's largest stall (a quarter of the samples at 200k nodes).
    let prefetch = |id: u32| {
        match codes {
            Some(c) => {
                prefetch_read(c.row(id as usize));
                prefetch_index(&c.norms, id as usize);
            }
            None => prefetch_read(vectors.row(id as usize)),
        }
        prefetch_first(view.l0.slot(id));
    };
    let g = view;
    let level = g.g.levels[r];
    let mut cur = Scored {
        score: score(entry),
        id: entry,
    };
    let mut layer = top;
    while layer > level {
        cur = LayerSearch::greedy(g, usize::from(layer), cur, &mut score);
        layer -= 1;
    }
    let reach = level.min(top);
    let mut out = vec![Vec::new(); usize::from(reach) + 1];
    let mut entries = vec![cur];
    let mut w: Vec<Scored> = Vec::new();
    let mut exact_w: Vec<Scored> = Vec::new();
    for layer in (0..=usize::from(reach)).rev() {
        ls.search_layer(
            g,
            g.g.len(),
            layer,
            &entries,
            efc,
            &mut score,
            &|_| true,
            &prefetch,
        );
        ls.drain_sorted(&mut w);
        // Every candidate is rescored exactly: selecting from a truncated
        // SQ8 order measurably lowered graph quality.
        // The f32 rows are mostly not cached (the search read codes): hint
        // them a few candidates ahead of the scoring.
        exact_w.clear();
        if codes.is_some() {
            for c in w.iter().take(RESCORE_AHEAD) {
                prefetch_read(vectors.row(c.id as usize));
            }
        }
        exact_w.extend(w.iter().enumerate().map(|(j, c)| Scored {
            score: if codes.is_some() {
                if let Some(next) = w.get(j + RESCORE_AHEAD) {
                    prefetch_read(vectors.row(next.id as usize));
                }
                exact(c.id)
            } else {
                c.score
            },
            id: c.id,
        }));
        exact_w.sort_unstable();
        out[layer] = select_heuristic(&exact_w, cap(m, layer), &mut |a, b| {
            det_score(metric, vectors.row(a as usize), vectors.row(b as usize))
        });
        std::mem::swap(&mut entries, &mut w);
    }
    out
}
/// Removes masked nodes from a fast graph (see [`Hnsw::compact`]).
pub(super) fn compact(h: &mut Hnsw) {
    let g = &h.graph;
    let dead = &h.deleted;
    let m = usize::from(h.params.max_connections);
    let (metric, vectors) = (h.metric, &h.vectors);
    let n = g.len();
    let mut repaired: Vec<Vec<Vec<u32>>> = (0..n)
        .into_par_iter()
        .map(|x| {
            if dead[x] {
                return Vec::new();
            }
            g.links[x]
                .iter()
                .enumerate()
                .map(|(layer, list)| {
                    if list.iter().all(|&c| !dead[c as usize]) {
                        return list.clone();
                    }
                    // The pool: surviving neighbours and every live node
                    // two hops away through any neighbour, removed or not
                    // (a removed node's own list alone is too narrow to
                    // replace the routes it carried).
                    let mut cands: Vec<u32> = Vec::new();
                    for &c in list {
                        if !dead[c as usize] {
                            cands.push(c);
                        }
                        if let Some(second) = g.links[c as usize].get(layer) {
                            cands.extend(
                                second
                                    .iter()
                                    .copied()
                                    .filter(|&d| !dead[d as usize] && d as usize != x),
                            );
                        }
                    }
                    cands.sort_unstable();
                    cands.dedup();
                    let xv = vectors.row(x);
                    let mut scored: Vec<Scored> = cands
                        .iter()
                        .map(|&c| Scored {
                            score: det_score(metric, xv, vectors.row(c as usize)),
                            id: c,
                        })
                        .collect();
                    scored.sort_unstable();
                    let c = cap(m, layer);
                    let mut kept = select_heuristic(&scored, c, &mut |a, b| {
                        det_score(metric, vectors.row(a as usize), vectors.row(b as usize))
                    });
                    // Then the nearest others, up to the list's former
                    // length: the node keeps its degree.
                    for sc in &scored {
                        if kept.len() >= c.min(list.len()) {
                            break;
                        }
                        if !kept.contains(&sc.id) {
                            kept.push(sc.id);
                        }
                    }
                    kept
                })
                .collect()
        })
        .collect();
    keep_routes(h, &mut repaired);
    let (g, dead) = (&h.graph, &h.deleted);
    let live: Vec<u32> = (0..n as u32).filter(|&i| !dead[i as usize]).collect();
    let mut remap = vec![u32::MAX; n];
    for (new, &old) in live.iter().enumerate() {
        remap[old as usize] = new as u32;
    }
    let mut graph = BuildGraph::default();
    for (old, lists) in repaired.into_iter().enumerate() {
        if dead[old] {
            continue;
        }
        graph.levels.push(g.levels[old]);
        graph.links.push(
            lists
                .into_iter()
                .map(|l| l.into_iter().map(|c| remap[c as usize]).collect())
                .collect(),
        );
    }
    for (id, &level) in graph.levels.iter().enumerate() {
        if graph.entry.is_none() || level > graph.max_level {
            graph.entry = Some(id as u32);
            graph.max_level = level;
        }
    }
    h.vectors = h.vectors.permuted(&live);
    h.keys = live.iter().map(|&i| h.keys[i as usize].clone()).collect();
    h.deleted = vec![false; live.len()];
    h.deleted_count = 0;
    h.graph = graph;
    h.rebuild_order();
}

/// After a removal, keeps every route that passed through a removed node:
/// for each removed `d` and each live `y` it linked on a layer, if no live
/// node that linked `d` there links `y` in its repaired list, the one of
/// them nearest to `y` does (appended below the layer's cap, else replacing
/// its last, farthest-chosen entry). Without this, a cluster reached only
/// through removed nodes can become unreachable. Deterministic: removed
/// nodes in id order, ties to the lower id.
fn keep_routes(h: &Hnsw, repaired: &mut [Vec<Vec<u32>>]) {
    let (g, dead) = (&h.graph, &h.deleted);
    let m = usize::from(h.params.max_connections);
    let (metric, vectors) = (h.metric, &h.vectors);
    // (removed, layer, live in-neighbour), sorted.
    let mut ins: Vec<(u32, u8, u32)> = Vec::new();
    for (x, lists) in g.links.iter().enumerate() {
        if dead[x] {
            continue;
        }
        for (layer, list) in lists.iter().enumerate() {
            for &d in list {
                if dead[d as usize] {
                    ins.push((d, layer as u8, x as u32));
                }
            }
        }
    }
    ins.sort_unstable();
    let mut s = 0;
    while s < ins.len() {
        let (d, layer) = (ins[s].0, ins[s].1);
        let mut e = s + 1;
        while e < ins.len() && ins[e].0 == d && ins[e].1 == layer {
            e += 1;
        }
        let from = &ins[s..e];
        let l = usize::from(layer);
        for &y in g.links[d as usize].get(l).map_or(&[][..], Vec::as_slice) {
            if dead[y as usize] {
                continue;
            }
            let linked = from.iter().any(|&(_, _, x)| {
                x == y || repaired[x as usize].get(l).is_some_and(|r| r.contains(&y))
            });
            if linked {
                continue;
            }
            let yv = vectors.row(y as usize);
            let Some(best) = from
                .iter()
                .map(|&(_, _, x)| Scored {
                    score: det_score(metric, yv, vectors.row(x as usize)),
                    id: x,
                })
                .min()
            else {
                continue;
            };
            let list = &mut repaired[best.id as usize][l];
            if list.len() < cap(m, l) {
                list.push(y);
            } else if let Some(last) = list.last_mut() {
                *last = y;
            }
        }
        s = e;
    }
}
