//! `PRXN`: one physical node of the proximity hierarchy (section 5).

use super::{
    check_f32, check_f64, check_key, put_components, read_components, read_header, read_key,
    FORMAT_VERSION, MAGIC_NODE, MAX_ENTRIES,
};
use crate::cid::Cid;
use crate::codec::{put_blob, put_f64, put_uv, uv_len, Reader};
use crate::error::{Error, Result};

const OBJ: &str = "PRXN";

/// Fixed header bytes before the varints: magic, version, kind, flags, level.
const FIXED_HEADER: usize = 8;

/// The physical kind of a PRXN node (section 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A logical level-0 node that fits one page (id 1, level 0 only).
    Leaf,
    /// A logical level >= 1 node that fits one page (id 2).
    Route,
    /// A slice of an oversized logical node (id 3, any level).
    OverflowPage,
    /// An index over overflow pages or sub-directories (id 4, any level).
    OverflowDirectory,
}

impl NodeKind {
    /// The wire id.
    pub fn id(self) -> u8 {
        match self {
            NodeKind::Leaf => 1,
            NodeKind::Route => 2,
            NodeKind::OverflowPage => 3,
            NodeKind::OverflowDirectory => 4,
        }
    }

    /// Parses a wire id.
    pub fn from_id(id: u8) -> Option<NodeKind> {
        match id {
            1 => Some(NodeKind::Leaf),
            2 => Some(NodeKind::Route),
            3 => Some(NodeKind::OverflowPage),
            4 => Some(NodeKind::OverflowDirectory),
            _ => None,
        }
    }

    /// True when entries of a node of this kind at `level` carry child CIDs.
    pub fn has_children(self, level: u8) -> bool {
        match self {
            NodeKind::Leaf => false,
            NodeKind::Route | NodeKind::OverflowDirectory => true,
            NodeKind::OverflowPage => level > 0,
        }
    }

    /// True when entries of a node of this kind at `level` describe records
    /// directly (canonical point summaries).
    pub fn is_logical_leaf(self, level: u8) -> bool {
        match self {
            NodeKind::Leaf => true,
            NodeKind::OverflowPage => level == 0,
            NodeKind::Route | NodeKind::OverflowDirectory => false,
        }
    }
}

/// Where an entry's vector lives.
#[derive(Debug, Clone, PartialEq)]
pub enum VectorRef {
    /// Inline components (tag 0); exactly the descriptor's dimensions.
    Inline(Vec<f32>),
    /// A `PRXV` object (tag 1).
    External(Cid),
}

impl VectorRef {
    /// The inline components, if any.
    pub fn inline(&self) -> Option<&[f32]> {
        match self {
            VectorRef::Inline(v) => Some(v),
            VectorRef::External(_) => None,
        }
    }

    /// The external vector CID, if any.
    pub fn external(&self) -> Option<Cid> {
        match self {
            VectorRef::Inline(_) => None,
            VectorRef::External(c) => Some(*c),
        }
    }
}

/// One entry of a PRXN node: a point (logical leaves) or a subtree summary.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeEntry {
    /// The entry's key: the record key, or the representative's key.
    pub key: Vec<u8>,
    /// The entry's vector (the record's or the representative's).
    pub vector: VectorRef,
    /// Child node; present exactly when the node kind/level has children.
    pub child: Option<Cid>,
    /// Records below this entry (>= 1).
    pub count: u64,
    /// Euclidean covering radius of every record below around `vector`.
    pub radius: f64,
    /// Smallest record key below the entry.
    pub min_key: Vec<u8>,
    /// Largest record key below the entry.
    pub max_key: Vec<u8>,
}

impl NodeEntry {
    /// The canonical point summary of one record (logical leaves).
    pub fn point(key: Vec<u8>, vector: VectorRef) -> NodeEntry {
        NodeEntry {
            min_key: key.clone(),
            max_key: key.clone(),
            key,
            vector,
            child: None,
            count: 1,
            radius: 0.0,
        }
    }

    /// Encoded length of this entry inside a node of dimension `dims`.
    pub fn encoded_len(&self, dims: usize) -> usize {
        let vector = match &self.vector {
            VectorRef::Inline(_) => 4 * dims,
            VectorRef::External(_) => Cid::LEN,
        };
        entry_len(
            self.key.len(),
            vector,
            self.child.is_some(),
            self.count,
            self.min_key.len(),
            self.max_key.len(),
        )
    }
}

