//! Hostile and careless setups of the sync daemon, over real loopback
//! connections: a node started without an allowlist and without `open`
//! serves nobody; free identities cannot take every session; a peer that
//! never reads loses its session; a server that only defers or is always
//! busy cannot keep a pull looping; pulls stay within their own limits.

use prox_engine::store::MemStore;
use prox_sync::{Config, Node, RefsLinker, Stores};
use std::sync::Arc;
use std::time::Duration;

fn mem_stores() -> Stores {
    Stores::new(Arc::new(MemStore::new()), Arc::new(MemStore::new()))
}

async fn start(open: bool, stores: Stores) -> Node<RefsLinker> {
    let cfg = Config {
        listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
        open,
        ..Config::default()
    };
    let key = libp2p::identity::Keypair::generate_ed25519();
    Node::start(&cfg, key, stores, RefsLinker).await.unwrap()
}

fn addr(n: &Node<RefsLinker>) -> libp2p::Multiaddr {
    n.listen_addrs()[0]
        .clone()
        .with(libp2p::multiaddr::Protocol::P2p(n.peer_id()))
}

/// A source with root "docs": a one-leaf prolly tree.
fn source() -> Stores {
    let s = mem_stores();
    let cfg = prox_engine::prolly::Config::default();
    let root =
        prox_engine::prolly::build(&*s.main, &cfg, vec![(b"k".to_vec(), b"v".to_vec())]).unwrap();
    let m = prox_engine::manifest::RootManifest::new(root, cfg).encode();
    s.main.set_root("docs", Some(&m)).unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_allowlist_or_open_serves_nobody() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let closed = start(false, source()).await;
        let open = start(true, source()).await;
        let dst = mem_stores();
        let puller = start(false, dst.clone()).await;
        let refused = puller.pull(&addr(&closed), "docs", "docs").await;
        assert!(refused.is_err(), "{refused:?}");
        assert!(dst.main.root("docs").unwrap().is_none());
        puller.pull(&addr(&open), "docs", "docs").await.unwrap();
        assert!(dst.main.root("docs").unwrap().is_some());
        for n in [closed, open, puller] {
            n.shutdown().await;
        }
    })
    .await
    .expect("bounded");
}

/// A hostile client: one identity whose swarm opens raw block streams and
/// holds them without sending a frame.
struct Squatter {
    control: libp2p_stream::Control,
    task: tokio::task::JoinHandle<()>,
}

impl Squatter {
    async fn connect(target: &libp2p::Multiaddr) -> Squatter {
        use futures::StreamExt;
        let mut swarm = libp2p::SwarmBuilder::with_existing_identity(
            libp2p::identity::Keypair::generate_ed25519(),
        )
        .with_tokio()
        .with_tcp(
            libp2p::tcp::Config::default(),
            libp2p::noise::Config::new,
            libp2p::yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|_| libp2p_stream::Behaviour::new())
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build();
        let control = swarm.behaviour().new_control();
        swarm.dial(target.clone()).unwrap();
        let task = tokio::spawn(async move {
            loop {
                swarm.select_next_some().await;
            }
        });
        Squatter { control, task }
    }

    /// Opens a block stream and sends `n` `WANT`s for `cid` without ever
    /// reading the answers; returns the stream (kept open).
    async fn flood(
        &mut self,
        peer: libp2p::PeerId,
        cid: prox_engine::Cid,
        n: u32,
    ) -> libp2p::Stream {
        use futures::AsyncWriteExt;
        let mut stream = self
            .control
            .open_stream(peer, prox_sync::protocol::BLOCKS_PROTOCOL)
            .await
            .expect("block stream opens");
        let mut buf = Vec::new();
        for batch in 0..n {
            prox_sync::protocol::frames::ClientFrame::Want {
                batch,
                max_bytes: 4 << 20,
                cids: vec![cid],
            }
            .encode(&mut buf)
            .unwrap();
        }
        stream.write_all(&buf).await.unwrap();
        stream.flush().await.unwrap();
        stream
    }

