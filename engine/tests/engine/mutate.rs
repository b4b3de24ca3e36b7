//! Mutation batches equal fresh builds (proximity-format.md 12.13), keep the
//! PRXN root on value-only edits, and write few new objects.

use prox_engine::proximity::{Mutation, ProximityConfig, ProximityMap};
use prox_engine::store::BlockStore;
use prox_engine::{Error, MemStore};
use prox_kernels::Metric;
use std::collections::BTreeMap;

use crate::support::Counting;
use prox_testkit::SplitMix64 as Rng;

fn seed() -> u64 {
    prox_testkit::seed(0xBADC0DE)
}

type Set = BTreeMap<Vec<u8>, (Vec<f32>, Vec<u8>)>;

/// Input records: (key, vector, value).
type Rows = Vec<(Vec<u8>, Vec<f32>, Vec<u8>)>;

fn records(set: &Set) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    set.iter()
        .map(|(k, (v, val))| (k.clone(), v.clone(), val.clone()))
        .collect()
}

/// Applies `batch` to `map` and to the model `set`, checks the result
/// against a fresh build of `set` and a full audit, and returns it.
fn apply_checked<'s>(
    cfg: &ProximityConfig,
    map: &ProximityMap<'s>,
    set: &mut Set,
    batch: BTreeMap<Vec<u8>, Mutation>,
    what: &str,
) -> (ProximityMap<'s>, prox_engine::proximity::ApplyStats) {
    for m in batch.values() {
        match m {
            Mutation::Put { key, vector, value } => {
                set.insert(key.clone(), (vector.clone(), value.clone()));
            }
            Mutation::Delete { key } => {
                set.remove(key);
            }
        }
    }
    let (next, stats) = map.apply_with_stats(batch.into_values().collect()).unwrap();
    let fresh_store = MemStore::new();
    let fresh = ProximityMap::build(&fresh_store, cfg, records(set)).unwrap();
    assert_eq!(
        next.descriptor_cid(),
        fresh.descriptor_cid(),
        "{what}: {stats:?}"
    );
    next.verify().unwrap();
    (next, stats)
}

fn small_config(metric: Metric, dims: u32, sq8: bool) -> ProximityConfig {
    let mut c = ProximityConfig::new(dims);
    c.metric = metric;
    c.log_chunk_size = 2;
    c.min_page_bytes = 128;
    c.target_page_bytes = 512;
    c.max_page_bytes = 4096;
    c.inline_threshold_bytes = 4096;
    c.sq8_group_size = sq8.then_some(2);
    c
}

#[test]
fn batches_equal_fresh_builds() {
    let s = seed();
    let mut rng = Rng::new(s);
    for (metric, sq8) in [
        (Metric::L2, false),
        (Metric::Cosine, true),
        (Metric::InnerProduct, false),
    ] {
        let dims = 3u32;
        let cfg = small_config(metric, dims, sq8);
        let store = MemStore::new();
        let mut set = Set::new();
        let vec_of = |rng: &mut Rng| -> Vec<f32> {
            let v: Vec<f32> = (0..dims)
                .map(|_| (rng.unit() * 8.0).round() / 2.0)
                .collect();
            if v.iter().all(|&x| x == 0.0) {
                vec![1.0; dims as usize]
            } else {
                v
            }
        };
        for _ in 0..60 {
            let k = vec![(rng.next() % 97) as u8, (rng.next() % 3) as u8];
            set.insert(k, (vec_of(&mut rng), vec![1]));
        }
        let mut map = ProximityMap::build(&store, &cfg, records(&set)).unwrap();
        for round in 0..25 {
            let mut batch = BTreeMap::new();
            for _ in 0..(1 + rng.next() % 6) {
                let k = if rng.next().is_multiple_of(3) || set.is_empty() {
                    vec![(rng.next() % 97) as u8, (rng.next() % 3) as u8]
                } else {
                    let i = (rng.next() % set.len() as u64) as usize;
                    set.keys().nth(i).unwrap().clone()
                };
                let m = match rng.next() % 4 {
                    0 => Mutation::Delete { key: k.clone() },
                    1 if set.contains_key(&k) => Mutation::Put {
                        key: k.clone(),
                        vector: set[&k].0.clone(),
                        value: vec![round as u8, 9],
                    },
                    _ => Mutation::Put {
                        key: k.clone(),
                        vector: vec_of(&mut rng),
                        value: vec![round as u8],
                    },
                };
                batch.insert(k, m);
            }
            let what = format!("seed {s} metric {metric:?} round {round}");
            map = apply_checked(&cfg, &map, &mut set, batch, &what).0;
        }
    }
}

