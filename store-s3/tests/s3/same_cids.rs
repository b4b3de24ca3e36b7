//! The content-addressing contract across stores: the same records and
//! configuration give the same descriptor CID and the same set of blocks in
//! a directory store (`MmapStore`) and in a bucket, for an in-memory build,
//! a streamed (spilling) build and an update of the built map.

use crate::support::server;
use prox_engine::index::{self, Build};
use prox_engine::proximity::{InputRecord, Mutation, NoProgress, ProximityMap, StreamBuild};
use prox_engine::{BlockStore, Cid, MmapStore};
use std::collections::BTreeSet;

const DIMS: u32 = 12;

/// `n` seeded records with keys `start..start + n` (big-endian).
fn records(seed: u64, start: u64, n: u64) -> Vec<InputRecord> {
    let mut x = seed | 1;
    let mut next = move || {
        // xorshift64*: deterministic, no dependency.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32
    };
    (start..start + n)
        .map(|i| {
            let v: Vec<f32> = (0..DIMS).map(|_| next()).collect();
            (i.to_be_bytes().to_vec(), v, format!("v{i}").into_bytes())
        })
        .collect()
}

/// What one store ends up with: the three descriptor CIDs and every block.
#[derive(Debug, PartialEq)]
struct Outcome {
    built: Cid,
    streamed: Cid,
    updated: Cid,
    blocks: BTreeSet<Cid>,
}

fn run(store: &dyn BlockStore, spill: &std::path::Path, seed: u64) -> Outcome {
    let base = records(seed, 0, 1500);
    let built = index::build(store, None, &Build::new(DIMS), base.clone())
        .unwrap()
        .descriptor;
    // A second map of other records, streamed with the smallest memory
    // limit so that it spills sorted runs.
    let config = Build::new(DIMS).config;
    let mut stream = StreamBuild::new(store, &config, 1 << 20, spill).unwrap();
    for (k, v, val) in records(seed ^ 0x55, 0, 3000) {
        stream.push(k, v, val).unwrap();
    }
    let (map, _) = stream.finish(&NoProgress).unwrap();
    let streamed = map.descriptor_cid();
    let edits: Vec<Mutation> = records(seed ^ 0xaa, 1400, 200)
        .into_iter()
        .map(|(key, vector, value)| Mutation::Put { key, vector, value })
        .chain((0..50u64).map(|i| Mutation::Delete {
            key: (i * 7).to_be_bytes().to_vec(),
        }))
        .collect();
    let updated = ProximityMap::load(store, built)
        .unwrap()
        .apply(edits)
        .unwrap()
        .descriptor_cid();
    store.commit().unwrap();
    Outcome {
        built,
        streamed,
        updated,
        blocks: store.cids().unwrap().into_iter().collect(),
    }
}

#[test]
fn a_bucket_and_a_directory_store_get_the_same_cids() {
    let Some(srv) = server("same_cids") else {
        return;
    };
    let seed = prox_testkit::seed(0x5a3e_c1d5);
    let dir = tempfile::tempdir().unwrap();
    let local = MmapStore::open(dir.path().join("store")).unwrap();
    let on_disk = run(&local, &dir.path().join("spill-a"), seed);
    let bucket = srv.store("same_cids");
    let in_bucket = run(&bucket, &dir.path().join("spill-b"), seed);
    assert_ne!(on_disk.built, on_disk.updated, "the update changed the map");
    assert_eq!(in_bucket, on_disk, "same records and config, same CIDs");
}
