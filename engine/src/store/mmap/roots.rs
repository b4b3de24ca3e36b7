//! The named-roots files.
//!
//! Named roots are kept in two slot files, `ROOTS.0` and `ROOTS.1`, each
//! holding every named root and a generation number:
//!
//! ```text
//! "PXRT" | version 2u8 | generation uv | count uv | (name blob | value blob) * count | xxh64 u64 LE
//! ```
//!
//! (`uv` and `blob` are the canonical varint and length-prefixed bytes of
//! [`crate::codec`]; names sorted, unique.) Generation `g` is written in
//! place into slot `g % 2` and fsynced, so the other slot always holds the
//! previous commit: a torn or damaged slot falls back to it (the LMDB/redb
//! meta-page rule) instead of making the store unopenable. The highest valid
//! generation wins.
//!
//! A store written by an older build has one `ROOTS` file (version 1, read
//! as generation 0). It stays the fallback until generation 2 is written,
//! then it is removed.

use super::io::Io;
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};
use crate::store::validate_root_name;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh64::xxh64;

/// The single roots file of older stores (generation 0).
pub(super) const LEGACY_FILE: &str = "ROOTS";
/// Temporary name of a slot file being written for the first time (older
/// builds used it while rewriting `ROOTS`); removed when a store opens.
pub(super) const ROOTS_TMP: &str = "ROOTS.tmp";
/// The two slot files.
pub(super) const SLOT_FILES: [&str; 2] = ["ROOTS.0", "ROOTS.1"];
const MAGIC: &[u8; 4] = b"PXRT";
const VERSION: u8 = 2;
/// Upper bound on one root value (RootManifest bytes are far smaller).
const MAX_VALUE: usize = 16 << 20;

pub(super) type Roots = BTreeMap<String, Bytes>;

/// What one roots file held when the store was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotState {
    /// The file does not exist.
    Missing,
    /// A valid copy of the named roots.
    Valid {
        /// Its generation.
        generation: u64,
        /// Named roots in it.
        roots: usize,
    },
    /// The file exists but does not decode (torn write, bit rot).
    Damaged {
        /// Why it was rejected.
        reason: String,
    },
}

/// How the named roots were loaded: each roots file's state and the
/// generation used (see [`MmapStore::roots_report`](super::MmapStore::roots_report)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootsReport {
    /// Each roots file found or expected: the two slots, then the legacy
    /// `ROOTS` file if present.
    pub files: Vec<(PathBuf, SlotState)>,
    /// The generation in use (0 for a new store or a legacy file).
    pub generation: u64,
    /// True when a newer copy was damaged and an older generation is in
    /// use: the last change of a named root before the damage may be lost.
    pub fell_back: bool,
}

pub(super) fn encode(roots: &Roots, generation: u64) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    put_uv(&mut out, generation);
    put_uv(&mut out, roots.len() as u64);
    for (name, value) in roots {
        put_blob(&mut out, name.as_bytes());
        put_blob(&mut out, value);
    }
    let sum = xxh64(&out, 0);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Decodes a roots file of version 1 (generation 0) or 2.
pub(super) fn decode(buf: &[u8]) -> Result<(Roots, u64)> {
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
    let generation = match version {
        1 => 0,
        VERSION => r.uv()?,
        v => return Err(r.invalid(format!("unsupported version {v}"))),
    };
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
    Ok((roots, generation))
}

/// The named roots of a store and how they were found.
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    pub(super) roots: Roots,
    pub(super) report: RootsReport,
}

