//! Named roots as objects: key and byte format.
//!
//! A root object holds `"PXR1" | state u8 | value`: state 1 means the root
//! is set to `value`, state 0 means it was removed (a tombstone, so removal
//! is a conditional write like any other and needs no conditional delete).
//! The object key is the hex of the root's name, so any valid root name is
//! a safe key.

use prox_engine::{Error, Result};

const MAGIC: &[u8; 4] = b"PXR1";

/// The object name (under `roots/`) of root `name`.
pub(crate) fn key(name: &str) -> String {
    hex::encode(name.as_bytes())
}

/// The root name of an object key, if it is one this store wrote.
pub(crate) fn name_of(key: &str) -> Option<String> {
    String::from_utf8(hex::decode(key).ok()?).ok()
}

/// Encodes a root value (`None`: removed).
pub(crate) fn encode(value: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + value.map_or(0, <[u8]>::len));
    out.extend_from_slice(MAGIC);
    match value {
        Some(v) => {
            out.push(1);
            out.extend_from_slice(v);
        }
        None => out.push(0),
    }
    out
}

/// Decodes a root object (`None`: removed).
pub(crate) fn decode(name: &str, bytes: &bytes::Bytes) -> Result<Option<bytes::Bytes>> {
    let bad = |reason: &str| Error::invalid("S3 root object", format!("root {name:?}: {reason}"));
    if bytes.len() < 5 || &bytes[..4] != MAGIC {
        return Err(bad("missing PXR1 header"));
    }
    match bytes[4] {
        0 if bytes.len() == 5 => Ok(None),
        0 => Err(bad("bytes after a removal")),
        1 => Ok(Some(bytes.slice(5..))),
        s => Err(bad(&format!("unknown state {s}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        for v in [None, Some(&b""[..]), Some(&b"manifest"[..])] {
            let enc = bytes::Bytes::from(encode(v));
            assert_eq!(decode("r", &enc).unwrap().as_deref(), v);
        }
        for bad in [&b""[..], b"PXR1", b"PXR0\x01", b"PXR1\x02", b"PXR1\x00x"] {
            assert!(decode("r", &bytes::Bytes::copy_from_slice(bad)).is_err());
        }
        assert_eq!(name_of(&key("main/x")).as_deref(), Some("main/x"));
        assert_eq!(name_of("zz"), None);
    }
}
