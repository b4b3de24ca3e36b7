//! `prox sync pull|push|ls|mirror|status|peers`: talk to a running daemon through its
//! control socket, or do the same operation one-shot when none runs.

use crate::cmd::store_arg::StoreArg;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use prox_engine::BlockStore;
use prox_sync::control::Op;
use prox_sync::Stores;
use std::sync::Arc;
use std::time::Duration;

/// Examples for `prox sync --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox sync pull --store b/ --peer /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --name docs --json
  prox sync pull --store b/ --peer ADDR --name docs --as docs-mirror
  prox sync pull --store b/ --peer ADDR_A --peer ADDR_B --name docs   # both at once
  prox sync pull --store b/ --peer ADDR --name docs --max-pull-bytes 20G --pull-deadline 2h
  prox sync push --store a/ --peer ADDR --name docs
  prox sync ls --store b/ --peer ADDR
  prox sync mirror --store b/ --peer ADDR     # follows too when a daemon runs on b/
  prox sync status --store b/

With a daemon running on the store, the command goes through its control
socket (<store>/sync.sock); otherwise it runs one-shot with the store's identity.
`pull --json` prints {\"root\",\"blocks_fetched\",\"bytes_fetched\",\"blocks_skipped\",
\"round_trips\",\"seconds\",...}.";

/// Arguments of `prox sync`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The operation.
    #[command(subcommand)]
    pub op: SyncOp,
}

/// `prox sync` operations.
#[derive(Debug, Subcommand)]
pub enum SyncOp {
    /// Fetch a peer's named root (only the blocks missing here) and publish it.
    Pull(PullArgs),
    /// Ask a peer to pull one of our roots.
    Push(TransferArgs),
    /// The roots a peer serves us: names, root CIDs, value sizes.
    Ls(PeerArgs),
    /// Pull every root a peer serves, then follow them (through a running
    /// daemon; one-shot it only pulls).
    Mirror(PeerArgs),
    /// Identity, listen addresses, roots, running pulls.
    Status(LocalArgs),
    /// Connected and banned peers.
    Peers(LocalArgs),
}

/// Arguments of `pull` and `push`.
#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Local store.
    #[command(flatten)]
    pub store: SyncStoreArg,
    /// The peer's multiaddr, ending in /p2p/<peer id> so the connection
    /// authenticates that peer. `pull` takes it several times to fetch
    /// from every peer at once (the first gives the root; the others
    /// join when they serve the same one); `push` takes one.
    #[arg(long, required = true)]
    pub peer: Vec<String>,
    /// Accept a peer address without /p2p/<peer id>: whoever answers at
    /// that address is trusted (only for tests on a trusted network).
    #[arg(long)]
    pub insecure_any_peer: bool,
    /// Root name (remote for pull, local for push).
    #[arg(long)]
    pub name: String,
    /// Name on the other side (local for pull, remote for push; default NAME).
    #[arg(long = "as")]
    pub as_name: Option<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `pull`: a transfer plus this pull's own limits.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// Peer, names and output.
    #[command(flatten)]
    pub transfer: TransferArgs,
    /// Most block bytes this pull may fetch (plain bytes or with a K, M, G
    /// or T suffix, powers of 1024); default: the node's
    /// `limits.pull_max_bytes` (256G).
    #[arg(long, value_parser = parse_bytes)]
    pub max_pull_bytes: Option<u64>,
    /// Deadline of the whole pull, dial to root update (`90s`, `500ms`,
    /// `10m`, `2h` or plain seconds); default: the node's
    /// `limits.pull_deadline` (24h).
    #[arg(long, value_parser = parse_deadline)]
    pub pull_deadline: Option<Duration>,
}

/// Arguments of `ls` and `mirror`.
#[derive(Debug, Args)]
pub struct PeerArgs {
    /// Local store.
    #[command(flatten)]
    pub store: SyncStoreArg,
    /// The peer's multiaddr, ending in /p2p/<peer id>.
    #[arg(long)]
    pub peer: String,
    /// Accept a peer address without /p2p/<peer id> (trusted networks only).
    #[arg(long)]
    pub insecure_any_peer: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `status` and `peers`.
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// Local store.
    #[command(flatten)]
    pub store: SyncStoreArg,
}

