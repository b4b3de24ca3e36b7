//! Stable smoke run of every fuzz target: each target's body runs over its
//! local cargo-fuzz corpus (`fuzz/corpus/<target>/`, when there is one), over
//! valid seed inputs of every format (blocks of a real prolly tree and
//! proximity map, store segments, sync frames and messages, HTTP bodies),
//! and over seeded random and mutated inputs, within a count and a time
//! bound per target. `PROX_SEED` replays a run; `PROX_FUZZ_SMOKE_INPUTS`
//! (default 5000) and `PROX_FUZZ_SMOKE_SECS` (default 5) set the bounds.

use prox_engine::envelope::{ValueRef, VersionedValue};
use prox_engine::prolly::Encoding;
use prox_engine::proximity::{ProximityConfig, ProximityMap};
use prox_engine::store::mmap::format::{encode_block, encode_commit};
use prox_engine::{BlockStore, Cid, MemStore};
use prox_fuzz_bodies::TARGETS;
use prox_sync::protocol::codec;
use prox_sync::protocol::frames::{ClientFrame, ClosureStatus, RefusedCode, ServerFrame};
use prox_sync::protocol::messages::{ErrorCode, Hello, Request, Response};
use prox_testkit::SplitMix64;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Blocks of a small prolly tree and a small proximity map, and the root
/// manifest pointing at the tree: valid inputs of the engine's decoders.
fn engine_seeds() -> Vec<Vec<u8>> {
    let store = MemStore::new();
    let cfg = prox_engine::prolly::Config::default();
    let kv: Vec<(Vec<u8>, Vec<u8>)> = (0..300u32)
        .map(|i| {
            (
                format!("k{i:05}").into_bytes(),
                vec![i as u8; (i % 40) as usize],
            )
        })
        .collect();
    let root = prox_engine::prolly::build(&store, &cfg, kv).expect("prolly tree builds");
    let manifest = prox_engine::manifest::RootManifest::new(root, cfg).encode();
    let mut pc = ProximityConfig::new(4);
    pc.log_chunk_size = 2;
    let mut rng = SplitMix64::new(7);
    let records = (0..200u32)
        .map(|i| {
            let v: Vec<f32> = (0..4).map(|_| rng.unit() * 2.0 - 1.0).collect();
            (format!("r{i:04}").into_bytes(), v, vec![i as u8])
        })
        .collect();
    ProximityMap::build(&store, &pc, records).expect("proximity map builds");
    let mut out: Vec<Vec<u8>> = store
        .cids()
        .expect("list blocks")
        .iter()
        .map(|c| store.get(c).expect("read").expect("present").to_vec())
        .collect();
    out.push(manifest);
    out.push(
        VersionedValue {
            schema: "doc".into(),
            version: 3,
            encoding: Encoding::Json,
            payload: b"{\"a\":1}".to_vec(),
        }
        .encode(),
    );
    out.push(ValueRef::Inline(b"inline".to_vec()).encode());
    out.push(
        ValueRef::Blob {
            cid: Cid::of(b"blob"),
            len: 4,
        }
        .encode(),
    );
    out
}

/// A store segment: every block as a record, commits in between.
fn segment_seed(blocks: &[Vec<u8>]) -> Vec<u8> {
    let mut seg = Vec::new();
    for (i, b) in blocks.iter().take(40).enumerate() {
        encode_block(&mut seg, &Cid::of(b), b);
        if i % 7 == 6 {
            encode_commit(&mut seg);
        }
    }
    encode_commit(&mut seg);
    seg
}

/// Every client and server frame kind, and every control message kind.
/// A zstd frame as `ZBLOCK`/`ZDELTA` answers carry one.
fn zstd_seed() -> Vec<u8> {
    prox_sync::delta::compress(&[], b"hello hello hello hello", 1).expect("compresses")
}

