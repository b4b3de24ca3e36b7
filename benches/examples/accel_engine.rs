//! prox accelerators behind `peer_bench.py --engine-cmd` (protocol in its
//! docstring), so prox and the peers are measured in the same run the same
//! way: build once, then for every sweep value search all queries in one
//! batch with `--threads` threads (best of `--reps`), write the ids as
//! `.ivecs`, and print JSON lines. With `--gt FILE` it also prints recall@k
//! itself (handy without the harness). For HNSW, per-query latency
//! percentiles (one query at a time, one thread) go to stderr.
//!
//! ```text
//! cargo run --release -p prox-benches --example accel_engine -- \
//!   --base base.fvecs --query query.fvecs --metric ip --k 10 --threads 1 \
//!   --build-threads 2 --params 16,32,64,128 --out /tmp/x \
//!   [--path hnsw|pq] [--hnsw m=16,efc=200] [--pq m=48] [--gt gt.ivecs] \
//!   [--sq8 | --pq-traversal m=16,k=256]
//!   [--variants f32,sq8,pq:m=48 --gt gt.ivecs]
//! ```
//! For `--path pq` the sweep values are rerank multipliers. For HNSW,
//! `--sq8` traverses on SQ8 codes and `--pq-traversal PQPARAMS` trains a PQ
//! sidecar on the base set (timed as part of the build) and traverses on
//! its codes; both rerank exactly.
//!
//! `--variants LIST` (diagnostics, needs `--gt`): after building the graph
//! once, measures every traversal representation in `LIST` on it (`f32`,
//! `sq8`, `pq:PQPARAMS`) for every sweep value
//! and prints one JSON line per point (recall, QPS, index bytes) instead of
//! the harness protocol.

mod harness;
use harness::{read_flat, read_vecs, report_memory, report_search, to_row};

