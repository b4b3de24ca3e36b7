//! Native search over canonically built maps: exactness against brute
//! force, recall of the adaptive presets, filters, ISA independence and
//! batch equivalence. Seeded; `PROX_SEED` replays a failure.

use prox_engine::proximity::search::{
    Budget, Completion, ExactLayout, Filter, Mode, Preset, SearchContext, SearchRequest,
    SearchResult,
};
use prox_engine::proximity::{math::prepare, ProximityConfig, ProximityMap};
use prox_engine::MemStore;
use prox_kernels::{canonical, Metric};

use prox_testkit::SplitMix64 as Rng;

fn seed() -> u64 {
    prox_testkit::seed(0xC0FFEE)
}

type Rec = (Vec<u8>, Vec<f32>, Vec<u8>);

/// A brute-force eligibility predicate.
type Eligible<'a> = Box<dyn Fn(&[u8]) -> bool + 'a>;

fn key(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

/// Gaussian clusters; `grid` rounds components to quarters so exact score
/// ties are common.
fn clustered(rng: &mut Rng, n: usize, dims: usize, clusters: usize, grid: bool) -> Vec<Rec> {
    let centers: Vec<Vec<f32>> = (0..clusters)
        .map(|_| (0..dims).map(|_| rng.unit() * 3.0).collect())
        .collect();
    (0..n)
        .map(|i| {
            let c = &centers[(rng.next() % clusters as u64) as usize];
            let v = c
                .iter()
                .map(|&x| {
                    let y = x + rng.gauss() * 0.4;
                    if grid {
                        (y * 4.0).round() / 4.0
                    } else {
                        y
                    }
                })
                .collect();
            (key(i as u64 * 3), v, format!("v{i}").into_bytes())
        })
        .collect()
}

fn brute(
    recs: &[Rec],
    metric: Metric,
    q: &[f32],
    k: usize,
    eligible: impl Fn(&[u8]) -> bool,
) -> Vec<(Vec<u8>, f64)> {
    let d = q.len() as u32;
    let q = prepare(metric, d, q, None).unwrap();
    let mut all: Vec<(Vec<u8>, f64)> = recs
        .iter()
        .filter(|r| eligible(&r.0))
        .map(|r| {
            let v = prepare(metric, d, &r.1, None).unwrap();
            (r.0.clone(), canonical::score(metric, &q, &v))
        })
        .collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

fn hits(r: &SearchResult) -> Vec<(Vec<u8>, f64)> {
    r.hits.iter().map(|h| (h.key.clone(), h.score)).collect()
}

fn config(dims: u32, metric: Metric) -> ProximityConfig {
    let mut c = ProximityConfig::new(dims);
    c.metric = metric;
    // Several levels and overflow pages even on small inputs.
    c.log_chunk_size = 2;
    c.min_page_bytes = 256;
    c.target_page_bytes = 1024;
    c.max_page_bytes = 8192;
    c.inline_threshold_bytes = 4096;
    c
}

#[test]
fn exact_equals_brute_force_for_every_metric_with_ties_and_filters() {
    let s = seed();
    let mut rng = Rng::new(s);
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        for variant in 0..3 {
            let dims = 8u32;
            // A grid vector may be zero, which cosine refuses (a typed
            // build error, section 11.1); keep the preparable ones.
            let recs: Vec<Rec> = clustered(&mut rng, 400, dims as usize, 6, true)
                .into_iter()
                .filter(|r| prepare(metric, dims, &r.1, None).is_ok())
                .collect();
            let store = MemStore::new();
            let mut cfg = config(dims, metric);
            match variant {
                1 => cfg.sq8_group_size = Some(3),
                2 => cfg.inline_threshold_bytes = 16, // external PRXV vectors
                _ => {}
            }
            let map = ProximityMap::build(&store, &cfg, recs.clone()).unwrap();
            let searcher = map.searcher().unwrap();
            for t in 0..10 {
                let q: Vec<f32> = if t % 3 == 0 {
                    // A stored vector: guaranteed ties for duplicates.
                    recs[(rng.next() % recs.len() as u64) as usize].1.clone()
                } else {
                    (0..dims)
                        .map(|_| (rng.unit() * 12.0).round() / 4.0 + 0.25)
                        .collect()
                };
                let k = [1usize, 10, 37, 500][t % 4];
                let lo = key(rng.next() % 1200);
                let hi = key(rng.next() % 1200);
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                let set: Vec<Vec<u8>> = {
                    let mut v: Vec<Vec<u8>> = recs
                        .iter()
                        .filter(|_| rng.next().is_multiple_of(7))
                        .map(|r| r.0.clone())
                        .collect();
                    v.push(b"absent".to_vec());
                    v.sort();
                    v.dedup();
                    v
                };
                let tiny: Vec<Vec<u8>> = set.iter().take(5).cloned().collect();
                let cases: Vec<(Option<Filter>, Eligible)> = vec![
                    (None, Box::new(|_| true)),
                    (
                        Some(Filter::Range {
                            start: lo.clone(),
                            end: Some(hi.clone()),
                        }),
                        Box::new(|k| k >= lo.as_slice() && k < hi.as_slice()),
                    ),
                    (
                        Some(Filter::Prefix(vec![0, 0, 0, 0, 0, 0, 1])),
                        Box::new(|k| k.starts_with(&[0, 0, 0, 0, 0, 0, 1])),
                    ),
                    (
                        Some(Filter::Keys(set.clone().into())),
                        Box::new(|k| set.binary_search_by(|x| x.as_slice().cmp(k)).is_ok()),
                    ),
                    (
                        Some(Filter::Keys(tiny.clone().into())),
                        Box::new(|k| tiny.iter().any(|x| x == k)),
                    ),
                ];
                for (filter, eligible) in &cases {
                    let want = brute(&recs, metric, &q, k, eligible);
                    let mut req = SearchRequest::new(k).mode(Mode::Exact);
                    req.filter = filter.clone().map(std::borrow::Cow::Owned);
                    let got = searcher.search(&q, &req).unwrap();
                    assert_eq!(
                        hits(&got),
                        want,
                        "seed {s} metric {metric:?} variant {variant} k {k} filter {filter:?}"
                    );
                    assert_eq!(got.completion, Completion::Exact);
                    for preset in [Preset::Fast, Preset::Balanced, Preset::HighRecall] {
                        req.mode = Mode::Adaptive(preset);
                        let got = searcher.search(&q, &req).unwrap();
                        assert_eq!(
                            got.hits.len(),
                            want.len(),
                            "seed {s}: {preset:?} under-filled with filter {filter:?}"
                        );
                        assert!(got
                            .hits
                            .windows(2)
                            .all(|w| (w[0].score, &w[0].key) < (w[1].score, &w[1].key)));
                    }
                }
            }
        }
    }
}

/// Exact L2 screens records with one uniform 8-bit scale and a residual
/// bound per record (docs/search.md, "Exact L2"). Data chosen to stress
/// that bound: one huge record sets the scale so small vectors quantize to
/// all-zero codes, subnormal and tiny components, exact duplicates and
/// grid ties, and queries far outside the records' range (clamped codes).
/// Exact search must still equal brute force, ties included; on benign
/// clustered data the bound must actually prune.
#[test]
fn exact_l2_bound_holds_on_adversarial_data() {
    let s = seed();
    let mut rng = Rng::new(s ^ 0xB0B);
    let dims = 12usize;
    let mut recs = clustered(&mut rng, 500, dims, 5, true);
    let mut next_key = 10_000u64;
    let mut push = |recs: &mut Vec<Rec>, v: Vec<f32>| {
        next_key += 1;
        recs.push((key(next_key), v, Vec::new()));
    };
    push(&mut recs, vec![3.0e15; dims]);
    push(
        &mut recs,
        (0..dims)
            .map(|i| if i % 2 == 0 { -2.0e15 } else { 1.0 })
            .collect(),
    );
    for _ in 0..40 {
        let tiny: Vec<f32> = (0..dims).map(|_| rng.unit() * 1.0e-6).collect();
        push(&mut recs, tiny.clone());
        push(&mut recs, tiny); // exact duplicate: a tie under another key
        let sub: Vec<f32> = (0..dims)
            .map(|i| {
                f32::from_bits(1 + (rng.next() % 1000) as u32) * if i % 3 == 0 { -1.0 } else { 1.0 }
            })
            .collect();
        push(&mut recs, sub);
    }
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &config(dims as u32, Metric::L2), recs.clone()).unwrap();
    // The plain arena, and the rotated split arena at several widths.
    let searchers: Vec<_> = [
        ExactLayout::Off,
        ExactLayout::Split(1),
        ExactLayout::Split(dims / 2),
        ExactLayout::Split(dims),
        ExactLayout::Local(1),
        ExactLayout::Local(dims / 2),
        ExactLayout::Local(dims),
    ]
    .into_iter()
    .map(|r| map.searcher().unwrap().exact_layout(r))
    .collect();
    for t in 0..24 {
        let q: Vec<f32> = match t % 4 {
            0 => recs[(rng.next() % recs.len() as u64) as usize].1.clone(),
            1 => (0..dims).map(|_| rng.unit() * 1.0e-6).collect(),
            2 => (0..dims).map(|_| rng.unit() * 1.0e17).collect(),
            _ => (0..dims)
                .map(|_| (rng.unit() * 12.0).round() / 4.0)
                .collect(),
        };
        for k in [1usize, 10, 90] {
            let want = brute(&recs, Metric::L2, &q, k, |_| true);
            for (i, searcher) in searchers.iter().enumerate() {
                let got = searcher
                    .search(&q, &SearchRequest::new(k).mode(Mode::Exact))
                    .unwrap();
                assert_eq!(hits(&got), want, "seed {s} query {t} k {k} searcher {i}");
                assert_eq!(got.completion, Completion::Exact);
            }
        }
    }
    assert_eq!(searchers[0].rotated_split(), None);
    assert_eq!(searchers[2].rotated_split(), Some(dims / 2));

    // Benign data: the screen leaves few records to the canonical rescore.
    let recs = clustered(&mut rng, 3000, 16, 30, false);
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &ProximityConfig::new(16), recs.clone()).unwrap();
    let searcher = map.searcher().unwrap();
    let mut rescored = 0;
    for _ in 0..10 {
        let base = &recs[(rng.next() % recs.len() as u64) as usize].1;
        let q: Vec<f32> = base.iter().map(|&x| x + rng.gauss() * 0.1).collect();
        let got = searcher
            .search(&q, &SearchRequest::new(10).mode(Mode::Exact))
            .unwrap();
        assert_eq!(
            hits(&got),
            brute(&recs, Metric::L2, &q, 10, |_| true),
            "seed {s}"
        );
        rescored += got.stats.rescored;
    }
    assert!(
        rescored < 10 * 3000 / 5,
        "seed {s}: the bound screened too little ({rescored} rescored over 10 queries)"
    );
}

