//! `prox inspect`: decode any stored object into readable text or JSON.
//!
//! Kinds are recognised by magic (`CRAB`, `PRXI`, `PRXN`, `PRVR`, `PRXV`,
//! `PQS8`, `PQPQ`, `HNSW`, `HNSN`, `CRMF`, `PLVV`, `PLVB`), then as a
//! packed-CBOR `RootManifest`, then as a legacy CBOR prolly node. `PRXN` and
//! `PRVR` need the map's dimensions: `--dims`, or found from the maps named
//! in the store's roots when they agree.

use super::store_arg::StoreArg;
use crate::out::Stdout;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use prox_engine::manifest::RootManifest;
use prox_engine::proximity::format as f;
use prox_engine::{envelope, prolly, BlockStore, Cid};
use serde_json::{json, Map, Value};
use std::path::PathBuf;

/// Examples for `prox inspect --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox inspect --store prox-data 3f1c...e9            decode a block by CID
  prox inspect --store prox-data --root demo          the named root's manifest
  prox inspect --store prox-data 3f1c...e9 --json     machine-readable
  prox inspect --file node.bin --dims 128             bytes from a file

Long vectors and key lists are abbreviated in text output; --full or --json
prints everything.";

/// Arguments of `prox inspect`.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// CID (64 hex digits) of a block in the store.
    #[arg(required_unless_present_any = ["root", "file"])]
    pub cid: Option<String>,
    /// The store.
    #[command(flatten)]
    pub store: StoreArg,
    /// Decode the RootManifest of this named root.
    #[arg(long, conflicts_with_all = ["cid", "file"])]
    pub root: Option<String>,
    /// Decode the bytes of this file instead of a stored block.
    #[arg(long, conflicts_with = "cid")]
    pub file: Option<PathBuf>,
    /// Dimensions of PRXN/PRVR objects (default: from the store's maps).
    #[arg(long)]
    pub dims: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Print every vector component and list item in text output.
    #[arg(long)]
    pub full: bool,
}

/// Runs `prox inspect`.
pub fn run(args: &InspectArgs) -> Result<()> {
    let (label, bytes, store): (String, Vec<u8>, Option<Box<dyn BlockStore>>) = if let Some(path) =
        &args.file
    {
        let b = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
        (path.display().to_string(), b, None)
    } else {
        let store = args.store.open_read_only()?;
        if let Some(name) = &args.root {
            let b = store
                .root(name)
                .with_context(|| format!("root {name:?}"))?
                .ok_or_else(|| anyhow!("root {name:?} does not exist in {}", args.store))?;
            (format!("root {name:?}"), b.to_vec(), Some(store))
        } else {
            let text = args.cid.as_deref().unwrap_or_default();
            let cid: Cid = text
                .parse()
                .map_err(|e| anyhow!("{text:?} is not a CID: {e}"))?;
            let b = store
                .get(&cid)
                .with_context(|| format!("block {cid}"))?
                .ok_or_else(|| anyhow!("block {cid} is not in {}", args.store))?;
            (format!("block {cid}"), b.to_vec(), Some(store))
        }
    };
    let dims = || -> Result<u32> {
        if let Some(d) = args.dims {
            return Ok(d);
        }
        match &store {
            Some(s) => dims_from_roots(s.as_ref()),
            None => bail!("this object needs the map's dimensions: pass --dims N"),
        }
    };
    let (kind, mut value) = describe(&bytes, &dims).with_context(|| label.clone())?;
    if let (Some(name), Some(s), Value::Object(m)) = (&args.root, &store, &mut value) {
        if let Some(ix) = field_indexes(s.as_ref(), name)? {
            m.insert("field_indexes".into(), ix);
        }
        if let Some(p) = recall_profile(s.as_ref(), name)? {
            m.insert("recall_profile".into(), p);
        }
    }
    if let Value::Object(m) = &mut value {
        let mut head = Map::new();
        head.insert("kind".into(), json!(kind));
        head.insert("cid".into(), json!(Cid::of(&bytes).to_hex()));
        head.insert("bytes".into(), json!(bytes.len()));
        head.append(m);
        value = Value::Object(head);
    }
    let mut out = Stdout::new();
    if args.json {
        out.json(&value)?;
    } else {
        // Header first; serde_json maps are sorted, so the rest follows in
        // key order.
        let mut text = format!(
            "kind: {kind}\ncid: {}\nbytes: {}\n",
            Cid::of(&bytes),
            bytes.len()
        );
        if let Value::Object(m) = &mut value {
            for k in ["kind", "cid", "bytes"] {
                m.remove(k);
            }
        }
        render(&value, 0, args.full, &mut text);
        out.line(text.trim_end())?;
    }
    out.flush()
}

