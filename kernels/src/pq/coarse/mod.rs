//! Coarse-quantizer ranking: exact `i8` dot products of one query against
//! many rows (IVF centroids), with the rows transposed into blocks so eight
//! rows are scored per instruction instead of one row per reduction.
//!
//! # Layout
//!
//! [`Blocks::new`] widens the rows to `i16` and groups them by [`ROWS`] = 8:
//! block `b` holds rows `8b..8b + 8`; within it, for each component pair
//! `p` (components `2p`, `2p + 1`; an odd last component is paired with a
//! zero), 16 `i16` in row order, `[r0.2p, r0.2p+1, r1.2p, ...]`. Rows past
//! the end of the last block are zero.
//!
//! # Exactness
//!
//! Every tier computes the exact `Σ q_i · c_i` in `i32` (AVX2: `vpmaddwd`
//! of a row pair with the broadcast query pair, then `i32` adds). A product
//! is at most `128² = 16 384` in magnitude, so sums are exact for
//! `dims ≤ 131 072` ([`MAX_DIMS`]), bit-identical to
//! [`crate::sq8::dot_i8_many`] and across ISAs.
//!
//! # Tiers
//!
//! scalar (the reference: one row at a time over the plain rows, kept in
//! [`Blocks`] for it); AVX2 (four blocks per pass over the query pairs,
//! 32 rows in flight), or with VNNI four `u8·i8` products per lane and
//! instruction over the biased bytes, `128·Σq` taken off at the end
//! (wrapping `i32`: the true sum fits, so the wrapped result is exact).
//! Portable and NEON use the scalar model.

mod scalar;

#[cfg(target_arch = "x86_64")]
mod x86;

use crate::error::{Error, Result};
use crate::{isa, Isa};

/// Rows per transposed block.
pub const ROWS: usize = 8;

/// Largest row length whose `i32` sums cannot overflow.
pub const MAX_DIMS: usize = 1 << 17;

/// `n` rows of `dims` `i8`, transposed for [`dots`] (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    dims: usize,
    n: usize,
    /// The rows as given (row-major), for the scalar tier.
    rows: Vec<i8>,
    /// `⌈n / 8⌉ · ⌈dims / 2⌉ · 16` widened entries.
    data: Vec<i16>,
    /// `⌈n / 8⌉ · ⌈dims / 4⌉ · 32` biased bytes; empty without VNNI.
    quads: Vec<u8>,
}

impl Blocks {
    /// Transposes `rows` (`n · dims` bytes, row-major).
    ///
    /// Errors if `dims` is 0 or above [`MAX_DIMS`] or `rows.len()` is not a
    /// multiple of `dims`.
    pub fn new(dims: usize, rows: &[i8]) -> Result<Blocks> {
        if dims == 0 || dims > MAX_DIMS {
            return Err(Error::InvalidParameter {
                what: "coarse dims",
                reason: format!("need 1 <= dims <= {MAX_DIMS}, got {dims}"),
            });
        }
        if !rows.len().is_multiple_of(dims) {
            return Err(Error::WrongDimension {
                what: "coarse rows (a multiple of dims bytes)",
                expected: rows.len().div_ceil(dims) * dims,
                got: rows.len(),
            });
        }
        let n = rows.len() / dims;
        let pairs = dims.div_ceil(2);
        let mut data = vec![0i16; n.div_ceil(ROWS) * pairs * 2 * ROWS];
        for (i, row) in rows.chunks_exact(dims).enumerate() {
            let (b, r) = (i / ROWS, i % ROWS);
            for (d, &x) in row.iter().enumerate() {
                let (p, t) = (d / 2, d % 2);
                data[(b * pairs + p) * 2 * ROWS + 2 * r + t] = i16::from(x);
            }
        }
        Ok(Blocks {
            dims,
            n,
            rows: rows.to_vec(),
            data,
            quads: if vnni_available() {
                biased_quads(dims, rows)
            } else {
                Vec::new()
            },
        })
    }

    /// Components per row.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True if there are no rows.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Heap bytes held (plain and transposed rows).
    pub fn heap_bytes(&self) -> usize {
        self.rows.len() + 2 * self.data.len() + self.quads.len()
    }
}

/// The VNNI layout of `rows` (see the module docs).
fn biased_quads(dims: usize, rows: &[i8]) -> Vec<u8> {
    let n = rows.len() / dims;
    let quads = dims.div_ceil(4);
    let mut out = vec![128u8; n.div_ceil(ROWS) * quads * 4 * ROWS];
    for (i, row) in rows.chunks_exact(dims).enumerate() {
        let (b, r) = (i / ROWS, i % ROWS);
        for (d, &x) in row.iter().enumerate() {
            let (p, t) = (d / 4, d % 4);
            out[(b * quads + p) * 4 * ROWS + 4 * r + t] = (x as u8) ^ 0x80;
        }
    }
    out
}

