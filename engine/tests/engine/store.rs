//! The behavioural `BlockStore` suite (`store_suite.rs`), run against every
//! implementation (MemStore, MmapStore with default and with tiny segments),
//! plus MmapStore-only behaviour: persistence across reopen, roll-over,
//! locking, read-only opens, zero-copy handles outliving compaction.
//!
//! Randomness is seeded; set PROX_SEED to replay a failure.

use bytes::Bytes;
use prox_engine::store::{BlockStore, MemStore, MmapOptions, MmapStore, Verified};
use prox_engine::{Cid, Error};
use std::collections::HashSet;
use std::sync::Arc;

fn seed() -> u64 {
    prox_testkit::seed(0x5eed_0001)
}

use crate::store_suite::{self as suite, Rng, SetOnDrop};

/// A store under test plus whatever keeps it alive (a temp dir).
struct Subject {
    store: Box<dyn BlockStore>,
    _dir: Option<tempfile::TempDir>,
}

fn tiny() -> MmapOptions {
    MmapOptions {
        segment_bytes: 4096,
        ..MmapOptions::default()
    }
}

fn subjects() -> Vec<(&'static str, Subject)> {
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    vec![
        (
            "mem",
            Subject {
                store: Box::new(MemStore::new()),
                _dir: None,
            },
        ),
        (
            "mmap",
            Subject {
                store: Box::new(MmapStore::open(d1.path()).unwrap()),
                _dir: Some(d1),
            },
        ),
        (
            "mmap-tiny-segments",
            Subject {
                store: Box::new(MmapStore::open_with(d2.path(), tiny()).unwrap()),
                _dir: Some(d2),
            },
        ),
    ]
}

fn for_each(test: impl Fn(&str, &dyn BlockStore, u64)) {
    let seed = seed();
    for (name, s) in subjects() {
        eprintln!("store {name}, PROX_SEED={seed}");
        test(name, s.store.as_ref(), seed);
    }
}

#[test]
fn get_put_has_and_batches() {
    for_each(suite::get_put_has_and_batches);
}

#[test]
fn verified_puts_store_blocks_hashed_once() {
    for_each(suite::verified_puts_store_blocks_hashed_once);
}

#[test]
fn mmap_verified_puts_persist_and_are_verified_on_read_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed() ^ 0x11);
    let blocks: Vec<Bytes> = (0..40).map(|_| Bytes::from(rng.block(5000))).collect();
    {
        let s = MmapStore::open_with(dir.path(), tiny()).unwrap();
        let v: Vec<Verified> = blocks.iter().cloned().map(Verified::new).collect();
        s.put_verified_many(&v).unwrap();
        s.commit().unwrap();
    }
    let s = MmapStore::open(dir.path()).unwrap();
    for b in &blocks {
        assert_eq!(s.get(&Cid::of(b)).unwrap().as_ref(), Some(b));
    }
    assert_eq!(s.verify_all().unwrap(), Vec::<Cid>::new());
}

#[test]
fn roots_set_get_list_and_cas() {
    for_each(|name, s, _| suite::roots_set_get_list_and_cas(name, s));
}

#[test]
fn retain_keeps_live_and_removes_the_rest() {
    for_each(suite::retain_keeps_live_and_removes_the_rest);
}

#[test]
fn concurrent_readers_with_a_writer() {
    let seed = seed();
    for (name, subj) in subjects() {
        suite::concurrent_readers_with_a_writer(name, Arc::from(subj.store), seed, 2000);
    }
}

// ----- MmapStore only -----

#[test]
fn mmap_reopen_persists_blocks_and_roots() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    let blocks: Vec<Vec<u8>> = (0..300).map(|_| rng.block(2000)).collect();
    let cids: Vec<Cid>;
    {
        let s = MmapStore::open_with(dir.path(), tiny()).unwrap();
        cids = blocks.iter().map(|b| s.put(b).unwrap()).collect();
        s.commit().unwrap();
        s.set_root("main", Some(b"manifest")).unwrap();
        assert!(
            s.stats().segments > 10,
            "roll-over at 4 KiB: {:?}",
            s.stats()
        );
    }
    for opts in [tiny(), MmapOptions::default()] {
        let s = MmapStore::open_with(dir.path(), opts).unwrap();
        for (b, c) in blocks.iter().zip(&cids) {
            assert_eq!(s.get(c).unwrap().as_deref(), Some(b.as_slice()));
        }
        assert_eq!(s.root("main").unwrap().as_deref(), Some(&b"manifest"[..]));
        assert!(s.damaged().is_empty());
        // Appending after reopen goes on working.
        let c = s.put(b"appended after reopen").unwrap();
        s.commit().unwrap();
        assert!(s.has(&c).unwrap());
    }
    let s = MmapStore::open(dir.path()).unwrap();
    assert!(s.has(&Cid::of(b"appended after reopen")).unwrap());
    assert!(s.verify_all().unwrap().is_empty());
}

