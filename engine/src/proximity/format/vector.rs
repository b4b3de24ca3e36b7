//! `PRXV`: a vector stored outside its PRXN node (section 3).

use super::{
    check_f64, put_components, read_components, read_header, FORMAT_VERSION, MAGIC_VECTOR,
    MAX_ENTRIES, VECTOR_F32_LE,
};
use crate::codec::{put_f64, put_uv, Reader};
use crate::error::{Error, Result};

const OBJ: &str = "PRXV";

/// An external vector. The canonical builder never writes a norm.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalVector {
    /// Canonical components (finite, no `-0.0`); at most 2^24 of them.
    pub vector: Vec<f32>,
    /// Optional stored norm; must be finite and `>= 0` when present. Never
    /// interpreted beyond that check.
    pub norm: Option<f64>,
}

impl ExternalVector {
    /// Encodes this vector.
    pub fn encode(&self) -> Result<Vec<u8>> {
        ExternalVector::encode_parts(&self.vector, self.norm)
    }

    /// Encodes from borrowed components.
    pub fn encode_parts(vector: &[f32], norm: Option<f64>) -> Result<Vec<u8>> {
        if vector.len() as u64 > MAX_ENTRIES {
            return Err(Error::invalid(OBJ, "more than 2^24 components"));
        }
        let mut out = Vec::with_capacity(18 + 4 * vector.len());
        out.extend_from_slice(MAGIC_VECTOR);
        out.push(FORMAT_VERSION);
        out.push(VECTOR_F32_LE);
        out.push(u8::from(norm.is_some()));
        put_uv(&mut out, vector.len() as u64);
        put_components(&mut out, OBJ, vector)?;
        if let Some(n) = norm {
            check_f64(OBJ, n)?;
            if n < 0.0 {
                return Err(Error::invalid(OBJ, "negative norm"));
            }
            put_f64(&mut out, OBJ, n)?;
        }
        Ok(out)
    }

    /// Decodes a `PRXV` object (no context needed: the dimensions are
    /// inside; consumers compare them with the descriptor's).
    pub fn decode(bytes: &[u8]) -> Result<ExternalVector> {
        let mut r = Reader::new(bytes, OBJ);
        read_header(&mut r, MAGIC_VECTOR)?;
        let enc = r.u8()?;
        if enc != VECTOR_F32_LE {
            return Err(r.invalid(format!("unknown vector encoding {enc}")));
        }
        let flags = r.u8()?;
        if flags & !1 != 0 {
            return Err(r.invalid(format!("unknown flags {flags:#04x}")));
        }
        let d = r.uv()?;
        if d > MAX_ENTRIES {
            return Err(r.invalid(format!("{d} components exceed {MAX_ENTRIES}")));
        }
        if d * 4 > r.remaining() as u64 {
            return Err(r.invalid(format!(
                "{d} components impossible in {} bytes",
                r.remaining()
            )));
        }
        let vector = read_components(&mut r, d as usize)?;
        let norm = if flags & 1 != 0 {
            let n = r.f64()?;
            if n < 0.0 {
                return Err(r.invalid("negative norm"));
            }
            Some(n)
        } else {
            None
        };
        r.finish()?;
        Ok(ExternalVector { vector, norm })
    }
}
