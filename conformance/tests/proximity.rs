//! Proximity conformance: the shared `proximity-fixtures.json` (every object
//! decodes and re-encodes byte-identically with its CID, the empty map
//! rebuilds from its configuration), the legacy v1 objects (rejected with
//! the typed version error), and the project's own frozen builds in
//! `fixtures/proximity-maps.v2.json` (generated from the shared executable
//! model by `conformance/gen/proximity_maps.py`): every object of every
//! scenario must be reproduced exactly, and refused builds must fail with
//! `NodeTooLarge`.

use prox_conformance::{hex_bytes, own_json, shared_json};
use prox_engine::proximity::{
    Descriptor, ExternalVector, NodeKind, ProxNode, ProximityConfig, ProximityMap, Quantizer,
    Record,
};
use prox_engine::{BlockStore, Cid, Error, MemStore};
use prox_kernels::Metric;
use serde_json::Value;
use std::collections::BTreeMap;

const FILE: &str = "proximity-fixtures.json";
const LEGACY: &str = "legacy/proximity-fixtures.v1.json";

fn cid_of(v: &Value) -> Cid {
    v.as_str().expect("cid hex").parse().expect("cid")
}

/// Truncations, a trailing byte and versions 1/3 are all refused; the
/// version error is the typed one.
fn mutations(name: &str, bytes: &[u8], decode: &dyn Fn(&[u8]) -> prox_engine::Result<()>) {
    for cut in 0..bytes.len() {
        assert!(
            decode(&bytes[..cut]).is_err(),
            "{name}: truncation at {cut} accepted"
        );
    }
    let mut long = bytes.to_vec();
    long.push(0);
    assert!(
        matches!(decode(&long), Err(Error::TrailingBytes { .. })),
        "{name}: trailing"
    );
    for v in [1u8, 3] {
        let mut bad = bytes.to_vec();
        bad[4] = v;
        assert!(
            matches!(decode(&bad), Err(Error::UnsupportedProximityVersion { found, required: 2 }) if found == v),
            "{name}: version {v}"
        );
    }
}

#[test]
fn shared_objects_round_trip() {
    let Some(fx) = shared_json("shared_objects_round_trip", FILE) else {
        return;
    };
    assert_eq!(fx["format_version"], 2);
    let obj = &fx["objects"];
    for (name, o) in obj.as_object().unwrap() {
        let b = hex_bytes(o["bytes"].as_str().unwrap());
        assert_eq!(Cid::of(&b), cid_of(&o["cid"]), "{name}: CID");
    }
    let bytes = |n: &str| hex_bytes(obj[n]["bytes"].as_str().unwrap());

    let rec_b = bytes("record");
    let rec = Record::decode(&rec_b, 2).unwrap();
    assert_eq!(rec.vector, vec![0.0, 2.5]);
    assert_eq!(rec.value, b"value");
    assert_eq!(rec.encode().unwrap(), rec_b);
    let raw = prox_engine::proximity::math::prepare(Metric::L2, 2, &[-0.0, 2.5], None).unwrap();
    assert_eq!(Record::encode_parts(&raw, b"value").unwrap(), rec_b);
    assert!(Record::decode(&rec_b, 3).is_err());
    mutations("record", &rec_b, &|b| Record::decode(b, 2).map(drop));

    let leaf_b = bytes("leaf");
    let leaf = ProxNode::decode(&leaf_b, 2).unwrap();
    assert_eq!(
        (leaf.kind, leaf.level, leaf.subtree_count),
        (NodeKind::Leaf, 0, 2)
    );
    assert_eq!(leaf.encode().unwrap(), leaf_b);
    mutations("leaf", &leaf_b, &|b| ProxNode::decode(b, 2).map(drop));

    let route_b = bytes("route");
    let route = ProxNode::decode(&route_b, 2).unwrap();
    assert_eq!(route.kind, NodeKind::Route);
    assert_eq!(route.entries[0].child, Some(Cid::of(&leaf_b)));
    assert_eq!(route.entries[0].radius, 1.0);
    assert_eq!(route.encode().unwrap(), route_b);
    mutations("route", &route_b, &|b| ProxNode::decode(b, 2).map(drop));

    let vec_b = bytes("vector");
    let v = ExternalVector::decode(&vec_b).unwrap();
    assert_eq!(v.norm, Some(2.5));
    assert_eq!(v.encode().unwrap(), vec_b);
    mutations("vector", &vec_b, &|b| ExternalVector::decode(b).map(drop));

    let sq_b = bytes("sq8");
    let q = Quantizer::decode(&sq_b).unwrap();
    assert_eq!(q.codes, vec![0, 5, 2, 0]);
    assert_eq!(q.encode().unwrap(), sq_b);
    mutations("sq8", &sq_b, &|b| Quantizer::decode(b).map(drop));

    let em = &fx["empty"];
    let db = hex_bytes(em["descriptor_bytes"].as_str().unwrap());
    let rb = hex_bytes(em["root_bytes"].as_str().unwrap());
    assert_eq!(Cid::of(&db), cid_of(&em["descriptor_cid"]));
    assert_eq!(Cid::of(&rb), cid_of(&em["root_cid"]));
    let d = Descriptor::decode(&db).unwrap();
    assert_eq!(d.root, cid_of(&em["root_cid"]));
    assert_eq!(d.encode().unwrap(), db);
    let mut want = ProximityConfig::new(3);
    want.log_chunk_size = 2;
    want.level_hash_seed = 19;
    want.max_page_bytes = 262_144;
    assert_eq!(d.config, want);
    mutations("descriptor", &db, &|b| Descriptor::decode(b).map(drop));
    assert_eq!(ProxNode::decode(&rb, 3).unwrap().encode().unwrap(), rb);

    // The builder reproduces the empty map from its configuration.
    let store = MemStore::new();
    let map = ProximityMap::build(&store, &want, Vec::new()).unwrap();
    assert_eq!(map.descriptor_cid(), cid_of(&em["descriptor_cid"]));
    assert_eq!(map.root_cid(), cid_of(&em["root_cid"]));
    map.verify().unwrap();
}