    /// Opens a block stream and reports whether the server kept it (no
    /// `REFUSED` frame and no close within a short wait). The stream is
    /// kept open in `held`.
    async fn squat(&mut self, peer: libp2p::PeerId, held: &mut Vec<libp2p::Stream>) -> bool {
        use futures::AsyncReadExt;
        let mut stream = match self
            .control
            .open_stream(peer, prox_sync::protocol::BLOCKS_PROTOCOL)
            .await
        {
            Ok(s) => s,
            Err(_) => return false,
        };
        let mut byte = [0u8; 1];
        let kept = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut byte))
            .await
            .is_err();
        held.push(stream);
        kept
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_exhaustion_from_many_peer_ids_leaves_room_for_a_followed_peer() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let dst = mem_stores();
        let puller = start(false, dst.clone()).await;
        let mut cfg = Config {
            listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
            open: true,
            // The source follows the puller, which makes it a named peer.
            follow: vec![prox_sync::Follow {
                peer: addr(&puller).to_string(),
                name: "elsewhere".into(),
            }],
            ..Config::default()
        };
        cfg.limits.sessions_total = 8;
        cfg.limits.sessions_reserved = 2;
        cfg.limits.sessions_per_peer = 2;
        let key = libp2p::identity::Keypair::generate_ed25519();
        let src = Node::start(&cfg, key, source(), RefsLinker).await.unwrap();
        let target = addr(&src);
        // Six identities try two sessions each: twelve attempts on eight slots.
        let mut squatters = Vec::new();
        let mut held = Vec::new();
        let mut kept = 0;
        for _ in 0..6 {
            let mut s = Squatter::connect(&target).await;
            for _ in 0..2 {
                // A stream can be lost in the handover to the accept loop;
                // a few attempts, bounded.
                for _ in 0..3 {
                    if s.squat(src.peer_id(), &mut held).await {
                        kept += 1;
                        break;
                    }
                }
            }
            squatters.push(s);
        }
        assert_eq!(
            kept, 6,
            "open peers share sessions_total - sessions_reserved"
        );
        puller.pull(&target, "docs", "docs").await.unwrap();
        assert!(dst.main.root("docs").unwrap().is_some());
        drop(held);
        for s in squatters {
            s.task.abort();
        }
        for n in [src, puller] {
            n.shutdown().await;
        }
    })
    .await
    .expect("bounded");
}

async fn start_with(limits: prox_sync::Limits, stores: Stores) -> Node<RefsLinker> {
    let cfg = Config {
        listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
        limits,
        ..Config::default()
    };
    let key = libp2p::identity::Keypair::generate_ed25519();
    Node::start(&cfg, key, stores, RefsLinker).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_over_its_byte_budget_or_deadline_stops_with_a_typed_error() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let src = start(true, source()).await;
        let dst = mem_stores();
        let small = prox_sync::Limits {
            pull_max_bytes: 1,
            ..Default::default()
        };
        let puller = start_with(small, dst.clone()).await;
        let err = puller.pull(&addr(&src), "docs", "docs").await.unwrap_err();
        assert!(
            matches!(err, prox_sync::Error::PullTooLarge { max: 1, .. }),
            "{err}"
        );
        assert!(dst.main.root("docs").unwrap().is_none());
        puller.shutdown().await;

        let dst = mem_stores();
        let cfg = Config {
            listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
            limits: prox_sync::Limits {
                pull_deadline: Duration::from_millis(100),
                ..Default::default()
            },
            ..Config::default()
        };
        let key = libp2p::identity::Keypair::generate_ed25519();
        // Checking each received block takes longer than the whole deadline.
        let puller = Node::start(&cfg, key, dst.clone(), SlowLinker)
            .await
            .unwrap();
        let err = puller.pull(&addr(&src), "docs", "docs").await.unwrap_err();
        assert!(
            matches!(err, prox_sync::Error::PullDeadline { .. }),
            "{err}"
        );
        assert!(dst.main.root("docs").unwrap().is_none());
        src.shutdown().await;
        puller.shutdown().await;
    })
    .await
    .expect("bounded");
}

/// [`RefsLinker`] that takes 500 ms to check each block.
struct SlowLinker;

impl prox_sync::Linker for SlowLinker {
    type Kind = <RefsLinker as prox_sync::Linker>::Kind;

    fn root_links(&self, value: &[u8]) -> prox_engine::Result<Vec<(prox_engine::Cid, Self::Kind)>> {
        prox_sync::Linker::root_links(&RefsLinker, value)
    }

