//! [`Index`]: one map opened for queries, the entry point every front end
//! (the `prox` CLI, the HTTP server, bindings) calls.
//!
//! An [`Index`] owns a shared handle to its store and is an immutable
//! snapshot of one `PRXI` descriptor: it loads the map, every sidecar the
//! named root publishes (HNSW, PQ with its fast-scan tables) and, unless
//! asked not to, the native search's load-time layouts (decoded nodes, scan
//! arena, adaptive sub-lists, the exact-L2 layout) once, so a query does no
//! I/O or decoding. [`Index::search`] takes one [`Request`] and answers one
//! [`Response`]; [`Index::search_batch`] runs rows in parallel with one
//! [`Scratch`] per worker thread.
//!
//! # What runs
//!
//! The first rule that matches decides (the same code for every front end):
//!
//! R. A `recall` target ([`Request::recall`], only with path and mode
//!    `auto` and no `ef`, `nprobe`, `rerank` or budget) is first replaced
//!    by the setting the map's recall profile chooses for it
//!    ([`Index::choose`], [`Profile::choose`]; reported in
//!    [`Response::tuned`]), and that request goes through the rules below.
//!
//! 0. A key set (given, or a field filter resolved to one) of at most
//!    `max(1024, 32·k)` keys without a budget is scored directly (the
//!    filter planner, `plan.rs`; it also answers a search that returned
//!    fewer than `min(k, eligible)` hits).
//! 1. A `budget` runs the native exact search capped at that many distance
//!    evaluations (whatever the mode); completion `exact` or
//!    `budget_exhausted`.
//! 2. Mode `exact` runs the native exact search.
//! 3. Path `native` runs the native adaptive search with the mode's preset
//!    (`auto`: balanced).
//! 4. Path `hnsw` or `pq` runs that sidecar (an error if the map has none),
//!    with `ef` / `rerank` / `nprobe` or the manifest's defaults.
//! 5. Path `auto` with mode `fast`, `balanced` or `high` runs the native
//!    adaptive search with that preset: a named preset is a native preset.
//! 6. Path and mode `auto`: a filter admitting at most `max(2048, n/16)`
//!    records runs the native search (balanced preset); otherwise the HNSW
//!    sidecar if the map has one, else the PQ sidecar, else the native
//!    balanced search ([`crate::accel::Planner`]).
//!
//! A sidecar path never takes `budget` or mode `exact` (rejected by
//! [`Request::validate`]). Every reported score is canonical, so the same
//! request gives bit-identical hits through every front end. A request's
//! deadline ([`Request::deadline()`]) stops whichever search runs with
//! [`crate::Error::DeadlineExceeded`] within about a millisecond of it.

mod batch;
mod filter_cache;
mod open;
mod plan;
mod profile;
mod rebase;
mod request;
mod response;
mod route;
mod run;
mod tune;
mod write;

pub use batch::{Batch, CanonicalHnsw, Upsert, WriteOptions, MAX_KEY_LEN};
pub use open::{Index, Options, Scratch};
pub use profile::{Choice, Measured, Profile, Setting, PROFILE_STALE_FRACTION, RECALL_Z};
pub use rebase::{Written, DEFAULT_REBASES, LEASE_WAIT};
pub use request::{PathChoice, QueryMode, Request};
pub use response::{Counters, Neighbour, Response};
pub use tune::{DEFAULT_PROFILE_QUERIES, PROFILE_K};
pub use write::{Applied, DropReason, SidecarWrite, WriteReport};

// Building and publishing a map from records.
mod build;
pub use build::{
    build, build_streamed, layout_memory, sidecar_memory, Build, Built, DEFAULT_SQ8_GROUP,
};

#[cfg(test)]
mod tests;