/// Exact L2 over the rotated split arena (docs/search.md, "Exact L2: the
/// rotated split arena") on data that degenerates the rotation: identical
/// vectors, rank-1 data, zero vectors only, one dimension, odd dimensions
/// with zero components, and screen widths from 1 to beyond `d`. Results
/// must equal brute force, ties included; on benign data the split screen
/// must prune.
#[test]
fn exact_l2_rotated_split_equals_brute_force_on_degenerate_data() {
    let s = seed();
    let mut rng = Rng::new(s ^ 0x707);
    let mut sets: Vec<(&str, Vec<Rec>)> = Vec::new();
    let n = 300u64;
    let same: Vec<f32> = (0..9).map(|_| rng.unit() * 2.0).collect();
    sets.push((
        "all equal",
        (0..n).map(|i| (key(i), same.clone(), Vec::new())).collect(),
    ));
    let dir: Vec<f32> = (0..10).map(|_| rng.unit()).collect();
    sets.push((
        "rank 1",
        (0..n)
            .map(|i| {
                let t = (rng.unit() * 8.0).round() / 2.0;
                (key(i), dir.iter().map(|&x| x * t).collect(), Vec::new())
            })
            .collect(),
    ));
    sets.push((
        "zeros",
        (0..n).map(|i| (key(i), vec![0.0; 5], Vec::new())).collect(),
    ));
    sets.push((
        "d = 1",
        (0..n)
            .map(|i| (key(i), vec![(rng.unit() * 6.0).round()], Vec::new()))
            .collect(),
    ));
    sets.push((
        "d = 13 with zeros",
        (0..n)
            .map(|i| {
                let v = (0..13)
                    .map(|j| {
                        if j % 4 == 1 || i % 7 == 0 {
                            0.0
                        } else {
                            (rng.unit() * 8.0).round() / 4.0
                        }
                    })
                    .collect();
                (key(i), v, Vec::new())
            })
            .collect(),
    ));
    // Wider than the local frames' first stage (32 axes), so `m = dims`
    // runs the second stage: rank 2 plus sparse quantized noise (ties).
    let (u, w): (Vec<f32>, Vec<f32>) = (
        (0..40).map(|_| rng.unit()).collect(),
        (0..40).map(|_| rng.unit()).collect(),
    );
    sets.push((
        "d = 40 rank 2 with noise",
        (0..n)
            .map(|i| {
                let (a, b) = ((rng.unit() * 8.0).round(), (rng.unit() * 4.0).round());
                let v = u
                    .iter()
                    .zip(&w)
                    .enumerate()
                    .map(|(j, (&x, &y))| {
                        let noise = if (i as usize + j).is_multiple_of(5) {
                            0.25
                        } else {
                            0.0
                        };
                        a * x + b * y + noise
                    })
                    .collect();
                (key(i), v, Vec::new())
            })
            .collect(),
    ));
    for (name, recs) in &sets {
        let dims = recs[0].1.len();
        let store = MemStore::new();
        let map =
            ProximityMap::build(&store, &config(dims as u32, Metric::L2), recs.clone()).unwrap();
        let layouts = [1, dims / 2, dims, dims + 5]
            .into_iter()
            .flat_map(|m| [ExactLayout::Split(m), ExactLayout::Local(m)]);
        for layout in layouts {
            let searcher = map.searcher().unwrap().exact_layout(layout);
            for t in 0..8 {
                let q: Vec<f32> = match t % 4 {
                    0 => recs[(rng.next() % n) as usize].1.clone(),
                    1 => vec![0.0; dims],
                    2 => (0..dims).map(|_| rng.unit() * 1.0e12).collect(),
                    _ => (0..dims)
                        .map(|_| (rng.unit() * 8.0).round() / 4.0)
                        .collect(),
                };
                for k in [1usize, 7, 40] {
                    let got = searcher
                        .search(&q, &SearchRequest::new(k).mode(Mode::Exact))
                        .unwrap();
                    assert_eq!(
                        hits(&got),
                        brute(recs, Metric::L2, &q, k, |_| true),
                        "seed {s} {name} {layout:?} query {t} k {k}"
                    );
                }
            }
            match layout {
                ExactLayout::Split(m) => {
                    assert_eq!(searcher.rotated_split(), Some(m.clamp(1, dims)), "{name}")
                }
                ExactLayout::Local(m) => {
                    assert_eq!(
                        searcher.local_frames(),
                        Some((1, m.clamp(1, dims))),
                        "{name}"
                    )
                }
                ExactLayout::Off | ExactLayout::Auto => unreachable!(),
            }
        }
    }

    // Benign data: the split screen leaves few records to the rescore, and
    // a filter still fills min(k, eligible).
    let recs = clustered(&mut rng, 3000, 32, 30, false);
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &ProximityConfig::new(32), recs.clone()).unwrap();
    let searcher = map.searcher().unwrap().exact_layout(ExactLayout::Split(16));
    let mut rescored = 0;
    for t in 0..10 {
        let base = &recs[(rng.next() % recs.len() as u64) as usize].1;
        let q: Vec<f32> = base.iter().map(|&x| x + rng.gauss() * 0.1).collect();
        let mut req = SearchRequest::new(10).mode(Mode::Exact);
        if t % 2 == 1 {
            req = req.filter(Filter::Range {
                start: key(0),
                end: Some(key(600)),
            });
        }
        let got = searcher.search(&q, &req).unwrap();
        let want = if t % 2 == 1 {
            brute(&recs, Metric::L2, &q, 10, |k| k < key(600).as_slice())
        } else {
            brute(&recs, Metric::L2, &q, 10, |_| true)
        };
        assert_eq!(hits(&got), want, "seed {s} query {t}");
        rescored += got.stats.rescored;
    }
    assert!(
        rescored < 10 * 3000 / 5,
        "seed {s}: the split screen pruned too little ({rescored} rescored over 10 queries)"
    );
}

