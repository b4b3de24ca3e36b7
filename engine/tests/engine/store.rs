//! One behavioural suite for the `BlockStore` trait, run against every
//! implementation (MemStore, MmapStore with default and with tiny segments),
//! plus MmapStore-only behaviour: persistence across reopen, roll-over,
//! locking, read-only opens, zero-copy handles outliving compaction.
//!
//! Randomness is seeded; set PROX_SEED to replay a failure.

use bytes::Bytes;
use prox_engine::store::{BlockStore, MemStore, MmapOptions, MmapStore, RetainStats, Verified};
use prox_engine::{Cid, Error};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

fn seed() -> u64 {
    prox_testkit::seed(0x5eed_0001)
}

/// xorshift64*: small, seeded, good enough for test data.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn block(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max as u64 + 1) as usize;
        (0..n).map(|_| self.next() as u8).collect()
    }
}

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
    for_each(|name, s, seed| {
        let mut rng = Rng::new(seed);
        let blocks: Vec<Vec<u8>> = (0..200).map(|_| rng.block(3000)).collect();
        let mut cids = Vec::new();
        for b in &blocks {
            let cid = s.put(b).unwrap();
            assert_eq!(cid, Cid::of(b), "{name}");
            cids.push(cid);
        }
        // Putting again is a no-op that returns the same CID.
        assert_eq!(s.put(&blocks[3]).unwrap(), cids[3]);
        for (b, c) in blocks.iter().zip(&cids) {
            assert_eq!(s.get(c).unwrap().as_deref(), Some(b.as_slice()), "{name}");
            assert!(s.has(c).unwrap());
        }
        let empty = s.put(b"").unwrap();
        assert_eq!(
            s.get(&empty).unwrap().unwrap().len(),
            0,
            "{name}: empty block"
        );
        let absent = Cid::of(b"never stored");
        assert_eq!(s.get(&absent).unwrap(), None);
        assert!(!s.has(&absent).unwrap());

        let batch: Vec<Vec<u8>> = (0..50).map(|_| rng.block(500)).collect();
        let mut refs: Vec<&[u8]> = batch.iter().map(|b| b.as_slice()).collect();
        refs.push(batch[0].as_slice()); // duplicate inside one batch
        refs.push(blocks[0].as_slice()); // already stored
        let got = s.put_many(&refs).unwrap();
        let want: Vec<Cid> = refs.iter().map(|b| Cid::of(b)).collect();
        assert_eq!(got, want, "{name}");
        let q = vec![want[0], absent, want[10]];
        assert_eq!(s.has_many(&q).unwrap(), vec![true, false, true]);
        let many = s.get_many(&q).unwrap();
        assert_eq!(many[0].as_deref(), Some(batch[0].as_slice()));
        assert!(many[1].is_none());
        assert_eq!(many[2].as_deref(), Some(batch[10].as_slice()));

        let all: HashSet<Cid> = s.cids().unwrap().into_iter().collect();
        let expected: HashSet<Cid> = cids.iter().chain(&want).copied().chain([empty]).collect();
        assert_eq!(all, expected, "{name}: cids()");
        s.commit().unwrap();
    });
}

