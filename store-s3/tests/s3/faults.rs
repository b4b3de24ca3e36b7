//! Failures: corrupt objects, a missing bucket, refused credentials,
//! throttling, the server dying mid-upload, and compare-and-swap races
//! between processes.

use crate::relay::Relay;
use crate::support::{block_on, fresh_prefix, server, Server};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use prox_engine::{BlockStore, Cid, Error, RemoteErrorKind};
use prox_s3::{Location, S3Store};
use std::time::Duration;

fn remote_kind<T: std::fmt::Debug>(r: Result<T, Error>) -> RemoteErrorKind {
    match r {
        Err(Error::Remote { kind, .. }) => kind,
        other => panic!("expected Error::Remote, got {other:?}"),
    }
}

#[test]
fn corrupt_object_is_rejected_naming_the_cid() {
    let Some(srv) = server("corrupt") else { return };
    let prefix = fresh_prefix("corrupt");
    let store = S3Store::open(srv.config(&prefix)).unwrap();
    let good = store.put(b"the block as written").unwrap();
    let other = store.put(b"an intact neighbour").unwrap();
    // Replace the object's bytes behind the store's back.
    let path = Path::from(format!("{prefix}/blocks/{}", good.to_hex()));
    block_on(srv.raw().put(&path, b"tampered bytes".to_vec().into())).unwrap();
    for r in [
        store.get(&good).map(|_| ()),
        store.get_many(&[other, good]).map(|_| ()),
    ] {
        match r {
            Err(Error::Corrupt { cid, reason }) => {
                assert_eq!(cid, good, "{reason}");
                assert!(Error::Corrupt { cid, reason }
                    .to_string()
                    .contains(&good.to_string()));
            }
            other => panic!("expected Corrupt naming {good}, got {other:?}"),
        }
    }
    assert_eq!(
        store.get(&other).unwrap().as_deref(),
        Some(&b"an intact neighbour"[..])
    );
    // Re-putting the right bytes repairs it.
    store.put(b"the block as written").unwrap();
    assert!(store.get(&good).unwrap().is_some());
}

#[test]
fn missing_bucket_is_a_typed_error() {
    let Some(srv) = server("missing_bucket") else {
        return;
    };
    let mut cfg = srv.config("x");
    cfg.location = Location {
        bucket: "prox-no-such-bucket".into(),
        prefix: "x".into(),
    };
    let err = S3Store::open(cfg);
    assert_eq!(remote_kind(err), RemoteErrorKind::MissingBucket);
}

#[test]
fn refused_credentials_are_a_typed_error() {
    let Some(srv) = server("auth") else { return };
    let Some(auth) = std::env::var("PROX_S3_AUTH_ENDPOINT").ok() else {
        assert!(
            std::env::var("PROX_S3_REQUIRED").as_deref() != Ok("1"),
            "PROX_S3_REQUIRED=1 but PROX_S3_AUTH_ENDPOINT (a server refusing every key) is not set"
        );
        eprintln!("auth: skipped: PROX_S3_AUTH_ENDPOINT is not set");
        return;
    };
    let cfg = srv.config_at(&auth, "x");
    let err = S3Store::open(cfg);
    let msg = format!("{err:?}");
    assert_eq!(remote_kind(err), RemoteErrorKind::Auth, "{msg}");
}

#[test]
fn throttling_is_retried_with_backoff_then_reported() {
    let Some(srv) = server("throttle") else {
        return;
    };
    // Three refusals: the retries absorb them.
    let relay = Relay::start(&srv.endpoint, 3);
    let prefix = fresh_prefix("throttle");
    let store = S3Store::open(srv.config_at(&relay.endpoint(), &prefix)).unwrap();
    let cid = store.put(b"after a slow start").unwrap();
    assert_eq!(
        store.get(&cid).unwrap().as_deref(),
        Some(&b"after a slow start"[..])
    );
    assert_eq!(relay.throttled(), 3, "every refusal was seen and retried");

    // More refusals than retries: a typed error, after backing off.
    let relay = Relay::start(&srv.endpoint, 1000);
    let mut cfg = srv.config_at(&relay.endpoint(), &prefix);
    cfg.max_retries = 2;
    let started = std::time::Instant::now();
    assert_eq!(remote_kind(S3Store::open(cfg)), RemoteErrorKind::Throttled);
    assert_eq!(relay.throttled(), 3, "one try and two retries");
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "retries back off"
    );
}

