//! prox-fuzz-bodies: the body of every fuzz target in `fuzz/` as a plain
//! function of the input bytes. The cargo-fuzz targets (nightly,
//! libFuzzer) call these; `tests/smoke.rs` runs each on stable over its
//! local corpus (if any), valid seeds and a few thousand seeded random and mutated inputs,
//! so CI exercises every decoder's properties without nightly.
//!
//! Each function panics only when a property fails (that is the finding);
//! on any input the decoders themselves must not panic.

use futures::executor::block_on;
use futures::io::Cursor;
use prox_engine::envelope::{get_large_value, ValueRef, VersionedValue};
use prox_engine::manifest::RootManifest;
use prox_engine::prolly::Node;
use prox_engine::proximity::{
    ContentRoot, Descriptor, ExternalVector, HnswManifest, HnswNode, PqManifest, ProxNode,
    Quantizer, Record,
};
use prox_engine::refs::{links, root_links, sniff, BlockKind};
use prox_engine::store::mmap::format::{
    encode_block, encode_commit, scan, Item, BLOCK_HEADER_LEN, BLOCK_OVERHEAD, COMMIT_LEN,
};
use prox_engine::store::MemStore;
use prox_serve::bodies::{self, BodyLimits};
use prox_sync::protocol::codec;
use prox_sync::protocol::frames::{ClientFrame, ServerFrame};
use prox_sync::protocol::messages::{Request, Response};

/// A fuzz target body.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/<name>.rs` file.
pub const TARGETS: &[(&str, Target)] = &[
    ("crab_node", crab_node),
    ("envelope", envelope),
    ("http_body", http_body),
    ("proximity_content_root", proximity_content_root),
    ("proximity_descriptor", proximity_descriptor),
    ("proximity_hnsn", proximity_hnsn),
    ("proximity_hnsw", proximity_hnsw),
    ("proximity_links", proximity_links),
    ("proximity_node", proximity_node),
    ("proximity_pq", proximity_pq),
    ("proximity_quantizer", proximity_quantizer),
    ("proximity_record", proximity_record),
    ("proximity_vector", proximity_vector),
    ("root_manifest", root_manifest),
    ("store_segment", store_segment),
    ("sync_control", sync_control),
    ("sync_frames", sync_frames),
    ("sync_patch", sync_patch),
];

/// Node decoder: every accepted `CRAB` input re-encodes to the same bytes
/// (the strict decoder admits exactly one encoding per node).
pub fn crab_node(data: &[u8]) {
    if let Ok(node) = Node::decode(data) {
        let bytes = node.encode();
        if data.starts_with(b"CRAB") {
            assert_eq!(
                bytes, data,
                "accepted CRAB input must round-trip byte-exactly"
            );
        }
        assert_eq!(Node::decode(&bytes).expect("re-encoded node decodes"), node);
        let _ = node.child_cids();
    }
}

/// PLVV and PLVB decoders: accepted inputs round-trip exactly.
pub fn envelope(data: &[u8]) {
    if let Ok(v) = VersionedValue::decode(data) {
        assert_eq!(v.encode(), data);
    }
    if let Ok(r) = ValueRef::decode(data) {
        assert_eq!(r.encode(), data);
    }
    let _ = get_large_value(&MemStore::new(), data);
}

/// Limits small enough that a fuzzer reaches them.
const HTTP_LIMITS: BodyLimits = BodyLimits {
    max_k: 1000,
    max_batch: 16,
};

/// HTTP request bodies (`search`, `search:batch`, JSON and binary): the first byte picks
/// the body kind and the map's dimensions (1..=8), the rest is the body.
/// An accepted body yields exactly the vector shape asked for, every
/// component finite, and the checked reader gives the same answer as the
/// single-pass one (same value or same error).
pub fn http_body(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let dims = usize::from(sel % 8) + 1;
    if sel & 0x80 == 0 {
        let fast = bodies::search(body, dims, HTTP_LIMITS);
        if let Ok((v, q)) = &fast {
            assert_eq!(v.len(), dims);
            assert!(v.iter().all(|x| x.is_finite()));
            assert!(q.k >= 1 && q.k <= HTTP_LIMITS.max_k);
        }
        assert_eq!(fast, bodies::search_checked(body, dims, HTTP_LIMITS));
    } else {
        let fast = bodies::batch(body, dims, HTTP_LIMITS);
        if let Ok((v, n, _)) = &fast {
            assert!(*n >= 1 && *n <= HTTP_LIMITS.max_batch);
            assert_eq!(v.len(), n * dims);
            assert!(v.iter().all(|x| x.is_finite()));
        }
        assert_eq!(fast, bodies::batch_checked(body, dims, HTTP_LIMITS));
    }
    http_binary_body(dims, body);
}

