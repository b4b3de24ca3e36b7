//! Search over hand-assembled (valid, non-canonical) hierarchies, so the
//! traversal is tested on shapes the canonical builder may never produce:
//! several route levels, wide and narrow nodes, external vectors.

use super::*;
use crate::prolly::Config;
use crate::proximity::format::{
    DirectoryBlock, ExternalVector, NodeEntry, NodeKind, ProxNode, ProximityConfig, VectorRef,
};
use crate::proximity::math::{prepare, radius_up};
use crate::store::MemStore;
use prox_kernels::canonical;
use prox_testkit::{seed, SplitMix64};

/// The default seed (`PROX_SEED` overrides it).
const SEED: u64 = 0x5EED;

/// Builds a valid hierarchy: every `fanout`-th entry of a level becomes a
/// representative, the others join their nearest representative.
fn mini_map(
    store: &MemStore,
    metric: Metric,
    dims: u32,
    mut records: Vec<(Vec<u8>, Vec<f32>)>,
    fanout: usize,
    external: bool,
) -> Descriptor {
    records.sort_by(|a, b| a.0.cmp(&b.0));
    for r in &mut records {
        r.1 = prepare(metric, dims, &r.1, Some(&r.0)).unwrap();
    }
    let vref = |v: &[f32]| {
        if external {
            let bytes = ExternalVector::encode_parts(v, None).unwrap();
            VectorRef::External(store.put(&bytes).unwrap())
        } else {
            VectorRef::Inline(v.to_vec())
        }
    };
    // (entry, its vector) of the current level.
    let mut level: Vec<(NodeEntry, Vec<f32>)> = records
        .iter()
        .map(|(k, v)| (NodeEntry::point(k.clone(), vref(v)), v.clone()))
        .collect();
    let mut lvl = 0u8;
    let store_node = |kind: NodeKind, lvl: u8, mut es: Vec<(NodeEntry, Vec<f32>)>| {
        es.sort_by(|a, b| a.0.key.cmp(&b.0.key));
        let entries: Vec<NodeEntry> = es.iter().map(|e| e.0.clone()).collect();
        let node = ProxNode {
            kind,
            level: lvl,
            subtree_count: entries.iter().map(|e| e.count).sum(),
            quantizer: None,
            entries,
        };
        (store.put(&node.encode().unwrap()).unwrap(), es)
    };
    loop {
        let kind = if lvl == 0 {
            NodeKind::Leaf
        } else {
            NodeKind::Route
        };
        if level.len() <= fanout {
            let (root, _) = store_node(kind, lvl, level);
            let tree = crate::prolly::build_sorted(
                store,
                &Config::default(),
                records.iter().map(|(k, v)| {
                    (
                        k.clone(),
                        Record::encode_parts(v, &k.iter().rev().copied().collect::<Vec<_>>())
                            .unwrap(),
                    )
                }),
            )
            .unwrap();
            let mut config = ProximityConfig::new(dims);
            config.metric = metric;
            return Descriptor {
                config,
                record_count: records.len() as u64,
                directory: DirectoryBlock {
                    root: tree,
                    config: Config::default(),
                },
                root,
            };
        }
        let reps: Vec<usize> = (0..level.len()).step_by(fanout).collect();
        let mut groups: Vec<Vec<(NodeEntry, Vec<f32>)>> = vec![Vec::new(); reps.len()];
        for e in &level {
            let best = reps
                .iter()
                .enumerate()
                .min_by(|a, b| {
                    let sa = canonical::l2sq(&e.1, &level[*a.1].1);
                    let sb = canonical::l2sq(&e.1, &level[*b.1].1);
                    sa.total_cmp(&sb).then(a.1.cmp(b.1))
                })
                .unwrap()
                .0;
            groups[best].push(e.clone());
        }
        let mut next = Vec::new();
        for (g, members) in groups.into_iter().enumerate() {
            // A representative whose vector duplicates an earlier one's
            // joins that group (ties go to the first); its own is empty.
            if members.is_empty() {
                continue;
            }
            let rep = level[reps[g]].clone();
            let (cid, es) = store_node(kind, lvl, members);
            let mut radius = 0.0f64;
            for (e, v) in &es {
                radius = radius.max(radius_up(canonical::l2sq(&rep.1, v), e.radius));
            }
            let entry = NodeEntry {
                key: rep.0.key.clone(),
                vector: vref(&rep.1),
                child: Some(cid),
                count: es.iter().map(|e| e.0.count).sum(),
                radius,
                min_key: es.iter().map(|e| e.0.min_key.clone()).min().unwrap(),
                max_key: es.iter().map(|e| e.0.max_key.clone()).max().unwrap(),
            };
            next.push((entry, rep.1));
        }
        level = next;
        lvl += 1;
    }
}

