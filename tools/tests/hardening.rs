//! Hardening tests of the `prox` binary: damaged stores must never lead a
//! command to destroy intact data, and every damage the store found must
//! be reported.

mod common;

use common::{ok, run, s};
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
    ok(&[
        "datagen",
        "--n",
        "400",
        "--dim",
        "8",
        "--queries",
        "4",
        "--k",
        "5",
        "--seed",
        &seed(),
        "--out",
        s(&data),
    ]);
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