/// The same input as an `application/octet-stream` search: the text up to
/// the first NUL byte is the query string (`name=value&...`), the rest the
/// f32 rows. An accepted request has the asked shape, finite components.
fn http_binary_body(dims: usize, data: &[u8]) {
    let (text, rows) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&data[..0], data),
    };
    let text = String::from_utf8_lossy(text);
    let pairs: Vec<(String, String)> = text
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect();
    if let Ok((v, q)) = bodies::search_binary(rows, &pairs, dims, HTTP_LIMITS) {
        assert_eq!(v.len(), dims);
        assert!(v.iter().all(|x| x.is_finite()));
        assert!(q.k >= 1 && q.k <= HTTP_LIMITS.max_k);
    }
    if let Ok((v, n, _)) = bodies::batch_binary(rows, &pairs, dims, HTTP_LIMITS) {
        assert!((1..=HTTP_LIMITS.max_batch).contains(&n));
        assert_eq!(v.len(), n * dims);
        assert!(v.iter().all(|x| x.is_finite()));
    }
}

/// CRMF content root (unsorted metadata decodes, so compare values).
pub fn proximity_content_root(data: &[u8]) {
    if let Ok(m) = ContentRoot::decode(data) {
        let again = m.encode().expect("a decoded content root encodes");
        assert_eq!(
            ContentRoot::decode(&again).expect("re-encoded root decodes"),
            m
        );
    }
}

/// PRXI descriptor: what decodes re-encodes to the same bytes.
pub fn proximity_descriptor(data: &[u8]) {
    if let Ok(d) = Descriptor::decode(data) {
        assert_eq!(d.encode().expect("a decoded descriptor encodes"), data);
    }
}

/// HNSN graph value: what decodes re-encodes to the same bytes.
pub fn proximity_hnsn(data: &[u8]) {
    if let Ok(n) = HnswNode::decode(data) {
        assert_eq!(n.encode().expect("a decoded graph node encodes"), data);
    }
}

/// HNSW manifest: what decodes re-encodes to the same bytes.
pub fn proximity_hnsw(data: &[u8]) {
    if let Ok(m) = HnswManifest::decode(data) {
        assert_eq!(m.encode().expect("a decoded manifest encodes"), data);
    }
}

/// Typed link extraction (`refs`) for every block kind: the walker GC and
/// sync rely on never panics.
pub fn proximity_links(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let kind = match sel % 12 {
        0 => BlockKind::CrabNode,
        1 => BlockKind::Descriptor,
        2 => BlockKind::ProxNode {
            dims: u32::from(sel / 10 % 8) + 1,
        },
        3 => BlockKind::ExternalVector,
        4 => BlockKind::Quantizer,
        5 => BlockKind::PqManifest,
        6 => BlockKind::HnswManifest,
        7 => BlockKind::ContentRoot,
        8 => BlockKind::Blob,
        9 => BlockKind::LayoutManifest,
        10 => BlockKind::LayoutChunk,
        _ => {
            let _ = root_links(rest);
            return;
        }
    };
    let _ = sniff(rest);
    let _ = links(kind, rest);
}

/// PRXN node (dims from the first byte): exact round trip and length.
pub fn proximity_node(data: &[u8]) {
    let Some((&d, rest)) = data.split_first() else {
        return;
    };
    let dims = u32::from(d % 8) + 1;
    if let Ok(n) = ProxNode::decode(rest, dims) {
        assert_eq!(n.encode().expect("a decoded node encodes"), rest);
        assert_eq!(n.encoded_len(dims as usize), rest.len());
    }
}

/// PQPQ manifest: what decodes re-encodes to the same bytes.
pub fn proximity_pq(data: &[u8]) {
    if let Ok(m) = PqManifest::decode(data) {
        assert_eq!(m.encode().expect("a decoded PQ manifest encodes"), data);
    }
}

/// PQS8 quantizer: what decodes re-encodes to the same bytes.
pub fn proximity_quantizer(data: &[u8]) {
    if let Ok(q) = Quantizer::decode(data) {
        assert_eq!(q.encode().expect("a decoded quantizer encodes"), data);
    }
}

/// PRVR record (dims from the first byte): exact round trip.
pub fn proximity_record(data: &[u8]) {
    let Some((&d, rest)) = data.split_first() else {
        return;
    };
    let dims = u32::from(d % 8) + 1;
    if let Ok(r) = Record::decode(rest, dims) {
        assert_eq!(r.encode().expect("a decoded record encodes"), rest);
    }
}

/// PRXV external vector: what decodes re-encodes to the same bytes.
pub fn proximity_vector(data: &[u8]) {
    if let Ok(v) = ExternalVector::decode(data) {
        assert_eq!(v.encode().expect("a decoded vector encodes"), data);
    }
}

