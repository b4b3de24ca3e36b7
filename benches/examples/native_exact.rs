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
//!   [--rotation off|M|localM[,...]] [--reps R]
//! ```
//!
//! `--rotation` picks the exact-L2 layout (`ExactLayout`: the plain
//! arena, the default, the rotated split arena screening `M`
//! components, or local frames of width `M` with `localM`); a
//! comma-separated list compares several layouts in one process. With
//! `--reps` every layout's queries and the brute-force scan alternate `R`
//! times and the medians are reported (`speedup` is the median of the
//! per-rep ratios), one JSON line per layout.

use prox_engine::proximity::search::{ExactLayout, Mode, Preset, SearchContext, SearchRequest};
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
    let rotations: Vec<(String, ExactLayout)> = arg(&args, "--rotation")
        .unwrap_or_else(|| "off".into())
        .split(',')
        .map(|m| {
            let r: ExactLayout = m.parse().expect("--rotation off|M|localM");
            (m.to_string(), r)
        })
        .collect();
    let mut layouts = Vec::new();
    for (name, rotation) in &rotations {
        let searcher = map.searcher().expect("searcher").exact_layout(*rotation);
        let t = Instant::now();
        let nodes = searcher.warm().expect("warm");
        let warm_s = t.elapsed().as_secs_f64();
        eprintln!("{name}: warmed {nodes} nodes in {warm_s:.1}s");
        layouts.push(Layout {
            name: name.clone(),
            searcher,
            warm_s,
            qps: Vec::new(),
            ratios: Vec::new(),
            hits: 0,
            evals: 0,
            visited: 0,
            rescored: 0,
        });
    }
    let req = SearchRequest::new(k).mode(mode);
    let mut ctx = SearchContext::new();
    let (d, base) = floats(&need("--base"));
    let n = base.len() / d;
    let nb: usize = arg(&args, "--brute-queries").map_or(nq, |s| s.parse().unwrap());
    let nb = nb.min(nq).max(1);
    let reps: usize = arg(&args, "--reps").map_or(1, |s| s.parse().unwrap());
    let mut scores = vec![0f32; n];
    let mut brute = Vec::new();
    let mut bhits = 0usize;
    // Each rep runs every layout's queries, then the brute-force scan, so
    // all of them see the same machine load; the reported figures are
    // medians over the reps, `speedup` the median of the per-rep ratios.
    for rep in 0..reps.max(1) {
        let mut native = Vec::new();
        for l in &mut layouts {
            let t = Instant::now();
            for i in 0..nq {
                let r = l
                    .searcher
                    .search_with(&mut ctx, &queries[i * dq..(i + 1) * dq], &req)
                    .expect("search");
                if rep == 0 {
                    l.evals += r.stats.distance_evals;
                    l.visited += r.stats.nodes_visited;
                    l.rescored += r.stats.rescored;
                    let ids: Vec<u32> = r
                        .hits
                        .iter()
                        .map(|h| u64::from_be_bytes(h.key[..8].try_into().unwrap()) as u32)
                        .collect();
                    l.hits += recall(&ids, &gt[i * dg..], k);
                }
            }
            native.push(nq as f64 / t.elapsed().as_secs_f64());
        }
        let t = Instant::now();
        for i in 0..nb {
            let q = &queries[i * dq..(i + 1) * dq];
            prox_kernels::f32::l2sq_many(q, &base, &mut scores);
            let mut top = prox_kernels::TopK::new(k);
            for (j, &s) in scores.iter().enumerate() {
                top.push(s, j as u32);
            }
            let ids: Vec<u32> = top.into_sorted_vec().into_iter().map(|(_, j)| j).collect();
            if rep == 0 {
                bhits += recall(&ids, &gt[i * dg..], k);
            }
        }
        let brute_qps = nb as f64 / t.elapsed().as_secs_f64();
        brute.push(brute_qps);
        let mut line = format!("rep {rep}: brute {brute_qps:.1} QPS");
        for (l, q) in layouts.iter_mut().zip(native) {
            line += &format!(", {} {q:.1} QPS ({:.2}x)", l.name, q / brute_qps);
            l.qps.push(q);
            l.ratios.push(q / brute_qps);
        }
        eprintln!("{line}");
    }
    let brute_qps = median(&mut brute);
    for l in &mut layouts {
        println!(
            "{}",
            serde_json_line(&[
                ("records", n.to_string()),
                ("mode", format!("{mode:?}").to_lowercase()),
                ("layout", l.name.clone()),
                ("queries", nq.to_string()),
                (
                    "rotated_split",
                    l.searcher.rotated_split().map_or(0, |m| m).to_string()
                ),
                (
                    "local_frames",
                    l.searcher.local_frames().map_or(0, |f| f.0).to_string()
                ),
                ("warm_s", format!("{:.1}", l.warm_s)),
                ("mean_nodes", format!("{:.0}", l.visited as f64 / nq as f64)),
                ("native_qps", format!("{:.2}", median(&mut l.qps))),
                (
                    "native_recall",
                    format!("{:.4}", l.hits as f64 / (nq * k) as f64)
                ),
                (
                    "mean_distance_evals",
                    format!("{:.0}", l.evals as f64 / nq as f64)
                ),
                (
                    "mean_rescored",
                    format!("{:.0}", l.rescored as f64 / nq as f64)
                ),
                ("brute_queries", nb.to_string()),
                ("brute_qps", format!("{brute_qps:.2}")),
                (
                    "brute_recall",
                    format!("{:.4}", bhits as f64 / (nb * k) as f64)
                ),
                ("reps", reps.to_string()),
                ("speedup", format!("{:.2}", median(&mut l.ratios))),
                ("isa", format!("{:?}", prox_kernels::isa())),
            ])
        );
    }
}

/// One exact-L2 layout under test.
struct Layout<'a> {
    name: String,
    searcher: prox_engine::proximity::search::Searcher<'a>,
    warm_s: f64,
    qps: Vec<f64>,
    ratios: Vec<f64>,
    hits: usize,
    evals: u64,
    visited: u64,
    rescored: u64,
}

/// The median (upper middle for an even count).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
