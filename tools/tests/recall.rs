//! `--recall` end to end: `prox build` measures the recall profile,
//! `inspect` shows it, `verify` checks it, `query` and `bench` run the
//! setting it picks (and say which), `accel build` measures it again, and
//! a map without one is a clear error.

mod common;

use common::{map_cmd, ok, run, s, Shape};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn seed() -> String {
    common::seed(11)
}

fn build(store: &Path, data: &Path, extra: &[&str]) -> String {
    ok(&map_cmd(
        "build",
        store,
        "m",
        "--input",
        &data.join("base.fvecs"),
        extra,
    ))
}

/// A generated dataset of `n` x `dim` with `queries` queries in a fresh
/// directory: (the directory, its data folder, a store path beside it).
fn dataset(n: usize, dim: usize, queries: usize) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (data, store) = (dir.path().join("data"), dir.path().join("store"));
    let shape = Shape {
        n,
        dim,
        queries,
        k: 10,
    };
    common::datagen(&data, shape, &seed(), &[]);
    (dir, data, store)
}

/// The `--json` lines of `prox bench` (stdout).
fn records(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn build_profiles_and_recall_picks_a_setting_that_reaches_it() {
    let (_dir, data, store) = dataset(3000, 16, 40);
    let out = build(
        &store,
        &data,
        &[
            "--hnsw",
            "--pq",
            "subquantizers=4,centroids=16",
            "--profile",
            "300",
        ],
    );
    assert!(
        out.lines().any(|l| l.starts_with("layout.profile ")),
        "{out}"
    );
    let root = ok(&["inspect", "--store", s(&store), "--root", "m", "--json"]);
    let root: Value = serde_json::from_str(&root).unwrap();
    let table = &root["recall_profile"];
    assert_eq!(
        (table["k"].as_u64(), table["queries"].as_u64()),
        (Some(10), Some(300))
    );
    let paths: Vec<&str> = table["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for p in ["native", "hnsw", "pq"] {
        assert!(paths.contains(&p), "{p} measured: {table}");
    }
    ok(&["verify", "--store", s(&store), "m"]);

    // prox query says what it chose.
    let (q, gt) = (data.join("query.fvecs"), data.join("gt.ivecs"));
    let o = run(&map_cmd(
        "query",
        &store,
        "m",
        "--queries",
        &q,
        &["--gt", s(&gt), "--recall", "0.9", "--json"],
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("chosen for recall 0.9: "), "{err}");
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    assert!(first["tuned"]["setting"].is_string(), "{first}");
    assert_eq!(first["tuned"]["reached"], Value::Bool(true));

    // prox bench measures the recall each target reaches.
    let bench = ok(&map_cmd(
        "bench",
        &store,
        "m",
        "--queries",
        &q,
        &[
            "--gt",
            s(&gt),
            "--recall",
            "0.8,0.95,1",
            "--threads",
            "1",
            "--reps",
            "1",
        ],
    ));
    let recs = records(&bench);
    assert_eq!(recs.len(), 3, "{bench}");
    for (r, target) in recs.iter().zip([0.8, 0.95, 1.0]) {
        let mode = r["mode"].as_str().unwrap();
        assert!(mode.starts_with(&format!("recall={target}: ")), "{mode}");
        let got = r["recall"].as_f64().unwrap();
        assert!(
            got >= target - 0.08,
            "{mode}: recall {got} (seed {})",
            seed()
        );
    }

    // Out-of-range targets and conflicting knobs are usage errors naming
    // the option.
    for bad in [
        &["--recall", "1.5"][..],
        &["--recall", "0.9", "--ef", "40"][..],
    ] {
        let o = run(&map_cmd("query", &store, "m", "--queries", &q, bad));
        assert!(!o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("recall"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn maps_without_a_profile_say_how_to_get_one() {
    let (_dir, data, store) = dataset(500, 8, 5);
    let out = build(&store, &data, &["--profile", "0"]);
    assert!(!out.contains("layout.profile"), "{out}");
    let q = data.join("query.fvecs");
    let query = |store: &Path| {
        run(&map_cmd(
            "query",
            store,
            "m",
            "--queries",
            &q,
            &["--recall", "0.9"],
        ))
    };
    let o = query(&store);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("prox accel build --profile"), "{err}");
    // Measured afterwards, it answers.
    let out = ok(&[
        "accel",
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--profile",
        "100",
    ]);
    assert!(out.starts_with("layout.profile "), "{out}");
    let o = query(&store);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Rebuilding a sidecar measures a new profile for it.
    let out = ok(&[
        "accel",
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--hnsw",
    ]);
    assert!(
        out.lines().any(|l| l.starts_with("layout.profile ")),
        "{out}"
    );
}

/// The recall profile as `prox inspect --root m` prints it.
fn profile_of(store: &Path) -> Value {
    let root = ok(&["inspect", "--store", s(store), "--root", "m", "--json"]);
    serde_json::from_str::<Value>(&root).unwrap()["recall_profile"].clone()
}

#[test]
fn update_carries_the_profile_and_measures_a_stale_one_again() {
    let (_dir, data, store) = dataset(600, 8, 5);
    build(&store, &data, &["--profile", "100"]);
    let more = data.join("query.fvecs");
    // 5 new points: carried with its count of changed records.
    let out = ok(&map_cmd(
        "update",
        &store,
        "m",
        "--input",
        &more,
        &["--start-key", "1000", "--json"],
    ));
    assert!(out.contains(r#""profile":"updated""#), "{out}");
    let p = profile_of(&store);
    assert_eq!(
        (p["edits"].as_u64(), p["queries"].as_u64()),
        (Some(5), Some(100))
    );
    // 100 more (105 of 705 records changed): stale, measured again at the
    // end.
    let (_more, more_data, _) = dataset(100, 8, 1);
    let hundred = more_data.join("base.fvecs");
    let o = run(&map_cmd(
        "update",
        &store,
        "m",
        "--input",
        &hundred,
        &["--start-key", "2000", "--profile", "80"],
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("recall profile measured again"), "{err}");
    let p = profile_of(&store);
    assert_eq!(
        (p["edits"].as_u64(), p["queries"].as_u64()),
        (Some(0), Some(80))
    );
}
