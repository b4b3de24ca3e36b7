//! The filter planner across selectivities: on a seeded synthetic map with
//! payloads, a field filter admitting 50%, 10%, 1% and 0.1% of the records
//! always yields `min(k, eligible)` eligible hits on every path, mode exact
//! equals a brute force over the eligible records (keys and canonical
//! scores), and the approximate paths keep recall@10 >= 0.9 against that
//! filtered brute force. Seeded (`PROX_SEED`; the seed is in every failure
//! message).

use prox_engine::accel::{HnswParams, Path, PqParams};
use prox_engine::index::{self, Build, Index, Options, PathChoice, QueryMode, Request, Scratch};
use prox_engine::keys::Filter;
use prox_engine::proximity::search::Completion;
use prox_engine::secondary::filter_from_json;
use prox_engine::{BlockStore, MemStore};
use prox_testkit::SplitMix64;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

const DIMS: usize = 16;
const N: u64 = 12_000;
const QUERIES: usize = 12;
const K: usize = 10;

type Records = Vec<(Vec<u8>, Vec<f32>, Vec<u8>)>;

fn records(seed: u64) -> Records {
    let mut rng = SplitMix64::new(seed);
    (0..N)
        .map(|i| {
            let v = (0..DIMS).map(|_| rng.gauss()).collect();
            let p = json!({"bucket": rng.below(1000) as i64});
            (i.to_be_bytes().to_vec(), v, serde_json::to_vec(&p).unwrap())
        })
        .collect()
}

/// Brute-force filtered top `k`: `(key, canonical score)` by `(score, key)`.
fn brute(
    ix: &Index,
    vectors: &BTreeMap<Vec<u8>, Vec<f32>>,
    keys: &[Vec<u8>],
    q: &[f32],
    k: usize,
) -> Vec<(Vec<u8>, f64)> {
    let mut all: Vec<_> = keys
        .iter()
        .map(|key| {
            let score = prox_kernels::canonical::score(ix.metric(), q, &vectors[key]);
            (key.clone(), score)
        })
        .collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

/// `n` Gaussian records whose payload `bucket` is `i % 1000` (so "bucket <
/// b" admits exactly `n / 1000 · b` of them when 1000 divides `n`).
fn bucketed(n: u64, rng: &mut SplitMix64) -> Records {
    (0..n)
        .map(|i| {
            let v = (0..DIMS).map(|_| rng.gauss()).collect();
            let p = json!({"bucket": (i % 1000) as i64});
            (i.to_be_bytes().to_vec(), v, serde_json::to_vec(&p).unwrap())
        })
        .collect()
}

/// Mode exact's filtered top `K` for `q`: `(key, score)` in answer order.
fn exact(ix: &Index, scratch: &mut Scratch, q: &[f32], filter: &Filter) -> Vec<(Vec<u8>, f64)> {
    let req = Request::new(K)
        .mode(QueryMode::Exact)
        .filter(filter.clone());
    let r = ix.search(scratch, q, &req).unwrap();
    r.hits.iter().map(|h| (h.key.clone(), h.score)).collect()
}

/// The key set `filter` resolves to on `ix`.
fn eligible(ix: &Index, filter: &Filter, s: u64) -> Vec<Vec<u8>> {
    match ix
        .resolve_filter(&Request::new(1).filter(filter.clone()))
        .unwrap()
        .filter
    {
        Some(Filter::Keys(k)) => k.to_vec(),
        other => panic!("seed {s:#x}: not resolved: {other:?}"),
    }
}

#[test]
fn every_selectivity_fills_and_recalls() {
    let s = prox_testkit::seed(0x91a_22e5);
    let recs = records(s);
    let vectors: BTreeMap<_, _> = recs.iter().map(|r| (r.0.clone(), r.1.clone())).collect();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut b = Build::new(DIMS as u32);
    b.indexes = vec!["bucket:integer".parse().unwrap()];
    b.hnsw = Some(HnswParams::default());
    b.pq = Some(PqParams::default());
    index::build(&*store, Some("m"), &b, recs).unwrap();
    let ix = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
    let mut scratch = Scratch::default();
    let mut rng = SplitMix64::new(s ^ 0x5e1);
    for per_mille in [500, 100, 10, 1] {
        let f = json!({"key": "bucket", "range": {"lt": per_mille}});
        let filter = filter_from_json(&f).unwrap();
        let keys = eligible(&ix, &filter, s);
        let expected = N as usize * per_mille / 1000;
        assert!(
            keys.len() > expected / 2 && keys.len() < expected * 2,
            "seed {s:#x}: {per_mille}‰ admits {} of {N}",
            keys.len()
        );
        let want = K.min(keys.len());
        let mut found = BTreeMap::new();
        for _ in 0..QUERIES {
            let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss()).collect();
            let truth = brute(&ix, &vectors, &keys, &q, K);
            let got = exact(&ix, &mut scratch, &q, &filter);
            assert_eq!(got, truth, "seed {s:#x}: exact at {per_mille}‰");
            for path in [
                PathChoice::Auto,
                PathChoice::Native,
                PathChoice::Hnsw,
                PathChoice::Pq,
            ] {
                let req = Request::new(K).path(path).filter(filter.clone());
                let r = ix.search(&mut scratch, &q, &req).unwrap();
                // Small sets are scored directly, the largest takes HNSW.
                if path == PathChoice::Auto && keys.len() <= 1024 {
                    assert_eq!((r.path, r.completion), (Path::Native, Completion::Exact));
                }
                if path == PathChoice::Auto && per_mille == 500 {
                    assert_eq!(r.path, Path::Hnsw, "seed {s:#x}");
                }
                assert_eq!(
                    r.hits.len(),
                    want,
                    "seed {s:#x}: {path} at {per_mille}‰ under-filled"
                );
                assert!(
                    r.hits.iter().all(|h| keys.binary_search(&h.key).is_ok()),
                    "seed {s:#x}: {path} at {per_mille}‰: ineligible hit"
                );
                let hit = r
                    .hits
                    .iter()
                    .filter(|h| truth.iter().any(|t| t.0 == h.key))
                    .count();
                *found.entry(format!("{path}")).or_insert(0) += hit;
            }
        }
        for (path, hit) in found {
            let recall = hit as f64 / (want * QUERIES) as f64;
            assert!(
                recall >= 0.9,
                "seed {s:#x}: {path} recall@10 {recall:.3} at {per_mille}‰"
            );
        }
    }
}