    fn links(
        &self,
        kind: &Self::Kind,
        bytes: &[u8],
    ) -> prox_engine::Result<Vec<(prox_engine::Cid, Self::Kind)>> {
        std::thread::sleep(Duration::from_millis(500));
        prox_sync::Linker::links(&RefsLinker, kind, bytes)
    }
}

/// Stages what a killed pull leaves in `stores`: the closure of "docs"
/// under a pending-sync record, plus a block whose pull left no record.
/// Returns the stray block and the CIDs of the record's closure.
fn stage_pending_and_stray(stores: &Stores) -> (prox_engine::Cid, Vec<prox_engine::Cid>) {
    let src = source();
    let target = src.main.root("docs").unwrap().unwrap();
    let closure = src.main.cids().unwrap();
    for cid in &closure {
        let block = src.main.get(cid).unwrap().unwrap();
        stores.staging.put(&block).unwrap();
    }
    let record = prox_sync::pending::PendingPull {
        local: "docs".into(),
        name: "docs".into(),
        peer: libp2p::identity::Keypair::generate_ed25519()
            .public()
            .to_peer_id()
            .to_string(),
        addr: None,
        target: hex::encode(&target),
        expected: None,
        started_unix: 0,
    };
    stores
        .staging
        .set_root(
            "pending-sync:docs",
            Some(&serde_json::to_vec(&record).unwrap()),
        )
        .unwrap();
    let stray = stores
        .staging
        .put(b"left by a pull without a record")
        .unwrap();
    (stray, closure)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_no_pending_record_can_use_is_collected_at_start() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let stores = mem_stores();
        let (stray, closure) = stage_pending_and_stray(&stores);
        let before = stores.staging.cids().unwrap().len();
        let node = start(false, stores.clone()).await;
        let after: std::collections::HashSet<_> =
            stores.staging.cids().unwrap().into_iter().collect();
        assert!(!after.contains(&stray), "abandoned block collected");
        assert_eq!(after.len(), before - 1, "the record's staged closure stays");
        for cid in &closure {
            assert!(after.contains(cid), "{cid:?} of the pending pull kept");
        }
        node.shutdown().await;
    })
    .await
    .expect("bounded");
}

/// While a node runs, staging no record can use (a pull that failed for
/// good leaves such blocks) is collected every `staging_gc_interval`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_no_pending_record_can_use_is_collected_while_the_node_runs() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let stores = mem_stores();
        let limits = prox_sync::Limits {
            staging_gc_interval: Duration::from_millis(200),
            ..Default::default()
        };
        let node = start_with(limits, stores.clone()).await;
        // Staged after start-up: only the running collection can take it.
        let (stray, closure) = stage_pending_and_stray(&stores);
        let mut gone = false;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if !stores.staging.has(&stray).unwrap() {
                gone = true;
                break;
            }
        }
        assert!(gone, "abandoned block collected while the node runs");
        for cid in &closure {
            assert!(
                stores.staging.has(cid).unwrap(),
                "{cid:?} of the pending pull kept"
            );
        }
        node.shutdown().await;
    })
    .await
    .expect("bounded");
}

/// A peer that asks for blocks and never reads the answers: the serving
/// side's writes stall, and the write timeout (the idle timeout) ends the
/// session and frees its slot. Before block sessions timed out on writes,
/// the slot stayed taken for as long as the peer kept the stream open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_loses_its_session_to_the_write_timeout() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let stores = mem_stores();
        let big = stores.main.put(&vec![7u8; 1 << 20]).unwrap();
        let mut cfg = Config {
            listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
            open: true,
            ..Config::default()
        };
        cfg.limits.idle_timeout = Duration::from_secs(3);
        cfg.limits.sessions_per_peer = 1;
        let key = libp2p::identity::Keypair::generate_ed25519();
        let src = Node::start(&cfg, key, stores, RefsLinker).await.unwrap();
        let mut s = Squatter::connect(&addr(&src)).await;
        // 16 MiB of answers; the peer reads none of them.
        let _flooded = s.flood(src.peer_id(), big, 16).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut held = Vec::new();
        assert!(
            !s.squat(src.peer_id(), &mut held).await,
            "the stalled session holds the peer's only slot"
        );
        let started = std::time::Instant::now();
        let mut freed = false;
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if s.squat(src.peer_id(), &mut held).await {
                freed = true;
                break;
            }
        }
        assert!(
            freed,
            "slot still taken {:?} after the flood",
            started.elapsed()
        );
        s.task.abort();
        src.shutdown().await;
    })
    .await
    .expect("bounded");
}