/// Blocks of a publish: `n` distinct blocks of `size` bytes.
fn blocks(tag: u8, n: usize, size: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut b = vec![tag; size];
            b[..8].copy_from_slice(&(i as u64).to_le_bytes());
            b
        })
        .collect()
}

/// Writes `blocks`, then moves root `main` from absent to their first CID.
fn publish(store: &S3Store, blocks: &[Vec<u8>]) -> Result<Cid, Error> {
    let refs: Vec<&[u8]> = blocks.iter().map(Vec::as_slice).collect();
    let cids = store.put_many(&refs)?;
    store.commit()?;
    assert!(store.cas_root("main", None, Some(cids[0].as_bytes()))?);
    Ok(cids[0])
}

#[test]
fn server_killed_mid_upload_moves_no_root_and_the_retry_completes() {
    let Some(srv) = server("killed") else { return };
    let data = blocks(7, 200, 64 * 1024);
    let total: u64 = data.iter().map(|b| b.len() as u64).sum();
    let prefix = fresh_prefix("killed");
    let direct = S3Store::open(srv.config(&prefix)).unwrap();

    // Killed for good: the publish fails with a typed error and the root
    // does not move.
    let relay = Relay::start(&srv.endpoint, 0);
    let mut cfg = srv.config_at(&relay.endpoint(), &prefix);
    cfg.max_retries = 2;
    cfg.retry_timeout = Duration::from_secs(2);
    let store = S3Store::open(cfg).unwrap();
    std::thread::scope(|scope| {
        let job = scope.spawn(|| publish(&store, &data));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while relay.sent() < total / 5 && !job.is_finished() {
            assert!(std::time::Instant::now() < deadline, "upload never started");
            std::thread::sleep(Duration::from_millis(2));
        }
        relay.kill();
        let kind = remote_kind(job.join().unwrap());
        assert_eq!(kind, RemoteErrorKind::Unavailable);
    });
    assert_eq!(direct.root("main").unwrap(), None, "no root moved");

    // Back within the retry window: the same call completes.
    relay.restart();
    let mut cfg = srv.config_at(&relay.endpoint(), &prefix);
    cfg.retry_timeout = Duration::from_secs(30);
    cfg.max_retries = 10;
    let store = S3Store::open(cfg).unwrap();
    let first = std::thread::scope(|scope| {
        let job = scope.spawn(|| publish(&store, &data));
        let start = relay.sent();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while relay.sent() < start + total / 5 && !job.is_finished() {
            assert!(std::time::Instant::now() < deadline, "upload never started");
            std::thread::sleep(Duration::from_millis(2));
        }
        relay.kill();
        std::thread::sleep(Duration::from_millis(300));
        relay.restart();
        job.join().unwrap().unwrap()
    });
    assert_eq!(
        direct.root("main").unwrap().as_deref(),
        Some(first.as_bytes().as_slice())
    );
    for b in &data {
        assert_eq!(
            direct.get(&Cid::of(b)).unwrap().as_deref(),
            Some(b.as_slice())
        );
    }
}

/// Increments each child makes.
const INCREMENTS: usize = 25;

/// One child of the race: appends `"<id>:<i>\n"` to root `log` with
/// read + compare-and-swap, `INCREMENTS` times, starting at `start_ms`.
fn cas_child(srv: &Server, prefix: &str, id: &str, start_ms: u128) {
    let store = S3Store::open(srv.config(prefix)).unwrap();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    if let Some(wait) = start_ms.checked_sub(now()) {
        std::thread::sleep(Duration::from_millis(wait.min(10_000) as u64));
    }
    let mut lost = 0;
    for i in 0..INCREMENTS {
        for attempt in 0.. {
            assert!(attempt < 500, "child {id}: no progress on increment {i}");
            let old = store.root("log").unwrap();
            let mut new = old.as_deref().unwrap_or_default().to_vec();
            new.extend_from_slice(format!("{id}:{i}\n").as_bytes());
            if store.cas_root("log", old.as_deref(), Some(&new)).unwrap() {
                break;
            }
            lost += 1;
        }
    }
    eprintln!("child {id}: {INCREMENTS} increments, {lost} lost races");
}

