//! A running sync node: swarm, block server and the pull/push operations.
//!
//! Used both by the long-running daemon and by one-shot CLI commands.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::event_loop::{Banned, Behaviour, Client, EventLoop, InboundAnnounce, PeerInfo};
use crate::follow::{FollowState, FollowTable};
use crate::gate::Gate;
use crate::links::Linker;
use crate::pending::{self, PendingPull};
use crate::protocol::limits::{Limits, PullLimits};
use crate::protocol::messages::{AnnounceOutcome, Request, Response};
use crate::protocol::BLOCKS_PROTOCOL;
use crate::record::Records;
use crate::server::{Access, ServeCtx};
use crate::session::{self, PullReport, WantPlanner};
use crate::stores::Stores;
use futures::StreamExt;
use libp2p::{identity::Keypair, Multiaddr, PeerId};
use prox_engine::Cid;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Mutex, Notify};

mod fetch;
mod following;
mod listing;
pub use listing::{MirroredRoot, RemoteRoot};

/// Block streams opened per pull before giving up, when each one is lost
/// before its first answer (libp2p-stream drops inbound streams its
/// accept loop has not taken yet; see docs/sync.md).
const STREAM_ATTEMPTS: u32 = 4;
use tokio::task::JoinHandle;

/// Status of a node, as printed by `prox sync status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// This node's peer id.
    pub peer_id: String,
    /// Addresses it listens on.
    pub listen: Vec<String>,
    /// Connected peers.
    pub peers: Vec<PeerInfo>,
    /// Peers banned for misbehaving.
    pub banned: Vec<Banned>,
    /// Pulls running now (local root names).
    pub pulls_in_progress: Vec<String>,
    /// CIDs pinned by running pulls.
    pub pinned: usize,
    /// Named roots in the store.
    pub roots: Vec<String>,
    /// Durable records of pulls started and not finished (running ones and
    /// ones interrupted by a stop or crash; see [`crate::pending`]), each
    /// with how it will be finished.
    pub pending_pulls: Vec<PendingStatus>,
    /// Followed roots.
    pub follows: Vec<FollowState>,
}

/// A pending pull as listed by `prox sync status`.
#[derive(Debug, Clone, Serialize)]
pub struct PendingStatus {
    /// The durable record.
    #[serde(flatten)]
    pub record: PendingPull,
    /// How it finishes: `"running"` (a pull of that root runs now),
    /// `"follow"` (the root is followed: its follow loop resumes it), or
    /// `"manual"` (nothing resumes it automatically; pulling that root
    /// again reuses the staged blocks). See docs/sync.md, "Resume".
    pub resume: &'static str,
}

struct Inner<L: Linker> {
    client: Client,
    stores: Stores,
    linker: Arc<L>,
    limits: Limits,
    bulk: bool,
    /// Ask for block patches (and zstd-coded ones) when the source offers
    /// them.
    delta: bool,
    zstd: bool,
    /// Signed root records: signing, trust, keeping.
    records: Arc<Records>,
    peer_id: PeerId,
    listen: Vec<Multiaddr>,
    control: Mutex<libp2p_stream::Control>,
    pulls: std::sync::Mutex<Vec<String>>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
    follows: Arc<FollowTable>,
    /// Signalled after this node moved one of its roots (followers of it
    /// are announced the change).
    changed: Arc<Notify>,
    /// Every blocking job that touches `stores` holds a permit of this
    /// gate; shutdown closes it before the final commit.
    gate: Gate,
    /// Set once [`Node::shutdown`] has finished (held while it runs, so a
    /// second caller waits for the first).
    stopped: Mutex<bool>,
}

/// Parses peer ids from a config list.
fn parse_peers(ids: &[String]) -> Result<HashSet<PeerId>> {
    ids.iter()
        .map(|p| {
            p.parse::<PeerId>()
                .map_err(|e| Error::Config(format!("peer id {p:?}: {e}")))
        })
        .collect()
}

