//! Writes through the index (`Index::apply` + `Index::commit`): the new
//! descriptor equals a fresh build of the final records, sidecars are
//! carried forward (their trees equal a fresh persist of the carried
//! graph and codes, HNSW recall holds up under churn, PQ lists hold exactly
//! the live records), canonical HNSW policies, compare-and-swap conflicts,
//! and bad input rejected before anything is written. Seeded (`PROX_SEED`;
//! the seed is in every failure message).

use prox_engine::accel::{self, hnsw, pq, HnswParams, PqParams};
use prox_engine::index::{
    Batch, CanonicalHnsw, DropReason, Index, Options, PathChoice, QueryMode, Request, Scratch,
    SidecarWrite, WriteOptions, MAX_KEY_LEN,
};
use prox_engine::proximity::{self, ProximityConfig, ProximityMap, Sidecars};
use prox_engine::{BlockStore, Cid, Error, MemStore};
use prox_kernels::{canonical, Metric};
use prox_testkit::SplitMix64;
use std::collections::BTreeMap;
use std::sync::Arc;

const DIMS: usize = 16;

fn seed() -> u64 {
    prox_testkit::seed(0x11_71_0a)
}

/// Records by key: (vector, value).
type Model = BTreeMap<Vec<u8>, (Vec<f32>, Vec<u8>)>;

/// A point near one of 12 seeded cluster centres.
struct Points {
    rng: SplitMix64,
    centres: Vec<Vec<f32>>,
}

impl Points {
    fn new(seed: u64) -> Points {
        let mut rng = SplitMix64::new(seed);
        let centres = (0..12)
            .map(|_| (0..DIMS).map(|_| rng.gauss() * 4.0).collect())
            .collect();
        Points { rng, centres }
    }

    fn next(&mut self) -> Vec<f32> {
        let c = self.rng.below(self.centres.len() as u64) as usize;
        (0..DIMS)
            .map(|d| self.centres[c][d] + self.rng.gauss())
            .collect()
    }
}

