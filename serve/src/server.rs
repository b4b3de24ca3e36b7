//! The HTTP server: routes, admission control, the search pool and the
//! background refresh.
//!
//! Request path: axum (tokio executor) parses and validates the body, takes
//! the map's current `Arc<Snapshot>`, and hands the search to a dedicated
//! rayon pool through [`Shared::run`]. Admission is bounded: at most
//! `search_threads + queue` jobs are admitted (running or waiting); beyond
//! that the answer is 503 with `Retry-After`. Every job carries the
//! request's deadline: a job that has not started by then is skipped, a
//! running search stops inside the engine within about a millisecond of it
//! (which frees its thread), a batch stops between vectors, and the request
//! answers 504. The executor
//! threads never run a search. Accepted sockets get TCP_NODELAY; search
//! answers are serialized straight into one presized buffer. With
//! [`Config::connection_threads`] the accept loop hands each connection to
//! one of N threads with a single-threaded executor each, so a request
//! and its answer stay on one thread without cross-worker wake-ups.

use crate::api::{self, ApiError, Limits};
use crate::auth::{self, Tokens};
use crate::conn::{self, ConnLimits};
use crate::error::{Error, Result};
use crate::limits;
use crate::metrics::Metrics;
use crate::registry::{MapRegistry, Refresher, Source};
use crate::snapshot::Snapshot;
use crate::state::{body, internal, micros, query_pairs, QueryPairs, Shared, Writer};
use crate::writes;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use prox_engine::index::{self, PathChoice, Scratch};
use rayon::prelude::*;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address. Anything but loopback requires [`Config::token`].
    pub addr: SocketAddr,
    /// Bearer token every endpoint but `/healthz` requires, if set.
    pub token: Option<String>,
    /// Bearer token the write endpoints require; `None` (the default):
    /// writes are refused with 403. Needs a [`Source::Store`] to write to.
    pub write_token: Option<String>,
    /// Largest `k` accepted.
    pub max_k: usize,
    /// Search jobs that may wait for a thread beyond those running.
    pub queue: usize,
    /// Most HTTP requests handled at once, counted once their body has
    /// arrived (a slow body cannot take a slot); more get 503.
    pub max_in_flight: usize,
    /// Host names accepted in the `Host` header besides the loopback names
    /// (`*`: any). Guards against DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// Time allowed for a request's headers to arrive.
    pub header_timeout: Duration,
    /// Time allowed for a request's body to arrive, from its headers.
    pub body_timeout: Duration,
    /// A connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// Most open connections; more are closed at once.
    pub max_connections: usize,
    /// On shutdown, time given to open requests before connections are
    /// closed.
    pub shutdown_grace: Duration,
    /// Per-request deadline, from arrival.
    pub deadline: Duration,
    /// Largest request body, bytes.
    pub max_body: usize,
    /// Search pool threads (0: one per core).
    pub search_threads: usize,
    /// Most vectors in one `search:batch` request.
    pub max_batch: usize,
    /// 0: connections are served on the runtime that called
    /// [`Server::start`]. N > 0: N dedicated threads, each running its own
    /// single-threaded executor, serve the connections, handed out round
    /// robin by the accept loop (no wake-ups between executor workers).
    pub connection_threads: usize,
    /// How often the [`Config::source`] roots are checked.
    pub refresh_interval: Duration,
    /// Where to (re)load maps from; `None`: only what is published into
    /// the registry by hand.
    pub source: Option<Source>,
}

