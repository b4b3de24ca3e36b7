//! Public behaviour of the HNSW and PQ accelerators: recall against brute
//! force, determinism (threads, frozen CIDs), byte identity with the spec
//! model's canonical constructions, filters, incremental mutation, loaders
//! and the planner. Data is seeded (`PROX_SEED` overrides; the seed is in
//! every failure message).

use prox_engine::accel::hnsw::{
    self, Filter, HnswSearchContext, IdHit, SearchGraph, SearchOptions,
};
use prox_engine::accel::pq::{self, Pq, PqSearchContext};
use prox_engine::accel::{
    BuildKind, Hnsw, HnswParams, Mode, Path, Planner, PqParams, Request, SEEN_PER_K, SMALL_ELIGIBLE,
};
use prox_engine::{BlockStore, Cid, Error, MemStore};
use prox_kernels::{canonical, Metric};
use prox_testkit::SplitMix64;

type Records = Vec<(Vec<u8>, Vec<f32>)>;

fn seed() -> u64 {
    prox_testkit::seed(0x5eed_acce1)
}

fn prepare(metric: Metric, v: Vec<f32>) -> Vec<f32> {
    if metric != Metric::Cosine {
        return v;
    }
    let n = canonical::dot(&v, &v).sqrt();
    v.into_iter().map(|x| (f64::from(x) / n) as f32).collect()
}

/// Seeded Gaussian mixture: `clusters` centres, spread 1.0 around them.
fn clustered(n: usize, dims: usize, clusters: usize, seed: u64, metric: Metric) -> Records {
    let mut r = SplitMix64::new(seed);
    let centres: Vec<Vec<f64>> = (0..clusters)
        .map(|_| (0..dims).map(|_| r.gauss_f64() * 4.0).collect())
        .collect();
    (0..n)
        .map(|i| {
            let c = &centres[(r.next() % clusters as u64) as usize];
            let v: Vec<f32> = c.iter().map(|&x| (x + r.gauss_f64()) as f32).collect();
            ((i as u32).to_be_bytes().to_vec(), prepare(metric, v))
        })
        .collect()
}

fn queries(n: usize, seed: u64, metric: Metric, data: &Records) -> Vec<Vec<f32>> {
    let mut r = SplitMix64::new(seed ^ 0xabcdef);
    (0..n)
        .map(|_| {
            let base = &data[(r.next() % data.len() as u64) as usize].1;
            let v: Vec<f32> = base
                .iter()
                .map(|&x| x + (r.gauss_f64() * 0.5) as f32)
                .collect();
            prepare(metric, v)
        })
        .collect()
}

/// Exact top-k ids (indexes into `data`) by (canonical score, key).
fn brute(
    metric: Metric,
    data: &Records,
    q: &[f32],
    k: usize,
    ok: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let mut s: Vec<(f64, usize)> = (0..data.len())
        .filter(|&i| ok(i))
        .map(|i| (canonical::score(metric, q, &data[i].1), i))
        .collect();
    s.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    s.into_iter().take(k).map(|x| x.1).collect()
}

fn recall_of(g: &SearchGraph, metric: Metric, data: &Records, qs: &[Vec<f32>], ef: usize) -> f64 {
    let mut ctx = HnswSearchContext::new();
    let mut hits = Vec::new();
    let mut found = 0usize;
    for q in qs {
        g.search(&mut ctx, q, SearchOptions { k: 10, ef }, &mut hits)
            .unwrap();
        let truth = brute(metric, data, q, 10, |_| true);
        // Ids are in key order, which is index order here.
        found += hits
            .iter()
            .filter(|h| truth.contains(&(h.id as usize)))
            .count();
    }
    found as f64 / (10 * qs.len()) as f64
}

const METRICS: [Metric; 3] = [Metric::L2, Metric::Cosine, Metric::InnerProduct];

/// Documented operating point: ef = 128 gives recall@10 >= 0.95 on seeded
/// clustered data (3000 x 32, 20 clusters, m = 12, ef_construction = 96)
/// for every metric (cosine is the hardest: ~0.98 at 128, ~0.90 at 64).
#[test]
fn hnsw_recall_at_documented_ef_and_monotone_in_ef() {
    let s = seed();
    for metric in METRICS {
        let data = clustered(3000, 32, 20, s, metric);
        let qs = queries(60, s, metric, &data);
        let params = HnswParams::parse("m=12,efc=96").unwrap();
        let g = Hnsw::build(metric, 32, &data, &params)
            .unwrap()
            .search_graph();
        let r = recall_of(&g, metric, &data, &qs, 128);
        assert!(
            r >= 0.95,
            "{metric}: recall@10 {r} < 0.95 at ef 128 (seed {s})"
        );
        let mut last = 0.0;
        for ef in [10, 20, 40, 80, 160] {
            let r = recall_of(&g, metric, &data, &qs, ef);
            assert!(
                r + 1e-12 >= last,
                "{metric}: recall fell from {last} to {r} at ef {ef} (seed {s})"
            );
            last = r;
        }
    }
}