fn key(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

/// Builds `model` as a map with the requested sidecars, publishes it as
/// `name` and opens it.
fn publish(
    store: &Arc<dyn BlockStore>,
    name: &str,
    model: &Model,
    hnsw: Option<&HnswParams>,
    pq: Option<&PqParams>,
) -> Index {
    let records = model
        .iter()
        .map(|(k, (v, val))| (k.clone(), v.clone(), val.clone()))
        .collect();
    let map = ProximityMap::build(&**store, &ProximityConfig::new(DIMS as u32), records).unwrap();
    let built = accel::build_sidecars(&**store, map.descriptor_cid(), hnsw, pq).unwrap();
    let sidecars = Sidecars {
        hnsw: built.hnsw.map(|h| h.manifest_cid),
        pq: built.pq.map(|p| p.manifest_cid),
    };
    proximity::publish(&**store, name, &map, &sidecars).unwrap();
    Index::open(Arc::clone(store), name, &Options::default()).unwrap()
}

/// The descriptor CID of a fresh build of `model`.
fn fresh_descriptor(model: &Model) -> Cid {
    let store = MemStore::new();
    let records = model
        .iter()
        .map(|(k, (v, val))| (k.clone(), v.clone(), val.clone()))
        .collect();
    ProximityMap::build(&store, &ProximityConfig::new(DIMS as u32), records)
        .unwrap()
        .descriptor_cid()
}

/// A random batch over `model` (applied to it too): new keys, moved and
/// value-only upserts of present keys, deletes of present and absent keys.
fn churn(model: &mut Model, pts: &mut Points, next_key: &mut u64, size: usize) -> Batch {
    let mut batch = Batch::new();
    let mut used = std::collections::HashSet::new();
    let present: Vec<Vec<u8>> = model.keys().cloned().collect();
    for _ in 0..size {
        let roll = pts.rng.below(10);
        if roll < 4 || present.is_empty() {
            let k = key(*next_key);
            *next_key += 1;
            let v = pts.next();
            batch.upsert(k.clone(), v.clone(), vec![1]);
            model.insert(k, (v, vec![1]));
            continue;
        }
        let k = present[pts.rng.below(present.len() as u64) as usize].clone();
        if !used.insert(k.clone()) {
            continue;
        }
        match roll {
            4..=6 => {
                batch.delete(k.clone());
                model.remove(&k);
            }
            7 | 8 => {
                let v = pts.next();
                batch.upsert(k.clone(), v.clone(), vec![2]);
                model.insert(k, (v, vec![2]));
            }
            _ => {
                let v = model[&k].0.clone();
                batch.upsert(k.clone(), v.clone(), vec![3]);
                model.insert(k, (v, vec![3]));
            }
        }
    }
    // An absent key: a no-op delete.
    batch.delete(key(u64::MAX - pts.rng.below(1000)));
    batch
}

/// Records of the map `descriptor` as the accelerator loaders take them.
fn records(store: &dyn BlockStore, descriptor: Cid) -> accel::Records {
    accel::map_records(store, descriptor).unwrap().1
}

#[test]
fn descriptor_and_sidecars_match_fresh_builds_after_seeded_batches() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut pts = Points::new(s);
    let mut model: Model = (0..1500u64)
        .map(|i| (key(i), (pts.next(), vec![0])))
        .collect();
    let mut next_key = 1500;
    let hp = HnswParams::parse("m=8,efc=64").unwrap();
    let pp = PqParams::parse("m=4,k=16,iterations=4").unwrap();
    let mut index = publish(&store, "m", &model, Some(&hp), Some(&pp));
    for round in 0..6 {
        let batch = churn(&mut model, &mut pts, &mut next_key, 80);
        let before = index.descriptor();
        let applied = index.apply(&batch, &WriteOptions::default()).unwrap();
        let r = &applied.report;
        assert!(
            matches!(r.hnsw, SidecarWrite::Updated { .. }),
            "seed {s} round {round}: {r:?}"
        );
        assert!(
            matches!(r.pq, SidecarWrite::Updated { .. }),
            "seed {s} round {round}: {r:?}"
        );
        assert!(r.blocks_written > 0 && r.bytes_written > 0, "seed {s}");
        assert_eq!(r.absent_deletes, 1, "seed {s} round {round}");
        let next = applied.index;
        assert_eq!(
            next.descriptor(),
            fresh_descriptor(&model),
            "seed {s} round {round}"
        );
        assert_eq!(next.len(), model.len() as u64, "seed {s} round {round}");
        assert_eq!(next.commit("m", Some(before)).unwrap(), next.descriptor());

        // The spliced sidecar trees equal a fresh persist of what they hold,
        // and the loaders accept them against the new map.
        let d = next.descriptor();
        let recs = records(&*store, d);
        let side = next.sidecars();
        let (_, h) = hnsw::load(
            &*store,
            side.hnsw.unwrap(),
            Some(d),
            Metric::L2,
            DIMS,
            &recs,
        )
        .unwrap();
        let other = MemStore::new();
        assert_eq!(
            h.persist(&other, d).unwrap().manifest_cid,
            side.hnsw.unwrap(),
            "seed {s} round {round}: HNSW splice differs from a fresh persist"
        );
        let p = pq::load(&*store, side.pq.unwrap(), Some(d), Metric::L2, DIMS, &recs).unwrap();
        assert_eq!(
            p.persist(&other, d).unwrap().manifest_cid,
            side.pq.unwrap(),
            "seed {s} round {round}: PQ splice differs from a fresh persist"
        );

        // The carried HNSW layout answers as the one loaded from the store.
        let reopened = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
        assert_eq!(reopened.descriptor(), d);
        let req = Request {
            ef: Some(48),
            ..Request::new(10).path(PathChoice::Hnsw)
        };
        let (mut a, mut b) = (Scratch::default(), Scratch::default());
        for _ in 0..10 {
            let q = pts.next();
            let x = next.search(&mut a, &q, &req).unwrap();
            let y = reopened.search(&mut b, &q, &req).unwrap();
            assert_eq!(x.hits, y.hits, "seed {s} round {round}");
        }
        index = next;
    }
}

/// Keys of the exact top 10 of `q` over `model`.
fn truth(model: &Model, q: &[f32]) -> Vec<Vec<u8>> {
    let mut s: Vec<(f64, &Vec<u8>)> = model
        .iter()
        .map(|(k, (v, _))| (canonical::l2sq(q, v), k))
        .collect();
    s.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
    s.into_iter().take(10).map(|x| x.1.clone()).collect()
}

