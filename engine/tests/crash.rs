//! Crash safety of `MmapStore` against real process death.
//!
//! This test binary has no libtest harness (`harness = false`): `main`
//! either plays a child role (selected by environment variables) or runs
//! the parent checks, which re-execute this same binary as children:
//!
//! * SIGKILL: a child writes blocks, commits, then appends the committed
//!   CIDs to a log it fsyncs *after* `commit` returned; sometimes it puts
//!   garbage and compacts it away with `retain`. The parent kills it with
//!   SIGKILL after a random delay, sometimes also simulates a torn append
//!   (a partial record or random bytes at the end of the newest segment),
//!   reopens the store and checks that every logged block is present and
//!   verified, that every readable block hashes to its CID, and that the
//!   `head` root points at a stored block. 60 rounds, seeded.
//! * Lock: a second process opening the store for writing gets `Locked`.
//!
//! PROX_SEED replays a run; PROX_CRASH_ROUNDS changes the round count.

use prox_engine::store::mmap::format;
use prox_engine::store::{BlockStore, MmapOptions, MmapStore};
use prox_engine::{Cid, Error};
use std::collections::HashSet;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const ENV_CHILD: &str = "PROX_CRASH_CHILD";
const ENV_DIR: &str = "PROX_CRASH_DIR";
const ENV_CHILD_SEED: &str = "PROX_CRASH_CHILD_SEED";
const LOG: &str = "committed.log";

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn opts() -> MmapOptions {
    MmapOptions {
        segment_bytes: 64 << 10,
        ..MmapOptions::default()
    }
}

fn store_dir(root: &Path) -> PathBuf {
    root.join("store")
}

/// Complete lines of the log (a line cut by the kill is ignored).
fn read_log(root: &Path) -> Vec<Cid> {
    let text = match std::fs::read(root.join(LOG)) {
        Ok(t) => t,
        Err(_) => return Vec::new(),
    };
    text.split(|&b| b == b'\n')
        .filter(|l| l.len() == 64)
        .filter_map(|l| std::str::from_utf8(l).ok()?.parse().ok())
        .collect()
}

/// Current length of the committed-CIDs log (0 before it exists).
fn log_bytes(root: &Path) -> u64 {
    std::fs::metadata(root.join(LOG)).map_or(0, |m| m.len())
}

// ----- child roles -----

fn child_writer(root: &Path, seed: u64) -> Result<(), Error> {
    let store = MmapStore::open_with(store_dir(root), opts())?;
    let mut committed: HashSet<Cid> = read_log(root).into_iter().collect();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join(LOG))?;
    let mut rng = Rng::new(seed);
    for round in 0u64.. {
        let n = 1 + rng.below(24) as usize;
        let blocks: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = rng.below(3000) as usize;
                rng.bytes(len)
            })
            .collect();
        let cids: Vec<Cid> = if round % 2 == 0 {
            let refs: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
            store.put_many(&refs)?
        } else {
            blocks
                .iter()
                .map(|b| store.put(b))
                .collect::<Result<_, _>>()?
        };
        // Garbage: stored, never logged, reclaimed by the next collection.
        for _ in 0..rng.below(4) {
            let len = rng.below(2000) as usize;
            store.put(&rng.bytes(len))?;
        }
        store.commit()?;
        let mut lines = String::new();
        for c in &cids {
            lines.push_str(&c.to_hex());
            lines.push('\n');
        }
        log.write_all(lines.as_bytes())?;
        log.sync_data()?;
        committed.extend(cids.iter().copied());
        store.set_root("head", Some(cids[0].as_bytes()))?;
        if round % 5 == 4 {
            store.retain(&committed)?;
        }
    }
    Ok(())
}

fn child_lock_probe(root: &Path) -> ExitCode {
    match MmapStore::open_with(store_dir(root), opts()) {
        Err(Error::Locked { .. }) => {}
        other => {
            eprintln!("second writer: expected Locked, got {other:?}");
            return ExitCode::FAILURE;
        }
    }
    match MmapStore::open_read_only(store_dir(root)) {
        Ok(s) if s.root("probe").ok().flatten().as_deref() == Some(&b"here"[..]) => {
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("read-only open beside a writer failed: {other:?}");
            ExitCode::FAILURE
        }
    }
}

// ----- parent checks -----

