//! Typed block links: the one place that knows which blocks a block points
//! at. Garbage collection and sync walk the block graph with these
//! functions; they call the real decoders, so a link is followed only if
//! the block that carries it is itself valid.
//!
//! Some kinds cannot be recognised from their bytes alone: a `PRXN` node
//! needs its map's dimensions to decode, and a blob is arbitrary bytes. The
//! walker therefore carries each child's [`BlockKind`] from its parent,
//! starting at a named root ([`root_links`]).
//!
//! How a named root points at a proximity map (docs/formats-proximity.md):
//! the root's `RootManifest` uses the typed-root config (min 1, max 1,
//! factor 1, seed 0, custom encoding `typed-content-root-v1`, cache limits
//! 0/0) and its root CID names a `CRMF`; the `CRMF` (kind 2) names the
//! `PRXI` descriptor, and its metadata may name sidecars by CID:
//! `prox.hnsw` -> `HNSW` manifest, `prox.pq` -> `PQPQ` manifest, and each
//! `prox.si.*` -> the root node of a secondary-index tree (catalog, control,
//! one per field index), and each `prox.layout.*` -> a `PRLY` search-layout
//! manifest (which links its `PRLC` chunks).

use crate::cid::Cid;
use crate::envelope::{ValueRef, VALUE_REF_MAGIC};
use crate::error::{Error, Result};
use crate::manifest::RootManifest;
use crate::prolly;
use crate::proximity::format::{
    self, decode_chunk, ContentRoot, Descriptor, ExternalVector, HnswManifest, LayoutManifest,
    PqManifest, ProxNode, Quantizer, RootKind, META_LAYOUT_PREFIX,
};
// The typed-root conventions live with the `CRMF` codec; re-exported here
// because walkers and publishers meet them through this module.
pub use crate::proximity::format::{
    is_typed_root_config, typed_root_config, META_HNSW, META_PQ, META_SECONDARY_PREFIX,
    TYPED_ROOT_ENCODING,
};

/// What a block is, as far as link extraction is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// A `CRAB` (or legacy CBOR) prolly tree node.
    CrabNode,
    /// A `PRXI` descriptor.
    Descriptor,
    /// A `PRXN` node of a map with `dims` dimensions.
    ProxNode {
        /// The map's dimensions (needed to decode inline vectors).
        dims: u32,
    },
    /// A `PRXV` external vector.
    ExternalVector,
    /// A `PQS8` node-local quantizer.
    Quantizer,
    /// A `PQPQ` manifest.
    PqManifest,
    /// An `HNSW` manifest.
    HnswManifest,
    /// A `CRMF` typed content root.
    ContentRoot,
    /// A `PRLY` search-layout manifest.
    LayoutManifest,
    /// A `PRLC` search-layout payload chunk.
    LayoutChunk,
    /// Opaque large-value bytes referenced from a `PLVB` envelope.
    Blob,
}

/// Recognises the context-free kinds by magic. `PRXN` (needs dimensions),
/// blobs and legacy CBOR nodes return `None`.
pub fn sniff(bytes: &[u8]) -> Option<BlockKind> {
    let magic: &[u8; 4] = bytes.get(..4)?.try_into().ok()?;
    Some(match magic {
        prolly::MAGIC => BlockKind::CrabNode,
        format::MAGIC_DESCRIPTOR => BlockKind::Descriptor,
        format::MAGIC_VECTOR => BlockKind::ExternalVector,
        format::MAGIC_QUANTIZER => BlockKind::Quantizer,
        format::MAGIC_PQ => BlockKind::PqManifest,
        format::MAGIC_HNSW => BlockKind::HnswManifest,
        format::MAGIC_CONTENT_ROOT => BlockKind::ContentRoot,
        format::MAGIC_LAYOUT => BlockKind::LayoutManifest,
        format::MAGIC_LAYOUT_CHUNK => BlockKind::LayoutChunk,
        _ => return None,
    })
}

/// The CID named by a `PLVB` blob reference, if `value` is a valid one
/// (anything else is an inline value and links nowhere).
fn blob_ref(value: &[u8]) -> Option<Cid> {
    if !value.starts_with(VALUE_REF_MAGIC) {
        return None;
    }
    match ValueRef::decode(value) {
        Ok(ValueRef::Blob { cid, .. }) => Some(cid),
        _ => None,
    }
}

/// Pushes `(cid, kind)` unless the same CID is already listed.
fn push(out: &mut Vec<(Cid, BlockKind)>, cid: Cid, kind: BlockKind) {
    if !out.iter().any(|(c, _)| *c == cid) {
        out.push((cid, kind));
    }
}

