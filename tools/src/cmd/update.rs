//! `prox update`: applies one batch of puts and deletes to a named map.
//!
//! The batch is a JSON-lines file, one edit per line:
//! `{"op": "put", "key": hex, "vector": [...], "value": hex}` or
//! `{"op": "del", "key": hex}`. It is applied with
//! `ProximityMap::apply` as a single mutation (the result equals a fresh
//! build of the resulting records), the new descriptor is published under
//! the same name, and its CID is printed last. HNSW/PQ sidecars describe
//! the old descriptor, so they are dropped from the root (rebuild them with
//! `prox accel`).

use super::store_arg::StoreArg;
use crate::io::{parse_hex, JsonLines};
use crate::map::{self, Published};
use crate::{out::Stdout, progress};
use anyhow::{bail, Context, Result};
use clap::Args;
use prox_engine::proximity::{Mutation, ProximityMap};
use prox_engine::BlockStore;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Instant;

/// Examples for `prox update --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox update --store db --name docs --input edits.jsonl

  edits.jsonl:
    {\"op\": \"put\", \"key\": \"00000000000003e8\", \"vector\": [0.1, 0.2, 0.3], \"value\": \"68656c6c6f\"}
    {\"op\": \"del\", \"key\": \"0000000000000007\"}

Keys and values are hex. A key may appear once per batch; deleting an absent
key is a no-op. Prints the new descriptor CID last.";

/// Arguments of `prox update`.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Root name of the map.
    #[arg(long)]
    pub name: String,
    /// JSON-lines batch of `put`/`del` edits.
    #[arg(long)]
    pub input: PathBuf,
    /// Print a JSON summary instead of the CID.
    #[arg(long)]
    pub json: bool,
}

/// One line of the batch file.
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

fn read_batch(path: &std::path::Path) -> Result<Vec<Mutation>> {
    let lines = JsonLines::<Edit>::open(path)?;
    let mut out = Vec::new();
    for item in lines {
        let (line, e) = item?;
        let at = || format!("{}: line {line}", path.display());
        let key = parse_hex("key", &e.key).with_context(at)?;
        out.push(match e.op.as_str() {
            "put" => {
                let Some(vector) = e.vector else {
                    bail!("{}: a put needs a \"vector\"", at());
                };
                let value = match &e.value {
                    Some(v) => parse_hex("value", v).with_context(at)?,
                    None => Vec::new(),
                };
                Mutation::Put { key, vector, value }
            }
            "del" | "delete" => {
                if e.vector.is_some() || e.value.is_some() {
                    bail!("{}: a del takes only a \"key\"", at());
                }
                Mutation::Delete { key }
            }
            other => bail!("{}: unknown op {other:?} (expected put or del)", at()),
        });
    }
    Ok(out)
}

/// Runs `prox update`.
pub fn run(args: &UpdateArgs) -> Result<()> {
    prox_engine::store::validate_root_name(&args.name)?;
    let batch = read_batch(&args.input)?;
    let store = args.store.open()?;
    let published = map::resolve(&store, &args.name)?;
    let map = ProximityMap::load(&store, published.descriptor)
        .with_context(|| format!("map {:?} ({})", args.name, published.descriptor))?;
    let t = Instant::now();
    let edits = batch.len();
    let (next, stats) = map
        .apply_with_stats(batch)
        .with_context(|| format!("applying {}", args.input.display()))?;
    let seconds = t.elapsed().as_secs_f64();
    store.commit()?;
    let dropped = published.hnsw.is_some() || published.pq.is_some();
    map::publish(
        &store,
        &args.name,
        &Published {
            descriptor: next.descriptor_cid(),
            hnsw: None,
            pq: None,
        },
    )?;
    let mut out = Stdout::new();
    if args.json {
        out.json(&serde_json::json!({
            "name": args.name,
            "edits": edits,
            "inserted": stats.inserted,
            "moved": stats.moved,
            "value_only": stats.value_only,
            "deleted": stats.deleted,
            "hierarchy_rebuilt": stats.hierarchy_rebuilt,
            "full_rebuild": stats.full_rebuild,
            "nodes_decoded": stats.nodes_decoded,
            "nodes_encoded": stats.nodes_encoded,
            "records_reassigned": stats.records_reassigned,
            "records": next.len(),
            "previous": published.descriptor.to_hex(),
            "descriptor": next.descriptor_cid().to_hex(),
            "seconds": seconds,
            "sidecars_dropped": dropped,
        }))?;
    } else {
        progress::note(format_args!(
            "{}: {edits} edits ({} inserted, {} moved, {} value-only, {} deleted) in {seconds:.2}s; {} records",
            args.name, stats.inserted, stats.moved, stats.value_only, stats.deleted, next.len()
        ));
        if dropped {
            progress::note(format_args!(
                "{}: HNSW/PQ sidecars described the previous version and were dropped; rebuild them with `prox accel`",
                args.name
            ));
        }
        out.line(next.descriptor_cid())?;
    }
    out.flush()
}
