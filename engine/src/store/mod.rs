//! Content-addressed block stores and named roots.
//!
//! A [`BlockStore`] maps CIDs to the exact bytes that hash to them. Every
//! implementation verifies a block against its CID before handing it out:
//! a mismatch is [`Error::Corrupt`](crate::Error::Corrupt), never data.
//! Named roots are small mutable pointers (RootManifest bytes, see
//! [`crate::manifest`]) with compare-and-swap semantics.

mod lease;
mod mem;
pub mod mmap;
mod pins;

pub use lease::{Lease, Leases};
pub use mem::MemStore;
pub use mmap::{DamagedRange, MmapOptions, MmapStats, MmapStore};
pub use pins::{PinFreeze, PinSet, Pins};

use crate::cid::Cid;
use crate::error::{Error, Result};
use bytes::Bytes;

/// A block together with the CID computed from its bytes.
///
/// Invariant: `cid == Cid::of(bytes)`. The only constructors hash the bytes
/// (and [`Verified::check`] also compares with an expected CID), so holding
/// a `Verified` is proof that the hash was done once. Replication hashes a
/// block on arrival to check it against the CID it asked for, then hands
/// the `Verified` to [`BlockStore::put_verified_many`], which trusts the
/// pairing instead of hashing a second time. Reads are unaffected: stores
/// still verify what they return.
#[derive(Clone, PartialEq, Eq)]
pub struct Verified {
    cid: Cid,
    bytes: Bytes,
}

impl Verified {
    /// Hashes `bytes` and pairs them with their CID.
    pub fn new(bytes: Bytes) -> Verified {
        Verified {
            cid: Cid::of(&bytes),
            bytes,
        }
    }

    /// Hashes `bytes` and checks that they are the block named `cid`:
    /// [`Error::Corrupt`] naming `cid` if not.
    pub fn check(cid: &Cid, bytes: Bytes) -> Result<Verified> {
        let v = Verified::new(bytes);
        if v.cid != *cid {
            return Err(Error::Corrupt {
                cid: *cid,
                reason: format!("content hashes to {}", v.cid),
            });
        }
        Ok(v)
    }

    /// The block's CID.
    pub fn cid(&self) -> &Cid {
        &self.cid
    }

    /// The block's bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Splits into CID and bytes.
    pub fn into_parts(self) -> (Cid, Bytes) {
        (self.cid, self.bytes)
    }
}

impl std::fmt::Debug for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verified")
            .field("cid", &self.cid)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// Outcome of reclaiming unreachable blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetainStats {
    /// Blocks kept.
    pub kept_blocks: u64,
    /// Blocks removed.
    pub removed_blocks: u64,
    /// Bytes of block data removed.
    pub removed_bytes: u64,
}

/// A content-addressed block store with named roots.
///
/// Implementations are safe to share across threads (`&self` everywhere).
/// Blocks are immutable; putting an existing block is a no-op.
pub trait BlockStore: Send + Sync {
    /// Returns the block named `cid`, verified against it, or `None`.
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>>;

    /// [`get`](Self::get) for many CIDs, in order.
    fn get_many(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        cids.iter().map(|c| self.get(c)).collect()
    }

    /// Stores `data` and returns its CID.
    fn put(&self, data: &[u8]) -> Result<Cid>;

    /// Stores many blocks; returns their CIDs in order.
    fn put_many(&self, blocks: &[&[u8]]) -> Result<Vec<Cid>> {
        blocks.iter().map(|b| self.put(b)).collect()
    }

    /// Stores blocks whose CIDs were already computed (see [`Verified`]).
    /// Same effect as [`put_many`](Self::put_many) of their bytes; stores
    /// override it to skip the second hash. The default re-hashes, which is
    /// always correct.
    fn put_verified_many(&self, blocks: &[Verified]) -> Result<()> {
        let raw: Vec<&[u8]> = blocks.iter().map(|b| &b.bytes[..]).collect();
        self.put_many(&raw).map(|_| ())
    }

    /// True if the block is present.
    fn has(&self, cid: &Cid) -> Result<bool>;

    /// [`has`](Self::has) for many CIDs, in order.
    fn has_many(&self, cids: &[Cid]) -> Result<Vec<bool>> {
        cids.iter().map(|c| self.has(c)).collect()
    }

    /// Every CID in the store (order unspecified).
    fn cids(&self) -> Result<Vec<Cid>>;

    /// Makes everything put so far durable (a no-op for memory stores).
    fn commit(&self) -> Result<()>;

    /// Reads the named root's bytes.
    fn root(&self, name: &str) -> Result<Option<Bytes>>;

    /// Sets (`Some`) or removes (`None`) a named root unconditionally.
    /// Durable on return.
    fn set_root(&self, name: &str, value: Option<&[u8]>) -> Result<()>;

    /// Sets the root to `new` only if its current value equals `expected`
    /// (`None` = absent). Returns `true` if the swap happened. Durable on
    /// return.
    fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool>;

    /// Takes the write lease of the root `name`, waiting at most `wait`
    /// behind earlier writers (see [`Leases`]): while it is held, no other
    /// writer that asks for it moves the root. `None` from stores without
    /// an owner process, where writers rely on [`cas_root`](Self::cas_root)
    /// alone (the default). [`Error::Busy`] when the wait runs out.
    fn lease(&self, name: &str, wait: std::time::Duration) -> Result<Option<Lease>> {
        let _ = (name, wait);
        Ok(None)
    }

    /// All named roots, sorted by name.
    fn roots(&self) -> Result<Vec<(String, Bytes)>>;

    /// Removes every block not in `live`. Durable on return; a crash midway
    /// never loses a block in `live`.
    fn retain(&self, live: &std::collections::HashSet<Cid>) -> Result<RetainStats>;

    /// What [`retain`](Self::retain) would do now, changing nothing (the
    /// dry run of a collection). The default counts every stored block not
    /// in `live` as removed; stores whose `retain` keeps some of those
    /// (the S3 store's grace period) override it.
    fn plan_retain(&self, live: &std::collections::HashSet<Cid>) -> Result<RetainStats> {
        let mut stats = RetainStats::default();
        for cid in self.cids()? {
            if live.contains(&cid) {
                stats.kept_blocks += 1;
                continue;
            }
            stats.removed_blocks += 1;
            // A damaged dead block still counts as removed; its size is
            // unknown without trusting its frame, so it adds no bytes.
            if let Ok(Some(b)) = self.get(&cid) {
                stats.removed_bytes += b.len() as u64;
            }
        }
        Ok(stats)
    }
}

/// Checks a root name: 1..=255 bytes of UTF-8, no `/`, `\0` or control
/// characters.
pub fn validate_root_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(crate::Error::InvalidRootName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > 255 {
        return bad("longer than 255 bytes");
    }
    if name
        .chars()
        .any(|c| c.is_control() || c == '/' || c == '\\')
    {
        return bad("contains '/', '\\' or a control character");
    }
    Ok(())
}
