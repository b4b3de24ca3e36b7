//! Minimal CBOR helpers for the two serde_cbor-era formats prox must read or
//! write byte-exactly: legacy nodes (read only) and `RootManifest`.
//!
//! Parsing goes through `ciborium::value::Value` (segment-wise reads, no
//! length-driven preallocation, recursion limit 256); the struct accessors
//! reproduce serde's leniencies: a map keyed by field index or field name
//! (unknown keys ignored, duplicates rejected) or a positional array.
//! Writing is by hand so the packed shortest-head form is exact.

use super::Encoding;
use crate::error::{Error, Result};
use ciborium::value::Value;

/// Parses exactly one CBOR item spanning all of `bytes`.
pub(crate) fn parse(bytes: &[u8], object: &'static str) -> Result<Value> {
    let mut rest = bytes;
    let value: Value = ciborium::de::from_reader(&mut rest)
        .map_err(|e| Error::invalid(object, format!("CBOR: {e}")))?;
    if !rest.is_empty() {
        return Err(Error::TrailingBytes {
            object,
            extra: rest.len(),
        });
    }
    Ok(value)
}

fn untag(mut v: &Value) -> &Value {
    while let Value::Tag(_, inner) = v {
        v = inner;
    }
    v
}

/// A serde struct read from CBOR: fields by position.
pub(crate) struct Struct<'n> {
    fields: Vec<Option<Value>>,
    names: &'n [&'static str],
    object: &'static str,
}

impl<'n> Struct<'n> {
    pub(crate) fn new(
        value: Value,
        names: &'n [&'static str],
        object: &'static str,
    ) -> Result<Self> {
        let mut fields: Vec<Option<Value>> = vec![None; names.len()];
        let value = match value {
            Value::Tag(_, inner) => {
                let mut v = *inner;
                while let Value::Tag(_, i) = v {
                    v = *i;
                }
                v
            }
            v => v,
        };
        match value {
            Value::Array(items) => {
                if items.len() != names.len() {
                    return Err(Error::invalid(
                        object,
                        format!(
                            "struct array has {} fields, expected {}",
                            items.len(),
                            names.len()
                        ),
                    ));
                }
                for (slot, item) in fields.iter_mut().zip(items) {
                    *slot = Some(item);
                }
            }
            Value::Map(entries) => {
                for (k, v) in entries {
                    let idx = match untag(&k) {
                        Value::Integer(i) => {
                            let i = i128::from(*i);
                            if i < 0 {
                                return Err(Error::invalid(object, "negative struct field index"));
                            }
                            usize::try_from(i).ok().filter(|&i| i < names.len())
                        }
                        Value::Text(t) => names.iter().position(|n| n == t),
                        _ => {
                            return Err(Error::invalid(
                                object,
                                "struct key is neither index nor name",
                            ))
                        }
                    };
                    let Some(idx) = idx else { continue };
                    if fields[idx].is_some() {
                        return Err(Error::invalid(
                            object,
                            format!("duplicate field {}", names[idx]),
                        ));
                    }
                    fields[idx] = Some(v);
                }
            }
            _ => return Err(Error::invalid(object, "expected a CBOR map or array")),
        }
        Ok(Struct {
            fields,
            names,
            object,
        })
    }

    /// Field `i`, an error when missing.
    pub(crate) fn required(&self, i: usize) -> Result<&Value> {
        self.optional(i)
            .ok_or_else(|| Error::invalid(self.object, format!("missing field {}", self.names[i])))
    }

    /// Field `i` if present (an explicit `null` counts as present).
    pub(crate) fn optional(&self, i: usize) -> Option<&Value> {
        self.fields[i].as_ref().map(untag)
    }
}

/// An unsigned integer.
pub(crate) fn uint(v: &Value, object: &'static str, what: &str) -> Result<u64> {
    match untag(v) {
        Value::Integer(i) => {
            u64::try_from(*i).map_err(|_| Error::invalid(object, format!("{what} is not a u64")))
        }
        _ => Err(Error::invalid(
            object,
            format!("{what} must be an unsigned integer"),
        )),
    }
}

/// An unsigned integer that fits usize.
pub(crate) fn usize(v: &Value, object: &'static str, what: &str) -> Result<usize> {
    let n = uint(v, object, what)?;
    usize::try_from(n).map_err(|_| Error::invalid(object, format!("{what} {n} does not fit usize")))
}