fn recall(index: &Index, model: &Model, qs: &[Vec<f32>], req: &Request) -> f64 {
    let mut sc = Scratch::default();
    let mut found = 0;
    for q in qs {
        let t = truth(model, q);
        let r = index.search(&mut sc, q, req).unwrap();
        found += r.hits.iter().filter(|h| t.contains(&h.key)).count();
    }
    found as f64 / (10 * qs.len()) as f64
}

#[test]
fn hnsw_recall_after_churn_stays_near_a_fresh_build() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut pts = Points::new(s ^ 1);
    let mut model: Model = (0..3000u64)
        .map(|i| (key(i), (pts.next(), vec![0])))
        .collect();
    let mut next_key = 3000;
    let hp = HnswParams::parse("m=6,efc=40").unwrap();
    let mut index = publish(&store, "c", &model, Some(&hp), None);
    // Ten rounds of 5% churn (2.5% deletes, 2.5% new points).
    for _ in 0..10 {
        let mut batch = Batch::new();
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        let mut gone = std::collections::HashSet::new();
        while gone.len() < 75 {
            let k = keys[pts.rng.below(keys.len() as u64) as usize].clone();
            if gone.insert(k.clone()) {
                batch.delete(k.clone());
                model.remove(&k);
            }
        }
        for _ in 0..75 {
            let v = pts.next();
            batch.upsert(key(next_key), v.clone(), vec![]);
            model.insert(key(next_key), (v, vec![]));
            next_key += 1;
        }
        let applied = index.apply(&batch, &WriteOptions::default()).unwrap();
        assert!(
            matches!(
                applied.report.hnsw,
                SidecarWrite::Updated {
                    inserted: 75,
                    removed: 75,
                    ..
                }
            ),
            "seed {s}: {:?}",
            applied.report.hnsw
        );
        index = applied.index;
    }
    let fresh = publish(
        &(Arc::new(MemStore::new()) as Arc<dyn BlockStore>),
        "f",
        &model,
        Some(&hp),
        None,
    );
    assert_eq!(fresh.descriptor(), index.descriptor(), "seed {s}");
    let qs: Vec<Vec<f32>> = (0..100).map(|_| pts.next()).collect();
    let req = Request {
        ef: Some(40),
        ..Request::new(10).path(PathChoice::Hnsw)
    };
    let churned = recall(&index, &model, &qs, &req);
    let rebuilt = recall(&fresh, &model, &qs, &req);
    // The documented margin (docs/writes.md): within 0.05 of a fresh graph
    // after a quarter of the records were replaced.
    assert!(
        churned >= rebuilt - 0.05,
        "seed {s}: recall@10 after 25% churn {churned:.4}, fresh build {rebuilt:.4}"
    );
    assert!(
        churned >= 0.9,
        "seed {s}: recall@10 after churn {churned:.4}"
    );
}

#[test]
fn pq_lists_and_codes_follow_the_records() {
    let s = seed();
    for (params, label) in [
        ("m=4,k=16,iterations=4", "4-bit"),
        ("m=4,k=64,iterations=4", "8-bit"),
    ] {
        let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
        let mut pts = Points::new(s ^ 2);
        let mut model: Model = (0..2000u64)
            .map(|i| (key(i), (pts.next(), vec![0])))
            .collect();
        let mut next_key = 2000;
        let pp = PqParams::parse(params).unwrap();
        let mut index = publish(&store, "p", &model, None, Some(&pp));
        for _ in 0..4 {
            let batch = churn(&mut model, &mut pts, &mut next_key, 150);
            let before = index.descriptor();
            let applied = index.apply(&batch, &WriteOptions::default()).unwrap();
            applied.index.commit("p", Some(before)).unwrap();
            index = applied.index;
        }
        // Probing every list with a rerank deep enough for every record
        // returns the exact top 10: the lists hold exactly the live records.
        let n = model.len();
        let all = Request {
            nprobe: Some(n),
            rerank: Some(n),
            ..Request::new(10).path(PathChoice::Pq)
        };
        let reopened = Index::open(Arc::clone(&store), "p", &Options::default()).unwrap();
        let mut sc = Scratch::default();
        for _ in 0..20 {
            let q = pts.next();
            let keys: Vec<Vec<u8>> = index
                .search(&mut sc, &q, &all)
                .unwrap()
                .hits
                .into_iter()
                .map(|h| h.key)
                .collect();
            assert_eq!(keys, truth(&model, &q), "seed {s} {label}");
        }
        // At default settings the carried sidecar finds about what the one
        // loaded (and, 4-bit, re-partitioned) from the store finds.
        let qs: Vec<Vec<f32>> = (0..100).map(|_| pts.next()).collect();
        let req = Request::new(10).path(PathChoice::Pq);
        let carried = recall(&index, &model, &qs, &req);
        let loaded = recall(&reopened, &model, &qs, &req);
        assert!(
            carried >= loaded - 0.05,
            "seed {s} {label}: recall@10 carried {carried:.4}, loaded {loaded:.4}"
        );
    }
}

