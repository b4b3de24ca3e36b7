//! [`Index::write`]: apply a batch and publish it, re-applying it to the
//! newer snapshot when another writer moved the root meanwhile.
//!
//! Two writers of one map (a CLI update and an HTTP upsert, two processes
//! on one bucket) each apply their batch to the snapshot they read and
//! publish by compare-and-swap, so one of them finds the root moved. A
//! batch names the final state of its keys (an upsert sets a point, a
//! delete removes it), so applying it to the newer snapshot means what the
//! writer meant, and no acknowledged write of the other is lost: the loser
//! opens the current snapshot, applies the same batch and tries again, a
//! bounded number of times. A caller that wants optimistic concurrency
//! instead (fail when the map is not the version it read, like HTTP
//! `If-Match`) passes `rebases = 0` and gets [`Error::Conflict`].
//!
//! Where the store has an owner process (a directory store, also reached
//! through its owner socket), a write first takes the root's write lease
//! ([`BlockStore::lease`](crate::BlockStore::lease)), so writers queue in
//! arrival order and a slow one is not starved by a fast one that keeps
//! winning the swap; the swap still guards writers that do not take it.

use super::batch::{Batch, WriteOptions};
use super::open::{Index, Options};
use super::write::Applied;
use crate::cid::Cid;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// Re-applications a front end allows by default before it reports the
/// conflict (each one means another writer published in between).
pub const DEFAULT_REBASES: u32 = 16;

/// How long a write waits behind other writers of its map for the lease.
pub const LEASE_WAIT: Duration = Duration::from_secs(120);

/// The result of [`Index::write`].
#[derive(Debug)]
pub struct Written {
    /// The published snapshot and what the last application wrote.
    pub applied: Applied,
    /// The descriptor CID the root names now.
    pub descriptor: Cid,
    /// How many times the batch was re-applied to a newer snapshot.
    pub rebased: u32,
}

impl Index {
    /// Applies `batch` to this snapshot and publishes the result under the
    /// root `name` ([`Index::apply`] then [`Index::commit`] expecting this
    /// descriptor), holding the root's write lease where the store has
    /// one ([`Error::Busy`] after [`LEASE_WAIT`] behind other writers).
    /// When the root names another descriptor by then, opens
    /// that snapshot (with `open`; the base of a write needs no warm
    /// layouts) and applies the batch to it again, at most `rebases` times;
    /// after that, or with `rebases = 0`, the [`Error::Conflict`] of the
    /// last attempt. A root that was removed meanwhile is
    /// [`Error::UnknownMap`]. Every error of [`Index::apply`] is returned
    /// at once (a batch that is invalid on one snapshot is invalid on all).
    pub fn write(
        &self,
        name: &str,
        batch: &Batch,
        options: &WriteOptions,
        open: &Options,
        rebases: u32,
    ) -> Result<Written> {
        let lease = self.store().lease(name, LEASE_WAIT)?;
        let mut reopened: Option<Index> = None;
        let mut rebased = 0;
        // Waiting for the lease usually means another writer just
        // published: apply to its version straight away.
        if lease.is_some() && rebases > 0 {
            let current = crate::proximity::resolve(&**self.store(), name)?.map(|(d, _)| d);
            if current.is_some_and(|d| d != self.descriptor()) {
                rebased += 1;
                reopened = Some(Index::open(Arc::clone(self.store()), name, open)?);
            }
        }
        loop {
            let base = reopened.as_ref().unwrap_or(self);
            let applied = base.apply(batch, options)?;
            match applied.index.commit(name, Some(base.descriptor())) {
                Ok(descriptor) => {
                    return Ok(Written {
                        applied,
                        descriptor,
                        rebased,
                    })
                }
                Err(Error::Conflict { .. }) if rebased < rebases => {
                    rebased += 1;
                    reopened = Some(Index::open(Arc::clone(self.store()), name, open)?);
                }
                Err(e) => return Err(e),
            }
        }
    }
}