#[test]
fn verified_puts_store_blocks_hashed_once() {
    for_each(|name, s, seed| {
        let mut rng = Rng::new(seed ^ 0x7e41);
        let blocks: Vec<Bytes> = (0..120).map(|_| Bytes::from(rng.block(2000))).collect();
        let mut verified: Vec<Verified> = blocks.iter().cloned().map(Verified::new).collect();
        for (v, b) in verified.iter().zip(&blocks) {
            assert_eq!(
                *v.cid(),
                Cid::of(b),
                "{name}: Verified::new pairs the real CID"
            );
        }
        verified.push(verified[5].clone()); // duplicate inside one call
        s.put(&blocks[7]).unwrap(); // already present
        s.put_verified_many(&verified).unwrap();
        for b in &blocks {
            let c = Cid::of(b);
            assert_eq!(
                s.get(&c).unwrap().as_ref(),
                Some(b),
                "{name}: PROX_SEED={seed}"
            );
        }
        assert_eq!(
            s.cids().unwrap().len(),
            blocks.len(),
            "{name}: no duplicates"
        );
        s.commit().unwrap();
        // `check` is the only way to pair bytes with an expected CID.
        let good = Verified::check(&Cid::of(&blocks[0]), blocks[0].clone()).unwrap();
        assert_eq!(
            good.clone().into_parts(),
            (Cid::of(&blocks[0]), blocks[0].clone())
        );
        let wrong = Cid::of(b"some other block");
        match Verified::check(&wrong, blocks[0].clone()) {
            Err(Error::Corrupt { cid, .. }) => assert_eq!(cid, wrong),
            other => panic!("{name}: expected Corrupt, got {other:?}"),
        }
    });
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
    for_each(|name, s, _| {
        assert_eq!(s.root("main").unwrap(), None);
        // CAS with absent-expected creates.
        assert!(s.cas_root("main", None, Some(b"v1")).unwrap(), "{name}");
        // Absent-expected fails once present.
        assert!(!s.cas_root("main", None, Some(b"v2")).unwrap());
        // Wrong expected value fails and changes nothing.
        assert!(!s.cas_root("main", Some(b"zz"), Some(b"v2")).unwrap());
        assert_eq!(s.root("main").unwrap().as_deref(), Some(&b"v1"[..]));
        assert!(s.cas_root("main", Some(b"v1"), Some(b"v2")).unwrap());
        assert_eq!(s.root("main").unwrap().as_deref(), Some(&b"v2"[..]));
        // Expecting a value on an absent root fails.
        assert!(!s.cas_root("other", Some(b"v2"), Some(b"x")).unwrap());
        // Empty values are values, distinct from absence.
        s.set_root("empty", Some(b"")).unwrap();
        assert_eq!(s.root("empty").unwrap().as_deref(), Some(&b""[..]));
        assert!(!s.cas_root("empty", None, Some(b"x")).unwrap());
        s.set_root("b", Some(b"B")).unwrap();
        let names: Vec<String> = s.roots().unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["b", "empty", "main"], "{name}: sorted");
        // CAS to None removes.
        assert!(s.cas_root("main", Some(b"v2"), None).unwrap());
        assert_eq!(s.root("main").unwrap(), None);
        s.set_root("b", None).unwrap();
        assert_eq!(s.roots().unwrap().len(), 1);
        for bad in ["", "a/b", "tab\t", "back\\slash"] {
            assert!(
                matches!(
                    s.set_root(bad, Some(b"x")),
                    Err(Error::InvalidRootName { .. })
                ),
                "{name}: {bad:?}"
            );
            assert!(s.root(bad).is_err());
        }
        assert!(s.set_root(&"n".repeat(256), Some(b"x")).is_err());
    });
}

#[test]
fn retain_keeps_live_and_removes_the_rest() {
    for_each(|name, s, seed| {
        let mut rng = Rng::new(seed ^ 7);
        let blocks: Vec<Vec<u8>> = (0..120)
            .map(|i| {
                let mut b = rng.block(900);
                b.push(i as u8); // keep them distinct
                b
            })
            .collect();
        let cids: Vec<Cid> = blocks.iter().map(|b| s.put(b).unwrap()).collect();
        s.commit().unwrap();
        let live: HashSet<Cid> = cids.iter().step_by(3).copied().collect();
        let removed_bytes: u64 = blocks
            .iter()
            .zip(&cids)
            .filter(|(_, c)| !live.contains(c))
            .map(|(b, _)| b.len() as u64)
            .sum();
        let stats = s.retain(&live).unwrap();
        assert_eq!(
            stats,
            RetainStats {
                kept_blocks: live.len() as u64,
                removed_blocks: (cids.len() - live.len()) as u64,
                removed_bytes,
            },
            "{name}"
        );
        for (b, c) in blocks.iter().zip(&cids) {
            if live.contains(c) {
                assert_eq!(s.get(c).unwrap().as_deref(), Some(b.as_slice()), "{name}");
            } else {
                assert_eq!(s.get(c).unwrap(), None, "{name}");
                assert!(!s.has(c).unwrap());
            }
        }
        // Idempotent, and the store keeps working afterwards.
        let again = s.retain(&live).unwrap();
        assert_eq!(again.removed_blocks, 0);
        let fresh = s.put(b"after gc").unwrap();
        assert!(s.has(&fresh).unwrap());
        // A removed block can be stored again.
        let back = s.put(&blocks[1]).unwrap();
        assert_eq!(s.get(&back).unwrap().as_deref(), Some(blocks[1].as_slice()));
        // Live CIDs that are not stored are simply ignored.
        let mut with_missing = live.clone();
        with_missing.insert(Cid::of(b"missing"));
        s.retain(&with_missing).unwrap();
        assert_eq!(
            s.get(&cids[0]).unwrap().as_deref(),
            Some(blocks[0].as_slice())
        );
    });
}

/// Blocks the writer thread has stored, with their bytes.
type Published = Vec<(Cid, Vec<u8>)>;

