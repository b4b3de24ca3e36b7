//! `prox gc`: reclaim blocks no named root reaches.
//!
//! Marks from every named root with the engine's typed link extraction
//! (`prox_engine::gc::collect_default`), then compacts the store's segments.
//! Then collects the sync staging store (`<store>/sync-staging`): staged
//! blocks no pending-sync record can use (left by pulls that failed or
//! were killed) are removed, the staged part of pending pulls is kept.
//! The store's write lock keeps a running daemon and `prox gc` apart, so no
//! pull in progress can lose blocks to it.

use super::store_arg::{Opened, StoreArg};
use crate::out::Stdout;
use anyhow::{Context, Result};
use clap::Args;
use prox_engine::gc;
use prox_engine::store::Pins;
use serde_json::json;

/// Examples for `prox gc --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox gc --store prox-data --dry-run     count what would be removed
  prox gc --store prox-data               remove it and compact segments
  prox gc --store prox-data --json        machine-readable report

Everything reachable from a named root is kept. A reachable block that is
missing, damaged or cannot be decoded stops the collection before anything is
removed (exit status 1, naming the block); fetch it again (`prox sync`) or put
it back, then collect. `--dry-run` lists missing blocks and the damaged byte
ranges the store found when it opened. Staged sync blocks no pending pull can
use (<store>/sync-staging) are collected too.

