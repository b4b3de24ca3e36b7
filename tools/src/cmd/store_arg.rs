//! The `--store DIR` option shared by every command that opens a store.

use anyhow::{Context, Result};
use clap::Args;
use prox_engine::store::MmapStore;
use prox_engine::BlockStore;
use std::path::PathBuf;

/// `--store DIR` (env `PROX_STORE`, default `./prox-data`).
#[derive(Debug, Clone, Args)]
pub struct StoreArg {
    /// Store directory (an MmapStore; created on first write).
    #[arg(long = "store", env = "PROX_STORE", default_value = "prox-data")]
    pub store: PathBuf,
}

impl std::fmt::Display for StoreArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "store {}", self.store.display())
    }
}

impl StoreArg {
    /// Opens the store for writing (creating it if absent).
    pub fn open(&self) -> Result<MmapStore> {
        MmapStore::open(&self.store).with_context(|| format!("cannot open {self}"))
    }

    /// Opens an existing store read-only.
    pub fn open_read_only(&self) -> Result<Box<dyn BlockStore>> {
        Ok(Box::new(self.open_read_only_mmap()?))
    }

    /// [`open_read_only`](Self::open_read_only) keeping the concrete type
    /// (for its damage reports).
    pub fn open_read_only_mmap(&self) -> Result<MmapStore> {
        if !self.store.is_dir() {
            anyhow::bail!("{self} does not exist");
        }
        MmapStore::open_read_only(&self.store).with_context(|| format!("cannot open {self}"))
    }
}
