//! The index against the engine's own searches: every route returns what
//! the path it names returns, batch equals sequential, and bad input is a
//! typed error.

use super::*;
use crate::accel::{self, HnswParams, Path, PqParams};
use crate::error::Error;
use crate::keys::Filter;
use crate::proximity::search::{Completion, Mode, Preset, SearchRequest};
use crate::proximity::{ProximityConfig, ProximityMap, Sidecars};
use crate::store::{BlockStore, MemStore};
use prox_testkit::{seed, SplitMix64};
use std::sync::Arc;

const DIMS: usize = 8;

/// The default seed (`PROX_SEED` overrides it).
const SEED: u64 = 0x1DE5;

/// One random vector of `DIMS` components in `[-1, 1)`.
fn vector(rng: &mut SplitMix64) -> Vec<f32> {
    (0..DIMS).map(|_| rng.unit()).collect()
}

/// A 1 500-record map with both sidecars, opened as an index.
fn index(s: u64) -> Index {
    index_with(s, &Options::default())
}

/// [`index`] opened with `options`.
fn index_with(s: u64, options: &Options) -> Index {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut rng = SplitMix64::new(s);
    let records = (0..1500u64)
        .map(|i| (i.to_be_bytes().to_vec(), vector(&mut rng), vec![i as u8]))
        .collect();
    let map = ProximityMap::build(&*store, &ProximityConfig::new(DIMS as u32), records).unwrap();
    let d = map.descriptor_cid();
    let pq = PqParams::parse("subquantizers=4,centroids=16,iterations=4").unwrap();
    let built = accel::build_sidecars(&*store, d, Some(&HnswParams::default()), Some(&pq)).unwrap();
    let sidecars = Sidecars {
        hnsw: built.hnsw.map(|h| h.manifest_cid),
        pq: built.pq.map(|p| p.manifest_cid),
    };
    Index::load(store, d, sidecars, options).unwrap()
}

#[test]
fn warm_exact_and_sidecars_off_load_only_what_is_asked() {
    let s = seed(SEED);
    let full = index(s);
    let cold = Options {
        warm: false,
        ..Options::default()
    };
    let ix = index_with(s, &cold);
    ix.warm_exact().unwrap();
    // An exact-only warm-up leaves the adaptive sub-lists and codebooks
    // unbuilt (the L2 scan arena is built: exact L2 reads it).
    assert_eq!(ix.searcher().lists_bytes(), 0);
    assert!(ix.searcher().arena_bytes() > 0);
    let pq = ix.accelerators().pq.as_ref().unwrap();
    assert!(
        pq.fast_scan_supported() && !pq.fast_scan_built(),
        "a cold open builds no fast-scan lists"
    );
    assert!(full.accelerators().pq.as_ref().unwrap().fast_scan_built());
    let mut rng = SplitMix64::new(s ^ 5);
    let q = vector(&mut rng);
    let exact = Request {
        mode: QueryMode::Exact,
        ..Request::new(10)
    };
    let mut sc = Scratch::default();
    assert_eq!(
        ix.search(&mut sc, &q, &exact).unwrap(),
        full.search(&mut sc, &q, &exact).unwrap()
    );
    assert_eq!(
        ix.searcher().lists_bytes(),
        0,
        "an exact search builds no lists"
    );
    ix.warm().unwrap();
    assert!(ix.searcher().lists_bytes() > 0);
    assert!(ix.accelerators().pq.as_ref().unwrap().fast_scan_built());

    // Without sidecars the map opens as if its root named none.
    let bare = index_with(
        s,
        &Options {
            sidecars: false,
            ..Options::default()
        },
    );
    assert!(bare.accelerators().hnsw.is_none() && bare.accelerators().pq.is_none());
    assert!(bare
        .search(&mut sc, &q, &Request::new(10).path(PathChoice::Hnsw))
        .is_err());
    assert_eq!(
        bare.search(&mut sc, &q, &exact).unwrap().hits,
        full.search(&mut sc, &q, &exact).unwrap().hits
    );

    // `only` loads one sidecar: its path answers as with both loaded, the
    // other path fails as on a map without it, and no write is allowed.
    for (path, choice, other) in [
        (Path::Pq, PathChoice::Pq, PathChoice::Hnsw),
        (Path::Hnsw, PathChoice::Hnsw, PathChoice::Pq),
    ] {
        let one = index_with(
            s,
            &Options {
                only: Some(path),
                ..Options::default()
            },
        );
        let a = one.accelerators();
        assert_eq!(
            (a.hnsw.is_some(), a.pq.is_some()),
            (path == Path::Hnsw, path == Path::Pq)
        );
        let req = Request::new(10).path(choice);
        assert_eq!(
            one.search(&mut sc, &q, &req).unwrap(),
            full.search(&mut sc, &q, &req).unwrap()
        );
        assert!(one
            .search(&mut sc, &q, &Request::new(10).path(other))
            .is_err());
        assert!(matches!(
            one.apply(&Batch::new(), &WriteOptions::default()),
            Err(Error::InvalidArgument(_))
        ));
    }
}

