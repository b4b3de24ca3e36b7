//! The task that owns the libp2p `Swarm`, and the [`Client`] that talks to
//! it over a bounded command channel.
//!
//! Every command carries an id (for logs) and a oneshot reply. Inbound
//! control requests are answered here when they only need a root read;
//! `Announce` is handed to the node (bounded channel) and answered when the
//! announced pull finishes, except announces of a root this node follows
//! from that peer, which wake the follow loop and are answered at once.
//! Block streams do not pass through this task: sessions open and accept
//! them through `libp2p_stream::Control`.
//!
//! Connection reuse. The swarm counts a connection as established until it
//! has finished closing, so "is connected" is not "usable": a connection
//! this node is closing (disconnect, ban) never satisfies a `Dial` or
//! carries a new request; both wait until it is gone and then go over a
//! fresh one. A connection whose remote went away (restart, crash) is not
//! known to be dead until it fails; a control request that fails that way
//! (closed, reset, dial failure) is sent again, over a new connection to the
//! last address dialed for that peer, at most [`REQUEST_ATTEMPTS`] times in
//! all, then fails with [`Error::ConnectionLost`]. `Announce` is not
//! resent (the remote may have acted on it).
//!
//! Followers (`Follow` requests) are remembered per connection with the
//! root value they were last told about; on a local root change (signalled
//! by the node after its own compare-and-swap, and checked every
//! [`WATCH_INTERVAL`] for other writers of the store) each follower whose
//! value is stale gets an `Announce`.

use crate::error::{Error, Result};
use crate::follow::FollowTable;
use crate::protocol::codec::CtlCodec;
use crate::protocol::limits::{Limits, MAX_LIST_ROOTS, MAX_ROOT_VALUE};
use crate::protocol::messages::{ErrorCode, Hello, Request, Response, RootEntry};
use crate::server::Access;
use futures::StreamExt;
use libp2p::allow_block_list::{self, AllowedPeers, BlockedPeers};
use libp2p::core::ConnectedPoint;
use libp2p::request_response::{
    self, InboundRequestId, OutboundRequestId, ProtocolSupport, ResponseChannel,
};
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, NetworkBehaviour, SwarmEvent};
use libp2p::{connection_limits, identify, mdns, ping, Multiaddr, PeerId, Swarm};
use prox_engine::BlockStore;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Notify};

/// How often subscribed roots are compared with what their followers were
/// last told (catches root changes made by other writers of the store).
pub(crate) const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Most roots one peer may follow on one node.
const MAX_FOLLOWS_PER_PEER: usize = 64;
/// Most follow subscriptions a node keeps in total.
const MAX_FOLLOWS: usize = 4096;
/// Times a control request is sent before its caller gets
/// [`Error::ConnectionLost`] (the first send plus retries after the
/// connection carrying it closed or could not be dialed).
pub(crate) const REQUEST_ATTEMPTS: u32 = 3;
/// Most peer addresses remembered for redials.
const MAX_ADDRS: usize = 1024;

/// The node's combined libp2p behaviour.
#[derive(NetworkBehaviour)]
pub(crate) struct Behaviour {
    allow: Toggle<allow_block_list::Behaviour<AllowedPeers>>,
    block: allow_block_list::Behaviour<BlockedPeers>,
    limits: connection_limits::Behaviour,
    identify: identify::Behaviour,
    ping: ping::Behaviour,
    ctl: request_response::Behaviour<CtlCodec>,
    pub(crate) blocks: libp2p_stream::Behaviour,
    mdns: Toggle<mdns::tokio::Behaviour>,
}

