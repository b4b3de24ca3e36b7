//! Prolly conformance: every case of the shared `prolly-fixtures.v1.json`
//! (`secondary_index_fixture` has its own binary, `tests/secondary.rs`) plus the project's own
//! frozen supplementary vectors in `fixtures/prolly-extra.v1.json`.

use prox_conformance::{hex_bytes, own_json, shared_json};
use prox_engine::manifest::RootManifest;
use prox_engine::prolly::{is_boundary, Config, DiffEntry, Encoding, Node, Tree};
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

fn store_image(v: &Value) -> prox_engine::MemStore {
    let store = prox_engine::MemStore::new();
    use prox_engine::BlockStore;
    for item in v.as_array().unwrap() {
        let bytes = hex_bytes(item["bytes"].as_str().unwrap());
        let got = store.put(&bytes).unwrap();
        assert_eq!(got, cid(&item["cid"]), "store item CID");
        Node::decode(&bytes).expect("every store item decodes");
    }
    store
}

#[test]
fn tree_fixture_store_image_reads() {
    let Some(fx) = fixtures("tree_fixture_store_image_reads") else {
        return;
    };
    for case in fx["tree_fixtures"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let store = store_image(&case["store"]);
        let t = Tree::open(&store, config(&case["config"]), Some(cid(&case["root"]))).unwrap();
        let all: Vec<_> = t.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(all, entries(&case["entries"]), "{name}: entries");
        for l in case["lookups"].as_array().unwrap() {
            let k = hex_bytes(l["key"].as_str().unwrap());
            assert_eq!(
                t.get(&k).unwrap(),
                opt_hex(&l["value"]),
                "{name}: lookup {}",
                l["key"]
            );
        }
        for r in case["ranges"].as_array().unwrap() {
            let start = hex_bytes(r["start"].as_str().unwrap());
            let end = opt_hex(&r["end"]);
            let got: Vec<_> = t
                .range(&start, end.as_deref())
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(
                got,
                entries(&r["entries"]),
                "{name}: range {} {}",
                r["start"],
                r["end"]
            );
        }
        // Canonical edits on the fixture tree keep it equal to fresh builds.
        let t2 = t
            .delete(b"c".to_vec())
            .unwrap()
            .put(b"c".to_vec(), b"3".to_vec())
            .unwrap();
        assert_eq!(
            t2.root(),
            t.root(),
            "{name}: delete + re-put is history independent"
        );
    }
}

#[test]
fn diff_fixtures() {
    let Some(fx) = fixtures("diff_fixtures") else {
        return;
    };
    for case in fx["diff_fixtures"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let store = store_image(&case["store"]);
        let cfg = config(&case["config"]);
        let base = Tree::open(&store, cfg.clone(), Some(cid(&case["base_root"]))).unwrap();
        let other = base.with_root(Some(cid(&case["other_root"])));
        let expect: Vec<DiffEntry> = case["diffs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let key = hex_bytes(d["key"].as_str().unwrap());
                match d["kind"].as_str().unwrap() {
                    "added" => DiffEntry::Added {
                        key,
                        value: opt_hex(&d["value"]).unwrap(),
                    },
                    "removed" => DiffEntry::Removed {
                        key,
                        value: opt_hex(&d["value"]).unwrap(),
                    },
                    "changed" => DiffEntry::Changed {
                        key,
                        old: opt_hex(&d["old"]).unwrap(),
                        new: opt_hex(&d["new"]).unwrap(),
                    },
                    k => panic!("unknown diff kind {k}"),
                }
            })
            .collect();
        assert_eq!(base.diff_vec(&other).unwrap(), expect, "{name}");
        // Reversed arguments swap added and removed.
        let reversed: Vec<DiffEntry> = expect
            .iter()
            .map(|d| match d.clone() {
                DiffEntry::Added { key, value } => DiffEntry::Removed { key, value },
                DiffEntry::Removed { key, value } => DiffEntry::Added { key, value },
                DiffEntry::Changed { key, old, new } => DiffEntry::Changed {
                    key,
                    old: new,
                    new: old,
                },
            })
            .collect();
        assert_eq!(other.diff_vec(&base).unwrap(), reversed, "{name} reversed");
        // Both roots equal fresh builds of their contents.
        for t in [&base, &other] {
            let content: Vec<_> = t.iter().collect::<Result<_, _>>().unwrap();
            let fresh = prox_engine::MemStore::new();
            assert_eq!(
                prox_engine::prolly::build(&fresh, &cfg, content).unwrap(),
                t.root(),
                "{name}"
            );
        }
    }
}

