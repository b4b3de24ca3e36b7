//! The `prox` binary on a bucket store (`--store s3://bucket/prefix`):
//! build, query, inspect, update, verify, gc and serve against a real
//! S3-compatible server on loopback, with answers compared to the same
//! commands on a directory store.
//!
//! The server comes from the environment as in prox-s3's tests
//! (`PROX_S3_ENDPOINT`, `PROX_S3_BUCKET`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`); `.ci/s3` starts one and runs this file with
//! `PROX_S3_REQUIRED=1`. Without a server the test says why it skips.

mod common;

use common::{prox, s};
use serde_json::Value;
use std::io::{BufRead, Read, Write};
use std::process::Output;
use std::time::{Duration, Instant};

/// `(endpoint, bucket)`, or `None` after saying why the test skips.
fn server() -> Option<(String, String)> {
    let endpoint = std::env::var("PROX_S3_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty());
    let required = std::env::var("PROX_S3_REQUIRED").as_deref() == Ok("1");
    let Some(endpoint) = endpoint else {
        assert!(
            !required,
            "PROX_S3_REQUIRED=1 but PROX_S3_ENDPOINT is not set"
        );
        eprintln!("skipped: no S3 server configured (set PROX_S3_ENDPOINT, or run .ci/s3)");
        return None;
    };
    assert!(
        std::env::var("AWS_ACCESS_KEY_ID").is_ok(),
        "PROX_S3_ENDPOINT is set but AWS_ACCESS_KEY_ID is not"
    );
    let bucket = std::env::var("PROX_S3_BUCKET").unwrap_or_else(|_| "prox-test".into());
    Some((endpoint, bucket))
}

/// Runs `prox ARGS` with the endpoint in the standard AWS variable.
fn run(endpoint: &str, args: &[&str]) -> Output {
    prox()
        .env("AWS_ENDPOINT_URL", endpoint)
        .args(args)
        .output()
        .expect("run prox")
}

fn ok(endpoint: &str, args: &[&str]) -> String {
    let o = run(endpoint, args);
    assert!(
        o.status.success(),
        "prox {args:?} failed ({:?}):\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// One HTTP/1.1 GET on loopback; the body.
fn get(addr: &str, path: &str) -> String {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// A prefix in `bucket` no other run uses.
fn fresh_url(bucket: &str, tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("s3://{bucket}/{tag}-{}-{nanos}", std::process::id())
}

/// `prox datagen` into `out`: `n` 8-d records, `queries` queries with
/// their `k` nearest, from the test seed derived from `seed`.
fn datagen(ep: &str, out: &std::path::Path, n: u32, queries: u32, k: u32, seed: u64) {
    let (n, queries, k) = (n.to_string(), queries.to_string(), k.to_string());
    let seed = common::seed(seed);
    ok(
        ep,
        &[
            "datagen",
            "--n",
            &n,
            "--dim",
            "8",
            "--queries",
            &queries,
            "--k",
            &k,
            "--seed",
            &seed,
            "--out",
            s(out),
        ],
    );
}

#[test]
fn every_store_command_works_on_a_bucket() {
    let Some((ep, bucket)) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let local = dir.path().join("local");
    let url = fresh_url(&bucket, "cli");
    datagen(&ep, &data, 500, 6, 5, 5);
    let base = data.join("base.fvecs");
    let queries = data.join("query.fvecs");
    // The same records and config give the same descriptor on both stores.
    let built: Vec<Value> = [url.as_str(), s(&local)]
        .into_iter()
        .map(|store| {
            json(&ok(
                &ep,
                &[
                    "build",
                    "--store",
                    store,
                    "--name",
                    "m",
                    "--input",
                    s(&base),
                    "--json",
                ],
            ))
        })
        .collect();
    assert_eq!(built[0]["descriptor"], built[1]["descriptor"], "{built:?}");
    assert!(
        !std::path::Path::new("s3:").exists(),
        "a bucket build spilled into a local s3: directory"
    );
    let query = |store: &str| {
        ok(
            &ep,
            &[
                "query",
                "--store",
                store,
                "--name",
                "m",
                "--queries",
                s(&queries),
                "--k",
                "5",
                "--mode",
                "exact",
                "--json",
            ],
        )
    };
    assert_eq!(
        query(&url),
        query(s(&local)),
        "same answers from the bucket"
    );

    let root = json(&ok(
        &ep,
        &["inspect", "--store", &url, "--root", "m", "--json"],
    ));
    assert_eq!(root["kind"], "RootManifest", "{root}");

    // An update moves the root; the replaced nodes become garbage.
    let updated: Vec<Value> = [url.as_str(), s(&local)]
        .into_iter()
        .map(|store| {
            json(&ok(
                &ep,
                &[
                    "update",
                    "--store",
                    store,
                    "--name",
                    "m",
                    "--input",
                    s(&queries),
                    "--start-key",
                    "100000",
                    "--json",
                ],
            ))
        })
        .collect();
    assert_eq!(
        updated[0]["descriptor"], updated[1]["descriptor"],
        "{updated:?}"
    );
    assert_ne!(updated[0]["descriptor"], built[0]["descriptor"]);
    assert_eq!(
        query(&url),
        query(s(&local)),
        "same answers after the update"
    );
    ok(&ep, &["verify", "--store", &url, "m"]);

    // A local cache: a cold and a warm query answer as the bucket does,
    // the first fills the cache, and a directory store refuses one.
    let cache = dir.path().join("cache");
    let cached_query = || {
        ok(
            &ep,
            &[
                "query",
                "--store",
                &url,
                "--cache-dir",
                s(&cache),
                "--cache-bytes",
                "64M",
                "--name",
                "m",
                "--queries",
                s(&queries),
                "--k",
                "5",
                "--mode",
                "exact",
                "--json",
            ],
        )
    };
    let direct = query(&url);
    assert_eq!(cached_query(), direct, "cold cache");
    assert!(
        std::fs::read_dir(&cache).unwrap().next().is_some(),
        "the cache holds blocks"
    );
    assert_eq!(cached_query(), direct, "warm cache");
    let refused = run(
        &ep,
        &[
            "query",
            "--store",
            s(&local),
            "--cache-dir",
            s(&cache),
            "--name",
            "m",
            "--queries",
            s(&queries),
        ],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--cache-dir"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // GC: within the grace period nothing goes; past it the dry run
    // predicts the run, and the map is intact afterwards.
    let young = json(&ok(&ep, &["gc", "--store", &url, "--json"]));
    assert_eq!(young["removed_blocks"], 0, "{young}");
    let dry = json(&ok(
        &ep,
        &[
            "gc",
            "--store",
            &url,
            "--grace-secs",
            "0",
            "--dry-run",
            "--json",
        ],
    ));
    assert!(dry["removed_blocks"].as_u64().unwrap() > 0, "{dry}");
    let done = json(&ok(
        &ep,
        &["gc", "--store", &url, "--grace-secs", "0", "--json"],
    ));
    assert_eq!(done["removed_blocks"], dry["removed_blocks"], "{done}");
    ok(&ep, &["verify", "--store", &url, "m"]);
    assert_eq!(query(&url), query(s(&local)), "same answers after gc");

    // serve: a map published by another process appears within the
    // refresh interval.
    let mut child = prox()
        .env("AWS_ENDPOINT_URL", &ep)
        .args([
            "serve",
            "--store",
            &url,
            "--http",
            "127.0.0.1:0",
            "--refresh-ms",
            "200",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("http http://")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let maps = get(&addr, "/v1/maps");
    assert!(maps.contains("\"m\""), "{maps}");
    ok(
        &ep,
        &[
            "build",
            "--store",
            &url,
            "--name",
            "m2",
            "--input",
            s(&base),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if get(&addr, "/v1/maps").contains("\"m2\"") {
            break;
        }
        assert!(Instant::now() < deadline, "serve never saw map m2");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A `prox daemon` child (killed on drop) and its listen address.
struct Daemon {
    child: std::process::Child,
    addr: String,
}

impl Daemon {
    fn start(endpoint: &str, store_args: &[&str]) -> Daemon {
        let mut child = prox()
            .env("AWS_ENDPOINT_URL", endpoint)
            .arg("daemon")
            .args(store_args)
            .arg("--open")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("daemon starts");
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut addr = String::new();
        // peer_id, listen and control lines: a handful at most.
        for line in out.lines().take(8) {
            let line = line.unwrap();
            if let Some(a) = line.strip_prefix("listen ") {
                addr = a.to_string();
            }
            if line.starts_with("control ") {
                break;
            }
        }
        assert!(!addr.is_empty(), "daemon printed its listen address");
        Daemon { child, addr }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `prox sync pull` into a bucket from a daemon on a directory, then a
/// daemon serving that bucket as the source of a pull into a directory:
/// every copy answers like the original.
#[test]
fn sync_pulls_into_a_bucket_and_a_daemon_serves_one() {
    let Some((ep, bucket)) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let src = dir.path().join("src");
    let url = fresh_url(&bucket, "sync");
    datagen(&ep, &data, 400, 4, 3, 7);
    let queries = data.join("query.fvecs");
    ok(
        &ep,
        &[
            "build",
            "--store",
            s(&src),
            "--name",
            "m",
            "--input",
            s(&data.join("base.fvecs")),
        ],
    );
    let query = |store: &str| {
        ok(
            &ep,
            &[
                "query",
                "--store",
                store,
                "--name",
                "m",
                "--queries",
                s(&queries),
                "--k",
                "3",
                "--mode",
                "exact",
                "--json",
            ],
        )
    };
    let want = query(s(&src));

    let source = Daemon::start(&ep, &["--store", s(&src)]);
    let no_state = run(
        &ep,
        &[
            "sync",
            "pull",
            "--store",
            &url,
            "--peer",
            &source.addr,
            "--name",
            "m",
        ],
    );
    assert!(!no_state.status.success());
    let err = String::from_utf8_lossy(&no_state.stderr);
    assert!(err.contains("--sync-dir"), "{err}");
    let state = dir.path().join("state");
    let report = json(&ok(
        &ep,
        &[
            "sync",
            "pull",
            "--store",
            &url,
            "--sync-dir",
            s(&state),
            "--peer",
            &source.addr,
            "--name",
            "m",
            "--json",
        ],
    ));
    assert!(report["blocks_fetched"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(query(&url), want, "the bucket copy answers like the source");
    ok(&ep, &["verify", "--store", &url, "m"]);
    drop(source);

    // The bucket as a daemon's store, the source of a pull into a directory.
    let served_state = dir.path().join("served-state");
    let from_bucket = Daemon::start(&ep, &["--store", &url, "--sync-dir", s(&served_state)]);
    let dst = dir.path().join("dst");
    ok(
        &ep,
        &[
            "sync",
            "pull",
            "--store",
            s(&dst),
            "--peer",
            &from_bucket.addr,
            "--name",
            "m",
        ],
    );
    assert_eq!(query(s(&dst)), want, "pulled from the bucket");
}

/// Two processes update one map in the bucket at the same time, each with
/// its own keys: every update succeeds (the one that loses the root's
/// compare-and-swap re-applies its batch to the winner's version) and the
/// final map is the one a directory store gets from the same updates run
/// one after the other (maps are history-independent, so the order does
/// not matter).
#[test]
fn two_processes_updating_one_bucket_map_lose_nothing() {
    const ROUNDS: u64 = 4;
    let Some((ep, bucket)) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let local = dir.path().join("local");
    let url = fresh_url(&bucket, "race");
    datagen(&ep, &data, 300, 20, 5, 7);
    let base = data.join("base.fvecs");
    let more = data.join("query.fvecs");
    for store in [url.as_str(), s(&local)] {
        ok(
            &ep,
            &[
                "build",
                "--store",
                store,
                "--name",
                "m",
                "--hnsw",
                "--input",
                s(&base),
            ],
        );
    }
    // Writer w's round r adds the 20 vectors under keys from its own start.
    let start = |w: u64, r: u64| (1_000_000 * (w + 1) + 1_000 * r).to_string();
    // Every JSON line of the update: one per batch, then the summary.
    let update = |store: &str, w: u64, r: u64| -> Vec<Value> {
        let out = ok(
            &ep,
            &[
                "update",
                "--store",
                store,
                "--name",
                "m",
                "--input",
                s(&more),
                "--start-key",
                &start(w, r),
                "--json",
            ],
        );
        out.lines().map(json).collect()
    };
    let reports: Vec<Vec<Value>> = std::thread::scope(|sc| {
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (update, url) = (&update, &url);
                sc.spawn(move || (0..ROUNDS).map(|r| update(url, w, r)).collect::<Vec<_>>())
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|h| h.join().expect("writer thread"))
            .collect()
    });
    for lines in &reports {
        assert_eq!(lines.len(), 2, "one batch and the summary: {lines:?}");
        assert_eq!(lines[0]["hnsw"], "updated", "{lines:?}");
        assert!(lines[0]["rebased"].as_u64().is_some(), "{lines:?}");
    }
    let rebased: u64 = reports
        .iter()
        .filter_map(|l| l[0]["rebased"].as_u64())
        .sum();
    eprintln!(
        "{rebased} of {} updates re-applied after a lost race",
        2 * ROUNDS
    );
    for w in 0..2 {
        for r in 0..ROUNDS {
            update(s(&local), w, r);
        }
    }
    // `prox verify` checks each map and names its descriptor.
    let bucket = json(&ok(&ep, &["verify", "--store", &url, "m", "--json"]));
    let local = json(&ok(&ep, &["verify", "--store", s(&local), "m", "--json"]));
    assert_eq!(bucket["records"], 300 + 2 * ROUNDS * 20, "{bucket}");
    assert_eq!(
        bucket["descriptor"], local["descriptor"],
        "bucket {bucket}\nlocal {local}"
    );
    assert_eq!(bucket["ok"], true, "{bucket}");
}
