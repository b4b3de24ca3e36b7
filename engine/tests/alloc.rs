//! A query allocates nothing in steady state: with one reused [`Scratch`]
//! and [`Response`], `Index::search_into` makes no heap allocation on any
//! path (native exact, budgeted and adaptive, HNSW, PQ) for any metric,
//! once the buffers have grown to their working size.
//!
//! Its own test binary because it installs a counting global allocator;
//! the count is per thread, so the test harness's other threads do not
//! disturb it.

use prox_engine::accel::{self, HnswParams, PqParams};
use prox_engine::index::{Index, Options, PathChoice, QueryMode, Request, Response, Scratch};
use prox_engine::proximity::{ProximityConfig, ProximityMap, Sidecars};
use prox_engine::{BlockStore, MemStore};
use prox_kernels::Metric;
use prox_testkit::{seed, SplitMix64};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

/// The system allocator, counting this thread's allocations while
/// [`COUNTING`] is set.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    // `try_with`: the allocator also runs while thread-locals are torn down.
    let _ = COUNTING.try_with(|c| {
        if c.get() {
            let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        }
    });
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees are this allocator's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(|a| a.get())
}

const DIMS: usize = 16;
const RECORDS: u64 = 3000;

/// A seeded map of `metric` with both sidecars, opened as an index.
fn index(metric: Metric, s: u64) -> Index {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut rng = SplitMix64::new(s);
    let records = (0..RECORDS)
        .map(|i| {
            let v: Vec<f32> = (0..DIMS).map(|_| rng.unit()).collect();
            (i.to_be_bytes().to_vec(), v, vec![i as u8])
        })
        .collect();
    let mut config = ProximityConfig::new(DIMS as u32);
    config.metric = metric;
    let map = ProximityMap::build(&*store, &config, records).unwrap();
    let d = map.descriptor_cid();
    let pq = PqParams::parse("subquantizers=4,centroids=16,iterations=4").unwrap();
    let built = accel::build_sidecars(&*store, d, Some(&HnswParams::default()), Some(&pq)).unwrap();
    let sidecars = Sidecars {
        hnsw: built.hnsw.map(|h| h.manifest_cid),
        pq: built.pq.map(|p| p.manifest_cid),
    };
    Index::load(store, d, sidecars, &Options::default()).unwrap()
}

#[test]
fn steady_state_queries_allocate_nothing() {
    let s = seed(0xA110C);
    let requests = [
        ("native exact", Request::new(10).mode(QueryMode::Exact)),
        ("native budget", Request::new(10).budget(500)),
        (
            "native fast",
            Request::new(10)
                .mode(QueryMode::Fast)
                .path(PathChoice::Native),
        ),
        (
            "native high",
            Request::new(10)
                .mode(QueryMode::High)
                .path(PathChoice::Native),
        ),
        ("hnsw", Request::new(10).path(PathChoice::Hnsw)),
        ("pq", Request::new(10).path(PathChoice::Pq)),
    ];
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        let ix = index(metric, s);
        let mut rng = SplitMix64::new(s ^ 0x51);
        let queries: Vec<Vec<f32>> = (0..40)
            .map(|_| (0..DIMS).map(|_| rng.unit()).collect())
            .collect();
        for (name, req) in &requests {
            let mut scratch = Scratch::default();
            let mut out = Response::default();
            // Warm-up: the buffers grow to the largest size these queries
            // need.
            for q in &queries {
                ix.search_into(&mut scratch, q, req, &mut out).unwrap();
            }
            let mut hits = 0;
            let n = allocations(|| {
                for q in &queries {
                    ix.search_into(&mut scratch, q, req, &mut out).unwrap();
                    hits += out.hits.len();
                }
            });
            // A budget may stop before k hits; every other path fills k.
            let want = if name.contains("budget") {
                queries.len()
            } else {
                10 * queries.len()
            };
            assert!(
                hits >= want,
                "{metric:?} {name}: {hits} hits, want >= {want}"
            );
            assert_eq!(
                n,
                0,
                "{metric:?} {name}: {n} allocations in {} warm queries (seed {s:#x})",
                queries.len()
            );
            // The reused answer equals a fresh one.
            let fresh = ix
                .search(&mut Scratch::default(), &queries[0], req)
                .unwrap();
            ix.search_into(&mut scratch, &queries[0], req, &mut out)
                .unwrap();
            assert_eq!(fresh, out, "{metric:?} {name}: reused answer differs");
        }
    }
}
