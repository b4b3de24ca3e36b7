//! End-to-end tests of the HTTP API on 127.0.0.1: every endpoint, answers
//! equal to the engine's, the bad-input matrix, snapshot isolation under
//! concurrent swaps, backpressure, deadlines, token auth and root refresh.
//!
//! Maps are small (hundreds of records, 16 dimensions); every loop is
//! bounded and every client call has a timeout. Randomness is seeded
//! (`PROX_SEED` overrides; the seed is printed in failure messages).

use prox_engine::accel::{self, AccelContext, Accelerators, HnswParams, Path, PqParams, Request};
use prox_engine::proximity::search::{Filter, Mode, Preset, SearchRequest};
use prox_engine::proximity::{self, ProximityConfig, ProximityMap, Sidecars};
use prox_engine::{BlockStore, Cid, MemStore};
use prox_serve::client::{Client, Response};
use prox_serve::{Config, MapRegistry, Server, ServerHandle, Snapshot, Source};
use prox_testkit::SplitMix64;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DIMS: usize = 16;

fn seed() -> u64 {
    prox_testkit::seed(0x5e7e_2026)
}

/// Random vectors of `DIMS` components in [-1, 1).
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }
    fn vector(&mut self) -> Vec<f32> {
        (0..DIMS).map(|_| self.0.unit()).collect()
    }
}

/// Builds a map of `n` random records (keys: 8-byte big-endian ids,
/// values `v<i>`) and optionally sidecars; returns its descriptor and
/// sidecars.
fn build(store: &dyn BlockStore, n: u64, seed: u64, hnsw: bool, pq: bool) -> (Cid, Sidecars) {
    let mut rng = Rng::new(seed);
    let records = (0..n)
        .map(|i| {
            (
                i.to_be_bytes().to_vec(),
                rng.vector(),
                format!("v{i}").into_bytes(),
            )
        })
        .collect();
    let map = ProximityMap::build(store, &ProximityConfig::new(DIMS as u32), records).unwrap();
    let d = map.descriptor_cid();
    let hp = HnswParams::default();
    let pp = PqParams::parse("subquantizers=4,centroids=16,iterations=4").unwrap();
    let side = accel::build_sidecars(store, d, hnsw.then_some(&hp), pq.then_some(&pp)).unwrap();
    (
        d,
        Sidecars {
            hnsw: side.hnsw.map(|h| h.manifest_cid),
            pq: side.pq.map(|p| p.manifest_cid),
        },
    )
}

fn publish(store: &dyn BlockStore, name: &str, d: Cid, side: Sidecars) {
    let map = ProximityMap::load(store, d).unwrap();
    proximity::publish(store, name, &map, &side).unwrap();
}

struct Running {
    rt: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
}

impl Running {
    fn start(config: Config, maps: MapRegistry) -> Running {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.block_on(Server::start(config, maps)).unwrap();
        Running {
            rt,
            handle: Some(handle),
        }
    }

    fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().unwrap()
    }

    fn client(&self) -> Client {
        Client::new(self.handle().addr()).with_timeout(Duration::from_secs(20))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let r = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), h.shutdown()).await
            });
            if !std::thread::panicking() {
                assert!(matches!(r, Ok(Ok(()))), "shutdown: {r:?}");
            }
        }
    }
}

fn post_json(c: &mut Client, path: &str, body: &Value) -> (u16, Value) {
    let r = c.post(path, body.to_string().as_bytes()).unwrap();
    (r.status, r.json().unwrap_or(Value::Null))
}

fn keys_scores(v: &Value) -> Vec<(String, f64)> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["key"].as_str().unwrap().to_string(),
                h["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn lib_hits(hits: &[prox_engine::proximity::search::Hit]) -> Vec<(String, f64)> {
    hits.iter()
        .map(|h| (hex::encode(&h.key), h.score))
        .collect()
}

fn served(store: Arc<dyn BlockStore>, config: Config) -> Running {
    Running::start(
        Config {
            source: Some(Source::Store(store)),
            refresh_interval: Duration::from_millis(20),
            ..config
        },
        MapRegistry::new(),
    )
}

