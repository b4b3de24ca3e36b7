//! The `prox` Python package's native half (`prox._prox`).
//!
//! Architecture: a thin translation to the engine. [`index`] wraps the
//! engine's `Index` (build, open, search, get, verify) with numpy arrays in
//! and out and the GIL released around every engine call; [`sync`] wraps
//! the sync crate's local pull; `convert` turns Python values into engine
//! values and `error` engine errors into the typed exceptions of
//! `prox.errors`. No search, build or validation logic lives here: the
//! engine decides which search runs and checks every input.

mod convert;
mod error;
mod index;
mod sync;

use pyo3::prelude::*;

/// The native module; `prox/__init__.py` re-exports what users need.
#[pymodule]
fn _prox(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<index::PyIndex>()?;
    m.add_function(wrap_pyfunction!(sync::pull, m)?)?;
    m.add("NO_KEY", index::NO_KEY)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
