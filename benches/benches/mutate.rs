//! Criterion benchmarks of proximity-map mutation on seeded clustered data
//! (20 000 x 32, L2, default configuration): a one-record move of a
//! level-0 key (the common case: one root-to-leaf path per old and new
//! position), a one-record move of a key promoted one level (its level-1
//! subtree is reassigned), and, as the yardstick, the full canonical build
//! the previous mutation path performed for every structural batch. Each
//! benchmark prints the batch's `ApplyStats` once so the cost can be read
//! next to the work done.

// `criterion_group!` emits an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use prox_engine::proximity::math::promotion_level;
use prox_engine::proximity::{InputRecord, Mutation, ProximityConfig, ProximityMap};
use prox_engine::MemStore;
use prox_testkit::SplitMix64;
use std::hint::black_box;
use std::time::Duration;

const N: usize = 20_000;
const DIMS: usize = 32;

/// Uniform draws in [-0.5, 0.5) from `seed`.
fn rng(seed: u64) -> impl FnMut() -> f32 {
    let mut rng = SplitMix64::new(seed);
    move || rng.unit() * 0.5
}

fn data() -> Vec<InputRecord> {
    let mut next = rng(42);
    let centres: Vec<Vec<f32>> = (0..50)
        .map(|_| (0..DIMS).map(|_| next() * 8.0).collect())
        .collect();
    (0..N)
        .map(|i| {
            let c = &centres[(i * 31) % centres.len()];
            let v = c.iter().map(|&x| x + next()).collect();
            ((i as u64).to_be_bytes().to_vec(), v, Vec::new())
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let cfg = ProximityConfig::new(DIMS as u32);
    let recs = data();
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &cfg, recs.clone()).unwrap();
    let level = |k: &[u8]| promotion_level(k, cfg.log_chunk_size, cfg.level_hash_seed);
    let top = map.node(&map.root_cid()).unwrap().level;
    let mut g = c.benchmark_group("mutate_20k_x32");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    let mut cases = vec![("move_level0_record", 0u8)];
    if top >= 2 {
        cases.push(("move_level1_record", 1));
    }
    for (name, l) in cases {
        let i = (0..N)
            .find(|&i| i > 1000 && level(&recs[i].0) == l)
            .unwrap();
        // Move it onto another record's cluster (a different leaf).
        let batch = vec![Mutation::Put {
            key: recs[i].0.clone(),
            vector: recs[(i + 17) % N].1.clone(),
            value: Vec::new(),
        }];
        let (_, stats) = map.apply_with_stats(batch.clone()).unwrap();
        println!("{name}: {stats:?}");
        g.bench_function(name, |b| {
            b.iter(|| black_box(map.apply(batch.clone()).unwrap().descriptor_cid()))
        });
    }
    g.bench_function("full_build", |b| {
        b.iter(|| {
            let s = MemStore::new();
            black_box(
                ProximityMap::build(&s, &cfg, recs.clone())
                    .unwrap()
                    .descriptor_cid(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