/// The recall profile a map's root publishes (every measured setting with
/// its recall and time), or `None` for a root without one.
fn recall_profile(store: &dyn BlockStore, name: &str) -> Result<Option<Value>> {
    let Ok(Some((descriptor, _))) = prox_engine::proximity::resolve(store, name) else {
        return Ok(None);
    };
    let Some(cid) = prox_engine::proximity::resolve_layouts(store, name)?.profile else {
        return Ok(None);
    };
    let dims = prox_engine::proximity::ProximityMap::load(store, descriptor)?.dims() as usize;
    let p = prox_engine::index::Profile::load(store, cid, descriptor, dims)
        .with_context(|| format!("recall profile {cid}"))?;
    Ok(Some(crate::map::profile_json(&p)))
}

/// The payload field indexes a map's root publishes (field, type, tree
/// root, version id), or `None` for a root that is not a map with any.
fn field_indexes(store: &dyn BlockStore, name: &str) -> Result<Option<Value>> {
    use prox_engine::proximity::{self, ProximityMap};
    let Ok(Some((descriptor, _))) = proximity::resolve(store, name) else {
        return Ok(None);
    };
    let meta = proximity::resolve_metadata(store, name, f::META_SECONDARY_PREFIX)?;
    let map = ProximityMap::load(store, descriptor)?;
    let Some(fx) =
        prox_engine::secondary::FieldIndexes::load(store, &meta, &map.directory()?, map.dims())?
    else {
        return Ok(None);
    };
    Ok(Some(Value::Array(
        fx.fields()
            .iter()
            .map(|x| {
                json!({"field": x.index.field, "type": x.index.ty.name(),
                    "root": x.state.root.map(|c| c.to_hex()),
                    "version": hex::encode(x.state.version)})
            })
            .collect(),
    )))
}

/// The dimensions shared by every map named in the store's roots.
fn dims_from_roots(store: &dyn BlockStore) -> Result<u32> {
    let mut found = std::collections::BTreeSet::new();
    for (_, value) in store.roots()? {
        let Ok(m) = RootManifest::decode(&value) else {
            continue;
        };
        let Some(root) = m.root else { continue };
        let Some(b) = store.get(&root)? else { continue };
        if let Ok(cr) = f::ContentRoot::decode(&b) {
            if let Some(d) = cr.dims {
                found.insert(d);
            } else if let Some(Ok(desc)) = store.get(&cr.root)?.map(|d| f::Descriptor::decode(&d)) {
                found.insert(desc.config.dims);
            }
        } else if let Ok(desc) = f::Descriptor::decode(&b) {
            found.insert(desc.config.dims);
        }
    }
    match found.len() {
        1 => Ok(found.into_iter().next().unwrap_or_default()),
        0 => bail!(
            "this object needs the map's dimensions and no named map gives them: pass --dims N"
        ),
        _ => bail!("maps in this store have dimensions {found:?}: pass --dims N"),
    }
}

fn hex(b: &[u8]) -> Value {
    json!(hex::encode(b))
}

fn cid(c: &Cid) -> Value {
    json!(c.to_hex())
}

fn opt_cid(c: &Option<Cid>) -> Value {
    c.as_ref().map(cid).unwrap_or(Value::Null)
}

fn floats(v: &[f32]) -> Value {
    Value::Array(v.iter().map(|&x| json!(f64::from(x))).collect())
}

