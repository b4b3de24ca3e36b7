//! SQ8: 8-bit scalar quantization with one symmetric scale per group of
//! components (the `PQS8` layout, proximity-format.md sections 4 and 12.7).
//!
//! A [`Quantizer`] holds `dim`, `group_size` and `⌈dim/group_size⌉` scales;
//! component `i` uses `scales[i / group_size]`. Codes are `i8` in
//! `−127..=127`, row-major, `dim` per vector; `code · scale` (rounded to f32)
//! reconstructs a component. [`Quantizer::fit`], [`Quantizer::encode`],
//! [`Quantizer::decode`] and [`Quantizer::max_error`] follow the spec's
//! derivation exactly (f64 division, ties-to-even rounding), so a `PQS8`
//! object built from them is canonical; they are scalar by design.
//!
//! Distances (dispatched to the best ISA):
//! * asymmetric: an f32 query against codes, via a prepared [`Query`]
//!   (`l2sq`: `Σ (q_i − s_i·c_i)²`, `dot`: `Σ q_i·s_i·c_i`), one-to-one and
//!   one-to-many; `f32` accumulation, so results agree with the scalar
//!   reference within [`crate::f32::F32_REL_TOL`] (same magnitude rule);
//! * symmetric: [`dot_i8`] / [`dot_i8_many`], `i8·i8` products accumulated in
//!   `i32` with wrapping addition. Bit-exact on every ISA. The result is the
//!   true dot product whenever no overflow is possible: `dim ≤ 131_071`
//!   (`(2^31 − 1) / 128²`) for arbitrary `i8`, `dim ≤ 133_143`
//!   (`(2^31 − 1) / 127²`) for valid codes; beyond that it is the true value
//!   mod 2^32, still identical on every ISA.

mod scalar;

mod portable;

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "aarch64")]
mod aarch64;

use crate::error::{Error, Result};
use crate::{isa, Isa};

/// Largest code magnitude; `−128` is never produced (and rejected by PQS8).
pub const MAX_CODE: i8 = 127;

/// Per-group scales for `dim`-component vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantizer {
    dim: usize,
    group_size: usize,
    /// `⌈dim / group_size⌉` finite, non-negative scales.
    scales: Vec<f32>,
}

impl Quantizer {
    /// A quantizer from explicit scales (e.g. decoded from `PQS8`).
    ///
    /// Requires `dim ≥ 1`, `group_size ≥ 1`, `scales.len() = ⌈dim/group_size⌉`
    /// and every scale finite and `≥ 0`.
    pub fn new(dim: usize, group_size: usize, scales: Vec<f32>) -> Result<Self> {
        if dim == 0 {
            return Err(Error::InvalidParameter {
                what: "sq8 dimensions",
                reason: "must be at least 1".into(),
            });
        }
        if group_size == 0 {
            return Err(Error::InvalidParameter {
                what: "sq8 group size",
                reason: "must be at least 1".into(),
            });
        }
        let groups = dim.div_ceil(group_size);
        if scales.len() != groups {
            return Err(Error::WrongDimension {
                what: "sq8 scales",
                expected: groups,
                got: scales.len(),
            });
        }
        if let Some(index) = scales.iter().position(|s| !s.is_finite()) {
            return Err(Error::NonFinite {
                what: "sq8 scales",
                index,
            });
        }
        if let Some(index) = scales.iter().position(|&s| s < 0.0) {
            return Err(Error::InvalidParameter {
                what: "sq8 scales",
                reason: format!("scale {index} is negative"),
            });
        }
        Ok(Quantizer {
            dim,
            group_size,
            scales,
        })
    }

