//! `prox bench`: the map benchmark (recall vs QPS sweeps) and its
//! sub-benchmarks.
//!
//! Records follow the JSON-lines schema of [`crate::results`] (documented
//! in docs/cli.md), shared with the peer script benches/peers/peers.py.

use crate::{out::Stdout, plot, progress, results};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Examples for `prox bench --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox bench plot --results prox.jsonl --results peers.jsonl --plot recall-qps.svg
";

/// Arguments of `prox bench`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    /// A sub-benchmark; without one, benchmarks a map.
    #[command(subcommand)]
    pub sub: Option<BenchSub>,
}

/// Sub-benchmarks of `prox bench`.
#[derive(Debug, Subcommand)]
pub enum BenchSub {
    /// Plot saved result files (prox bench and peers.py output) as recall vs QPS.
    #[command(after_help = PLOT_EXAMPLES)]
    Plot(PlotArgs),
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
        Some(BenchSub::Plot(p)) => run_plot(p),
        None => bail!("choose a benchmark: see prox bench --help"),
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
