//! `prox bench`: the map benchmark (recall vs QPS sweeps) and its
//! sub-benchmarks.
//!
//! Records follow the JSON-lines schema of [`crate::results`] (documented
//! in docs/cli.md), shared with the peer script benches/peers/peers.py.

use super::store_arg::StoreArg;
use crate::results::BenchRecord;
use crate::{io, out::Stdout, plot, progress, results};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use prox_engine::accel::Path;
use prox_engine::index::{self, PathChoice, QueryMode, Request};
use prox_engine::proximity::search::ExactLayout;
use prox_engine::Index;
use std::path::PathBuf;

/// Examples for `prox bench --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox bench --store db --name gmm --queries data/query.fvecs --gt data/gt.ivecs --k 10 > prox.jsonl
  prox bench --store db --name gmm --queries q.fvecs --gt gt.ivecs --sweep --threads 1 \\
             --peers peers.jsonl --plot recall-qps.svg
  prox bench --store db --name gmm --queries q.fvecs --gt gt.ivecs --path hnsw --ef 16,32,64
  prox bench kernels --dims 128,384
  prox bench plot --results prox.jsonl --results peers.jsonl --plot recall-qps.png

The map benchmark runs every setting of every available path (native: exact,
budgets and adaptive presets; hnsw: ef; pq: rerank multiplier) over the whole
query set and prints one JSON object per setting (schema: docs/cli.md), with
a summary table on stderr. --sweep uses the long sweep (ef 10..800, native
list probes 8..1024); --probes sets the native probe counts.";

/// Arguments of `prox bench`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    /// A sub-benchmark; without one, benchmarks a map.
    #[command(subcommand)]
    pub sub: Option<BenchSub>,
    /// The map benchmark's arguments.
    #[command(flatten)]
    pub map: MapBenchArgs,
}

/// Arguments of the map benchmark (`prox bench` without a subcommand).
#[derive(Debug, Clone, Args)]
pub struct MapBenchArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Root name of the map.
    #[arg(long, required = true)]
    pub name: Option<String>,
    /// Query vectors.
    #[arg(long, required = true)]
    pub queries: Option<PathBuf>,
    /// Ground truth ids (.ivecs), at least k per query.
    #[arg(long, required = true)]
    pub gt: Option<PathBuf>,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// The long sweep (ef from 10 to 800, native list probes from 8 to 1024).
    #[arg(long)]
    pub sweep: bool,
    /// Paths to measure (comma-separated; default: native and every sidecar;
    /// `auto` is the request without path, mode or knobs, "default").
    #[arg(long, value_delimiter = ',')]
    pub path: Vec<PathChoice>,
    /// HNSW ef values (comma-separated) instead of the default sweep.
    #[arg(long, value_delimiter = ',')]
    pub ef: Vec<usize>,
    /// Native budgets (distance evaluations, comma-separated) instead of the default sweep.
    #[arg(long, value_delimiter = ',')]
    pub budget: Vec<u64>,
    /// Native adaptive search: sub-lists scanned per query
    /// (comma-separated; each runs with the balanced preset's rerank),
    /// added to the native settings.
    #[arg(long, value_delimiter = ',')]
    pub probes: Vec<usize>,
    /// PQ fast-scan partitions probed per query on the PQ path (default: the index's).
    #[arg(long)]
    pub nprobe: Option<usize>,
    /// Target recalls (comma-separated, each in [0, 1]): instead of the
    /// path sweep, run each as `prox query --recall` does (the setting the
    /// map's recall profile picks) and report the recall reached.
    #[arg(long, value_delimiter = ',')]
    pub recall: Vec<f64>,
    /// Search threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Passes over the query set per setting; the fastest is reported (the
    /// peer scripts do the same), the first doubling as a warm-up.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
    /// Dataset name in the records (default: the queries' directory name).
    #[arg(long)]
    pub dataset: Option<String>,
    /// Peer results (JSON lines from benches/peers/peers.py) to overlay on the plot.
    #[arg(long)]
    pub peers: Option<PathBuf>,
    /// Draw recall vs QPS to this .svg or .png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Exact L2 layout of the native path's exact rows (as `prox query
    /// --exact-layout`: auto, off, localM, splitM).
    #[arg(long, default_value = "auto")]
    pub exact_layout: ExactLayout,
    /// Filter every query carries, in the JSON form of `prox query
    /// --filter` (docs/payloads.md); --gt then holds the filtered ground
    /// truth. A field filter is resolved once, before the timed queries
    /// (its time is reported), as a server does for a repeated filter.
    #[arg(long)]
    pub filter: Option<String>,
}

