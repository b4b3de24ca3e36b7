//! Public behaviour of prox-engine, in one test binary (one link instead
//! of one per file). Each module is one area's suite; run one area with
//! `cargo test -p prox-engine --test engine <module>::`, e.g. `store::`.
//!
//! Randomized tests take their seed from `PROX_SEED` (see prox-testkit) and
//! print it in their failure messages. The crash suite, which re-executes
//! itself as child processes, is the separate `crash` binary.

mod accel;
mod build;
mod cold;
mod corruption;
mod deadline;
mod filters;
mod ivf_layout;
mod layouts;
mod mutate;
mod planner;
mod profile;
mod prolly;
mod proximity;
mod search;
mod store;
mod store_suite;
mod stream;
mod support;
mod write;