#[test]
fn every_endpoint_answers_like_the_library() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d, side) = build(&*store, 600, s, true, true);
    publish(&*store, "m", d, side);
    let srv = served(store.clone(), Config::default());
    let mut c = srv.client();

    let r = c.get("/healthz").unwrap();
    assert_eq!(
        (r.status, r.json().unwrap()["maps"].clone()),
        (200, json!(1))
    );

    let maps = c.get("/v1/maps").unwrap().json().unwrap();
    let m = &maps["maps"][0];
    assert_eq!(m["name"], "m");
    assert_eq!(m["descriptor"], d.to_string());
    assert_eq!(
        (m["count"].clone(), m["dims"].clone()),
        (json!(600), json!(DIMS))
    );
    assert_eq!(m["metric"], "l2");
    assert_eq!(m["sidecars"]["hnsw"], side.hnsw.unwrap().to_string());
    assert_eq!(m["sidecars"]["pq"], side.pq.unwrap().to_string());
    assert_eq!(c.get("/v1/maps/m").unwrap().json().unwrap()["count"], 600);

    let map = ProximityMap::load(&*store, d).unwrap();
    let searcher = map.searcher().unwrap();
    let mut rng = Rng::new(s ^ 1);
    for i in 0..5 {
        let q = rng.vector();
        // Exact, with values and each filter kind, against the native search.
        let filters: Vec<(Value, Option<Filter>)> = vec![
            (Value::Null, None),
            (
                json!({"prefix": "00000000000001"}),
                Some(Filter::Prefix(hex::decode("00000000000001").unwrap())),
            ),
            (
                json!({"range": ["0000000000000010", "0000000000000100"]}),
                Some(Filter::Range {
                    start: hex::decode("0000000000000010").unwrap(),
                    end: Some(hex::decode("0000000000000100").unwrap()),
                }),
            ),
            (
                json!({"keys": ["0000000000000007", "0000000000000003", "00000000000000ff"]}),
                Some(Filter::Keys(
                    vec![
                        3u64.to_be_bytes().to_vec(),
                        7u64.to_be_bytes().to_vec(),
                        255u64.to_be_bytes().to_vec(),
                    ]
                    .into(),
                )),
            ),
        ];
        for (fj, f) in filters {
            let (st, v) = post_json(
                &mut c,
                "/v1/maps/m/search",
                &json!({"vector": q, "k": 7, "mode": "exact", "filter": fj, "with_values": true}),
            );
            assert_eq!(st, 200, "seed {s}: {v}");
            let mut req = SearchRequest::new(7).mode(Mode::Exact).with_values();
            req.filter = f.map(std::borrow::Cow::Owned);
            let lib = searcher.search(&q, &req).unwrap();
            assert_eq!(
                keys_scores(&v),
                lib_hits(&lib.hits),
                "seed {s} query {i} {fj}"
            );
            for (h, l) in v["results"].as_array().unwrap().iter().zip(&lib.hits) {
                assert_eq!(h["value"], hex::encode(l.value.as_ref().unwrap()));
            }
            assert_eq!(
                (v["path"].clone(), v["completion"].clone()),
                (json!("native"), json!("exact"))
            );
            assert_eq!(v["descriptor"], d.to_string());
            assert!(v["took_us"].as_u64().is_some());
        }
        // A native preset.
        let (_, v) = post_json(
            &mut c,
            "/v1/maps/m/search",
            &json!({"vector": q, "k": 5, "mode": "fast"}),
        );
        let lib = searcher
            .search(
                &q,
                &SearchRequest::new(5).mode(Mode::Adaptive(Preset::Fast)),
            )
            .unwrap();
        assert_eq!(keys_scores(&v), lib_hits(&lib.hits), "seed {s}");
        assert!(v["results"][0].get("value").is_none());

        // Auto picks HNSW; the answer equals the sidecar's at the same ef.
        let (_, v) = post_json(
            &mut c,
            "/v1/maps/m/search",
            &json!({"vector": q, "k": 5, "ef": 32}),
        );
        assert_eq!(v["path"], "hnsw", "{v}");
        let (_, recs) = accel::map_records(&*store, d).unwrap();
        let g = accel::SearchGraph::load(
            &*store,
            side.hnsw.unwrap(),
            Some(d),
            map.metric(),
            DIMS,
            &recs,
        )
        .unwrap();
        let acc = Accelerators {
            hnsw: Some((g, 64)),
            pq: None,
        };
        let prepared = proximity::math::prepare(map.metric(), DIMS as u32, &q, None).unwrap();
        let plan = acc
            .planner()
            .plan(&Request {
                mode: accel::Mode::Hnsw,
                k: 5,
                ef: Some(32),
                records: 600,
                ..Request::default()
            })
            .unwrap();
        assert_eq!((plan.path, plan.ef), (Path::Hnsw, 32));
        let out = acc
            .run(&mut AccelContext::default(), plan, &prepared, 5, None)
            .unwrap();
        let lib: Vec<(String, f64)> = out.hits.iter().map(|(k, s)| (hex::encode(k), *s)).collect();
        assert_eq!(keys_scores(&v), lib, "seed {s}");

        let (st, v) = post_json(
            &mut c,
            "/v1/maps/m/search",
            &json!({"vector": q, "k": 5, "path": "pq"}),
        );
        assert_eq!((st, v["path"].clone()), (200, json!("pq")), "{v}");
        assert_eq!(v["results"].as_array().unwrap().len(), 5);
    }

    // Batch: the same answers as one-by-one searches, in order.
    let qs: Vec<Vec<f32>> = (0..9).map(|_| rng.vector()).collect();
    let (st, b) = post_json(
        &mut c,
        "/v1/maps/m/search:batch",
        &json!({"vectors": qs, "k": 4, "mode": "exact"}),
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["descriptor"], d.to_string());
    let results = b["results"].as_array().unwrap();
    assert_eq!(results.len(), 9);
    for (q, r) in qs.iter().zip(results) {
        let lib = searcher
            .search(q, &SearchRequest::new(4).mode(Mode::Exact))
            .unwrap();
        assert_eq!(keys_scores(r), lib_hits(&lib.hits), "seed {s}");
    }

    // Records.
    let r = c
        .get("/v1/maps/m/records/000000000000002a")
        .unwrap()
        .json()
        .unwrap();
    let (vec, val) = map.get(&42u64.to_be_bytes()).unwrap().unwrap();
    assert_eq!(r["value"], hex::encode(val));
    let got: Vec<f32> = r["vector"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(got, vec);
    let r = c.get("/v1/maps/m/records/00000000000fffff").unwrap();
    assert_eq!(
        (r.status, r.json().unwrap()["error"]["field"].clone()),
        (404, json!("key"))
    );

    // Metrics.
    let r = c.get("/metrics").unwrap();
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let text = String::from_utf8(r.body).unwrap();
    assert!(
        text.contains(&format!("prox_map_info{{map=\"m\",descriptor=\"{d}\"")),
        "{text}"
    );
    assert!(
        text.contains("prox_http_requests_total{route=\"/v1/maps/{name}/search\",status=\"200\"}"),
        "{text}"
    );
    assert!(text.contains("prox_http_request_duration_seconds_bucket{route=\"/v1/maps/{name}/search:batch\",le=\"+Inf\"} 1"), "{text}");
    assert!(
        text.contains("prox_http_errors_total{route=\"/v1/maps/{name}/records/{key}\"} 1"),
        "{text}"
    );
    for g in [
        "prox_http_in_flight 1",
        "prox_search_queue_depth 0",
        "prox_map_records{map=\"m\"} 600",
    ] {
        assert!(text.contains(g), "{g} missing: {text}");
    }
}

