//! What a block references: the one question traversal asks.
//!
//! The session never parses block formats itself. It asks a [`Linker`] for
//! the children of a block *given the kind its parent declared*, so the same
//! call both discovers children and checks that a received block really is
//! what its parent says it is. The production linker is [`RefsLinker`], a thin
//! adapter over `prox_engine::refs` (the engine's own decoders); tests inject
//! small synthetic formats through the same trait.

use prox_engine::{Cid, Result};
use std::fmt::Debug;

/// Extracts typed links from named-root values and blocks.
///
/// Invariant expected of implementations: `links(kind, bytes)` fails for
/// bytes that are not a valid object of `kind`, and is deterministic.
pub trait Linker: Send + Sync + 'static {
    /// The type tag a parent gives each child.
    type Kind: Clone + Debug + PartialEq + Send + Sync + 'static;

    /// The blocks a named root's value (RootManifest bytes) points at.
    fn root_links(&self, value: &[u8]) -> Result<Vec<(Cid, Self::Kind)>>;

    /// The children of a block of kind `kind`, with their kinds; an error if
    /// `bytes` do not decode as `kind`.
    fn links(&self, kind: &Self::Kind, bytes: &[u8]) -> Result<Vec<(Cid, Self::Kind)>>;
}
/// The engine's link extraction (`prox_engine::refs`): CRAB nodes, blob
/// envelopes, proximity objects and their sidecars.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefsLinker;

impl Linker for RefsLinker {
    type Kind = prox_engine::refs::BlockKind;

    fn root_links(&self, value: &[u8]) -> Result<Vec<(Cid, Self::Kind)>> {
        prox_engine::refs::root_links(value)
    }

    fn links(&self, kind: &Self::Kind, bytes: &[u8]) -> Result<Vec<(Cid, Self::Kind)>> {
        prox_engine::refs::links(*kind, bytes)
    }
}
