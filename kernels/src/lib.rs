//! prox-kernels: slices in, numbers out.
//!
//! Two families of arithmetic live here and never mix:
//!
//! * [`canonical`]: the spec's scalar IEEE-754 math (f64 accumulation in
//!   component order, no FMA, no reassociation). Every persisted number and
//!   every reported score comes from here, so results are bit-identical on
//!   every machine, thread count and ISA.
//! * The fast kernels ([`f32`](mod@f32), [`sq8`], [`pq`]), dispatched once per process
//!   to the best available ISA (AVX2+FMA, NEON, portable `wide`, scalar). They
//!   rank candidates; their results are never persisted.
//!
//! Each fast op has the same shape: `op/mod.rs` (public API, the only place
//! that dispatches), `op/scalar.rs` (the reference), `op/portable.rs`
//! (`wide`), `op/x86.rs` (AVX2+FMA `#[target_feature]` fns), `op/aarch64.rs`
//! (NEON). The ISA is detected once and cached ([`isa`]); `PROX_ISA` forces a
//! tier. [`det`] holds f32 kernels with one fixed summation order on every
//! ISA (for persisted builds), [`prefetch`] safe cache hints, [`cast`]
//! byte views for packed layouts. [`topk`] selects the best candidates with deterministic tie-breaks.
//!
//! No I/O (beyond one stderr warning for a bad `PROX_ISA`), no threads, no
//! workspace dependencies.

pub mod canonical;
pub mod cast;
pub mod det;
mod error;
pub mod f32;
pub mod i8scan;
mod isa;
mod metric;
pub mod pq;
pub mod prefetch;
pub mod project;
pub mod sq8;
pub mod topk;

pub use error::{Error, Result};
pub use isa::{available_isas, best_isa, isa, requested_isa, set_isa, try_isa, Isa, IsaError};
pub use metric::Metric;
pub use topk::TopK;
