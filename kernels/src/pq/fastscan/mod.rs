//! 4-bit PQ fast-scan: u8-quantised lookup tables and packed 4-bit codes
//! scanned 32 vectors at a time with in-register table lookups.
//!
//! Applies to product quantizers with at most 16 centroids per subspace
//! (4-bit codes). The persisted codes stay one byte per code (PQPQ); the
//! packing below is an in-memory, load-time layout.
//!
//! # Layout
//!
//! `mp` is `m` rounded up to an even number (a padding subspace has code 0
//! and table row 0). Rows are grouped in **blocks of 32** ([`BLOCK`]). A
//! block is `16 · mp` bytes ([`block_bytes`]): for each subspace `s` in
//! order, 16 bytes whose byte `j` holds the code of row `j` in its low
//! nibble and the code of row `j + 16` in its high nibble. Two consecutive
//! subspaces are therefore 32 contiguous bytes, one AVX2 register whose two
//! 128-bit lanes are looked up in the two matching table rows. Missing rows
//! of a last partial block have code 0 (their sums are meaningless and the
//! caller ignores them).
//!
//! # Tables
//!
//! [`Lut::quantize`] turns an `m × 16` f32 table (subspace-major, lower is
//! better) into `mp × 16` bytes: per subspace the minimum finite entry
//! `lo_s` is subtracted, every subspace shares one step
//! `scale = max_s(hi_s − lo_s) / 255`, and entries become
//! `clamp(round((t − lo_s) / scale), 0, 255)` (`+inf` → 255). A scanned sum
//! `S` approximates the f32 distance as `offset + scale · S`
//! ([`Lut::distance`]), `offset = bias + Σ lo_s`. The quantisation is scalar
//! f32 code, so equal tables give equal bytes on every machine.
//!
//! # Exactness
//!
//! Each table entry is at most 255 and at most `mp ≤ 256` entries are summed
//! per row, so a sum is at most `255 · 256 = 65 280 < 2¹⁶`: the `u16`
//! accumulators never overflow and **every tier returns the exact integer
//! sum**, bit-identical across ISAs. `m` is therefore limited to
//! [`MAX_SUBSPACES`] = 256.
//!
//! # Tiers
//!
//! scalar (reference: unpacks each row's nibbles and sums in `u32`);
//! portable (fixed 32-lane `u16` arrays the compiler vectorises); AVX2
//! (`vpshufb` on two subspaces per register, even/odd bytes widened into
//! four `u16x16` accumulators, lanes folded at the end); NEON (`vqtbl1q_u8`
//! per subspace, `vaddw_u8`/`vaddw_high_u8` into four `u16x8`
//! accumulators).

mod portable;
mod scalar;

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "aarch64")]
mod aarch64;

use crate::error::{Error, Result};
use crate::{isa, Isa};

/// Rows per packed block.
pub const BLOCK: usize = 32;

/// Largest number of subspaces a fast-scan table may have (keeps every sum
/// below `2¹⁶`; see the module docs).
pub const MAX_SUBSPACES: usize = 256;

/// Centroids per subspace addressable by a 4-bit code.
pub const CODES: usize = 16;

/// `m` rounded up to an even number of subspaces.
pub fn padded_m(m: usize) -> usize {
    m + (m & 1)
}

/// Bytes of one packed block of [`BLOCK`] rows with `m` subspaces.
pub fn block_bytes(m: usize) -> usize {
    CODES * padded_m(m)
}

fn check_m(m: usize) -> Result<()> {
    if m == 0 || m > MAX_SUBSPACES {
        return Err(Error::InvalidParameter {
            what: "fast-scan subquantizers",
            reason: format!("need 1 <= m <= {MAX_SUBSPACES}, got {m}"),
        });
    }
    Ok(())
}