impl Default for Config {
    /// Loopback on an OS-chosen port, no token, k <= 1000, queue 256,
    /// 1024 requests in flight, loopback host names only, 10 s for headers,
    /// 30 s for a body, 60 s idle, 1024 connections, 10 s shutdown grace, deadline 1 s, 8 MiB bodies, one search thread per core, batches of
    /// up to 4096 vectors, connections on the caller's runtime, refresh every 250 ms, no source.
    fn default() -> Self {
        Config {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            write_token: None,
            max_k: 1000,
            queue: 256,
            max_in_flight: 1024,
            allowed_hosts: Vec::new(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(10),
            deadline: Duration::from_secs(1),
            max_body: 8 << 20,
            search_threads: 0,
            max_batch: 4096,
            connection_threads: 0,
            refresh_interval: Duration::from_millis(250),
            source: None,
        }
    }
}

impl Config {
    /// Checks the values and the token rule.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidConfig(m.to_string()));
        if self.max_k == 0 {
            return bad("max_k must be >= 1");
        }
        if self.max_in_flight == 0 {
            return bad("max_in_flight must be >= 1");
        }
        if self.max_connections == 0 {
            return bad("max_connections must be >= 1");
        }
        if self.header_timeout.is_zero()
            || self.body_timeout.is_zero()
            || self.idle_timeout.is_zero()
        {
            return bad("header, body and idle timeouts must be > 0");
        }
        if self.max_batch == 0 {
            return bad("max_batch must be >= 1");
        }
        if self.deadline.is_zero() {
            return bad("deadline must be > 0");
        }
        if self.max_body < 64 {
            return bad("max_body must be >= 64 bytes");
        }
        if self.refresh_interval.is_zero() {
            return bad("refresh_interval must be > 0");
        }
        if self.search_threads > 1024 {
            return bad("search_threads must be <= 1024");
        }
        if self.connection_threads > 1024 {
            return bad("connection_threads must be <= 1024");
        }
        let malformed =
            |t: &str| t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control());
        if let Some(w) = &self.write_token {
            if malformed(w) {
                return bad("the write token must be non-empty without whitespace");
            }
            if self.token.as_deref() == Some(w.as_str()) {
                return bad("the write token must differ from the read token");
            }
            if !matches!(self.source, Some(Source::Store(_))) {
                return bad("writes need a writable store (Source::Store)");
            }
        }
        match &self.token {
            Some(t) if malformed(t) => bad("the token must be non-empty without whitespace"),
            None if !self.addr.ip().is_loopback() => Err(Error::TokenRequired { addr: self.addr }),
            _ => Ok(()),
        }
    }
}

thread_local! {
    /// Each search thread's reusable buffers.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch (a fresh one if it is in use).
fn with_scratch<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => f(&mut s),
        Err(_) => f(&mut Scratch::default()),
    })
}

/// A job's view of its request's deadline.
struct Cancel {
    flag: Arc<AtomicBool>,
    deadline: Instant,
}

impl Cancel {
    fn expired(&self) -> bool {
        self.flag.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
}

fn deadline_error() -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "deadline_exceeded",
        "the request's deadline expired before its search finished; it was cancelled",
    )
}

/// Decrements `pending` when a job ends, however it ends.
struct Admitted(Arc<Shared>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Decrements the in-flight gauge when a request ends (or is dropped).
struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// Runs `job` on the search pool under admission control and the
    /// deadline counted from `arrived`.
    async fn run<T, F>(
        self: &Arc<Self>,
        arrived: Instant,
        job: F,
    ) -> std::result::Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Cancel) -> std::result::Result<T, ApiError> + Send + 'static,
    {
        let deadline = arrived + self.deadline;
        if self.pending.fetch_add(1, Ordering::SeqCst) >= self.capacity {
            self.pending.fetch_sub(1, Ordering::SeqCst);
            self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "the search queue is full; retry later",
            ));
        }
        self.metrics.queued.fetch_add(1, Ordering::Relaxed);
        let admitted = Admitted(self.clone());
        let flag = Arc::new(AtomicBool::new(false));
        let cancel = Cancel {
            flag: flag.clone(),
            deadline,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pool.spawn(move || {
            let me = admitted.0.clone();
            me.metrics.queued.fetch_sub(1, Ordering::Relaxed);
            if cancel.expired() {
                return; // dropping `tx` tells the request
            }
            me.metrics.running.fetch_add(1, Ordering::Relaxed);
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&cancel)))
                .unwrap_or_else(|_| {
                    Err(ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        "the search failed unexpectedly",
                    ))
                });
            me.metrics.running.fetch_sub(1, Ordering::Relaxed);
            drop(admitted);
            let _ = tx.send(out);
        });
        let out = match tokio::time::timeout_at(deadline.into(), rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) | Err(_) => {
                flag.store(true, Ordering::Relaxed);
                Err(deadline_error())
            }
        };
        if matches!(&out, Err(e) if e.code == "deadline_exceeded") {
            self.metrics.expired.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    fn snapshot(&self, name: &str) -> std::result::Result<Arc<Snapshot>, ApiError> {
        self.maps
            .get(name)
            .ok_or_else(|| ApiError::unknown_map(name))
    }
}