/// How the fake server answers every `WANT`.
#[derive(Debug, Clone, Copy)]
enum FakeAnswer {
    /// `DEFER` for every CID, then `DONE`.
    DeferAll,
    /// `BUSY`.
    Busy,
    /// `DELTA` bytes that are not a patch, for every CID with a base.
    GarbageDelta,
    /// A well-formed patch that rebuilds other bytes than the CID names.
    WrongDelta,
    /// `ZDELTA` bytes that are not a zstd frame (the server offers zstd).
    GarbageZDelta,
    /// A well-formed zstd frame that rebuilds other bytes (offers zstd).
    WrongZDelta,
    /// A `ZBLOCK` whose frame header claims 1 TiB (offers zstd).
    HugeZBlock,
    /// A valid `ZDELTA` frame from a server that did not offer zstd.
    UnofferedZDelta,
}

impl FakeAnswer {
    /// Whether the fake server offers zstd answers in `Root`.
    fn offers_zstd(self) -> bool {
        matches!(
            self,
            FakeAnswer::GarbageZDelta | FakeAnswer::WrongZDelta | FakeAnswer::HugeZBlock
        )
    }
}

#[derive(libp2p::swarm::NetworkBehaviour)]
struct FakeBehaviour {
    ctl: libp2p::request_response::Behaviour<prox_sync::protocol::codec::CtlCodec>,
    streams: libp2p_stream::Behaviour,
}

/// A hostile server speaking both protocols: it answers `GetRoot` with the
/// value of [`source`]'s root "docs" and every `WANT` as `answer` says.
/// Returns its address (with `/p2p/<id>`) and the task running it.
async fn fake_server(answer: FakeAnswer) -> (libp2p::Multiaddr, tokio::task::JoinHandle<()>) {
    let value = source().main.root("docs").unwrap().unwrap();
    fake_server_with(answer, value, false).await
}

/// [`fake_server`] answering `GetRoot` with `value` and `delta`.
async fn fake_server_with(
    answer: FakeAnswer,
    value: bytes::Bytes,
    delta: bool,
) -> (libp2p::Multiaddr, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use libp2p::request_response::{self, ProtocolSupport};
    use libp2p::swarm::SwarmEvent;
    let mut swarm =
        libp2p::SwarmBuilder::with_existing_identity(libp2p::identity::Keypair::generate_ed25519())
            .with_tokio()
            .with_tcp(
                libp2p::tcp::Config::default(),
                libp2p::noise::Config::new,
                libp2p::yamux::Config::default,
            )
            .unwrap()
            .with_behaviour(|_| FakeBehaviour {
                ctl: request_response::Behaviour::with_codec(
                    prox_sync::protocol::codec::CtlCodec::default(),
                    [(prox_sync::protocol::CTL_PROTOCOL, ProtocolSupport::Full)],
                    request_response::Config::default(),
                ),
                streams: libp2p_stream::Behaviour::new(),
            })
            .unwrap()
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
            .build();
    swarm
        .listen_on("/ip4/127.0.0.1/tcp/0".parse().unwrap())
        .unwrap();
    let listen = loop {
        if let SwarmEvent::NewListenAddr { address, .. } = swarm.select_next_some().await {
            break address;
        }
    };
    let me = *swarm.local_peer_id();
    let mut incoming = swarm
        .behaviour()
        .streams
        .new_control()
        .accept(prox_sync::protocol::BLOCKS_PROTOCOL)
        .unwrap();
    let task = tokio::spawn(async move {
        use prox_sync::protocol::messages::{ErrorCode, Request, Response};
        loop {
            tokio::select! {
                ev = swarm.select_next_some() => {
                    if let SwarmEvent::Behaviour(FakeBehaviourEvent::Ctl(
                        request_response::Event::Message {
                            message: request_response::Message::Request { request, channel, .. },
                            ..
                        },
                    )) = ev
                    {
                        let response = match request {
                            Request::GetRoot { .. } => Response::Root {
                                value: Some(serde_bytes::ByteBuf::from(value.to_vec())),
                                bulk: false,
                                delta,
                                zstd: answer.offers_zstd(),
                                record: None,
                            },
                            _ => Response::Error {
                                code: ErrorCode::BadRequest,
                                message: "fake server".into(),
                            },
                        };
                        let _ = swarm.behaviour_mut().ctl.send_response(channel, response);
                    }
                }
                Some((_, stream)) = incoming.next() => {
                    tokio::spawn(answer_wants(stream, answer));
                }
            }
        }
    });
    (listen.with(libp2p::multiaddr::Protocol::P2p(me)), task)
}

