//! Scalar fast-scan reference: unpacks each row's nibbles and sums its table
//! entries in a `u32` (the sum is below `2¹⁶`, see the module docs).

use super::{unpack, BLOCK, CODES};

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