/// Maps an engine error of a search to a response.
fn search_error(e: prox_engine::Error, q: &index::Request) -> ApiError {
    match e {
        prox_engine::Error::WrongDimension { expected, got, .. } => ApiError {
            code: "wrong_dimension",
            ..ApiError::field(
                "vector",
                format!("has {got} components, the map has {expected} dimensions"),
            )
        },
        prox_engine::Error::NonFiniteVector { index, .. } => ApiError {
            code: "not_finite",
            ..ApiError::field(
                "vector",
                format!("component {index} is not a finite 32-bit float"),
            )
        },
        prox_engine::Error::ZeroCosineVector { .. } => {
            ApiError::field("vector", "a cosine map cannot search for the zero vector")
        }
        prox_engine::Error::InvalidRequest { field, reason } => ApiError::field(field, reason),
        prox_engine::Error::DeadlineExceeded => deadline_error(),
        e @ (prox_engine::Error::UnknownField { .. }
        | prox_engine::Error::FieldTypeMismatch { .. }) => ApiError::field("filter", e.to_string()),
        prox_engine::Error::InvalidArgument(m) if q.path != PathChoice::Auto => {
            ApiError::field("path", m)
        }
        prox_engine::Error::InvalidArgument(m) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", m)
        }
        e => internal(e),
    }
}

