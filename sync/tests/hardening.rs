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
