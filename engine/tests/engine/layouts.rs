//! Persisted search layouts (`PRLY` + `PRLC`, docs/formats-proximity.md):
//! a map opened from its persisted scan arena answers exactly as one that
//! built it (same hits, same scores, bit for bit, every mode), the layout
//! bytes are a function of the descriptor, a layout of another map or one
//! that disagrees with the hierarchy is a typed error, and writes keep the
//! layout only while the descriptor is unchanged. Seeded (`PROX_SEED`).

use prox_engine::accel;
use prox_engine::index::{Batch, DropReason, Index, Options, SidecarWrite, WriteOptions};
use prox_engine::proximity::format::LayoutManifest;
use prox_engine::proximity::search::{ExactLayout, Mode, Preset, SearchRequest};
use prox_engine::proximity::{self, Layouts, ProximityConfig, ProximityMap, Sidecars};
use prox_engine::refs::{links, BlockKind};
use prox_engine::{BlockStore, Cid, Error, MemStore};
use prox_testkit::SplitMix64;
use std::sync::Arc;

const DIMS: usize = 12;

fn seed() -> u64 {
    prox_testkit::seed(0x1a_7005)
}

/// `n` clustered records (keys 8-byte big-endian) from `seed`.
fn records(seed: u64, n: u64) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    crate::support::clustered(seed, n, DIMS, 10)
}

/// Builds a map of `recs` into `store` with its layouts, publishes it as
/// `name` and returns `(descriptor, layouts)`.
fn publish(
    store: &Arc<dyn BlockStore>,
    name: &str,
    recs: Vec<(Vec<u8>, Vec<f32>, Vec<u8>)>,
) -> (Cid, Layouts) {
    publish_with(store, name, &ProximityConfig::new(DIMS as u32), recs)
}

/// [`publish`] with `cfg`.
fn publish_with(
    store: &Arc<dyn BlockStore>,
    name: &str,
    cfg: &ProximityConfig,
    recs: Vec<(Vec<u8>, Vec<f32>, Vec<u8>)>,
) -> (Cid, Layouts) {
    let map = ProximityMap::build(&**store, cfg, recs).unwrap();
    let layouts =
        accel::build_layouts(&**store, map.descriptor_cid(), None, ExactLayout::Off).unwrap();
    proximity::publish_with(
        &**store,
        name,
        &map,
        &Sidecars::default(),
        &layouts.to_metadata(),
    )
    .unwrap();
    (map.descriptor_cid(), layouts)
}

fn requests() -> Vec<SearchRequest<'static>> {
    vec![
        SearchRequest::new(10).mode(Mode::Exact),
        SearchRequest::new(7).mode(Mode::Adaptive(Preset::Fast)),
        SearchRequest::new(10).mode(Mode::Adaptive(Preset::HighRecall)),
        SearchRequest::new(5).probes(3),
    ]
}

#[test]
fn persisted_arena_answers_bit_for_bit_like_a_built_one() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (descriptor, layouts) = publish(&store, "m", records(s, 3000));
    assert!(
        layouts.arena.is_some() && layouts.adaptive.is_some(),
        "PROX_SEED={s}"
    );
    // Deterministic: the same records give the same layout CID elsewhere.
    let other: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    assert_eq!(
        publish(&other, "m", records(s, 3000)).1,
        layouts,
        "PROX_SEED={s}"
    );

    let opts = Options {
        warm: false,
        ..Options::default()
    };
    let with = Index::open(Arc::clone(&store), "m", &opts).unwrap();
    assert_eq!(with.layouts(), layouts);
    let without = Index::load(Arc::clone(&store), descriptor, Sidecars::default(), &opts).unwrap();
    assert!(without.layouts().arena.is_none());
    let mut rng = SplitMix64::new(s ^ 0xF00D);
    let mut compared = 0;
    for _ in 0..20 {
        let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss() * 5.0).collect();
        for req in requests() {
            let a = with.searcher().search(&q, &req).unwrap();
            let b = without.searcher().search(&q, &req).unwrap();
            assert!(!a.hits.is_empty());
            assert_eq!(a, b, "PROX_SEED={s} {req:?}");
            compared += 1;
        }
    }
    assert_eq!(compared, 80);
    assert_eq!(
        with.searcher().arena_bytes(),
        without.searcher().arena_bytes()
    );
}

