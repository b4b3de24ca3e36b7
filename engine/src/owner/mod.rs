//! One writer, many front ends: the process that holds a directory
//! store's write lock (`prox serve` with writes on, `prox daemon`) serves
//! the store on a Unix socket, `<store>/owner.sock`, and other processes
//! read and write through it instead of failing on the lock.
//!
//! * [`OwnerSocket`]: the owner's listener (blocking threads, no async
//!   runtime); requests run against the owner's store one store call at a
//!   time, so the owner's locks are never held while a socket waits.
//! * [`OwnerClient`]: a [`BlockStore`](crate::BlockStore) over the socket,
//!   every request bounded by a timeout; named roots move by the owner's
//!   compare-and-swap, so a write through the socket and the owner's own
//!   writes of the same name serialize there.
//!
//! The wire format is in [`proto`] (and docs/store.md, "Owner socket").

mod client;
mod handler;
pub mod proto;
mod server;

pub use client::{OwnerClient, DEFAULT_TIMEOUT, GC_TIMEOUT};
pub use handler::OwnerInfo;
pub use server::{OwnerSocket, MAX_CONNECTIONS};

use std::path::{Path, PathBuf};

/// File name of the owner socket inside a store directory.
pub const SOCKET_NAME: &str = "owner.sock";

/// The owner socket path of the store directory `dir`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET_NAME)
}

#[cfg(test)]
mod tests;
