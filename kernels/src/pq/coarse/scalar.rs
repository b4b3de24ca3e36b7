//! Scalar coarse dots (the reference): one plain row at a time, exact `i32`.

/// `out[i] = Σ q_d · rows[i·dims + d]` (`dims = q.len()`).
pub(crate) fn dots(q: &[i8], rows: &[i8], out: &mut [i32]) {
    for (row, o) in rows.chunks_exact(q.len()).zip(out) {
        *o = q
            .iter()
            .zip(row)
            .map(|(&a, &b)| i32::from(a) * i32::from(b))
            .sum();
    }
}
