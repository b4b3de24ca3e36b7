//! End-to-end tests of the `prox` binary on small generated data: every
//! subcommand's happy path, malformed inputs (exit 1, the file and row
//! named, the root untouched), usage errors (exit 2) and the `--json`
//! schemas.

mod common;

use common::{map_cmd, ok, prox, run, s, succeeds, Shape};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs a command that must succeed; returns stderr.
fn ok_err(args: &[&str]) -> String {
    String::from_utf8_lossy(&succeeds(args).stderr).into_owned()
}

/// Runs a command that must fail with `code`; returns stderr.
fn fails(args: &[&str], code: i32) -> String {
    let o = run(args);
    assert_eq!(
        o.status.code(),
        Some(code),
        "prox {args:?}: stdout {}\nstderr {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A CID as the CLI prints it: 64 hex digits.
fn is_cid(line: &str) -> bool {
    line.len() == 64 && line.bytes().all(|b| b.is_ascii_hexdigit())
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn has_keys(v: &Value, keys: &[&str]) {
    for k in keys {
        assert!(v.get(k).is_some(), "missing {k:?} in {v}");
    }
}

/// The seed handed to `prox` (`PROX_SEED` overrides the default 3).
fn seed() -> String {
    common::seed(3)
}

/// A small dataset and a store with map "m" built from it.
struct Fixture {
    _dir: tempfile::TempDir,
    data: PathBuf,
    store: PathBuf,
}

fn fixture(extra_build: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let store = dir.path().join("store");
    common::datagen(
        &data,
        Shape {
            n: 400,
            dim: 8,
            queries: 12,
            k: 10,
        },
        &seed(),
        &[],
    );
    let base = data.join("base.fvecs");
    let mut args = vec![
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&base),
    ];
    args.extend_from_slice(extra_build);
    let out = ok(&args);
    assert!(is_cid(out.lines().last().unwrap_or("")), "{out}");
    Fixture {
        _dir: dir,
        data,
        store,
    }
}

/// By default `prox query` reads the search layouts before timing and the
/// queries decode the leaf pages they reach; `--warm` decodes every node
/// first. Both give the same answers, in every mode, and say which they did.
#[test]
fn query_reads_the_layouts_first_and_warm_decodes_every_node() {
    let f = fixture(&[]);
    let q = f.data.join("query.fvecs");
    for mode in ["exact", "balanced", "fast"] {
        let mut got = Vec::new();
        for warm in [false, true] {
            let out = f.data.join(format!("{mode}-{warm}.ivecs"));
            let mut extra = vec!["--k", "10", "--mode", mode, "--out", s(&out)];
            if warm {
                extra.push("--warm");
            }
            let err = ok_err(&map_cmd("query", &f.store, "m", "--queries", &q, &extra));
            let said = if warm { "(every node)" } else { "(layouts;" };
            assert!(err.contains(said), "{mode} warm={warm}: {err}");
            got.push(std::fs::read(&out).unwrap());
        }
        assert_eq!(got[0], got[1], "{mode}, seed {}", seed());
    }
}

#[test]
fn help_lists_groups_and_every_subcommand_has_examples() {
    let top = ok(&["--help"]);
    for g in [
        "Index:",
        "Benchmark:",
        "Storage:",
        "build",
        "query",
        "demo",
        "inspect",
        "verify",
    ] {
        assert!(top.contains(g), "{g} missing from:\n{top}");
    }
    for sub in [
        "build", "query", "update", "accel", "bench", "datagen", "demo", "inspect", "verify", "gc",
        "tree", "roots",
    ] {
        let h = ok(&[sub, "--help"]);
        assert!(
            h.contains("Examples:"),
            "prox {sub} --help lacks examples:\n{h}"
        );
    }
    ok(&["--version"]);
    assert!(fails(&["no-such-command"], 2).contains("unrecognized subcommand"));
    assert!(fails(&["build", "--name"], 2).contains("error"));
    fails(&[], 2);
}

#[test]
fn datagen_is_deterministic_and_reports_json() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let args = |out: &Path| {
        vec![
            "datagen".to_string(),
            "--n".into(),
            "300".into(),
            "--dim".into(),
            "5".into(),
            "--queries".into(),
            "7".into(),
            "--k".into(),
            "4".into(),
            "--seed".into(),
            seed(),
            "--metric".into(),
            "cosine".into(),
            "--json".into(),
            "--out".into(),
            s(out).into(),
        ]
    };
    let o = prox().args(args(&a)).output().unwrap();
    assert!(o.status.success());
    let v = json_lines(&String::from_utf8_lossy(&o.stdout));
    has_keys(
        &v[0],
        &["out", "n", "dim", "queries", "k", "metric", "seed"],
    );
    assert!(prox().args(args(&b)).output().unwrap().status.success());
    for f in ["base.fvecs", "query.fvecs", "gt.ivecs", "meta.json"] {
        let (x, y) = (
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
        );
        assert_eq!(x, y, "{f} differs between runs (seed {})", seed());
    }
    assert_eq!(
        std::fs::metadata(a.join("base.fvecs")).unwrap().len(),
        300 * (4 + 20)
    );
    assert_eq!(
        std::fs::metadata(a.join("gt.ivecs")).unwrap().len(),
        7 * (4 + 16)
    );
    let meta: Value = serde_json::from_slice(&std::fs::read(a.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["metric"], "cosine");
    fails(&["datagen", "--n", "0", "--out", s(&a)], 1);
}

#[test]
fn build_query_exact_matches_ground_truth_and_json_schema() {
    let f = fixture(&[]);
    let q = f.data.join("query.fvecs");
    let gt = f.data.join("gt.ivecs");
    let found = f.data.join("found.ivecs");
    let o = prox()
        .args([
            "query",
            "--store",
            s(&f.store),
            "--name",
            "m",
            "--queries",
            s(&q),
            "--k",
            "10",
        ])
        .args(["--mode", "exact", "--gt", s(&gt), "--out", s(&found)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("recall@10 1.0000") && err.contains("QPS"),
        "{err}"
    );
    // Exact search returns exactly datagen's canonical ground truth.
    let truth = std::fs::read(&gt).unwrap();
    assert_eq!(std::fs::read(&found).unwrap(), truth, "seed {}", seed());
    // So does every exact layout, built before the queries are timed.
    for layout in ["local4", "local40", "split3", "off"] {
        let _ = std::fs::remove_file(&found);
        let err = ok_err(&map_cmd(
            "query",
            &f.store,
            "m",
            "--queries",
            &q,
            &[
                "--k",
                "10",
                "--mode",
                "exact",
                "--exact-layout",
                layout,
                "--out",
                s(&found),
            ],
        ));
        assert!(err.contains("loaded in"), "{layout}: {err}");
        assert_eq!(
            std::fs::read(&found).unwrap(),
            truth,
            "{layout}, seed {}",
            seed()
        );
    }
    let e = fails(
        &map_cmd(
            "query",
            &f.store,
            "m",
            "--queries",
            &q,
            &["--mode", "exact", "--exact-layout", "local0"],
        ),
        2,
    );
    assert!(e.contains("local0"), "{e}");

    let out = ok(&map_cmd(
        "query",
        &f.store,
        "m",
        "--queries",
        &q,
        &["--k", "3", "--json", "--mode", "exact"],
    ));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 12);
    for (i, l) in lines.iter().enumerate() {
        has_keys(l, &["query", "path", "completion", "results"]);
        assert_eq!(l["query"], i);
        assert_eq!(l["completion"], "exact");
        let r = l["results"].as_array().unwrap();
        assert_eq!(r.len(), 3);
        has_keys(&r[0], &["key", "value", "score"]);
        assert_eq!(r[0]["key"].as_str().unwrap().len(), 16);
        assert!(r[0]["score"].as_f64().unwrap() <= r[1]["score"].as_f64().unwrap());
    }
    // Plain output: one line per query, ids separated by spaces.
    let plain = ok(&map_cmd(
        "query",
        &f.store,
        "m",
        "--queries",
        &q,
        &["--k", "2"],
    ));
    assert_eq!(plain.lines().count(), 12);
    // Wrong dimension and unknown map are failures naming the culprit.
    let other = f.data.join("other.jsonl");
    std::fs::write(&other, "{\"vector\": [1, 2, 3]}\n").unwrap();
    let e = fails(
        &map_cmd("query", &f.store, "m", "--queries", &other, &[]),
        1,
    );
    assert!(e.contains("other.jsonl") && e.contains("dimensions"), "{e}");
    let e = fails(&map_cmd("query", &f.store, "nope", "--queries", &q, &[]), 1);
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn malformed_inputs_name_the_row_and_leave_the_root_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let bad = dir.path().join("bad.fvecs");
    let mut bytes = Vec::new();
    for row in [[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]] {
        bytes.extend_from_slice(&2i32.to_le_bytes());
        for x in row {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    bytes.truncate(bytes.len() - 2);
    std::fs::write(&bad, &bytes).unwrap();
    let e = fails(&map_cmd("build", &store, "x", "--input", &bad, &[]), 1);
    assert!(
        e.contains("bad.fvecs: row 2") && e.contains("truncated"),
        "{e}"
    );

    let nan = dir.path().join("nan.jsonl");
    std::fs::write(
        &nan,
        "{\"key\": \"01\", \"vector\": [1, 2]}\n\n{\"key\": \"02\", \"vector\": [1, 2, 3]}\n",
    )
    .unwrap();
    let e = fails(&map_cmd("build", &store, "x", "--input", &nan, &[]), 1);
    assert!(
        e.contains("nan.jsonl: line 3 (row 1)") && e.contains("dimension 3"),
        "{e}"
    );

    let hdf = dir.path().join("glove.hdf5");
    std::fs::write(&hdf, b"\x89HDF").unwrap();
    let e = fails(&map_cmd("build", &store, "x", "--input", &hdf, &[]), 1);
    assert!(e.contains("HDF5") && e.contains("glove.hdf5"), "{e}");
    if !cfg!(feature = "hdf5") {
        assert!(e.contains(".npy") && e.contains("--features hdf5"), "{e}");
    }

    // None of the failed builds created root "x".
    if store.exists() {
        let e = fails(&["inspect", "--store", s(&store), "--root", "x"], 1);
        assert!(e.contains("\"x\""), "{e}");
    }

    // Duplicate keys are refused by the builder, root untouched.
    let dup = dir.path().join("dup.jsonl");
    std::fs::write(
        &dup,
        "{\"key\": \"01\", \"vector\": [1, 2]}\n{\"key\": \"01\", \"vector\": [3, 4]}\n",
    )
    .unwrap();
    fails(&map_cmd("build", &store, "x", "--input", &dup, &[]), 1);
    fails(&["verify", "--store", s(&store), "x"], 1);
}

#[test]
fn json_lines_keys_and_values_round_trip_and_update() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let input = dir.path().join("in.jsonl");
    let mut text = String::new();
    for i in 0..40u32 {
        let x = i as f32;
        text.push_str(&format!(
            "{{\"key\": \"{:04x}\", \"vector\": [{x}, {}, 1.5], \"value\": \"{:02x}\"}}\n",
            i,
            40.0 - x,
            i
        ));
    }
    std::fs::write(&input, text).unwrap();
    let out = ok(&map_cmd(
        "build",
        &store,
        "kv",
        "--input",
        &input,
        &["--metric", "l2", "--json"],
    ));
    let v = &json_lines(&out)[0];
    has_keys(
        v,
        &[
            "name",
            "records",
            "dims",
            "metric",
            "descriptor",
            "hnsw",
            "pq",
            "build_seconds",
        ],
    );
    assert_eq!(v["records"], 40);
    let q = dir.path().join("q.jsonl");
    std::fs::write(&q, "{\"vector\": [7, 33, 1.5]}\n").unwrap();
    let nearest = map_cmd(
        "query",
        &store,
        "kv",
        "--queries",
        &q,
        &["--k", "1", "--json", "--mode", "exact"],
    );
    let out = ok(&nearest);
    let hit = &json_lines(&out)[0]["results"][0];
    assert_eq!(hit["key"], "0007");
    assert_eq!(hit["value"], "07");
    assert_eq!(hit["score"], 0.0);

    let edits = dir.path().join("edits.jsonl");
    std::fs::write(
        &edits,
        "{\"op\": \"del\", \"key\": \"0007\"}\n{\"op\": \"put\", \"key\": \"ffff\", \"vector\": [7, 33, 1.5], \"value\": \"aa\"}\n",
    )
    .unwrap();
    let out = ok(&map_cmd("update", &store, "kv", "--input", &edits, &[]));
    assert!(is_cid(out.lines().last().unwrap()), "{out}");
    let out = ok(&nearest);
    assert_eq!(json_lines(&out)[0]["results"][0]["key"], "ffff");
    ok(&["verify", "--store", s(&store), "kv"]);
}

#[test]
fn accel_build_attaches_sidecars_to_the_named_root() {
    let f = fixture(&[]);
    let st = s(&f.store);
    let before = &json_lines(&ok(&["verify", "--store", st, "m", "--json"]))[0];
    assert!(before["hnsw"].is_null(), "{before}");
    let out = &json_lines(&ok(&[
        "accel", "build", "--store", st, "--name", "m", "--hnsw", "", "--json",
    ]))[0];
    let hnsw = out["hnsw"].as_str().expect("hnsw manifest CID").to_string();
    let after = &json_lines(&ok(&["verify", "--store", st, "m", "--json"]))[0];
    assert_eq!(after["hnsw"].as_str(), Some(hnsw.as_str()), "{after}");
    // A second run adding PQ keeps the published HNSW sidecar.
    ok(&[
        "accel",
        "build",
        "--store",
        st,
        "--name",
        "m",
        "--pq",
        "subquantizers=4",
    ]);
    let both = &json_lines(&ok(&["verify", "--store", st, "m", "--json"]))[0];
    assert_eq!(both["hnsw"].as_str(), Some(hnsw.as_str()), "{both}");
    assert!(both["pq"].is_string(), "{both}");
}

/// The PQ configuration of the map `m`'s published sidecar.
fn pq_config(store: &str) -> serde_json::Value {
    let v = &json_lines(&ok(&["verify", "--store", store, "m", "--json"]))[0];
    let cid = v["pq"].as_str().expect("a PQ sidecar").to_string();
    json_lines(&ok(&["inspect", "--store", store, &cid, "--json"]))[0]["config"].clone()
}

/// A bare `--pq` builds what the tables measure: 4-bit codes for the IVF
/// fast scan, with subquantizers chosen from the dimensions (2 per
/// subquantizer at d = 8), and persists the fast-scan lists; keys
/// override single parameters and `preset=spec` gives the spec defaults.
#[test]
fn a_bare_pq_flag_builds_the_recommended_fast_scan_sidecar() {
    let f = fixture(&["--hnsw", "--pq"]);
    let st = s(&f.store);
    let c = pq_config(st);
    assert_eq!(
        (
            &c["subquantizers"],
            &c["centroids"],
            &c["iterations"],
            &c["rerank_multiplier"]
        ),
        (&4.into(), &16.into(), &6.into(), &8.into()),
        "{c}"
    );
    let meta = common::root_metadata(st, "m");
    assert!(meta.get("prox.layout.ivf").is_some(), "{meta}");
    let hnsw = &json_lines(&ok(&["verify", "--store", st, "m", "--json"]))[0]["hnsw"];
    let h = &json_lines(&ok(&[
        "inspect",
        "--store",
        st,
        hnsw.as_str().unwrap(),
        "--json",
    ]))[0];
    assert_eq!(h["config"]["ef_construction"], 200, "{h}");
    let accel_pq = |params: &str| {
        run(&[
            "accel", "build", "--store", st, "--name", "m", "--pq", params,
        ])
    };
    assert!(accel_pq("rerank=3").status.success());
    let c = pq_config(st);
    assert_eq!(
        (&c["subquantizers"], &c["rerank_multiplier"]),
        (&4.into(), &3.into()),
        "{c}"
    );
    assert!(accel_pq("preset=spec").status.success());
    let c = pq_config(st);
    assert_eq!(
        (&c["subquantizers"], &c["centroids"], &c["iterations"]),
        (&8.into(), &256.into(), &12.into()),
        "{c}"
    );
    let bad = accel_pq("m=9");
    assert_eq!(bad.status.code(), Some(1));
    let bad = String::from_utf8_lossy(&bad.stderr);
    assert!(bad.contains("subquantizers must be in 1..=8"), "{bad}");
}

/// `prox build --exact-layout local8` persists the local frames; exact
/// queries read them by default and answer as the plain arena and frames
/// built at open do; `prox verify` checks them; `prox accel build
/// --layout` without the flag keeps them.
#[test]
fn build_persists_local_frames_that_exact_queries_read() {
    let f = fixture(&["--exact-layout", "local8", "--profile", "0"]);
    let st = s(&f.store);
    let meta = common::root_metadata(st, "m");
    let frames = meta["prox.layout.frames"]
        .as_str()
        .expect("frames layout")
        .to_string();
    let q = f.data.join("query.fvecs");
    let exact = ["--mode", "exact"];
    let auto = common::query_ids(st, "m", &q, "10", &exact);
    for layout in ["off", "local8", "local4"] {
        let mut args = exact.to_vec();
        args.extend(["--exact-layout", layout]);
        assert_eq!(
            common::query_ids(st, "m", &q, "10", &args),
            auto,
            "{layout}"
        );
    }
    let v = &json_lines(&ok(&["verify", "--store", st, "m", "--json"]))[0];
    assert_eq!((&v["ok"], &v["layouts"]), (&true.into(), &3.into()), "{v}");
    ok(&["accel", "build", "--store", st, "--name", "m", "--layout"]);
    assert_eq!(
        common::root_metadata(st, "m")["prox.layout.frames"].as_str(),
        Some(frames.as_str())
    );
    // The rotated split arena the same way (`split4`).
    let rotated = f.data.join("rotated");
    let base = f.data.join("base.fvecs");
    ok(&map_cmd(
        "build",
        &rotated,
        "m",
        "--input",
        &base,
        &["--exact-layout", "split4", "--profile", "0"],
    ));
    let meta = common::root_metadata(s(&rotated), "m");
    assert!(meta["prox.layout.rotated"].is_string(), "{meta}");
    assert!(meta.get("prox.layout.frames").is_none(), "{meta}");
    assert_eq!(common::query_ids(s(&rotated), "m", &q, "10", &exact), auto);
    // A map of another metric has no exact-L2 layout to persist.
    let cosine = f.data.join("cosine");
    let why = fails(
        &map_cmd(
            "build",
            &cosine,
            "m",
            "--input",
            &base,
            &["--metric", "cosine", "--exact-layout", "local8"],
        ),
        1,
    );
    assert!(why.contains("metric is cosine"), "{why}");
    // An unknown layout is a usage error naming the choices.
    let bad = fails(
        &[
            "build",
            "--store",
            st,
            "--name",
            "x",
            "--input",
            "-",
            "--exact-layout",
            "local",
        ],
        2,
    );
    assert!(bad.contains("auto, off, localM or splitM"), "{bad}");
}

/// `prox accel build --layout` persists the native search layouts under the
/// named root; queries answer exactly as before in every mode; an update
/// that changes the descriptor reports the layouts dropped, and they can be
/// persisted again.
#[test]
fn build_persists_layouts_by_default_and_no_layout_skips_them() {
    let f = fixture(&["--no-layout"]);
    let base = f.data.join("base.fvecs");
    let q = f.data.join("query.fvecs");
    let with = f.data.join("with-layouts");
    let pq = "subquantizers=4,centroids=16,iterations=4";
    let built = &json_lines(&ok(&[
        "build",
        "--store",
        s(&with),
        "--name",
        "m",
        "--input",
        s(&base),
        "--pq",
        pq,
        "--json",
    ]))[0];
    for kind in ["arena", "adaptive", "ivf"] {
        assert!(
            built["layouts"][kind].as_str().is_some_and(is_cid),
            "{kind}: {built}"
        );
    }
    // The same records without layouts (and a PQ sidecar of its own).
    let bare = f.data.join("bare");
    let plain = &json_lines(&ok(&[
        "build",
        "--store",
        s(&bare),
        "--name",
        "m",
        "--input",
        s(&base),
        "--pq",
        pq,
        "--no-layout",
        "--json",
    ]))[0];
    assert_eq!(plain["descriptor"], built["descriptor"]);
    assert_eq!(plain["pq"], built["pq"]);
    assert!(plain["layouts"]["arena"].is_null() && plain["layouts"]["ivf"].is_null());
    for args in [
        &["--mode", "exact"][..],
        &["--mode", "balanced"],
        &["--path", "pq"],
    ] {
        assert_eq!(
            common::query_ids(s(&with), "m", &q, "10", args),
            common::query_ids(s(&bare), "m", &q, "10", args),
            "{args:?}"
        );
    }
    let v = &json_lines(&ok(&["verify", "--store", s(&with), "m", "--json"]))[0];
    assert_eq!(v["ok"], true, "{v}");
    // An 8-bit sidecar replacing the 4-bit one has no fast scan: the
    // published lists are no longer named, and the map still opens.
    ok(&[
        "accel",
        "build",
        "--store",
        s(&with),
        "--name",
        "m",
        "--pq",
        "subquantizers=4,preset=spec",
    ]);
    let meta = common::root_metadata(s(&with), "m");
    assert!(meta.get("prox.layout.ivf").is_none(), "{meta}");
    assert!(meta.get("prox.layout.arena").is_some(), "{meta}");
    ok(&[
        "query",
        "--store",
        s(&with),
        "--name",
        "m",
        "--queries",
        s(&q),
        "--k",
        "5",
        "--path",
        "pq",
    ]);
}

/// A streamed build whose layouts would not fit `--memory-limit` leaves
/// them out and says so; with room it persists them.
#[test]
fn a_build_leaves_out_layouts_that_do_not_fit_the_memory_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    common::datagen(
        &data,
        Shape {
            n: 1000,
            dim: 64,
            queries: 2,
            k: 5,
        },
        &seed(),
        &[],
    );
    let base = data.join("base.fvecs");
    let build = |store: &str, limit: &str| {
        let o = succeeds(&[
            "build",
            "--store",
            s(&dir.path().join(store)),
            "--name",
            "m",
            "--input",
            s(&base),
            "--memory-limit",
            limit,
            "--json",
        ]);
        let out = json_lines(&String::from_utf8(o.stdout).unwrap())[0].clone();
        (out, String::from_utf8_lossy(&o.stderr).to_string())
    };
    // 1,000 x 64 needs about 1.2 MiB for its layouts.
    let (tight, err) = build("tight", "1M");
    assert!(tight["layouts"]["arena"].is_null(), "{tight}");
    assert!(err.contains("not persisting the search layouts"), "{err}");
    let (roomy, err) = build("roomy", "2M");
    assert!(roomy["layouts"]["arena"].is_string(), "{roomy}");
    assert!(!err.contains("not persisting"), "{err}");
    assert_eq!(tight["descriptor"], roomy["descriptor"]);
}

#[test]
fn accel_build_layout_persists_layouts_that_searches_use_unchanged() {
    let f = fixture(&["--no-layout"]);
    let st = s(&f.store);
    let q = f.data.join("query.fvecs");
    let answers = || -> Vec<Vec<u8>> {
        ["exact", "fast", "balanced", "high"]
            .iter()
            .map(|mode| common::query_ids(st, "m", &q, "10", &["--mode", mode]))
            .collect()
    };
    let layouts = || {
        let meta = common::root_metadata(st, "m");
        let get = |k: &str| meta.get(k).and_then(|v| v.as_str()).map(String::from);
        (get("prox.layout.arena"), get("prox.layout.adaptive"))
    };
    let before = answers();
    assert_eq!(layouts(), (None, None));
    let out = &json_lines(&ok(&[
        "accel", "build", "--store", st, "--name", "m", "--layout", "--json",
    ]))[0];
    let arena = out["layout_arena"]
        .as_str()
        .expect("arena manifest CID")
        .to_string();
    let adaptive = out["layout_adaptive"]
        .as_str()
        .expect("adaptive manifest CID")
        .to_string();
    let (a, b) = layouts();
    assert!(
        a.as_deref()
            .is_some_and(|x| x.contains(&arena) || arena.contains(x)),
        "{a:?} vs {arena}"
    );
    assert!(
        b.as_deref()
            .is_some_and(|x| x.contains(&adaptive) || adaptive.contains(x)),
        "{b:?} vs {adaptive}"
    );
    assert_eq!(
        answers(),
        before,
        "persisted layouts answer as the built ones"
    );
    let v = &json_lines(&ok(&["verify", "--store", st, "m", "--json"]))[0];
    assert_eq!(v["ok"], true, "{v}");

    // A vector edit changes the descriptor: the layouts are dropped, and
    // the update says so.
    let edits = f.data.join("edits.jsonl");
    std::fs::write(
        &edits,
        format!(
            "{{\"op\": \"put\", \"key\": \"{}\", \"vector\": [1,2,3,4,5,6,7,8]}}\n",
            "ab".repeat(4)
        ),
    )
    .unwrap();
    let report = &json_lines(&ok(&[
        "update",
        "--store",
        st,
        "--name",
        "m",
        "--input",
        s(&edits),
        "--json",
    ]))[0];
    assert_eq!(report["layout"], "dropped", "{report}");
    assert_eq!(layouts(), (None, None));
    let out = &json_lines(&ok(&[
        "accel", "build", "--store", st, "--name", "m", "--layout", "--json",
    ]))[0];
    assert!(out["layout_arena"].is_string(), "{out}");
    assert!(layouts().0.is_some());
}

#[test]
fn inspect_verify_gc_and_sidecar_paths() {
    let f = fixture(&["--hnsw", "--pq", "subquantizers=4"]);
    let st = s(&f.store);
    let text = ok(&["inspect", "--store", st, "--root", "m"]);
    assert!(text.starts_with("kind: RootManifest"), "{text}");
    let manifest = &json_lines(&ok(&["inspect", "--store", st, "--root", "m", "--json"]))[0];
    has_keys(
        manifest,
        &["kind", "cid", "bytes", "root", "config", "version"],
    );
    let crmf_cid = manifest["root"].as_str().unwrap().to_string();
    let crmf = &json_lines(&ok(&["inspect", "--store", st, &crmf_cid, "--json"]))[0];
    assert_eq!(crmf["kind"], "CRMF content root");
    assert!(crmf["metadata"].get("prox.hnsw").is_some(), "{crmf}");
    let desc_cid = crmf["root"].as_str().unwrap().to_string();
    let desc = &json_lines(&ok(&["inspect", "--store", st, &desc_cid, "--json"]))[0];
    assert_eq!(desc["kind"], "PRXI descriptor");
    assert_eq!(desc["record_count"], 400);
    assert_eq!(desc["config"]["dims"], 8);
    // A PRXN node: dimensions come from the store's named map.
    let root = desc["root"].as_str().unwrap().to_string();
    let node = ok(&["inspect", "--store", st, &root]);
    assert!(node.starts_with("kind: PRXN node"), "{node}");
    let bad = fails(&["inspect", "--store", st, "00"], 1);
    assert!(bad.contains("not a CID"), "{bad}");
    let missing = "ab".repeat(32);
    assert!(fails(&["inspect", "--store", st, &missing], 1).contains(&missing));

    let v = &json_lines(&ok(&["verify", "--store", st, "m", "--json"]))[0];
    assert_eq!(v["ok"], true);
    assert_eq!(v["records"], 400);
    assert!(v["hnsw"].is_string() && v["pq"].is_string());

    let q = f.data.join("query.fvecs");
    let gt = f.data.join("gt.ivecs");
    for path in ["hnsw", "pq", "native"] {
        let o = prox()
            .args([
                "query",
                "--store",
                st,
                "--name",
                "m",
                "--queries",
                s(&q),
                "--k",
                "10",
            ])
            .args(["--path", path, "--gt", s(&gt)])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && err.contains(&format!("path {path}")),
            "{err}"
        );
    }
    ok(&["gc", "--store", st, "--dry-run"]);
    ok(&["verify", "--store", st, "m"]);
}

/// `prox bench` of map "m" of `f` against its queries and ground truth,
/// k = 10, one thread, plus `extra`; returns stdout.
fn bench(f: &Fixture, extra: &[&str]) -> String {
    let (q, gt) = (f.data.join("query.fvecs"), f.data.join("gt.ivecs"));
    let mut args = vec![
        "bench",
        "--store",
        s(&f.store),
        "--name",
        "m",
        "--queries",
        s(&q),
        "--gt",
        s(&gt),
        "--k",
        "10",
        "--threads",
        "1",
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

#[test]
fn bench_sweep_records_and_plots() {
    let f = fixture(&["--hnsw"]);
    let dir = f.data.clone();
    let svg = dir.join("plot.svg");
    let out = bench(
        &f,
        &["--budget", "200,100000", "--ef", "16,64", "--plot", s(&svg)],
    );
    let recs = json_lines(&out);
    assert_eq!(recs.len(), 2 + 4 + 2, "{out}");
    for r in &recs {
        has_keys(
            r,
            &[
                "engine",
                "path",
                "dataset",
                "mode",
                "ef",
                "recall",
                "qps",
                "threads",
                "build_seconds",
                "index_bytes",
            ],
        );
        assert_eq!(r["engine"], "prox");
        assert_eq!(r["threads"], 1);
        assert_eq!(r["dataset"], "data");
    }
    let exact = recs.iter().find(|r| r["mode"] == "exact").unwrap();
    assert_eq!(exact["recall"], 1.0);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));

    let saved = dir.join("prox.jsonl");
    std::fs::write(&saved, &out).unwrap();
    let png = dir.join("plot.png");
    ok(&["bench", "plot", "--results", s(&saved), "--plot", s(&png)]);
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    let junk = dir.join("junk.jsonl");
    std::fs::write(&junk, "{\"engine\": 1}\n").unwrap();
    let e = fails(
        &["bench", "plot", "--results", s(&junk), "--plot", s(&png)],
        1,
    );
    assert!(e.contains("junk.jsonl: line 1"), "{e}");
}

#[test]
fn demo_runs_end_to_end_on_small_data() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("prox-data");
    let out = ok(&[
        "demo",
        "--store",
        s(&store),
        "--n",
        "600",
        "--dim",
        "8",
        "--queries",
        "20",
        "--seed",
        &seed(),
        "--json",
    ]);
    let recs = json_lines(&out);
    let exact = recs
        .iter()
        .find(|r| r["mode"] == "exact")
        .expect("exact row");
    assert_eq!(exact["recall"], 1.0, "{out}");
    assert!(recs.iter().any(|r| r["path"] == "hnsw"), "{out}");
    // The recall targets run the setting the measured profile chose.
    let tuned = recs
        .iter()
        .find(|r| r["mode"].as_str().unwrap().starts_with("recall=0.95: "))
        .expect("a recall=0.95 row");
    assert!(tuned["recall"].as_f64().unwrap() >= 0.85, "{out}");
    assert!(store.join("datasets/demo/gt.ivecs").exists());
    ok(&["verify", "--store", s(&store), "demo"]);
}

