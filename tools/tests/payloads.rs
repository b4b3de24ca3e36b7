//! Payloads and field filters end to end: `prox build --index` from JSON
//! lines with `"payload"` objects, `prox query --filter` with field
//! conditions (exactly the matching records, never under-filled), typed
//! errors for unknown fields and type mismatches, `prox index
//! list|add|drop`, `prox update` keeping the indexes current, and `prox
//! verify` / `prox inspect` reporting them.

mod common;

use common::{ok, run, s};
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