/// RootManifest: accepted manifests re-encode to bytes that decode to the
/// same manifest.
pub fn root_manifest(data: &[u8]) {
    if let Ok(m) = RootManifest::decode(data) {
        let bytes = m.encode();
        assert_eq!(
            RootManifest::decode(&bytes).expect("re-encoded manifest decodes"),
            m
        );
    }
}

/// The MmapStore segment scanner (the recovery parser for whatever a crash
/// or a damaged disk left): items tile the scanned prefix in order, and
/// every intact block re-encodes to exactly the bytes it was read from.
pub fn store_segment(data: &[u8]) {
    let s = scan(data);
    assert!(s.end <= data.len());
    let mut pos = 0usize;
    for item in &s.items {
        match *item {
            Item::Block {
                cid,
                offset,
                len,
                intact,
            } => {
                assert_eq!(offset, pos);
                let end = offset + BLOCK_OVERHEAD + len;
                assert!(end <= s.end);
                if intact {
                    let mut again = Vec::new();
                    encode_block(
                        &mut again,
                        &cid,
                        &data[offset + BLOCK_HEADER_LEN..offset + BLOCK_HEADER_LEN + len],
                    );
                    assert_eq!(again.as_slice(), &data[offset..end]);
                }
                pos = end;
            }
            Item::Commit { offset } => {
                assert_eq!(offset, pos);
                let mut again = Vec::new();
                encode_commit(&mut again);
                assert_eq!(again.as_slice(), &data[offset..offset + COMMIT_LEN]);
                pos = offset + COMMIT_LEN;
            }
            Item::Garbage { start, end } => {
                assert_eq!(start, pos);
                assert!(end > start && end <= s.end);
                pos = end;
            }
        }
    }
    assert_eq!(pos, s.end);
}

/// Control messages from a hostile peer (`/prox/ctl/1`, CBOR): what
/// decodes re-encodes to bytes that decode again.
pub fn sync_control(data: &[u8]) {
    if let Ok(req) = codec::decode::<Request>(data) {
        let bytes = codec::encode(&req).expect("a decoded request encodes");
        codec::decode::<Request>(&bytes).expect("an encoded request decodes");
    }
    if let Ok(resp) = codec::decode::<Response>(data) {
        let bytes = codec::encode(&resp).expect("a decoded response encodes");
        codec::decode::<Response>(&bytes).expect("an encoded response decodes");
    }
}

/// A small block limit keeps allocations bounded whatever the input says.
const MAX_BLOCK: u32 = 1 << 16;

/// Block-session frames from a hostile peer (`/prox/blocks/1`): block
/// lengths never exceed the limit; a client frame read back re-encodes to
/// a frame that reads back.
pub fn sync_frames(data: &[u8]) {
    let mut io = Cursor::new(data);
    for _ in 0..64 {
        match block_on(ClientFrame::read(&mut io)) {
            Ok(Some(frame)) => {
                let mut out = Vec::new();
                if frame.encode(&mut out).is_ok() {
                    let again = block_on(ClientFrame::read(&mut Cursor::new(&out[..])));
                    assert!(
                        matches!(again, Ok(Some(_))),
                        "re-encoded frame does not read"
                    );
                }
            }
            _ => break,
        }
    }
    let mut io = Cursor::new(data);
    for _ in 0..64 {
        match block_on(ServerFrame::read(&mut io, MAX_BLOCK)) {
            Ok(ServerFrame::Block(b)) => assert!(b.len() <= MAX_BLOCK as usize),
            Ok(_) => {}
            Err(_) => break,
        }
    }
}

/// Block patches from a hostile peer (`DELTA`, `ZDELTA`, `ZBLOCK` frames):
/// applying or decompressing any bytes against a base never panics, never
/// yields more than the limit, and a patch the encoder makes from the input
/// rebuilds the input exactly.
pub fn sync_patch(data: &[u8]) {
    use prox_sync::delta::{apply, decompress, encode};
    const MAX: u64 = 1 << 16;
    let (base, rest) = data.split_at(data.len() / 2);
    if let Ok(out) = apply(base, rest, MAX) {
        assert!(out.len() as u64 <= MAX, "patch rebuilt past the limit");
    }
    for prefix in [base, &[][..]] {
        if let Ok(out) = decompress(prefix, rest, MAX) {
            assert!(out.len() as u64 <= MAX, "zstd frame decoded past the limit");
        }
    }
    let patch = encode(base, rest);
    assert_eq!(
        apply(base, &patch, MAX).as_deref(),
        Ok(rest),
        "encoded patch does not rebuild its target"
    );
}
