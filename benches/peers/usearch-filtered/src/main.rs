//! Benchmark USearch's filtered (predicate) HNSW search: build one index over
//! a TEXMEX base set, then for every filter mask and ef in a plan time one
//! single-threaded pass of `filtered_search` and print a JSON line with
//! recall@k and QPS. Command line: see `USAGE`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

const USAGE: &str = "usage: usearch-filtered --base BASE.fvecs --queries Q.fvecs --plan PLAN.json \
[--k 10] [--metric l2|ip] [--build-threads N] [--connectivity 16] [--expansion-add 128] [--dataset NAME] [--cap 20]";

/// Queries timed first to predict a setting's whole pass.
const PROBE: usize = 20;

/// A filter's ef sweep stops once a setting reaches this recall.
const ENOUGH: f64 = 0.99;

type Res<T> = Result<T, String>;

struct Args {
    base: PathBuf,
    queries: PathBuf,
    plan: PathBuf,
    k: usize,
    metric: MetricKind,
    build_threads: usize,
    connectivity: usize,
    expansion_add: usize,
    dataset: String,
    /// Seconds a setting may take before it runs on its first queries only.
    cap: f64,
}

#[derive(Deserialize)]
struct Plan {
    ef: Vec<usize>,
    filters: Vec<Filter>,
}

#[derive(Deserialize)]
struct Filter {
    label: String,
    mask: PathBuf,
    gt: PathBuf,
}

/// A plan filter with its files loaded and checked.
struct Subset {
    label: String,
    mask: Vec<u8>,
    gt: Vec<Vec<u64>>,
    eligible: usize,
}

/// One output line; field order is the order written.
#[derive(Serialize)]
struct Record<'a> {
    engine: &'a str,
    path: &'a str,
    dataset: &'a str,
    mode: String,
    ef: usize,
    recall: Option<f64>,
    qps: f64,
    threads: usize,
    build_seconds: f64,
    index_bytes: Option<u64>,
    k: usize,
    filter: &'a str,
    eligible: usize,
    underfilled: usize,
    queries: usize,
    partial: bool,
}

/// Row-major f32 matrix read from an .fvecs file.
struct Matrix {
    dim: usize,
    data: Vec<f32>,
}

impl Matrix {
    fn rows(&self) -> usize {
        self.data.len() / self.dim
    }
    fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("usearch-filtered: {e}");
        std::process::exit(2);
    }
}

fn run() -> Res<()> {
    let args = parse_args()?;
    let base = read_fvecs(&args.base)?;
    let queries = read_fvecs(&args.queries)?;
    if queries.dim != base.dim {
        let (qd, bd) = (queries.dim, base.dim);
        return Err(format!("query dimension {qd} != base dimension {bd}"));
    }
    let text = std::fs::read_to_string(&args.plan).map_err(|e| io_err(&args.plan, e))?;
    let plan: Plan =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", args.plan.display()))?;
    let (n, d, nq) = (base.rows(), base.dim, queries.rows());
    eprintln!("base {n} x {d}, {nq} queries, ef {:?}", plan.ef);
    // Check every filter's files before spending time on the build.
    let subsets: Vec<Subset> = plan
        .filters
        .iter()
        .map(|f| load_subset(f, n, nq))
        .collect::<Res<_>>()?;

    let (index, build_seconds) = build_index(&args, &base)?;
    eprintln!("built in {build_seconds:.2} s");
    for subset in &subsets {
        bench_subset(&args, &index, build_seconds, &queries, subset, &plan.ef)?;
    }
    Ok(())
}

fn load_subset(filter: &Filter, n: usize, nq: usize) -> Res<Subset> {
    let mask = read_mask(&filter.mask, n)?;
    let gt = read_gt(&filter.gt, nq, n)?;
    let eligible = (0..n as u64).filter(|&i| bit(&mask, i)).count();
    let label = filter.label.clone();
    Ok(Subset {
        label,
        mask,
        gt,
        eligible,
    })
}

