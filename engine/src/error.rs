//! The engine's one error type.

use crate::cid::Cid;
use std::path::PathBuf;

/// Result alias for the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure of the engine layer. Errors carry data (CIDs, record keys,
/// expected/actual values) so callers can report exactly what is at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ----- decoding (shared by every codec) -----
    /// Input ended before the object `object` was complete.
    #[error("{object}: truncated input")]
    Truncated {
        /// Object type being decoded (e.g. "CRAB node", "PRXN").
        object: &'static str,
    },
    /// Bytes remained after a complete object.
    #[error("{object}: {extra} trailing bytes")]
    TrailingBytes {
        /// Object type being decoded.
        object: &'static str,
        /// Number of bytes left over.
        extra: usize,
    },
    /// A varint overflowed u64 or the context's range, or was not minimal.
    #[error("{object}: invalid varint: {reason}")]
    Varint {
        /// Object type being decoded.
        object: &'static str,
        /// What was wrong.
        reason: &'static str,
    },
    /// Bytes that are not a valid object of this type.
    #[error("invalid {object}: {reason}")]
    InvalidObject {
        /// Object type being decoded or encoded.
        object: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// A proximity object with a version this build does not read.
    #[error("unsupported proximity object version {found} (required {required})")]
    UnsupportedProximityVersion {
        /// Version byte found.
        found: u8,
        /// Version this build reads.
        required: u8,
    },

    // ----- stores -----
    /// A block whose bytes do not hash to its CID, or whose frame is damaged.
    #[error("corrupt block {cid}: {reason}")]
    Corrupt {
        /// The CID that was asked for.
        cid: Cid,
        /// What was wrong.
        reason: String,
    },
    /// A block the operation needs is not in the store.
    #[error("block {cid} not found")]
    NotFound {
        /// The missing CID.
        cid: Cid,
    },
    /// Another process holds the store's write lock.
    #[error("store {path} is locked by another process")]
    Locked {
        /// Store directory.
        path: PathBuf,
    },
    /// The process that owns a store (a running server or daemon) could
    /// not be reached over its socket, did not answer in time, or spoke
    /// outside the owner protocol.
    #[error("store owner at {socket}: {reason}")]
    Owner {
        /// The owner socket.
        socket: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The store's owner ran a request and it failed there (its message).
    #[error("the store's owner refused the request: {reason}")]
    OwnerRefused {
        /// The owner's error message.
        reason: String,
    },
    /// A write was attempted on a store opened read-only.
    #[error("store {path} is open read-only")]
    ReadOnly {
        /// Store directory.
        path: PathBuf,
    },
    /// A store file is damaged beyond what recovery may repair.
    #[error("store file {path} is damaged: {reason}")]
    StoreDamaged {
        /// The damaged file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A collection found blocks reachable from a root or pin that are
    /// absent from the store. Nothing was removed: everything below them is
    /// unknown, so nothing can be proven dead. Fetch or put them again (or
    /// drop the roots that need them) before collecting.
    #[error("{} reachable blocks are missing (first: {}); garbage collection refused, nothing removed", missing.len(), missing.first().map(|c| c.to_string()).unwrap_or_default())]
    MissingReachable {
        /// The missing CIDs, sorted.
        missing: Vec<Cid>,
    },
    /// An earlier write or fsync of this store failed; every write is
    /// refused until the store is reopened (recovery at open then finds what
    /// actually reached the disk).
    #[error("store {path} refuses writes after an I/O error ({reason}); reopen it")]
    Poisoned {
        /// Store directory.
        path: PathBuf,
        /// The first failure.
        reason: String,
    },
    /// A named root's name is not acceptable.
    #[error("invalid root name {name:?}: {reason}")]
    InvalidRootName {
        /// The rejected name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// I/O failure.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A remote block store (object storage) failed after its retries;
    /// `kind` says what kind of failure, `store` names the store
    /// (`s3://bucket/prefix`).
    #[error("{store}: {kind}: {reason}")]
    Remote {
        /// The store, as its URL.
        store: String,
        /// What kind of failure.
        kind: RemoteErrorKind,
        /// The service's own message.
        reason: String,
    },

    // ----- trees and maps -----
    /// A configuration that cannot be used.
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    /// The same key appears twice in one input.
    #[error("duplicate key {}", hex::encode(key))]
    DuplicateKey {
        /// The repeated key.
        key: Vec<u8>,
    },
    /// A vector of the wrong length.
    #[error("wrong dimension: expected {expected}, got {got}{}", key.as_ref().map(|k| format!(" (key {})", hex::encode(k))).unwrap_or_default())]
    WrongDimension {
        /// Dimensions the map uses.
        expected: usize,
        /// Dimensions supplied.
        got: usize,
        /// The record at fault, when known.
        key: Option<Vec<u8>>,
    },
    /// A vector with a NaN or infinite component.
    #[error("non-finite component {index} in vector{}", key.as_ref().map(|k| format!(" of key {}", hex::encode(k))).unwrap_or_default())]
    NonFiniteVector {
        /// Component index.
        index: usize,
        /// The record at fault, when known.
        key: Option<Vec<u8>>,
    },
    /// A zero vector in a cosine map.
    #[error("zero vector under cosine metric{}", key.as_ref().map(|k| format!(" (key {})", hex::encode(k))).unwrap_or_default())]
    ZeroCosineVector {
        /// The record at fault, when known.
        key: Option<Vec<u8>>,
    },
    /// A cosine vector whose unit normalisation reached neither a fixed
    /// point nor a cycle within the iteration bound (`math::prepare`; no
    /// such vector is known: every tested one settles within a few rounds).
    #[error("cosine normalisation reached neither a fixed point nor a cycle{}", key.as_ref().map(|k| format!(" (key {})", hex::encode(k))).unwrap_or_default())]
    NoUnitFixedPoint {
        /// The record at fault, when known.
        key: Option<Vec<u8>>,
    },
    /// A proximity node cannot be stored within `max_page_bytes`, even after
    /// overflow paging (proximity-format.md 12.8).
    #[error("proximity node at level {level} needs {size} bytes, limit {max}")]
    NodeTooLarge {
        /// Hierarchy level of the node.
        level: u8,
        /// Encoded size of the smallest unit that did not fit.
        size: usize,
        /// The configured `max_page_bytes`.
        max: usize,
    },
    /// An argument outside its documented range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    // ----- queries -----
    /// A query parameter that cannot be served, naming the request field
    /// at fault (`k`, `path`, `filter`, ...).
    #[error("invalid {field}: {reason}")]
    InvalidRequest {
        /// The request field at fault.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A search passed the deadline its request set and was stopped (the
    /// `deadline` of [`crate::index::Request`]); nothing was returned.
    #[error("the search passed its deadline and was stopped")]
    DeadlineExceeded,
    /// No proximity map is published under a root name.
    #[error("no map is published under root {name:?}")]
    UnknownMap {
        /// The root name.
        name: String,
    },

    // ----- writes -----
    /// A key longer than a write accepts ([`crate::index::MAX_KEY_LEN`]).
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLong {
        /// Length of the key.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A write would change the records of a map whose HNSW sidecar is a
    /// canonical (flag `01`) graph, which cannot be updated incrementally,
    /// and the write's policy is to refuse
    /// ([`crate::index::CanonicalHnsw::Refuse`]). Nothing was published.
    #[error("the map's HNSW sidecar {manifest} is canonical (flag 01) and cannot be updated incrementally; rebuild or drop it (canonical_hnsw = rebuild | drop)")]
    CanonicalHnsw {
        /// The canonical sidecar's manifest CID.
        manifest: Cid,
    },
    /// A compare-and-swap of a named root found another value than the
    /// one the write expected; nothing was changed.
    #[error("root {name:?} names {}, the write expected {}", found.map(|c| c.to_string()).unwrap_or_else(|| "no map".into()), expected.map(|c| c.to_string()).unwrap_or_else(|| "no map".into()))]
    Conflict {
        /// The root name.
        name: String,
        /// The descriptor the write expected (`None`: no map).
        expected: Option<Cid>,
        /// The descriptor the root names now (`None`: no map).
        found: Option<Cid>,
    },

    /// Another writer of the root held its write lease for longer than
    /// this write was willing to wait; nothing was changed.
    #[error("map {name:?} is being written by another writer; gave up after waiting {} s", waited.as_secs_f64())]
    Busy {
        /// The root name.
        name: String,
        /// How long the write waited.
        waited: std::time::Duration,
    },

    // ----- secondary indexes and field filters -----
    /// An index definition or declaration that cannot be used (empty
    /// name, generation 0, a projection against its mode, a bad term range).
    #[error("invalid index definition: {0}")]
    InvalidIndexDefinition(String),
    /// A descriptor's fingerprint differs from the one its fields give.
    #[error("index definition mismatch: persisted fingerprint {persisted}, runtime {runtime}")]
    IndexDefinitionMismatch {
        /// Fingerprint stored (hex).
        persisted: String,
        /// Fingerprint recomputed (hex).
        runtime: String,
    },
    /// An extraction or record limit was exceeded.
    #[error("secondary index limit {resource} is {limit}, got {actual}")]
    IndexResourceLimit {
        /// Which limit (the reference's resource name).
        resource: &'static str,
        /// The limit.
        limit: usize,
        /// The offending size.
        actual: usize,
    },
    /// An index extractor refused a record.
    #[error(
        "index {name} cannot extract terms from key {}: {reason}",
        hex::encode(key)
    )]
    IndexExtractionFailed {
        /// Index name.
        name: String,
        /// The record's key.
        key: Vec<u8>,
        /// Why.
        reason: String,
    },
    /// A filter names a payload field the map has no index for.
    #[error("filter field {field:?} is not indexed (indexed fields: {indexed})")]
    UnknownField {
        /// The field named by the filter.
        field: String,
        /// The indexed fields, comma-separated.
        indexed: String,
    },
    /// A filter compares an indexed field with a value of another type.
    #[error("filter field {field:?} is indexed as {indexed}, the filter gives {given}")]
    FieldTypeMismatch {
        /// The field.
        field: String,
        /// Its declared type.
        indexed: &'static str,
        /// What the filter gave.
        given: String,
    },
}

/// The kinds of [`Error::Remote`] failures a caller may act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteErrorKind {
    /// The credentials were refused or are missing (HTTP 401/403).
    Auth,
    /// The bucket does not exist.
    MissingBucket,
    /// The service kept answering "slow down" (HTTP 429/503) after every
    /// retry.
    Throttled,
    /// The service could not be reached or kept failing (connection
    /// errors, timeouts, HTTP 5xx) after every retry.
    Unavailable,
    /// A named root kept changing under a compare-and-swap beyond the
    /// retry bound.
    Contended,
    /// Anything else the service answered (the reason says what).
    Other,
}

impl std::fmt::Display for RemoteErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RemoteErrorKind::Auth => "authentication or permission refused",
            RemoteErrorKind::MissingBucket => "bucket does not exist",
            RemoteErrorKind::Throttled => "throttled",
            RemoteErrorKind::Unavailable => "service unavailable",
            RemoteErrorKind::Contended => "root contended",
            RemoteErrorKind::Other => "request failed",
        })
    }
}

impl Error {
    /// Shorthand for [`Error::InvalidObject`].
    pub fn invalid(object: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidObject {
            object,
            reason: reason.into(),
        }
    }
}
