//! [`S3Store`]: the blocking [`BlockStore`] over an async S3 client.

use crate::config::Config;
use crate::errors::{kind_of, remote, remote_msg};
use crate::roots;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    RetryConfig, UpdateVersion,
};
use prox_engine::store::{validate_root_name, RetainStats, Verified};
use prox_engine::{BlockStore, Cid, Error, RemoteErrorKind, Result};
use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How many times a compare-and-swap re-reads a root that changed between
/// its read and its conditional write before giving up with
/// [`RemoteErrorKind::Contended`].
const CAS_ATTEMPTS: usize = 64;

/// A block store in an S3 bucket (or any S3-compatible service).
///
/// Every method blocks the calling thread until the requests it needs are
/// done; the requests run on the store's own runtime (two worker threads),
/// so it may be called from any thread, including a tokio worker (which
/// it then blocks, like any other blocking store). Writes are durable when
/// they return (the service acknowledged them); `commit` is a no-op.
pub struct S3Store {
    client: Arc<dyn ObjectStore>,
    /// `Some` until drop, which shuts it down without blocking.
    rt: Option<tokio::runtime::Runtime>,
    /// The store's URL, for errors and logs.
    name: Arc<str>,
    blocks: String,
    roots: String,
    concurrency: usize,
    gc_grace: Duration,
    /// Requests made so far (for tests and cache statistics).
    counts: Arc<Counts>,
}

/// Request counters of one [`S3Store`].
#[derive(Debug, Default)]
struct Counts {
    block_gets: AtomicU64,
    get_batches: AtomicU64,
    root_gets: AtomicU64,
}

/// How many reads an [`S3Store`] has sent since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// Block objects requested (one GET each).
    pub block_gets: u64,
    /// Batches of block GETs (`get`/`get_many` calls that reached the
    /// service): dependent round trips when the caller waits on each.
    pub get_batches: u64,
    /// Named-root reads (one GET each, also a dependent round trip).
    pub root_gets: u64,
}

impl RequestCounts {
    /// Dependent round trips of a caller that waits on every read:
    /// batches of block GETs plus root reads.
    pub fn round_trips(&self) -> u64 {
        self.get_batches + self.root_gets
    }
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store").field("name", &self.name).finish()
    }
}

