//! Codec round trips and the generic rejection checklist of section 10 on
//! synthetic objects. Fixture bytes are checked in `conformance/`.

use super::*;
use crate::cid::Cid;
use crate::error::Error;

type Decode = dyn Fn(&[u8]) -> crate::Result<()>;

/// Every truncation, a trailing byte, versions 1 and 3 (typed unless the
/// object is CRMF) and a bad magic are rejected.
fn reject_mutations(name: &str, bytes: &[u8], decode: &Decode, typed_version: bool) {
    decode(bytes).unwrap_or_else(|e| panic!("{name}: original rejected: {e}"));
    for cut in 0..bytes.len() {
        assert!(
            decode(&bytes[..cut]).is_err(),
            "{name}: truncation at {cut} accepted"
        );
    }
    let mut long = bytes.to_vec();
    long.push(0);
    assert!(
        matches!(decode(&long), Err(Error::TrailingBytes { extra: 1, .. })),
        "{name}: trailing byte"
    );
    for v in [0u8, 1, 2, 3, 0xff] {
        if v == bytes[4] {
            continue;
        }
        let mut bad = bytes.to_vec();
        bad[4] = v;
        let got = decode(&bad);
        if typed_version {
            assert!(
                matches!(got, Err(Error::UnsupportedProximityVersion { found, required: 2 }) if found == v),
                "{name}: version {v} gave {got:?}"
            );
        } else {
            assert!(
                matches!(got, Err(Error::InvalidObject { .. })),
                "{name}: version {v}"
            );
        }
    }
    let mut bad = bytes.to_vec();
    bad[0] ^= 0x20;
    assert!(
        matches!(decode(&bad), Err(Error::InvalidObject { .. })),
        "{name}: magic"
    );
}

fn v(xs: &[f32]) -> Vec<f32> {
    xs.to_vec()
}

#[test]
fn record_round_trip_and_rejections() {
    let rec = Record {
        vector: v(&[0.0, 2.5]),
        value: b"value".to_vec(),
    };
    let bytes = rec.encode().unwrap();
    assert_eq!(
        hex::encode(&bytes),
        "5052565202010200000000000020400576616c7565"
    );
    assert_eq!(Record::decode(&bytes, 2).unwrap(), rec);
    assert!(matches!(
        Record::decode(&bytes, 3),
        Err(Error::WrongDimension { .. })
    ));
    reject_mutations("PRVR", &bytes, &|b| Record::decode(b, 2).map(drop), true);
    let mut neg0 = bytes.clone();
    neg0[10] = 0x80;
    assert!(Record::decode(&neg0, 2).is_err());
    let mut enc = bytes.clone();
    enc[5] = 2;
    assert!(Record::decode(&enc, 2).is_err());
    let mut nonc = bytes[..6].to_vec();
    nonc.extend_from_slice(&[0x82, 0x00]);
    nonc.extend_from_slice(&bytes[7..]);
    assert!(matches!(
        Record::decode(&nonc, 2),
        Err(Error::Varint { .. })
    ));
    assert!(Record::encode_parts(&[f32::NAN], b"").is_err());
    assert!(Record::encode_parts(&[-0.0], b"").is_err());
}

#[test]
fn external_vector_round_trip_and_rejections() {
    let with = ExternalVector {
        vector: v(&[0.0, 2.5]),
        norm: Some(2.5),
    };
    let bytes = with.encode().unwrap();
    assert_eq!(ExternalVector::decode(&bytes).unwrap(), with);
    reject_mutations(
        "PRXV",
        &bytes,
        &|b| ExternalVector::decode(b).map(drop),
        true,
    );
    let mut bad = bytes.clone();
    bad[6] = 3;
    assert!(ExternalVector::decode(&bad).is_err());
    let mut neg = bytes.clone();
    let n = neg.len();
    neg[n - 8..].copy_from_slice(&(-1.0f64).to_le_bytes());
    assert!(ExternalVector::decode(&neg).is_err());
    let without = ExternalVector {
        vector: v(&[1.0]),
        norm: None,
    };
    let b = without.encode().unwrap();
    assert_eq!(b[6], 0);
    assert_eq!(ExternalVector::decode(&b).unwrap(), without);
    // A huge dimension count is refused before allocating.
    let mut huge = b"PRXV\x02\x01\x00".to_vec();
    crate::codec::put_uv(&mut huge, MAX_ENTRIES);
    assert!(ExternalVector::decode(&huge).is_err());
}