#[test]
fn key_fixtures() {
    use prox_engine::keys::*;
    let Some(fx) = fixtures("key_fixtures") else {
        return;
    };
    let k = &fx["key_fixtures"];
    for c in k["prefix_end"].as_array().unwrap() {
        let p = hex_bytes(c["prefix"].as_str().unwrap());
        assert_eq!(
            prefix_end(&p),
            opt_hex(&c["end"]),
            "prefix_end {}",
            c["prefix"]
        );
        assert_eq!(prefix_range(&p), (p.clone(), opt_hex(&c["end"])));
    }
    for c in k["numeric"].as_array().unwrap() {
        let v = c["value"].as_str().unwrap();
        let got: Vec<u8> = match c["kind"].as_str().unwrap() {
            "u64" => u64_key(v.parse().unwrap()).to_vec(),
            "i64" => i64_key(v.parse().unwrap()).to_vec(),
            "u128" => u128_key(v.parse().unwrap()).to_vec(),
            "i128" => i128_key(v.parse().unwrap()).to_vec(),
            "timestamp_millis" => timestamp_millis_key(v.parse().unwrap()).to_vec(),
            kind => panic!("unknown numeric kind {kind}"),
        };
        assert_eq!(
            hex::encode(got),
            c["encoded"].as_str().unwrap(),
            "{} {v}",
            c["kind"]
        );
    }
    for c in k["segments"].as_array().unwrap() {
        let segs = hex_list(&c["segments"]);
        let mut b = KeyBuilder::new();
        for s in &segs {
            b.push_segment(s);
        }
        let enc = hex_bytes(c["encoded"].as_str().unwrap());
        assert_eq!(b.as_bytes(), enc.as_slice());
        let joined: Vec<u8> = segs.iter().flat_map(|s| encode_segment(s)).collect();
        assert_eq!(joined, enc);
        assert_eq!(decode_segments(&enc).unwrap(), hex_list(&c["decoded"]));
    }
    for c in k["debug"].as_array().unwrap() {
        let key = hex_bytes(c["key"].as_str().unwrap());
        assert_eq!(debug_key(&key), c["debug"].as_str().unwrap());
    }
}

#[test]
fn value_and_blob_envelopes() {
    use prox_engine::envelope::*;
    let Some(fx) = fixtures("value_and_blob_envelopes") else {
        return;
    };
    for c in fx["value_fixtures"].as_array().unwrap() {
        let v = VersionedValue {
            schema: c["schema_name"].as_str().unwrap().to_string(),
            version: c["version"].as_u64().unwrap(),
            encoding: encoding(&c["encoding"]),
            payload: hex_bytes(c["payload"].as_str().unwrap()),
        };
        let bytes = hex_bytes(c["bytes"].as_str().unwrap());
        assert_eq!(v.encode(), bytes, "{}", c["name"]);
        assert_eq!(VersionedValue::decode(&bytes).unwrap(), v, "{}", c["name"]);
    }
    for c in fx["blob_fixtures"].as_array().unwrap() {
        let bytes = hex_bytes(c["bytes"].as_str().unwrap());
        let r = match c["kind"].as_str().unwrap() {
            "inline" => ValueRef::Inline(hex_bytes(c["value"].as_str().unwrap())),
            "blob" => {
                let blob = hex_bytes(c["blob"].as_str().unwrap());
                let cid = cid(&c["cid"]);
                assert_eq!(Cid::of(&blob), cid);
                let store = prox_engine::MemStore::new();
                let stored = put_large_value(&store, &blob, blob.len() - 1).unwrap();
                assert_eq!(
                    stored, bytes,
                    "large value policy writes the fixture envelope"
                );
                assert_eq!(get_large_value(&store, &stored).unwrap(), blob);
                ValueRef::Blob {
                    cid,
                    len: c["len"].as_u64().unwrap(),
                }
            }
            k => panic!("unknown blob kind {k}"),
        };
        assert_eq!(r.encode(), bytes, "{}", c["name"]);
        assert_eq!(ValueRef::decode(&bytes).unwrap(), r, "{}", c["name"]);
    }
}

