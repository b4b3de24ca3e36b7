//! Protocol limits. Every length read from the network is checked against
//! one of these before anything is allocated.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Largest block either side will send or accept (4 MiB).
pub const MAX_BLOCK: u32 = 4 << 20;
/// Most CIDs in one `WANT` frame (128 KiB of CIDs).
pub const MAX_WANT_CIDS: u16 = 4096;
/// Largest control request (64 KiB).
pub const MAX_CTL_REQUEST: u32 = 64 << 10;
/// Largest control response (1 MiB).
pub const MAX_CTL_RESPONSE: u32 = 1 << 20;
/// Largest named-root value exchanged (RootManifest bytes are tiny; this
/// leaves room for CBOR framing inside a control response).
pub const MAX_ROOT_VALUE: usize = 64 << 10;
/// Most roots per `ListRoots` page.
pub const MAX_LIST_ROOTS: u32 = 1000;
/// Longest root name accepted in a frame or message.
pub const MAX_NAME: usize = 255;

/// Limits and pacing of one node; both sides of a session use the minimum of
/// their values for anything negotiated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest block accepted or served.
    pub max_block: u32,
    /// CIDs per `WANT` batch the puller sends.
    pub want_cids: u16,
    /// Byte budget per `WANT` batch: the server defers the rest of a batch
    /// once this much block data has been sent for it (at least one block is
    /// always sent). The puller buffers at most one batch before staging it.
    pub batch_bytes: u32,
    /// `WANT` batches in flight per session (pipelining depth).
    pub inflight_batches: u16,
    /// Concurrent block sessions a server accepts from one peer.
    pub sessions_per_peer: u16,
    /// Concurrent block sessions a server accepts in total.
    pub sessions_total: u16,
    /// Of `sessions_total`, slots only allowlisted or followed peers may
    /// take: peers admitted by `open` alone (free identities) share the
    /// rest, so they cannot lock out the peers the operator named.
    pub sessions_reserved: u16,
    /// Block bytes a server holds in flight for one peer across all its
    /// sessions (answers read from the store and not yet written).
    pub peer_inflight_bytes: u64,
    /// Block requests (`WANT`, `WANT_CLOSURE`) a server has in flight for
    /// one peer across all its sessions (read and not yet answered); more
    /// are answered `BUSY`.
    pub requests_per_peer: u16,
    /// Block requests a server has in flight for all peers together; more
    /// are answered `BUSY`.
    pub requests_total: u16,
    /// Server-side byte budget of one `WANT_CLOSURE` (bulk) request.
    pub bulk_budget_bytes: u64,
    /// Block bytes one pull may fetch in total (every stream and retry of
    /// it); past this the pull stops with `Error::PullTooLarge`.
    pub pull_max_bytes: u64,
    /// Wall-clock limit of one whole pull; past this it stops with
    /// `Error::PullDeadline`. What was staged is kept for a resume.
    #[serde(with = "secs")]
    pub pull_deadline: Duration,
    /// No progress on a session for this long (no byte read or written
    /// on its block stream) cancels it (resumable).
    #[serde(with = "secs")]
    pub idle_timeout: Duration,
    /// Time limit of one control request.
    #[serde(with = "secs")]
    pub request_timeout: Duration,
    /// Time an inbound `Announce` may take (the announced pull runs before the
    /// answer).
    #[serde(with = "secs")]
    pub announce_timeout: Duration,
    /// Idle connections are closed after this long.
    #[serde(with = "secs")]
    pub idle_connection: Duration,
    /// While a node runs, staged blocks no pending-sync record can use
    /// (left by pulls that failed for good) are collected this often.
    #[serde(with = "secs")]
    pub staging_gc_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_block: MAX_BLOCK,
            want_cids: 1024,
            batch_bytes: 8 << 20,
            inflight_batches: 4,
            sessions_per_peer: 4,
            sessions_total: 64,
            sessions_reserved: 16,
            peer_inflight_bytes: 32 << 20,
            requests_per_peer: 4,
            requests_total: 64,
            bulk_budget_bytes: 4 << 30,
            pull_max_bytes: 256 << 30,
            pull_deadline: Duration::from_secs(24 * 3600),
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(20),
            announce_timeout: Duration::from_secs(600),
            idle_connection: Duration::from_secs(120),
            staging_gc_interval: Duration::from_secs(600),
        }
    }
}

impl Limits {
    /// Rejects values outside the protocol's hard limits.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_block == 0 || self.max_block > MAX_BLOCK {
            return Err(format!("max_block must be 1..={MAX_BLOCK}"));
        }
        if self.want_cids == 0 || self.want_cids > MAX_WANT_CIDS {
            return Err(format!("want_cids must be 1..={MAX_WANT_CIDS}"));
        }
        if self.batch_bytes == 0 {
            return Err("batch_bytes must be > 0".into());
        }
        if self.inflight_batches == 0 || self.inflight_batches > 64 {
            return Err("inflight_batches must be 1..=64".into());
        }
        if self.sessions_per_peer == 0 || self.sessions_total == 0 {
            return Err("session caps must be > 0".into());
        }
        if self.sessions_reserved >= self.sessions_total {
            return Err("sessions_reserved must be < sessions_total".into());
        }
        if self.requests_per_peer == 0 || self.requests_total == 0 {
            return Err("request caps must be > 0".into());
        }
        if self.pull_max_bytes == 0 {
            return Err("pull_max_bytes must be > 0".into());
        }
        if self.peer_inflight_bytes < 1024 {
            return Err("peer_inflight_bytes must be >= 1024".into());
        }
        for (what, d) in [
            ("pull_deadline", self.pull_deadline),
            ("idle_timeout", self.idle_timeout),
            ("request_timeout", self.request_timeout),
            ("announce_timeout", self.announce_timeout),
            ("idle_connection", self.idle_connection),
            ("staging_gc_interval", self.staging_gc_interval),
        ] {
            if d.is_zero() {
                return Err(format!("{what} must be > 0"));
            }
        }
        Ok(())
    }
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

/// Bounds of one pull that override the node's [`Limits`] for that pull
/// only (`prox sync pull --max-pull-bytes/--pull-deadline`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PullLimits {
    /// Block bytes this pull may fetch (default `Limits::pull_max_bytes`).
    pub max_bytes: Option<u64>,
    /// Wall-clock limit of the whole pull, from the dial to the root update
    /// (default `Limits::pull_deadline`).
    pub deadline: Option<Duration>,
}

impl PullLimits {
    /// Rejects a zero budget or deadline.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_bytes == Some(0) {
            return Err("a pull's byte budget must be > 0".into());
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return Err("a pull's deadline must be > 0".into());
        }
        Ok(())
    }
}
