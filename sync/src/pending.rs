//! Durable pending-pull records (the design's "pending-sync record").
//!
//! When a pull starts fetching, it writes a record naming the local root,
//! the source (peer id and, when known, address), the remote name and the
//! target value; the record is removed when the pull publishes (or fails
//! for a reason a retry cannot fix: conflict, misbehaving peer, root gone).
//! A record still present at start-up therefore means the node stopped
//! mid-pull (SIGTERM, crash, network loss). Its verified blocks are already
//! durable in staging, so resuming costs only the remainder.
//!
//! Records are named roots of the *staging* store
//! (`pending-sync:<local name>`): set and removed durably by the store's
//! own root mechanism, invisible to everything that reads `main`, and no
//! extra file format.

use crate::stores::Stores;
use prox_engine::Result;
use serde::{Deserialize, Serialize};

const PREFIX: &str = "pending-sync:";

/// A pull that was started and has not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingPull {
    /// Local root the pull will move.
    pub local: String,
    /// Root name on the source.
    pub name: String,
    /// Source peer id.
    pub peer: String,
    /// Source address, when the pull was started from one.
    pub addr: Option<String>,
    /// Hex of the root value being pulled (RootManifest bytes).
    pub target: String,
    /// Local root value the pull started from (hex; compare-and-swap guard).
    pub expected: Option<String>,
    /// Unix seconds when the pull started.
    pub started_unix: u64,
}

fn key(local: &str) -> Option<String> {
    let k = format!("{PREFIX}{local}");
    prox_engine::store::validate_root_name(&k).ok().map(|_| k)
}

/// Durably records `p` (replacing an older record for the same local root).
/// Root names too long to carry the prefix are not recorded.
pub(crate) fn record(stores: &Stores, p: &PendingPull) -> Result<()> {
    let Some(k) = key(&p.local) else {
        return Ok(());
    };
    let bytes = serde_json::to_vec(p)
        .map_err(|e| prox_engine::Error::InvalidArgument(format!("pending-sync record: {e}")))?;
    stores.staging.set_root(&k, Some(&bytes))
}

/// Durably removes the record of `local`, if any.
pub(crate) fn clear(stores: &Stores, local: &str) -> Result<()> {
    match key(local) {
        Some(k) if stores.staging.root(&k)?.is_some() => stores.staging.set_root(&k, None),
        _ => Ok(()),
    }
}

/// Every record, sorted by local name. Unreadable records are skipped with
/// a warning (they are only hints; a later pull of that root replaces them).
pub fn list(stores: &Stores) -> Result<Vec<PendingPull>> {
    let mut out = Vec::new();
    for (name, value) in stores.staging.roots()? {
        if !name.starts_with(PREFIX) {
            continue;
        }
        match serde_json::from_slice::<PendingPull>(&value) {
            Ok(p) => out.push(p),
            Err(e) => tracing::warn!(%name, %e, "unreadable pending-sync record"),
        }
    }
    Ok(out)
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Removes staged blocks no pending-sync record can use: everything not
/// reachable, through staged blocks only, from the target of a record.
/// A node runs it at start-up and every `Limits::staging_gc_interval`
/// while no pull runs (a pull that failed for good leaves staged blocks
/// no record names); `prox gc` runs it on the store's staging. A running
/// pull is safe: it records its target before staging anything, every
/// block it stages hangs below a staged parent or that target, and the
/// staging lock keeps its puts out between listing and retaining. With
/// `dry_run` nothing is removed.
/// Returns the number of blocks removed (or that would be).
pub fn collect_staging<L: crate::links::Linker>(
    stores: &Stores,
    linker: &L,
    dry_run: bool,
) -> Result<usize> {
    let _lock = stores.lock_staging();
    let staged = stores.staging.cids()?;
    if staged.is_empty() {
        return Ok(0);
    }
    let mut keep = std::collections::HashSet::new();
    for p in list(stores)? {
        let Ok(value) = hex::decode(&p.target) else {
            continue;
        };
        let mut todo = linker.root_links(&value).unwrap_or_default();
        while let Some((cid, kind)) = todo.pop() {
            if keep.contains(&cid) {
                continue;
            }
            let Some(bytes) = stores.staging.get(&cid)? else {
                continue;
            };
            keep.insert(cid);
            todo.extend(linker.links(&kind, &bytes).unwrap_or_default());
        }
    }
    let removed = staged.len() - keep.len();
    if removed > 0 && !dry_run {
        stores.staging.retain(&keep)?;
        stores.staging.commit()?;
    }
    Ok(removed)
}
