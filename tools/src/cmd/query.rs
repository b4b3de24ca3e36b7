//! `prox query`: k-NN queries against a named map.

use super::store_arg::StoreArg;
use crate::io::{self, IvecsWriter};
use crate::map::{self, Answer, ModeChoice, OpenMap, PathChoice, QueryContext, QuerySpec};
use crate::{out::Stdout, progress};
use anyhow::{bail, Context, Result};
use clap::Args;
use prox_engine::proximity::search::ExactLayout;
use prox_engine::proximity::ProximityMap;
use rayon::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

/// Examples for `prox query --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox query --store db --name gmm --queries data/query.fvecs --k 10 --out found.ivecs
  prox query --store db --name gmm --queries q.jsonl --k 5 --mode exact --json
  prox query --store db --name gmm --queries q.fvecs --path hnsw --ef 128 --gt data/gt.ivecs

Output: --out writes result ids as .ivecs (maps built from .fvecs/.npy, whose
keys are 8-byte big-endian row numbers); --json prints one object per query
{\"query\": i, \"path\": ..., \"completion\": ..., \"results\": [{\"key\": hex,
\"value\": hex, \"score\": f64}]}; otherwise one line per query with the ids
(or hex keys). Throughput (and recall with --gt) goes to stderr.";

/// Arguments of `prox query`.
#[derive(Debug, Clone, Args)]
pub struct QueryArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Root name of the map.
    #[arg(long)]
    pub name: String,
    /// Query vectors (.fvecs, .bvecs, .npy, or JSON lines {"vector": [...]}).
    #[arg(long)]
    pub queries: PathBuf,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Native search mode; `exact` never uses an accelerator.
    #[arg(long, value_enum, default_value = "balanced")]
    pub mode: ModeChoice,
    /// Cap on distance evaluations per native query (budgeted search).
    #[arg(long)]
    pub budget: Option<u64>,
    /// Search path.
    #[arg(long, value_enum, default_value = "auto")]
    pub path: PathChoice,
    /// HNSW ef (PQ: rerank multiplier); default from the sidecar manifest.
    #[arg(long)]
    pub ef: Option<usize>,
    /// PQ fast-scan: partitions probed per query (default: the index's,
    /// nlist/16). Native path: sub-lists (about 32 records each) scanned
    /// by the adaptive presets (default: the preset's count).
    #[arg(long)]
    pub nprobe: Option<usize>,
    /// Search threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write result ids to this .ivecs file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Ground truth (.ivecs) to report recall@k against.
    #[arg(long)]
    pub gt: Option<PathBuf>,
    /// Print one JSON object per query.
    #[arg(long)]
    pub json: bool,
    /// Exact L2 layout (native path, `--mode exact`): `off` (the plain
    /// arena), `localM` (local frames of width M, e.g. local64: large
    /// clustered L2 maps) or `splitM` (one global rotation). Built before
    /// the queries are timed.
    #[arg(long, default_value = "off")]
    pub exact_layout: ExactLayout,
}

impl QueryArgs {
    fn spec(&self) -> QuerySpec {
        QuerySpec {
            k: self.k,
            path: self.path,
            mode: self.mode,
            budget: self.budget,
            ef: self.ef,
            nprobe: self.nprobe,
        }
    }
}

/// Runs every row of `queries` on `map` in parallel; returns the answers in
/// query order and the wall-clock seconds.
pub fn run_all(
    map: &OpenMap<'_>,
    queries: &io::Matrix,
    spec: &QuerySpec,
) -> Result<(Vec<Answer>, f64)> {
    let pb = progress::bar(queries.len() as u64, "querying", "queries");
    let t = Instant::now();
    let answers = queries
        .rows()
        .collect::<Vec<_>>()
        .par_iter()
        .enumerate()
        .map_init(QueryContext::default, |ctx, (i, q)| {
            let a = map
                .query(ctx, q, spec)
                .with_context(|| format!("query {i}"));
            pb.inc(1);
            a
        })
        .collect::<Result<Vec<_>>>()?;
    let secs = t.elapsed().as_secs_f64();
    pb.finish_and_clear();
    Ok((answers, secs))
}

