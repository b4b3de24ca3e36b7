//! Public behaviour of prolly trees: canonical writes (history
//! independence), locality of edits and diffs, reads, errors on damaged
//! stores. Randomness is seeded: `PROX_SEED` overrides the default seed,
//! and every failure message names the seed.

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, RngSeed};
use prox_engine::prolly::{build, build_sorted, Config, DiffEntry, Mutation, Tree};
use prox_engine::store::{BlockStore, MemStore};
use prox_engine::{Cid, Error, Result};
use std::collections::{BTreeMap, HashSet};

fn seed() -> u64 {
    prox_testkit::seed(0x5eed_2026)
}

fn pt_config(cases: u32) -> PtConfig {
    PtConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed()),
        failure_persistence: None,
        ..PtConfig::default()
    }
}

use crate::support::Counting;
use prox_testkit::SplitMix64 as Rng;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn fresh_root(cfg: &Config, model: &BTreeMap<Vec<u8>, Vec<u8>>) -> Option<Cid> {
    let store = MemStore::new();
    build_sorted(
        &store,
        cfg,
        model.iter().map(|(k, v)| (k.clone(), v.clone())),
    )
    .unwrap()
}

fn small_config() -> impl Strategy<Value = Config> {
    (1usize..=4, 0usize..=6, 1u32..=5, any::<u64>())
        .prop_map(|(min, extra, factor, seed)| Config::new(min, (min + extra).max(2), factor, seed))
        .prop_filter("valid", |c| c.validate().is_ok())
}

#[derive(Debug, Clone)]
enum Op {
    Put(u8, Vec<u8>),
    Del(u8),
    Batch(Vec<(u8, Option<Vec<u8>>)>),
}

fn op() -> impl Strategy<Value = Op> {
    let val = prop::collection::vec(any::<u8>(), 0..4);
    prop_oneof![
        4 => (any::<u8>(), val.clone()).prop_map(|(k, v)| Op::Put(k % 96, v)),
        2 => any::<u8>().prop_map(|k| Op::Del(k % 96)),
        1 => prop::collection::vec((any::<u8>(), prop::option::of(val)), 0..24)
            .prop_map(|ms| Op::Batch(ms.into_iter().map(|(k, v)| (k % 96, v)).collect())),
    ]
}

fn k8(k: u8) -> Vec<u8> {
    // Keys of varying length and shared prefixes.
    let mut v = vec![b'k'; (k % 3) as usize];
    v.push(k);
    v
}

