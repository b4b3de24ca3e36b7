//! Persistence: `HNSW` manifest + `CRAB` tree of key -> `HNSN`
//! (proximity-format.md section 8), and loading back into memory.
//!
//! The graph tree uses the pinned ordered config of section 7/8 (min 4,
//! max 1 048 576, factor 128, seed 0, raw, no cache limits), spelled out here
//! so that a change of the tree defaults cannot change sidecar CIDs.

use super::{BuildGraph, Hnsw, SearchGraph};
use crate::accel::params::HnswParams;
use crate::accel::vectors::{check_records, Arena, Rows};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::prolly;
use crate::proximity::format::HnswNodeRef;
use crate::proximity::{HnswManifest, HnswNode};
use crate::store::BlockStore;
use prox_kernels::Metric;
use rayon::prelude::*;
use std::collections::HashMap;
use xxhash_rust::xxh64::Xxh64Builder;

/// The pinned ordered config of sidecar trees.
pub(crate) fn sidecar_tree_config() -> prolly::Config {
    prolly::Config::new(4, 1_048_576, 128, 0)
}

/// Every `(key, value)` of a `CRAB` tree, in order (every block is
/// hash-checked by the store and decoded strictly); see [`read_leaves`].
#[cfg(test)]
pub(crate) fn read_tree(store: &dyn BlockStore, root: Cid) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let leaves = read_leaves(store, root, |bytes| {
        let mut out = Vec::new();
        prolly::visit(&bytes, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(())
        })?;
        Ok(out)
    })?;
    Ok(leaves.into_iter().flatten().collect())
}

/// What one node of a level gave.
enum Visited<T> {
    Inner(Vec<Cid>),
    Leaf(T),
}

/// `leaf(bytes)` of every leaf of a `CRAB` tree, in key order (the store's
/// handle: for a mapped store, no copy). Walked level
/// by level: the nodes of each level (the leaves hold nearly every byte)
/// are fetched (hash-checked by the store) and visited in parallel, in
/// order; a leaf's bytes go to `leaf`, which decodes them with
/// [`prolly::visit`] straight into whatever the caller keeps, so no entry
/// is copied twice. A level that mixes leaves and inner nodes is
/// [`Error::Corrupt`] (a prolly tree's leaves are all at level 0).
pub(crate) fn read_leaves<T: Send>(
    store: &dyn BlockStore,
    root: Cid,
    leaf: impl Fn(bytes::Bytes) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let mut level = vec![root];
    loop {
        let nodes = level
            .par_iter()
            .map(|cid| {
                let bytes = store.get(cid)?.ok_or(Error::NotFound { cid: *cid })?;
                if prolly::level_of(&bytes)? == 0 {
                    return Ok(Visited::Leaf(leaf(bytes)?));
                }
                let mut children = Vec::new();
                prolly::visit(&bytes, |_, v| {
                    children.push(Cid::from_slice(v).ok_or_else(|| Error::Corrupt {
                        cid: *cid,
                        reason: format!("internal value of {} bytes is not a CID", v.len()),
                    })?);
                    Ok(())
                })?;
                Ok(Visited::Inner(children))
            })
            .collect::<Result<Vec<Visited<T>>>>()?;
        let leaves = nodes
            .iter()
            .filter(|n| matches!(n, Visited::Leaf(_)))
            .count();
        if leaves == nodes.len() {
            return Ok(nodes
                .into_iter()
                .filter_map(|n| match n {
                    Visited::Leaf(t) => Some(t),
                    Visited::Inner(_) => None,
                })
                .collect());
        }
        if leaves > 0 {
            return Err(Error::Corrupt {
                cid: root,
                reason: "tree has leaves at different depths".into(),
            });
        }
        level = nodes
            .into_iter()
            .flat_map(|n| match n {
                Visited::Inner(c) => c,
                Visited::Leaf(_) => Vec::new(),
            })
            .collect();
    }
}