/// Whether this CPU runs the VNNI tier of [`dots`].
fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::isa::vnni()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[track_caller]
fn check(q: &[i8], blocks: &Blocks, out: &[i32]) {
    assert!(
        q.len() == blocks.dims && out.len() == blocks.n,
        "coarse dots: query {} (want {}), out {} (want {})",
        q.len(),
        blocks.dims,
        out.len(),
        blocks.n
    );
}

fn dots_on(isa: Isa, q: &[i8], blocks: &Blocks, out: &mut [i32]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `quads` is only
        // built when VNNI and VL are present too; `check` held and `quads`
        // has the documented length.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if !blocks.quads.is_empty() => unsafe {
            x86::dots_vnni(q, &blocks.quads, blocks.n, out)
        },
        // SAFETY: `isa` is available, so AVX2 is present; `check` held and
        // `data` has the documented length.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dots(q, &blocks.data, blocks.n, out) },
        _ => scalar::dots(q, &blocks.rows, out),
    }
}

/// `out[i] = Σ_d q_d · row_i[d]`, exact in `i32`, for every row.
///
/// # Panics
/// If `q.len() != blocks.dims()` or `out.len() != blocks.len()`.
#[track_caller]
pub fn dots(q: &[i8], blocks: &Blocks, out: &mut [i32]) {
    check(q, blocks, out);
    dots_on(isa(), q, blocks, out)
}

/// [`dots`] on an explicit ISA; `false` (and `out` untouched) if
/// unavailable.
#[track_caller]
pub fn dots_with(isa: Isa, q: &[i8], blocks: &Blocks, out: &mut [i32]) -> bool {
    check(q, blocks, out);
    isa.is_available() && {
        dots_on(isa, q, blocks, out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_isa_equals_scalar_and_sq8() {
        let seed = prox_testkit::seed(0xc0a5e_u64);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let mut next = || rng.next();
        for dims in [1, 2, 3, 7, 16, 31, 128, 384, 385, 768] {
            for n in [0, 1, 7, 8, 9, 31, 32, 33, 70] {
                let mut code = || ((next() % 255) as i32 - 127) as i8;
                let rows: Vec<i8> = (0..n * dims).map(|_| code()).collect();
                let q: Vec<i8> = (0..dims).map(|_| code()).collect();
                let blocks = Blocks::new(dims, &rows).unwrap();
                assert_eq!(blocks.len(), n);
                let mut want = vec![0i32; n];
                crate::sq8::dot_i8_many(&q, &rows, &mut want);
                for isa in crate::available_isas() {
                    let mut got = vec![7i32; n];
                    assert!(dots_with(isa, &q, &blocks, &mut got));
                    assert_eq!(got, want, "{isa} dims {dims} n {n} (PROX_SEED={seed})");
                }
                // Both AVX2 kernels, whichever `dots` picks here.
                #[cfg(target_arch = "x86_64")]
                if Isa::Avx2.is_available() {
                    let mut got = vec![7i32; n];
                    // SAFETY: AVX2 is present; `data` is as documented.
                    unsafe { x86::dots(&q, &blocks.data, n, &mut got) };
                    assert_eq!(got, want, "avx2 dims {dims} n {n} (PROX_SEED={seed})");
                    if vnni_available() {
                        let mut got = vec![7i32; n];
                        // SAFETY: VNNI is present; `quads` is as documented.
                        unsafe { x86::dots_vnni(&q, &blocks.quads, n, &mut got) };
                        assert_eq!(got, want, "vnni dims {dims} n {n} (PROX_SEED={seed})");
                    }
                }
            }
        }
        // Extremes: every product at its largest magnitude, including
        // -128 rows (the biased byte 0) against -127 and 127 queries.
        for (r, qv, want) in [
            (-127i8, -127i8, 127 * 127),
            (-128, -127, 128 * 127),
            (-128, 127, -128 * 127),
            (127, 127, 127 * 127),
        ] {
            let rows = vec![r; 3 * 384];
            let q = vec![qv; 384];
            let blocks = Blocks::new(384, &rows).unwrap();
            for isa in crate::available_isas() {
                let mut got = vec![0i32; 3];
                assert!(dots_with(isa, &q, &blocks, &mut got));
                assert_eq!(got, vec![want * 384; 3], "{isa}");
            }
        }
        assert!(Blocks::new(0, &[]).is_err());
        assert!(Blocks::new(3, &[1, 2]).is_err());
    }
}
