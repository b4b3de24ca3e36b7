//! prox-sync: replication of named roots between peers over libp2p, and the
//! daemon. Owns the async runtime.
//!
//! Architecture. A [`Node`] owns a libp2p swarm (TCP + Noise + Yamux,
//! identify, ping, optional mDNS) driven by one event-loop task; a
//! [`Client`] talks to it over a bounded command channel. Two protocols share
//! each connection: `/prox/ctl/1` (request-response, length-prefixed CBOR:
//! root exchange, listing, push announcements) and `/prox/blocks/1` (one
//! long-lived libp2p-stream per pull, binary frames, pipelined `WANT`
//! batches answered in order, plus a one-request bulk path). A pull is a
//! receiver-driven state machine (`session`): it walks the remote closure
//! level by level, skips subtrees already present (closure invariant, see
//! [`stores`]), verifies every block against its CID and against the kind
//! its parent declares (through a [`Linker`], by default the engine's
//! `refs`), stages what is incomplete, publishes descendant-first, and moves
//! the local root by compare-and-swap only when the whole closure is
//! visible. [`daemon`] adds signals, followed roots and the local
//! [`control`] socket used by `prox sync`.

pub mod bench;
pub mod config;
pub mod control;
pub mod daemon;
pub mod delta;
mod error;
mod event_loop;
mod follow;
mod gate;
mod groups;
pub mod identity;
mod links;
pub mod local;
mod node;
mod pacing;
pub mod pending;
pub mod protocol;
pub mod record;
mod server;
mod session;
mod sources;
mod stall;
pub mod stores;

pub use config::{Config, Follow};
pub use error::{Error, Result, Violation};
pub use event_loop::{Banned, Client, PeerInfo};
pub use follow::FollowState;
pub use links::{Linker, RefsLinker};
pub use node::{access_from_config, MirroredRoot, Node, PendingStatus, RemoteRoot, Status};
pub use protocol::limits::{Limits, PullLimits};
pub use protocol::messages::AnnounceOutcome;
pub use server::Access;
pub use session::PullReport;
pub use session::SourceReport;
pub use stores::Stores;
