//! Payload field indexes and field filters through `Index`: indexes built
//! with the map, persisted and reopened, maintained by writes (equal to a
//! fresh build), added and dropped; filters give exactly the eligible set
//! (exact mode equals brute force over it), never under-fill on any path
//! (native, HNSW, PQ), and unknown fields or type mismatches are typed
//! errors. Seeded (`PROX_SEED`; the seed is in every failure message).

use prox_engine::accel::{HnswParams, PqParams};
use prox_engine::index::{
    self, Batch, Build, Index, Options, PathChoice, QueryMode, Request, Scratch, WriteOptions,
};
use prox_engine::keys::Filter;
use prox_engine::secondary::{filter_from_json, FieldIndex};
use prox_engine::{BlockStore, Error, MemStore};
use prox_testkit::SplitMix64;
use serde_json::{json, Value};
use std::sync::Arc;

const DIMS: usize = 8;
const N: u64 = 600;
const LANGS: [&str; 4] = ["en", "fr", "de", "es"];

fn seed() -> u64 {
    prox_testkit::seed(0xf1_17e5)
}

fn payload(rng: &mut SplitMix64, i: u64) -> Vec<u8> {
    let lang = LANGS[rng.below(4) as usize];
    let year = 2000 + rng.below(25) as i64;
    let mut p = json!({"lang": lang, "year": year, "price": (i as f64) / 8.0});
    if i.is_multiple_of(10) {
        p["tag"] = json!(["spam", "x"]);
    }
    if i.is_multiple_of(7) {
        p["year"] = Value::Null;
    }
    if i.is_multiple_of(50) {
        return b"opaque bytes".to_vec();
    }
    serde_json::to_vec(&p).unwrap()
}

fn records(seed: u64) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    let mut rng = SplitMix64::new(seed);
    (0..N)
        .map(|i| {
            let v = (0..DIMS).map(|_| rng.gauss()).collect();
            (i.to_be_bytes().to_vec(), v, payload(&mut rng, i))
        })
        .collect()
}

