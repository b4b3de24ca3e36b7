//! Criterion benches of every fast kernel at d = 128, 384, 768, 1536, one
//! group per (kernel, dim) with the available ISAs side by side.
//!
//! One query against `ROWS` contiguous rows (one-to-many, cache-resident),
//! plus the one-to-one f32 kernels. Data is seeded (xorshift64*), so runs are
//! comparable. `cargo bench -p prox-benches --bench kernels -- f32_l2sq/384`
//! filters as usual. For DRAM-sized scans use `prox bench kernels`.

// `criterion_group!` emits an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use prox_kernels::pq::{self, Codebooks};
use prox_kernels::sq8::{self, Quantizer};
use prox_kernels::{available_isas, f32 as fk, Isa};

const DIMS: [usize; 4] = [128, 384, 768, 1536];
const ROWS: usize = 1024;
const SEED: u64 = 0x5EED_BE7C;

fn data(seed: u64, len: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let u = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32;
            2.0 * u - 1.0
        })
        .collect()
}

type Many = fn(Isa, &[f32], &[f32], &mut [f32]) -> bool;
type One = fn(Isa, &[f32], &[f32]) -> Option<f32>;

fn f32_kernels(c: &mut Criterion) {
    let many: [(&str, Many); 3] = [
        ("f32_l2sq_many", fk::l2sq_many_with),
        ("f32_dot_many", fk::dot_many_with),
        ("f32_cosine_many", fk::cosine_many_with),
    ];
    let one: [(&str, One); 3] = [
        ("f32_l2sq", fk::l2sq_with),
        ("f32_dot", fk::dot_with),
        ("f32_cosine", fk::cosine_distance_with),
    ];
    for d in DIMS {
        let rows = data(SEED ^ d as u64, ROWS * d);
        let q = data(SEED + d as u64, d);
        let mut out = vec![0.0f32; ROWS];
        for (name, kernel) in many {
            let mut g = c.benchmark_group(format!("{name}/{d}"));
            g.throughput(Throughput::Elements(ROWS as u64));
            for isa in available_isas() {
                g.bench_function(BenchmarkId::from_parameter(isa), |b| {
                    b.iter(|| kernel(isa, black_box(&q), black_box(&rows), &mut out))
                });
            }
            g.finish();
        }
        for (name, kernel) in one {
            let mut g = c.benchmark_group(format!("{name}/{d}"));
            for isa in available_isas() {
                g.bench_function(BenchmarkId::from_parameter(isa), |b| {
                    b.iter(|| kernel(isa, black_box(&q), black_box(&rows[..d])))
                });
            }
            g.finish();
        }
    }
}

fn sq8_kernels(c: &mut Criterion) {
    for d in DIMS {
        let rows = data(SEED ^ d as u64, ROWS * d);
        let q = data(SEED + d as u64, d);
        let quant = Quantizer::fit(d, 32, &rows).expect("valid quantizer");
        let codes = quant.encode_many(&rows);
        let query = quant.query(&q);
        let qcodes = quant.encode_many(&q);
        let mut out = vec![0.0f32; ROWS];
        let mut out_i = vec![0i32; ROWS];
        let mut g = c.benchmark_group(format!("sq8_l2sq_many/{d}"));
        g.throughput(Throughput::Elements(ROWS as u64));
        for isa in available_isas() {
            g.bench_function(BenchmarkId::from_parameter(isa), |b| {
                b.iter(|| query.l2sq_many_with(isa, black_box(&codes), &mut out))
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("sq8_dot_many/{d}"));
        g.throughput(Throughput::Elements(ROWS as u64));
        for isa in available_isas() {
            g.bench_function(BenchmarkId::from_parameter(isa), |b| {
                b.iter(|| query.dot_many_with(isa, black_box(&codes), &mut out))
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("sq8_dot_i8_many/{d}"));
        g.throughput(Throughput::Elements(ROWS as u64));
        for isa in available_isas() {
            g.bench_function(BenchmarkId::from_parameter(isa), |b| {
                b.iter(|| {
                    sq8::dot_i8_many_with(isa, black_box(&qcodes), black_box(&codes), &mut out_i)
                })
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("sq8_encode/{d}"));
        g.throughput(Throughput::Elements(ROWS as u64));
        g.bench_function("scalar", |b| b.iter(|| quant.encode_many(black_box(&rows))));
        g.finish();
    }
}

fn pq_kernels(c: &mut Criterion) {
    for d in DIMS {
        let m = d / 16;
        let cb = Codebooks::new(d, m, 256, data(SEED ^ 7 ^ d as u64, 256 * d)).expect("codebooks");
        let q = data(SEED + d as u64, d);
        let codes: Vec<u8> = data(SEED ^ 11, ROWS * m)
            .iter()
            .map(|x| ((x + 1.0) * 127.9) as u8)
            .collect();
        let table = pq::adc_table_l2(&q, &cb);
        let mut out = vec![0.0f32; ROWS];
        let mut g = c.benchmark_group(format!("pq_adc_scan/{d}"));
        g.throughput(Throughput::Elements(ROWS as u64));
        for isa in available_isas() {
            g.bench_function(BenchmarkId::from_parameter(isa), |b| {
                b.iter(|| pq::adc_scan_with(isa, black_box(&table), black_box(&codes), &mut out))
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("pq_adc_table/{d}"));
        g.bench_function("l2", |b| b.iter(|| pq::adc_table_l2(black_box(&q), &cb)));
        g.bench_function("dot", |b| b.iter(|| pq::adc_table_dot(black_box(&q), &cb)));
        g.finish();
    }
}

fn topk(c: &mut Criterion) {
    let scores = data(SEED, 100_000);
    let mut g = c.benchmark_group("topk/100000");
    g.throughput(Throughput::Elements(scores.len() as u64));
    for k in [10usize, 100] {
        g.bench_function(BenchmarkId::from_parameter(k), |b| {
            b.iter(|| {
                let mut t = prox_kernels::TopK::new(k);
                for (i, &s) in scores.iter().enumerate() {
                    t.push(s, i as u32);
                }
                t.into_sorted_vec()
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = f32_kernels, sq8_kernels, pq_kernels, topk
}
criterion_main!(benches);
