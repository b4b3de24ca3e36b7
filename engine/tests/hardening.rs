//! Hardening of `MmapStore` against damaged disks and failing I/O:
//!
//! * garbage collection refuses to sweep while a reachable block is missing
//!   (one bit flipped in a record header must not cost the tree below it),
//!   and the damaged ranges found at open are reported;
//! * a failed write or fsync poisons the writer until reopen, and nothing
//!   of a failed batch is reported as present;
//! * named roots survive one damaged copy (two alternating slots);
//! * compaction re-hashes what it copies;
//! * the parent directory of a new store is fsynced;
//! * 200+ seeded runs of random writes, commits, root updates and
//!   collections under injected ENOSPC, EIO, failing fsync and power loss:
//!   every acknowledged commit survives, nothing corrupt is returned.
//!
//! PROX_SEED replays a run; PROX_FAULT_RUNS changes the number of runs.

use prox_engine::gc;
use prox_engine::manifest::RootManifest;
use prox_engine::prolly::{self, Config, Tree};
use prox_engine::store::mmap::faults::{FaultKind, FaultPlan, Faults, FileFaults, FileOp};
use prox_engine::store::mmap::format::{self, Item, SEGMENT_HEADER_LEN};
use prox_engine::store::mmap::SlotState;
use prox_engine::store::{BlockStore, MmapOptions, MmapStore, Pins};
use prox_engine::{Cid, Error};
use prox_testkit::SplitMix64 as SplitMix;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn seed() -> u64 {
    prox_testkit::seed(0x4a2d_0023)
}

fn small() -> MmapOptions {
    MmapOptions {
        segment_bytes: 16 << 10,
        ..MmapOptions::default()
    }
}

fn with_faults(plan: &Arc<FaultPlan>) -> MmapOptions {
    MmapOptions {
        faults: Some(Faults(plan.clone())),
        ..small()
    }
}

fn bytes(rng: &mut SplitMix, max: usize) -> Vec<u8> {
    let n = 1 + rng.below(max as u64) as usize;
    (0..n).map(|_| rng.next() as u8).collect()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

/// (file, record offset) of block `cid`.
fn locate(dir: &Path, cid: &Cid) -> Option<(PathBuf, usize, usize)> {
    for path in segments(dir) {
        let buf = std::fs::read(&path).unwrap();
        for item in format::scan(&buf[SEGMENT_HEADER_LEN..]).items {
            if let Item::Block {
                cid: c,
                offset,
                len,
                ..
            } = item
            {
                if c == *cid {
                    return Some((path, SEGMENT_HEADER_LEN + offset, len));
                }
            }
        }
    }
    None
}

/// Flips one bit in place (same inode, as bit rot would).
fn flip(path: &Path, at: usize, mask: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at as u64).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, at as u64).unwrap();
    f.sync_all().unwrap();
}

