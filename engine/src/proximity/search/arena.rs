//! The flat scan arena: every record's 8-bit code in one contiguous buffer,
//! in leaf-catalogue order, built once per [`super::Searcher`] at load time.
//!
//! The persisted hierarchy keeps each leaf page's vectors in its own node;
//! scanning leaves through the nodes costs a pointer chase, a per-vector
//! scale and an f64 formula per record. The arena is a derived, in-memory
//! copy tuned for scanning:
//!
//! * **One uniform scale** `s = max_{records, i} |x_i| / 127` (1 when every
//!   component is 0) for every record, so a query is quantized once with the
//!   same scale and `‖q̂ − x̂‖² = s²·D` with the exact integer
//!   `D = Σ q̂_i² + Σ x̂_i² − 2·Σ q̂_i·x̂_i` (codes `q̂`, `x̂`): the dot comes
//!   from [`prox_kernels::sq8::dot_i8_many`] (bit-exact on every ISA), the
//!   norms are stored. Rankings and pruning compare integers.
//! * **Per-record residual** `err_r ≥ ‖x − s·x̂‖` (canonical f64, rounded
//!   up), for the exact search's lower bound
//!   `‖q − x‖ ≥ s·√D − ‖q − s·q̂‖ − ‖x − s·x̂‖` (triangle inequality).
//! * **Layout**: groups (one per catalogue entry, i.e. per logical leaf; the
//!   root alone when the map is a single leaf) hold consecutive leaf pages,
//!   pages hold consecutive records, so a group is one contiguous range of
//!   codes. Record `r` of page `p` is entry `r − page_start[p]` of
//!   page `p`, whose key, vector and value stay in the node (decoded on
//!   first use, `pages.rs`).
//!
//! Everything is a function of the descriptor (maximum, per-record
//! quantization, hierarchy order), so the arena and every decision made
//! with it are identical on every machine, thread count and ISA.

use super::catalogue::Catalogue;
use super::node::{Loader, Node};
use super::pages::{Pages, PagesBuilder};
use super::quant::quantize_uniform;
use crate::error::Result;
use rayon::prelude::*;
use std::sync::Arc;

/// Every record's code, norm and residual, grouped by logical leaf.
///
/// Invariants: `codes.len() == n·dims`, `norms`, `err` have `n` elements,
/// `page_start` is non-decreasing with `pages.len() + 1` elements from 0
/// to `n`, `page_start[p + 1] − page_start[p] == pages.len_of(p)`,
/// `group_page` is non-decreasing with `groups + 1` elements from 0 to
/// `pages.len()`.
#[derive(Debug)]
pub(crate) struct ScanArena {
    /// The uniform scale `s > 0`.
    pub(crate) scale: f64,
    /// `n·dims` codes, record-major.
    pub(crate) codes: Vec<i8>,
    /// `Σ x̂_i²` per record (exact; fits `i32` for the supported dims).
    pub(crate) norms: Vec<i32>,
    /// Upper bound on `‖x − s·x̂‖` per record.
    pub(crate) err: Vec<f64>,
    /// The largest `err`.
    pub(crate) err_max: f64,
    /// Leaf pages in order, decoded on first use.
    pub(crate) pages: Pages,
    /// First record of each page, then `n`.
    pub(crate) page_start: Vec<usize>,
    /// First page of each group, then `pages.len()`.
    pub(crate) group_page: Vec<usize>,
}

/// `(leaf pages in order, first record of each page then n, first page of
/// each group then the page count)`.
pub(crate) type PageLayout = (Pages, Vec<usize>, Vec<usize>);

/// Adds the leaf pages below entry `i` of `parent` (loaded), in entry
/// order.
fn pages_below(
    parent: &Arc<Node>,
    i: usize,
    loader: &Loader<'_>,
    out: &mut PagesBuilder,
) -> Result<()> {
    let node = parent.child(i, loader)?;
    if node.leafy {
        out.child(parent, i, node.len);
        return Ok(());
    }
    for j in 0..node.len {
        pages_below(node, j, loader, out)?;
    }
    Ok(())
}

/// Adds the pages of the group rooted at `root` when the map has no
/// catalogue (a single logical leaf: a leaf page or a directory of them).
pub(crate) fn root_pages(
    root: &Arc<Node>,
    loader: &Loader<'_>,
    out: &mut PagesBuilder,
) -> Result<()> {
    if root.leafy {
        out.root(root);
        return Ok(());
    }
    for j in 0..root.len {
        pages_below(root, j, loader, out)?;
    }
    Ok(())
}