/// Record ids by key, for resolving every neighbour key of a graph (tens
/// of lookups per record): keys that are consecutive 8-byte big-endian
/// integers (what `prox build` gives vector files) by subtraction, other
/// 8-byte keys through a hash of the integer, any other keys through a
/// hash of the bytes.
enum KeyIds<'a> {
    Dense { first: u64, len: u64 },
    Wide(HashMap<u64, u32, Xxh64Builder>),
    Bytes(HashMap<&'a [u8], u32, Xxh64Builder>),
}

impl<'a> KeyIds<'a> {
    fn new(keys: &'a [Vec<u8>]) -> KeyIds<'a> {
        let wide = |k: &[u8]| -> Option<u64> { Some(u64::from_be_bytes(k.try_into().ok()?)) };
        let first = keys.first().and_then(|k| wide(k));
        if let Some(first) = first {
            let dense = keys
                .iter()
                .enumerate()
                .all(|(i, k)| wide(k) == first.checked_add(i as u64));
            if dense {
                return KeyIds::Dense {
                    first,
                    len: keys.len() as u64,
                };
            }
            if keys.iter().all(|k| k.len() == 8) {
                let mut m = HashMap::with_capacity_and_hasher(keys.len(), Xxh64Builder::new(0));
                for (i, k) in keys.iter().enumerate() {
                    m.insert(wide(k).expect("8 bytes"), i as u32);
                }
                return KeyIds::Wide(m);
            }
        }
        let mut m = HashMap::with_capacity_and_hasher(keys.len(), Xxh64Builder::new(0));
        for (i, k) in keys.iter().enumerate() {
            m.insert(k.as_slice(), i as u32);
        }
        KeyIds::Bytes(m)
    }

    /// The id of the record `key`, if the map holds it.
    #[inline]
    fn get(&self, key: &[u8]) -> Option<u32> {
        match self {
            KeyIds::Dense { first, len } => {
                let k = u64::from_be_bytes(key.try_into().ok()?);
                let i = k.checked_sub(*first)?;
                (i < *len).then_some(i as u32)
            }
            KeyIds::Wide(m) => m.get(&u64::from_be_bytes(key.try_into().ok()?)).copied(),
            KeyIds::Bytes(m) => m.get(key).copied(),
        }
    }
}

/// A persisted HNSW sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HnswSidecar {
    /// CID of the `HNSW` manifest.
    pub manifest_cid: Cid,
    /// The manifest.
    pub manifest: HnswManifest,
}

impl Hnsw {
    /// The encoded `HNSN` value of node `id`: its level and, per layer, its
    /// neighbours' keys in ascending order.
    pub(super) fn node_value(&self, id: u32) -> Result<Vec<u8>> {
        HnswNode {
            level: self.graph.levels[id as usize],
            layers: self.graph.links[id as usize]
                .iter()
                .map(|list| {
                    let mut keys: Vec<Vec<u8>> = list
                        .iter()
                        .map(|&c| self.keys[c as usize].clone())
                        .collect();
                    keys.sort_unstable();
                    keys
                })
                .collect(),
        }
        .encode()
    }

    /// The manifest of this graph (no masked nodes) stored under
    /// `graph_root` with entry point `entry`, bound to `source`.
    pub(super) fn manifest(
        &self,
        source: Cid,
        graph_root: Cid,
        entry: u32,
    ) -> Result<HnswManifest> {
        Ok(HnswManifest {
            canonical: self.is_canonical(),
            source,
            dims: u32::try_from(self.dims())
                .map_err(|_| Error::InvalidArgument("dimensions exceed u32".into()))?,
            metric: self.metric,
            config: self.params.config(),
            graph_root,
            entry_point: self.keys[entry as usize].clone(),
            max_level: self.graph.max_level,
        })
    }

