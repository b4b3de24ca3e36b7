//! `prox update` end to end: sidecars carried forward through the engine's
//! write path, vector files keyed by `--start-key` or `--keys`, batches
//! with per-batch reports, the canonical HNSW policies, and bad input
//! (exit 1, the root untouched).

mod common;

use common::{ok, run, s, succeeds, Shape};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn seed() -> String {
    common::seed(5)
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `prox datagen` of `n` 8-dimensional rows into `dir/name`; returns the
/// base `.fvecs`.
fn datagen(dir: &Path, name: &str, n: usize, seed: &str) -> PathBuf {
    let out = dir.join(name);
    common::datagen(
        &out,
        Shape {
            n,
            dim: 8,
            queries: 4,
            k: 5,
        },
        seed,
        &[],
    );
    out.join("base.fvecs")
}

/// The published descriptor, HNSW and PQ manifests of `name`.
fn published(store: &Path, name: &str) -> Value {
    let mut v = json_lines(&ok(&["verify", "--store", s(store), name, "--json"])).remove(0);
    serde_json::json!({"descriptor": v["descriptor"].take(), "hnsw": v["hnsw"].take(), "pq": v["pq"].take()})
}

fn fails(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "prox {args:?}: stdout {}\nstderr {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn update_keeps_sidecars_and_appends_vector_files_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let base = datagen(dir.path(), "a", 400, &seed());
    ok(&[
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&base),
        "--hnsw",
        "m=8",
        "--pq",
        "subquantizers=4,centroids=16",
    ]);
    let more = datagen(dir.path(), "b", 50, "77");
    let out = ok(&[
        "update",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&more),
        "--start-key",
        "400",
        "--batch-size",
        "20",
        "--json",
    ]);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 4, "three batches and a summary: {out}");
    for (i, b) in lines[..3].iter().enumerate() {
        assert_eq!(b["batch"], i as u64, "{b}");
        assert_eq!(b["edits"], if i < 2 { 20 } else { 10 }, "{b}");
        assert_eq!(b["hnsw"], "updated", "{b}");
        assert_eq!(b["pq"], "updated", "{b}");
        assert!(b["bytes_written"].as_u64().unwrap() > 0, "{b}");
        assert!(b["seconds"].as_f64().unwrap() >= 0.0, "{b}");
    }
    let sum = &lines[3];
    assert_eq!(
        (sum["inserted"].as_u64(), sum["records"].as_u64()),
        (Some(50), Some(450))
    );
    let now = published(&store, "m");
    assert_eq!(now["descriptor"], sum["descriptor"], "{now}");
    assert_eq!(now["hnsw"], sum["hnsw"], "{now}");
    assert!(now["hnsw"].is_string() && now["pq"].is_string(), "{now}");

    // The same vectors under explicit keys (a key file) move nothing new
    // in: every row replaces its vector under keys 400.. with the same
    // vector, so the records are value-only edits.
    let keys = dir.path().join("keys.txt");
    let text: String = (400u64..450).map(|k| format!("{}\n", hex(k))).collect();
    std::fs::write(&keys, text).unwrap();
    let out = ok(&[
        "update",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&more),
        "--keys",
        s(&keys),
        "--json",
    ]);
    let lines = json_lines(&out);
    assert_eq!(lines[0]["value_only"], 50, "{out}");
    assert_eq!(lines[0]["hnsw"], "unchanged", "{out}");

    // The exact neighbour of an appended row is that row.
    let q = dir.path().join("q.jsonl");
    let row = common::read_fvecs(&more).remove(7);
    std::fs::write(&q, format!("{{\"vector\": {row:?}}}\n")).unwrap();
    for path in ["native", "hnsw", "pq"] {
        let hits = json_lines(&ok(&[
            "query",
            "--store",
            s(&store),
            "--name",
            "m",
            "--queries",
            s(&q),
            "--k",
            "1",
            "--path",
            path,
            "--json",
        ]));
        assert_eq!(
            hits[0]["results"][0]["key"],
            hex(407),
            "{path}: {:?}",
            hits[0]
        );
    }
    ok(&["verify", "--store", s(&store), "m"]);
}

