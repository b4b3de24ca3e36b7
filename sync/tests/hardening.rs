//! Hostile and careless setups of the sync daemon: a node started without
//! an allowlist and without `open` serves nobody.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_no_pending_record_can_use_is_collected_at_start() {
    tokio::time::timeout(Duration::from_secs(60), async {
        // Staging as a killed pull leaves it: the closure of "docs" under
        // a pending-sync record, plus a block whose pull left no record.
        let src = source();
        let target = src.main.root("docs").unwrap().unwrap();
        let stores = mem_stores();
        for cid in src.main.cids().unwrap() {
            let block = src.main.get(&cid).unwrap().unwrap();
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
        let before = stores.staging.cids().unwrap().len();
        let node = start(false, stores.clone()).await;
        let after: std::collections::HashSet<_> =
            stores.staging.cids().unwrap().into_iter().collect();
        assert!(!after.contains(&stray), "abandoned block collected");
        assert_eq!(after.len(), before - 1, "the record's staged closure stays");
        for cid in src.main.cids().unwrap() {
            assert!(after.contains(&cid), "{cid:?} of the pending pull kept");
        }
        node.shutdown().await;
    })
    .await
    .expect("bounded");
}
