//! `prox verify`: audit a whole named map and report the first broken
//! object.

use super::store_arg::StoreArg;
use crate::map;
use crate::{out::Stdout, progress};
use anyhow::{Context, Result};
use clap::Args;
use prox_engine::index;
use prox_engine::proximity::ProximityMap;
use std::time::Instant;

/// Examples for `prox verify --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox verify --store db gmm
  prox verify --store db gmm --json

Checks every object reachable from the map: each block against its CID, the
directory tree, every PRXN node, external vector and quantizer against the
invariants of the format (proximity-format.md section 13), and loads the HNSW
and PQ sidecars with their own checks. Exit status 1 and the CID of the first
broken object on failure. Damaged byte ranges and damaged blocks the store
found anywhere (also outside this map) are listed as warnings.";

/// Arguments of `prox verify`.
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// Root name of the map.
    pub name: String,
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `prox verify`.
pub fn run(args: &VerifyArgs) -> Result<()> {
    // A bucket store has no segments, so no damaged ranges: every block is
    // checked against its CID as it is read.
    let (store, ranges): (std::sync::Arc<dyn prox_engine::BlockStore>, _) =
        if args.store.s3_url().is_some() {
            (
                std::sync::Arc::from(args.store.open_read_only()?),
                Vec::new(),
            )
        } else {
            let store = args.store.open_read_only_mmap()?;
            let ranges = store.damaged_ranges();
            (std::sync::Arc::new(store), ranges)
        };
    for r in &ranges {
        tracing::warn!(
            "store damage: {} bytes {}..{} hold no readable record",
            r.segment.display(),
            r.start,
            r.end
        );
    }
    let t = Instant::now();
    let p = map::resolve(store.as_ref(), &args.name)?;
    let sp = progress::spinner(&format!("verifying {}", args.name));
    let checked = (|| -> Result<_> {
        let m = ProximityMap::load(store.as_ref(), p.descriptor)
            .with_context(|| format!("loading map {}", p.descriptor))?;
        let report = m.verify().with_context(|| {
            format!(
                "map {:?} (descriptor {}) is broken",
                args.name, p.descriptor
            )
        })?;
        // Field indexes: each rebuilt from the records and compared.
        let fields = {
            let options = index::Options {
                warm: false,
                sidecars: false,
                ..index::Options::default()
            };
            let ix = map::open(store.clone(), &args.name, &options)?;
            match ix.field_indexes() {
                None => 0,
                Some(f) => {
                    let bad = f.verify(&ix.map().directory()?)?;
                    if !bad.is_empty() {
                        anyhow::bail!(
                            "map {:?}: field indexes {} differ from a rebuild from the records",
                            args.name,
                            bad.join(", ")
                        );
                    }
                    f.fields().len()
                }
            }
        };
        // Sidecars, and the persisted layouts read as a search would read
        // them (each checked against the map and its own counts).
        let layouts = [
            p.layouts.arena,
            p.layouts.adaptive,
            p.layouts.ivf,
            p.layouts.profile,
            p.layouts.frames,
            p.layouts.rotated,
        ]
        .iter()
        .flatten()
        .count();
        if let Some(cid) = p.layouts.profile {
            let dims = prox_engine::proximity::ProximityMap::load(&*store, p.descriptor)?.dims();
            prox_engine::index::Profile::load(&*store, cid, p.descriptor, dims as usize)
                .with_context(|| format!("recall profile of map {:?} is broken", args.name))?;
        }
        if p.hnsw.is_some() || p.pq.is_some() || layouts > 0 {
            let options = index::Options {
                warm: false,
                ..index::Options::default()
            };
            let ix = map::open_published(store.clone(), &p, &options)
                .with_context(|| format!("sidecars of map {:?} are broken", args.name))?;
            if p.layouts.has_native() {
                ix.warm()
                    .with_context(|| format!("search layouts of map {:?} are broken", args.name))?;
            }
        }
        Ok((report, fields, layouts))
    })();
    sp.finish_and_clear();
    let (report, fields, layouts) = checked?;
    let secs = t.elapsed().as_secs_f64();
    let mut out = Stdout::new();
    if args.json {
        out.json(&serde_json::json!({
            "name": args.name,
            "ok": true,
            "descriptor": p.descriptor.to_hex(),
            "hnsw": p.hnsw.map(|c| c.to_hex()),
            "pq": p.pq.map(|c| c.to_hex()),
            "records": report.records,
            "directory_nodes": report.directory_nodes,
            "nodes": report.nodes,
            "external_vectors": report.external_vectors,
            "quantizers": report.quantizers,
            "field_indexes": fields,
            "layouts": layouts,
            "damaged_ranges": ranges.iter().map(|r| serde_json::json!({
                "segment": r.segment.display().to_string(),
                "start": r.start,
                "end": r.end,
            })).collect::<Vec<_>>(),
            "seconds": secs,
        }))?;
    } else {
        out.line(format_args!(
            "ok: {} ({} records, {} directory nodes, {} PRXN nodes, {} external vectors, {} quantizers{}{}, {} field indexes, {} search layouts) in {:.2}s",
            args.name,
            report.records,
            report.directory_nodes,
            report.nodes,
            report.external_vectors,
            report.quantizers,
            if p.hnsw.is_some() { ", HNSW sidecar" } else { "" },
            if p.pq.is_some() { ", PQ sidecar" } else { "" },
            fields,
            layouts,
            secs
        ))?;
        if !ranges.is_empty() {
            out.line(format_args!(
                "warning: the store has {} damaged byte ranges (see the log, or --json)",
                ranges.len()
            ))?;
        }
    }
    out.flush()
}
