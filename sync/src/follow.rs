//! Followed roots: the table shared by the follow loops and the event loop.
//!
//! A follow loop subscribes to a root on its source with `Follow` (which
//! also returns the current value), pulls when the value differs from the
//! local one, then sleeps until one of: an `Announce` of that root from that
//! peer (push), the connection to the peer closing (re-subscribe at once,
//! since subscriptions live per connection), or the slow fallback interval.
//! The event loop only flips wake-ups here; it never waits on a loop.

use crate::session::PullReport;
use libp2p::PeerId;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// State of one followed root, as shown by `prox sync status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FollowState {
    /// Source address as configured.
    pub peer: String,
    /// Root name (on the source and locally).
    pub name: String,
    /// Peer id of the source once connected.
    pub peer_id: Option<String>,
    /// True while the source has accepted our `Follow` subscription on the
    /// current connection (pushes arrive); false means polling only.
    pub subscribed: bool,
    /// Announces received from the source for this root.
    pub announces: u64,
    /// Subscribe-and-check rounds run (initial, announced, reconnect,
    /// fallback).
    pub checks: u64,
    /// Report of the last pull that moved the root.
    pub last_pull: Option<PullReport>,
    /// Last error, cleared by the next successful check.
    pub last_error: Option<String>,
}

struct Entry {
    peer: Option<PeerId>,
    wake: Arc<Notify>,
    state: FollowState,
}

/// Followed roots by local name.
#[derive(Default)]
pub(crate) struct FollowTable {
    entries: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for FollowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FollowTable").finish_non_exhaustive()
    }
}

impl FollowTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a followed root; returns its wake-up handle.
    pub(crate) fn add(&self, peer: &str, name: &str) -> Arc<Notify> {
        let wake = Arc::new(Notify::new());
        self.lock().insert(
            name.to_string(),
            Entry {
                peer: None,
                wake: wake.clone(),
                state: FollowState {
                    peer: peer.to_string(),
                    name: name.to_string(),
                    ..FollowState::default()
                },
            },
        );
        wake
    }

    /// True when `name` is followed.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    /// Updates the state of `name` (no-op if not followed).
    pub(crate) fn update(&self, name: &str, f: impl FnOnce(&mut FollowState)) {
        if let Some(e) = self.lock().get_mut(name) {
            f(&mut e.state);
        }
    }

    /// Records which peer serves `name`.
    pub(crate) fn set_peer(&self, name: &str, peer: PeerId) {
        if let Some(e) = self.lock().get_mut(name) {
            e.peer = Some(peer);
            e.state.peer_id = Some(peer.to_string());
        }
    }

    /// An `Announce` of `name` arrived from `peer`: wakes the loop and
    /// returns true if this node follows `name` from `peer`.
    pub(crate) fn announced(&self, peer: &PeerId, name: &str) -> bool {
        let mut t = self.lock();
        match t.get_mut(name) {
            Some(e) if e.peer.as_ref() == Some(peer) => {
                e.state.announces += 1;
                e.wake.notify_one();
                true
            }
            _ => false,
        }
    }

    /// The last connection to `peer` closed: its subscriptions are gone, so
    /// every loop following from it re-subscribes.
    pub(crate) fn disconnected(&self, peer: &PeerId) {
        for e in self.lock().values_mut() {
            if e.peer.as_ref() == Some(peer) {
                e.state.subscribed = false;
                e.wake.notify_one();
            }
        }
    }

    /// Snapshot for status, sorted by name.
    pub(crate) fn states(&self) -> Vec<FollowState> {
        let mut v: Vec<FollowState> = self.lock().values().map(|e| e.state.clone()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }
}