/// Appends the packed blocks of `codes` (`n` rows of `m` bytes, record-major,
/// every byte `< 16`) to `out`: `⌈n / 32⌉ · block_bytes(m)` bytes.
///
/// Errors if `m` is out of range, `codes.len()` is not a multiple of `m`, or
/// a code is `≥ 16` (nothing is appended then).
pub fn pack(codes: &[u8], m: usize, out: &mut Vec<u8>) -> Result<()> {
    check_m(m)?;
    if !codes.len().is_multiple_of(m) {
        return Err(Error::WrongDimension {
            what: "fast-scan codes (a multiple of m bytes)",
            expected: codes.len().div_ceil(m) * m,
            got: codes.len(),
        });
    }
    if let Some(index) = codes.iter().position(|&c| usize::from(c) >= CODES) {
        return Err(Error::InvalidParameter {
            what: "fast-scan code",
            reason: format!("byte {index} is {} (4-bit codes are < 16)", codes[index]),
        });
    }
    let bb = block_bytes(m);
    for rows in codes.chunks(BLOCK * m) {
        let start = out.len();
        out.resize(start + bb, 0);
        let block = &mut out[start..];
        for (r, code) in rows.chunks_exact(m).enumerate() {
            let (j, shift) = if r < 16 { (r, 0) } else { (r - 16, 4) };
            for (s, &c) in code.iter().enumerate() {
                block[s * CODES + j] |= c << shift;
            }
        }
    }
    Ok(())
}

/// The 4-bit code of row `r < 32`, subspace `s` in a packed block.
///
/// # Panics
/// If `r ≥ 32` or the block is too short for `s`.
pub fn unpack(block: &[u8], s: usize, r: usize) -> u8 {
    assert!(r < BLOCK, "fast-scan unpack: row {r} >= 32");
    let b = block[s * CODES + (r & 15)];
    if r < 16 {
        b & 15
    } else {
        b >> 4
    }
}

/// `clamp(round(x), 0, 255)` with ties away from zero, for `x ≥ 0` (NaN
/// and negatives give 0): truncation plus an exact fraction test, equal to
/// `f32::round` on this range without its libm call on baseline x86-64.
#[inline]
fn round_u8(x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    if x >= 255.0 {
        return 255;
    }
    // x < 255 < 2^23, so `x - trunc(x)` is exact.
    let i = x as u32;
    let r = if x - i as f32 >= 0.5 { i + 1 } else { i };
    r.min(255) as u8
}

/// A u8-quantised lookup table for [`scan`] (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Lut {
    m: usize,
    offset: f32,
    scale: f32,
    /// `padded_m(m) × 16` bytes, subspace-major; padding rows are zero.
    entries: Vec<u8>,
}

impl Lut {
    /// Quantises `table` (`m × 16` f32, subspace-major, lower is better;
    /// `+inf` marks unused centroid slots) plus a constant `bias`.
    ///
    /// Errors if `m` is out of range, `table.len() != 16 · m`, or an entry
    /// is NaN or `−inf`.
    pub fn quantize(m: usize, table: &[f32], bias: f32) -> Result<Lut> {
        let mut lut = Lut {
            m: 0,
            offset: 0.0,
            scale: 1.0,
            entries: Vec::new(),
        };
        lut.requantize(m, table, bias)?;
        Ok(lut)
    }

    /// [`Lut::quantize`] into `self`, reusing its allocation (queries call
    /// this once each and allocate nothing in steady state). The per-row
    /// bounds and the quantisation run on the dispatched ISA; both are exact
    /// (`min`/`max`, one IEEE division and an exact rounding per entry), so
    /// every tier produces the scalar model's bytes.
    pub fn requantize(&mut self, m: usize, table: &[f32], bias: f32) -> Result<()> {
        self.requantize_on(isa(), m, table, bias)
    }

