//! AVX2 ADC scan.
//!
//! Measured on Zen 3 (docs/kernels.md), gathering eight rows' entries with
//! `vpgatherdd`/`vgatherdps` was about 2.5× slower than scalar lookups, so this
//! tier interleaves four rows with independent scalar accumulators (breaking
//! the add-latency chain of a single row; loads then bound the speed). Each
//! row still sums its entries in subspace order from `0.0`, so results equal
//! the scalar reference bit for bit.

use super::SLOTS;

/// Scan of `out.len()` rows of `m` bytes.
///
/// # Safety
/// The CPU must support AVX2 (kept `unsafe` for the uniform tier shape; the
/// body only uses checked indexing).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn scan(table: &[f32], m: usize, codes: &[u8], out: &mut [f32]) {
    let n = out.len();
    let table = &table[..m * SLOTS];
    let mut i = 0;
    while i + 4 <= n {
        let block = &codes[i * m..(i + 4) * m];
        let (r0, rest) = block.split_at(m);
        let (r1, rest) = rest.split_at(m);
        let (r2, r3) = rest.split_at(m);
        let mut acc = [0.0f32; 4];
        for (s, sub) in table.chunks_exact(SLOTS).enumerate() {
            acc[0] += sub[usize::from(r0[s])];
            acc[1] += sub[usize::from(r1[s])];
            acc[2] += sub[usize::from(r2[s])];
            acc[3] += sub[usize::from(r3[s])];
        }
        out[i..i + 4].copy_from_slice(&acc);
        i += 4;
    }
    super::scalar::scan(table, m, &codes[i * m..], &mut out[i..]);
}
