//! `PRVR`: the exact record stored as a value in the descriptor's ordered
//! directory (section 2).

use super::{
    put_components, read_components, read_components_into, read_header, FORMAT_VERSION,
    MAGIC_RECORD, VECTOR_F32_LE,
};
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};

const OBJ: &str = "PRVR";

/// A record: the prepared vector and the opaque application value.
///
/// Invariant (checked by encode and decode): every component is finite and
/// never `-0.0`; the dimension count equals the descriptor's.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The prepared vector (section 11.1).
    pub vector: Vec<f32>,
    /// The value, stored verbatim.
    pub value: Vec<u8>,
}

impl Record {
    /// Encodes this record.
    pub fn encode(&self) -> Result<Vec<u8>> {
        Record::encode_parts(&self.vector, &self.value)
    }

    /// Encodes a record from borrowed parts (no intermediate copy).
    pub fn encode_parts(vector: &[f32], value: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(8 + 4 * vector.len() + value.len() + 10);
        out.extend_from_slice(MAGIC_RECORD);
        out.push(FORMAT_VERSION);
        out.push(VECTOR_F32_LE);
        put_uv(&mut out, vector.len() as u64);
        put_components(&mut out, OBJ, vector)?;
        put_blob(&mut out, value);
        Ok(out)
    }

    /// Decodes a record of a map with `dims` dimensions.
    pub fn decode(bytes: &[u8], dims: u32) -> Result<Record> {
        let (vector, value) = Record::parse(bytes, dims)?;
        Ok(Record {
            vector,
            value: value.to_vec(),
        })
    }

    /// The vector of a record of a map with `dims` dimensions, with the
    /// checks of [`Record::decode`] (the value is not copied).
    pub fn decode_vector(bytes: &[u8], dims: u32) -> Result<Vec<f32>> {
        Record::parse(bytes, dims).map(|(v, _)| v)
    }

    /// [`Record::decode_vector`] into `out` (`dims` components).
    pub fn decode_vector_into(bytes: &[u8], out: &mut [f32]) -> Result<()> {
        let mut r = Reader::new(bytes, OBJ);
        Record::header(&mut r, out.len() as u32)?;
        read_components_into(&mut r, out)?;
        r.blob(r.remaining())?;
        r.finish()
    }

    /// Checks the header of a record of `dims` dimensions.
    fn header(r: &mut Reader<'_>, dims: u32) -> Result<()> {
        read_header(r, MAGIC_RECORD)?;
        let enc = r.u8()?;
        if enc != VECTOR_F32_LE {
            return Err(r.invalid(format!("unknown vector encoding {enc}")));
        }
        let d = r.uv()?;
        if d != u64::from(dims) {
            return Err(Error::WrongDimension {
                expected: dims as usize,
                got: usize::try_from(d).unwrap_or(usize::MAX),
                key: None,
            });
        }
        Ok(())
    }

    /// The vector and the borrowed value.
    fn parse(bytes: &[u8], dims: u32) -> Result<(Vec<f32>, &[u8])> {
        let mut r = Reader::new(bytes, OBJ);
        Record::header(&mut r, dims)?;
        let vector = read_components(&mut r, dims as usize)?;
        let value = r.blob(r.remaining())?;
        r.finish()?;
        Ok((vector, value))
    }
}
