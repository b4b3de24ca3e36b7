//! In-memory block store.

use super::{validate_root_name, BlockStore, Lease, Leases, RetainStats, Verified};
use crate::cid::Cid;
use crate::error::Result;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

/// A block store held entirely in memory. Blocks are verified on `put`
/// (the CID is computed there), so `get` returns them as stored.
#[derive(Debug, Default)]
pub struct MemStore {
    blocks: RwLock<HashMap<Cid, Bytes>>,
    roots: RwLock<BTreeMap<String, Bytes>>,
    leases: Arc<Leases>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of blocks held.
    pub fn len(&self) -> usize {
        self.blocks.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total bytes of block data held.
    pub fn total_bytes(&self) -> u64 {
        let blocks = self.blocks.read().unwrap_or_else(|e| e.into_inner());
        blocks.values().map(|b| b.len() as u64).sum()
    }
}

impl BlockStore for MemStore {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        let blocks = self.blocks.read().unwrap_or_else(|e| e.into_inner());
        Ok(blocks.get(cid).cloned())
    }

    fn lease(&self, name: &str, wait: std::time::Duration) -> Result<Option<Lease>> {
        self.leases.acquire(name, wait).map(Some)
    }

    fn put(&self, data: &[u8]) -> Result<Cid> {
        let cid = Cid::of(data);
        let mut blocks = self.blocks.write().unwrap_or_else(|e| e.into_inner());
        blocks
            .entry(cid)
            .or_insert_with(|| Bytes::copy_from_slice(data));
        Ok(cid)
    }

    /// Keeps the verified `Bytes` as they are (no hash, no copy).
    fn put_verified_many(&self, blocks: &[Verified]) -> Result<()> {
        let mut map = self.blocks.write().unwrap_or_else(|e| e.into_inner());
        for b in blocks {
            map.entry(b.cid).or_insert_with(|| b.bytes.clone());
        }
        Ok(())
    }

    fn has(&self, cid: &Cid) -> Result<bool> {
        let blocks = self.blocks.read().unwrap_or_else(|e| e.into_inner());
        Ok(blocks.contains_key(cid))
    }

    fn cids(&self) -> Result<Vec<Cid>> {
        let blocks = self.blocks.read().unwrap_or_else(|e| e.into_inner());
        Ok(blocks.keys().copied().collect())
    }

    fn commit(&self) -> Result<()> {
        Ok(())
    }

    fn root(&self, name: &str) -> Result<Option<Bytes>> {
        validate_root_name(name)?;
        let roots = self.roots.read().unwrap_or_else(|e| e.into_inner());
        Ok(roots.get(name).cloned())
    }

    fn set_root(&self, name: &str, value: Option<&[u8]>) -> Result<()> {
        validate_root_name(name)?;
        let mut roots = self.roots.write().unwrap_or_else(|e| e.into_inner());
        match value {
            Some(v) => {
                roots.insert(name.to_string(), Bytes::copy_from_slice(v));
            }
            None => {
                roots.remove(name);
            }
        }
        Ok(())
    }

    fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool> {
        validate_root_name(name)?;
        let mut roots = self.roots.write().unwrap_or_else(|e| e.into_inner());
        if roots.get(name).map(|b| b.as_ref()) != expected {
            return Ok(false);
        }
        match new {
            Some(v) => {
                roots.insert(name.to_string(), Bytes::copy_from_slice(v));
            }
            None => {
                roots.remove(name);
            }
        }
        Ok(true)
    }

    fn roots(&self) -> Result<Vec<(String, Bytes)>> {
        let roots = self.roots.read().unwrap_or_else(|e| e.into_inner());
        Ok(roots.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    fn retain(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        let mut blocks = self.blocks.write().unwrap_or_else(|e| e.into_inner());
        let mut stats = RetainStats::default();
        blocks.retain(|cid, data| {
            if live.contains(cid) {
                stats.kept_blocks += 1;
                true
            } else {
                stats.removed_blocks += 1;
                stats.removed_bytes += data.len() as u64;
                false
            }
        });
        Ok(stats)
    }
}
