//! Block store benchmarks: random `get` latency (MemStore vs MmapStore, warm
//! and cold), `put` throughput (single and batched, with and without the
//! commit fsync) and the open-time scan.
//!
//! Data is seeded: `PROX_BENCH_BLOCKS` blocks (default 50 000) of
//! `PROX_BENCH_BLOCK_BYTES` bytes (default 1024). "Cold" means a freshly
//! opened store (every block still to be verified against its CID) whose
//! segment pages were dropped from the page cache with
//! `posix_fadvise(DONTNEED)` right before the measured reads.
//!
//! Run: `cargo bench -p prox-benches --bench store`

// `criterion_group!` emits an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use prox_engine::store::{BlockStore, MemStore, MmapStore};
use prox_engine::Cid;
use std::hint::black_box;
use std::time::Duration;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn blocks(n: usize, size: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed.wrapping_mul(2) | 1);
    (0..n)
        .map(|_| {
            let mut b = vec![0u8; size];
            for chunk in b.chunks_mut(8) {
                let x = rng.next().to_le_bytes();
                chunk.copy_from_slice(&x[..chunk.len()]);
            }
            b
        })
        .collect()
}

const PROBES: usize = 1000;

fn get_latency(c: &mut Criterion) {
    let n = env("PROX_BENCH_BLOCKS", 50_000);
    let size = env("PROX_BENCH_BLOCK_BYTES", 1024);
    let data = blocks(n, size, 42);
    let refs: Vec<&[u8]> = data.iter().map(|b| b.as_slice()).collect();
    let mem = MemStore::new();
    let cids = mem.put_many(&refs).expect("mem put");
    let tmp = tempfile::tempdir().expect("tempdir");
    {
        let s = MmapStore::open(tmp.path()).expect("open");
        s.put_many(&refs).expect("mmap put");
        s.commit().expect("commit");
    }
    let mut rng = Rng(7);
    let probes: Vec<Cid> = (0..PROBES)
        .map(|_| cids[(rng.next() % n as u64) as usize])
        .collect();
    let read_all = |s: &dyn BlockStore| {
        for cid in &probes {
            black_box(s.get(cid).expect("get").expect("present"));
        }
    };

    let mut g = c.benchmark_group(format!("store_get/{n}x{size}B"));
    g.throughput(Throughput::Elements(PROBES as u64));
    g.measurement_time(Duration::from_secs(3));
    g.sample_size(20);
    g.bench_function("mem", |b| b.iter(|| read_all(&mem)));
    let warm = MmapStore::open(tmp.path()).expect("open");
    read_all(&warm); // verify once, fault the pages in
    g.bench_function("mmap_warm", |b| b.iter(|| read_all(&warm)));
    drop(warm);
    g.bench_function("mmap_cold_open_and_page_cache", |b| {
        b.iter_batched(
            || {
                let s = MmapStore::open(tmp.path()).expect("open");
                s.drop_page_cache().expect("fadvise");
                s
            },
            |s| read_all(&s),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("mmap_cold_verify_only", |b| {
        b.iter_batched(
            || MmapStore::open(tmp.path()).expect("open"),
            |s| read_all(&s),
            BatchSize::PerIteration,
        )
    });
    g.finish();

    let mut g = c.benchmark_group(format!("store_open/{n}x{size}B"));
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    g.bench_function("mmap_open_scan", |b| {
        b.iter(|| black_box(MmapStore::open(tmp.path()).expect("open")))
    });
    g.finish();
}

fn put_throughput(c: &mut Criterion) {
    let size = env("PROX_BENCH_BLOCK_BYTES", 1024);
    let mut g = c.benchmark_group(format!("store_put/{size}B"));
    g.measurement_time(Duration::from_secs(3));
    g.sample_size(10);
    for batch in [1usize, 100, 1000] {
        let per_iter = 1000usize;
        g.throughput(Throughput::Bytes((per_iter * size) as u64));
        let mut seed = 1u64;
        let mut fresh = move || {
            seed += 1;
            blocks(per_iter, size, seed)
        };
        g.bench_function(BenchmarkId::new("mem", batch), |b| {
            b.iter_batched(
                || (MemStore::new(), fresh()),
                |(s, data)| {
                    for chunk in data.chunks(batch) {
                        let refs: Vec<&[u8]> = chunk.iter().map(|b| b.as_slice()).collect();
                        black_box(s.put_many(&refs).expect("put"));
                    }
                },
                BatchSize::PerIteration,
            )
        });
        for commit in [false, true] {
            let name = if commit { "mmap+commit" } else { "mmap" };
            let tmp = tempfile::tempdir().expect("tempdir");
            let s = MmapStore::open(tmp.path()).expect("open");
            g.bench_function(BenchmarkId::new(name, batch), |b| {
                b.iter_batched(
                    &mut fresh,
                    |data| {
                        for chunk in data.chunks(batch) {
                            let refs: Vec<&[u8]> = chunk.iter().map(|b| b.as_slice()).collect();
                            black_box(s.put_many(&refs).expect("put"));
                        }
                        if commit {
                            s.commit().expect("commit");
                        }
                    },
                    BatchSize::PerIteration,
                )
            });
        }
    }
    g.finish();
}

criterion_group!(benches, get_latency, put_throughput);
criterion_main!(benches);
