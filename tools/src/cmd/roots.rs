//! `prox roots list|set|cas|recover`: named roots, stored as `RootManifest`
//! bytes.
//!
//! `set` and `cas` take a root CID (or `none` for the empty tree); the
//! manifest's config is read from the root node's header, so a manifest
//! always describes the tree it names. `cas` swaps only when the name
//! currently points at `--expected` (compared by root CID; `none` = absent
//! or empty), which is how concurrent writers avoid lost updates.

use super::store_arg::StoreArg;
use crate::out::Stdout;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use prox_engine::manifest::RootManifest;
use prox_engine::prolly::{Config, Node};
use prox_engine::store::mmap::SlotState;
use prox_engine::{BlockStore, Cid};
use serde_json::json;

/// Examples for `prox roots --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox roots list --store prox-data
  prox roots set --store prox-data docs 0002fa4d...a653
  prox roots cas --store prox-data docs --expected 0002fa4d...a653 --new none
  prox roots recover --store prox-data";

/// Arguments of `prox roots`.
#[derive(Debug, Clone, Args)]
pub struct RootsArgs {
    /// What to do.
    #[command(subcommand)]
    pub cmd: RootsCommand,
}

/// `prox roots` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum RootsCommand {
    /// List named roots with their root CID and config.
    List {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Point NAME at ROOT unconditionally (`none` removes the name).
    Set {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Root name.
        name: String,
        /// Root CID in hex, or `none`.
        root: String,
    },
    /// Point NAME at --new only if it currently points at --expected.
    Cas {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Root name.
        name: String,
        /// Expected current root CID, or `none` (name absent or empty tree).
        #[arg(long)]
        expected: String,
        /// New root CID, or `none` to remove the name.
        #[arg(long)]
        new: String,
    },
    /// Report the state of both copies of the named roots; when one is
    /// damaged (the store fell back to the previous commit), rewrite both
    /// from the copy in use.
    Recover {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Parses `none` or a hex CID.
pub fn parse_root(s: &str) -> Result<Option<Cid>> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    Ok(Some(s.parse().with_context(|| format!("bad root {s:?}"))?))
}

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Reads and decodes the manifest named `name`, if any.
pub fn read_manifest(
    store: &dyn BlockStore,
    name: &str,
) -> Result<Option<(Vec<u8>, RootManifest)>> {
    match store.root(name)? {
        None => Ok(None),
        Some(bytes) => {
            let m = RootManifest::decode(&bytes)
                .with_context(|| format!("root {name:?} holds a bad manifest"))?;
            Ok(Some((bytes.to_vec(), m)))
        }
    }
}

/// The config recorded in `root`'s node header (default config for `None`).
pub fn config_of_root(store: &dyn BlockStore, root: Option<Cid>) -> Result<Config> {
    let Some(cid) = root else {
        return Ok(Config::default());
    };
    let bytes = store
        .get(&cid)?
        .with_context(|| format!("root block {cid} is not in the store"))?;
    Ok(Node::decode(&bytes)
        .with_context(|| format!("block {cid} is not a tree node"))?
        .config())
}

fn manifest_for(
    store: &dyn BlockStore,
    root: Option<Cid>,
    prev: Option<&RootManifest>,
) -> Result<RootManifest> {
    let mut config = config_of_root(store, root)?;
    if let Some(p) = prev {
        // Keep the runtime cache knobs and, for an empty tree, the old config.
        if root.is_none() {
            config = p.config.clone();
        }
        config.node_cache_max_nodes = p.config.node_cache_max_nodes;
        config.node_cache_max_bytes = p.config.node_cache_max_bytes;
    }
    let now = now_millis();
    Ok(RootManifest {
        version: 1,
        root,
        config,
        created_at_millis: Some(prev.and_then(|p| p.created_at_millis).unwrap_or(now)),
        updated_at_millis: Some(now),
    })
}

/// Runs `prox roots`.
pub fn run(args: RootsArgs) -> Result<()> {
    let mut out = Stdout::new();
    match args.cmd {
        RootsCommand::List { store, json } => {
            let s = store.open_read_only()?;
            for (name, bytes) in s.roots()? {
                match RootManifest::decode(&bytes) {
                    Ok(m) => {
                        let root = m.root.map(|c| c.to_hex());
                        if json {
                            out.json(&json!({
                                "name": name,
                                "root": root,
                                "min_chunk_size": m.config.min_chunk_size,
                                "max_chunk_size": m.config.max_chunk_size,
                                "chunking_factor": m.config.chunking_factor,
                                "hash_seed": m.config.hash_seed,
                                "encoding": m.config.encoding.to_string(),
                                "created_at_millis": m.created_at_millis,
                                "updated_at_millis": m.updated_at_millis,
                            }))?;
                        } else {
                            out.line(format_args!(
                                "{name}\t{}",
                                root.as_deref().unwrap_or("none")
                            ))?;
                        }
                    }
                    Err(e) => {
                        if json {
                            out.json(&json!({"name": name, "error": e.to_string()}))?;
                        } else {
                            out.line(format_args!("{name}\t(not a RootManifest: {e})"))?;
                        }
                    }
                }
            }
        }
        RootsCommand::Set { store, name, root } => {
            let s = store.open_dyn()?;
            let s = &*s;
            let root = parse_root(&root)?;
            match root {
                None => s.set_root(&name, None)?,
                Some(_) => {
                    let prev = read_manifest(s, &name)?;
                    let m = manifest_for(s, root, prev.as_ref().map(|p| &p.1))?;
                    s.set_root(&name, Some(&m.encode()))?;
                }
            }
            out.line(format_args!(
                "{name}\t{}",
                root.map(|c| c.to_hex()).unwrap_or_else(|| "none".into())
            ))?;
        }
        RootsCommand::Cas {
            store,
            name,
            expected,
            new,
        } => {
            let s = store.open_dyn()?;
            let s = &*s;
            let expected = parse_root(&expected)?;
            let new = parse_root(&new)?;
            let prev = read_manifest(s, &name)?;
            let current = prev.as_ref().and_then(|p| p.1.root);
            if current != expected {
                bail!(
                    "compare-and-swap failed: {name:?} points at {}, not {}",
                    current.map(|c| c.to_hex()).unwrap_or_else(|| "none".into()),
                    expected
                        .map(|c| c.to_hex())
                        .unwrap_or_else(|| "none".into())
                );
            }
            let new_bytes = match new {
                None => None,
                Some(_) => Some(manifest_for(s, new, prev.as_ref().map(|p| &p.1))?.encode()),
            };
            let swapped = s.cas_root(
                &name,
                prev.as_ref().map(|p| p.0.as_slice()),
                new_bytes.as_deref(),
            )?;
            if !swapped {
                bail!("compare-and-swap failed: {name:?} changed concurrently");
            }
            out.line(format_args!(
                "{name}\t{}",
                new.map(|c| c.to_hex()).unwrap_or_else(|| "none".into())
            ))?;
        }
        RootsCommand::Recover { store, json } => recover(&store, json, &mut out)?,
    }
    out.flush()
}

/// `prox roots recover`: reports each roots file and rewrites both slots
/// when a copy is damaged.
fn recover(store: &StoreArg, as_json: bool, out: &mut Stdout) -> Result<()> {
    if !store.store.is_dir() {
        bail!("{store} does not exist");
    }
    let s = store.open()?;
    let report = s.roots_report().clone();
    let damaged = report
        .files
        .iter()
        .any(|(_, st)| matches!(st, SlotState::Damaged { .. }));
    if damaged {
        s.rewrite_roots()
            .context("rewriting the named roots failed")?;
    }
    let describe = |st: &SlotState| match st {
        SlotState::Missing => ("missing".to_string(), None, None),
        SlotState::Valid { generation, roots } => {
            ("valid".to_string(), Some(*generation), Some(*roots))
        }
        SlotState::Damaged { reason } => (format!("damaged: {reason}"), None, None),
    };
    if as_json {
        let files: Vec<_> = report
            .files
            .iter()
            .map(|(p, st)| {
                let (state, generation, roots) = describe(st);
                json!({"file": p.display().to_string(), "state": state,
                       "generation": generation, "roots": roots})
            })
            .collect();
        out.json(&json!({
            "generation": report.generation,
            "fell_back": report.fell_back,
            "files": files,
            "rewritten": damaged,
            "roots": s.roots()?.len(),
        }))?;
    } else {
        for (p, st) in &report.files {
            let (state, generation, _) = describe(st);
            match generation {
                Some(g) => out.line(format_args!("{}: {state} (generation {g})", p.display()))?,
                None => out.line(format_args!("{}: {state}", p.display()))?,
            }
        }
        out.line(format_args!(
            "in use: generation {}{}",
            report.generation,
            if report.fell_back {
                " (fell back: the last root change before the damage may be lost)"
            } else {
                ""
            }
        ))?;
        out.line(if damaged {
            "rewrote both copies from the one in use"
        } else {
            "nothing to repair"
        })?;
    }
    Ok(())
}
