//! The `--store DIR | s3://bucket/prefix` option shared by every command
//! that opens a store: the one place a store name is parsed.

use anyhow::{Context, Result};
use clap::Args;
use prox_engine::store::MmapStore;
use prox_engine::BlockStore;
use prox_s3::{CachedStore, S3Store};
use std::path::PathBuf;
use std::sync::Arc;

/// `--store DIR | s3://bucket/prefix` (env `PROX_STORE`, default
/// `./prox-data`).
#[derive(Debug, Clone, Args)]
pub struct StoreArg {
    /// Store: a directory (an MmapStore; created on first write) or
    /// s3://bucket/prefix (credentials, region and endpoint from the
    /// standard AWS_* environment variables; docs/store.md, "S3").
    #[arg(long = "store", env = "PROX_STORE", default_value = "prox-data")]
    pub store: PathBuf,
    /// With a bucket store: keep a local cache of verified blocks in this
    /// directory (an MmapStore; named roots are never cached, so moved
    /// roots are seen at once). Refused with a directory store.
    #[arg(long = "cache-dir", env = "PROX_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The cache's bound in bytes of block data (e.g. 512M, 4G); least
    /// recently used blocks are dropped past it.
    #[arg(long = "cache-bytes", env = "PROX_CACHE_BYTES", default_value = "1G",
          value_parser = crate::sysmem::parse_size)]
    pub cache_bytes: u64,
}

impl std::fmt::Display for StoreArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "store {}", self.store.display())
    }
}

impl StoreArg {
    /// The `s3://` URL, when the store is in a bucket.
    pub fn s3_url(&self) -> Option<&str> {
        self.store.to_str().filter(|s| prox_s3::is_s3_url(s))
    }

    /// The store directory; a bucket store is refused (for commands that
    /// need a directory's own features).
    pub fn dir_only(&self) -> Result<&std::path::Path> {
        self.check_cache()?;
        if self.s3_url().is_some() {
            anyhow::bail!("{self}: this command needs a store directory, not a bucket");
        }
        Ok(&self.store)
    }

    /// Opens the bucket store at `url`.
    fn open_s3(&self, url: &str, gc_grace: Option<std::time::Duration>) -> Result<S3Store> {
        let mut config = prox_s3::Config::from_url(url)?;
        if let Some(g) = gc_grace {
            config.gc_grace = g;
        }
        S3Store::open(config).with_context(|| format!("cannot open {self}"))
    }

    /// Opens the store for writing, whichever kind it is (a directory is
    /// created if absent; a bucket gets its `--cache-dir` cache).
    pub fn open_dyn(&self) -> Result<Arc<dyn BlockStore>> {
        match self.s3_url() {
            Some(url) => Ok(Arc::from(self.open_bucket(url)?)),
            None => Ok(Arc::new(self.open()?)),
        }
    }

    /// Opens a bucket store, behind a [`CachedStore`] when `--cache-dir`
    /// is given.
    fn open_bucket(&self, url: &str) -> Result<Box<dyn BlockStore>> {
        let remote = self.open_s3(url, None)?;
        match &self.cache_dir {
            Some(dir) => Ok(Box::new(
                CachedStore::open(remote, dir, self.cache_bytes)
                    .with_context(|| format!("cannot open the cache {}", dir.display()))?,
            )),
            None => Ok(Box::new(remote)),
        }
    }

    /// Refuses `--cache-dir` with a directory store (it caches a bucket).
    fn check_cache(&self) -> Result<()> {
        if self.cache_dir.is_some() && self.s3_url().is_none() {
            anyhow::bail!("{self}: --cache-dir caches a bucket store (s3://...), not a directory");
        }
        Ok(())
    }

    /// Opens a bucket store with a GC grace period (`None`: the default).
    pub fn open_s3_with_grace(
        &self,
        url: &str,
        gc_grace: Option<std::time::Duration>,
    ) -> Result<S3Store> {
        self.open_s3(url, gc_grace)
    }

    /// Opens a directory store for writing (creating it if absent); a
    /// bucket store is refused (commands that need a directory's own
    /// features: segments, damage reports, the sync staging store).
    pub fn open(&self) -> Result<MmapStore> {
        MmapStore::open(self.dir_only()?).with_context(|| format!("cannot open {self}"))
    }

    /// Opens an existing store read-only (a bucket store is opened as is:
    /// this process only reads it).
    pub fn open_read_only(&self) -> Result<Box<dyn BlockStore>> {
        match self.s3_url() {
            Some(url) => self.open_bucket(url),
            None => Ok(Box::new(self.open_read_only_mmap()?)),
        }
    }

    /// [`open_read_only`](Self::open_read_only) of a directory store,
    /// keeping the concrete type (for its damage reports).
    pub fn open_read_only_mmap(&self) -> Result<MmapStore> {
        self.dir_only()?;
        if !self.store.is_dir() {
            anyhow::bail!("{self} does not exist");
        }
        MmapStore::open_read_only(&self.store).with_context(|| format!("cannot open {self}"))
    }
}