    /// Writes the graph (compacting masked nodes first, on a copy) as a
    /// `CRAB` tree of `HNSN` values plus the `HNSW` manifest bound to the
    /// source descriptor `source`. Deterministic: equal graphs give equal
    /// CIDs. The canonical flag is set only for an unmodified canonical build.
    pub fn persist(&self, store: &dyn BlockStore, source: Cid) -> Result<HnswSidecar> {
        if self.deleted_count > 0 {
            let mut copy = self.clone();
            copy.compact()?;
            return copy.persist(store, source);
        }
        let Some(entry) = self.graph.entry else {
            return Err(Error::InvalidArgument(
                "an HNSW sidecar needs at least one record".into(),
            ));
        };
        let order = &self.order;
        let values: Vec<Vec<u8>> = order
            .par_iter()
            .map(|&id| self.node_value(id))
            .collect::<Result<_>>()?;
        let entries = order
            .iter()
            .map(|&id| self.keys[id as usize].clone())
            .zip(values);
        let root = prolly::build_sorted(store, &sidecar_tree_config(), entries)?
            .ok_or_else(|| Error::InvalidArgument("empty HNSW graph".into()))?;
        let manifest = self.manifest(source, root, entry)?;
        let bytes = manifest.encode()?;
        let manifest_cid = store.put(&bytes)?;
        Ok(HnswSidecar {
            manifest_cid,
            manifest,
        })
    }
}

/// Loads a persisted HNSW sidecar over the map's records (key order,
/// prepared vectors). Checks the manifest (decode, config, source, metric,
/// dimensions), that the graph holds exactly the records' keys, that every
/// neighbour exists, and that the entry point's level is the maximum level.
/// Returns the mutable [`Hnsw`]; call [`Hnsw::search_graph`] for queries.
pub fn load(
    store: &dyn BlockStore,
    manifest_cid: Cid,
    source: Option<Cid>,
    metric: Metric,
    dims: usize,
    records: &[(Vec<u8>, Vec<f32>)],
) -> Result<(HnswManifest, Hnsw)> {
    check_records(records, dims)?;
    let rows = Rows {
        keys: records.iter().map(|(k, _)| k.clone()).collect(),
        vectors: Arena::from_rows(dims, records.iter().map(|(_, v)| v.as_slice())),
    };
    load_rows(store, manifest_cid, source, metric, rows)
}

/// A loaded graph in flat form: node `i`'s layer `l` lists
/// `links[layer_start[first_layer[i] + l] .. layer_start[first_layer[i] + l + 1]]`
/// (record ids, in the order stored).
struct FlatGraph {
    levels: Vec<u8>,
    first_layer: Vec<usize>,
    layer_start: Vec<usize>,
    links: Vec<u32>,
    entry: u32,
}

impl FlatGraph {
    fn list(&self, i: usize, layer: usize) -> &[u32] {
        let at = self.first_layer[i] + layer;
        &self.links[self.layer_start[at]..self.layer_start[at + 1]]
    }
}

/// One graph leaf decoded: each node's own record id and key length, level,
/// per-layer list lengths and the concatenated lists.
#[derive(Default)]
struct LeafNodes {
    ids: Vec<Option<u32>>,
    key_lens: Vec<usize>,
    levels: Vec<u8>,
    layer_lens: Vec<usize>,
    links: Vec<u32>,
}