fn hex(k: u64) -> String {
    k.to_be_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn bad_update_inputs_fail_and_leave_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let base = datagen(dir.path(), "a", 120, &seed());
    ok(&[
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&base),
        "--hnsw",
        "",
    ]);
    let before = published(&store, "m");
    let st = s(&store);
    // A vector file needs keys.
    let err = fails(&["update", "--store", st, "--name", "m", "--input", s(&base)]);
    assert!(err.contains("--start-key"), "{err}");
    // Too few keys: the key file is named.
    let keys = dir.path().join("few.txt");
    std::fs::write(&keys, "00\n01\n").unwrap();
    let err = fails(&[
        "update",
        "--store",
        st,
        "--name",
        "m",
        "--input",
        s(&base),
        "--keys",
        s(&keys),
    ]);
    assert!(
        err.contains("few.txt") && err.contains("too few keys"),
        "{err}"
    );
    // Wrong dimension, a duplicate key, a key over the limit.
    let edits = dir.path().join("e.jsonl");
    for (text, needle) in [
        ("{\"op\": \"put\", \"key\": \"aa\", \"vector\": [1, 2]}\n", "dimension"),
        (
            "{\"op\": \"put\", \"key\": \"aa\", \"vector\": [1,2,3,4,5,6,7,8]}\n{\"op\": \"del\", \"key\": \"aa\"}\n",
            "duplicate key",
        ),
    ] {
        std::fs::write(&edits, text).unwrap();
        let err = fails(&["update", "--store", st, "--name", "m", "--input", s(&edits)]);
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let long = "ab".repeat(4097);
    std::fs::write(
        &edits,
        format!("{{\"op\": \"del\", \"key\": \"{long}\"}}\n"),
    )
    .unwrap();
    let err = fails(&["update", "--store", st, "--name", "m", "--input", s(&edits)]);
    assert!(err.contains("exceeds the limit"), "{err}");
    assert_eq!(published(&store, "m"), before);
}

#[test]
fn canonical_hnsw_needs_a_policy() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let base = datagen(dir.path(), "a", 100, &seed());
    ok(&[
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&base),
        "--hnsw",
        "m=6,build=canonical",
    ]);
    let before = published(&store, "m");
    let edits = dir.path().join("e.jsonl");
    std::fs::write(
        &edits,
        format!("{{\"op\": \"del\", \"key\": \"{}\"}}\n", hex(3)),
    )
    .unwrap();
    let st = s(&store);
    let err = fails(&["update", "--store", st, "--name", "m", "--input", s(&edits)]);
    assert!(err.contains("canonical"), "{err}");
    assert_eq!(published(&store, "m"), before);
    let out = json_lines(&ok(&[
        "update",
        "--store",
        st,
        "--name",
        "m",
        "--input",
        s(&edits),
        "--canonical-hnsw",
        "rebuild",
        "--json",
    ]));
    assert_eq!(out[0]["hnsw"], "rebuilt");
    assert!(published(&store, "m")["hnsw"].is_string());
    std::fs::write(
        &edits,
        format!("{{\"op\": \"del\", \"key\": \"{}\"}}\n", hex(4)),
    )
    .unwrap();
    let out = json_lines(&ok(&[
        "update",
        "--store",
        st,
        "--name",
        "m",
        "--input",
        s(&edits),
        "--canonical-hnsw",
        "drop",
        "--json",
    ]));
    assert_eq!(out[0]["hnsw"], "dropped");
    assert!(published(&store, "m")["hnsw"].is_null());
    let _ = succeeds(&["verify", "--store", st, "m"]);
}

#[test]
fn bench_churn_reports_rounds_and_the_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let base = datagen(dir.path(), "a", 600, &seed());
    let queries = dir.path().join("a").join("query.fvecs");
    let store = dir.path().join("store");
    let out = json_lines(&ok(&[
        "bench",
        "churn",
        "--store",
        s(&store),
        "--input",
        s(&base),
        "--queries",
        s(&queries),
        "--rounds",
        "3",
        "--churn",
        "0.1",
        "--hnsw",
        "m=6",
        "--ef",
        "32",
        "--passes",
        "1",
    ]));
    assert_eq!(out.len(), 4, "{out:?}");
    for (i, r) in out[..3].iter().enumerate() {
        assert_eq!(r["round"], i as u64, "{r}");
        assert!(r["bytes_written"].as_u64().unwrap() > 0, "{r}");
    }
    let sum = &out[3];
    assert_eq!(sum["same_descriptor"], true, "{sum}");
    let (c, f) = (
        sum["recall_churned"].as_f64().unwrap(),
        sum["recall_fresh"].as_f64().unwrap(),
    );
    assert!(c > 0.5 && f > 0.5, "{sum}");
    assert!(sum["qps_churned"].as_f64().unwrap() > 0.0, "{sum}");
}