fn fields() -> Vec<FieldIndex> {
    ["lang:keyword", "year:integer", "price:float", "tag:keyword"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect()
}

fn open(sidecars: bool, seed: u64) -> (Arc<dyn BlockStore>, Index) {
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut b = Build::new(DIMS as u32);
    b.indexes = fields();
    if sidecars {
        b.hnsw = Some(HnswParams::default());
        b.pq = Some(PqParams::default());
    }
    index::build(&*store, Some("m"), &b, records(seed)).unwrap();
    let ix = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
    (store, ix)
}

/// Reference evaluation straight from the payloads.
fn model(recs: &[(Vec<u8>, Vec<f32>, Vec<u8>)], pred: impl Fn(&Value) -> bool) -> Vec<Vec<u8>> {
    recs.iter()
        .filter(|r| {
            serde_json::from_slice::<Value>(&r.2)
                .ok()
                .filter(Value::is_object)
                .is_some_and(|p| pred(&p))
        })
        .map(|r| r.0.clone())
        .collect()
}

fn eligible(ix: &Index, f: &Value) -> Vec<Vec<u8>> {
    let req = Request::new(1).filter(filter_from_json(f).unwrap());
    match ix.resolve_filter(&req).unwrap().filter {
        Some(Filter::Keys(k)) => k.to_vec(),
        other => panic!("not resolved: {other:?}"),
    }
}

/// A reference predicate over one payload.
type Pred = Box<dyn Fn(&Value) -> bool>;

#[test]
fn filters_select_exactly_the_matching_records() {
    let s = seed();
    let (_, ix) = open(false, s);
    let recs = records(s);
    let cases: Vec<(Value, Pred)> = vec![
        (
            json!({"key": "lang", "match": {"value": "en"}}),
            Box::new(|p| p["lang"] == "en"),
        ),
        (
            json!({"key": "lang", "match": {"any": ["fr", "de"]}}),
            Box::new(|p| p["lang"] == "fr" || p["lang"] == "de"),
        ),
        (
            json!({"key": "year", "range": {"gte": 2010, "lt": 2015.5}}),
            Box::new(|p| {
                p["year"]
                    .as_i64()
                    .is_some_and(|y| (2010..=2015).contains(&y))
            }),
        ),
        (
            json!({"key": "price", "range": {"gt": 10.0, "lte": 20.25}}),
            Box::new(|p| p["price"].as_f64().is_some_and(|x| x > 10.0 && x <= 20.25)),
        ),
        (
            json!({"is_null": {"key": "year"}}),
            Box::new(|p| p["year"].is_null() && p.get("year").is_some()),
        ),
        (
            json!({"exists": {"key": "tag"}}),
            Box::new(|p| p.get("tag").is_some()),
        ),
        (
            json!({"must": [{"key": "lang", "match": {"value": "en"}},
                            {"key": "year", "range": {"gte": 2020}}],
                   "must_not": {"key": "tag", "match": {"value": "spam"}}}),
            Box::new(|p| {
                p["lang"] == "en"
                    && p["year"].as_i64().is_some_and(|y| y >= 2020)
                    && p.get("tag").is_none()
            }),
        ),
        (
            json!({"should": [{"key": "lang", "match": {"value": "es"}},
                              {"key": "year", "range": {"lt": 2002}}]}),
            Box::new(|p| p["lang"] == "es" || p["year"].as_i64().is_some_and(|y| y < 2002)),
        ),
    ];
    for (f, pred) in cases {
        let want = model(&recs, pred);
        assert_eq!(eligible(&ix, &f), want, "seed {s:#x}: filter {f}");
        // The same filter nested with a key range keeps only that range.
        let ranged =
            json!({"must": [f.clone(), {"range": [null, hex::encode(300u64.to_be_bytes())]}]});
        let lo: Vec<Vec<u8>> = want
            .iter()
            .filter(|k| k.as_slice() < &300u64.to_be_bytes()[..])
            .cloned()
            .collect();
        assert_eq!(eligible(&ix, &ranged), lo, "seed {s:#x}: {ranged}");
    }
    // must_not alone: everything else, opaque records included.
    let not_en = eligible(
        &ix,
        &json!({"must_not": {"key": "lang", "match": {"value": "en"}}}),
    );
    let en = eligible(&ix, &json!({"key": "lang", "match": {"value": "en"}}));
    assert_eq!(not_en.len() + en.len(), N as usize, "seed {s:#x}");
}

#[test]
fn unknown_fields_and_type_mismatches_are_errors() {
    let (_, ix) = open(false, seed());
    let mut scratch = Scratch::default();
    let q = vec![0.0; DIMS];
    for (f, want) in [
        (
            json!({"key": "colour", "match": {"value": "red"}}),
            "unknown",
        ),
        (json!({"key": "lang", "match": {"value": 3}}), "mismatch"),
        (json!({"key": "lang", "range": {"gt": 3}}), "mismatch"),
        (json!({"key": "year", "match": {"value": "x"}}), "mismatch"),
        (json!({"must_not": {"exists": {"key": "nope"}}}), "unknown"),
    ] {
        let req = Request::new(5).filter(filter_from_json(&f).unwrap());
        match (ix.search(&mut scratch, &q, &req), want) {
            (Err(Error::UnknownField { .. }), "unknown") => {}
            (Err(Error::FieldTypeMismatch { .. }), "mismatch") => {}
            (other, _) => panic!("{f}: expected {want}, got {other:?}"),
        }
    }
}

#[test]
fn filtered_search_never_under_fills_and_exact_is_brute_force() {
    let s = seed();
    let (_, ix) = open(true, s);
    let mut scratch = Scratch::default();
    let mut rng = SplitMix64::new(s ^ 0x9);
    let filters = [
        json!({"key": "lang", "match": {"value": "en"}}),
        json!({"key": "year", "range": {"gte": 2023}}),
        json!({"must": [{"key": "lang", "match": {"value": "de"}}, {"key": "year", "range": {"lt": 2003}}]}),
        json!({"key": "price", "range": {"lt": 1.0}}),
        json!({"key": "lang", "match": {"value": "none"}}),
    ];
    for f in &filters {
        let keys = eligible(&ix, f);
        for _ in 0..3 {
            let q: Vec<f32> = (0..DIMS).map(|_| rng.gauss()).collect();
            for k in [1, 10, 50] {
                let want = k.min(keys.len());
                let exact = Request::new(k).mode(QueryMode::Exact);
                let by_field = ix
                    .search(
                        &mut scratch,
                        &q,
                        &exact.clone().filter(filter_from_json(f).unwrap()),
                    )
                    .unwrap();
                let by_keys = ix
                    .search(
                        &mut scratch,
                        &q,
                        &exact.filter(Filter::Keys(keys.clone().into())),
                    )
                    .unwrap();
                let a: Vec<_> = by_field
                    .hits
                    .iter()
                    .map(|h| (h.key.clone(), h.score))
                    .collect();
                let b: Vec<_> = by_keys
                    .hits
                    .iter()
                    .map(|h| (h.key.clone(), h.score))
                    .collect();
                assert_eq!(a, b, "seed {s:#x}: exact {f} k {k}");
                assert_eq!(a.len(), want, "seed {s:#x}: exact {f} k {k}");
                for path in [
                    PathChoice::Auto,
                    PathChoice::Native,
                    PathChoice::Hnsw,
                    PathChoice::Pq,
                ] {
                    let req = Request::new(k)
                        .path(path)
                        .filter(filter_from_json(f).unwrap());
                    let r = ix.search(&mut scratch, &q, &req).unwrap();
                    assert_eq!(
                        r.hits.len(),
                        want,
                        "seed {s:#x}: {path} {f} k {k} under-filled"
                    );
                    assert!(
                        r.hits.iter().all(|h| keys.binary_search(&h.key).is_ok()),
                        "seed {s:#x}: {path} {f}: ineligible hit"
                    );
                }
            }
        }
    }
}

#[test]
fn writes_maintain_indexes_like_a_fresh_build() {
    let s = seed();
    let (store, ix) = open(false, s);
    let mut recs = records(s);
    let mut rng = SplitMix64::new(s ^ 0x77);
    let mut batch = Batch::new();
    for i in (0..N).step_by(9) {
        let v: Vec<f32> = (0..DIMS).map(|_| rng.gauss()).collect();
        let p = payload(&mut rng, i + 1).to_vec();
        batch.upsert(i.to_be_bytes().to_vec(), v.clone(), p.clone());
        recs[i as usize] = (i.to_be_bytes().to_vec(), v, p);
    }
    for i in (5..N).step_by(31).filter(|i| !i.is_multiple_of(9)) {
        batch.delete(i.to_be_bytes().to_vec());
    }
    recs.retain(|r| !batch.deletes.contains(&r.0));
    let applied = ix.apply(&batch, &WriteOptions::default()).unwrap();
    let expected = Some(ix.descriptor());
    applied.index.commit("m", expected).unwrap();
    let reopened = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();

    let fresh_store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    let mut b = Build::new(DIMS as u32);
    b.indexes = fields();
    index::build(&*fresh_store, Some("m"), &b, recs).unwrap();
    let fresh = Index::open(fresh_store, "m", &Options::default()).unwrap();
    assert_eq!(reopened.descriptor(), fresh.descriptor());
    assert_eq!(
        reopened.field_indexes().unwrap(),
        fresh.field_indexes().unwrap(),
        "seed {s:#x}: maintained indexes differ from a fresh build"
    );
    let dir = reopened.map().directory().unwrap();
    assert!(reopened
        .field_indexes()
        .unwrap()
        .verify(&dir)
        .unwrap()
        .is_empty());
}

#[test]
fn index_add_and_drop() {
    let s = seed();
    let store: Arc<dyn BlockStore> = Arc::new(MemStore::new());
    index::build(&*store, Some("m"), &Build::new(DIMS as u32), records(s)).unwrap();
    let mut ix = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
    assert!(ix.field_indexes().is_none());
    let lang: FieldIndex = "lang:keyword".parse().unwrap();
    ix.change_field_indexes(std::slice::from_ref(&lang), &[])
        .unwrap();
    assert!(
        ix.change_field_indexes(std::slice::from_ref(&lang), &[])
            .is_err(),
        "added twice"
    );
    ix.commit("m", Some(ix.descriptor())).unwrap();
    let mut ix = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
    assert_eq!(ix.field_indexes().unwrap().fields().len(), 1);
    let en = eligible(&ix, &json!({"key": "lang", "match": {"value": "en"}}));
    assert_eq!(en, model(&records(s), |p| p["lang"] == "en"), "seed {s:#x}");
    assert!(matches!(
        ix.change_field_indexes(&[], &["year".to_string()]),
        Err(Error::UnknownField { .. })
    ));
    ix.change_field_indexes(&[], &["lang".to_string()]).unwrap();
    ix.commit("m", Some(ix.descriptor())).unwrap();
    let ix = Index::open(Arc::clone(&store), "m", &Options::default()).unwrap();
    assert!(ix.field_indexes().is_none());
}
