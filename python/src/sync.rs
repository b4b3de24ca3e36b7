//! `prox.sync.pull`: the sync crate's local pull
//! ([`prox_sync::local::pull`]) with the GIL released.

use crate::error;
use pyo3::prelude::*;
use pyo3::types::PyAny;
use std::path::PathBuf;

/// Pulls the peer's root ``name`` into the store directory ``store`` (only
/// the blocks missing here, each checked against its CID) and publishes it
/// as ``local`` (default ``name``). Through the store's daemon when one runs
/// on it, else one-shot with the store's identity. ``peer`` is a multiaddr
/// ending in ``/p2p/<peer id>`` (printed by ``prox daemon``) unless
/// ``insecure_any_peer=True``. Returns the pull report as a dict
/// (``root``, ``blocks_fetched``, ``bytes_fetched``, ``round_trips``,
/// ``seconds``, ``up_to_date``, ...).
#[pyfunction]
#[pyo3(signature = (store, peer, name, *, local=None, insecure_any_peer=false))]
pub(crate) fn pull<'py>(
    py: Python<'py>,
    store: PathBuf,
    peer: &str,
    name: &str,
    local: Option<&str>,
    insecure_any_peer: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let report = py
        .detach(|| prox_sync::local::pull(&store, peer, name, local, insecure_any_peer))
        .map_err(error::sync)?;
    let text = serde_json::to_string(&report)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}