/// Exact L2 over local frames (docs/search.md, "Exact L2: local frames")
/// on a mixture of low-rank clusters, the data they are made for: several
/// frames, results equal to brute force (ties included, filters fall back
/// to the plain arena), no more records rescored than the plain arena and
/// whole frames skipped.
#[test]
fn exact_l2_local_frames_equal_brute_force_and_prune() {
    local_frames_case(24, 6, 3, 4, true);
}

/// The same with frames wider than the first stage's 32 axes, so every
/// query also runs the second stage (the rest of the codes per survivor).
#[test]
fn exact_l2_local_frames_two_stages_equal_brute_force() {
    local_frames_case(48, 4, 30, 40, false);
}

fn local_frames_case(dims: usize, clusters: usize, rank: usize, m: usize, prune: bool) {
    let s = seed();
    let mut rng = Rng::new(s ^ 0x10CA1 ^ dims as u64);
    let n = 5000u64;
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| (0..dims).map(|_| rng.gauss() * 3.0).collect())
        .collect();
    let bases: Vec<Vec<Vec<f32>>> = (0..clusters)
        .map(|_| {
            (0..rank)
                .map(|_| (0..dims).map(|_| rng.gauss()).collect())
                .collect()
        })
        .collect();
    let recs: Vec<Rec> = (0..n)
        .map(|i| {
            let c = (i % clusters as u64) as usize;
            let mut v = centres[c].clone();
            for b in &bases[c] {
                let z = rng.gauss();
                for (x, &u) in v.iter_mut().zip(b) {
                    *x += z * u;
                }
            }
            for x in v.iter_mut() {
                *x += rng.gauss() * 0.01;
            }
            // Quantized components make exact ties likely.
            let v = v.iter().map(|&x| (x * 64.0).round() / 64.0).collect();
            (key(i), v, Vec::new())
        })
        .collect();
    let store = MemStore::new();
    let map =
        ProximityMap::build(&store, &ProximityConfig::new(dims as u32), recs.clone()).unwrap();
    let searcher = map.searcher().unwrap().exact_layout(ExactLayout::Local(m));
    let (mut rescored, mut plain_rescored, mut screened) = (0, 0, 0);
    for t in 0..12 {
        let q: Vec<f32> = match t % 3 {
            0 => recs[(rng.next() % n) as usize].1.clone(),
            1 => {
                let base = &recs[(rng.next() % n) as usize].1;
                base.iter().map(|&x| x + rng.gauss() * 0.05).collect()
            }
            _ => (0..dims).map(|_| rng.gauss() * 4.0).collect(),
        };
        for k in [1usize, 10, 60] {
            let got = searcher
                .search(&q, &SearchRequest::new(k).mode(Mode::Exact))
                .unwrap();
            assert_eq!(
                hits(&got),
                brute(&recs, Metric::L2, &q, k, |_| true),
                "seed {s} query {t} k {k}"
            );
            if k == 10 && t % 3 != 2 {
                let plain = map
                    .searcher()
                    .unwrap()
                    .search(&q, &SearchRequest::new(k).mode(Mode::Exact))
                    .unwrap();
                rescored += got.stats.rescored;
                plain_rescored += plain.stats.rescored;
                screened += got.stats.distance_evals;
            }
        }
        let req = SearchRequest::new(10)
            .mode(Mode::Exact)
            .filter(Filter::Range {
                start: key(100),
                end: Some(key(900)),
            });
        let got = searcher.search(&q, &req).unwrap();
        let want = brute(&recs, Metric::L2, &q, 10, |k| {
            k >= key(100).as_slice() && k < key(900).as_slice()
        });
        assert_eq!(hits(&got), want, "seed {s} query {t} filtered");
    }
    let (frames, width) = searcher.local_frames().expect("local frames built");
    assert!(frames >= 3, "seed {s}: {frames} frames");
    assert_eq!(width, m);
    assert!(
        !prune || (rescored <= plain_rescored + 100 && screened < 8 * n * 9 / 10),
        "seed {s}: local frames pruned too little ({rescored} rescored, plain arena \
         {plain_rescored}, {screened} screened over 8 queries)"
    );
}