#[test]
fn value_only_edits_keep_the_hierarchy_and_small_edits_write_little() {
    let s = seed();
    let mut rng = Rng::new(s ^ 5);
    let dims = 8u32;
    let mut cfg = ProximityConfig::new(dims);
    cfg.log_chunk_size = 3;
    let store = Counting::default();
    let recs: Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> = (0..3000u64)
        .map(|i| {
            let v = (0..dims).map(|_| rng.unit()).collect();
            (i.to_be_bytes().to_vec(), v, b"x".to_vec())
        })
        .collect();
    let map = ProximityMap::build(&store, &cfg, recs.clone()).unwrap();
    let total = store.inner.cids().unwrap().len() as u64;

    store.reset();
    let (edited, stats) = map
        .apply_with_stats(vec![Mutation::Put {
            key: recs[17].0.clone(),
            vector: recs[17].1.clone(),
            value: b"new value".to_vec(),
        }])
        .unwrap();
    assert!(!stats.hierarchy_rebuilt);
    assert_eq!(edited.root_cid(), map.root_cid());
    assert_eq!(edited.get(&recs[17].0).unwrap().unwrap().1, b"new value");
    let value_puts = store.new_puts();

    store.reset();
    // One moved record and one deleted record.
    let (moved, stats) = edited
        .apply_with_stats(vec![
            Mutation::Put {
                key: recs[100].0.clone(),
                vector: vec![0.5; dims as usize],
                value: Vec::new(),
            },
            Mutation::Delete {
                key: recs[2000].0.clone(),
            },
        ])
        .unwrap();
    assert!(stats.hierarchy_rebuilt);
    assert_eq!((stats.moved, stats.deleted), (1, 1));
    let structural_puts = store.new_puts();
    moved.verify().unwrap();
    assert!(
        value_puts <= 8 && structural_puts < total / 4,
        "seed {s}: value edit wrote {value_puts}, structural edit wrote {structural_puts} of {total}"
    );
}

#[test]
fn bad_batches_are_refused_before_writing() {
    let store = MemStore::new();
    let cfg = ProximityConfig::new(2);
    let map =
        ProximityMap::build(&store, &cfg, vec![(b"a".to_vec(), vec![1.0, 2.0], vec![])]).unwrap();
    let before = store.cids().unwrap().len();
    let dup = vec![
        Mutation::Delete { key: b"b".to_vec() },
        Mutation::Delete { key: b"b".to_vec() },
    ];
    assert!(matches!(map.apply(dup), Err(Error::DuplicateKey { .. })));
    let bad = vec![
        Mutation::Delete { key: b"a".to_vec() },
        Mutation::Put {
            key: b"z".to_vec(),
            vector: vec![1.0],
            value: vec![],
        },
    ];
    match map.apply(bad) {
        Err(Error::WrongDimension { key: Some(k), .. }) => assert_eq!(k, b"z"),
        other => panic!("expected WrongDimension naming z, got {other:?}"),
    }
    assert_eq!(store.cids().unwrap().len(), before);
    // Deleting an absent key changes nothing.
    let same = map
        .apply(vec![Mutation::Delete { key: b"q".to_vec() }])
        .unwrap();
    assert_eq!(same.descriptor_cid(), map.descriptor_cid());
}