proptest! {
    #![proptest_config(pt_config(48))]

    /// Any sequence of edits gives the root of a fresh build of the final
    /// entries, at every step, and reads agree with a BTreeMap model.
    #[test]
    fn history_independence(cfg in small_config(), ops in prop::collection::vec(op(), 1..40)) {
        let store = MemStore::new();
        let mut tree = Tree::new(&store, cfg.clone()).unwrap();
        let mut model = BTreeMap::new();
        for (step, op) in ops.iter().enumerate() {
            tree = match op {
                Op::Put(k, v) => { model.insert(k8(*k), v.clone()); tree.put(k8(*k), v.clone()).unwrap() }
                Op::Del(k) => { model.remove(&k8(*k)); tree.delete(k8(*k)).unwrap() }
                Op::Batch(ms) => {
                    let mut seen = HashSet::new();
                    let mut muts = Vec::new();
                    for (k, v) in ms {
                        if !seen.insert(*k) { continue; }
                        match v {
                            Some(v) => { model.insert(k8(*k), v.clone()); muts.push(Mutation::Put(k8(*k), v.clone())) }
                            None => { model.remove(&k8(*k)); muts.push(Mutation::Delete(k8(*k))) }
                        }
                    }
                    tree.batch(muts).unwrap()
                }
            };
            prop_assert_eq!(tree.root(), fresh_root(&cfg, &model), "seed {} step {} op {:?}", seed(), step, op);
        }
        let all: Vec<_> = tree.iter().collect::<Result<_>>().unwrap();
        let expect: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        prop_assert_eq!(all, expect, "seed {}", seed());
        for k in 0..96u8 {
            prop_assert_eq!(tree.get(&k8(k)).unwrap(), model.get(&k8(k)).cloned(), "seed {}", seed());
        }
    }

    /// Diff equals the logical merge of the two entry lists, both ways.
    #[test]
    fn diff_is_logical_merge(cfg in small_config(),
                             a in prop::collection::btree_map(any::<u8>(), prop::collection::vec(any::<u8>(), 0..3), 0..80),
                             b in prop::collection::btree_map(any::<u8>(), prop::collection::vec(any::<u8>(), 0..3), 0..80)) {
        let store = MemStore::new();
        let ta = Tree::open(&store, cfg.clone(), build(&store, &cfg, a.iter().map(|(k, v)| (k8(*k), v.clone())).collect()).unwrap()).unwrap();
        let tb = ta.with_root(build(&store, &cfg, b.iter().map(|(k, v)| (k8(*k), v.clone())).collect()).unwrap());
        let ma: BTreeMap<Vec<u8>, Vec<u8>> = a.iter().map(|(k, v)| (k8(*k), v.clone())).collect();
        let mb: BTreeMap<Vec<u8>, Vec<u8>> = b.iter().map(|(k, v)| (k8(*k), v.clone())).collect();
        let mut keys: Vec<&Vec<u8>> = ma.keys().chain(mb.keys()).collect();
        keys.sort();
        keys.dedup();
        let expect: Vec<DiffEntry> = keys.into_iter().filter_map(|k| match (ma.get(k), mb.get(k)) {
            (Some(x), None) => Some(DiffEntry::Removed { key: k.clone(), value: x.clone() }),
            (None, Some(y)) => Some(DiffEntry::Added { key: k.clone(), value: y.clone() }),
            (Some(x), Some(y)) if x != y => Some(DiffEntry::Changed { key: k.clone(), old: x.clone(), new: y.clone() }),
            _ => None,
        }).collect();
        prop_assert_eq!(ta.diff_vec(&tb).unwrap(), expect, "seed {}", seed());
    }

    /// Ranges and prefixes agree with the model for arbitrary bounds.
    #[test]
    fn ranges_match_model(cfg in small_config(),
                          m in prop::collection::btree_map(prop::collection::vec(0u8..4, 0..4), any::<u8>(), 0..60),
                          start in prop::collection::vec(0u8..4, 0..4),
                          end in prop::option::of(prop::collection::vec(0u8..4, 0..4))) {
        let store = MemStore::new();
        let root = build(&store, &cfg, m.iter().map(|(k, v)| (k.clone(), vec![*v])).collect()).unwrap();
        let t = Tree::open(&store, cfg, root).unwrap();
        let got: Vec<_> = t.range(&start, end.as_deref()).collect::<Result<_>>().unwrap();
        let expect: Vec<_> = m.iter()
            .filter(|(k, _)| **k >= start && end.as_ref().is_none_or(|e| *k < e))
            .map(|(k, v)| (k.clone(), vec![*v])).collect();
        prop_assert_eq!(got, expect, "seed {}", seed());
        let got_p: Vec<_> = t.prefix(&start).map(|r| r.unwrap().0).collect();
        let expect_p: Vec<_> = m.keys().filter(|k| k.starts_with(&start)).cloned().collect();
        prop_assert_eq!(got_p, expect_p, "seed {}", seed());
    }
}

#[test]
fn empty_value_is_not_delete_and_empty_tree_has_no_root() {
    let store = MemStore::new();
    let t = Tree::new(&store, Config::default()).unwrap();
    let t1 = t.put(b"a".to_vec(), Vec::new()).unwrap();
    assert_eq!(t1.get(b"a").unwrap(), Some(vec![]));
    assert!(t1.root().is_some());
    let t2 = t1.delete(b"a".to_vec()).unwrap();
    assert_eq!(t2.get(b"a").unwrap(), None);
    assert_eq!(t2.root(), None);
    assert_eq!(t2.stats().unwrap().height, 0);
    assert!(matches!(
        t.batch([
            Mutation::Delete(b"x".to_vec()),
            Mutation::Put(b"x".to_vec(), vec![])
        ]),
        Err(Error::DuplicateKey { .. })
    ));
}

