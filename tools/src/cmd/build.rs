//! `prox build`: build a proximity map from a vector file, optionally with
//! HNSW/PQ sidecars, and publish it under a root name.

use super::store_arg::StoreArg;
use crate::io::{Format, Row, VectorReader};
use crate::map::Published;
use crate::sysmem;
use crate::{out::Stdout, progress};
use anyhow::{bail, Context, Result};
use clap::Args;
use prox_engine::accel::{HnswParams, PqSpec};
use prox_engine::index;
use prox_engine::proximity::search::ExactLayout;
use prox_engine::proximity::{InputRecord, ProximityConfig};
use prox_engine::BlockStore;
use prox_kernels::Metric;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Examples for `prox build --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox build --store db --name gmm --input data/base.fvecs
  prox build --store db --name docs --input docs.jsonl --metric cosine --sq8
  prox build --store db --name gmm --input base.fvecs --hnsw --pq subquantizers=16
  prox build --store db --name gmm --input base.npy --hnsw max_connections=32,ef_construction=200

  prox build --store db --name big --input shards/ --memory-limit 2G --spill-dir /scratch
  gen | prox build --store db --name s --input - --input-format fvecs

Inputs: .fvecs/.bvecs/.npy (float32/16/64, int8, uint8; row i gets key =
8-byte big-endian i, empty value), .hdf5 in the ann-benchmarks layout
(--dataset train|test, default train; needs a prox built with the hdf5
feature), a directory of .npy/.fvecs/.bvecs shards
read in name order as one input, `-` for stdin (with --input-format), or JSON
lines {\"key\": hex, \"vector\": [...], \"value\": hex} (a line without a key
gets its row number the same way). The input is streamed: sorted runs spill to
--spill-dir under --memory-limit (default: half the machine's memory), and the
map is byte-identical to an in-memory build (--in-memory). A malformed row
aborts with its row number and the named root is left untouched. Sidecars
(--hnsw, --pq) hold every vector in memory: a build whose sidecars would
exceed the limit is refused up front. Prints the descriptor CID last.";

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
    /// Input vectors (.fvecs, .bvecs, .npy, .jsonl), a directory of shards,
    /// or - for standard input.
    #[arg(long)]
    pub input: PathBuf,
    /// Input format when it is not the file extension (required for -).
    #[arg(long, value_parser = parse_format)]
    pub input_format: Option<Format>,
    /// HDF5 dataset to read (ann-benchmarks: train, test; default train);
    /// `--input FILE.hdf5:DATASET` names it too.
    #[arg(long)]
    pub dataset: Option<String>,
    /// Memory the build may use, e.g. 2G (default: half the machine's).
    #[arg(long, value_parser = crate::sysmem::parse_size)]
    pub memory_limit: Option<u64>,
    /// Directory for the build's sorted runs (default: STORE.spill beside
    /// a store directory, prox-build-PID.spill in the temp directory for a
    /// bucket; removed when empty).
    #[arg(long)]
    pub spill_dir: Option<PathBuf>,
    /// Read everything into memory and build in one step (no limit).
    #[arg(long, conflicts_with = "resume")]
    pub in_memory: bool,
    /// Continue an interrupted build of NAME from its checkpoint (same
    /// options and input); without a checkpoint, build from the start.
    #[arg(long)]
    pub resume: bool,
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
    pub pq: Option<PqSpec>,
    /// Index a payload field (FIELD:TYPE, TYPE keyword, integer, float or
    /// bool; repeatable). Values that are JSON objects are payloads
    /// (docs/payloads.md).
    #[arg(long = "index", value_name = "FIELD:TYPE")]
    pub indexes: Vec<prox_engine::secondary::FieldIndex>,
    /// Do not persist the search layouts (scan arena, adaptive lists, a
    /// 4-bit PQ sidecar's fast-scan lists); the map then builds them each
    /// time it is opened.
    #[arg(long)]
    pub no_layout: bool,
    /// `localM` also persists the exact-L2 local frames of width M (L2
    /// maps; e.g. local64), `splitM` the rotated split arena, which exact
    /// queries then read at open instead of building (docs/search.md,
    /// "Exact L2").
    #[arg(long, default_value = "off", conflicts_with = "no_layout")]
    pub exact_layout: ExactLayout,
    /// Measure the recall profile (what `prox query --recall` chooses
    /// from) on this many of the map's records; 0: none.
    #[arg(long, value_name = "QUERIES", default_value_t = index::DEFAULT_PROFILE_QUERIES)]
    pub profile: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

impl BuildArgs {
    /// What to build for `n` records of `dim` dimensions: the map, the
    /// sidecars and field indexes asked for (PQ parameters resolved for
    /// that shape), and the search layouts unless `--no-layout`.
    pub fn spec(&self, dim: usize, n: u64) -> Result<index::Build> {
        let pq = self
            .pq
            .map(|p| p.resolve(dim, n))
            .transpose()
            .context("--pq")?;
        Ok(index::Build {
            config: self.config(dim as u32),
            hnsw: self.hnsw,
            pq,
            threads: self.threads,
            indexes: self.indexes.clone(),
            layouts: !self.no_layout,
            exact_layout: self.exact_layout,
        })
    }

    /// [`BuildArgs::spec`] for `n` records under the memory `limit`: the
    /// layouts are left out (said on stderr) when they would not fit.
    pub fn spec_within(&self, dim: usize, n: u64, limit: u64) -> Result<index::Build> {
        let mut build = self.spec(dim, n)?;
        let need = index::layout_memory(dim as u32, n);
        if build.layouts && need > limit {
            progress::note(format_args!(
                "not persisting the search layouts: they need about {} in memory, over the \
                 {} limit (add them later with prox accel build --layout)",
                sysmem::human(need),
                sysmem::human(limit)
            ));
            build.layouts = false;
        }
        Ok(build)
    }

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

/// `--input-format`: fvecs, bvecs, npy, jsonl or hdf5.
fn parse_format(s: &str) -> Result<Format> {
    Ok(Format::from_path(std::path::Path::new(&format!("x.{s}")))?)
}

/// Opens the build input: `--input` as `--input-format`, with the HDF5
/// dataset from `--dataset` or an `--input FILE.hdf5:DATASET` suffix.
fn open_input(args: &BuildArgs) -> Result<VectorReader> {
    let (path, suffix) = crate::io::split_dataset(&args.input);
    let dataset = args.dataset.as_deref().or(suffix.as_deref());
    Ok(VectorReader::open_dataset(
        path,
        args.input_format,
        dataset,
    )?)
}

/// Reads every row of the build input as a build record; checks happen row
/// by row (see [`crate::io`]). Returns the records and the dimension.
pub fn read_records(args: &BuildArgs) -> Result<(Vec<InputRecord>, usize)> {
    let path = &args.input;
    let mut reader = open_input(args)?;
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
    /// Seconds spent persisting the search layouts.
    pub layout_seconds: f64,
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
    Ok(to_built(built?))
}

/// The memory limit: `--memory-limit`, else half the machine's memory
/// (1 GiB when `/proc` does not tell); with the text saying where it came
/// from.
fn memory_limit(args: &BuildArgs) -> (u64, String) {
    match args.memory_limit {
        Some(l) => (l, "--memory-limit".into()),
        None => match sysmem::machine_memory() {
            Some(m) => (
                m / 2,
                format!("half of {} machine memory", sysmem::human(m)),
            ),
            None => (1 << 30, "default, machine memory unknown".into()),
        },
    }
}

/// What the build did beyond the map, for the summary.
struct Report {
    read_seconds: f64,
    phases: Vec<progress::PhaseTime>,
    spilled_bytes: u64,
    limit: Option<u64>,
}

/// Streams the input into a [`StreamBuild`] and finishes it.
fn streamed(
    args: &BuildArgs,
    store: &dyn BlockStore,
    phases: &progress::Phases,
) -> Result<(Built, usize, Report)> {
    let (limit, why) = memory_limit(args);
    progress::note(format_args!(
        "memory limit {} ({why})",
        sysmem::human(limit)
    ));
    let mut reader = open_input(args)?;
    let probe = |dim: usize, n: u64| -> Result<()> {
        if let Some(need) = index::sidecar_memory(&args.spec(dim, n)?, n) {
            if need > limit {
                bail!(
                    "the sidecars of {n} x {dim} records need about {} in memory, over the \
                     {} limit; raise --memory-limit or build without --hnsw/--pq and add \
                     them later with prox accel build",
                    sysmem::human(need),
                    sysmem::human(limit)
                );
            }
        }
        Ok(())
    };
    // Known size: refuse an oversized sidecar build before any work.
    if let (Some(d), Some(n)) = (reader.dim(), reader.len_hint()) {
        probe(d, n)?;
    }
    // Beside a store directory; for a bucket, under the temp directory (an
    // `s3://` name is no local path).
    let spill_dir = args.spill_dir.clone().unwrap_or_else(|| {
        if args.store.s3_url().is_some() {
            return std::env::temp_dir().join(format!("prox-build-{}.spill", std::process::id()));
        }
        let mut p = args.store.store.clone().into_os_string();
        p.push(".spill");
        PathBuf::from(p)
    });
    let pending = checkpoint_root(&args.name);
    let result = match resumed(
        args,
        store,
        phases,
        &mut reader,
        limit,
        &spill_dir,
        &pending,
    )? {
        Some(done) => Ok(done),
        None => stream_into(args, store, phases, reader, limit, &spill_dir, probe),
    };
    // The build removes its own files; the directory goes too unless it
    // holds something else.
    let _ = std::fs::remove_dir(&spill_dir);
    let done = result?;
    prox_engine::proximity::clear_checkpoint(store, &pending)?;
    Ok(done)
}