fn brute(
    records: &[(Vec<u8>, Vec<f32>)],
    metric: Metric,
    dims: u32,
    q: &[f32],
    k: usize,
    f: Option<&Filter>,
) -> Vec<(Vec<u8>, f64)> {
    let q = prepare(metric, dims, q, None).unwrap();
    let c = filter::Compiled::new(f).unwrap();
    let mut all: Vec<(Vec<u8>, f64)> = records
        .iter()
        .filter(|r| c.accepts(&r.0))
        .map(|(key, v)| {
            let v = prepare(metric, dims, v, None).unwrap();
            (key.clone(), canonical::score(metric, &q, &v))
        })
        .collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

fn data(rng: &mut SplitMix64, n: usize, dims: usize, clustered: bool) -> Vec<(Vec<u8>, Vec<f32>)> {
    let centers: Vec<Vec<f32>> = (0..8)
        .map(|_| (0..dims).map(|_| rng.unit() * 4.0).collect())
        .collect();
    (0..n)
        .map(|i| {
            let key = format!("k{:05}", (i * 7919) % 100_000).into_bytes();
            let c = &centers[(rng.next() % 8) as usize];
            let v: Vec<f32> = (0..dims)
                .map(|j| {
                    let x = if clustered {
                        c[j] + rng.unit() * 0.5
                    } else {
                        rng.unit()
                    };
                    // Quantised components make exact score ties common.
                    (x * 4.0).round() / 4.0
                })
                .collect();
            (key, v)
        })
        .collect()
}

fn hits_of(r: &SearchResult) -> Vec<(Vec<u8>, f64)> {
    r.hits.iter().map(|h| (h.key.clone(), h.score)).collect()
}

#[test]
fn exact_equals_brute_force_on_any_valid_hierarchy() {
    let s = seed(SEED);
    let mut rng = SplitMix64::new(s);
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        for (fanout, external) in [(3usize, false), (7, true), (40, false)] {
            let store = MemStore::new();
            let dims = 6;
            let recs = data(&mut rng, 300, dims, true);
            let desc = mini_map(&store, metric, dims as u32, recs.clone(), fanout, external);
            let searcher = Searcher::new(&store, desc).unwrap();
            for t in 0..12 {
                let q: Vec<f32> = (0..dims)
                    .map(|_| (rng.unit() * 16.0).round() / 4.0)
                    .collect();
                let q = if q.iter().all(|&x| x == 0.0) {
                    vec![1.0; dims]
                } else {
                    q
                };
                let k = [1usize, 5, 10, 299, 400][t % 5];
                let filters = [
                    None,
                    Some(Filter::Prefix(b"k0".to_vec())),
                    Some(Filter::Range {
                        start: b"k2".to_vec(),
                        end: Some(b"k6".to_vec()),
                    }),
                    Some(Filter::Keys(
                        recs.iter()
                            .step_by(9)
                            .map(|r| r.0.clone())
                            .collect::<std::collections::BTreeSet<_>>()
                            .into_iter()
                            .collect(),
                    )),
                ];
                for f in &filters {
                    let mut req = SearchRequest::new(k).mode(Mode::Exact);
                    req.filter = f.clone().map(std::borrow::Cow::Owned);
                    let got = searcher.search(&q, &req).unwrap();
                    let want = brute(&recs, metric, dims as u32, &q, k, f.as_ref());
                    assert_eq!(
                        hits_of(&got),
                        want,
                        "seed {s} metric {metric:?} fanout {fanout} k {k} filter {f:?}"
                    );
                    assert_eq!(got.completion, Completion::Exact);
                    // Budgeted without caps is the exact search.
                    req.mode = Mode::Budgeted(Budget::default());
                    assert_eq!(hits_of(&searcher.search(&q, &req).unwrap()), want);
                    // Adaptive never under-fills.
                    req.mode = Mode::Adaptive(Preset::Fast);
                    let a = searcher.search(&q, &req).unwrap();
                    assert_eq!(a.hits.len(), want.len(), "seed {s} adaptive under-filled");
                }
            }
        }
    }
}