#[test]
fn build_rejects_duplicates_unsorted_and_degenerate_configs() {
    let store = MemStore::new();
    let cfg = Config::default();
    let dup = vec![(b"a".to_vec(), vec![]), (b"a".to_vec(), vec![1])];
    assert!(matches!(
        build(&store, &cfg, dup.clone()),
        Err(Error::DuplicateKey { .. })
    ));
    assert!(matches!(
        build_sorted(&store, &cfg, dup),
        Err(Error::DuplicateKey { .. })
    ));
    let unsorted = vec![(b"b".to_vec(), vec![]), (b"a".to_vec(), vec![])];
    assert!(matches!(
        build_sorted(&store, &cfg, unsorted),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        build(&store, &Config::new(1, 8, 1, 0), vec![]),
        Err(Error::InvalidConfig(_))
    ));
    assert_eq!(build(&store, &cfg, vec![]).unwrap(), None);
    assert!(store.is_empty());
}

fn big_tree<'s>(store: &'s dyn BlockStore, cfg: &Config, n: u64) -> Tree<'s> {
    let root = build_sorted(
        store,
        cfg,
        (0..n).map(|i| (key(i), format!("v{i}").into_bytes())),
    )
    .unwrap();
    Tree::open(store, cfg.clone(), root).unwrap()
}

/// An edit inside one leaf of a large tree reads and writes O(height) nodes.
#[test]
fn edits_are_local() {
    let cfg = Config::new(2, 256, 8, 7);
    let store = Counting::default();
    let t = big_tree(&store, &cfg, 20_000);
    let height = t.stats().unwrap().height;
    assert!(height >= 4, "height {height}");
    let mut rng = Rng::new(seed());
    for round in 0..20 {
        let i = rng.below(20_000);
        store.reset();
        let t2 = match round % 3 {
            0 => t.put(key(i), b"changed".to_vec()).unwrap(),
            1 => t.delete(key(i)).unwrap(),
            _ => t
                .put(format!("key{i:08}x").into_bytes(), b"new".to_vec())
                .unwrap(),
        };
        let (gets, puts) = (store.blocks(), store.puts());
        // Re-chunking may run into the next node at each level before the
        // boundaries resynchronise; a small constant per level.
        assert!(
            puts <= 4 * height as u64,
            "seed {} round {round}: {puts} puts for height {height}",
            seed()
        );
        assert!(
            gets <= 8 * height as u64,
            "seed {} round {round}: {gets} gets for height {height}",
            seed()
        );
        let mut model_root = None;
        if round < 3 {
            let mut m: BTreeMap<Vec<u8>, Vec<u8>> = (0..20_000)
                .map(|j| (key(j), format!("v{j}").into_bytes()))
                .collect();
            match round % 3 {
                0 => {
                    m.insert(key(i), b"changed".to_vec());
                }
                1 => {
                    m.remove(&key(i));
                }
                _ => {
                    m.insert(format!("key{i:08}x").into_bytes(), b"new".to_vec());
                }
            }
            model_root = Some(fresh_root(&cfg, &m));
        }
        if let Some(r) = model_root {
            assert_eq!(t2.root(), r, "seed {} round {round}", seed());
        }
    }
    // A no-op write changes nothing.
    let same = t.put(key(5), b"v5".to_vec()).unwrap();
    assert_eq!(same.root(), t.root());
}

