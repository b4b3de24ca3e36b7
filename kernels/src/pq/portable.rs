//! Portable ADC scan: eight rows in the lanes of a `wide::f32x8`; each lane
//! sums its row's entries in subspace order (entries fetched with scalar
//! loads, as `wide` has no gather), so results equal the scalar reference.

use wide::f32x8;

use super::SLOTS;

/// Scan of `out.len()` rows of `m` bytes.
pub(crate) fn scan(table: &[f32], m: usize, codes: &[u8], out: &mut [f32]) {
    let n = out.len();
    let mut i = 0;
    while i + 8 <= n {
        let block = &codes[i * m..(i + 8) * m];
        let mut acc = f32x8::ZERO;
        for s in 0..m {
            let sub = &table[s * SLOTS..(s + 1) * SLOTS];
            let mut e = [0.0f32; 8];
            for (l, e) in e.iter_mut().enumerate() {
                *e = sub[usize::from(block[l * m + s])];
            }
            acc += f32x8::new(e);
        }
        out[i..i + 8].copy_from_slice(&acc.to_array());
        i += 8;
    }
    super::scalar::scan(table, m, &codes[i * m..], &mut out[i..]);
}
