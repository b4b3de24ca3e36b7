//! The wire protocol: `/prox/ctl/1` control messages over request-response
//! and `/prox/blocks/1` block frames over one long-lived stream per session.
//! Byte-level description: `docs/sync.md`.

pub mod codec;
pub mod frames;
pub mod limits;
pub mod messages;

use libp2p::StreamProtocol;

/// Protocol id of the control channel (request-response).
pub const CTL_PROTOCOL: StreamProtocol = StreamProtocol::new("/prox/ctl/1");
/// Protocol id of the block stream (libp2p-stream).
pub const BLOCKS_PROTOCOL: StreamProtocol = StreamProtocol::new("/prox/blocks/1");
/// Protocol version carried in `Hello`.
pub const VERSION: u32 = 1;
