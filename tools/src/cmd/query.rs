//! `prox query`: k-NN queries against a named map, through the engine's
//! [`Index`] (which alone decides how each query runs).

use super::store_arg::StoreArg;
use crate::io::{self, IvecsWriter};
use crate::{map, out::Stdout, progress};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use prox_engine::index::{self, PathChoice, QueryMode, Request, Response, Scratch};
use prox_engine::proximity::search::ExactLayout;
use prox_engine::{BlockStore, Index};
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Examples for `prox query --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox query --store db --name gmm --queries data/query.fvecs --k 10 --out found.ivecs
  prox query --store db --name gmm --queries q.jsonl --k 5 --mode exact --json
  prox query --store db --name gmm --queries q.fvecs --path hnsw --ef 128 --gt data/gt.ivecs
  prox query --store db --name docs --queries q.jsonl --filter '{\"prefix\": \"00ab\"}' --json
  prox query --store db --name docs --queries q.jsonl --filter '{\"must\": [{\"key\": \"lang\", \"match\": {\"value\": \"en\"}}]}'

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
    /// Search mode: auto, exact, fast, balanced, high. `exact` never uses a
    /// sidecar; fast/balanced/high are the native presets; `auto` lets the
    /// index choose (docs/search.md, "Which search runs").
    #[arg(long, default_value = "auto")]
    pub mode: QueryMode,
    /// Cap on distance evaluations per query (the native budgeted search).
    #[arg(long)]
    pub budget: Option<u64>,
    /// Search path: auto, native, hnsw, pq.
    #[arg(long, default_value = "auto")]
    pub path: PathChoice,
    /// HNSW ef (also the PQ rerank multiplier unless --rerank is given);
    /// default from the sidecar manifest.
    #[arg(long)]
    pub ef: Option<usize>,
    /// PQ rerank multiplier; default --ef, else the sidecar manifest's.
    #[arg(long)]
    pub rerank: Option<usize>,
    /// PQ fast-scan: partitions probed per query (default: the index's,
    /// nlist/16). Native path: sub-lists (about 32 records each) scanned
    /// by the adaptive presets (default: the preset's count).
    #[arg(long)]
    pub nprobe: Option<usize>,
    /// Target recall@10 in [0, 1] (0: the fastest setting): run the fastest path and setting the
    /// map's recall profile measured to reach it (with --path and --mode
    /// auto, no --ef/--rerank/--nprobe/--budget; docs/search.md, "Choosing
    /// by recall").
    #[arg(long)]
    pub recall: Option<f64>,
    /// Search threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write result ids to this .ivecs file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Ground truth (.ivecs) to report recall@k against.
    #[arg(long)]
    pub gt: Option<PathBuf>,
    /// Print one JSON object per query (with each hit's value).
    #[arg(long)]
    pub json: bool,
    /// Eligible records, in the JSON form of the HTTP API's "filter":
    /// {"prefix": hex}, {"range": [start hex or null, end hex or null]},
    /// {"keys": [hex, ...]}, payload fields {"key": F, "match": {"value": v}}
    /// or {"key": F, "range": {"gte": x}}, {"is_null"|"exists": {"key": F}},
    /// and {"must"|"should"|"must_not": [...]} (docs/payloads.md).
    #[arg(long)]
    pub filter: Option<String>,
    /// Return each hit's value (printed as `id:hexvalue`; --json always
    /// prints values).
    #[arg(long)]
    pub with_values: bool,
    /// Exact L2 layout (native path, `--mode exact`): `auto` (the local
    /// frames or rotated arena the map persists, `prox build
    /// --exact-layout localM|splitM`, else the plain arena), `off` (the
    /// plain arena), `localM` (local frames of width M, e.g. local64: large
    /// clustered L2 maps) or `splitM` (one global rotation); those two read
    /// the map's persisted layout of that width, else build it. Read or
    /// built before the queries are timed.
    #[arg(long, default_value = "auto")]
    pub exact_layout: ExactLayout,
    /// Decode every node of the map before the queries are timed, so the
    /// reported QPS is steady state. Without it only the search layouts
    /// are read first and the queries decode the leaf pages they reach:
    /// the first answer comes sooner, and the QPS includes that decoding.
    #[arg(long)]
    pub warm: bool,
}

