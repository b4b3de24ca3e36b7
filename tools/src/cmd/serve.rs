//! `prox serve`: the HTTP/JSON search API over a store's maps, and the
//! `--http` flags it shares with `prox daemon`.

use super::store_arg::StoreArg;
use anyhow::{bail, Context, Result};
use clap::Args;
use prox_serve::{Config, MapRegistry, Server, Source};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Examples for `prox serve --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox serve --store db --http 127.0.0.1:7700
  prox serve --store db --http 0.0.0.0:7700 --token-file /etc/prox/token --search-threads 2
  curl -s localhost:7700/v1/maps/docs/search -d '{\"vector\": [0.1, 0.2, ...], \"k\": 10}'

Serves every proximity map named in the store (docs/api.md). The store is
opened read-only and reopened whenever its roots change, so maps moved by
`prox update`, `prox accel build` or `prox sync pull` are served without a
restart. Prints `http <addr>` on stdout once listening; SIGINT/SIGTERM stop
it after in-flight requests finish (at most --shutdown-grace-ms). Binding
beyond loopback needs a token; requests must name a loopback host or one
given with --allow-host, and POST bodies must be application/json. Writes
(points:upsert, points:delete, PUT and DELETE of a map) are off unless
--write-token-file is given; then this server holds the store's writer lock.";

/// The HTTP API's settings (`prox serve` and `prox daemon --http`).
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// Serve the HTTP/JSON search API on this address (e.g. 127.0.0.1:7700).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// File holding the bearer token clients must send (required beyond loopback).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// File holding the bearer token the write endpoints require
    /// (upserts, deletes, creating and dropping maps). Without it the
    /// server takes no writes; with it `prox serve` opens the store as its
    /// one writer.
    #[arg(long, value_name = "FILE")]
    pub write_token_file: Option<PathBuf>,
    /// Largest k a query may ask for.
    #[arg(long, default_value_t = 1000)]
    pub max_k: usize,
    /// Search requests that may wait for a search thread; more get 503.
    #[arg(long, default_value_t = 256)]
    pub queue: usize,
    /// Most HTTP requests handled at once, counted once their body has
    /// arrived; more get 503.
    #[arg(long, default_value_t = 1024)]
    pub max_in_flight: usize,
    /// Also accept this name in the Host header (repeatable; `*` accepts
    /// any). Loopback names are always accepted.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Most open connections; more are closed at once.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Time for a request's headers to arrive, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Time for a request's body to arrive, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub body_timeout_ms: u64,
    /// Close a connection idle this long, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    pub idle_timeout_ms: u64,
    /// On SIGINT/SIGTERM, time open requests get before connections are
    /// closed, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub shutdown_grace_ms: u64,
    /// Per-request deadline in milliseconds; expired requests get 504.
    #[arg(long, default_value_t = 1000)]
    pub deadline_ms: u64,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body: usize,
    /// Search threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub search_threads: usize,
    /// How often to look for moved roots, in milliseconds.
    #[arg(long, default_value_t = 250)]
    pub refresh_ms: u64,
}

impl HttpArgs {
    /// The server config for `addr`, reading maps from `source`.
    pub fn config(&self, addr: SocketAddr, source: Source) -> Result<Config> {
        let token = read_token(self.token_file.as_deref())?;
        let write_token = read_token(self.write_token_file.as_deref())?;
        let cfg = Config {
            addr,
            token,
            write_token,
            max_k: self.max_k,
            queue: self.queue,
            max_in_flight: self.max_in_flight,
            allowed_hosts: self.allow_host.clone(),
            max_connections: self.max_connections,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            body_timeout: Duration::from_millis(self.body_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            shutdown_grace: Duration::from_millis(self.shutdown_grace_ms),
            deadline: Duration::from_millis(self.deadline_ms),
            max_body: self.max_body,
            search_threads: self.search_threads,
            refresh_interval: Duration::from_millis(self.refresh_ms),
            source: Some(source),
            ..Config::default()
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// The token in `file` (trimmed), if a file is given.
fn read_token(file: Option<&std::path::Path>) -> Result<Option<String>> {
    let Some(p) = file else { return Ok(None) };
    let t = std::fs::read_to_string(p)
        .with_context(|| format!("cannot read token file {}", p.display()))?;
    let t = t.trim().to_string();
    if t.is_empty() {
        bail!("token file {} is empty", p.display());
    }
    Ok(Some(t))
}

/// Arguments of `prox serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The store whose maps are served.
    #[command(flatten)]
    pub store: StoreArg,
    /// HTTP settings (`--http` is required here).
    #[command(flatten)]
    pub http: HttpArgs,
    /// Async executor threads for connections and request parsing (0: one
    /// per core). 1 runs a single-threaded executor on the main thread:
    /// no hand-offs between executor workers, about half the context
    /// switches per query (docs/performance.md, Serving). Searches never
    /// run on them.
    #[arg(long, default_value_t = 0)]
    pub io_threads: usize,
    /// Threads that serve the connections, each on its own single-threaded
    /// executor, connections handed out in turn (0: the connections are
    /// served by the --io-threads executor). Searches never run on them.
    #[arg(long, default_value_t = 0)]
    pub connection_threads: usize,
}

