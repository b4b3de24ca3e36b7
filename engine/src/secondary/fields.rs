//! [`FieldIndexes`]: the payload field indexes of one proximity map, as
//! secondary indexes over the map's directory (key -> `PRVR` record), with
//! their catalog and control trees, and the evaluation of field filters.
//!
//! Persisted in the map's `CRMF` metadata: `prox.si.catalog` and
//! `prox.si.control` name the catalog and control trees, and
//! `prox.si.index.<field>` the index tree of each field that has entries.
//! The declarations themselves are the catalog's `PSID` records (index name
//! = field name, extractor id = `prox.payload.<type>/v1`).

use super::build::{build_index, record_delta, write_catalog, Definition, IndexState, Limits};
use super::layout::{decode_physical_key, exact_bounds, prefix_bounds, version_id};
use super::payload::{float_key, int_key, FieldIndex, FieldType, PayloadExtractor};
use super::record::{Descriptor, Head, Projection};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::keys::{encode_segment, prefix_end, FieldCondition, Filter, MatchValue, Number};
use crate::prolly::Tree;
use crate::proximity::Metadata;
use crate::store::BlockStore;
use std::sync::Arc;

/// The source map id of every prox map's indexes.
pub const SOURCE_MAP_ID: &[u8] = b"prox.records";
const META_CATALOG: &[u8] = b"prox.si.catalog";
const META_CONTROL: &[u8] = b"prox.si.control";
const META_INDEX: &[u8] = b"prox.si.index.";

/// One field index of a map: its declaration and its tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldState {
    /// The declaration.
    pub index: FieldIndex,
    /// Descriptor, root and version of its tree.
    pub state: IndexState,
}

/// The field indexes of one map version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldIndexes {
    dims: u32,
    source_version: [u8; 32],
    fields: Vec<FieldState>,
}

fn definition(index: &FieldIndex, dims: u32) -> Result<Definition> {
    Ok(Definition {
        descriptor: Descriptor::new(
            SOURCE_MAP_ID,
            index.field.as_bytes(),
            1,
            &index.ty.extractor_id(),
            Projection::KeysOnly,
        )?,
        extractor: Arc::new(PayloadExtractor {
            index: index.clone(),
            dims,
        }),
    })
}

fn cid_of(v: &[u8], what: &str) -> Result<Cid> {
    Cid::from_slice(v).ok_or_else(|| Error::invalid("CRMF", format!("{what} is not a 32-byte CID")))
}

impl FieldIndexes {
    /// Builds the indexes of `fields` over `directory` (the map's records).
    pub fn build(
        store: &dyn BlockStore,
        directory: &Tree<'_>,
        dims: u32,
        fields: &[FieldIndex],
    ) -> Result<FieldIndexes> {
        let mut sorted = fields.to_vec();
        sorted.sort_by(|a, b| a.field.cmp(&b.field));
        if let Some(w) = sorted.windows(2).find(|w| w[0].field == w[1].field) {
            return Err(Error::InvalidIndexDefinition(format!(
                "field {:?} declared twice",
                w[0].field
            )));
        }
        let mut out = Vec::with_capacity(sorted.len());
        for index in sorted {
            let def = definition(&index, dims)?;
            let root = build_index(store, directory, &def, &Limits::default())?;
            out.push(FieldState {
                index,
                state: IndexState {
                    descriptor: def.descriptor,
                    root,
                    version: version_id(root, directory.config()),
                },
            });
        }
        Ok(FieldIndexes {
            dims,
            source_version: version_id(directory.root(), directory.config()),
            fields: out,
        })
    }

