//! Portable SQ8 tier on `wide`: codes widened to `f32x8` for the asymmetric
//! kernels; `i8 → i16` widening plus `pmaddwd`-style pair dots (`i16x16::dot`,
//! exact in `i32`) for the integer kernel. Tails in scalar.

use wide::{f32x8, i16x16, i32x8, i8x16};

#[inline(always)]
fn load_f(s: &[f32], i: usize) -> f32x8 {
    let mut a = [0.0f32; 8];
    a.copy_from_slice(&s[i..i + 8]);
    f32x8::new(a)
}

#[inline(always)]
fn load_codes(c: &[i8], i: usize) -> f32x8 {
    let mut a = [0.0f32; 8];
    for (dst, &src) in a.iter_mut().zip(&c[i..i + 8]) {
        *dst = f32::from(src);
    }
    f32x8::new(a)
}

/// `Σ (q_i − s_i·c_i)²`.
pub(crate) fn l2sq(q: &[f32], s: &[f32], c: &[i8]) -> f32 {
    let n = q.len().min(s.len()).min(c.len());
    let mut acc = [f32x8::ZERO; 2];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            let d = load_f(q, j) - load_f(s, j) * load_codes(c, j);
            *acc += d * d;
        }
        i += 16;
    }
    while i + 8 <= n {
        let d = load_f(q, i) - load_f(s, i) * load_codes(c, i);
        acc[0] += d * d;
        i += 8;
    }
    let mut sum = (acc[0] + acc[1]).reduce_add();
    sum += super::scalar::l2sq(&q[i..n], &s[i..n], &c[i..n]);
    sum
}

/// `Σ qs_i · c_i`.
pub(crate) fn dot(qs: &[f32], c: &[i8]) -> f32 {
    let n = qs.len().min(c.len());
    let mut acc = [f32x8::ZERO; 2];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            *acc += load_f(qs, j) * load_codes(c, j);
        }
        i += 16;
    }
    while i + 8 <= n {
        acc[0] += load_f(qs, i) * load_codes(c, i);
        i += 8;
    }
    let mut sum = (acc[0] + acc[1]).reduce_add();
    sum += super::scalar::dot(&qs[i..n], &c[i..n]);
    sum
}

#[inline(always)]
fn load_i16(c: &[i8], i: usize) -> i16x16 {
    let mut a = [0i8; 16];
    a.copy_from_slice(&c[i..i + 16]);
    i16x16::from_i8x16(i8x16::new(a))
}

/// `Σ a_i · b_i` in `i32`, wrapping (bit-identical to the scalar reference).
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let mut acc = i32x8::ZERO;
    let mut i = 0;
    while i + 16 <= n {
        // Each lane of `dot` is a sum of two products, |·| ≤ 2·128² = 2^15: exact.
        acc += load_i16(a, i).dot(load_i16(b, i));
        i += 16;
    }
    let lanes = acc.to_array();
    let mut sum = lanes.iter().fold(0i32, |s, &x| s.wrapping_add(x));
    sum = sum.wrapping_add(super::scalar::dot_i8(&a[i..n], &b[i..n]));
    sum
}
