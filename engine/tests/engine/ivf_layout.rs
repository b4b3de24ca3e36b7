//! The persisted fast-scan lists of a 4-bit PQ sidecar (`PRLY` kind 3,
//! `prox.layout.ivf`): a build with `layouts` names them; an index opened
//! from them has its fast-scan index without training it and answers the
//! PQ path bit for bit like one that trained it; the bytes are a function
//! of the records; a foreign, mismatched or damaged layout is a typed
//! error; writes carry the lists and persist them for the new descriptor.
//! Seeded (`PROX_SEED`).

use prox_engine::accel::{Path, PqParams};
use prox_engine::index::{
    self, Batch, Build, DropReason, Index, Options, PathChoice, Request, Scratch, SidecarWrite,
    WriteOptions,
};
use prox_engine::proximity::format::{LayoutKind, LayoutManifest};
use prox_engine::proximity::{self, Layouts};
use prox_engine::{BlockStore, Cid, Error, MemStore};
use prox_testkit::SplitMix64;
use std::sync::Arc;

const DIMS: usize = 12;

fn seed() -> u64 {
    prox_testkit::seed(0x1f5_1a7)
}

type Rec = (Vec<u8>, Vec<f32>, Vec<u8>);

/// `n` clustered records (keys 8-byte big-endian) from `seed`.
fn records(seed: u64, n: u64) -> Vec<Rec> {
    crate::support::clustered(seed, n, DIMS, 12)
}

/// Builds `recs` with a PQ sidecar of `centroids` per subspace and the
/// layouts, published as `name`.
fn build(store: &Arc<dyn BlockStore>, name: &str, recs: Vec<Rec>, centroids: u16) -> index::Built {
    let mut b = Build::new(DIMS as u32);
    b.pq = Some(PqParams {
        subquantizers: 6,
        centroids,
        iterations: 4,
        ..PqParams::default()
    });
    b.layouts = true;
    index::build(&**store, Some(name), &b, recs).unwrap()
}

fn queries(seed: u64, n: usize) -> Vec<Vec<f32>> {
    let mut rng = SplitMix64::new(seed ^ 0xF00D);
    (0..n)
        .map(|_| (0..DIMS).map(|_| rng.gauss() * 5.0).collect())
        .collect()
}

fn no_warm() -> Options {
    Options {
        warm: false,
        ..Options::default()
    }
}

/// Every query's PQ-path hits on `ix`.
fn pq_hits(ix: &Index, qs: &[Vec<f32>]) -> Vec<Vec<(Vec<u8>, f64)>> {
    let mut sc = Scratch::default();
    let req = Request::new(10).path(PathChoice::Pq);
    qs.iter()
        .map(|q| {
            let r = ix.search(&mut sc, q, &req).unwrap();
            assert_eq!(r.path, Path::Pq);
            r.hits.into_iter().map(|h| (h.key, h.score)).collect()
        })
        .collect()
}

#[test]
fn persisted_lists_answer_bit_for_bit_like_trained_ones() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let built = build(&store, "m", records(s, 4000), 16);
    let ivf = built
        .layouts
        .ivf
        .expect("a 4-bit sidecar has fast-scan lists");
    assert!(built.layouts.arena.is_some() && built.layouts.adaptive.is_some());
    assert_eq!(
        proximity::resolve_layouts(&*store, "m").unwrap(),
        built.layouts
    );
    let m = LayoutManifest::decode(&store.get(&ivf).unwrap().unwrap()).unwrap();
    assert_eq!(
        (m.kind, m.source, m.records),
        (LayoutKind::IvfLists, built.descriptor, 4000)
    );
    // The lists built from the stored sidecar (`prox accel build
    // --layout`) are the ones the build took from the trained sidecar.
    assert_eq!(
        prox_engine::accel::build_layouts(
            &*store,
            built.descriptor,
            built.sidecars.pq,
            Default::default()
        )
        .unwrap(),
        built.layouts
    );
    // Deterministic: the same records give the same layouts elsewhere.
    let other: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    assert_eq!(
        build(&other, "m", records(s, 4000), 16).layouts,
        built.layouts,
        "PROX_SEED={s}"
    );

    let with = Index::open(Arc::clone(&store), "m", &no_warm()).unwrap();
    let pq = with.accelerators().pq.as_ref().unwrap();
    assert!(pq.fast_scan_built(), "read at open, not trained later");
    let without = Index::load(
        Arc::clone(&store),
        built.descriptor,
        built.sidecars,
        &no_warm(),
    )
    .unwrap();
    assert!(!without
        .accelerators()
        .pq
        .as_ref()
        .unwrap()
        .fast_scan_built());
    let qs = queries(s, 30);
    let (a, b) = (pq_hits(&with, &qs), pq_hits(&without, &qs));
    assert!(a.iter().all(|h| h.len() == 10));
    assert_eq!(a, b, "PROX_SEED={s}");
    let (fa, fb) = (
        pq.fast_scan().unwrap(),
        without
            .accelerators()
            .pq
            .as_ref()
            .unwrap()
            .fast_scan()
            .unwrap(),
    );
    assert_eq!(fa.nlist(), fb.nlist());
    assert_eq!(fa.heap_bytes(), fb.heap_bytes());
}