    /// Reads the indexes from a map's `CRMF` metadata (`prox.si.*`);
    /// `None` when the map has none. The catalog must name `directory`'s
    /// version, every index its checkpoint's version.
    pub fn load(
        store: &dyn BlockStore,
        meta: &Metadata,
        directory: &Tree<'_>,
        dims: u32,
    ) -> Result<Option<FieldIndexes>> {
        let Some(cat) = meta.get(META_CATALOG) else {
            return Ok(None);
        };
        let cfg = directory.config().clone();
        let catalog = Tree::open(store, cfg.clone(), Some(cid_of(cat, "prox.si.catalog")?))?;
        let current = catalog
            .get(&super::layout::catalog_current_key())?
            .ok_or_else(|| Error::invalid("catalog", "missing current record"))?;
        let head = Head::decode(&current)?;
        let source_version = version_id(directory.root(), &cfg);
        if head.source_version != source_version {
            return Err(Error::invalid(
                "catalog",
                "field indexes name another version of the map's records",
            ));
        }
        let mut fields = Vec::with_capacity(head.checkpoints.len());
        for c in head.checkpoints {
            let key = super::layout::catalog_definition_key(&c.index_name, c.generation);
            let d = Descriptor::decode(
                &catalog
                    .get(&key)?
                    .ok_or_else(|| Error::invalid("catalog", "checkpoint without descriptor"))?,
            )?;
            let ty = FieldType::from_extractor_id(&d.extractor_id).ok_or_else(|| {
                Error::invalid("PSID", format!("unknown extractor id {:?}", d.extractor_id))
            })?;
            let field = String::from_utf8(d.name.clone())
                .map_err(|_| Error::invalid("PSID", "field name is not UTF-8"))?;
            let mut mk = META_INDEX.to_vec();
            mk.extend_from_slice(field.as_bytes());
            let root = meta
                .get(&mk)
                .map(|v| cid_of(v, "prox.si.index"))
                .transpose()?;
            let version = version_id(root, &cfg);
            if version != c.index_version {
                return Err(Error::invalid(
                    "catalog",
                    format!("index {field:?} root does not match its checkpoint"),
                ));
            }
            fields.push(FieldState {
                index: FieldIndex { field, ty },
                state: IndexState {
                    descriptor: d,
                    root,
                    version,
                },
            });
        }
        Ok(Some(FieldIndexes {
            dims,
            source_version,
            fields,
        }))
    }

    /// The declared fields, by name.
    pub fn fields(&self) -> &[FieldState] {
        &self.fields
    }

    /// Writes the catalog and control trees and returns the metadata pairs
    /// that publish them with the index roots.
    pub fn metadata(&self, store: &dyn BlockStore, directory: &Tree<'_>) -> Result<Metadata> {
        let states: Vec<IndexState> = self.fields.iter().map(|f| f.state.clone()).collect();
        let cat = write_catalog(
            store,
            directory.config(),
            SOURCE_MAP_ID,
            &self.source_version,
            &states,
        )?;
        let mut m = Metadata::new();
        m.insert(META_CATALOG.to_vec(), cat.root.0.to_vec());
        if let Some(c) = cat.control_root {
            m.insert(META_CONTROL.to_vec(), c.0.to_vec());
        }
        for f in &self.fields {
            if let Some(r) = f.state.root {
                let mut k = META_INDEX.to_vec();
                k.extend_from_slice(f.index.field.as_bytes());
                m.insert(k, r.0.to_vec());
            }
        }
        Ok(m)
    }

    /// The indexes after the records of `keys` changed from `old` to
    /// `new` (both directories): exact per-record deltas, so the roots
    /// equal a fresh build over `new`.
    pub fn apply(
        &self,
        store: &dyn BlockStore,
        old: &Tree<'_>,
        new: &Tree<'_>,
        keys: &[Vec<u8>],
    ) -> Result<FieldIndexes> {
        let before = old.get_many(keys)?;
        let after = new.get_many(keys)?;
        let mut fields = Vec::with_capacity(self.fields.len());
        for f in &self.fields {
            let def = definition(&f.index, self.dims)?;
            let mut muts = Vec::new();
            for ((k, o), n) in keys.iter().zip(&before).zip(&after) {
                if o != n {
                    muts.extend(record_delta(
                        &def,
                        &Limits::default(),
                        k,
                        o.as_deref(),
                        n.as_deref(),
                    )?);
                }
            }
            let tree = Tree::open(store, new.config().clone(), f.state.root)?;
            let root = if muts.is_empty() {
                f.state.root
            } else {
                tree.batch(muts)?.root()
            };
            fields.push(FieldState {
                index: f.index.clone(),
                state: IndexState {
                    descriptor: f.state.descriptor.clone(),
                    root,
                    version: version_id(root, new.config()),
                },
            });
        }
        Ok(FieldIndexes {
            dims: self.dims,
            source_version: version_id(new.root(), new.config()),
            fields,
        })
    }

    /// These indexes with `add` built and `drop` removed.
    pub fn with_changes(
        &self,
        store: &dyn BlockStore,
        directory: &Tree<'_>,
        add: &[FieldIndex],
        drop: &[String],
    ) -> Result<FieldIndexes> {
        for d in drop {
            if !self.fields.iter().any(|f| &f.index.field == d) {
                return Err(self.unknown(d));
            }
        }
        let mut keep: Vec<FieldState> = self
            .fields
            .iter()
            .filter(|f| !drop.contains(&f.index.field))
            .cloned()
            .collect();
        for a in add {
            if keep.iter().any(|f| f.index.field == a.field) {
                return Err(Error::InvalidIndexDefinition(format!(
                    "field {:?} is already indexed",
                    a.field
                )));
            }
        }
        let built = FieldIndexes::build(store, directory, self.dims, add)?;
        keep.extend(built.fields);
        keep.sort_by(|a, b| a.index.field.cmp(&b.index.field));
        Ok(FieldIndexes {
            dims: self.dims,
            source_version: self.source_version,
            fields: keep,
        })
    }