use prox_engine::accel::hnsw::{HnswSearchContext, IdHit, SearchGraph, SearchOptions};
use prox_engine::accel::pq::{Pq, PqSearchContext};
use prox_engine::accel::{Hnsw, HnswParams, PqParams};
use prox_kernels::Metric;
use rayon::prelude::*;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let base = get("--base").expect("--base");
    let query = get("--query").expect("--query");
    let metric =
        Metric::from_name(&get("--metric").unwrap_or_else(|| "l2".into())).expect("metric");
    let k: usize = get("--k").map_or(10, |s| s.parse().unwrap());
    let threads: usize = get("--threads").map_or(1, |s| s.parse().unwrap());
    let build_threads: usize = get("--build-threads").map_or(2, |s| s.parse().unwrap());
    let params = get("--params").unwrap_or_else(|| "16,32,64,128".into());
    let out = std::path::PathBuf::from(get("--out").unwrap_or_else(|| "/tmp".into()));
    let path = get("--path").unwrap_or_else(|| "hnsw".into());
    let reps: usize = get("--reps").map_or(3, |s| s.parse().unwrap());
    let gt = get("--gt").map(|p| read_vecs(&p, true));

    let (dims, mut flat) = read_flat(&base);
    // `--n N`: only the first N base vectors (profiling; recall then needs
    // a matching ground truth).
    if let Some(n) = get("--n").map(|s| s.parse::<usize>().unwrap()) {
        flat.truncate(n * dims);
    }
    let queries = read_vecs(&query, false);
    // Key = big-endian index, so key order is index order.
    let mut keys: Vec<Vec<u8>> = (0..(flat.len() / dims) as u32)
        .map(|i| i.to_be_bytes().to_vec())
        .collect();
    let build_pool = rayon::ThreadPoolBuilder::new()
        .num_threads(build_threads)
        .build()
        .unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let t = Instant::now();
    enum Index {
        H(prox_engine::accel::hnsw::SearchGraph),
        P(Pq),
    }
    let index = build_pool.install(|| match path.as_str() {
        "pq" => {
            let p = PqParams::parse(&get("--pq").unwrap_or_default()).unwrap();
            let records: Vec<(Vec<u8>, Vec<f32>)> = keys
                .iter()
                .cloned()
                .zip(flat.chunks_exact(dims).map(<[f32]>::to_vec))
                .collect();
            Index::P(Pq::train(metric, dims, &records, &p).unwrap())
        }
        _ => {
            let p =
                HnswParams::parse(&get("--hnsw").unwrap_or_else(|| "m=16,efc=200".into())).unwrap();
            // The file's one buffer becomes the vector arena and then moves
            // into the search layout: one copy of the vectors at peak.
            report_memory("loaded");
            let h = Hnsw::build_flat(
                metric,
                dims,
                std::mem::take(&mut keys),
                std::mem::take(&mut flat),
                &p,
            )
            .unwrap();
            report_memory("graph built");
            let g = h.into_search_graph();
            report_memory("search layout");
            if let Some(list) = get("--variants") {
                variants(
                    &g,
                    &list,
                    &queries,
                    gt.as_ref().expect("--variants needs --gt"),
                    &params,
                    k,
                    reps,
                );
                std::process::exit(0);
            }
            // `--sq8`: traverse on SQ8 codes, rerank exactly.
            // `--pq-traversal PARAMS`: traverse on PQ codes, rerank exactly.
            Index::H(if let Some(pq) = get("--pq-traversal") {
                with_pq(g, &pq)
            } else if args.iter().any(|a| a == "--sq8") {
                g.with_sq8().unwrap()
            } else {
                g
            })
        }
    });
    let build_s = t.elapsed().as_secs_f64();
    report_memory("index ready");
    let bytes = match &index {
        Index::H(g) => g.heap_bytes(),
        Index::P(p) => p.code_bytes(),
    };
    println!(r#"{{"event": "build", "seconds": {build_s}, "index_bytes": {bytes}}}"#);
    drop(flat);
    for p in params.split(',') {
        let v: usize = p.trim().parse().expect("param");
        let mut best = f64::INFINITY;
        let mut ids: Vec<Vec<i32>> = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let res: Vec<Vec<i32>> = pool.install(|| match &index {
                // The engine's batch API: contiguous chunks, one reusable
                // context per chunk.
                Index::H(g) => g
                    .search_batch(&queries, SearchOptions { k, ef: v })
                    .unwrap()
                    .into_iter()
                    .map(|hits| to_row(&hits, k))
                    .collect(),
                Index::P(pq) => queries
                    .par_iter()
                    .map_init(
                        || (PqSearchContext::new(), Vec::<IdHit>::new()),
                        |(pc, hits), q| {
                            pq.search(pc, q, k, Some(v), None, hits).unwrap();
                            to_row(hits, k)
                        },
                    )
                    .collect(),
            });
            best = best.min(t.elapsed().as_secs_f64());
            ids = res;
        }
        // Per-query latency: one more pass, one query at a time on this
        // thread; percentiles go to stderr (the harness reads stdout only).
        if let Index::H(g) = &index {
            let mut ctx = HnswSearchContext::new();
            let mut hits = Vec::new();
            let mut lat: Vec<f64> = queries
                .iter()
                .map(|q| {
                    let t = Instant::now();
                    g.search(&mut ctx, q, SearchOptions { k, ef: v }, &mut hits)
                        .unwrap();
                    t.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            lat.sort_by(f64::total_cmp);
            let pct = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
            eprintln!(
                r#"{{"event": "latency", "threads": {threads}, "param": "{p}", "p50_us": {:.1}, "p95_us": {:.1}, "p99_us": {:.1}, "max_us": {:.1}}}"#,
                pct(0.50),
                pct(0.95),
                pct(0.99),
                pct(1.0)
            );
        }
        report_search(&out, p, p, &ids, gt.as_ref(), k, best);
    }
}

/// `g` with PQ traversal codes from a PQ sidecar trained on its vectors.
fn with_pq(g: SearchGraph, params: &str) -> SearchGraph {
    let pp = PqParams::parse(params).unwrap();
    let records: Vec<(Vec<u8>, Vec<f32>)> = (0..g.node_count() as u32)
        .map(|i| (g.key(i).to_vec(), g.vector(i).to_vec()))
        .collect();
    let p = Pq::train(g.metric(), g.dims(), &records, &pp).unwrap();
    drop(records);
    let store = prox_engine::MemStore::new();
    let sidecar = p.persist(&store, prox_engine::Cid::of(b"bench")).unwrap();
    g.with_pq_sidecar(&p, &sidecar.manifest).unwrap()
}

/// `--variants`: every traversal representation of `list` on one graph
/// (see the module docs); recall@k against `gt`, best of `reps` batches.
fn variants(
    g: &SearchGraph,
    list: &str,
    queries: &[Vec<f32>],
    gt: &[Vec<f32>],
    params: &str,
    k: usize,
    reps: usize,
) {
    for name in list.split(',') {
        let t = Instant::now();
        let v = if name == "f32" {
            g.clone()
        } else if name == "sq8" {
            g.clone().with_sq8().unwrap()
        } else if let Some(p) = name.strip_prefix("pq:") {
            with_pq(g.clone(), p)
        } else {
            panic!("unknown variant {name}")
        };
        let prep_s = t.elapsed().as_secs_f64();
        for p in params.split(',') {
            let ef: usize = p.trim().parse().expect("param");
            let mut best = f64::INFINITY;
            let mut res = Vec::new();
            for _ in 0..reps {
                let t = Instant::now();
                res = v.search_batch(queries, SearchOptions { k, ef }).unwrap();
                best = best.min(t.elapsed().as_secs_f64());
            }
            let mut found = 0usize;
            for (hits, truth) in res.iter().zip(gt) {
                let truth = &truth[..k.min(truth.len())];
                found += hits
                    .iter()
                    .filter(|h| truth.contains(&(h.id as f32)))
                    .count();
            }
            let recall = found as f64 / (k * queries.len()) as f64;
            println!(
                r#"{{"event": "variant", "name": "{name}", "ef": {ef}, "recall": {recall:.4}, "qps": {:.0}, "index_bytes": {}, "prep_s": {prep_s:.1}}}"#,
                queries.len() as f64 / best,
                v.heap_bytes()
            );
        }
    }
}