/// A key set above the directory-scoring size but at most 1/16 of the map
/// is scored from a loaded sidecar's vectors: exact (keys and canonical
/// scores of the brute force), once per sidecar kind, and a second query
/// with the same filter reuses the resolved set.
#[test]
fn a_mid_sized_set_is_scored_exactly_from_sidecar_vectors() {
    const N: u64 = 20_000;
    let s = prox_testkit::seed(0x3d_17ec);
    let mut rng = SplitMix64::new(s);
    // bucket = i % 1000: "bucket < 55" admits exactly 1,100 records, more
    // than the 1,024 scored from the directory, less than N / 16.
    let recs = bucketed(N, &mut rng);
    let vectors: BTreeMap<_, _> = recs.iter().map(|r| (r.0.clone(), r.1.clone())).collect();
    let filter = filter_from_json(&json!({"key": "bucket", "range": {"lt": 55}})).unwrap();
    for sidecar in ["hnsw", "pq"] {
        let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
        let mut b = Build::new(DIMS as u32);
        b.indexes = vec!["bucket:integer".parse().unwrap()];
        if sidecar == "hnsw" {
            b.hnsw = Some(HnswParams::default());
        } else {
            b.pq = Some(PqParams::parse("subquantizers=4,centroids=16,iterations=2").unwrap());
        }
        index::build(&*store, Some("m"), &b, recs.clone()).unwrap();
        let ix = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
        let keys = eligible(&ix, &filter, s);
        assert_eq!(keys.len(), 1_100, "seed {s:#x}");
        let mut scratch = Scratch::default();
        for _ in 0..4 {
            let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss()).collect();
            let truth = brute(&ix, &vectors, &keys, &q, K);
            for mode in [QueryMode::Auto, QueryMode::Exact] {
                let r = ix
                    .search(
                        &mut scratch,
                        &q,
                        &Request::new(K).mode(mode).filter(filter.clone()),
                    )
                    .unwrap();
                assert_eq!(
                    (r.path, r.completion, r.counters.distance_evals),
                    (Path::Native, Completion::Exact, 1_100),
                    "seed {s:#x}: {sidecar} {mode:?}"
                );
                let got: Vec<_> = r.hits.iter().map(|h| (h.key.clone(), h.score)).collect();
                assert_eq!(got, truth, "seed {s:#x}: {sidecar} {mode:?}");
            }
        }
    }
}

