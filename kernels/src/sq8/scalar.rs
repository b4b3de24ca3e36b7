//! Scalar reference for the SQ8 kernels.
//!
//! Float sums: one `f32` accumulator in component order. Integer sums: one
//! `i32` accumulator with wrapping addition (so the result is the exact dot
//! product reduced mod 2^32, whatever the order).

/// `Σ (q_i − s_i·c_i)²`: `q` query, `s` per-component scales, `c` codes.
pub(crate) fn l2sq(q: &[f32], s: &[f32], c: &[i8]) -> f32 {
    let mut acc = 0.0f32;
    for ((&x, &sc), &code) in q.iter().zip(s).zip(c) {
        let d = x - sc * f32::from(code);
        acc += d * d;
    }
    acc
}

/// `Σ qs_i · c_i` where `qs_i = q_i · s_i` was folded in by the caller.
pub(crate) fn dot(qs: &[f32], c: &[i8]) -> f32 {
    let mut acc = 0.0f32;
    for (&x, &code) in qs.iter().zip(c) {
        acc += x * f32::from(code);
    }
    acc
}

/// `Σ a_i · b_i` in `i32`, wrapping.
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = 0i32;
    for (&x, &y) in a.iter().zip(b) {
        acc = acc.wrapping_add(i32::from(x) * i32::from(y));
    }
    acc
}

/// Applies `f(row)` to every `dim`-sized row of `codes`; `dim = 0` gives `f(&[])`.
#[inline(always)]
pub(crate) fn for_rows<T: Copy>(dim: usize, codes: &[i8], out: &mut [T], f: impl Fn(&[i8]) -> T) {
    if dim == 0 {
        out.fill(f(&[]));
        return;
    }
    for (o, r) in out.iter_mut().zip(codes.chunks_exact(dim)) {
        *o = f(r);
    }
}