fn sync_seeds() -> Vec<Vec<u8>> {
    let mut client = Vec::new();
    ClientFrame::Want {
        batch: 1,
        max_bytes: 1 << 20,
        cids: vec![Cid::of(b"a"), Cid::of(b"b")],
    }
    .encode(&mut client)
    .expect("encodes");
    ClientFrame::WantClosure {
        batch: 2,
        max_bytes: 1 << 30,
        value_cid: Cid::of(b"v"),
        name: "docs".into(),
    }
    .encode(&mut client)
    .expect("encodes");
    let mut server = Vec::new();
    for f in [
        ServerFrame::Block(bytes::Bytes::from_static(b"block")),
        ServerFrame::Missing,
        ServerFrame::Defer,
        ServerFrame::Done { batch: 1 },
        ServerFrame::ClosureBlock {
            cid: Cid::of(b"c"),
            bytes: bytes::Bytes::from_static(b"c"),
        },
        ServerFrame::ClosureEnd {
            batch: 2,
            status: ClosureStatus::Complete,
        },
        ServerFrame::Busy { batch: 3 },
        ServerFrame::ZBlock(zstd_seed().into()),
        ServerFrame::ZDelta(zstd_seed().into()),
        ServerFrame::Refused(RefusedCode::Busy),
    ] {
        f.encode_header(&mut server);
        if let Some(p) = f.payload() {
            server.extend_from_slice(p);
        }
    }
    let mut out = vec![client, server];
    // `sync_patch` splits its input in halves: a base, then a zstd frame.
    let z = zstd_seed();
    let mut based = vec![7u8; z.len()];
    based.extend_from_slice(&z);
    out.push(based);
    let requests = [
        Request::Hello(Hello {
            version: 1,
            max_block: 4 << 20,
            max_want: 4096,
            bulk: true,
        }),
        Request::GetRoot {
            name: "docs".into(),
        },
        Request::ListRoots {
            after: Some("a".into()),
            limit: 10,
        },
        Request::Announce {
            name: "docs".into(),
            value: serde_bytes::ByteBuf::from(vec![1, 2, 3]),
            target: "mirror".into(),
        },
        Request::Follow {
            name: "docs".into(),
        },
    ];
    for r in &requests {
        out.push(codec::encode(r).expect("encodes"));
    }
    let responses = [
        Response::Root {
            value: Some(serde_bytes::ByteBuf::from(vec![9; 40])),
            bulk: true,
            delta: true,
            zstd: true,
            record: Some(serde_bytes::ByteBuf::from(vec![1; 8])),
        },
        Response::Error {
            code: ErrorCode::Busy,
            message: "busy".into(),
        },
    ];
    for r in &responses {
        out.push(codec::encode(r).expect("encodes"));
    }
    out
}

/// Search and batch bodies for a 4-dimensional map, valid and nearly so.
fn http_seeds() -> Vec<Vec<u8>> {
    let search = [
        r#"{"vector":[0.5,-1,2e3,0]}"#,
        r#"{"vector":[1,2,3,4],"k":5,"mode":"exact","with_values":true}"#,
        r#"{"k":3,"vector":[1,2,3,4],"path":"hnsw","ef":64,"filter":{"prefix":"6b"}}"#,
        r#" { "vector" : [ 1.0e-45 , 3.4028235e38 , -0.0 , 1 ] , "budget" : 100 } "#,
        r#"{"vector":[1,2,3],"k":0}"#,
        r#"{"vector":[1,2,3,4],"vector":[1,2,3,4]}"#,
    ];
    let batch = [
        r#"{"vectors":[[1,2,3,4],[0,0,0,1]],"k":2}"#,
        r#"{"vectors":[[1,2,3,4]],"mode":"fast","nprobe":4,"rerank":10}"#,
        r#"{"vectors":[],"k":2}"#,
    ];
    let mut out = Vec::new();
    for s in search {
        let mut b = vec![3u8];
        b.extend_from_slice(s.as_bytes());
        out.push(b);
    }
    for s in batch {
        let mut b = vec![0x83u8];
        b.extend_from_slice(s.as_bytes());
        out.push(b);
    }
    out
}

/// Inputs read from `fuzz/corpus/<target>/`, if that directory exists.
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<Vec<u8>> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .filter_map(|e| std::fs::read(e.path()).ok())
        .collect();
    out.sort();
    out
}

/// Bytes a mutation likes to write: boundaries of lengths, tags and
/// magic numbers.
const INTERESTING: &[u8] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0x7f, 0x80, 0xfe, 0xff, b'[', b'{', b'"', b'-', b'e',
];

