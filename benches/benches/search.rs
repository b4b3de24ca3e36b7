//! Criterion benchmarks of the native PRXN search on seeded clustered data
//! (10 000 x 64, L2, default map configuration): every mode, single query
//! and batch, with recall@10 against brute force printed beside each mode
//! (QPS is meaningless without it). The recall-vs-QPS sweep on the shared
//! datasets is `prox bench` (docs/performance.md, "Native search").

// `criterion_group!` emits an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use prox_engine::proximity::search::{Mode, Preset, SearchContext, SearchRequest};
use prox_engine::proximity::{InputRecord, ProximityConfig, ProximityMap};
use prox_engine::MemStore;
use prox_kernels::{canonical, Metric};
use prox_testkit::SplitMix64;
use std::hint::black_box;
use std::time::Duration;

const N: usize = 10_000;
const DIMS: usize = 64;
const K: usize = 10;

/// Uniform draws in [-0.5, 0.5) from `seed`.
fn rng(seed: u64) -> impl FnMut() -> f32 {
    let mut rng = SplitMix64::new(seed);
    move || rng.unit() * 0.5
}

fn data() -> (Vec<InputRecord>, Vec<f32>) {
    let mut next = rng(42);
    let centres: Vec<Vec<f32>> = (0..50)
        .map(|_| (0..DIMS).map(|_| next() * 8.0).collect())
        .collect();
    let recs = (0..N)
        .map(|i| {
            let c = &centres[i % centres.len()];
            let v = c.iter().map(|&x| x + next()).collect();
            ((i as u64).to_be_bytes().to_vec(), v, Vec::new())
        })
        .collect();
    let queries = (0..100)
        .flat_map(|i| {
            let c = centres[(i * 7) % centres.len()].clone();
            c.into_iter().map(|x| x + 0.0).collect::<Vec<_>>()
        })
        .zip(std::iter::repeat_with(rng(7)))
        .map(|(x, e)| x + e)
        .collect();
    (recs, queries)
}

fn truth(recs: &[InputRecord], q: &[f32]) -> Vec<Vec<u8>> {
    let mut all: Vec<(f64, &[u8])> = recs
        .iter()
        .map(|r| (canonical::score(Metric::L2, q, &r.1), r.0.as_slice()))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
    all.iter().take(K).map(|x| x.1.to_vec()).collect()
}

fn bench(c: &mut Criterion) {
    let (recs, queries) = data();
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &ProximityConfig::new(DIMS as u32), recs.clone())
        .expect("build");
    let searcher = map.searcher().expect("searcher");
    searcher.warm().expect("warm");
    let truths: Vec<Vec<Vec<u8>>> = queries.chunks(DIMS).map(|q| truth(&recs, q)).collect();
    let modes = [
        ("fast", Mode::Adaptive(Preset::Fast)),
        ("balanced", Mode::Adaptive(Preset::Balanced)),
        ("high", Mode::Adaptive(Preset::HighRecall)),
        ("exact", Mode::Exact),
    ];
    let mut g = c.benchmark_group("native_search");
    g.measurement_time(Duration::from_secs(3));
    for (name, mode) in modes {
        let req = SearchRequest::new(K).mode(mode);
        let mut ctx = SearchContext::new();
        let mut found = 0usize;
        for (q, t) in queries.chunks(DIMS).zip(&truths) {
            let r = searcher.search_with(&mut ctx, q, &req).expect("search");
            found += r.hits.iter().filter(|h| t.contains(&h.key)).count();
        }
        eprintln!(
            "native_search/{name}: recall@{K} = {:.4}",
            found as f64 / (K * truths.len()) as f64
        );
        g.bench_with_input(BenchmarkId::new("query", name), &req, |b, req| {
            let mut i = 0usize;
            b.iter(|| {
                let q = &queries[(i % truths.len()) * DIMS..][..DIMS];
                i += 1;
                black_box(searcher.search_with(&mut ctx, q, req).expect("search"))
            })
        });
        g.bench_with_input(BenchmarkId::new("batch100", name), &req, |b, req| {
            b.iter(|| black_box(searcher.search_batch(&queries, req).expect("batch")))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
