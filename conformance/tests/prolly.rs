//! Prolly conformance: every case of the shared `prolly-fixtures.v1.json`
//! (except `secondary_index_fixture`, out of scope) plus the project's own
//! frozen supplementary vectors in `fixtures/prolly-extra.v1.json`.

use prox_conformance::{hex_bytes, own_json, shared_json};
use prox_engine::manifest::RootManifest;
use prox_engine::prolly::{is_boundary, Config, Encoding, Node};
use prox_engine::Cid;
use serde_json::Value;

const FILE: &str = "prolly-fixtures.v1.json";

fn fixtures(test: &str) -> Option<Value> {
    shared_json(test, FILE)
}

fn encoding(v: &Value) -> Encoding {
    match v["kind"].as_str().expect("encoding kind") {
        "raw" => Encoding::Raw,
        "cbor" => Encoding::Cbor,
        "json" => Encoding::Json,
        "custom" => Encoding::Custom(v["custom_name"].as_str().expect("custom name").to_string()),
        k => panic!("unknown encoding kind {k}"),
    }
}

fn config(v: &Value) -> Config {
    let opt = |x: &Value| x.as_u64().map(|n| n as usize);
    Config {
        min_chunk_size: v["min_chunk_size"].as_u64().unwrap() as usize,
        max_chunk_size: v["max_chunk_size"].as_u64().unwrap() as usize,
        chunking_factor: v["chunking_factor"].as_u64().unwrap() as u32,
        hash_seed: v["hash_seed"].as_u64().unwrap(),
        encoding: encoding(&v["encoding"]),
        node_cache_max_nodes: opt(&v["node_cache_max_nodes"]),
        node_cache_max_bytes: opt(&v["node_cache_max_bytes"]),
    }
}

fn hex_list(v: &Value) -> Vec<Vec<u8>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| hex_bytes(x.as_str().unwrap()))
        .collect()
}

fn cid(v: &Value) -> Cid {
    v.as_str().unwrap().parse().unwrap()
}

fn opt_hex(v: &Value) -> Option<Vec<u8>> {
    v.as_str().map(hex_bytes)
}

#[test]
fn defaults_match_reference() {
    let Some(fx) = fixtures("defaults_match_reference") else {
        return;
    };
    assert_eq!(config(&fx["defaults"]), Config::default());
}

#[test]
fn node_fixtures_both_ways() {
    let Some(fx) = fixtures("node_fixtures_both_ways") else {
        return;
    };
    let cases = fx["node_fixtures"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let n = &case["node"];
        let expected = Node {
            leaf: n["leaf"].as_bool().unwrap(),
            level: n["level"].as_u64().unwrap() as u8,
            min_chunk_size: n["min_chunk_size"].as_u64().unwrap() as usize,
            max_chunk_size: n["max_chunk_size"].as_u64().unwrap() as usize,
            chunking_factor: n["chunking_factor"].as_u64().unwrap() as u32,
            hash_seed: n["hash_seed"].as_u64().unwrap(),
            encoding: encoding(&n["encoding"]),
            keys: hex_list(&n["keys"]),
            vals: hex_list(&n["vals"]),
        };
        let bytes = hex_bytes(case["bytes"].as_str().unwrap());
        assert_eq!(expected.encode(), bytes, "{name}: encode");
        assert_eq!(Node::decode(&bytes).unwrap(), expected, "{name}: decode");
        assert_eq!(Cid::of(&bytes), cid(&case["cid"]), "{name}: CID");
        assert_eq!(expected.cid(), cid(&case["cid"]), "{name}: Node::cid");
        if let Some(legacy) = opt_hex(&case["legacy_cbor_bytes"]) {
            assert_eq!(
                Node::decode(&legacy).unwrap(),
                expected,
                "{name}: legacy CBOR decode"
            );
            assert!(
                Node::decode(&legacy[..legacy.len() - 1]).is_err(),
                "{name}: truncated legacy"
            );
        }
        // Strict rejections: every truncation and trailing bytes.
        for cut in 0..bytes.len() {
            assert!(
                Node::decode(&bytes[..cut]).is_err(),
                "{name}: truncated at {cut} accepted"
            );
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(
            Node::decode(&trailing).is_err(),
            "{name}: trailing byte accepted"
        );
        let mut bad_version = bytes.clone();
        bad_version[4] = 2;
        assert!(
            Node::decode(&bad_version).is_err(),
            "{name}: version 2 accepted"
        );
        let mut bad_leaf = bytes.clone();
        bad_leaf[5] = 2;
        assert!(
            Node::decode(&bad_leaf).is_err(),
            "{name}: leaf flag 2 accepted"
        );
    }
}

#[test]
fn boundary_fixtures() {
    let Some(fx) = fixtures("boundary_fixtures") else {
        return;
    };
    for case in fx["boundary_fixtures"].as_array().unwrap() {
        let cfg = config(&case["config"]);
        let got = is_boundary(
            &cfg,
            case["count"].as_u64().unwrap() as usize,
            &hex_bytes(case["key"].as_str().unwrap()),
            &hex_bytes(case["value"].as_str().unwrap()),
        );
        assert_eq!(
            got,
            case["is_boundary"].as_bool().unwrap(),
            "{}",
            case["name"]
        );
    }
}

#[test]
fn manifest_fixtures() {
    let Some(fx) = fixtures("manifest_fixtures") else {
        return;
    };
    for case in fx["manifest_fixtures"].as_array().unwrap() {
        let m = RootManifest {
            version: 1,
            root: case["root"].as_str().map(|s| s.parse().unwrap()),
            config: config(&case["config"]),
            created_at_millis: case["created_at_millis"].as_u64(),
            updated_at_millis: case["updated_at_millis"].as_u64(),
        };
        let bytes = hex_bytes(case["bytes"].as_str().unwrap());
        assert_eq!(
            hex::encode(m.encode()),
            hex::encode(&bytes),
            "{}",
            case["name"]
        );
        assert_eq!(RootManifest::decode(&bytes).unwrap(), m);
    }
}

fn entries(v: &Value) -> Vec<(Vec<u8>, Vec<u8>)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                hex_bytes(e["key"].as_str().unwrap()),
                hex_bytes(e["value"].as_str().unwrap()),
            )
        })
        .collect()
}

#[test]
fn tree_fixture_rebuild() {
    let Some(fx) = fixtures("tree_fixture_rebuild") else {
        return;
    };
    for case in fx["tree_fixtures"].as_array().unwrap() {
        let cfg = config(&case["config"]);
        let store = prox_engine::MemStore::new();
        let root =
            prox_engine::prolly::build_sorted(&store, &cfg, entries(&case["entries"])).unwrap();
        assert_eq!(root, Some(cid(&case["root"])), "{}", case["name"]);
        // A fresh build writes exactly the nodes reachable from the root.
        assert_eq!(store.len(), 3, "{}", case["name"]);
        let mut shuffled = entries(&case["entries"]);
        shuffled.reverse();
        let store2 = prox_engine::MemStore::new();
        assert_eq!(
            prox_engine::prolly::build(&store2, &cfg, shuffled).unwrap(),
            root
        );
    }
}
