//! The write endpoints end to end on 127.0.0.1: upserts and deletes keep
//! the sidecars and give the descriptor of a fresh build, the 200 comes
//! after the root moved, `If-Match` and the write token are enforced, bad
//! input changes nothing, creating and dropping maps, and concurrent
//! writers serialize without losing a write.
//!
//! Small maps (16 dimensions, a few hundred records); every loop is
//! bounded and every client call has a timeout.

use prox_engine::accel::{self, HnswParams, PqParams};
use prox_engine::proximity::{self, ProximityConfig, ProximityMap, Sidecars};
use prox_engine::{BlockStore, Cid, MemStore};
use prox_serve::client::Client;
use prox_serve::{Config, MapRegistry, Server, ServerHandle, Source};
use prox_testkit::SplitMix64;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const DIMS: usize = 16;
const WRITE: &str = "w-token";

fn vector(rng: &mut SplitMix64) -> Vec<f32> {
    (0..DIMS).map(|_| rng.unit()).collect()
}

fn records(n: u64, seed: u64) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|i| (i.to_be_bytes().to_vec(), vector(&mut rng), vec![i as u8]))
        .collect()
}

/// A store holding map `m` (300 records, fast HNSW and PQ sidecars).
fn store_with_map() -> Arc<MemStore> {
    let store = Arc::new(MemStore::new());
    let map =
        ProximityMap::build(&*store, &ProximityConfig::new(DIMS as u32), records(300, 7)).unwrap();
    let d = map.descriptor_cid();
    let pp = PqParams::parse("subquantizers=4,centroids=16,iterations=4").unwrap();
    let side = accel::build_sidecars(&*store, d, Some(&HnswParams::default()), Some(&pp)).unwrap();
    let side = Sidecars {
        hnsw: side.hnsw.map(|h| h.manifest_cid),
        pq: side.pq.map(|p| p.manifest_cid),
    };
    proximity::publish(&*store, "m", &map, &side).unwrap();
    store
}

struct Running {
    rt: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
}

impl Running {
    fn start(store: Arc<MemStore>, write_token: Option<&str>) -> Running {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let config = Config {
            write_token: write_token.map(str::to_string),
            source: Some(Source::Store(store)),
            deadline: Duration::from_secs(20),
            ..Config::default()
        };
        let handle = rt
            .block_on(Server::start(config, MapRegistry::new()))
            .unwrap();
        Running {
            rt,
            handle: Some(handle),
        }
    }

    fn client(&self, token: Option<&str>) -> Client {
        let c =
            Client::new(self.handle.as_ref().unwrap().addr()).with_timeout(Duration::from_secs(20));
        match token {
            Some(t) => c.with_token(t),
            None => c,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), h.shutdown()).await
            });
        }
    }
}

fn send(
    c: &mut Client,
    method: &str,
    path: &str,
    body: &Value,
    h: &[(&str, &str)],
) -> (u16, Value) {
    let b = body.to_string();
    let r = c.request_with(method, path, Some(b.as_bytes()), h).unwrap();
    (r.status, r.json().unwrap_or(Value::Null))
}

fn root(store: &dyn BlockStore, name: &str) -> Option<Cid> {
    proximity::resolve(store, name).unwrap().map(|r| r.0)
}

fn point(key: u64, v: &[f32]) -> Value {
    json!({"key": hex::encode(key.to_be_bytes()), "vector": v, "value": "ab"})
}

