//! Payload field indexes travel with their map over sync: a map built with
//! `lang:keyword`, `year:integer` and `price:float` indexes is pulled by a
//! second node over a loopback libp2p connection (the engine's `refs`
//! linker), and the replica's indexes are complete (every block of every
//! index, catalog and control tree present), verify against its records,
//! and answer filtered searches exactly as the source does. Bounded by a
//! timeout; seeded (`PROX_SEED`, printed in every failure message).

use prox_engine::index::{self, Build, Index, Options, QueryMode, Request, Scratch};
use prox_engine::keys::Filter;
use prox_engine::prolly::Tree;
use prox_engine::secondary::{filter_from_json, FieldIndex};
use prox_engine::{BlockStore, Cid, MemStore};
use prox_sync::{Config, Linker, Node, RefsLinker, Stores};
use prox_testkit::SplitMix64;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

const DIMS: usize = 16;
const N: u64 = 3_000;
const LANGS: [&str; 5] = ["en", "fr", "de", "es", "ja"];

fn seed() -> u64 {
    prox_testkit::seed(0x51_d3c5)
}

fn records(seed: u64) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    let mut rng = SplitMix64::new(seed);
    (0..N)
        .map(|i| {
            let v = (0..DIMS).map(|_| rng.gauss()).collect();
            let p = json!({
                "lang": LANGS[rng.below(LANGS.len() as u64) as usize],
                "year": 1990 + rng.below(35) as i64,
                "price": rng.below(10_000) as f64 / 100.0,
            });
            (i.to_be_bytes().to_vec(), v, serde_json::to_vec(&p).unwrap())
        })
        .collect()
}

fn stores() -> Stores {
    Stores::new(Arc::new(MemStore::new()), Arc::new(MemStore::new()))
}

async fn start(stores: Stores) -> Node<RefsLinker> {
    let cfg = Config {
        listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
        open: true,
        ..Config::default()
    };
    let key = libp2p::identity::Keypair::generate_ed25519();
    Node::start(&cfg, key, stores, RefsLinker).await.unwrap()
}

/// Every CID reachable from a root value through the `refs` linker.
fn closure(store: &dyn BlockStore, value: &[u8]) -> HashSet<Cid> {
    let mut seen = HashSet::new();
    let mut stack = RefsLinker.root_links(value).unwrap();
    while let Some((c, k)) = stack.pop() {
        if seen.insert(c) {
            let b = store.get(&c).unwrap().expect("closure block present");
            stack.extend(RefsLinker.links(&k, &b).unwrap());
        }
    }
    seen
}

/// Reads every entry of the tree rooted at `root` (so every block of it
/// must be in `store`) and returns the entry count.
fn walk(store: &dyn BlockStore, ix: &Index, root: Option<Cid>) -> usize {
    let cfg = ix.map().directory().unwrap().config().clone();
    let tree = Tree::open(store, cfg, root).unwrap();
    let mut n = 0;
    for e in tree.iter() {
        e.unwrap();
        n += 1;
    }
    n
}

