//! `prox build` in bounded memory: a build that spills under a small
//! `--memory-limit` publishes the descriptor of the in-memory build, from a
//! file, a shard directory or standard input; `--json` reports the phases;
//! sidecars over the limit are refused before any work.

mod common;

use common::{ok, prox, run, s, Shape};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;

/// `prox datagen` of `n` x 16 into `dir`; returns the base file.
fn data(dir: &Path, n: usize) -> std::path::PathBuf {
    let out = dir.join("data");
    common::datagen(
        &out,
        Shape {
            n,
            dim: 16,
            queries: 4,
            k: 1,
        },
        &common::seed(27),
        &["--kind", "gmm"],
    );
    out.join("base.fvecs")
}

/// The descriptor CID: the last stdout line.
fn descriptor(stdout: &str) -> String {
    stdout.lines().last().unwrap_or_default().to_string()
}

fn build(store: &Path, input: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "build",
        "--store",
        s(store),
        "--name",
        "m",
        "--input",
        s(input),
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

#[test]
fn spilled_stdin_and_shard_builds_equal_the_in_memory_build() {
    let dir = tempfile::tempdir().unwrap();
    let base = data(dir.path(), 6000);
    let want = descriptor(&build(&dir.path().join("a"), &base, &["--in-memory"]));

    // 1 MiB: the 6000 records (~ 1 MB in memory) spill runs.
    let st = dir.path().join("b");
    let out = build(
        &st,
        &base,
        &["--memory-limit", "1M", "--json", "--threads", "2"],
    );
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["descriptor"], want.as_str());
    assert!(v["spilled_bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(v["peak_rss_bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(v["store_bytes_written"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["memory_limit_bytes"], 1 << 20);
    let phases: Vec<&str> = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["read", "sort", "cluster", "write"]);
    assert!(
        !dir.path().join("b.spill").exists(),
        "spill directory removed"
    );
    ok(&["verify", "--store", s(&st), "m"]);

    // The same rows from stdin.
    let mut child = prox()
        .args([
            "build",
            "--store",
            s(&dir.path().join("c")),
            "--name",
            "m",
            "--input",
            "-",
            "--input-format",
            "fvecs",
            "--memory-limit",
            "1M",
            "--json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&base).unwrap())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["descriptor"], want.as_str());
    // One JSON line per phase on stderr.
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    for l in &lines {
        assert_eq!(l["records"], 6000, "{l}");
        assert!(l["seconds"].is_number() && l["records_per_second"].is_number());
    }

    // The same rows cut into two shards (keys continue across them).
    let rows = std::fs::read(&base).unwrap();
    let row = 4 + 16 * 4;
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    std::fs::write(shards.join("0.fvecs"), &rows[..2500 * row]).unwrap();
    std::fs::write(shards.join("1.fvecs"), &rows[2500 * row..]).unwrap();
    let out = build(&dir.path().join("d"), &shards, &["--memory-limit", "1M"]);
    assert_eq!(descriptor(&out), want);
}

#[test]
fn sidecars_over_the_limit_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let base = data(dir.path(), 6000);
    let st = dir.path().join("st");
    let o = run(&[
        "build",
        "--store",
        s(&st),
        "--name",
        "m",
        "--input",
        s(&base),
        "--memory-limit",
        "1M",
        "--hnsw",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("need about") && e.contains("1.0 MiB limit"),
        "{e}"
    );
    assert!(!e.contains("phases:"), "no work was done: {e}");
    let o = run(&["verify", "--store", s(&st), "m"]);
    assert!(!o.status.success(), "no root was published");
    let o = run(&[
        "build",
        "--store",
        s(&st),
        "--name",
        "m",
        "--input",
        s(&base),
        "--memory-limit",
        "1k",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("1 MiB minimum"));
}

#[test]
fn builds_killed_at_random_moments_resume_to_the_same_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let base = data(dir.path(), 6000);
    let args = |st: &Path| -> Vec<String> {
        [
            "build",
            "--store",
            s(st),
            "--name",
            "m",
            "--input",
            s(&base),
            "--memory-limit",
            "1M",
            // The kills land within the build itself, not the recall
            // profile measured after it is published.
            "--profile",
            "0",
        ]
        .map(String::from)
        .to_vec()
    };
    let t = std::time::Instant::now();
    let a: Vec<String> = args(&dir.path().join("whole"));
    let want = descriptor(&ok(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    let whole = t.elapsed();
    let seed = prox_testkit::seed(0x2727);
    let mut rng = prox_testkit::SplitMix64::new(seed);
    let (mut resumed, mut restarted) = (0, 0);
    for attempt in 0..20 {
        let st = dir.path().join(format!("k{attempt}"));
        // Kill somewhere inside the build (a build that already ended is
        // fine too: the resume then finds nothing and rebuilds).
        let delay = whole.mul_f64(0.1 + 0.85 * rng.unit_f64());
        let mut child = prox()
            .args(args(&st))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let mut again = args(&st);
        again.push("--resume".into());
        let o = run(&again.iter().map(String::as_str).collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "run {attempt}: {err} PROX_SEED={seed}");
        if err.contains("resuming m from its checkpoint") {
            resumed += 1;
        } else {
            restarted += 1;
        }
        assert_eq!(
            descriptor(&String::from_utf8_lossy(&o.stdout)),
            want,
            "run {attempt}, killed after {delay:?}: PROX_SEED={seed}"
        );
        let roots = ok(&["roots", "list", "--store", s(&st)]);
        assert!(
            !roots.contains("pending-build"),
            "checkpoint cleared: {roots}"
        );
        ok(&["verify", "--store", s(&st), "m"]);
    }
    eprintln!("{resumed} runs resumed from a checkpoint, {restarted} rebuilt from the start");
    assert!(
        resumed >= 1,
        "no kill landed after the checkpoint; PROX_SEED={seed}"
    );
}