/// One changed key in a 50k-entry tree: the diff reads O(height) nodes.
#[test]
fn diff_of_one_change_reads_o_height_nodes() {
    let cfg = Config::new(2, 128, 4, 3);
    let store = Counting::default();
    let t = big_tree(&store, &cfg, 50_000);
    let height = t.stats().unwrap().height;
    let mut rng = Rng::new(seed() ^ 1);
    for _ in 0..5 {
        let i = rng.below(50_000);
        let t2 = t.put(key(i), b"other".to_vec()).unwrap();
        store.reset();
        let d = t.diff_vec(&t2).unwrap();
        assert_eq!(
            d,
            vec![DiffEntry::Changed {
                key: key(i),
                old: format!("v{i}").into_bytes(),
                new: b"other".to_vec()
            }],
            "seed {}",
            seed()
        );
        let gets = store.blocks();
        assert!(
            gets <= 6 * height as u64,
            "seed {}: diff read {gets} nodes for height {height}",
            seed()
        );
    }
    store.reset();
    assert!(t.diff_vec(&t).unwrap().is_empty());
    assert_eq!(store.blocks(), 0);
}

#[test]
fn cursor_get_many_stats_and_last() {
    let cfg = Config::new(2, 16, 4, 0);
    let store = MemStore::new();
    let t = big_tree(&store, &cfg, 3000);
    let mut c = t.cursor();
    c.seek(&key(1500)).unwrap();
    assert_eq!(c.next().unwrap().unwrap().0, key(1500));
    c.seek(b"key00001500a").unwrap();
    assert_eq!(c.peek().unwrap().unwrap().0, key(1501).as_slice());
    c.seek(b"z").unwrap();
    assert!(c.next().unwrap().is_none());
    let got = t
        .get_many(&[key(7), b"nope".to_vec(), key(2999), key(0)])
        .unwrap();
    assert_eq!(
        got,
        vec![
            Some(b"v7".to_vec()),
            None,
            Some(b"v2999".to_vec()),
            Some(b"v0".to_vec())
        ]
    );
    let s = t.stats().unwrap();
    assert_eq!(s.entries, 3000);
    assert_eq!(
        s.nodes as usize,
        store.len(),
        "a fresh build writes exactly the reachable nodes"
    );
    assert!(s.mean_leaf_fill >= 2.0 && s.mean_leaf_fill <= 16.0);
    assert_eq!(t.last().unwrap().unwrap().0, key(2999));
    assert_eq!(t.first().unwrap().unwrap().0, key(0));
    assert_eq!(t.reachable().unwrap().len() as u64, s.nodes);
}

/// A store missing blocks, or holding garbage under a CID, gives typed errors.
#[test]
fn damaged_store_gives_typed_errors() {
    let cfg = Config::new(2, 8, 4, 0);
    let full = MemStore::new();
    let t = big_tree(&full, &cfg, 500);
    let root = t.root().unwrap();
    // Copy only the root into a new store.
    let partial = MemStore::new();
    partial.put(&full.get(&root).unwrap().unwrap()).unwrap();
    let tp = Tree::open(&partial, cfg.clone(), Some(root)).unwrap();
    assert!(matches!(tp.get(&key(3)), Err(Error::NotFound { .. })));
    let mut r = tp.iter();
    assert!(matches!(r.next(), Some(Err(Error::NotFound { .. }))));
    assert!(r.next().is_none());
    assert!(matches!(
        tp.put(key(3), vec![]),
        Err(Error::NotFound { .. })
    ));
    assert!(tp.stats().is_err());
    let other = t.put(key(1), b"x".to_vec()).unwrap();
    assert!(tp
        .diff_root(other.root())
        .collect::<Result<Vec<_>>>()
        .is_err());
    // Unknown root entirely.
    let missing = Tree::open(&partial, cfg.clone(), Some(Cid::of(b"nothing"))).unwrap();
    assert!(matches!(missing.get(b"a"), Err(Error::NotFound { .. })));
    // A tree written under another config cannot be spliced canonically.
    let foreign = Tree::open(&full, Config::new(2, 8, 5, 0), Some(root)).unwrap();
    assert!(matches!(
        foreign.put(b"a".to_vec(), vec![]),
        Err(Error::InvalidConfig(_))
    ));
}