/// A running node. Cloning gives another handle to the same node.
pub struct Node<L: Linker> {
    inner: Arc<Inner<L>>,
}

impl<L: Linker> Clone for Node<L> {
    fn clone(&self) -> Self {
        Node {
            inner: self.inner.clone(),
        }
    }
}

impl<L: Linker> std::fmt::Debug for Node<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("peer_id", &self.inner.peer_id)
            .finish_non_exhaustive()
    }
}

/// Builds the access policy from a config.
pub fn access_from_config(config: &Config) -> Result<Access> {
    let allow = if config.allow.is_empty() {
        None
    } else {
        let mut set = HashSet::new();
        for p in &config.allow {
            set.insert(
                p.parse::<PeerId>()
                    .map_err(|e| Error::Config(format!("peer id {p:?}: {e}")))?,
            );
        }
        Some(set)
    };
    let serve = if config.serve.is_empty() {
        None
    } else {
        Some(config.serve.iter().cloned().collect())
    };
    Ok(Access {
        allow,
        serve,
        bulk_for_anyone: config.trust_all,
        delta: config.delta,
        zstd: config.zstd,
        open: config.open,
        followed: config
            .follow
            .iter()
            .filter_map(|f| f.peer.parse::<Multiaddr>().ok())
            .filter_map(|a| {
                a.iter().find_map(|p| match p {
                    libp2p::multiaddr::Protocol::P2p(id) => Some(id),
                    _ => None,
                })
            })
            .collect(),
    })
}

