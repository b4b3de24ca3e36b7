//! Exact native search against a brute-force SIMD scan, single thread, in
//! one process (so both see the same machine load): the issue's "exact L2
//! faster than brute force" measurement.
//!
//! The map must have been built with `prox build` from `--base` (keys are
//! the 8-byte big-endian row numbers). Exact mode returns the brute-force
//! top k by (canonical score, key); the scan ranks every row with
//! `prox_kernels::f32::l2sq_many` (the dispatched AVX2/NEON kernel) and
//! keeps the k best with `prox_kernels::TopK`. Both report recall@k against
//! the dataset's ground truth.
//!
//! ```text
//! cargo run --release -p prox-benches --example native_exact -- \
//!   --store DIR --name NAME --base base.fvecs --query query.fvecs --gt gt.ivecs \
//!   [--k 10] [--queries 200] [--brute-queries 50] [--mode exact|fast|balanced|high] \
//!   [--rotation off|M|localM]
//! ```
//!
//! `--rotation` picks the exact-L2 layout (`ExactRotation`: the plain
//! arena, the default, the rotated split arena screening `M`
//! components, or local frames of width `M` with `localM`).

use prox_engine::proximity::search::{ExactRotation, Mode, Preset, SearchContext, SearchRequest};
use prox_engine::proximity::{resolve, ProximityMap};
use prox_engine::store::MmapStore;
use std::time::Instant;

fn read_vecs(path: &str) -> (usize, Vec<u32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let d = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let row = 4 + 4 * d;
    assert_eq!(bytes.len() % row, 0, "{path}: truncated");
    let mut out = Vec::with_capacity(bytes.len() / row * d);
    for r in bytes.chunks_exact(row) {
        out.extend(
            r[4..]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
    }
    (d, out)
}

fn floats(path: &str) -> (usize, Vec<f32>) {
    let (d, raw) = read_vecs(path);
    (d, raw.into_iter().map(f32::from_bits).collect())
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .map(|i| args[i + 1].clone())
}

fn recall(got: &[u32], gt: &[u32], k: usize) -> usize {
    got.iter().filter(|g| gt[..k].contains(g)).count()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let need = |n: &str| arg(&args, n).unwrap_or_else(|| panic!("missing {n}"));
    let k: usize = arg(&args, "--k").map_or(10, |s| s.parse().unwrap());
    let store = MmapStore::open_read_only(need("--store")).expect("open store");
    let (descriptor, _) = resolve(&store, &need("--name"))
        .expect("resolve")
        .expect("no such map");
    let map = ProximityMap::load(&store, descriptor).expect("load");
    let (dq, queries) = floats(&need("--query"));
    let (dg, gt) = read_vecs(&need("--gt"));
    let nq = queries.len() / dq;
    let limit: usize = arg(&args, "--queries").map_or(nq, |s| s.parse().unwrap());
    let nq = nq.min(limit);
    let mode = match arg(&args, "--mode").as_deref().unwrap_or("exact") {
        "exact" => Mode::Exact,
        "fast" => Mode::Adaptive(Preset::Fast),
        "balanced" => Mode::Adaptive(Preset::Balanced),
        "high" => Mode::Adaptive(Preset::HighRecall),
        m => panic!("unknown mode {m}"),
    };
    let rotation = match arg(&args, "--rotation").as_deref().unwrap_or("off") {
        "off" => ExactRotation::Off,
        m if m.starts_with("local") => {
            ExactRotation::Local(m[5..].parse().expect("--rotation localM"))
        }
        m => ExactRotation::Split(m.parse().expect("--rotation off|M|localM")),
    };
    let searcher = map.searcher().expect("searcher").exact_rotation(rotation);
    let t = Instant::now();
    let nodes = searcher.warm().expect("warm");
    let warm_s = t.elapsed().as_secs_f64();
    eprintln!("warmed {nodes} nodes in {warm_s:.1}s");
    let req = SearchRequest::new(k).mode(mode);
    let mut ctx = SearchContext::new();
    let (mut hits, mut evals, mut rescored) = (0usize, 0u64, 0u64);
    let t = Instant::now();
    for i in 0..nq {
        let r = searcher
            .search_with(&mut ctx, &queries[i * dq..(i + 1) * dq], &req)
            .expect("search");
        evals += r.stats.distance_evals;
        rescored += r.stats.rescored;
        let ids: Vec<u32> = r
            .hits
            .iter()
            .map(|h| u64::from_be_bytes(h.key[..8].try_into().unwrap()) as u32)
            .collect();
        hits += recall(&ids, &gt[i * dg..], k);
    }
    let native_s = t.elapsed().as_secs_f64();
    let native_qps = nq as f64 / native_s;
    let native_recall = hits as f64 / (nq * k) as f64;

    let (d, base) = floats(&need("--base"));
    let n = base.len() / d;
    let nb: usize = arg(&args, "--brute-queries").map_or(nq, |s| s.parse().unwrap());
    let nb = nb.min(nq);
    let mut scores = vec![0f32; n];
    let mut bhits = 0usize;
    let t = Instant::now();
    for i in 0..nb {
        let q = &queries[i * dq..(i + 1) * dq];
        prox_kernels::f32::l2sq_many(q, &base, &mut scores);
        let mut top = prox_kernels::TopK::new(k);
        for (j, &s) in scores.iter().enumerate() {
            top.push(s, j as u32);
        }
        let ids: Vec<u32> = top.into_sorted_vec().into_iter().map(|(_, j)| j).collect();
        bhits += recall(&ids, &gt[i * dg..], k);
    }
    let brute_s = t.elapsed().as_secs_f64();
    let brute_qps = nb as f64 / brute_s;
    println!(
        "{}",
        serde_json_line(&[
            ("records", n.to_string()),
            ("mode", format!("{mode:?}").to_lowercase()),
            ("queries", nq.to_string()),
            (
                "rotated_split",
                searcher.rotated_split().map_or(0, |m| m).to_string()
            ),
            (
                "local_frames",
                searcher.local_frames().map_or(0, |f| f.0).to_string()
            ),
            ("warm_s", format!("{warm_s:.1}")),
            ("native_qps", format!("{native_qps:.2}")),
            ("native_recall", format!("{native_recall:.4}")),
            (
                "mean_distance_evals",
                format!("{:.0}", evals as f64 / nq as f64)
            ),
            (
                "mean_rescored",
                format!("{:.0}", rescored as f64 / nq as f64)
            ),
            ("brute_queries", nb.to_string()),
            ("brute_qps", format!("{brute_qps:.2}")),
            (
                "brute_recall",
                format!("{:.4}", bhits as f64 / (nb * k) as f64)
            ),
            ("speedup", format!("{:.2}", native_qps / brute_qps)),
            ("isa", format!("{:?}", prox_kernels::isa())),
        ])
    );
}

/// One flat JSON object; values are numbers unless they fail to parse.
fn serde_json_line(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| {
            if v.parse::<f64>().is_ok() {
                format!("\"{k}\":{v}")
            } else {
                format!("\"{k}\":\"{v}\"")
            }
        })
        .collect();
    format!("{{{}}}", body.join(","))
}