/// The blocks `bytes` (a block of kind `kind`) points at, each with its
/// kind, in a deterministic order without duplicates. Decoding errors are
/// returned, never skipped.
pub fn links(kind: BlockKind, bytes: &[u8]) -> Result<Vec<(Cid, BlockKind)>> {
    let mut out = Vec::new();
    match kind {
        BlockKind::CrabNode => {
            let node = prolly::Node::decode(bytes)?;
            if node.leaf {
                for v in &node.vals {
                    if let Some(c) = blob_ref(v) {
                        push(&mut out, c, BlockKind::Blob);
                    }
                }
            } else {
                for c in node.child_cids()? {
                    push(&mut out, c, BlockKind::CrabNode);
                }
            }
        }
        BlockKind::Descriptor => {
            let d = Descriptor::decode(bytes)?;
            if let Some(root) = d.directory.root {
                push(&mut out, root, BlockKind::CrabNode);
            }
            push(
                &mut out,
                d.root,
                BlockKind::ProxNode {
                    dims: d.config.dims,
                },
            );
        }
        BlockKind::ProxNode { dims } => {
            let n = ProxNode::decode(bytes, dims)?;
            if let Some(q) = n.quantizer {
                push(&mut out, q, BlockKind::Quantizer);
            }
            for e in &n.entries {
                if let Some(c) = e.vector.external() {
                    push(&mut out, c, BlockKind::ExternalVector);
                }
                if let Some(c) = e.child {
                    push(&mut out, c, BlockKind::ProxNode { dims });
                }
            }
        }
        BlockKind::ExternalVector => {
            ExternalVector::decode(bytes)?;
        }
        BlockKind::Quantizer => {
            Quantizer::decode(bytes)?;
        }
        BlockKind::PqManifest => {
            let m = PqManifest::decode(bytes)?;
            push(&mut out, m.source, BlockKind::Descriptor);
            push(&mut out, m.code_root, BlockKind::CrabNode);
        }
        BlockKind::HnswManifest => {
            let m = HnswManifest::decode(bytes)?;
            push(&mut out, m.source, BlockKind::Descriptor);
            push(&mut out, m.graph_root, BlockKind::CrabNode);
        }
        BlockKind::LayoutManifest => {
            let m = LayoutManifest::decode(bytes)?;
            push(&mut out, m.source, BlockKind::Descriptor);
            for c in m.chunks {
                push(&mut out, c, BlockKind::LayoutChunk);
            }
        }
        BlockKind::LayoutChunk => {
            decode_chunk(bytes)?;
        }
        BlockKind::ContentRoot => {
            let m = ContentRoot::decode(bytes)?;
            let root_kind = match m.kind {
                RootKind::OrderedNode | RootKind::HnswPage => BlockKind::CrabNode,
                RootKind::ProximityDescriptor => BlockKind::Descriptor,
                RootKind::ProximityNode | RootKind::OverflowDirectory | RootKind::OverflowPage => {
                    let dims = m
                        .dims
                        .ok_or_else(|| Error::invalid("CRMF", "PRXN root without dimensions"))?;
                    BlockKind::ProxNode { dims }
                }
                RootKind::ExternalVector => BlockKind::ExternalVector,
                RootKind::ScalarQuantizer => BlockKind::Quantizer,
                RootKind::PqManifest => BlockKind::PqManifest,
                RootKind::HnswManifest => BlockKind::HnswManifest,
            };
            push(&mut out, m.root, root_kind);
            let secondary = m
                .metadata
                .keys()
                .filter(|k| k.starts_with(META_SECONDARY_PREFIX))
                .map(|k| (k.as_slice(), BlockKind::CrabNode));
            let layouts = m
                .metadata
                .keys()
                .filter(|k| k.starts_with(META_LAYOUT_PREFIX))
                .map(|k| (k.as_slice(), BlockKind::LayoutManifest));
            for (key, kind) in [
                (META_HNSW, BlockKind::HnswManifest),
                (META_PQ, BlockKind::PqManifest),
            ]
            .into_iter()
            .chain(secondary)
            .chain(layouts)
            {
                if let Some(v) = m.metadata.get(key) {
                    let c = Cid::from_slice(v).ok_or_else(|| {
                        Error::invalid(
                            "CRMF",
                            format!(
                                "metadata {} is {} bytes, not a CID",
                                String::from_utf8_lossy(key),
                                v.len()
                            ),
                        )
                    })?;
                    push(&mut out, c, kind);
                }
            }
        }
        BlockKind::Blob => {}
    }
    Ok(out)
}