/// Sweep the plan's ef values for one filter, printing a JSON line per ef.
fn bench_subset(
    args: &Args,
    index: &Index,
    build_seconds: f64,
    queries: &Matrix,
    sub: &Subset,
    efs: &[usize],
) -> Res<()> {
    let eligible = sub.eligible;
    eprintln!("filter {}: {eligible} eligible", sub.label);
    for &ef in efs {
        if ef < args.k {
            eprintln!("  skip ef={ef} < k={}", args.k);
            continue;
        }
        index.change_expansion_search(ef);
        let (results, seconds) = time_queries(index, queries, args.k, &sub.mask, args.cap)?;
        let n = results.len();
        let want = args.k.min(eligible);
        let rec = Record {
            engine: "usearch",
            path: "hnsw-filter",
            dataset: &args.dataset,
            mode: format!("ef={ef}"),
            ef,
            recall: mean_recall(&results, &sub.gt[..n], args.k),
            qps: n as f64 / seconds,
            threads: 1,
            build_seconds,
            index_bytes: None,
            k: args.k,
            filter: &sub.label,
            eligible,
            underfilled: results.iter().filter(|r| r.len() < want).count(),
            queries: n,
            partial: n < queries.rows(),
        };
        let recall = rec.recall.map_or("n/a".into(), |r| format!("{r:.4}"));
        let (qps, under) = (rec.qps, rec.underfilled);
        eprintln!("  ef={ef} recall={recall} qps={qps:.0} underfilled={under}");
        let line = serde_json::to_string(&rec).map_err(|e| e.to_string())?;
        println!("{line}");
        if rec.recall.is_some_and(|r| r >= ENOUGH) {
            break;
        }
    }
    Ok(())
}

fn parse_args() -> Res<Args> {
    let mut flags = HashMap::new();
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        // The flags are exactly those named in USAGE; each takes a value.
        if !flag.starts_with("--") || !USAGE.split([' ', '[']).any(|w| w == flag) {
            return Err(format!("unknown argument {flag:?}\n{USAGE}"));
        }
        let val = argv.next().ok_or(format!("{flag} needs a value"))?;
        flags.insert(flag, val);
    }
    let need = |f: &str| match flags.get(f) {
        Some(v) => Ok(PathBuf::from(v)),
        None => Err(format!("{f} is required\n{USAGE}")),
    };
    let num = |f: &str, default: usize| flags.get(f).map_or(Ok(default), |v| positive(f, v));
    let metric = match flags.get("--metric").map_or("l2", String::as_str) {
        "l2" => MetricKind::L2sq,
        "ip" => MetricKind::IP,
        other => return Err(format!("--metric must be l2 or ip, got {other:?}")),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let base = need("--base")?;
    let dataset = flags.get("--dataset").cloned();
    Ok(Args {
        dataset: dataset.unwrap_or_else(|| dir_name(&base)),
        base,
        queries: need("--queries")?,
        plan: need("--plan")?,
        k: num("--k", 10)?,
        metric,
        build_threads: num("--build-threads", cores)?,
        connectivity: num("--connectivity", 16)?,
        expansion_add: num("--expansion-add", 128)?,
        cap: num("--cap", 20)? as f64,
    })
}

/// Default dataset name: the directory holding the base file.
fn dir_name(base: &Path) -> String {
    let dir = base.canonicalize().unwrap_or_default();
    let name = dir.parent().and_then(Path::file_name).unwrap_or_default();
    name.to_string_lossy().into_owned()
}

fn positive(flag: &str, val: &str) -> Res<usize> {
    match val.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} needs a positive integer, got {val:?}")),
    }
}

fn io_err(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

/// Little-endian i32 at byte offset `at` (caller checks bounds).
fn le_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// Read a TEXMEX .fvecs file; every row must share the first row's dimension.
fn read_fvecs(path: &Path) -> Res<Matrix> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let p = path.display();
    if bytes.len() < 4 {
        return Err(format!("{p}: empty or truncated file"));
    }
    let dim = le_i32(&bytes, 0);
    if dim <= 0 {
        return Err(format!("{p}: row 0 has dimension {dim}"));
    }
    let (dim, row_bytes) = (dim as usize, 4 + 4 * dim as usize);
    if bytes.len() % row_bytes != 0 {
        let size = bytes.len();
        return Err(format!(
            "{p}: size {size} is not a multiple of the row size {row_bytes}"
        ));
    }
    let mut data = Vec::with_capacity(bytes.len() / row_bytes * dim);
    for (r, row) in bytes.chunks_exact(row_bytes).enumerate() {
        let d = le_i32(row, 0);
        if d as usize != dim {
            return Err(format!("{p}: row {r} has dimension {d}, expected {dim}"));
        }
        for c in row[4..].chunks_exact(4) {
            let v = f32::from_le_bytes(c.try_into().unwrap());
            if !v.is_finite() {
                return Err(format!("{p}: row {r} has a non-finite component"));
            }
            data.push(v);
        }
    }
    Ok(Matrix { dim, data })
}