#[test]
fn high_recall_preset_reaches_095_on_clustered_data() {
    let s = seed();
    let mut rng = Rng::new(s ^ 0xABCD);
    let dims = 24u32;
    let recs = clustered(&mut rng, 6000, dims as usize, 40, false);
    let store = MemStore::new();
    // The default configuration, as users build maps.
    let map = ProximityMap::build(&store, &ProximityConfig::new(dims), recs.clone()).unwrap();
    let searcher = map.searcher().unwrap();
    let queries: Vec<Vec<f32>> = (0..60)
        .map(|_| {
            let base = &recs[(rng.next() % recs.len() as u64) as usize].1;
            base.iter().map(|&x| x + rng.gauss() * 0.3).collect()
        })
        .collect();
    let mut recall = std::collections::HashMap::new();
    for preset in [Preset::Fast, Preset::Balanced, Preset::HighRecall] {
        let mut found = 0usize;
        for q in &queries {
            let want = brute(&recs, Metric::L2, q, 10, |_| true);
            let got = searcher
                .search(q, &SearchRequest::new(10).mode(Mode::Adaptive(preset)))
                .unwrap();
            found += got
                .hits
                .iter()
                .filter(|h| want.iter().any(|w| w.0 == h.key))
                .count();
        }
        recall.insert(preset, found as f64 / (10 * queries.len()) as f64);
    }
    eprintln!("recall@10 by preset: {recall:?}");
    let r = recall[&Preset::HighRecall];
    assert!(
        r >= 0.95,
        "seed {s}: recall@10 at HighRecall = {r} ({recall:?})"
    );
}