/// A multi-threaded tokio runtime for network commands.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The local store of a sync node (`--store`, a directory or a bucket)
/// and, for a bucket, the local directory of its sync state.
#[derive(Debug, Clone, Args)]
pub struct SyncStoreArg {
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// The node's local state (identity key `sync.key`, staging store
    /// `sync-staging`, control socket `sync.sock`); required with a bucket
    /// store, default the store directory.
    #[arg(long = "sync-dir", env = "PROX_SYNC_DIR")]
    pub sync_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Display for SyncStoreArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.store.fmt(f)
    }
}

impl SyncStoreArg {
    /// The directory of the node's local state.
    pub fn state_dir(&self) -> Result<&std::path::Path> {
        match (&self.sync_dir, self.store.s3_url()) {
            (Some(d), Some(_)) => Ok(d),
            (None, None) => self.store.dir_only(),
            (Some(_), None) => anyhow::bail!(
                "{}: a store directory keeps its sync state itself; --sync-dir is for a \
                 bucket store",
                self.store
            ),
            (None, Some(_)) => anyhow::bail!(
                "{}: a bucket store needs --sync-dir DIR for the node's key, staging \
                 store and control socket",
                self.store
            ),
        }
    }

    /// The visible store when it is a bucket (`None`: the directory store
    /// at [`state_dir`](Self::state_dir)).
    fn main(&self) -> Result<Option<Arc<dyn BlockStore>>> {
        match self.store.s3_url() {
            Some(_) => self.store.open_dyn().map(Some),
            None => Ok(None),
        }
    }
}

/// Opens the store and its staging area (`<sync dir>/sync-staging`)
/// ([`prox_sync::local::open_stores_in`]).
pub fn open_stores(store: &SyncStoreArg) -> Result<Stores> {
    let dir = store.state_dir()?;
    let opened = match store.main()? {
        Some(main) => prox_sync::local::open_stores_in(main, dir),
        None => prox_sync::local::open_stores(dir),
    };
    opened.with_context(|| format!("cannot open {store} and its staging area"))
}

/// Runs `prox sync`.
pub fn run(args: &SyncArgs) -> Result<()> {
    if let SyncOp::Pull(PullArgs { transfer: a, .. }) | SyncOp::Push(a) = &args.op {
        for peer in &a.peer {
            check_peer_names_identity(peer, a.insecure_any_peer)?;
        }
    }
    let (first, more) = match &args.op {
        SyncOp::Pull(PullArgs { transfer: a, .. }) | SyncOp::Push(a) => match &a.peer[..] {
            [first, more @ ..] => (first.clone(), more.to_vec()),
            [] => anyhow::bail!("give --peer ADDR"),
        },
        _ => (String::new(), Vec::new()),
    };
    if matches!(args.op, SyncOp::Push(_)) && !more.is_empty() {
        anyhow::bail!("push asks one peer to pull: give --peer once");
    }
    if let SyncOp::Ls(a) | SyncOp::Mirror(a) = &args.op {
        check_peer_names_identity(&a.peer, a.insecure_any_peer)?;
    }
    let (store, op, json) = match &args.op {
        SyncOp::Pull(p) => (
            &p.transfer.store,
            Op::Pull {
                peer: first,
                more,
                name: p.transfer.name.clone(),
                local: p.transfer.as_name.clone(),
                max_bytes: p.max_pull_bytes,
                deadline_ms: p
                    .pull_deadline
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)),
            },
            p.transfer.json,
        ),
        SyncOp::Push(a) => (
            &a.store,
            Op::Push {
                peer: first,
                name: a.name.clone(),
                remote: a.as_name.clone(),
            },
            a.json,
        ),
        SyncOp::Ls(a) => (
            &a.store,
            Op::Ls {
                peer: a.peer.clone(),
            },
            a.json,
        ),
        SyncOp::Mirror(a) => (
            &a.store,
            Op::Mirror {
                peer: a.peer.clone(),
                follow: true,
            },
            a.json,
        ),
        SyncOp::Status(a) => (&a.store, Op::Status, true),
        SyncOp::Peers(a) => (&a.store, Op::Peers, true),
    };
    let rt = runtime()?;
    let main = store.main()?;
    let value = rt.block_on(prox_sync::local::execute_in(store.state_dir()?, main, &op))?;
    print(&op, &value, json)?;
    if let Op::Mirror { .. } = op {
        let roots = value.get("roots").and_then(|r| r.as_array());
        let failed = roots
            .into_iter()
            .flatten()
            .filter(|r| !r["error"].is_null());
        let failed: Vec<&str> = failed.filter_map(|r| r["name"].as_str()).collect();
        if !failed.is_empty() {
            anyhow::bail!(
                "mirror: {} root(s) failed: {}",
                failed.len(),
                failed.join(", ")
            );
        }
    }
    Ok(())
}

