//! The long-running daemon: a [`Node`] plus the control socket, followed
//! roots and signal handling.
//!
//! Shutdown (SIGINT/SIGTERM or the caller's future): stop following, close
//! the control socket, stop the node (running pulls are abandoned: their
//! verified blocks stay staged, no named root moves), commit both stores.
//! Named roots only ever move by compare-and-swap after the whole closure is
//! visible, so stopping at any point leaves every root pointing at a
//! complete closure.

use crate::config::Config;
use crate::control;
use crate::error::Result;
use crate::identity;
use crate::links::Linker;
use crate::node::Node;
use crate::stores::Stores;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a started daemon prints: its identity and where to reach it.
#[derive(Debug, Clone)]
pub struct Started {
    /// Peer id.
    pub peer_id: libp2p::PeerId,
    /// Listen addresses, each ending in `/p2p/<peer id>`.
    pub listen: Vec<libp2p::Multiaddr>,
    /// Control socket path.
    pub socket: PathBuf,
}

/// Runs a daemon over `stores` (the store at `store_dir`) until `shutdown`
/// resolves or a SIGINT/SIGTERM arrives. `on_start` sees the identity and
/// addresses once listening.
pub async fn run<L: Linker>(
    store_dir: &Path,
    config: Config,
    stores: Stores,
    linker: L,
    on_start: impl FnOnce(&Started),
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    config.validate()?;
    let key_path = config
        .key
        .clone()
        .unwrap_or_else(|| store_dir.join("sync.key"));
    let key = identity::load_or_create(&key_path)?;
    let node = Node::start(&config, key, stores, linker).await?;
    let socket = control::socket_path(store_dir);
    let control_task = control::serve(node.clone(), socket.clone()).await?;
    let peer_id = node.peer_id();
    let started = Started {
        peer_id,
        listen: node
            .listen_addrs()
            .into_iter()
            .map(|a| a.with(libp2p::multiaddr::Protocol::P2p(peer_id)))
            .collect(),
        socket: socket.clone(),
    };
    on_start(&started);

    // Pulls interrupted by the last stop: followed roots resume in their
    // first follow round (staged blocks are walked locally, only the rest
    // is fetched); others are not restarted by the daemon (the operator may
    // have stopped them on purpose, and the source address may be stale)
    // and stay listed in `prox sync status` with `"resume": "manual"` until
    // a pull of that root finishes. See docs/sync.md, "Resume".
    for p in crate::pending::list(node.stores())? {
        let followed = config.follow.iter().any(|f| f.name == p.local);
        if followed {
            tracing::info!(local = %p.local, peer = %p.peer, name = %p.name, "interrupted pull found; its follow loop resumes it");
        } else {
            tracing::warn!(local = %p.local, peer = %p.peer, name = %p.name, addr = ?p.addr, "interrupted pull found; not followed, so it resumes only when that root is pulled again");
        }
    }
    // One loop per followed name, fetching from every peer given for it
    // (in the order given).
    let mut sources: Vec<(String, Vec<libp2p::Multiaddr>)> = Vec::new();
    for f in &config.follow {
        let addr = control::parse_addr(&f.peer)?;
        match sources.iter_mut().find(|(name, _)| *name == f.name) {
            Some((_, addrs)) => addrs.push(addr),
            None => sources.push((f.name.clone(), vec![addr])),
        }
    }
    let every = Duration::from_secs(config.follow_interval_secs);
    for (name, addrs) in sources {
        node.follow_from(addrs, name, every);
    }

    wait_for_shutdown(shutdown).await;
    tracing::info!("shutting down");
    // Aborting the socket task aborts the operations its clients started;
    // awaiting it makes sure they are gone before the node stops.
    control_task.abort();
    let _ = control_task.await;
    node.shutdown().await;
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

async fn wait_for_shutdown(shutdown: impl Future<Output = ()>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            shutdown.await;
            return;
        };
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT"),
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = shutdown => {}
        }
    }
    #[cfg(not(unix))]
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = shutdown => {}
        }
    }
}
