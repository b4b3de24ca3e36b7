//! Cold queries through the `Index` on a store that counts its reads: the
//! hierarchy is fetched level by level in batches, so the dependent reads
//! of a cold open + warm + query are bounded by the map's height plus a
//! small constant, not by the number of nodes. Seeded; `PROX_SEED`
//! replays a failure.

use bytes::Bytes;
use prox_engine::index::{self, Build, Index, Options, QueryMode, Request, Scratch};
use prox_engine::store::RetainStats;
use prox_engine::{BlockStore, Cid, MemStore, Result};
use prox_testkit::SplitMix64 as Rng;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A [`MemStore`] that counts read calls: every `get`, `get_many` and
/// `root` is one dependent round trip on a remote store.
#[derive(Default)]
struct Counting {
    inner: MemStore,
    reads: AtomicU64,
    blocks: AtomicU64,
}

impl Counting {
    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
    fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Relaxed)
    }
}

impl BlockStore for Counting {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.inner.get(cid)
    }
    fn get_many(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.blocks.fetch_add(cids.len() as u64, Ordering::Relaxed);
        self.inner.get_many(cids)
    }
    fn put(&self, data: &[u8]) -> Result<Cid> {
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
        self.reads.fetch_add(1, Ordering::Relaxed);
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

#[test]
fn cold_query_reads_are_bounded_by_height_not_nodes() {
    let seed = prox_testkit::seed(0xC01D);
    let mut rng = Rng::new(seed);
    let store = Arc::new(Counting::default());
    let dims = 8;
    let records = (0..3000u64)
        .map(|i| {
            let v: Vec<f32> = (0..dims).map(|_| rng.unit()).collect();
            (i.to_be_bytes().to_vec(), v, vec![i as u8])
        })
        .collect();
    let mut build = Build::new(dims as u32);
    // Small fan-out: several levels on a small input, no overflow pages.
    build.config.log_chunk_size = 2;
    index::build(&*store, Some("m"), &build, records).unwrap();
    let query: Vec<f32> = (0..dims).map(|_| rng.unit()).collect();

    for mode in [QueryMode::Auto, QueryMode::Exact] {
        let before = (store.reads(), store.blocks());
        let options = Options {
            warm: false,
            ..Options::default()
        };
        let shared: Arc<dyn BlockStore> = store.clone();
        let ix = Index::open(shared, "m", &options).unwrap();
        let nodes = if mode == QueryMode::Exact {
            ix.warm_exact().unwrap()
        } else {
            ix.warm().unwrap()
        };
        let req = Request::new(10).mode(mode);
        let r = ix.search(&mut Scratch::default(), &query, &req).unwrap();
        assert_eq!(r.hits.len(), 10, "seed {seed}");
        let reads = store.reads() - before.0;
        let blocks = store.blocks() - before.1;
        let height = ix.searcher().height();
        assert!(height >= 3, "seed {seed}: height {height}");
        assert!(
            nodes as u64 > 10 * (height as u64 + 3),
            "seed {seed}: {nodes} nodes"
        );
        assert!(
            reads <= height as u64 + 3,
            "seed {seed}: {mode:?}: {reads} dependent reads ({blocks} blocks) for height {height}"
        );
        assert!(blocks >= nodes as u64, "seed {seed}: {blocks} blocks read");
    }
}
