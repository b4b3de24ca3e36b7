//! Prolly tree benchmarks: bulk build throughput against the machine's
//! SHA-256 throughput (every node byte is hashed once, so hashing bounds
//! the build), canonical batch cost against batch size, and diff cost for
//! one changed key in a large tree.
//!
//! Sizes: `PROX_BENCH_N` entries (default 1_000_000) for build and diff;
//! batches run against a 100k-entry tree. Data is seeded and fixed:
//! 16-byte keys (`u64_key` of a scrambled index, 8 bytes padding) and
//! 32-byte values, default config (4 / 1 MiB / 128 / seed 0).

// `criterion_group!` emits an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::{
    black_box, criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput,
};
use prox_engine::keys::u64_key;
use prox_engine::prolly::{build_sorted, Config, Mutation, Tree};
use prox_engine::{Cid, MemStore};
use std::time::Duration;

fn n_entries() -> usize {
    std::env::var("PROX_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

fn key(i: u64) -> Vec<u8> {
    let mut k = u64_key(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_vec();
    k.extend_from_slice(&u64_key(i));
    k
}

fn value(i: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(32);
    for j in 0..4u64 {
        v.extend_from_slice(
            &(i ^ (j << 56))
                .wrapping_mul(0xbf58_476d_1ce4_e5b9)
                .to_le_bytes(),
        );
    }
    v
}

fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut e: Vec<_> = (0..n as u64).map(|i| (key(i), value(i))).collect();
    e.sort_by(|a, b| a.0.cmp(&b.0));
    e
}

fn bulk_build(c: &mut Criterion) {
    let n = n_entries();
    let data = entries(n);
    let bytes: u64 = data.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    let cfg = Config::default();
    let mut g = c.benchmark_group("prolly_build");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(BenchmarkId::new("entries", n), |b| {
        b.iter_batched(
            || data.clone(),
            |d| {
                let store = MemStore::new();
                black_box(build_sorted(&store, &cfg, d).unwrap())
            },
            BatchSize::LargeInput,
        )
    });
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function(BenchmarkId::new("bytes", n), |b| {
        b.iter_batched(
            || data.clone(),
            |d| {
                let store = MemStore::new();
                black_box(build_sorted(&store, &cfg, d).unwrap())
            },
            BatchSize::LargeInput,
        )
    });
    // The bound: SHA-256 over the same number of bytes, in 4 KiB blocks.
    let buf = vec![0x5au8; bytes as usize];
    g.bench_function(BenchmarkId::new("sha256_same_bytes", n), |b| {
        b.iter(|| {
            for chunk in buf.chunks(4096) {
                black_box(Cid::of(chunk));
            }
        })
    });
    g.finish();
}

fn batches(c: &mut Criterion) {
    let cfg = Config::default();
    let store = MemStore::new();
    let n = 100_000u64;
    let root = build_sorted(&store, &cfg, entries(n as usize)).unwrap();
    let tree = Tree::open(&store, cfg, root).unwrap();
    let mut g = c.benchmark_group("prolly_batch");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    for size in [1usize, 10, 100, 1000, 10_000] {
        let mut seed = 0u64;
        g.throughput(Throughput::Elements(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter_batched(
                || {
                    seed += 1;
                    (0..size as u64)
                        .map(|j| {
                            let i = (seed * 7919 + j * 104_729) % n;
                            if j % 4 == 3 {
                                Mutation::Delete(key(i))
                            } else {
                                Mutation::Put(key(i), value(i ^ seed))
                            }
                        })
                        .collect::<Vec<_>>()
                },
                |muts| black_box(tree.batch(muts).unwrap()),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn diff_one_change(c: &mut Criterion) {
    let n = n_entries() as u64;
    let cfg = Config::default();
    let store = MemStore::new();
    let root = build_sorted(&store, &cfg, entries(n as usize)).unwrap();
    let tree = Tree::open(&store, cfg, root).unwrap();
    let other = tree.put(key(n / 2), b"changed".to_vec()).unwrap();
    let mut g = c.benchmark_group("prolly_diff");
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    g.bench_function(BenchmarkId::new("one_change", n), |b| {
        b.iter(|| {
            let d = tree.diff_vec(&other).unwrap();
            assert_eq!(d.len(), 1);
            black_box(d)
        })
    });
    g.finish();
}

criterion_group!(benches, bulk_build, batches, diff_one_change);
criterion_main!(benches);