#[test]
fn budgets_values_and_batches() {
    let s = seed(SEED);
    let mut rng = SplitMix64::new(s ^ 1);
    let store = MemStore::new();
    let dims = 8;
    let recs = data(&mut rng, 500, dims, true);
    let desc = mini_map(&store, Metric::L2, dims as u32, recs.clone(), 6, false);
    let searcher = Searcher::new(&store, desc).unwrap();
    assert!(searcher.warm().unwrap() > 10);
    let q: Vec<f32> = (0..dims).map(|_| rng.unit()).collect();
    let capped = Budget {
        max_nodes: Some(2),
        ..Budget::default()
    };
    let r = searcher
        .search(&q, &SearchRequest::new(10).mode(Mode::Budgeted(capped)))
        .unwrap();
    assert_eq!(r.completion, Completion::BudgetExhausted, "seed {s}");
    assert!(r.stats.nodes_visited <= 2);
    let r = searcher
        .search(&q, &SearchRequest::new(3).mode(Mode::Exact).with_values())
        .unwrap();
    for h in &r.hits {
        let want: Vec<u8> = h.key.iter().rev().copied().collect();
        assert_eq!(h.value.as_deref(), Some(want.as_slice()));
    }
    let queries: Vec<f32> = (0..dims * 20).map(|_| rng.unit()).collect();
    for mode in [Mode::Exact, Mode::Adaptive(Preset::Balanced)] {
        let req = SearchRequest::new(5).mode(mode);
        let batch = searcher.search_batch(&queries, &req).unwrap();
        let mut ctx = SearchContext::new();
        for (q, b) in queries.chunks(dims).zip(&batch) {
            assert_eq!(&searcher.search_with(&mut ctx, q, &req).unwrap(), b);
        }
    }
    assert!(searcher.search(&q, &SearchRequest::new(0)).is_err());
    assert!(searcher.search(&q[1..], &SearchRequest::new(1)).is_err());
}

