//! `prox index list|add|drop`: the payload field indexes of a named map
//! (docs/payloads.md). `add` builds each index from the map's records,
//! `drop` removes it; both publish by compare-and-swap against the map's
//! current descriptor.

use super::store_arg::StoreArg;
use crate::{map, out::Stdout};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use prox_engine::index::Options;
use prox_engine::secondary::FieldIndex;
use prox_engine::BlockStore;
use serde_json::json;
use std::sync::Arc;

/// Examples for `prox index --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox index list --store db --name docs
  prox index add --store db --name docs lang:keyword year:integer
  prox index drop --store db --name docs year";

/// Arguments of `prox index`.
#[derive(Debug, Clone, Args)]
pub struct IndexArgs {
    /// What to do.
    #[command(subcommand)]
    pub cmd: IndexCommand,
}

/// `prox index` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum IndexCommand {
    /// List the map's field indexes (field, type, entries root).
    List {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Root name of the map.
        #[arg(long)]
        name: String,
        /// One JSON object per index.
        #[arg(long)]
        json: bool,
    },
    /// Declare and build field indexes (FIELD:TYPE; TYPE keyword, integer, float or bool).
    Add {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Root name of the map.
        #[arg(long)]
        name: String,
        /// Declarations, e.g. lang:keyword.
        #[arg(required = true)]
        fields: Vec<FieldIndex>,
    },
    /// Drop field indexes by field name.
    Drop {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
        /// Root name of the map.
        #[arg(long)]
        name: String,
        /// Field names.
        #[arg(required = true)]
        fields: Vec<String>,
    },
}

fn list(store: Arc<dyn BlockStore>, name: &str, as_json: bool) -> Result<()> {
    let index = map::open(
        store,
        name,
        &Options {
            warm: false,
            sidecars: false,
            ..Options::default()
        },
    )?;
    let mut out = Stdout::new();
    for f in index
        .field_indexes()
        .map(|f| f.fields())
        .unwrap_or_default()
    {
        let root = f.state.root.map(|c| c.to_hex());
        if as_json {
            out.json(&json!({"field": f.index.field, "type": f.index.ty.name(),
                "root": root, "fingerprint": hex::encode(f.state.descriptor.fingerprint)}))?;
        } else {
            out.line(format_args!(
                "{}\t{}",
                f.index,
                root.unwrap_or_else(|| "(no entries)".into())
            ))?;
        }
    }
    out.flush()
}

fn change(
    store: Arc<dyn BlockStore>,
    name: &str,
    add: &[FieldIndex],
    drop: &[String],
) -> Result<()> {
    let mut index = map::open(
        store,
        name,
        &Options {
            warm: false,
            ..Options::default()
        },
    )?;
    index
        .change_field_indexes(add, drop)
        .with_context(|| format!("map {name:?}"))?;
    index
        .commit(name, Some(index.descriptor()))
        .with_context(|| format!("publishing {name:?}"))?;
    let n = index.field_indexes().map_or(0, |f| f.fields().len());
    Stdout::new().line(format_args!("{name}: {n} field indexes"))
}

/// Runs `prox index`.
pub fn run(args: &IndexArgs) -> Result<()> {
    match &args.cmd {
        IndexCommand::List { store, name, json } => {
            list(Arc::new(store.open_read_only_mmap()?), name, *json)
        }
        IndexCommand::Add {
            store,
            name,
            fields,
        } => change(Arc::new(store.open()?), name, fields, &[]),
        IndexCommand::Drop {
            store,
            name,
            fields,
        } => change(Arc::new(store.open()?), name, &[], fields),
    }
}
