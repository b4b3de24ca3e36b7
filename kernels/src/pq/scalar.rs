//! Scalar ADC scan: one row at a time, entries summed in subspace order.

/// `Σ_s table[s·256 + code_s]` in subspace order, from `0.0`.
#[inline(always)]
pub(crate) fn row(table: &[f32], code: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (s, &c) in code.iter().enumerate() {
        acc += table[s * super::SLOTS + usize::from(c)];
    }
    acc
}

/// [`row`] for each of the `out.len()` rows of `m` bytes.
pub(crate) fn scan(table: &[f32], m: usize, codes: &[u8], out: &mut [f32]) {
    for (o, code) in out.iter_mut().zip(codes.chunks_exact(m)) {
        *o = row(table, code);
    }
}