/// Reads the roots of `dir`: the valid copy with the highest generation
/// (empty when no roots file exists). Fails only when roots files exist
/// and none is valid.
pub(super) fn load(dir: &Path) -> Result<Loaded> {
    let mut files: Vec<(PathBuf, SlotState)> = Vec::new();
    let mut best: Option<(u64, Roots)> = None;
    let mut any = false;
    let mut newest_seen_damaged = false;
    let mut names: Vec<&str> = SLOT_FILES.to_vec();
    if dir.join(LEGACY_FILE).exists() {
        names.push(LEGACY_FILE);
    }
    for name in names {
        let path = dir.join(name);
        let state = match fs::read(&path) {
            Ok(buf) => {
                any = true;
                match decode(&buf) {
                    Ok((roots, generation)) => {
                        let n = roots.len();
                        if best.as_ref().is_none_or(|(g, _)| generation > *g) {
                            best = Some((generation, roots));
                        }
                        SlotState::Valid {
                            generation,
                            roots: n,
                        }
                    }
                    Err(e) => {
                        newest_seen_damaged = true;
                        SlotState::Damaged {
                            reason: e.to_string(),
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => SlotState::Missing,
            Err(e) => return Err(e.into()),
        };
        files.push((path, state));
    }
    let Some((generation, roots)) = best else {
        if any {
            let reasons: Vec<String> = files
                .iter()
                .filter_map(|(p, s)| match s {
                    SlotState::Damaged { reason } => Some(format!("{}: {reason}", p.display())),
                    _ => None,
                })
                .collect();
            let first_damaged = files
                .iter()
                .find(|(_, s)| matches!(s, SlotState::Damaged { .. }))
                .map_or_else(|| dir.join(SLOT_FILES[0]), |(p, _)| p.clone());
            return Err(Error::StoreDamaged {
                path: first_damaged,
                reason: format!("no valid copy of the named roots ({})", reasons.join("; ")),
            });
        }
        return Ok(Loaded {
            roots: Roots::new(),
            report: RootsReport {
                files,
                generation: 0,
                fell_back: false,
            },
        });
    };
    // A damaged slot may have held a newer generation than the one used
    // (it cannot hold anything older than the previous commit).
    let fell_back = newest_seen_damaged;
    if fell_back {
        tracing::warn!(
            dir = %dir.display(),
            generation,
            "a copy of the named roots is damaged; using the other copy (the last root change may be lost; `prox roots recover` rewrites both)"
        );
    }
    Ok(Loaded {
        roots,
        report: RootsReport {
            files,
            generation,
            fell_back,
        },
    })
}

/// Durably writes `roots` as `generation` into its slot. An existing slot
/// is rewritten in place, then fsynced (the other slot holds the previous
/// commit). A slot that does not exist yet is written whole under
/// `ROOTS.tmp` and renamed into place, so a crash during the store's first
/// commit leaves no slot rather than a torn one with nothing to fall back
/// to. From generation 2 on, a legacy `ROOTS` file is older than both slots
/// and is removed.
pub(super) fn store(io: &Io, dir: &Path, roots: &Roots, generation: u64) -> Result<()> {
    let path = dir.join(SLOT_FILES[(generation % 2) as usize]);
    let buf = encode(roots, generation);
    let created = !path.exists();
    if created {
        let tmp = dir.join(ROOTS_TMP);
        io.remove(&tmp)?;
        let file = io.create_new(&tmp)?;
        io.write_at(&file, &tmp, &buf, 0)?;
        io.sync(&file, &tmp)?;
        io.rename(&tmp, &path)?;
    } else {
        let file = io.open_or_create(&path)?;
        io.write_at(&file, &path, &buf, 0)?;
        io.set_len(&file, &path, buf.len() as u64)?;
        io.sync(&file, &path)?;
    }
    let legacy = dir.join(LEGACY_FILE);
    let drop_legacy = generation >= 2 && legacy.exists();
    if drop_legacy {
        io.remove(&legacy)?;
    }
    if created || drop_legacy {
        io.sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_damage() {
        let mut roots = Roots::new();
        roots.insert("a".into(), Bytes::from_static(b"\x01\x02"));
        roots.insert("main".into(), Bytes::new());
        let buf = encode(&roots, 7);
        assert_eq!(decode(&buf).unwrap(), (roots, 7));
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_err(), "flip at {i}");
            assert!(decode(&buf[..i]).is_err(), "cut at {i}");
        }
    }
}
