//! `prox build`: build a proximity map from a vector file, optionally with
//! HNSW/PQ sidecars, and publish it under a root name.

use super::store_arg::StoreArg;
use crate::io::{Row, VectorReader};
use crate::map::Published;
use crate::{out::Stdout, progress};
use anyhow::{bail, Context, Result};
use clap::Args;
use prox_engine::accel::{HnswParams, PqParams};
use prox_engine::index;
use prox_engine::proximity::{InputRecord, ProximityConfig};
use prox_engine::BlockStore;
use prox_kernels::Metric;
use std::path::PathBuf;
use std::time::Instant;

/// Examples for `prox build --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox build --store db --name gmm --input data/base.fvecs
  prox build --store db --name docs --input docs.jsonl --metric cosine --sq8
  prox build --store db --name gmm --input base.fvecs --hnsw --pq subquantizers=16
  prox build --store db --name gmm --input base.npy --hnsw max_connections=32,ef_construction=200

Inputs: .fvecs/.bvecs/.npy (row i gets key = 8-byte big-endian i, empty value)
or JSON lines {\"key\": hex, \"vector\": [...], \"value\": hex} (a line without a
key gets its row number the same way). The whole input is read and checked
before anything is built; a malformed row aborts with its row number and the
named root is left untouched. Prints the descriptor CID last.";

/// Default SQ8 group size when `--sq8` is given without `--sq8-group`.
pub use prox_engine::index::DEFAULT_SQ8_GROUP;

/// Arguments of `prox build`.
#[derive(Debug, Clone, Args)]
pub struct BuildArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Root name to publish the map under.
    #[arg(long)]
    pub name: String,
    /// Input vectors (.fvecs, .bvecs, .npy, .jsonl).
    #[arg(long)]
    pub input: PathBuf,
    /// Metric: l2, cosine or ip.
    #[arg(long, default_value = "l2", value_parser = super::parse_metric)]
    pub metric: Metric,
    /// Store node-local SQ8 codes (PQS8) for faster traversal.
    #[arg(long)]
    pub sq8: bool,
    /// SQ8 group size (components per scale); implies --sq8.
    #[arg(long)]
    pub sq8_group: Option<u32>,
    /// Build threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// log2 of the expected chunk size of the level hierarchy.
    #[arg(long, default_value_t = 8)]
    pub log_chunk_size: u8,
    /// Seed of the level hash.
    #[arg(long, default_value_t = 0)]
    pub level_hash_seed: u64,
    /// Smallest PRXN page before overflow paging may split.
    #[arg(long, default_value_t = 4096)]
    pub min_page_bytes: u32,
    /// Target PRXN page size.
    #[arg(long, default_value_t = 65536)]
    pub target_page_bytes: u32,
    /// Largest PRXN page.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub max_page_bytes: u32,
    /// Seed of the overflow page hash.
    #[arg(long, default_value_t = 0)]
    pub overflow_hash_seed: u64,
    /// Vectors larger than this many bytes are stored externally (PRXV).
    #[arg(long, default_value_t = 65536)]
    pub inline_threshold_bytes: u32,
    /// Also build an HNSW sidecar; optional k=v,... (see prox accel --help).
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_parser = super::accel::parse_hnsw)]
    pub hnsw: Option<HnswParams>,
    /// Also build a PQ sidecar; optional k=v,... (see prox accel --help).
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_parser = super::accel::parse_pq)]
    pub pq: Option<PqParams>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

impl BuildArgs {
    /// The map configuration for `dims` dimensions.
    pub fn config(&self, dims: u32) -> ProximityConfig {
        let mut c = ProximityConfig::new(dims);
        c.metric = self.metric;
        c.log_chunk_size = self.log_chunk_size;
        c.level_hash_seed = self.level_hash_seed;
        c.min_page_bytes = self.min_page_bytes;
        c.target_page_bytes = self.target_page_bytes;
        c.max_page_bytes = self.max_page_bytes;
        c.overflow_hash_seed = self.overflow_hash_seed;
        c.inline_threshold_bytes = self.inline_threshold_bytes;
        if self.sq8 || self.sq8_group.is_some() {
            c.sq8_group_size = Some(self.sq8_group.unwrap_or(DEFAULT_SQ8_GROUP));
        }
        c
    }
}

