//! Control messages of `/prox/ctl/1` (request-response).
//!
//! Encoded as CBOR (ciborium) behind a 4-byte length prefix (see
//! [`super::codec`]). Byte fields use `serde_bytes` so they travel as CBOR
//! byte strings, not arrays of integers.

use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

/// Limits a node advertises; a session uses the minimum of both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol version ([`super::VERSION`]).
    pub version: u32,
    /// Largest block the sender serves or accepts.
    pub max_block: u32,
    /// Most CIDs per `WANT` the sender accepts.
    pub max_want: u16,
    /// Whether the sender would answer `WANT_CLOSURE` from the receiver.
    pub bulk: bool,
}

/// A named root as listed by `ListRoots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootEntry {
    /// Root name.
    pub name: String,
    /// Its value (RootManifest bytes).
    pub value: ByteBuf,
}

/// A control request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Request {
    /// Limits exchange.
    Hello(Hello),
    /// The current value of one named root.
    GetRoot {
        /// Root name.
        name: String,
    },
    /// A page of named roots with names strictly after `after`.
    ListRoots {
        /// Resume point (exclusive).
        after: Option<String>,
        /// Page size, at most [`super::limits::MAX_LIST_ROOTS`].
        limit: u32,
    },
    /// "I publish `name`; pull it into your root `target`". The receiver pulls
    /// from the sender over the same connection, then answers.
    Announce {
        /// Name under which the sender serves the root.
        name: String,
        /// The value the sender currently publishes (a hint: the receiver
        /// pulls whatever `GetRoot` returns when it starts).
        value: ByteBuf,
        /// Root name to update on the receiver.
        target: String,
    },
    /// `GetRoot`, and "announce changes of `name` to me": the server
    /// remembers the subscription for the life of the connection and sends
    /// `Announce{name, value, target: name}` whenever the root's value
    /// changes. Answered with `Root`. Added in version 1 (additive: a server
    /// that does not know it fails the request, and the follower falls back
    /// to polling).
    Follow {
        /// Root name.
        name: String,
    },
}

/// Machine-readable failure class of [`Response::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The peer is not allowed to do this.
    Unauthorized,
    /// The request is malformed or outside limits.
    BadRequest,
    /// The server is at a concurrency cap; retry later.
    Busy,
    /// A local failure on the server.
    Internal,
}

/// Outcome of an `Announce` on the receiving side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum AnnounceOutcome {
    /// The receiver pulled the closure and moved its root.
    Applied {
        /// Blocks the receiver fetched.
        blocks_fetched: u64,
        /// Block bytes the receiver fetched.
        bytes_fetched: u64,
    },
    /// The receiver's root moved concurrently; nothing was published.
    Conflict,
    /// The receiver does not accept pushes for this name from this peer.
    Rejected {
        /// Why.
        reason: String,
    },
    /// The pull failed.
    Failed {
        /// Why.
        reason: String,
    },
    /// The receiver follows this root from the sender: its follow loop
    /// pulls it now (answered at once, so the announcing side does not wait
    /// for the transfer).
    Scheduled,
}

/// A control response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Response {
    /// Limits exchange.
    Hello(Hello),
    /// Answer to `GetRoot`: `None` when the name is absent or not served.
    Root {
        /// RootManifest bytes.
        value: Option<ByteBuf>,
        /// Whether this peer may fetch the closure with `WANT_CLOSURE`
        /// (saves a refused round trip).
        bulk: bool,
        /// Whether this peer answers `WANT_DELTA` with patches. Added
        /// within version 1: absent in answers of older peers (read as
        /// false), ignored by older readers.
        #[serde(default)]
        delta: bool,
        /// Whether this peer answers `WANT_ZDELTA` (zstd-coded blocks and
        /// patches). Added within version 1, like `delta`.
        #[serde(default)]
        zstd: bool,
        /// The publisher's signed record for this value, when the peer has
        /// one (`crate::record`). Added within version 1, like `delta`.
        #[serde(default)]
        record: Option<ByteBuf>,
    },
    /// Answer to `ListRoots`.
    Roots {
        /// Roots in name order.
        roots: Vec<RootEntry>,
        /// Pass as `after` to get the next page; `None` at the end.
        next_after: Option<String>,
    },
    /// Answer to `Announce`.
    Announced(AnnounceOutcome),
    /// The request was refused or failed.
    Error {
        /// Failure class.
        code: ErrorCode,
        /// Human-readable detail.
        message: String,
    },
}