    /// Derives the scales from `vectors` (row-major, `dim` per vector, possibly
    /// none) as spec section 12.7 does: `scale_j = fl32(max|v_i| / 127)` over
    /// the components of group `j`, or `0` for an all-zero group.
    pub fn fit(dim: usize, group_size: usize, vectors: &[f32]) -> Result<Self> {
        let mut q = Quantizer::new(
            dim,
            group_size,
            vec![0.0; dim.max(1).div_ceil(group_size.max(1))],
        )?;
        if !vectors.len().is_multiple_of(dim) {
            return Err(Error::WrongDimension {
                what: "sq8 training vectors (length must be a multiple of dim)",
                expected: vectors.len() / dim * dim,
                got: vectors.len(),
            });
        }
        if let Some(index) = vectors.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                what: "sq8 training vectors",
                index,
            });
        }
        for row in vectors.chunks_exact(dim) {
            for (i, &c) in row.iter().enumerate() {
                let s = &mut q.scales[i / group_size];
                *s = s.max(c.abs());
            }
        }
        for s in &mut q.scales {
            if *s != 0.0 {
                *s = (f64::from(*s) / 127.0) as f32;
            }
        }
        Ok(q)
    }

    /// Components per vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Components per scale group.
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    /// The per-group scales.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// Scale of component `i` (`i < dim`).
    fn scale_of(&self, i: usize) -> f32 {
        self.scales[i / self.group_size]
    }

    /// The code of one component under scale `s` (spec 12.7): `0` if `s = 0`,
    /// else `clamp(roundTiesEven(f64(c) / f64(s)), −127, 127)`.
    pub fn code(c: f32, s: f32) -> i8 {
        if s == 0.0 {
            return 0;
        }
        let q = (f64::from(c) / f64::from(s)).round_ties_even();
        // NaN (only from a NaN component) maps to 0 through the saturating cast.
        q.clamp(-127.0, 127.0) as i8
    }

    /// Encodes one vector into `out` (`v.len() = out.len() = dim`).
    ///
    /// # Panics
    /// On a length mismatch.
    #[track_caller]
    pub fn encode(&self, v: &[f32], out: &mut [i8]) {
        assert_eq!(v.len(), self.dim, "sq8 encode: vector length");
        assert_eq!(out.len(), self.dim, "sq8 encode: output length");
        for (i, (o, &c)) in out.iter_mut().zip(v).enumerate() {
            *o = Self::code(c, self.scale_of(i));
        }
    }

    /// Encodes `vectors` (row-major, `n·dim`) into a new `n·dim` code buffer.
    ///
    /// # Panics
    /// If `vectors.len()` is not a multiple of `dim`.
    #[track_caller]
    pub fn encode_many(&self, vectors: &[f32]) -> Vec<i8> {
        assert!(
            vectors.len().is_multiple_of(self.dim),
            "sq8 encode_many: ragged input"
        );
        let mut out = vec![0i8; vectors.len()];
        for (v, o) in vectors
            .chunks_exact(self.dim)
            .zip(out.chunks_exact_mut(self.dim))
        {
            self.encode(v, o);
        }
        out
    }

    /// Reconstructs one vector: `out_i = fl32(c_i · s_i)`.
    ///
    /// # Panics
    /// On a length mismatch.
    #[track_caller]
    pub fn decode(&self, codes: &[i8], out: &mut [f32]) {
        assert_eq!(codes.len(), self.dim, "sq8 decode: code length");
        assert_eq!(out.len(), self.dim, "sq8 decode: output length");
        for (i, (o, &c)) in out.iter_mut().zip(codes).enumerate() {
            // An i8 times an f32 is exact in f64, so the f32 product is fl32(c·s).
            *o = f32::from(c) * self.scale_of(i);
        }
    }

    /// The spec's `max_error` over `vectors` and their `codes` (both
    /// row-major): the largest `|fl32(c − fl32(q·s))|`, starting from `0`.
    ///
    /// # Panics
    /// If the lengths differ or are not a multiple of `dim`.
    #[track_caller]
    pub fn max_error(&self, vectors: &[f32], codes: &[i8]) -> f32 {
        assert_eq!(vectors.len(), codes.len(), "sq8 max_error: lengths differ");
        assert!(
            vectors.len().is_multiple_of(self.dim),
            "sq8 max_error: ragged input"
        );
        let mut worst = 0.0f32;
        for (k, (&c, &q)) in vectors.iter().zip(codes).enumerate() {
            let recon = f32::from(q) * self.scale_of(k % self.dim);
            let err = ((f64::from(c) - f64::from(recon)) as f32).abs();
            worst = worst.max(err);
        }
        worst
    }

    /// Prepares `q` (length `dim`) for asymmetric distances against codes.
    ///
    /// # Panics
    /// If `q.len() != dim`.
    #[track_caller]
    pub fn query(&self, q: &[f32]) -> Query {
        assert_eq!(q.len(), self.dim, "sq8 query length");
        let s: Vec<f32> = (0..self.dim).map(|i| self.scale_of(i)).collect();
        let qs = q.iter().zip(&s).map(|(&x, &sc)| x * sc).collect();
        Query {
            q: q.to_vec(),
            s,
            qs,
        }
    }
}

/// An f32 query prepared against one [`Quantizer`]: the query, the scale of
/// each component, and their product (all of length `dim`).
#[derive(Debug, Clone)]
pub struct Query {
    q: Vec<f32>,
    s: Vec<f32>,
    qs: Vec<f32>,
}

#[track_caller]
fn check_row(dim: usize, codes: &[i8]) {
    assert_eq!(codes.len(), dim, "sq8: code row length differs from dim");
}

#[track_caller]
fn check_many<T>(dim: usize, codes: &[i8], out: &[T]) {
    assert!(
        dim.checked_mul(out.len()) == Some(codes.len()),
        "sq8: codes.len() = {} but dim {} x {} outputs",
        codes.len(),
        dim,
        out.len()
    );
}

