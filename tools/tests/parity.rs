//! The CLI and the HTTP server answer the same request identically: both
//! call the engine's `Index`, so for every mode, path and budget the keys,
//! values and canonical scores of `prox query --json` and of
//! `POST /v1/maps/{name}/search` are bit-identical, and a request one
//! refuses the other refuses too.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

const N: usize = 3000;
const DIM: usize = 16;
const QUERIES: usize = 6;
mod common;

use common::{ok, prox, read_fvecs, s, Shape};

const K: usize = 10;

fn seed() -> String {
    common::seed(11)
}

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `prox serve` on `store` (loopback, an ephemeral port); returns
/// it and the address it printed (60 s at most).
fn spawn_serve(store: &Path) -> (Server, std::net::SocketAddr) {
    let mut child = prox()
        .args(["serve", "--store", s(store), "--http", "127.0.0.1:0"])
        .args(["--io-threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
    (Server(child), addr)
}

/// One request, as CLI flags and as the HTTP body's option members.
struct Case {
    mode: &'static str,
    path: &'static str,
    budget: Option<u64>,
    filter: Option<Value>,
}

impl Case {
    fn label(&self) -> String {
        format!(
            "mode {} path {} budget {:?} filter {:?}",
            self.mode, self.path, self.budget, self.filter
        )
    }
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for mode in ["exact", "fast", "balanced", "high", "auto"] {
        for path in ["auto", "native", "hnsw", "pq"] {
            v.push(Case {
                mode,
                path,
                budget: None,
                filter: None,
            });
        }
    }
    for path in ["auto", "native", "hnsw"] {
        v.push(Case {
            mode: "auto",
            path,
            budget: Some(2000),
            filter: None,
        });
    }
    for path in ["auto", "hnsw", "pq"] {
        v.push(Case {
            mode: "auto",
            path,
            budget: None,
            // Rows 0..2047 of 3000: the first 8-byte key byte pairs 00 00 .. 00 07.
            filter: Some(json!({"range": ["0000000000000000", "0000000000000800"]})),
        });
    }
    v
}

/// `(key, value, score bits)` of each hit of one answer.
fn hits(answer: &Value) -> Vec<(String, String, u64)> {
    answer["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results in {answer}"))
        .iter()
        .map(|h| {
            (
                h["key"].as_str().unwrap_or_default().to_string(),
                h["value"].as_str().unwrap_or_default().to_string(),
                h["score"].as_f64().map_or(u64::MAX, f64::to_bits),
            )
        })
        .collect()
}

fn check_metric(metric: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, store) = (dir.path().join("data"), dir.path().join("store"));
    common::datagen(
        &data,
        Shape {
            n: N,
            dim: DIM,
            queries: QUERIES,
            k: 10,
        },
        &seed(),
        &["--metric", metric],
    );
    ok(&[
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&data.join("base.fvecs")),
        "--metric",
        metric,
        "--hnsw",
        "--pq",
        "subquantizers=4,centroids=16,iterations=4",
    ]);
    let qf = data.join("query.fvecs");
    let vectors = read_fvecs(&qf);
    assert_eq!(vectors.len(), QUERIES);
    let (_server, addr) = spawn_serve(&store);
    let mut client = prox_serve::client::Client::new(addr).with_timeout(Duration::from_secs(30));
    let mut paths_seen = std::collections::BTreeSet::new();
    let mut refused = Vec::new();
    for case in cases() {
        let label = format!("{metric} {} (seed {})", case.label(), seed());
        let k = K.to_string();
        let mut args = vec![
            "query",
            "--store",
            s(&store),
            "--name",
            "m",
            "--queries",
            s(&qf),
            "--k",
            &k,
            "--json",
            "--mode",
            case.mode,
            "--path",
            case.path,
        ];
        let budget = case.budget.map(|b| b.to_string());
        if let Some(b) = &budget {
            args.extend(["--budget", b]);
        }
        let filter = case.filter.as_ref().map(Value::to_string);
        if let Some(f) = &filter {
            args.extend(["--filter", f]);
        }
        let cli = prox().args(&args).output().expect("run prox query");
        let mut body = json!({"k": K, "mode": case.mode, "path": case.path, "with_values": true});
        if let Some(b) = case.budget {
            body["budget"] = json!(b);
        }
        if let Some(f) = &case.filter {
            body["filter"] = f.clone();
        }
        if !cli.status.success() {
            // A request the CLI refuses, HTTP refuses too (and vice versa below).
            body["vector"] = json!(vectors[0]);
            let r = client
                .post("/v1/maps/m/search", body.to_string().as_bytes())
                .expect("HTTP search");
            assert_eq!(
                r.status,
                400,
                "{label}: CLI refused ({}) but HTTP answered",
                String::from_utf8_lossy(&cli.stderr)
            );
            refused.push((case.mode, case.path, case.budget.is_some()));
            continue;
        }
        let stdout = String::from_utf8(cli.stdout).expect("utf-8");
        let lines: Vec<Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect();
        assert_eq!(lines.len(), QUERIES, "{label}");
        for (i, (line, v)) in lines.iter().zip(&vectors).enumerate() {
            body["vector"] = json!(v);
            let r = client
                .post("/v1/maps/m/search", body.to_string().as_bytes())
                .expect("HTTP search");
            let got = r.json().expect("JSON answer");
            assert_eq!(r.status, 200, "{label} query {i}: {got}");
            assert_eq!(got["path"], line["path"], "{label} query {i}");
            assert_eq!(got["completion"], line["completion"], "{label} query {i}");
            let (a, b) = (hits(line), hits(&got));
            assert!(!a.is_empty(), "{label} query {i}: no hits");
            assert_eq!(a, b, "{label} query {i}: CLI and HTTP differ");
            paths_seen.insert(line["path"].as_str().unwrap_or_default().to_string());
        }
    }
    // Exactly the contradictions are refused: exact or a budget on a sidecar.
    assert_eq!(
        refused,
        [
            ("exact", "hnsw", false),
            ("exact", "pq", false),
            ("auto", "hnsw", true)
        ],
        "{metric}"
    );
    let all: Vec<&str> = paths_seen.iter().map(String::as_str).collect();
    assert_eq!(all, ["hnsw", "native", "pq"], "{metric}: paths that ran");
}

#[test]
fn cli_and_http_agree_l2() {
    check_metric("l2");
}

#[test]
fn cli_and_http_agree_cosine() {
    check_metric("cosine");
}
