//! Hardening tests of the `prox` binary: damaged stores must never lead a
//! command to destroy intact data, and every damage the store found must
//! be reported.

mod common;

use common::{ok, run, s, Shape};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn seed() -> String {
    common::seed(23)
}

fn json(text: &str) -> Value {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A temp dir with a built map "m" (400 vectors of 8 dims) in `store`.
fn built_map() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let store = dir.path().join("store");
    common::datagen(
        &data,
        Shape {
            n: 400,
            dim: 8,
            queries: 4,
            k: 5,
        },
        &seed(),
        &[],
    );
    let base = data.join("base.fvecs");
    ok(&[
        "build",
        "--store",
        s(&store),
        "--name",
        "m",
        "--input",
        s(&base),
    ]);
    (dir, store)
}

fn segments(store: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

fn total_bytes(store: &Path) -> u64 {
    segments(store)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

/// Flips one bit of the CID inside the record header of block `cid_hex`
/// (bit rot in the frame header: the record no longer parses and the scan
/// skips it). Returns false if the record was not found.
fn flip_record_header(store: &Path, cid_hex: &str) -> bool {
    let cid = hex::decode(cid_hex).unwrap();
    for seg in segments(store) {
        let mut bytes = std::fs::read(&seg).unwrap();
        let hit = bytes
            .windows(cid.len())
            .enumerate()
            .find(|(i, w)| *w == &cid[..] && *i >= 8 && &bytes[i - 8..i - 4] == b"PXB1")
            .map(|(i, _)| i);
        if let Some(at) = hit {
            bytes[at + 3] ^= 0x04;
            std::fs::write(&seg, &bytes).unwrap();
            return true;
        }
    }
    false
}

/// The reproduction from issue 23: one bit flipped in the frame header of
/// a map's descriptor record made `prox gc` sweep the whole map. Now gc
/// refuses (exit 1, naming the block), removes nothing, and `--dry-run`
/// and `verify` report the damaged range.
#[test]
fn gc_refuses_after_a_bit_flip_in_the_descriptor_record_header() {
    let (_dir, store) = built_map();
    let st = s(&store);
    let manifest = json(&ok(&["inspect", "--store", st, "--root", "m", "--json"]));
    let crmf_cid = manifest["root"].as_str().unwrap().to_string();
    let crmf = json(&ok(&["inspect", "--store", st, &crmf_cid, "--json"]));
    let desc_cid = crmf["root"].as_str().unwrap().to_string();
    assert!(
        flip_record_header(&store, &desc_cid),
        "descriptor not found"
    );
    let before = total_bytes(&store);

    let o = run(&["gc", "--store", st]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "gc must refuse: {err}");
    assert!(err.contains(&desc_cid), "names the missing block: {err}");
    assert_eq!(total_bytes(&store), before, "nothing removed");

    let dry = json(&ok(&["gc", "--store", st, "--dry-run", "--json"]));
    assert_eq!(dry["missing"], 1, "{dry}");
    assert_eq!(dry["missing_cids"][0], desc_cid.as_str(), "{dry}");
    let ranges = dry["damaged_ranges"].as_array().unwrap();
    assert_eq!(ranges.len(), 1, "{dry}");
    assert!(ranges[0]["end"].as_u64() > ranges[0]["start"].as_u64());

    let v = run(&["verify", "--store", st, "m", "--json"]);
    assert_eq!(v.status.code(), Some(1), "the map's descriptor is gone");
    let log = String::from_utf8_lossy(&v.stderr);
    assert!(log.contains("store damage"), "{log}");
}

/// A bit flip in the record header of a persisted layout's manifest (the
/// block is lost): `verify` reads every layout as a search would, so it
/// fails and names the block, and a native query fails with the same typed
/// error instead of answering from a rebuilt layout.
#[test]
fn verify_reads_the_persisted_layouts_and_reports_a_lost_one() {
    let (dir, store) = built_map();
    let st = s(&store);
    let v = json(&ok(&["verify", "--store", st, "m", "--json"]));
    // The arena, the adaptive lists and the recall profile.
    assert_eq!(v["layouts"], 3, "{v}");
    let arena = common::root_metadata(st, "m")["prox.layout.arena"]
        .as_str()
        .expect("prox build persists the arena layout")
        .to_string();
    assert!(flip_record_header(&store, &arena), "layout not found");
    let v = run(&["verify", "--store", st, "m", "--json"]);
    let err = String::from_utf8_lossy(&v.stderr);
    assert_eq!(v.status.code(), Some(1), "{err}");
    assert!(err.contains(&arena) && err.contains("layouts"), "{err}");
    let q = dir.path().join("data").join("query.fvecs");
    let o = run(&[
        "query",
        "--store",
        st,
        "--name",
        "m",
        "--queries",
        s(&q),
        "--k",
        "3",
        "--path",
        "native",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&arena), "{err}");
}

/// A damaged copy of the named roots no longer makes the store unopenable:
/// commands use the previous commit, and `prox roots recover` reports the
/// damage and rewrites both copies.
#[test]
fn roots_recover_reports_and_repairs_a_damaged_copy() {
    let (_dir, store) = built_map();
    let st = s(&store);
    // Set the root once more so both copies exist (generations n-1, n).
    let list = json(&ok(&["roots", "list", "--store", st, "--json"]));
    let root = list["root"].as_str().unwrap().to_string();
    ok(&["roots", "set", "--store", st, "other", "none"]);
    let slots: Vec<PathBuf> = ["ROOTS.0", "ROOTS.1"]
        .iter()
        .map(|n| store.join(n))
        .collect();
    assert!(slots.iter().all(|p| p.exists()));
    // Damage the newest copy (the last one written).
    let newest = slots
        .iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap();
    let mut bytes = std::fs::read(newest).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(newest, &bytes).unwrap();
    // The store still opens, on the previous commit.
    let listed = json(&ok(&["roots", "list", "--store", st, "--json"]));
    assert_eq!(listed["root"], root.as_str());

    let o = run(&["roots", "recover", "--store", st, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = json(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(r["fell_back"], true, "{r}");
    assert_eq!(r["rewritten"], true, "{r}");
    let again = json(&ok(&["roots", "recover", "--store", st, "--json"]));
    assert_eq!(again["fell_back"], false, "{again}");
    assert_eq!(again["rewritten"], false, "{again}");
}

/// A pull address without `/p2p/<peer id>` would trust whoever answers
/// there: refused unless `--insecure-any-peer`.
#[test]
fn sync_pull_requires_the_peer_id_in_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s");
    let o = run(&[
        "sync",
        "pull",
        "--store",
        s(&st),
        "--peer",
        "/ip4/127.0.0.1/tcp/9",
        "--name",
        "docs",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--insecure-any-peer"), "{err}");
}

/// `prox gc` also collects the sync staging store: a block staged by a pull
/// that left no pending-sync record goes, the staged part of a pending
/// pull stays; `--dry-run` only counts.
#[test]
fn gc_collects_abandoned_sync_staging_and_keeps_pending_pulls() {
    use prox_engine::BlockStore;
    let (_dir, store) = built_map();
    let main = prox_engine::store::MmapStore::open_read_only(&store).unwrap();
    let value = main.root("m").unwrap().expect("map m has a root");
    let (first, _) = prox_engine::refs::root_links(&value).unwrap()[0];
    let first_block = main.get(&first).unwrap().unwrap();
    drop(main);
    let staging_dir = store.join("sync-staging");
    let stray = {
        let staging = prox_engine::store::MmapStore::open(&staging_dir).unwrap();
        staging.put(&first_block).unwrap();
        let stray = staging
            .put(b"staged by a pull that failed for good")
            .unwrap();
        let record = prox_sync::pending::PendingPull {
            local: "m2".into(),
            name: "m".into(),
            peer: "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN".into(),
            addr: None,
            target: hex::encode(&value),
            expected: None,
            started_unix: 0,
        };
        staging
            .set_root(
                "pending-sync:m2",
                Some(&serde_json::to_vec(&record).unwrap()),
            )
            .unwrap();
        staging.commit().unwrap();
        stray
    };
    let staged = || -> Vec<prox_engine::Cid> {
        prox_engine::store::MmapStore::open_read_only(&staging_dir)
            .unwrap()
            .cids()
            .unwrap()
    };
    let dry = json(&ok(&["gc", "--store", s(&store), "--dry-run", "--json"]));
    assert_eq!(dry["staging_removed_blocks"], 1, "{dry}");
    assert_eq!(staged().len(), 2, "a dry run removes nothing");
    let real = json(&ok(&["gc", "--store", s(&store), "--json"]));
    assert_eq!(real["staging_removed_blocks"], 1, "{real}");
    let left = staged();
    assert_eq!(left, vec![first], "the pending pull's staged block stays");
    assert!(!left.contains(&stray));
    // The map itself is untouched.
    ok(&["verify", "m", "--store", s(&store)]);
}

/// A `prox daemon` child, killed when dropped.
struct Daemon {
    child: std::process::Child,
    /// Its listen address with `/p2p/<peer id>`.
    addr: String,
}

impl Daemon {
    fn start(store: &Path, open: bool) -> Daemon {
        use std::io::BufRead;
        let mut args = vec!["daemon", "--store", s(store)];
        if open {
            args.push("--open");
        }
        let mut child = common::prox()
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("daemon starts");
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut d = Daemon {
            child,
            addr: String::new(),
        };
        // The daemon prints peer_id, listen and control lines, then logs
        // to stderr: at most a handful of lines to read.
        for line in out.lines().take(8) {
            let line = line.unwrap();
            if let Some(a) = line.strip_prefix("listen ") {
                d.addr = a.to_string();
            }
            if line.starts_with("control ") {
                break;
            }
        }
        assert!(!d.addr.is_empty(), "daemon printed its listen address");
        d
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `prox sync pull --max-pull-bytes/--pull-deadline` bound one pull, one-shot
/// and through a running daemon's control socket; bad values are refused
/// by the argument parser.
#[test]
fn sync_pull_flags_bound_one_pull() {
    let (dir, src) = built_map();
    let source = Daemon::start(&src, true);
    let dst = dir.path().join("dst");
    let pull_into = |store: &Path, extra: &[&str]| {
        let mut args = vec![
            "sync",
            "pull",
            "--store",
            s(store),
            "--peer",
            &source.addr,
            "--name",
            "m",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let pull = |extra: &[&str]| pull_into(&dst, extra);
    let o = pull(&["--max-pull-bytes", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("over its budget of 1"), "{err}");
    let o = pull(&["--pull-deadline", "1ms"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("deadline"), "{err}");
    for bad in [
        ["--pull-deadline", "0s"],
        ["--pull-deadline", "soon"],
        ["--max-pull-bytes", "0"],
        ["--max-pull-bytes", "12Q"],
    ] {
        let o = pull(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?} accepted");
    }
    let o = pull(&["--max-pull-bytes", "1G", "--pull-deadline", "60s", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = json(&String::from_utf8_lossy(&o.stdout));
    assert!(report["blocks_fetched"].as_u64().unwrap() > 0, "{report}");
    // Through the control socket of a daemon running on a fresh store.
    let dst2 = dir.path().join("dst2");
    let _mirror = Daemon::start(&dst2, false);
    let o = pull_into(&dst2, &["--max-pull-bytes", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("daemon:") && err.contains("over its budget of 1"),
        "{err}"
    );
}

/// `prox sync pull --peer A --peer B` fetches from both sources at once and
/// reports each; `push` takes one peer.
#[test]
fn sync_pull_takes_several_peers() {
    let (dir, src) = built_map();
    let a = Daemon::start(&src, true);
    let replica = dir.path().join("replica");
    let pull = |store: &Path, peers: &[&str]| {
        let mut args = vec!["sync", "pull", "--store", s(store), "--name", "m", "--json"];
        for p in peers {
            args.extend_from_slice(&["--peer", p]);
        }
        run(&args)
    };
    let o = pull(&replica, &[&a.addr]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = Daemon::start(&replica, true);
    let dst = dir.path().join("dst");
    let o = pull(&dst, &[&a.addr, &b.addr]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = json(&String::from_utf8_lossy(&o.stdout));
    let sources = report["sources"].as_array().expect("per-source report");
    assert_eq!(sources.len(), 2, "{report}");
    assert!(sources.iter().all(|x| x["error"].is_null()), "{report}");
    let served: u64 = sources.iter().map(|x| x["blocks"].as_u64().unwrap()).sum();
    assert_eq!(
        served,
        report["blocks_fetched"].as_u64().unwrap(),
        "{report}"
    );
    ok(&["verify", "m", "--store", s(&dst)]);
    let o = run(&[
        "sync",
        "push",
        "--store",
        s(&dst),
        "--peer",
        &a.addr,
        "--peer",
        &b.addr,
        "--name",
        "m",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("give --peer once"), "{err}");
}
