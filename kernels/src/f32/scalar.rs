//! Scalar reference: one `f32` accumulator, components in ascending order.

/// `Σ (a_i − b_i)²`.
pub(crate) fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (&x, &y) in a.iter().zip(b) {
        let d = x - y;
        acc += d * d;
    }
    acc
}

/// `Σ a_i · b_i`.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (&x, &y) in a.iter().zip(b) {
        acc += x * y;
    }
    acc
}

/// `(Σ a_i·b_i, Σ b_i²)` in one pass (the query norm is computed once by the caller).
pub(crate) fn dot_norm(a: &[f32], b: &[f32]) -> (f32, f32) {
    let mut d = 0.0f32;
    let mut nb = 0.0f32;
    for (&x, &y) in a.iter().zip(b) {
        d += x * y;
        nb += y * y;
    }
    (d, nb)
}

/// `l2sq(q, row)` for every `dim`-sized row; `rows.len() == dim · out.len()`.
pub(crate) fn l2sq_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    for_rows(q, rows, out, l2sq);
}

/// `dot(q, row)` for every row.
pub(crate) fn dot_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    for_rows(q, rows, out, dot);
}

/// Cosine distance of `q` (squared norm `q_norm2`) against every row.
pub(crate) fn cosine_many(q: &[f32], q_norm2: f32, rows: &[f32], out: &mut [f32]) {
    for_rows(q, rows, out, |q, r| {
        let (d, nr) = dot_norm(q, r);
        super::cosine_from_parts(d, q_norm2, nr)
    });
}

/// Applies `f(q, row)` to every row; a zero `dim` gives `f(&[], &[])` per output.
#[inline(always)]
pub(crate) fn for_rows(
    q: &[f32],
    rows: &[f32],
    out: &mut [f32],
    f: impl Fn(&[f32], &[f32]) -> f32,
) {
    let dim = q.len();
    if dim == 0 {
        out.fill(f(&[], &[]));
        return;
    }
    for (o, r) in out.iter_mut().zip(rows.chunks_exact(dim)) {
        *o = f(q, r);
    }
}