/// Seeded clustered records: `n` x `dims`, keys 8-byte big-endian indices.
fn clustered(rng: &mut Rng, n: u64, dims: u32) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    let centres: Vec<Vec<f32>> = (0..40)
        .map(|_| (0..dims).map(|_| rng.unit() * 4.0).collect())
        .collect();
    (0..n)
        .map(|i| {
            let c = &centres[(rng.next() % 40) as usize];
            let v = c.iter().map(|&x| x + rng.unit() * 0.5).collect();
            (i.to_be_bytes().to_vec(), v, Vec::new())
        })
        .collect()
}

fn level(cfg: &ProximityConfig, key: &[u8]) -> u8 {
    prox_engine::proximity::math::promotion_level(key, cfg.log_chunk_size, cfg.level_hash_seed)
}

/// Applies one move of `key` to a copy of `recs`, checks the result
/// against a fresh build and returns the batch's stats.
fn move_one(
    cfg: &ProximityConfig,
    map: &ProximityMap<'_>,
    recs: &[(Vec<u8>, Vec<f32>, Vec<u8>)],
    key: &[u8],
    vector: Vec<f32>,
    seed: u64,
) -> prox_engine::proximity::ApplyStats {
    let (next, stats) = map
        .apply_with_stats(vec![Mutation::Put {
            key: key.to_vec(),
            vector: vector.clone(),
            value: Vec::new(),
        }])
        .unwrap();
    let mut after = recs.to_vec();
    let i = after.iter().position(|r| r.0 == key).unwrap();
    after[i].1 = vector;
    let fresh_store = MemStore::new();
    let fresh = ProximityMap::build(&fresh_store, cfg, after).unwrap();
    assert_eq!(
        next.descriptor_cid(),
        fresh.descriptor_cid(),
        "seed {seed}: key {key:02x?} (level {})",
        level(cfg, key)
    );
    stats
}

#[test]
fn one_record_update_on_a_20k_map_decodes_and_encodes_one_path() {
    let s = seed();
    let mut rng = Rng::new(s ^ 0x20_000);
    let dims = 16u32;
    let cfg = ProximityConfig::new(dims);
    let recs = clustered(&mut rng, 20_000, dims);
    let store = Counting::default();
    let map = ProximityMap::build(&store, &cfg, recs.clone()).unwrap();
    let top = map.node(&map.root_cid()).unwrap().level;
    assert!(top >= 1, "seed {s}: 20k records must promote some key");
    let i = (0..recs.len())
        .find(|&i| i >= 777 && level(&cfg, &recs[i].0) == 0)
        .unwrap();
    let target = recs[(i * 7 + 3) % recs.len()].1.clone();
    store.reset();
    let stats = move_one(&cfg, &map, &recs, &recs[i].0, target, s);
    assert!(
        stats.hierarchy_rebuilt && !stats.full_rebuild,
        "seed {s}: {stats:?}"
    );
    assert_eq!(stats.records_reassigned, 0, "seed {s}: {stats:?}");
    // Default pages hold a whole logical node: one root-to-leaf path for
    // the removal, one for the insertion, plus the root read that checks
    // the top level.
    // The two paths share the root: 1 + 2·top logical nodes.
    let paths = 1 + 2 * u64::from(top);
    assert!(
        stats.nodes_decoded <= 1 + paths && stats.nodes_encoded <= paths,
        "seed {s}: top {top}, {stats:?}"
    );
    // New objects: at most the re-encoded nodes, the directory path and
    // the descriptor.
    let puts = store.new_puts();
    assert!(
        puts <= stats.nodes_encoded + 8,
        "seed {s}: {puts} new objects, {stats:?}"
    );
}

