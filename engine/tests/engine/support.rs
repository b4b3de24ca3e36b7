//! A [`MemStore`] that counts what goes through it, for the suites that
//! bound how many blocks an operation reads or writes; seeded clustered
//! records.

use bytes::Bytes;
use prox_engine::store::RetainStats;
use prox_engine::{BlockStore, Cid, MemStore, Result};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(crate) struct Counting {
    pub(crate) inner: MemStore,
    /// Read calls: every `get`, `get_many` and `root` is one dependent
    /// round trip on a remote store.
    reads: AtomicU64,
    /// Blocks asked for by those calls.
    blocks: AtomicU64,
    puts: AtomicU64,
    /// Puts of blocks the store did not hold yet.
    new_puts: AtomicU64,
}

impl Counting {
    pub(crate) fn reset(&self) {
        for c in [&self.reads, &self.blocks, &self.puts, &self.new_puts] {
            c.store(0, Ordering::SeqCst);
        }
    }
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
    pub(crate) fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::SeqCst)
    }
    pub(crate) fn puts(&self) -> u64 {
        self.puts.load(Ordering::SeqCst)
    }
    pub(crate) fn new_puts(&self) -> u64 {
        self.new_puts.load(Ordering::SeqCst)
    }
}

impl BlockStore for Counting {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.blocks.fetch_add(1, Ordering::SeqCst);
        self.inner.get(cid)
    }
    fn get_many(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.blocks.fetch_add(cids.len() as u64, Ordering::SeqCst);
        self.inner.get_many(cids)
    }
    fn put(&self, data: &[u8]) -> Result<Cid> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        if !self.inner.has(&Cid::of(data))? {
            self.new_puts.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.put(data)
    }
    fn has(&self, cid: &Cid) -> Result<bool> {
        self.inner.has(cid)
    }
    fn cids(&self) -> Result<Vec<Cid>> {
        self.inner.cids()
    }
    fn commit(&self) -> Result<()> {
        self.inner.commit()
    }
    fn root(&self, name: &str) -> Result<Option<Bytes>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.root(name)
    }
    fn set_root(&self, name: &str, value: Option<&[u8]>) -> Result<()> {
        self.inner.set_root(name, value)
    }
    fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool> {
        self.inner.cas_root(name, expected, new)
    }
    fn roots(&self) -> Result<Vec<(String, Bytes)>> {
        self.inner.roots()
    }
    fn retain(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        self.inner.retain(live)
    }
}

/// `n` records of `dims` components around `centres` seeded Gaussian
/// centres (spread 5, unit noise), keys 8-byte big-endian `0..n`, value
/// the key's low byte.
pub(crate) fn clustered(
    seed: u64,
    n: u64,
    dims: usize,
    centres: usize,
) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    let mut rng = prox_testkit::SplitMix64::new(seed);
    let centres: Vec<Vec<f32>> = (0..centres)
        .map(|_| (0..dims).map(|_| rng.gauss() * 5.0).collect())
        .collect();
    (0..n)
        .map(|i| {
            let c = &centres[rng.below(centres.len() as u64) as usize];
            let v = c.iter().map(|&x| x + rng.gauss()).collect();
            (i.to_be_bytes().to_vec(), v, vec![i as u8])
        })
        .collect()
}
