//! Criterion benchmarks of the accelerators on seeded clustered data
//! (10 000 x 64, L2 and inner product): fast HNSW build, HNSW search at
//! several `ef` (recall@10 printed beside each), PQ training and ADC search.
//! The full recall-vs-QPS comparison with hnswlib on the shared datasets is
//! `prox bench --path hnsw` beside the peers (docs/performance.md, "HNSW").

// `criterion_group!` emits an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use prox_engine::accel::hnsw::{HnswSearchContext, IdHit, SearchOptions};
use prox_engine::accel::pq::{Pq, PqSearchContext};
use prox_engine::accel::{Hnsw, HnswParams, PqParams};
use prox_kernels::{canonical, Metric};
use prox_testkit::SplitMix64;
use std::hint::black_box;
use std::time::Duration;

const N: usize = 10_000;
const DIMS: usize = 64;

fn data(seed: u64, n: usize) -> Vec<(Vec<u8>, Vec<f32>)> {
    // Uniform in [-0.5, 0.5).
    let mut rng = SplitMix64::new(seed);
    let mut next = move || rng.unit() * 0.5;
    let centres: Vec<Vec<f32>> = (0..50)
        .map(|_| (0..DIMS).map(|_| next() * 8.0).collect())
        .collect();
    (0..n)
        .map(|i| {
            let c = &centres[i % centres.len()];
            let v = c.iter().map(|&x| x + next()).collect();
            ((i as u32).to_be_bytes().to_vec(), v)
        })
        .collect()
}

fn recall(metric: Metric, base: &[(Vec<u8>, Vec<f32>)], qs: &[Vec<f32>], got: &[Vec<u32>]) -> f64 {
    let mut hit = 0;
    for (q, g) in qs.iter().zip(got) {
        let mut s: Vec<(f64, usize)> = base
            .iter()
            .enumerate()
            .map(|(i, r)| (canonical::score(metric, q, &r.1), i))
            .collect();
        s.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        hit += s[..10]
            .iter()
            .filter(|(_, i)| g.contains(&(*i as u32)))
            .count();
    }
    hit as f64 / (10 * qs.len()) as f64
}

fn hnsw(c: &mut Criterion) {
    let mut group = c.benchmark_group("accel_hnsw");
    group
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    for metric in [Metric::L2, Metric::InnerProduct] {
        let base = data(7, N);
        let qs: Vec<Vec<f32>> = data(99, 200).into_iter().map(|r| r.1).collect();
        let params = HnswParams::parse("m=16,efc=100").unwrap();
        group.bench_function(BenchmarkId::new("build_fast", metric), |b| {
            b.iter(|| black_box(Hnsw::build(metric, DIMS, &base, &params).unwrap()))
        });
        let g = Hnsw::build(metric, DIMS, &base, &params)
            .unwrap()
            .search_graph();
        for ef in [16, 32, 64, 128] {
            let mut ctx = HnswSearchContext::new();
            let mut hits: Vec<IdHit> = Vec::new();
            let got: Vec<Vec<u32>> = qs
                .iter()
                .map(|q| {
                    g.search(&mut ctx, q, SearchOptions { k: 10, ef }, &mut hits)
                        .unwrap();
                    hits.iter().map(|h| h.id).collect()
                })
                .collect();
            println!(
                "hnsw {metric} ef={ef}: recall@10 {:.3}",
                recall(metric, &base, &qs, &got)
            );
            group.bench_function(BenchmarkId::new(format!("search_{metric}"), ef), |b| {
                b.iter(|| {
                    for q in &qs {
                        g.search(&mut ctx, q, SearchOptions { k: 10, ef }, &mut hits)
                            .unwrap();
                    }
                    black_box(hits.len())
                })
            });
        }
    }
    group.finish();
}

fn pq(c: &mut Criterion) {
    let mut group = c.benchmark_group("accel_pq");
    group
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    let base = data(7, N);
    let qs: Vec<Vec<f32>> = data(99, 100).into_iter().map(|r| r.1).collect();
    let params = PqParams::parse("m=16,k=256,iterations=4").unwrap();
    group.bench_function("train_m16_k256_it4", |b| {
        b.iter(|| black_box(Pq::train(Metric::L2, DIMS, &base, &params).unwrap()))
    });
    let p = Pq::train(Metric::L2, DIMS, &base, &params).unwrap();
    let mut ctx = PqSearchContext::new();
    let mut hits = Vec::new();
    let got: Vec<Vec<u32>> = qs
        .iter()
        .map(|q| {
            p.search(&mut ctx, q, 10, Some(8), None, &mut hits).unwrap();
            hits.iter().map(|h| h.id).collect()
        })
        .collect();
    println!(
        "pq l2 rerank=8: recall@10 {:.3}",
        recall(Metric::L2, &base, &qs, &got)
    );
    group.bench_function("adc_search_rerank8", |b| {
        b.iter(|| {
            for q in &qs {
                p.search(&mut ctx, q, 10, Some(8), None, &mut hits).unwrap();
            }
            black_box(hits.len())
        })
    });
    group.finish();
}

criterion_group!(benches, hnsw, pq);
criterion_main!(benches);