/// Bulk building the same entries in parallel-sized batches is deterministic
/// and equals a sequence of batches applied to a growing tree.
#[test]
fn batches_equal_bulk_build_on_larger_trees() {
    let cfg = Config::new(2, 64, 8, 11);
    let store = MemStore::new();
    let mut rng = Rng::new(seed() ^ 2);
    let mut model = BTreeMap::new();
    let mut t = Tree::new(&store, cfg.clone()).unwrap();
    for round in 0..12 {
        let mut muts = Vec::new();
        let mut seen = HashSet::new();
        for _ in 0..rng.below(600) + 1 {
            let k = key(rng.below(8000));
            if !seen.insert(k.clone()) {
                continue;
            }
            if rng.below(4) == 0 {
                model.remove(&k);
                muts.push(Mutation::Delete(k));
            } else {
                let v = rng.next().to_le_bytes()[..(rng.below(9) as usize)].to_vec();
                model.insert(k.clone(), v.clone());
                muts.push(Mutation::Put(k, v));
            }
        }
        t = t.batch(muts).unwrap();
        assert_eq!(
            t.root(),
            fresh_root(&cfg, &model),
            "seed {} round {round}",
            seed()
        );
    }
}

/// In-tree stand-in for the fuzz targets: seeded random mutations of valid
/// node, manifest and envelope bytes never panic, and whatever the strict
/// decoders accept round-trips byte-exactly.
#[test]
fn mutated_inputs_never_panic_and_accepted_round_trip() {
    use prox_engine::envelope::{ValueRef, VersionedValue};
    use prox_engine::manifest::RootManifest;
    use prox_engine::prolly::{Encoding, Node};
    let cfg = Config {
        encoding: Encoding::Custom("x/y".into()),
        ..Config::new(2, 300, 70_000, 1 << 40)
    };
    let store = MemStore::new();
    let t = big_tree(&store, &cfg, 400);
    let mut seeds: Vec<Vec<u8>> = t
        .reachable()
        .unwrap()
        .iter()
        .take(3)
        .map(|c| store.get(c).unwrap().unwrap().to_vec())
        .collect();
    let mut m = t.manifest();
    m.created_at_millis = Some(1_700_000_000_000);
    seeds.push(m.encode());
    seeds.push(
        VersionedValue {
            schema: "s".into(),
            version: 9,
            encoding: Encoding::Json,
            payload: b"{}".to_vec(),
        }
        .encode(),
    );
    seeds.push(ValueRef::Inline(b"abc".to_vec()).encode());
    let mut rng = Rng::new(seed() ^ 3);
    for round in 0..3000 {
        let mut b = seeds[round % seeds.len()].clone();
        for _ in 0..=rng.below(4) {
            match rng.below(4) {
                0 if !b.is_empty() => {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] ^= 1 << rng.below(8);
                }
                1 if !b.is_empty() => {
                    let i = rng.below(b.len() as u64) as usize;
                    b.truncate(i);
                }
                2 => {
                    let i = rng.below(b.len() as u64 + 1) as usize;
                    b.insert(i, rng.next() as u8);
                }
                _ if !b.is_empty() => {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] = rng.next() as u8;
                }
                _ => {}
            }
        }
        if let Ok(n) = Node::decode(&b) {
            if b.starts_with(b"CRAB") {
                assert_eq!(n.encode(), b, "seed {} round {round}", seed());
            }
        }
        if let Ok(m) = RootManifest::decode(&b) {
            assert_eq!(
                RootManifest::decode(&m.encode()).unwrap(),
                m,
                "seed {} round {round}",
                seed()
            );
        }
        if let Ok(v) = VersionedValue::decode(&b) {
            assert_eq!(v.encode(), b, "seed {} round {round}", seed());
        }
        if let Ok(r) = ValueRef::decode(&b) {
            assert_eq!(r.encode(), b, "seed {} round {round}", seed());
        }
    }
}
