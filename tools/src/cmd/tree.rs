//! `prox tree build|apply|get|range|diff`: prolly trees from the command line.
//!
//! Keys and values are hex on input and output. `build` reads JSON lines
//! `{"key": hex, "value": hex}`; `apply` reads `{"op": "put", "key", "value"}`
//! and `{"op": "del", "key"}` lines and applies them as one canonical batch
//! to a named root (compare-and-swap, so a concurrent writer is detected).
//! Reads take a TARGET that is a root name or a root CID; a CID's config is
//! read from its root node header.

use super::roots::{config_of_root, now_millis, read_manifest};
use super::store_arg::StoreArg;
use crate::out::Stdout;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use prox_engine::manifest::RootManifest;
use prox_engine::prolly::{build, Config, DiffEntry, Encoding, Mutation, Tree};
use prox_engine::{BlockStore, Cid};
use serde_json::{json, Value};
use std::io::BufRead;

/// Examples for `prox tree --help`.
pub const EXAMPLES: &str = "\
Examples:
  printf '{\"key\":\"61\",\"value\":\"31\"}\\n' | prox tree build --store s --name t
  printf '{\"op\":\"del\",\"key\":\"61\"}\\n' | prox tree apply --store s --name t
  prox tree get --store s t 61 --json
  prox tree range --store s t --start 61 --end 66
  prox tree diff --store s t 0002fa4d...a653";

/// Arguments of `prox tree`.
#[derive(Debug, Clone, Args)]
pub struct TreeArgs {
    /// What to do.
    #[command(subcommand)]
    pub cmd: TreeCommand,
}

/// Chunking options of `prox tree build`.
#[derive(Debug, Clone, Args)]
pub struct ChunkingArgs {
    /// Minimum entries per node before a boundary may close it.
    #[arg(long = "min-chunk", default_value_t = 4)]
    pub min_chunk: usize,
    /// Maximum entries per node.
    #[arg(long = "max-chunk", default_value_t = 1024 * 1024)]
    pub max_chunk: usize,
    /// Boundary probability is about 1/FACTOR.
    #[arg(long, default_value_t = 128)]
    pub factor: u32,
    /// xxHash64 seed of the boundary predicate.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Header encoding: raw, cbor, json or custom:NAME.
    #[arg(long, default_value = "raw")]
    pub encoding: String,
}

impl ChunkingArgs {
    /// The validated config.
    pub fn config(&self) -> Result<Config> {
        let cfg = Config {
            encoding: Encoding::parse(&self.encoding)?,
            ..Config::new(self.min_chunk, self.max_chunk, self.factor, self.seed)
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// `prox tree` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum TreeCommand {
    /// Build a tree from JSON lines on stdin; print its root CID.
    Build {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Chunking configuration.
        #[command(flatten)]
        chunking: ChunkingArgs,
        /// Also point this named root at the new tree.
        #[arg(long)]
        name: Option<String>,
    },
    /// Apply put/del JSON lines on stdin as one batch to a named root.
    Apply {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Named root to update (created with the default config if absent).
        #[arg(long)]
        name: String,
    },
    /// Look up one key.
    Get {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Root name or root CID.
        target: String,
        /// Key in hex.
        key: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// List entries in [start, end) or under a prefix.
    Range {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Root name or root CID.
        target: String,
        /// Inclusive start key (hex).
        #[arg(long, default_value = "")]
        start: String,
        /// Exclusive end key (hex); to the last key when omitted.
        #[arg(long)]
        end: Option<String>,
        /// Only keys with this prefix (hex); overrides --start/--end.
        #[arg(long)]
        prefix: Option<String>,
        /// Stop after this many entries.
        #[arg(long)]
        limit: Option<usize>,
        /// JSON lines output.
        #[arg(long)]
        json: bool,
    },
    /// Differences from BASE to OTHER, in key order.
    Diff {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Base: root name or root CID.
        base: String,
        /// Other: root name or root CID.
        other: String,
        /// JSON lines output.
        #[arg(long)]
        json: bool,
    },
}

fn hex_arg(s: &str, what: &str) -> Result<Vec<u8>> {
    hex::decode(s).with_context(|| format!("{what} {s:?} is not hex"))
}

fn hex_field(v: &Value, field: &str, line: usize) -> Result<Vec<u8>> {
    let s = v
        .get(field)
        .and_then(Value::as_str)
        .with_context(|| format!("line {line}: missing string field {field:?}"))?;
    hex::decode(s).with_context(|| format!("line {line}: {field} is not hex"))
}

fn read_lines(mut f: impl FnMut(usize, Value) -> Result<()>) -> Result<()> {
    let stdin = std::io::stdin();
    for (i, line) in stdin.lock().lines().enumerate() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(&line).with_context(|| format!("line {}: bad JSON", i + 1))?;
        f(i + 1, v)?;
    }
    Ok(())
}

/// Resolves TARGET: a named root if one exists, else a hex root CID.
fn open_target<'s>(store: &'s dyn BlockStore, target: &str) -> Result<Tree<'s>> {
    if prox_engine::store::validate_root_name(target).is_ok() {
        if let Some((_, m)) = read_manifest(store, target)? {
            return Ok(Tree::from_manifest(store, &m)?);
        }
    }
    let cid: Cid = target
        .parse()
        .with_context(|| format!("{target:?} is neither a named root nor a root CID"))?;
    let cfg = config_of_root(store, Some(cid))?;
    Ok(Tree::open(store, cfg, Some(cid))?)
}

