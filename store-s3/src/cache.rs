//! [`CachedStore`]: a bounded local read-through cache in front of a
//! remote store.

use bytes::Bytes;
use prox_engine::store::{Lease, MmapStore, RetainStats, Verified};
use prox_engine::{BlockStore, Cid, Result};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

/// A remote store (the source of truth) with an [`MmapStore`] cache of at
/// most `max_bytes` of block data.
///
/// Reads look in the cache first; a miss is fetched from the remote, where
/// it is verified against its CID, and only then copied into the cache, so
/// the cache holds verified blocks only (and `MmapStore` verifies them
/// again on their first read after an open). Writes go to the remote first,
/// then into the cache. Named roots are never cached: every root read goes
/// to the remote, so a moved root is seen at once. When the cache passes
/// `max_bytes` the least recently used blocks are dropped (a compaction of
/// the cache store) until it holds at most three quarters of it.
pub struct CachedStore<R> {
    remote: R,
    cache: MmapStore,
    max_bytes: u64,
    /// Last use of every cached block (a logical clock).
    lru: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    tick: u64,
    used: HashMap<Cid, (u64, u64)>,
    bytes: u64,
}

impl<R: BlockStore> CachedStore<R> {
    /// Caches `remote` in the directory `dir` (created if absent; blocks
    /// already there are kept and count against `max_bytes`).
    pub fn open(remote: R, dir: impl AsRef<Path>, max_bytes: u64) -> Result<CachedStore<R>> {
        let cache = MmapStore::open(dir)?;
        let mut lru = Lru::default();
        for cid in cache.cids()? {
            if let Ok(Some(b)) = cache.get(&cid) {
                lru.bytes += b.len() as u64;
                lru.used.insert(cid, (0, b.len() as u64));
            }
        }
        Ok(CachedStore {
            remote,
            cache,
            max_bytes,
            lru: Mutex::new(lru),
        })
    }

    /// The remote store.
    pub fn remote(&self) -> &R {
        &self.remote
    }

    /// Bytes of block data in the cache.
    pub fn cached_bytes(&self) -> u64 {
        self.lru().bytes
    }

    fn lru(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.lru.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self, cid: &Cid) {
        let mut lru = self.lru();
        lru.tick += 1;
        let tick = lru.tick;
        if let Some(e) = lru.used.get_mut(cid) {
            e.0 = tick;
        }
    }

    /// Copies verified blocks into the cache and evicts if it is full.
    fn admit(&self, blocks: &[Verified]) -> Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        self.cache.put_verified_many(blocks)?;
        let over = {
            let mut lru = self.lru();
            for b in blocks {
                lru.tick += 1;
                let tick = lru.tick;
                let len = b.bytes().len() as u64;
                if lru.used.insert(*b.cid(), (tick, len)).is_none() {
                    lru.bytes += len;
                }
            }
            lru.bytes > self.max_bytes
        };
        if over {
            self.evict()?;
        }
        Ok(())
    }

    /// Drops the least recently used blocks until the cache holds at most
    /// three quarters of `max_bytes`.
    fn evict(&self) -> Result<()> {
        let keep: HashSet<Cid> = {
            let mut lru = self.lru();
            let mut by_age: Vec<(u64, Cid, u64)> =
                lru.used.iter().map(|(c, (t, n))| (*t, *c, *n)).collect();
            by_age.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
            let target = self.max_bytes / 4 * 3;
            let mut total = 0;
            let mut keep = HashSet::new();
            for (_, cid, n) in by_age {
                if total + n > target {
                    continue;
                }
                total += n;
                keep.insert(cid);
            }
            lru.used.retain(|c, _| keep.contains(c));
            lru.bytes = total;
            keep
        };
        self.cache.retain(&keep)?;
        Ok(())
    }
}

impl<R: BlockStore> BlockStore for CachedStore<R> {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        Ok(self.get_many(std::slice::from_ref(cid))?.pop().flatten())
    }

    fn get_many(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        let mut out = Vec::with_capacity(cids.len());
        let mut missing = Vec::new();
        for (i, cid) in cids.iter().enumerate() {
            // A damaged cache copy is treated as a miss: the remote has it.
            match self.cache.get(cid) {
                Ok(Some(b)) => {
                    self.touch(cid);
                    out.push(Some(b));
                }
                _ => {
                    out.push(None);
                    missing.push(i);
                }
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let want: Vec<Cid> = missing.iter().map(|&i| cids[i]).collect();
        let fetched = self.remote.get_many(&want)?;
        let mut admit = Vec::new();
        for (&i, got) in missing.iter().zip(fetched) {
            if let Some(b) = got {
                // The remote verified it; hashing again here keeps the
                // cache's invariant local rather than trusted.
                admit.push(Verified::check(&cids[i], b.clone())?);
                out[i] = Some(b);
            }
        }
        self.admit(&admit)?;
        Ok(out)
    }

    fn put(&self, data: &[u8]) -> Result<Cid> {
        let v = Verified::new(Bytes::copy_from_slice(data));
        self.put_verified_many(std::slice::from_ref(&v))?;
        Ok(*v.cid())
    }

    fn put_many(&self, blocks: &[&[u8]]) -> Result<Vec<Cid>> {
        let v: Vec<Verified> = blocks
            .iter()
            .map(|b| Verified::new(Bytes::copy_from_slice(b)))
            .collect();
        self.put_verified_many(&v)?;
        Ok(v.iter().map(|b| *b.cid()).collect())
    }

    fn put_verified_many(&self, blocks: &[Verified]) -> Result<()> {
        self.remote.put_verified_many(blocks)?;
        self.admit(blocks)
    }

    fn has(&self, cid: &Cid) -> Result<bool> {
        Ok(self.cache.has(cid)? || self.remote.has(cid)?)
    }

    fn has_many(&self, cids: &[Cid]) -> Result<Vec<bool>> {
        self.remote.has_many(cids)
    }

    fn cids(&self) -> Result<Vec<Cid>> {
        self.remote.cids()
    }

    fn commit(&self) -> Result<()> {
        self.remote.commit()
    }

    fn root(&self, name: &str) -> Result<Option<Bytes>> {
        self.remote.root(name)
    }

    fn set_root(&self, name: &str, value: Option<&[u8]>) -> Result<()> {
        self.remote.set_root(name, value)
    }

    fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool> {
        self.remote.cas_root(name, expected, new)
    }

    /// The remote's (roots live there, not in the cache).
    fn lease(&self, name: &str, wait: std::time::Duration) -> Result<Option<Lease>> {
        self.remote.lease(name, wait)
    }

    fn roots(&self) -> Result<Vec<(String, Bytes)>> {
        self.remote.roots()
    }

    /// Collects the remote; the cache keeps only blocks still in it.
    fn retain(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        let stats = self.remote.retain(live)?;
        let keep: HashSet<Cid> = {
            let mut lru = self.lru();
            lru.used.retain(|c, _| live.contains(c));
            lru.bytes = lru.used.values().map(|e| e.1).sum();
            lru.used.keys().copied().collect()
        };
        self.cache.retain(&keep)?;
        Ok(stats)
    }

    fn plan_retain(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        self.remote.plan_retain(live)
    }
}