/// The adaptive sub-lists partition every record exactly once, each list
/// inside one logical leaf, and are built identically at any thread count
/// (and so are the adaptive hits); a filtered adaptive search over them
/// still fills `min(k, eligible)`.
#[test]
fn sub_lists_partition_records_deterministically() {
    let s = seed(SEED);
    let mut rng = SplitMix64::new(s ^ 0x115);
    let store = MemStore::new();
    let dims = 16;
    let recs = data(&mut rng, 3000, dims, true);
    // Leaves of about 80 records: several lists each.
    let desc = mini_map(&store, Metric::L2, dims as u32, recs.clone(), 80, false);
    let build = |threads: usize| {
        let searcher = Searcher::new(&store, desc.clone()).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            searcher.lists().map(|l| {
                (
                    l.cent.clone(),
                    l.start.clone(),
                    l.page.clone(),
                    l.entry.clone(),
                    l.group.clone(),
                )
            })
        })
        .unwrap()
    };
    let one = build(1);
    assert!(
        one == build(2),
        "seed {s}: lists differ across thread counts"
    );

    let searcher = Searcher::new(&store, desc.clone()).unwrap();
    let arena = searcher.arena().unwrap();
    let lists = searcher.lists().unwrap();
    let n = recs.len();
    assert_eq!(lists.start.len(), lists.group.len() + 1);
    assert_eq!(*lists.start.last().unwrap(), n);
    assert!(lists.group.len() > arena.group_page.len() - 1, "seed {s}");
    let mut seen = vec![false; n];
    for l in 0..lists.group.len() {
        let (a, b) = (lists.start[l], lists.start[l + 1]);
        assert!(a < b, "seed {s}: empty list {l}");
        let g = lists.group[l] as usize;
        assert!(lists.group_start[g] <= l && l < lists.group_start[g + 1]);
        for slot in a..b {
            let p = lists.page[slot] as usize;
            assert!(arena.group_page[g] <= p && p < arena.group_page[g + 1]);
            let r = arena.page_start[p] + lists.entry[slot] as usize;
            assert!(!seen[r], "seed {s}: record {r} listed twice");
            seen[r] = true;
            assert_eq!(
                lists.codes[slot * dims..(slot + 1) * dims],
                arena.codes[r * dims..(r + 1) * dims]
            );
            assert_eq!(lists.norms[slot], arena.norms[r]);
        }
    }
    assert!(seen.iter().all(|&x| x), "seed {s}: a record is in no list");

    // Hits do not depend on the thread count either, and a narrow filter
    // with one probe still fills k.
    let queries: Vec<f32> = (0..dims * 16).map(|_| rng.unit()).collect();
    let req = SearchRequest::new(10).mode(Mode::Adaptive(Preset::Balanced));
    let run = |threads: usize| {
        let searcher = Searcher::new(&store, desc.clone()).unwrap();
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| searcher.search_batch(&queries, &req))
            .unwrap()
    };
    assert!(
        run(1) == run(2),
        "seed {s}: adaptive hits differ across thread counts"
    );
    let mut keys: Vec<Vec<u8>> = recs.iter().map(|r| r.0.clone()).collect();
    keys.sort();
    let f = Filter::Range {
        start: keys[n - 12].clone(),
        end: None,
    };
    let freq = SearchRequest {
        filter: Some(std::borrow::Cow::Owned(f)),
        ..SearchRequest::new(10)
            .mode(Mode::Adaptive(Preset::Fast))
            .probes(1)
    };
    for q in queries.chunks(dims) {
        let got = searcher.search(q, &freq).unwrap();
        assert_eq!(got.hits.len(), 10, "seed {s}: filtered search under-filled");
        assert!(got.hits.iter().all(|h| h.key >= keys[n - 12]));
    }
}

/// The adaptive 4-bit pass is built for maps large enough, identically at
/// any thread count, with one packed row per list slot (codes equal to the
/// nearest centroid of each subspace); adaptive hits over it agree across
/// thread counts, filtered searches fill `min(k, eligible)`, and small maps
/// or too many dimensions fall back to the 8-bit scan. Narrow vectors share
/// one quantizer for records and means, wide ones get two.
#[test]
fn fast4_pass_layout_and_determinism() {
    let s = seed(SEED);
    for dims in [12, 260] {
        fast4_layout_and_determinism(s, dims);
    }
}

