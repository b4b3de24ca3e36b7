//! Scalar streaming dots (the reference): one row at a time, exact `i32`.

/// `out[i] = Σ q_d · rows[i·dims + d]` (`dims = q.len()`).
pub(crate) fn dots(q: &[i8], rows: &[i8], out: &mut [i32]) {
    if q.is_empty() {
        out.fill(0);
        return;
    }
    for (row, o) in rows.chunks_exact(q.len()).zip(out) {
        *o = q
            .iter()
            .zip(row)
            .map(|(&a, &b)| i32::from(a) * i32::from(b))
            .sum();
    }
}

/// `Σ q·r` of two equal-length slices (the SIMD tiers' remainders; only
/// the x86-64 tier has one).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn tail(q: &[i8], r: &[i8]) -> i32 {
    q.iter()
        .zip(r)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}
