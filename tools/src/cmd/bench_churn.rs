//! `prox bench churn`: rounds of churn (half deletes of random live
//! records, half upserts of new vectors) through the engine's write path
//! (`Index::apply` + `Index::commit`) on a map with an HNSW sidecar, then
//! recall@k and QPS at a fixed `ef` after the churn against a fresh build
//! of the final record set.
//!
//! The input file is split: the first `n / (1 + rounds · churn / 2)` rows
//! form the initial map (key = row index, 8-byte big-endian), the rest are
//! the new vectors the rounds insert in order. Deletes are drawn by a seeded
//! generator. Ground truth is the native exact search over the final map.

use super::store_arg::StoreArg;
use crate::{io, out::Stdout, progress};
use anyhow::{bail, Context, Result};
use clap::Args;
use prox_engine::accel::{self, HnswParams};
use prox_engine::index::{
    Batch, Index, Options, PathChoice, QueryMode, Request, SidecarWrite, WriteOptions,
};
use prox_engine::proximity::{self, ProximityConfig, ProximityMap, Sidecars};
use prox_engine::{BlockStore, MemStore};
use prox_kernels::Metric;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Examples for `prox bench churn --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox bench churn --store /tmp/churn --input bench-data/synth-gmm-200k/base.fvecs \\
             --queries bench-data/synth-gmm-200k/query.fvecs --rounds 10 --churn 0.01 --ef 64

Builds the map (with an HNSW sidecar) in the new store, runs the rounds, then
compares recall@k and QPS at --ef with a fresh build of the final records.
One JSON line per round and a summary on stdout; a table on stderr.";

/// Arguments of `prox bench churn`.
#[derive(Debug, Clone, Args)]
pub struct BenchChurnArgs {
    /// A new store for the churned map.
    #[command(flatten)]
    pub store: StoreArg,
    /// Vectors (.fvecs, .bvecs, .npy): the initial map and the new vectors.
    #[arg(long)]
    pub input: PathBuf,
    /// Query vectors.
    #[arg(long)]
    pub queries: PathBuf,
    /// Churn rounds.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// Fraction of the initial map changed per round (half deletes, half
    /// new vectors).
    #[arg(long, default_value_t = 0.01)]
    pub churn: f64,
    /// HNSW parameters (as `prox build --hnsw`).
    #[arg(long, default_value = "", value_parser = super::accel::parse_hnsw)]
    pub hnsw: HnswParams,
    /// Metric of the map.
    #[arg(long, default_value = "l2", value_parser = super::parse_metric)]
    pub metric: Metric,
    /// The fixed ef of the recall and QPS comparison.
    #[arg(long, default_value_t = 64)]
    pub ef: usize,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Passes over the queries per index (QPS is the median).
    #[arg(long, default_value_t = 3)]
    pub passes: usize,
    /// Seed of the deletes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Search threads of the comparison (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The 1-minute load average.
fn load() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn key(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

/// Builds the map of `rows` (key = row index) with an HNSW sidecar in
/// `store` and publishes it as `name`.
fn build(
    store: &dyn BlockStore,
    name: &str,
    metric: Metric,
    data: &io::Matrix,
    rows: &BTreeSet<u64>,
    hnsw: &HnswParams,
) -> Result<()> {
    let records = rows
        .iter()
        .map(|&i| (key(i), data.row(i as usize).to_vec(), Vec::new()))
        .collect();
    let config = ProximityConfig {
        metric,
        ..ProximityConfig::new(data.dim as u32)
    };
    let map = ProximityMap::build(store, &config, records)?;
    let built = accel::build_sidecars(store, map.descriptor_cid(), Some(hnsw), None)?;
    let sidecars = Sidecars {
        hnsw: built.hnsw.map(|h| h.manifest_cid),
        pq: None,
    };
    store.commit()?;
    proximity::publish(store, name, &map, &sidecars)?;
    Ok(())
}

/// Recall@k against `truth` and the median QPS over `passes`.
fn measure(
    index: &Index,
    queries: &io::Matrix,
    truth: &[Vec<Vec<u8>>],
    req: &Request,
    passes: usize,
) -> Result<(f64, f64)> {
    let mut qps = Vec::with_capacity(passes);
    let mut recall = 0.0;
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        let answers = index.search_batch(&queries.data, req)?;
        qps.push(queries.len() as f64 / t.elapsed().as_secs_f64().max(1e-9));
        let found: usize = answers
            .iter()
            .zip(truth)
            .map(|(a, t)| a.hits.iter().filter(|h| t.contains(&h.key)).count())
            .sum();
        recall = found as f64 / (req.k * queries.len()).max(1) as f64;
    }
    qps.sort_by(f64::total_cmp);
    Ok((recall, qps[qps.len() / 2]))
}

/// Runs `prox bench churn`.
pub fn run(args: &BenchChurnArgs) -> Result<()> {
    if !(args.churn > 0.0 && args.churn <= 1.0) || args.rounds == 0 || args.k == 0 {
        bail!("--churn must be in (0, 1], --rounds and --k at least 1");
    }
    let data = io::read_matrix(&args.input)?;
    let queries = io::read_matrix(&args.queries)?;
    if queries.dim != data.dim {
        bail!(
            "{}: {} dimensions, the input has {}",
            args.queries.display(),
            queries.dim,
            data.dim
        );
    }
    let n = data.len();
    let initial = (n as f64 / (1.0 + args.rounds as f64 * args.churn / 2.0)) as usize;
    let per_round = ((initial as f64 * args.churn) / 2.0).round() as usize;
    if per_round == 0 || initial + per_round * args.rounds > n {
        bail!("{} rows are too few for this churn", n);
    }
    let mut out = Stdout::new();
    let load_start = load();
    progress::note(format_args!(
        "churn: {initial} initial records, {} rounds of {per_round} deletes + {per_round} inserts; load {load_start:.2}",
        args.rounds
    ));
    let store: Arc<dyn BlockStore> = Arc::new(args.store.open()?);
    let mut live: BTreeSet<u64> = (0..initial as u64).collect();
    let t = Instant::now();
    build(&*store, "churn", args.metric, &data, &live, &args.hnsw)?;
    let build_seconds = t.elapsed().as_secs_f64();
    progress::note(format_args!("initial build {build_seconds:.1}s"));
    let open = Options {
        warm: false,
        ..Options::default()
    };
    let mut index = Index::open(Arc::clone(&store), "churn", &open)?;
    let mut rng = crate::gmm::Rng::new(args.seed);
    let mut next_row = initial as u64;
    progress::note(format_args!(
        "{:>5} {:>9} {:>9} {:>9} {:>7} {:>12} {:>9} {:>6}",
        "round", "apply_s", "hnsw_s", "commit_s", "blocks", "bytes", "relinked", "load"
    ));
    for round in 0..args.rounds {
        let mut batch = Batch::new();
        let pool: Vec<u64> = live.iter().copied().collect();
        let mut gone = BTreeSet::new();
        while gone.len() < per_round {
            gone.insert(pool[(rng.next_u64() % pool.len() as u64) as usize]);
        }
        for &g in &gone {
            batch.delete(key(g));
            live.remove(&g);
        }
        for _ in 0..per_round {
            batch.upsert(
                key(next_row),
                data.row(next_row as usize).to_vec(),
                Vec::new(),
            );
            live.insert(next_row);
            next_row += 1;
        }
        let t = Instant::now();
        let applied = index.apply(&batch, &WriteOptions::default())?;
        let apply_seconds = t.elapsed().as_secs_f64();
        let c = Instant::now();
        applied
            .index
            .commit("churn", Some(index.descriptor()))
            .context("publishing the round")?;
        let commit_seconds = c.elapsed().as_secs_f64();
        let r = &applied.report;
        let relinked = match r.hnsw {
            SidecarWrite::Updated { relinked, .. } => relinked,
            other => bail!("round {round}: the HNSW sidecar was not updated: {other:?}"),
        };
        let l = load();
        progress::note(format_args!(
            "{round:>5} {apply_seconds:>9.3} {:>9.3} {commit_seconds:>9.3} {:>7} {:>12} {relinked:>9} {l:>6.2}",
            r.sidecar_time.as_secs_f64(),
            r.blocks_written,
            r.bytes_written
        ));
        out.json(&serde_json::json!({
            "round": round,
            "edits": batch.len(),
            "apply_seconds": apply_seconds,
            "hnsw_seconds": r.sidecar_time.as_secs_f64(),
            "commit_seconds": commit_seconds,
            "blocks_written": r.blocks_written,
            "bytes_written": r.bytes_written,
            "map_nodes_encoded": r.map.nodes_encoded,
            "hnsw_relinked": relinked,
            "records": applied.index.len(),
            "load": l,
        }))?;
        out.flush()?;
        index = applied.index;
    }
    // The fresh build of the final records, in memory.
    let fresh_store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let t = Instant::now();
    build(
        &*fresh_store,
        "fresh",
        args.metric,
        &data,
        &live,
        &args.hnsw,
    )?;
    let fresh_seconds = t.elapsed().as_secs_f64();
    let fresh = Index::open(fresh_store, "fresh", &Options::default())?;
    let same_descriptor = fresh.descriptor() == index.descriptor();
    index.warm()?;
    let exact = Request::new(args.k).mode(QueryMode::Exact);
    let truth: Vec<Vec<Vec<u8>>> =
        super::build::with_threads(args.threads, || index.search_batch(&queries.data, &exact))??
            .into_iter()
            .map(|a| a.hits.into_iter().map(|h| h.key).collect())
            .collect();
    let req = Request {
        ef: Some(args.ef),
        ..Request::new(args.k).path(PathChoice::Hnsw)
    };
    // Alternate the two indexes so drifting machine load hits both alike.
    let mut runs = Vec::new();
    for _ in 0..2 {
        for (which, ix) in [("churned", &index), ("fresh", &fresh)] {
            let (recall, qps) = super::build::with_threads(args.threads, || {
                measure(ix, &queries, &truth, &req, args.passes)
            })??;
            runs.push((which, recall, qps, load()));
        }
    }
    let pick = |which: &str| {
        let mut v: Vec<&(&str, f64, f64, f64)> = runs.iter().filter(|r| r.0 == which).collect();
        v.sort_by(|a, b| a.2.total_cmp(&b.2));
        *v[v.len() - 1]
    };
    let (c, f) = (pick("churned"), pick("fresh"));
    let load_end = load();
    progress::note(format_args!(
        "after churn at ef {}: recall@{} {:.4} vs fresh {:.4} (diff {:+.4}); QPS {:.0} vs {:.0} ({:.2}x); same descriptor: {same_descriptor}; load {load_start:.2} -> {load_end:.2}",
        args.ef, args.k, c.1, f.1, c.1 - f.1, c.2, f.2, c.2 / f.2
    ));
    out.json(&serde_json::json!({
        "summary": true,
        "initial": initial,
        "rounds": args.rounds,
        "per_round_deletes": per_round,
        "per_round_inserts": per_round,
        "records": index.len(),
        "ef": args.ef,
        "k": args.k,
        "recall_churned": c.1,
        "recall_fresh": f.1,
        "qps_churned": c.2,
        "qps_fresh": f.2,
        "same_descriptor": same_descriptor,
        "initial_build_seconds": build_seconds,
        "fresh_build_seconds": fresh_seconds,
        "threads": args.threads.unwrap_or_else(rayon::current_num_threads),
        "load_start": load_start,
        "load_end": load_end,
    }))?;
    out.flush()
}
