//! The named-roots file.
//!
//! `ROOTS` holds every named root, rewritten whole on each change:
//!
//! ```text
//! "PXRT" | version 1u8 | count uv | (name blob | value blob) * count | xxh64 u64 LE
//! ```
//!
//! (`uv` and `blob` are the canonical varint and length-prefixed bytes of
//! [`crate::codec`]; names sorted, unique.) An update writes `ROOTS.tmp`,
//! fsyncs it, renames it over `ROOTS` and fsyncs the directory, so a reader
//! after a crash sees either the old or the new file, never a mix.

use super::sync_dir;
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};
use crate::store::validate_root_name;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use xxhash_rust::xxh64::xxh64;

/// File name of the roots file inside a store directory.
pub(super) const ROOTS_FILE: &str = "ROOTS";
/// Temporary name used while rewriting it.
pub(super) const ROOTS_TMP: &str = "ROOTS.tmp";
const MAGIC: &[u8; 4] = b"PXRT";
const VERSION: u8 = 1;
/// Upper bound on one root value (RootManifest bytes are far smaller).
const MAX_VALUE: usize = 16 << 20;

pub(super) type Roots = BTreeMap<String, Bytes>;

pub(super) fn encode(roots: &Roots) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    put_uv(&mut out, roots.len() as u64);
    for (name, value) in roots {
        put_blob(&mut out, name.as_bytes());
        put_blob(&mut out, value);
    }
    let sum = xxh64(&out, 0);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

pub(super) fn decode(buf: &[u8]) -> Result<Roots> {
    const OBJ: &str = "roots file";
    if buf.len() < 8 {
        return Err(Error::Truncated { object: OBJ });
    }
    let (body, sum) = buf.split_at(buf.len() - 8);
    let mut want = [0u8; 8];
    want.copy_from_slice(sum);
    if xxh64(body, 0) != u64::from_le_bytes(want) {
        return Err(Error::invalid(OBJ, "checksum mismatch"));
    }
    let mut r = Reader::new(body, OBJ);
    r.expect_magic(MAGIC)?;
    let version = r.u8()?;
    if version != VERSION {
        return Err(r.invalid(format!("unsupported version {version}")));
    }
    let count = r.uv()?;
    let mut roots = Roots::new();
    for _ in 0..count {
        let name = std::str::from_utf8(r.blob(255)?)
            .map_err(|_| r.invalid("root name is not UTF-8"))?
            .to_string();
        validate_root_name(&name)?;
        let value = Bytes::copy_from_slice(r.blob(MAX_VALUE)?);
        if let Some((last, _)) = roots.last_key_value() {
            if *last >= name {
                return Err(r.invalid("names not strictly sorted"));
            }
        }
        roots.insert(name, value);
    }
    r.finish()?;
    Ok(roots)
}

/// Reads the roots file of `dir` (empty when absent).
pub(super) fn load(dir: &Path) -> Result<Roots> {
    let path = dir.join(ROOTS_FILE);
    match fs::read(&path) {
        Ok(buf) => decode(&buf).map_err(|e| Error::StoreDamaged {
            path,
            reason: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Roots::new()),
        Err(e) => Err(e.into()),
    }
}

/// Durably replaces the roots file of `dir` with `roots`.
pub(super) fn store(dir: &Path, roots: &Roots) -> Result<()> {
    let tmp = dir.join(ROOTS_TMP);
    let mut f = fs::File::create(&tmp)?;
    f.write_all(&encode(roots))?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, dir.join(ROOTS_FILE))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_damage() {
        let mut roots = Roots::new();
        roots.insert("a".into(), Bytes::from_static(b"\x01\x02"));
        roots.insert("main".into(), Bytes::new());
        let buf = encode(&roots);
        assert_eq!(decode(&buf).unwrap(), roots);
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_err(), "flip at {i}");
            assert!(decode(&buf[..i]).is_err(), "cut at {i}");
        }
    }
}
