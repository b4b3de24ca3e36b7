//! `CachedStore`: the generic suite through a cache small enough to evict
//! all the time (over MemStore, so it runs without a server, and over S3),
//! and the cache's own bound.

use crate::store_suite as suite;
use crate::support::server;
use prox_engine::{BlockStore, Cid, MemStore};
use prox_s3::CachedStore;
use std::sync::Arc;

fn seed() -> u64 {
    prox_testkit::seed(0x5eed_00ca)
}

/// Every suite behaviour on `make()`'s fresh stores.
fn run_suite<S: BlockStore + 'static>(name: &str, make: impl Fn() -> S) {
    suite::get_put_has_and_batches(name, &make(), seed());
    suite::verified_puts_store_blocks_hashed_once(name, &make(), seed());
    suite::roots_set_get_list_and_cas(name, &make());
    suite::retain_keeps_live_and_removes_the_rest(name, &make(), seed());
    suite::concurrent_readers_with_a_writer(name, Arc::new(make()), seed(), 300);
    suite::gc_default_keeps_published_trees_and_reclaims_the_rest(name, &make(), seed());
}

#[test]
fn suite_through_a_small_cache_over_memory() {
    let dir = tempfile::tempdir().unwrap();
    let n = std::sync::atomic::AtomicUsize::new(0);
    run_suite("cached-mem", || {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        CachedStore::open(MemStore::new(), dir.path().join(i.to_string()), 64 * 1024).unwrap()
    });
}

#[test]
fn suite_through_a_small_cache_over_s3() {
    let Some(srv) = server("cached_s3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = std::sync::atomic::AtomicUsize::new(0);
    run_suite("cached-s3", || {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        CachedStore::open(
            srv.store("cached"),
            dir.path().join(i.to_string()),
            64 * 1024,
        )
        .unwrap()
    });
}

#[test]
fn the_cache_stays_within_its_bound_and_serves_hits_locally() {
    let dir = tempfile::tempdir().unwrap();
    let max = 100 * 1024;
    let store = CachedStore::open(MemStore::new(), dir.path(), max).unwrap();
    let blocks: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_le_bytes().repeat(256)).collect();
    let cids: Vec<Cid> = blocks.iter().map(|b| store.put(b).unwrap()).collect();
    assert!(store.cached_bytes() <= max, "{}", store.cached_bytes());
    for (b, c) in blocks.iter().zip(&cids) {
        assert_eq!(store.get(c).unwrap().as_deref(), Some(b.as_slice()));
        assert!(store.cached_bytes() <= max);
    }
    // The most recent reads are hits: the remote can lose them and they
    // are still served (from the cache).
    let recent = &cids[190..];
    store.remote().retain(&Default::default()).unwrap();
    for c in recent {
        assert!(store.get(c).unwrap().is_some(), "{c} was not cached");
    }
    // Reopened, the cache keeps its blocks and its bound.
    drop(store);
    let again = CachedStore::open(MemStore::new(), dir.path(), max).unwrap();
    assert!(again.cached_bytes() > 0 && again.cached_bytes() <= max);
    assert!(again.get(&recent[9]).unwrap().is_some());
}

#[test]
fn a_warm_cache_sends_no_block_gets() {
    let Some(srv) = server("cache_warm") else {
        return;
    };
    let remote = srv.store("cache_warm");
    let blocks: Vec<Vec<u8>> = (0..40u32).map(|i| i.to_le_bytes().repeat(64)).collect();
    let refs: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
    let cids = remote.put_many(&refs).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cold = CachedStore::open(remote, dir.path(), 1 << 20).unwrap();
    let got = cold.get_many(&cids).unwrap();
    assert!(got
        .iter()
        .zip(&blocks)
        .all(|(g, b)| g.as_deref() == Some(b.as_slice())));
    assert_eq!(cold.remote().requests().block_gets, cids.len() as u64);
    drop(cold);
    // A new process on the same cache directory: every block is local.
    let warm = CachedStore::open(srv.store("cache_warm_2"), dir.path(), 1 << 20).unwrap();
    let again = warm.get_many(&cids).unwrap();
    assert_eq!(again, got, "the cache answers with the same bytes");
    assert_eq!(
        warm.remote().requests().block_gets,
        0,
        "no GET on a warm cache"
    );
}