fn persist_fast(data: &[(Vec<u8>, Vec<f32>)], metric: Metric, params: &HnswParams) -> Cid {
    let store = MemStore::new();
    let h = Hnsw::build(metric, data[0].1.len(), data, params).unwrap();
    h.persist(&store, Cid::of(b"src")).unwrap().manifest_cid
}

fn persist_pq(data: &[(Vec<u8>, Vec<f32>)], metric: Metric, params: &PqParams) -> Cid {
    let store = MemStore::new();
    let p = Pq::train(metric, data[0].1.len(), data, params).unwrap();
    p.persist(&store, Cid::of(b"src")).unwrap().manifest_cid
}

fn pool(n: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build()
        .unwrap()
}

/// Same manifest CIDs at 1 and 3 threads, and equal to CIDs frozen from a
/// run on another ISA (CI re-runs this suite under `PROX_ISA=scalar`). The
/// data here is fixed (not `PROX_SEED`) so that the frozen CIDs apply.
#[test]
fn builds_are_deterministic_across_threads_and_isas() {
    let data = clustered(700, 24, 7, 42, Metric::L2);
    let fast = HnswParams::parse("m=8,efc=40").unwrap();
    let canon = HnswParams::parse("m=6,build=canonical,level_bits=2").unwrap();
    let pqp = PqParams::parse("m=4,k=32,iterations=4").unwrap();
    let run = |n| {
        pool(n).install(|| {
            (
                persist_fast(&data, Metric::L2, &fast),
                persist_fast(&data[..300], Metric::L2, &canon),
                persist_pq(&data, Metric::L2, &pqp),
            )
        })
    };
    let one = run(1);
    let three = run(3);
    assert_eq!(one, three);
    let frozen = (FROZEN_FAST, FROZEN_CANONICAL, FROZEN_PQ);
    let got = (one.0.to_string(), one.1.to_string(), one.2.to_string());
    assert_eq!(
        (got.0.as_str(), got.1.as_str(), got.2.as_str()),
        frozen,
        "CIDs differ from the frozen ones (ISA {})",
        prox_kernels::isa()
    );
}

const FROZEN_FAST: &str = "b53a30303ed6e1441c2b8e40f6ce5004ae278eedc430817f77cabb40cd8979e3";
const FROZEN_CANONICAL: &str = "0ec453d59ba788b98c247cc66d3f5a62cf42c667a9356bff06910539b646c619";
const FROZEN_PQ: &str = "452c5bacb9a2b4a069a9a44bc518cb885b16fb293a0a5b2a977e39b10a534dd2";

fn fixture(name: &str) -> serde_json::Value {
    let path = format!(
        "{}/../conformance/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn fixture_records(case: &serde_json::Value) -> Records {
    case["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let key = hex::decode(r["key"].as_str().unwrap()).unwrap();
            let bytes = hex::decode(r["vector"].as_str().unwrap()).unwrap();
            let v = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (key, v)
        })
        .collect()
}

fn fixture_store_matches(store: &MemStore, case: &serde_json::Value) {
    let objects = case["objects"].as_object().unwrap();
    let mut ours: Vec<String> = store
        .cids()
        .unwrap()
        .iter()
        .map(|c| c.to_string())
        .collect();
    ours.sort();
    let mut theirs: Vec<String> = objects.keys().cloned().collect();
    theirs.sort();
    assert_eq!(ours, theirs, "object set of {}", case["name"]);
}

