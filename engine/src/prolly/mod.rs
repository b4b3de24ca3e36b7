//! Prolly trees: ordered byte maps stored as content-addressed `CRAB` v1
//! nodes (prolly-core.md, wire-format.md).
//!
//! * [`Config`], [`Encoding`]: chunking parameters copied into every node header.
//! * [`Node`]: the node codec (strict `CRAB` v1; legacy CBOR read-only).
//! * [`is_boundary`]: the xxHash64 chunk predicate.
//! * [`build_sorted`], [`build`]: canonical bulk construction; the root is a
//!   function of the entries and the config only.
//! * [`Tree`]: an immutable snapshot over a `&dyn BlockStore` with lookups,
//!   [`Cursor`]s, lazy [`Range`]s, canonical [`Mutation`] batches, [`Diff`]
//!   and [`TreeStats`].
//! * [`manifest`]: the `RootManifest` a named root's value holds (also
//!   `prox_engine::manifest`).
//!
//! Every writer in this module is canonical: an edited tree has the same
//! root as a fresh build of its entries (history independence).

mod boundary;
mod build;
pub(crate) mod cbor;
mod config;
mod diff;
mod edit;
pub mod manifest;
mod node;
mod stats;
mod tree;

pub use boundary::{boundary_hash, hash_test, is_boundary};
pub use build::{build, build_sorted};
pub(crate) use build::{grow, Chunker};
pub use config::{Config, Encoding};
pub use diff::{Diff, DiffEntry};
pub use edit::Mutation;
pub use node::{entry_count, level_of, visit, Node, MAGIC, VERSION};
pub use stats::TreeStats;
pub use tree::{Cursor, Range, Tree};