fn print(op: &Op, v: &serde_json::Value, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(v)?);
        return Ok(());
    }
    match op {
        Op::Pull { .. } => {
            let g = |k: &str| v.get(k).cloned().unwrap_or(serde_json::Value::Null);
            if g("up_to_date") == serde_json::Value::Bool(true) {
                println!("up to date at {}", g("root"));
            } else {
                println!(
                    "pulled root {}: {} blocks, {} bytes fetched, {} subtrees skipped, {} round trips, {:.3} s",
                    g("root"),
                    g("blocks_fetched"),
                    g("bytes_fetched"),
                    g("blocks_skipped"),
                    g("round_trips"),
                    g("seconds").as_f64().unwrap_or(0.0)
                );
            }
            let sources = v.get("sources").and_then(|s| s.as_array());
            for s in sources.into_iter().flatten() {
                let why = s["error"].as_str().map(|e| format!(", left: {e}"));
                println!(
                    "  source {}: {} blocks, {} bytes{}",
                    s["peer"].as_str().unwrap_or("?"),
                    s["blocks"],
                    s["bytes"],
                    why.unwrap_or_default()
                );
            }
        }
        Op::Ls { .. } => {
            let roots = v.get("roots").and_then(|r| r.as_array());
            for r in roots.into_iter().flatten() {
                println!(
                    "{}\t{}\t{} B value",
                    r["name"].as_str().unwrap_or("?"),
                    r["root"].as_str().unwrap_or("-"),
                    r["value_bytes"]
                );
            }
        }
        Op::Mirror { .. } => {
            let roots = v.get("roots").and_then(|r| r.as_array());
            for r in roots.into_iter().flatten() {
                let name = r["name"].as_str().unwrap_or("?");
                let follow = if r["following"] == serde_json::Value::Bool(true) {
                    "following"
                } else {
                    "not following (no daemon on this store)"
                };
                match r["error"].as_str() {
                    Some(e) => println!("{name}: failed: {e}; {follow}"),
                    None => println!(
                        "{name}: {} blocks, {} bytes fetched; {follow}",
                        r["pull"]["blocks_fetched"], r["pull"]["bytes_fetched"]
                    ),
                }
            }
        }
        _ => println!("{}", serde_json::to_string_pretty(v)?),
    }
    Ok(())
}

/// A transfer address must authenticate its peer: it must end in
/// `/p2p/<peer id>` unless `--insecure-any-peer` is given.
fn check_peer_names_identity(peer: &str, insecure: bool) -> Result<()> {
    if !prox_sync::identity::names_peer(peer)? && !insecure {
        anyhow::bail!(
            "peer address {peer} does not name the peer: append /p2p/<peer id> \
             (printed by `prox daemon`), or pass --insecure-any-peer to trust whoever answers"
        );
    }
    Ok(())
}

/// Parses a byte count: plain bytes or with a `K`, `M`, `G` or `T` suffix
/// (powers of 1024, an optional `iB`/`B` after it); must be > 0.
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("bad byte count {s:?} (e.g. 1048576, 512M, 20G)")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad byte count {s:?} (e.g. 1048576, 512M, 20G)"))?;
    let v = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("byte count {s:?} is too large"))?;
    if v == 0 {
        return Err("the byte count must be > 0".into());
    }
    Ok(v)
}

/// Parses a deadline: `500ms`, `90s`, `10m`, `2h` or plain seconds; > 0.
pub fn parse_deadline(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim();
    let (num, mul) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad deadline {s:?} (e.g. 500ms, 90s, 10m, 2h)"))?;
    let d = Duration::try_from_secs_f64(v * mul).map_err(|e| format!("deadline {s:?}: {e}"))?;
    if d.is_zero() {
        return Err("the deadline must be > 0".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_and_deadlines_parse() {
        assert_eq!(parse_bytes("1000").unwrap(), 1000);
        assert_eq!(parse_bytes("512M").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("20GiB").unwrap(), 20 << 30);
        assert_eq!(parse_bytes("1kB").unwrap(), 1024);
        for bad in ["0", "x", "12Q", "", "99999999T"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_deadline("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_deadline("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_deadline("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_deadline("1.5").unwrap(), Duration::from_millis(1500));
        for bad in ["0s", "-1", "x", ""] {
            assert!(parse_deadline(bad).is_err(), "{bad}");
        }
    }
}
