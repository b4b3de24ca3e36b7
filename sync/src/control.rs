//! The local control channel: a Unix socket in the store directory
//! (`sync.sock`) speaking JSON lines, so `prox sync pull|push|status|peers`
//! can drive a running daemon (which holds the store's write lock).
//!
//! Request: `{"id":1,"op":"pull","peer":"/ip4/…/p2p/…","name":"a","as":"b"}`
//! (`op` one of `pull`, `push`, `status`, `peers`; `as` optional; a pull
//! may add `max_bytes` and `deadline_ms`, its own limits).
//! Reply: `{"id":1,"ok":true,"result":…}` or `{"id":1,"ok":false,"error":"…"}`.
//! One request per line, at most [`MAX_LINE`] bytes; requests on one
//! connection are answered in order. The socket file is created mode 0600
//! (only the store's owner may drive the daemon).

use crate::error::{Error, Result};
use crate::links::Linker;
use crate::node::Node;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Longest request or reply line.
pub const MAX_LINE: usize = 1 << 20;

/// File name of the socket inside the store directory.
pub const SOCKET_NAME: &str = "sync.sock";

/// The socket path for a store directory.
pub fn socket_path(store_dir: &Path) -> PathBuf {
    store_dir.join(SOCKET_NAME)
}

/// An operation requested over the control channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    /// Pull `name` from `peer` (and every `more` peer at once, see
    /// [`Node::pull_many`]) into local root `as` (default `name`).
    Pull {
        /// Peer multiaddr: the first source, whose root value is pulled.
        peer: String,
        /// Further sources of the same root (multiaddrs).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        more: Vec<String>,
        /// Remote root name.
        name: String,
        /// Local root name.
        #[serde(rename = "as", default)]
        local: Option<String>,
        /// Block bytes this pull may fetch (default: the daemon's
        /// `limits.pull_max_bytes`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
        /// Deadline of the whole pull in milliseconds (default: the
        /// daemon's `limits.pull_deadline`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline_ms: Option<u64>,
    },
    /// Ask `peer` to pull our root `name` into its root `as` (default
    /// `name`).
    Push {
        /// Peer multiaddr.
        peer: String,
        /// Local root name.
        name: String,
        /// Remote root name.
        #[serde(rename = "as", default)]
        remote: Option<String>,
    },
    /// The roots `peer` serves to this node: names, root CIDs, value sizes.
    Ls {
        /// Peer multiaddr.
        peer: String,
    },
    /// Pull every root `peer` serves into the local root of the same name;
    /// with `follow`, keep each in step afterwards (only a daemon keeps
    /// following: one-shot, the node stops with the command).
    Mirror {
        /// Peer multiaddr.
        peer: String,
        /// Follow the mirrored roots (default true).
        #[serde(default = "yes")]
        follow: bool,
    },
    /// Node status.
    Status,
    /// Connected and banned peers.
    Peers,
}

fn yes() -> bool {
    true
}

/// A request line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlRequest {
    /// Echoed in the reply.
    pub id: u64,
    /// What to do.
    #[serde(flatten)]
    pub op: Op,
}

/// A reply line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlReply {
    /// The request's id.
    pub id: u64,
    /// Success flag.
    pub ok: bool,
    /// The result on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The error message on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Runs `op` against a node (used by the socket server and by one-shot
/// CLI commands alike).
pub async fn execute<L: Linker>(node: &Node<L>, op: &Op) -> Result<serde_json::Value> {
    let json =
        |v: serde_json::Result<serde_json::Value>| v.map_err(|e| Error::Control(e.to_string()));
    match op {
        Op::Pull {
            peer,
            more,
            name,
            local,
            max_bytes,
            deadline_ms,
        } => {
            let addrs = std::iter::once(peer)
                .chain(more)
                .map(|p| parse_addr(p))
                .collect::<Result<Vec<_>>>()?;
            let limits = crate::protocol::limits::PullLimits {
                max_bytes: *max_bytes,
                deadline: deadline_ms.map(Duration::from_millis),
            };
            let r = node
                .pull_many(&addrs, name, local.as_deref().unwrap_or(name), limits)
                .await?;
            json(serde_json::to_value(r))
        }
        Op::Push { peer, name, remote } => {
            let addr = parse_addr(peer)?;
            let out = node
                .push(&addr, name, remote.as_deref().unwrap_or(name))
                .await?;
            Ok(serde_json::json!({ "outcome": format!("{out:?}") }))
        }
        Op::Ls { peer } => {
            let roots = node.list_roots(&parse_addr(peer)?).await?;
            Ok(serde_json::json!({ "roots": roots }))
        }
        Op::Mirror { peer, follow } => {
            let fallback = Duration::from_secs(crate::Config::default().follow_interval_secs);
            let roots = node
                .mirror(&parse_addr(peer)?, follow.then_some(fallback))
                .await?;
            Ok(serde_json::json!({ "roots": roots }))
        }
        Op::Status => json(serde_json::to_value(node.status().await?)),
        Op::Peers => {
            let (peers, banned) = node.client().peers().await?;
            Ok(serde_json::json!({ "peers": peers, "banned": banned }))
        }
    }
}

