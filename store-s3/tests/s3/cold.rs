//! A cold query on a bucket: a fresh `S3Store` (nothing cached) opens a
//! map through the `Index`, loads it and answers one query in at most the
//! map's height + 3 dependent round trips (batches of block GETs plus root
//! reads), however many nodes it has.

use crate::support::{fresh_prefix, server};
use prox_engine::index::{self, Build, Index, Options, Request, Scratch};
use prox_engine::BlockStore;
use prox_s3::S3Store;
use prox_testkit::SplitMix64 as Rng;
use std::sync::Arc;

#[test]
fn a_cold_query_takes_at_most_height_plus_three_round_trips() {
    let Some(srv) = server("cold_query") else {
        return;
    };
    let seed = prox_testkit::seed(0xC01D_5300);
    let mut rng = Rng::new(seed);
    let dims = 8;
    let records = (0..2000u64)
        .map(|i| {
            let v: Vec<f32> = (0..dims).map(|_| rng.unit()).collect();
            (i.to_be_bytes().to_vec(), v, vec![i as u8])
        })
        .collect();
    let prefix = fresh_prefix("cold_query");
    let writer = S3Store::open(srv.config(&prefix)).unwrap();
    let mut build = Build::new(dims as u32);
    // Small fan-out: several levels on a small input.
    build.config.log_chunk_size = 2;
    index::build(&writer, Some("m"), &build, records).unwrap();
    let query: Vec<f32> = (0..dims).map(|_| rng.unit()).collect();

    let cold = Arc::new(S3Store::open(srv.config(&prefix)).unwrap());
    let shared: Arc<dyn BlockStore> = cold.clone();
    let options = Options {
        warm: false,
        ..Options::default()
    };
    let ix = Index::open(shared, "m", &options).unwrap();
    let nodes = ix.warm().unwrap();
    let r = ix
        .search(&mut Scratch::default(), &query, &Request::new(10))
        .unwrap();
    assert_eq!(r.hits.len(), 10, "seed {seed}");
    let counts = cold.requests();
    let height = ix.searcher().height() as u64;
    assert!(height >= 3, "seed {seed}: height {height}");
    assert!(
        nodes as u64 > 10 * (height + 3),
        "seed {seed}: {nodes} nodes"
    );
    assert!(
        counts.round_trips() <= height + 3,
        "seed {seed}: {counts:?} for height {height} and {nodes} nodes"
    );
}