#[test]
fn canonical_hnsw_matches_the_spec_model_byte_for_byte() {
    let fx = fixture("hnsw-canonical.v2.json");
    for case in fx["cases"].as_array().unwrap() {
        let metric = Metric::from_id(case["metric"].as_u64().unwrap() as u8).unwrap();
        let dims = case["dims"].as_u64().unwrap() as usize;
        let c = &case["config"];
        let params = HnswParams {
            max_connections: c["M"].as_u64().unwrap() as u16,
            ef_construction: c["efc"].as_u64().unwrap() as u32,
            ef_search: c["efs"].as_u64().unwrap() as u32,
            level_bits: c["level_bits"].as_u64().unwrap() as u8,
            overfetch: c["overfetch"].as_u64().unwrap() as u32,
            seed: c["seed"].as_u64().unwrap(),
            build: BuildKind::Canonical,
        };
        let data = fixture_records(case);
        let source = Cid(hex::decode(case["source"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap());
        for threads in [1, 2] {
            let store = MemStore::new();
            let side = pool(threads).install(|| {
                Hnsw::build(metric, dims, &data, &params)
                    .unwrap()
                    .persist(&store, source)
                    .unwrap()
            });
            assert_eq!(
                side.manifest_cid.to_string(),
                case["manifest_cid"].as_str().unwrap(),
                "case {}",
                case["name"]
            );
            assert!(side.manifest.canonical);
            fixture_store_matches(&store, case);
        }
    }
}

#[test]
fn pq_training_matches_the_spec_model_byte_for_byte() {
    let fx = fixture("pq.v2.json");
    for case in fx["cases"].as_array().unwrap() {
        let metric = Metric::from_id(case["metric"].as_u64().unwrap() as u8).unwrap();
        let dims = case["dims"].as_u64().unwrap() as usize;
        let c = &case["config"];
        let params = PqParams {
            subquantizers: c["m"].as_u64().unwrap() as u32,
            centroids: c["k"].as_u64().unwrap() as u16,
            iterations: c["iters"].as_u64().unwrap() as u16,
            rerank: c["rerank"].as_u64().unwrap() as u32,
            seed: c["seed"].as_u64().unwrap(),
        };
        let data = fixture_records(case);
        let source = Cid(hex::decode(case["source"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap());
        let store = MemStore::new();
        let side = Pq::train(metric, dims, &data, &params)
            .unwrap()
            .persist(&store, source)
            .unwrap();
        assert_eq!(
            side.manifest_cid.to_string(),
            case["manifest_cid"].as_str().unwrap(),
            "case {}",
            case["name"]
        );
        fixture_store_matches(&store, case);
        // Loading it back gives the same codes.
        let loaded =
            pq::load(&store, side.manifest_cid, Some(source), metric, dims, &data).unwrap();
        assert_eq!(
            loaded.code(0),
            Pq::train(metric, dims, &data, &params).unwrap().code(0)
        );
    }
}

/// A filter's expected eligibility by record index.
type Eligible = Box<dyn Fn(usize) -> bool>;

fn key_of(i: usize) -> Vec<u8> {
    (i as u32).to_be_bytes().to_vec()
}

#[test]
fn filtered_search_returns_min_k_eligible() {
    let s = seed();
    let data = clustered(4000, 16, 10, s, Metric::L2);
    let g = Hnsw::build(
        Metric::L2,
        16,
        &data,
        &HnswParams::parse("m=8,efc=48").unwrap(),
    )
    .unwrap()
    .search_graph();
    let qs = queries(10, s, Metric::L2, &data);
    let mut ctx = HnswSearchContext::new();
    let mut hits: Vec<IdHit> = Vec::new();
    let range = |a: usize, b: usize| Filter::Range {
        start: key_of(a),
        end: Some(key_of(b)),
    };
    let sets: Vec<(Filter, Eligible)> = vec![
        (range(100, 103), Box::new(|i| (100..103).contains(&i))),
        (range(0, 0), Box::new(|_| false)),
        (range(500, 3900), Box::new(|i| (500..3900).contains(&i))),
        (range(10, 2000), Box::new(|i| (10..2000).contains(&i))),
        (
            Filter::Prefix(vec![0, 0, 0x0f]),
            Box::new(|i| i >> 8 == 0x0f),
        ),
        (Filter::Prefix(vec![]), Box::new(|_| true)),
        (
            Filter::Keys(
                (0..4000)
                    .step_by(97)
                    .map(key_of)
                    .chain([b"nope".to_vec()])
                    .collect(),
            ),
            Box::new(|i| i % 97 == 0),
        ),
        (
            Filter::Keys((0..4000).filter(|i| i % 3 != 0).map(key_of).collect()),
            Box::new(|i| i % 3 != 0),
        ),
    ];
    for (f, ok) in &sets {
        let eligible = (0..4000).filter(|&i| ok(i)).count();
        for q in &qs {
            for k in [1, 10, 50] {
                let st = g
                    .search_filtered(&mut ctx, q, SearchOptions { k, ef: 32 }, Some(f), &mut hits)
                    .unwrap();
                assert_eq!(st.eligible, eligible, "{f:?}");
                assert_eq!(hits.len(), k.min(eligible), "{f:?} k {k} (seed {s})");
                assert!(
                    hits.iter().all(|h| ok(h.id as usize)),
                    "{f:?} returned an ineligible key"
                );
                assert!(hits.windows(2).all(|w| w[0].score <= w[1].score));
                if st.exact_scan {
                    let truth = brute(Metric::L2, &data, q, k, ok);
                    let got: Vec<usize> = hits.iter().map(|h| h.id as usize).collect();
                    assert_eq!(got, truth, "exact scan must be exact ({f:?}, seed {s})");
                }
            }
        }
    }
    // The PQ path honours the same filters.
    let p = Pq::train(
        Metric::L2,
        16,
        &data,
        &PqParams::parse("m=4,k=16,iterations=2").unwrap(),
    )
    .unwrap();
    let mut pc = PqSearchContext::new();
    for (f, ok) in &sets {
        let eligible = (0..4000).filter(|&i| ok(i)).count();
        p.search(&mut pc, &qs[0], 10, None, Some(f), &mut hits)
            .unwrap();
        assert_eq!(hits.len(), 10.min(eligible), "pq {f:?}");
        assert!(hits.iter().all(|h| ok(h.id as usize)));
    }
}

#[test]
fn incremental_insert_and_delete() {
    let s = seed();
    let data = clustered(2400, 16, 12, s, Metric::InnerProduct);
    let (first, rest) = data.split_at(1600);
    let params = HnswParams::parse("m=10,efc=64").unwrap();
    let mut h = Hnsw::build(Metric::InnerProduct, 16, first, &params).unwrap();
    h.insert(rest).unwrap();
    assert_eq!(h.len(), 2400);
    assert!(matches!(
        h.insert(&rest[..1]),
        Err(Error::DuplicateKey { .. })
    ));
    let qs = queries(40, s, Metric::InnerProduct, &data);
    let r = recall_of(&h.search_graph(), Metric::InnerProduct, &data, &qs, 64);
    assert!(r >= 0.95, "recall after insert {r} (seed {s})");

    // Mask every third key: never returned, graph still navigable.
    let gone: Vec<Vec<u8>> = (0..2400).step_by(3).map(key_of).collect();
    assert_eq!(h.delete(&gone), gone.len());
    let g = h.search_graph();
    assert_eq!(g.len(), 2400 - gone.len());
    let live: Records = data
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, r)| r.clone())
        .collect();
    let mut ctx = HnswSearchContext::new();
    let mut hits = Vec::new();
    let mut found = 0;
    for q in &qs {
        g.search(&mut ctx, q, SearchOptions { k: 10, ef: 64 }, &mut hits)
            .unwrap();
        assert_eq!(hits.len(), 10);
        let index = |h: &IdHit| u32::from_be_bytes(g.key(h.id).try_into().unwrap()) as usize;
        assert!(
            hits.iter().all(|h| index(h) % 3 != 0),
            "a masked key was returned"
        );
        let truth = brute(Metric::InnerProduct, &data, q, 10, |i| i % 3 != 0);
        found += hits.iter().filter(|h| truth.contains(&index(h))).count();
    }
    let r = found as f64 / (10 * qs.len()) as f64;
    assert!(r >= 0.93, "recall with masked nodes {r} (seed {s})");

    // Compaction removes them; the persisted graph loads over the live records.
    let store = MemStore::new();
    let side = h.persist(&store, Cid::of(b"m")).unwrap();
    assert!(!side.manifest.canonical);
    let (_, loaded) = hnsw::load(
        &store,
        side.manifest_cid,
        Some(Cid::of(b"m")),
        Metric::InnerProduct,
        16,
        &live,
    )
    .unwrap();
    assert_eq!(loaded.len(), live.len());
    let r = recall_of(&loaded.search_graph(), Metric::InnerProduct, &live, &qs, 64);
    // recall_of maps ids to indexes of `live`, which is key order.
    assert!(r >= 0.93, "recall after compaction {r} (seed {s})");
}

#[test]
fn canonical_graph_stays_canonical_under_mutation() {
    let data = clustered(150, 8, 4, seed(), Metric::L2);
    let params = HnswParams::parse("m=4,build=canonical,level_bits=2").unwrap();
    let store = MemStore::new();
    let clean = Hnsw::build(Metric::L2, 8, &data[..120], &params).unwrap();
    let mut grown = Hnsw::build(Metric::L2, 8, &data[..100], &params).unwrap();
    grown.insert(&data[100..130]).unwrap();
    let gone: Vec<Vec<u8>> = data[120..130].iter().map(|r| r.0.clone()).collect();
    grown.delete(&gone);
    let a = clean.persist(&store, Cid::of(b"s")).unwrap();
    let b = grown.persist(&store, Cid::of(b"s")).unwrap();
    assert_eq!(a.manifest_cid, b.manifest_cid);
    assert!(b.manifest.canonical);
}

#[test]
fn loaders_reject_inconsistent_sidecars() {
    let data = clustered(200, 8, 4, seed(), Metric::L2);
    let store = MemStore::new();
    let src = Cid::of(b"src");
    let h = Hnsw::build(
        Metric::L2,
        8,
        &data,
        &HnswParams::parse("m=4,efc=16").unwrap(),
    )
    .unwrap();
    let side = h.persist(&store, src).unwrap();
    let ok = hnsw::load(&store, side.manifest_cid, Some(src), Metric::L2, 8, &data);
    assert!(ok.is_ok());
    // Wrong source, metric, dimensions, record set.
    assert!(hnsw::load(
        &store,
        side.manifest_cid,
        Some(Cid::of(b"x")),
        Metric::L2,
        8,
        &data
    )
    .is_err());
    assert!(hnsw::load(
        &store,
        side.manifest_cid,
        Some(src),
        Metric::Cosine,
        8,
        &data
    )
    .is_err());
    assert!(hnsw::load(
        &store,
        side.manifest_cid,
        Some(src),
        Metric::L2,
        8,
        &data[1..]
    )
    .is_err());
    let mut renamed = data.clone();
    renamed[5].0 = b"\xff\xff\xff\xff\xff".to_vec();
    renamed.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(hnsw::load(
        &store,
        side.manifest_cid,
        Some(src),
        Metric::L2,
        8,
        &renamed
    )
    .is_err());
    // Corrupt manifest bytes: every truncation and a flipped canonical flag.
    let bytes = store.get(&side.manifest_cid).unwrap().unwrap();
    for cut in [0, 4, 5, 6, 40, bytes.len() - 1] {
        let c = store.put(&bytes[..cut]).unwrap();
        assert!(
            hnsw::load(&store, c, None, Metric::L2, 8, &data).is_err(),
            "cut {cut}"
        );
    }
    let mut bad = bytes.to_vec();
    bad[5] = 2;
    let c = store.put(&bad).unwrap();
    assert!(hnsw::load(&store, c, None, Metric::L2, 8, &data).is_err());
    // A manifest whose max level disagrees with the entry point's level.
    let mut m = side.manifest.clone();
    m.max_level += 1;
    let c = store.put(&m.encode().unwrap()).unwrap();
    assert!(hnsw::load(&store, c, None, Metric::L2, 8, &data).is_err());
    // A missing graph tree.
    let mut m = side.manifest.clone();
    m.graph_root = Cid::of(b"absent");
    let c = store.put(&m.encode().unwrap()).unwrap();
    assert!(matches!(
        hnsw::load(&store, c, None, Metric::L2, 8, &data),
        Err(Error::NotFound { .. })
    ));

    let p = Pq::train(
        Metric::L2,
        8,
        &data,
        &PqParams::parse("m=2,k=8,iterations=2").unwrap(),
    )
    .unwrap();
    let ps = p.persist(&store, src).unwrap();
    assert!(pq::load(&store, ps.manifest_cid, Some(src), Metric::L2, 8, &data).is_ok());
    assert!(pq::load(
        &store,
        ps.manifest_cid,
        Some(src),
        Metric::L2,
        8,
        &data[2..]
    )
    .is_err());
    assert!(pq::load(
        &store,
        ps.manifest_cid,
        Some(src),
        Metric::InnerProduct,
        8,
        &data
    )
    .is_err());
    let pb = store.get(&ps.manifest_cid).unwrap().unwrap();
    let c = store.put(&pb[..pb.len() - 3]).unwrap();
    assert!(pq::load(&store, c, None, Metric::L2, 8, &data).is_err());
}

#[test]
fn pq_search_recall_with_exact_rerank() {
    let s = seed();
    for metric in METRICS {
        let data = clustered(3000, 32, 20, s, metric);
        let qs = queries(40, s, metric, &data);
        let p = Pq::train(
            metric,
            32,
            &data,
            &PqParams::parse("m=8,k=64,iterations=4,rerank=16").unwrap(),
        )
        .unwrap();
        assert!(p.mean_squared_error() <= p.max_squared_error());
        let mut ctx = PqSearchContext::new();
        let mut hits = Vec::new();
        let mut found = 0;
        for q in &qs {
            p.search(&mut ctx, q, 10, None, None, &mut hits).unwrap();
            assert_eq!(hits.len(), 10);
            let truth = brute(metric, &data, q, 10, |_| true);
            found += hits
                .iter()
                .filter(|h| truth.contains(&(h.id as usize)))
                .count();
            // Scores are canonical.
            for h in &hits {
                assert_eq!(h.score, canonical::score(metric, q, &data[h.id as usize].1));
            }
        }
        let r = found as f64 / (10 * qs.len()) as f64;
        assert!(r >= 0.9, "{metric}: pq recall {r} (seed {s})");
    }
}

#[test]
fn planner_is_deterministic_and_exact_mode_is_native() {
    let both = Planner {
        hnsw_ef_search: Some(64),
        pq_rerank: Some(8),
        ..Planner::default()
    };
    let none = Planner::default();
    let req = |mode, eligible| Request {
        mode,
        k: 10,
        ef: None,
        rerank: None,
        nprobe: None,
        records: 100_000,
        eligible,
    };
    assert_eq!(
        both.plan(&req(Mode::Exact, None)).unwrap().path,
        Path::Native
    );
    assert_eq!(both.plan(&req(Mode::Auto, None)).unwrap().path, Path::Hnsw);
    assert_eq!(both.plan(&req(Mode::Auto, None)).unwrap().ef, 64);
    assert_eq!(
        both.plan(&req(Mode::Auto, Some(100))).unwrap().path,
        Path::Native
    );
    assert_eq!(
        both.plan(&req(Mode::Auto, Some(50_000))).unwrap().path,
        Path::Hnsw
    );
    assert_eq!(both.plan(&req(Mode::Pq, None)).unwrap().path, Path::Pq);
    assert_eq!(
        none.plan(&req(Mode::Auto, None)).unwrap().path,
        Path::Native
    );
    assert!(none.plan(&req(Mode::Hnsw, None)).is_err());
    let pq_only = Planner {
        hnsw_ef_search: None,
        pq_rerank: Some(4),
        ..Planner::default()
    };
    let p = pq_only.plan(&req(Mode::Auto, None)).unwrap();
    assert_eq!((p.path, p.rerank), (Path::Pq, 4));
    assert_eq!(Mode::parse("hnsw").unwrap(), Mode::Hnsw);
    assert!(Mode::parse("fast").is_err());
}

/// Rule 3 of the planner: a mid-sized filter goes to a 4-bit PQ sidecar's
/// masked fast scan only with the caller's profile setting, with the
/// request's knobs first and a floor of eligible rows read; without it
/// the older rules stand.
#[test]
fn filtered_pq_plans_need_a_fast_scan_and_a_profile_setting() {
    let records = 1 << 20;
    let req = |eligible, nprobe, rerank| Request {
        mode: Mode::Auto,
        k: 10,
        ef: None,
        rerank,
        nprobe,
        records,
        eligible: Some(eligible),
    };
    let profiled = Planner {
        hnsw_ef_search: Some(64),
        pq_rerank: Some(8),
        pq_fast: true,
        pq_filtered: Some((12, 16)),
    };
    let p = profiled.plan(&req(10_000, None, None)).unwrap();
    assert_eq!(
        (p.path, p.nprobe, p.rerank, p.min_seen),
        (Path::Pq, 12, 16, SEEN_PER_K * 10)
    );
    let p = profiled.plan(&req(10_000, Some(3), Some(5))).unwrap();
    assert_eq!((p.path, p.nprobe, p.rerank), (Path::Pq, 3, 5));
    // At most 2048 eligible: exact; past records / 8: HNSW.
    let at = |e| profiled.plan(&req(e, None, None)).unwrap().path;
    assert_eq!(at(SMALL_ELIGIBLE), Path::Native);
    assert_eq!(at(SMALL_ELIGIBLE + 1), Path::Pq);
    assert_eq!(at(records / 8), Path::Pq);
    assert_eq!(at(records / 8 + 1), Path::Hnsw);
    // Without the setting, or without fast scan: exact up to records / 16.
    for planner in [
        Planner {
            pq_filtered: None,
            ..profiled
        },
        Planner {
            pq_fast: false,
            ..profiled
        },
    ] {
        let at = |e| planner.plan(&req(e, None, None)).unwrap().path;
        assert_eq!(at(records / 16), Path::Native);
        assert_eq!(at(records / 16 + 1), Path::Hnsw);
    }
    // An unfiltered request is not planned as a filtered one.
    let p = profiled
        .plan(&Request {
            eligible: None,
            ..req(0, None, None)
        })
        .unwrap();
    assert_eq!((p.path, p.min_seen), (Path::Hnsw, 0));
}

#[test]
fn search_rejects_bad_queries_and_handles_tiny_graphs() {
    let data: Records = vec![
        (b"a".to_vec(), vec![1.0, 0.0]),
        (b"b".to_vec(), vec![0.0, 1.0]),
    ];
    let g = Hnsw::build(Metric::L2, 2, &data, &HnswParams::default())
        .unwrap()
        .search_graph();
    let mut ctx = HnswSearchContext::new();
    let mut hits = Vec::new();
    assert!(g
        .search(&mut ctx, &[1.0], SearchOptions { k: 1, ef: 8 }, &mut hits)
        .is_err());
    assert!(g
        .search(
            &mut ctx,
            &[f32::NAN, 0.0],
            SearchOptions { k: 1, ef: 8 },
            &mut hits
        )
        .is_err());
    g.search(
        &mut ctx,
        &[0.1, 0.9],
        SearchOptions { k: 5, ef: 8 },
        &mut hits,
    )
    .unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(g.key(hits[0].id), b"b");
    let empty = Hnsw::build(Metric::L2, 2, &[], &HnswParams::default()).unwrap();
    assert!(empty.persist(&MemStore::new(), Cid::of(b"e")).is_err());
    let eg = empty.search_graph();
    eg.search(
        &mut ctx,
        &[0.0, 0.0],
        SearchOptions { k: 3, ef: 8 },
        &mut hits,
    )
    .unwrap();
    assert!(hits.is_empty());
}

/// A graph with PQ traversal codes from a PQ sidecar trained on `data`.
fn pq_graph(metric: Metric, data: &Records, hnsw: &str, pq: &str) -> (SearchGraph, SearchGraph) {
    let dims = data[0].1.len();
    let g = Hnsw::build(metric, dims, data, &HnswParams::parse(hnsw).unwrap())
        .unwrap()
        .search_graph();
    let p = Pq::train(metric, dims, data, &PqParams::parse(pq).unwrap()).unwrap();
    let store = MemStore::new();
    let sidecar = p.persist(&store, Cid::of(b"src")).unwrap();
    let pg = g.clone().with_pq_sidecar(&p, &sidecar.manifest).unwrap();
    (g, pg)
}

/// Documented operating point for PQ traversal (docs/accel.md): ef = 128
/// gives recall@10 >= 0.9 (after the f32 rescore of all `ef` layer-0
/// results and the canonical rerank) on seeded clustered data (3000 x 32,
/// 20 clusters, m = 12, ef_construction = 96, PQ m = 8 x 64 centroids), L2
/// and inner product; batch search equals one-at-a-time at 1 and 3 threads,
/// and scores are canonical.
#[test]
fn hnsw_pq_traversal_recall_and_thread_determinism() {
    let s = seed();
    for metric in [Metric::L2, Metric::InnerProduct] {
        let data = clustered(3000, 32, 20, s, metric);
        let qs = queries(60, s, metric, &data);
        let (g, pg) = pq_graph(metric, &data, "m=12,efc=96", "m=8,k=64,iterations=4");
        assert!(pg.heap_bytes() < g.heap_bytes() + 3000 * 64 + 8 * 64 * 4 * 4);
        let r = recall_of(&pg, metric, &data, &qs, 128);
        assert!(
            r >= 0.9,
            "{metric}: PQ-traversal recall@10 {r} < 0.9 at ef 128 (seed {s})"
        );
        let opts = SearchOptions { k: 10, ef: 128 };
        let one = pool(1).install(|| pg.search_batch(&qs, opts).unwrap());
        let three = pool(3).install(|| pg.search_batch(&qs, opts).unwrap());
        assert_eq!(one, three, "{metric}: 1 vs 3 threads (seed {s})");
        let mut ctx = HnswSearchContext::new();
        let mut hits = Vec::new();
        for (q, b) in qs.iter().zip(&one) {
            pg.search(&mut ctx, q, opts, &mut hits).unwrap();
            assert_eq!(&hits, b, "{metric}: batch vs single (seed {s})");
            for h in &hits {
                assert_eq!(h.score, canonical::score(metric, q, &data[h.id as usize].1));
            }
        }
    }
}

/// PQ traversal hits (ids and canonical scores) on fixed data equal a digest
/// frozen from another ISA (CI re-runs this suite under `PROX_ISA=scalar`):
/// the ADC lookups sum in a fixed order and the rerank is canonical.
#[test]
fn hnsw_pq_traversal_hits_are_isa_independent() {
    let mut digest = Vec::new();
    for metric in [Metric::L2, Metric::InnerProduct] {
        let data = clustered(1500, 24, 10, 42, metric);
        let qs = queries(30, 42, metric, &data);
        let (_, pg) = pq_graph(metric, &data, "m=10,efc=64", "m=6,k=32,iterations=4");
        for hits in pg
            .search_batch(&qs, SearchOptions { k: 10, ef: 64 })
            .unwrap()
        {
            for h in hits {
                digest.extend_from_slice(&h.id.to_le_bytes());
                digest.extend_from_slice(&h.score.to_bits().to_le_bytes());
            }
        }
    }
    assert_eq!(
        Cid::of(&digest).to_string(),
        FROZEN_PQ_TRAVERSAL_HITS,
        "PQ traversal hits differ from the frozen ones (ISA {})",
        prox_kernels::isa()
    );
}

const FROZEN_PQ_TRAVERSAL_HITS: &str =
    "5b8e37a0e263369dad00a50fb71225bcf214cdd0b4f249b99287f9c03d5d6c3e";

/// SQ8 traversal (one global step, exact integer scores, f32 rescoring,
/// canonical rerank) on data whose dimensions have different offsets and
/// ranges: recall@10 >= 0.95 at ef 64 for every metric; batch search equals
/// one-at-a-time search at 1 and 3 threads; reported scores are canonical.
#[test]
fn hnsw_sq8_traversal_recall_on_skewed_dimensions() {
    let s = seed();
    for metric in METRICS {
        // Dimension j scaled by 2^(j mod 5) and shifted by j (L2, inner
        // product); cosine data stays unit length.
        let data: Records = clustered(2000, 24, 16, s, Metric::L2)
            .into_iter()
            .map(|(key, v)| {
                let v = v
                    .iter()
                    .enumerate()
                    .map(|(j, &x)| x * (1u32 << (j % 5)) as f32 + j as f32)
                    .collect();
                (key, prepare(metric, v))
            })
            .collect();
        let qs = queries(50, s, metric, &data);
        let g = Hnsw::build(
            metric,
            24,
            &data,
            &HnswParams::parse("m=12,efc=96").unwrap(),
        )
        .unwrap()
        .search_graph()
        .with_sq8()
        .unwrap();
        let r = recall_of(&g, metric, &data, &qs, 64);
        assert!(
            r >= 0.95,
            "{metric}: SQ8 recall@10 {r} < 0.95 at ef 64 (seed {s})"
        );
        let opts = SearchOptions { k: 10, ef: 64 };
        let one = pool(1).install(|| g.search_batch(&qs, opts).unwrap());
        let three = pool(3).install(|| g.search_batch(&qs, opts).unwrap());
        assert_eq!(one, three, "{metric}: 1 vs 3 threads (seed {s})");
        let mut ctx = HnswSearchContext::new();
        let mut hits = Vec::new();
        for (q, b) in qs.iter().zip(&one) {
            g.search(&mut ctx, q, opts, &mut hits).unwrap();
            assert_eq!(&hits, b, "{metric}: batch vs single (seed {s})");
            for h in &hits {
                assert_eq!(h.score, canonical::score(metric, q, &data[h.id as usize].1));
            }
        }
    }
}

/// SQ8 traversal hits (ids and canonical scores) on fixed data equal a
/// digest frozen from another ISA (CI re-runs this suite under
/// `PROX_ISA=scalar`): query and node codes come from scalar arithmetic, the
/// integer dot product is exact on every ISA, and the rerank is canonical.
/// (Not the f32 rescoring: its order may differ by ISA, but only inside the
/// band that the canonical rerank then orders exactly.)
#[test]
fn hnsw_sq8_traversal_hits_are_isa_independent() {
    let mut digest = Vec::new();
    for metric in METRICS {
        let data = clustered(1500, 24, 10, 43, metric);
        let qs = queries(30, 43, metric, &data);
        let g = Hnsw::build(
            metric,
            24,
            &data,
            &HnswParams::parse("m=10,efc=64").unwrap(),
        )
        .unwrap()
        .search_graph()
        .with_sq8()
        .unwrap();
        for ef in [16, 64] {
            for hits in g.search_batch(&qs, SearchOptions { k: 10, ef }).unwrap() {
                for h in hits {
                    digest.extend_from_slice(&h.id.to_le_bytes());
                    digest.extend_from_slice(&h.score.to_bits().to_le_bytes());
                }
            }
        }
    }
    assert_eq!(
        Cid::of(&digest).to_string(),
        FROZEN_SQ8_TRAVERSAL_HITS,
        "SQ8 traversal hits differ from the frozen ones (ISA {})",
        prox_kernels::isa()
    );
}

const FROZEN_SQ8_TRAVERSAL_HITS: &str =
    "62cb722f96fe7de64e753f56cb23a24fd3765bb1a8bce6638e096622f2c508f5";