/// Prints `http <addr>` on stdout (what scripts wait for).
pub fn announce(addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "http http://{addr}");
    let _ = out.flush();
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Runs `prox serve` until SIGINT/SIGTERM.
pub fn run(args: &ServeArgs) -> Result<()> {
    let Some(addr) = args.http.http else {
        bail!("--http ADDR is required (e.g. --http 127.0.0.1:7700)");
    };
    if args.store.s3_url().is_none() && !args.store.store.is_dir() {
        bail!("{} does not exist", args.store);
    }
    // With writes on, this process is the store's one writer; otherwise the
    // store is read-only here and reopened when another process moves a root.
    // A bucket store is shared with writers anywhere: its roots are re-read
    // every --refresh-ms and moved maps swapped in.
    let mut owner = None;
    let source = if args.store.s3_url().is_some() {
        Source::Store(args.store.open_dyn()?)
    } else if args.http.write_token_file.is_some() {
        let store: std::sync::Arc<dyn prox_engine::BlockStore> =
            std::sync::Arc::new(args.store.open()?);
        // Other processes' build/update/gc/roots reach the store through
        // this socket while the server holds its lock.
        owner = Some(
            prox_engine::owner::OwnerSocket::start(
                &args.store.store,
                store.clone(),
                prox_engine::store::Pins::new(),
                "prox serve",
            )
            .with_context(|| format!("owner socket of {}", args.store))?,
        );
        Source::Store(store)
    } else {
        Source::Directory(args.store.store.clone())
    };
    let mut cfg = args.http.config(addr, source)?;
    cfg.connection_threads = args.connection_threads;
    cfg.validate()?;
    let rt = match args.io_threads {
        0 => super::sync::runtime()?,
        // One worker of the multi-thread scheduler still parks and wakes
        // through its shared idle machinery; the current-thread scheduler
        // has one queue and is woken straight from the search threads.
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?,
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()
            .context("starting the async runtime")?,
    };
    rt.block_on(async {
        let server = Server::start(cfg, MapRegistry::new())
            .await
            .with_context(|| format!("serving {}", args.store))?;
        announce(server.addr());
        wait_for_signal().await;
        tracing::info!("shutting down");
        server.shutdown().await?;
        Ok::<_, anyhow::Error>(())
    })?;
    drop(owner);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::{parse_from, Command};

    #[test]
    fn flags_parse_for_serve_and_daemon() {
        let cli = parse_from([
            "prox",
            "serve",
            "--store",
            "db",
            "--http",
            "127.0.0.1:0",
            "--queue",
            "4",
            "--max-k",
            "50",
            "--deadline-ms",
            "20",
            "--max-body",
            "4096",
            "--search-threads",
            "2",
        ])
        .unwrap();
        let Command::Serve(a) = cli.command else {
            panic!("not serve")
        };
        let cfg = a
            .http
            .config(a.http.http.unwrap(), Source::Directory("db".into()))
            .unwrap();
        assert_eq!(
            (cfg.queue, cfg.max_k, cfg.max_body, cfg.search_threads),
            (4, 50, 4096, 2)
        );
        assert_eq!(cfg.deadline, Duration::from_millis(20));
        let cli = parse_from([
            "prox",
            "daemon",
            "--store",
            "db",
            "--http",
            "127.0.0.1:7700",
        ])
        .unwrap();
        let Command::Daemon(d) = cli.command else {
            panic!("not daemon")
        };
        assert_eq!(d.http.http, Some("127.0.0.1:7700".parse().unwrap()));
        let cli = parse_from(["prox", "daemon", "--store", "db"]).unwrap();
        let Command::Daemon(d) = cli.command else {
            panic!("not daemon")
        };
        assert_eq!(d.http.http, None);
    }

    #[test]
    fn beyond_loopback_needs_a_readable_nonempty_token() {
        let dir = tempfile::tempdir().unwrap();
        let cli = parse_from(["prox", "serve", "--http", "0.0.0.0:7700"]).unwrap();
        let Command::Serve(mut a) = cli.command else {
            panic!("not serve")
        };
        let addr = a.http.http.unwrap();
        let src = || Source::Directory(dir.path().into());
        assert!(a.http.config(addr, src()).is_err(), "no token");
        let tf = dir.path().join("token");
        a.http.token_file = Some(tf.clone());
        assert!(a.http.config(addr, src()).is_err(), "missing file");
        std::fs::write(&tf, "  \n").unwrap();
        assert!(a.http.config(addr, src()).is_err(), "empty token");
        std::fs::write(&tf, "s3cret\n").unwrap();
        let cfg = a.http.config(addr, src()).unwrap();
        assert_eq!(cfg.token.as_deref(), Some("s3cret"));
    }
}