/// Serializes `v` straight into one buffer of about the right size (axum's
/// `Json` starts at 128 bytes and regrows), answered as `application/json`.
fn json_bytes<T: serde::Serialize>(v: &T, capacity: usize) -> Response {
    let mut buf = Vec::with_capacity(capacity);
    match serde_json::to_writer(&mut buf, v) {
        Ok(()) => {
            let mut r = Response::new(axum::body::Body::from(buf));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => internal(e).into_response(),
    }
}

/// `POST /v1/maps/{name}/search`: a JSON body, or one little-endian f32
/// row (`application/octet-stream`) with the options in the query string.
async fn search(
    State(st): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    query: QueryPairs,
    raw: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Response, ApiError> {
    let t = Instant::now();
    let raw = body(raw)?;
    let snap = st.snapshot(&name)?;
    let pairs = query_pairs(query)?;
    let (vector, q) = if limits::is_octet_stream(&headers) {
        api::search_binary(&raw, &pairs, snap.dims(), st.limits)?
    } else {
        let (v, mut q) = api::search_request(&raw, snap.dims(), st.limits)?;
        api::overlay(&mut q, &pairs, st.limits)?;
        (v, q)
    };
    let s = snap.clone();
    let k = q.k;
    let answer = st
        .run(t, move |cancel| {
            let q = q.deadline(cancel.deadline);
            with_scratch(|sc| s.search(sc, &vector, &q)).map_err(|e| search_error(e, &q))
        })
        .await?;
    st.metrics.queries.fetch_add(1, Ordering::Relaxed);
    Ok(json_bytes(
        &api::SearchResponse::new(
            snap.descriptor().to_string(),
            snap.generation(),
            answer,
            micros(t),
        ),
        256 + 96 * k,
    ))
}

/// `POST /v1/maps/{name}/search:batch`: a JSON body, or rows of
/// little-endian f32 (`application/octet-stream`) with the options in the
/// query string.
async fn search_batch(
    State(st): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    query: QueryPairs,
    raw: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Json<api::BatchResponse>, ApiError> {
    let t = Instant::now();
    let raw = body(raw)?;
    let snap = st.snapshot(&name)?;
    let dims = snap.dims();
    let pairs = query_pairs(query)?;
    let (flat, n, q) = if limits::is_octet_stream(&headers) {
        api::batch_binary(&raw, &pairs, dims, st.limits)?
    } else {
        let (flat, n, mut q) = api::batch_request(&raw, dims, st.limits)?;
        api::overlay(&mut q, &pairs, st.limits)?;
        (flat, n, q)
    };
    let s = snap.clone();
    let answers = st
        .run(t, move |cancel| {
            let q = q.deadline(cancel.deadline);
            flat.par_chunks(dims.max(1))
                .map(|v| {
                    if cancel.expired() {
                        return Err(deadline_error());
                    }
                    with_scratch(|sc| s.search(sc, v, &q))
                        .map(api::WireAnswer::from)
                        .map_err(|e| search_error(e, &q))
                })
                .collect::<std::result::Result<Vec<_>, _>>()
        })
        .await?;
    st.metrics.queries.fetch_add(n as u64, Ordering::Relaxed);
    Ok(Json(api::BatchResponse {
        descriptor: snap.descriptor().to_string(),
        generation: snap.generation(),
        results: answers,
        took_us: micros(t),
    }))
}

fn info(s: &Snapshot) -> api::MapInfo {
    let side = s.sidecars();
    api::MapInfo {
        name: s.name().to_string(),
        descriptor: s.descriptor().to_string(),
        generation: s.generation(),
        count: s.len(),
        dims: s.dims(),
        metric: s.metric().name(),
        sidecars: api::WireSidecars {
            hnsw: side.hnsw.map(|c| c.to_string()),
            pq: side.pq.map(|c| c.to_string()),
        },
    }
}

/// `GET /v1/maps`.
async fn list_maps(State(st): State<Arc<Shared>>) -> Json<serde_json::Value> {
    let maps: Vec<api::MapInfo> = st.maps.snapshots().iter().map(|s| info(s)).collect();
    Json(serde_json::json!({ "maps": maps }))
}

/// `GET /v1/maps/{name}`.
async fn get_map(
    State(st): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> std::result::Result<Json<api::MapInfo>, ApiError> {
    Ok(Json(info(&*st.snapshot(&name)?)))
}

/// `GET /v1/maps/{name}/records/{key}` (key in hex).
async fn get_record(
    State(st): State<Arc<Shared>>,
    Path((name, key)): Path<(String, String)>,
) -> std::result::Result<Json<api::RecordResponse>, ApiError> {
    let t = Instant::now();
    let snap = st.snapshot(&name)?;
    let key = hex::decode(&key).map_err(|e| ApiError::field("key", format!("bad hex: {e}")))?;
    let s = snap.clone();
    let k = key.clone();
    let found = st
        .run(t, move |_| s.get(&k).map_err(internal))
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no record {} in map {name:?}", hex::encode(&key)),
            )
            .at("key")
        })?;
    Ok(Json(api::RecordResponse {
        descriptor: snap.descriptor().to_string(),
        generation: snap.generation(),
        key: hex::encode(&key),
        value: hex::encode(found.1),
        vector: found.0,
    }))
}

/// `GET /healthz` (no token needed).
async fn healthz(State(st): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok", "maps": st.maps.snapshots().len()}))
}

/// `GET /openapi.json` (no token needed): the document for this server's
/// limits, tokens and the maps it serves now.
async fn openapi(State(st): State<Arc<Shared>>) -> Response {
    let snapshots = st.maps.snapshots();
    let mut served = api::openapi::Served::of(snapshots.iter().map(|s| {
        let side = s.sidecars();
        (s.dims(), side.hnsw.is_some(), side.pq.is_some())
    }));
    served.profile =
        !snapshots.is_empty() && snapshots.iter().all(|s| s.index().profile().is_some());
    let facts = api::openapi::Facts {
        served,
        ..st.openapi
    };
    let mut doc = api::openapi::document(&facts);
    api::openapi::describe_fields(&mut doc, &common_fields(&st.maps.snapshots()));
    json_bytes(&doc, 32 << 10)
}

/// The payload fields every served map indexes, with the same type.
fn common_fields(snaps: &[Arc<Snapshot>]) -> Vec<(String, prox_engine::secondary::FieldType)> {
    let mut out: Option<Vec<(String, prox_engine::secondary::FieldType)>> = None;
    for s in snaps {
        let mine: Vec<_> = s
            .index()
            .field_indexes()
            .map(|f| {
                f.fields()
                    .iter()
                    .map(|x| (x.index.field.clone(), x.index.ty))
                    .collect()
            })
            .unwrap_or_default();
        out = Some(match out {
            None => mine,
            Some(prev) => prev.into_iter().filter(|x| mine.contains(x)).collect(),
        });
    }
    out.unwrap_or_default()
}

/// `GET /metrics` (Prometheus text format).
async fn metrics(State(st): State<Arc<Shared>>) -> Response {
    let mut r = st.metrics.render(&st.maps).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this endpoint",
    )
}

