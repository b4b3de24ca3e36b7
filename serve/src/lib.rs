//! prox-serve: a high-throughput HTTP/JSON search API over the proximity
//! maps of a store.
//!
//! # Architecture
//!
//! ```text
//!  HTTP (axum on tokio)          search pool (rayon, N threads)
//!  parse + validate body  --->   bounded admission (N + queue), deadline
//!  take Arc<Snapshot>            Index::search (prox-engine): one rule
//!  serialize the answer   <---   picks native / HNSW / PQ for every front end
//!
//!  MapRegistry: name -> ArcSwap<Snapshot>   (one atomic swap per publish)
//!  refresh task: every 250 ms, reload roots that moved, off the request path
//! ```
//!
//! * [`Snapshot`]: the engine's [`prox_engine::Index`] (one immutable,
//!   fully loaded version of a map) with the name and generation it is
//!   served under. A request holds one `Arc<Snapshot>` from start to end:
//!   snapshot isolation.
//! * [`MapRegistry`]: the served maps; [`MapRegistry::refresh_from_store`]
//!   reloads named roots that changed (sync pulls, `prox update`,
//!   `prox accel build`) and swaps each in atomically.
//! * [`Server::start`]: binds, serves, refreshes; [`ServerHandle`] stops it.
//! * [`ApiError`]: every rejection is a JSON body naming the field at
//!   fault; nothing in a request can panic the server.
//! * [`bodies`]: the request-body parsers as public functions (fuzzing).
//! * [`client`]: a tiny blocking HTTP/1.1 client for tests and the load
//!   generator.
//!
//! The endpoints and their JSON are documented in `docs/api.md`.

mod api;
mod auth;
pub mod bodies;
pub mod client;
mod conn;
mod error;
mod limits;
mod metrics;
mod registry;
mod server;
mod snapshot;
mod state;
mod writes;

pub use api::{filter_from_json, ApiError};
pub use error::{Error, Result};
pub use registry::{MapRegistry, RefreshReport, Source};
pub use server::{Config, Server, ServerHandle};
pub use snapshot::Snapshot;