/// Reads every row of `path` as a build record; checks happen row by row
/// (see [`crate::io`]). Returns the records and the dimension.
pub fn read_records(path: &std::path::Path) -> Result<(Vec<InputRecord>, usize)> {
    let mut reader = VectorReader::open(path)?;
    let mut records = Vec::new();
    let pb = progress::bar(reader.len_hint().unwrap_or(0), "reading", "rows");
    let mut row = Row::default();
    while reader.next_into(&mut row)? {
        if records.is_empty() {
            if let Some(n) = reader.len_hint() {
                pb.set_length(n);
                records.reserve(n as usize);
            }
        }
        let i = records.len() as u64;
        let key = row.key.take().unwrap_or_else(|| i.to_be_bytes().to_vec());
        let value = row.value.take().unwrap_or_default();
        records.push((key, std::mem::take(&mut row.vector), value));
        pb.inc(1);
    }
    pb.finish_and_clear();
    let dim = reader
        .dim()
        .with_context(|| format!("{}: no vectors", path.display()))?;
    Ok((records, dim))
}

/// Runs `f` on a rayon pool of `threads` threads (or the global pool).
pub fn with_threads<T: Send>(threads: Option<usize>, f: impl FnOnce() -> T + Send) -> Result<T> {
    match threads {
        None => Ok(f()),
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => Ok(rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .context("cannot start the thread pool")?
            .install(f)),
    }
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct Built {
    /// Descriptor and sidecar CIDs.
    pub published: Published,
    /// Records.
    pub records: u64,
    /// Seconds spent in the map build.
    pub map_seconds: f64,
    /// Seconds spent building sidecars.
    pub sidecar_seconds: f64,
}

/// Builds a map (and sidecars) from records into `store` and publishes it
/// as `name`, through the engine's one build path
/// ([`prox_engine::index::build()`]).
pub fn build_and_publish(
    store: &dyn BlockStore,
    name: &str,
    build: &index::Build,
    records: Vec<InputRecord>,
) -> Result<Built> {
    let sp = progress::spinner(&format!("building map of {} records", records.len()));
    let built = index::build(store, Some(name), build, records);
    sp.finish_and_clear();
    let built = built?;
    Ok(Built {
        published: Published {
            descriptor: built.descriptor,
            hnsw: built.sidecars.hnsw,
            pq: built.sidecars.pq,
        },
        records: built.records,
        map_seconds: built.map_seconds,
        sidecar_seconds: built.sidecar_seconds,
    })
}

/// Runs `prox build`.
pub fn run(args: &BuildArgs) -> Result<()> {
    prox_engine::store::validate_root_name(&args.name)?;
    let t = Instant::now();
    let (records, dim) = read_records(&args.input)?;
    let read_seconds = t.elapsed().as_secs_f64();
    let config = args.config(dim as u32);
    config.validate().context("invalid map configuration")?;
    let store = args.store.open_dyn()?;
    let build = index::Build {
        config,
        hnsw: args.hnsw,
        pq: args.pq,
        threads: args.threads,
    };
    let built = build_and_publish(store.as_ref(), &args.name, &build, records)
        .with_context(|| format!("building {} from {}", args.name, args.input.display()))?;
    let p = &built.published;
    let mut out = Stdout::new();
    if args.json {
        out.json(&serde_json::json!({
            "name": args.name,
            "records": built.records,
            "dims": dim,
            "metric": args.metric.name(),
            "descriptor": p.descriptor.to_hex(),
            "hnsw": p.hnsw.map(|c| c.to_hex()),
            "pq": p.pq.map(|c| c.to_hex()),
            "read_seconds": read_seconds,
            "build_seconds": built.map_seconds,
            "sidecar_seconds": built.sidecar_seconds,
        }))?;
    } else {
        progress::note(format_args!(
            "built {} ({} x {}, {}) in {:.1}s (+{:.1}s reading{})",
            args.name,
            built.records,
            dim,
            args.metric,
            built.map_seconds,
            read_seconds,
            if p.hnsw.is_some() || p.pq.is_some() {
                format!(", +{:.1}s sidecars", built.sidecar_seconds)
            } else {
                String::new()
            }
        ));
        if let Some(h) = p.hnsw {
            out.line(format_args!("hnsw {h}"))?;
        }
        if let Some(q) = p.pq {
            out.line(format_args!("pq {q}"))?;
        }
        out.line(p.descriptor)?;
    }
    out.flush()
}
