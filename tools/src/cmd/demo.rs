//! `prox demo`: the whole product in one command, on a fresh machine with
//! nothing downloaded.
//!
//! Generates a seeded Gaussian-mixture dataset (default 100k x 128, 1000
//! queries, exact top-10 ground truth), writes it under
//! `STORE/datasets/demo/` (TEXMEX files, usable by benches/peers/peers.py),
//! builds the proximity map with an HNSW sidecar into the store, publishes
//! it as root `demo`, then measures recall@10 and QPS of each search path.

use super::datagen::GmmArgs;
use super::store_arg::StoreArg;
use crate::gmm;
use crate::results::BenchRecord;
use crate::{io, out::Stdout, progress};
use anyhow::{bail, Context, Result};
use clap::Args;
use prox_engine::accel::{HnswParams, PqParams};
use prox_engine::index::{self, PathChoice, QueryMode, Request};
use prox_engine::proximity::{InputRecord, ProximityConfig};
use prox_engine::BlockStore;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Examples for `prox demo --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox demo                                  100k x 128, store ./prox-data
  prox demo --n 20000 --queries 200          a quicker run
  prox demo --pq --plot demo.svg --json      add the PQ path, draw recall vs QPS

Afterwards the map stays in the store as root \"demo\" and the dataset in
STORE/datasets/demo/, so the tour continues with e.g.
  prox query --name demo --queries prox-data/datasets/demo/query.fvecs --k 10
  prox bench --name demo --queries prox-data/datasets/demo/query.fvecs --gt prox-data/datasets/demo/gt.ivecs";

/// Arguments of `prox demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Size, seed and metric of the generated dataset.
    #[command(flatten)]
    pub data: GmmArgs,
    /// Skip the HNSW sidecar.
    #[arg(long)]
    pub no_hnsw: bool,
    /// Also build and measure the PQ sidecar.
    #[arg(long)]
    pub pq: bool,
    /// Draw recall vs QPS to this .svg or .png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print the measurements as JSON lines (bench schema) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The search settings the demo reports, in order: each path's, then the
/// recall targets the map's recall profile chooses for.
fn settings(hnsw: bool, pq: bool, profiled: bool) -> Vec<(Request, String)> {
    let base = Request::new(10).path(PathChoice::Native);
    let mut v: Vec<(Request, String)> = vec![
        (base.clone().mode(QueryMode::Exact), "exact".into()),
        (base.clone().mode(QueryMode::Fast), "fast".into()),
        (base.clone().mode(QueryMode::Balanced), "balanced".into()),
        (base.clone().mode(QueryMode::High), "high".into()),
    ];
    if hnsw {
        for (ef, label) in [(32, "ef=32"), (64, "ef=64"), (128, "ef=128")] {
            let r = Request {
                ef: Some(ef),
                ..base.clone().path(PathChoice::Hnsw)
            };
            v.push((r, label.into()));
        }
    }
    if pq {
        v.push((base.clone().path(PathChoice::Pq), "rerank=default".into()));
    }
    for target in [0.9, 0.95, 0.99].into_iter().filter(|_| profiled) {
        v.push((Request::new(10).recall(target), format!("recall={target}")));
    }
    v
}