/// Read a TEXMEX .ivecs ground truth: one row per query, ids in 0..n.
fn read_gt(path: &Path, nq: usize, n: usize) -> Res<Vec<Vec<u64>>> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let p = path.display();
    let (mut rows, mut at) = (Vec::with_capacity(nq), 0);
    while at < bytes.len() {
        let r = rows.len();
        let count = bytes.get(at..at + 4).map_or(-1, |_| le_i32(&bytes, at));
        if count < 0 || at + 4 + 4 * count as usize > bytes.len() {
            return Err(format!("{p}: row {r} is truncated or has a bad count"));
        }
        let ids = (0..count as usize).map(|j| le_i32(&bytes, at + 4 + 4 * j));
        let row: Vec<u64> = ids.map(|id| id as u64).collect();
        if let Some(bad) = row.iter().find(|&&id| id >= n as u64) {
            return Err(format!("{p}: row {r} has id {} not in 0..{n}", *bad as i64));
        }
        rows.push(row);
        at += 4 + 4 * count as usize;
    }
    if rows.len() != nq {
        let got = rows.len();
        return Err(format!("{p}: {got} rows, expected {nq} (one per query)"));
    }
    Ok(rows)
}

/// Read a packed eligibility mask (little-endian bit order), ceil(n/8) bytes.
fn read_mask(path: &Path, n: usize) -> Res<Vec<u8>> {
    let mask = std::fs::read(path).map_err(|e| io_err(path, e))?;
    if mask.len() != n.div_ceil(8) {
        let (got, want) = (mask.len(), n.div_ceil(8));
        let p = path.display();
        return Err(format!("{p}: {got} bytes, expected {want} for {n} rows"));
    }
    Ok(mask)
}

fn bit(mask: &[u8], key: u64) -> bool {
    let i = key as usize;
    mask[i >> 3] >> (i & 7) & 1 == 1
}

/// Build the HNSW index with keys = row numbers, adding rows from
/// `build_threads` threads (usearch's `add` is thread-safe once capacity and
/// per-thread contexts are reserved). Returns the index and build seconds.
fn build_index(args: &Args, base: &Matrix) -> Res<(Index, f64)> {
    let options = IndexOptions {
        dimensions: base.dim,
        metric: args.metric,
        quantization: ScalarKind::F32,
        connectivity: args.connectivity,
        expansion_add: args.expansion_add,
        expansion_search: 64,
        multi: false,
    };
    let index = Index::new(&options).map_err(|e| format!("creating index: {e}"))?;
    let (n, threads) = (base.rows(), args.build_threads);
    let start = Instant::now();
    index
        .reserve_capacity_and_threads(n, threads)
        .map_err(|e| format!("reserving {n} rows: {e}"))?;
    // Thread t adds rows t, t + threads, ... and stops at its first error.
    let add_rows = |t: usize| {
        let add = |i: usize| {
            index
                .add(i as u64, base.row(i))
                .map_err(|e| format!("row {i}: {e}"))
        };
        (t..n).step_by(threads).try_for_each(add)
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|t| s.spawn(move || add_rows(t))).collect();
        let panicked = || Err("build thread panicked".to_string());
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| panicked()))
    })?;
    Ok((index, start.elapsed().as_secs_f64()))
}

/// An untimed warm-up over the first 10 queries, a timed pass over the
/// first [`PROBE`], then, unless that predicts more than `cap` seconds for
/// the whole set, a timed single-threaded pass over all of them. Returns
/// the ids of the pass kept and its seconds.
fn time_queries(
    index: &Index,
    q: &Matrix,
    k: usize,
    mask: &[u8],
    cap: f64,
) -> Res<(Vec<Vec<u64>>, f64)> {
    let search = |i: usize| {
        index
            .filtered_search(q.row(i), k, |key| bit(mask, key))
            .map(|m| m.keys)
            .map_err(|e| format!("query {i}: {e}"))
    };
    for i in 0..q.rows().min(10) {
        search(i)?;
    }
    let probe = q.rows().min(PROBE);
    let start = Instant::now();
    let head = (0..probe).map(search).collect::<Res<Vec<_>>>()?;
    let secs = start.elapsed().as_secs_f64();
    if secs / probe as f64 * q.rows() as f64 > cap {
        return Ok((head, secs));
    }
    let start = Instant::now();
    let results = (0..q.rows()).map(search).collect::<Res<Vec<_>>>()?;
    Ok((results, start.elapsed().as_secs_f64()))
}

/// Mean over queries of |found ∩ gt[..k]| / min(k, |gt|); queries with an
/// empty gt row are left out (None if every row is empty).
fn mean_recall(results: &[Vec<u64>], gt: &[Vec<u64>], k: usize) -> Option<f64> {
    let (mut sum, mut counted) = (0.0, 0usize);
    for (found, truth) in results.iter().zip(gt) {
        let truth = &truth[..truth.len().min(k)];
        if truth.is_empty() {
            continue;
        }
        let hits = found.iter().filter(|id| truth.contains(id)).count();
        sum += hits as f64 / truth.len() as f64;
        counted += 1;
    }
    (counted > 0).then(|| sum / counted as f64)
}