#[test]
fn upserts_and_deletes_keep_sidecars_and_equal_a_fresh_build() {
    let store = store_with_map();
    let srv = Running::start(store.clone(), Some(WRITE));
    let mut c = srv.client(Some(WRITE));
    let mut rng = SplitMix64::new(99);
    let new: Vec<(u64, Vec<f32>)> = (1000..1010).map(|k| (k, vector(&mut rng))).collect();
    let points: Vec<Value> = new.iter().map(|(k, v)| point(*k, v)).collect();
    let (s, v) = send(
        &mut c,
        "POST",
        "/v1/maps/m/points:upsert",
        &json!({"points": points}),
        &[],
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["inserted"], 10);
    assert_eq!(v["hnsw"], "updated");
    assert_eq!(v["pq"], "updated");
    let d1: Cid = v["descriptor"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        root(&*store, "m"),
        Some(d1),
        "the 200 comes after the root moved"
    );

    let keys: Vec<String> = (0..5u64).map(|k| hex::encode(k.to_be_bytes())).collect();
    let (s, v) = send(
        &mut c,
        "POST",
        "/v1/maps/m/points:delete",
        &json!({"keys": keys}),
        &[],
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["deleted"], 5);
    let d2: Cid = v["descriptor"].as_str().unwrap().parse().unwrap();
    assert_eq!(root(&*store, "m"), Some(d2));

    // The next request reads the new snapshot: the inserted vector is its
    // own nearest neighbour, through the HNSW sidecar and natively.
    for path in ["hnsw", "native"] {
        let q = json!({"vector": new[3].1, "k": 1, "path": path, "ef": 64});
        let (s, v) = send(&mut c, "POST", "/v1/maps/m/search", &q, &[]);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["descriptor"], d2.to_string());
        assert_eq!(
            v["results"][0]["key"],
            hex::encode(1003u64.to_be_bytes()),
            "{path}: {v}"
        );
    }
    let r = c
        .get(&format!(
            "/v1/maps/m/records/{}",
            hex::encode(2u64.to_be_bytes())
        ))
        .unwrap();
    assert_eq!(r.status, 404);

    // Byte-identical to a fresh build of the final record set.
    let mut fin: Vec<_> = records(300, 7).into_iter().skip(5).collect();
    fin.extend(
        new.iter()
            .map(|(k, v)| (k.to_be_bytes().to_vec(), v.clone(), vec![0xab])),
    );
    let fresh = MemStore::new();
    let m = ProximityMap::build(&fresh, &ProximityConfig::new(DIMS as u32), fin).unwrap();
    assert_eq!(m.descriptor_cid(), d2);
}