impl QueryArgs {
    /// The one request every query of this run makes.
    pub fn request(&self) -> Result<Request> {
        let filter = self.filter.as_deref().map(parse_filter).transpose()?;
        let req = Request {
            k: self.k,
            mode: self.mode,
            budget: self.budget,
            path: self.path,
            ef: self.ef,
            nprobe: self.nprobe,
            rerank: self.rerank,
            recall: self.recall,
            filter,
            with_values: self.with_values || self.json,
            with_vectors: false,
            deadline: None,
        };
        req.validate()?;
        Ok(req)
    }
}

/// A `--filter` argument: the JSON form of the HTTP API's "filter".
pub fn parse_filter(text: &str) -> Result<prox_engine::keys::Filter> {
    let v: serde_json::Value = serde_json::from_str(text).context("--filter is not JSON")?;
    prox_serve::filter_from_json(&v).map_err(|e| anyhow!("--filter: {}", e.message))
}

/// Runs every row of `queries` on `index` in parallel; returns the answers
/// in query order and the wall-clock seconds.
pub fn run_all(index: &Index, queries: &io::Matrix, req: &Request) -> Result<(Vec<Response>, f64)> {
    let pb = progress::bar(queries.len() as u64, "querying", "queries");
    let t = Instant::now();
    let answers = queries
        .rows()
        .collect::<Vec<_>>()
        .par_iter()
        .enumerate()
        .map_init(Scratch::default, |scratch, (i, q)| {
            let a = index
                .search(scratch, q, req)
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
pub fn answer_ids(a: &Response) -> Result<Vec<u32>> {
    a.hits
        .iter()
        .map(|h| {
            map::key_to_id(&h.key)
                .and_then(|id| u32::try_from(id).ok())
                .with_context(|| format!("key {} is not an 8-byte row id; --out and --gt need a map built from .fvecs/.npy", hex::encode(&h.key)))
        })
        .collect()
}

/// True when the routing rule may send `req` to a sidecar (an explicit
/// sidecar path, or path and mode both `auto` without a budget); otherwise
/// every query runs the native search and the sidecars need not be loaded.
pub fn may_use_sidecar(req: &Request) -> bool {
    match req.path {
        PathChoice::Hnsw | PathChoice::Pq => true,
        PathChoice::Native => false,
        PathChoice::Auto => req.mode == QueryMode::Auto && req.budget.is_none(),
    }
}

/// True when a query of `req` may run the native search on `index` (so its
/// load-time layouts are worth building before the timed run).
pub fn may_run_native(index: &Index, req: &Request) -> bool {
    let a = index.accelerators();
    match req.path {
        PathChoice::Native => true,
        PathChoice::Hnsw | PathChoice::Pq => false,
        PathChoice::Auto if req.recall.is_some() => {
            req.filter.is_some()
                || req
                    .recall
                    .and_then(|r| index.choose(r).ok())
                    .is_some_and(|c| c.setting.path == prox_engine::accel::Path::Native)
        }
        PathChoice::Auto => {
            req.mode != QueryMode::Auto
                || req.budget.is_some()
                || req.filter.is_some()
                || (a.hnsw.is_none() && a.pq.is_none())
        }
    }
}

/// Opens the store read-only as a shared handle.
pub fn open_shared(store: &StoreArg) -> Result<Arc<dyn BlockStore>> {
    Ok(Arc::from(store.open_read_only()?))
}

/// Runs `prox query`.
pub fn run(args: &QueryArgs) -> Result<()> {
    if args.k == 0 {
        bail!("--k must be at least 1");
    }
    let req = args.request()?;
    let queries = io::read_matrix(&args.queries)?;
    let store = open_shared(&args.store)?;
    let options = index::Options {
        exact_layout: args.exact_layout,
        warm: false,
        sidecars: may_use_sidecar(&req),
        // A forced sidecar path reads only that sidecar.
        only: match req.path {
            PathChoice::Hnsw => Some(prox_engine::accel::Path::Hnsw),
            PathChoice::Pq => Some(prox_engine::accel::Path::Pq),
            PathChoice::Native | PathChoice::Auto => None,
        },
    };
    let index = map::open(store, &args.name, &options)?;
    // A payload field filter is evaluated once, to the key set every
    // query then shares.
    let req = index
        .resolve_filter(&req)
        .with_context(|| format!("--filter on map {:?}", args.name))?;
    // Whatever the native path builds or reads at load (the adaptive
    // codebooks, the arena, an exact layout) is done here, so the reported
    // QPS is query time plus the leaf pages the queries decode; skipped
    // when every query goes to a sidecar.
    let mut load = None;
    if may_run_native(&index, &req) {
        let sp = progress::spinner("loading the map");
        let t = Instant::now();
        let exact = req.mode == QueryMode::Exact;
        match (args.warm, exact) {
            (true, true) => index.warm_exact().map(drop),
            (true, false) => index.warm().map(drop),
            (false, _) => index.prepare(exact),
        }
        .context("loading the map")?;
        load = Some(t.elapsed().as_secs_f64());
        sp.finish_and_clear();
    }
    if queries.dim != index.dims() {
        bail!(
            "{}: queries have {} dimensions, map {:?} has {}",
            args.queries.display(),
            queries.dim,
            args.name,
            index.dims()
        );
    }
    let (answers, secs) =
        super::build::with_threads(args.threads, || run_all(&index, &queries, &req))??;
    let qps = queries.len() as f64 / secs.max(1e-9);
    let paths: std::collections::BTreeSet<&str> = answers.iter().map(|a| a.path.name()).collect();
    let mut note = format!(
        "{} queries in {:.3}s: {:.0} QPS (path {})",
        queries.len(),
        secs,
        qps,
        paths.into_iter().collect::<Vec<_>>().join(",")
    );
    if let Some(t) = answers.first().and_then(|a| a.tuned) {
        note.push_str(&format!(
            ", chosen for recall {}: {} (measured recall {:.3}{})",
            req.recall.unwrap_or(0.0),
            t.setting,
            t.recall,
            if t.reached {
                ""
            } else {
                ", below the target: the best measured"
            }
        ));
    }
    if let Some(l) = load {
        let what = if args.warm {
            "every node"
        } else {
            "layouts; the queries decode the leaf pages they reach"
        };
        note.push_str(&format!(", loaded in {l:.1}s before timing ({what})"));
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
        for (i, a) in answers.iter().enumerate() {
            let results: Vec<serde_json::Value> = a
                .hits
                .iter()
                .map(|h| {
                    serde_json::json!({
                        "key": hex::encode(&h.key),
                        "value": h.value.as_ref().map(hex::encode),
                        "score": h.score,
                    })
                })
                .collect();
            let tuned = a.tuned.map(|t| {
                serde_json::json!({
                    "setting": t.setting.to_string(), "recall": t.recall,
                    "micros": t.micros, "reached": t.reached,
                })
            });
            out.json(&serde_json::json!({
                "query": i, "path": a.path.name(), "completion": a.completion.name(),
                "tuned": tuned, "results": results,
            }))?;
        }
    } else if args.out.is_none() {
        for (i, a) in answers.iter().enumerate() {
            let items: Vec<String> = a
                .hits
                .iter()
                .map(|h| {
                    let id = match map::key_to_id(&h.key) {
                        Some(id) => id.to_string(),
                        None => hex::encode(&h.key),
                    };
                    match &h.value {
                        Some(v) => format!("{id}:{}", hex::encode(v)),
                        None => id,
                    }
                })
                .collect();
            out.line(format_args!("{i}\t{}", items.join(" ")))?;
        }
    }
    out.flush()
}
