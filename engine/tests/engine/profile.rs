//! The recall profile: measured on a built map, published beside it,
//! chosen from by `recall` requests (the fastest setting whose measured
//! recall reaches the target, reported in the response), carried by writes
//! (saying when it is due to be measured again), and refused with a typed error where it cannot answer.
//! Seeded (`PROX_SEED`; the seed is in every failure message).

use prox_engine::accel::{HnswParams, Path, PqParams};
use prox_engine::index::{
    self, Batch, Build, Index, Options, QueryMode, Request, Scratch, SidecarWrite, WriteOptions,
    PROFILE_K, RECALL_Z,
};
use prox_engine::proximity::ProximityConfig;
use prox_engine::{BlockStore, Error, MemStore};
use prox_testkit::SplitMix64;
use std::collections::HashSet;
use std::sync::Arc;

const DIMS: usize = 16;
const N: u64 = 4000;

fn seed() -> u64 {
    prox_testkit::seed(0x9f_0f11e)
}

/// Points near 16 cluster centres seeded by `seed`, their noise by `draw`
/// (the map and unseen queries share centres).
fn points_from(seed: u64, draw: u64, n: usize) -> Vec<Vec<f32>> {
    let mut rng = SplitMix64::new(seed);
    let centres: Vec<Vec<f32>> = (0..16)
        .map(|_| (0..DIMS).map(|_| rng.gauss() * 3.0).collect())
        .collect();
    let mut rng = SplitMix64::new(draw);
    (0..n)
        .map(|i| {
            let c = &centres[i % centres.len()];
            c.iter().map(|x| x + rng.gauss()).collect()
        })
        .collect()
}

/// The map's points (draw 0) or unseen ones like them (`draw > 0`).
fn points(seed: u64, draw: u64, n: usize) -> Vec<Vec<f32>> {
    points_from(seed, seed ^ draw, n)
}

/// A map named "m" with both sidecars (4-bit PQ with fast scan).
fn store_with_map(s: u64) -> Arc<dyn BlockStore> {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let records = points(s, 0, N as usize)
        .into_iter()
        .enumerate()
        .map(|(i, v)| ((i as u64).to_be_bytes().to_vec(), v, Vec::new()))
        .collect();
    let mut b = Build::new(DIMS as u32);
    b.config = ProximityConfig::new(DIMS as u32);
    b.hnsw = Some(HnswParams::default());
    b.pq = Some(PqParams::parse("subquantizers=8,centroids=16,iterations=4").unwrap());
    b.layouts = true;
    index::build(&*store, Some("m"), &b, records).unwrap();
    store
}

fn open(store: &Arc<dyn BlockStore>) -> Index {
    Index::open(Arc::clone(store), "m", &Options::default()).unwrap()
}

/// recall@k of `req` against the exact answers, over `qs`.
fn recall(ix: &Index, qs: &[Vec<f32>], req: &Request) -> f64 {
    let mut sc = Scratch::default();
    let exact = Request::new(req.k).mode(QueryMode::Exact);
    let mut found = 0;
    for q in qs {
        let t: HashSet<Vec<u8>> = ix
            .search(&mut sc, q, &exact)
            .unwrap()
            .hits
            .into_iter()
            .map(|h| h.key)
            .collect();
        let r = ix.search(&mut sc, q, req).unwrap();
        found += r.hits.iter().filter(|h| t.contains(&h.key)).count();
    }
    found as f64 / (qs.len() * req.k) as f64
}