// ----- the project's own frozen supplementary vectors -----

#[test]
fn extra_legacy_nodes() {
    let fx = own_json("prolly-extra.v1.json");
    for c in fx["legacy_nodes"].as_array().unwrap() {
        let crab = hex_bytes(c["crab"].as_str().unwrap());
        let node = Node::decode(&crab).unwrap();
        assert_eq!(node.encode(), crab, "{}", c["name"]);
        for form in ["packed", "named"] {
            let legacy = hex_bytes(c[form].as_str().unwrap());
            assert_eq!(Node::decode(&legacy).unwrap(), node, "{} {form}", c["name"]);
        }
    }
}

#[test]
fn extra_manifests() {
    let fx = own_json("prolly-extra.v1.json");
    for c in fx["manifests"].as_array().unwrap() {
        let m = RootManifest {
            version: 1,
            root: c["root"].as_str().map(|s| s.parse().unwrap()),
            config: config(&c["config"]),
            created_at_millis: c["created_at_millis"].as_u64(),
            updated_at_millis: c["updated_at_millis"].as_u64(),
        };
        let bytes = c["bytes"].as_str().unwrap();
        assert_eq!(hex::encode(m.encode()), bytes);
        assert_eq!(RootManifest::decode(&hex_bytes(bytes)).unwrap(), m);
    }
}

#[test]
fn extra_history_counterexample() {
    let fx = own_json("prolly-extra.v1.json");
    let h = &fx["history"];
    let cfg = config(&h["config"]);
    let store = prox_engine::MemStore::new();
    let mut t = Tree::new(&store, cfg.clone()).unwrap();
    let mut leaf = Node::empty(&cfg, 0);
    for p in h["puts"].as_array().unwrap() {
        t = t
            .put(
                hex_bytes(p[0].as_str().unwrap()),
                hex_bytes(p[1].as_str().unwrap()),
            )
            .unwrap();
    }
    // Our puts are canonical, unlike the reference's put path.
    assert_eq!(t.root(), Some(cid(&h["canonical_root"])));
    // The reference put root is the single leaf [a, b, c, d]: same codec.
    for (k, v) in t.iter().map(|r| r.unwrap()) {
        leaf.keys.push(k);
        leaf.vals.push(v);
    }
    assert_eq!(leaf.cid(), cid(&h["reference_put_root"]));
}

#[test]
fn extra_random_builds() {
    let fx = own_json("prolly-extra.v1.json");
    for c in fx["builds"].as_array().unwrap() {
        let cfg = config(&c["config"]);
        let items: Vec<(Vec<u8>, Vec<u8>)> = c["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    hex_bytes(e[0].as_str().unwrap()),
                    hex_bytes(e[1].as_str().unwrap()),
                )
            })
            .collect();
        let store = prox_engine::MemStore::new();
        let root = prox_engine::prolly::build_sorted(&store, &cfg, items.clone()).unwrap();
        assert_eq!(root, Some(cid(&c["root"])), "{}", c["name"]);
        assert_eq!(
            store.len() as u64,
            c["node_count"].as_u64().unwrap(),
            "{}",
            c["name"]
        );
        // Building through batches of canonical edits gives the same root.
        let mut t = Tree::new(&store, cfg.clone()).unwrap();
        for chunk in items.chunks(97) {
            t = t
                .batch(
                    chunk
                        .iter()
                        .map(|(k, v)| prox_engine::prolly::Mutation::Put(k.clone(), v.clone())),
                )
                .unwrap();
        }
        assert_eq!(t.root(), root, "{} via batches", c["name"]);
    }
}