#[test]
fn canonical_hnsw_is_refused_rebuilt_or_dropped_never_silently() {
    let s = seed();
    let mut pts = Points::new(s ^ 3);
    let model: Model = (0..200u64)
        .map(|i| (key(i), (pts.next(), vec![0])))
        .collect();
    let hp = HnswParams::parse("m=6,build=canonical").unwrap();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let index = publish(&store, "k", &model, Some(&hp), None);
    let mut after = model.clone();
    let mut batch = Batch::new();
    batch.delete(key(3));
    after.remove(&key(3));
    let v = pts.next();
    batch.upsert(key(500), v.clone(), vec![]);
    after.insert(key(500), (v, vec![]));

    let blocks = store.cids().unwrap().len();
    match index.apply(&batch, &WriteOptions::default()) {
        Err(Error::CanonicalHnsw { manifest }) => {
            assert_eq!(Some(manifest), index.sidecars().hnsw)
        }
        other => panic!("seed {s}: expected CanonicalHnsw, got {other:?}"),
    }
    assert_eq!(store.cids().unwrap().len(), blocks, "a refused write wrote");

    // Value-only edits keep the canonical graph (same records).
    let mut values = Batch::new();
    values.upsert(key(4), model[&key(4)].0.clone(), b"new".to_vec());
    let a = index.apply(&values, &WriteOptions::default()).unwrap();
    assert_eq!(a.report.hnsw, SidecarWrite::Rebound);
    let m = a.index.sidecars().hnsw.unwrap();
    let decoded = proximity::HnswManifest::decode(&store.get(&m).unwrap().unwrap()).unwrap();
    assert!(decoded.canonical && decoded.source == a.index.descriptor());

    let opts = |p| WriteOptions {
        canonical_hnsw: p,
        ..WriteOptions::default()
    };
    let rebuilt = index.apply(&batch, &opts(CanonicalHnsw::Rebuild)).unwrap();
    assert_eq!(rebuilt.report.hnsw, SidecarWrite::Rebuilt);
    // The rebuilt graph is the canonical graph of the new records.
    let fresh: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let f = publish(&fresh, "k", &after, Some(&hp), None);
    assert_eq!(rebuilt.index.descriptor(), f.descriptor(), "seed {s}");
    assert_eq!(rebuilt.index.sidecars().hnsw, f.sidecars().hnsw, "seed {s}");

    let dropped = index.apply(&batch, &opts(CanonicalHnsw::Drop)).unwrap();
    assert_eq!(
        dropped.report.hnsw,
        SidecarWrite::Dropped(DropReason::Requested)
    );
    assert_eq!(dropped.index.sidecars().hnsw, None);
    dropped.index.commit("k", Some(index.descriptor())).unwrap();
    let (_, side) = proximity::resolve(&*store, "k").unwrap().unwrap();
    assert_eq!(side.hnsw, None);
}

