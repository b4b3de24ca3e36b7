//! Scalar fast-scan references (the models every tier must equal): the scan
//! unpacks each row's nibbles and sums its table
//! entries in a `u32` (the sum is below `2¹⁶`, see the module docs).

use super::{round_u8, unpack, TableKind, BLOCK, CODES};

/// Scan of every block (`16·mp` bytes each) into 32 outputs per block.
pub(crate) fn scan(lut: &[u8], mp: usize, blocks: &[u8], out: &mut [u16]) {
    for (block, out) in blocks
        .chunks_exact(CODES * mp)
        .zip(out.chunks_exact_mut(BLOCK))
    {
        for (r, o) in out.iter_mut().enumerate() {
            let mut acc = 0u32;
            for s in 0..mp {
                acc += u32::from(lut[s * CODES + usize::from(unpack(block, s, r))]);
            }
            // acc <= 255 * 256 < 2^16 (mp <= 256).
            *o = acc as u16;
        }
    }
}

/// Smallest and largest finite entry of every 16-entry row of `table`
/// (`+inf` / `-inf` for a row without a finite entry).
pub(crate) fn bounds(table: &[f32], lo: &mut [f32], hi: &mut [f32]) {
    for ((row, l), h) in table.chunks_exact(CODES).zip(lo).zip(hi) {
        (*l, *h) = row
            .iter()
            .filter(|x| x.is_finite())
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
    }
}

/// Quantises row `s` of `table` against `lo[s]`: finite entries become
/// `round_u8((t − lo) / scale)`, others 255.
pub(crate) fn quantize(table: &[f32], lo: &[f32], scale: f32, out: &mut [u8]) {
    for ((row, &l), out) in table
        .chunks_exact(CODES)
        .zip(lo)
        .zip(out.chunks_exact_mut(CODES))
    {
        for (&t, o) in row.iter().zip(out.iter_mut()) {
            *o = if t.is_finite() {
                round_u8((t - l) / scale)
            } else {
                255
            };
        }
    }
}

/// The reference query table (see `fastscan::table`): per subspace and
/// slot, an f32 accumulation from `0.0` in component order, multiply and
/// add separate.
pub(crate) fn table(
    kind: TableKind,
    query: &[f32],
    m: usize,
    books_t: &[f32],
    k: usize,
    out: &mut [f32],
) {
    let dim = query.len();
    for (s, row) in out.chunks_exact_mut(CODES).enumerate() {
        let (a, b) = (s * dim / m, (s + 1) * dim / m);
        for (j, o) in row.iter_mut().enumerate() {
            if j >= k {
                *o = f32::INFINITY;
                continue;
            }
            let mut acc = 0f32;
            for d in a..b {
                let c = books_t[CODES * d + j];
                acc = match kind {
                    TableKind::L2 => {
                        let x = query[d] - c;
                        acc + x * x
                    }
                    TableKind::NegDot => acc + query[d] * c,
                };
            }
            *o = match kind {
                TableKind::L2 => acc,
                TableKind::NegDot => -acc,
            };
        }
    }
}
