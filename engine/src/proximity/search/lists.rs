//! Load-time sub-lists for the adaptive search: every logical leaf split
//! into small k-means clusters of its records, with a centroid catalogue
//! ranked per query (IVF with fine lists).
//!
//! The logical leaves group records around random representatives, so the
//! records nearest a query are spread over many leaves, and scanning whole
//! leaves reads several hundred records for each useful one. Splitting each
//! leaf into clusters of about [`LIST_TARGET`] records around their means
//! gives a much finer partition at a cost linear in the map (k-means runs
//! inside each leaf, never over the whole map). A query first ranks the
//! leaves by their mean codes, then the lists of the nearest leaves by
//! their centroids, and scans the nearest lists.
//!
//! * **Clustering** runs on the scan arena's uniform-scale codes, with
//!   integer arithmetic only (`numeric::kmeans::lloyd_codes`): squared code distances come from
//!   [`prox_kernels::i8scan::dots`] (bit-exact on every ISA), ties go to the
//!   lowest cluster index, centroids are the members' mean codes rounded
//!   half away from zero, seeds are the records at evenly spaced positions
//!   of the leaf, and Lloyd's iterations stop after [`ITERS`] rounds or when
//!   no assignment changes. Leaves are clustered in parallel, but each
//!   leaf's result depends on its own records only, so the lists are the
//!   same on every machine, ISA and thread count.
//! * **Layout**: lists in leaf-catalogue order (a leaf's clusters by
//!   cluster index, empty ones dropped), a list's members in arena order;
//!   each list's codes and norms are copied contiguously, so a list is one
//!   kernel call, and each slot keeps its arena `(page, entry)` for keys,
//!   vectors and tie-breaks.
//!
//! The map's CIDs and the exact search do not depend on the lists; they
//! can be persisted as a layout sidecar (`adaptive_layout.rs`).

use super::arena::ScanArena;
use crate::numeric::kmeans::{code_norm, lloyd_codes, mean_codes, CodeClusters};
use rayon::prelude::*;

/// Target records per list: a leaf of `m` records gets `round(m / 32)`
/// clusters (at least one): finer lists rank more centroids per query,
/// coarser ones scan more records per useful one.
pub(crate) const LIST_TARGET: usize = 32;

/// Most Lloyd iterations per leaf.
pub(crate) const ITERS: usize = 8;

/// Every record's code again, grouped by list, and the list centroids.
///
/// Invariants: `start` is non-decreasing with `lists + 1` elements from 0
/// to `n`, every list is non-empty, `cent` holds `lists·dims` codes in
/// `−127..=127`, `cent_norm`, `group` have one element per list, `codes`
/// holds `n·dims` codes, and `norms`, `page`, `entry` one element per slot.
#[derive(Debug, Default)]
pub(crate) struct Lists {
    /// Centroid codes (arena scale), list-major.
    pub(crate) cent: Vec<i8>,
    /// `Σ ĉ_i²` per centroid.
    pub(crate) cent_norm: Vec<i32>,
    /// The catalogue group (logical leaf) each list belongs to.
    pub(crate) group: Vec<u32>,
    /// First list of each group, then the number of lists.
    pub(crate) group_start: Vec<usize>,
    /// Each group's mean code (zeros for an empty group), group-major.
    pub(crate) group_cent: Vec<i8>,
    /// `Σ ĉ_i²` per group mean.
    pub(crate) group_norm: Vec<i32>,
    /// First slot of each list, then `n`.
    pub(crate) start: Vec<usize>,
    /// `n·dims` codes in list order.
    pub(crate) codes: Vec<i8>,
    /// `Σ x̂_i²` per slot.
    pub(crate) norms: Vec<i32>,
    /// Arena page of each slot.
    pub(crate) page: Vec<u32>,
    /// Entry of each slot within its page.
    pub(crate) entry: Vec<u32>,
}

/// Integer k-means of the `m` records `codes` (norms `norms`) into
/// `round(m / LIST_TARGET)` clusters (one cluster when that is at most one
/// or the codes are empty).
fn cluster_leaf(codes: &[i8], norms: &[i32], d: usize) -> CodeClusters {
    let m = norms.len();
    let c = ((m + LIST_TARGET / 2) / LIST_TARGET).clamp(1, m.max(1));
    if c <= 1 || d == 0 {
        return CodeClusters {
            cent: mean_codes(codes, d, &[(0..m as u32).collect()]),
            members: vec![(0..m as u32).collect()],
        };
    }
    lloyd_codes(codes, norms, d, c, ITERS)
}