#[test]
fn if_match_and_tokens_are_enforced_and_bad_input_changes_nothing() {
    let store = store_with_map();
    let d0 = root(&*store, "m").unwrap();
    let srv = Running::start(store.clone(), Some(WRITE));
    let one = json!({"points": [point(5000, &[0.5; DIMS])]});
    let up = "/v1/maps/m/points:upsert";
    let (s, v) = send(&mut srv.client(None), "POST", up, &one, &[]);
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let (s, _) = send(&mut srv.client(Some("nope")), "POST", up, &one, &[]);
    assert_eq!(s, 401);

    let mut c = srv.client(Some(WRITE));
    let stale = Cid::of(b"not the descriptor").to_string();
    let (s, v) = send(
        &mut c,
        "POST",
        up,
        &one,
        &[("If-Match", &format!("\"{stale}\""))],
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (412, Some("precondition_failed"))
    );
    let bad = [
        (json!({"points": []}), "invalid_field"),
        (json!({"points": [point(1, &[0.5; 3])]}), "wrong_dimension"),
        (
            json!({"points": [{"key": "zz", "vector": vec![0.0f32; DIMS]}]}),
            "invalid_field",
        ),
        (
            json!({"points": [point(9, &[0.1; DIMS])], "extra": 1}),
            "bad_body",
        ),
        (
            json!({"points": [point(9, &[0.1; DIMS])], "canonical_hnsw": "maybe"}),
            "invalid_field",
        ),
        (
            json!({"points": [{"key": "00", "vector": vec![1e39f64; DIMS]}]}),
            "bad_body",
        ),
    ];
    for (body, code) in bad {
        let (s, v) = send(&mut c, "POST", up, &body, &[]);
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}: {v}"
        );
    }
    let octet = [("Content-Type", "application/octet-stream")];
    let r = c
        .request_with("POST", up, Some(&[0u8; 64]), &octet)
        .unwrap();
    let v: Value = r.json().unwrap();
    assert_eq!(
        (r.status, v["error"]["field"].as_str()),
        (400, Some("keys")),
        "a binary upsert without keys: {v}"
    );
    let r = c
        .request_with("POST", "/v1/maps/m/points:delete", Some(&[0u8; 8]), &octet)
        .unwrap();
    assert_eq!(r.status, 415, "deletes are JSON only");
    assert_eq!(
        root(&*store, "m"),
        Some(d0),
        "no rejected write moved the root"
    );

    let (s, v) = send(&mut c, "POST", up, &one, &[("If-Match", &d0.to_string())]);
    assert_eq!(s, 200, "{v}");
    let r = c
        .get(&format!(
            "/v1/maps/m/records/{}",
            hex::encode(5000u64.to_be_bytes())
        ))
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json().unwrap()["value"], "ab");

    // A key twice in one upsert keeps its last point; twice in a delete,
    // it is deleted once.
    let twice = json!({"points": [point(9_000_000, &[0.1; DIMS]),
        {"key": hex::encode(9_000_000u64.to_be_bytes()), "vector": vec![0.25f32; DIMS], "value": "cd"}]});
    let (s, v) = send(&mut c, "POST", up, &twice, &[]);
    assert_eq!((s, &v["inserted"]), (200, &json!(1)), "{v}");
    let rec = format!(
        "/v1/maps/m/records/{}",
        hex::encode(9_000_000u64.to_be_bytes())
    );
    let r = c.get(&rec).unwrap().json().unwrap();
    assert_eq!((&r["value"], &r["vector"][0]), (&json!("cd"), &json!(0.25)));
    let key = hex::encode(9_000_000u64.to_be_bytes());
    let del = json!({"keys": [key, key.to_uppercase()]});
    let (s, v) = send(&mut c, "POST", "/v1/maps/m/points:delete", &del, &[]);
    assert_eq!((s, &v["deleted"]), (200, &json!(1)), "{v}");
    assert_eq!(c.get(&rec).unwrap().status, 404);

    // Without a write token the server takes no writes, loopback or not.
    let ro = Running::start(store_with_map(), None);
    let (s, v) = send(&mut ro.client(None), "POST", up, &one, &[]);
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (403, Some("writes_disabled"))
    );
}

fn le(rows: &[Vec<f32>]) -> Vec<u8> {
    rows.iter()
        .flatten()
        .flat_map(|x| x.to_le_bytes())
        .collect()
}