#[test]
fn budgets_cap_work_and_report_it() {
    let s = seed();
    let mut rng = Rng::new(s ^ 7);
    let recs = clustered(&mut rng, 800, 8, 5, false);
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &config(8, Metric::L2), recs).unwrap();
    let searcher = map.searcher().unwrap();
    let q: Vec<f32> = (0..8).map(|_| rng.unit()).collect();
    for budget in [
        Budget {
            max_nodes: Some(3),
            ..Budget::default()
        },
        Budget {
            max_distance_evals: Some(40),
            ..Budget::default()
        },
        Budget {
            max_frontier: Some(1),
            ..Budget::default()
        },
    ] {
        let r = searcher
            .search(&q, &SearchRequest::new(10).mode(Mode::Budgeted(budget)))
            .unwrap();
        assert_eq!(
            r.completion,
            Completion::BudgetExhausted,
            "seed {s} {budget:?}"
        );
        if let Some(m) = budget.max_nodes {
            assert!(r.stats.nodes_visited <= m);
        }
        if let Some(m) = budget.max_distance_evals {
            assert!(r.stats.distance_evals <= m.max(r.stats.distance_evals.min(m)));
        }
    }
    let full = searcher
        .search(
            &q,
            &SearchRequest::new(10).mode(Mode::Budgeted(Budget::default())),
        )
        .unwrap();
    assert_eq!(full.completion, Completion::Exact);
    assert_eq!(
        full,
        searcher
            .search(&q, &SearchRequest::new(10).mode(Mode::Exact))
            .unwrap()
    );
}