#[test]
fn routes_follow_the_rule() {
    let s = seed(SEED);
    let ix = index(s);
    let q = vector(&mut SplitMix64::new(s ^ 7));
    let mut sc = Scratch::default();
    let run = |sc: &mut Scratch, r: &Request| ix.search(sc, &q, r).unwrap();
    let native = |mode| {
        ix.searcher()
            .search(&q, &SearchRequest::new(5).mode(mode))
            .unwrap()
            .hits
            .into_iter()
            .map(|h| (h.key, h.score))
            .collect::<Vec<_>>()
    };
    let pairs = |r: &Response| {
        r.hits
            .iter()
            .map(|h| (h.key.clone(), h.score))
            .collect::<Vec<_>>()
    };
    let exact = run(&mut sc, &Request::new(5).mode(QueryMode::Exact));
    assert_eq!(
        (exact.path, exact.completion),
        (Path::Native, Completion::Exact),
        "seed {s}"
    );
    assert_eq!(pairs(&exact), native(Mode::Exact), "seed {s}");
    let fast = run(&mut sc, &Request::new(5).mode(QueryMode::Fast));
    assert_eq!(fast.path, Path::Native, "seed {s}");
    assert_eq!(
        pairs(&fast),
        native(Mode::Adaptive(Preset::Fast)),
        "seed {s}"
    );
    assert_eq!(run(&mut sc, &Request::new(5)).path, Path::Hnsw, "seed {s}");
    assert_eq!(
        run(&mut sc, &Request::new(5).path(PathChoice::Pq)).path,
        Path::Pq
    );
    let budget = run(&mut sc, &Request::new(5).budget(30));
    assert_eq!(budget.path, Path::Native);
    assert!(budget.counters.distance_evals > 0, "seed {s}");
    // A selective filter goes native even with sidecars.
    let f = run(
        &mut sc,
        &Request::new(5).filter(Filter::Prefix(vec![0, 0, 0, 0, 0, 0, 0])),
    );
    assert_eq!(f.path, Path::Native);
    assert!(f.hits.iter().all(|h| h.key[..7] == [0; 7]), "seed {s}");
}

#[test]
fn values_vectors_and_batches() {
    let s = seed(SEED);
    let ix = index(s);
    let mut rng = SplitMix64::new(s ^ 9);
    let rows: Vec<f32> = (0..6).flat_map(|_| vector(&mut rng)).collect();
    for path in PathChoice::ALL {
        let req = Request {
            with_values: true,
            with_vectors: true,
            ..Request::new(4).path(path)
        };
        let batch = ix.search_batch(&rows, &req).unwrap();
        let mut sc = Scratch::default();
        for (row, b) in rows.chunks(DIMS).zip(&batch) {
            assert_eq!(&ix.search(&mut sc, row, &req).unwrap(), b, "seed {s}");
            for h in &b.hits {
                let (v, val) = ix.get(&h.key).unwrap().unwrap();
                assert_eq!(h.value.as_ref(), Some(&val));
                assert_eq!(h.vector.as_ref(), Some(&v));
            }
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let ix = index(seed(SEED));
    let mut sc = Scratch::default();
    let q = vec![0.5; DIMS];
    assert!(matches!(
        ix.search(&mut sc, &q[..3], &Request::new(3)),
        Err(Error::WrongDimension {
            expected: DIMS,
            got: 3,
            ..
        })
    ));
    let mut nan = q.clone();
    nan[2] = f32::NAN;
    assert!(matches!(
        ix.search(&mut sc, &nan, &Request::new(3)),
        Err(Error::NonFiniteVector { index: 2, .. })
    ));
    assert!(matches!(
        ix.search(&mut sc, &q, &Request::new(0)),
        Err(Error::InvalidRequest { field: "k", .. })
    ));
    assert!(matches!(
        ix.search_batch(&[0.5; DIMS + 1], &Request::new(3)),
        Err(Error::WrongDimension { .. })
    ));
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    assert!(matches!(
        Index::open(store, "nothing", &Options::default()),
        Err(Error::UnknownMap { .. })
    ));
}
