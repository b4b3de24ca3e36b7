//! Operations on a local store's behalf: through the daemon's control
//! socket when a daemon serves the store, otherwise one-shot on a
//! short-lived [`Node`] with the store's own identity (`<store>/sync.key`)
//! and staging area (`<store>/sync-staging`). The entry point of `prox sync`
//! and of the Python `prox.sync.pull`.

use crate::control::{self, Op};
use crate::error::{Error, Result};
use crate::{identity, Config, Limits, Node, RefsLinker, Stores};
use prox_engine::store::MmapStore;
use prox_engine::BlockStore;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Longest a one-shot operation may run.
const ONE_SHOT_LIMIT: Duration = Duration::from_secs(3600);

/// Opens the store at `dir` (created if absent) and its staging area
/// (`<dir>/sync-staging`).
pub fn open_stores(dir: &Path) -> Result<Stores> {
    open_stores_in(Arc::new(MmapStore::open(dir)?), dir)
}

/// `main` (any store: a directory, a bucket) with its staging area in the
/// local directory `state` (`<state>/sync-staging`, created if absent).
pub fn open_stores_in(main: Arc<dyn BlockStore>, state: &Path) -> Result<Stores> {
    let staging = MmapStore::open(state.join("sync-staging"))?;
    Ok(Stores::new(main, Arc::new(staging)))
}

/// Runs `op` for the store at `dir`: through its daemon's control socket
/// when one answers there, else one-shot. A pull with its own deadline
/// (`deadline_ms`) is bounded by it (the daemon or the one-shot node
/// enforces it; the control request waits that long plus 30 s for the
/// answer); anything else one-shot is bounded by an hour. Answers the
/// operation's JSON report (`pull`: a [`crate::PullReport`]).
pub async fn execute(dir: &Path, op: &Op) -> Result<serde_json::Value> {
    execute_in(dir, None, op).await
}

/// [`execute`] with the node's local state (identity key, staging area,
/// control socket) in `dir` and its visible store `main` elsewhere (a
/// bucket); `None`: the directory store at `dir`.
pub async fn execute_in(
    dir: &Path,
    main: Option<Arc<dyn BlockStore>>,
    op: &Op,
) -> Result<serde_json::Value> {
    let deadline = match op {
        Op::Pull {
            deadline_ms: Some(ms),
            ..
        } => Some(Duration::from_millis(*ms)),
        _ => None,
    };
    let socket = control::socket_path(dir);
    if socket.exists() {
        let timeout = deadline
            .map(|d| d + Duration::from_secs(30))
            .unwrap_or(Limits::default().announce_timeout);
        if let Some(reply) = control::request(&socket, op.clone(), timeout).await? {
            return match (reply.ok, reply.result, reply.error) {
                (true, Some(v), _) => Ok(v),
                (_, _, e) => Err(Error::Control(format!(
                    "daemon: {}",
                    e.unwrap_or_else(|| "no result".into())
                ))),
            };
        }
    }
    // One-shot, nothing outlives the command: a mirror cannot follow.
    let op = &match op {
        Op::Mirror { peer, .. } => Op::Mirror {
            peer: peer.clone(),
            follow: false,
        },
        other => other.clone(),
    };
    let stores = match main {
        Some(main) => open_stores_in(main, dir)?,
        None => open_stores(dir)?,
    };
    let key = identity::load_or_create(&dir.join("sync.key"))?;
    let node = Node::start(&Config::default(), key, stores, RefsLinker).await?;
    let limit = deadline.unwrap_or(ONE_SHOT_LIMIT);
    let out = tokio::time::timeout(limit, control::execute(&node, op)).await;
    node.shutdown().await;
    out.map_err(|_| Error::Timeout {
        what: format!("one-shot {op:?}"),
        seconds: limit.as_secs(),
    })?
}

/// Blocking [`execute`] of a pull of the peer's root `name` into the local
/// root `local` (default `name`), on a runtime of its own. `peer` is a
/// multiaddr; unless `insecure_any_peer`, it must end in `/p2p/<peer id>` so
/// the connection authenticates that peer ([`Error::Config`] otherwise).
pub fn pull(
    dir: &Path,
    peer: &str,
    name: &str,
    local: Option<&str>,
    insecure_any_peer: bool,
) -> Result<serde_json::Value> {
    if !identity::names_peer(peer)? && !insecure_any_peer {
        return Err(Error::Config(format!(
            "peer address {peer} does not name the peer: append /p2p/<peer id> \
             (printed by `prox daemon`), or allow any peer (only on a trusted network)"
        )));
    }
    let op = Op::Pull {
        peer: peer.to_string(),
        more: Vec::new(),
        name: name.to_string(),
        local: local.map(str::to_string),
        max_bytes: None,
        deadline_ms: None,
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(execute(dir, &op))
}