#[test]
fn quantizer_round_trip_derivation_and_rejections() {
    let q = Quantizer {
        dims: 2,
        group_size: 2,
        count: 2,
        scales: v(&[0.5]),
        max_error: 0.25,
        codes: vec![0, 5, 2, 0],
    };
    let bytes = q.encode().unwrap();
    assert_eq!(
        hex::encode(&bytes),
        "505153380200020202010000003f0000803e00050200"
    );
    assert_eq!(Quantizer::decode(&bytes).unwrap(), q);
    reject_mutations("PQS8", &bytes, &|b| Quantizer::decode(b).map(drop), true);
    let mut bad = bytes.clone();
    *bad.last_mut().unwrap() = 0x80;
    assert!(Quantizer::decode(&bad).is_err());
    bad = bytes.clone();
    bad[5] = 1;
    assert!(Quantizer::decode(&bad).is_err());
    // Derivation: scale = fl32(max|c| / 127); codes round ties to even.
    let a = [1.0f32, -2.0, 0.0];
    let b = [0.5f32, 0.25, 0.0];
    let d = Quantizer::derive([&a[..], &b[..]], 3, 2).unwrap();
    assert_eq!(d.scales, vec![(2.0f64 / 127.0) as f32, 0.0]);
    assert_eq!(d.row(0).unwrap(), &[64, -127, 0]);
    assert_eq!(d.count, 2);
    Quantizer::decode(&d.encode().unwrap()).unwrap();
    let empty = Quantizer::derive(std::iter::empty::<&[f32]>(), 4, 3).unwrap();
    assert_eq!(empty.scales, vec![0.0, 0.0]);
    assert_eq!(empty.max_error, 0.0);
    assert!(empty.codes.is_empty());
}

fn leaf() -> ProxNode {
    ProxNode {
        kind: NodeKind::Leaf,
        level: 0,
        subtree_count: 2,
        quantizer: None,
        entries: vec![
            NodeEntry::point(b"a".to_vec(), VectorRef::Inline(v(&[0.0, 1.0]))),
            NodeEntry::point(b"b".to_vec(), VectorRef::Inline(v(&[1.0, 0.0]))),
        ],
    }
}

#[test]
fn node_round_trip_and_rejections() {
    let l = leaf();
    let bytes = l.encode().unwrap();
    assert_eq!(bytes.len(), 58);
    assert_eq!(bytes.len(), l.encoded_len(2));
    assert_eq!(ProxNode::decode(&bytes, 2).unwrap(), l);
    reject_mutations(
        "PRXN leaf",
        &bytes,
        &|b| ProxNode::decode(b, 2).map(drop),
        true,
    );
    assert!(ProxNode::decode(&bytes, 3).is_err());
    for (off, val) in [(6usize, 0x80u8), (5, 5), (5, 0), (8, 3), (7, 1)] {
        let mut bad = bytes.clone();
        bad[off] = val;
        assert!(
            ProxNode::decode(&bad, 2).is_err(),
            "offset {off} value {val}"
        );
    }
    let mut page = bytes.clone();
    page[5] = 3;
    assert_eq!(
        ProxNode::decode(&page, 2).unwrap().kind,
        NodeKind::OverflowPage
    );

    let route = ProxNode {
        kind: NodeKind::Route,
        level: 1,
        subtree_count: 2,
        quantizer: Some(Cid([0x22; 32])),
        entries: vec![NodeEntry {
            key: b"a".to_vec(),
            vector: VectorRef::External(Cid([0x11; 32])),
            child: Some(Cid::of(&bytes)),
            count: 2,
            radius: 1.0,
            min_key: b"a".to_vec(),
            max_key: b"b".to_vec(),
        }],
    };
    let rb = route.encode().unwrap();
    assert_eq!(rb.len(), route.encoded_len(2));
    assert_eq!(ProxNode::decode(&rb, 2).unwrap(), route);
    reject_mutations(
        "PRXN route",
        &rb,
        &|b| ProxNode::decode(b, 2).map(drop),
        true,
    );
    let mut dir = rb.clone();
    dir[5] = 4;
    assert_eq!(
        ProxNode::decode(&dir, 2).unwrap().kind,
        NodeKind::OverflowDirectory
    );
    let mut bad = rb.clone();
    bad[7] = 0;
    assert!(ProxNode::decode(&bad, 2).is_err(), "route at level 0");

    // Semantic rules on encode.
    let mut e = l.clone();
    e.entries.swap(0, 1);
    assert!(e.encode().is_err(), "descending keys");
    let mut e = l.clone();
    e.entries[0].radius = -0.0;
    assert!(e.encode().is_err(), "-0 radius");
    let mut e = l.clone();
    e.entries[0].radius = 0.5;
    assert!(e.encode().is_err(), "leaf radius");
    let mut e = route.clone();
    e.entries[0].min_key = b"b".to_vec();
    assert!(e.encode().is_err(), "min > key");
    let mut e = route.clone();
    e.entries[0].count = 0;
    e.subtree_count = 0;
    assert!(e.encode().is_err(), "zero count");
    let mut e = route.clone();
    e.entries[0].child = None;
    assert!(e.encode().is_err(), "missing child");
    let empty_dir = ProxNode {
        kind: NodeKind::OverflowDirectory,
        level: 0,
        subtree_count: 0,
        quantizer: None,
        entries: vec![],
    };
    assert!(empty_dir.encode().is_err());
    let empty = ProxNode::empty_leaf(None).encode().unwrap();
    assert_eq!(hex::encode(&empty), "5052584e020100000000");
    // An entry count larger than the input allows is refused up front.
    let mut huge = b"PRXN\x02\x01\x00\x00\x00".to_vec();
    crate::codec::put_uv(&mut huge, MAX_ENTRIES);
    assert!(ProxNode::decode(&huge, 2).is_err());
}