#[test]
fn binary_upserts_write_what_the_json_form_writes() {
    let mut rng = SplitMix64::new(5);
    let rows: Vec<Vec<f32>> = (0..6).map(|_| vector(&mut rng)).collect();
    let octet = [("Content-Type", "application/octet-stream")];
    // The same six points (keys 2000.., empty values) three ways.
    let json_store = store_with_map();
    let json_srv = Running::start(json_store.clone(), Some(WRITE));
    let points: Vec<Value> = rows
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"key": hex::encode((2000 + i as u64).to_be_bytes()), "vector": v}))
        .collect();
    let (s, v) = send(
        &mut json_srv.client(Some(WRITE)),
        "POST",
        "/v1/maps/m/points:upsert",
        &json!({"points": points}),
        &[],
    );
    assert_eq!(s, 200, "{v}");
    let want = root(&*json_store, "m").unwrap();

    let keys: Vec<String> = (0..6u64)
        .map(|i| hex::encode((2000 + i).to_be_bytes()))
        .collect();
    for query in [
        "start_key=2000".to_string(),
        format!("keys={}", keys.join(",")),
    ] {
        let store = store_with_map();
        let srv = Running::start(store.clone(), Some(WRITE));
        let mut c = srv.client(Some(WRITE));
        let path = format!("/v1/maps/m/points:upsert?{query}");
        let r = c
            .request_with("POST", &path, Some(&le(&rows)), &octet)
            .unwrap();
        let v: Value = r.json().unwrap();
        assert_eq!(r.status, 200, "{query}: {v}");
        assert_eq!(
            (v["inserted"].as_u64(), v["hnsw"].as_str()),
            (Some(6), Some("updated"))
        );
        assert_eq!(root(&*store, "m"), Some(want), "{query}");
        // Bad rows or keys move nothing.
        for (path, body) in [
            (
                "/v1/maps/m/points:upsert?start_key=1",
                le(&rows)[..20].to_vec(),
            ),
            ("/v1/maps/m/points:upsert?keys=00,01", le(&rows)),
            (
                "/v1/maps/m/points:upsert?start_key=1&keys=00",
                le(&rows[..1]),
            ),
            ("/v1/maps/m/points:upsert?start_key=1&k=3", le(&rows[..1])),
        ] {
            let r = c.request_with("POST", path, Some(&body), &octet).unwrap();
            assert_eq!(r.status, 400, "{path}");
        }
        let r = c
            .request_with(
                "POST",
                "/v1/maps/nope/points:upsert?start_key=1",
                Some(&le(&rows)),
                &octet,
            )
            .unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(
            root(&*store, "m"),
            Some(want),
            "rejected writes moved nothing"
        );
    }
    // A JSON upsert refuses the binary-only query options.
    let (s, v) = send(
        &mut json_srv.client(Some(WRITE)),
        "POST",
        "/v1/maps/m/points:upsert?start_key=3",
        &json!({"points": [point(1, &rows[0])]}),
        &[],
    );
    assert_eq!(
        (s, v["error"]["field"].as_str()),
        (400, Some("start_key")),
        "{v}"
    );
}

#[test]
fn create_write_and_drop_a_map() {
    let store = store_with_map();
    let srv = Running::start(store.clone(), Some(WRITE));
    let mut c = srv.client(Some(WRITE));
    let cfg = json!({"dims": DIMS, "metric": "cosine"});
    let (s, v) = send(&mut c, "PUT", "/v1/maps/fresh", &cfg, &[]);
    assert_eq!(s, 201, "{v}");
    let (s, v) = send(&mut c, "PUT", "/v1/maps/fresh", &cfg, &[]);
    assert_eq!((s, v["error"]["code"].as_str()), (409, Some("map_exists")));
    let (s, v) = send(
        &mut c,
        "PUT",
        "/v1/maps/x",
        &json!({"dims": 4, "metric": "manhattan"}),
        &[],
    );
    assert_eq!(s, 400, "{v}");

    let mut rng = SplitMix64::new(3);
    let pts: Vec<Value> = (0..50u64).map(|k| point(k, &vector(&mut rng))).collect();
    let (s, v) = send(
        &mut c,
        "POST",
        "/v1/maps/fresh/points:upsert",
        &json!({"points": pts}),
        &[],
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["inserted"], 50);
    let d: Cid = v["descriptor"].as_str().unwrap().parse().unwrap();
    let q = json!({"vector": pts[7]["vector"], "k": 1, "mode": "exact"});
    let (s, v) = send(&mut c, "POST", "/v1/maps/fresh/search", &q, &[]);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["results"][0]["key"], pts[7]["key"]);

    let r = c
        .request_with(
            "DELETE",
            "/v1/maps/fresh",
            None,
            &[("If-Match", &Cid::of(b"x").to_string())],
        )
        .unwrap();
    assert_eq!(r.status, 412);
    let r = c
        .request_with(
            "DELETE",
            "/v1/maps/fresh",
            None,
            &[("If-Match", &d.to_string())],
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(root(&*store, "fresh"), None);
    assert_eq!(c.get("/v1/maps/fresh").unwrap().status, 404);
    assert_eq!(c.get("/v1/maps/m").unwrap().status, 200, "other maps stay");
}