/// The ids of an answer (keys that are 8-byte big-endian row numbers).
pub fn answer_ids(a: &Answer) -> Result<Vec<u32>> {
    a.hits
        .iter()
        .map(|(k, _)| {
            map::key_to_id(k)
                .and_then(|id| u32::try_from(id).ok())
                .with_context(|| format!("key {} is not an 8-byte row id; --out and --gt need a map built from .fvecs/.npy", hex::encode(k)))
        })
        .collect()
}

/// Runs `prox query`.
pub fn run(args: &QueryArgs) -> Result<()> {
    if args.k == 0 {
        bail!("--k must be at least 1");
    }
    let queries = io::read_matrix(&args.queries)?;
    let store = args.store.open_read_only()?;
    let mut map = OpenMap::open(store.as_ref(), &args.name, args.path)?;
    map.searcher = map.searcher.exact_layout(args.exact_layout);
    // Whatever the native path builds at load (nodes, the adaptive
    // codebooks, an exact layout) is built here, so the reported QPS is
    // query time only; skipped when every query goes to a sidecar.
    let native = args.path == PathChoice::Native
        || args.mode == ModeChoice::Exact
        || (map.accel.hnsw.is_none() && map.accel.pq.is_none());
    let mut load = None;
    if native {
        let sp = progress::spinner("loading the map");
        let t = Instant::now();
        map.searcher.warm().context("loading the map's nodes")?;
        load = Some(t.elapsed().as_secs_f64());
        sp.finish_and_clear();
    }
    if queries.dim != map.dims() {
        bail!(
            "{}: queries have {} dimensions, map {:?} has {}",
            args.queries.display(),
            queries.dim,
            args.name,
            map.dims()
        );
    }
    let spec = args.spec();
    let (answers, secs) =
        super::build::with_threads(args.threads, || run_all(&map, &queries, &spec))??;
    let qps = queries.len() as f64 / secs.max(1e-9);
    let paths: std::collections::BTreeSet<&str> = answers.iter().map(|a| a.path.name()).collect();
    let mut note = format!(
        "{} queries in {:.3}s: {:.0} QPS (path {})",
        queries.len(),
        secs,
        qps,
        paths.into_iter().collect::<Vec<_>>().join(",")
    );
    if let Some(l) = load {
        note.push_str(&format!(", loaded in {l:.1}s before timing"));
    }
    if let Some(gt) = &args.gt {
        let truth = io::read_ivecs(gt)?;
        if truth.len() != answers.len() {
            bail!(
                "{}: {} rows for {} queries",
                gt.display(),
                truth.len(),
                answers.len()
            );
        }
        let found = answers.iter().map(answer_ids).collect::<Result<Vec<_>>>()?;
        note.push_str(&format!(
            ", recall@{} {:.4}",
            args.k,
            crate::gmm::recall_at(&found, &truth, args.k)
        ));
    }
    progress::note(note);
    if let Some(path) = &args.out {
        let mut w = IvecsWriter::create(path)?;
        for a in &answers {
            w.push(&answer_ids(a)?)?;
        }
        w.finish()?;
    }
    let mut out = Stdout::new();
    if args.json {
        let pm = ProximityMap::load(store.as_ref(), map.published.descriptor)?;
        for (i, a) in answers.iter().enumerate() {
            let results = a
                .hits
                .iter()
                .map(|(k, s)| {
                    let value = pm.get(k)?.map(|(_, v)| hex::encode(v));
                    Ok(serde_json::json!({"key": hex::encode(k), "value": value, "score": s}))
                })
                .collect::<Result<Vec<_>>>()?;
            out.json(&serde_json::json!({
                "query": i, "path": a.path.name(), "completion": a.completion, "results": results,
            }))?;
        }
    } else if args.out.is_none() {
        for (i, a) in answers.iter().enumerate() {
            let items: Vec<String> = a
                .hits
                .iter()
                .map(|(k, _)| match map::key_to_id(k) {
                    Some(id) => id.to_string(),
                    None => hex::encode(k),
                })
                .collect();
            out.line(format_args!("{i}\t{}", items.join(" ")))?;
        }
    }
    out.flush()
}
