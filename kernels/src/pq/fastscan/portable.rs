//! Portable fast-scan: 32 `u16` accumulators per block as fixed-size arrays
//! (the compiler vectorises the 16-wide nibble loops); `u16` sums are exact
//! because they never exceed `255 · 256`.

use super::{BLOCK, CODES};

/// Scan of every block (`16·mp` bytes each) into 32 outputs per block.
pub(crate) fn scan(lut: &[u8], mp: usize, blocks: &[u8], out: &mut [u16]) {
    for (block, out) in blocks
        .chunks_exact(CODES * mp)
        .zip(out.chunks_exact_mut(BLOCK))
    {
        let mut lo = [0u16; 16];
        let mut hi = [0u16; 16];
        for (codes, row) in block.chunks_exact(CODES).zip(lut.chunks_exact(CODES)) {
            let row: &[u8; 16] = row.try_into().expect("16-byte table row");
            for j in 0..16 {
                let c = codes[j];
                lo[j] += u16::from(row[usize::from(c & 15)]);
                hi[j] += u16::from(row[usize::from(c >> 4)]);
            }
        }
        out[..16].copy_from_slice(&lo);
        out[16..].copy_from_slice(&hi);
    }
}