fn descriptor() -> Descriptor {
    let mut config = ProximityConfig::new(3);
    config.log_chunk_size = 2;
    config.level_hash_seed = 19;
    config.max_page_bytes = 262_144;
    Descriptor {
        config,
        record_count: 0,
        directory: DirectoryBlock {
            root: None,
            config: crate::prolly::Config::default(),
        },
        root: Cid::of(&ProxNode::empty_leaf(None).encode().unwrap()),
    }
}

#[test]
fn descriptor_round_trip_and_rejections() {
    let d = descriptor();
    let bytes = d.encode().unwrap();
    assert_eq!(bytes.len(), 124);
    assert_eq!(
        hex::encode(d.config.fingerprint_preimage()),
        "504346470203010002130000000000000080208080048080100000000000000000808004\
         00"
    );
    assert_eq!(Descriptor::decode(&bytes).unwrap(), d);
    reject_mutations("PRXI", &bytes, &|b| Descriptor::decode(b).map(drop), true);
    for (off, val) in [(5usize, 1u8), (6, 2), (8, 4), (9, 1)] {
        let mut bad = bytes.clone();
        bad[off] = val;
        assert!(Descriptor::decode(&bad).is_err(), "offset {off}");
    }
    let n = bytes.len();
    for off in [n - 1, n - 2, n - 34] {
        let mut bad = bytes.clone();
        bad[off] ^= 3;
        assert!(Descriptor::decode(&bad).is_err(), "offset {off}");
    }
    let mut cos = d.clone();
    cos.config.metric = prox_kernels::Metric::Cosine;
    cos.config.sq8_group_size = Some(2);
    cos.record_count = 7;
    cos.directory.root = Some(Cid([0x33; 32]));
    cos.directory.config.encoding = crate::prolly::Encoding::Custom("typed".into());
    cos.directory.config.node_cache_max_bytes = Some(0);
    let cb = cos.encode().unwrap();
    assert_eq!(cb[9], 1);
    assert_eq!(Descriptor::decode(&cb).unwrap(), cos);
    reject_mutations(
        "PRXI cosine",
        &cb,
        &|b| Descriptor::decode(b).map(drop),
        true,
    );
    let mut bad = d.clone();
    bad.config.log_chunk_size = 0;
    assert!(bad.encode().is_err());
}

#[test]
fn pq_manifest_round_trip_and_rejections() {
    let config = PqConfig {
        subquantizers: 2,
        centroids: 2,
        iterations: 3,
        rerank_multiplier: 2,
        seed: 5,
    };
    let m = PqManifest {
        source: Cid([1; 32]),
        dims: 3,
        metric: prox_kernels::Metric::L2,
        config,
        code_root: Cid([2; 32]),
        codebooks: vec![
            Codebook {
                width: 1,
                centroids: v(&[0.5, 1.5]),
            },
            Codebook {
                width: 2,
                centroids: v(&[1.0, 2.0, 3.0, 4.0]),
            },
        ],
        mean_squared_error: 0.25,
        max_squared_error: 1.0,
    };
    let bytes = m.encode().unwrap();
    assert_eq!(PqManifest::decode(&bytes).unwrap(), m);
    reject_mutations("PQPQ", &bytes, &|b| PqManifest::decode(b).map(drop), true);
    let mut bad = bytes.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(PqManifest::decode(&bad).is_err());
    bad = bytes.clone();
    bad[5] = 1;
    assert!(PqManifest::decode(&bad).is_err());
    let mut short = m.clone();
    short.codebooks[1].width = 1;
    short.codebooks[1].centroids.truncate(2);
    assert!(short.encode().is_err(), "widths must sum to dims");
    assert!(config.validate(3).is_ok());
    assert!(config.validate(1).is_err());
}