#[test]
fn cas_races_between_two_processes_lose_no_update() {
    let Some(srv) = server("cas_race") else {
        return;
    };
    if let Ok(role) = std::env::var("PROX_S3_CAS_CHILD") {
        let mut parts = role.splitn(3, ',');
        let (prefix, id, start) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap().parse().unwrap(),
        );
        cas_child(&srv, prefix, id, start);
        return;
    }
    let prefix = fresh_prefix("cas_race");
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 1500;
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["a", "b"]
        .iter()
        .map(|id| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "faults::cas_races_between_two_processes_lose_no_update",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("PROX_S3_CAS_CHILD", format!("{prefix},{id},{start}"))
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        // Bounded: each child gives up after 500 attempts per increment.
        assert!(c.wait().unwrap().success(), "a child failed");
    }
    let store = S3Store::open(srv.config(&prefix)).unwrap();
    let log = String::from_utf8(store.root("log").unwrap().unwrap().to_vec()).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2 * INCREMENTS, "an update was lost:\n{log}");
    for id in ["a", "b"] {
        let mine: Vec<String> = lines
            .iter()
            .filter(|l| l.starts_with(&format!("{id}:")))
            .map(|l| l.to_string())
            .collect();
        let want: Vec<String> = (0..INCREMENTS).map(|i| format!("{id}:{i}")).collect();
        assert_eq!(mine, want, "child {id}'s updates, in order, each once");
    }
}

#[test]
fn gc_with_a_concurrent_writer_keeps_what_it_publishes() {
    use prox_engine::gc;
    use prox_engine::manifest::RootManifest;
    use prox_engine::prolly::{self, Config, Tree};
    use prox_engine::store::Pins;
    let Some(srv) = server("gc_writer") else {
        return;
    };
    let prefix = fresh_prefix("gc_writer");
    let mut cfg = srv.config(&prefix);
    cfg.gc_grace = Duration::from_secs(60);
    let store = S3Store::open(cfg).unwrap();
    let tree_cfg = Config::default();
    let entries = |round: u32| -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..1500u32)
            .map(|i| {
                let mut k = round.to_be_bytes().to_vec();
                k.extend_from_slice(&i.to_be_bytes());
                (k, (i ^ round).to_le_bytes().repeat(4))
            })
            .collect()
    };
    let rounds = 4u32;
    let done = std::sync::atomic::AtomicBool::new(false);
    let last = std::thread::scope(|scope| {
        let collector = scope.spawn(|| {
            let pins = Pins::new();
            let mut runs = 0;
            // Bounded: the writer's rounds end, or 200 collections.
            while !done.load(std::sync::atomic::Ordering::SeqCst) && runs < 200 {
                let r = gc::collect_default(&store, &pins, false).unwrap();
                assert_eq!(r.retained.removed_blocks, 0, "a young block was swept");
                runs += 1;
            }
            runs
        });
        let mut prev: Option<Vec<u8>> = None;
        for round in 0..rounds {
            let root = prolly::build(&store, &tree_cfg, entries(round)).unwrap();
            let manifest = RootManifest::new(root, tree_cfg.clone()).encode();
            assert!(store
                .cas_root("main", prev.as_deref(), Some(&manifest))
                .unwrap());
            prev = Some(manifest);
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(collector.join().unwrap() > 0, "the collector ran");
        prev.unwrap()
    });
    let check = |s: &S3Store| {
        let tree = Tree::from_manifest(s, &RootManifest::decode(&last).unwrap()).unwrap();
        assert_eq!(tree.iter().count(), 1500);
    };
    check(&store);
    // Past the grace period (0 here) the earlier rounds' trees go; the dry
    // run predicts exactly what the run removes.
    let old = S3Store::open(srv.config(&prefix)).unwrap();
    let pins = Pins::new();
    let dry = gc::collect_default(&old, &pins, true).unwrap();
    assert!(dry.retained.removed_blocks > 0, "{dry:?}");
    let run = gc::collect_default(&old, &pins, false).unwrap();
    assert_eq!(run.retained, dry.retained);
    check(&old);
}