    fn requantize_on(&mut self, isa: Isa, m: usize, table: &[f32], bias: f32) -> Result<()> {
        check_m(m)?;
        if table.len() != CODES * m {
            return Err(Error::WrongDimension {
                what: "fast-scan table (16 * m floats)",
                expected: CODES * m,
                got: table.len(),
            });
        }
        if let Some(index) = table
            .iter()
            .position(|x| x.is_nan() || *x == f32::NEG_INFINITY)
        {
            return Err(Error::NonFinite {
                what: "fast-scan table",
                index,
            });
        }
        // Per row: smallest and largest finite entry (`+inf` / `-inf` for
        // a row without one). m <= 256 was checked.
        let mut lo = [0f32; MAX_SUBSPACES];
        let mut hi = [0f32; MAX_SUBSPACES];
        bounds_on(isa, table, &mut lo[..m], &mut hi[..m]);
        let mut offset = bias;
        let mut range = 0.0f32;
        for (&l, &h) in lo[..m].iter().zip(&hi[..m]) {
            if l.is_finite() {
                offset += l;
                range = range.max(h - l);
            }
        }
        // A zero (or overflowed) range quantises every entry to 0.
        let scale = if range > 0.0 && range.is_finite() {
            range / 255.0
        } else {
            1.0
        };
        self.m = m;
        self.offset = offset;
        self.scale = scale;
        self.entries.clear();
        self.entries.resize(CODES * padded_m(m), 0);
        quantize_on(isa, table, &lo[..m], scale, &mut self.entries);
        Ok(())
    }

    /// Subspaces (before padding).
    pub fn m(&self) -> usize {
        self.m
    }

    /// Quantisation step shared by every subspace.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Constant added back by [`Lut::distance`] (`bias + Σ lo_s`).
    pub fn offset(&self) -> f32 {
        self.offset
    }

    /// The quantised entries, `padded_m(m) × 16` bytes.
    pub fn entries(&self) -> &[u8] {
        &self.entries
    }

    /// The approximate f32 distance of a scanned sum: `offset + scale · sum`.
    pub fn distance(&self, sum: u16) -> f32 {
        self.offset + self.scale * f32::from(sum)
    }
}

fn bounds_on(isa: Isa, table: &[f32], lo: &mut [f32], hi: &mut [f32]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `table` has 16
        // entries per slot of `lo` and `hi` (checked by the caller).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::bounds(table, lo, hi) },
        _ => scalar::bounds(table, lo, hi),
    }
}

fn quantize_on(isa: Isa, table: &[f32], lo: &[f32], scale: f32, out: &mut [u8]) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `table` has 16
        // entries per slot of `lo`, `out` at least as many bytes.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::quantize(table, lo, scale, out) },
        _ => scalar::quantize(table, lo, scale, out),
    }
}

/// What a query table built by [`table`] holds (lower is better).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// Squared L2 partials `Σ_d (q_d − c_d)²`.
    L2,
    /// Negated dot partials `−Σ_d q_d · c_d` (inner product, cosine).
    NegDot,
}

/// Codebooks of a 4-bit quantizer transposed for [`table`]: `dim × 16`
/// floats, component-major (`out[16·d + j]` = component `d` of centroid
/// `j` of the subspace holding `d`). `books` is the `PQPQ` layout (per
/// subspace, `k` centroids of its width, centroid-major; subspace `s` covers
/// components `[⌊s·dim/m⌋, ⌊(s+1)·dim/m⌋)`); slots `j ≥ k` hold 0.
///
/// Errors if `m` is out of range or `m > dim`, `k > 16`, or
/// `books.len() != k · dim`.
pub fn transpose_books(dim: usize, m: usize, k: usize, books: &[f32]) -> Result<Vec<f32>> {
    check_m(m)?;
    if m > dim || k > CODES {
        return Err(Error::InvalidParameter {
            what: "fast-scan codebooks",
            reason: format!("need m <= dim and k <= 16, got m = {m}, dim = {dim}, k = {k}"),
        });
    }
    if books.len() != k * dim {
        return Err(Error::WrongDimension {
            what: "fast-scan codebooks (k * dim floats)",
            expected: k * dim,
            got: books.len(),
        });
    }
    let mut out = vec![0f32; CODES * dim];
    for s in 0..m {
        let (a, b) = (s * dim / m, (s + 1) * dim / m);
        let w = b - a;
        let block = &books[k * a..k * b];
        for j in 0..k {
            for i in 0..w {
                out[CODES * (a + i) + j] = block[j * w + i];
            }
        }
    }
    Ok(out)
}