/// Parses a peer multiaddr.
pub fn parse_addr(s: &str) -> Result<libp2p::Multiaddr> {
    s.parse()
        .map_err(|e| Error::Config(format!("peer address {s:?}: {e}")))
}

/// Binds the control socket at `path` (replacing a stale one left by a
/// crashed daemon, refusing if a live daemon answers there) and serves it
/// until the task is aborted.
pub async fn serve<L: Linker>(node: Node<L>, path: PathBuf) -> Result<tokio::task::JoinHandle<()>> {
    if path.exists() {
        if UnixStream::connect(&path).await.is_ok() {
            return Err(Error::Control(format!(
                "another daemon is listening on {}",
                path.display()
            )));
        }
        std::fs::remove_file(&path)?;
    }
    let listener = UnixListener::bind(&path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    // Connections are served by tasks of a `JoinSet` owned by the listener
    // task: aborting it (daemon shutdown) aborts every operation a control
    // client started, instead of leaving it to fail later.
    Ok(tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let conn = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((conn, _)) => conn,
                    Err(_) => break,
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            };
            let node = node.clone();
            conns.spawn(async move {
                if let Err(e) = handle(node, conn).await {
                    tracing::debug!(%e, "control connection ended");
                }
            });
        }
    }))
}

async fn handle<L: Linker>(node: Node<L>, conn: UnixStream) -> Result<()> {
    let (r, mut w) = conn.into_split();
    let mut r = BufReader::new(r);
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_line(&mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        if n > MAX_LINE {
            return Err(Error::Control("request line too long".into()));
        }
        let reply = match serde_json::from_str::<ControlRequest>(line.trim_end()) {
            Ok(req) => match execute(&node, &req.op).await {
                Ok(v) => ControlReply {
                    id: req.id,
                    ok: true,
                    result: Some(v),
                    error: None,
                },
                Err(e) => ControlReply {
                    id: req.id,
                    ok: false,
                    result: None,
                    error: Some(e.to_string()),
                },
            },
            Err(e) => ControlReply {
                id: 0,
                ok: false,
                result: None,
                error: Some(format!("bad request: {e}")),
            },
        };
        let mut out = serde_json::to_vec(&reply).map_err(|e| Error::Control(e.to_string()))?;
        out.push(b'\n');
        w.write_all(&out).await?;
    }
}

/// Sends one request to the daemon at `path` and waits (at most `timeout`)
/// for its reply. `Ok(None)` when no daemon listens there.
pub async fn request(path: &Path, op: Op, timeout: Duration) -> Result<Option<ControlReply>> {
    let Ok(conn) = UnixStream::connect(path).await else {
        return Ok(None);
    };
    let (r, mut w) = conn.into_split();
    let req = ControlRequest { id: 1, op };
    let mut line = serde_json::to_vec(&req).map_err(|e| Error::Control(e.to_string()))?;
    line.push(b'\n');
    w.write_all(&line).await?;
    let mut r = BufReader::new(r);
    let mut reply = String::new();
    let n = tokio::time::timeout(
        timeout,
        (&mut r).take(MAX_LINE as u64 + 1).read_line(&mut reply),
    )
    .await
    .map_err(|_| Error::Timeout {
        what: "control request".into(),
        seconds: timeout.as_secs(),
    })??;
    if n == 0 || n > MAX_LINE {
        return Err(Error::Control(
            "daemon closed the connection without a reply".into(),
        ));
    }
    let reply: ControlReply = serde_json::from_str(reply.trim_end())
        .map_err(|e| Error::Control(format!("bad reply: {e}")))?;
    Ok(Some(reply))
}
