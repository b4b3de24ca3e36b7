//! Cold queries through the `Index` on a store that counts its reads: the
//! hierarchy is fetched level by level in batches, so the dependent reads
//! of a cold open + warm + query are bounded by the map's height plus a
//! small constant, not by the number of nodes. Seeded; `PROX_SEED`
//! replays a failure.

use prox_engine::index::{self, Build, Index, Options, QueryMode, Request, Scratch};
use prox_engine::BlockStore;
use prox_testkit::SplitMix64 as Rng;
use std::sync::Arc;

use crate::support::Counting;

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
