//! Accelerators: HNSW and PQ sidecars of a proximity map, and the planner
//! that picks a search path.
//!
//! Both sidecars are bound to a map's `PRXI` descriptor CID and persisted as
//! content-addressed objects (proximity-format.md sections 7 and 8); they are
//! rebuildable from the map and never replace its exact directory. Inputs are
//! decoupled from the map type: builders take `records: &[(key, prepared
//! vector)]` in key order, the metric and the dimensions.
//!
//! * [`hnsw`]: canonical (spec 12.12) and fast (batched, parallel,
//!   deterministic) construction, incremental insert/delete, persistence, and
//!   the compact [`hnsw::SearchGraph`] layout queries run on.
//! * [`pq`]: canonical PQ training (spec 12.11), encoding, ADC search with
//!   exact rerank.
//! * [`Planner`]: deterministic choice of path from mode, filter selectivity,
//!   `k` and the available sidecars.
//!
//! Arithmetic: anything persisted comes from canonical math or from the
//! deterministic lane kernel in `numeric::kernel`; query traversal uses the dispatched
//! SIMD kernels of `prox_kernels`, and every reported score is canonical.

mod direct;
pub mod hnsw;
mod params;
mod planner;
pub mod pq;
mod source;
mod vectors;

pub use hnsw::{Filter, Hnsw, IdHit, SearchGraph};
pub use params::{
    parse_kv, BuildKind, HnswParams, PqParams, PqPreset, PqSpec, RECOMMENDED_EF_CONSTRUCTION,
    RECOMMENDED_MAX_SUBQUANTIZERS,
};
pub use planner::{
    AccelContext, Accelerators, Mode, Outcome, Path, Plan, Planner, Request, SEEN_PER_K,
    SMALL_ELIGIBLE,
};
pub use pq::Pq;
pub(crate) use source::map_rows;
pub use source::{build_layouts, build_sidecars, build_sidecars_and_lists, map_records, Records};
