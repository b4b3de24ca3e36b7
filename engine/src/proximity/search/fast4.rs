//! Load-time 4-bit product-quantisation codes of every record, packed per
//! adaptive sub-list for the fast-scan kernel
//! ([`prox_kernels::pq::fastscan`]): the adaptive search's first pass.
//!
//! Scanning a sub-list's 8-bit codes costs one `d`-wide integer dot per
//! record; a 4-bit fast-scan pass costs `m / 2` in-register table lookups
//! per block of 32 records, several times less. The codes only choose
//! which records are rescored, so their error costs some recall at a given
//! pool depth, never correctness.
//!
//! * **Two quantizers** from [`WIDE_DIMS`] components on. The list and
//!   group means are always coded with [`rank_subspaces`] (`⌊d / 2⌋`):
//!   they decide which lists are scanned at all, and there are ~32 times
//!   fewer of them than records. The records are coded with
//!   [`scan_subspaces`]: `⌊d / 4⌋` subspaces for wide vectors, where the
//!   scan reads `m / 2` bytes per record from memory and is
//!   bandwidth-bound, so halving `m` halves its cost while the coarser
//!   codes cost little recall; below [`WIDE_DIMS`] the records share the
//!   means' quantizer, because there the coarser codes lose recall that a
//!   deeper pool only buys back at a higher cost.
//! * **Codebooks**: 16 centroids per subspace (subspace `s` covers the
//!   components `⌊s·d/m⌋..⌊(s+1)·d/m⌋`), trained by the PQ accelerator's
//!   canonical trainer (`numeric::pq::train_rows`, proximity-format.md 12.11
//!   rules: seeded initial centroids, f64 Lloyd sums in record order,
//!   canonical nearest centroid) on up to [`SAMPLE`] records taken at
//!   evenly spaced positions of the list order, for [`ITERATIONS`] rounds.
//! * **Codes**: each vector's nearest centroid per subspace by the query
//!   table kernel (`fastscan::table` with the vector as the query: the
//!   same operations per entry on every ISA), ties to the lower centroid.
//! * **Layout**: each list's record codes packed into fast-scan blocks of
//!   32 rows (a partial last block is padded), lists in list order; the
//!   codes of the list means (f64 mean of the members, rounded to f32)
//!   packed group by group, and the codes of the group means packed in
//!   group order, so the ranking of groups and lists is a fast-scan pass
//!   too.
//!
//! Everything is a function of the lists (themselves a function of the
//! descriptor), computed with bit-exact kernels, so the codes are the same
//! on every machine, ISA and thread count. They can be persisted as a
//! layout sidecar (`adaptive_layout.rs`).

use super::lists::Lists;
use super::node::Node;
use crate::numeric::pq::{train_rows, Shape};
use prox_kernels::pq::fastscan::{self, TableKind, CODES, MAX_SUBSPACES};
use rayon::prelude::*;
use std::sync::Arc;

/// Most records the codebooks are trained on (1 024 per centroid).
pub(crate) const SAMPLE: usize = 16_384;

/// Lloyd rounds of the codebook training.
pub(crate) const ITERATIONS: usize = 10;

/// Fewest records for which the 4-bit pass is built (smaller maps scan
/// their 8-bit codes: the pass would not pay for its training).
pub(crate) const MIN_RECORDS: usize = 1_024;

/// One 4-bit quantizer: `m` subspaces of 16 centroids.
#[derive(Debug, Clone)]
pub(crate) struct Book {
    /// Subspaces.
    pub(crate) m: usize,
    /// Codebooks transposed for the query table (`dims × 16`).
    pub(crate) books_t: Vec<f32>,
}

impl Book {
    /// Trains `m` subspaces on `rows`; `None` if the trainer refuses them.
    fn train<'a>(
        dims: usize,
        m: usize,
        rows: impl ExactSizeIterator<Item = &'a [f32]>,
    ) -> Option<Book> {
        let shape = Shape {
            m,
            k: CODES,
            iterations: ITERATIONS,
            seed: 0,
        };
        let books = train_rows(dims, rows, &shape).ok()?;
        let books_t = fastscan::transpose_books(dims, m, CODES, &books).ok()?;
        Some(Book { m, books_t })
    }

    /// Appends the code of `v` (`m` bytes) to `out`; `table` is scratch.
    fn encode(&self, v: &[f32], table: &mut Vec<f32>, out: &mut Vec<u8>) {
        table.resize(CODES * self.m, 0.0);
        fastscan::table(TableKind::L2, v, self.m, &self.books_t, CODES, table);
        out.extend(table.chunks_exact(CODES).map(nearest_slot));
    }
}