impl ScanArena {
    /// Leaf pages of every group in order, each page's first record (then
    /// `n`) and each group's first page (then the page count), loading
    /// every leaf page level by level in batched reads. Groups follow `cat`
    /// (the root alone when `cat` is empty).
    pub(crate) fn pages(
        root: &Arc<Node>,
        cat: &Catalogue,
        loader: &Loader<'_>,
    ) -> Result<PageLayout> {
        // Every leaf page, one batched read per level.
        super::levels::expand(std::slice::from_ref(root), loader, |_| true)?;
        let mut out = PagesBuilder::new();
        let mut group_page = Vec::with_capacity(cat.len() + 1);
        if cat.len() == 0 {
            group_page.push(0);
            root_pages(root, loader, &mut out)?;
        } else {
            for (node, i) in &cat.parents {
                group_page.push(out.len());
                pages_below(node, *i as usize, loader, &mut out)?;
            }
        }
        let pages = out.finish();
        group_page.push(pages.len());
        let mut page_start = Vec::with_capacity(pages.len() + 1);
        let mut n = 0usize;
        for p in 0..pages.len() {
            page_start.push(n);
            n += pages.len_of(p);
        }
        page_start.push(n);
        Ok((pages, page_start, group_page))
    }

    /// Loads every leaf page (in parallel) and quantizes every record.
    /// Groups follow `cat` (the root alone when `cat` is empty).
    pub(crate) fn build(
        root: &Arc<Node>,
        cat: &Catalogue,
        loader: &Loader<'_>,
        dims: usize,
    ) -> Result<ScanArena> {
        let (pages, page_start, group_page) = ScanArena::pages(root, cat, loader)?;
        let nodes = pages.all(loader)?;
        let n = *page_start.last().unwrap_or(&0);
        // The maximum is order-independent, so the parallel reduction is
        // deterministic.
        let max = nodes
            .par_iter()
            .map(|p| {
                p.vectors
                    .iter()
                    .fold(0.0f64, |m, &v| m.max(f64::from(v).abs()))
            })
            .reduce(|| 0.0, f64::max);
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };

        let mut codes = vec![0i8; n * dims];
        // Exact search reads survivors' codes at random offsets: huge pages
        // (advised before the first write) spare most of the TLB misses.
        prox_kernels::prefetch::advise_huge_pages(&codes, false);
        let mut norms = vec![0i32; n];
        let mut err = vec![0.0f64; n];
        // Split the outputs at page boundaries so each page fills its own
        // slices in parallel.
        let mut jobs = Vec::with_capacity(nodes.len());
        {
            let (mut c, mut nm, mut e) = (&mut codes[..], &mut norms[..], &mut err[..]);
            for p in &nodes {
                let (c0, c1) = c.split_at_mut(p.len * dims);
                let (n0, n1) = nm.split_at_mut(p.len);
                let (e0, e1) = e.split_at_mut(p.len);
                jobs.push((p, c0, n0, e0));
                (c, nm, e) = (c1, n1, e1);
            }
        }
        jobs.into_par_iter().for_each(|(p, c, nm, e)| {
            for i in 0..p.len {
                let (norm, r) =
                    quantize_uniform(p.vector(i, dims), scale, &mut c[i * dims..(i + 1) * dims]);
                // Σ c² <= 127²·dims < 2^31 for dims <= MAX_CODE_DIMS.
                nm[i] = norm as i32;
                e[i] = r;
            }
        });
        let err_max = err.iter().fold(0.0f64, |m, &x| m.max(x));
        Ok(ScanArena {
            scale,
            codes,
            norms,
            err,
            err_max,
            pages,
            page_start,
            group_page,
        })
    }

    /// The f32 vector of record `r` in `pages` (every page, in order, as
    /// [`Pages::all`] returns them).
    pub(crate) fn record<'a>(&self, pages: &'a [Arc<Node>], r: usize, d: usize) -> &'a [f32] {
        let (p, e) = self.locate(r);
        pages[p].vector(e, d)
    }

    /// Page and entry of record `r`.
    pub(crate) fn locate(&self, r: usize) -> (usize, usize) {
        let p = self.page_start.partition_point(|&s| s <= r) - 1;
        (p, r - self.page_start[p])
    }

    /// Exact integer squared code distance `‖q̂ − x̂‖²` of record `r`, from
    /// the query's code norm `qn` and the code dot product `dot`.
    #[inline]
    pub(crate) fn l2_code_dist(&self, qn: i64, r: usize, dot: i32) -> i64 {
        qn + i64::from(self.norms[r]) - 2 * i64::from(dot)
    }

    /// Heap bytes of the derived buffers (codes, norms, residuals, offsets
    /// and page handles; the nodes themselves are not counted).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.codes.len()
            + 4 * self.norms.len()
            + 8 * self.err.len()
            + 8 * (self.page_start.len() + self.group_page.len() + self.pages.len())
    }
}

