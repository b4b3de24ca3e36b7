//! Garbage collection, store-agnostic: mark everything reachable from the
//! named roots, explicit extra roots and pins, then let the store drop the
//! rest with [`BlockStore::retain`].
//!
//! What a block links to is not this module's business: the caller supplies
//! a *link function* over a block kind `K` (the typed-link extractor of
//! [`crate::refs`] in production, a toy in tests) and a *root link function*
//! that reads a named root's value (RootManifest bytes) into typed CIDs.
//!
//! Safety rules (a collection may reclaim less than possible, never more):
//! * A reachable block that cannot be read or decoded aborts the
//!   collection with that error before anything is removed (its links are
//!   unknown, so nothing below it can be proven dead).
//! * A reachable block that is absent also aborts the collection, with
//!   [`Error::MissingReachable`] naming it: it may be a block whose record
//!   was damaged on disk, and the blocks below it are still needed once it
//!   is fetched again. A dry run reports the missing blocks in
//!   [`GcReport::missing_cids`] instead of failing.
//! * Pins ([`Pins`]) keep exactly the pinned blocks. The pin registry is
//!   frozen from the pin snapshot to the end of `retain`, so a writer that
//!   pins a block before putting it can never lose it to a concurrent
//!   collection. Blocks put concurrently *without* a pin and not yet
//!   reachable from a root may be collected: writers running beside a
//!   collector must pin until they publish.

use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::store::{BlockStore, Pins, RetainStats};
use std::collections::HashSet;
use std::hash::Hash;

/// Extracts the typed links of one block of kind `K`.
pub type LinkFn<'a, K> = &'a dyn Fn(K, &[u8]) -> Result<Vec<(Cid, K)>>;

/// Extracts the typed links of a named root's value (RootManifest bytes).
pub type RootLinkFn<'a, K> = &'a dyn Fn(&[u8]) -> Result<Vec<(Cid, K)>>;

/// Outcome of a collection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Named roots marked from.
    pub roots: u64,
    /// Distinct pinned CIDs honoured (registry plus explicit extra roots).
    pub pinned: u64,
    /// Distinct CIDs found reachable (present or not).
    pub reachable: u64,
    /// Reachable CIDs absent from the store.
    pub missing: u64,
    /// Those CIDs, sorted. A collection (not a dry run) with any of them
    /// fails with [`Error::MissingReachable`] before removing anything.
    pub missing_cids: Vec<Cid>,
    /// What `retain` did, or would do in a dry run.
    pub retained: RetainStats,
    /// True when nothing was removed because this was a dry run.
    pub dry_run: bool,
}

/// Result of the mark phase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marked {
    /// Every CID reached (including absent ones).
    pub live: HashSet<Cid>,
    /// Reached CIDs that are not in the store.
    pub missing: HashSet<Cid>,
}

/// Marks every block reachable from `start` by following `links`. Each
/// (CID, kind) pair is decoded once; blocks are read through the store,
/// so each is verified against its CID.
pub fn mark<K: Copy + Eq + Hash>(
    store: &dyn BlockStore,
    start: impl IntoIterator<Item = (Cid, K)>,
    links: LinkFn<'_, K>,
) -> Result<Marked> {
    let mut out = Marked::default();
    let mut seen: HashSet<(Cid, K)> = HashSet::new();
    let mut stack: Vec<(Cid, K)> = Vec::new();
    for item in start {
        if seen.insert(item) {
            stack.push(item);
        }
    }
    while let Some((cid, kind)) = stack.pop() {
        out.live.insert(cid);
        let Some(bytes) = store.get(&cid)? else {
            out.missing.insert(cid);
            continue;
        };
        for child in links(kind, &bytes)? {
            if seen.insert(child) {
                stack.push(child);
            }
        }
    }
    Ok(out)
}

/// Runs a collection: marks from every named root (through `root_links`),
/// from `extra` and from the pins, then calls `retain` (or, with
/// `dry_run`, `plan_retain`: only counts what it would remove).
pub fn collect<K: Copy + Eq + Hash>(
    store: &dyn BlockStore,
    pins: &Pins,
    extra: &[(Cid, K)],
    root_links: RootLinkFn<'_, K>,
    links: LinkFn<'_, K>,
    dry_run: bool,
) -> Result<GcReport> {
    let _frozen = pins.freeze();
    let roots = store.roots()?;
    let mut start: Vec<(Cid, K)> = extra.to_vec();
    for (name, value) in &roots {
        let found = root_links(value).inspect_err(|e| {
            tracing::warn!(root = %name, error = %e, "named root does not decode; collection aborted");
        })?;
        start.extend(found);
    }
    let pinned = pins.snapshot();
    let marked = mark(store, start, links)?;
    let mut missing_cids: Vec<Cid> = marked.missing.iter().copied().collect();
    missing_cids.sort_unstable();
    if !dry_run && !missing_cids.is_empty() {
        tracing::warn!(
            missing = missing_cids.len(),
            first = %missing_cids[0],
            "reachable blocks are missing; collection refused"
        );
        return Err(Error::MissingReachable {
            missing: missing_cids,
        });
    }
    let mut report = GcReport {
        roots: roots.len() as u64,
        pinned: pinned.len() as u64 + extra.len() as u64,
        reachable: marked.live.len() as u64,
        missing: missing_cids.len() as u64,
        missing_cids,
        dry_run,
        ..GcReport::default()
    };
    let mut live = marked.live;
    live.extend(pinned);
    if dry_run {
        report.retained = store.plan_retain(&live)?;
    } else {
        report.retained = store.retain(&live)?;
    }
    Ok(report)
}