    /// Rebuilds every index from `directory` (into a scratch memory store,
    /// so a read-only store works) and names each one whose root differs
    /// from the stored one (empty: all consistent).
    pub fn verify(&self, directory: &Tree<'_>) -> Result<Vec<String>> {
        let scratch = crate::store::MemStore::new();
        let declared: Vec<FieldIndex> = self.fields.iter().map(|f| f.index.clone()).collect();
        let fresh = FieldIndexes::build(&scratch, directory, self.dims, &declared)?;
        Ok(self
            .fields
            .iter()
            .zip(&fresh.fields)
            .filter(|(a, b)| a.state.root != b.state.root)
            .map(|(a, _)| a.index.field.clone())
            .collect())
    }

    fn unknown(&self, field: &str) -> Error {
        Error::UnknownField {
            field: field.to_string(),
            indexed: self
                .fields
                .iter()
                .map(|f| f.index.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The record keys a field or boolean filter admits, sorted strictly
    /// ascending. Key conditions are evaluated against `directory`.
    pub fn eval(
        &self,
        store: &dyn BlockStore,
        directory: &Tree<'_>,
        filter: &Filter,
    ) -> Result<Vec<Vec<u8>>> {
        eval(Some(self), store, directory, filter)
    }
}

/// [`FieldIndexes::eval`] for a map that may have no field indexes (then
/// any field condition is [`Error::UnknownField`]).
pub fn eval(
    fields: Option<&FieldIndexes>,
    store: &dyn BlockStore,
    directory: &Tree<'_>,
    filter: &Filter,
) -> Result<Vec<Vec<u8>>> {
    match filter {
        Filter::Keys(keys) => {
            filter.validate()?;
            let present = directory.get_many(keys)?;
            Ok(keys
                .iter()
                .zip(present)
                .filter(|(_, v)| v.is_some())
                .map(|(k, _)| k.clone())
                .collect())
        }
        Filter::Range { .. } | Filter::Prefix(_) => {
            let (start, end) = filter.interval().unwrap_or((&[], None));
            directory
                .range(start, end.as_deref())
                .map(|r| r.map(|(k, _)| k))
                .collect()
        }
        Filter::Field { key, condition } => {
            let f = fields
                .and_then(|fs| fs.fields.iter().find(|f| &f.index.field == key))
                .ok_or_else(|| match fields {
                    Some(fs) => fs.unknown(key),
                    None => Error::UnknownField {
                        field: key.clone(),
                        indexed: String::new(),
                    },
                })?;
            let tree = Tree::open(store, directory.config().clone(), f.state.root)?;
            let mut out = Vec::new();
            for (start, end) in ranges(&f.index, condition)? {
                for item in tree.range(&start, end.as_deref()) {
                    let (k, _) = item?;
                    out.push(decode_physical_key(&k)?.1);
                }
            }
            out.sort_unstable();
            out.dedup();
            Ok(out)
        }
        Filter::Bool {
            must,
            should,
            must_not,
        } => {
            let mut acc: Option<Vec<Vec<u8>>> = None;
            for f in must {
                let s = eval(fields, store, directory, f)?;
                acc = Some(match acc {
                    None => s,
                    Some(a) => intersect(&a, &s),
                });
            }
            if !should.is_empty() {
                let mut u = Vec::new();
                for f in should {
                    u = union(&u, &eval(fields, store, directory, f)?);
                }
                acc = Some(match acc {
                    None => u,
                    Some(a) => intersect(&a, &u),
                });
            }
            let mut acc = match acc {
                Some(a) => a,
                None => directory
                    .iter()
                    .map(|r| r.map(|(k, _)| k))
                    .collect::<Result<_>>()?,
            };
            for f in must_not {
                let s = eval(fields, store, directory, f)?;
                acc = minus(&acc, &s);
            }
            Ok(acc)
        }
    }
}

fn intersect(a: &[Vec<u8>], b: &[Vec<u8>]) -> Vec<Vec<u8>> {
    a.iter()
        .filter(|k| b.binary_search(k).is_ok())
        .cloned()
        .collect()
}

fn minus(a: &[Vec<u8>], b: &[Vec<u8>]) -> Vec<Vec<u8>> {
    a.iter()
        .filter(|k| b.binary_search(k).is_err())
        .cloned()
        .collect()
}

fn union(a: &[Vec<u8>], b: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut u: Vec<Vec<u8>> = a.iter().chain(b).cloned().collect();
    u.sort_unstable();
    u.dedup();
    u
}

type Bounds = (Vec<u8>, Option<Vec<u8>>);

fn term(bytes: &[u8]) -> Vec<u8> {
    let mut t = vec![1u8];
    t.extend_from_slice(bytes);
    t
}

fn mismatch(index: &FieldIndex, given: impl Into<String>) -> Error {
    Error::FieldTypeMismatch {
        field: index.field.clone(),
        indexed: index.ty.name(),
        given: given.into(),
    }
}

/// Physical key ranges of the index of `index` that hold the records
/// matching `condition`.
fn ranges(index: &FieldIndex, condition: &FieldCondition) -> Result<Vec<Bounds>> {
    let ty = index.ty;
    Ok(match condition {
        FieldCondition::IsNull => vec![exact_bounds(b"")],
        FieldCondition::Exists => vec![prefix_bounds(&[1])],
        FieldCondition::Match(values) => values
            .iter()
            .map(|v| {
                let t = match (ty, v) {
                    (FieldType::Keyword, MatchValue::Keyword(s)) => term(s.as_bytes()),
                    (FieldType::Integer, MatchValue::Integer(i)) => term(&int_key(*i)),
                    (FieldType::Float, MatchValue::Integer(i)) => term(&float_key(*i as f64)),
                    (FieldType::Bool, MatchValue::Bool(b)) => term(&[u8::from(*b)]),
                    (_, MatchValue::Keyword(s)) => {
                        return Err(mismatch(index, format!("string {s:?}")))
                    }
                    (_, MatchValue::Integer(i)) => {
                        return Err(mismatch(index, format!("integer {i}")))
                    }
                    (_, MatchValue::Bool(b)) => return Err(mismatch(index, format!("bool {b}"))),
                };
                Ok(exact_bounds(&t))
            })
            .collect::<Result<_>>()?,
        FieldCondition::Range { gt, gte, lt, lte } => match ty {
            FieldType::Integer => int_range(*gt, *gte, *lt, *lte).into_iter().collect(),
            FieldType::Float => vec![float_range(*gt, *gte, *lt, *lte)],
            _ => return Err(mismatch(index, "a numeric range")),
        },
    })
}

/// Inclusive `i64` bounds of a numeric range; `None` when empty.
fn int_range(
    gt: Option<Number>,
    gte: Option<Number>,
    lt: Option<Number>,
    lte: Option<Number>,
) -> Option<Bounds> {
    let clamp = |x: f64| x.clamp(i64::MIN as f64, i64::MAX as f64);
    let mut lo = i64::MIN as f64;
    let mut hi = i64::MAX as f64;
    if let Some(Number(x)) = gt {
        lo = lo.max(x.floor() + 1.0);
    }
    if let Some(Number(x)) = gte {
        lo = lo.max(x.ceil());
    }
    if let Some(Number(x)) = lt {
        hi = hi.min(x.ceil() - 1.0);
    }
    if let Some(Number(x)) = lte {
        hi = hi.min(x.floor());
    }
    if lo > hi {
        return None;
    }
    let (lo, hi) = (clamp(lo) as i64, clamp(hi) as i64);
    let start = encode_segment(&term(&int_key(lo)));
    let end = prefix_end(&encode_segment(&term(&int_key(hi))));
    Some((start, end))
}

/// Physical bounds of a float range (every record whose term lies in it).
fn float_range(
    gt: Option<Number>,
    gte: Option<Number>,
    lt: Option<Number>,
    lte: Option<Number>,
) -> Bounds {
    let seg = |x: f64| encode_segment(&term(&float_key(x)));
    let mut start = vec![1u8];
    let mut end: Option<Vec<u8>> = Some(vec![2u8]);
    let mut raise = |s: Vec<u8>| {
        if s > start {
            start = s;
        }
    };
    if let Some(Number(x)) = gt {
        raise(prefix_end(&seg(x)).unwrap_or_default());
    }
    if let Some(Number(x)) = gte {
        raise(seg(x));
    }
    let mut lower = |e: Vec<u8>| {
        if end.as_ref().is_none_or(|cur| e < *cur) {
            end = Some(e);
        }
    };
    if let Some(Number(x)) = lt {
        lower(seg(x));
    }
    if let Some(Number(x)) = lte {
        if let Some(e) = prefix_end(&seg(x)) {
            lower(e);
        }
    }
    if end.as_ref().is_some_and(|e| *e < start) {
        end = Some(start.clone());
    }
    (start, end)
}