fn spawn(role: &str, root: &Path, seed: u64) -> std::process::Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .env(ENV_CHILD, role)
        .env(ENV_DIR, root)
        .env(ENV_CHILD_SEED, seed.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

/// Simulates a torn append at the end of the newest segment.
fn tear_tail(dir: &Path, rng: &mut Rng) {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    let Some(last) = segs.last() else { return };
    let mut tail = Vec::new();
    if rng.below(2) == 0 {
        let n = 1 + rng.below(500) as usize;
        let data = rng.bytes(n);
        let mut rec = Vec::new();
        format::encode_block(&mut rec, &Cid::of(&data), &data);
        let cut = 1 + rng.below(rec.len() as u64 - 1) as usize;
        tail.extend_from_slice(&rec[..cut]);
    } else {
        let n = 1 + rng.below(300) as usize;
        tail = rng.bytes(n);
    }
    let mut f = std::fs::OpenOptions::new().append(true).open(last).unwrap();
    f.write_all(&tail).unwrap();
}

fn check_store(root: &Path, seed: u64, round: usize) -> usize {
    let ctx = format!("PROX_SEED={seed} round {round}");
    let store = MmapStore::open_with(store_dir(root), opts())
        .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
    let logged = read_log(root);
    for cid in &logged {
        match store.get(cid) {
            Ok(Some(b)) => assert!(cid.matches(&b), "{ctx}: {cid} returned wrong bytes"),
            other => panic!("{ctx}: committed block {cid} lost: {other:?}"),
        }
    }
    let mut corrupt = 0;
    for cid in store.cids().unwrap() {
        match store.get(&cid) {
            Ok(Some(b)) => assert!(cid.matches(&b), "{ctx}: {cid} returned wrong bytes"),
            Ok(None) => panic!("{ctx}: listed block {cid} missing"),
            Err(Error::Corrupt { .. }) => corrupt += 1,
            Err(e) => panic!("{ctx}: {cid}: {e}"),
        }
    }
    assert_eq!(corrupt, 0, "{ctx}: SIGKILL alone must not damage records");
    if let Some(head) = store.root("head").unwrap() {
        let cid = Cid::from_slice(&head).unwrap_or_else(|| panic!("{ctx}: bad head root"));
        assert!(
            store.get(&cid).unwrap().is_some(),
            "{ctx}: head root points at a missing block"
        );
    }
    logged.len()
}

fn crash_sigkill_never_loses_committed_blocks() {
    let seed = prox_testkit::seed(0xc0ffee);
    let rounds: usize = std::env::var("PROX_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let mut grew = 0;
    let mut waited = 0;
    let mut blind_grew = 0;
    let mut last = 0;
    for round in 0..rounds {
        let log_len = log_bytes(root);
        let mut child = spawn("writer", root, rng.next());
        // One round in four kills at a random moment counted from the
        // spawn, which may land before the child opened the store (start-up
        // and recovery get killed too). The others first wait for the
        // child's own log to grow, so on a loaded machine, where starting a
        // process can take longer than any fixed delay, a kill still lands
        // in the middle of the child's write loop and every such round
        // commits something.
        let wait = rng.below(4) != 0;
        if wait {
            waited += 1;
            let t = Instant::now();
            while log_bytes(root) <= log_len {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("PROX_SEED={seed} round {round}: child exited early: {status:?}");
                }
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "PROX_SEED={seed} round {round}: child committed nothing in 60 s"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::thread::sleep(Duration::from_millis(5 + rng.below(60)));
        // SIGKILL; an error only means the child already exited.
        let _ = child.kill();
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "PROX_SEED={seed} round {round}: child ended otherwise: {status:?}"
        );
        if rng.below(3) == 0 {
            tear_tail(&store_dir(root), &mut rng);
        }
        let n = check_store(root, seed, round);
        if n > last {
            grew += 1;
            blind_grew += usize::from(!wait);
        }
        last = n;
    }
    // A waited-for round saw the log grow; at least half of those must
    // have added complete lines (a kill can only cut the line being
    // written, and the child keeps writing for 5 ms or more after that).
    assert!(
        grew >= waited / 2,
        "PROX_SEED={seed}: children rarely got to commit ({grew} of {rounds} rounds, {waited} waited for)"
    );
    eprintln!(
        "crash: {rounds} SIGKILL rounds ({grew} committed; {blind_grew} of {} killed blind), {last} committed blocks verified, {:?}",
        rounds - waited,
        started.elapsed()
    );
}

fn second_process_is_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let store = MmapStore::open_with(store_dir(tmp.path()), opts()).unwrap();
    store.set_root("probe", Some(b"here")).unwrap();
    let status = spawn("lock", tmp.path(), 0).wait().unwrap();
    assert!(status.success(), "lock probe failed: {status:?}");
    drop(store);
    // Released with the store: a new process may write now.
    MmapStore::open_with(store_dir(tmp.path()), opts()).unwrap();
    eprintln!("lock: second process got Locked, read-only open worked");
}

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(ENV_CHILD) {
        let root = PathBuf::from(std::env::var_os(ENV_DIR).expect("PROX_CRASH_DIR"));
        let seed = std::env::var(ENV_CHILD_SEED)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        return match role.as_str() {
            "writer" => match child_writer(&root, seed) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("crash child failed: {e}");
                    ExitCode::from(3)
                }
            },
            "lock" => child_lock_probe(&root),
            _ => ExitCode::FAILURE,
        };
    }
    // `cargo test -- --list` and filters: this binary has two fixed checks.
    if std::env::args().any(|a| a == "--list") {
        println!("crash_sigkill_never_loses_committed_blocks: test");
        println!("second_process_is_locked: test");
        return ExitCode::SUCCESS;
    }
    second_process_is_locked();
    crash_sigkill_never_loses_committed_blocks();
    ExitCode::SUCCESS
}
