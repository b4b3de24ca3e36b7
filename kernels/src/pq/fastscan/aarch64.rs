//! NEON fast-scan: per subspace, one 16-byte load of packed codes, low and
//! high nibbles looked up with `vqtbl1q_u8` in the subspace's 16-byte table
//! row, results widened into four `u16x8` accumulators (rows 0..8, 8..16,
//! 16..24, 24..32) with `vaddw_u8` / `vaddw_high_u8`. Every word holds at
//! most `255 · mp ≤ 65 280`, so the sums are exact.

use std::arch::aarch64::*;

use super::{BLOCK, CODES};

/// Scan of every block (`16·mp` bytes each) into 32 outputs per block.
///
/// # Safety
/// The CPU must support NEON; `lut.len() ≥ 16·mp`, `blocks.len()` is a
/// multiple of `16·mp` and `out` has 32 slots per block.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn scan(lut: &[u8], mp: usize, blocks: &[u8], out: &mut [u16]) {
    let nib = vdupq_n_u8(0x0f);
    for (block, out) in blocks
        .chunks_exact(CODES * mp)
        .zip(out.chunks_exact_mut(BLOCK))
    {
        let mut a0 = vdupq_n_u16(0);
        let mut a1 = vdupq_n_u16(0);
        let mut a2 = vdupq_n_u16(0);
        let mut a3 = vdupq_n_u16(0);
        for s in 0..mp {
            // SAFETY: 16·s + 16 <= 16·mp <= block.len(), lut.len().
            let (c, t) = unsafe {
                (
                    vld1q_u8(block.as_ptr().add(CODES * s)),
                    vld1q_u8(lut.as_ptr().add(CODES * s)),
                )
            };
            let rl = vqtbl1q_u8(t, vandq_u8(c, nib));
            let rh = vqtbl1q_u8(t, vshrq_n_u8(c, 4));
            a0 = vaddw_u8(a0, vget_low_u8(rl));
            a1 = vaddw_high_u8(a1, rl);
            a2 = vaddw_u8(a2, vget_low_u8(rh));
            a3 = vaddw_high_u8(a3, rh);
        }
        // SAFETY: `out` has 32 u16 = four 8-lane stores.
        unsafe {
            vst1q_u16(out.as_mut_ptr(), a0);
            vst1q_u16(out.as_mut_ptr().add(8), a1);
            vst1q_u16(out.as_mut_ptr().add(16), a2);
            vst1q_u16(out.as_mut_ptr().add(24), a3);
        }
    }
}