/// Leaves split into small overflow pages under directories.
fn paged_config() -> ProximityConfig {
    let mut c = ProximityConfig::new(DIMS as u32);
    c.min_page_bytes = 64;
    c.target_page_bytes = 300;
    c.max_page_bytes = 2048;
    c.inline_threshold_bytes = 1024;
    c
}

#[test]
fn a_persisted_arena_decodes_only_the_pages_a_search_reaches() {
    let s = seed();
    for cfg in [ProximityConfig::new(DIMS as u32), paged_config()] {
        let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
        let (_, layouts) = publish_with(&store, "m", &cfg, records(s, 3000));
        assert!(layouts.arena.is_some(), "PROX_SEED={s}");
        let cold = Options {
            warm: false,
            ..Options::default()
        };
        let lazy = Index::open(Arc::clone(&store), "m", &cold).unwrap();
        assert_eq!(lazy.searcher().arena_pages(), None);
        lazy.prepare(false).unwrap();
        // The layouts are read, no leaf page is decoded yet.
        let (decoded, total) = lazy.searcher().arena_pages().unwrap();
        assert!(total > 1, "PROX_SEED={s}: {total} pages");
        assert_eq!(decoded, 0, "PROX_SEED={s}: {total} pages");
        let warm = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
        assert_eq!(warm.searcher().arena_pages(), Some((total, total)));
        let mut rng = SplitMix64::new(s ^ 0xA11);
        let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss() * 5.0).collect();
        let first = SearchRequest::new(5).mode(Mode::Adaptive(Preset::Fast));
        assert_eq!(
            lazy.searcher().search(&q, &first).unwrap(),
            warm.searcher().search(&q, &first).unwrap(),
            "PROX_SEED={s}"
        );
        let (after_one, _) = lazy.searcher().arena_pages().unwrap();
        assert!(after_one >= 1, "PROX_SEED={s}");
        if total >= 200 {
            assert!(
                after_one < total / 4,
                "PROX_SEED={s}: {after_one} of {total}"
            );
        }
        for _ in 0..10 {
            let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss() * 5.0).collect();
            for req in requests() {
                let a = lazy.searcher().search(&q, &req).unwrap();
                assert_eq!(
                    a,
                    warm.searcher().search(&q, &req).unwrap(),
                    "PROX_SEED={s} {req:?}"
                );
            }
        }
        // A warm-up decodes (and checks) every page.
        lazy.warm().unwrap();
        assert_eq!(lazy.searcher().arena_pages(), Some((total, total)));
    }
}

#[test]
fn layouts_are_reachable_from_the_root() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (descriptor, layouts) = publish(&store, "m", records(s, 1500));
    let arena = layouts.arena.unwrap();
    let (crmf, _) = proximity::resolve(&*store, "m").unwrap().unwrap();
    assert_eq!(crmf, descriptor);
    let root = store.root("m").unwrap().unwrap();
    let (crmf_cid, kind) = prox_engine::refs::root_links(&root).unwrap()[0];
    let bytes = store.get(&crmf_cid).unwrap().unwrap();
    assert!(links(kind, &bytes)
        .unwrap()
        .contains(&(arena, BlockKind::LayoutManifest)));
    let m = LayoutManifest::decode(&store.get(&arena).unwrap().unwrap()).unwrap();
    let l = links(
        BlockKind::LayoutManifest,
        &store.get(&arena).unwrap().unwrap(),
    )
    .unwrap();
    assert_eq!(l[0], (descriptor, BlockKind::Descriptor));
    assert_eq!(l.len(), 1 + m.chunks.len());
    for c in &m.chunks {
        let chunk = store.get(c).unwrap().unwrap();
        assert!(links(BlockKind::LayoutChunk, &chunk).unwrap().is_empty());
        assert!(chunk.len() <= (1 << 20) + 5);
    }
}