/// Sub-benchmarks of `prox bench`.
#[derive(Debug, Subcommand)]
pub enum BenchSub {
    /// Micro-benchmark the distance kernels (one query against many rows).
    #[command(after_help = super::bench_kernels::EXAMPLES)]
    Kernels(super::bench_kernels::BenchKernelsArgs),
    /// Plot saved result files (prox bench and peers.py output) as recall vs QPS.
    #[command(after_help = PLOT_EXAMPLES)]
    Plot(PlotArgs),
    /// Replication cost on loopback: clone and update pulls vs bare stream and raw TCP.
    #[command(after_help = crate::cmd::bench_sync::EXAMPLES)]
    Sync(crate::cmd::bench_sync::BenchSyncArgs),
    /// Rounds of upserts and deletes through the index API on a map with an
    /// HNSW sidecar: time and bytes per batch, recall and QPS after churn vs
    /// a fresh build.
    #[command(after_help = crate::cmd::bench_churn::EXAMPLES)]
    Churn(Box<crate::cmd::bench_churn::BenchChurnArgs>),
    /// HTTP search API load test (QPS, p50/p95/p99) vs in-process search.
    #[command(after_help = crate::cmd::bench_serve::EXAMPLES)]
    Serve(Box<crate::cmd::bench_serve::BenchServeArgs>),
}

const PLOT_EXAMPLES: &str = "\
Examples:
  prox bench plot --results prox.jsonl --results peers.jsonl --plot recall-qps.svg
  prox bench plot --results peers.jsonl --plot peers.png --title 'synth-gmm-200k, 1 thread'

Every --results file holds JSON lines in the schema of docs/cli.md; one curve
is drawn per engine/path along its Pareto frontier.";

/// Arguments of `prox bench plot`.
#[derive(Debug, Clone, Args)]
pub struct PlotArgs {
    /// A JSON-lines results file (repeatable).
    #[arg(long = "results", required = true)]
    pub results: Vec<PathBuf>,
    /// Output image: .svg or .png.
    #[arg(long)]
    pub plot: PathBuf,
    /// Plot title (default: the datasets named in the records).
    #[arg(long)]
    pub title: Option<String>,
    /// Keep only records with this thread count.
    #[arg(long)]
    pub threads: Option<u32>,
}

/// Runs `prox bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    match &args.sub {
        Some(BenchSub::Kernels(k)) => super::bench_kernels::run(k),
        Some(BenchSub::Plot(p)) => run_plot(p),
        Some(BenchSub::Sync(a)) => crate::cmd::bench_sync::run(a),
        Some(BenchSub::Serve(a)) => crate::cmd::bench_serve::run(a),
        Some(BenchSub::Churn(a)) => crate::cmd::bench_churn::run(a),
        None => run_map(&args.map),
    }
}

/// Default title: "recall vs QPS: <datasets>".
pub fn default_title(records: &[results::BenchRecord]) -> String {
    let mut names: Vec<&str> = records.iter().map(|r| r.dataset.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    format!("recall vs QPS: {}", names.join(", "))
}

/// Draws `records` and reports where (unless quiet).
pub fn draw(path: &std::path::Path, title: &str, records: &[results::BenchRecord]) -> Result<()> {
    let outcome = plot::plot(path, title, records)?;
    progress::note(format_args!(
        "plot: {} ({} curves{})",
        path.display(),
        outcome.series,
        if outcome.text {
            ""
        } else {
            ", no text: no TrueType font found, set PROX_FONT=/path/to/font.ttf"
        }
    ));
    Ok(())
}

fn run_plot(args: &PlotArgs) -> Result<()> {
    let mut records = Vec::new();
    for path in &args.results {
        records.extend(results::read(path)?);
    }
    if let Some(t) = args.threads {
        records.retain(|r| r.threads == t);
    }
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| default_title(&records));
    draw(&args.plot, &title, &records)?;
    let mut out = Stdout::new();
    out.line(args.plot.display())?;
    out.flush()
}