#[test]
fn concurrent_writers_serialize_and_lose_nothing() {
    let store = store_with_map();
    let srv = Running::start(store.clone(), Some(WRITE));
    let writers = 4u64;
    let rounds = 5u64;
    std::thread::scope(|s| {
        for w in 0..writers {
            let mut c = srv.client(Some(WRITE));
            s.spawn(move || {
                let mut rng = SplitMix64::new(100 + w);
                for r in 0..rounds {
                    let key = 10_000 + w * 100 + r;
                    let body = json!({"points": [point(key, &vector(&mut rng))]});
                    let (st, v) = send(&mut c, "POST", "/v1/maps/m/points:upsert", &body, &[]);
                    assert_eq!(st, 200, "writer {w} round {r}: {v}");
                }
            });
        }
    });
    let mut c = srv.client(Some(WRITE));
    for w in 0..writers {
        for r in 0..rounds {
            let key = hex::encode((10_000 + w * 100 + r).to_be_bytes());
            let st = c.get(&format!("/v1/maps/m/records/{key}")).unwrap().status;
            assert_eq!(st, 200, "write {w}/{r} lost");
        }
    }
    let (cid, _) = proximity::resolve(&*store, "m").unwrap().unwrap();
    let map = ProximityMap::load(&*store, cid).unwrap();
    assert_eq!(map.descriptor().record_count, 300 + writers * rounds);
}

#[test]
fn writes_carry_the_recall_profile_and_measure_a_stale_one_again() {
    let store = store_with_map();
    let ix = prox_engine::Index::open(store.clone(), "m", &Default::default()).unwrap();
    let p = ix.measure_profile(50).unwrap();
    ix.publish_profile("m", &p).unwrap();
    drop(ix);
    let srv = Running::start(store.clone(), Some(WRITE));
    let mut c = srv.client(Some(WRITE));
    let mut rng = SplitMix64::new(0x9f0);
    let q = vector(&mut rng);
    let search = json!({"vector": q, "recall": 0.9});
    // `n` new points from key `first`: the write's answer.
    let mut upsert = |c: &mut Client, first: u64, n: u64| {
        let pts: Vec<Value> = (0..n)
            .map(|i| point(first + i, &vector(&mut rng)))
            .collect();
        let (status, body) = send(
            c,
            "POST",
            "/v1/maps/m/points:upsert",
            &json!({"points": pts}),
            &[],
        );
        assert_eq!(status, 200, "{body}");
        body
    };
    // 10 new points: under a tenth of 300, carried.
    let body = upsert(&mut c, 1000, 10);
    assert_eq!(body["profile"], json!("updated"), "{body}");
    let (status, body) = send(&mut c, "POST", "/v1/maps/m/search", &search, &[]);
    assert_eq!(status, 200, "{body}");
    // 40 more: 50 edits of 350 records, stale; it keeps answering while it
    // is measured again in the background and published beside the new
    // version.
    let body = upsert(&mut c, 2000, 40);
    assert_eq!(body["profile"], json!("stale"), "{body}");
    let descriptor: Cid = body["descriptor"].as_str().unwrap().parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = send(&mut c, "POST", "/v1/maps/m/search", &search, &[]);
        assert_eq!(status, 200, "{body}");
        assert!(body["tuned"]["setting"].is_string(), "{body}");
        let reopened = prox_engine::Index::open(store.clone(), "m", &Default::default()).unwrap();
        assert_eq!(reopened.descriptor(), descriptor);
        let p = reopened.profile().expect("carried, then measured again");
        if p.edits == 0 {
            // Every record of the 350 (fewer than the default sample).
            assert_eq!(p.queries, 350);
            break;
        }
        assert_eq!(p.edits, 50);
        assert!(
            std::time::Instant::now() < deadline,
            "not measured again after 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
