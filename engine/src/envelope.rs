//! Value envelopes (prolly-core.md section 9).
//!
//! * [`VersionedValue`] (`PLVV`): a payload tagged with a schema name,
//!   schema version and encoding. Fixed 30-byte header, all integers
//!   big-endian: `"PLVV" | 01 | enc tag | schema_version u64 | schema_len u32
//!   | custom_len u32 | payload_len u64`, then schema, custom name, payload.
//! * [`ValueRef`] (`PLVB`): either the value inline or a reference to a
//!   content-addressed blob (`"PLVB" | 01 | 01 | CID | len u64`).
//!
//! [`put_large_value`] / [`get_large_value`] implement the stored-value
//! policy: values above the threshold go to a blob; a small value that
//! itself starts with `PLVB` is escaped in an inline envelope; anything else
//! is stored raw.

use crate::cid::Cid;
use crate::codec::Reader;
use crate::error::{Error, Result};
use crate::prolly::Encoding;
use crate::store::BlockStore;

const PLVV: &str = "PLVV envelope";
const PLVB: &str = "PLVB envelope";

/// Magic of a [`VersionedValue`].
pub const VERSIONED_MAGIC: &[u8; 4] = b"PLVV";
/// Magic of a [`ValueRef`].
pub const VALUE_REF_MAGIC: &[u8; 4] = b"PLVB";
/// Default size above which [`put_large_value`] stores a blob.
pub const DEFAULT_INLINE_THRESHOLD: usize = 65536;
const PLVV_HEADER: usize = 30;

/// A payload with its schema name, schema version and encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedValue {
    /// Schema name (UTF-8).
    pub schema: String,
    /// Schema version.
    pub version: u64,
    /// Payload encoding (tags shared with node headers).
    pub encoding: Encoding,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

impl VersionedValue {
    /// `PLVV` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let custom = self.encoding.custom_name().unwrap_or("").as_bytes();
        let mut out =
            Vec::with_capacity(PLVV_HEADER + self.schema.len() + custom.len() + self.payload.len());
        out.extend_from_slice(VERSIONED_MAGIC);
        out.push(1);
        out.push(self.encoding.tag());
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&(self.schema.len() as u32).to_be_bytes());
        out.extend_from_slice(&(custom.len() as u32).to_be_bytes());
        out.extend_from_slice(&(self.payload.len() as u64).to_be_bytes());
        out.extend_from_slice(self.schema.as_bytes());
        out.extend_from_slice(custom);
        out.extend_from_slice(&self.payload);
        out
    }

    /// Parses `PLVV` bytes; the declared lengths must cover the input exactly.
    pub fn decode(bytes: &[u8]) -> Result<VersionedValue> {
        if bytes.len() < PLVV_HEADER {
            return Err(Error::Truncated { object: PLVV });
        }
        let mut r = Reader::new(bytes, PLVV);
        r.expect_magic(VERSIONED_MAGIC)?;
        let wire = r.u8()?;
        if wire != 1 {
            return Err(r.invalid(format!("unsupported wire version {wire}")));
        }
        let tag = r.u8()?;
        let version = r.u64be()?;
        let schema_len = r.u32be()? as u64;
        let custom_len = r.u32be()? as u64;
        let payload_len = r.u64be()?;
        let total = (PLVV_HEADER as u64)
            .checked_add(schema_len)
            .and_then(|t| t.checked_add(custom_len))
            .and_then(|t| t.checked_add(payload_len));
        if total != Some(bytes.len() as u64) {
            return Err(r.invalid(format!(
                "declared lengths (schema {schema_len}, custom {custom_len}, payload {payload_len}) do not match {} bytes",
                bytes.len()
            )));
        }
        let schema = std::str::from_utf8(r.take(schema_len as usize)?)
            .map_err(|_| Error::invalid(PLVV, "schema is not UTF-8"))?
            .to_string();
        let custom = std::str::from_utf8(r.take(custom_len as usize)?)
            .map_err(|_| Error::invalid(PLVV, "custom encoding name is not UTF-8"))?
            .to_string();
        let encoding = match tag {
            0 => Encoding::Raw,
            1 => Encoding::Cbor,
            2 => Encoding::Json,
            3 => Encoding::Custom(custom.clone()),
            t => return Err(Error::invalid(PLVV, format!("unknown encoding tag {t}"))),
        };
        if tag != 3 && !custom.is_empty() {
            return Err(Error::invalid(
                PLVV,
                "custom encoding name with a non-custom tag",
            ));
        }
        let payload = r.take(payload_len as usize)?.to_vec();
        r.finish()?;
        Ok(VersionedValue {
            schema,
            version,
            encoding,
            payload,
        })
    }
}