/// Every traversal decision uses bit-exact integer kernels, so every ISA
/// returns identical results in every mode; batch equals sequential.
#[test]
fn results_identical_across_isas_and_batch_equals_sequential() {
    let s = seed();
    let mut rng = Rng::new(s ^ 99);
    let dims = 16;
    let recs = clustered(&mut rng, 1500, dims, 12, false);
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &config(dims as u32, Metric::Cosine), recs).unwrap();
    let searcher = map.searcher().unwrap();
    let queries: Vec<f32> = (0..dims * 40).map(|_| rng.unit()).collect();
    let modes = [
        Mode::Exact,
        Mode::Adaptive(Preset::Fast),
        Mode::Adaptive(Preset::HighRecall),
        Mode::Budgeted(Budget {
            max_nodes: Some(5),
            ..Budget::default()
        }),
    ];
    let original = prox_kernels::isa();
    let mut per_isa = Vec::new();
    for isa in prox_kernels::available_isas() {
        prox_kernels::set_isa(isa).unwrap();
        let mut ctx = SearchContext::new();
        let mut out = Vec::new();
        for mode in modes {
            let req = SearchRequest::new(10).mode(mode).with_values();
            let batch = searcher.search_batch(&queries, &req).unwrap();
            for (q, b) in queries.chunks(dims).zip(&batch) {
                assert_eq!(
                    &searcher.search_with(&mut ctx, q, &req).unwrap(),
                    b,
                    "seed {s}"
                );
            }
            out.push(batch);
        }
        per_isa.push((isa, out));
    }
    prox_kernels::set_isa(original).unwrap();
    for (isa, out) in &per_isa[1..] {
        assert!(
            out == &per_isa[0].1,
            "seed {s}: {isa:?} differs from {:?}",
            per_isa[0].0
        );
    }
}