/// Runs `prox demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    args.store.dir_only()?;
    let shape = &args.data;
    if shape.n < 10 || shape.dim == 0 || shape.queries == 0 {
        bail!("--n must be at least 10, --dim and --queries at least 1");
    }
    let total = Instant::now();
    let spec = shape.spec();
    progress::note(format_args!(
        "prox demo: {} x {} Gaussian mixture ({} clusters, seed {}), {} queries, metric {}",
        spec.n, spec.dim, spec.clusters, spec.seed, spec.queries, spec.metric
    ));

    // 1. Data and exact ground truth.
    let t = Instant::now();
    let sp = progress::spinner("generating data");
    let data = gmm::generate(&spec);
    sp.finish_and_clear();
    let pb = progress::bar(spec.queries as u64, "ground truth", "queries");
    let truth = gmm::ground_truth(&data.base, &data.queries, spec.metric, 10, &|| pb.inc(1));
    pb.finish_and_clear();
    let data_dir = args.store.dir_only()?.join("datasets").join("demo");
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("{}: cannot create", data_dir.display()))?;
    io::write_fvecs(data_dir.join("base.fvecs"), &data.base)?;
    io::write_fvecs(data_dir.join("query.fvecs"), &data.queries)?;
    io::write_ivecs(data_dir.join("gt.ivecs"), &truth)?;
    let meta = serde_json::json!({
        "generator": "prox demo", "kind": "gmm", "name": "demo", "n": spec.n, "dim": spec.dim,
        "queries": spec.queries, "k": 10, "seed": spec.seed, "metric": spec.metric.name(),
        "clusters": spec.clusters,
    });
    std::fs::write(
        data_dir.join("meta.json"),
        serde_json::to_string_pretty(&meta)? + "\n",
    )?;
    let data_secs = t.elapsed().as_secs_f64();
    progress::note(format_args!(
        "data + exact ground truth: {data_secs:.1}s (written to {})",
        data_dir.display()
    ));

    // 2. Build.
    let store = args.store.open()?;
    let records: Vec<InputRecord> = data
        .base
        .rows()
        .enumerate()
        .map(|(i, r)| ((i as u64).to_be_bytes().to_vec(), r.to_vec(), Vec::new()))
        .collect();
    drop(data.base);
    let mut config = ProximityConfig::new(spec.dim as u32);
    config.metric = spec.metric;
    // What `prox build --hnsw [--pq]` builds with no parameters.
    let hnsw = (!args.no_hnsw).then(HnswParams::recommended);
    let pq = args
        .pq
        .then(|| PqParams::recommended(spec.dim, records.len() as u64));
    let build = index::Build {
        config,
        hnsw,
        pq,
        threads: None,
        indexes: Vec::new(),
        layouts: true,
        exact_layout: prox_engine::proximity::search::ExactLayout::Off,
    };
    let built = super::build::build_and_publish(&store, "demo", &build, records)?;
    progress::note(format_args!(
        "build: map {:.1}s{}; descriptor {}",
        built.map_seconds,
        if build.hnsw.is_some() || build.pq.is_some() {
            format!(", sidecars {:.1}s", built.sidecar_seconds)
        } else {
            String::new()
        },
        built.published.descriptor
    ));

    // 3. Search every path.
    let store: Arc<dyn BlockStore> = Arc::new(store);
    let map = crate::map::open_published(
        Arc::clone(&store),
        &built.published,
        &index::Options::default(),
    )?;
    // The recall profile `--recall` chooses from, as `prox build` measures
    // and publishes it (a map too small for one gets none).
    let profiled = map.len() >= index::PROFILE_K as u64 + 2;
    if profiled {
        let t = Instant::now();
        let sp = progress::spinner("measuring the recall profile");
        let profile = map.measure_profile(index::DEFAULT_PROFILE_QUERIES);
        sp.finish_and_clear();
        let profile = profile.context("measuring the recall profile")?;
        map.publish_profile("demo", &profile)?;
        map.set_profile(profile)?;
        progress::note(format_args!(
            "recall profile: {:.1}s (every path's settings on {} of the records)",
            t.elapsed().as_secs_f64(),
            index::DEFAULT_PROFILE_QUERIES.min(spec.n)
        ));
    }
    let threads = rayon::current_num_threads() as u32;
    let mut records = Vec::new();
    let mut out = Stdout::new();
    if !args.json {
        out.line(format_args!(
            "{:<8} {:<30} {:>9} {:>10}",
            "path", "setting", "recall@10", "QPS"
        ))?;
    }
    for (qs, label) in settings(build.hnsw.is_some(), build.pq.is_some(), profiled) {
        let (answers, secs) = super::query::run_all(&map, &data.queries, &qs)?;
        let found = answers
            .iter()
            .map(super::query::answer_ids)
            .collect::<Result<Vec<_>>>()?;
        let label = match answers.first().and_then(|a| a.tuned) {
            Some(t) => format!("{label}: {}", t.setting),
            None => label,
        };
        let rec = BenchRecord {
            engine: "prox".into(),
            path: answers
                .first()
                .map(|a| a.path.name())
                .unwrap_or("native")
                .into(),
            dataset: "demo".into(),
            mode: label,
            ef: qs.ef.map(|e| e as u64),
            recall: gmm::recall_at(&found, &truth, 10),
            qps: data.queries.len() as f64 / secs.max(1e-9),
            threads,
            build_seconds: Some(built.map_seconds + built.sidecar_seconds),
            index_bytes: None,
            k: Some(10),
            budget: None,
            mean_distance_evals: None,
            mean_nodes: None,
            p50_us: None,
            p99_us: None,
            completion: None,
            filter: None,
            eligible: None,
            underfilled: None,
        };
        if args.json {
            out.json(&rec)?;
        } else {
            out.line(format_args!(
                "{:<8} {:<30} {:>9.4} {:>10.0}",
                rec.path, rec.mode, rec.recall, rec.qps
            ))?;
        }
        out.flush()?;
        records.push(rec);
    }
    if let Some(p) = &args.plot {
        super::bench::draw(p, "prox demo: recall vs QPS", &records)?;
    }
    progress::note(format_args!(
        "total {:.1}s on {threads} threads; the map stays in {} as root \"demo\"",
        total.elapsed().as_secs_f64(),
        args.store.store.display()
    ));
    out.flush()
}