impl Behaviour {
    pub(crate) fn new(
        key: &libp2p::identity::Keypair,
        access: &Access,
        limits: &Limits,
        use_mdns: bool,
    ) -> Result<Self> {
        let allow = access.allow.as_ref().map(|peers| {
            let mut b = allow_block_list::Behaviour::<AllowedPeers>::default();
            for p in peers {
                b.allow_peer(*p);
            }
            b
        });
        let conn_limits = connection_limits::ConnectionLimits::default()
            .with_max_established_per_peer(Some(4))
            .with_max_established(Some(256))
            .with_max_pending_incoming(Some(64));
        let ctl_cfg = request_response::Config::default()
            .with_request_timeout(limits.announce_timeout)
            .with_max_concurrent_streams(32);
        let mdns = if use_mdns {
            Some(mdns::tokio::Behaviour::new(
                mdns::Config::default(),
                key.public().to_peer_id(),
            )?)
        } else {
            None
        };
        Ok(Behaviour {
            allow: allow.into(),
            block: Default::default(),
            limits: connection_limits::Behaviour::new(conn_limits),
            identify: identify::Behaviour::new(
                identify::Config::new("/prox/1.0.0".into(), key.public())
                    .with_agent_version(format!("prox/{}", env!("CARGO_PKG_VERSION"))),
            ),
            ping: ping::Behaviour::new(ping::Config::new()),
            ctl: request_response::Behaviour::with_codec(
                CtlCodec::default(),
                [(crate::protocol::CTL_PROTOCOL, ProtocolSupport::Full)],
                ctl_cfg,
            ),
            blocks: libp2p_stream::Behaviour::new(),
            mdns: mdns.into(),
        })
    }
}

/// A connected peer as reported by `prox sync peers`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerInfo {
    /// Peer id.
    pub peer: String,
    /// Remote address of one of its connections.
    pub address: String,
    /// Agent string from identify, once known.
    pub agent: Option<String>,
    /// Last ping round trip in milliseconds.
    pub rtt_ms: Option<f64>,
}

/// A peer banned for breaking the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Banned {
    /// Peer id.
    pub peer: String,
    /// What it did.
    pub reason: String,
}

/// An inbound `Announce` handed to the node.
#[derive(Debug)]
pub(crate) struct InboundAnnounce {
    pub(crate) id: InboundRequestId,
    pub(crate) peer: PeerId,
    pub(crate) name: String,
    pub(crate) target: String,
}

pub(crate) enum Command {
    Dial {
        addr: Multiaddr,
        reply: oneshot::Sender<Result<PeerId>>,
    },
    Request {
        peer: PeerId,
        request: Request,
        reply: oneshot::Sender<Result<Response>>,
    },
    Respond {
        id: InboundRequestId,
        response: Response,
    },
    Peers {
        reply: oneshot::Sender<(Vec<PeerInfo>, Vec<Banned>)>,
    },
    Ban {
        peer: PeerId,
        reason: String,
    },
    Disconnect {
        peer: PeerId,
    },
}

/// Handle on the event loop. Cheap to clone; every call is bounded by the
/// command channel's capacity and by a timeout.
#[derive(Clone)]
pub struct Client {
    tx: mpsc::Sender<(u64, Command)>,
    next_id: Arc<AtomicU64>,
    limits: Limits,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    async fn call<T>(
        &self,
        what: &str,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(id, what, "command");
        self.tx
            .send((id, make(tx)))
            .await
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)
    }

    /// Connects to `addr` (reusing an open connection) and returns the peer.
    pub async fn dial(&self, addr: Multiaddr) -> Result<PeerId> {
        let secs = self.limits.request_timeout;
        let fut = self.call("dial", |reply| Command::Dial {
            addr: addr.clone(),
            reply,
        });
        tokio::time::timeout(secs, fut)
            .await
            .map_err(|_| Error::Timeout {
                what: format!("dial {addr}"),
                seconds: secs.as_secs(),
            })??
    }

    /// Sends a control request and waits for the answer (bounded by the
    /// request timeout, or the announce timeout for `Announce`).
    pub async fn request(&self, peer: PeerId, request: Request) -> Result<Response> {
        let limit = match request {
            Request::Announce { .. } => self.limits.announce_timeout,
            _ => self.limits.request_timeout,
        };
        let fut = self.call("request", |reply| Command::Request {
            peer,
            request,
            reply,
        });
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| Error::Timeout {
                what: format!("control request to {peer}"),
                seconds: limit.as_secs(),
            })??
    }

    /// Connected peers and banned peers.
    pub async fn peers(&self) -> Result<(Vec<PeerInfo>, Vec<Banned>)> {
        self.call("peers", |reply| Command::Peers { reply }).await
    }

    pub(crate) async fn respond(&self, id: InboundRequestId, response: Response) -> Result<()> {
        let nid = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send((nid, Command::Respond { id, response }))
            .await
            .map_err(|_| Error::Shutdown)
    }

    /// Bans `peer` for the life of this node and closes its connections.
    pub async fn ban(&self, peer: PeerId, reason: String) -> Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send((id, Command::Ban { peer, reason }))
            .await
            .map_err(|_| Error::Shutdown)
    }

    /// Closes every connection to `peer`.
    pub async fn disconnect(&self, peer: PeerId) -> Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send((id, Command::Disconnect { peer }))
            .await
            .map_err(|_| Error::Shutdown)
    }
}

