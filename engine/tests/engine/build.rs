//! `index::build`: the one build path of every front end (map, sidecars,
//! named root), its checks before anything is written, and thread-count
//! independence. Seeded; `PROX_SEED` replays a failure.

use prox_engine::accel::{HnswParams, PqParams};
use prox_engine::index::{self, Build, Options, PathChoice, Request, Scratch};
use prox_engine::proximity::{InputRecord, ProximityMap};
use prox_engine::{BlockStore, Error, Index, MemStore};
use prox_testkit::SplitMix64 as Rng;
use std::sync::Arc;

fn records(seed: u64, n: usize, dims: usize) -> Vec<InputRecord> {
    let mut rng = Rng::new(seed);
    (0..n as u64)
        .map(|i| {
            let v = (0..dims).map(|_| rng.gauss()).collect();
            (i.to_be_bytes().to_vec(), v, format!("v{i}").into_bytes())
        })
        .collect()
}

#[test]
fn builds_publishes_and_opens_the_same_map() {
    let seed = prox_testkit::seed(0xB011D);
    let recs = records(seed, 300, 8);
    let mut build = Build::new(8);
    build.hnsw = Some(HnswParams::default());
    build.pq = Some(PqParams {
        subquantizers: 4,
        centroids: 16,
        ..PqParams::default()
    });
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let built = index::build(store.as_ref(), Some("m"), &build, recs.clone()).unwrap();
    assert_eq!(built.records, 300);
    assert!(built.sidecars.hnsw.is_some() && built.sidecars.pq.is_some());
    // The map alone is what ProximityMap::build makes.
    let plain = MemStore::new();
    let direct = ProximityMap::build(&plain, &build.config, recs.clone()).unwrap();
    assert_eq!(
        direct.descriptor_cid(),
        built.descriptor,
        "PROX_SEED={seed}"
    );
    let index = Index::open(store, "m", &Options::default()).unwrap();
    assert_eq!(index.descriptor(), built.descriptor);
    assert_eq!(index.sidecars(), built.sidecars);
    let r = index
        .search(
            &mut Scratch::default(),
            &recs[7].1,
            &Request::new(1).path(PathChoice::Hnsw),
        )
        .unwrap();
    assert_eq!(r.hits[0].key, recs[7].0, "PROX_SEED={seed}");
}

#[test]
fn unnamed_builds_publish_nothing_and_threads_do_not_change_the_map() {
    let seed = prox_testkit::seed(0xB011D);
    let recs = records(seed, 200, 5);
    let mut cids = Vec::new();
    for threads in [Some(1), Some(2), None] {
        let store = MemStore::new();
        let build = Build {
            threads,
            ..Build::new(5)
        };
        cids.push(
            index::build(&store, None, &build, recs.clone())
                .unwrap()
                .descriptor,
        );
        assert!(store.root("m").unwrap().is_none());
    }
    assert!(cids.windows(2).all(|w| w[0] == w[1]), "PROX_SEED={seed}");
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let recs = records(1, 20, 4);
    let check = |build: &Build, name: &str, recs: Vec<InputRecord>| {
        let store = MemStore::new();
        let e = index::build(&store, Some(name), build, recs).unwrap_err();
        assert!(store.is_empty(), "{e}: blocks were written");
        e
    };
    let mut nan = recs.clone();
    nan[3].1[1] = f32::NAN;
    assert!(matches!(
        check(&Build::new(4), "m", nan),
        Error::NonFiniteVector {
            index: 1,
            key: Some(_)
        }
    ));
    let mut dup = recs.clone();
    dup[5].0 = dup[4].0.clone();
    assert!(matches!(
        check(&Build::new(4), "m", dup),
        Error::DuplicateKey { .. }
    ));
    assert!(matches!(
        check(&Build::new(4), "", recs.clone()),
        Error::InvalidRootName { .. }
    ));
    let zero_threads = Build {
        threads: Some(0),
        ..Build::new(4)
    };
    assert!(matches!(
        check(&zero_threads, "m", recs.clone()),
        Error::InvalidArgument(_)
    ));
    let big_pq = Build {
        pq: Some(PqParams {
            subquantizers: 5,
            ..PqParams::default()
        }),
        ..Build::new(4)
    };
    assert!(matches!(
        check(&big_pq, "m", recs.clone()),
        Error::InvalidConfig(_)
    ));
    assert!(matches!(
        check(&Build::new(3), "m", recs),
        Error::WrongDimension {
            expected: 3,
            got: 4,
            ..
        }
    ));
}