/// Reads and checks the sidecar `manifest_cid` over `rows` (as
/// `source::map_rows` reads them): the manifest (decode,
/// config, source, metric, dimensions), that the graph holds exactly the
/// records' keys, that every neighbour exists and upper-layer lists only
/// name nodes on that layer, and that the entry point's level is the
/// maximum level.
fn read_graph(
    store: &dyn BlockStore,
    manifest_cid: Cid,
    source: Option<Cid>,
    metric: Metric,
    rows: &Rows,
) -> Result<(HnswManifest, FlatGraph)> {
    let dims = rows.vectors.dims();
    let corrupt = |reason: String| Error::Corrupt {
        cid: manifest_cid,
        reason,
    };
    let bytes = store
        .get(&manifest_cid)?
        .ok_or(Error::NotFound { cid: manifest_cid })?;
    let manifest = HnswManifest::decode(&bytes)?;
    manifest.config.validate()?;
    if let Some(s) = source {
        if manifest.source != s {
            return Err(corrupt(format!(
                "sidecar belongs to descriptor {}, not {s}",
                manifest.source
            )));
        }
    }
    if manifest.metric != metric || manifest.dims as usize != dims {
        return Err(corrupt(format!(
            "sidecar is {} x {}, map is {} x {}",
            manifest.metric, manifest.dims, metric, dims
        )));
    }
    let ids = KeyIds::new(&rows.keys);
    let id_of = |key: &[u8]| ids.get(key);
    // Each leaf's nodes, decoded and resolved as they are read; then every
    // node's key against the record of its rank.
    let leaves = read_leaves(store, manifest.graph_root, |bytes| {
        let mut out = LeafNodes::default();
        crate::prolly::visit(&bytes, |key, value| {
            let node = HnswNodeRef::decode(value)?;
            if node.level > 64 {
                return Err(corrupt(format!("node {} level above 64", hex::encode(key))));
            }
            for layer in &node.layers {
                for nb in layer {
                    out.links.push(id_of(nb).ok_or_else(|| {
                        corrupt(format!(
                            "node {} names unknown neighbour {}",
                            hex::encode(key),
                            hex::encode(nb)
                        ))
                    })?);
                }
                out.layer_lens.push(layer.len());
            }
            out.ids.push(id_of(key));
            out.key_lens.push(key.len());
            out.levels.push(node.level);
            Ok(())
        })?;
        Ok(out)
    })?;
    let n: usize = leaves.iter().map(|l| l.ids.len()).sum();
    if n != rows.keys.len() {
        return Err(corrupt(format!(
            "graph has {n} nodes, map has {} records",
            rows.keys.len()
        )));
    }
    let mut g = FlatGraph {
        levels: Vec::with_capacity(n),
        first_layer: Vec::with_capacity(n + 1),
        layer_start: vec![0],
        links: Vec::with_capacity(leaves.iter().map(|l| l.links.len()).sum()),
        entry: 0,
    };
    let mut rank = 0usize;
    for leaf in leaves {
        for (j, &id) in leaf.ids.iter().enumerate() {
            // Keys are unique and ascending in both trees, so the node of
            // rank `rank` must resolve to record `rank`.
            if id != Some(rank as u32) || leaf.key_lens[j] != rows.keys[rank].len() {
                return Err(corrupt(format!(
                    "graph key of node {rank} is not the record key {}",
                    hex::encode(&rows.keys[rank])
                )));
            }
            rank += 1;
        }
        // Node `j` of the leaf owns the next `level + 1` layer lengths.
        let mut lens = leaf.layer_lens.iter();
        for &level in &leaf.levels {
            g.first_layer.push(g.layer_start.len() - 1);
            g.levels.push(level);
            for len in lens.by_ref().take(usize::from(level) + 1) {
                let last = *g.layer_start.last().unwrap_or(&0);
                g.layer_start.push(last + len);
            }
        }
        g.links.extend_from_slice(&leaf.links);
    }
    g.first_layer.push(g.layer_start.len() - 1);
    let entry = id_of(&manifest.entry_point)
        .ok_or_else(|| corrupt("entry point is not a record key".into()))?;
    if g.levels[entry as usize] != manifest.max_level {
        return Err(corrupt(format!(
            "entry point level {} differs from maximum level {}",
            g.levels[entry as usize], manifest.max_level
        )));
    }
    g.entry = entry;
    // Upper-layer lists may only name nodes present on that layer.
    for i in 0..n {
        for layer in 1..=usize::from(g.levels[i]) {
            if g.list(i, layer)
                .iter()
                .any(|&c| usize::from(g.levels[c as usize]) < layer)
            {
                return Err(corrupt(format!(
                    "node {} links a node below layer {layer}",
                    hex::encode(&rows.keys[i])
                )));
            }
        }
    }
    Ok((manifest, g))
}