/// Every record's 4-bit code, packed per list, and the codes of the list
/// and group means.
///
/// Invariants: `block_start` has `lists + 1` ascending elements, list `l`
/// owns blocks `block_start[l]..block_start[l + 1]` of `blocks`
/// (`⌈len_l / 32⌉` blocks of `fastscan::block_bytes(scan.m)` bytes), row
/// `j` of them being slot `lists.start[l] + j`; `cent_blocks` and
/// `group_blocks` are blocks of `fastscan::block_bytes(rank.m)` bytes.
#[derive(Debug)]
pub(crate) struct Fast4 {
    /// The records' quantizer.
    pub(crate) scan: Book,
    /// The quantizer of the list and group means.
    pub(crate) rank: Book,
    /// First block of each list, then the number of blocks.
    pub(crate) block_start: Vec<u32>,
    /// Packed codes.
    pub(crate) blocks: Vec<u8>,
    /// First block of each group's list means, then the number of blocks.
    pub(crate) cent_start: Vec<u32>,
    /// Packed codes of the list means, group by group (row `j` of group
    /// `g`'s blocks is list `lists.group_start[g] + j`).
    pub(crate) cent_blocks: Vec<u8>,
    /// Packed codes of the group means (row `g` is group `g`; an empty
    /// group has the code of the zero vector).
    pub(crate) group_blocks: Vec<u8>,
}

/// Subspaces of the means' quantizer for `dims` components (`⌊d / 2⌋`),
/// `None` when the 4-bit pass does not apply (fewer than 2 components, or
/// more subspaces than the kernel's exact-sum limit).
pub(crate) fn rank_subspaces(dims: usize) -> Option<usize> {
    let m = dims / 2;
    (1..=MAX_SUBSPACES).contains(&m).then_some(m)
}

/// Whether the 4-bit pass applies to a map with these lists and
/// dimensions (what [`Fast4::build`] checks before reading any vector).
pub(crate) fn applies(lists: &Lists, dims: usize) -> bool {
    rank_subspaces(dims).is_some() && lists.norms.len() >= MIN_RECORDS
}

/// Fewest components for which the records get their own, coarser
/// quantizer (see the module docs).
pub(crate) const WIDE_DIMS: usize = 256;

/// Subspaces of the records' quantizer for `dims` components: `⌊d / 4⌋`
/// from [`WIDE_DIMS`] on, [`rank_subspaces`]`(d)` below; applies whenever
/// [`rank_subspaces`] does.
pub(crate) fn scan_subspaces(dims: usize) -> usize {
    if dims >= WIDE_DIMS {
        dims / 4
    } else {
        (dims / 2).max(1)
    }
}