#[test]
fn nprobe_reaches_the_pq_fast_scan_path() {
    // 16 centroids per subquantizer: 4-bit codes, the IVF fast-scan path.
    let f = fixture(&["--pq", "subquantizers=4,centroids=16"]);
    let q = f.data.join("query.fvecs");
    let gt = f.data.join("gt.ivecs");
    let run = |nprobe: &str| {
        let o = run(&map_cmd(
            "query",
            &f.store,
            "m",
            "--queries",
            &q,
            &["--path", "pq", "--json", "--gt", s(&gt), "--nprobe", nprobe],
        ));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let lines = json_lines(&String::from_utf8_lossy(&o.stdout));
        assert!(lines.iter().all(|l| l["path"] == "pq"), "{lines:?}");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let recall: f64 = err
            .split("recall@10 ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no recall in {err}"));
        (lines, recall)
    };
    let (one, _) = run("1");
    let (all, recall_all) = run("100000");
    // Probing every list finds what one list cannot: if --nprobe were
    // ignored both runs would use the same default and agree.
    assert_ne!(one, all, "--nprobe changed nothing (seed {})", seed());
    assert!(recall_all >= 0.9, "recall {recall_all} (seed {})", seed());
}

#[test]
fn pq_sweep_crosses_nprobe_with_rerank() {
    let f = fixture(&["--pq", "subquantizers=4,centroids=16"]);
    let recs = json_lines(&bench(&f, &["--path", "pq", "--sweep"]));
    let modes: Vec<&str> = recs.iter().filter_map(|r| r["mode"].as_str()).collect();
    assert_eq!(modes.len(), 16 * 6, "{modes:?}");
    assert!(recs.iter().all(|r| r["path"] == "pq"), "{recs:?}");
    for want in [
        "nprobe=1,rerank=2",
        "nprobe=24,rerank=8",
        "nprobe=256,rerank=16",
    ] {
        assert!(modes.contains(&want), "no {want} in {modes:?}");
    }
    let recall = |mode: &str| {
        recs.iter()
            .find(|r| r["mode"] == mode)
            .and_then(|r| r["recall"].as_f64())
            .unwrap_or_else(|| panic!("no {mode}"))
    };
    // Every list probed and a deep rerank find at least what one list does.
    assert!(recall("nprobe=256,rerank=16") >= recall("nprobe=1,rerank=2"));
    assert!(recall("nprobe=256,rerank=16") >= 0.9, "seed {}", seed());
    // Without --sweep the rerank varies at the default lists.
    let short = json_lines(&bench(&f, &["--path", "pq"]));
    let modes: Vec<&str> = short.iter().filter_map(|r| r["mode"].as_str()).collect();
    assert_eq!(
        modes,
        [
            "rerank=1",
            "rerank=2",
            "rerank=4",
            "rerank=8",
            "rerank=16",
            "rerank=32"
        ]
    );
    // More passes per setting change the timing, never the answers; zero
    // passes is refused.
    let recalls =
        |recs: &[Value]| -> Vec<f64> { recs.iter().filter_map(|r| r["recall"].as_f64()).collect() };
    let once = json_lines(&bench(&f, &["--path", "pq", "--reps", "1"]));
    let four = json_lines(&bench(&f, &["--path", "pq", "--reps", "4"]));
    assert_eq!(recalls(&once), recalls(&short));
    assert_eq!(recalls(&four), recalls(&short));
    let (q, gt) = (f.data.join("query.fvecs"), f.data.join("gt.ivecs"));
    let o = run(&map_cmd(
        "bench",
        &f.store,
        "m",
        "--queries",
        &q,
        &["--gt", s(&gt), "--path", "pq", "--reps", "0"],
    ));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--reps"),
        "{o:?}"
    );
}

