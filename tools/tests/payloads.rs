//! Payloads and field filters end to end: `prox build --index` from JSON
//! lines with `"payload"` objects, `prox query --filter` with field
//! conditions (exactly the matching records, never under-filled), typed
//! errors for unknown fields and type mismatches, `prox index
//! list|add|drop`, `prox update` keeping the indexes current, and `prox
//! verify` / `prox inspect` reporting them.

mod common;

use common::{map_cmd, ok, run, s};
use serde_json::{json, Value};
use std::path::Path;

const N: usize = 60;
const LANGS: [&str; 3] = ["en", "fr", "de"];

fn payload(i: usize) -> Value {
    json!({"lang": LANGS[i % 3], "year": 2000 + (i % 25) as i64, "tag": if i.is_multiple_of(4) { "spam" } else { "ok" }})
}

fn write_input(dir: &Path) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..N {
        let v: Vec<f32> = (0..4).map(|d| ((i * 7 + d * 3) % 11) as f32).collect();
        let line = json!({"key": format!("{:04x}", i), "vector": v, "payload": payload(i)});
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let p = dir.join("in.jsonl");
    std::fs::write(&p, text).unwrap();
    std::fs::write(dir.join("q.jsonl"), "{\"vector\": [1, 2, 3, 4]}\n").unwrap();
    p
}

/// Keys returned by one query with `filter` (k larger than the map).
fn query(store: &Path, dir: &Path, filter: &Value) -> Vec<String> {
    let out = ok(&[
        "query",
        "--store",
        s(store),
        "--name",
        "m",
        "--queries",
        s(&dir.join("q.jsonl")),
        "--k",
        "100",
        "--json",
        "--filter",
        &filter.to_string(),
    ]);
    let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let mut keys: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["key"].as_str().unwrap().to_string())
        .collect();
    keys.sort();
    keys
}

fn expected(pred: impl Fn(usize) -> bool) -> Vec<String> {
    (0..N)
        .filter(|&i| pred(i))
        .map(|i| format!("{:04x}", i))
        .collect()
}