#[test]
fn promoted_record_edits_rebuild_only_their_subtree() {
    let s = seed();
    let mut rng = Rng::new(s ^ 0x4b17);
    let dims = 8u32;
    let mut cfg = ProximityConfig::new(dims);
    cfg.log_chunk_size = 4;
    let n = 20_000u64;
    let recs = clustered(&mut rng, n, dims);
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &cfg, recs.clone()).unwrap();
    let top = map.node(&map.root_cid()).unwrap().level;
    let mut checked = 0;
    for l in 1..top {
        let Some(i) = (0..recs.len()).find(|&i| level(&cfg, &recs[i].0) == l) else {
            continue;
        };
        let target = recs[(i * 13 + 5) % recs.len()].1.clone();
        let stats = move_one(&cfg, &map, &recs, &recs[i].0, target, s);
        assert!(!stats.full_rebuild, "seed {s} level {l}: {stats:?}");
        // A level-l node's subtree holds about 2^(4·l) records; the move
        // rebuilds at most two of them (old and new group). Near the top
        // a subtree can hold most of the map, so only level 1 is bounded
        // tightly.
        let bound = if l == 1 { n / 8 } else { 2 * n };
        assert!(
            stats.records_reassigned > 0 && stats.records_reassigned <= bound,
            "seed {s} level {l}: {stats:?}"
        );
        checked += 1;
        // Deleting it is local too.
        let (next, stats) = map
            .apply_with_stats(vec![Mutation::Delete {
                key: recs[i].0.clone(),
            }])
            .unwrap();
        assert!(!stats.full_rebuild, "seed {s} level {l}: {stats:?}");
        let mut after = recs.clone();
        after.remove(i);
        let fresh_store = MemStore::new();
        let fresh = ProximityMap::build(&fresh_store, &cfg, after).unwrap();
        assert_eq!(
            next.descriptor_cid(),
            fresh.descriptor_cid(),
            "seed {s} level {l}"
        );
    }
    assert!(
        checked >= 1,
        "seed {s}: top {top}, no promoted key below the top"
    );
    // Moving a key promoted to the top level edits the root group's
    // members but keeps the root's level: still local.
    let tops: Vec<usize> = (0..recs.len())
        .filter(|&i| level(&cfg, &recs[i].0) >= top)
        .collect();
    let i = tops[0];
    let target = recs[(i + 1) % recs.len()].1.clone();
    let stats = move_one(&cfg, &map, &recs, &recs[i].0, target, s);
    assert!(!stats.full_rebuild, "seed {s}: {stats:?}");
    // With a single top-level key every record lies below it.
    let bound = if tops.len() > 1 { n - 1 } else { n };
    assert!(stats.records_reassigned <= bound, "seed {s}: {stats:?}");
}

/// A map whose root holds a single top-level record, and the key set.
fn one_top(cfg: &ProximityConfig, n: u64) -> (Rows, u8) {
    let mut rng = Rng::new(seed() ^ 0x70b);
    let mut recs = clustered(&mut rng, n, cfg.dims);
    let top = recs.iter().map(|r| level(cfg, &r.0)).max().unwrap();
    let mut seen = false;
    recs.retain(|r| {
        let keep = level(cfg, &r.0) < top || !seen;
        seen |= level(cfg, &r.0) == top;
        keep
    });
    (recs, top)
}

