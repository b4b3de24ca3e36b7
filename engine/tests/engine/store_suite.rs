//! The generic `BlockStore` suite: one function per behaviour, each taking
//! the store under test, its name (for failure messages) and the seed.
//! Every implementation runs all of them: MemStore and MmapStore here
//! (`store.rs`), the S3 store in prox-s3's tests, which include this file
//! by path so there is one copy of the suite.
//!
//! The store must start empty (the suite checks `cids()` exactly).

#![allow(dead_code, unreachable_pub)]

use bytes::Bytes;
use prox_engine::store::{BlockStore, RetainStats, Verified};
use prox_engine::{Cid, Error};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// xorshift64*: small, seeded, good enough for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn block(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max as u64 + 1) as usize;
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Puts, gets, `has`, the batch calls and `cids()`.
pub fn get_put_has_and_batches(name: &str, s: &dyn BlockStore, seed: u64) {
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
}

/// `put_verified_many` stores each block once under its real CID.
pub fn verified_puts_store_blocks_hashed_once(name: &str, s: &dyn BlockStore, seed: u64) {
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
}

/// Named roots: set, get, list (sorted), compare-and-swap, removal, names.
pub fn roots_set_get_list_and_cas(name: &str, s: &dyn BlockStore) {
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
}

/// `retain` keeps exactly the live blocks and the store keeps working.
pub fn retain_keeps_live_and_removes_the_rest(name: &str, s: &dyn BlockStore, seed: u64) {
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
}

/// Blocks the writer thread has stored, with their bytes.
type Published = Vec<(Cid, Vec<u8>)>;

/// Sets its flag when dropped, also while unwinding: threads waiting on the
/// flag stop when the thread that owns the guard fails, so a failing
/// scoped test reports its panic instead of hanging in `thread::scope`.
pub struct SetOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// One writer putting 400 blocks while three readers each read
/// `reads_wanted` published blocks back.
pub fn concurrent_readers_with_a_writer(
    name: &str,
    store: Arc<dyn BlockStore>,
    seed: u64,
    reads_wanted: usize,
) {
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
                while reads < reads_wanted {
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

/// `gc::collect_default` keeps published trees and pinned blocks, removes
/// the rest, and its dry run predicts the run.
pub fn gc_default_keeps_published_trees_and_reclaims_the_rest(
    name: &str,
    s: &dyn BlockStore,
    seed: u64,
) {
    use prox_engine::gc;
    use prox_engine::manifest::RootManifest;
    use prox_engine::prolly::{self, Config, Tree};
    use prox_engine::store::Pins;
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
}