impl Drop for S3Store {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The first endpoint variable set, in the AWS SDKs' order of precedence.
fn env_endpoint() -> Option<String> {
    ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

impl S3Store {
    /// Opens the store at `config.location`, checking that the bucket
    /// exists and the credentials are accepted (one list request):
    /// [`Error::Remote`] with [`RemoteErrorKind::MissingBucket`] or
    /// [`RemoteErrorKind::Auth`] if not.
    pub fn open(config: Config) -> Result<S3Store> {
        let name: Arc<str> = config.location.to_string().into();
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&config.location.bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(15),
                    base: 2.0,
                },
                max_retries: config.max_retries,
                retry_timeout: config.retry_timeout,
            });
        let region = config.region.clone().or_else(|| {
            ["AWS_REGION", "AWS_DEFAULT_REGION"]
                .iter()
                .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        });
        if let Some(region) = region {
            builder = builder.with_region(region);
        }
        let mut client_options = ClientOptions::new()
            .with_timeout(config.request_timeout)
            .with_connect_timeout(Duration::from_secs(5));
        if let Some(endpoint) = config.endpoint.clone().or_else(env_endpoint) {
            if endpoint.starts_with("http://") {
                client_options = client_options.with_allow_http(true);
            }
            builder = builder.with_endpoint(endpoint);
        }
        let client = builder
            .with_client_options(client_options)
            .build()
            .map_err(|e| Error::InvalidConfig(format!("{name}: {e}")))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("prox-s3")
            .enable_all()
            .build()?;
        let base = |sub: &str| {
            if config.location.prefix.is_empty() {
                sub.to_string()
            } else {
                format!("{}/{sub}", config.location.prefix)
            }
        };
        let store = S3Store {
            client: Arc::new(client),
            rt: Some(rt),
            name,
            blocks: base("blocks"),
            roots: base("roots"),
            concurrency: config.concurrency.max(1),
            gc_grace: config.gc_grace,
            counts: Arc::default(),
        };
        store.probe()?;
        Ok(store)
    }

    /// The store's URL (`s3://bucket/prefix`).
    pub fn url(&self) -> &str {
        &self.name
    }

    /// The block reads sent so far.
    pub fn requests(&self) -> RequestCounts {
        RequestCounts {
            block_gets: self.counts.block_gets.load(Ordering::Relaxed),
            get_batches: self.counts.get_batches.load(Ordering::Relaxed),
            root_gets: self.counts.root_gets.load(Ordering::Relaxed),
        }
    }

    /// The GC grace period this store was opened with.
    pub fn gc_grace(&self) -> Duration {
        self.gc_grace
    }

    /// One list request under the roots prefix: fails with a typed error
    /// when the bucket is missing or the credentials are refused.
    fn probe(&self) -> Result<()> {
        let (client, name) = (self.client.clone(), self.name.clone());
        let prefix = Path::from(self.roots.as_str());
        self.run(async move {
            client
                .list_with_delimiter(Some(&prefix))
                .await
                .map(|_| ())
                .map_err(|e| remote(&name, e))
        })
    }

    /// Runs `fut` on the store's runtime and waits for it.
    fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let rt = self.rt.as_ref().ok_or_else(|| self.stopped())?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            // The receiver waits for exactly this send.
            let _ = tx.send(fut.await);
        });
        rx.recv().map_err(|_| self.stopped())?
    }

    fn stopped(&self) -> Error {
        remote_msg(
            &self.name,
            RemoteErrorKind::Other,
            "the store's runtime stopped",
        )
    }

    fn block_path(&self, cid: &Cid) -> Path {
        Path::from(format!("{}/{}", self.blocks, cid.to_hex()))
    }

    fn root_path(&self, name: &str) -> Path {
        Path::from(format!("{}/{}", self.roots, roots::key(name)))
    }

    /// Fetches blocks with bounded concurrency, each verified against its
    /// CID; `None` where the object is absent.
    fn fetch(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        if cids.is_empty() {
            return Ok(Vec::new());
        }
        self.counts.get_batches.fetch_add(1, Ordering::Relaxed);
        self.counts
            .block_gets
            .fetch_add(cids.len() as u64, Ordering::Relaxed);
        let jobs: Vec<(Cid, Path)> = cids.iter().map(|c| (*c, self.block_path(c))).collect();
        let (client, name, width) = (self.client.clone(), self.name.clone(), self.concurrency);
        self.run(async move {
            futures::stream::iter(jobs)
                .map(|(cid, path)| {
                    let (client, name) = (client.clone(), name.clone());
                    async move { get_block(client.as_ref(), &name, &cid, &path).await }
                })
                .buffered(width)
                .try_collect()
                .await
        })
    }

    /// Puts verified blocks with bounded concurrency. Every block is put,
    /// also when the object exists: the write refreshes its age, which is
    /// what keeps a block a writer is about to publish out of a concurrent
    /// collection (see `retain`).
    fn upload(&self, blocks: Vec<(Cid, Bytes)>) -> Result<()> {
        let mut seen = HashSet::with_capacity(blocks.len());
        let jobs: Vec<(Path, Bytes)> = blocks
            .into_iter()
            .filter(|(c, _)| seen.insert(*c))
            .map(|(c, b)| (self.block_path(&c), b))
            .collect();
        let (client, name, width) = (self.client.clone(), self.name.clone(), self.concurrency);
        self.run(async move {
            futures::stream::iter(jobs)
                .map(|(path, bytes)| {
                    let (client, name) = (client.clone(), name.clone());
                    async move {
                        client
                            .put(&path, PutPayload::from_bytes(bytes))
                            .await
                            .map(|_| ())
                            .map_err(|e| remote(&name, e))
                    }
                })
                .buffer_unordered(width)
                .try_collect::<Vec<()>>()
                .await
                .map(|_| ())
        })
    }

    /// Reads a root object: its value (`None`: absent or removed) and the
    /// version a conditional write must name (`None`: no object).
    fn read_root(&self, name: &str) -> Result<(Option<Bytes>, Option<UpdateVersion>)> {
        let path = self.root_path(name);
        let (client, store) = (self.client.clone(), self.name.clone());
        let (bytes, version) = self.run(async move {
            match client.get(&path).await {
                Ok(r) => {
                    let version = UpdateVersion {
                        e_tag: r.meta.e_tag.clone(),
                        version: r.meta.version.clone(),
                    };
                    let bytes = r.bytes().await.map_err(|e| remote(&store, e))?;
                    Ok((Some(bytes), Some(version)))
                }
                Err(e) => absent_or_error(&store, e).map(|()| (None, None)),
            }
        })?;
        match bytes {
            Some(b) => Ok((roots::decode(name, &b)?, version)),
            None => Ok((None, None)),
        }
    }

    /// Writes a root object with `mode`; `Ok(false)` when the service
    /// refused the write's precondition.
    fn write_root(&self, name: &str, value: Option<&[u8]>, mode: PutMode) -> Result<bool> {
        let path = self.root_path(name);
        let payload = PutPayload::from(roots::encode(value));
        let (client, store) = (self.client.clone(), self.name.clone());
        self.run(async move {
            let opts = PutOptions {
                mode,
                ..PutOptions::default()
            };
            match client.put_opts(&path, payload, opts).await {
                Ok(_) => Ok(true),
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. },
                ) => Ok(false),
                Err(e) => Err(remote(&store, e)),
            }
        })
    }

    /// The blocks `retain(live)` removes: not in `live` and older than the
    /// grace period (by the listing's last-modified times).
    fn sweep_plan(&self, live: &HashSet<Cid>) -> Result<(RetainStats, Vec<Path>)> {
        let now = SystemTime::now();
        let mut stats = RetainStats::default();
        let mut doomed = Vec::new();
        for (key, at, size) in self.list(&self.blocks)? {
            let Ok(cid) = key.parse::<Cid>() else {
                continue;
            };
            let age = now.duration_since(at).unwrap_or(Duration::ZERO);
            if live.contains(&cid) || age < self.gc_grace {
                stats.kept_blocks += 1;
            } else {
                stats.removed_blocks += 1;
                stats.removed_bytes += size;
                doomed.push(self.block_path(&cid));
            }
        }
        Ok((stats, doomed))
    }

    /// Every object under a prefix, with its last-modified time.
    fn list(&self, prefix: &str) -> Result<Vec<(String, SystemTime, u64)>> {
        let prefix = Path::from(prefix);
        let (client, store) = (self.client.clone(), self.name.clone());
        self.run(async move {
            client
                .list(Some(&prefix))
                .map_err(|e| remote(&store, e))
                .map_ok(|meta| {
                    let name = meta.location.filename().unwrap_or_default().to_string();
                    let millis = meta.last_modified.timestamp_millis().max(0) as u64;
                    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(millis);
                    (name, at, meta.size)
                })
                .try_collect()
                .await
        })
    }
}