impl<L: Linker> Node<L> {
    /// Starts a node: builds the swarm (TCP + Noise + Yamux, identify, ping,
    /// optional mDNS), listens on `config.listen`, and serves blocks and
    /// control requests from `stores.main`. Returns once every listener has
    /// an address.
    pub async fn start(
        config: &Config,
        key: Keypair,
        stores: Stores,
        linker: L,
    ) -> Result<Node<L>> {
        config.validate()?;
        let access = Arc::new(access_from_config(config)?);
        let limits = config.limits.clone();
        // Nothing stages yet: collect what killed pulls left behind.
        match pending::collect_staging(&stores, &linker, false) {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "collected abandoned staged blocks"),
            Err(e) => tracing::warn!(%e, "cannot collect abandoned staging"),
        }
        let records = Arc::new(Records::new(
            stores.clone(),
            config.sign.then(|| key.clone()),
            config.record_validity_secs,
            parse_peers(&config.trust)?,
            parse_peers(&config.allow)?,
        ));
        let behaviour = Behaviour::new(&key, &access, &limits, config.mdns)?;
        let idle = limits.idle_connection;
        let mut swarm = libp2p::SwarmBuilder::with_existing_identity(key)
            .with_tokio()
            .with_tcp(
                libp2p::tcp::Config::default().nodelay(true),
                libp2p::noise::Config::new,
                libp2p::yamux::Config::default,
            )
            .map_err(|e| Error::Config(format!("transport: {e}")))?
            .with_behaviour(|_| behaviour)
            .map_err(|e| Error::Config(format!("behaviour: {e}")))?
            .with_swarm_config(|c| {
                c.with_idle_connection_timeout(idle)
                    .with_substream_upgrade_protocol_override(
                        libp2p::core::upgrade::Version::V1Lazy,
                    )
            })
            .build();
        let peer_id = *swarm.local_peer_id();
        let mut listeners = 0usize;
        for a in &config.listen {
            let addr: Multiaddr = a
                .parse()
                .map_err(|e| Error::Config(format!("listen {a:?}: {e}")))?;
            swarm
                .listen_on(addr.clone())
                .map_err(|e| Error::network(&addr, e))?;
            listeners += 1;
        }
        let mut listen = Vec::new();
        let deadline = tokio::time::Instant::now() + limits.request_timeout;
        while listen.len() < listeners {
            let ev = tokio::time::timeout_at(deadline, swarm.select_next_some())
                .await
                .map_err(|_| Error::Timeout {
                    what: "opening listeners".into(),
                    seconds: limits.request_timeout.as_secs(),
                })?;
            match ev {
                libp2p::swarm::SwarmEvent::NewListenAddr { address, .. } => listen.push(address),
                libp2p::swarm::SwarmEvent::ListenerError { error, .. } => {
                    return Err(Error::network("listener", error))
                }
                libp2p::swarm::SwarmEvent::ListenerClosed { reason: Err(e), .. } => {
                    return Err(Error::network("listener", e))
                }
                _ => {}
            }
        }
        let mut control = swarm.behaviour().blocks.new_control();
        let mut incoming = control
            .accept(BLOCKS_PROTOCOL)
            .map_err(|e| Error::Config(format!("block protocol: {e}")))?;
        let (ann_tx, mut ann_rx) = mpsc::channel::<InboundAnnounce>(8);
        let follows = Arc::new(FollowTable::default());
        let changed = Arc::new(Notify::new());
        let (event_loop, client) = EventLoop::new(
            swarm,
            stores.main.clone(),
            access.clone(),
            limits.clone(),
            ann_tx,
            follows.clone(),
            changed.clone(),
            records.clone(),
        );
        let linker = Arc::new(linker);
        let gate = Gate::default();
        let serve_ctx = Arc::new(ServeCtx::new(
            linker.clone(),
            stores.main.clone(),
            access,
            limits.clone(),
            gate.clone(),
        ));
        let inner = Arc::new(Inner {
            client,
            stores,
            linker,
            limits,
            bulk: config.bulk,
            delta: config.delta,
            zstd: config.zstd,
            records,
            peer_id,
            listen,
            control: Mutex::new(control),
            pulls: std::sync::Mutex::new(Vec::new()),
            tasks: std::sync::Mutex::new(Vec::new()),
            follows,
            changed,
            gate,
            stopped: Mutex::new(false),
        });
        let node = Node { inner };
        let el = tokio::spawn(event_loop.run());
        // Inbound streams arrive through a zero-capacity channel and are
        // dropped if not taken at once: hand each to its own task. The
        // tasks live in a `JoinSet` owned by the acceptor, so aborting the
        // acceptor (shutdown) aborts every session it started.
        let acceptor = tokio::spawn(async move {
            let mut sessions = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    next = incoming.next() => match next {
                        Some((peer, stream)) => {
                            sessions.spawn(crate::server::serve(serve_ctx.clone(), peer, stream));
                        }
                        None => break,
                    },
                    Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
                }
            }
        });
        let weak = Arc::downgrade(&node.inner);
        // Announced pulls live in a `JoinSet` owned by the announcer, so
        // shutdown (which aborts the announcer) aborts them too.
        let announcer = tokio::spawn(async move {
            let mut pulls = tokio::task::JoinSet::new();
            loop {
                let ann = tokio::select! {
                    ann = ann_rx.recv() => match ann {
                        Some(ann) => ann,
                        None => break,
                    },
                    Some(_) = pulls.join_next(), if !pulls.is_empty() => continue,
                };
                let Some(inner) = weak.upgrade() else { break };
                let node = Node { inner };
                pulls.spawn(async move {
                    let outcome = match node.pull_from(ann.peer, &ann.name, &ann.target).await {
                        Ok(r) => AnnounceOutcome::Applied {
                            blocks_fetched: r.blocks_fetched,
                            bytes_fetched: r.bytes_fetched,
                        },
                        Err(Error::Conflict { .. }) => AnnounceOutcome::Conflict,
                        Err(e) => AnnounceOutcome::Failed {
                            reason: e.to_string(),
                        },
                    };
                    let _ = node
                        .inner
                        .client
                        .respond(ann.id, Response::Announced(outcome))
                        .await;
                });
            }
        });
        let collector = tokio::spawn(collect_staging_every(
            Arc::downgrade(&node.inner),
            node.inner.limits.staging_gc_interval,
        ));
        node.inner
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend([el, acceptor, announcer, collector]);
        tracing::info!(%peer_id, listen = ?node.inner.listen, "sync node started");
        Ok(node)
    }

    /// This node's peer id.
    pub fn peer_id(&self) -> PeerId {
        self.inner.peer_id
    }

    /// Addresses this node listens on (with the actual ports).
    pub fn listen_addrs(&self) -> Vec<Multiaddr> {
        self.inner.listen.clone()
    }

    /// The stores this node works on.
    pub fn stores(&self) -> &Stores {
        &self.inner.stores
    }

    /// The event-loop client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Connects to `addr` and returns the peer id.
    pub async fn connect(&self, addr: &Multiaddr) -> Result<PeerId> {
        self.inner.client.dial(addr.clone()).await
    }

    /// Pulls the peer's root `name` at `addr` into local root `local`.
    pub async fn pull(&self, addr: &Multiaddr, name: &str, local: &str) -> Result<PullReport> {
        self.pull_with(addr, name, local, PullLimits::default())
            .await
    }

    /// [`Node::pull`] with this pull's own byte budget and deadline in
    /// place of the node's `Limits::pull_max_bytes` / `pull_deadline`. The
    /// deadline covers the whole pull: dial, root exchange, fetch and
    /// publication.
    pub async fn pull_with(
        &self,
        addr: &Multiaddr,
        name: &str,
        local: &str,
        limits: PullLimits,
    ) -> Result<PullReport> {
        limits.validate().map_err(Error::Config)?;
        let bounds = self.bounds(limits);
        let peer = tokio::time::timeout_at(bounds.until, self.connect(addr))
            .await
            .map_err(|_| bounds.expired(None))??;
        self.pull_inner(peer, &[], Some(addr), name, local, None, bounds)
            .await
    }

    /// The node's per-pull limits with `over` applied, the deadline
    /// starting now.
    fn bounds(&self, over: PullLimits) -> PullBounds {
        let limits = &self.inner.limits;
        let deadline = over.deadline.unwrap_or(limits.pull_deadline);
        PullBounds {
            max_bytes: over.max_bytes.unwrap_or(limits.pull_max_bytes),
            deadline,
            until: tokio::time::Instant::now() + deadline,
        }
    }

    /// Pulls root `name` of a connected `peer` into local root `local`:
    /// fetches the missing part of the closure, then compare-and-swaps the
    /// local root against the value it had when the pull started.
    pub async fn pull_from(&self, peer: PeerId, name: &str, local: &str) -> Result<PullReport> {
        let bounds = self.bounds(PullLimits::default());
        self.pull_inner(peer, &[], None, name, local, None, bounds)
            .await
    }

    /// The pull. `others` are further sources of the same root (see
    /// [`Node::pull_many`]). `known` is the remote value (and bulk offer) when the
    /// caller already asked for it (`Follow`), saving the `GetRoot`.
    #[allow(clippy::too_many_arguments)]
    async fn pull_inner(
        &self,
        peer: PeerId,
        others: &[PeerId],
        addr: Option<&Multiaddr>,
        name: &str,
        local: &str,
        known: Option<Response>,
        bounds: PullBounds,
    ) -> Result<PullReport> {
        prox_engine::store::validate_root_name(name)?;
        prox_engine::store::validate_root_name(local)?;
        let start = Instant::now();
        let inner = &self.inner;
        let main = inner.stores.main.clone();
        let local_name = local.to_string();
        let expected = inner.gate.run(move || Ok(main.root(&local_name)?)).await?;
        let answer = match known {
            Some(answer) => answer,
            None => {
                let ask = inner.client.request(
                    peer,
                    Request::GetRoot {
                        name: name.to_string(),
                    },
                );
                tokio::time::timeout_at(bounds.until, ask)
                    .await
                    .map_err(|_| bounds.expired(Some(peer)))??
            }
        };
        let (value, bulk_offered, offers, record) = match answer {
            Response::Root {
                value: Some(v),
                bulk,
                delta,
                zstd,
                record,
            } => {
                let offers = fetch::Offers { delta, zstd };
                (bytes::Bytes::from(v.into_vec()), bulk, offers, record)
            }
            Response::Root { value: None, .. } => {
                return Err(Error::NoSuchRoot {
                    peer,
                    name: name.to_string(),
                })
            }
            Response::Error { message, .. } => {
                return Err(Error::Refused {
                    peer,
                    reason: message,
                })
            }
            other => {
                return Err(Error::network(
                    peer,
                    format!("unexpected answer to GetRoot: {other:?}"),
                ))
            }
        };
        let signed = inner
            .records
            .admit(&peer, name, local, &value, record.as_ref().map(|b| &b[..]))
            .map_err(|reason| Error::Record {
                peer,
                name: name.to_string(),
                reason: Box::new(reason),
            })?;
        if expected.as_deref() == Some(&value[..]) {
            if let Some(r) = &signed {
                inner.records.keep(local, r);
            }
            let roots = inner.linker.root_links(&value)?;
            return Ok(PullReport {
                root: roots.first().map(|(c, _)| c.to_hex()),
                round_trips: 1,
                seconds: session::seconds_since(start),
                up_to_date: true,
                ..PullReport::default()
            });
        }
        let _guard = PullGuard::new(&inner.pulls, local);
        let record = PendingPull {
            local: local.to_string(),
            name: name.to_string(),
            peer: peer.to_string(),
            addr: addr.map(|a| a.to_string()),
            target: hex::encode(&value),
            expected: expected.as_deref().map(hex::encode),
            started_unix: pending::now_unix(),
        };
        let stores = inner.stores.clone();
        inner
            .gate
            .run(move || Ok(pending::record(&stores, &record)?))
            .await?;
        let limits = Limits {
            pull_max_bytes: bounds.max_bytes,
            ..inner.limits.clone()
        };
        let result = tokio::time::timeout_at(
            bounds.until,
            self.fetch_and_publish(
                peer,
                others,
                name,
                local,
                value,
                bulk_offered,
                offers,
                expected,
                start,
                &limits,
            ),
        )
        .await
        .unwrap_or_else(|_| Err(bounds.expired(Some(peer))));
        // Keep the record only when a retry can finish the job (network,
        // timeout, shutdown); drop it when the outcome is final.
        let finished = match &result {
            Ok(_) => true,
            Err(e) => matches!(
                e,
                Error::Conflict { .. } | Error::Misbehaving { .. } | Error::RemoteMissing { .. }
            ),
        };
        if finished {
            let stores = inner.stores.clone();
            let local = local.to_string();
            let _ = inner
                .gate
                .run(move || Ok(pending::clear(&stores, &local)?))
                .await;
        }
        if result.is_ok() {
            if let Some(r) = &signed {
                inner.records.keep(local, r);
            }
            inner.changed.notify_one();
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn fetch_and_publish(
        &self,
        peer: PeerId,
        others: &[PeerId],
        name: &str,
        local: &str,
        value: bytes::Bytes,
        bulk_offered: bool,
        offers: fetch::Offers,
        expected: Option<bytes::Bytes>,
        start: Instant,
        limits: &Limits,
    ) -> Result<PullReport> {
        let inner = &self.inner;
        let fetch::Agreeing { peers, left_out } = self.agreeing(others, name, &value).await;
        let offers = peers.iter().fold(offers, |a, (_, b)| a.and(*b));
        let linker = inner.linker.clone();
        let stores = inner.stores.clone();
        let v = value.clone();
        let gate = inner.gate.clone();
        // The previous local value pairs old blocks with new ones by
        // position; only useful when the source answers with patches.
        let base = expected.clone().filter(|_| inner.delta && offers.delta);
        let zstd = base.is_some() && inner.zstd && offers.zstd;
        let mut planner = inner
            .gate
            .run(move || WantPlanner::new(linker, stores, gate, peer, &v, base.as_deref()))
            .await?;
        planner.zstd = zstd;
        let (planner, sources) = if planner.done() {
            (planner, Vec::new())
        } else if peers.is_empty() {
            let empty = expected.is_none() && planner.nothing_local();
            let bulk =
                (inner.bulk && bulk_offered && empty).then(|| (name.to_string(), Cid::of(&value)));
            (
                self.fetch_one(planner, peer, limits, bulk).await?,
                Vec::new(),
            )
        } else {
            // Several sources: WANTs only (the bulk path is one stream).
            let all: Vec<PeerId> = std::iter::once(peer)
                .chain(peers.iter().map(|p| p.0))
                .collect();
            self.fetch_many(planner, &all, left_out, limits).await?
        };
        let mut report = planner.report.clone();
        report.sources = sources;
        report.round_trips += 1; // GetRoot
        let main = inner.stores.main.clone();
        let stores = inner.stores.clone();
        let local_name = local.to_string();
        let swapped = inner
            .gate
            .run(move || -> Result<bool> {
                main.commit()?;
                let ok = main.cas_root(&local_name, expected.as_deref(), Some(&value))?;
                // Staged blocks that are now visible leave staging; the rest
                // belong to other (running or abandoned) pulls and stay. The
                // lock keeps their puts out between listing and retaining.
                let staging = &stores.staging;
                let _staging = stores.lock_staging();
                let staged = staging.cids()?;
                if !staged.is_empty() {
                    let visible = main.has_many(&staged)?;
                    if visible.iter().any(|v| *v) {
                        let keep: HashSet<Cid> = staged
                            .into_iter()
                            .zip(visible)
                            .filter(|(_, v)| !v)
                            .map(|(c, _)| c)
                            .collect();
                        staging.retain(&keep)?;
                        staging.commit()?;
                    }
                }
                drop(planner); // releases the pins after the swap
                Ok(ok)
            })
            .await?;
        if !swapped {
            return Err(Error::Conflict {
                name: local.to_string(),
            });
        }
        report.seconds = session::seconds_since(start);
        tracing::info!(%peer, name, local, fetched = report.blocks_fetched, bytes = report.bytes_fetched, "pull published");
        Ok(report)
    }

    /// Asks the peer at `addr` to pull our root `name` into its root
    /// `remote_name`; waits for its answer.
    pub async fn push(
        &self,
        addr: &Multiaddr,
        name: &str,
        remote_name: &str,
    ) -> Result<AnnounceOutcome> {
        let peer = self.connect(addr).await?;
        let value = self
            .inner
            .stores
            .main
            .root(name)?
            .ok_or_else(|| Error::Config(format!("no local root named {name:?}")))?;
        let req = Request::Announce {
            name: name.to_string(),
            value: serde_bytes::ByteBuf::from(value.to_vec()),
            target: remote_name.to_string(),
        };
        match self.inner.client.request(peer, req).await? {
            Response::Announced(outcome) => Ok(outcome),
            Response::Error { message, .. } => Err(Error::Refused {
                peer,
                reason: message,
            }),
            other => Err(Error::network(
                peer,
                format!("unexpected answer to Announce: {other:?}"),
            )),
        }
    }

    /// Node status.
    pub async fn status(&self) -> Result<Status> {
        let (peers, banned) = self.inner.client.peers().await?;
        let running = self
            .inner
            .pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let followed: HashSet<String> = self
            .inner
            .follows
            .states()
            .into_iter()
            .map(|f| f.name)
            .collect();
        let pending_pulls = pending::list(&self.inner.stores)?
            .into_iter()
            .map(|record| {
                let resume = if running.contains(&record.local) {
                    "running"
                } else if followed.contains(&record.local) {
                    "follow"
                } else {
                    "manual"
                };
                PendingStatus { record, resume }
            })
            .collect();
        let roots = self
            .inner
            .stores
            .main
            .roots()?
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        Ok(Status {
            peer_id: self.inner.peer_id.to_string(),
            listen: self.inner.listen.iter().map(|a| a.to_string()).collect(),
            peers,
            banned,
            pulls_in_progress: running,
            pinned: self.inner.stores.pins.len(),
            roots,
            pending_pulls,
            follows: self.inner.follows.states(),
        })
    }

    /// Stops the node: refuses new store work, aborts its tasks (event
    /// loop, block sessions, follows, announced pulls), waits until every
    /// blocking job that was reading or writing the stores has ended (an
    /// aborted pull's batch check runs on to the end of its batch), then
    /// commits both stores. When this returns nothing of this node touches
    /// the stores any more; operations still running on other tasks (a pull
    /// awaited by the caller, a control connection) end with
    /// [`Error::Shutdown`] or a network error. In-flight pulls are
    /// abandoned: their staged blocks and pending records stay for a retry
    /// and no root moves. Calling it again is a no-op.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        let mut stopped = inner.stopped.lock().await;
        if *stopped {
            return;
        }
        // Closing first: a job starting from now on is refused, so waiting
        // below is bounded by the jobs already running.
        let closing = inner.gate.close();
        let tasks: Vec<_> =
            std::mem::take(&mut *inner.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
        let closed = closing.await;
        let (main, staging) = (inner.stores.main.clone(), inner.stores.staging.clone());
        let committed = tokio::task::spawn_blocking(move || {
            main.commit()?;
            staging.commit()
        })
        .await;
        match committed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(%e, "final commit failed"),
            Err(e) => tracing::error!(%e, "final commit did not run"),
        }
        drop(closed);
        *stopped = true;
        tracing::info!(peer_id = %inner.peer_id, "sync node stopped");
    }
}

