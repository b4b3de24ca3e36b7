//! Portable tier: `wide::f32x8` with four independent accumulators per sum.
//!
//! `wide` picks its instructions at compile time (two SSE registers per
//! vector on a baseline x86-64 build), so this tier needs no run-time checks.
//! Tails shorter than 8 are summed in scalar after the vector reduction.

use wide::f32x8;

#[inline(always)]
fn load(s: &[f32], i: usize) -> f32x8 {
    let mut a = [0.0f32; 8];
    a.copy_from_slice(&s[i..i + 8]);
    f32x8::from(a)
}

/// `Σ (a_i − b_i)²`; `a.len() == b.len()`.
pub(crate) fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [f32x8::ZERO; 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let d = load(a, i + 8 * k) - load(b, i + 8 * k);
            *acc += d * d;
        }
        i += 32;
    }
    while i + 8 <= n {
        let d = load(a, i) - load(b, i);
        acc[0] += d * d;
        i += 8;
    }
    let mut s = ((acc[0] + acc[1]) + (acc[2] + acc[3])).reduce_add();
    while i < n {
        let d = a[i] - b[i];
        s += d * d;
        i += 1;
    }
    s
}

/// `Σ a_i · b_i`.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [f32x8::ZERO; 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc += load(a, i + 8 * k) * load(b, i + 8 * k);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] += load(a, i) * load(b, i);
        i += 8;
    }
    let mut s = ((acc[0] + acc[1]) + (acc[2] + acc[3])).reduce_add();
    while i < n {
        s += a[i] * b[i];
        i += 1;
    }
    s
}

/// `(Σ a_i·b_i, Σ b_i²)` in one pass.
pub(crate) fn dot_norm(a: &[f32], b: &[f32]) -> (f32, f32) {
    let n = a.len().min(b.len());
    let mut d = [f32x8::ZERO; 2];
    let mut nb = [f32x8::ZERO; 2];
    let mut i = 0;
    while i + 16 <= n {
        for k in 0..2 {
            let vb = load(b, i + 8 * k);
            d[k] += load(a, i + 8 * k) * vb;
            nb[k] += vb * vb;
        }
        i += 16;
    }
    while i + 8 <= n {
        let vb = load(b, i);
        d[0] += load(a, i) * vb;
        nb[0] += vb * vb;
        i += 8;
    }
    let mut sd = (d[0] + d[1]).reduce_add();
    let mut sn = (nb[0] + nb[1]).reduce_add();
    while i < n {
        sd += a[i] * b[i];
        sn += b[i] * b[i];
        i += 1;
    }
    (sd, sn)
}

/// `l2sq(q, row)` for every row.
pub(crate) fn l2sq_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    super::scalar::for_rows(q, rows, out, l2sq);
}

/// `dot(q, row)` for every row.
pub(crate) fn dot_many(q: &[f32], rows: &[f32], out: &mut [f32]) {
    super::scalar::for_rows(q, rows, out, dot);
}

/// Cosine distance of `q` against every row.
pub(crate) fn cosine_many(q: &[f32], q_norm2: f32, rows: &[f32], out: &mut [f32]) {
    super::scalar::for_rows(q, rows, out, |q, r| {
        let (d, nr) = dot_norm(q, r);
        super::cosine_from_parts(d, q_norm2, nr)
    });
}