#[test]
fn mmap_retain_survives_reopen_and_handles_outlive_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed() ^ 99);
    let blocks: Vec<Vec<u8>> = (0..200).map(|_| rng.block(1500)).collect();
    let s = MmapStore::open_with(dir.path(), tiny()).unwrap();
    let cids: Vec<Cid> = blocks.iter().map(|b| s.put(b).unwrap()).collect();
    s.commit().unwrap();
    // Hold zero-copy handles to blocks that are about to be collected.
    let held: Vec<(Bytes, &Vec<u8>)> = cids
        .iter()
        .zip(&blocks)
        .skip(1)
        .step_by(2)
        .map(|(c, b)| (s.get(c).unwrap().unwrap(), b))
        .collect();
    let before = s.stats();
    let live: HashSet<Cid> = cids.iter().step_by(2).copied().collect();
    s.retain(&live).unwrap();
    let after = s.stats();
    assert!(
        after.file_bytes < before.file_bytes,
        "{before:?} -> {after:?}"
    );
    for (bytes, want) in &held {
        assert_eq!(
            bytes.as_ref(),
            want.as_slice(),
            "handle outlives its segment"
        );
    }
    drop(s);
    let s = MmapStore::open(dir.path()).unwrap();
    for (b, c) in blocks.iter().zip(&cids) {
        let got = s.get(c).unwrap();
        if live.contains(c) {
            assert_eq!(got.as_deref(), Some(b.as_slice()));
        } else {
            assert!(got.is_none());
        }
    }
    // The store holds no stray segments: only live data plus framing.
    let segs = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "seg")
        })
        .count() as u64;
    assert_eq!(segs, s.stats().segments);
    drop(held);
}

#[test]
fn mmap_second_writer_is_locked_and_read_only_works() {
    let dir = tempfile::tempdir().unwrap();
    let s = MmapStore::open(dir.path()).unwrap();
    let cid = s.put(b"shared").unwrap();
    s.commit().unwrap();
    s.set_root("r", Some(b"1")).unwrap();
    match MmapStore::open(dir.path()) {
        Err(Error::Locked { path }) => assert_eq!(path, dir.path()),
        other => panic!("expected Locked, got {other:?}"),
    }
    let ro = MmapStore::open_read_only(dir.path()).unwrap();
    assert!(ro.is_read_only());
    assert_eq!(ro.get(&cid).unwrap().as_deref(), Some(&b"shared"[..]));
    assert_eq!(ro.root("r").unwrap().as_deref(), Some(&b"1"[..]));
    assert!(matches!(ro.put(b"x"), Err(Error::ReadOnly { .. })));
    assert!(matches!(
        ro.set_root("r", None),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(
        ro.retain(&HashSet::new()),
        Err(Error::ReadOnly { .. })
    ));
    drop(s);
    // The lock is released with the store.
    let again = MmapStore::open(dir.path()).unwrap();
    assert!(again.has(&cid).unwrap());
    assert!(MmapStore::open_read_only(dir.path().join("absent")).is_err());
}

#[test]
fn mmap_large_blocks_get_their_own_segment() {
    let dir = tempfile::tempdir().unwrap();
    let s = MmapStore::open_with(dir.path(), tiny()).unwrap();
    let big: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    let small = s.put(b"small").unwrap();
    let cid = s.put(&big).unwrap();
    let after = s.put(b"after").unwrap();
    s.commit().unwrap();
    assert_eq!(s.get(&cid).unwrap().as_deref(), Some(big.as_slice()));
    drop(s);
    let s = MmapStore::open_with(dir.path(), tiny()).unwrap();
    assert_eq!(s.get(&cid).unwrap().as_deref(), Some(big.as_slice()));
    assert!(s.has(&small).unwrap() && s.has(&after).unwrap());
}

#[test]
fn gc_default_keeps_published_trees_and_reclaims_the_rest() {
    for_each(suite::gc_default_keeps_published_trees_and_reclaims_the_rest);
}

#[test]
fn readers_see_live_blocks_throughout_collections() {
    let seed = seed();
    for (name, subj) in subjects() {
        let store: Arc<dyn BlockStore> = Arc::from(subj.store);
        let mut rng = Rng::new(seed ^ 0x77);
        let live_blocks: Vec<(Cid, Vec<u8>)> = (0..150u32)
            .map(|i| {
                let mut b = rng.block(600);
                b.extend_from_slice(&i.to_le_bytes());
                (store.put(&b).unwrap(), b)
            })
            .collect();
        let live: HashSet<Cid> = live_blocks.iter().map(|(c, _)| *c).collect();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for r in 0..2u64 {
                let (store, live_blocks, done) = (&store, &live_blocks, &done);
                scope.spawn(move || {
                    let mut rng = Rng::new(seed ^ (r + 10));
                    let mut held = Vec::new();
                    while !done.load(std::sync::atomic::Ordering::Acquire) {
                        let (cid, bytes) = &live_blocks[rng.below(150) as usize];
                        let got = store.get(cid).unwrap();
                        assert_eq!(got.as_deref(), Some(bytes.as_slice()), "{name}");
                        // Keep some handles across collections.
                        if held.len() < 64 {
                            held.push((got.unwrap(), bytes.clone()));
                        }
                    }
                    for (b, want) in held {
                        assert_eq!(b.as_ref(), want.as_slice(), "{name}: held handle");
                    }
                });
            }
            // Stops the readers even if an assertion below fails.
            let _done = SetOnDrop(&done);
            for round in 0..12u32 {
                for _ in 0..40 {
                    let mut g = rng.block(500);
                    g.extend_from_slice(&round.to_le_bytes());
                    store.put(&g).unwrap();
                }
                store.commit().unwrap();
                let stats = store.retain(&live).unwrap();
                assert_eq!(stats.kept_blocks, 150, "{name}");
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
    }
}