#[test]
fn legacy_objects_are_refused_with_the_version_error() {
    let Some(fx) = shared_json("legacy_objects_are_refused", LEGACY) else {
        return;
    };
    let mut items: Vec<(String, Vec<u8>)> = fx["objects"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(n, o)| (n.clone(), hex_bytes(o["bytes"].as_str().unwrap())))
        .collect();
    items.push((
        "empty descriptor".into(),
        hex_bytes(fx["empty"]["descriptor_bytes"].as_str().unwrap()),
    ));
    items.push((
        "empty root".into(),
        hex_bytes(fx["empty"]["root_bytes"].as_str().unwrap()),
    ));
    assert_eq!(items.len(), 5);
    for (name, b) in items {
        let got = match &b[..4] {
            b"PRVR" => Record::decode(&b, 2).map(drop),
            b"PRXN" => ProxNode::decode(&b, 2).map(drop),
            b"PRXI" => Descriptor::decode(&b).map(drop),
            m => panic!("{name}: unexpected magic {m:?}"),
        };
        assert!(
            matches!(
                got,
                Err(Error::UnsupportedProximityVersion {
                    found: 1,
                    required: 2
                })
            ),
            "{name}: {got:?}"
        );
    }
    // Loading a legacy descriptor fails the same way.
    let store = MemStore::new();
    let cid = store
        .put(&hex_bytes(
            fx["empty"]["descriptor_bytes"].as_str().unwrap(),
        ))
        .unwrap();
    assert!(matches!(
        ProximityMap::load(&store, cid),
        Err(Error::UnsupportedProximityVersion {
            found: 1,
            required: 2
        })
    ));
}

fn config(v: &Value) -> ProximityConfig {
    let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("config.{k}"));
    ProximityConfig {
        dims: u("dims") as u32,
        metric: Metric::from_id(u("metric") as u8).unwrap(),
        log_chunk_size: u("log_chunk_size") as u8,
        level_hash_seed: u("level_hash_seed"),
        min_page_bytes: u("min_page_bytes") as u32,
        target_page_bytes: u("target_page_bytes") as u32,
        max_page_bytes: u("max_page_bytes") as u32,
        overflow_hash_seed: u("overflow_hash_seed"),
        inline_threshold_bytes: u("inline_threshold_bytes") as u32,
        sq8_group_size: v["sq8_group_size"].as_u64().map(|g| g as u32),
    }
}

fn records(v: &Value) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let vector = r["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| f32::from_bits(u32::from_str_radix(b.as_str().unwrap(), 16).unwrap()))
                .collect();
            (
                hex_bytes(r["key"].as_str().unwrap()),
                vector,
                hex_bytes(r["value"].as_str().unwrap()),
            )
        })
        .collect()
}

#[test]
fn frozen_builds_are_reproduced_object_for_object() {
    let doc = own_json("proximity-maps.v2.json");
    assert_eq!(doc["format_version"], 2);
    let scenarios = doc["scenarios"].as_array().unwrap();
    assert!(scenarios.len() >= 12);
    for sc in scenarios {
        let name = sc["name"].as_str().unwrap();
        let cfg = config(&sc["config"]);
        let recs = records(&sc["records"]);
        let store = MemStore::new();
        let built = ProximityMap::build(&store, &cfg, recs.clone());
        if let Some(err) = sc.get("error") {
            assert_eq!(err, "node_too_large");
            assert!(
                matches!(built, Err(Error::NodeTooLarge { .. })),
                "{name}: {built:?}"
            );
            continue;
        }
        let map = built.unwrap_or_else(|e| panic!("{name}: build failed: {e}"));
        let want: BTreeMap<Cid, Vec<u8>> = sc["objects"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(c, b)| (c.parse().unwrap(), hex_bytes(b.as_str().unwrap())))
            .collect();
        let mut got = store.cids().unwrap();
        got.sort();
        let missing: Vec<_> = want.keys().filter(|c| !got.contains(c)).collect();
        let extra: Vec<_> = got.iter().filter(|c| !want.contains_key(c)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{name}: {} missing, {} extra objects",
            missing.len(),
            extra.len()
        );
        for (c, b) in &want {
            assert_eq!(
                &store.get(c).unwrap().unwrap()[..],
                &b[..],
                "{name}: bytes of {c}"
            );
        }
        assert_eq!(
            map.descriptor_cid(),
            cid_of(&sc["descriptor"]),
            "{name}: descriptor"
        );
        assert_eq!(map.root_cid(), cid_of(&sc["root"]), "{name}: root");
        assert_eq!(got.len() as u64, sc["object_count"].as_u64().unwrap());
        // Load, look every record up, audit.
        let loaded = ProximityMap::load(&store, map.descriptor_cid()).unwrap();
        assert_eq!(loaded.len(), recs.len() as u64);
        for (k, v, val) in &recs {
            let (pv, pval) = loaded
                .get(k)
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: missing key"));
            let again =
                prox_engine::proximity::math::prepare(cfg.metric, cfg.dims, v, None).unwrap();
            assert_eq!(pv, again);
            assert_eq!(&pval, val);
        }
        loaded
            .verify()
            .unwrap_or_else(|e| panic!("{name}: verify: {e}"));
    }
}