#[test]
fn build_query_index_verify() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("st");
    let input = write_input(dir.path());
    ok(&[
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&input),
        "--index",
        "lang:keyword",
        "--index",
        "year:integer",
    ]);
    assert_eq!(
        query(
            &store,
            dir.path(),
            &json!({"key": "lang", "match": {"value": "en"}})
        ),
        expected(|i| i.is_multiple_of(3))
    );
    let f = json!({"must": [{"key": "year", "range": {"gte": 2010, "lt": 2020}}],
                   "must_not": {"key": "lang", "match": {"any": ["fr"]}}});
    assert_eq!(
        query(&store, dir.path(), &f),
        expected(|i| (10..20).contains(&(i % 25)) && i % 3 != 1)
    );
    for (bad, says) in [
        (
            json!({"key": "tag", "match": {"value": "spam"}}),
            "not indexed",
        ),
        (
            json!({"key": "year", "match": {"value": "x"}}),
            "indexed as integer",
        ),
    ] {
        let o = run(&[
            "query",
            "--store",
            s(&store),
            "--name",
            "m",
            "--queries",
            s(&dir.path().join("q.jsonl")),
            "--filter",
            &bad.to_string(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains(says), "{bad}: {err}");
    }

    ok(&[
        "index",
        "add",
        "--store",
        s(&store),
        "--name",
        "m",
        "tag:keyword",
    ]);
    assert_eq!(
        query(
            &store,
            dir.path(),
            &json!({"key": "tag", "match": {"value": "spam"}})
        ),
        expected(|i| i.is_multiple_of(4))
    );
    ok(&["index", "drop", "--store", s(&store), "--name", "m", "year"]);
    let listed = ok(&[
        "index",
        "list",
        "--store",
        s(&store),
        "--name",
        "m",
        "--json",
    ]);
    let fields: Vec<String> = listed
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["field"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(fields, ["lang", "tag"]);

    // An update moves record 0000 from en to fr; the index follows.
    let upd = dir.path().join("upd.jsonl");
    std::fs::write(
        &upd,
        format!("{}\n", json!({"op": "put", "key": "0000", "vector": [0, 0, 0, 1], "value": hex::encode(br#"{"lang":"fr"}"#)})),
    )
    .unwrap();
    ok(&[
        "update",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&upd),
    ]);
    assert_eq!(
        query(
            &store,
            dir.path(),
            &json!({"key": "lang", "match": {"value": "en"}})
        ),
        expected(|i| i.is_multiple_of(3) && i != 0)
    );

    let v: Value =
        serde_json::from_str(&ok(&["verify", "--store", s(&store), "m", "--json"])).unwrap();
    assert_eq!(v["field_indexes"], 2);
    let v: Value = serde_json::from_str(&ok(&[
        "inspect",
        "--store",
        s(&store),
        "--root",
        "m",
        "--json",
    ]))
    .unwrap();
    assert_eq!(v["field_indexes"].as_array().map(Vec::len), Some(2), "{v}");
}

/// Writes `rows` as `.fvecs`.
fn write_fvecs(path: &Path, rows: &[Vec<f32>]) {
    let mut b = Vec::new();
    for r in rows {
        b.extend_from_slice(&(r.len() as i32).to_le_bytes());
        r.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    }
    std::fs::write(path, b).unwrap();
}

/// Writes `rows` as `.ivecs` (rows may be shorter than k).
fn write_ivecs(path: &Path, rows: &[Vec<u32>]) {
    let mut b = Vec::new();
    for r in rows {
        b.extend_from_slice(&(r.len() as i32).to_le_bytes());
        r.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    }
    std::fs::write(path, b).unwrap();
}

/// `prox bench --filter` on a map with a field index: the records name
/// the filter and its eligible count, no answer is under-filled, the
/// default request ("auto") and the HNSW path recall the filtered brute
/// force, and a key filter admitting fewer than k records takes a ground
/// truth with short rows.
#[test]
fn bench_with_a_filter_reports_eligible_and_fills_every_answer() {
    const ROWS: usize = 4000;
    const DIMS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("st");
    let mut rng = prox_testkit::SplitMix64::new(0xf11_7e4);
    let vectors: Vec<Vec<f32>> = (0..ROWS)
        .map(|_| (0..DIMS).map(|_| rng.gauss()).collect())
        .collect();
    let mut text = String::new();
    for (i, v) in vectors.iter().enumerate() {
        let line = json!({"vector": v, "payload": {"part": (i % 2) as i64}});
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, text).unwrap();
    let extra = ["--index", "part:integer", "--hnsw", "--profile", "0"];
    ok(&map_cmd("build", &store, "m", "--input", &input, &extra));
    let queries: Vec<Vec<f32>> = (0..20)
        .map(|_| (0..DIMS).map(|_| rng.gauss()).collect())
        .collect();
    let qpath = dir.path().join("q.fvecs");
    write_fvecs(&qpath, &queries);
    let truth = |eligible: &dyn Fn(usize) -> bool| -> Vec<Vec<u32>> {
        queries
            .iter()
            .map(|q| {
                let mut d: Vec<(f64, u32)> = (0..ROWS)
                    .filter(|&i| eligible(i))
                    .map(|i| {
                        let s = vectors[i]
                            .iter()
                            .zip(q)
                            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
                            .sum();
                        (s, i as u32)
                    })
                    .collect();
                d.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                d.into_iter().take(10).map(|(_, i)| i).collect()
            })
            .collect()
    };
    let bench = |filter: &str, gt: &Path, extra: &[&str]| -> Vec<Value> {
        let mut args = map_cmd("bench", &store, "m", "--queries", &qpath, &["--gt", s(gt)]);
        args.extend_from_slice(&["--k", "10", "--threads", "1", "--reps", "1"]);
        args.extend_from_slice(&["--filter", filter]);
        args.extend_from_slice(extra);
        ok(&args)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };

    let gt = dir.path().join("gt-odd.ivecs");
    write_ivecs(&gt, &truth(&|i| i % 2 == 1));
    let field = r#"{"key": "part", "match": {"value": 1}}"#;
    let recs = bench(field, &gt, &["--path", "auto,hnsw", "--ef", "64"]);
    assert_eq!(recs.len(), 2, "{recs:?}");
    for r in &recs {
        assert_eq!(r["filter"], field);
        assert_eq!(r["eligible"], 2000);
        assert_eq!(r["underfilled"], 0, "{r}");
        assert!(r["recall"].as_f64().unwrap() >= 0.9, "{r}");
    }
    assert_eq!(recs[0]["mode"], "default");
    assert_eq!(
        (recs[1]["path"].as_str(), recs[1]["mode"].as_str()),
        (Some("hnsw"), Some("ef=64"))
    );

    // Three eligible records: every truth row has 3 ids, every answer 3 hits.
    let keys = [7u64, 1234, 3999];
    let gt = dir.path().join("gt-three.ivecs");
    write_ivecs(&gt, &truth(&|i| keys.contains(&(i as u64))));
    let hexes: Vec<String> = keys.iter().map(|k| hex::encode(k.to_be_bytes())).collect();
    let f = json!({"keys": hexes}).to_string();
    let recs = bench(&f, &gt, &["--path", "auto"]);
    assert_eq!(recs.len(), 1);
    assert_eq!(
        (
            &recs[0]["eligible"],
            &recs[0]["underfilled"],
            &recs[0]["recall"]
        ),
        (&json!(3), &json!(0), &json!(1.0))
    );
    // Without a filter a short truth row is still refused.
    let o = run(&map_cmd(
        "bench",
        &store,
        "m",
        "--queries",
        &qpath,
        &["--gt", s(&gt), "--k", "10"],
    ));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("fewer than --k 10"));
}