/// Registers a running pull for `status` while alive.
/// Collects staging no pending-sync record can use every `interval` while
/// the node runs (staged blocks of pulls that failed for good), skipping a
/// round while any pull runs. The list of running pulls stays locked
/// during the collection, so no pull starts (and walks staging) meanwhile.
async fn collect_staging_every<L: Linker>(inner: std::sync::Weak<Inner<L>>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let Some(node) = inner.upgrade() else { break };
        let job = node.clone();
        let collected = node
            .gate
            .run(move || {
                let running = job.pulls.lock().unwrap_or_else(|e| e.into_inner());
                if !running.is_empty() {
                    return Ok(0);
                }
                Ok(pending::collect_staging(&job.stores, &*job.linker, false)?)
            })
            .await;
        match collected {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "collected abandoned staged blocks"),
            Err(Error::Shutdown) => break,
            Err(e) => tracing::warn!(%e, "cannot collect abandoned staging"),
        }
    }
}

/// The per-pull limits in force for one pull.
#[derive(Debug, Clone, Copy)]
struct PullBounds {
    max_bytes: u64,
    deadline: Duration,
    /// When the whole pull must have finished.
    until: tokio::time::Instant,
}

impl PullBounds {
    /// The error of a pull past its deadline (`peer` unknown while dialing).
    fn expired(&self, peer: Option<PeerId>) -> Error {
        match peer {
            Some(peer) => Error::PullDeadline {
                peer,
                deadline: self.deadline,
            },
            None => Error::Timeout {
                what: "dialing the peer within the pull's deadline".into(),
                seconds: self.deadline.as_secs(),
            },
        }
    }
}

struct PullGuard<'a> {
    list: &'a std::sync::Mutex<Vec<String>>,
    name: String,
}

impl<'a> PullGuard<'a> {
    fn new(list: &'a std::sync::Mutex<Vec<String>>, name: &str) -> Self {
        list.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.to_string());
        PullGuard {
            list,
            name: name.to_string(),
        }
    }
}

impl Drop for PullGuard<'_> {
    fn drop(&mut self) {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = l.iter().position(|n| *n == self.name) {
            l.remove(i);
        }
    }
}