/// The blocks a named root's value (`RootManifest` bytes) points at: a
/// `CRMF` when the manifest uses the typed-root config, otherwise the root
/// node of an ordered tree. An empty root has no links.
pub fn root_links(root_manifest_bytes: &[u8]) -> Result<Vec<(Cid, BlockKind)>> {
    let m = RootManifest::decode(root_manifest_bytes)?;
    let Some(root) = m.root else {
        return Ok(Vec::new());
    };
    let kind = if is_typed_root_config(&m.config) {
        BlockKind::ContentRoot
    } else {
        BlockKind::CrabNode
    };
    Ok(vec![(root, kind)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proximity::format::{NodeEntry, NodeKind, VectorRef};

    #[test]
    fn sniff_by_magic() {
        assert_eq!(sniff(b"PRXI\x02"), Some(BlockKind::Descriptor));
        assert_eq!(sniff(b"CRMF\x01"), Some(BlockKind::ContentRoot));
        assert_eq!(sniff(b"PRXN\x02"), None);
        assert_eq!(sniff(b"PR"), None);
    }

    #[test]
    fn prxn_links_children_vectors_and_quantizer() {
        let n = ProxNode {
            kind: NodeKind::Route,
            level: 1,
            subtree_count: 3,
            quantizer: Some(Cid([9; 32])),
            entries: vec![
                NodeEntry {
                    key: b"a".to_vec(),
                    vector: VectorRef::External(Cid([1; 32])),
                    child: Some(Cid([2; 32])),
                    count: 2,
                    radius: 1.0,
                    min_key: b"a".to_vec(),
                    max_key: b"b".to_vec(),
                },
                NodeEntry {
                    key: b"c".to_vec(),
                    vector: VectorRef::External(Cid([1; 32])),
                    child: Some(Cid([3; 32])),
                    count: 1,
                    radius: 0.0,
                    min_key: b"c".to_vec(),
                    max_key: b"c".to_vec(),
                },
            ],
        };
        let got = links(BlockKind::ProxNode { dims: 2 }, &n.encode().unwrap()).unwrap();
        let dims = BlockKind::ProxNode { dims: 2 };
        assert_eq!(
            got,
            vec![
                (Cid([9; 32]), BlockKind::Quantizer),
                (Cid([1; 32]), BlockKind::ExternalVector),
                (Cid([2; 32]), dims),
                (Cid([3; 32]), dims),
            ]
        );
        assert!(links(BlockKind::ProxNode { dims: 2 }, b"PRXN\x01").is_err());
    }

    #[test]
    fn content_root_follows_metadata_sidecars() {
        let mut m = ContentRoot::new(RootKind::ProximityDescriptor, Cid([4; 32]));
        m.metadata.insert(META_HNSW.to_vec(), vec![5; 32]);
        m.metadata.insert(META_PQ.to_vec(), vec![6; 32]);
        let got = links(BlockKind::ContentRoot, &m.encode().unwrap()).unwrap();
        assert_eq!(
            got,
            vec![
                (Cid([4; 32]), BlockKind::Descriptor),
                (Cid([5; 32]), BlockKind::HnswManifest),
                (Cid([6; 32]), BlockKind::PqManifest),
            ]
        );
        m.metadata.insert(META_PQ.to_vec(), vec![6; 31]);
        assert!(links(BlockKind::ContentRoot, &m.encode().unwrap()).is_err());
        let node = ContentRoot::new(RootKind::ProximityNode, Cid([4; 32]));
        assert!(links(BlockKind::ContentRoot, &node.encode().unwrap()).is_err());
    }

    #[test]
    fn root_links_distinguish_typed_roots() {
        let typed = RootManifest::new(Some(Cid([7; 32])), typed_root_config()).encode();
        assert_eq!(
            root_links(&typed).unwrap(),
            vec![(Cid([7; 32]), BlockKind::ContentRoot)]
        );
        let plain = RootManifest::new(Some(Cid([8; 32])), prolly::Config::default()).encode();
        assert_eq!(
            root_links(&plain).unwrap(),
            vec![(Cid([8; 32]), BlockKind::CrabNode)]
        );
        let empty = RootManifest::new(None, prolly::Config::default()).encode();
        assert!(root_links(&empty).unwrap().is_empty());
    }

    #[test]
    fn crab_leaf_blob_refs_are_links() {
        let mut blob = b"PLVB\x01\x01".to_vec();
        blob.extend_from_slice(&[0xab; 32]);
        blob.extend_from_slice(&7u64.to_be_bytes());
        assert_eq!(blob_ref(&blob), Some(Cid([0xab; 32])));
        let mut leaf = prolly::Node::empty(&prolly::Config::default(), 0);
        leaf.keys = vec![b"k1".to_vec(), b"k2".to_vec()];
        leaf.vals = vec![blob, b"plain".to_vec()];
        assert_eq!(
            links(BlockKind::CrabNode, &leaf.encode()).unwrap(),
            vec![(Cid([0xab; 32]), BlockKind::Blob)]
        );
    }
}