/// A stored value: inline bytes or a reference to a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueRef {
    /// The value itself.
    Inline(Vec<u8>),
    /// A blob named by its CID, with its length.
    Blob {
        /// SHA-256 of the blob.
        cid: Cid,
        /// Blob length in bytes.
        len: u64,
    },
}

impl ValueRef {
    /// `PLVB` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(VALUE_REF_MAGIC);
        out.push(1);
        match self {
            ValueRef::Inline(v) => {
                out.push(0);
                out.extend_from_slice(&(v.len() as u64).to_be_bytes());
                out.extend_from_slice(v);
            }
            ValueRef::Blob { cid, len } => {
                out.push(1);
                out.extend_from_slice(cid.as_bytes());
                out.extend_from_slice(&len.to_be_bytes());
            }
        }
        out
    }

    /// Parses `PLVB` bytes strictly (no trailing bytes, exact lengths).
    pub fn decode(bytes: &[u8]) -> Result<ValueRef> {
        let mut r = Reader::new(bytes, PLVB);
        r.expect_magic(VALUE_REF_MAGIC)?;
        let version = r.u8()?;
        if version != 1 {
            return Err(r.invalid(format!("unsupported version {version}")));
        }
        let out = match r.u8()? {
            0 => {
                let n = r.u64be()?;
                if n != r.remaining() as u64 {
                    return Err(r.invalid(format!(
                        "inline length {n} but {} bytes follow",
                        r.remaining()
                    )));
                }
                ValueRef::Inline(r.take(n as usize)?.to_vec())
            }
            1 => ValueRef::Blob {
                cid: r.cid()?,
                len: r.u64be()?,
            },
            k => return Err(r.invalid(format!("unknown kind {k}"))),
        };
        r.finish()?;
        Ok(out)
    }
}

/// The leaf value to store for `value`: a blob reference (the blob is put
/// into `store`) when longer than `threshold`, an inline envelope when it
/// starts with `PLVB`, else the raw bytes.
pub fn put_large_value(store: &dyn BlockStore, value: &[u8], threshold: usize) -> Result<Vec<u8>> {
    if value.len() > threshold {
        let cid = store.put(value)?;
        Ok(ValueRef::Blob {
            cid,
            len: value.len() as u64,
        }
        .encode())
    } else if value.starts_with(VALUE_REF_MAGIC) {
        Ok(ValueRef::Inline(value.to_vec()).encode())
    } else {
        Ok(value.to_vec())
    }
}

/// Resolves a stored leaf value written by [`put_large_value`]. A blob must
/// exist, hash to its CID and have the recorded length.
pub fn get_large_value(store: &dyn BlockStore, stored: &[u8]) -> Result<Vec<u8>> {
    if !stored.starts_with(VALUE_REF_MAGIC) {
        return Ok(stored.to_vec());
    }
    match ValueRef::decode(stored)? {
        ValueRef::Inline(v) => Ok(v),
        ValueRef::Blob { cid, len } => {
            let blob = store.get(&cid)?.ok_or(Error::NotFound { cid })?;
            if blob.len() as u64 != len {
                return Err(Error::Corrupt {
                    cid,
                    reason: format!("blob is {} bytes, envelope says {len}", blob.len()),
                });
            }
            if !cid.matches(&blob) {
                return Err(Error::Corrupt {
                    cid,
                    reason: "blob bytes do not hash to the CID".into(),
                });
            }
            Ok(blob.to_vec())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    #[test]
    fn versioned_round_trip_and_rejections() {
        let v = VersionedValue {
            schema: "s".into(),
            version: 3,
            encoding: Encoding::Custom("x/y".into()),
            payload: b"p".to_vec(),
        };
        let b = v.encode();
        assert_eq!(VersionedValue::decode(&b).unwrap(), v);
        for cut in 0..b.len() {
            assert!(VersionedValue::decode(&b[..cut]).is_err());
        }
        let mut t = b.clone();
        t.push(0);
        assert!(VersionedValue::decode(&t).is_err());
        let mut tag = b.clone();
        tag[5] = 0; // raw tag with a custom name
        assert!(VersionedValue::decode(&tag).is_err());
    }

    #[test]
    fn large_value_policy() {
        let store = MemStore::new();
        let small = put_large_value(&store, b"abc", 4).unwrap();
        assert_eq!(small, b"abc");
        let escaped = put_large_value(&store, b"PLVB", 4).unwrap();
        assert_ne!(escaped, b"PLVB");
        assert_eq!(get_large_value(&store, &escaped).unwrap(), b"PLVB");
        let big = put_large_value(&store, b"12345", 4).unwrap();
        assert_eq!(big.len(), 46);
        assert_eq!(get_large_value(&store, &big).unwrap(), b"12345");
        let empty = MemStore::new();
        assert!(matches!(
            get_large_value(&empty, &big),
            Err(Error::NotFound { .. })
        ));
        assert!(get_large_value(&store, b"PLVB\x01\x07").is_err());
    }
}