#[test]
fn measured_published_and_chosen_from() {
    let s = seed();
    let store = store_with_map(s);
    let ix = open(&store);
    assert!(ix.profile().is_none(), "seed {s}");
    let q = points(s, 1, 1).remove(0);
    let mut sc = Scratch::default();
    // No profile yet: a typed error naming the field.
    assert!(matches!(
        ix.search(&mut sc, &q, &Request::new(10).recall(0.9)),
        Err(Error::InvalidRequest {
            field: "recall",
            ..
        })
    ));
    let p = ix.measure_profile(120).unwrap();
    assert_eq!((p.k as usize, p.queries), (PROFILE_K, 120));
    assert_eq!(p.entries[0].found, 1200, "the exact entry finds everything");
    for path in [Path::Native, Path::Hnsw, Path::Pq] {
        assert!(
            p.entries.iter().any(|e| e.setting.path == path),
            "{path} measured (seed {s})"
        );
    }
    // Recalls are deterministic; times are not.
    let again = ix.measure_profile(120).unwrap();
    let founds =
        |p: &index::Profile| -> Vec<_> { p.entries.iter().map(|e| (e.setting, e.found)).collect() };
    assert_eq!(founds(&again), founds(&p), "seed {s}");
    let cid = ix.publish_profile("m", &p).unwrap();
    let ix = open(&store);
    assert_eq!(ix.layouts().profile, Some(cid));
    assert_eq!(ix.profile().as_deref(), Some(&p));

    let fresh = points(s, 2, 100);
    for target in [0.5, 0.8, 0.9, 0.95, 0.99, 1.0] {
        let req = Request::new(10).recall(target);
        let r = ix.search(&mut sc, &q, &req).unwrap();
        let t = r.tuned.expect("a recall request reports its choice");
        assert!(
            t.reached && t.recall >= target,
            "{target}: {t:?} (seed {s})"
        );
        assert_eq!(r.path, t.setting.path);
        // The choice is the fastest setting that reaches the target with
        // its margin.
        let fastest = p
            .entries
            .iter()
            .filter(|e| p.recall(e) - RECALL_Z * p.stderr(e) >= target)
            .map(|e| e.micros)
            .fold(f32::INFINITY, f32::min);
        assert_eq!(t.micros, f64::from(fastest));
        // The same answer as asking for that setting by hand.
        let mut by_hand = Request::new(10);
        t.setting.apply_to(&mut by_hand);
        assert_eq!(ix.search(&mut sc, &q, &by_hand).unwrap().hits, r.hits);
        // Unseen queries get about the recall the profile promised.
        let got = recall(&ix, &fresh, &req);
        assert!(
            got >= target - 0.06,
            "target {target}: {got} on unseen queries with {} (seed {s})",
            t.setting
        );
    }
    // Batches choose the same way.
    let flat: Vec<f32> = fresh.iter().flatten().copied().collect();
    let req = Request::new(10).recall(0.9);
    let many = ix.search_batch(&flat, &req).unwrap();
    assert_eq!(many[3], ix.search(&mut sc, &fresh[3], &req).unwrap());

    // Opened with the HNSW sidecar only: PQ entries are not candidates.
    let only = Options {
        only: Some(Path::Hnsw),
        ..Options::default()
    };
    let hnsw_only = Index::open(Arc::clone(&store), "m", &only).unwrap();
    for target in [0.5, 0.9, 0.99] {
        let r = hnsw_only
            .search(&mut sc, &q, &Request::new(10).recall(target))
            .unwrap();
        assert_ne!(r.path, Path::Pq, "seed {s}");
    }
}

#[test]
fn writes_carry_the_profile_and_say_when_it_is_stale() {
    let s = seed();
    let store = store_with_map(s);
    let ix = open(&store);
    let p = ix.measure_profile(60).unwrap();
    ix.publish_profile("m", &p).unwrap();
    let ix = open(&store);
    let new = points(s, 3, 500);
    // 100 inserts and 50 deletes: 150 edits, under a tenth of the map.
    let mut small = Batch::new();
    for (i, v) in new.iter().take(100).enumerate() {
        small.upsert((N + i as u64).to_be_bytes().to_vec(), v.clone(), Vec::new());
    }
    for i in 0..50u64 {
        small.delete(i.to_be_bytes().to_vec());
    }
    let applied = ix.apply(&small, &WriteOptions::default()).unwrap();
    assert!(
        matches!(applied.report.profile, SidecarWrite::Updated { .. }),
        "{:?}",
        applied.report.profile
    );
    let carried = (*applied.index.profile().unwrap()).clone();
    assert_eq!(carried.edits, 150);
    assert_eq!(carried.hnsw, applied.index.sidecars().hnsw);
    assert_eq!(carried.entries, p.entries);
    applied.index.commit("m", Some(ix.descriptor())).unwrap();
    let ix2 = open(&store);
    assert_eq!(ix2.profile().as_deref(), Some(&carried));
    let q = &new[400];
    let mut sc = Scratch::default();
    let r = ix2
        .search(&mut sc, q, &Request::new(10).recall(0.9))
        .unwrap();
    assert!(r.tuned.is_some());

    // 400 more inserts: 550 edits, past a tenth of 4,050 records.
    let mut big = Batch::new();
    for (i, v) in new.iter().enumerate().skip(100) {
        big.upsert((N + i as u64).to_be_bytes().to_vec(), v.clone(), Vec::new());
    }
    let applied = ix2.apply(&big, &WriteOptions::default()).unwrap();
    assert!(matches!(
        applied.report.profile,
        SidecarWrite::Updated { .. }
    ));
    assert!(applied.report.profile_stale, "550 edits of 4,050 records");
    let stale = applied.index.profile().unwrap();
    assert!(stale.edits == 550 && stale.is_stale(applied.index.len()));
    applied.index.commit("m", Some(ix2.descriptor())).unwrap();
    // A stale profile keeps answering until it is measured again.
    let ix3 = open(&store);
    assert_eq!(ix3.profile().unwrap().edits, 550);
    let r = ix3
        .search(&mut sc, q, &Request::new(10).recall(0.9))
        .unwrap();
    assert!(r.tuned.is_some());
    let fresh = ix3.measure_profile(60).unwrap();
    assert!(fresh.edits == 0 && !fresh.is_stale(ix3.len()));
    ix3.publish_profile("m", &fresh).unwrap();
    assert_eq!(open(&store).profile().as_deref(), Some(&fresh));
}