/// Answers every `WANT` on `stream` as `answer` says, until it closes.
async fn answer_wants(mut stream: libp2p::Stream, answer: FakeAnswer) {
    use futures::AsyncWriteExt;
    use prox_sync::protocol::frames::{ClientFrame, ServerFrame};
    loop {
        let (batch, items) = match ClientFrame::read(&mut stream).await {
            Ok(Some(ClientFrame::Want { batch, cids, .. })) => {
                (batch, cids.into_iter().map(|c| (c, Vec::new())).collect())
            }
            Ok(Some(ClientFrame::WantDelta { batch, items, .. })) => (batch, items),
            _ => return,
        };
        let patch = |garbage: bool| {
            if garbage {
                bytes::Bytes::from_static(&[0xff; 11])
            } else {
                // Target length 5, one literal "hello".
                bytes::Bytes::from_static(b"\x05\x0bhello")
            }
        };
        let frames: Vec<ServerFrame> = match answer {
            FakeAnswer::DeferAll => items
                .iter()
                .map(|_| ServerFrame::Defer)
                .chain([ServerFrame::Done { batch }])
                .collect(),
            FakeAnswer::Busy => vec![ServerFrame::Busy { batch }],
            FakeAnswer::GarbageDelta | FakeAnswer::WrongDelta => items
                .iter()
                .map(|(_, bases)| {
                    if bases.is_empty() {
                        ServerFrame::Missing
                    } else {
                        ServerFrame::Delta(patch(matches!(answer, FakeAnswer::GarbageDelta)))
                    }
                })
                .chain([ServerFrame::Done { batch }])
                .collect(),
            FakeAnswer::GarbageZDelta | FakeAnswer::WrongZDelta | FakeAnswer::UnofferedZDelta => {
                let frame = if matches!(answer, FakeAnswer::GarbageZDelta) {
                    bytes::Bytes::from_static(b"\x28\xb5\x2f\xfd not zstd")
                } else {
                    prox_sync::delta::compress(&[], b"hello", 1).unwrap().into()
                };
                items
                    .iter()
                    .map(|(_, bases)| {
                        if bases.is_empty() {
                            ServerFrame::Missing
                        } else {
                            ServerFrame::ZDelta(frame.clone())
                        }
                    })
                    .chain([ServerFrame::Done { batch }])
                    .collect()
            }
            FakeAnswer::HugeZBlock => {
                // Magic, single-segment header with an 8-byte content size.
                let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
                f.extend_from_slice(&(1u64 << 40).to_le_bytes());
                f.extend_from_slice(&[0; 8]);
                let f = bytes::Bytes::from(f);
                items
                    .iter()
                    .map(|_| ServerFrame::ZBlock(f.clone()))
                    .chain([ServerFrame::Done { batch }])
                    .collect()
            }
        };
        let mut buf = Vec::new();
        for f in &frames {
            f.encode_header(&mut buf);
            if let Some(p) = f.payload() {
                buf.extend_from_slice(p);
            }
        }
        if stream.write_all(&buf).await.is_err() || stream.flush().await.is_err() {
            return;
        }
    }
}

/// A server answering every `WANT` with `DEFER` only: the pull fails with
/// a typed protocol violation at the first such answer instead of asking
/// again forever, and nothing is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_deferring_every_want_ends_the_pull_with_a_violation() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let (target, fake) = fake_server(FakeAnswer::DeferAll).await;
        let dst = mem_stores();
        let puller = start(false, dst.clone()).await;
        let err = puller.pull(&target, "docs", "docs").await.unwrap_err();
        assert!(matches!(err, prox_sync::Error::Misbehaving { .. }), "{err}");
        assert!(err.to_string().contains("DEFER"), "{err}");
        assert!(dst.main.root("docs").unwrap().is_none());
        puller.shutdown().await;
        fake.abort();
    })
    .await
    .expect("a pull from a deferring server ends in bounded time");
}

