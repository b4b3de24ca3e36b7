//! `prox datagen`: seeded synthetic datasets with exact ground truth.

use crate::gmm::{self, GmmSpec};
use crate::{io, out::Stdout, progress};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use prox_kernels::Metric;
use std::path::PathBuf;
use std::time::Instant;

/// Examples for `prox datagen --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox datagen --n 100000 --dim 128 --queries 1000 --seed 1 --out data/gmm-100k
  prox datagen --n 20000 --dim 384 --metric ip --k 10 --out data/ip-20k --json

Writes DIR/base.fvecs, DIR/query.fvecs, DIR/gt.ivecs (exact top-k base ids per
query, 0-based, by canonical score then id) and DIR/meta.json. The same
arguments always produce byte-identical files, on any machine and thread count.";

/// Dataset kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Gaussian mixture of low-rank clusters.
    Gmm,
}

/// The size, seed and metric of a generated Gaussian-mixture dataset
/// (shared by `prox datagen` and `prox demo`).
#[derive(Debug, Clone, Args)]
pub struct GmmArgs {
    /// Number of base vectors.
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    /// Dimension.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Number of queries.
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Metric of the data and its ground truth: l2, cosine or ip (cosine and ip
    /// produce unit vectors).
    #[arg(long, default_value = "l2", value_parser = super::parse_metric)]
    pub metric: Metric,
}

impl GmmArgs {
    /// The mixture these arguments describe (default cluster count).
    pub fn spec(&self) -> GmmSpec {
        GmmSpec::new(self.n, self.dim, self.queries, self.seed, self.metric)
    }
}

/// Arguments of `prox datagen`.
#[derive(Debug, Clone, Args)]
pub struct DatagenArgs {
    /// Dataset kind.
    #[arg(long, value_enum, default_value = "gmm")]
    pub kind: Kind,
    /// Size, seed and metric.
    #[command(flatten)]
    pub data: GmmArgs,
    /// Neighbours per query in gt.ivecs.
    #[arg(long, default_value_t = 100)]
    pub k: usize,
    /// Mixture components (default: n/100 clamped to 8..=1000).
    #[arg(long)]
    pub clusters: Option<usize>,
    /// Output directory (created if absent).
    #[arg(long)]
    pub out: PathBuf,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
}

impl DatagenArgs {
    /// The mixture these arguments describe.
    pub fn spec(&self) -> GmmSpec {
        let mut spec = self.data.spec();
        if let Some(c) = self.clusters {
            spec.clusters = c;
        }
        spec
    }
}

/// Runs `prox datagen`.
pub fn run(args: &DatagenArgs) -> Result<()> {
    let shape = &args.data;
    if shape.n == 0 || shape.dim == 0 || shape.queries == 0 || args.k == 0 {
        bail!("--n, --dim, --queries and --k must all be at least 1");
    }
    if shape.dim > io::MAX_DIM {
        bail!("--dim {} exceeds the maximum {}", shape.dim, io::MAX_DIM);
    }
    if shape.n > i32::MAX as usize {
        bail!("--n {} exceeds what .ivecs ids can hold (i32)", shape.n);
    }
    if args.clusters == Some(0) {
        bail!("--clusters must be at least 1");
    }
    let spec = args.spec();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("{}: cannot create directory", args.out.display()))?;
    let t0 = Instant::now();
    let sp = progress::spinner("generating vectors");
    let data = gmm::generate(&spec);
    sp.finish_and_clear();
    let gen_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let pb = progress::bar(shape.queries as u64, "ground truth", "queries");
    let gt = gmm::ground_truth(&data.base, &data.queries, shape.metric, args.k, &|| {
        pb.inc(1)
    });
    pb.finish_and_clear();
    let gt_secs = t1.elapsed().as_secs_f64();

    let base = args.out.join("base.fvecs");
    let query = args.out.join("query.fvecs");
    let gt_path = args.out.join("gt.ivecs");
    io::write_fvecs(&base, &data.base)?;
    io::write_fvecs(&query, &data.queries)?;
    io::write_ivecs(&gt_path, &gt)?;
    let meta = serde_json::json!({
        "generator": "prox datagen",
        "kind": "gmm",
        "n": spec.n,
        "dim": spec.dim,
        "queries": spec.queries,
        "k": args.k.min(spec.n),
        "seed": spec.seed,
        "metric": spec.metric.name(),
        "clusters": spec.clusters,
        "rank": spec.rank,
        "spread": spec.spread,
        "noise": spec.noise,
        "ids": "0-based row numbers of base.fvecs; prox build keys row i as 8-byte big-endian i",
        "files": {"base": "base.fvecs", "queries": "query.fvecs", "gt": "gt.ivecs"},
    });
    let meta_path = args.out.join("meta.json");
    let mut meta_bytes = serde_json::to_vec_pretty(&meta)?;
    meta_bytes.push(b'\n');
    std::fs::write(&meta_path, meta_bytes)
        .with_context(|| format!("{}: cannot write", meta_path.display()))?;

    let mut out = Stdout::new();
    if args.json {
        out.json(&serde_json::json!({
            "out": args.out.display().to_string(),
            "n": spec.n, "dim": spec.dim, "queries": spec.queries, "k": args.k.min(spec.n),
            "metric": spec.metric.name(), "seed": spec.seed,
            "generate_seconds": gen_secs, "ground_truth_seconds": gt_secs,
        }))?;
    } else {
        out.line(format_args!(
            "wrote {} ({} x {}, {} queries, top-{} ground truth, {}) in {:.1}s + {:.1}s ground truth",
            args.out.display(),
            spec.n,
            spec.dim,
            spec.queries,
            args.k.min(spec.n),
            spec.metric,
            gen_secs,
            gt_secs
        ))?;
    }
    out.flush()
}