fn total_bytes(dir: &Path) -> u64 {
    segments(dir)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

#[test]
fn gc_refuses_to_sweep_below_a_flipped_record_header() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = SplitMix::new(seed());
    let cfg = Config::default();
    let (root, dead) = {
        let s = MmapStore::open_with(dir.path(), small()).unwrap();
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..2000u32)
            .map(|i| (i.to_be_bytes().to_vec(), bytes(&mut rng, 60)))
            .collect();
        let root = prolly::build(&s, &cfg, entries).unwrap().unwrap();
        let manifest = RootManifest::new(Some(root), cfg.clone()).encode();
        s.set_root("main", Some(&manifest)).unwrap();
        let dead = s.put(b"unreachable").unwrap();
        s.commit().unwrap();
        (root, dead)
    };
    // One bit of the CID in the root node's record header: the record no
    // longer parses, so the root node reads as absent.
    let (path, off, _) = locate(dir.path(), &root).unwrap();
    flip(&path, off + 8 + 5, 0x10);
    let before = total_bytes(dir.path());

    let s = MmapStore::open_with(dir.path(), small()).unwrap();
    assert!(!s.has(&root).unwrap());
    let ranges = s.damaged_ranges();
    assert_eq!(ranges.len(), 1, "{ranges:?}");
    assert_eq!(ranges[0].segment, path);
    assert!(ranges[0].start <= off as u64 && ranges[0].end > off as u64);
    assert_eq!(s.stats().damaged_ranges, 1);

    let pins = Pins::new();
    let dry = gc::collect_default(&s, &pins, true).unwrap();
    assert_eq!(dry.missing_cids, vec![root]);
    match gc::collect_default(&s, &pins, false) {
        Err(Error::MissingReachable { missing }) => assert_eq!(missing, vec![root]),
        other => panic!("gc must refuse, got {other:?}"),
    }
    assert!(s.has(&dead).unwrap(), "nothing removed");
    assert_eq!(total_bytes(dir.path()), before);

    // Fetching the one block again repairs the tree; then gc runs.
    let tree_bytes = {
        let other = tempfile::tempdir().unwrap();
        let o = MmapStore::open_with(other.path(), small()).unwrap();
        let entries: Vec<(Vec<u8>, Vec<u8>)> = {
            let mut rng = SplitMix::new(seed());
            (0..2000u32)
                .map(|i| (i.to_be_bytes().to_vec(), bytes(&mut rng, 60)))
                .collect()
        };
        assert_eq!(prolly::build(&o, &cfg, entries).unwrap(), Some(root));
        o.get(&root).unwrap().unwrap()
    };
    s.put(&tree_bytes).unwrap();
    let r = gc::collect_default(&s, &pins, false).unwrap();
    assert_eq!(r.missing, 0);
    assert!(!s.has(&dead).unwrap());
    let tree = Tree::from_manifest(&s, &RootManifest::new(Some(root), cfg)).unwrap();
    assert_eq!(tree.iter().count(), 2000);
    assert!(
        s.damaged_ranges().is_empty(),
        "compaction rewrote the range"
    );
}

#[test]
fn failed_fsync_poisons_the_writer_and_withdraws_unsynced_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new(dir.path()).unwrap();
    let s = MmapStore::open_with(dir.path(), with_faults(&plan)).unwrap();
    let kept = s.put(b"committed before the fault").unwrap();
    s.commit().unwrap();
    plan.inject(FaultKind::SyncFails, 0);
    let lost = s.put(b"put, then the fsync fails").unwrap();
    assert!(s.has(&lost).unwrap());
    assert!(s.commit().is_err());
    assert!(plan.fired());
    assert!(!s.has(&lost).unwrap(), "an unsynced block is not offered");
    assert_eq!(s.get(&lost).unwrap(), None);
    // A retried commit must not report success.
    assert!(matches!(s.commit(), Err(Error::Poisoned { .. })));
    assert!(matches!(s.put(b"more"), Err(Error::Poisoned { .. })));
    assert!(matches!(
        s.set_root("main", Some(b"x")),
        Err(Error::Poisoned { .. })
    ));
    assert!(s.has(&kept).unwrap(), "committed blocks stay readable");
    drop(s);
    let s = MmapStore::open_with(dir.path(), small()).unwrap();
    assert!(s.get(&kept).unwrap().is_some());
    s.put(b"writable again after reopen").unwrap();
    s.commit().unwrap();
}

#[test]
fn nothing_of_a_failed_batch_is_reported_present() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new(dir.path()).unwrap();
    let s = MmapStore::open_with(dir.path(), with_faults(&plan)).unwrap();
    let mut rng = SplitMix::new(seed() ^ 1);
    // Enough data for several segment roll-overs: the third data write fails.
    let blocks: Vec<Vec<u8>> = (0..40).map(|_| bytes(&mut rng, 2000)).collect();
    let refs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
    plan.inject(FaultKind::NoSpace, 2);
    assert!(s.put_many(&refs).is_err());
    assert!(plan.fired());
    for b in &blocks {
        assert!(!s.has(&Cid::of(b)).unwrap());
    }
    assert!(matches!(s.put_many(&refs), Err(Error::Poisoned { .. })));
}

/// A process that dies part way through a store's first root change (the
/// file operation it was in never finishes; no power loss) leaves a store
/// that opens, with the root either unset or set.
#[test]
fn a_crash_during_the_first_root_change_leaves_an_openable_store() {
    for nth in 0..16 {
        let dir = tempfile::tempdir().unwrap();
        let plan = FaultPlan::new(dir.path()).unwrap();
        let s = MmapStore::open_with(dir.path(), with_faults(&plan)).unwrap();
        plan.inject(FaultKind::Eio, nth);
        let acked = s.set_root("main", Some(b"first")).is_ok();
        let fired = plan.fired();
        drop(s);
        let s = MmapStore::open_with(dir.path(), small())
            .unwrap_or_else(|e| panic!("fault at op {nth}: reopen failed: {e}"));
        let got = s.root("main").unwrap();
        if acked {
            assert_eq!(got.as_deref(), Some(&b"first"[..]), "op {nth}");
        } else {
            assert!(got.is_none() || got.as_deref() == Some(&b"first"[..]));
        }
        s.set_root("main", Some(b"second")).unwrap();
        if !fired {
            break;
        }
    }
}

