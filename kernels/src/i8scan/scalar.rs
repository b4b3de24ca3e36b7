//! Scalar streaming dots (the reference): one row at a time, exact `i32`.

/// `out[i] = Σ q_d · rows[i·dims + d]` (`dims = q.len()`).
pub(crate) fn dots(q: &[i8], rows: &[i8], out: &mut [i32]) {
    if q.is_empty() {
        out.fill(0);
        return;
    }
    for (row, o) in rows.chunks_exact(q.len()).zip(out) {
        *o = dot(q, row);
    }
}

/// `Σ q·r` of two equal-length slices: one row here, and the remainder
/// after the SIMD tiers' full steps.
#[inline]
pub(crate) fn dot(q: &[i8], r: &[i8]) -> i32 {
    q.iter()
        .zip(r)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

/// Appends `i` to `out` and `bias[i] − 2·dot(q, row_i)` to `vals` for
/// every row with that value at most `limit` (rows in order).
pub(crate) fn screen(
    q: &[i8],
    rows: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    for (i, &b) in bias.iter().enumerate() {
        let v = b - 2 * dot(q, &rows[i * q.len()..(i + 1) * q.len()]);
        if v <= limit {
            out.push(i as u32);
            vals.push(v);
        }
    }
}

/// Code `d` of row `i` in the grouped layout (`w` bytes per row, a
/// multiple of 4; see [`super::grouped`]).
#[inline]
pub(crate) fn grouped_at(groups: &[i8], w: usize, i: usize, d: usize) -> i8 {
    groups[(i / 8) * 8 * w + (d / 4) * 32 + (i % 8) * 4 + d % 4]
}

/// [`screen`] over the grouped layout: rows `0..bias.len()`.
pub(crate) fn screen_grouped(
    q: &[i8],
    groups: &[i8],
    bias: &[i32],
    limit: i32,
    out: &mut Vec<u32>,
    vals: &mut Vec<i32>,
) {
    let w = q.len();
    for (i, &b) in bias.iter().enumerate() {
        let dot: i32 = q
            .iter()
            .enumerate()
            .map(|(d, &a)| i32::from(a) * i32::from(grouped_at(groups, w, i, d)))
            .sum();
        let v = b - 2 * dot;
        if v <= limit {
            out.push(i as u32);
            vals.push(v);
        }
    }
}