/// [`collect`] with the project's own block graph: named roots decoded by
/// [`refs::root_links`](crate::refs::root_links), blocks by
/// [`refs::links`](crate::refs::links).
pub fn collect_default(store: &dyn BlockStore, pins: &Pins, dry_run: bool) -> Result<GcReport> {
    collect(
        store,
        pins,
        &[],
        &crate::refs::root_links,
        &crate::refs::links,
        dry_run,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    /// Toy format: a block is "node:" followed by 32-byte child CIDs, or
    /// anything else (a leaf).
    fn toy_links(_: (), bytes: &[u8]) -> Result<Vec<(Cid, ())>> {
        match bytes.strip_prefix(b"node:") {
            Some(rest) if rest.len() % 32 == 0 => Ok(rest
                .chunks(32)
                .map(|c| (Cid::from_slice(c).unwrap_or_default(), ()))
                .collect()),
            Some(_) => Err(crate::Error::invalid("toy node", "ragged")),
            None => Ok(Vec::new()),
        }
    }

    fn toy_root(v: &[u8]) -> Result<Vec<(Cid, ())>> {
        Ok(Cid::from_slice(v).map(|c| (c, ())).into_iter().collect())
    }

    fn node(store: &MemStore, kids: &[Cid]) -> Cid {
        let mut b = b"node:".to_vec();
        for k in kids {
            b.extend_from_slice(k.as_bytes());
        }
        store.put(&b).unwrap()
    }

    #[test]
    fn marks_roots_pins_and_extras_and_reports_missing() {
        let s = MemStore::new();
        let leaf = s.put(b"leaf").unwrap();
        let absent = Cid::of(b"not stored");
        let inner = node(&s, &[leaf, absent]);
        let top = node(&s, &[inner, leaf]);
        let dead = s.put(b"dead").unwrap();
        let pinned = s.put(b"pinned").unwrap();
        let extra = s.put(b"extra").unwrap();
        s.set_root("main", Some(top.as_bytes())).unwrap();
        let pins = Pins::new();
        let guard = pins.pin(pinned);

        let dry = collect(&s, &pins, &[(extra, ())], &toy_root, &toy_links, true).unwrap();
        assert!(dry.dry_run);
        assert_eq!(dry.retained.removed_blocks, 1);
        assert_eq!(dry.retained.removed_bytes, 4);
        assert!(s.has(&dead).unwrap(), "dry run removes nothing");

        assert_eq!(dry.missing_cids, vec![absent]);
        // A missing reachable block stops the real run before any removal.
        match collect(&s, &pins, &[(extra, ())], &toy_root, &toy_links, false) {
            Err(Error::MissingReachable { missing }) => assert_eq!(missing, vec![absent]),
            other => panic!("expected MissingReachable, got {other:?}"),
        }
        assert!(s.has(&dead).unwrap(), "a refused run removes nothing");
        s.put(b"not stored").unwrap();

        let r = collect(&s, &pins, &[(extra, ())], &toy_root, &toy_links, false).unwrap();
        assert_eq!(r.roots, 1);
        assert_eq!(r.missing, 0);
        assert_eq!(r.reachable, 5); // top, inner, leaf, absent, extra
        assert_eq!(r.retained.removed_blocks, 1);
        for c in [leaf, inner, top, pinned, extra] {
            assert!(s.has(&c).unwrap());
        }
        assert!(!s.has(&dead).unwrap());

        drop(guard);
        collect(&s, &pins, &[], &toy_root, &toy_links, false).unwrap();
        assert!(
            !s.has(&pinned).unwrap(),
            "unpinned blocks become collectable"
        );
        assert!(!s.has(&extra).unwrap());
        assert!(s.has(&leaf).unwrap());
    }

    #[test]
    fn undecodable_reachable_block_aborts_without_removing() {
        let s = MemStore::new();
        let bad = s.put(b"node:ragged").unwrap();
        let dead = s.put(b"dead").unwrap();
        s.set_root("main", Some(bad.as_bytes())).unwrap();
        let err = collect(&s, &Pins::new(), &[], &toy_root, &toy_links, false);
        assert!(err.is_err());
        assert!(s.has(&dead).unwrap());
    }
}
