//! `prox daemon`: run the sync daemon on a store.

use anyhow::{Context, Result};
use clap::Args;
use prox_sync::{Config, Follow, RefsLinker};
use std::io::Write;
use std::path::PathBuf;

/// Examples for `prox daemon --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox daemon --store a/ --listen /ip4/127.0.0.1/tcp/4001 --serve docs --open
  prox daemon --store b/ --listen /ip4/127.0.0.1/tcp/4002 \\
      --follow /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW...:docs
  prox daemon --store c/ --follow /ip4/10.0.0.1/tcp/4001/p2p/12D3KooW...:docs \
      --follow /ip4/10.0.0.2/tcp/4001/p2p/12D3KooX...:docs   (one root from two sources)
  prox daemon --store a/ --config sync.json --allow 12D3KooW...
  prox daemon --store a/ --serve docs --http 127.0.0.1:7700   (+ search API, docs/api.md)

Prints `peer_id <id>`, one `listen <multiaddr>` per address and
`control <socket>` (and `http <url>` with --http) on stdout once listening, then logs to stderr (RUST_LOG).
Serves nobody unless --allow names peers or --open is given.
SIGINT/SIGTERM stop it cleanly: running pulls are abandoned (their blocks
stay staged for a retry) and no named root moves.";

/// Arguments of `prox daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// The store to serve and replicate into.
    #[command(flatten)]
    pub store: super::sync::SyncStoreArg,
    /// Listen multiaddr (repeatable; default /ip4/127.0.0.1/tcp/0).
    #[arg(long)]
    pub listen: Vec<String>,
    /// Identity key file (ed25519, created with mode 0600; default <store>/sync.key).
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Only these peer ids may connect (repeatable). Without any, the
    /// daemon serves nobody unless --open is given.
    #[arg(long = "allow", value_name = "PEER_ID")]
    pub allow: Vec<String>,
    /// Serve every peer when no --allow is given (anyone who can reach the
    /// listen address may read the served roots).
    #[arg(long)]
    pub open: bool,
    /// Serve only these root names (repeatable; default: all).
    #[arg(long = "serve", value_name = "NAME")]
    pub serve: Vec<String>,
    /// Keep a local root in step with a peer's: MULTIADDR:NAME (repeatable).
    /// The same NAME from several peers makes one follow that fetches from
    /// all of them at once (the first listed leads; a source that is down
    /// or stalls is skipped).
    #[arg(long = "follow", value_name = "PEER:NAME")]
    pub follow: Vec<String>,
    /// JSON config file (flags add to it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Enable mDNS discovery on the local network.
    #[arg(long)]
    pub mdns: bool,
    /// Without an allowlist, let every peer use the bulk path and push.
    #[arg(long)]
    pub trust_all: bool,
    /// Require signed root records from this publisher (repeatable): a
    /// pulled root must carry its valid record, seq never going back;
    /// allowlisted peers may still send unsigned roots.
    #[arg(long = "trust", value_name = "PEER_ID")]
    pub trust: Vec<String>,
    /// Sign the roots this daemon serves with its identity key.
    #[arg(long)]
    pub sign: bool,
    /// The HTTP search API next to the daemon (enabled by --http ADDR).
    #[command(flatten)]
    pub http: super::serve::HttpArgs,
}

/// Builds the effective config: file first, then flags.
pub fn config(args: &DaemonArgs) -> Result<Config> {
    let mut cfg = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    cfg.listen.extend(args.listen.iter().cloned());
    if cfg.listen.is_empty() {
        cfg.listen.push("/ip4/127.0.0.1/tcp/0".into());
    }
    if args.key.is_some() {
        cfg.key = args.key.clone();
    }
    cfg.allow.extend(args.allow.iter().cloned());
    cfg.serve.extend(args.serve.iter().cloned());
    for f in &args.follow {
        cfg.follow.push(f.parse::<Follow>()?);
    }
    cfg.mdns |= args.mdns;
    cfg.trust_all |= args.trust_all;
    cfg.trust.extend(args.trust.iter().cloned());
    cfg.sign |= args.sign;
    cfg.open |= args.open;
    if cfg.allow.is_empty() && !cfg.open {
        tracing::warn!(
            "no --allow and no --open: this daemon serves no peer (followed peers excepted)"
        );
    }
    cfg.validate()?;
    Ok(cfg)
}

/// Runs `prox daemon` until SIGINT/SIGTERM.
pub fn run(args: &DaemonArgs) -> Result<()> {
    let cfg = config(args)?;
    let stores = super::sync::open_stores(&args.store)?;
    let rt = super::sync::runtime()?;
    let dir = args.store.state_dir()?.to_path_buf();
    // Other processes' build/update/gc/roots reach a directory store
    // through this socket while the daemon holds its lock; collections it
    // runs keep the blocks running pulls pin. A bucket has no lock to
    // share, so it gets none.
    let owner = match args.store.store.s3_url() {
        Some(_) => None,
        None => Some(
            prox_engine::owner::OwnerSocket::start(
                &dir,
                stores.main.clone(),
                stores.pins.clone(),
                "prox daemon",
            )
            .with_context(|| format!("owner socket of {}", args.store))?,
        ),
    };
    // The HTTP API reads the daemon's own main store, so roots moved by
    // pulls are picked up by its refresh; it stops when the daemon does.
    let http = match args.http.http {
        Some(addr) => Some(
            args.http
                .config(addr, prox_serve::Source::Store(stores.main.clone()))?,
        ),
        None => None,
    };
    rt.block_on(async {
        let server = match http {
            Some(c) => Some(prox_serve::Server::start(c, prox_serve::MapRegistry::new()).await?),
            None => None,
        };
        let http_addr = server.as_ref().map(|s| s.addr());
        let ran = prox_sync::daemon::run(
            &dir,
            cfg,
            stores,
            RefsLinker,
            |s| {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "peer_id {}", s.peer_id);
                for a in &s.listen {
                    let _ = writeln!(out, "listen {a}");
                }
                let _ = writeln!(out, "control {}", s.socket.display());
                if let Some(a) = http_addr {
                    let _ = writeln!(out, "http http://{a}");
                }
                let _ = out.flush();
            },
            std::future::pending(),
        )
        .await;
        if let Some(s) = server {
            s.shutdown().await?;
        }
        ran.with_context(|| format!("daemon on {}", args.store))
    })?;
    drop(owner);
    Ok(())
}
