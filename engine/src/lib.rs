//! prox-engine: content-addressed storage and indexes.
//!
//! Architecture, bottom-up:
//!
//! * [`Cid`] names every block (SHA-256 of its bytes); `codec` holds the
//!   shared byte primitives (canonical varints, floats, blobs) every object
//!   codec is built from.
//! * [`store`]: block stores ([`MemStore`], the memory-mapped
//!   `MmapStore`) with named roots and garbage collection.
//! * `prolly`: ordered maps as prolly trees of `CRAB` v1 nodes, built
//!   canonically so equal contents give equal roots.
//! * `numeric`: deterministic kernels, k-means, PQ training and top-k
//!   selection shared by the search paths.
//! * `proximity`: vector indexes (PRXI/PRXN/PRVR/...) over a prolly
//!   directory, with best-first search and the HNSW/PQ accelerators.
//! * [`secondary`]: secondary indexes over payload fields, byte-compatible
//!   with the reference (`PSID`/`PSIP`/`PSIH`/`PSIO` records, catalog).
//! * [`index`]: [`Index`], one map opened for queries with its sidecars;
//!   the one entry point every front end calls (one `Request`, one
//!   `Response`, one rule for which search runs).
//!
//! Blocking code only: no async runtime, no networking.

pub mod accel;
mod cid;
pub mod codec;
mod deadline;
pub mod envelope;
mod error;
pub mod gc;
pub mod index;
pub mod keys;
mod numeric;
pub mod owner;
pub mod prolly;
pub mod proximity;
pub mod refs;
pub mod secondary;
pub mod store;

pub use cid::{Cid, ParseCidError};
pub use error::{Error, RemoteErrorKind, Result};
pub use index::Index;
/// Root manifests (the value of a named root), part of the prolly layer.
pub use prolly::manifest;
pub use store::{BlockStore, MemStore, MmapStore};