/// The one layer around every routed request: checks the `Host`, the
/// token and a POST's content type, reads the body within
/// [`Config::body_timeout`], then counts the request in flight (503 beyond
/// `max_in_flight`) and records its route, status and time in the
/// metrics. One layer rather than several keeps a request to one boxed
/// middleware future.
async fn gate(State(st): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let t = Instant::now();
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("other", |m| m.as_str());
    let refused = limits::host_refused(&st.allowed_hosts, &req)
        .or_else(|| auth::refused(&st.tokens, &req))
        .or_else(|| limits::content_type_refused(&req));
    if let Some(e) = refused {
        let r = e.into_response();
        st.metrics.observe(route, r.status().as_u16(), t.elapsed());
        return r;
    }
    let req = if req.method() == axum::http::Method::POST || req.method() == axum::http::Method::PUT
    {
        match limits::read_body(req, st.body_timeout, st.max_body).await {
            Ok(req) => req,
            Err(e) => {
                let r = e.into_response();
                st.metrics.observe(route, r.status().as_u16(), t.elapsed());
                return r;
            }
        }
    } else {
        req
    };
    let now = st.metrics.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    let _g = InFlight(&st.metrics);
    let r = if now > st.max_in_flight {
        // Refused before the body is read, so memory stays bounded too.
        st.metrics.rejected.fetch_add(1, Ordering::Relaxed);
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "too many requests in flight; retry later",
        )
        .into_response()
    } else {
        next.run(req).await
    };
    st.metrics.observe(route, r.status().as_u16(), t.elapsed());
    r
}

fn router(st: Arc<Shared>, max_body: usize) -> Router {
    use crate::api::openapi::{
        DELETE, HEALTHZ, MAP, MAPS, METRICS, OPENAPI, RECORD, SEARCH, SEARCH_BATCH, UPSERT,
    };
    Router::new()
        .route(HEALTHZ, get(healthz))
        .route(METRICS, get(metrics))
        .route(OPENAPI, get(openapi))
        .route(MAPS, get(list_maps))
        .route(
            MAP,
            get(get_map).put(writes::create).delete(writes::drop_map),
        )
        .route(UPSERT, post(writes::upsert))
        .route(DELETE, post(writes::delete))
        .route(SEARCH, post(search))
        .route(SEARCH_BATCH, post(search_batch))
        .route(RECORD, get(get_record))
        .route_layer(middleware::from_fn_with_state(st.clone(), gate))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(st)
}

