//! prox-tools: the library behind the `prox` binary.
//!
//! Layout:
//!
//! * [`cmd`]: one module per subcommand (clap `Args` + a `run` function);
//!   [`cmd::Cli`] is the whole command line and [`cmd::run`] dispatches it.
//! * [`io`]: streaming readers for the vector formats of the field
//!   (TEXMEX `.fvecs`/`.bvecs`/`.ivecs`, NumPy `.npy`, JSON lines) and
//!   writers for `.fvecs`/`.ivecs`. Every reader yields one row at a time and
//!   reports malformed input with the file and row at fault.
//! * [`progress`]: progress bars that disappear under `--quiet` or when
//!   stderr is not a terminal.
//! * [`gmm`]: the seeded Gaussian-mixture generator and exact ground truth
//!   used by `prox datagen`, `prox demo` and the tests.
//! * [`map`]: named maps (publish/resolve a root) and one query entry
//!   point over the native, HNSW and PQ paths.
//! * [`plot`]: recall-vs-QPS plots (SVG or PNG); [`results`]: the JSON-lines
//!   benchmark schema they are drawn from.
//! * [`sysmem`]: memory sizes (`--memory-limit`) and `/proc` memory facts.
//! * [`out`]: stdout helpers that treat a closed pipe as a normal end.
//!
//! Errors are `anyhow` chains whose outermost context names the file, row or
//! CID at fault; the binary prints them on stderr and exits with status 1.

pub mod cmd;
pub mod gmm;
// Reader errors carry the file, the position and the problem by value: they
// end a read, so their size costs nothing on the row path.
#[allow(clippy::result_large_err)]
pub mod io;
pub mod map;
pub mod out;
pub mod plot;
pub mod progress;
pub mod results;
pub mod sysmem;