/// Encoded length of an entry from its parts; `vector_bytes` is `4·d` for an
/// inline vector and 32 for an external one.
pub(crate) fn entry_len(
    key: usize,
    vector_bytes: usize,
    has_child: bool,
    count: u64,
    min_key: usize,
    max_key: usize,
) -> usize {
    uv_len(key as u64)
        + key
        + 1
        + vector_bytes
        + if has_child { Cid::LEN } else { 0 }
        + uv_len(count)
        + 8
        + uv_len(min_key as u64)
        + min_key
        + uv_len(max_key as u64)
        + max_key
}

/// Encoded length of a node header (everything before the first entry).
pub(crate) fn header_len(subtree_count: u64, entries: usize, has_quantizer: bool) -> usize {
    FIXED_HEADER
        + uv_len(subtree_count)
        + uv_len(entries as u64)
        + if has_quantizer { Cid::LEN } else { 0 }
}

/// A decoded PRXN node.
///
/// Invariants (section 5.3, checked by [`ProxNode::validate`], encode and
/// decode): the kind is legal at the level; keys strictly ascend; child CIDs
/// are present exactly when the kind/level has children; inline vectors
/// have the map's dimensions and canonical components; counts are non-zero;
/// radii are finite, `>= 0` and never `-0.0`; `min_key <= key <= max_key`;
/// logical-leaf entries are point summaries; the counts sum to
/// `subtree_count`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxNode {
    /// Physical kind.
    pub kind: NodeKind,
    /// Hierarchy level (0 = records).
    pub level: u8,
    /// Records below this node.
    pub subtree_count: u64,
    /// `PQS8` over the entries' vectors (in entry order), when configured.
    pub quantizer: Option<Cid>,
    /// Entries, strictly ascending by key.
    pub entries: Vec<NodeEntry>,
}

impl ProxNode {
    /// The empty map's root: an empty level-0 leaf.
    pub fn empty_leaf(quantizer: Option<Cid>) -> ProxNode {
        ProxNode {
            kind: NodeKind::Leaf,
            level: 0,
            subtree_count: 0,
            quantizer,
            entries: Vec::new(),
        }
    }

    /// True when the entries carry child CIDs.
    pub fn has_children(&self) -> bool {
        self.kind.has_children(self.level)
    }

    /// True when the entries are records (point summaries).
    pub fn is_logical_leaf(&self) -> bool {
        self.kind.is_logical_leaf(self.level)
    }