#[test]
fn hnsw_round_trip_and_rejections() {
    let m = HnswManifest {
        canonical: true,
        source: Cid([1; 32]),
        dims: 4,
        metric: prox_kernels::Metric::InnerProduct,
        config: HnswConfig::default(),
        graph_root: Cid([2; 32]),
        entry_point: b"k".to_vec(),
        max_level: 3,
    };
    let bytes = m.encode().unwrap();
    assert_eq!(HnswManifest::decode(&bytes).unwrap(), m);
    reject_mutations("HNSW", &bytes, &|b| HnswManifest::decode(b).map(drop), true);
    let mut bad = bytes.clone();
    bad[5] = 2;
    assert!(HnswManifest::decode(&bad).is_err());
    let n = bytes.len();
    bad = bytes.clone();
    bad[n - 33] = 65;
    assert!(HnswManifest::decode(&bad).is_err());
    let mut empty = m.clone();
    empty.entry_point.clear();
    assert!(empty.encode().is_err());

    let node = HnswNode {
        level: 2,
        layers: vec![
            vec![b"a".to_vec(), b"c".to_vec()],
            vec![b"b".to_vec()],
            vec![],
        ],
    };
    let nb = node.encode().unwrap();
    assert_eq!(HnswNode::decode(&nb).unwrap(), node);
    reject_mutations("HNSN", &nb, &|b| HnswNode::decode(b).map(drop), true);
    assert!(HnswNode::decode(b"HNSN\x02\x00\x00\x01\x02\x01c\x01a").is_err());
    assert!(HnswNode::decode(b"HNSN\x02\x00\x00\x01\x02\x01a\x01a").is_err());
    assert!(HnswNode::decode(b"HNSN\x02\x00\x01\x01\x00").is_err());
}

#[test]
fn content_root_round_trip_and_rejections() {
    let mut m = ContentRoot::new(RootKind::ProximityNode, Cid([0x44; 32]));
    m.dims = Some(4);
    m.logical_version = 300;
    m.created_at_ms = 1_700_000_000_123;
    m.metadata.insert(b"zeta".to_vec(), b"1".to_vec());
    m.metadata.insert(b"alpha".to_vec(), Vec::new());
    let bytes = m.encode().unwrap();
    assert!(
        bytes.windows(5).position(|w| w == b"alpha") < bytes.windows(4).position(|w| w == b"zeta")
    );
    assert_eq!(ContentRoot::decode(&bytes).unwrap(), m);
    reject_mutations("CRMF", &bytes, &|b| ContentRoot::decode(b).map(drop), false);
    let mut bad = bytes.clone();
    bad[5] = 11;
    assert!(ContentRoot::decode(&bad).is_err());
    bad = bytes.clone();
    bad[38] = 2;
    assert!(ContentRoot::decode(&bad).is_err());
    let at = bytes
        .windows(7)
        .position(|w| w == b"\x02\x05alpha")
        .unwrap();
    let mut twice = bytes[..at].to_vec();
    twice.extend_from_slice(b"\x02\x05alpha\x00\x05alpha\x00");
    assert!(ContentRoot::decode(&twice).is_err());
    for id in 1..=10 {
        assert_eq!(RootKind::from_id(id).unwrap().id(), id);
    }
}

/// Replaces the first occurrence of `from` in `bytes` with `to`.
fn patch(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("pattern present");
    let mut out = bytes.to_vec();
    out[at..at + from.len()].copy_from_slice(to);
    out
}

