//! `PQS8`: node-local scalar quantizer (sections 4 and 12.7).

use super::{check_f32, read_header, FORMAT_VERSION, MAGIC_QUANTIZER, MAX_ENTRIES};
use crate::codec::{put_f32, put_uv, Reader};
use crate::error::{Error, Result};

const OBJ: &str = "PQS8";

/// Signed 8-bit codes for the vectors of one PRXN node.
///
/// Invariants (checked by encode and decode): `dims > 0`, `group_size > 0`,
/// `scales.len() == ceil(dims / group_size)`, every scale and `max_error`
/// finite, `>= 0` and never `-0.0`, `codes.len() == count * dims`, and no
/// code equals `-128`.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantizer {
    /// Vector dimensions.
    pub dims: u32,
    /// Components per scale group.
    pub group_size: u32,
    /// Number of quantized vectors.
    pub count: u64,
    /// One scale per group: component `i` uses `scales[i / group_size]`.
    pub scales: Vec<f32>,
    /// Largest absolute reconstruction error over every component.
    pub max_error: f32,
    /// Row-major codes: vector 0's components, then vector 1's, ...
    pub codes: Vec<i8>,
}

impl Quantizer {
    /// Derives the canonical quantizer of `vectors` (section 12.7). All
    /// vectors must have `dims` components; the result is bit-identical on
    /// every machine (scalar IEEE math, f64 division, ties-to-even).
    pub fn derive<'a, I>(vectors: I, dims: u32, group_size: u32) -> Result<Quantizer>
    where
        I: IntoIterator<Item = &'a [f32]>,
        I::IntoIter: Clone,
    {
        if dims == 0 || group_size == 0 {
            return Err(Error::invalid(OBJ, "zero dimensions or group size"));
        }
        let d = dims as usize;
        let g = group_size as usize;
        let groups = d.div_ceil(g);
        let iter = vectors.into_iter();
        let mut scales = vec![0.0f32; groups];
        let mut count = 0u64;
        for v in iter.clone() {
            if v.len() != d {
                return Err(Error::WrongDimension {
                    expected: d,
                    got: v.len(),
                    key: None,
                });
            }
            count += 1;
            for (i, &c) in v.iter().enumerate() {
                let a = c.abs();
                if a > scales[i / g] {
                    scales[i / g] = a;
                }
            }
        }
        for s in &mut scales {
            if *s != 0.0 {
                *s = (f64::from(*s) / 127.0) as f32;
            }
        }
        let mut codes = Vec::with_capacity(d * count as usize);
        let mut max_error = 0.0f32;
        for v in iter {
            for (i, &c) in v.iter().enumerate() {
                let s = scales[i / g];
                let q: i8 = if s == 0.0 {
                    0
                } else {
                    (f64::from(c) / f64::from(s))
                        .round_ties_even()
                        .clamp(-127.0, 127.0) as i8
                };
                let recon = (f64::from(q) * f64::from(s)) as f32;
                let err = ((f64::from(c) - f64::from(recon)) as f32).abs();
                if err > max_error {
                    max_error = err;
                }
                codes.push(q);
            }
        }
        let q = Quantizer {
            dims,
            group_size,
            count,
            scales,
            max_error,
            codes,
        };
        q.validate()?;
        Ok(q)
    }

    /// The codes of vector `i` (`dims` bytes), if it exists.
    pub fn row(&self, i: usize) -> Option<&[i8]> {
        let d = self.dims as usize;
        self.codes.get(i * d..(i + 1) * d)
    }

    /// Checks the invariants listed on the type.
    pub fn validate(&self) -> Result<()> {
        if self.dims == 0 || self.group_size == 0 {
            return Err(Error::invalid(OBJ, "zero dimensions or group size"));
        }
        let want = (self.dims as usize).div_ceil(self.group_size as usize);
        if self.scales.len() != want {
            return Err(Error::invalid(
                OBJ,
                format!("{} scales, expected {want}", self.scales.len()),
            ));
        }
        for &s in self.scales.iter().chain(std::iter::once(&self.max_error)) {
            check_f32(OBJ, s)?;
            if s < 0.0 {
                return Err(Error::invalid(OBJ, "negative scale or error"));
            }
        }
        let want = u128::from(self.count) * u128::from(self.dims);
        if self.codes.len() as u128 != want {
            return Err(Error::invalid(
                OBJ,
                format!("{} codes, expected {want}", self.codes.len()),
            ));
        }
        if self.codes.contains(&i8::MIN) {
            return Err(Error::invalid(OBJ, "code -128"));
        }
        Ok(())
    }

    /// Encodes this quantizer.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut out = Vec::with_capacity(32 + 4 * self.scales.len() + self.codes.len());
        out.extend_from_slice(MAGIC_QUANTIZER);
        out.push(FORMAT_VERSION);
        out.push(0);
        put_uv(&mut out, u64::from(self.dims));
        put_uv(&mut out, u64::from(self.group_size));
        put_uv(&mut out, self.count);
        put_uv(&mut out, self.scales.len() as u64);
        for &s in &self.scales {
            put_f32(&mut out, OBJ, s)?;
        }
        put_f32(&mut out, OBJ, self.max_error)?;
        out.extend(self.codes.iter().map(|&c| c as u8));
        Ok(out)
    }

    /// Decodes a `PQS8` object.
    pub fn decode(bytes: &[u8]) -> Result<Quantizer> {
        let mut r = Reader::new(bytes, OBJ);
        read_header(&mut r, MAGIC_QUANTIZER)?;
        let flags = r.u8()?;
        if flags != 0 {
            return Err(r.invalid(format!("unknown flags {flags:#04x}")));
        }
        let dims = r.uv32()?;
        let group_size = r.uv32()?;
        let count = r.uv()?;
        let n_scales = r.uv()?;
        if n_scales > MAX_ENTRIES {
            return Err(r.invalid(format!("{n_scales} scales exceed {MAX_ENTRIES}")));
        }
        if n_scales * 4 > r.remaining() as u64 {
            return Err(r.invalid(format!(
                "{n_scales} scales impossible in {} bytes",
                r.remaining()
            )));
        }
        let mut scales = Vec::with_capacity(n_scales as usize);
        for _ in 0..n_scales {
            scales.push(r.f32()?);
        }
        let max_error = r.f32()?;
        let n_codes = u128::from(count) * u128::from(dims);
        if n_codes > r.remaining() as u128 {
            return Err(Error::Truncated { object: OBJ });
        }
        let codes = r.take(n_codes as usize)?.iter().map(|&b| b as i8).collect();
        r.finish()?;
        let q = Quantizer {
            dims,
            group_size,
            count,
            scales,
            max_error,
            codes,
        };
        q.validate()?;
        Ok(q)
    }
}