/// A control request in flight.
struct Outbound {
    peer: PeerId,
    /// Kept for a resend when the request is idempotent (not `Announce`).
    resend: Option<Request>,
    /// Sends so far, this one included.
    attempt: u32,
    reply: oneshot::Sender<Result<Response>>,
}

/// Work parked until a peer's closing connections are gone.
enum Parked {
    Dial {
        addr: Multiaddr,
        reply: oneshot::Sender<Result<PeerId>>,
    },
    Request(Outbound, Request),
}

/// The swarm owner.
pub(crate) struct EventLoop {
    swarm: Swarm<Behaviour>,
    rx: mpsc::Receiver<(u64, Command)>,
    store: Arc<dyn BlockStore>,
    access: Arc<Access>,
    limits: Limits,
    announces: mpsc::Sender<InboundAnnounce>,
    dials: HashMap<ConnectionId, oneshot::Sender<Result<PeerId>>>,
    requests: HashMap<OutboundRequestId, Outbound>,
    /// Established connections per peer (until `ConnectionClosed`).
    conns: HashMap<PeerId, HashSet<ConnectionId>>,
    /// Those of them this node has asked to close.
    closing: HashSet<ConnectionId>,
    /// Dials and requests waiting for a peer's closing connections to go.
    parked: HashMap<PeerId, Vec<Parked>>,
    /// Last address dialed per peer (redials of resent requests).
    addrs: HashMap<PeerId, Multiaddr>,
    inbound: HashMap<InboundRequestId, ResponseChannel<Response>>,
    peers: BTreeMap<PeerId, PeerInfo>,
    banned: Vec<Banned>,
    /// Followers: peer -> root name -> value last announced (or returned).
    subs: HashMap<PeerId, HashMap<String, Option<bytes::Bytes>>>,
    /// Roots this node follows (announces from their source wake a loop).
    follows: Arc<FollowTable>,
    /// Signalled by the node when one of its roots moved.
    changed: Arc<Notify>,
    /// Signed root records sent with root values.
    records: Arc<crate::record::Records>,
}

