//! The strict CBOR subset of the `PSI*` records (secondary-index.md 2.3):
//! one definite array of definite byte strings, text strings, shortest-head
//! unsigned integers and nested definite arrays. Everything else (maps,
//! tags, floats, indefinite lengths, non-minimal heads) is rejected: the
//! spec (6.6) lets a strict port refuse what no writer may emit.

use crate::error::{Error, Result};

/// One decoded item of the subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Item {
    Uint(u64),
    Bytes(Vec<u8>),
    Text(String),
    Array(Vec<Item>),
}

/// Most nesting the records use is 3; anything deeper is malformed.
const MAX_DEPTH: usize = 4;

/// Parses exactly one item spanning all of `bytes`.
pub(crate) fn parse(bytes: &[u8], object: &'static str) -> Result<Item> {
    let mut pos = 0;
    let item = read(bytes, &mut pos, object, 0)?;
    if pos != bytes.len() {
        return Err(Error::TrailingBytes {
            object,
            extra: bytes.len() - pos,
        });
    }
    Ok(item)
}

fn take<'a>(bytes: &'a [u8], pos: &mut usize, n: usize, object: &'static str) -> Result<&'a [u8]> {
    let end = pos.checked_add(n).filter(|&e| e <= bytes.len());
    let end = end.ok_or(Error::Truncated { object })?;
    let s = &bytes[*pos..end];
    *pos = end;
    Ok(s)
}

fn read(bytes: &[u8], pos: &mut usize, object: &'static str, depth: usize) -> Result<Item> {
    if depth > MAX_DEPTH {
        return Err(Error::invalid(object, "CBOR nested too deeply"));
    }
    let first = take(bytes, pos, 1, object)?[0];
    let (major, info) = (first >> 5, first & 0x1f);
    let arg = match info {
        0..=23 => u64::from(info),
        24..=27 => {
            let width = 1usize << (info - 24);
            let raw = take(bytes, pos, width, object)?;
            let v = raw.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            let min = match width {
                1 => 24,
                2 => 0x100,
                4 => 0x1_0000,
                _ => 0x1_0000_0000,
            };
            if v < min {
                return Err(Error::invalid(object, "non-minimal CBOR head"));
            }
            v
        }
        _ => return Err(Error::invalid(object, "indefinite or reserved CBOR length")),
    };
    let len = |v: u64| usize::try_from(v).map_err(|_| Error::Truncated { object });
    match major {
        0 => Ok(Item::Uint(arg)),
        2 => Ok(Item::Bytes(take(bytes, pos, len(arg)?, object)?.to_vec())),
        3 => {
            let raw = take(bytes, pos, len(arg)?, object)?;
            let s = std::str::from_utf8(raw)
                .map_err(|_| Error::invalid(object, "text string is not UTF-8"))?;
            Ok(Item::Text(s.to_string()))
        }
        4 => {
            let n = len(arg)?;
            // Every item is at least one byte: cap preallocation by the input.
            let mut items = Vec::with_capacity(n.min(bytes.len() - *pos));
            for _ in 0..n {
                items.push(read(bytes, pos, object, depth + 1)?);
            }
            Ok(Item::Array(items))
        }
        _ => Err(Error::invalid(
            object,
            format!("CBOR major type {major} is not allowed here"),
        )),
    }
}

impl Item {
    pub(crate) fn array(self, n: usize, object: &'static str) -> Result<Vec<Item>> {
        match self {
            Item::Array(v) if v.len() == n => Ok(v),
            Item::Array(v) => Err(Error::invalid(
                object,
                format!("expected an array of {n} items, got {}", v.len()),
            )),
            _ => Err(Error::invalid(object, "expected a CBOR array")),
        }
    }

    pub(crate) fn any_array(self, object: &'static str) -> Result<Vec<Item>> {
        match self {
            Item::Array(v) => Ok(v),
            _ => Err(Error::invalid(object, "expected a CBOR array")),
        }
    }

    pub(crate) fn bytes(self, object: &'static str, what: &str) -> Result<Vec<u8>> {
        match self {
            Item::Bytes(b) => Ok(b),
            _ => Err(Error::invalid(
                object,
                format!("{what}: expected a CBOR byte string"),
            )),
        }
    }

    pub(crate) fn bytes32(self, object: &'static str, what: &str) -> Result<[u8; 32]> {
        let b = self.bytes(object, what)?;
        b.try_into()
            .map_err(|_| Error::invalid(object, format!("{what} must be 32 bytes")))
    }

    pub(crate) fn text(self, object: &'static str, what: &str) -> Result<String> {
        match self {
            Item::Text(s) => Ok(s),
            _ => Err(Error::invalid(
                object,
                format!("{what}: expected a CBOR text string"),
            )),
        }
    }

    pub(crate) fn uint(self, object: &'static str, what: &str) -> Result<u64> {
        match self {
            Item::Uint(v) => Ok(v),
            _ => Err(Error::invalid(
                object,
                format!("{what}: expected an unsigned integer"),
            )),
        }
    }
}

/// Appends a definite-length byte string.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    crate::prolly::cbor::head(out, 2, b.len() as u64);
    out.extend_from_slice(b);
}

pub(crate) use crate::prolly::cbor::{head, put_text, put_uint};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_subset() {
        assert_eq!(parse(&[0x18, 0x18], "t").unwrap(), Item::Uint(24));
        assert!(parse(&[0x18, 0x01], "t").is_err(), "non-minimal head");
        assert!(parse(&[0x5f, 0xff], "t").is_err(), "indefinite bstr");
        assert!(parse(&[0xa0], "t").is_err(), "map");
        assert!(parse(&[0xc0, 0x01], "t").is_err(), "tag");
        assert!(parse(&[0x81], "t").is_err(), "truncated");
        assert!(parse(&[0x01, 0x00], "t").is_err(), "trailing");
        assert!(parse(&[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], "t").is_err());
    }
}
