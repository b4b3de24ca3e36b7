//! prox accelerators behind `peer_bench.py --engine-cmd` (protocol in its
//! docstring), so prox and the peers are measured in the same run the same
//! way: build once, then for every sweep value search all queries in one
//! batch with `--threads` threads (best of `--reps`), write the ids as
//! `.ivecs`, and print JSON lines. With `--gt FILE` it also prints recall@k
//! itself (handy without the harness).
//!
//! ```text
//! cargo run --release -p prox-benches --example accel_engine -- \
//!   --base base.fvecs --query query.fvecs --metric ip --k 10 --threads 1 \
//!   --build-threads 2 --params 16,32,64,128 --out /tmp/x \
//!   [--path hnsw|pq] [--hnsw m=16,efc=200] [--pq m=48] [--gt gt.ivecs]
//! ```
//! For `--path pq` the sweep values are rerank multipliers.

use prox_engine::accel::hnsw::{Hit, SearchContext, SearchOptions};
use prox_engine::accel::pq::{Pq, PqSearchContext};
use prox_engine::accel::{Hnsw, HnswParams, PqParams};
use prox_kernels::Metric;
use rayon::prelude::*;
use std::io::Write;
use std::time::Instant;

fn read_vecs(path: &str, int: bool) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= bytes.len() {
        let d = u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
        i += 4;
        let row: Vec<f32> = bytes[i..i + 4 * d]
            .chunks_exact(4)
            .map(|c| {
                let b = c.try_into().unwrap();
                if int {
                    i32::from_le_bytes(b) as f32
                } else {
                    f32::from_le_bytes(b)
                }
            })
            .collect();
        i += 4 * d;
        out.push(row);
    }
    out
}

fn write_ivecs(path: &std::path::Path, rows: &[Vec<i32>]) {
    let mut buf = Vec::new();
    for r in rows {
        buf.extend_from_slice(&(r.len() as u32).to_le_bytes());
        for &x in r {
            buf.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, buf).expect("write ids");
}

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

    let mut base = read_vecs(&base, false);
    // `--n N`: only the first N base vectors (profiling; recall then needs
    // a matching ground truth).
    if let Some(n) = get("--n").map(|s| s.parse::<usize>().unwrap()) {
        base.truncate(n);
    }
    let queries = read_vecs(&query, false);
    let dims = base[0].len();
    // Key = big-endian index, so key order is index order.
    let records: Vec<(Vec<u8>, Vec<f32>)> = base
        .into_iter()
        .enumerate()
        .map(|(i, v)| ((i as u32).to_be_bytes().to_vec(), v))
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
            Index::P(Pq::train(metric, dims, &records, &p).unwrap())
        }
        _ => {
            let p =
                HnswParams::parse(&get("--hnsw").unwrap_or_else(|| "m=16,efc=200".into())).unwrap();
            let g = Hnsw::build(metric, dims, &records, &p)
                .unwrap()
                .search_graph();
            // `--sq8`: traverse on SQ8 codes, rerank exactly.
            Index::H(if args.iter().any(|a| a == "--sq8") {
                g.with_sq8().unwrap()
            } else {
                g
            })
        }
    });
    let build_s = t.elapsed().as_secs_f64();
    let bytes = match &index {
        Index::H(g) => g.heap_bytes(),
        Index::P(p) => p.code_bytes(),
    };
    println!(r#"{{"event": "build", "seconds": {build_s}, "index_bytes": {bytes}}}"#);
    drop(records);
    for p in params.split(',') {
        let v: usize = p.trim().parse().expect("param");
        let mut best = f64::INFINITY;
        let mut ids: Vec<Vec<i32>> = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let res: Vec<Vec<i32>> = pool.install(|| {
                queries
                    .par_iter()
                    .map_init(
                        || {
                            (
                                SearchContext::new(),
                                PqSearchContext::new(),
                                Vec::<Hit>::new(),
                            )
                        },
                        |(hc, pc, hits), q| {
                            match &index {
                                Index::H(g) => {
                                    g.search(hc, q, SearchOptions { k, ef: v }, hits).unwrap();
                                }
                                Index::P(pq) => pq.search(pc, q, k, Some(v), None, hits).unwrap(),
                            }
                            let mut row: Vec<i32> = hits.iter().map(|h| h.id as i32).collect();
                            row.resize(k, -1);
                            row
                        },
                    )
                    .collect()
            });
            best = best.min(t.elapsed().as_secs_f64());
            ids = res;
        }
        let f = out.join(format!("ids_{p}.ivecs"));
        write_ivecs(&f, &ids);
        let recall = gt.as_ref().map(|gt| {
            let mut hit = 0usize;
            for (row, g) in ids.iter().zip(gt) {
                let truth: Vec<i32> = g[..k].iter().map(|&x| x as i32).collect();
                hit += row.iter().filter(|x| truth.contains(x)).count();
            }
            hit as f64 / (k * ids.len()) as f64
        });
        let extra = recall.map_or(String::new(), |r| {
            format!(
                r#", "recall": {r:.4}, "qps": {:.0}"#,
                queries.len() as f64 / best
            )
        });
        println!(
            r#"{{"event": "search", "param": "{p}", "seconds": {best}, "ids": "{}"{extra}}}"#,
            f.display()
        );
        std::io::stdout().flush().ok();
    }
}