/// `null` -> `None`, else an unsigned integer fitting usize.
pub(crate) fn opt_usize(
    v: Option<&Value>,
    object: &'static str,
    what: &str,
) -> Result<Option<usize>> {
    match v.map(untag) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => usize(x, object, what).map(Some),
    }
}

/// serde's `Vec<u8>` as written by serde_cbor: an array of uints 0..=255.
pub(crate) fn byte_vec(v: &Value, object: &'static str, what: &str) -> Result<Vec<u8>> {
    let Value::Array(items) = untag(v) else {
        return Err(Error::invalid(
            object,
            format!("{what} must be an array of bytes"),
        ));
    };
    items
        .iter()
        .map(|x| match untag(x) {
            Value::Integer(i) => u8::try_from(*i)
                .map_err(|_| Error::invalid(object, format!("{what}: byte out of range"))),
            _ => Err(Error::invalid(
                object,
                format!("{what}: element is not an integer"),
            )),
        })
        .collect()
}

/// An array of byte vectors.
pub(crate) fn byte_vecs(v: &Value, object: &'static str, what: &str) -> Result<Vec<Vec<u8>>> {
    let Value::Array(items) = untag(v) else {
        return Err(Error::invalid(object, format!("{what} must be an array")));
    };
    items.iter().map(|x| byte_vec(x, object, what)).collect()
}

const VARIANTS: [&str; 4] = ["Raw", "Cbor", "Json", "Custom"];

/// The `Encoding` enum: uint index 0..=2, variant name text, or a one-entry
/// map `{"Custom" | 3: text}` (unit variants may also appear as `{name: null}`).
pub(crate) fn encoding(v: &Value, object: &'static str) -> Result<Encoding> {
    let unit = |i: usize| match i {
        0 => Ok(Encoding::Raw),
        1 => Ok(Encoding::Cbor),
        2 => Ok(Encoding::Json),
        _ => Err(Error::invalid(object, format!("bad encoding variant {i}"))),
    };
    let variant = |k: &Value| -> Option<usize> {
        match untag(k) {
            Value::Integer(i) => usize::try_from(i128::from(*i)).ok().filter(|&i| i < 4),
            Value::Text(t) => VARIANTS.iter().position(|n| n == t),
            _ => None,
        }
    };
    match untag(v) {
        Value::Integer(_) | Value::Text(_) => match variant(v) {
            Some(i) if i < 3 => unit(i),
            _ => Err(Error::invalid(object, "bad encoding variant")),
        },
        Value::Map(entries) if entries.len() == 1 => {
            let (k, x) = &entries[0];
            match (variant(k), untag(x)) {
                (Some(3), Value::Text(name)) => Ok(Encoding::Custom(name.clone())),
                (Some(3), _) => Err(Error::invalid(object, "custom encoding name must be text")),
                (Some(i), Value::Null) => unit(i),
                _ => Err(Error::invalid(object, "bad encoding variant")),
            }
        }
        _ => Err(Error::invalid(object, "bad encoding value")),
    }
}

/// Appends a CBOR head with the shortest argument encoding.
pub(crate) fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    if n < 24 {
        out.push(m | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[m | 24, n as u8]);
    } else if n <= 0xffff {
        out.push(m | 25);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n <= 0xffff_ffff {
        out.push(m | 26);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Appends an unsigned integer.
pub(crate) fn put_uint(out: &mut Vec<u8>, n: u64) {
    head(out, 0, n);
}

/// Appends a text string.
pub(crate) fn put_text(out: &mut Vec<u8>, s: &str) {
    head(out, 3, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends serde's `Vec<u8>`/`[u8; N]` form: an array of uints.
pub(crate) fn put_byte_array(out: &mut Vec<u8>, bytes: &[u8]) {
    head(out, 4, bytes.len() as u64);
    for &b in bytes {
        put_uint(out, u64::from(b));
    }
}

/// Appends an `Encoding` as serde_cbor packed mode writes it.
pub(crate) fn put_encoding(out: &mut Vec<u8>, e: &Encoding) {
    match e {
        Encoding::Custom(name) => {
            head(out, 5, 1);
            put_text(out, "Custom");
            put_text(out, name);
        }
        other => put_uint(out, u64::from(other.tag())),
    }
}

/// CBOR `null`.
pub(crate) const NULL: u8 = 0xf6;