#[test]
fn probes_set_the_native_leaves_scanned() {
    // Chunks of ~8 records: the 400-record map has dozens of leaves.
    let f = fixture(&["--log-chunk-size", "3"]);
    let out = bench(&f, &["--path", "native", "--probes", "1,100000"]);
    let recs = json_lines(&out);
    let point = |mode: &str| {
        recs.iter()
            .find(|r| r["mode"] == mode)
            .unwrap_or_else(|| panic!("no {mode} point in {out}"))
            .clone()
    };
    let (one, all) = (point("probes=1"), point("probes=100000"));
    let f64_of = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
    // One leaf holds a few records; every leaf holds all of them.
    assert!(
        f64_of(&one, "mean_distance_evals") < f64_of(&all, "mean_distance_evals"),
        "{one} vs {all}"
    );
    assert!(
        f64_of(&one, "recall") < f64_of(&all, "recall"),
        "{one} vs {all}"
    );
    assert!(f64_of(&all, "recall") >= 0.99, "{all} (seed {})", seed());
}

/// Starts `prox serve` on `store` (loopback, an ephemeral port, one
/// executor thread); returns the child and the address it printed.
fn spawn_serve(store: &Path, extra: &[&str]) -> (std::process::Child, std::net::SocketAddr) {
    use std::io::{BufRead, BufReader, Read};
    use std::time::Duration;
    let mut child = prox()
        .args([
            "serve",
            "--store",
            s(store),
            "--http",
            "127.0.0.1:0",
            "--io-threads",
            "1",
        ])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn prox serve");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
    let addr = line.trim().strip_prefix("http http://").map(str::parse);
    let Some(Ok(addr)) = addr else {
        let _ = child.kill();
        let mut err = String::new();
        let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
        panic!("no address from prox serve: {line:?}\n{err}");
    };
    (child, addr)
}

