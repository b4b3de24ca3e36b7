//! `prox update`: applies puts and deletes to a named map through the
//! engine's write path (`Index::apply` + `Index::commit`), batch by batch.
//!
//! Input is either a JSON-lines edit file (`{"op": "put", "key": hex,
//! "vector": [...], "value": hex}` / `{"op": "del", "key": hex}`) or a
//! vector file (`.fvecs`, `.bvecs`, `.npy`) of upserts with empty values,
//! keyed by a key file (`--keys`, one hex key per line) or consecutively
//! from `--start-key N` (8-byte big-endian, the keys `prox build` gives
//! vector files). Each batch becomes a new snapshot whose sidecars are
//! carried forward (docs/writes.md) and is published by compare-and-swap;
//! when another writer published meanwhile, the batch is re-applied to the
//! newer snapshot (`Index::write`), or with `--no-rebase` the update fails
//! instead. Nothing of either writer is lost. Per-batch time and bytes
//! written go to stderr (or one JSON line each); the final descriptor CID
//! is printed last.

use super::store_arg::StoreArg;
use crate::io::{parse_hex, Format, JsonLines, Row, VectorReader};
use crate::{out::Stdout, progress};
use anyhow::{bail, Context, Result};
use clap::Args;
use prox_engine::index::{
    Batch, CanonicalHnsw, DropReason, Index, Options, SidecarWrite, WriteOptions, WriteReport,
    DEFAULT_REBASES,
};
use prox_engine::BlockStore;
use serde::Deserialize;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Examples for `prox update --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox update --store db --name docs --input edits.jsonl
  prox update --store db --name gmm --input more.fvecs --start-key 200000 --batch-size 1000
  prox update --store db --name docs --input new.npy --keys new-keys.txt

  edits.jsonl:
    {\"op\": \"put\", \"key\": \"00000000000003e8\", \"vector\": [0.1, 0.2, 0.3], \"value\": \"68656c6c6f\"}
    {\"op\": \"del\", \"key\": \"0000000000000007\"}

Keys and values are hex. A key may appear once per batch; deleting an absent
key is a no-op. HNSW and PQ sidecars are carried forward; a canonical HNSW
sidecar needs --canonical-hnsw rebuild or drop. Prints the new descriptor
CID last.";

/// Arguments of `prox update`.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Root name of the map.
    #[arg(long)]
    pub name: String,
    /// JSON-lines edits, or vectors to upsert: .fvecs, .bvecs, .npy, a
    /// directory of such shards, or FILE.hdf5[:DATASET] (ann-benchmarks
    /// layout, dataset `train` by default; needs the `hdf5` feature).
    #[arg(long)]
    pub input: PathBuf,
    /// Keys of a vector file's rows: one hex key per line, in row order.
    #[arg(long, conflicts_with = "start_key")]
    pub keys: Option<PathBuf>,
    /// Row i of a vector file gets key N + i (8-byte big-endian).
    #[arg(long)]
    pub start_key: Option<u64>,
    /// Edits per batch, each applied and published on its own (0: the whole
    /// input in one batch).
    #[arg(long, default_value_t = 0)]
    pub batch_size: usize,
    /// What to do with a canonical (flag 01) HNSW sidecar, which cannot be
    /// updated incrementally: refuse the update, rebuild it, or drop it.
    #[arg(long, default_value = "refuse", value_parser = parse_policy)]
    pub canonical_hnsw: CanonicalHnsw,
    /// Fail when another writer published the map between reading it and
    /// publishing a batch, instead of re-applying the batch to the newer
    /// version (the default: a batch sets its keys' final state).
    #[arg(long)]
    pub no_rebase: bool,
    /// When the writes made the map's recall profile stale (a tenth of
    /// the records changed since it was measured), measure it again on this
    /// many records at the end; 0: keep the carried one.
    #[arg(long, value_name = "QUERIES", default_value_t = prox_engine::index::DEFAULT_PROFILE_QUERIES)]
    pub profile: usize,
    /// One JSON line per batch and a summary line instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_policy(s: &str) -> Result<CanonicalHnsw, String> {
    s.parse().map_err(|e: prox_engine::Error| e.to_string())
}

/// One line of an edit file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Edit {
    op: String,
    key: String,
    #[serde(default)]
    vector: Option<Vec<f32>>,
    #[serde(default)]
    value: Option<String>,
}

/// Where the edits come from.
enum Source {
    Lines(JsonLines<Edit>, PathBuf),
    Vectors { reader: VectorReader, keys: Keys },
}

/// Keys of a vector file's rows.
enum Keys {
    File {
        lines: std::io::Lines<std::io::BufReader<std::fs::File>>,
        path: PathBuf,
        line: u64,
    },
    From(u64),
}

impl Keys {
    fn next(&mut self, row: u64) -> Result<Vec<u8>> {
        match self {
            Keys::From(start) => {
                let k = start
                    .checked_add(row)
                    .context("--start-key plus the row number overflows u64")?;
                Ok(k.to_be_bytes().to_vec())
            }
            Keys::File { lines, path, line } => {
                *line += 1;
                let text = lines
                    .next()
                    .with_context(|| {
                        format!("{}: no key for row {row} (too few keys)", path.display())
                    })?
                    .with_context(|| format!("{}: line {line}", path.display()))?;
                parse_hex("key", text.trim())
                    .with_context(|| format!("{}: line {line}", path.display()))
            }
        }
    }

    /// Fails if the key file has keys left over.
    fn finish(&mut self) -> Result<()> {
        if let Keys::File { lines, path, line } = self {
            if let Some(extra) = lines.next() {
                if !extra?.trim().is_empty() {
                    bail!(
                        "{}: line {}: more keys than the input has rows",
                        path.display(),
                        *line + 1
                    );
                }
            }
        }
        Ok(())
    }
}

impl Source {
    fn open(args: &UpdateArgs) -> Result<Source> {
        let (file, _) = crate::io::split_dataset(&args.input);
        if Format::from_path(&file)? == Format::Jsonl {
            if args.keys.is_some() || args.start_key.is_some() {
                bail!(
                    "{}: --keys and --start-key apply to vector files, not JSON-lines edits",
                    args.input.display()
                );
            }
            return Ok(Source::Lines(
                JsonLines::open(&args.input)?,
                args.input.clone(),
            ));
        }
        let keys = match (&args.keys, args.start_key) {
            (Some(p), None) => {
                let f = std::fs::File::open(p)
                    .with_context(|| format!("{}: cannot open", p.display()))?;
                Keys::File {
                    lines: std::io::BufReader::new(f).lines(),
                    path: p.clone(),
                    line: 0,
                }
            }
            (None, Some(n)) => Keys::From(n),
            _ => bail!(
                "{}: a vector file needs --keys FILE or --start-key N",
                args.input.display()
            ),
        };
        Ok(Source::Vectors {
            reader: VectorReader::open(&args.input)?,
            keys,
        })
    }

    /// The next batch of at most `size` edits (`0`: all); empty at the end.
    fn next_batch(&mut self, size: usize) -> Result<Batch> {
        let mut batch = Batch::new();
        let full = |b: &Batch| size > 0 && b.len() >= size;
        match self {
            Source::Lines(lines, path) => {
                while !full(&batch) {
                    let Some(item) = lines.next() else { break };
                    let (line, e) = item?;
                    let at = || format!("{}: line {line}", path.display());
                    let key = parse_hex("key", &e.key).with_context(at)?;
                    match e.op.as_str() {
                        "put" => {
                            let Some(vector) = e.vector else {
                                bail!("{}: a put needs a \"vector\"", at());
                            };
                            let value = match &e.value {
                                Some(v) => parse_hex("value", v).with_context(at)?,
                                None => Vec::new(),
                            };
                            batch.upsert(key, vector, value);
                        }
                        "del" | "delete" => {
                            if e.vector.is_some() || e.value.is_some() {
                                bail!("{}: a del takes only a \"key\"", at());
                            }
                            batch.delete(key);
                        }
                        other => bail!("{}: unknown op {other:?} (expected put or del)", at()),
                    }
                }
            }
            Source::Vectors { reader, keys } => {
                let mut row = Row::default();
                while !full(&batch) {
                    let index = reader.rows_read();
                    if !reader.next_into(&mut row)? {
                        keys.finish()?;
                        break;
                    }
                    let key = keys.next(index)?;
                    batch.upsert(key, std::mem::take(&mut row.vector), Vec::new());
                }
            }
        }
        Ok(batch)
    }
}

/// Sums of the batches' reports.
#[derive(Debug, Default)]
struct Totals {
    inserted: u64,
    moved: u64,
    value_only: u64,
    deleted: u64,
    absent_deletes: u64,
    blocks_written: u64,
    bytes_written: u64,
}

impl Totals {
    fn add(&mut self, r: &WriteReport) {
        self.inserted += r.inserted;
        self.moved += r.moved;
        self.value_only += r.value_only;
        self.deleted += r.deleted;
        self.absent_deletes += r.absent_deletes;
        self.blocks_written += r.blocks_written;
        self.bytes_written += r.bytes_written;
    }
}

/// A sidecar's fate in a word (JSON) and in a phrase (text).
fn sidecar(w: &SidecarWrite) -> (&'static str, String) {
    match w {
        SidecarWrite::Absent => ("absent", "none".into()),
        SidecarWrite::Unchanged => ("unchanged", "unchanged".into()),
        SidecarWrite::Rebound => ("rebound", "rebound (no vector changed)".into()),
        SidecarWrite::Updated {
            inserted,
            removed,
            relinked,
        } => (
            "updated",
            format!("+{inserted} -{removed} ({relinked} relinked)"),
        ),
        SidecarWrite::Rebuilt => ("rebuilt", "rebuilt canonically".into()),
        SidecarWrite::Dropped(DropReason::Requested) => ("dropped", "dropped (as asked)".into()),
        SidecarWrite::Dropped(DropReason::Empty) => ("dropped", "dropped (map empty)".into()),
        SidecarWrite::Dropped(DropReason::Derived) => (
            "dropped",
            "dropped (derived from the old hierarchy; `prox accel build --layout` persists it again)"
                .into(),
        ),
        _ => ("other", format!("{w:?}")),
    }
}

/// Runs `prox update`.
pub fn run(args: &UpdateArgs) -> Result<()> {
    prox_engine::store::validate_root_name(&args.name)?;
    let mut source = Source::open(args)?;
    let store: Arc<dyn BlockStore> = args.store.open_dyn()?;
    let open = Options {
        warm: false,
        ..Options::default()
    };
    let mut index = Index::open(Arc::clone(&store), &args.name, &open)
        .with_context(|| format!("map {:?}", args.name))?;
    let previous = index.descriptor();
    let options = WriteOptions {
        canonical_hnsw: args.canonical_hnsw,
        ..WriteOptions::default()
    };
    let mut out = Stdout::new();
    let mut totals = Totals::default();
    let (mut batches, mut edits) = (0u64, 0u64);
    let mut stale = false;
    let started = Instant::now();
    loop {
        let batch = source.next_batch(args.batch_size)?;
        if batch.is_empty() {
            break;
        }
        let t = Instant::now();
        let at = || {
            format!(
                "{}: batch {batches} (edits {edits}..{})",
                args.input.display(),
                edits + batch.len() as u64
            )
        };
        let rebases = if args.no_rebase { 0 } else { DEFAULT_REBASES };
        let written = index
            .write(&args.name, &batch, &options, &open, rebases)
            .with_context(at)
            .with_context(|| format!("publishing {:?}", args.name))?;
        let (applied, descriptor) = (written.applied, written.descriptor);
        let seconds = t.elapsed().as_secs_f64();
        let r = &applied.report;
        let apply_seconds = r.elapsed.as_secs_f64();
        let (hnsw, hnsw_text) = sidecar(&r.hnsw);
        let (pq, pq_text) = sidecar(&r.pq);
        let (layout, layout_text) = sidecar(&r.layout);
        let (ivf, ivf_text) = sidecar(&r.ivf);
        let (profile, profile_text) = sidecar(&r.profile);
        stale = r.profile_stale;
        if args.json {
            out.json(&serde_json::json!({
                "batch": batches,
                "edits": batch.len(),
                "inserted": r.inserted,
                "moved": r.moved,
                "value_only": r.value_only,
                "deleted": r.deleted,
                "absent_deletes": r.absent_deletes,
                "blocks_written": r.blocks_written,
                "bytes_written": r.bytes_written,
                "hnsw": hnsw,
                "pq": pq,
                "layout": layout,
                "ivf_layout": ivf,
                "profile": profile,
                "apply_seconds": apply_seconds,
                "sidecar_seconds": r.sidecar_time.as_secs_f64(),
                "map_nodes_encoded": r.map.nodes_encoded,
                "map_records_reassigned": r.map.records_reassigned,
                "map_full_rebuild": r.map.full_rebuild,
                "seconds": seconds,
                "rebased": written.rebased,
                "records": applied.index.len(),
                "descriptor": descriptor.to_hex(),
            }))?;
        } else {
            let rebased = match written.rebased {
                0 => String::new(),
                n => format!(" (re-applied {n}x: another writer published meanwhile)"),
            };
            progress::note(format_args!(
                "{}: batch {batches}: {} edits ({} inserted, {} moved, {} value-only, {} deleted) in {seconds:.3}s (apply {apply_seconds:.3}s){rebased}, {} blocks / {} bytes written; hnsw {hnsw_text}, pq {pq_text}, layout {layout_text}, ivf layout {ivf_text}, recall profile {profile_text}; {} records",
                args.name,
                batch.len(),
                r.inserted,
                r.moved,
                r.value_only,
                r.deleted,
                r.blocks_written,
                r.bytes_written,
                applied.index.len()
            ));
        }
        totals.add(r);
        batches += 1;
        edits += batch.len() as u64;
        index = applied.index;
    }
    // A tenth of the map changed since the recall profile was measured:
    // measure the published snapshot again.
    let profiled = match stale {
        true => crate::map::profile(Arc::clone(&store), &args.name, args.profile)?,
        false => None,
    };
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        out.json(&serde_json::json!({
            "profile_remeasured": profiled.as_ref().map(|p| p.cid.to_hex()),
            "name": args.name,
            "batches": batches,
            "edits": edits,
            "inserted": totals.inserted,
            "moved": totals.moved,
            "value_only": totals.value_only,
            "deleted": totals.deleted,
            "absent_deletes": totals.absent_deletes,
            "blocks_written": totals.blocks_written,
            "bytes_written": totals.bytes_written,
            "records": index.len(),
            "previous": previous.to_hex(),
            "descriptor": index.descriptor().to_hex(),
            "hnsw": index.sidecars().hnsw.map(|c| c.to_hex()),
            "pq": index.sidecars().pq.map(|c| c.to_hex()),
            "seconds": seconds,
        }))?;
    } else {
        progress::note(format_args!(
            "{}: {edits} edits in {batches} batches, {seconds:.2}s; {} bytes written; {} records{}",
            args.name,
            totals.bytes_written,
            index.len(),
            profiled.as_ref().map_or(String::new(), |p| format!(
                "; recall profile measured again in {:.1}s",
                p.seconds
            ))
        ));
        out.line(index.descriptor())?;
    }
    out.flush()
}