fn prolly_config(c: &prolly::Config) -> Value {
    json!({
        "min_chunk_size": c.min_chunk_size,
        "max_chunk_size": c.max_chunk_size,
        "chunking_factor": c.chunking_factor,
        "hash_seed": c.hash_seed,
        "encoding": c.encoding.to_string(),
        "node_cache_max_nodes": c.node_cache_max_nodes,
        "node_cache_max_bytes": c.node_cache_max_bytes,
    })
}

fn prox_config(c: &f::ProximityConfig) -> Value {
    json!({
        "dims": c.dims,
        "metric": c.metric.name(),
        "log_chunk_size": c.log_chunk_size,
        "level_hash_seed": c.level_hash_seed,
        "min_page_bytes": c.min_page_bytes,
        "target_page_bytes": c.target_page_bytes,
        "max_page_bytes": c.max_page_bytes,
        "overflow_hash_seed": c.overflow_hash_seed,
        "inline_threshold_bytes": c.inline_threshold_bytes,
        "sq8_group_size": c.sq8_group_size,
    })
}

/// Decodes `bytes` into (kind name, JSON description).
pub fn describe(bytes: &[u8], dims: &dyn Fn() -> Result<u32>) -> Result<(&'static str, Value)> {
    // Shorter inputs have no magic (and fall to the last arm).
    let magic: [u8; 4] = bytes
        .get(..4)
        .and_then(|m| m.try_into().ok())
        .unwrap_or_default();
    Ok(match &magic {
        prolly::MAGIC => ("CRAB node", crab(&prolly::Node::decode(bytes)?)?),
        f::MAGIC_DESCRIPTOR => {
            let d = f::Descriptor::decode(bytes)?;
            (
                "PRXI descriptor",
                json!({
                    "config": prox_config(&d.config),
                    "fingerprint": cid(&d.config.fingerprint()),
                    "record_count": d.record_count,
                    "directory": {"root": opt_cid(&d.directory.root), "config": prolly_config(&d.directory.config)},
                    "root": cid(&d.root),
                }),
            )
        }
        f::MAGIC_NODE => {
            let n = f::ProxNode::decode(bytes, dims()?)?;
            let entries: Vec<Value> = n
                .entries
                .iter()
                .map(|e| {
                    json!({
                        "key": hex(&e.key),
                        "vector": match &e.vector {
                            f::VectorRef::Inline(v) => floats(v),
                            f::VectorRef::External(c) => json!({"external": c.to_hex()}),
                        },
                        "child": opt_cid(&e.child),
                        "count": e.count,
                        "radius": e.radius,
                        "min_key": hex(&e.min_key),
                        "max_key": hex(&e.max_key),
                    })
                })
                .collect();
            (
                "PRXN node",
                json!({
                    "node_kind": format!("{:?}", n.kind),
                    "level": n.level,
                    "subtree_count": n.subtree_count,
                    "quantizer": opt_cid(&n.quantizer),
                    "entry_count": n.entries.len(),
                    "entries": entries,
                }),
            )
        }
        f::MAGIC_RECORD => {
            let r = f::Record::decode(bytes, dims()?)?;
            (
                "PRVR record",
                json!({"vector": floats(&r.vector), "value": hex(&r.value)}),
            )
        }
        f::MAGIC_VECTOR => {
            let v = f::ExternalVector::decode(bytes)?;
            (
                "PRXV external vector",
                json!({"dims": v.vector.len(), "norm": v.norm, "vector": floats(&v.vector)}),
            )
        }
        f::MAGIC_QUANTIZER => {
            let q = f::Quantizer::decode(bytes)?;
            (
                "PQS8 quantizer",
                json!({
                    "dims": q.dims, "group_size": q.group_size, "count": q.count,
                    "max_error": f64::from(q.max_error), "scales": floats(&q.scales),
                    "codes": q.codes.iter().map(|&c| json!(c)).collect::<Vec<_>>(),
                }),
            )
        }
        f::MAGIC_PQ => {
            let m = f::PqManifest::decode(bytes)?;
            (
                "PQPQ manifest",
                json!({
                    "source": cid(&m.source), "dims": m.dims, "metric": m.metric.name(),
                    "config": {
                        "subquantizers": m.config.subquantizers, "centroids": m.config.centroids,
                        "iterations": m.config.iterations, "rerank_multiplier": m.config.rerank_multiplier,
                        "seed": m.config.seed,
                    },
                    "code_root": cid(&m.code_root),
                    "codebooks": m.codebooks.iter().map(|c| json!({"width": c.width, "centroids": floats(&c.centroids)})).collect::<Vec<_>>(),
                    "mean_squared_error": m.mean_squared_error,
                    "max_squared_error": m.max_squared_error,
                }),
            )
        }
        f::MAGIC_HNSW => {
            let m = f::HnswManifest::decode(bytes)?;
            (
                "HNSW manifest",
                json!({
                    "canonical": m.canonical, "source": cid(&m.source), "dims": m.dims,
                    "metric": m.metric.name(),
                    "config": {
                        "max_connections": m.config.max_connections, "ef_construction": m.config.ef_construction,
                        "ef_search": m.config.ef_search, "level_bits": m.config.level_bits,
                        "overfetch_multiplier": m.config.overfetch_multiplier, "seed": m.config.seed,
                    },
                    "graph_root": cid(&m.graph_root), "entry_point": hex(&m.entry_point),
                    "max_level": m.max_level,
                }),
            )
        }
        f::MAGIC_HNSN => {
            let n = f::HnswNode::decode(bytes)?;
            (
                "HNSN graph node",
                json!({
                    "level": n.level,
                    "layers": n.layers.iter().map(|l| l.iter().map(|k| hex(k)).collect::<Vec<_>>()).collect::<Vec<_>>(),
                }),
            )
        }
        f::MAGIC_CONTENT_ROOT => {
            let c = f::ContentRoot::decode(bytes)?;
            let meta: Map<String, Value> = c
                .metadata
                .iter()
                .map(|(k, v)| {
                    let key = String::from_utf8(k.clone()).unwrap_or_else(|_| hex::encode(k));
                    (key, hex(v))
                })
                .collect();
            (
                "CRMF content root",
                json!({
                    "root_kind": format!("{:?}", c.kind), "root": cid(&c.root), "dims": c.dims,
                    "logical_version": c.logical_version, "created_at_ms": c.created_at_ms,
                    "metadata": meta,
                }),
            )
        }
        envelope::VERSIONED_MAGIC => ("PLVV versioned value", plvv(bytes)?),
        envelope::VALUE_REF_MAGIC => ("PLVB value reference", plvb(bytes)?),
        _ => {
            if matches!(bytes.first(), Some(0xa0..=0xbf)) {
                if let Ok(m) = RootManifest::decode(bytes) {
                    return Ok((
                        "RootManifest",
                        json!({
                            "version": m.version, "root": opt_cid(&m.root),
                            "config": prolly_config(&m.config),
                            "created_at_millis": m.created_at_millis,
                            "updated_at_millis": m.updated_at_millis,
                        }),
                    ));
                }
            }
            match prolly::Node::decode(bytes) {
                Ok(n) => ("legacy CBOR prolly node", crab(&n)?),
                Err(_) => bail!(
                    "unknown object: magic {} matches no known kind and it is neither a RootManifest nor a legacy node",
                    hex::encode(magic)
                ),
            }
        }
    })
}

