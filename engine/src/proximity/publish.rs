//! Named roots for proximity maps (docs/formats-proximity.md, "Named roots").
//!
//! A named root points at a map through two small objects:
//!
//! ```text
//! root name -> RootManifest { root: CRMF cid, config: typed-root config }
//! CRMF { kind 2 (descriptor), root: PRXI cid, no dimensions,
//!        logical version, created_at,
//!        metadata (sorted): "prox.hnsw" -> HNSW manifest CID (32 bytes),
//!                           "prox.pq"   -> PQPQ manifest CID (32 bytes) }
//! ```
//!
//! The typed-root config (min 1, max 1, factor 1, seed 0, custom encoding
//! `typed-content-root-v1`, cache limits 0/0) is what tells a walker that
//! the manifest's root is a `CRMF` rather than an ordered tree node
//! ([`crate::refs::root_links`]); [`crate::refs::links`] then follows the
//! descriptor and both sidecars, so GC keeps and sync transfers all of them.

use super::format::{
    ContentRoot, HnswManifest, LayoutManifest, PqManifest, RootKind, META_LAYOUT_PREFIX,
};
use super::map::{fetch, ProximityMap};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::manifest::RootManifest;
use crate::refs::{is_typed_root_config, typed_root_config, META_HNSW, META_PQ};
use crate::store::{validate_root_name, BlockStore};

/// A map's accelerator sidecars: by default their manifest CIDs (what a
/// named root publishes next to the map); [`crate::accel::build_sidecars`]
/// returns the same pair holding what it built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sidecars<H = Cid, P = Cid> {
    /// The `HNSW` sidecar built from the map, if any.
    pub hnsw: Option<H>,
    /// The `PQPQ` sidecar trained on the map, if any.
    pub pq: Option<P>,
}

impl<H, P> Default for Sidecars<H, P> {
    fn default() -> Self {
        Sidecars {
            hnsw: None,
            pq: None,
        }
    }
}

/// Reads the `CRMF` a typed named root points at; `None` when the root is
/// absent or empty.
fn current(store: &dyn BlockStore, name: &str) -> Result<Option<(Vec<u8>, Cid, ContentRoot)>> {
    let Some(bytes) = store.root(name)? else {
        return Ok(None);
    };
    let m = RootManifest::decode(&bytes)?;
    if !is_typed_root_config(&m.config) {
        return Err(Error::InvalidArgument(format!(
            "root {name:?} is an ordered tree, not a typed content root"
        )));
    }
    let Some(cid) = m.root else {
        return Ok(None);
    };
    let crmf = ContentRoot::decode(&fetch(store, &cid)?).map_err(|e| Error::Corrupt {
        cid,
        reason: e.to_string(),
    })?;
    Ok(Some((bytes.to_vec(), cid, crmf)))
}

/// The `CRMF` naming the descriptor `source` and its `sidecars` (each must
/// be in the store and name `source` as its source), stamped now; the
/// caller sets the logical version.
fn content_root(
    store: &dyn BlockStore,
    source: Cid,
    sidecars: &Sidecars,
    extra: &Metadata,
) -> Result<ContentRoot> {
    let mut crmf = ContentRoot::new(RootKind::ProximityDescriptor, source);
    crmf.metadata
        .extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    // Layout sidecars (`prox.layout.*`) travel as extra metadata; each
    // must be a stored `PRLY` of this descriptor under its kind's key.
    for (k, v) in extra
        .iter()
        .filter(|(k, _)| k.starts_with(META_LAYOUT_PREFIX))
    {
        let name = String::from_utf8_lossy(k);
        let c = Cid::from_slice(v).ok_or_else(|| {
            Error::InvalidArgument(format!("metadata {name} is {} bytes, not a CID", v.len()))
        })?;
        let m = LayoutManifest::decode(&fetch(store, &c)?)?;
        if m.source != source || m.kind.meta_key() != k.as_slice() {
            return Err(Error::InvalidArgument(format!(
                "layout {c} under {name} is a {:?} layout of {}, not of {source}",
                m.kind, m.source
            )));
        }
    }
    if let Some(c) = sidecars.hnsw {
        let m = HnswManifest::decode(&fetch(store, &c)?)?;
        if m.source != source {
            return Err(Error::InvalidArgument(format!(
                "HNSW manifest {c} was built from {}, not {source}",
                m.source
            )));
        }
        crmf.metadata.insert(META_HNSW.to_vec(), c.0.to_vec());
    }
    if let Some(c) = sidecars.pq {
        let m = PqManifest::decode(&fetch(store, &c)?)?;
        if m.source != source {
            return Err(Error::InvalidArgument(format!(
                "PQ manifest {c} was trained on {}, not {source}",
                m.source
            )));
        }
        crmf.metadata.insert(META_PQ.to_vec(), c.0.to_vec());
    }
    crmf.created_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Ok(crmf)
}

