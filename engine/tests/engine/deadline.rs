//! Deadlines through [`Index`]: a deadline that has passed stops every
//! search path with [`Error::DeadlineExceeded`] (native exact over each
//! exact-L2 layout and best-first, budgeted, adaptive with and without the
//! 4-bit pass, HNSW traversal and its filtered scan, PQ fast-scan and flat),
//! and a far deadline changes nothing. Data is seeded (`PROX_SEED`
//! overrides; the seed is in every failure message).

use prox_engine::accel::{self, HnswParams, Path, PqParams};
use prox_engine::index::{Index, Options, PathChoice, QueryMode, Request, Scratch};
use prox_engine::keys::Filter;
use prox_engine::proximity::search::ExactLayout;
use prox_engine::proximity::{ProximityConfig, ProximityMap, Sidecars};
use prox_engine::{BlockStore, Error, MemStore};
use prox_kernels::Metric;
use prox_testkit::SplitMix64;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DIMS: usize = 16;

fn seed() -> u64 {
    prox_testkit::seed(0xdead_11e5)
}

/// A clustered map of `n` records under `metric` with HNSW and PQ
/// sidecars (4-bit codes when `fast_pq`, else 8-bit), opened with
/// `layout`. From 1 024 records the native adaptive search has its 4-bit
/// pass.
fn index(s: u64, n: u64, metric: Metric, layout: ExactLayout, fast_pq: bool) -> Index {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut r = SplitMix64::new(s);
    let centres: Vec<Vec<f32>> = (0..8)
        .map(|_| (0..DIMS).map(|_| 4.0 * r.gauss()).collect())
        .collect();
    let records = (0..n)
        .map(|i| {
            let c = &centres[(r.next() % centres.len() as u64) as usize];
            let v = c.iter().map(|&x| x + r.gauss()).collect();
            (i.to_be_bytes().to_vec(), v, vec![i as u8])
        })
        .collect();
    let mut config = ProximityConfig::new(DIMS as u32);
    config.metric = metric;
    let map = ProximityMap::build(&*store, &config, records).unwrap();
    let d = map.descriptor_cid();
    let pq = if fast_pq {
        "subquantizers=4,centroids=16,iterations=4"
    } else {
        "subquantizers=4,centroids=32,iterations=2"
    };
    let pq = PqParams::parse(pq).unwrap();
    let built = accel::build_sidecars(&*store, d, Some(&HnswParams::default()), Some(&pq)).unwrap();
    let sidecars = Sidecars {
        hnsw: built.hnsw.map(|h| h.manifest_cid),
        pq: built.pq.map(|p| p.manifest_cid),
    };
    let options = Options {
        exact_layout: layout,
        warm: true,
        sidecars: true,
    };
    Index::load(store, d, sidecars, &options).unwrap()
}

/// Every request shape whose search loops a deadline must reach, with the
/// path each must run on.
fn requests() -> Vec<(&'static str, Request, Path)> {
    let keys = |lo: u64, hi: u64| Filter::Range {
        start: lo.to_be_bytes().to_vec(),
        end: Some(hi.to_be_bytes().to_vec()),
    };
    vec![
        (
            "exact",
            Request::new(10).mode(QueryMode::Exact),
            Path::Native,
        ),
        ("budgeted", Request::new(10).budget(5000), Path::Native),
        (
            "filtered exact",
            Request::new(10)
                .mode(QueryMode::Exact)
                .filter(keys(100, 900)),
            Path::Native,
        ),
        (
            "adaptive",
            Request::new(10).mode(QueryMode::High),
            Path::Native,
        ),
        (
            "hnsw",
            Request {
                ef: Some(400),
                ..Request::new(10).path(PathChoice::Hnsw)
            },
            Path::Hnsw,
        ),
        (
            // Few eligible records: the HNSW path scans them exhaustively.
            "hnsw filtered scan",
            Request::new(10).path(PathChoice::Hnsw).filter(keys(0, 300)),
            Path::Hnsw,
        ),
        ("pq", Request::new(10).path(PathChoice::Pq), Path::Pq),
        (
            // Few eligible records: the PQ path scans them flat.
            "pq filtered flat",
            Request::new(10).path(PathChoice::Pq).filter(keys(0, 40)),
            Path::Pq,
        ),
    ]
}

/// On `ix`: each request with a passed deadline fails with
/// `DeadlineExceeded` (one and batched); with a far deadline it answers
/// exactly what it answers without one.
fn check(ix: &Index, what: &str, s: u64) {
    let mut r = SplitMix64::new(s ^ 0x51de);
    let queries: Vec<f32> = (0..3 * DIMS).map(|_| 4.0 * r.gauss()).collect();
    let mut sc = Scratch::default();
    for (name, req, path) in requests() {
        let ctx = format!("{what}, {name}, seed {s}");
        for q in queries.chunks(DIMS) {
            let free = ix.search(&mut sc, q, &req).unwrap();
            assert_eq!(free.path, path, "{ctx}");
            let far = req
                .clone()
                .deadline(Instant::now() + Duration::from_secs(3600));
            assert_eq!(ix.search(&mut sc, q, &far).unwrap(), free, "{ctx}");
            let passed = req.clone().deadline(Instant::now());
            let got = ix.search(&mut sc, q, &passed);
            assert!(
                matches!(got, Err(Error::DeadlineExceeded)),
                "{ctx}: {got:?}"
            );
            // The scratch an interrupted search leaves behind answers the
            // next query as a fresh one would.
            assert_eq!(ix.search(&mut sc, q, &req).unwrap(), free, "{ctx}");
            assert_eq!(
                ix.search(&mut Scratch::default(), q, &req).unwrap(),
                free,
                "{ctx}"
            );
        }
        let passed = req.clone().deadline(Instant::now());
        assert!(
            matches!(
                ix.search_batch(&queries, &passed),
                Err(Error::DeadlineExceeded)
            ),
            "{ctx} (batch)"
        );
    }
}

#[test]
fn a_passed_deadline_stops_every_path_and_a_far_one_changes_nothing() {
    let s = seed();
    let l2 = index(s, 2000, Metric::L2, ExactLayout::Off, true);
    check(&l2, "l2, 4-bit passes", s);
    let cosine = index(s, 900, Metric::Cosine, ExactLayout::Off, false);
    check(&cosine, "cosine, 8-bit passes", s);
}

#[test]
fn exact_l2_layouts_stop_at_a_passed_deadline() {
    let s = seed();
    for layout in [ExactLayout::Split(8), ExactLayout::Local(8)] {
        let ix = index(s, 2000, Metric::L2, layout, true);
        let searcher = ix.searcher();
        assert!(
            searcher.rotated_split().is_some() || searcher.local_frames().is_some(),
            "{layout:?} is not in use"
        );
        let mut sc = Scratch::default();
        let q: Vec<f32> = (0..DIMS).map(|i| i as f32 * 0.25).collect();
        let req = Request::new(10).mode(QueryMode::Exact);
        let free = ix.search(&mut sc, &q, &req).unwrap();
        let far = req
            .clone()
            .deadline(Instant::now() + Duration::from_secs(3600));
        assert_eq!(ix.search(&mut sc, &q, &far).unwrap(), free, "{layout:?}");
        let got = ix.search(&mut sc, &q, &req.clone().deadline(Instant::now()));
        assert!(
            matches!(got, Err(Error::DeadlineExceeded)),
            "{layout:?}, seed {s}: {got:?}"
        );
        assert_eq!(ix.search(&mut sc, &q, &req).unwrap(), free, "{layout:?}");
    }
}