/// A server answering every `WANT` with `BUSY`: the puller asks again
/// after growing pauses, a bounded number of times, then fails with the
/// typed `Busy` error; nothing is published and the pending record stays
/// for a later retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stays_busy_ends_the_pull_with_a_typed_error() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let (target, fake) = fake_server(FakeAnswer::Busy).await;
        let dst = mem_stores();
        let puller = start(false, dst.clone()).await;
        let err = puller.pull(&target, "docs", "docs").await.unwrap_err();
        assert!(
            matches!(err, prox_sync::Error::Busy { attempts, .. } if attempts > 1),
            "{err}"
        );
        assert!(dst.main.root("docs").unwrap().is_none());
        assert_eq!(prox_sync::pending::list(&dst).unwrap().len(), 1);
        puller.shutdown().await;
        fake.abort();
    })
    .await
    .expect("a pull from a busy server ends in bounded time");
}

/// A prolly tree of `n` entries whose values carry `version`, under root
/// "docs" of `store`; returns the root value.
fn prolly_version(store: &dyn prox_engine::BlockStore, n: u32, version: u8) -> bytes::Bytes {
    let cfg = prox_engine::prolly::Config::default();
    let kv = (0..n)
        .map(|i| {
            let v = if i % 97 == 0 { version } else { 0 };
            (
                format!("k{i:06}").into_bytes(),
                vec![(i % 251) as u8 ^ v; 64],
            )
        })
        .collect();
    let root = prox_engine::prolly::build(store, &cfg, kv).unwrap();
    let m = prox_engine::manifest::RootManifest::new(root, cfg).encode();
    store.set_root("docs", Some(&m)).unwrap();
    bytes::Bytes::from(m)
}

/// A server answering the patches a replica asks for with bytes that are
/// not a patch, or with a well-formed patch rebuilding other bytes, as
/// `DELTA` or (offering zstd) as `ZDELTA`; a `ZBLOCK` claiming more than the
/// block limit; a `ZDELTA` from a server that did not offer zstd (so the
/// replica asked with `WANT_DELTA`): the pull fails with a typed violation
/// at the first such answer, the peer is banned, nothing of the batch is
/// stored and the old root stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_and_mismatched_patches_are_rejected_and_nothing_is_stored() {
    tokio::time::timeout(Duration::from_secs(60), async {
        for answer in [
            FakeAnswer::GarbageDelta,
            FakeAnswer::WrongDelta,
            FakeAnswer::GarbageZDelta,
            FakeAnswer::WrongZDelta,
            FakeAnswer::HugeZBlock,
            FakeAnswer::UnofferedZDelta,
        ] {
            let dst = mem_stores();
            let v1 = prolly_version(&*dst.main, 2000, 0);
            let v2 = prolly_version(&MemStore::new(), 2000, 1);
            dst.main.set_root("docs", Some(&v1)).unwrap();
            let before: std::collections::HashSet<_> =
                dst.main.cids().unwrap().into_iter().collect();
            let (target, fake) = fake_server_with(answer, v2, true).await;
            let puller = start(false, dst.clone()).await;
            let err = puller.pull(&target, "docs", "docs").await.unwrap_err();
            let prox_sync::Error::Misbehaving { violation, .. } = &err else {
                panic!("{answer:?}: expected a violation, got {err}");
            };
            match (answer, &**violation) {
                (
                    FakeAnswer::GarbageDelta | FakeAnswer::GarbageZDelta,
                    prox_sync::Violation::BadPatch { .. },
                )
                | (
                    FakeAnswer::WrongDelta | FakeAnswer::WrongZDelta,
                    prox_sync::Violation::HashMismatch { .. },
                )
                | (FakeAnswer::UnofferedZDelta, prox_sync::Violation::Protocol(_)) => {}
                (FakeAnswer::HugeZBlock, prox_sync::Violation::BadPatch { reason, .. })
                    if reason.contains("exceeds the limit") => {}
                (a, v) => panic!("{a:?}: unexpected violation {v}"),
            }
            assert_eq!(dst.main.root("docs").unwrap().as_deref(), Some(&v1[..]));
            let after: std::collections::HashSet<_> =
                dst.main.cids().unwrap().into_iter().collect();
            assert_eq!(after, before, "{answer:?}: main changed");
            assert!(dst.staging.cids().unwrap().is_empty(), "{answer:?}: staged");
            let status = puller.status().await.unwrap();
            assert_eq!(status.banned.len(), 1, "{answer:?}: {status:?}");
            puller.shutdown().await;
            fake.abort();
        }
    })
    .await
    .expect("bounded");
}