fn hits(ix: &Index, q: &[f32], req: &Request) -> Vec<(Vec<u8>, f64)> {
    let mut scratch = Scratch::default();
    ix.search(&mut scratch, q, req)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| (h.key, h.score))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_indexes_travel_with_their_map() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let s = seed();
        let src = stores();
        let mut b = Build::new(DIMS as u32);
        b.indexes = ["lang:keyword", "year:integer", "price:float"]
            .iter()
            .map(|f| f.parse::<FieldIndex>().unwrap())
            .collect();
        let recs = records(s);
        index::build(&*src.main, Some("map"), &b, recs.clone()).unwrap();
        let value = src.main.root("map").unwrap().unwrap();

        let a = start(src.clone()).await;
        let dst = stores();
        let node_b = start(dst.clone()).await;
        let target = a.listen_addrs()[0]
            .clone()
            .with(libp2p::multiaddr::Protocol::P2p(a.peer_id()));
        let r = node_b.pull(&target, "map", "map").await.unwrap();
        let c = closure(&*src.main, &value);
        assert_eq!(r.blocks_fetched as usize, c.len(), "seed {s:#x}: {r:?}");
        assert!(c.iter().all(|b| dst.main.has(b).unwrap()), "seed {s:#x}");
        assert_eq!(dst.main.root("map").unwrap().as_deref(), Some(&value[..]));

        let ia = Index::open(Arc::clone(&src.main), "map", &Options::default()).unwrap();
        let ib = Index::open(Arc::clone(&dst.main), "map", &Options::default()).unwrap();
        let (fa, fb) = (ia.field_indexes().unwrap(), ib.field_indexes().unwrap());
        assert_eq!(fa, fb, "seed {s:#x}: replica's indexes differ");
        assert_eq!(fb.fields().len(), 3);
        // Every index, catalog and control tree is whole on the replica:
        // each of its roots is in the pulled closure and a full walk of it
        // reads only blocks the replica holds.
        let meta = fb
            .metadata(&MemStore::new(), &ib.map().directory().unwrap())
            .unwrap();
        assert_eq!(meta.len(), 2 + 3, "catalog, control and three indexes");
        for (k, v) in &meta {
            let root = Cid::from_slice(v).unwrap();
            assert!(
                c.contains(&root),
                "seed {s:#x}: {} not in the closure",
                String::from_utf8_lossy(k)
            );
            assert!(walk(&*dst.main, &ib, Some(root)) > 0);
        }
        for f in fb.fields() {
            // Keys-only projection: one entry per record with a value.
            assert_eq!(walk(&*dst.main, &ib, f.state.root), N as usize);
        }
        assert_eq!(
            fb.verify(&ib.map().directory().unwrap()).unwrap(),
            Vec::<String>::new(),
            "seed {s:#x}: replica's indexes disagree with its records"
        );

        // Filtered searches: the same eligible set as the payloads say and
        // the same hits on both sides, exact and auto.
        let filters = [
            (
                json!({"key": "lang", "match": {"value": "ja"}}),
                Box::new(|p: &Value| p["lang"] == "ja") as Box<dyn Fn(&Value) -> bool>,
            ),
            (
                json!({"must": [{"key": "year", "range": {"gte": 2020}},
                                 {"key": "price", "range": {"lt": 20.0}}]}),
                Box::new(|p: &Value| {
                    p["year"].as_i64().unwrap() >= 2020 && p["price"].as_f64().unwrap() < 20.0
                }),
            ),
            (
                json!({"must_not": {"key": "lang", "match": {"any": ["en", "fr"]}}}),
                Box::new(|p: &Value| p["lang"] != "en" && p["lang"] != "fr"),
            ),
        ];
        let mut rng = SplitMix64::new(s ^ 0x77);
        for (f, pred) in &filters {
            let want: Vec<Vec<u8>> = recs
                .iter()
                .filter(|r| pred(&serde_json::from_slice(&r.2).unwrap()))
                .map(|r| r.0.clone())
                .collect();
            let req = Request::new(1).filter(filter_from_json(f).unwrap());
            match ib.resolve_filter(&req).unwrap().filter {
                Some(Filter::Keys(k)) => assert_eq!(k, want, "seed {s:#x}: {f}"),
                other => panic!("seed {s:#x}: {f} not resolved: {other:?}"),
            }
            for _ in 0..3 {
                let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss()).collect();
                for mode in [QueryMode::Exact, QueryMode::Auto] {
                    let req = Request::new(10)
                        .mode(mode)
                        .filter(filter_from_json(f).unwrap());
                    let (ha, hb) = (hits(&ia, &q, &req), hits(&ib, &q, &req));
                    assert_eq!(ha, hb, "seed {s:#x}: {f} {mode}");
                    assert_eq!(hb.len(), 10.min(want.len()), "seed {s:#x}: {f}");
                    assert!(hb.iter().all(|h| want.binary_search(&h.0).is_ok()));
                }
            }
        }
        a.shutdown().await;
        node_b.shutdown().await;
    })
    .await
    .expect("test finished in time");
}
