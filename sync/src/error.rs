//! The sync layer's one error type.

use libp2p::PeerId;
use prox_engine::Cid;

/// Result alias for prox-sync.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a peer was judged to misbehave. Any of these disconnects the peer and
/// discards the batch it was answering.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// The bytes sent for `cid` hash to something else.
    #[error("block for {cid} hashes to {actual}")]
    HashMismatch {
        /// CID that was asked for.
        cid: Cid,
        /// Hash of the bytes received.
        actual: Cid,
    },
    /// The block hashes correctly but does not decode as the kind its parent
    /// declared.
    #[error("block {cid} does not decode as {kind}: {reason}")]
    WrongKind {
        /// The block.
        cid: Cid,
        /// Kind the parent declared.
        kind: String,
        /// Decoder message.
        reason: String,
    },
    /// A frame length above the negotiated limit.
    #[error("{what} of {len} bytes exceeds the limit of {max}")]
    Oversize {
        /// Which frame or message.
        what: &'static str,
        /// Announced length.
        len: u64,
        /// Limit in force.
        max: u64,
    },
    /// A frame that is not valid at this point of the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A `DELTA` answer that does not apply to its base.
    #[error("patch for {cid} does not apply: {reason}")]
    BadPatch {
        /// CID that was asked for.
        cid: Cid,
        /// What was wrong with the patch.
        reason: String,
    },
    /// A block nobody asked for.
    #[error("unsolicited block {cid}")]
    Unsolicited {
        /// The block's CID.
        cid: Cid,
    },
}

/// Every failure of prox-sync.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine (store, decoders) failed.
    #[error(transparent)]
    Engine(#[from] prox_engine::Error),
    /// Local I/O (identity file, control socket, staging).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A peer broke the protocol; it has been disconnected and banned.
    #[error("peer {peer} misbehaved: {violation}")]
    Misbehaving {
        /// The peer.
        peer: PeerId,
        /// What it did (boxed: keeps `Error` small).
        violation: Box<Violation>,
    },
    /// A peer lacks a block it should have (its root references it).
    #[error("peer {peer} does not have block {cid}")]
    RemoteMissing {
        /// The peer.
        peer: PeerId,
        /// The block.
        cid: Cid,
    },
    /// The remote has no root under this name (or does not serve it to us).
    #[error("peer {peer} has no root named {name:?}")]
    NoSuchRoot {
        /// The peer.
        peer: PeerId,
        /// The name asked for.
        name: String,
    },
    /// The remote refused the request.
    #[error("peer {peer} refused: {reason}")]
    Refused {
        /// The peer.
        peer: PeerId,
        /// The reason it gave.
        reason: String,
    },
    /// The local named root changed while the pull ran; nothing was published.
    #[error("local root {name:?} changed during the pull; not published")]
    Conflict {
        /// Local root name.
        name: String,
    },
    /// Dialing or talking to a peer failed (connection, stream, timeout).
    #[error("network error with {peer}: {reason}")]
    Network {
        /// The peer (or address) involved.
        peer: String,
        /// What happened.
        reason: String,
    },
    /// The connection carrying a control request went away (or none could
    /// be made) on every one of `attempts` sends; see docs/sync.md.
    #[error("connection to {peer} lost {attempts} time(s): {reason}")]
    ConnectionLost {
        /// The peer.
        peer: PeerId,
        /// Sends made, the first included.
        attempts: u32,
        /// The last failure.
        reason: String,
    },
    /// A root from `peer` was refused by this node's record policy
    /// (signed root records, `--trust`).
    #[error("root {name:?} from {peer} refused: {reason}")]
    Record {
        /// The serving peer.
        peer: PeerId,
        /// The root name asked for.
        name: String,
        /// What was wrong with its record (boxed: keeps `Error` small).
        reason: Box<crate::record::RecordError>,
    },
    /// A request did not complete in time.
    #[error("timed out after {seconds} s: {what}")]
    Timeout {
        /// What timed out.
        what: String,
        /// Limit that expired.
        seconds: u64,
    },
    /// A pull fetched more than its byte budget (`Limits::pull_max_bytes`).
    #[error("pull from {peer} fetched {bytes} bytes, over its budget of {max}")]
    PullTooLarge {
        /// The peer.
        peer: PeerId,
        /// Bytes fetched when it stopped.
        bytes: u64,
        /// The budget.
        max: u64,
    },
    /// A pull ran past its overall deadline (`Limits::pull_deadline`).
    #[error("pull from {peer} ran past its deadline of {deadline:?}")]
    PullDeadline {
        /// The peer.
        peer: PeerId,
        /// The deadline.
        deadline: std::time::Duration,
    },
    /// The peer answered `BUSY` to the same pull this many times in a row
    /// (each after a longer pause): it has too many requests in flight.
    #[error("peer {peer} stayed busy after {attempts} requests")]
    Busy {
        /// The peer.
        peer: PeerId,
        /// Consecutive `BUSY` answers before the pull gave up.
        attempts: u32,
    },
    /// A source of a multi-source pull serves another value under the
    /// root name than the first source; it could not supply the closure.
    #[error("peer {peer} serves another version of root {name:?}")]
    RootDiffers {
        /// The source.
        peer: PeerId,
        /// The root name.
        name: String,
    },
    /// A pull from several sources lost every one of them; each failure
    /// names its source and why it left.
    #[error("every source of the pull failed: {}", list(failures))]
    Sources {
        /// One error per source, in the order they failed.
        failures: Vec<Error>,
    },
    /// The local node is shutting down or its event loop has stopped.
    #[error("node is shut down")]
    Shutdown,
    /// A configuration value that cannot be used.
    #[error("invalid config: {0}")]
    Config(String),
    /// The identity key file could not be used.
    #[error("identity key {path}: {reason}")]
    Identity {
        /// Key file.
        path: std::path::PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A control-channel request or reply that could not be understood.
    #[error("control channel: {0}")]
    Control(String),
}

impl Error {
    pub(crate) fn network(peer: impl std::fmt::Display, reason: impl std::fmt::Display) -> Error {
        Error::Network {
            peer: peer.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// `failures` as one line: "error; error; ...".
fn list(failures: &[Error]) -> String {
    if failures.is_empty() {
        return "no source was usable".into();
    }
    failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
