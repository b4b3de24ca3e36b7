//! The PQ 4-bit fast-scan path behind `peer_bench.py --engine-cmd` (protocol
//! in its docstring): trains the canonical PQ sidecar (4-bit codes, default
//! `m = d/2`, like FAISS `PQ{d/2}x4fs`), builds the load-time IVF fast-scan
//! index, then for every sweep value `nprobe/rerank` searches all queries in
//! one batch with `--threads` threads (best of `--reps`), writes the ids as
//! `.ivecs` and prints JSON lines. `--gt FILE` also prints recall@k.
//!
//! ```text
//! cargo run --release -p prox-benches --example pq_engine -- \
//!   --base base.fvecs --query query.fvecs --metric l2 --k 10 --threads 1 \
//!   --build-threads 2 --params 8/4,16/4,32/8 --out /tmp/x \
//!   [--pq m=64,k=16,iterations=12] [--nlist 1024] [--ivf-sample 65536] [--gt gt.ivecs]
//! ```

mod harness;
use harness::{read_vecs, report_search};

use prox_engine::accel::hnsw::IdHit;
use prox_engine::accel::pq::{IvfParams, Pq, PqOptions, PqSearchContext};
use prox_engine::accel::PqParams;
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
    let params = get("--params").unwrap_or_else(|| "8/4,16/4,32/8,64/8".into());
    let out = std::path::PathBuf::from(get("--out").unwrap_or_else(|| "/tmp".into()));
    let reps: usize = get("--reps").map_or(3, |s| s.parse().unwrap());
    let nlist: usize = get("--nlist").map_or(0, |s| s.parse().unwrap());
    let gt = get("--gt").map(|p| read_vecs(&p, true));

    let base = read_vecs(&base, false);
    let queries = read_vecs(&query, false);
    let dims = base[0].len();
    let pq_params = PqParams::parse(
        &get("--pq").unwrap_or_else(|| format!("m={},k=16,iterations=12", dims / 2)),
    )
    .unwrap();
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
    let pq = build_pool.install(|| Pq::train(metric, dims, &records, &pq_params).unwrap());
    let train_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let ivf = IvfParams {
        nlist,
        sample: get("--ivf-sample").map_or(0, |s| s.parse().unwrap()),
        ..IvfParams::default()
    };
    let (nlist, fs_bytes) = build_pool.install(|| {
        let fs = pq
            .prepare_fast_scan(&ivf)
            .expect("4-bit sidecar (k <= 16, m <= 256)");
        (fs.nlist(), fs.heap_bytes())
    });
    let ivf_s = t.elapsed().as_secs_f64();
    // The rerank reads the full vectors, so they count (as FAISS RFlat's do).
    let vec_bytes = records.len() * dims * 4;
    println!(
        r#"{{"event": "build", "seconds": {}, "train_seconds": {train_s}, "ivf_seconds": {ivf_s}, "nlist": {nlist}, "index_bytes": {}, "fastscan_bytes": {fs_bytes}}}"#,
        train_s + ivf_s,
        fs_bytes + vec_bytes
    );
    drop(records);
    for p in params.split(',') {
        let (nprobe, rerank) = p.trim().split_once('/').expect("param nprobe/rerank");
        let opts = PqOptions {
            k,
            nprobe: Some(nprobe.parse().expect("nprobe")),
            rerank: Some(rerank.parse().expect("rerank")),
            min_seen: 0,
        };
        let mut best = f64::INFINITY;
        let mut ids: Vec<Vec<i32>> = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let res: Vec<Vec<i32>> = pool.install(|| {
                queries
                    .par_iter()
                    .map_init(
                        || (PqSearchContext::new(), Vec::<IdHit>::new()),
                        |(ctx, hits), q| {
                            pq.search_with(ctx, q, &opts, None, hits).unwrap();
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
        report_search(&out, &p.replace('/', "_"), p, &ids, gt.as_ref(), k, best);
    }
}
