//! [`Shared`]: the state every request handler sees (the map registry,
//! the search pool, admission counters, tokens, the write side), and the
//! small reply helpers the handler modules share.

use crate::api::{ApiError, Limits};
use crate::auth::Tokens;
use crate::metrics::Metrics;
use crate::registry::MapRegistry;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::Query;
use axum::http::StatusCode;
use prox_engine::BlockStore;
use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// State shared by every request.
pub(crate) struct Shared {
    pub(crate) maps: MapRegistry,
    pub(crate) pool: rayon::ThreadPool,
    pub(crate) metrics: Metrics,
    pub(crate) limits: Limits,
    pub(crate) deadline: Duration,
    /// `search_threads + queue`: most jobs admitted at once.
    pub(crate) capacity: i64,
    /// Jobs admitted and not finished (waiting or running).
    pub(crate) pending: AtomicI64,
    pub(crate) max_in_flight: i64,
    pub(crate) tokens: Tokens,
    /// The write endpoints' state; `None`: writes are off.
    pub(crate) writer: Option<Writer>,
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) body_timeout: Duration,
    pub(crate) max_body: usize,
    /// What the OpenAPI document at `/openapi.json` states besides the
    /// served maps.
    pub(crate) openapi: crate::api::openapi::Facts,
}

/// The write side of a server: the store written to, one lock per map
/// name (writes to one map are serialized) and the pool writes compute on.
pub(crate) struct Writer {
    pub(crate) store: Arc<dyn BlockStore>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Applying a batch is parallel and CPU-bound; its threads run in the
    /// idle scheduling class, so searches on the previous snapshot keep
    /// their latency while a write runs and writes take the cores searches
    /// leave idle.
    pub(crate) pool: rayon::ThreadPool,
}

impl Writer {
    pub(crate) fn new(store: Arc<dyn BlockStore>) -> crate::Result<Writer> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("prox-write-{i}"))
            .start_handler(|_| lower_priority())
            .build()
            .map_err(|e| crate::Error::Pool(e.to_string()))?;
        Ok(Writer {
            store,
            locks: Mutex::new(HashMap::new()),
            pool,
        })
    }

    /// The lock serializing writes to `name`.
    pub(crate) fn lock_for(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut l = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        l.entry(name.to_string()).or_default().clone()
    }
}

/// A 500 for an unexpected failure (logged).
pub(crate) fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(%e, "request failed");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
}

/// The body, or the error for one that could not be read.
pub(crate) fn body(
    b: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Bytes, ApiError> {
    b.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(r.status(), "body_too_large", r.body_text()).at("body")
        } else {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_body", r.body_text()).at("body")
        }
    })
}

/// Microseconds since `t`.
pub(crate) fn micros(t: Instant) -> u64 {
    t.elapsed().as_micros().min(u64::MAX as u128) as u64
}

/// The decoded query string of a request: a search's options (for a binary
/// body all of them; for a JSON body they replace the body's), a binary
/// upsert's keys.
pub(crate) type QueryPairs = std::result::Result<Query<Vec<(String, String)>>, QueryRejection>;

pub(crate) fn query_pairs(
    query: QueryPairs,
) -> std::result::Result<Vec<(String, String)>, ApiError> {
    query
        .map(|Query(p)| p)
        .map_err(|e| ApiError::field("query", e.body_text()))
}

/// Moves the calling thread to the idle scheduling class (Linux
/// `SCHED_IDLE`, per thread): it runs on cores no normal thread wants, and
/// a waking search thread preempts it at once. Best effort; elsewhere a
/// no-op.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param that outlives the call;
        // pid 0 is the calling thread. A failure only leaves the policy
        // as it was.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prox_engine::MemStore;

    /// Writes run in the idle class, and the threads that answer searches
    /// (here: the test's own) keep theirs.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_write_pool_runs_in_the_idle_class_and_searches_do_not() {
        // SAFETY: querying the calling thread's policy has no preconditions.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let caller = policy();
        let w = Writer::new(Arc::new(MemStore::new())).unwrap();
        let in_pool = w.pool.install(policy);
        assert_eq!(in_pool, libc::SCHED_IDLE);
        assert_eq!(policy(), caller);
        assert_ne!(caller, libc::SCHED_IDLE);
    }
}
