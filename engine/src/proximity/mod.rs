//! Proximity maps: content-addressed vector indexes (proximity-format.md).
//!
//! A map is a `PRXI` descriptor naming two trees built from the same
//! records: an ordered `CRAB` directory (key -> `PRVR` record) that answers
//! exact lookups, and a `PRXN` hierarchy of nearest-representative groups
//! with Euclidean covering radii that search descends best-first. Both are
//! canonical: the same records and configuration give the same bytes on
//! every machine, thread count and ISA.
//!
//! * [`format`]: byte-exact codecs for every object (PRVR, PRXI, PRXN, PRXV,
//!   PQS8, PQPQ, HNSW, HNSN, CRMF).
//! * [`ProximityMap`]: canonical build (12), load (6.6), lookups and the
//!   whole-index audit (13).
//! * [`publish`], [`resolve`]: named roots pointing at a map and its
//!   HNSW/PQ sidecars through a typed `CRMF` content root.
//! * [`math`]: the canonical scalar math (preparation, `sqrt_floor`,
//!   covering radii, lower bounds, promotion levels).
//! * [`StreamBuild`]: the same canonical build in bounded memory, spilling
//!   sorted runs to disk, with [`Progress`] reports per [`Phase`].
//! * [`search`]: best-first k-NN search (exact, budgeted, adaptive; filters).

mod build;
pub mod format;
mod incremental;
pub(crate) mod layout_io;
mod map;
pub mod math;
mod mutate;
mod publish;
pub mod search;
mod spill;
mod stream;

pub use format::{
    Codebook, ContentRoot, Descriptor, DirectoryBlock, ExternalVector, HnswConfig, HnswManifest,
    HnswNode, LayoutKind, LayoutManifest, NodeEntry, NodeKind, PqConfig, PqManifest, ProxNode,
    ProximityConfig, Quantizer, Record, RootKind, VectorRef,
};
pub use map::{InputRecord, ProximityMap, VerifyReport};
pub use mutate::{ApplyStats, Mutation};
pub(crate) use publish::resolve_full;
pub use publish::{
    publish, publish_expecting, publish_expecting_with, publish_with, resolve, resolve_layouts,
    resolve_metadata, Layouts, Metadata, Sidecars,
};
pub use stream::{clear_checkpoint, NoProgress, Phase, Progress, StreamBuild, StreamStats};