/// The named root a build of `name` keeps its checkpoint under.
pub fn checkpoint_root(name: &str) -> String {
    format!("{name}.pending-build")
}

/// With `--resume` and a checkpoint: finishes the build from it (the
/// input is only read for its dimension). `None` when there is nothing to
/// resume.
fn resumed(
    args: &BuildArgs,
    store: &dyn BlockStore,
    phases: &progress::Phases,
    reader: &mut VectorReader,
    limit: u64,
    spill_dir: &std::path::Path,
    pending: &str,
) -> Result<Option<(Built, usize, Report)>> {
    use prox_engine::proximity::StreamBuild;
    if !args.resume {
        return Ok(None);
    }
    let dim = match reader.dim() {
        Some(d) => d,
        None => {
            let mut row = Row::default();
            reader.next_into(&mut row)?;
            reader
                .dim()
                .with_context(|| format!("{}: no vectors", args.input.display()))?
        }
    };
    let config = args.config(dim as u32);
    config.validate().context("invalid map configuration")?;
    let Some(stream) = StreamBuild::resume(store, &config, limit, spill_dir, pending)? else {
        progress::note(format_args!(
            "no checkpoint for {}; building from the start",
            args.name
        ));
        *reader = open_input(args)?;
        return Ok(None);
    };
    progress::note(format_args!(
        "resuming {} from its checkpoint (input read and sorted already)",
        args.name
    ));
    let build = args.spec_within(dim, stream.records(), limit)?;
    let (built, stats) = index::build_streamed(store, Some(&args.name), &build, stream, phases)?;
    Ok(Some((
        to_built(built),
        dim,
        Report {
            read_seconds: 0.0,
            phases: phases.times(),
            spilled_bytes: stats.spilled_bytes,
            limit: Some(limit),
        },
    )))
}