/// Points the named root `name` at `map` and its `sidecars` (each must be in
/// the store and name this map's descriptor as its source). The logical
/// version is one more than the one previously published under `name`
/// (0 for a new name). Returns the new `CRMF` CID.
pub fn publish(
    store: &dyn BlockStore,
    name: &str,
    map: &ProximityMap<'_>,
    sidecars: &Sidecars,
) -> Result<Cid> {
    publish_with(store, name, map, sidecars, &Metadata::new())
}

/// Extra `CRMF` metadata published beside the sidecars (the secondary-index
/// roots, `prox.si.*`).
pub type Metadata = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;

/// [`publish`] with extra metadata pairs.
pub fn publish_with(
    store: &dyn BlockStore,
    name: &str,
    map: &ProximityMap<'_>,
    sidecars: &Sidecars,
    extra: &Metadata,
) -> Result<Cid> {
    validate_root_name(name)?;
    let mut crmf = content_root(store, map.descriptor_cid(), sidecars, extra)?;
    for _ in 0..16 {
        let prev = match current(store, name) {
            Ok(p) => p,
            // A name holding something else is replaced.
            Err(Error::InvalidArgument(_)) | Err(Error::Corrupt { .. }) => None,
            Err(e) => return Err(e),
        };
        crmf.logical_version = prev.as_ref().map_or(0, |p| p.2.logical_version + 1);
        let cid = store.put(&crmf.encode()?)?;
        // The root must never name a block that a crash could lose.
        store.commit()?;
        let manifest = RootManifest::new(Some(cid), typed_root_config()).encode();
        let expected = store.root(name)?;
        if prev.is_some() && expected.as_deref() != prev.as_ref().map(|p| p.0.as_slice()) {
            continue;
        }
        if store.cas_root(name, expected.as_deref(), Some(&manifest))? {
            return Ok(cid);
        }
    }
    Err(Error::InvalidArgument(format!(
        "root {name:?} kept changing while publishing"
    )))
}

/// Points the named root `name` at the descriptor `source` and its
/// `sidecars` by one compare-and-swap, only if the root currently names
/// the descriptor `expected` (`None`: no map, the name absent or empty).
/// Every block is made durable before the root moves. Otherwise
/// [`Error::Conflict`] with the descriptor found, and nothing changes.
/// Returns the new `CRMF` CID.
pub fn publish_expecting(
    store: &dyn BlockStore,
    name: &str,
    source: Cid,
    sidecars: &Sidecars,
    expected: Option<Cid>,
) -> Result<Cid> {
    publish_expecting_with(store, name, source, sidecars, &Metadata::new(), expected)
}

/// [`publish_expecting`] with extra metadata pairs.
pub fn publish_expecting_with(
    store: &dyn BlockStore,
    name: &str,
    source: Cid,
    sidecars: &Sidecars,
    extra: &Metadata,
    expected: Option<Cid>,
) -> Result<Cid> {
    validate_root_name(name)?;
    let mut crmf = content_root(store, source, sidecars, extra)?;
    let before = store.root(name)?;
    let prev = current(store, name)?;
    let found = prev.as_ref().map(|p| p.2.root);
    let conflict = |found| Error::Conflict {
        name: name.to_string(),
        expected,
        found,
    };
    let raced = prev
        .as_ref()
        .is_some_and(|p| before.as_deref() != Some(p.0.as_slice()));
    if found != expected || raced {
        return Err(conflict(found));
    }
    crmf.logical_version = prev.as_ref().map_or(0, |p| p.2.logical_version + 1);
    let cid = store.put(&crmf.encode()?)?;
    store.commit()?;
    let manifest = RootManifest::new(Some(cid), typed_root_config()).encode();
    if store.cas_root(name, before.as_deref(), Some(&manifest))? {
        return Ok(cid);
    }
    let now = current(store, name).ok().flatten().map(|p| p.2.root);
    Err(conflict(now))
}

/// The descriptor CID and sidecars published under `name`, or `None` when
/// the name is absent or empty. A name holding an ordered tree or a typed
/// root of another kind is [`Error::InvalidArgument`].
pub fn resolve(store: &dyn BlockStore, name: &str) -> Result<Option<(Cid, Sidecars)>> {
    Ok(resolve_full(store, name)?.map(|(d, s, _)| (d, s)))
}