#[test]
fn bench_serve_alternates_rounds_and_reports_ratios() {
    let f = fixture(&[]);
    let (q, gt) = (f.data.join("query.fvecs"), f.data.join("gt.ivecs"));
    let (mut child, addr) = spawn_serve(&f.store, &[]);
    let url = format!("http://{addr}");
    let base = [
        "bench",
        "serve",
        "--url",
        &url,
        "--name",
        "m",
        "--queries",
        s(&q),
        "--gt",
        s(&gt),
        "--store",
        s(&f.store),
        "--threads",
        "1",
        "--concurrency",
        "1,2",
    ];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    let out = run(&with(&["--duration", "600ms", "--rounds", "3", "--json"]));
    let zero = run(&with(&["--duration", "600ms", "--rounds", "0"]));
    let thin = run(&with(&["--duration", "20ms", "--rounds", "3"]));
    let _ = child.kill();
    let _ = child.wait();
    let text = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    let err = text(&out);
    for r in 1..=3 {
        assert!(err.contains(&format!("round {r}/3:")), "{err}");
    }
    assert!(err.contains("recall@10"), "{err}");
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    let find = |what: &str, threads: u64| {
        lines
            .iter()
            .find(|l| l["what"] == what && l["threads"] == threads)
            .unwrap_or_else(|| panic!("no {what} @{threads} in {lines:?}"))
    };
    for (what, threads) in [("in-process single", 1), ("http", 1), ("http", 2)] {
        let r = find(what, threads);
        assert!(r["queries"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        // Three slices of 200 ms each.
        let secs = r["secs"].as_f64().unwrap();
        assert!((0.55..5.0).contains(&secs), "{r}");
    }
    for c in [1, 2] {
        let r = find("http / in-process single", c);
        let per = r["per_round"].as_array().expect("per_round");
        assert_eq!(per.len(), 3, "{r}");
        assert!(per.iter().all(|x| x.as_f64().unwrap() > 0.0), "{r}");
        let m = r["median"].as_f64().unwrap();
        let (lo, hi) = per
            .iter()
            .map(|x| x.as_f64().unwrap())
            .fold((f64::MAX, 0f64), |(a, b), x| (a.min(x), b.max(x)));
        assert!(lo <= m && m <= hi, "{r}");
    }
    assert!(!zero.status.success(), "{}", text(&zero));
    assert!(text(&zero).contains("--rounds"), "{}", text(&zero));
    assert!(!thin.status.success(), "{}", text(&thin));
    assert!(text(&thin).contains("per slice"), "{}", text(&thin));
}

#[test]
fn serve_answers_over_http_like_query() {
    use std::time::Duration;
    let f = fixture(&[]);
    let qf = f.data.join("query.fvecs");
    // The first query row of the fvecs file: dimension, then its floats.
    let bytes = std::fs::read(&qf).expect("query.fvecs");
    let dim = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    let vector: Vec<f32> = bytes[4..4 + 4 * dim]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let cli = ok(&map_cmd(
        "query",
        &f.store,
        "m",
        "--queries",
        &qf,
        &["--k", "10", "--mode", "exact", "--json"],
    ));
    let want = &json_lines(&cli)[0]["results"];

    let (mut child, addr) = spawn_serve(&f.store, &[]);
    let body = serde_json::json!({"vector": vector, "k": 10, "mode": "exact", "with_values": true});
    let r = prox_serve::client::Client::new(addr)
        .with_timeout(Duration::from_secs(30))
        .post("/v1/maps/m/search", body.to_string().as_bytes());
    let _ = child.kill();
    let _ = child.wait();
    let r = r.expect("HTTP search");
    assert_eq!(r.status, 200);
    let got = r.json().expect("JSON answer");
    assert_eq!(got["completion"], "exact", "{got}");
    assert_eq!(&got["results"], want, "HTTP and CLI answers differ");
}

#[test]
fn serve_with_a_write_token_takes_upserts_that_outlive_it() {
    use std::time::Duration;
    let f = fixture(&["--hnsw"]);
    let token = f.store.parent().unwrap().join("write-token");
    std::fs::write(&token, "w-secret\n").unwrap();
    let (mut child, addr) = spawn_serve(&f.store, &["--write-token-file", s(&token)]);
    let vector = vec![0.25f32; 8];
    let key = hex::encode(90_000u64.to_be_bytes());
    let body = serde_json::json!({"points": [{"key": key, "vector": vector, "value": "6869"}]});
    let mut c = prox_serve::client::Client::new(addr).with_timeout(Duration::from_secs(30));
    let refused = c.post("/v1/maps/m/points:upsert", body.to_string().as_bytes());
    let mut c = c.with_token("w-secret");
    let written = c.post("/v1/maps/m/points:upsert", body.to_string().as_bytes());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(refused.expect("HTTP").status, 401);
    let written = written.expect("HTTP upsert");
    let answer = written.json().expect("JSON answer");
    assert_eq!(written.status, 200, "{answer}");
    assert_eq!(answer["hnsw"], "updated", "{answer}");
    // The server is gone (SIGKILL): the write is in the store.
    ok(&["verify", "--store", s(&f.store), "m"]);
    let q = f.store.parent().unwrap().join("q.json");
    std::fs::write(&q, serde_json::json!({"vector": vector}).to_string()).unwrap();
    let out = ok(&map_cmd(
        "query",
        &f.store,
        "m",
        "--queries",
        &q,
        &["--k", "1", "--mode", "exact", "--json"],
    ));
    assert_eq!(json_lines(&out)[0]["results"][0]["key"], key, "{out}");
}

/// While `prox serve` (writes on) holds a store's lock, `prox update`,
/// `gc --dry-run` and `roots list` on that store go through its owner
/// socket: the server answers with the updated record, `--no-owner` keeps
/// the lock failure, and a socket left by a killed server is ignored.
#[test]
fn cli_writes_reach_a_served_store_through_its_owner() {
    use std::time::Duration;
    let f = fixture(&[]);
    let token = f.store.parent().unwrap().join("write-token");
    std::fs::write(&token, "w-secret\n").unwrap();
    let (mut child, addr) = spawn_serve(&f.store, &["--write-token-file", s(&token)]);
    let sock = f.store.join("owner.sock");
    let rows = f.store.parent().unwrap().join("new.jsonl");
    let key = hex::encode(77_000u64.to_be_bytes());
    let vector = vec![0.75f32; 8];
    std::fs::write(
        &rows,
        format!(
            "{}\n",
            serde_json::json!({"op": "put", "key": key, "vector": vector, "value": "6869"})
        ),
    )
    .unwrap();
    let update = run(&map_cmd("update", &f.store, "m", "--input", &rows, &[]));
    let gc = run(&["gc", "--store", s(&f.store), "--dry-run"]);
    let roots = run(&["roots", "list", "--store", s(&f.store)]);
    let refused = run(&map_cmd(
        "update",
        &f.store,
        "m",
        "--input",
        &rows,
        &["--no-owner"],
    ));
    let body = serde_json::json!({"vector": vector, "k": 1, "mode": "exact"});
    let mut c = prox_serve::client::Client::new(addr).with_timeout(Duration::from_secs(30));
    let mut answer = None;
    for _ in 0..40 {
        let r = c.post("/v1/maps/m/search", body.to_string().as_bytes());
        let v = r.ok().and_then(|r| r.json().ok());
        if v.as_ref().is_some_and(|v| v["results"][0]["key"] == key) {
            answer = v;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = |o: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(update.status.success(), "{}", text(&update));
    assert!(text(&update).contains("owner.sock"), "{}", text(&update));
    assert!(gc.status.success(), "{}", text(&gc));
    assert!(text(&gc).contains("would remove"), "{}", text(&gc));
    assert!(roots.status.success(), "{}", text(&roots));
    assert!(text(&roots).starts_with("m\t"), "{}", text(&roots));
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(answer.is_some(), "the server never served the update");
    // Killed, not stopped: the socket file is stale, the lock is free, and
    // a writer opens the store itself again.
    assert!(sock.exists());
    let direct = ok_err(&map_cmd("update", &f.store, "m", "--input", &rows, &[]));
    assert!(!direct.contains("owner.sock"), "{direct}");
    ok(&["verify", "--store", s(&f.store), "m"]);
}

/// An HTTP writer and `prox update` (through the served store's owner
/// socket) write one map at the same time: every request and every update
/// succeeds (whichever loses a race re-applies its batch to the winner's
/// version) and every batch of both is in the final map, with the HNSW
/// sidecar carried; `prox verify` passes.
#[test]
fn an_http_writer_and_a_cli_update_of_one_map_lose_nothing() {
    use prox_engine::proximity::{self, ProximityMap};
    use prox_engine::store::MmapStore;
    use std::time::Duration;
    const HTTP_BATCHES: u64 = 24;
    const CLI_RUNS: u64 = 5;
    const BATCH: u64 = 4;
    let f = fixture(&["--hnsw"]);
    let dir = f.store.parent().unwrap().to_path_buf();
    let token = dir.join("write-token");
    std::fs::write(&token, "w-secret\n").unwrap();
    let mut rng = prox_testkit::SplitMix64::new(seed().parse().unwrap_or(3));
    let mut vector = move || -> Vec<f32> { (0..8).map(|_| rng.unit()).collect() };
    let cli_key = |r: u64, i: u64| 2_000_000 + 10 * r + i;
    let http_key = |b: u64, i: u64| 1_000_000 + BATCH * b + i;
    let files: Vec<PathBuf> = (0..CLI_RUNS)
        .map(|r| {
            let p = dir.join(format!("edits-{r}.jsonl"));
            let lines: String = (0..BATCH)
                .map(|i| {
                    let key = hex::encode(cli_key(r, i).to_be_bytes());
                    format!(
                        "{}\n",
                        serde_json::json!({"op": "put", "key": key, "vector": vector()})
                    )
                })
                .collect();
            std::fs::write(&p, lines).unwrap();
            p
        })
        .collect();
    let bodies: Vec<String> = (0..HTTP_BATCHES)
        .map(|b| {
            let points: Vec<_> = (0..BATCH)
                .map(|i| {
                    let key = hex::encode(http_key(b, i).to_be_bytes());
                    serde_json::json!({"key": key, "vector": vector()})
                })
                .collect();
            serde_json::json!({ "points": points }).to_string()
        })
        .collect();
    let (mut child, addr) = spawn_serve(&f.store, &["--write-token-file", s(&token)]);
    let (http, cli) = std::thread::scope(|sc| {
        let http = sc.spawn(|| {
            let mut c = prox_serve::client::Client::new(addr)
                .with_timeout(Duration::from_secs(60))
                .with_token("w-secret");
            bodies
                .iter()
                .map(|b| match c.post("/v1/maps/m/points:upsert", b.as_bytes()) {
                    Ok(r) => (r.status, format!("{:?}", r.json())),
                    Err(e) => (0, e.to_string()),
                })
                .collect::<Vec<_>>()
        });
        let cli = sc.spawn(|| {
            files
                .iter()
                .map(|p| run(&map_cmd("update", &f.store, "m", "--input", p, &["--json"])))
                .collect::<Vec<Output>>()
        });
        (http.join().unwrap(), cli.join().unwrap())
    });
    let _ = child.kill();
    let _ = child.wait();
    for (b, (status, body)) in http.iter().enumerate() {
        assert_eq!(*status, 200, "HTTP batch {b}: {body}");
    }
    for (r, o) in cli.iter().enumerate() {
        assert!(
            o.status.success(),
            "update {r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let lines = json_lines(&String::from_utf8_lossy(&o.stdout));
        assert_eq!(lines[0]["hnsw"], "updated", "update {r}: {lines:?}");
        has_keys(&lines[0], &["rebased"]);
    }
    let store = MmapStore::open_read_only(&f.store).expect("reopen");
    let (cid, sidecars) = proximity::resolve(&store, "m").unwrap().expect("map m");
    assert!(sidecars.hnsw.is_some(), "the HNSW sidecar was lost");
    let map = ProximityMap::load(&store, cid).unwrap();
    let keys = (0..HTTP_BATCHES)
        .flat_map(|b| (0..BATCH).map(move |i| http_key(b, i)))
        .chain((0..CLI_RUNS).flat_map(|r| (0..BATCH).map(move |i| cli_key(r, i))));
    for k in keys {
        assert!(
            map.get(&k.to_be_bytes()).unwrap().is_some(),
            "key {k} was lost"
        );
    }
    drop(map);
    drop(store);
    ok(&["verify", "--store", s(&f.store), "m"]);
}

/// Several clients upsert batches into `prox serve` while it is killed
/// (SIGKILL) at a seeded moment after its first acknowledged write, 20
/// times over one store: every
/// acknowledged batch is present after each kill, every unacknowledged one
/// is all there or not at all, and `prox verify` passes at the end.
#[test]
fn acknowledged_writes_survive_sigkill_and_batches_stay_whole() {
    use prox_engine::proximity::{self, ProximityMap};
    use prox_engine::store::MmapStore;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    const RUNS: u64 = 20;
    const CLIENTS: u64 = 3;
    const BATCH: u64 = 4;
    let f = fixture(&["--hnsw"]);
    let token = f.store.parent().unwrap().join("write-token");
    std::fs::write(&token, "w-secret").unwrap();
    let base: u64 = seed().parse().unwrap_or(1);
    let mut acked_total = 0;
    for run in 0..RUNS {
        let mut rng = prox_testkit::SplitMix64::new(base ^ (run << 32));
        let (mut child, addr) = spawn_serve(&f.store, &["--write-token-file", s(&token)]);
        // (keys, acknowledged) of every batch sent in this run.
        type Sent = Vec<(Vec<u64>, bool)>;
        let sent: Arc<Mutex<Sent>> = Arc::default();
        let kill_after = Duration::from_millis(20 + rng.below(200));
        // The kill lands a seeded time after the first acknowledgement, so
        // every run kills a server that is writing however slowly a loaded
        // machine lets its (idle-class) write pool run.
        let (first_ack, acked_once) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|sc| {
            for c in 0..CLIENTS {
                let sent = sent.clone();
                let first_ack = first_ack.clone();
                let mut rng = prox_testkit::SplitMix64::new(base ^ (run << 32) ^ (c + 1));
                sc.spawn(move || {
                    let mut client = prox_serve::client::Client::new(addr)
                        .with_timeout(Duration::from_secs(10))
                        .with_token("w-secret");
                    // Bounded: at most 200 batches, and the server dies.
                    for b in 0..200u64 {
                        let keys: Vec<u64> = (0..BATCH)
                            .map(|i| 1_000_000 * (run + 1) + 10_000 * c + BATCH * b + i)
                            .collect();
                        let points: Vec<_> = keys
                            .iter()
                            .map(|k| {
                                let v: Vec<f32> = (0..8).map(|_| rng.unit()).collect();
                                serde_json::json!({"key": hex::encode(k.to_be_bytes()), "vector": v})
                            })
                            .collect();
                        let body = serde_json::json!({ "points": points }).to_string();
                        let r = client.post("/v1/maps/m/points:upsert", body.as_bytes());
                        let acked = matches!(&r, Ok(r) if r.status == 200);
                        if acked {
                            let _ = first_ack.send(());
                        }
                        if let Ok(r) = &r {
                            assert!(r.status == 200, "run {run}: status {} {:?}", r.status, r.json());
                        }
                        sent.lock().unwrap().push((keys, acked));
                        if r.is_err() {
                            return;
                        }
                    }
                });
            }
            let _ = acked_once.recv_timeout(Duration::from_secs(20));
            std::thread::sleep(kill_after);
            let _ = child.kill();
            let _ = child.wait();
        });
        let store = MmapStore::open_read_only(&f.store).expect("reopen after SIGKILL");
        let (cid, _) = proximity::resolve(&store, "m").unwrap().expect("map m");
        let map = ProximityMap::load(&store, cid).unwrap();
        let sent = sent.lock().unwrap();
        acked_total += sent.iter().filter(|b| b.1).count();
        for (keys, acked) in sent.iter() {
            let present = keys
                .iter()
                .filter(|k| map.get(&k.to_be_bytes()).unwrap().is_some())
                .count();
            if *acked {
                assert_eq!(
                    present,
                    keys.len(),
                    "run {run} (seed {base}): acknowledged batch {keys:?} lost"
                );
            } else {
                assert!(
                    present == 0 || present == keys.len(),
                    "run {run} (seed {base}): batch {keys:?} half visible"
                );
            }
        }
    }
    assert!(
        acked_total >= RUNS as usize,
        "too few writes acknowledged to test anything: {acked_total}"
    );
    ok(&["verify", "--store", s(&f.store), "m"]);
}
