//! NEON ADC scan: four rows in the lanes of a `float32x4_t`, entries fetched
//! with scalar loads (NEON has no gather); each lane sums its row in
//! subspace order, so results equal the scalar reference bit for bit.

use std::arch::aarch64::*;

use super::SLOTS;

/// Scan of `out.len()` rows of `m` bytes.
///
/// # Safety
/// The CPU must support NEON; `codes.len() = m·out.len()`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn scan(table: &[f32], m: usize, codes: &[u8], out: &mut [f32]) {
    let n = out.len();
    let mut i = 0;
    while i + 4 <= n {
        let block = &codes[i * m..(i + 4) * m];
        let mut acc = vdupq_n_f32(0.0);
        for s in 0..m {
            let sub = &table[s * SLOTS..(s + 1) * SLOTS];
            let e = [
                sub[usize::from(block[s])],
                sub[usize::from(block[m + s])],
                sub[usize::from(block[2 * m + s])],
                sub[usize::from(block[3 * m + s])],
            ];
            // SAFETY: `e` holds 4 floats.
            acc = vaddq_f32(acc, unsafe { vld1q_f32(e.as_ptr()) });
        }
        // SAFETY: i + 4 <= n = out.len().
        unsafe { vst1q_f32(out.as_mut_ptr().add(i), acc) };
        i += 4;
    }
    super::scalar::scan(table, m, &codes[i * m..], &mut out[i..]);
}