#[test]
fn a_damaged_roots_slot_falls_back_to_the_previous_commit() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = MmapStore::open(dir.path()).unwrap();
        s.set_root("main", Some(b"first")).unwrap();
        s.set_root("main", Some(b"second")).unwrap();
    }
    // Generation 2 lives in ROOTS.0: damage it.
    let slot = dir.path().join("ROOTS.0");
    let len = std::fs::metadata(&slot).unwrap().len() as usize;
    flip(&slot, len / 2, 0x01);
    let s = MmapStore::open(dir.path()).unwrap();
    assert_eq!(s.root("main").unwrap().as_deref(), Some(&b"first"[..]));
    let report = s.roots_report().clone();
    assert!(report.fell_back);
    assert_eq!(report.generation, 1);
    assert!(matches!(report.files[0].1, SlotState::Damaged { .. }));
    s.rewrite_roots().unwrap();
    drop(s);
    let s = MmapStore::open(dir.path()).unwrap();
    assert!(!s.roots_report().fell_back);
    assert_eq!(s.root("main").unwrap().as_deref(), Some(&b"first"[..]));
    // Both slots damaged: the store says so instead of inventing roots.
    drop(s);
    for name in ["ROOTS.0", "ROOTS.1"] {
        flip(&dir.path().join(name), 6, 0x40);
    }
    assert!(matches!(
        MmapStore::open(dir.path()),
        Err(Error::StoreDamaged { .. })
    ));
}

#[test]
fn compaction_rehashes_blocks_it_already_verified() {
    let dir = tempfile::tempdir().unwrap();
    let s = MmapStore::open_with(dir.path(), small()).unwrap();
    let keep = s.put(&[7u8; 500]).unwrap();
    let dead: Vec<Cid> = (0..20u8).map(|i| s.put(&[i; 400]).unwrap()).collect();
    s.commit().unwrap();
    assert!(s.get(&keep).unwrap().is_some(), "verified once");
    assert!(dead.iter().all(|c| s.has(c).unwrap()));
    let (path, off, _) = locate(dir.path(), &keep).unwrap();
    flip(&path, off + format::BLOCK_HEADER_LEN + 3, 0x02);
    let live: HashSet<Cid> = [keep].into();
    match s.retain(&live) {
        Err(Error::Corrupt { cid, .. }) => assert_eq!(cid, keep),
        other => panic!("compaction must not copy changed bytes: {other:?}"),
    }
}

/// Records every file operation.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl FileFaults for Recorder {
    fn before(&self, op: &FileOp<'_>) -> std::io::Result<()> {
        let s = match op {
            FileOp::SyncDir(p) => format!("syncdir {}", p.display()),
            other => format!("{other:?}"),
        };
        self.0.lock().unwrap().push(s);
        Ok(())
    }
}

#[test]
fn creating_a_store_fsyncs_its_parent_directory() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("new-store");
    let rec = Arc::new(Recorder::default());
    let opts = MmapOptions {
        faults: Some(Faults(rec.clone())),
        ..small()
    };
    drop(MmapStore::open_with(&dir, opts).unwrap());
    let ops = rec.0.lock().unwrap().clone();
    let want = format!("syncdir {}", top.path().display());
    assert!(ops.contains(&want), "{ops:?}");
}

/// What a run acknowledged, to check after the crash.
#[derive(Default)]
struct Model {
    /// Blocks a successful commit covered.
    committed: HashMap<Cid, Vec<u8>>,
    /// Blocks put since the last commit.
    pending: HashMap<Cid, Vec<u8>>,
    /// Acknowledged value of root "head".
    root: Option<Vec<u8>>,
    /// A root update that failed (it may or may not have landed).
    root_maybe: Vec<Option<Vec<u8>>>,
}

