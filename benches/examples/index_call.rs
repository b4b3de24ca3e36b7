//! The bare engine call, one query at a time: `Index::search_into` with one
//! reused `Scratch` and `Response` on one thread, the floor a front end's
//! per-call overhead is measured against (`benches/peers/prox_py.py
//! overhead --rust-call`). Prints one JSON line per ef: QPS (best of
//! `--reps` passes over the queries) and recall@k.
//!
//! ```text
//! cargo run --release -p prox-benches --example index_call -- \
//!   --store db --name minilm --query query.fvecs --gt gt.ivecs --k 10 --ef 16,32 --reps 3
//! ```

mod harness;
use harness::read_vecs;

use prox_engine::index::{Options, PathChoice, Request, Response, Scratch};
use prox_engine::{BlockStore, Index, MmapStore};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let store = get("--store").expect("--store");
    let name = get("--name").expect("--name");
    let queries = read_vecs(&get("--query").expect("--query"), false);
    let gt = read_vecs(&get("--gt").expect("--gt"), true);
    let k: usize = get("--k").map_or(10, |s| s.parse().expect("--k"));
    let reps: usize = get("--reps").map_or(3, |s| s.parse().expect("--reps"));
    let efs: Vec<usize> = get("--ef")
        .unwrap_or_else(|| "64".into())
        .split(',')
        .map(|s| s.parse().expect("--ef"))
        .collect();
    let store: Arc<dyn BlockStore> = Arc::new(MmapStore::open_read_only(&store).expect("store"));
    let index = Index::open(store, &name, &Options::default()).expect("map");
    let mut scratch = Scratch::default();
    let mut out = Response::default();
    for ef in efs {
        let mut req = Request::new(k).path(PathChoice::Hnsw);
        req.ef = Some(ef);
        let mut best = f64::INFINITY;
        let mut hit = 0usize;
        for _ in 0..reps {
            hit = 0;
            let t = Instant::now();
            for (q, g) in queries.iter().zip(&gt) {
                index
                    .search_into(&mut scratch, q, &req, &mut out)
                    .expect("search");
                for h in &out.hits {
                    let id = u64::from_be_bytes(h.key.as_slice().try_into().expect("8-byte key"));
                    hit += usize::from(g[..k].contains(&(id as f32)));
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            r#"{{"ef": {ef}, "qps": {:.0}, "recall": {:.4}}}"#,
            queries.len() as f64 / best,
            hit as f64 / (k * queries.len()) as f64
        );
    }
}