#[test]
fn commit_is_a_compare_and_swap() {
    let s = seed();
    let mut pts = Points::new(s ^ 4);
    let model: Model = (0..300u64)
        .map(|i| (key(i), (pts.next(), vec![0])))
        .collect();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let hp = HnswParams::parse("m=6").unwrap();
    let index = publish(&store, "x", &model, Some(&hp), None);
    let base = index.descriptor();
    let mut one = Batch::new();
    one.upsert(key(1000), pts.next(), vec![]);
    let mut two = Batch::new();
    two.delete(key(7));
    let a = index.apply(&one, &WriteOptions::default()).unwrap().index;
    let b = index.apply(&two, &WriteOptions::default()).unwrap().index;
    assert_eq!(a.commit("x", Some(base)).unwrap(), a.descriptor());
    match b.commit("x", Some(base)) {
        Err(Error::Conflict {
            name,
            expected,
            found,
        }) => {
            assert_eq!(
                (name.as_str(), expected, found),
                ("x", Some(base), Some(a.descriptor()))
            );
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    // Creating over an existing name conflicts too.
    assert!(matches!(b.commit("x", None), Err(Error::Conflict { .. })));
    let now = Index::open(Arc::clone(&store), "x", &Options::default()).unwrap();
    assert_eq!(now.descriptor(), a.descriptor());
    assert_eq!(now.sidecars(), a.sidecars());
    // A new name: expected none.
    b.commit("y", None).unwrap();
    assert!(matches!(b.commit("y", None), Err(Error::Conflict { .. })));
    // An index opened without the sidecars its root names cannot write
    // (it would publish the map without them).
    let bare = Options {
        sidecars: false,
        ..Options::default()
    };
    let partial = Index::open(Arc::clone(&store), "x", &bare).unwrap();
    assert!(matches!(
        partial.apply(&one, &WriteOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
}

/// Two writers holding the same snapshot: the one that publishes second
/// re-applies its batch to the first one's version (`Index::write`), so the
/// map ends as the two batches applied one after the other (descriptor of a
/// fresh build), with the HNSW sidecar carried; `rebases = 0` returns the
/// conflict and moves nothing. Then two threads write disjoint keys at once:
/// every acknowledged batch is in the final map.
#[test]
fn a_second_writer_rebases_onto_the_first_and_loses_nothing() {
    let s = seed();
    let mut pts = Points::new(s ^ 9);
    let mut model: Model = (0..400u64)
        .map(|i| (key(i), (pts.next(), vec![0])))
        .collect();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let hp = HnswParams::parse("m=6").unwrap();
    let mut a = publish(&store, "x", &model, Some(&hp), None);
    let mut next = 1_000u64;
    let (w, open) = (WriteOptions::default(), Options::default());
    for round in 0..4 {
        let b = Index::open(Arc::clone(&store), "x", &open).unwrap();
        let one = churn(&mut model, &mut pts, &mut next, 30);
        let two = churn(&mut model, &mut pts, &mut next, 30);
        let first = a.write("x", &one, &w, &open, 16).unwrap();
        assert_eq!(first.rebased, 0, "seed {s} round {round}");
        let before = store.root("x").unwrap();
        assert!(
            matches!(
                b.write("x", &two, &w, &open, 0),
                Err(Error::Conflict { .. })
            ),
            "seed {s} round {round}"
        );
        assert_eq!(store.root("x").unwrap(), before, "seed {s} round {round}");
        let second = b.write("x", &two, &w, &open, 16).unwrap();
        assert_eq!(second.rebased, 1, "seed {s} round {round}");
        assert_eq!(
            second.descriptor,
            fresh_descriptor(&model),
            "seed {s} round {round}"
        );
        assert!(matches!(
            second.applied.report.hnsw,
            SidecarWrite::Updated { .. }
        ));
        a = second.applied.index;
    }
    // Threads: each writes 6 batches of its own new keys, racing the other.
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            let store = Arc::clone(&store);
            sc.spawn(move || {
                let mut pts = Points::new(s ^ (t + 100));
                for b in 0..6u64 {
                    let ix = Index::open(Arc::clone(&store), "x", &open).unwrap();
                    let mut batch = Batch::new();
                    for i in 0..5 {
                        batch.upsert(key(1_000_000 * (t + 1) + 10 * b + i), pts.next(), vec![]);
                    }
                    ix.write("x", &batch, &w, &open, 64).unwrap();
                }
            });
        }
    });
    let end = Index::open(Arc::clone(&store), "x", &open).unwrap();
    for t in 0..2u64 {
        for i in 0..30 {
            let k = key(1_000_000 * (t + 1) + 10 * (i / 5) + i % 5);
            assert!(end.get(&k).unwrap().is_some(), "seed {s}: key {k:?} lost");
        }
    }
    assert_eq!(end.len(), model.len() as u64 + 60);
}

#[test]
fn bad_batches_are_typed_errors_and_write_nothing() {
    let s = seed();
    let mut pts = Points::new(s ^ 5);
    let model: Model = (0..100u64)
        .map(|i| (key(i), (pts.next(), vec![0])))
        .collect();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let index = publish(&store, "b", &model, None, None);
    let blocks = store.cids().unwrap().len();
    let good = pts.next();
    let run = |f: &dyn Fn(&mut Batch)| {
        let mut b = Batch::new();
        b.upsert(key(5000), good.clone(), vec![]);
        f(&mut b);
        index.apply(&b, &WriteOptions::default())
    };
    assert!(matches!(
        run(&|b| {
            b.upsert(key(1), vec![1.0; DIMS + 1], vec![]);
        }),
        Err(Error::WrongDimension { expected: DIMS, got, key: Some(_) }) if got == DIMS + 1
    ));
    let mut nan = good.clone();
    nan[3] = f32::NAN;
    assert!(matches!(
        run(&|b| {
            b.upsert(key(2), nan.clone(), vec![]);
        }),
        Err(Error::NonFiniteVector { index: 3, .. })
    ));
    let mut inf = good.clone();
    inf[0] = f32::INFINITY;
    assert!(matches!(
        run(&|b| {
            b.upsert(key(2), inf.clone(), vec![]);
        }),
        Err(Error::NonFiniteVector { index: 0, .. })
    ));
    assert!(matches!(
        run(&|b| {
            b.delete(vec![7u8; MAX_KEY_LEN + 1]);
        }),
        Err(Error::KeyTooLong { len, max: MAX_KEY_LEN }) if len == MAX_KEY_LEN + 1
    ));
    assert!(matches!(
        run(&|b| {
            b.delete(key(5000));
        }),
        Err(Error::DuplicateKey { .. })
    ));
    assert!(matches!(
        run(&|b| {
            b.upsert(key(5000), good.clone(), vec![1]);
        }),
        Err(Error::DuplicateKey { .. })
    ));
    assert_eq!(
        store.cids().unwrap().len(),
        blocks,
        "a rejected batch wrote"
    );
    // A key of exactly the limit is accepted.
    run(&|b| {
        b.upsert(vec![1u8; MAX_KEY_LEN], good.clone(), vec![]);
    })
    .unwrap();
}

#[test]
fn emptying_a_map_drops_its_sidecars_and_says_so() {
    let s = seed();
    let mut pts = Points::new(s ^ 6);
    let model: Model = (0..120u64)
        .map(|i| (key(i), (pts.next(), vec![0])))
        .collect();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let hp = HnswParams::parse("m=6").unwrap();
    let pp = PqParams::parse("m=4,k=16,iterations=2").unwrap();
    let index = publish(&store, "e", &model, Some(&hp), Some(&pp));
    let mut batch = Batch::new();
    for k in model.keys() {
        batch.delete(k.clone());
    }
    let a = index.apply(&batch, &WriteOptions::default()).unwrap();
    assert_eq!(a.report.deleted, 120);
    assert_eq!(a.report.hnsw, SidecarWrite::Dropped(DropReason::Empty));
    assert_eq!(a.report.pq, SidecarWrite::Dropped(DropReason::Empty));
    assert!(a.index.is_empty());
    a.index.commit("e", Some(index.descriptor())).unwrap();
    let reopened = Index::open(Arc::clone(&store), "e", &Options::default()).unwrap();
    assert!(reopened.is_empty());
    let r = reopened
        .search(
            &mut Scratch::default(),
            &pts.next(),
            &Request::new(3).mode(QueryMode::Exact),
        )
        .unwrap();
    assert!(r.hits.is_empty());
    // An unchanged batch (only absent deletes) keeps everything.
    let mut none = Batch::new();
    none.delete(key(9999));
    let same = index.apply(&none, &WriteOptions::default()).unwrap();
    assert_eq!(same.index.descriptor(), index.descriptor());
    assert_eq!(same.report.hnsw, SidecarWrite::Unchanged);
    assert_eq!(same.index.sidecars(), index.sidecars());
}