fn to_built(built: index::Built) -> Built {
    Built {
        published: Published {
            descriptor: built.descriptor,
            hnsw: built.sidecars.hnsw,
            pq: built.sidecars.pq,
            layouts: built.layouts,
        },
        records: built.records,
        map_seconds: built.map_seconds,
        sidecar_seconds: built.sidecar_seconds,
        layout_seconds: built.layout_seconds,
    }
}

/// The read phase and the rest of a streamed build.
fn stream_into(
    args: &BuildArgs,
    store: &dyn BlockStore,
    phases: &progress::Phases,
    mut reader: VectorReader,
    limit: u64,
    spill_dir: &std::path::Path,
    probe: impl Fn(usize, u64) -> Result<()>,
) -> Result<(Built, usize, Report)> {
    use prox_engine::proximity::{Phase, Progress, StreamBuild};
    let mut row = Row::default();
    let t = Instant::now();
    phases.start(Phase::Read, reader.len_hint());
    let mut stream: Option<StreamBuild<'_>> = None;
    let mut i = 0u64;
    while reader.next_into(&mut row)? {
        if stream.is_none() {
            let config = args.config(row.vector.len() as u32);
            config.validate().context("invalid map configuration")?;
            stream = Some(
                StreamBuild::new(store, &config, limit, spill_dir)
                    .with_context(|| format!("spill directory {}", spill_dir.display()))?
                    .checkpoint_as(&checkpoint_root(&args.name))?,
            );
        }
        let s = stream.as_mut().expect("created above");
        let key = row.key.take().unwrap_or_else(|| i.to_be_bytes().to_vec());
        let value = row.value.take().unwrap_or_default();
        s.push(key, std::mem::take(&mut row.vector), value)
            .with_context(|| format!("{}: row {i}", args.input.display()))?;
        i += 1;
        if i.is_multiple_of(4096) {
            phases.advance(4096);
        }
    }
    phases.advance(i % 4096);
    phases.finish(Phase::Read);
    let read_seconds = t.elapsed().as_secs_f64();
    let dim = reader
        .dim()
        .with_context(|| format!("{}: no vectors", args.input.display()))?;
    probe(dim, i)?;
    let stream = stream.expect("a dimension implies a row");
    let build = args.spec_within(dim, i, limit)?;
    let (built, stats) = index::build_streamed(store, Some(&args.name), &build, stream, phases)?;
    Ok((
        to_built(built),
        dim,
        Report {
            read_seconds,
            phases: phases.times(),
            spilled_bytes: stats.spilled_bytes,
            limit: Some(limit),
        },
    ))
}