/// Sets its flag when dropped, also while unwinding: threads waiting on the
/// flag stop when the thread that owns the guard fails, so a failing
/// scoped test reports its panic instead of hanging in `thread::scope`.
struct SetOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

#[test]
fn concurrent_readers_with_a_writer() {
    let seed = seed();
    for (name, subj) in subjects() {
        let store: Arc<dyn BlockStore> = Arc::from(subj.store);
        let published: Arc<Mutex<Published>> = Arc::default();
        let writer_done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let w_store = store.clone();
            let w_pub = published.clone();
            let writer_done = &writer_done;
            scope.spawn(move || {
                let _done = SetOnDrop(writer_done);
                let mut rng = Rng::new(seed ^ 0xabc);
                for i in 0..400 {
                    let mut b = rng.block(700);
                    b.extend_from_slice(&(i as u32).to_le_bytes());
                    let cid = w_store.put(&b).unwrap();
                    if i % 50 == 0 {
                        w_store.commit().unwrap();
                    }
                    w_pub.lock().unwrap().push((cid, b));
                }
            });
            for r in 0..3u64 {
                let r_store = store.clone();
                let r_pub = published.clone();
                scope.spawn(move || {
                    let mut rng = Rng::new(seed ^ (r + 1));
                    let mut reads = 0;
                    while reads < 2000 {
                        let pick = {
                            let p = r_pub.lock().unwrap();
                            if p.is_empty() {
                                None
                            } else {
                                Some(p[rng.below(p.len() as u64) as usize].clone())
                            }
                        };
                        if let Some((cid, bytes)) = pick {
                            let got = r_store.get(&cid).unwrap();
                            assert_eq!(got.as_deref(), Some(bytes.as_slice()), "{name}");
                            reads += 1;
                        } else if writer_done.load(std::sync::atomic::Ordering::Acquire)
                            && r_pub.lock().unwrap().is_empty()
                        {
                            // The writer ended without publishing: it
                            // failed, and its panic fails the test.
                            break;
                        } else {
                            std::thread::yield_now();
                        }
                    }
                });
            }
        });
        assert_eq!(store.cids().unwrap().len(), 400, "{name}");
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
    use prox_engine::gc;
    use prox_engine::manifest::RootManifest;
    use prox_engine::prolly::{self, Config, Tree};
    use prox_engine::store::Pins;
    for_each(|name, s, seed| {
        let mut rng = Rng::new(seed ^ 0x6c);
        let cfg = Config::default();
        let entries = |tag: u8, rng: &mut Rng| -> Vec<(Vec<u8>, Vec<u8>)> {
            (0..3000u32)
                .map(|i| {
                    let mut k = vec![tag];
                    k.extend_from_slice(&i.to_be_bytes());
                    (k, rng.block(40))
                })
                .collect()
        };
        let kept = entries(1, &mut rng);
        let root = prolly::build(s, &cfg, kept.clone()).unwrap();
        let manifest = RootManifest::new(root, cfg.clone()).encode();
        s.set_root("main", Some(&manifest)).unwrap();
        let dropped_root = prolly::build(s, &cfg, entries(2, &mut rng))
            .unwrap()
            .unwrap();
        let pins = Pins::new();
        let pinned = s.put(b"pinned by a pull in progress").unwrap();
        let guard = pins.pin(pinned);
        s.commit().unwrap();

        let dry = gc::collect_default(s, &pins, true).unwrap();
        assert!(dry.retained.removed_blocks > 0, "{name}: {dry:?}");
        assert!(
            s.has(&dropped_root).unwrap(),
            "{name}: dry run removed something"
        );
        let report = gc::collect_default(s, &pins, false).unwrap();
        assert_eq!(
            report.retained, dry.retained,
            "{name}: dry run predicted the run"
        );
        assert_eq!(report.roots, 1);
        assert_eq!(report.missing, 0);
        assert!(!s.has(&dropped_root).unwrap(), "{name}");
        assert!(s.has(&pinned).unwrap(), "{name}: pinned block kept");
        let tree = Tree::from_manifest(s, &RootManifest::decode(&manifest).unwrap()).unwrap();
        for (k, v) in kept.iter().step_by(97) {
            assert_eq!(tree.get(k).unwrap().as_ref(), Some(v), "{name}");
        }
        assert_eq!(tree.iter().count(), kept.len(), "{name}");
        drop(guard);
        // A second run finds nothing more to do but the unpinned block.
        let again = gc::collect_default(s, &pins, false).unwrap();
        assert_eq!(again.retained.removed_blocks, 1, "{name}");
    });
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
