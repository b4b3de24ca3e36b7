//! `prox sync pull|push|status|peers`: talk to a running daemon through its
//! control socket, or do the same operation one-shot when none runs.

use crate::cmd::store_arg::StoreArg;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use prox_sync::control::Op;
use prox_sync::Stores;

/// Examples for `prox sync --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox sync pull --store b/ --peer /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --name docs --json
  prox sync pull --store b/ --peer ADDR --name docs --as docs-mirror
  prox sync push --store a/ --peer ADDR --name docs
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
    Pull(TransferArgs),
    /// Ask a peer to pull one of our roots.
    Push(TransferArgs),
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
    pub store: StoreArg,
    /// The peer's multiaddr, ending in /p2p/<peer id> so the connection
    /// authenticates that peer.
    #[arg(long)]
    pub peer: String,
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

/// Arguments of `status` and `peers`.
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// Local store.
    #[command(flatten)]
    pub store: StoreArg,
}

/// A multi-threaded tokio runtime for network commands.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Opens the store and its staging area (`<store>/sync-staging`)
/// ([`prox_sync::local::open_stores`]).
pub fn open_stores(store: &StoreArg) -> Result<Stores> {
    prox_sync::local::open_stores(&store.store)
        .with_context(|| format!("cannot open {store} and its staging area"))
}

/// Runs `prox sync`.
pub fn run(args: &SyncArgs) -> Result<()> {
    if let SyncOp::Pull(a) | SyncOp::Push(a) = &args.op {
        check_peer_names_identity(&a.peer, a.insecure_any_peer)?;
    }
    let (store, op, json) = match &args.op {
        SyncOp::Pull(a) => (
            &a.store,
            Op::Pull {
                peer: a.peer.clone(),
                name: a.name.clone(),
                local: a.as_name.clone(),
            },
            a.json,
        ),
        SyncOp::Push(a) => (
            &a.store,
            Op::Push {
                peer: a.peer.clone(),
                name: a.name.clone(),
                remote: a.as_name.clone(),
            },
            a.json,
        ),
        SyncOp::Status(a) => (&a.store, Op::Status, true),
        SyncOp::Peers(a) => (&a.store, Op::Peers, true),
    };
    let rt = runtime()?;
    let value = rt.block_on(prox_sync::local::execute(&store.store, &op))?;
    print(&op, &value, json)
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
