//! prox-kernels: slices in, numbers out.
//!
//! Two families of arithmetic live here and never mix:
//!
//! * [`canonical`]: the spec's scalar IEEE-754 math (f64 accumulation in
//!   component order, no FMA, no reassociation). Every persisted number and
//!   every reported score comes from here, so results are bit-identical on
//!   every machine, thread count and ISA.
//! * The fast kernels (f32, SQ8, PQ), dispatched once per process to the best
//!   available ISA (AVX2+FMA, NEON, portable `wide`, scalar). They rank
//!   candidates; their results are never persisted.
//!
//! No I/O, no threads, no workspace dependencies.

pub mod canonical;
mod metric;

pub use metric::Metric;