fn fast4_layout_and_determinism(s: u64, dims: usize) {
    use prox_kernels::pq::fastscan;
    let mut rng = SplitMix64::new(s ^ 0xF4 ^ dims as u64);
    let store = MemStore::new();
    let recs = data(&mut rng, 3000, dims, true);
    let desc = mini_map(&store, Metric::L2, dims as u32, recs.clone(), 80, false);
    let build = |threads: usize| {
        let searcher = Searcher::new(&store, desc.clone()).unwrap();
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                searcher.fast4().map(|f| {
                    f.map(|f| {
                        (
                            f.scan.books_t.clone(),
                            f.rank.books_t.clone(),
                            f.block_start.clone(),
                            f.blocks.clone(),
                            f.cent_start.clone(),
                            f.cent_blocks.clone(),
                            f.group_blocks.clone(),
                        )
                    })
                })
            })
            .unwrap()
    };
    let one = build(1);
    assert!(one.is_some(), "seed {s}: no 4-bit pass for 3000 records");
    assert!(
        one == build(2),
        "seed {s}: 4-bit pass differs across threads"
    );

    let searcher = Searcher::new(&store, desc.clone()).unwrap();
    let arena = searcher.arena().unwrap();
    let pages = arena.pages.all(&searcher.loader).unwrap();
    let lists = searcher.lists().unwrap();
    let f = searcher.fast4().unwrap().unwrap();
    let m = f.scan.m;
    // Wide vectors get a coarser records' quantizer (fast4::WIDE_DIMS).
    assert_eq!(m, if dims >= 256 { dims / 4 } else { dims / 2 });
    assert_eq!(f.rank.m, dims / 2);
    assert_eq!(f.shared(), dims < 256);
    let bb = fastscan::block_bytes(m);
    let rb = fastscan::block_bytes(f.rank.m);
    let nl = lists.start.len() - 1;
    assert_eq!(f.block_start.len(), nl + 1);
    assert_eq!(*f.block_start.last().unwrap() as usize * bb, f.blocks.len());
    let groups = lists.group_start.len() - 1;
    assert_eq!(f.group_blocks.len(), groups.div_ceil(32) * rb);
    assert_eq!(
        *f.cent_start.last().unwrap() as usize * rb,
        f.cent_blocks.len()
    );
    for l in 0..nl {
        let rows = lists.start[l + 1] - lists.start[l];
        let (b0, b1) = (f.block_start[l] as usize, f.block_start[l + 1] as usize);
        assert_eq!(b1 - b0, rows.div_ceil(32), "seed {s}: list {l}");
        for r in 0..rows {
            let slot = lists.start[l] + r;
            let v = pages[lists.page[slot] as usize].vector(lists.entry[slot] as usize, dims);
            let block = &f.blocks[(b0 + r / 32) * bb..(b0 + r / 32 + 1) * bb];
            for sub in 0..m {
                let (a, b) = (sub * dims / m, (sub + 1) * dims / m);
                // Nearest centroid of the subspace (f32 squared distance in
                // component order, ties to the lower), from the transposed
                // books.
                let dist = |j: usize| {
                    (a..b).fold(0f32, |acc, c| {
                        let t = v[c] - f.scan.books_t[16 * c + j];
                        acc + t * t
                    })
                };
                let best = (1..16).fold(0, |bj, j| if dist(j) < dist(bj) { j } else { bj });
                assert_eq!(
                    usize::from(fastscan::unpack(block, sub, r % 32)),
                    best,
                    "seed {s}: list {l} row {r} subspace {sub}"
                );
            }
        }
    }

    let queries: Vec<f32> = (0..dims * 16).map(|_| rng.unit() * 4.0).collect();
    for preset in [Preset::Fast, Preset::Balanced, Preset::HighRecall] {
        let req = SearchRequest::new(10).mode(Mode::Adaptive(preset));
        let run = |threads: usize| {
            let searcher = Searcher::new(&store, desc.clone()).unwrap();
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| searcher.search_batch(&queries, &req))
                .unwrap()
        };
        assert!(run(1) == run(2), "seed {s}: {preset:?} hits differ");
    }
    let mut keys: Vec<Vec<u8>> = recs.iter().map(|r| r.0.clone()).collect();
    keys.sort();
    let n = keys.len();
    for (lo, k) in [(n - 7, 10), (n - 40, 10), (0, 25)] {
        let f = Filter::Range {
            start: keys[lo].clone(),
            end: None,
        };
        let freq = SearchRequest {
            filter: Some(std::borrow::Cow::Owned(f)),
            ..SearchRequest::new(k)
                .mode(Mode::Adaptive(Preset::Fast))
                .probes(1)
        };
        for q in queries.chunks(dims) {
            let got = searcher.search(q, &freq).unwrap();
            assert_eq!(got.hits.len(), k.min(n - lo), "seed {s}: under-filled");
            assert!(got.hits.iter().all(|h| h.key >= keys[lo]));
        }
    }

    // Too few records: no 4-bit pass, the 8-bit scan answers.
    let small = mini_map(
        &store,
        Metric::L2,
        dims as u32,
        recs[..500].to_vec(),
        40,
        false,
    );
    let searcher = Searcher::new(&store, small).unwrap();
    assert!(searcher.fast4().unwrap().is_none());
    let got = searcher
        .search(
            &queries[..dims],
            &SearchRequest::new(10).mode(Mode::Adaptive(Preset::Fast)),
        )
        .unwrap();
    assert_eq!(got.hits.len(), 10);
}