fn expect(r: Response, status: u16, field: Option<&str>, what: &str) {
    let body = r.json().unwrap_or(Value::Null);
    assert_eq!(r.status, status, "{what}: {body}");
    assert!(body["error"]["message"].is_string(), "{what}: {body}");
    assert_eq!(body["error"]["field"].as_str(), field, "{what}: {body}");
}

#[test]
fn bad_input_gets_4xx_naming_the_field() {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d, side) = build(&*store, 200, seed(), false, false);
    publish(&*store, "m", d, side);
    let srv = served(
        store,
        Config {
            max_k: 50,
            max_body: 4096,
            ..Config::default()
        },
    );
    let mut c = srv.client();
    let good: Vec<f32> = vec![0.5; DIMS];
    let vec_with = |x: &str| {
        let mut parts: Vec<String> = good.iter().map(|v| v.to_string()).collect();
        parts[3] = x.to_string();
        format!("{{\"vector\": [{}]}}", parts.join(","))
    };
    let cases: Vec<(String, &str, u16, Option<&str>)> = vec![
        (
            "{\"vector\": [1,2".into(),
            "/v1/maps/m/search",
            400,
            Some("body"),
        ),
        ("not json".into(), "/v1/maps/m/search", 400, Some("body")),
        ("[]".into(), "/v1/maps/m/search", 400, Some("body")),
        (vec_with("NaN"), "/v1/maps/m/search", 400, Some("body")),
        (vec_with("Infinity"), "/v1/maps/m/search", 400, Some("body")),
        (vec_with("1e39"), "/v1/maps/m/search", 400, Some("vector")),
        (vec_with("-1e300"), "/v1/maps/m/search", 400, Some("vector")),
        (vec_with("\"1\""), "/v1/maps/m/search", 400, Some("vector")),
        (
            "{\"vector\": [1, 2, 3]}".into(),
            "/v1/maps/m/search",
            400,
            Some("vector"),
        ),
        (
            "{\"k\": 3}".into(),
            "/v1/maps/m/search",
            400,
            Some("vector"),
        ),
        (
            json!({"vector": good, "k": 0}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("k"),
        ),
        (
            json!({"vector": good, "k": 51}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("k"),
        ),
        (
            json!({"vector": good, "k": 2.5}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("k"),
        ),
        (
            json!({"vector": good, "mode": "turbo"}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("mode"),
        ),
        (
            json!({"vector": good, "path": "hnsw"}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("path"),
        ),
        (
            json!({"vector": good, "filter": {"keys": "00"}}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("filter.keys"),
        ),
        (
            json!({"vector": good, "filter": {"range": ["00"]}}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("filter.range"),
        ),
        (
            json!({"vector": good, "filter": {"suffix": "00"}}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("filter"),
        ),
        (
            json!({"vector": good, "colour": 1}).to_string(),
            "/v1/maps/m/search",
            400,
            Some("colour"),
        ),
        (
            json!({"vector": good}).to_string(),
            "/v1/maps/nope/search",
            404,
            Some("name"),
        ),
        (
            json!({"vectors": [good, [1.0]]}).to_string(),
            "/v1/maps/m/search:batch",
            400,
            Some("vectors[1]"),
        ),
        (
            json!({"vectors": []}).to_string(),
            "/v1/maps/m/search:batch",
            400,
            Some("vectors"),
        ),
        (
            json!({"vector": good}).to_string(),
            "/v1/maps/m/search:batch",
            400,
            Some("vector"),
        ),
        (
            format!("{{\"vector\": [{}]}}", vec!["0.125"; 2000].join(",")),
            "/v1/maps/m/search",
            413,
            Some("body"),
        ),
    ];
    for (body, path, status, field) in cases {
        let r = c.post(path, body.as_bytes()).unwrap();
        expect(
            r,
            status,
            field,
            &format!("{path} {}", &body[..body.len().min(80)]),
        );
    }
    expect(
        c.get("/v1/maps/m/records/xyz").unwrap(),
        400,
        Some("key"),
        "bad hex key",
    );
    expect(
        c.get("/v1/maps/nope/records/00").unwrap(),
        404,
        Some("name"),
        "unknown map",
    );
    expect(c.get("/v1/nothing").unwrap(), 404, None, "unknown route");
    expect(
        c.get("/v1/maps/m/search").unwrap(),
        405,
        None,
        "wrong method",
    );
    // The server is still healthy after all of it.
    let (st, _) = post_json(&mut c, "/v1/maps/m/search", &json!({"vector": good}));
    assert_eq!(st, 200);
}

#[test]
fn concurrent_clients_see_only_current_descriptors_while_swapping() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let versions: Vec<(Cid, Sidecars)> = (0..4)
        .map(|i| build(&*store, 300, s + i, i % 2 == 0, false))
        .collect();
    let maps = MapRegistry::new();
    let (d0, s0) = versions[0];
    // (generation, descriptor, instant before publish, instant after publish)
    type Log = Vec<(u64, String, Instant, Instant)>;
    let log: Arc<Mutex<Log>> = Arc::new(Mutex::new(Vec::new()));
    let t = Instant::now();
    let g = maps.publish("m", Snapshot::load(store.clone(), d0, s0).unwrap());
    log.lock()
        .unwrap()
        .push((g, d0.to_string(), t, Instant::now()));
    let srv = Running::start(Config::default(), maps.clone());
    let addr = srv.handle().addr();
    let done = Arc::new(AtomicBool::new(false));
    // Highest generation any client has been answered with: the publisher
    // waits for each new one to be seen, so every version is served while
    // requests run however the threads are scheduled.
    let seen_gen = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..32)
        .map(|i| {
            let done = done.clone();
            let seen_gen = seen_gen.clone();
            std::thread::spawn(move || {
                let mut c = Client::new(addr).with_timeout(Duration::from_secs(20));
                let mut rng = Rng::new(s ^ (100 + i));
                let mut seen = Vec::new();
                // Bounded: stops after the swaps or 3000 requests.
                for n in 0..3000 {
                    if done.load(Ordering::SeqCst) && n >= 3 {
                        break;
                    }
                    let body = json!({"vector": rng.vector(), "k": 5}).to_string();
                    let t0 = Instant::now();
                    let r = c.post("/v1/maps/m/search", body.as_bytes());
                    let t1 = Instant::now();
                    if let Some(g) = r
                        .as_ref()
                        .ok()
                        .and_then(|r| r.json().ok()?["generation"].as_u64())
                    {
                        seen_gen.fetch_max(g, Ordering::SeqCst);
                    }
                    seen.push((t0, t1, r.map_err(|e| e.to_string())));
                }
                seen
            })
        })
        .collect();
    for i in 1..=20 {
        std::thread::sleep(Duration::from_millis(15));
        let (d, sc) = versions[i % versions.len()];
        let snap = Snapshot::load(store.clone(), d, sc).unwrap();
        let t = Instant::now();
        let g = maps.publish("m", snap);
        log.lock()
            .unwrap()
            .push((g, d.to_string(), t, Instant::now()));
        let waited = Instant::now();
        while seen_gen.load(Ordering::SeqCst) < g {
            assert!(
                waited.elapsed() < Duration::from_secs(30),
                "seed {s}: no client was answered with generation {g}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let end = Instant::now();
    done.store(true, Ordering::SeqCst);
    let log = log.lock().unwrap().clone();
    let mut total = 0;
    let mut generations = std::collections::BTreeSet::new();
    for c in clients {
        for (t0, t1, r) in c.join().unwrap() {
            let r = r.unwrap_or_else(|e| panic!("seed {s}: request failed: {e}"));
            let v = r.json().unwrap();
            assert_eq!(r.status, 200, "seed {s}: {v}");
            let g = v["generation"].as_u64().unwrap();
            let i = log
                .iter()
                .position(|(lg, _, _, _)| *lg == g)
                .unwrap_or_else(|| panic!("unknown generation {g}"));
            assert_eq!(
                v["descriptor"].as_str().unwrap(),
                log[i].1,
                "generation {g} descriptor"
            );
            // Visible from (at the earliest) just before its publish
            // (log[i].2) until (at the latest) the next publish returned
            // (log[i + 1].3); the request must overlap that. The instant
            // before the next publish is no bound: the publisher can be
            // preempted between reading the clock and swapping.
            assert!(
                log[i].2 <= t1,
                "generation {g} answered before it was published"
            );
            let until = log
                .get(i + 1)
                .map_or(end + Duration::from_secs(3600), |n| n.3);
            assert!(until >= t0, "generation {g} answered after it was replaced");
            generations.insert(g);
            total += 1;
        }
    }
    assert!(total >= 32 * 3, "only {total} requests");
    assert!(
        generations.len() >= 2,
        "requests saw a single version: {generations:?}"
    );
}

#[test]
fn full_queue_answers_503_and_deadlines_cancel() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d, side) = build(&*store, 1500, s, false, false);
    publish(&*store, "m", d, side);
    let srv = served(
        store.clone(),
        Config {
            search_threads: 1,
            queue: 0,
            max_batch: 8192,
            max_body: 16 << 20,
            deadline: Duration::from_secs(20),
            ..Config::default()
        },
    );
    let addr = srv.handle().addr();
    let mut rng = Rng::new(s ^ 7);
    let big: Vec<Vec<f32>> = (0..3000).map(|_| rng.vector()).collect();
    let big = Arc::new(json!({"vectors": big, "k": 10, "mode": "exact"}).to_string());
    let one = json!({"vector": rng.vector()}).to_string();
    let mut c = srv.client();
    let mut got_503 = None;
    // Bounded: a few rounds of "occupy the only thread, then knock".
    for _ in 0..10 {
        let b = big.clone();
        let bg = std::thread::spawn(move || {
            Client::new(addr)
                .with_timeout(Duration::from_secs(30))
                .post("/v1/maps/m/search:batch", b.as_bytes())
                .unwrap()
        });
        // Knock for as long as the batch runs (not a fixed count, which a
        // slow start of the batch's thread could use up before it arrives).
        loop {
            let r = c.post("/v1/maps/m/search", one.as_bytes()).unwrap();
            if r.status == 503 {
                got_503 = Some(r);
                break;
            }
            assert_eq!(r.status, 200);
            if bg.is_finished() {
                break;
            }
        }
        // Either side may be the one turned away.
        let bg = bg.join().unwrap();
        match bg.status {
            503 => got_503 = got_503.or(Some(bg)),
            st => assert_eq!(st, 200),
        }
        if got_503.is_some() {
            break;
        }
    }
    let r = got_503.expect("no 503 while the only search thread was busy");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json().unwrap()["error"]["code"], "overloaded");
    let text = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
    assert!(!text.contains("prox_search_rejected_total 0\n"), "{text}");
    drop(srv);

    // A deadline far below the batch's cost: 504, counted, and the server
    // keeps answering.
    let srv = served(
        store,
        Config {
            search_threads: 1,
            max_batch: 8192,
            max_body: 16 << 20,
            deadline: Duration::from_millis(2),
            ..Config::default()
        },
    );
    let mut c = srv.client();
    let r = c.post("/v1/maps/m/search:batch", big.as_bytes()).unwrap();
    assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap()["error"]["code"], "deadline_exceeded");
    let text = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
    assert!(
        text.contains("prox_search_deadline_expired_total 1\n"),
        "{text}"
    );
}

#[test]
fn token_auth_rejects_missing_and_wrong_tokens() {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d, side) = build(&*store, 100, seed(), false, false);
    publish(&*store, "m", d, side);
    let srv = served(
        store,
        Config {
            token: Some("s3cret-token".into()),
            ..Config::default()
        },
    );
    let addr = srv.handle().addr();
    let body = json!({"vector": vec![0.0; DIMS]}).to_string();
    for path in ["/v1/maps", "/metrics", "/v1/maps/m/records/00"] {
        let r = Client::new(addr).get(path).unwrap();
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        expect(r, 401, Some("authorization"), path);
        let r = Client::new(addr)
            .with_token("s3cret-tokem")
            .get(path)
            .unwrap();
        expect(r, 401, Some("authorization"), path);
    }
    let r = Client::new(addr)
        .post("/v1/maps/m/search", body.as_bytes())
        .unwrap();
    expect(r, 401, Some("authorization"), "search without token");
    let mut ok = Client::new(addr).with_token("s3cret-token");
    assert_eq!(ok.get("/v1/maps").unwrap().status, 200);
    assert_eq!(
        ok.post("/v1/maps/m/search", body.as_bytes())
            .unwrap()
            .status,
        200
    );
    assert_eq!(Client::new(addr).get("/healthz").unwrap().status, 200);
    // Binding beyond loopback needs a token.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(Server::start(
        Config {
            addr: "0.0.0.0:0".parse().unwrap(),
            ..Config::default()
        },
        MapRegistry::new(),
    ));
    assert!(
        matches!(r, Err(prox_serve::Error::TokenRequired { .. })),
        "{r:?}"
    );
}

fn wait_for(c: &mut Client, what: &str, ok: impl Fn(&Value) -> bool) {
    let t = Instant::now();
    loop {
        let v = c.get("/v1/maps").unwrap().json().unwrap();
        if ok(&v) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn refresh_follows_roots_in_a_shared_store() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d1, s1) = build(&*store, 120, s, false, false);
    let (d2, s2) = build(&*store, 130, s + 1, true, false);
    publish(&*store, "a", d1, s1);
    let srv = served(store.clone(), Config::default());
    let mut c = srv.client();
    assert_eq!(
        c.get("/v1/maps/a").unwrap().json().unwrap()["descriptor"],
        d1.to_string()
    );
    publish(&*store, "a", d2, s2);
    publish(&*store, "b", d1, s1);
    let (d2s, d1s) = (d2.to_string(), d1.to_string());
    wait_for(&mut c, "the new root", |v| {
        let m = v["maps"].as_array().unwrap();
        m.len() == 2 && m[0]["descriptor"] == d2s.as_str() && m[1]["descriptor"] == d1s.as_str()
    });
    let v = c.get("/v1/maps/a").unwrap().json().unwrap();
    assert_eq!(v["sidecars"]["hnsw"], s2.hnsw.unwrap().to_string());
    store.set_root("b", None).unwrap();
    wait_for(&mut c, "the removal", |v| {
        v["maps"].as_array().unwrap().len() == 1
    });
}

#[test]
fn refresh_reopens_a_store_directory_written_by_another_writer() {
    let s = seed();
    let dir = tempfile::tempdir().unwrap();
    let (d1, d2) = {
        let w = prox_engine::MmapStore::open(dir.path()).unwrap();
        let (d1, s1) = build(&w, 100, s, false, false);
        let (d2, _) = build(&w, 110, s + 1, false, false);
        publish(&w, "docs", d1, s1);
        (d1, d2)
    };
    let srv = Running::start(
        Config {
            source: Some(Source::Directory(dir.path().to_path_buf())),
            refresh_interval: Duration::from_millis(20),
            ..Config::default()
        },
        MapRegistry::new(),
    );
    let mut c = srv.client();
    assert_eq!(
        c.get("/v1/maps/docs").unwrap().json().unwrap()["descriptor"],
        d1.to_string()
    );
    {
        let w = prox_engine::MmapStore::open(dir.path()).unwrap();
        publish(&w, "docs", d2, Sidecars::default());
    }
    let d2s = d2.to_string();
    wait_for(&mut c, "the rewritten ROOTS", |v| {
        v["maps"][0]["descriptor"] == d2s.as_str()
    });
    let (st, v) = post_json(
        &mut c,
        "/v1/maps/docs/search",
        &json!({"vector": vec![0.1; DIMS], "k": 3}),
    );
    assert_eq!((st, v["descriptor"].clone()), (200, json!(d2s)));
}

/// Waits (10 s at most) until the names of this process's threads
/// (Linux: /proc) satisfy `ok`; a new thread names itself once it runs.
#[cfg(target_os = "linux")]
fn wait_threads(what: &str, ok: impl Fn(&[String]) -> bool) {
    let t = Instant::now();
    loop {
        let names: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|n| n.trim().to_string())
            .collect();
        if ok(&names) {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{what}: {names:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn connection_threads_answer_like_the_caller_runtime_and_stop() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d, side) = build(&*store, 400, s, true, false);
    publish(&*store, "m", d, side);
    let plain = served(store.clone(), Config::default());
    let threaded = served(
        store,
        Config {
            connection_threads: 2,
            ..Config::default()
        },
    );
    #[cfg(target_os = "linux")]
    wait_threads("two connection threads", |n| {
        ["prox-http-0", "prox-http-1"]
            .iter()
            .all(|w| n.iter().any(|n| n == w))
    });
    let mut rng = Rng::new(s ^ 11);
    let queries: Arc<Vec<Value>> = Arc::new(
        (0..8)
            .map(|_| json!({"vector": rng.vector(), "k": 5}))
            .collect(),
    );
    let mut c = plain.client();
    let want: Arc<Vec<Vec<(String, f64)>>> = Arc::new(
        queries
            .iter()
            .map(|q| {
                let (st, v) = post_json(&mut c, "/v1/maps/m/search", q);
                assert_eq!(st, 200, "{v}");
                keys_scores(&v)
            })
            .collect(),
    );
    // Six connections at once: handed out in turn, both threads serve some.
    let addr = threaded.handle().addr();
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let (queries, want) = (queries.clone(), want.clone());
            std::thread::spawn(move || {
                let mut c = Client::new(addr).with_timeout(Duration::from_secs(20));
                for round in 0..10 {
                    let j = (i + round) % queries.len();
                    let (st, v) = post_json(&mut c, "/v1/maps/m/search", &queries[j]);
                    assert_eq!(st, 200, "{v}");
                    assert_eq!(keys_scores(&v), want[j], "query {j} on connection {i}");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    // An idle keep-alive connection does not hold up the shutdown.
    let mut idle = threaded.client();
    let (st, _) = post_json(&mut idle, "/v1/maps/m/search", &queries[0]);
    assert_eq!(st, 200);
    let text = String::from_utf8(idle.get("/metrics").unwrap().body).unwrap();
    assert!(text.contains("prox_search_queries_total 61\n"), "{text}");
    drop(threaded); // shuts down within 10 s, or the drop fails the test
    #[cfg(target_os = "linux")]
    wait_threads("connection threads gone", |n| {
        !n.iter().any(|n| n.starts_with("prox-http"))
    });
    drop(plain);
}

#[test]
fn openapi_document_is_open_and_names_exactly_the_routed_operations() {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d, side) = build(&*store, 50, seed(), false, false);
    publish(&*store, "m", d, side);
    let srv = served(
        store,
        Config {
            token: Some("read-token".into()),
            write_token: Some("write-token".into()),
            max_k: 77,
            ..Config::default()
        },
    );
    let addr = srv.handle().addr();
    // No token needed for the document, as for /healthz.
    let r = Client::new(addr).get("/openapi.json").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let doc = r.json().unwrap();
    assert_eq!(doc["openapi"], "3.0.3");
    let k = &doc["components"]["schemas"]["SearchRequest"]["properties"]["k"];
    assert_eq!(k["maximum"], 77, "the document states this server's max_k");
    // Every documented operation is routed: with the write token it gets
    // an answer of its own, never the endpoint 404 or a 405.
    let mut c = Client::new(addr).with_token("write-token");
    let mut ops = 0;
    for (path, methods) in doc["paths"].as_object().unwrap() {
        let concrete = path.replace("{name}", "m").replace("{key}", "00");
        for (method, op) in methods.as_object().unwrap() {
            let m = method.to_ascii_uppercase();
            let body = (m == "POST" || m == "PUT").then_some(&b"{}"[..]);
            let r = c.request(&m, &concrete, body).unwrap();
            let code = r.json().ok().map(|v| v["error"]["code"].clone());
            assert_ne!(r.status, 405, "{m} {path}");
            assert!(
                !(r.status == 404 && code == Some(json!("not_found")) && !path.contains("{key}")),
                "{m} {path} is documented but not routed"
            );
            let documented = op["responses"]
                .as_object()
                .unwrap()
                .contains_key(&r.status.to_string());
            assert!(documented, "{m} {path} answered {} undocumented", r.status);
            ops += 1;
        }
    }
    assert_eq!(ops, 12);
    // A route that is not documented is not served.
    assert_eq!(c.get("/v1/nothing").unwrap().status, 404);
}

#[test]
fn binary_bodies_answer_like_json_bodies() {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d, side) = build(&*store, 200, seed(), false, false);
    publish(&*store, "m", d, side);
    let srv = served(store, Config::default());
    let mut c = srv.client();
    let mut rng = Rng::new(seed() ^ 0xb1);
    let rows: Vec<Vec<f32>> = (0..3).map(|_| rng.vector()).collect();
    let le = |rs: &[Vec<f32>]| -> Vec<u8> {
        rs.iter().flatten().flat_map(|x| x.to_le_bytes()).collect()
    };
    let octet = [("Content-Type", "application/octet-stream")];
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("took_us");
        v
    };
    // One vector, options in the query string (filter percent-encoded).
    let (s, json_answer) = post_json(
        &mut c,
        "/v1/maps/m/search",
        &json!({"vector": rows[0], "k": 5, "with_values": true, "mode": "exact",
                "filter": {"range": ["00", null]}}),
    );
    assert_eq!(s, 200, "{json_answer} (seed {})", seed());
    let path = "/v1/maps/m/search?k=5&with_values=true&mode=exact\
                &filter=%7B%22range%22%3A%5B%2200%22%2Cnull%5D%7D";
    let r = c
        .request_with("POST", path, Some(&le(&rows[..1])), &octet)
        .unwrap();
    assert_eq!(r.status, 200, "{:?} (seed {})", r.json(), seed());
    assert_eq!(strip(r.json().unwrap()), strip(json_answer));
    // A batch of three rows.
    let (s, json_batch) = post_json(
        &mut c,
        "/v1/maps/m/search:batch",
        &json!({"vectors": rows, "k": 4}),
    );
    assert_eq!(s, 200);
    let r = c
        .request_with(
            "POST",
            "/v1/maps/m/search:batch?k=4",
            Some(&le(&rows)),
            &octet,
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(strip(r.json().unwrap()), strip(json_batch));
    // Bad binary requests name the body or the option.
    let one = le(&rows[..1]);
    let short = &one[..DIMS * 4 - 4];
    let bad: [(&str, &[u8], &str); 4] = [
        ("/v1/maps/m/search", short, "body"),
        ("/v1/maps/m/search:batch", short, "body"),
        ("/v1/maps/m/search?k=0", &one, "k"),
        ("/v1/maps/m/search?colour=red", &one, "colour"),
    ];
    for (path, body, field) in bad {
        let r = c.request_with("POST", path, Some(body), &octet).unwrap();
        expect(r, 400, Some(field), path);
    }
    let nan: Vec<u8> = one
        .iter()
        .enumerate()
        .map(|(i, b)| if i < 4 { f32::NAN.to_le_bytes()[i] } else { *b })
        .collect();
    let r = c
        .request_with("POST", "/v1/maps/m/search", Some(&nan), &octet)
        .unwrap();
    assert_eq!(r.json().unwrap()["error"]["code"], "not_finite");
    // With a JSON body, a query-string option replaces the body's.
    let body = json!({"vector": rows[0], "k": 9}).to_string();
    let r = c.post("/v1/maps/m/search?k=3", body.as_bytes()).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json().unwrap()["results"].as_array().unwrap().len(), 3);
    let r = c.post("/v1/maps/m/search?k=0", body.as_bytes()).unwrap();
    expect(r, 400, Some("k"), "JSON body with a bad query option");
}

/// Payload field filters over HTTP: search and batch search take them,
/// answer exactly the matching records, and an unknown field or a type
/// mismatch is a 400 naming `filter`; the OpenAPI document lists the
/// indexed field; `Index::change_field_indexes` + commit is picked up by
/// the refresh although the descriptor is unchanged.
#[test]
fn payload_field_filters() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut rng = Rng::new(s);
    let records = (0..200u64)
        .map(|i| {
            let lang = ["en", "fr"][(i % 2) as usize];
            let p = json!({"lang": lang, "year": 2000 + (i % 30) as i64});
            (
                i.to_be_bytes().to_vec(),
                rng.vector(),
                p.to_string().into_bytes(),
            )
        })
        .collect();
    let mut b = prox_engine::index::Build::new(DIMS as u32);
    b.indexes = vec!["lang:keyword".parse().unwrap()];
    prox_engine::index::build(&*store, Some("m"), &b, records).unwrap();
    let srv = served(store.clone(), Config::default());
    let mut c = srv.client();
    let v = rng.vector();
    let en: Vec<String> = (0..200u64)
        .filter(|i| i.is_multiple_of(2))
        .map(|i| hex::encode(i.to_be_bytes()))
        .collect();
    let f = json!({"key": "lang", "match": {"value": "en"}});
    let (st, body) = post_json(
        &mut c,
        "/v1/maps/m/search",
        &json!({"vector": v, "k": 150, "filter": f}),
    );
    assert_eq!(st, 200, "seed {s:#x}: {body}");
    let mut got: Vec<String> = keys_scores(&body).into_iter().map(|(k, _)| k).collect();
    got.sort();
    assert_eq!(
        got, en,
        "seed {s:#x}: exactly the en records, never under-filled"
    );
    let (st, body) = post_json(
        &mut c,
        "/v1/maps/m/search:batch",
        &json!({"vectors": [v, v], "k": 5, "filter": {"must_not": f}}),
    );
    assert_eq!(st, 200, "{body}");
    for a in body["results"].as_array().unwrap() {
        assert_eq!(a["results"].as_array().unwrap().len(), 5);
    }
    for bad in [
        json!({"key": "year", "range": {"gte": 2010}}),
        json!({"key": "lang", "match": {"value": 3}}),
    ] {
        let (st, body) = post_json(
            &mut c,
            "/v1/maps/m/search",
            &json!({"vector": v, "k": 3, "filter": bad}),
        );
        assert_eq!(st, 400, "{bad}: {body}");
        assert_eq!(body["error"]["field"], "filter", "{body}");
    }
    let doc = c.get("/openapi.json").unwrap().json().unwrap();
    let any = doc["components"]["schemas"]["Filter"]["anyOf"].to_string();
    assert!(
        any.contains("\"lang\""),
        "document lists the indexed field: {any}"
    );

    let mut ix = prox_engine::Index::open(store.clone(), "m", &Default::default()).unwrap();
    ix.change_field_indexes(&["year:integer".parse().unwrap()], &[])
        .unwrap();
    ix.commit("m", Some(ix.descriptor())).unwrap();
    let t = Instant::now();
    loop {
        let (st, _) = post_json(
            &mut c,
            "/v1/maps/m/search",
            &json!({"vector": v, "k": 3, "filter": {"key": "year", "range": {"gte": 2010}}}),
        );
        if st == 200 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "refresh never loaded the new index"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn recall_targets_run_the_profiled_setting_and_say_which() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (d, side) = build(&*store, 800, s, true, true);
    publish(&*store, "m", d, side);
    // Before a profile: no `recall` in the contract, and a 400 naming it.
    let srv = served(store.clone(), Config::default());
    let mut c = srv.client();
    let doc = c.get("/openapi.json").unwrap().json().unwrap();
    assert!(doc["components"]["schemas"]["SearchRequest"]["properties"]
        .get("recall")
        .is_none());
    let q = Rng::new(s ^ 9).vector();
    let (status, body) = post_json(
        &mut c,
        "/v1/maps/m/search",
        &json!({"vector": q, "recall": 0.9}),
    );
    assert_eq!(
        (status, body["error"]["field"].clone()),
        (400, json!("recall"))
    );
    drop(srv);

    let ix = prox_engine::Index::open(store.clone(), "m", &Default::default()).unwrap();
    let p = ix.measure_profile(100).unwrap();
    ix.publish_profile("m", &p).unwrap();
    let ix = prox_engine::Index::open(store.clone(), "m", &Default::default()).unwrap();
    let srv = served(store.clone(), Config::default());
    let mut c = srv.client();
    let doc = c.get("/openapi.json").unwrap().json().unwrap();
    assert_eq!(
        doc["components"]["schemas"]["SearchRequest"]["properties"]["recall"]["maximum"],
        json!(1)
    );
    for target in [0.5, 0.9, 0.99] {
        let (status, body) = post_json(
            &mut c,
            "/v1/maps/m/search",
            &json!({"vector": q, "k": 10, "recall": target}),
        );
        assert_eq!(status, 200, "{body}");
        let chosen = ix.choose(target).unwrap();
        assert_eq!(body["tuned"]["setting"], json!(chosen.setting.to_string()));
        assert_eq!(body["tuned"]["reached"], json!(true));
        assert_eq!(body["path"], json!(chosen.setting.path.name()));
        // The same hits as the library's recall request.
        let mut sc = prox_engine::index::Scratch::default();
        let lib = ix
            .search(
                &mut sc,
                &q,
                &prox_engine::index::Request::new(10).recall(target),
            )
            .unwrap();
        let want: Vec<(String, f64)> = lib
            .hits
            .iter()
            .map(|h| (hex::encode(&h.key), h.score))
            .collect();
        assert_eq!(keys_scores(&body), want, "seed {s}");
    }
    // In a batch, and refused with the knobs it sets itself.
    let (status, body) = post_json(
        &mut c,
        "/v1/maps/m/search:batch",
        &json!({"vectors": [q, q], "recall": 0.9}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body["results"][1]["tuned"]["setting"].is_string());
    for bad in [
        json!({"vector": q, "recall": 1.5}),
        json!({"vector": q, "recall": "high"}),
        json!({"vector": q, "recall": 0.9, "path": "hnsw"}),
        json!({"vector": q, "recall": 0.9, "ef": 40}),
    ] {
        let (status, body) = post_json(&mut c, "/v1/maps/m/search", &bad);
        assert_eq!(
            (status, body["error"]["field"].clone()),
            (400, json!("recall")),
            "{bad}"
        );
    }
}