/// A set past the direct-scoring size and at most 1/8 of the map, on a
/// map with HNSW and a 4-bit PQ sidecar, takes HNSW on path auto without a
/// recall profile and the PQ masked fast scan once a profile is measured
/// (the profile's PQ setting for unfiltered recall 0.99, probing at least
/// the lists that hold 48·k eligible rows): every answer is full and
/// eligible, recall@10 against the filtered brute force is at least 0.95
/// on both paths, and mode exact stays the brute force.
#[test]
fn a_mid_sized_set_takes_the_fast_scan_on_path_auto() {
    const N: u64 = 40_000;
    const QUERIES: usize = 24;
    let s = prox_testkit::seed(0x6f_a57);
    let mut rng = SplitMix64::new(s);
    // bucket = i % 1000: "bucket < 100" admits exactly 4,000 records, more
    // than the 2,048 scored directly, at most N / 8.
    let recs = bucketed(N, &mut rng);
    let vectors: BTreeMap<_, _> = recs.iter().map(|r| (r.0.clone(), r.1.clone())).collect();
    let filter = filter_from_json(&json!({"key": "bucket", "range": {"lt": 100}})).unwrap();
    let small = filter_from_json(&json!({"key": "bucket", "range": {"lt": 60}})).unwrap();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut b = Build::new(DIMS as u32);
    b.indexes = vec!["bucket:integer".parse().unwrap()];
    b.hnsw = Some(HnswParams::default());
    b.pq = Some(PqParams::parse("subquantizers=16,centroids=16,iterations=2").unwrap());
    index::build(&*store, Some("m"), &b, recs).unwrap();
    for profiled in [false, true] {
        let path = if profiled { Path::Pq } else { Path::Hnsw };
        if profiled {
            let ix = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
            let p = ix.measure_profile(100).unwrap();
            // The profile's PQ entries reach the target here (16 one-dim
            // subquantizers), so the filtered PQ plan applies.
            let choice = p.choose(0.99, |x| x == Path::Pq);
            assert!(choice.is_some_and(|c| c.reached), "seed {s:#x}: {choice:?}");
            ix.publish_profile("m", &p).unwrap();
        }
        let ix = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
        assert_eq!(ix.profile().is_some(), profiled, "seed {s:#x}");
        let keys = eligible(&ix, &filter, s);
        assert_eq!(keys.len(), 4_000, "seed {s:#x}");
        let mut scratch = Scratch::default();
        let mut hit = 0;
        for _ in 0..QUERIES {
            let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss()).collect();
            let truth = brute(&ix, &vectors, &keys, &q, K);
            let r = ix
                .search(&mut scratch, &q, &Request::new(K).filter(filter.clone()))
                .unwrap();
            assert_eq!(
                (r.path, r.completion, r.hits.len()),
                (path, Completion::Approximate, K),
                "seed {s:#x}, profiled {profiled}"
            );
            assert!(
                r.hits.iter().all(|h| keys.binary_search(&h.key).is_ok()),
                "seed {s:#x}: ineligible hit"
            );
            hit += r
                .hits
                .iter()
                .filter(|h| truth.iter().any(|t| t.0 == h.key))
                .count();
            let got = exact(&ix, &mut scratch, &q, &filter);
            assert_eq!(got, truth, "seed {s:#x}: exact");
            // A named preset on path auto still scores a set of at most
            // n/16 (2,400 here) directly, profile or not.
            let fast = Request::new(K).mode(QueryMode::Fast).filter(small.clone());
            let r = ix.search(&mut scratch, &q, &fast).unwrap();
            assert_eq!(
                (r.path, r.completion, r.counters.distance_evals),
                (Path::Native, Completion::Exact, 2_400),
                "seed {s:#x}, profiled {profiled}: mode fast"
            );
        }
        let recall = hit as f64 / (K * QUERIES) as f64;
        assert!(
            recall >= 0.95,
            "seed {s:#x}, profiled {profiled}: recall@10 {recall:.3}"
        );
    }
}