/// [`resolve`] plus the root's whole `CRMF` metadata, from the same two
/// reads (the root and its `CRMF`).
pub(crate) fn resolve_full(
    store: &dyn BlockStore,
    name: &str,
) -> Result<Option<(Cid, Sidecars, Metadata)>> {
    let Some((_, cid, crmf)) = current(store, name)? else {
        return Ok(None);
    };
    if crmf.kind != RootKind::ProximityDescriptor {
        return Err(Error::InvalidArgument(format!(
            "root {name:?} names a {:?}, not a proximity descriptor",
            crmf.kind
        )));
    }
    let side = |key: &[u8]| -> Result<Option<Cid>> {
        match crmf.metadata.get(key) {
            None => Ok(None),
            Some(v) => Cid::from_slice(v).map(Some).ok_or_else(|| Error::Corrupt {
                cid,
                reason: format!(
                    "metadata {} is {} bytes, not a CID",
                    String::from_utf8_lossy(key),
                    v.len()
                ),
            }),
        }
    };
    let sidecars = Sidecars {
        hnsw: side(META_HNSW)?,
        pq: side(META_PQ)?,
    };
    Ok(Some((crmf.root, sidecars, crmf.metadata)))
}

/// The `CRMF` metadata published under `name` whose keys start with
/// `prefix` (empty when the name is absent or empty).
pub fn resolve_metadata(store: &dyn BlockStore, name: &str, prefix: &[u8]) -> Result<Metadata> {
    let Some((_, _, crmf)) = current(store, name)? else {
        return Ok(Metadata::new());
    };
    Ok(crmf
        .metadata
        .into_iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .collect())
}

/// A map's persisted search layouts (`PRLY` manifests a named root
/// publishes under `prox.layout.*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layouts {
    /// The scan arena (`prox.layout.arena`).
    pub arena: Option<Cid>,
    /// The adaptive sub-lists and 4-bit pass (`prox.layout.adaptive`).
    pub adaptive: Option<Cid>,
    /// The coarse lists of a 4-bit PQ sidecar's fast-scan index
    /// (`prox.layout.ivf`).
    pub ivf: Option<Cid>,
    /// The recall profile `--recall` chooses from (`prox.layout.profile`).
    pub profile: Option<Cid>,
    /// The exact-L2 local frames of one width (`prox.layout.frames`).
    pub frames: Option<Cid>,
    /// The exact-L2 rotated split arena of one width
    /// (`prox.layout.rotated`).
    pub rotated: Option<Cid>,
}

impl Layouts {
    /// The layouts named by `CRMF` metadata (other keys are ignored); a
    /// value that is not a CID is [`Error::InvalidArgument`].
    pub fn from_metadata(meta: &Metadata) -> Result<Layouts> {
        let get = |key: &[u8]| match meta.get(key) {
            None => Ok(None),
            Some(v) => Cid::from_slice(v).map(Some).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "metadata {} is {} bytes, not a CID",
                    String::from_utf8_lossy(key),
                    v.len()
                ))
            }),
        };
        Ok(Layouts {
            arena: get(super::format::META_LAYOUT_ARENA)?,
            adaptive: get(super::format::META_LAYOUT_ADAPTIVE)?,
            ivf: get(super::format::META_LAYOUT_IVF)?,
            profile: get(super::format::META_LAYOUT_PROFILE)?,
            frames: get(super::format::META_LAYOUT_FRAMES)?,
            rotated: get(super::format::META_LAYOUT_ROTATED)?,
        })
    }

    /// The `CRMF` metadata pairs naming these layouts.
    pub fn to_metadata(&self) -> Metadata {
        let mut m = Metadata::new();
        if let Some(c) = self.arena {
            m.insert(super::format::META_LAYOUT_ARENA.to_vec(), c.0.to_vec());
        }
        if let Some(c) = self.adaptive {
            m.insert(super::format::META_LAYOUT_ADAPTIVE.to_vec(), c.0.to_vec());
        }
        if let Some(c) = self.ivf {
            m.insert(super::format::META_LAYOUT_IVF.to_vec(), c.0.to_vec());
        }
        if let Some(c) = self.profile {
            m.insert(super::format::META_LAYOUT_PROFILE.to_vec(), c.0.to_vec());
        }
        if let Some(c) = self.frames {
            m.insert(super::format::META_LAYOUT_FRAMES.to_vec(), c.0.to_vec());
        }
        if let Some(c) = self.rotated {
            m.insert(super::format::META_LAYOUT_ROTATED.to_vec(), c.0.to_vec());
        }
        m
    }

    /// True when no layout is named.
    pub fn is_empty(&self) -> bool {
        self.arena.is_none()
            && self.adaptive.is_none()
            && self.ivf.is_none()
            && self.profile.is_none()
            && self.frames.is_none()
            && self.rotated.is_none()
    }

    /// True when a native search layout (arena, adaptive, frames or the
    /// rotated arena) is named.
    pub fn has_native(&self) -> bool {
        self.arena.is_some()
            || self.adaptive.is_some()
            || self.frames.is_some()
            || self.rotated.is_some()
    }
}

/// The layouts the named root `name` publishes (none when the root is
/// absent or names none).
pub fn resolve_layouts(store: &dyn BlockStore, name: &str) -> Result<Layouts> {
    Layouts::from_metadata(&resolve_metadata(store, name, META_LAYOUT_PREFIX)?)
}