/// [`load`] over the rows `source::map_rows` read (keys
/// ascending, vectors checked), kept by the graph without a copy.
pub(crate) fn load_rows(
    store: &dyn BlockStore,
    manifest_cid: Cid,
    source: Option<Cid>,
    metric: Metric,
    rows: Rows,
) -> Result<(HnswManifest, Hnsw)> {
    let (manifest, flat) = read_graph(store, manifest_cid, source, metric, &rows)?;
    let n = rows.keys.len();
    let mut graph = BuildGraph::default();
    for i in 0..n {
        graph.levels.push(flat.levels[i]);
        graph.links.push(
            (0..=usize::from(flat.levels[i]))
                .map(|l| flat.list(i, l).to_vec())
                .collect(),
        );
    }
    graph.entry = Some(flat.entry);
    graph.max_level = manifest.max_level;
    let hnsw = Hnsw {
        metric,
        params: HnswParams::from_config(&manifest.config, manifest.canonical),
        keys: rows.keys,
        vectors: rows.vectors,
        graph,
        deleted: vec![false; n],
        deleted_count: 0,
        order: (0..n as u32).collect(),
        canonical: manifest.canonical,
    };
    Ok((manifest, hnsw))
}

/// [`load_rows`] straight into the search layout (what [`Hnsw::into_search_graph`]
/// of the loaded graph gives), without the per-node lists of the mutable
/// graph.
pub(crate) fn load_search_rows(
    store: &dyn BlockStore,
    manifest_cid: Cid,
    source: Option<Cid>,
    metric: Metric,
    rows: Rows,
) -> Result<(HnswManifest, SearchGraph)> {
    let (manifest, flat) = read_graph(store, manifest_cid, source, metric, &rows)?;
    let n = rows.keys.len();
    let keys: Vec<&[u8]> = rows.keys.iter().map(Vec::as_slice).collect();
    let graph = SearchGraph::assemble(
        metric,
        rows.vectors,
        keys,
        &flat.levels,
        |i, layer| {
            let mut l = flat.list(i, layer).to_vec();
            l.sort_unstable();
            l
        },
        Some(flat.entry),
        manifest.max_level,
        vec![false; n],
    );
    Ok((manifest, graph))
}

impl SearchGraph {
    /// Loads a persisted sidecar straight into the search layout (see
    /// [`load`]).
    pub fn load(
        store: &dyn BlockStore,
        manifest_cid: Cid,
        source: Option<Cid>,
        metric: Metric,
        dims: usize,
        records: &[(Vec<u8>, Vec<f32>)],
    ) -> Result<SearchGraph> {
        let (_, h) = load(store, manifest_cid, source, metric, dims, records)?;
        Ok(h.into_search_graph())
    }
}

#[cfg(test)]
mod tests {
    use super::{read_tree, sidecar_tree_config, KeyIds};
    use crate::error::Error;
    use crate::prolly::Node;
    use crate::store::{BlockStore, MemStore};

    /// A node of the sidecar config at `level` holding `pairs`.
    fn node(store: &MemStore, level: u8, pairs: &[(&[u8], Vec<u8>)]) -> crate::cid::Cid {
        let mut n = Node::empty(&sidecar_tree_config(), level);
        for (k, v) in pairs {
            n.keys.push(k.to_vec());
            n.vals.push(v.clone());
        }
        store.put(&n.encode()).unwrap()
    }