#[track_caller]
fn check_table(query: &[f32], m: usize, books_t: &[f32], out: &[f32]) {
    assert!(
        (1..=query.len()).contains(&m)
            && books_t.len() == CODES * query.len()
            && out.len() == CODES * m,
        "fast-scan table: query {} floats, m {m}, books {} floats (16 per component), out {} \
         (16 per subspace)",
        query.len(),
        books_t.len(),
        out.len()
    );
}

fn table_on(
    isa: Isa,
    kind: TableKind,
    query: &[f32],
    m: usize,
    books_t: &[f32],
    k: usize,
    out: &mut [f32],
) {
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `check_table`
        // held.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::table(kind, query, m, books_t, k, out) },
        _ => scalar::table(kind, query, m, books_t, k, out),
    }
}

/// The query's `m × 16` f32 table (subspace-major, lower is better) from
/// transposed codebooks ([`transpose_books`]): entry `(s, j)` accumulates
/// from `0.0`, component by component in ascending order, `(q_d − c_d)²`
/// ([`TableKind::L2`]: subtract, multiply, add) or `q_d · c_d` (then
/// negated, [`TableKind::NegDot`]), never fused; slots `j ≥ k` are `+inf`.
/// AVX2 computes the 16 slots of a subspace in lanes with the same
/// operations, so the table is bit-identical on every ISA (portable and
/// NEON use the scalar model: the table is `O(16 · dim)`, small next to the
/// scan).
///
/// # Panics
/// If `m` is not in `1..=query.len()`, `books_t.len() != 16 · query.len()`
/// or `out.len() != 16 · m`.
#[track_caller]
pub fn table(kind: TableKind, query: &[f32], m: usize, books_t: &[f32], k: usize, out: &mut [f32]) {
    check_table(query, m, books_t, out);
    table_on(isa(), kind, query, m, books_t, k, out)
}

/// [`table`] on an explicit ISA; `false` (and `out` untouched) if
/// unavailable.
#[track_caller]
pub fn table_with(
    isa: Isa,
    kind: TableKind,
    query: &[f32],
    m: usize,
    books_t: &[f32],
    k: usize,
    out: &mut [f32],
) -> bool {
    check_table(query, m, books_t, out);
    isa.is_available() && {
        table_on(isa, kind, query, m, books_t, k, out);
        true
    }
}

/// [`Lut::quantize`] on an explicit ISA; `Ok(None)` if unavailable.
pub fn quantize_with(isa: Isa, m: usize, table: &[f32], bias: f32) -> Result<Option<Lut>> {
    if !isa.is_available() {
        return Ok(None);
    }
    let mut lut = Lut {
        m: 0,
        offset: 0.0,
        scale: 1.0,
        entries: Vec::new(),
    };
    lut.requantize_on(isa, m, table, bias)?;
    Ok(Some(lut))
}

#[track_caller]
fn check_scan(lut: &Lut, blocks: &[u8], out: &[u16]) {
    let bb = block_bytes(lut.m);
    assert!(
        out.len().is_multiple_of(BLOCK) && blocks.len() == bb * (out.len() / BLOCK),
        "fast-scan: blocks.len() = {} and out.len() = {} do not match {} bytes per 32 rows",
        blocks.len(),
        out.len(),
        bb
    );
}

fn scan_on(isa: Isa, lut: &Lut, blocks: &[u8], out: &mut [u16]) {
    let mp = padded_m(lut.m);
    match isa {
        // SAFETY: `isa` is available, so AVX2 is present; `check_scan` held,
        // so every block has `16·mp` bytes and `out` 32 slots per block.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::scan(&lut.entries, mp, blocks, out) },
        // SAFETY: as above for NEON.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { aarch64::scan(&lut.entries, mp, blocks, out) },
        Isa::Portable => portable::scan(&lut.entries, mp, blocks, out),
        _ => scalar::scan(&lut.entries, mp, blocks, out),
    }
}

/// Scans packed blocks: `out[32·b + r]` = the exact sum over subspaces of
/// `lut` entries selected by row `r` of block `b`. Bit-exact on every ISA.
///
/// # Panics
/// If `out.len()` is not `32 ·` the number of blocks or `blocks.len()` is not
/// a multiple of `block_bytes(lut.m())`.
#[track_caller]
pub fn scan(lut: &Lut, blocks: &[u8], out: &mut [u16]) {
    check_scan(lut, blocks, out);
    scan_on(isa(), lut, blocks, out)
}