/// Accepted connections handed to one connection thread.
struct Handed {
    rx: tokio::sync::mpsc::UnboundedReceiver<(std::net::TcpStream, SocketAddr)>,
    addr: SocketAddr,
}

impl axum::serve::Listener for Handed {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.rx.recv().await {
                // Registered with this thread's reactor.
                Some((s, peer)) => match tokio::net::TcpStream::from_std(s) {
                    Ok(s) => return (s, peer),
                    Err(e) => tracing::debug!(%e, "connection not registered"),
                },
                // The accept loop is gone: only shutdown is left to happen.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

/// [`Config::connection_threads`]: threads that each serve their share of
/// the connections on a single-threaded executor.
struct ConnectionThreads {
    handoff: Vec<tokio::sync::mpsc::UnboundedSender<(std::net::TcpStream, SocketAddr)>>,
    stop: tokio::sync::watch::Sender<bool>,
    done: Vec<tokio::sync::oneshot::Receiver<std::io::Result<()>>>,
}

impl ConnectionThreads {
    fn start(n: usize, addr: SocketAddr, app: Router, lim: ConnLimits) -> Result<Self> {
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let mut handoff = Vec::with_capacity(n);
        let mut done = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let (finished, fin) = tokio::sync::oneshot::channel();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (app, mut stopping, lim) = (app.clone(), stopping.clone(), lim.clone());
            std::thread::Builder::new()
                .name(format!("prox-http-{i}"))
                .spawn(move || {
                    let out = rt.block_on(async move {
                        conn::serve(Handed { rx, addr }, app, lim, async move {
                            let _ = stopping.wait_for(|s| *s).await;
                        })
                        .await
                    });
                    let _ = finished.send(out);
                })?;
            handoff.push(tx);
            done.push(fin);
        }
        Ok(ConnectionThreads {
            handoff,
            stop,
            done,
        })
    }

    /// Accepts until `stopped`, handing connections out in turn; then
    /// stops the threads and waits for their in-flight requests.
    async fn accept(
        self,
        listener: impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr>,
        stopped: tokio::sync::oneshot::Receiver<()>,
    ) -> std::io::Result<()> {
        let mut listener = listener;
        let mut stopped = stopped;
        let mut next = 0;
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                (io, peer) = listener.accept() => {
                    match io.into_std() {
                        Ok(s) => {
                            let _ = self.handoff[next].send((s, peer));
                            next = (next + 1) % self.handoff.len();
                        }
                        Err(e) => tracing::debug!(%e, "connection not handed off"),
                    }
                }
            }
        }
        let _ = self.stop.send(true);
        let mut out = Ok(());
        for d in self.done {
            match d.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => out = Err(e),
                Err(_) => out = Err(std::io::Error::other("a connection thread failed")),
            }
        }
        out
    }
}

/// Starts servers; see [`Server::start`].
#[derive(Debug)]
pub struct Server;

