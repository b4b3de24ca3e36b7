//! A search still running at its request's deadline is stopped inside the
//! engine: the client gets 504, the search thread is free again within
//! milliseconds (not when the search would have finished), the expiry is
//! counted once, and the next request is served at once.
//!
//! The map is built so that one exact search is costly while the map stays
//! quick to build: records on the unit sphere around the query (the zero
//! vector), so no bound prunes anything, and a `k` so large that nearly
//! every rescored record is inserted into a long top-k list. Seeded
//! (`PROX_SEED` overrides; the seed is in every failure message).

use prox_engine::index::{QueryMode, Request, Scratch};
use prox_engine::proximity::{ProximityConfig, ProximityMap, Sidecars};
use prox_engine::{BlockStore, MemStore};
use prox_serve::client::Client;
use prox_serve::{Config, MapRegistry, Server, Snapshot};
use prox_testkit::SplitMix64;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DIMS: usize = 16;
const RECORDS: u64 = 40_000;
/// Hits asked of the costly exact search.
const K: usize = 30_000;
/// The server's per-request deadline.
const DEADLINE: Duration = Duration::from_millis(10);

fn seed() -> u64 {
    prox_testkit::seed(0xca4c_e15e)
}

/// `RECORDS` seeded records on the unit sphere, keys 8-byte big-endian.
fn snapshot(s: u64) -> Snapshot {
    let mut r = SplitMix64::new(s);
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let records = (0..RECORDS)
        .map(|i| {
            let v: Vec<f32> = (0..DIMS).map(|_| r.gauss()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            let v = v.iter().map(|x| x / norm).collect();
            (i.to_be_bytes().to_vec(), v, Vec::new())
        })
        .collect();
    let config = ProximityConfig::new(DIMS as u32);
    let descriptor = ProximityMap::build(&*store, &config, records)
        .unwrap()
        .descriptor_cid();
    Snapshot::load(store, descriptor, Sidecars::default()).unwrap()
}

/// The value of the unlabelled metric `name` in a `/metrics` text.
fn metric(text: &str, name: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn a_search_past_its_deadline_stops_and_frees_its_thread() {
    let s = seed();
    let snap = snapshot(s);
    let query = vec![0.0f32; DIMS];

    // What the search costs when nothing stops it: the test means
    // something only if that is far beyond the deadline.
    let req = Request::new(K).mode(QueryMode::Exact);
    let t = Instant::now();
    let full = snap.search(&mut Scratch::default(), &query, &req).unwrap();
    let cost = t.elapsed();
    assert_eq!(full.hits.len(), K, "seed {s}");
    assert!(
        cost >= 5 * DEADLINE,
        "seed {s}: the exact search took only {cost:?}, too little to outlast {DEADLINE:?}"
    );

    let maps = MapRegistry::new();
    maps.publish("m", snap);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = Config {
        search_threads: 1,
        max_k: K,
        deadline: DEADLINE,
        ..Config::default()
    };
    let handle = rt.block_on(Server::start(config, maps)).unwrap();
    let mut c = Client::new(handle.addr()).with_timeout(Duration::from_secs(10));

    let body = json!({"vector": query, "k": K, "mode": "exact"}).to_string();
    let t = Instant::now();
    let r = c.post("/v1/maps/m/search", body.as_bytes()).unwrap();
    assert_eq!(
        r.status,
        504,
        "seed {s}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json().unwrap()["error"]["code"], "deadline_exceeded");

    // The search thread is released long before the search would have
    // ended: `/metrics` is answered off the search pool, so it can watch.
    let freed = loop {
        let text = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
        if metric(&text, "prox_search_running") == 0 {
            break t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "seed {s}: the search still ran after 10 s ({cost:?} uncancelled)"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(
        freed < cost / 2,
        "seed {s}: the thread was freed after {freed:?}, the search costs {cost:?}"
    );

    // The freed thread serves the next request within its deadline.
    let cheap = json!({"vector": vec![0.5f32; DIMS], "k": 3}).to_string();
    let r = c.post("/v1/maps/m/search", cheap.as_bytes()).unwrap();
    assert_eq!(
        r.status,
        200,
        "seed {s}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json().unwrap()["results"].as_array().unwrap().len(), 3);

    let text = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
    assert_eq!(metric(&text, "prox_search_deadline_expired_total"), 1);
    assert_eq!(metric(&text, "prox_search_running"), 0);

    rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), handle.shutdown()).await })
        .expect("shutdown within 10 s")
        .unwrap();
}