/// Squared-code-distance bound for exact L2 pruning.
///
/// Returns `Y` such that a record with integer code distance `D` (see the
/// module docs), query residual bound `eq` and record residual bound `ex`
/// has canonical L2 score **strictly greater** than `t` whenever
/// `D > Y` (`D` as f64, exact below 2^53). `rel` bounds the relative f64
/// summation error of canonical scores (canonical ≥ real²·(1 − rel)).
///
/// Proof. Let `τ = t / (1 − rel)` and `R ≥ √τ` (computed with upward
/// margins far above the three roundings involved). If `D > Y ≥
/// ((R + eq + ex) / s)²` then `s·√D > R + eq + ex`, so the real distance
/// `‖q − x‖ ≥ s·√D − eq − ex > R ≥ √τ` and the canonical score is at least
/// `‖q − x‖²·(1 − rel) > τ·(1 − rel) = t`. Every step that rounds (the
/// division, square root, sum, division by `s`, square) is followed by
/// [`super::quant::up`], whose `16·2^-52` relative margin exceeds its
/// error, so each computed value is at least the real one it stands for.
/// An infinite `t` (fewer than k hits so far) gives `Y = ∞`: no pruning.
#[inline]
pub(crate) fn l2_prune_limit(t: f64, rel: f64, eq: f64, ex: f64, scale: f64) -> f64 {
    use super::quant::up;
    if !t.is_finite() {
        return f64::INFINITY;
    }
    let r = up(up(t / (1.0 - rel)).sqrt());
    let z = up(up(r + eq + ex) / scale);
    up(z * z)
}

/// [`l2_prune_limit`] as an integer: `D > limit_int(Y)` exactly when
/// `D > Y` for integer `D` in `0..2^53` (`i64::MAX` when `Y` is huge or
/// infinite).
#[inline]
pub(crate) fn limit_int(y: f64) -> i64 {
    if y >= 9.0e15 {
        i64::MAX
    } else {
        y.floor() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proximity::search::quant::EPS;
    use prox_testkit::{seed, SplitMix64};

    /// A record is never screened out at a threshold equal to its own
    /// canonical score (nor above it), whatever the scale, clamping or
    /// magnitudes: the bound is sound where it is tightest.
    #[test]
    fn prune_limit_never_excludes_a_record_at_its_own_score() {
        let seed = seed(0xA2E4);
        let mut r = SplitMix64::new(seed);
        let mut checked = 0;
        for round in 0..4000 {
            let d = [1usize, 3, 8, 33, 128][round % 5];
            let mag = [1.0e-30f32, 1.0e-3, 1.0, 7.5, 1.0e20][(r.next() % 5) as usize];
            let xv: Vec<f32> = (0..d).map(|_| r.unit() * mag).collect();
            // Queries near, far, and beyond the code range (clamped).
            let spread = [0.0f32, 0.01, 1.0, 50.0][round % 4];
            let qv: Vec<f32> = xv.iter().map(|&v| v + r.unit() * mag * spread).collect();
            let max = xv.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
            // The arena's scale is the maximum over all records: often
            // larger than this record's own.
            let boost = [1.0, 1.0, 3.0, 1.0e6][(r.next() % 4) as usize];
            let scale = if max > 0.0 { boost * max / 127.0 } else { 1.0 };
            let (mut cx, mut cq) = (vec![0i8; d], vec![0i8; d]);
            let (xn, ex) = quantize_uniform(&xv, scale, &mut cx);
            let (qn, eq) = quantize_uniform(&qv, scale, &mut cq);
            let dot: i64 = cx
                .iter()
                .zip(&cq)
                .map(|(&a, &b)| i64::from(a) * i64::from(b))
                .sum();
            let dist = qn + xn - 2 * dot;
            let score = prox_kernels::canonical::l2sq(&qv, &xv);
            let rel = (d as f64 + 4.0) * EPS;
            for t in [score, score * 1.5, score + 1.0] {
                let y = l2_prune_limit(t, rel, eq, ex, scale);
                assert!(
                    dist as f64 <= y && dist <= limit_int(y),
                    "PROX_SEED={seed} round {round}: pruned at t={t} (score {score}, D {dist}, Y {y})"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 12_000);
        assert_eq!(limit_int(f64::INFINITY), i64::MAX);
        assert_eq!(limit_int(12.7), 12);
    }
}