/// A copy of the layout `cid` relabelled as derived from `source`.
fn forge(store: &Arc<dyn BlockStore>, cid: Cid, source: Cid) -> Cid {
    let m = LayoutManifest::decode(&store.get(&cid).unwrap().unwrap()).unwrap();
    store
        .put(&LayoutManifest { source, ..m }.encode().unwrap())
        .unwrap()
}

/// The error of opening `a` with `m` stored as its arena layout.
fn with_arena(store: &Arc<dyn BlockStore>, a: Cid, m: LayoutManifest) -> Error {
    let layouts = Layouts {
        arena: Some(store.put(&m.encode().unwrap()).unwrap()),
        ..Layouts::default()
    };
    Index::load_with_layouts(
        Arc::clone(store),
        a,
        Sidecars::default(),
        &layouts,
        &Options::default(),
    )
    .unwrap_err()
}

#[test]
fn a_foreign_or_mismatched_layout_is_a_typed_error() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (a, la) = publish(&store, "a", records(s, 2000));
    let (b, lb) = publish(&store, "b", records(s ^ 1, 2000));
    let opts = Options::default();
    // Another descriptor's layout.
    let err = Index::load_with_layouts(Arc::clone(&store), a, Sidecars::default(), &lb, &opts)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // Unwarmed, the layout is read at the first native search: that
    // search fails the same way (never a silent rebuild).
    let cold = Options {
        warm: false,
        ..Options::default()
    };
    let lazy =
        Index::load_with_layouts(Arc::clone(&store), a, Sidecars::default(), &lb, &cold).unwrap();
    let err = lazy
        .searcher()
        .search(&[0.0; DIMS], &SearchRequest::new(3).mode(Mode::Exact))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // Publishing it under this map is refused too.
    let map = ProximityMap::load(&*store, a).unwrap();
    assert!(matches!(
        proximity::publish_with(&*store, "a", &map, &Sidecars::default(), &lb.to_metadata()),
        Err(Error::InvalidArgument(_))
    ));
    // B's payload relabelled as A's: every page differs from A's hierarchy.
    let mb = LayoutManifest::decode(&store.get(&lb.arena.unwrap()).unwrap().unwrap()).unwrap();
    let err = with_arena(
        &store,
        a,
        LayoutManifest {
            source: a,
            ..mb.clone()
        },
    );
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    // Counts that disagree with the payload.
    let ma = LayoutManifest::decode(&store.get(&la.arena.unwrap()).unwrap().unwrap()).unwrap();
    let err = with_arena(
        &store,
        a,
        LayoutManifest {
            records: ma.records + 1,
            ..ma.clone()
        },
    );
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    // The adaptive layout of B on A: its slots name A's arena records,
    // but its lists do not match A's groups.
    let err = Index::load_with_layouts(
        Arc::clone(&store),
        a,
        Sidecars::default(),
        &Layouts {
            adaptive: Some(forge(&store, lb.adaptive.unwrap(), a)),
            ..Layouts::default()
        },
        &opts,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    // A missing chunk.
    let err = with_arena(
        &store,
        a,
        LayoutManifest {
            chunks: vec![Cid([3; 32]); ma.chunks.len()],
            ..ma
        },
    );
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let _ = b;
}