impl Query {
    /// Components per vector.
    pub fn dim(&self) -> usize {
        self.q.len()
    }

    fn l2sq_on(&self, isa: Isa, codes: &[i8]) -> f32 {
        match isa {
            // SAFETY: `isa` is available, so AVX2+FMA are present.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86::l2sq(&self.q, &self.s, codes) },
            // SAFETY: `isa` is available, so NEON is present.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { aarch64::l2sq(&self.q, &self.s, codes) },
            Isa::Portable => portable::l2sq(&self.q, &self.s, codes),
            _ => scalar::l2sq(&self.q, &self.s, codes),
        }
    }

    fn dot_on(&self, isa: Isa, codes: &[i8]) -> f32 {
        match isa {
            // SAFETY: `isa` is available, so AVX2+FMA are present.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86::dot(&self.qs, codes) },
            // SAFETY: `isa` is available, so NEON is present.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { aarch64::dot(&self.qs, codes) },
            Isa::Portable => portable::dot(&self.qs, codes),
            _ => scalar::dot(&self.qs, codes),
        }
    }

    fn l2sq_many_on(&self, isa: Isa, codes: &[i8], out: &mut [f32]) {
        match isa {
            // SAFETY: `isa` is available, so AVX2+FMA are present.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86::l2sq_many(&self.q, &self.s, codes, out) },
            // SAFETY: `isa` is available, so NEON is present.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { aarch64::l2sq_many(&self.q, &self.s, codes, out) },
            Isa::Portable => scalar::for_rows(self.dim(), codes, out, |r| {
                portable::l2sq(&self.q, &self.s, r)
            }),
            _ => scalar::for_rows(self.dim(), codes, out, |r| {
                scalar::l2sq(&self.q, &self.s, r)
            }),
        }
    }

    fn dot_many_on(&self, isa: Isa, codes: &[i8], out: &mut [f32]) {
        match isa {
            // SAFETY: `isa` is available, so AVX2+FMA are present.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86::dot_many(&self.qs, codes, out) },
            // SAFETY: `isa` is available, so NEON is present.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { aarch64::dot_many(&self.qs, codes, out) },
            Isa::Portable => {
                scalar::for_rows(self.dim(), codes, out, |r| portable::dot(&self.qs, r))
            }
            _ => scalar::for_rows(self.dim(), codes, out, |r| scalar::dot(&self.qs, r)),
        }
    }

    /// Asymmetric squared L2 `Σ (q_i − s_i·c_i)²` against one code row.
    ///
    /// # Panics
    /// If `codes.len() != dim`.
    #[track_caller]
    pub fn l2sq(&self, codes: &[i8]) -> f32 {
        check_row(self.dim(), codes);
        self.l2sq_on(isa(), codes)
    }

    /// Asymmetric dot `Σ q_i·s_i·c_i` against one code row.
    ///
    /// # Panics
    /// If `codes.len() != dim`.
    #[track_caller]
    pub fn dot(&self, codes: &[i8]) -> f32 {
        check_row(self.dim(), codes);
        self.dot_on(isa(), codes)
    }

    /// [`Query::l2sq`] against `out.len()` contiguous code rows.
    ///
    /// # Panics
    /// If `codes.len() != dim · out.len()`.
    #[track_caller]
    pub fn l2sq_many(&self, codes: &[i8], out: &mut [f32]) {
        check_many(self.dim(), codes, out);
        self.l2sq_many_on(isa(), codes, out)
    }

    /// [`Query::dot`] against `out.len()` contiguous code rows.
    ///
    /// # Panics
    /// If `codes.len() != dim · out.len()`.
    #[track_caller]
    pub fn dot_many(&self, codes: &[i8], out: &mut [f32]) {
        check_many(self.dim(), codes, out);
        self.dot_many_on(isa(), codes, out)
    }

    /// [`Query::l2sq`] on an explicit ISA; `None` if unavailable.
    #[track_caller]
    pub fn l2sq_with(&self, isa: Isa, codes: &[i8]) -> Option<f32> {
        check_row(self.dim(), codes);
        isa.is_available().then(|| self.l2sq_on(isa, codes))
    }

    /// [`Query::dot`] on an explicit ISA; `None` if unavailable.
    #[track_caller]
    pub fn dot_with(&self, isa: Isa, codes: &[i8]) -> Option<f32> {
        check_row(self.dim(), codes);
        isa.is_available().then(|| self.dot_on(isa, codes))
    }