    /// Child node CIDs in entry order.
    pub fn child_cids(&self) -> impl Iterator<Item = Cid> + '_ {
        self.entries.iter().filter_map(|e| e.child)
    }

    /// External vector CIDs in entry order.
    pub fn external_vectors(&self) -> impl Iterator<Item = Cid> + '_ {
        self.entries.iter().filter_map(|e| e.vector.external())
    }

    /// The encoded length of this node.
    pub fn encoded_len(&self, dims: usize) -> usize {
        header_len(
            self.subtree_count,
            self.entries.len(),
            self.quantizer.is_some(),
        ) + self
            .entries
            .iter()
            .map(|e| e.encoded_len(dims))
            .sum::<usize>()
    }

    /// Checks the invariants of section 5.3. `dims` (when known) is the
    /// descriptor's dimension count for inline vectors.
    pub fn validate(&self, dims: Option<u32>) -> Result<()> {
        let bad = |reason: String| Err(Error::invalid(OBJ, reason));
        match self.kind {
            NodeKind::Leaf if self.level != 0 => return bad("leaf above level 0".into()),
            NodeKind::Route if self.level == 0 => return bad("route at level 0".into()),
            NodeKind::OverflowDirectory if self.entries.is_empty() => {
                return bad("empty overflow directory".into())
            }
            _ => {}
        }
        if self.entries.len() as u64 > MAX_ENTRIES {
            return bad(format!(
                "{} entries exceed {MAX_ENTRIES}",
                self.entries.len()
            ));
        }
        let children = self.has_children();
        let leafy = self.is_logical_leaf();
        let mut total: u64 = 0;
        let mut prev: Option<&[u8]> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if let Some(p) = prev {
                if p >= e.key.as_slice() {
                    return bad(format!("entry {i}: keys not strictly ascending"));
                }
            }
            prev = Some(&e.key);
            if children != e.child.is_some() {
                return bad(format!(
                    "entry {i}: child presence does not match kind/level"
                ));
            }
            if let VectorRef::Inline(v) = &e.vector {
                if let Some(d) = dims {
                    if v.len() != d as usize {
                        return bad(format!(
                            "entry {i}: inline vector has {} components, expected {d}",
                            v.len()
                        ));
                    }
                }
                // One branch-free pass; the first offender names the error.
                let odd = v.iter().fold(false, |b, x| {
                    b | !x.is_finite() | (x.to_bits() == 0x8000_0000)
                });
                if odd {
                    for &x in v {
                        check_f32(OBJ, x)?;
                    }
                }
            }
            if e.count == 0 {
                return bad(format!("entry {i}: zero child count"));
            }
            check_f64(OBJ, e.radius)?;
            if e.radius < 0.0 {
                return bad(format!("entry {i}: negative radius"));
            }
            if e.min_key > e.key || e.key > e.max_key {
                return bad(format!("entry {i}: key outside [min_key, max_key]"));
            }
            if leafy
                && (e.count != 1
                    || e.radius.to_bits() != 0
                    || e.min_key != e.key
                    || e.max_key != e.key)
            {
                return bad(format!("entry {i}: not a canonical point summary"));
            }
            total = match total.checked_add(e.count) {
                Some(t) => t,
                None => return bad("child counts overflow u64".into()),
            };
        }
        if total != self.subtree_count {
            return bad(format!(
                "child counts sum to {total}, subtree count is {}",
                self.subtree_count
            ));
        }
        Ok(())
    }

    /// Encodes this node (after validating it).
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate(None)?;
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC_NODE);
        out.push(FORMAT_VERSION);
        out.push(self.kind.id());
        out.push(u8::from(self.quantizer.is_some()));
        out.push(self.level);
        put_uv(&mut out, self.subtree_count);
        put_uv(&mut out, self.entries.len() as u64);
        if let Some(q) = &self.quantizer {
            out.extend_from_slice(q.as_bytes());
        }
        for e in &self.entries {
            check_key(OBJ, &e.key)?;
            check_key(OBJ, &e.min_key)?;
            check_key(OBJ, &e.max_key)?;
            put_blob(&mut out, &e.key);
            match &e.vector {
                VectorRef::Inline(v) => {
                    out.push(0);
                    put_components(&mut out, OBJ, v)?;
                }
                VectorRef::External(c) => {
                    out.push(1);
                    out.extend_from_slice(c.as_bytes());
                }
            }
            if let Some(c) = &e.child {
                out.extend_from_slice(c.as_bytes());
            }
            put_uv(&mut out, e.count);
            put_f64(&mut out, OBJ, e.radius)?;
            put_blob(&mut out, &e.min_key);
            put_blob(&mut out, &e.max_key);
        }
        Ok(out)
    }

    /// Decodes a node of a map with `dims` dimensions.
    pub fn decode(bytes: &[u8], dims: u32) -> Result<ProxNode> {
        let mut r = Reader::new(bytes, OBJ);
        read_header(&mut r, MAGIC_NODE)?;
        let kind_id = r.u8()?;
        let kind = NodeKind::from_id(kind_id)
            .ok_or_else(|| r.invalid(format!("unknown kind {kind_id}")))?;
        let flags = r.u8()?;
        if flags & !1 != 0 {
            return Err(r.invalid(format!("unknown flags {flags:#04x}")));
        }
        let level = r.u8()?;
        let subtree_count = r.uv()?;
        let n = r.uv()?;
        if n > MAX_ENTRIES {
            return Err(r.invalid(format!("{n} entries exceed {MAX_ENTRIES}")));
        }
        let quantizer = if flags & 1 != 0 { Some(r.cid()?) } else { None };
        // Every entry takes at least 12 bytes (a key length, a tag, a count,
        // the 8-byte radius, two bound lengths), so bound the allocation.
        if n > (r.remaining() / 12) as u64 {
            return Err(r.invalid(format!("{n} entries impossible in {} bytes", r.remaining())));
        }
        let children = kind.has_children(level);
        let mut entries = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let key = read_key(&mut r)?;
            let vector = match r.u8()? {
                0 => VectorRef::Inline(read_components(&mut r, dims as usize)?),
                1 => VectorRef::External(r.cid()?),
                t => return Err(r.invalid(format!("unknown vector tag {t}"))),
            };
            let child = if children { Some(r.cid()?) } else { None };
            let count = r.uv()?;
            let radius = r.f64()?;
            let min_key = read_key(&mut r)?;
            let max_key = read_key(&mut r)?;
            entries.push(NodeEntry {
                key,
                vector,
                child,
                count,
                radius,
                min_key,
                max_key,
            });
        }
        r.finish()?;
        let node = ProxNode {
            kind,
            level,
            subtree_count,
            quantizer,
            entries,
        };
        node.validate(Some(dims))?;
        Ok(node)
    }
}