#[test]
fn only_a_change_of_the_root_level_rebuilds_everything() {
    let dims = 4u32;
    let mut cfg = ProximityConfig::new(dims);
    cfg.log_chunk_size = 3;
    let (recs, top) = one_top(&cfg, 3000);
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &cfg, recs.clone()).unwrap();
    assert_eq!(map.node(&map.root_cid()).unwrap().level, top);
    let check = |next: &ProximityMap<'_>, after: Rows| {
        let fresh_store = MemStore::new();
        let fresh = ProximityMap::build(&fresh_store, &cfg, after).unwrap();
        assert_eq!(next.descriptor_cid(), fresh.descriptor_cid());
    };
    // Deleting the only top-level record lowers the root.
    let t = recs.iter().position(|r| level(&cfg, &r.0) == top).unwrap();
    let (next, stats) = map
        .apply_with_stats(vec![Mutation::Delete {
            key: recs[t].0.clone(),
        }])
        .unwrap();
    assert!(stats.full_rebuild, "{stats:?}");
    let mut after = recs.clone();
    after.remove(t);
    check(&next, after);
    // Inserting a record promoted above the top raises it.
    let high = (0u64..)
        .map(|i| format!("high-{i}").into_bytes())
        .find(|k| level(&cfg, k) > top)
        .unwrap();
    let v = vec![0.25; dims as usize];
    let (next, stats) = map
        .apply_with_stats(vec![Mutation::Put {
            key: high.clone(),
            vector: v.clone(),
            value: Vec::new(),
        }])
        .unwrap();
    assert!(stats.full_rebuild, "{stats:?}");
    let mut after = recs.clone();
    after.push((high, v, Vec::new()));
    check(&next, after);
    // A second record at the top level joins the root group locally.
    let peer = (0u64..)
        .map(|i| format!("peer-{i}").into_bytes())
        .find(|k| level(&cfg, k) == top)
        .unwrap();
    let v = recs[7].1.clone();
    let (next, stats) = map
        .apply_with_stats(vec![Mutation::Put {
            key: peer.clone(),
            vector: v.clone(),
            value: Vec::new(),
        }])
        .unwrap();
    assert!(!stats.full_rebuild, "{stats:?}");
    let mut after = recs.clone();
    after.push((peer, v, Vec::new()));
    check(&next, after);
}

/// Batches that add, remove and move members at every level (small chunks
/// promote many keys; coarse coordinates make equal distances common, so
/// ties are exercised) equal fresh builds on every metric.
#[test]
fn member_changes_at_every_level_equal_fresh_builds() {
    let s = seed();
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        let mut rng = Rng::new(s ^ 0x3e3b ^ metric as u64);
        let dims = 3u32;
        let cfg = small_config(metric, dims, metric == Metric::Cosine);
        let vec_of = |rng: &mut Rng| -> Vec<f32> {
            let v: Vec<f32> = (0..dims)
                .map(|_| (rng.unit() * 6.0).round() / 2.0 - 1.0)
                .collect();
            if v.iter().all(|&x| x == 0.0) {
                vec![1.0; dims as usize]
            } else {
                v
            }
        };
        let mut set = Set::new();
        for i in 0..1200u32 {
            set.insert(i.to_be_bytes().to_vec(), (vec_of(&mut rng), vec![]));
        }
        let store = MemStore::new();
        let mut map = ProximityMap::build(&store, &cfg, records(&set)).unwrap();
        let mut local = 0;
        for round in 0..12 {
            let mut batch = BTreeMap::new();
            for _ in 0..(1 + rng.next() % 40) {
                let k = if rng.next().is_multiple_of(2) {
                    ((rng.next() % 2000) as u32).to_be_bytes().to_vec()
                } else {
                    let i = (rng.next() % set.len() as u64) as usize;
                    set.keys().nth(i).unwrap().clone()
                };
                let m = if rng.next().is_multiple_of(3) {
                    Mutation::Delete { key: k.clone() }
                } else {
                    Mutation::Put {
                        key: k.clone(),
                        vector: vec_of(&mut rng),
                        value: vec![round],
                    }
                };
                batch.insert(k, m);
            }
            let what = format!("seed {s} metric {metric:?} round {round}");
            let (next, stats) = apply_checked(&cfg, &map, &mut set, batch, &what);
            local += u32::from(!stats.full_rebuild);
            map = next;
        }
        assert!(
            local >= 6,
            "seed {s} metric {metric:?}: {local} local batches"
        );
    }
}