/// One setting of the map sweep.
#[derive(Debug, Clone, PartialEq)]
struct Setting {
    spec: Request,
    mode: String,
    ef: Option<u64>,
    budget: Option<u64>,
}

const EF_SHORT: &[usize] = &[16, 32, 64, 128, 256];
const EF_LONG: &[usize] = &[10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 800];
const BUDGET_SHORT: &[u64] = &[1_000, 4_000, 16_000];
/// Native list probes of the long sweep (the adaptive presets' range and
/// beyond, so recall 0.90 and 0.95 are bracketed on the bench datasets).
const PROBES_LONG: &[usize] = &[8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024];
const RERANK: &[usize] = &[1, 2, 4, 8, 16, 32];
/// PQ coarse lists and rerank depths of the long sweep.
const PQ_PROBES_LONG: &[usize] = &[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256];
const PQ_RERANK_LONG: &[usize] = &[2, 4, 6, 8, 12, 16];

fn settings(args: &MapBenchArgs, paths: &[PathChoice]) -> Vec<Setting> {
    let k = args.k;
    if !args.recall.is_empty() {
        return args
            .recall
            .iter()
            .map(|&r| Setting {
                spec: Request::new(k).recall(r),
                mode: format!("recall={r}"),
                ef: None,
                budget: None,
            })
            .collect();
    }
    let base = Request {
        nprobe: args.nprobe,
        ..Request::new(k).path(PathChoice::Native)
    };
    let mut out = Vec::new();
    for &p in paths {
        match p {
            PathChoice::Auto => {
                // What a request without path, mode or knobs runs.
                out.push(Setting {
                    spec: Request {
                        nprobe: args.nprobe,
                        ..Request::new(k)
                    },
                    mode: "default".into(),
                    ef: None,
                    budget: None,
                });
            }
            PathChoice::Native => {
                // On the native path `nprobe` means list probes: the PQ
                // --nprobe must not leak into the preset settings.
                let base = Request {
                    nprobe: None,
                    ..base.clone()
                };
                let budgets: Vec<u64> = if !args.budget.is_empty() {
                    args.budget.clone()
                } else {
                    BUDGET_SHORT.to_vec()
                };
                let probes: Vec<usize> = if !args.probes.is_empty() {
                    args.probes.clone()
                } else if args.sweep {
                    PROBES_LONG.to_vec()
                } else {
                    Vec::new()
                };
                for p in probes {
                    out.push(Setting {
                        spec: Request {
                            nprobe: Some(p),
                            ..base.clone()
                        },
                        mode: format!("probes={p}"),
                        ef: Some(p as u64),
                        budget: None,
                    });
                }
                for b in budgets {
                    out.push(Setting {
                        spec: base.clone().budget(b),
                        mode: format!("budget={b}"),
                        ef: None,
                        budget: Some(b),
                    });
                }
                for m in [
                    QueryMode::Fast,
                    QueryMode::Balanced,
                    QueryMode::High,
                    QueryMode::Exact,
                ] {
                    out.push(Setting {
                        spec: base.clone().mode(m),
                        mode: m.name().into(),
                        ef: None,
                        budget: None,
                    });
                }
            }
            PathChoice::Hnsw => {
                let efs: Vec<usize> = if !args.ef.is_empty() {
                    args.ef.clone()
                } else if args.sweep {
                    EF_LONG.to_vec()
                } else {
                    EF_SHORT.to_vec()
                };
                for ef in efs.into_iter().filter(|&e| e >= k) {
                    out.push(Setting {
                        spec: Request {
                            ef: Some(ef),
                            ..base.clone().path(PathChoice::Hnsw)
                        },
                        mode: format!("ef={ef}"),
                        ef: Some(ef as u64),
                        budget: None,
                    });
                }
            }
            PathChoice::Pq => {
                // The long sweep crosses the coarse lists with the rerank
                // depth (as FAISS's nprobe x k_factor); otherwise the rerank
                // varies at `--nprobe` or the index default.
                let probes: Vec<Option<usize>> = if args.sweep && args.nprobe.is_none() {
                    PQ_PROBES_LONG.iter().map(|&p| Some(p)).collect()
                } else {
                    vec![args.nprobe]
                };
                let reranks = if probes.len() > 1 {
                    PQ_RERANK_LONG
                } else {
                    RERANK
                };
                for nprobe in probes {
                    for &r in reranks {
                        out.push(Setting {
                            spec: Request {
                                rerank: Some(r),
                                nprobe,
                                ..base.clone().path(PathChoice::Pq)
                            },
                            mode: match nprobe {
                                Some(p) => format!("nprobe={p},rerank={r}"),
                                None => format!("rerank={r}"),
                            },
                            ef: Some(r as u64),
                            budget: None,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Measures one setting: all queries in one parallel batch.
fn measure(
    index: &Index,
    queries: &io::Matrix,
    truth: &[Vec<u32>],
    s: &Setting,
    run: &Run<'_>,
) -> Result<BenchRecord> {
    let Run {
        threads,
        reps,
        dataset,
        filter,
    } = *run;
    let (answers, mut secs) = super::query::run_all(index, queries, &s.spec)?;
    for _ in 1..reps {
        secs = secs.min(super::query::run_all(index, queries, &s.spec)?.1);
    }
    let found = answers
        .iter()
        .map(super::query::answer_ids)
        .collect::<Result<Vec<_>>>()?;
    let n = answers.len().max(1) as f64;
    let path = answers.first().map(|a| a.path).unwrap_or(Path::Native);
    let mut completions: Vec<&str> = answers.iter().map(|a| a.completion.name()).collect();
    completions.sort_unstable();
    completions.dedup();
    let native = path == Path::Native;
    let mode = match answers.first().and_then(|a| a.tuned) {
        Some(t) => format!("{}: {}", s.mode, t.setting),
        None => s.mode.clone(),
    };
    Ok(BenchRecord {
        engine: "prox".into(),
        path: path.name().into(),
        dataset: dataset.into(),
        mode,
        ef: s.ef,
        recall: crate::gmm::recall_at(&found, truth, s.spec.k),
        qps: queries.len() as f64 / secs.max(1e-9),
        threads,
        build_seconds: None,
        index_bytes: None,
        k: Some(s.spec.k as u32),
        budget: s.budget,
        mean_distance_evals: native.then(|| {
            answers
                .iter()
                .map(|a| a.counters.distance_evals as f64)
                .sum::<f64>()
                / n
        }),
        mean_nodes: native
            .then(|| answers.iter().map(|a| a.counters.nodes as f64).sum::<f64>() / n),
        p50_us: None,
        p99_us: None,
        completion: Some(completions.join(",")),
        filter: filter.map(|f| f.text.to_string()),
        eligible: filter.and_then(|f| f.eligible),
        underfilled: filter.map(|f| {
            let want = f.eligible.map_or(s.spec.k, |e| s.spec.k.min(e as usize));
            answers.iter().filter(|a| a.hits.len() < want).count() as u64
        }),
    })
}

/// What every setting of one run shares.
#[derive(Clone, Copy)]
struct Run<'a> {
    threads: u32,
    reps: u32,
    dataset: &'a str,
    filter: Option<&'a BenchFilter<'a>>,
}

/// The run's filter: as given, and how many records it admits.
struct BenchFilter<'a> {
    text: &'a str,
    eligible: Option<u64>,
}

fn run_map(args: &MapBenchArgs) -> Result<()> {
    let (Some(name), Some(qpath), Some(gtpath)) = (&args.name, &args.queries, &args.gt) else {
        bail!("prox bench needs --name, --queries and --gt (or a subcommand: see --help)");
    };
    if args.k == 0 {
        bail!("--k must be at least 1");
    }
    let queries = io::read_matrix(qpath)?;
    let truth = io::read_ivecs(gtpath)?;
    if truth.len() != queries.len() {
        bail!(
            "{}: {} rows for {} queries",
            gtpath.display(),
            truth.len(),
            queries.len()
        );
    }
    // A filtered truth row may be short: the filter admits fewer than k.
    let short = |r: &Vec<u32>| r.len() < args.k && args.filter.is_none();
    if let Some((i, row)) = truth.iter().enumerate().find(|(_, r)| short(r)) {
        bail!(
            "{}: row {i} has {} ids, fewer than --k {}",
            gtpath.display(),
            row.len(),
            args.k
        );
    }
    for r in &args.recall {
        Request::new(args.k).recall(*r).validate()?;
    }
    let store = super::query::open_shared(&args.store)?;
    let published = crate::map::resolve(store.as_ref(), name)?;
    let mut paths = args.path.clone();
    if paths.is_empty() {
        paths.push(PathChoice::Native);
        if published.hnsw.is_some() {
            paths.push(PathChoice::Hnsw);
        }
        if published.pq.is_some() {
            paths.push(PathChoice::Pq);
        }
    }
    let sp = progress::spinner("loading map");
    let options = index::Options {
        exact_layout: args.exact_layout,
        warm: true,
        sidecars: paths.iter().any(|p| *p != PathChoice::Native),
        only: None,
    };
    let index = crate::map::open_published(store, &published, &options);
    sp.finish_and_clear();
    let mut index = index.with_context(|| format!("map {name:?}"))?;
    if args.filter.is_some() {
        index
            .load_field_indexes(name)
            .with_context(|| format!("field indexes of map {name:?}"))?;
    }
    if queries.dim != index.dims() {
        bail!(
            "{}: queries have {} dimensions, map {name:?} has {}",
            qpath.display(),
            queries.dim,
            index.dims()
        );
    }
    let dataset = args.dataset.clone().unwrap_or_else(|| {
        qpath
            .canonicalize()
            .ok()
            .and_then(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .map(|s| s.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "unnamed".into())
    });
    let mut all = settings(args, &paths);
    let filter = match &args.filter {
        None => None,
        Some(text) => {
            let t = std::time::Instant::now();
            let req = index
                .resolve_filter(&Request::new(args.k).filter(super::query::parse_filter(text)?))
                .with_context(|| format!("--filter on map {name:?}"))?;
            let eligible = match &req.filter {
                Some(prox_engine::keys::Filter::Keys(keys)) => Some(keys.len() as u64),
                _ => None,
            };
            progress::note(format_args!(
                "filter: {} eligible records, resolved in {:.1} ms",
                eligible.map_or_else(|| "?".into(), |e| e.to_string()),
                t.elapsed().as_secs_f64() * 1e3
            ));
            for s in &mut all {
                s.spec.filter = req.filter.clone();
            }
            Some(BenchFilter {
                text: text.as_str(),
                eligible,
            })
        }
    };
    if !args.recall.is_empty() && index.profile().is_none() {
        bail!(
            "map {name:?} has no recall profile for --recall: measure one with \
             `prox accel build --name {name} --profile 400`"
        );
    }
    let threads = args.threads.unwrap_or_else(rayon::current_num_threads) as u32;
    let mut out = Stdout::new();
    let mut records = Vec::new();
    progress::note(format_args!(
        "{:>8} {:>16} {:>8} {:>10} {:>12}",
        "path", "mode", "recall", "qps", "evals/query"
    ));
    for s in &all {
        let rec = super::build::with_threads(args.threads, || {
            let run = Run {
                threads,
                reps: args.reps,
                dataset: &dataset,
                filter: filter.as_ref(),
            };
            measure(&index, &queries, &truth, s, &run)
        })??;
        progress::note(format_args!(
            "{:>8} {:>16} {:>8.4} {:>10.0} {:>12}",
            rec.path,
            rec.mode,
            rec.recall,
            rec.qps,
            rec.mean_distance_evals
                .map(|e| format!("{e:.0}"))
                .unwrap_or_else(|| "-".into())
        ));
        out.json(&rec)?;
        out.flush()?;
        records.push(rec);
    }
    if let Some(plot_path) = &args.plot {
        if let Some(peers) = &args.peers {
            records.extend(results::read(peers)?);
        }
        draw(plot_path, &default_title(&records), &records)?;
    } else if args.peers.is_some() {
        bail!("--peers is only used with --plot");
    }
    out.flush()
}