impl Fast4 {
    /// Trains the codebooks and packs every list; `None` when the pass does
    /// not apply to this map (see [`rank_subspaces`] and [`MIN_RECORDS`]).
    /// `pages` are the arena's pages, all decoded.
    pub(crate) fn build(pages: &[Arc<Node>], lists: &Lists, dims: usize) -> Option<Fast4> {
        let rank_m = rank_subspaces(dims)?;
        let n = lists.norms.len();
        if n < MIN_RECORDS {
            return None;
        }
        let vector =
            |slot: usize| pages[lists.page[slot] as usize].vector(lists.entry[slot] as usize, dims);
        let take = n.min(SAMPLE);
        let sample = || (0..take).map(|i| vector(i * n / take));
        let scan_m = scan_subspaces(dims);
        let (scan, rank) = if scan_m == rank_m {
            let book = Book::train(dims, rank_m, sample())?;
            (book.clone(), book)
        } else {
            let (scan, rank) = rayon::join(
                || Book::train(dims, scan_m, sample()),
                || Book::train(dims, rank_m, sample()),
            );
            (scan?, rank?)
        };

        // Per list: its records' packed codes and its mean's code.
        let lists_n = lists.start.len() - 1;
        let per_list: Vec<(Vec<u8>, Vec<u8>)> = (0..lists_n)
            .into_par_iter()
            .map_init(
                || (Vec::new(), Vec::new()),
                |(table, codes), l| {
                    codes.clear();
                    let slots = lists.start[l]..lists.start[l + 1];
                    for slot in slots.clone() {
                        scan.encode(vector(slot), table, codes);
                    }
                    let mut out = Vec::new();
                    // Codes are < 16 and m is in range: packing cannot fail.
                    fastscan::pack(codes, scan.m, &mut out).ok()?;
                    let mut mean = Vec::with_capacity(rank.m);
                    rank.encode(&mean_of(slots.map(vector), dims), table, &mut mean);
                    Some((out, mean))
                },
            )
            .collect::<Option<_>>()?;
        // Per group: its mean's code (over all its records).
        let groups = lists.group_start.len() - 1;
        let group_codes: Vec<u8> = (0..groups)
            .into_par_iter()
            .map_init(Vec::new, |table, g| {
                let slots =
                    lists.start[lists.group_start[g]]..lists.start[lists.group_start[g + 1]];
                let mut code = Vec::with_capacity(rank.m);
                rank.encode(&mean_of(slots.map(vector), dims), table, &mut code);
                code
            })
            .flatten()
            .collect();
        let bb = fastscan::block_bytes(scan.m);
        let mut block_start = Vec::with_capacity(lists_n + 1);
        let mut blocks = Vec::with_capacity(per_list.iter().map(|p| p.0.len()).sum());
        for (p, _) in &per_list {
            block_start.push((blocks.len() / bb) as u32);
            blocks.extend_from_slice(p);
        }
        block_start.push((blocks.len() / bb) as u32);
        let rb = fastscan::block_bytes(rank.m);
        let mut cent_start = Vec::with_capacity(groups + 1);
        let mut cent_blocks = Vec::new();
        let mut scratch = Vec::new();
        for g in 0..groups {
            cent_start.push((cent_blocks.len() / rb) as u32);
            scratch.clear();
            for (_, mean) in &per_list[lists.group_start[g]..lists.group_start[g + 1]] {
                scratch.extend_from_slice(mean);
            }
            fastscan::pack(&scratch, rank.m, &mut cent_blocks).ok()?;
        }
        cent_start.push((cent_blocks.len() / rb) as u32);
        let mut group_blocks = Vec::new();
        fastscan::pack(&group_codes, rank.m, &mut group_blocks).ok()?;
        Some(Fast4 {
            scan,
            rank,
            block_start,
            blocks,
            cent_start,
            cent_blocks,
            group_blocks,
        })
    }

    /// Whether the records share the means' quantizer (below
    /// [`WIDE_DIMS`]): one query table then serves both.
    pub(crate) fn shared(&self) -> bool {
        self.scan.m == self.rank.m
    }

    /// Heap bytes of the codes and codebooks.
    pub(crate) fn heap_bytes(&self) -> usize {
        4 * (self.scan.books_t.len()
            + self.rank.books_t.len()
            + self.block_start.len()
            + self.cent_start.len())
            + self.blocks.len()
            + self.cent_blocks.len()
            + self.group_blocks.len()
    }
}

/// The mean of `rows` (f64 sums in order, rounded to f32; zeros when
/// empty).
fn mean_of<'a>(rows: impl Iterator<Item = &'a [f32]>, dims: usize) -> Vec<f32> {
    let mut sum = vec![0f64; dims];
    let mut n = 0u64;
    for r in rows {
        n += 1;
        for (s, &x) in sum.iter_mut().zip(r) {
            *s += f64::from(x);
        }
    }
    let n = n.max(1) as f64;
    sum.iter().map(|&s| (s / n) as f32).collect()
}

/// Index of the smallest of 16 squared distances (ties to the lower; NaN
/// never wins).
fn nearest_slot(row: &[f32]) -> u8 {
    let mut best = 0usize;
    for (j, &v) in row.iter().enumerate().skip(1) {
        if v < row[best] || row[best].is_nan() {
            best = j;
        }
    }
    best as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_slot_prefers_the_lower_index_on_ties() {
        let mut row = [5.0f32; 16];
        assert_eq!(nearest_slot(&row), 0);
        row[3] = 1.0;
        row[9] = 1.0;
        assert_eq!(nearest_slot(&row), 3);
        row[0] = f32::NAN;
        assert_eq!(nearest_slot(&row), 3);
    }

    #[test]
    fn subspaces_follow_the_kernel_limits() {
        assert_eq!(rank_subspaces(1), None);
        assert_eq!(rank_subspaces(2), Some(1));
        assert_eq!(rank_subspaces(384), Some(192));
        assert_eq!(rank_subspaces(513), Some(256));
        assert_eq!(rank_subspaces(514), None);
        assert_eq!(scan_subspaces(2), 1);
        assert_eq!(scan_subspaces(7), 3);
        assert_eq!(scan_subspaces(128), 64);
        assert_eq!(scan_subspaces(255), 127);
        assert_eq!(scan_subspaces(256), 64);
        assert_eq!(scan_subspaces(384), 96);
        assert_eq!(scan_subspaces(513), 128);
    }
}