/// [`scan`] on an explicit ISA; `false` (and `out` untouched) if unavailable.
#[track_caller]
pub fn scan_with(isa: Isa, lut: &Lut, blocks: &[u8], out: &mut [u16]) -> bool {
    check_scan(lut, blocks, out);
    isa.is_available() && {
        scan_on(isa, lut, blocks, out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prox_testkit::SplitMix64;

    #[test]
    fn pack_places_nibbles() {
        // m = 3 (padded to 4), 17 rows: row r has codes (r % 16, 15 - r % 16, 1).
        let codes: Vec<u8> = (0..17u8).flat_map(|r| [r % 16, 15 - r % 16, 1]).collect();
        let mut out = Vec::new();
        pack(&codes, 3, &mut out).unwrap();
        assert_eq!(out.len(), block_bytes(3));
        assert_eq!(block_bytes(3), 64);
        for r in 0..17 {
            assert_eq!(unpack(&out, 0, r), (r % 16) as u8);
            assert_eq!(unpack(&out, 1, r), 15 - (r % 16) as u8);
            assert_eq!(unpack(&out, 2, r), 1);
            assert_eq!(unpack(&out, 3, r), 0, "padding subspace");
        }
        for r in 17..32 {
            assert_eq!(unpack(&out, 2, r), 0, "missing rows are zero");
        }
        assert!(pack(&[16], 1, &mut out).is_err());
        assert!(pack(&[1, 2, 3], 2, &mut out).is_err());
        assert!(pack(&[], 0, &mut out).is_err());
        assert!(pack(&vec![0; 257], 257, &mut out).is_err());
    }

    #[test]
    fn round_u8_equals_round() {
        let mut x = 0.0f32;
        while x < 256.0 {
            assert_eq!(round_u8(x), x.round().clamp(0.0, 255.0) as u8, "{x}");
            x += 1.0 / 64.0;
        }
        for x in [
            0.5f32,
            0.499_999_97,
            1.5,
            2.5,
            254.5,
            254.499_98,
            255.4,
            1e30,
        ] {
            assert_eq!(round_u8(x), x.round().clamp(0.0, 255.0) as u8, "{x}");
        }
        assert_eq!(round_u8(-1.0), 0);
        assert_eq!(round_u8(f32::NAN), 0);
    }

    #[test]
    fn quantize_known_values() {
        // m = 1: entries 0..16 scaled; lo = 2, range = 15 * 3 = 45.
        let table: Vec<f32> = (0..16).map(|j| 2.0 + 3.0 * j as f32).collect();
        let lut = Lut::quantize(1, &table, 1.0).unwrap();
        assert_eq!(lut.offset(), 3.0);
        assert_eq!(lut.scale(), 45.0 / 255.0);
        assert_eq!(lut.entries()[0], 0);
        assert_eq!(lut.entries()[15], 255);
        assert_eq!(lut.entries()[5], 85);
        assert_eq!(&lut.entries()[16..], &[0u8; 16], "padding row");
        assert_eq!(lut.distance(255), 3.0 + 45.0);
        // +inf slots saturate; a constant table quantises to zero.
        let mut t = vec![1.0f32; 16];
        t[9] = f32::INFINITY;
        let lut = Lut::quantize(1, &t, 0.0).unwrap();
        assert_eq!(lut.entries()[9], 255);
        assert_eq!(lut.entries()[0], 0);
        assert!(Lut::quantize(1, &[f32::NAN; 16], 0.0).is_err());
        assert!(Lut::quantize(2, &[0.0; 16], 0.0).is_err());
    }

    #[test]
    fn scan_sums_every_isa() {
        let m = 5;
        let codes: Vec<u8> = (0..40u32)
            .flat_map(|r| (0..m as u32).map(move |s| ((r * 7 + s * 3) % 16) as u8))
            .collect();
        let mut blocks = Vec::new();
        pack(&codes, m, &mut blocks).unwrap();
        let table: Vec<f32> = (0..16 * m).map(|i| (i % 17) as f32).collect();
        let lut = Lut::quantize(m, &table, 0.0).unwrap();
        let e = lut.entries();
        for isa in crate::available_isas() {
            let mut out = vec![0u16; 64];
            assert!(scan_with(isa, &lut, &blocks, &mut out));
            for (r, code) in codes.chunks_exact(m).enumerate() {
                let want: u32 = code
                    .iter()
                    .enumerate()
                    .map(|(s, &c)| u32::from(e[s * 16 + usize::from(c)]))
                    .sum();
                assert_eq!(u32::from(out[r]), want, "{isa} row {r}");
            }
        }
    }

    /// The largest sums (`255 · 256`, where the AVX2 kernel's whole-word
    /// accumulators wrap several times) and mixed rows stay exact.
    #[test]
    fn scan_is_exact_at_the_largest_sums() {
        let m = MAX_SUBSPACES;
        // Per row: slot 0 at 0, the others at 1: entries 0 and 255.
        let table: Vec<f32> = (0..16 * m).map(|i| f32::from(i % 16 != 0)).collect();
        let lut = Lut::quantize(m, &table, 0.0).unwrap();
        let e = lut.entries();
        assert_eq!((e[0], e[1]), (0, 255));
        // Row r: code 15 everywhere except subspaces below r (code 0), so
        // the sums run from 65 280 down in steps of 255.
        let rows = 64;
        let codes: Vec<u8> = (0..rows)
            .flat_map(|r| (0..m).map(move |s| if s < r { 0 } else { 15 }))
            .collect();
        let mut blocks = Vec::new();
        pack(&codes, m, &mut blocks).unwrap();
        for isa in crate::available_isas() {
            let mut out = vec![0u16; rows];
            assert!(scan_with(isa, &lut, &blocks, &mut out));
            for (r, &got) in out.iter().enumerate() {
                assert_eq!(u32::from(got), 255 * (m - r) as u32, "{isa} row {r}");
            }
        }
    }

    fn seed() -> u64 {
        prox_testkit::seed(0x7ab1e)
    }

    fn uniform(next: &mut impl FnMut() -> u64) -> f32 {
        ((next() >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    }

    #[test]
    fn transpose_matches_codebook_layout() {
        // dim 5, m 2: subspaces [0, 2) and [2, 5); k = 3.
        let books: Vec<f32> = (0..15).map(|i| i as f32).collect();
        let t = transpose_books(5, 2, 3, &books).unwrap();
        // Subspace 0 block: centroid j = books[2j..2j+2].
        assert_eq!(t[0], 0.0);
        assert_eq!(t[1], 2.0);
        assert_eq!(t[CODES + 2], 5.0);
        // Subspace 1 block starts at 6: centroid j = books[6+3j..6+3j+3].
        assert_eq!(t[2 * CODES + 1], 9.0);
        assert_eq!(t[4 * CODES + 2], 14.0);
        assert_eq!(t[3], 0.0, "slot >= k");
        assert!(transpose_books(5, 6, 3, &books).is_err());
        assert!(transpose_books(5, 2, 17, &books).is_err());
        assert!(transpose_books(5, 2, 3, &books[1..]).is_err());
    }

    /// Every ISA's table equals the scalar model bit for bit, and the scalar
    /// model equals a direct per-centroid fold.
    #[test]
    fn table_every_isa_equals_scalar() {
        let s0 = seed();
        let mut rng = SplitMix64::new(s0);
        let mut next = || rng.next();
        for &(dim, m) in &[
            (1, 1),
            (2, 1),
            (7, 3),
            (16, 16),
            (17, 8),
            (33, 5),
            (128, 64),
            (384, 192),
            (384, 48),
            (768, 256),
        ] {
            for k in [1, 5, 16] {
                let books: Vec<f32> = (0..k * dim).map(|_| uniform(&mut next)).collect();
                let q: Vec<f32> = (0..dim).map(|_| uniform(&mut next)).collect();
                let bt = transpose_books(dim, m, k, &books).unwrap();
                for kind in [TableKind::L2, TableKind::NegDot] {
                    let mut want = vec![0f32; CODES * m];
                    scalar::table(kind, &q, m, &bt, k, &mut want);
                    for s in 0..m {
                        let (a, b) = (s * dim / m, (s + 1) * dim / m);
                        let w = b - a;
                        for j in 0..CODES {
                            let direct = if j >= k {
                                f32::INFINITY
                            } else {
                                let c = &books[k * a + j * w..k * a + (j + 1) * w];
                                let f = q[a..b].iter().zip(c);
                                match kind {
                                    TableKind::L2 => f.fold(0f32, |acc, (x, y)| {
                                        let d = x - y;
                                        acc + d * d
                                    }),
                                    TableKind::NegDot => -f.fold(0f32, |acc, (x, y)| acc + x * y),
                                }
                            };
                            assert_eq!(
                                want[s * CODES + j].to_bits(),
                                direct.to_bits(),
                                "dim {dim} m {m} k {k} {kind:?} (PROX_SEED={s0})"
                            );
                        }
                    }
                    for isa in crate::available_isas() {
                        let mut got = vec![0f32; CODES * m];
                        assert!(table_with(isa, kind, &q, m, &bt, k, &mut got));
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{isa} dim {dim} m {m} k {k} {kind:?} (PROX_SEED={s0})"
                        );
                    }
                }
            }
        }
    }

    /// Every ISA quantises to the scalar model's bytes, offset and scale,
    /// including `+inf` slots, constant rows, rows without a finite entry
    /// and entries landing exactly on a rounding half.
    #[test]
    fn quantize_every_isa_equals_scalar() {
        let s0 = seed();
        let mut rng = SplitMix64::new(s0 ^ 0x51);
        let mut next = || rng.next();
        for m in [1, 2, 3, 8, 15, 64, 192, 256] {
            for case in 0..6 {
                let mut t: Vec<f32> = (0..CODES * m).map(|_| uniform(&mut next) * 50.0).collect();
                match case {
                    1 => t
                        .iter_mut()
                        .skip(11)
                        .step_by(16)
                        .for_each(|x| *x = f32::INFINITY),
                    2 => t[..CODES].iter_mut().for_each(|x| *x = f32::INFINITY),
                    3 => t.iter_mut().for_each(|x| *x = 3.0),
                    // Integers over a range of 255: exact halves after
                    // scaling by 2.
                    4 => t.iter_mut().enumerate().for_each(|(i, x)| {
                        *x = ((i * 37) % 256) as f32 + if i % 3 == 0 { 0.5 } else { 0.0 }
                    }),
                    5 => t.iter_mut().for_each(|x| *x *= 1e-30),
                    _ => {}
                }
                let mut want = Lut::quantize(m, &t, 0.25).unwrap();
                want.requantize_on(Isa::Scalar, m, &t, 0.25).unwrap();
                // The scalar model is the pre-SIMD definition.
                let mut lo = vec![0f32; m];
                let mut hi = vec![0f32; m];
                scalar::bounds(&t, &mut lo, &mut hi);
                for (row, out) in t
                    .chunks_exact(CODES)
                    .zip(want.entries().chunks_exact(CODES))
                {
                    let l = row
                        .iter()
                        .filter(|x| x.is_finite())
                        .fold(f32::INFINITY, |a, &x| a.min(x));
                    for (&x, &o) in row.iter().zip(out) {
                        let e = if x.is_finite() {
                            round_u8((x - l) / want.scale())
                        } else {
                            255
                        };
                        assert_eq!(o, e, "m {m} case {case} (PROX_SEED={s0})");
                    }
                }
                for isa in crate::available_isas() {
                    let got = quantize_with(isa, m, &t, 0.25).unwrap().unwrap();
                    assert_eq!(got, want, "{isa} m {m} case {case} (PROX_SEED={s0})");
                }
            }
        }
        assert!(quantize_with(Isa::Scalar, 1, &[f32::NAN; 16], 0.0).is_err());
    }
}