fn crab(n: &prolly::Node) -> Result<Value> {
    let mut v = json!({
        "leaf": n.leaf,
        "level": n.level,
        "config": prolly_config(&n.config()),
        "entry_count": n.len(),
        "keys": n.keys.iter().map(|k| hex(k)).collect::<Vec<_>>(),
    });
    if n.leaf {
        v["values"] = Value::Array(n.vals.iter().map(|x| hex(x)).collect());
    } else {
        v["children"] = Value::Array(n.child_cids()?.iter().map(cid).collect());
    }
    Ok(v)
}

fn be_u32(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// `PLVV` (prolly-core.md 9.1): 30-byte header, then schema, custom name,
/// payload.
fn plvv(b: &[u8]) -> Result<Value> {
    if b.len() < 30 {
        bail!("PLVV shorter than its 30-byte header");
    }
    if b[4] != 1 {
        bail!("PLVV wire version {} (expected 1)", b[4]);
    }
    let tag = b[5];
    if tag > 3 {
        bail!("PLVV encoding tag {tag} is not 0..=3");
    }
    let schema_version = be_u64(b, 6);
    let (sl, cl, pl) = (be_u32(b, 14), be_u32(b, 18), be_u64(b, 22));
    let total = 30u128 + u128::from(sl) + u128::from(cl) + u128::from(pl);
    if total != b.len() as u128 {
        bail!(
            "PLVV lengths add up to {total} bytes but the object has {}",
            b.len()
        );
    }
    if cl != 0 && tag != 3 {
        bail!("PLVV has a custom encoding name with non-custom tag {tag}");
    }
    let (sl, cl) = (sl as usize, cl as usize);
    let schema = std::str::from_utf8(&b[30..30 + sl]).context("PLVV schema is not UTF-8")?;
    let custom =
        std::str::from_utf8(&b[30 + sl..30 + sl + cl]).context("PLVV custom name is not UTF-8")?;
    let payload = &b[30 + sl + cl..];
    let mut v = json!({
        "encoding_tag": tag, "schema_version": schema_version, "schema": schema,
        "custom_encoding": custom, "payload": hex(payload),
    });
    if tag == 2 {
        if let Ok(j) = serde_json::from_slice::<Value>(payload) {
            v["payload_json"] = j;
        }
    }
    Ok(v)
}

/// `PLVB` (prolly-core.md 9.2): inline or blob reference.
fn plvb(b: &[u8]) -> Result<Value> {
    Ok(match envelope::ValueRef::decode(b)? {
        envelope::ValueRef::Inline(v) => {
            json!({"ref_kind": "inline", "len": v.len() as u64, "value": hex(&v)})
        }
        envelope::ValueRef::Blob { cid: c, len } => {
            json!({"ref_kind": "blob", "blob": cid(&c), "len": len})
        }
    })
}

/// Renders JSON as indented `key: value` text. Arrays of scalars longer
/// than 8 items are abbreviated unless `full`.
pub fn render(v: &Value, indent: usize, full: bool, out: &mut String) {
    let pad = "  ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::Object(inner) if !inner.is_empty() => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        render(x, indent + 1, full, out);
                    }
                    Value::Array(items) if items.iter().any(|i| i.is_object() || i.is_array()) => {
                        out.push_str(&format!("{pad}{k}: ({} items)\n", items.len()));
                        let shown = if full {
                            items.len()
                        } else {
                            items.len().min(16)
                        };
                        for (i, item) in items.iter().take(shown).enumerate() {
                            out.push_str(&format!("{pad}  [{i}]\n"));
                            match item {
                                Value::Object(_) => render(item, indent + 2, full, out),
                                _ => {
                                    out.push_str(&format!("{pad}    {}\n", scalar_list(item, full)))
                                }
                            }
                        }
                        if shown < items.len() {
                            out.push_str(&format!(
                                "{pad}  ... {} more (--full)\n",
                                items.len() - shown
                            ));
                        }
                    }
                    _ => out.push_str(&format!("{pad}{k}: {}\n", scalar_list(x, full))),
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar_list(other, full))),
    }
}

fn scalar_list(v: &Value, full: bool) -> String {
    match v {
        Value::Array(items) => {
            let shown = if full {
                items.len()
            } else {
                items.len().min(8)
            };
            let mut s: Vec<String> = items
                .iter()
                .take(shown)
                .map(|i| scalar_list(i, full))
                .collect();
            if shown < items.len() {
                s.push(format!("... ({} total)", items.len()));
            }
            format!("[{}]", s.join(", "))
        }
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        other => other.to_string(),
    }
}