#[test]
fn non_canonical_floats_are_rejected_everywhere() {
    let nan32 = f32::NAN.to_le_bytes();
    let neg0_32 = (-0.0f32).to_le_bytes();
    let inf64 = f64::INFINITY.to_le_bytes();
    let neg0_64 = (-0.0f64).to_le_bytes();
    // PRXN inline component and radius.
    let leaf = leaf().encode().unwrap();
    let one = 1.0f32.to_le_bytes();
    for bad in [nan32, neg0_32, f32::INFINITY.to_le_bytes()] {
        assert!(ProxNode::decode(&patch(&leaf, &one, &bad), 2).is_err());
    }
    let mut route = leaf.clone();
    route[5] = 2;
    route[7] = 1;
    let r = ProxNode {
        kind: NodeKind::Route,
        level: 1,
        subtree_count: 1,
        quantizer: None,
        entries: vec![NodeEntry {
            key: b"a".to_vec(),
            vector: VectorRef::Inline(v(&[0.0, 1.0])),
            child: Some(Cid([5; 32])),
            count: 1,
            radius: 1.5,
            min_key: b"a".to_vec(),
            max_key: b"a".to_vec(),
        }],
    }
    .encode()
    .unwrap();
    let radius = 1.5f64.to_le_bytes();
    for bad in [
        inf64,
        neg0_64,
        f64::NAN.to_le_bytes(),
        (-1.5f64).to_le_bytes(),
    ] {
        assert!(ProxNode::decode(&patch(&r, &radius, &bad), 2).is_err());
    }
    // PRXV norm and components.
    let pv = ExternalVector {
        vector: v(&[1.0, 2.0]),
        norm: Some(3.0),
    }
    .encode()
    .unwrap();
    assert!(ExternalVector::decode(&patch(&pv, &3.0f64.to_le_bytes(), &inf64)).is_err());
    assert!(ExternalVector::decode(&patch(&pv, &one, &neg0_32)).is_err());
    // PQS8 scale and max error.
    let q = Quantizer {
        dims: 2,
        group_size: 1,
        count: 1,
        scales: v(&[0.5, 0.25]),
        max_error: 0.125,
        codes: vec![1, -1],
    }
    .encode()
    .unwrap();
    for from in [0.5f32, 0.125] {
        assert!(Quantizer::decode(&patch(&q, &from.to_le_bytes(), &nan32)).is_err());
        assert!(
            Quantizer::decode(&patch(&q, &from.to_le_bytes(), &(-from).to_le_bytes())).is_err()
        );
    }
    // PQPQ centroid and error statistics.
    let m = PqManifest {
        source: Cid([1; 32]),
        dims: 1,
        metric: prox_kernels::Metric::L2,
        config: PqConfig {
            subquantizers: 1,
            centroids: 1,
            iterations: 1,
            rerank_multiplier: 1,
            seed: 0,
        },
        code_root: Cid([2; 32]),
        codebooks: vec![Codebook {
            width: 1,
            centroids: v(&[7.0]),
        }],
        mean_squared_error: 0.5,
        max_squared_error: 2.0,
    }
    .encode()
    .unwrap();
    assert!(PqManifest::decode(&patch(&m, &7.0f32.to_le_bytes(), &nan32)).is_err());
    assert!(PqManifest::decode(&patch(&m, &0.5f64.to_le_bytes(), &neg0_64)).is_err());
    assert!(
        PqManifest::decode(&patch(&m, &2.0f64.to_le_bytes(), &(-2.0f64).to_le_bytes())).is_err()
    );
}

#[test]
fn descriptor_rejects_unknown_tags() {
    let mut d = descriptor();
    d.config.sq8_group_size = Some(3);
    d.directory.root = Some(Cid([9; 32]));
    d.directory.config.node_cache_max_nodes = Some(5);
    let bytes = d.encode().unwrap();
    assert_eq!(Descriptor::decode(&bytes).unwrap(), d);
    // Offsets of the tags in this encoding (see section 14.7's layout).
    let (sq, root_tag, enc, opt) = (39usize, 41usize, 88usize, 89usize);
    assert_eq!((bytes[sq], bytes[sq + 1], bytes[root_tag]), (1, 3, 1));
    assert_eq!((bytes[enc], bytes[opt], bytes[opt + 1]), (0, 1, 5));
    for (at, val) in [(sq, 2u8), (root_tag, 2), (enc, 4), (opt, 2)] {
        let mut bad = bytes.clone();
        bad[at] = val;
        assert!(Descriptor::decode(&bad).is_err(), "offset {at}");
    }
    // Custom encoding name that is not UTF-8.
    let mut c = descriptor();
    c.directory.config.encoding = crate::prolly::Encoding::Custom("ab".into());
    let cb = c.encode().unwrap();
    assert!(Descriptor::decode(&patch(&cb, b"\x02ab", b"\x02\xff\xfe")).is_err());
    // Directory chunking rules.
    let mut z = descriptor();
    z.directory.config.chunking_factor = 0;
    assert!(z.encode().is_err());
}