#[test]
fn tiny_maps_and_bad_targets_are_typed_errors() {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let records = points(seed(), 0, 11)
        .into_iter()
        .enumerate()
        .map(|(i, v)| (vec![i as u8], v, Vec::new()))
        .collect();
    index::build(&*store, Some("t"), &Build::new(DIMS as u32), records).unwrap();
    let ix = Index::open(Arc::clone(&store), "t", &Options::default()).unwrap();
    assert!(matches!(
        ix.measure_profile(50),
        Err(Error::InvalidArgument(_))
    ));
    let q = vec![0.0f32; DIMS];
    let mut sc = Scratch::default();
    for bad in [-0.5, 1.5, f64::NAN] {
        assert!(matches!(
            ix.search(&mut sc, &q, &Request::new(3).recall(bad)),
            Err(Error::InvalidRequest {
                field: "recall",
                ..
            })
        ));
    }
}

#[test]
fn a_damaged_profile_fails_only_recall_requests() {
    let s = seed();
    let store = store_with_map(s);
    let ix = open(&store);
    let mut p = ix.measure_profile(40).unwrap();
    // More neighbours found than the sample has: decodes as corrupt.
    p.entries[1].found = u64::from(p.k) * u64::from(p.queries) + 1;
    let bad = p.persist(&*store, ix.descriptor(), DIMS, ix.len()).unwrap();
    let mut layouts = ix.layouts();
    layouts.profile = Some(bad);
    let map = prox_engine::proximity::ProximityMap::load(&*store, ix.descriptor()).unwrap();
    prox_engine::proximity::publish_with(
        &*store,
        "m",
        &map,
        &ix.sidecars(),
        &layouts.to_metadata(),
    )
    .unwrap();
    let ix = open(&store);
    let q = points(s, 4, 1).remove(0);
    let mut sc = Scratch::default();
    assert_eq!(
        ix.search(&mut sc, &q, &Request::new(10))
            .unwrap()
            .hits
            .len(),
        10
    );
    match ix.search(&mut sc, &q, &Request::new(10).recall(0.9)) {
        Err(Error::Corrupt { cid, .. }) => assert_eq!(cid, bad),
        other => panic!("expected the profile's corruption, got {other:?} (seed {s})"),
    }
}

#[test]
fn a_profile_set_on_a_served_index_is_what_its_next_write_publishes() {
    let s = seed();
    let store = store_with_map(s);
    let ix = open(&store);
    let old = ix.measure_profile(40).unwrap();
    ix.publish_profile("m", &old).unwrap();
    let ix = open(&store);
    // A newer profile handed to the open index, as prox serve does after
    // measuring again (here: published, so the root names it).
    let new = ix.measure_profile(60).unwrap();
    ix.publish_profile("m", &new).unwrap();
    ix.set_profile(new.clone()).unwrap();
    // A batch that leaves the descriptor unchanged (an absent key deleted),
    // then one that changes it: each publishes the profile in use.
    let mut absent = Batch::new();
    absent.delete(u64::MAX.to_be_bytes().to_vec());
    let applied = ix.apply(&absent, &WriteOptions::default()).unwrap();
    assert_eq!(applied.index.descriptor(), ix.descriptor());
    applied.index.commit("m", Some(ix.descriptor())).unwrap();
    assert_eq!(open(&store).profile().as_deref(), Some(&new), "seed {s}");
    let ix = open(&store);
    let mut one = Batch::new();
    one.upsert(
        N.to_be_bytes().to_vec(),
        points(s, 5, 1).remove(0),
        Vec::new(),
    );
    let applied = ix.apply(&one, &WriteOptions::default()).unwrap();
    applied.index.commit("m", Some(ix.descriptor())).unwrap();
    let carried = open(&store).profile().unwrap();
    assert_eq!((carried.queries, carried.edits), (60, 1), "seed {s}");
}