/// Persisted local frames (`--exact-layout localM` at build): read at open
/// under the default [`ExactLayout::Auto`] (only by exact searches), exact
/// hits bit for bit those of frames built at open, the bytes a function of
/// the descriptor and width; another width builds its own; frames of
/// another map or with wrong counts are typed errors.
#[test]
fn persisted_local_frames_answer_exact_searches_like_built_ones() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let build = |store: &Arc<dyn BlockStore>, seed: u64, name: &str| {
        let map = ProximityMap::build(
            &**store,
            &ProximityConfig::new(DIMS as u32),
            records(seed, 3000),
        )
        .unwrap();
        let l = accel::build_layouts(&**store, map.descriptor_cid(), None, ExactLayout::Local(8))
            .unwrap();
        proximity::publish_with(&**store, name, &map, &Sidecars::default(), &l.to_metadata())
            .unwrap();
        (map.descriptor_cid(), l)
    };
    let (a, la) = build(&store, s, "a");
    assert!(la.frames.is_some(), "PROX_SEED={s}");
    let other: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    assert_eq!(build(&other, s, "a").1, la, "PROX_SEED={s}");

    let cold = Options {
        warm: false,
        ..Options::default()
    };
    let read = Index::open(Arc::clone(&store), "a", &cold).unwrap();
    // Non-exact preparation leaves the frames unread.
    read.prepare(false).unwrap();
    assert_eq!(read.searcher().local_frames(), None);
    let built = Index::load(
        Arc::clone(&store),
        a,
        Sidecars::default(),
        &Options {
            exact_layout: ExactLayout::Local(8),
            ..cold
        },
    )
    .unwrap();
    let plain = Index::load(
        Arc::clone(&store),
        a,
        Sidecars::default(),
        &Options {
            exact_layout: ExactLayout::Off,
            ..cold
        },
    )
    .unwrap();
    let mut rng = SplitMix64::new(s ^ 0xF4A3);
    for _ in 0..30 {
        let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss() * 5.0).collect();
        for k in [1, 10, 50] {
            let req = SearchRequest::new(k).mode(Mode::Exact);
            let x = read.searcher().search(&q, &req).unwrap();
            assert_eq!(
                x,
                built.searcher().search(&q, &req).unwrap(),
                "PROX_SEED={s}"
            );
            assert_eq!(x.hits, plain.searcher().search(&q, &req).unwrap().hits);
        }
    }
    let frames = read.searcher().local_frames().expect("frames read");
    assert_eq!(frames, built.searcher().local_frames().unwrap());
    assert_eq!(frames.1, 8);
    assert_eq!(plain.searcher().local_frames(), None);
    // Another width builds its own.
    let four = Index::open(
        Arc::clone(&store),
        "a",
        &Options {
            exact_layout: ExactLayout::Local(4),
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(four.searcher().local_frames().map(|f| f.1), Some(4));

    // B's frames relabelled as A's (same counts, other arena), wrong
    // counts, another descriptor: typed errors at the first exact search.
    let (_, lb) = build(&store, s ^ 1, "b");
    let exact_err = |frames: Cid| {
        let ix = Index::load_with_layouts(
            Arc::clone(&store),
            a,
            Sidecars::default(),
            &Layouts {
                frames: Some(frames),
                ..la
            },
            &cold,
        )
        .unwrap();
        ix.searcher()
            .search(&[0.0; DIMS], &SearchRequest::new(3).mode(Mode::Exact))
            .unwrap_err()
    };
    let err = exact_err(forge(&store, lb.frames.unwrap(), a));
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    let mf = LayoutManifest::decode(&store.get(&la.frames.unwrap()).unwrap().unwrap()).unwrap();
    for bad in [
        LayoutManifest {
            records: mf.records - 1,
            ..mf.clone()
        },
        LayoutManifest {
            payload_len: mf.payload_len - 1,
            ..mf.clone()
        },
    ] {
        let err = exact_err(store.put(&bad.encode().unwrap()).unwrap());
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }
    let err = exact_err(lb.frames.unwrap());
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// The rotated split arena persisted (`--exact-layout splitM` at build):
/// read under the default layout, exact hits bit for bit those of one
/// built at open; another width builds its own; one relabelled from
/// another map is a typed error.
#[test]
fn a_persisted_rotated_arena_answers_exact_searches_like_a_built_one() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let build = |seed: u64, name: &str| {
        let cfg = ProximityConfig::new(DIMS as u32);
        let map = ProximityMap::build(&*store, &cfg, records(seed, 2000)).unwrap();
        let d = map.descriptor_cid();
        let l = accel::build_layouts(&*store, d, None, ExactLayout::Split(6)).unwrap();
        proximity::publish_with(&*store, name, &map, &Sidecars::default(), &l.to_metadata())
            .unwrap();
        (d, l)
    };
    let (a, la) = build(s, "a");
    assert!(la.rotated.is_some() && la.frames.is_none(), "PROX_SEED={s}");
    let open = |exact_layout| {
        let opts = Options {
            exact_layout,
            warm: false,
            ..Options::default()
        };
        Index::open(Arc::clone(&store), "a", &opts).unwrap()
    };
    let (read, built, other) = (
        open(ExactLayout::Auto),
        open(ExactLayout::Split(6)),
        open(ExactLayout::Split(3)),
    );
    let plain = Index::load(
        Arc::clone(&store),
        a,
        Sidecars::default(),
        &Options {
            exact_layout: ExactLayout::Off,
            ..Options::default()
        },
    )
    .unwrap();
    let mut rng = SplitMix64::new(s ^ 0x5917);
    for _ in 0..30 {
        let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss() * 5.0).collect();
        let req = SearchRequest::new(10).mode(Mode::Exact);
        let x = read.searcher().search(&q, &req).unwrap();
        assert_eq!(
            x,
            built.searcher().search(&q, &req).unwrap(),
            "PROX_SEED={s}"
        );
        assert_eq!(x.hits, other.searcher().search(&q, &req).unwrap().hits);
        assert_eq!(x.hits, plain.searcher().search(&q, &req).unwrap().hits);
    }
    assert_eq!(read.searcher().rotated_split(), Some(6));
    assert_eq!(other.searcher().rotated_split(), Some(3));
    let (_, lb) = build(s ^ 1, "b");
    let m = LayoutManifest::decode(&store.get(&lb.rotated.unwrap()).unwrap().unwrap()).unwrap();
    let forged = store
        .put(&LayoutManifest { source: a, ..m }.encode().unwrap())
        .unwrap();
    let ix = Index::load_with_layouts(
        Arc::clone(&store),
        a,
        Sidecars::default(),
        &Layouts {
            rotated: Some(forged),
            ..la
        },
        &Options {
            warm: false,
            ..Options::default()
        },
    )
    .unwrap();
    let err = ix
        .searcher()
        .search(&[0.0; DIMS], &SearchRequest::new(3).mode(Mode::Exact))
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[test]
fn writes_keep_the_layout_only_while_the_descriptor_is_unchanged() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let (descriptor, layouts) = publish(&store, "m", records(s, 1500));
    let index = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
    let wo = WriteOptions::default();

    // An empty batch: same descriptor, same layout, republished.
    let same = index.apply(&Batch::new(), &wo).unwrap();
    assert_eq!(same.report.layout, SidecarWrite::Unchanged);
    assert_eq!(same.index.layouts(), layouts);
    same.index.commit("m", Some(descriptor)).unwrap();
    let reopened = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
    assert_eq!(reopened.layouts(), layouts);

    // A structural write: the layout is dropped, the new snapshot builds
    // its own arena and answers.
    let mut batch = Batch::new();
    batch.upsert(
        u64::MAX.to_be_bytes().to_vec(),
        vec![0.5; DIMS],
        b"new".to_vec(),
    );
    let next = reopened.apply(&batch, &wo).unwrap();
    assert_eq!(
        next.report.layout,
        SidecarWrite::Dropped(DropReason::Derived)
    );
    assert!(next.index.layouts().arena.is_none());
    let d2 = next.index.commit("m", Some(descriptor)).unwrap();
    let after = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
    assert_eq!(after.descriptor(), d2);
    assert!(after.layouts().arena.is_none(), "PROX_SEED={s}");
    let hit = after
        .searcher()
        .search(&[0.5; DIMS], &SearchRequest::new(1).mode(Mode::Exact))
        .unwrap();
    assert_eq!(hit.hits[0].key, u64::MAX.to_be_bytes().to_vec());
}