    #[test]
    fn read_tree_keeps_order_across_levels_and_refuses_ragged_depths() {
        let store = MemStore::new();
        let a = node(&store, 0, &[(b"a", b"1".to_vec()), (b"b", b"2".to_vec())]);
        let c = node(&store, 0, &[(b"c", b"3".to_vec())]);
        let d = node(&store, 0, &[(b"d", b"4".to_vec())]);
        let left = node(&store, 1, &[(b"a", a.0.to_vec()), (b"c", c.0.to_vec())]);
        let right = node(&store, 1, &[(b"d", d.0.to_vec())]);
        let root = node(
            &store,
            2,
            &[(b"a", left.0.to_vec()), (b"d", right.0.to_vec())],
        );
        let keys: Vec<Vec<u8>> = read_tree(&store, root)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, [b"a", b"b", b"c", b"d"].map(|k| k.to_vec()));
        // A root whose children are a leaf and an inner node.
        let ragged = node(&store, 2, &[(b"a", a.0.to_vec()), (b"d", right.0.to_vec())]);
        assert!(matches!(
            read_tree(&store, ragged),
            Err(Error::Corrupt { .. })
        ));
    }

    /// Every key maps to its index, absent and odd-length keys to `None`,
    /// whichever index the keys select.
    fn check(ids: &KeyIds<'_>, keys: &[Vec<u8>], absent: &[Vec<u8>]) {
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(ids.get(k), Some(i as u32), "{k:?}");
        }
        for k in absent {
            assert_eq!(ids.get(k), None, "{k:?}");
        }
    }

    #[test]
    fn key_ids_resolve_dense_wide_and_byte_keys() {
        let be = |v: u64| v.to_be_bytes().to_vec();
        let dense: Vec<Vec<u8>> = (5..105u64).map(be).collect();
        let ids = KeyIds::new(&dense);
        assert!(matches!(ids, KeyIds::Dense { first: 5, len: 100 }));
        check(
            &ids,
            &dense,
            &[be(4), be(105), be(u64::MAX), vec![0; 7], vec![]],
        );

        let wide: Vec<Vec<u8>> = (0..100u64).map(|i| be(i * 3 + 1)).collect();
        let ids = KeyIds::new(&wide);
        assert!(matches!(ids, KeyIds::Wide(_)));
        check(&ids, &wide, &[be(0), be(2), be(301), vec![1; 9]]);

        let mixed: Vec<Vec<u8>> = vec![b"a".to_vec(), be(7), b"zz".to_vec()];
        let ids = KeyIds::new(&mixed);
        assert!(matches!(ids, KeyIds::Bytes(_)));
        check(&ids, &mixed, &[b"b".to_vec(), be(8)]);

        assert_eq!(KeyIds::new(&[]).get(&be(0)), None);
    }

    /// The flat loader gives the search graph the mutable loader's graph
    /// converts to: same levels, upper-layer lists and answers, on a graph
    /// of several layers, from the same store.
    #[test]
    fn load_search_rows_equals_load_then_convert() {
        use super::super::{Adjacency, Hnsw, SearchOptions};
        use crate::accel::params::HnswParams;
        use prox_kernels::Metric;
        let seed = prox_testkit::seed(0x5ea1);
        let mut rng = prox_testkit::SplitMix64::new(seed);
        let dims = 6;
        let records: Vec<(Vec<u8>, Vec<f32>)> = (0..3000u64)
            .map(|i| {
                (
                    i.to_be_bytes().to_vec(),
                    (0..dims).map(|_| rng.gauss()).collect(),
                )
            })
            .collect();
        let store = MemStore::new();
        let source = crate::cid::Cid([4; 32]);
        let h = Hnsw::build(Metric::L2, dims, &records, &HnswParams::default()).unwrap();
        let side = h.persist(&store, source).unwrap();
        let rows = || crate::accel::vectors::Rows {
            keys: records.iter().map(|(k, _)| k.clone()).collect(),
            vectors: crate::accel::vectors::Arena::from_rows(
                dims,
                records.iter().map(|(_, v)| v.as_slice()),
            ),
        };
        let (_, via) =
            super::load_rows(&store, side.manifest_cid, Some(source), Metric::L2, rows()).unwrap();
        let want = via.into_search_graph();
        let (_, got) =
            super::load_search_rows(&store, side.manifest_cid, Some(source), Metric::L2, rows())
                .unwrap();
        let levels = want.levels();
        assert!(levels.iter().any(|&l| l >= 2), "PROX_SEED={seed}: too flat");
        assert_eq!(got.levels(), levels);
        for node in 0..records.len() as u32 {
            for layer in 1..=usize::from(levels[node as usize]) {
                assert_eq!(got.neighbours(node, layer), want.neighbours(node, layer));
            }
        }
        let queries: Vec<Vec<f32>> = (0..20)
            .map(|_| (0..dims).map(|_| rng.gauss()).collect())
            .collect();
        let opts = SearchOptions { k: 10, ef: 40 };
        assert_eq!(
            got.search_batch(&queries, opts).unwrap(),
            want.search_batch(&queries, opts).unwrap(),
            "PROX_SEED={seed}"
        );
    }
}
