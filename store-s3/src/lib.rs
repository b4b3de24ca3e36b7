//! prox-s3: a [`BlockStore`](prox_engine::BlockStore) on S3-compatible
//! object storage.
//!
//! Architecture: [`S3Store`] owns a small tokio runtime and an
//! `object_store` S3 client; every trait method is blocking and runs its
//! requests on that runtime, so prox-engine (blocking, no tokio) and the
//! front ends use it like any other store. Layout under the store's prefix:
//!
//! * `blocks/<cid hex>`: one object per block, its exact bytes. Batches
//!   (`get_many`, `put_many`, `has_many`) run in parallel with at most
//!   [`Config::concurrency`] requests in flight; every block read is hashed
//!   and checked against its CID (a mismatch is `Error::Corrupt` naming
//!   the CID).
//! * `roots/<name hex>`: one object per named root (`roots.rs` has the
//!   byte format); compare-and-swap uses conditional writes (`If-Match` on
//!   the ETag, `If-None-Match: *` to create).
//!
//! [`CachedStore`] puts a bounded local [`MmapStore`](prox_engine::MmapStore)
//! in front of any store (a warm node then reads at mmap speed).
//!
//! `config` parses `s3://bucket/prefix` and reads the standard AWS
//! environment; `errors` maps service failures to
//! [`Error::Remote`](prox_engine::Error::Remote) with a typed kind.

mod cache;
mod config;
mod errors;
mod roots;
mod store;

pub use cache::CachedStore;
pub use config::{is_s3_url, Config, Location, DEFAULT_GC_GRACE};
pub use store::{RequestCounts, S3Store};
