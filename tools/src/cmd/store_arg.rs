//! The `--store DIR | s3://bucket/prefix` option shared by every command
//! that opens a store: the one place a store name is parsed.

use anyhow::{Context, Result};
use clap::Args;
use prox_engine::owner::{self, OwnerClient};
use prox_engine::store::MmapStore;
use prox_engine::{BlockStore, Error as EngineError};
use prox_s3::{CachedStore, S3Store};
use std::path::PathBuf;
use std::sync::Arc;

/// A directory store opened by [`StoreArg::open_or_owner`].
#[derive(Debug)]
pub enum Opened {
    /// This process holds the lock.
    Local(Box<MmapStore>),
    /// Another process owns the store; requests go through its socket.
    Owner(OwnerClient),
}

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
    /// When a running `prox serve` (with writes on) or `prox daemon` holds
    /// the directory store's lock, fail instead of going through its owner
    /// socket (`<store>/owner.sock`, docs/store.md, "Owner socket").
    #[arg(long = "no-owner")]
    pub no_owner: bool,
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
    /// created if absent; a bucket gets its `--cache-dir` cache). A
    /// directory locked by a running server or daemon is reached through
    /// its owner socket (unless `--no-owner`).
    pub fn open_dyn(&self) -> Result<Arc<dyn BlockStore>> {
        if let Some(url) = self.s3_url() {
            return Ok(Arc::from(self.open_bucket(url)?));
        }
        Ok(match self.open_or_owner()? {
            Opened::Local(s) => Arc::new(*s),
            Opened::Owner(c) => Arc::new(c),
        })
    }

    /// Opens a directory store for writing, or, when another process holds
    /// its lock and serves its owner socket, connects to that owner (one
    /// stderr line says so). `--no-owner` keeps the lock failure.
    pub fn open_or_owner(&self) -> Result<Opened> {
        self.check_cache()?;
        let dir = self.dir_only()?;
        match MmapStore::open(dir) {
            Ok(s) => Ok(Opened::Local(Box::new(s))),
            Err(EngineError::Locked { path }) if !self.no_owner => {
                let sock = owner::socket_path(dir);
                if !sock.exists() {
                    anyhow::bail!(
                        "{self}: {} is locked by another process that serves no owner socket \
                         (an older prox, or a read-write tool still running)",
                        path.display()
                    );
                }
                let c = OwnerClient::connect(&sock, owner::DEFAULT_TIMEOUT)
                    .with_context(|| format!("{self} is locked; its owner socket failed"))?;
                eprintln!(
                    "{self} is owned by {} (pid {}): reads and writes go through {}",
                    c.info().kind,
                    c.info().pid,
                    sock.display()
                );
                Ok(Opened::Owner(c))
            }
            Err(e) => Err(e).with_context(|| format!("cannot open {self}")),
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