/// A running server. Dropping it stops the server (gracefully, in the
/// background); [`ServerHandle::shutdown`] stops it and waits.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    maps: MapRegistry,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serve: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    refresh: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Validates `config`, loads the maps of its [`Config::source`] (if
    /// any) into `maps`, binds the listener and starts serving on the
    /// current tokio runtime. Returns once the address is bound and the
    /// initial maps are published. The registry keeps being refreshed from
    /// the source every [`Config::refresh_interval`].
    pub async fn start(config: Config, maps: MapRegistry) -> Result<ServerHandle> {
        config.validate()?;
        let threads = match config.search_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("prox-search-{i}"))
            .build()
            .map_err(|e| Error::Pool(e.to_string()))?;
        let st = Arc::new(Shared {
            maps: maps.clone(),
            pool,
            metrics: Metrics::default(),
            limits: Limits {
                max_k: config.max_k,
                max_batch: config.max_batch,
            },
            deadline: config.deadline,
            capacity: (threads + config.queue) as i64,
            pending: AtomicI64::new(0),
            max_in_flight: config.max_in_flight as i64,
            tokens: Tokens {
                read: config.token.clone(),
                write: config.write_token.clone(),
            },
            writer: match (&config.write_token, &config.source) {
                (Some(_), Some(Source::Store(store))) => Some(Writer::new(store.clone())?),
                _ => None,
            },
            allowed_hosts: config.allowed_hosts.clone(),
            body_timeout: config.body_timeout,
            max_body: config.max_body,
            openapi: api::openapi::Facts {
                max_k: config.max_k,
                max_batch: config.max_batch,
                max_body: config.max_body,
                read_token: config.token.is_some(),
                write_token: config.write_token.is_some(),
                served: api::openapi::Served::default(),
            },
        });
        let refresher = match config.source.clone() {
            Some(src) => {
                let mut r = Refresher::new(src);
                let m = maps.clone();
                let (r, first) = tokio::task::spawn_blocking(move || {
                    let first = r.tick(&m);
                    (r, first)
                })
                .await
                .map_err(|e| Error::Task(e.to_string()))?;
                let report = first?;
                for (name, e) in &report.failed {
                    tracing::warn!(%name, %e, "map not served");
                }
                Some(Arc::new(Mutex::new(r)))
            }
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| Error::Bind {
                addr: config.addr,
                source,
            })?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // Answers are one small write each: never hold them back (Nagle).
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(%e, "TCP_NODELAY not set");
            }
        });
        let app = router(st.clone(), config.max_body);
        let lim = ConnLimits {
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            shutdown_grace: config.shutdown_grace,
            slots: Arc::new(tokio::sync::Semaphore::new(config.max_connections)),
        };
        let serve = match config.connection_threads {
            0 => tokio::spawn(conn::serve(listener, app, lim, async move {
                let _ = stopped.await;
            })),
            n => {
                let threads = ConnectionThreads::start(n, addr, app, lim)?;
                tokio::spawn(threads.accept(listener, stopped))
            }
        };
        let refresh = refresher.map(|r| {
            let every = config.refresh_interval;
            let st = st.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let (r, m) = (r.clone(), st.maps.clone());
                    let out = tokio::task::spawn_blocking(move || {
                        r.lock().unwrap_or_else(|e| e.into_inner()).tick(&m)
                    })
                    .await;
                    st.metrics.refreshes.fetch_add(1, Ordering::Relaxed);
                    match out {
                        Ok(Ok(rep)) if rep.failed.is_empty() => {}
                        Ok(Ok(rep)) => {
                            st.metrics
                                .refresh_failures
                                .fetch_add(rep.failed.len() as u64, Ordering::Relaxed);
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(%e, "refresh failed");
                            st.metrics.refresh_failures.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            tracing::warn!(%e, "refresh task failed");
                            st.metrics.refresh_failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        });
        tracing::info!(%addr, threads, "serving");
        Ok(ServerHandle {
            addr,
            maps,
            stop: Some(stop),
            serve: Some(serve),
            refresh,
        })
    }
}

impl ServerHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The registry being served.
    pub fn maps(&self) -> &MapRegistry {
        &self.maps
    }

    /// Stops accepting, lets in-flight requests finish, stops the refresh.
    pub async fn shutdown(mut self) -> Result<()> {
        if let Some(r) = self.refresh.take() {
            r.abort();
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(j) = self.serve.take() {
            j.await.map_err(|e| Error::Task(e.to_string()))??;
        }
        Ok(())
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(r) = self.refresh.take() {
            r.abort();
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_rules() {
        let mut c = Config::default();
        assert!(c.validate().is_ok());
        c.addr = "0.0.0.0:0".parse().unwrap();
        assert!(matches!(c.validate(), Err(Error::TokenRequired { .. })));
        c.token = Some("s3cret".into());
        assert!(c.validate().is_ok());
        c.token = Some("two words".into());
        assert!(c.validate().is_err());
        let c = Config {
            max_k: 0,
            ..Config::default()
        };
        assert!(c.validate().is_err());
    }
}