#[test]
fn an_eight_bit_sidecar_has_no_lists_and_refuses_a_foreign_one() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let four = build(&store, "four", records(s, 2000), 16);
    let eight = build(&store, "eight", records(s, 2000), 256);
    assert!(eight.layouts.ivf.is_none() && eight.layouts.arena.is_some());
    // Same records, so the same descriptor: the 4-bit map's lists named
    // beside an 8-bit sidecar are refused, not used or ignored.
    assert_eq!(four.descriptor, eight.descriptor);
    let err = Index::load_with_layouts(
        Arc::clone(&store),
        eight.descriptor,
        eight.sidecars,
        &Layouts {
            ivf: four.layouts.ivf,
            ..Layouts::default()
        },
        &no_warm(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// The error of opening `built`'s map and sidecar with `m` stored as its
/// fast-scan lists.
fn with_lists(store: &Arc<dyn BlockStore>, built: &index::Built, m: &LayoutManifest) -> Error {
    let layouts = Layouts {
        ivf: Some(store.put(&m.encode().unwrap()).unwrap()),
        ..Layouts::default()
    };
    Index::load_with_layouts(
        Arc::clone(store),
        built.descriptor,
        built.sidecars,
        &layouts,
        &no_warm(),
    )
    .unwrap_err()
}

#[test]
fn a_foreign_mismatched_or_damaged_list_layout_is_a_typed_error() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let a = build(&store, "a", records(s, 2000), 16);
    let b = build(&store, "b", records(s ^ 1, 2000), 16);
    let ma = LayoutManifest::decode(&store.get(&a.layouts.ivf.unwrap()).unwrap().unwrap()).unwrap();
    // Another descriptor's lists.
    let err = Index::load_with_layouts(
        Arc::clone(&store),
        a.descriptor,
        a.sidecars,
        &b.layouts,
        &no_warm(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // Another kind under the ivf key.
    let arena =
        LayoutManifest::decode(&store.get(&a.layouts.arena.unwrap()).unwrap().unwrap()).unwrap();
    let err = with_lists(&store, &a, &arena);
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // Counts that disagree with the sidecar or the payload.
    for bad in [
        LayoutManifest {
            records: ma.records + 1,
            ..ma.clone()
        },
        LayoutManifest {
            params: vec![0],
            ..ma.clone()
        },
        LayoutManifest {
            params: vec![0x80, 0x80, 0x04],
            ..ma.clone()
        },
    ] {
        let err = with_lists(&store, &a, &bad);
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }
    // A payload whose lists point past nlist, or whose centroids are NaN:
    // rewritten chunks with valid framing.
    let payload = payload_of(&store, &ma);
    let nlist = ma.params[0] as usize;
    assert!(ma.params.len() == 1 && nlist > 1, "one-byte nlist");
    let lists_at = 4 * nlist * DIMS;
    let mut out_of_range = payload.clone();
    out_of_range[lists_at..lists_at + 4].copy_from_slice(&(nlist as u32).to_le_bytes());
    let mut nan = payload.clone();
    nan[..4].copy_from_slice(&f32::NAN.to_le_bytes());
    for p in [out_of_range, nan] {
        let err = with_lists(&store, &a, &with_payload(&store, &ma, &p));
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }
    // A missing chunk.
    let err = with_lists(
        &store,
        &a,
        &LayoutManifest {
            chunks: vec![Cid([9; 32]); ma.chunks.len()],
            ..ma.clone()
        },
    );
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
}

/// The payload bytes of `m` (its chunks after the `PRLC 02` header).
fn payload_of(store: &Arc<dyn BlockStore>, m: &LayoutManifest) -> Vec<u8> {
    let mut out = Vec::new();
    for c in &m.chunks {
        out.extend_from_slice(&store.get(c).unwrap().unwrap()[5..]);
    }
    out
}

/// `m` with its payload replaced by `payload` (same length).
fn with_payload(store: &Arc<dyn BlockStore>, m: &LayoutManifest, payload: &[u8]) -> LayoutManifest {
    let chunks = payload
        .chunks(proximity::format::LAYOUT_CHUNK)
        .map(|c| {
            let block = proximity::format::encode_chunk(c).unwrap();
            store.put(&block).unwrap()
        })
        .collect();
    LayoutManifest {
        chunks,
        ..m.clone()
    }
}

#[test]
fn writes_carry_the_lists_and_persist_them_for_the_new_descriptor() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let built = build(&store, "m", records(s, 3000), 16);
    let index = Index::open(Arc::clone(&store), "m", &no_warm()).unwrap();
    let wo = WriteOptions::default();
    let qs = queries(s, 20);

    // Unchanged descriptor: the same lists.
    let same = index.apply(&Batch::new(), &wo).unwrap();
    assert_eq!(same.report.ivf, SidecarWrite::Unchanged);
    assert_eq!(same.index.layouts(), built.layouts);

    // A structural write: the native layouts drop, the lists are carried
    // and persisted for the new descriptor; reopening from them answers
    // exactly as the written snapshot does.
    let mut rng = SplitMix64::new(s ^ 7);
    let mut batch = Batch::new();
    for i in 0..40u64 {
        let v: Vec<f32> = (0..DIMS).map(|_| rng.gauss() * 5.0).collect();
        batch.upsert((10_000 + i).to_be_bytes().to_vec(), v, b"n".to_vec());
    }
    for i in 0..25u64 {
        batch.delete((i * 7).to_be_bytes().to_vec());
    }
    let next = index.apply(&batch, &wo).unwrap();
    assert_eq!(
        next.report.layout,
        SidecarWrite::Dropped(DropReason::Derived)
    );
    assert!(matches!(
        next.report.ivf,
        SidecarWrite::Updated {
            inserted: 40,
            removed: 25,
            ..
        }
    ));
    let l2 = next.index.layouts();
    assert!(l2.arena.is_none() && l2.adaptive.is_none());
    let ivf2 = l2.ivf.expect("carried");
    assert_ne!(Some(ivf2), built.layouts.ivf);
    let m2 = LayoutManifest::decode(&store.get(&ivf2).unwrap().unwrap()).unwrap();
    assert_eq!((m2.source, m2.records), (next.index.descriptor(), 3015));
    let expect = pq_hits(&next.index, &qs);
    let d2 = next.index.commit("m", Some(built.descriptor)).unwrap();
    let reopened = Index::open(Arc::clone(&store), "m", &no_warm()).unwrap();
    assert_eq!(reopened.descriptor(), d2);
    assert_eq!(reopened.layouts().ivf, Some(ivf2));
    assert!(reopened
        .accelerators()
        .pq
        .as_ref()
        .unwrap()
        .fast_scan_built());
    assert_eq!(pq_hits(&reopened, &qs), expect, "PROX_SEED={s}");

    // Deleting every record drops the sidecar and its lists.
    let mut all = Batch::new();
    for (k, _, _) in records(s, 3000) {
        all.delete(k);
    }
    for i in 0..40u64 {
        all.delete((10_000 + i).to_be_bytes().to_vec());
    }
    let empty = reopened.apply(&all, &wo).unwrap();
    assert_eq!(empty.report.pq, SidecarWrite::Dropped(DropReason::Empty));
    assert_eq!(empty.report.ivf, SidecarWrite::Dropped(DropReason::Empty));
    assert!(empty.index.layouts().is_empty());
}