On a bucket (--store s3://bucket/prefix) writers on other machines may run
meanwhile: an unreachable block is removed only when its object is older than
--grace-secs (default 3600), so blocks a writer has put but not yet published
are kept. Set it above the longest write (docs/store.md, \"S3\").";

/// Arguments of `prox gc`.
#[derive(Debug, Clone, Args)]
pub struct GcArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Only report what would be removed.
    #[arg(long)]
    pub dry_run: bool,
    /// Bucket stores only: keep unreachable blocks younger than this many
    /// seconds (a concurrent writer's blocks not yet published).
    #[arg(long, default_value_t = prox_s3::DEFAULT_GC_GRACE.as_secs())]
    pub grace_secs: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `prox gc`.
pub fn run(args: &GcArgs) -> Result<()> {
    if let Some(url) = args.store.s3_url() {
        return run_s3(args, url);
    }
    if !args.store.store.is_dir() {
        anyhow::bail!("{} does not exist", args.store);
    }
    let store = match args.store.open_or_owner()? {
        Opened::Local(s) => std::sync::Arc::new(*s),
        Opened::Owner(c) => return run_owner(args, &c),
    };
    let before = store.stats();
    let report = gc::collect_default(&*store, &Pins::new(), args.dry_run)
        .with_context(|| format!("garbage collection of {} failed", args.store))?;
    let after = store.stats();
    let staging = collect_staging(&args.store, store.clone(), args.dry_run)?;
    let ranges = store.damaged_ranges();
    let damaged = store.damaged();
    let mut out = Stdout::new();
    if args.json {
        out.json(&json!({
            "store": args.store.store.display().to_string(),
            "dry_run": report.dry_run,
            "roots": report.roots,
            "reachable": report.reachable,
            "missing": report.missing,
            "missing_cids": report.missing_cids.iter().map(|c| c.to_hex()).collect::<Vec<_>>(),
            "damaged_blocks": damaged.iter().map(|c| c.to_hex()).collect::<Vec<_>>(),
            "damaged_ranges": ranges.iter().map(|r| json!({
                "segment": r.segment.display().to_string(),
                "start": r.start,
                "end": r.end,
            })).collect::<Vec<_>>(),
            "kept_blocks": report.retained.kept_blocks,
            "removed_blocks": report.retained.removed_blocks,
            "removed_bytes": report.retained.removed_bytes,
            "file_bytes_before": before.file_bytes,
            "file_bytes_after": after.file_bytes,
            "segments_after": after.segments,
            "staging_removed_blocks": staging,
        }))?;
    } else {
        let verb = if report.dry_run {
            "would remove"
        } else {
            "removed"
        };
        out.line(format!(
            "{} roots, {} reachable blocks ({} missing); kept {}, {verb} {} blocks ({} bytes)",
            report.roots,
            report.reachable,
            report.missing,
            report.retained.kept_blocks,
            report.retained.removed_blocks,
            report.retained.removed_bytes,
        ))?;
        for cid in &report.missing_cids {
            out.line(format!("missing reachable block {cid}"))?;
        }
        for cid in &damaged {
            out.line(format!("damaged block {cid}"))?;
        }
        for r in &ranges {
            out.line(format!(
                "damaged range {}: bytes {}..{}",
                r.segment.display(),
                r.start,
                r.end
            ))?;
        }
        if !report.dry_run {
            out.line(format!(
                "segment files: {} -> {} bytes in {} segments",
                before.file_bytes, after.file_bytes, after.segments
            ))?;
        }
        if staging > 0 {
            out.line(format!(
                "sync staging: {verb} {staging} blocks no pending pull can use"
            ))?;
        }
    }
    out.flush()
}

/// Collects `<store>/sync-staging` when it exists (see
/// `prox_sync::pending::collect_staging`); returns the blocks removed (or
/// that would be, with `dry_run`).
fn collect_staging(
    store: &StoreArg,
    main: std::sync::Arc<prox_engine::store::MmapStore>,
    dry_run: bool,
) -> Result<usize> {
    let dir = store.store.join("sync-staging");
    if !dir.is_dir() {
        return Ok(0);
    }
    let staging = prox_engine::store::MmapStore::open(&dir)
        .with_context(|| format!("cannot open staging store {}", dir.display()))?;
    let stores = prox_sync::Stores::new(main, std::sync::Arc::new(staging));
    prox_sync::pending::collect_staging(&stores, &prox_sync::RefsLinker, dry_run)
        .with_context(|| format!("collecting staging store {}", dir.display()))
}

/// `prox gc` on a store another process owns: the owner runs the
/// collection (keeping the blocks it pins) and compacts its segments; its
/// sync staging store is not collected from here.
fn run_owner(args: &GcArgs, owner: &prox_engine::owner::OwnerClient) -> Result<()> {
    let report = owner
        .gc(args.dry_run)
        .with_context(|| format!("garbage collection of {} by its owner failed", args.store))?;
    let info = owner.info();
    print_report(
        args.json,
        &report,
        json!({
            "store": args.store.store.display().to_string(),
            "owner": {"kind": info.kind, "pid": info.pid},
            "pinned": report.pinned,
        }),
        &format!(", {} pinned by the owner", report.pinned),
        "",
    )
}

/// `prox gc` on a bucket store: mark from every root, sweep what is
/// unreachable and older than the grace period.
fn run_s3(args: &GcArgs, url: &str) -> Result<()> {
    let grace = std::time::Duration::from_secs(args.grace_secs);
    let store = args.store.open_s3_with_grace(url, Some(grace))?;
    let report = gc::collect_default(&store, &Pins::new(), args.dry_run)
        .with_context(|| format!("garbage collection of {} failed", args.store))?;
    print_report(
        args.json,
        &report,
        json!({"store": url, "grace_secs": args.grace_secs}),
        "",
        &format!(" (reachable or younger than {} s)", args.grace_secs),
    )
}

/// Prints a collection report: one JSON object (the common fields plus
/// those of `extra`), or one summary line (`after_missing` and `kept_note`
/// inserted) followed by the missing reachable blocks.
fn print_report(
    as_json: bool,
    report: &gc::GcReport,
    extra: serde_json::Value,
    after_missing: &str,
    kept_note: &str,
) -> Result<()> {
    let mut out = Stdout::new();
    if as_json {
        let mut v = json!({
            "dry_run": report.dry_run,
            "roots": report.roots,
            "reachable": report.reachable,
            "missing": report.missing,
            "missing_cids": report.missing_cids.iter().map(|c| c.to_hex()).collect::<Vec<_>>(),
            "kept_blocks": report.retained.kept_blocks,
            "removed_blocks": report.retained.removed_blocks,
            "removed_bytes": report.retained.removed_bytes,
        });
        if let (Some(v), serde_json::Value::Object(extra)) = (v.as_object_mut(), extra) {
            v.extend(extra);
        }
        out.json(&v)?;
    } else {
        let verb = if report.dry_run {
            "would remove"
        } else {
            "removed"
        };
        out.line(format!(
            "{} roots, {} reachable blocks ({} missing){after_missing}; kept {}{kept_note}, {verb} {} blocks ({} bytes)",
            report.roots,
            report.reachable,
            report.missing,
            report.retained.kept_blocks,
            report.retained.removed_blocks,
            report.retained.removed_bytes,
        ))?;
        for cid in &report.missing_cids {
            out.line(format!("missing reachable block {cid}"))?;
        }
    }
    out.flush()
}