/// Runs `prox build`.
pub fn run(args: &BuildArgs) -> Result<()> {
    prox_engine::store::validate_root_name(&args.name)?;
    if let Some(0) = args.threads {
        bail!("--threads must be at least 1");
    }
    super::accel::check_exact_layout(args.exact_layout, args.metric)?;
    let store = args.store.open_dyn()?;
    let store_before = sysmem::dir_bytes(&args.store.store);
    let phases = progress::Phases::new(args.json);
    let (built, dim, report) = if args.in_memory {
        let t = Instant::now();
        let (records, dim) = read_records(args)?;
        let read_seconds = t.elapsed().as_secs_f64();
        let build = args.spec(dim, records.len() as u64)?;
        build
            .config
            .validate()
            .context("invalid map configuration")?;
        let built = build_and_publish(&*store, &args.name, &build, records)
            .with_context(|| format!("building {} from {}", args.name, args.input.display()))?;
        let report = Report {
            read_seconds,
            phases: Vec::new(),
            spilled_bytes: 0,
            limit: None,
        };
        (built, dim, report)
    } else {
        streamed(args, &*store, &phases)
            .with_context(|| format!("building {} from {}", args.name, args.input.display()))?
    };
    let profiled = crate::map::profile(Arc::clone(&store), &args.name, args.profile)?;
    let read_seconds = report.read_seconds;
    let store_written = sysmem::dir_bytes(&args.store.store).saturating_sub(store_before);
    let peak = sysmem::peak_rss();
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
            "layouts": {
                "arena": p.layouts.arena.map(|c| c.to_hex()),
                "adaptive": p.layouts.adaptive.map(|c| c.to_hex()),
                "ivf": p.layouts.ivf.map(|c| c.to_hex()),
                "frames": p.layouts.frames.map(|c| c.to_hex()),
                "rotated": p.layouts.rotated.map(|c| c.to_hex()),
            },
            "layout_seconds": built.layout_seconds,
            "profile": profiled.as_ref().map(|p| p.cid.to_hex()),
            "profile_seconds": profiled.as_ref().map(|p| p.seconds),
            "phases": report.phases,
            "memory_limit_bytes": report.limit,
            "peak_rss_bytes": peak,
            "spilled_bytes": report.spilled_bytes,
            "store_bytes_written": store_written,
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
            } + &if p.layouts.is_empty() {
                String::new()
            } else {
                format!(", +{:.1}s layouts", built.layout_seconds)
            } + &profiled.as_ref().map_or(String::new(), |p| format!(
                ", +{:.1}s recall profile",
                p.seconds
            ))
        ));
        if !report.phases.is_empty() {
            let per: Vec<String> = report
                .phases
                .iter()
                .map(|t| format!("{} {:.1}s", t.phase, t.seconds))
                .collect();
            progress::note(format_args!(
                "phases: {}; peak RSS {}; spilled {}; store +{}",
                per.join(", "),
                peak.map_or_else(|| "unknown".into(), sysmem::human),
                sysmem::human(report.spilled_bytes),
                sysmem::human(store_written)
            ));
        }
        if let Some(h) = p.hnsw {
            out.line(format_args!("hnsw {h}"))?;
        }
        if let Some(q) = p.pq {
            out.line(format_args!("pq {q}"))?;
        }
        for (kind, cid) in [
            ("arena", p.layouts.arena),
            ("adaptive", p.layouts.adaptive),
            ("ivf", p.layouts.ivf),
            ("frames", p.layouts.frames),
            ("rotated", p.layouts.rotated),
        ] {
            if let Some(c) = cid {
                out.line(format_args!("layout.{kind} {c}"))?;
            }
        }
        if let Some(p) = &profiled {
            out.line(format_args!("layout.profile {}", p.cid))?;
        }
        out.line(p.descriptor)?;
    }
    out.flush()
}