/// A source with root "docs": a prolly tree of `n` entries.
fn big_source(n: u32) -> Stores {
    let s = mem_stores();
    let cfg = prox_engine::prolly::Config::default();
    let kv = (0..n)
        .map(|i| (format!("k{i:06}").into_bytes(), vec![(i % 251) as u8; 64]))
        .collect();
    let root = prox_engine::prolly::build(&*s.main, &cfg, kv).unwrap();
    let m = prox_engine::manifest::RootManifest::new(root, cfg).encode();
    s.main.set_root("docs", Some(&m)).unwrap();
    s
}

/// Block requests in flight are capped per peer and per node: a puller
/// pipelining more `WANT`s than the server allows gets `BUSY` for the
/// excess, narrows its window, asks again, and finishes with the whole
/// closure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_per_peer_or_node_cap_are_answered_busy_and_retried() {
    tokio::time::timeout(Duration::from_secs(90), async {
        for (per_peer, total) in [(1u16, 64u16), (4, 1)] {
            let src_stores = big_source(20_000);
            let mut cfg = Config {
                listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
                open: true,
                ..Config::default()
            };
            cfg.limits.requests_per_peer = per_peer;
            cfg.limits.requests_total = total;
            let key = libp2p::identity::Keypair::generate_ed25519();
            let src = Node::start(&cfg, key, src_stores.clone(), RefsLinker)
                .await
                .unwrap();
            let dst = mem_stores();
            let limits = prox_sync::Limits {
                want_cids: 4,
                inflight_batches: 8,
                ..Default::default()
            };
            let puller = start_with(limits, dst.clone()).await;
            let report = puller.pull(&addr(&src), "docs", "docs").await.unwrap();
            assert!(
                report.busy > 0,
                "cap {per_peer}/{total}: no BUSY answer in {report:?}"
            );
            assert_eq!(
                dst.main.root("docs").unwrap(),
                src_stores.main.root("docs").unwrap()
            );
            assert_eq!(
                report.blocks_fetched as usize,
                src_stores.main.cids().unwrap().len()
            );
            src.shutdown().await;
            puller.shutdown().await;
        }
    })
    .await
    .expect("bounded");
}

/// `Node::pull_with` overrides the node's per-pull limits for one pull,
/// and its deadline covers the whole pull (dial included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_with_its_own_limits_stops_at_them() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let src = start(true, source()).await;
        let dst = mem_stores();
        let puller = start(false, dst.clone()).await;
        let tiny = prox_sync::PullLimits {
            max_bytes: Some(1),
            ..Default::default()
        };
        let err = puller
            .pull_with(&addr(&src), "docs", "docs", tiny)
            .await
            .unwrap_err();
        assert!(
            matches!(err, prox_sync::Error::PullTooLarge { max: 1, .. }),
            "{err}"
        );
        // A deadline shorter than a loopback dial: it stops the dial.
        let instant = prox_sync::PullLimits {
            deadline: Some(Duration::from_micros(1)),
            ..Default::default()
        };
        let other = start(true, source()).await;
        let err = puller
            .pull_with(&addr(&other), "docs", "docs", instant)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("deadline"), "{err}");
        assert!(dst.main.root("docs").unwrap().is_none());
        let zero = prox_sync::PullLimits {
            max_bytes: Some(0),
            ..Default::default()
        };
        assert!(matches!(
            puller.pull_with(&addr(&src), "docs", "docs", zero).await,
            Err(prox_sync::Error::Config(_))
        ));
        let roomy = prox_sync::PullLimits {
            max_bytes: Some(1 << 30),
            deadline: Some(Duration::from_secs(30)),
        };
        puller
            .pull_with(&addr(&src), "docs", "docs", roomy)
            .await
            .unwrap();
        assert!(dst.main.root("docs").unwrap().is_some());
        for n in [src, other, puller] {
            n.shutdown().await;
        }
    })
    .await
    .expect("bounded");
}
