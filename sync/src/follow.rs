//! Followed roots: the table shared by the follow loops and the event loop.
//!
//! A follow loop subscribes to a root on each of its sources with `Follow`
//! (which also returns the current value), pulls when the first source's
//! value differs from the local one (from every source serving that
//! value), then sleeps until one of: an `Announce` of that root from one of
//! those peers (push), the connection to one of them closing (re-subscribe
//! at once, since subscriptions live per connection), or the slow fallback
//! interval.
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
    /// Source address as configured (the first, preferred one).
    pub peer: String,
    /// Further source addresses configured for the same root (`--follow`
    /// given several times with one name), in order of preference.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<String>,
    /// Sources that connected in the last round (the pull fetches from
    /// those serving the leading source's value).
    pub connected: usize,
    /// Root name (on the source and locally).
    pub name: String,
    /// Peer id of the leading source (the first that connected).
    pub peer_id: Option<String>,
    /// True while the leading source has accepted our `Follow`
    /// subscription on the current connection (pushes arrive); false means
    /// polling only.
    pub subscribed: bool,
    /// Announces received from the sources for this root.
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
    /// The sources connected in the last round.
    peers: Vec<PeerId>,
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

    /// Registers a followed root with its source addresses (at least one,
    /// in order of preference); returns its wake-up handle.
    pub(crate) fn add(&self, sources: &[String], name: &str) -> Arc<Notify> {
        let wake = Arc::new(Notify::new());
        self.lock().insert(
            name.to_string(),
            Entry {
                peers: Vec::new(),
                wake: wake.clone(),
                state: FollowState {
                    peer: sources.first().cloned().unwrap_or_default(),
                    others: sources.iter().skip(1).cloned().collect(),
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

    /// Records which peers serve `name` this round (the leading one
    /// first).
    pub(crate) fn set_peers(&self, name: &str, peers: &[PeerId]) {
        if let Some(e) = self.lock().get_mut(name) {
            e.peers = peers.to_vec();
            e.state.peer_id = peers.first().map(ToString::to_string);
            e.state.connected = peers.len();
        }
    }

    /// An `Announce` of `name` arrived from `peer`: wakes the loop and
    /// returns true if this node follows `name` from `peer` (one of its
    /// sources).
    pub(crate) fn announced(&self, peer: &PeerId, name: &str) -> bool {
        let mut t = self.lock();
        match t.get_mut(name) {
            Some(e) if e.peers.contains(peer) => {
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
            if e.peers.contains(peer) {
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