    /// [`Query::l2sq_many`] on an explicit ISA; `false` if unavailable.
    #[track_caller]
    pub fn l2sq_many_with(&self, isa: Isa, codes: &[i8], out: &mut [f32]) -> bool {
        check_many(self.dim(), codes, out);
        isa.is_available() && {
            self.l2sq_many_on(isa, codes, out);
            true
        }
    }

    /// [`Query::dot_many`] on an explicit ISA; `false` if unavailable.
    #[track_caller]
    pub fn dot_many_with(&self, isa: Isa, codes: &[i8], out: &mut [f32]) -> bool {
        check_many(self.dim(), codes, out);
        isa.is_available() && {
            self.dot_many_on(isa, codes, out);
            true
        }
    }
}

fn dot_i8_on(isa: Isa, a: &[i8], b: &[i8]) -> i32 {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_i8(a, b) },
        // SAFETY: `isa` is available, so NEON is present.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::dot_i8(a, b) },
        Isa::Portable => portable::dot_i8(a, b),
        _ => scalar::dot_i8(a, b),
    }
}

fn dot_i8_many_on(isa: Isa, q: &[i8], rows: &[i8], out: &mut [i32]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_i8_many(q, rows, out) },
        // SAFETY: `isa` is available, so NEON is present.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::dot_i8_many(q, rows, out) },
        Isa::Portable => scalar::for_rows(q.len(), rows, out, |r| portable::dot_i8(q, r)),
        _ => scalar::for_rows(q.len(), rows, out, |r| scalar::dot_i8(q, r)),
    }
}

/// Symmetric integer dot `Σ a_i·b_i`, `i32` accumulator, wrapping (see the
/// module docs for the overflow bound). Bit-exact on every ISA.
///
/// # Panics
/// If `a.len() != b.len()`.
#[track_caller]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    check_row(a.len(), b);
    dot_i8_on(isa(), a, b)
}

/// `out[i] = dot_i8(q, row_i)` over `out.len()` contiguous rows of `q.len()`.
///
/// # Panics
/// If `rows.len() != q.len() · out.len()`.
#[track_caller]
pub fn dot_i8_many(q: &[i8], rows: &[i8], out: &mut [i32]) {
    check_many(q.len(), rows, out);
    dot_i8_many_on(isa(), q, rows, out)
}

/// [`dot_i8`] on an explicit ISA; `None` if unavailable.
#[track_caller]
pub fn dot_i8_with(isa: Isa, a: &[i8], b: &[i8]) -> Option<i32> {
    check_row(a.len(), b);
    isa.is_available().then(|| dot_i8_on(isa, a, b))
}

/// [`dot_i8_many`] on an explicit ISA; `false` if unavailable.
#[track_caller]
pub fn dot_i8_many_with(isa: Isa, q: &[i8], rows: &[i8], out: &mut [i32]) -> bool {
    check_many(q.len(), rows, out);
    isa.is_available() && {
        dot_i8_many_on(isa, q, rows, out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_follows_spec_derivation() {
        // Two groups of 2: maxima 254 and 0.
        let v = [254.0f32, -127.0, 0.0, 0.0, -1.0, 2.5, 0.0, 0.0];
        let q = Quantizer::fit(4, 2, &v).unwrap();
        assert_eq!(q.scales(), &[2.0, 0.0]);
        let codes = q.encode_many(&v);
        assert_eq!(codes, vec![127, -64, 0, 0, 0, 1, 0, 0]);
        // -127/2 = -63.5 ties to even -64 (recon -128, err 1); -1/2 = -0.5 -> 0
        // (err 1); 2.5/2 = 1.25 -> 1 (recon 2, err 0.5).
        assert_eq!(q.max_error(&v, &codes), 1.0);
        let mut back = [0.0f32; 4];
        q.decode(&codes[..4], &mut back);
        assert_eq!(back, [254.0, -128.0, 0.0, 0.0]);
    }

    #[test]
    fn codes_clamp_and_never_minus_128() {
        assert_eq!(Quantizer::code(1e30, 1.0), 127);
        assert_eq!(Quantizer::code(-1e30, 1.0), -127);
        assert_eq!(Quantizer::code(5.0, 0.0), 0);
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(Quantizer::new(0, 1, vec![]).is_err());
        assert!(Quantizer::new(3, 0, vec![]).is_err());
        assert!(Quantizer::new(3, 2, vec![1.0]).is_err());
        assert!(Quantizer::new(3, 2, vec![1.0, f32::NAN]).is_err());
        assert!(Quantizer::new(3, 2, vec![1.0, -1.0]).is_err());
        assert!(Quantizer::fit(3, 2, &[1.0, 2.0]).is_err());
        assert!(Quantizer::fit(2, 2, &[1.0, f32::INFINITY]).is_err());
        assert!(Quantizer::fit(2, 2, &[]).is_ok());
    }
}