/// One seeded run: random operations with one injected fault, a crash
/// (sometimes with power loss), reopen and check.
fn fault_run(run_seed: u64) {
    let mut rng = SplitMix::new(run_seed);
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new(dir.path()).unwrap();
    let kinds = [
        FaultKind::NoSpace,
        FaultKind::Eio,
        FaultKind::SyncFails,
        FaultKind::PowerLoss,
    ];
    let kind = kinds[rng.below(4) as usize];
    plan.inject(kind, rng.below(60));
    let mut m = Model::default();
    let ctx = format!(
        "run seed {run_seed} (PROX_SEED={run_seed} PROX_FAULT_RUNS=1 replays), fault {kind:?}"
    );
    if let Ok(s) = MmapStore::open_with(dir.path(), with_faults(&plan)) {
        for _ in 0..40 {
            if let Err(e) = step(&s, &mut rng, &mut m) {
                if matches!(e, Error::Io(_)) {
                    assert!(
                        matches!(s.put(b"after a fault"), Err(Error::Poisoned { .. })),
                        "{ctx}: the writer must be poisoned after {e}"
                    );
                }
                break;
            }
            check_present(&s, &ctx);
        }
    }
    if kind == FaultKind::PowerLoss || rng.below(2) == 0 {
        plan.cut_power();
        plan.power_loss().unwrap();
    }
    let s = MmapStore::open_with(dir.path(), small())
        .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
    for (cid, b) in &m.committed {
        let got = s.get(cid).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(got.as_deref(), Some(&b[..]), "{ctx}: committed {cid} lost");
    }
    check_present(&s, &ctx);
    assert!(s.damaged().is_empty(), "{ctx}");
    let head = s.root("head").unwrap().map(|b| b.to_vec());
    assert!(
        head == m.root || m.root_maybe.contains(&head),
        "{ctx}: root {head:?}, acknowledged {:?}",
        m.root
    );
    s.put(b"writable after reopen").unwrap();
    s.commit().unwrap();
}

/// Every block the store lists reads back verified.
fn check_present(s: &MmapStore, ctx: &str) {
    for cid in s.cids().unwrap() {
        match s.get(&cid) {
            Ok(Some(b)) => assert_eq!(Cid::of(&b), cid, "{ctx}"),
            other => panic!("{ctx}: listed block {cid} reads as {other:?}"),
        }
    }
}

fn step(s: &MmapStore, rng: &mut SplitMix, m: &mut Model) -> prox_engine::Result<()> {
    match rng.below(10) {
        0..=4 => {
            let n = 1 + rng.below(6) as usize;
            let blocks: Vec<Vec<u8>> = (0..n).map(|_| bytes(rng, 1500)).collect();
            let refs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
            let r = s.put_many(&refs);
            if r.is_err() {
                for b in &blocks {
                    let c = Cid::of(b);
                    let known = m.committed.contains_key(&c) || m.pending.contains_key(&c);
                    assert!(known || !s.has(&c)?, "failed batch block {c} offered");
                }
            }
            for (c, b) in r?.into_iter().zip(blocks) {
                m.pending.insert(c, b);
            }
        }
        5 | 6 => {
            let r = s.commit();
            if r.is_err() {
                // Not acknowledged: may or may not survive.
                m.pending.clear();
            }
            r?;
            m.committed.extend(m.pending.drain());
        }
        7 | 8 => {
            let v = rng.next().to_le_bytes().to_vec();
            let r = s.set_root("head", Some(&v));
            if r.is_err() {
                m.root_maybe.push(Some(v));
                return r;
            }
            m.root = Some(v);
        }
        _ => {
            let mut live: HashSet<Cid> = HashSet::new();
            for c in m.committed.keys().chain(m.pending.keys()) {
                if rng.below(3) != 0 {
                    live.insert(*c);
                }
            }
            let r = s.retain(&live);
            m.committed.retain(|c, _| live.contains(c));
            if r.is_err() {
                m.pending.clear();
            }
            r?;
            let moved: Vec<(Cid, Vec<u8>)> = m.pending.drain().collect();
            m.committed
                .extend(moved.into_iter().filter(|(c, _)| live.contains(c)));
        }
    }
    Ok(())
}

#[test]
fn acknowledged_commits_survive_injected_faults_and_power_loss() {
    let runs: u64 = std::env::var("PROX_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(240);
    let base = seed();
    for i in 0..runs {
        fault_run(base.wrapping_add(i.wrapping_mul(0x9e37_79b9)));
    }
}