/// Maps a failed GET: `Ok(())` when the object is simply absent, the error
/// otherwise (a missing bucket also answers 404, but with its own code).
fn absent_or_error(store: &str, e: object_store::Error) -> Result<()> {
    if matches!(e, object_store::Error::NotFound { .. })
        && kind_of(&e) != RemoteErrorKind::MissingBucket
    {
        Ok(())
    } else {
        Err(remote(store, e))
    }
}

/// GETs one block and verifies it against `cid`.
async fn get_block(
    client: &dyn ObjectStore,
    store: &str,
    cid: &Cid,
    path: &Path,
) -> Result<Option<Bytes>> {
    match client.get(path).await {
        Ok(r) => {
            let bytes = r.bytes().await.map_err(|e| remote(store, e))?;
            let (_, bytes) = Verified::check(cid, bytes)?.into_parts();
            Ok(Some(bytes))
        }
        Err(e) => absent_or_error(store, e).map(|()| None),
    }
}

impl BlockStore for S3Store {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        Ok(self.fetch(std::slice::from_ref(cid))?.pop().flatten())
    }

    fn get_many(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        self.fetch(cids)
    }

    fn put(&self, data: &[u8]) -> Result<Cid> {
        let cid = Cid::of(data);
        self.upload(vec![(cid, Bytes::copy_from_slice(data))])?;
        Ok(cid)
    }

    fn put_many(&self, blocks: &[&[u8]]) -> Result<Vec<Cid>> {
        let pairs: Vec<(Cid, Bytes)> = blocks
            .iter()
            .map(|b| (Cid::of(b), Bytes::copy_from_slice(b)))
            .collect();
        let cids = pairs.iter().map(|(c, _)| *c).collect();
        self.upload(pairs)?;
        Ok(cids)
    }

    fn put_verified_many(&self, blocks: &[Verified]) -> Result<()> {
        self.upload(blocks.iter().map(|v| v.clone().into_parts()).collect())
    }

    fn has(&self, cid: &Cid) -> Result<bool> {
        Ok(self.has_many(std::slice::from_ref(cid))?[0])
    }

    fn has_many(&self, cids: &[Cid]) -> Result<Vec<bool>> {
        let paths: Vec<Path> = cids.iter().map(|c| self.block_path(c)).collect();
        let (client, store, width) = (self.client.clone(), self.name.clone(), self.concurrency);
        self.run(async move {
            futures::stream::iter(paths)
                .map(|path| {
                    let (client, store) = (client.clone(), store.clone());
                    async move {
                        match client.head(&path).await {
                            Ok(_) => Ok(true),
                            Err(e) => absent_or_error(&store, e).map(|()| false),
                        }
                    }
                })
                .buffered(width)
                .try_collect()
                .await
        })
    }

    fn cids(&self) -> Result<Vec<Cid>> {
        let mut out = Vec::new();
        for (name, _, _) in self.list(&self.blocks)? {
            // Objects this store did not name are not blocks; skip them.
            if let Ok(cid) = name.parse::<Cid>() {
                out.push(cid);
            }
        }
        Ok(out)
    }

    fn commit(&self) -> Result<()> {
        Ok(())
    }

    fn root(&self, name: &str) -> Result<Option<Bytes>> {
        validate_root_name(name)?;
        self.counts.root_gets.fetch_add(1, Ordering::Relaxed);
        Ok(self.read_root(name)?.0)
    }

    fn set_root(&self, name: &str, value: Option<&[u8]>) -> Result<()> {
        validate_root_name(name)?;
        self.write_root(name, value, PutMode::Overwrite).map(|_| ())
    }

    fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool> {
        validate_root_name(name)?;
        for _ in 0..CAS_ATTEMPTS {
            let (current, version) = self.read_root(name)?;
            if current.as_deref() != expected {
                return Ok(false);
            }
            let mode = match version {
                Some(v) => PutMode::Update(v),
                None => PutMode::Create,
            };
            if self.write_root(name, new, mode)? {
                return Ok(true);
            }
            // Another writer changed the object between our read and our
            // write: read again, the value may still be the expected one.
        }
        Err(remote_msg(
            &self.name,
            RemoteErrorKind::Contended,
            format!("root {name:?} changed under {CAS_ATTEMPTS} compare-and-swap attempts"),
        ))
    }

    fn roots(&self) -> Result<Vec<(String, Bytes)>> {
        let mut names: Vec<String> = self
            .list(&self.roots)?
            .into_iter()
            .filter_map(|(key, _, _)| roots::name_of(&key))
            .filter(|n| validate_root_name(n).is_ok())
            .collect();
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if let Some(v) = self.read_root(&name)?.0 {
                out.push((name, v));
            }
        }
        Ok(out)
    }

    /// Deletes every block object not in `live` whose object is older than
    /// the store's GC grace period (`Config::gc_grace`); younger ones are
    /// kept and counted as kept, since a writer elsewhere may be about to
    /// publish a root that reaches them.
    fn retain(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        let (stats, doomed) = self.sweep_plan(live)?;
        let (client, store) = (self.client.clone(), self.name.clone());
        self.run(async move {
            let paths = futures::stream::iter(doomed.into_iter().map(Ok)).boxed();
            client
                .delete_stream(paths)
                .map_err(|e| remote(&store, e))
                .try_collect::<Vec<Path>>()
                .await
                .map(|_| ())
        })?;
        Ok(stats)
    }

    /// What `retain` would remove now (one listing; sizes and ages from it).
    fn plan_retain(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        Ok(self.sweep_plan(live)?.0)
    }
}
