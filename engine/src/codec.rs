//! Byte-level primitives shared by every codec: canonical unsigned LEB128
//! varints, fixed-width integers, canonical floats, CIDs and length-prefixed
//! blobs. One reader, one writer; every object codec is built from these.

use crate::cid::Cid;
use crate::error::{Error, Result};

/// Appends `v` as a minimal unsigned LEB128 varint.
pub fn put_uv(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Number of bytes [`put_uv`] writes for `v`.
pub fn uv_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Appends a varint length followed by the bytes.
pub fn put_blob(out: &mut Vec<u8>, bytes: &[u8]) {
    put_uv(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends a canonical f32 (finite, `-0.0` written as `+0.0`), little-endian.
/// Returns an error for NaN or infinities.
pub fn put_f32(out: &mut Vec<u8>, object: &'static str, x: f32) -> Result<()> {
    if !x.is_finite() {
        return Err(Error::invalid(object, "non-finite f32"));
    }
    let x = if x == 0.0 { 0.0f32 } else { x };
    out.extend_from_slice(&x.to_le_bytes());
    Ok(())
}

/// Appends a canonical f64 (finite, `-0.0` written as `+0.0`), little-endian.
pub fn put_f64(out: &mut Vec<u8>, object: &'static str, x: f64) -> Result<()> {
    if !x.is_finite() {
        return Err(Error::invalid(object, "non-finite f64"));
    }
    let x = if x == 0.0 { 0.0f64 } else { x };
    out.extend_from_slice(&x.to_le_bytes());
    Ok(())
}

/// A strict cursor over an object's bytes. Every error names the object type.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    object: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`, reporting errors for `object`.
    pub fn new(buf: &'a [u8], object: &'static str) -> Self {
        Reader {
            buf,
            pos: 0,
            object,
        }
    }

    /// The object name used in errors.
    pub fn object(&self) -> &'static str {
        self.object
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Current offset.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// An [`Error::InvalidObject`] for this object.
    pub fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::invalid(self.object, reason)
    }

    fn truncated(&self) -> Error {
        Error::Truncated {
            object: self.object,
        }
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated());
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Takes exactly `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// One raw byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// Requires the next bytes to equal `magic`.
    pub fn expect_magic(&mut self, magic: &[u8; 4]) -> Result<()> {
        let got = self.take(4)?;
        if got != magic {
            return Err(self.invalid(format!(
                "bad magic {:?}, expected {:?}",
                String::from_utf8_lossy(got),
                String::from_utf8_lossy(magic)
            )));
        }
        Ok(())
    }

    /// Little-endian u64.
    pub fn u64le(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Big-endian u64.
    pub fn u64be(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Big-endian u32.
    pub fn u32be(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// A canonical unsigned LEB128 varint: at most 10 bytes, value < 2^64,
    /// shortest form only.
    pub fn uv(&mut self) -> Result<u64> {
        let start = self.pos;
        let v = self.uv_lenient()?;
        if self.pos - start != uv_len(v) {
            return Err(Error::Varint {
                object: self.object,
                reason: "non-canonical (overlong) encoding",
            });
        }
        Ok(v)
    }

    /// An unsigned LEB128 varint that may be overlong (the reference's
    /// lenient reader); still at most 10 bytes and < 2^64.
    pub fn uv_lenient(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8()?;
            let payload = u64::from(b & 0x7f);
            if i == 9 && payload > 1 {
                return Err(Error::Varint {
                    object: self.object,
                    reason: "overflows u64",
                });
            }
            v |= payload << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::Varint {
            object: self.object,
            reason: "longer than 10 bytes",
        })
    }

    /// A canonical varint that must fit in u32.
    pub fn uv32(&mut self) -> Result<u32> {
        let v = self.uv()?;
        u32::try_from(v).map_err(|_| Error::Varint {
            object: self.object,
            reason: "value does not fit u32",
        })
    }

    /// A canonical varint that must fit in u16.
    pub fn uv16(&mut self) -> Result<u16> {
        let v = self.uv()?;
        u16::try_from(v).map_err(|_| Error::Varint {
            object: self.object,
            reason: "value does not fit u16",
        })
    }

    /// A canonical varint used as a length or count that must fit usize.
    pub fn uv_usize(&mut self) -> Result<usize> {
        let v = self.uv()?;
        usize::try_from(v).map_err(|_| Error::Varint {
            object: self.object,
            reason: "value does not fit usize",
        })
    }

    /// A canonical f32: finite and not `-0.0`.
    pub fn f32(&mut self) -> Result<f32> {
        let bits = u32::from_le_bytes(self.array()?);
        let x = f32::from_bits(bits);
        if !x.is_finite() {
            return Err(self.invalid("non-finite f32"));
        }
        if bits == 0x8000_0000 {
            return Err(self.invalid("negative zero f32"));
        }
        Ok(x)
    }

    /// A canonical f64: finite and not `-0.0`.
    pub fn f64(&mut self) -> Result<f64> {
        let bits = u64::from_le_bytes(self.array()?);
        let x = f64::from_bits(bits);
        if !x.is_finite() {
            return Err(self.invalid("non-finite f64"));
        }
        if bits == 0x8000_0000_0000_0000 {
            return Err(self.invalid("negative zero f64"));
        }
        Ok(x)
    }

    /// 32 raw CID bytes.
    pub fn cid(&mut self) -> Result<Cid> {
        Ok(Cid(self.array()?))
    }

    /// A canonical varint length `n <= max` followed by `n` bytes.
    pub fn blob(&mut self, max: usize) -> Result<&'a [u8]> {
        let n = self.uv()?;
        if n > max as u64 {
            return Err(self.invalid(format!("length {n} exceeds limit {max}")));
        }
        if n > self.remaining() as u64 {
            return Err(self.truncated());
        }
        self.take(n as usize)
    }

    /// Requires that all input was consumed.
    pub fn finish(&self) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(Error::TrailingBytes {
                object: self.object,
                extra,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_uv(&mut out, v);
        out
    }

    #[test]
    fn varint_known_values() {
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(u32::MAX as u64), [0xff, 0xff, 0xff, 0xff, 0x0f]);
        let mut max = vec![0xff; 9];
        max.push(0x01);
        assert_eq!(enc(u64::MAX), max);
        for v in [0, 1, 127, 128, 16383, 16384, u64::MAX] {
            assert_eq!(uv_len(v), enc(v).len());
            let b = enc(v);
            let mut r = Reader::new(&b, "t");
            assert_eq!(r.uv().unwrap(), v);
            r.finish().unwrap();
        }
    }

    #[test]
    fn varint_rejects_overlong_overflow_truncation() {
        assert!(matches!(
            Reader::new(&[0x80, 0x00], "t").uv(),
            Err(Error::Varint { .. })
        ));
        assert_eq!(Reader::new(&[0x80, 0x00], "t").uv_lenient().unwrap(), 0);
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert!(matches!(
            Reader::new(&over, "t").uv_lenient(),
            Err(Error::Varint { .. })
        ));
        assert!(matches!(
            Reader::new(&[0x80], "t").uv(),
            Err(Error::Truncated { .. })
        ));
        assert!(matches!(
            Reader::new(&[0x80; 11], "t").uv_lenient(),
            Err(Error::Varint { .. })
        ));
    }

    #[test]
    fn floats_are_canonical() {
        let neg0 = (-0.0f32).to_le_bytes();
        assert!(Reader::new(&neg0, "t").f32().is_err());
        let nan = f32::NAN.to_le_bytes();
        assert!(Reader::new(&nan, "t").f32().is_err());
        let mut out = Vec::new();
        put_f32(&mut out, "t", -0.0).unwrap();
        assert_eq!(out, [0, 0, 0, 0]);
        assert!(put_f64(&mut out, "t", f64::INFINITY).is_err());
    }
}