impl Lists {
    /// Clusters every arena group (in parallel) and lays the lists out.
    pub(crate) fn build(arena: &ScanArena, dims: usize) -> Lists {
        let d = dims;
        let groups = arena.group_page.len().saturating_sub(1);
        let leaves: Vec<CodeClusters> = (0..groups)
            .into_par_iter()
            .map(|g| {
                let a = arena.page_start[arena.group_page[g]];
                let b = arena.page_start[arena.group_page[g + 1]];
                if a == b {
                    return CodeClusters {
                        cent: Vec::new(),
                        members: Vec::new(),
                    };
                }
                cluster_leaf(&arena.codes[a * d..b * d], &arena.norms[a..b], d)
            })
            .collect();
        let n = arena.norms.len();
        let mut out = Lists {
            codes: Vec::with_capacity(n * d),
            norms: Vec::with_capacity(n),
            page: Vec::with_capacity(n),
            entry: Vec::with_capacity(n),
            ..Lists::default()
        };
        for (g, leaf) in leaves.into_iter().enumerate() {
            out.group_start.push(out.group.len());
            let a = arena.page_start[arena.group_page[g]];
            let mut p = arena.group_page[g];
            // Arena page of each record of the leaf (records are in page
            // order).
            let b = arena.page_start[arena.group_page[g + 1]];
            let mut page_of = Vec::with_capacity(b - a);
            for r in a..b {
                while arena.page_start[p + 1] <= r {
                    p += 1;
                }
                page_of.push(p);
            }
            for (j, mem) in leaf.members.iter().enumerate() {
                out.start.push(out.norms.len());
                out.group.push(g as u32);
                let c = &leaf.cent[j * d..(j + 1) * d];
                out.cent.extend_from_slice(c);
                // Σ c² <= 127²·dims < 2^31 for the supported dims.
                out.cent_norm.push(code_norm(c) as i32);
                for &i in mem {
                    let r = a + i as usize;
                    let p = page_of[i as usize];
                    out.codes
                        .extend_from_slice(&arena.codes[r * d..(r + 1) * d]);
                    out.norms.push(arena.norms[r]);
                    out.page.push(p as u32);
                    out.entry.push((r - arena.page_start[p]) as u32);
                }
            }
        }
        out.start.push(out.norms.len());
        out.group_start.push(out.group.len());
        // Group means, for ranking the groups before their lists.
        let means: Vec<Vec<i8>> = (0..groups)
            .into_par_iter()
            .map(|g| {
                let a = arena.page_start[arena.group_page[g]];
                let b = arena.page_start[arena.group_page[g + 1]];
                mean_codes(
                    &arena.codes[a * d..b * d],
                    d,
                    &[(0..(b - a) as u32).collect()],
                )
            })
            .collect();
        for m in means {
            out.group_norm.push(code_norm(&m) as i32);
            out.group_cent.extend(m);
        }
        out
    }

    /// Heap bytes of the lists.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.cent.len()
            + 4 * self.cent_norm.len()
            + 4 * self.group.len()
            + 8 * (self.start.len() + self.group_start.len())
            + self.group_cent.len()
            + 4 * self.group_norm.len()
            + self.codes.len()
            + 4 * (self.norms.len() + self.page.len() + self.entry.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two well separated blobs (the halves of the leaf) inside one leaf end up in different lists,
    /// every record is in exactly one list, and centroids are member means.
    #[test]
    fn clusters_partition_the_leaf() {
        let d = 4;
        let m = 2 * LIST_TARGET;
        let mut codes = Vec::new();
        for i in 0..m {
            let base: i8 = if i < m / 2 { -100 } else { 100 };
            let jitter = (i % 7) as i8 - 3;
            codes.extend_from_slice(&[base + jitter, base, -base, jitter]);
        }
        let norms: Vec<i32> = codes.chunks(d).map(|c| code_norm(c) as i32).collect();
        let leaf = cluster_leaf(&codes, &norms, d);
        assert_eq!(leaf.members.len(), 2);
        let mut seen = vec![0u32; m];
        for mem in &leaf.members {
            let half = mem[0] as usize / (m / 2);
            assert!(
                mem.iter().all(|&i| i as usize / (m / 2) == half),
                "blobs mixed: {mem:?}"
            );
            assert!(mem.windows(2).all(|w| w[0] < w[1]));
            for &i in mem {
                seen[i as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1));
        assert_eq!(leaf.cent, mean_codes(&codes, d, &leaf.members));
    }
}