fn root_hex(root: Option<Cid>) -> String {
    root.map(|c| c.to_hex()).unwrap_or_else(|| "none".into())
}

/// Runs `prox tree`.
pub fn run(args: TreeArgs) -> Result<()> {
    let mut out = Stdout::new();
    match args.cmd {
        TreeCommand::Build {
            store,
            chunking,
            name,
        } => {
            let cfg = chunking.config()?;
            let mut entries = Vec::new();
            read_lines(|line, v| {
                entries.push((hex_field(&v, "key", line)?, hex_field(&v, "value", line)?));
                Ok(())
            })?;
            let s = store.open()?;
            let root = build(&s, &cfg, entries)?;
            s.commit()?;
            if let Some(name) = name {
                let now = now_millis();
                let m = RootManifest {
                    created_at_millis: Some(now),
                    updated_at_millis: Some(now),
                    ..RootManifest::new(root, cfg)
                };
                s.set_root(&name, Some(&m.encode()))?;
            }
            out.line(root_hex(root))?;
        }
        TreeCommand::Apply { store, name } => {
            let mut muts = Vec::new();
            read_lines(|line, v| {
                let key = hex_field(&v, "key", line)?;
                match v.get("op").and_then(Value::as_str) {
                    Some("put") => muts.push(Mutation::Put(key, hex_field(&v, "value", line)?)),
                    Some("del") => muts.push(Mutation::Delete(key)),
                    other => bail!("line {line}: op must be \"put\" or \"del\", got {other:?}"),
                }
                Ok(())
            })?;
            let s = store.open()?;
            let prev = read_manifest(&s, &name)?;
            let (prev_bytes, manifest) = match prev {
                Some((b, m)) => (Some(b), m),
                None => (None, RootManifest::new(None, Config::default())),
            };
            let tree = Tree::from_manifest(&s, &manifest)?;
            let new = tree.batch(muts)?;
            s.commit()?;
            let now = now_millis();
            let m = RootManifest {
                root: new.root(),
                created_at_millis: Some(manifest.created_at_millis.unwrap_or(now)),
                updated_at_millis: Some(now),
                ..manifest
            };
            if !s.cas_root(&name, prev_bytes.as_deref(), Some(&m.encode()))? {
                bail!("root {name:?} changed while the batch was applied; nothing was published");
            }
            out.line(root_hex(new.root()))?;
        }
        TreeCommand::Get {
            store,
            target,
            key,
            json,
        } => {
            let s = store.open_read_only()?;
            let tree = open_target(s.as_ref(), &target)?;
            let key = hex_arg(&key, "key")?;
            let value = tree.get(&key)?;
            if json {
                out.json(
                    &json!({"key": hex::encode(&key), "value": value.as_ref().map(hex::encode)}),
                )?;
            } else {
                match value {
                    Some(v) => out.line(hex::encode(v))?,
                    None => bail!("key {} not found", hex::encode(&key)),
                }
            }
        }
        TreeCommand::Range {
            store,
            target,
            start,
            end,
            prefix,
            limit,
            json,
        } => {
            let s = store.open_read_only()?;
            let tree = open_target(s.as_ref(), &target)?;
            let iter = match prefix {
                Some(p) => tree.prefix(&hex_arg(&p, "prefix")?),
                None => {
                    let end = end.map(|e| hex_arg(&e, "end")).transpose()?;
                    tree.range(&hex_arg(&start, "start")?, end.as_deref())
                }
            };
            for item in iter.take(limit.unwrap_or(usize::MAX)) {
                let (k, v) = item?;
                if json {
                    out.json(&json!({"key": hex::encode(&k), "value": hex::encode(&v)}))?;
                } else {
                    out.line(format_args!("{}\t{}", hex::encode(&k), hex::encode(&v)))?;
                }
            }
        }
        TreeCommand::Diff {
            store,
            base,
            other,
            json,
        } => {
            let s = store.open_read_only()?;
            let a = open_target(s.as_ref(), &base)?;
            let b = open_target(s.as_ref(), &other)?;
            for d in a.diff(&b) {
                let (kind, key, old, new) = match d? {
                    DiffEntry::Added { key, value } => ("added", key, None, Some(value)),
                    DiffEntry::Removed { key, value } => ("removed", key, Some(value), None),
                    DiffEntry::Changed { key, old, new } => ("changed", key, Some(old), Some(new)),
                };
                if json {
                    out.json(&json!({
                        "kind": kind,
                        "key": hex::encode(&key),
                        "old": old.as_ref().map(hex::encode),
                        "new": new.as_ref().map(hex::encode),
                    }))?;
                } else {
                    let h = |v: &Option<Vec<u8>>| {
                        v.as_ref().map(hex::encode).unwrap_or_else(|| "-".into())
                    };
                    out.line(format_args!(
                        "{kind}\t{}\t{}\t{}",
                        hex::encode(&key),
                        h(&old),
                        h(&new)
                    ))?;
                }
            }
        }
    }
    out.flush()
}