/// One to four random edits of `input` (bit flip, byte overwrite,
/// insertion, deletion, truncation, duplicated span).
fn mutate(rng: &mut SplitMix64, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        let len = v.len() as u64;
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len) as usize;
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len) as usize;
                v[i] = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
            }
            2 => {
                let i = rng.below(len + 1) as usize;
                v.insert(i, rng.next() as u8);
            }
            3 if len > 0 => {
                v.remove(rng.below(len) as usize);
            }
            4 if len > 0 => v.truncate(rng.below(len) as usize),
            5 if len > 1 => {
                let a = rng.below(len) as usize;
                let b = (a + 1 + rng.below(16) as usize).min(v.len());
                let span = v[a..b].to_vec();
                let at = rng.below(v.len() as u64 + 1) as usize;
                v.splice(at..at, span);
            }
            _ => {
                if len >= 4 {
                    // A big-endian length field somewhere: make it huge.
                    let i = rng.below(len - 3) as usize;
                    v[i..i + 4].copy_from_slice(&u32::MAX.to_be_bytes());
                }
            }
        }
    }
    v
}

fn random_input(rng: &mut SplitMix64) -> Vec<u8> {
    let len = rng.below(256) as usize;
    (0..len).map(|_| rng.next() as u8).collect()
}

/// Targets whose first input byte selects a variant: seeds are tried
/// behind every selector that matters (dims 4 is selector 3; `proximity_links`
/// picks the kind from the selector modulo 10 and PRXN dims from its tens).
fn prefixes(target: &str) -> Vec<u8> {
    match target {
        "proximity_node" | "proximity_record" => vec![3],
        "proximity_links" => (0..10).chain([32]).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn every_fuzz_target_survives_its_corpus_seeds_and_mutations() {
    let seed = prox_testkit::seed(0xf0cc_5eed);
    let inputs = env_num("PROX_FUZZ_SMOKE_INPUTS", 5000);
    let budget = Duration::from_secs(env_num("PROX_FUZZ_SMOKE_SECS", 5));
    let engine = engine_seeds();
    let mut common: Vec<Vec<u8>> = engine.clone();
    common.push(segment_seed(&engine));
    common.extend(sync_seeds());
    common.extend(http_seeds());
    let fuzz_targets = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz_targets");
    let mut on_disk: Vec<String> = std::fs::read_dir(&fuzz_targets)
        .expect("fuzz/fuzz_targets is readable")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".rs")
                .map(String::from)
        })
        .collect();
    on_disk.sort();
    let listed: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        listed, on_disk,
        "every fuzz target has a body in TARGETS, in name order"
    );
    for &(name, target) in TARGETS {
        let mut seeds = corpus(name);
        let pre = prefixes(name);
        for s in &common {
            if pre.is_empty() {
                seeds.push(s.clone());
            }
            for &p in &pre {
                let mut v = vec![p];
                v.extend_from_slice(s);
                seeds.push(v);
            }
        }
        let mut rng = SplitMix64::new(seed ^ Cid::of(name.as_bytes()).as_bytes()[0] as u64);
        let start = Instant::now();
        let mut ran = 0u64;
        let run = |input: &[u8]| {
            if catch_unwind(AssertUnwindSafe(|| target(input))).is_err() {
                panic!(
                    "fuzz target {name} failed on input {} (PROX_SEED={seed:#x})",
                    hex::encode(input)
                );
            }
        };
        for s in &seeds {
            run(s);
            ran += 1;
        }
        for i in 0..inputs {
            if start.elapsed() > budget {
                break;
            }
            let input = if i % 4 == 3 || seeds.is_empty() {
                random_input(&mut rng)
            } else {
                let base = &seeds[rng.below(seeds.len() as u64) as usize];
                mutate(&mut rng, base)
            };
            run(&input);
            ran += 1;
        }
        eprintln!(
            "{name}: {ran} inputs in {:.2} s (seed {seed:#x})",
            start.elapsed().as_secs_f64()
        );
        assert!(ran >= seeds.len() as u64, "{name} ran its seeds");
    }
}