impl EventLoop {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        swarm: Swarm<Behaviour>,
        store: Arc<dyn BlockStore>,
        access: Arc<Access>,
        limits: Limits,
        announces: mpsc::Sender<InboundAnnounce>,
        follows: Arc<FollowTable>,
        changed: Arc<Notify>,
        records: Arc<crate::record::Records>,
    ) -> (EventLoop, Client) {
        let (tx, rx) = mpsc::channel(64);
        let client = Client {
            tx,
            next_id: Arc::new(AtomicU64::new(1)),
            limits: limits.clone(),
        };
        let el = EventLoop {
            swarm,
            rx,
            store,
            access,
            limits,
            announces,
            dials: HashMap::new(),
            requests: HashMap::new(),
            conns: HashMap::new(),
            closing: HashSet::new(),
            parked: HashMap::new(),
            addrs: HashMap::new(),
            inbound: HashMap::new(),
            peers: BTreeMap::new(),
            banned: Vec::new(),
            subs: HashMap::new(),
            follows,
            changed,
            records,
        };
        (el, client)
    }

    /// Runs until every `Client` is dropped.
    pub(crate) async fn run(mut self) {
        let mut watch = tokio::time::interval(WATCH_INTERVAL);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let changed = self.changed.clone();
        loop {
            tokio::select! {
                cmd = self.rx.recv() => match cmd {
                    Some((id, cmd)) => self.command(id, cmd),
                    None => break,
                },
                event = self.swarm.select_next_some() => self.event(event),
                _ = changed.notified() => self.announce_changes(),
                _ = watch.tick(), if !self.subs.is_empty() => self.announce_changes(),
            }
        }
        tracing::debug!("event loop stopped");
    }

    fn command(&mut self, id: u64, cmd: Command) {
        match cmd {
            Command::Dial { addr, reply } => {
                let known = addr.iter().find_map(|p| match p {
                    libp2p::multiaddr::Protocol::P2p(peer) => Some(peer),
                    _ => None,
                });
                match known {
                    Some(peer) => {
                        self.remember(peer, &addr);
                        self.dial_peer(id, peer, addr, reply);
                    }
                    None => self.dial_new(id, None, addr, reply),
                }
            }
            Command::Request {
                peer,
                request,
                reply,
            } => {
                let resend = match request {
                    Request::Announce { .. } => None,
                    _ => Some(request.clone()),
                };
                let out = Outbound {
                    peer,
                    resend,
                    attempt: 0,
                    reply,
                };
                self.send_request(out, request);
            }
            Command::Respond { id: rid, response } => {
                if let Some(ch) = self.inbound.remove(&rid) {
                    let _ = self.swarm.behaviour_mut().ctl.send_response(ch, response);
                }
            }
            Command::Peers { reply } => {
                let _ = reply.send((self.peers.values().cloned().collect(), self.banned.clone()));
            }
            Command::Ban { peer, reason } => {
                tracing::warn!(id, %peer, %reason, "banning misbehaving peer");
                self.swarm.behaviour_mut().block.block_peer(peer);
                self.close_peer(peer);
                self.peers.remove(&peer);
                self.banned.push(Banned {
                    peer: peer.to_string(),
                    reason,
                });
            }
            Command::Disconnect { peer } => self.close_peer(peer),
        }
    }

    /// Remembers where `peer` was reached (bounded).
    fn remember(&mut self, peer: PeerId, addr: &Multiaddr) {
        if self.addrs.len() >= MAX_ADDRS && !self.addrs.contains_key(&peer) {
            let drop = self.addrs.keys().next().copied();
            if let Some(p) = drop {
                self.addrs.remove(&p);
            }
        }
        self.addrs.insert(peer, addr.clone());
    }

    /// True if `peer` has an established connection this node is not
    /// closing.
    fn usable(&self, peer: &PeerId) -> bool {
        self.conns
            .get(peer)
            .is_some_and(|c| c.iter().any(|id| !self.closing.contains(id)))
    }

    /// True if this node is closing one of `peer`'s connections. The
    /// request-response behaviour still spreads requests over every
    /// established connection, closing ones included, so no request is
    /// sent to such a peer until they are gone.
    fn has_closing(&self, peer: &PeerId) -> bool {
        self.conns
            .get(peer)
            .is_some_and(|c| c.iter().any(|id| self.closing.contains(id)))
    }

    /// Starts closing every connection to `peer`; from now on none of them
    /// satisfies a dial or carries a request.
    fn close_peer(&mut self, peer: PeerId) {
        if let Some(c) = self.conns.get(&peer) {
            self.closing.extend(c.iter().copied());
        }
        let _ = self.swarm.disconnect_peer_id(peer);
    }

    /// A dial of a known peer: reuse a usable connection, wait for closing
    /// ones to go, or open a new one.
    fn dial_peer(
        &mut self,
        id: u64,
        peer: PeerId,
        addr: Multiaddr,
        reply: oneshot::Sender<Result<PeerId>>,
    ) {
        if self.usable(&peer) {
            let _ = reply.send(Ok(peer));
        } else if self.has_closing(&peer) {
            tracing::debug!(id, %peer, "dial waits for a closing connection to go");
            self.parked
                .entry(peer)
                .or_default()
                .push(Parked::Dial { addr, reply });
        } else {
            self.dial_new(id, Some(peer), addr, reply);
        }
    }

    /// Opens a new connection to `addr`; `reply` is answered when it is
    /// established or has failed.
    fn dial_new(
        &mut self,
        id: u64,
        peer: Option<PeerId>,
        addr: Multiaddr,
        reply: oneshot::Sender<Result<PeerId>>,
    ) {
        let opts = match peer {
            // `Always`: a connection of this peer may still be closing.
            Some(p) => DialOpts::peer_id(p)
                .addresses(vec![addr.clone()])
                .condition(PeerCondition::Always)
                .build(),
            None => DialOpts::unknown_peer_id().address(addr.clone()).build(),
        };
        let conn = opts.connection_id();
        match self.swarm.dial(opts) {
            Ok(()) => {
                tracing::debug!(id, %addr, "dialing");
                self.dials.insert(conn, reply);
            }
            Err(e) => {
                let _ = reply.send(Err(Error::network(&addr, e)));
            }
        }
    }

    /// Sends (or parks) one attempt of a control request.
    fn send_request(&mut self, mut out: Outbound, request: Request) {
        let peer = out.peer;
        if self.has_closing(&peer) {
            self.parked
                .entry(peer)
                .or_default()
                .push(Parked::Request(out, request));
            return;
        }
        out.attempt += 1;
        // Without a connection, the behaviour dials one, trying the last
        // address this node dialed for the peer first.
        let addrs = self.addrs.get(&peer).cloned().into_iter().collect();
        let rid = self
            .swarm
            .behaviour_mut()
            .ctl
            .send_request_with_addresses(&peer, request, addrs);
        tracing::trace!(%peer, ?rid, attempt = out.attempt, "control request");
        self.requests.insert(rid, out);
    }

    /// Runs the work parked for `peer` once none of its connections is
    /// closing any more.
    fn unpark(&mut self, peer: PeerId) {
        if self.has_closing(&peer) {
            return;
        }
        let Some(parked) = self.parked.remove(&peer) else {
            return;
        };
        for p in parked {
            match p {
                // Callers that gave up (timeout) are dropped here.
                Parked::Dial { reply, .. } if reply.is_closed() => {}
                Parked::Request(out, _) if out.reply.is_closed() => {}
                Parked::Dial { addr, reply } => self.dial_peer(0, peer, addr, reply),
                Parked::Request(out, request) => self.send_request(out, request),
            }
        }
    }

    fn event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                tracing::info!(%address, "listening");
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                ..
            } => {
                let address = match &endpoint {
                    ConnectedPoint::Dialer { address, .. } => address.clone(),
                    ConnectedPoint::Listener { send_back_addr, .. } => send_back_addr.clone(),
                };
                tracing::debug!(%peer_id, %address, "connected");
                self.conns.entry(peer_id).or_default().insert(connection_id);
                if let ConnectedPoint::Dialer { address, .. } = &endpoint {
                    self.remember(peer_id, address);
                }
                self.peers.entry(peer_id).or_insert_with(|| PeerInfo {
                    peer: peer_id.to_string(),
                    address: address.to_string(),
                    agent: None,
                    rtt_ms: None,
                });
                if let Some(reply) = self.dials.remove(&connection_id) {
                    let _ = reply.send(Ok(peer_id));
                }
                self.unpark(peer_id);
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                self.closing.remove(&connection_id);
                if let Some(c) = self.conns.get_mut(&peer_id) {
                    c.remove(&connection_id);
                    if c.is_empty() {
                        self.conns.remove(&peer_id);
                    }
                }
                if num_established == 0 {
                    self.peers.remove(&peer_id);
                    // Subscriptions live as long as the connection; a
                    // follower re-subscribes when it reconnects.
                    self.subs.remove(&peer_id);
                    self.follows.disconnected(&peer_id);
                }
                self.unpark(peer_id);
            }
            SwarmEvent::OutgoingConnectionError {
                connection_id,
                error,
                ..
            } => {
                if let Some(reply) = self.dials.remove(&connection_id) {
                    let _ = reply.send(Err(Error::network("dial", error)));
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Ctl(ev)) => self.ctl_event(ev),
            SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received {
                peer_id,
                info,
                ..
            })) => {
                if let Some(p) = self.peers.get_mut(&peer_id) {
                    p.agent = Some(info.agent_version);
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Ping(ping::Event {
                peer,
                result: Ok(rtt),
                ..
            })) => {
                if let Some(p) = self.peers.get_mut(&peer) {
                    p.rtt_ms = Some(rtt.as_secs_f64() * 1e3);
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Mdns(mdns::Event::Discovered(found))) => {
                for (peer, addr) in found {
                    if self.access.allows(&peer) && !self.swarm.is_connected(&peer) {
                        tracing::info!(%peer, %addr, "mDNS discovered peer");
                        let _ = self
                            .swarm
                            .dial(DialOpts::peer_id(peer).addresses(vec![addr]).build());
                    }
                }
            }
            _ => {}
        }
    }

    fn ctl_event(&mut self, ev: request_response::Event<Request, Response>) {
        match ev {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request_id,
                    request,
                    channel,
                } => self.inbound_request(peer, request_id, request, channel),
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(out) = self.requests.remove(&request_id) {
                        let _ = out.reply.send(Ok(response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                let Some(mut out) = self.requests.remove(&request_id) else {
                    return;
                };
                let lost = connection_lost(&error);
                match out.resend.take() {
                    Some(request)
                        if lost && out.attempt < REQUEST_ATTEMPTS && !out.reply.is_closed() =>
                    {
                        tracing::debug!(%peer, %error, attempt = out.attempt, "control request lost with its connection; sending again");
                        out.resend = Some(request.clone());
                        self.send_request(out, request);
                    }
                    _ if lost => {
                        let _ = out.reply.send(Err(Error::ConnectionLost {
                            peer,
                            attempts: out.attempt,
                            reason: error.to_string(),
                        }));
                    }
                    _ => {
                        let _ = out.reply.send(Err(Error::network(peer, error)));
                    }
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, %error, "inbound control request failed");
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    fn inbound_request(
        &mut self,
        peer: PeerId,
        id: InboundRequestId,
        request: Request,
        channel: ResponseChannel<Response>,
    ) {
        let err = |code, message: &str| Response::Error {
            code,
            message: message.to_string(),
        };
        let response = if !self.access.allows(&peer) {
            err(ErrorCode::Unauthorized, "peer not on the allowlist")
        } else {
            match request {
                Request::Hello(_) => Response::Hello(Hello {
                    version: crate::protocol::VERSION,
                    max_block: self.limits.max_block,
                    max_want: crate::protocol::limits::MAX_WANT_CIDS,
                    bulk: self.access.bulk_allowed(&peer),
                }),
                Request::GetRoot { name } => self.get_root(&name, self.access.bulk_allowed(&peer)),
                Request::Follow { name } => self.follow(peer, name),
                Request::ListRoots { after, limit } => self.list_roots(after, limit),
                Request::Announce { name, target, .. } => {
                    if name == target && self.follows.announced(&peer, &name) {
                        // A root we follow from this peer moved: the follow
                        // loop pulls it; the announcer need not wait.
                        Response::Announced(crate::protocol::messages::AnnounceOutcome::Scheduled)
                    } else if !self.access.bulk_allowed(&peer) {
                        err(
                            ErrorCode::Unauthorized,
                            "pushes are accepted from trusted peers only",
                        )
                    } else if prox_engine::store::validate_root_name(&target).is_err()
                        || prox_engine::store::validate_root_name(&name).is_err()
                    {
                        err(ErrorCode::BadRequest, "invalid root name")
                    } else {
                        match self.announces.try_send(InboundAnnounce {
                            id,
                            peer,
                            name,
                            target,
                        }) {
                            Ok(()) => {
                                self.inbound.insert(id, channel);
                                return;
                            }
                            Err(_) => err(ErrorCode::Busy, "too many pushes in progress"),
                        }
                    }
                }
            }
        };
        let _ = self
            .swarm
            .behaviour_mut()
            .ctl
            .send_response(channel, response);
    }

    /// Answers `Follow` like `GetRoot` and remembers the subscription with
    /// the value returned.
    fn follow(&mut self, peer: PeerId, name: String) -> Response {
        let response = self.get_root(&name, self.access.bulk_allowed(&peer));
        let Response::Root { value, .. } = &response else {
            return response;
        };
        if !self.access.serves(&name) {
            return response;
        }
        let total: usize = self.subs.values().map(|m| m.len()).sum();
        let mine = self.subs.entry(peer).or_default();
        if !mine.contains_key(&name) && (mine.len() >= MAX_FOLLOWS_PER_PEER || total >= MAX_FOLLOWS)
        {
            return Response::Error {
                code: ErrorCode::Busy,
                message: "too many followed roots".into(),
            };
        }
        let told = value.as_ref().map(|v| bytes::Bytes::copy_from_slice(v));
        mine.insert(name, told);
        response
    }

    /// Sends `Announce` to every follower whose last known value of a root
    /// differs from the current one.
    fn announce_changes(&mut self) {
        let mut sends = Vec::new();
        for (peer, names) in self.subs.iter_mut() {
            for (name, told) in names.iter_mut() {
                let now = match self.store.root(name) {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::warn!(%name, %e, "cannot read a followed root");
                        continue;
                    }
                };
                if now != *told {
                    if let Some(v) = &now {
                        if v.len() <= MAX_ROOT_VALUE {
                            sends.push((*peer, name.clone(), v.clone()));
                        }
                    }
                    *told = now;
                }
            }
        }
        for (peer, name, value) in sends {
            tracing::debug!(%peer, %name, "announcing root change to follower");
            let req = Request::Announce {
                name: name.clone(),
                value: serde_bytes::ByteBuf::from(value.to_vec()),
                target: name,
            };
            // The answer (`Scheduled`) is not awaited: unknown request ids
            // are dropped in `ctl_event`.
            let _ = self.swarm.behaviour_mut().ctl.send_request(&peer, req);
        }
    }

    fn get_root(&self, name: &str, bulk: bool) -> Response {
        let (delta, zstd) = (self.access.delta, self.access.zstd);
        if !self.access.serves(name) {
            return Response::Root {
                value: None,
                bulk,
                delta,
                zstd,
                record: None,
            };
        }
        match self.store.root(name) {
            Ok(Some(v)) if v.len() <= MAX_ROOT_VALUE => Response::Root {
                record: self
                    .records
                    .attach(name, &v)
                    .map(serde_bytes::ByteBuf::from),
                value: Some(serde_bytes::ByteBuf::from(v.to_vec())),
                bulk,
                delta,
                zstd,
            },
            Ok(Some(_)) => Response::Error {
                code: ErrorCode::Internal,
                message: "root value too large".into(),
            },
            Ok(None) => Response::Root {
                value: None,
                bulk,
                delta,
                zstd,
                record: None,
            },
            Err(e) => Response::Error {
                code: ErrorCode::Internal,
                message: e.to_string(),
            },
        }
    }

    fn list_roots(&self, after: Option<String>, limit: u32) -> Response {
        let limit = limit.clamp(1, MAX_LIST_ROOTS) as usize;
        let roots = match self.store.roots() {
            Ok(r) => r,
            Err(e) => {
                return Response::Error {
                    code: ErrorCode::Internal,
                    message: e.to_string(),
                }
            }
        };
        let mut page: Vec<RootEntry> = roots
            .into_iter()
            .filter(|(n, v)| {
                self.access.serves(n)
                    && after.as_deref().is_none_or(|a| n.as_str() > a)
                    && v.len() <= MAX_ROOT_VALUE
            })
            .take(limit + 1)
            .map(|(name, v)| RootEntry {
                name,
                value: serde_bytes::ByteBuf::from(v.to_vec()),
            })
            .collect();
        // Keep the page under the response cap.
        let mut bytes = 0usize;
        let mut keep = 0usize;
        for e in &page {
            bytes += e.name.len() + e.value.len() + 16;
            if bytes > (crate::protocol::limits::MAX_CTL_RESPONSE as usize) / 2 || keep == limit {
                break;
            }
            keep += 1;
        }
        let more = page.len() > keep;
        page.truncate(keep);
        let next_after = if more {
            page.last().map(|e| e.name.clone())
        } else {
            None
        };
        Response::Roots {
            roots: page,
            next_after,
        }
    }
}

/// True if a control request failed because its connection went away (or
/// none could be made), as opposed to the remote's answer or a timeout: a
/// resend over a new connection may succeed.
fn connection_lost(error: &request_response::OutboundFailure) -> bool {
    use request_response::OutboundFailure as F;
    use std::io::ErrorKind as K;
    match error {
        F::DialFailure | F::ConnectionClosed => true,
        F::Io(e) => matches!(
            e.kind(),
            K::ConnectionReset
                | K::ConnectionAborted
                | K::BrokenPipe
                | K::UnexpectedEof
                | K::NotConnected
        ),
        F::Timeout | F::UnsupportedProtocols => false,
    }
}