#[test]
fn probes_bound_the_leaves_scanned_and_never_under_fill() {
    let s = seed();
    let mut rng = Rng::new(s ^ 0x5EED);
    let dims = 12;
    let recs = clustered(&mut rng, 2000, dims, 16, false);
    let store = MemStore::new();
    // Small chunks and pages: hundreds of leaves, some split into overflow pages.
    let map = ProximityMap::build(&store, &config(dims as u32, Metric::L2), recs.clone()).unwrap();
    let searcher = map.searcher().unwrap();
    let mut found = 0;
    let queries = 20;
    for _ in 0..queries {
        let q: Vec<f32> = (0..dims).map(|_| rng.unit() * 3.0).collect();
        let req = |p: usize| {
            SearchRequest::new(10)
                .mode(Mode::Adaptive(Preset::HighRecall))
                .probes(p)
        };
        let one = searcher.search(&q, &req(1)).unwrap();
        let few = searcher.search(&q, &req(8)).unwrap();
        let all = searcher.search(&q, &req(usize::MAX)).unwrap();
        assert_eq!(one.completion, Completion::Approximate);
        // Every probe adds at least one leaf page; all leaves cover every record.
        assert!(
            one.stats.nodes_visited < few.stats.nodes_visited,
            "seed {s}"
        );
        assert!(
            few.stats.nodes_visited < all.stats.nodes_visited,
            "seed {s}"
        );
        assert!(all.stats.distance_evals > recs.len() as u64, "seed {s}");
        assert!(
            one.stats.distance_evals < all.stats.distance_evals,
            "seed {s}"
        );
        for r in [&one, &few, &all] {
            assert_eq!(r.hits.len(), 10, "seed {s}");
        }
        // Scanning everything, the canonical rerank of the best 80 codes
        // recovers the brute-force neighbours.
        let want = brute(&recs, Metric::L2, &q, 10, |_| true);
        found += all
            .hits
            .iter()
            .filter(|h| want.iter().any(|w| w.0 == h.key))
            .count();
        // A selective filter with a single probe still fills k: further
        // leaves are scanned in order until k eligible records were seen.
        let lo = key(5940);
        let f = Filter::Range {
            start: lo.clone(),
            end: None,
        };
        let eligible = recs.iter().filter(|r| r.0 >= lo).count();
        assert!(eligible >= 10, "seed {s}");
        let mut freq = req(1);
        freq.filter = Some(std::borrow::Cow::Owned(f));
        let got = searcher.search(&q, &freq).unwrap();
        assert_eq!(got.hits.len(), 10, "seed {s}: filtered probes under-filled");
        assert!(got.hits.iter().all(|h| h.key >= lo), "seed {s}");
    }
    let recall = found as f64 / (10 * queries) as f64;
    assert!(
        recall >= 0.99,
        "seed {s}: recall {recall} scanning every leaf"
    );

    // The probe order comes from integer codes: identical on every ISA.
    let qs: Vec<f32> = (0..dims * 10).map(|_| rng.unit() * 3.0).collect();
    let req = SearchRequest::new(5)
        .mode(Mode::Adaptive(Preset::Fast))
        .probes(3);
    let original = prox_kernels::isa();
    let mut per_isa = Vec::new();
    for isa in prox_kernels::available_isas() {
        prox_kernels::set_isa(isa).unwrap();
        per_isa.push((isa, searcher.search_batch(&qs, &req).unwrap()));
    }
    prox_kernels::set_isa(original).unwrap();
    for (isa, out) in &per_isa[1..] {
        assert!(out == &per_isa[0].1, "seed {s}: {isa:?} differs");
    }
}

#[test]
fn empty_map_and_bad_requests() {
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &ProximityConfig::new(3), Vec::new()).unwrap();
    let r = map
        .search(&[1.0, 2.0, 3.0], &SearchRequest::new(5).mode(Mode::Exact))
        .unwrap();
    assert!(r.hits.is_empty());
    assert_eq!(r.completion, Completion::Exact);
    assert!(map.search(&[1.0, 2.0], &SearchRequest::new(5)).is_err());
    assert!(map
        .search(&[1.0, f32::NAN, 2.0], &SearchRequest::new(5))
        .is_err());
    assert!(map
        .search(&[1.0, 2.0, 3.0], &SearchRequest::new(0))
        .is_err());
    let unsorted = Filter::Keys(vec![b"b".to_vec(), b"a".to_vec()].into());
    assert!(map
        .search(&[1.0, 2.0, 3.0], &SearchRequest::new(1).filter(unsorted))
        .is_err());
}
