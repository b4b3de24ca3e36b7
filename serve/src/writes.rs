//! The write endpoints: `points:upsert`, `points:delete`, `PUT` (create a
//! map from a config) and `DELETE` (drop a map's root).
//!
//! Writes to one map are serialized by an async lock per name; each runs off
//! the executor: [`prox_engine::Index::apply`] on the served snapshot, then
//! [`prox_engine::Index::commit`], which moves the root by compare-and-swap
//! on that snapshot's descriptor, then the new snapshot is published, so the
//! 200 comes after the write is durable and the next request reads it.
//! Searches keep running on the previous snapshot until the swap. A root
//! moved meanwhile by another writer (a sync pull) is a 409; `If-Match:
//! <descriptor>` that does not name the served descriptor is a 412.
//!
//! A write that leaves the map's recall profile stale (a tenth of the
//! records changed since it was measured) starts a background measurement
//! on the write pool; `recall` searches use the carried profile until the
//! new one is published beside the served version (`remeasure`).

use crate::api::{self, openapi, ApiError};
use crate::snapshot::Snapshot;
use crate::state::{body, internal, micros, query_pairs, QueryPairs, Shared, Writer};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use prox_engine::index::{self, Batch, CanonicalHnsw, SidecarWrite, WriteOptions, WriteReport};
use prox_engine::proximity::{self, ProximityConfig, ProximityMap, Sidecars};
use prox_engine::{Cid, Error as EngineError};
use prox_kernels::Metric;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpsertBody {
    points: Vec<PointIn>,
    #[serde(default)]
    canonical_hnsw: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PointIn {
    key: String,
    vector: Vec<f32>,
    #[serde(default)]
    value: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteBody {
    keys: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    dims: u32,
    #[serde(default)]
    metric: Option<String>,
    #[serde(default)]
    sq8_group_size: Option<u32>,
}

/// The answer to a write.
#[derive(Serialize)]
struct WriteResponse {
    name: String,
    /// The descriptor now served and named by the root.
    descriptor: String,
    generation: u64,
    inserted: u64,
    moved: u64,
    value_only: u64,
    deleted: u64,
    absent_deletes: u64,
    blocks_written: u64,
    bytes_written: u64,
    hnsw: &'static str,
    pq: &'static str,
    /// The recall profile: carried, or `stale` (still answering; measured
    /// again in the background).
    profile: &'static str,
    took_us: u64,
}

fn sidecar_word(s: SidecarWrite) -> &'static str {
    match s {
        SidecarWrite::Absent => "absent",
        SidecarWrite::Unchanged => "unchanged",
        SidecarWrite::Rebound => "rebound",
        SidecarWrite::Updated { .. } => "updated",
        SidecarWrite::Rebuilt => "rebuilt",
        SidecarWrite::Dropped(_) => "dropped",
        _ => "changed",
    }
}

fn parse<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    raw: &Bytes,
) -> std::result::Result<T, ApiError> {
    if crate::limits::is_octet_stream(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "this body is JSON only (application/json); binary rows are for search, \
             search:batch and points:upsert",
        )
        .at("content-type"));
    }
    serde_json::from_slice(raw)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_body", e.to_string()).at("body"))
}

fn hex_field(field: &str, s: &str) -> std::result::Result<Vec<u8>, ApiError> {
    hex::decode(s).map_err(|e| ApiError::field(field, format!("bad hex: {e}")))
}

/// The descriptor named by `If-Match` (quotes and a `W/` prefix allowed).
fn if_match(headers: &HeaderMap) -> std::result::Result<Option<Cid>, ApiError> {
    let Some(v) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let s = v.to_str().unwrap_or("").trim();
    let s = s.strip_prefix("W/").unwrap_or(s).trim_matches('"');
    s.parse::<Cid>()
        .map(Some)
        .map_err(|e| ApiError::field("if-match", format!("not a descriptor CID: {e}")))
}

fn writer(st: &Shared) -> std::result::Result<&Writer, ApiError> {
    st.writer.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "writes_disabled",
            "this server takes no writes (start it with a write token)",
        )
    })
}

fn precondition_failed(expected: Cid, served: Cid) -> ApiError {
    ApiError::new(
        StatusCode::PRECONDITION_FAILED,
        "precondition_failed",
        format!("If-Match names {expected}, the map is at {served}"),
    )
    .at("if-match")
}

/// Maps an engine error of a write to a response.
fn write_error(e: EngineError) -> ApiError {
    let field = |code: &'static str, f: &str, e: &EngineError| ApiError {
        code,
        ..ApiError::field(f, e.to_string())
    };
    match &e {
        EngineError::WrongDimension { .. } => field("wrong_dimension", "points", &e),
        EngineError::NonFiniteVector { .. } => field("not_finite", "points", &e),
        EngineError::ZeroCosineVector { .. }
        | EngineError::KeyTooLong { .. }
        | EngineError::InvalidRootName { .. } => field("invalid_field", "points", &e),
        EngineError::DuplicateKey { .. } => field("duplicate_key", "points", &e),
        EngineError::InvalidConfig(_) => field("invalid_field", "config", &e),
        EngineError::CanonicalHnsw { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "canonical_hnsw",
            format!("{e} (send \"canonical_hnsw\": \"rebuild\" or \"drop\")"),
        ),
        EngineError::Conflict { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("{e}; the map moved meanwhile, retry"),
        ),
        EngineError::Busy { .. } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!("{e}; retry"),
        ),
        _ => internal(e),
    }
}

fn answer(status: StatusCode, r: &WriteResponse) -> Response {
    let mut resp = (status, Json(r)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", r.descriptor)) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    resp
}

/// Applies `batch` to the served map `name` and publishes the result.
/// Runs CPU-heavy write work (decoding a body, applying a batch) on the
/// write pool, in the idle scheduling class and off the async runtime, so
/// searches keep their cores.
async fn on_write_pool<T: Send + 'static>(
    st: &Arc<Shared>,
    f: impl FnOnce() -> std::result::Result<T, ApiError> + Send + 'static,
) -> std::result::Result<T, ApiError> {
    let st = Arc::clone(st);
    tokio::task::spawn_blocking(move || writer(&st)?.pool.install(f))
        .await
        .map_err(internal)?
}

async fn apply(
    st: Arc<Shared>,
    name: String,
    expected: Option<Cid>,
    batch: Batch,
    options: WriteOptions,
    t: Instant,
) -> std::result::Result<Response, ApiError> {
    let lock = writer(&st)?.lock_for(&name);
    let _serial = lock.lock().await;
    let snap = st
        .maps
        .get(&name)
        .ok_or_else(|| ApiError::unknown_map(&name))?;
    let served = snap.index().descriptor();
    if let Some(e) = expected.filter(|e| *e != served) {
        return Err(precondition_failed(e, served));
    }
    let current = snap.index().clone();
    let n = name.clone();
    // Without If-Match a batch that lost a race with another writer (a CLI
    // update through the owner socket) is re-applied to the newer version;
    // with it, the caller asked to fail instead.
    let rebases = if expected.is_some() {
        0
    } else {
        index::DEFAULT_REBASES
    };
    let base = index::Options {
        warm: false,
        ..index::Options::default()
    };
    let written = on_write_pool(&st, move || {
        current
            .write(&n, &batch, &options, &base, rebases)
            .map_err(write_error)
    })
    .await?;
    let (applied, cid) = (written.applied, written.descriptor);
    let report: WriteReport = applied.report;
    let generation = st
        .maps
        .publish(&name, Snapshot::new(Arc::new(applied.index)));
    if report.profile_stale {
        tokio::spawn(remeasure(Arc::clone(&st), name.clone()));
    }
    Ok(answer(
        StatusCode::OK,
        &WriteResponse {
            name,
            descriptor: cid.to_string(),
            generation,
            inserted: report.inserted,
            moved: report.moved,
            value_only: report.value_only,
            deleted: report.deleted,
            absent_deletes: report.absent_deletes,
            blocks_written: report.blocks_written,
            bytes_written: report.bytes_written,
            hnsw: sidecar_word(report.hnsw),
            pq: sidecar_word(report.pq),
            profile: match report.profile_stale {
                true => "stale",
                false => sidecar_word(report.profile),
            },
            took_us: micros(t),
        },
    ))
}

/// Measures the recall profile of the served version of `name` on the
/// write pool and publishes it beside that version (its root must still
/// name it) for `recall` searches. When a write replaced the version
/// meanwhile, starts over on the new one (at most [`REMEASURE_TRIES`]
/// times); stops when the served version has a profile that is not stale.
async fn remeasure(st: Arc<Shared>, name: String) {
    for _ in 0..REMEASURE_TRIES {
        let Some(snap) = st.maps.get(&name) else {
            return;
        };
        let index = Arc::clone(snap.index());
        if index.profile().is_some_and(|p| !p.is_stale(index.len())) {
            return;
        }
        let ix = Arc::clone(&index);
        let measured = on_write_pool(&st, move || {
            ix.measure_profile(index::DEFAULT_PROFILE_QUERIES)
                .map_err(write_error)
        })
        .await;
        let profile = match measured {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(map = %name, error = %e.message, "recall profile not measured");
                return;
            }
        };
        let Ok(w) = writer(&st) else {
            return;
        };
        let lock = w.lock_for(&name);
        let _serial = lock.lock().await;
        let still = st
            .maps
            .get(&name)
            .is_some_and(|s| Arc::ptr_eq(s.index(), &index));
        if !still {
            continue;
        }
        let (ix, n) = (Arc::clone(&index), name.clone());
        let done = on_write_pool(&st, move || {
            ix.publish_profile(&n, &profile).map_err(write_error)?;
            ix.set_profile(profile).map_err(write_error)
        })
        .await;
        if let Err(e) = done {
            tracing::warn!(map = %name, error = %e.message, "recall profile not published");
        }
        return;
    }
}

/// Versions [`remeasure`] tries before leaving a busy map to the next
/// stale write.
const REMEASURE_TRIES: usize = 3;

/// A write's list `field` holds 1 to `max` items.
fn bounded(n: usize, field: &str, max: usize) -> std::result::Result<(), ApiError> {
    if n == 0 || n > max {
        return Err(ApiError::field(
            field,
            format!("must hold 1 to {max} items, got {n}"),
        ));
    }
    Ok(())
}

/// `POST /v1/maps/{name}/points:upsert`: a JSON body, or little-endian
/// f32 rows (`application/octet-stream`) keyed by the query string (see
/// [`api::upsert_binary`]).
pub(crate) async fn upsert(
    State(st): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    query: QueryPairs,
    raw: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Response, ApiError> {
    let t = Instant::now();
    writer(&st)?;
    let expected = if_match(&headers)?;
    let pairs = query_pairs(query)?;
    let raw = body(raw)?;
    let (dec_st, dec_name) = (Arc::clone(&st), name.clone());
    let (batch, options) = on_write_pool(&st, move || {
        decode_upsert(&dec_st, &dec_name, &headers, &pairs, &raw)
    })
    .await?;
    apply(st, name, expected, batch, options, t).await
}

/// The batch and options of an upsert body (JSON, or binary rows keyed by
/// the query string).
fn decode_upsert(
    st: &Shared,
    name: &str,
    headers: &HeaderMap,
    pairs: &[(String, String)],
    raw: &Bytes,
) -> std::result::Result<(Batch, WriteOptions), ApiError> {
    let (points, canonical_hnsw) = if crate::limits::is_octet_stream(headers) {
        let dims = st
            .maps
            .get(name)
            .ok_or_else(|| ApiError::unknown_map(name))?
            .index()
            .dims();
        let u = api::upsert_binary(raw, pairs, dims, st.limits.max_batch)?;
        let points: Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> = u
            .points
            .into_iter()
            .map(|(k, v)| (k, v, Vec::new()))
            .collect();
        (points, u.canonical_hnsw)
    } else {
        if let Some((name, _)) = pairs.first() {
            return Err(ApiError::field(
                name,
                "a JSON upsert takes no query options (they are for binary bodies)",
            ));
        }
        let b: UpsertBody = parse(headers, raw)?;
        bounded(b.points.len(), "points", st.limits.max_batch)?;
        let mut points = Vec::with_capacity(b.points.len());
        for (i, p) in b.points.into_iter().enumerate() {
            let key = hex_field(&format!("points[{i}].key"), &p.key)?;
            let value = match &p.value {
                Some(v) => hex_field(&format!("points[{i}].value"), v)?,
                None => Vec::new(),
            };
            points.push((key, p.vector, value));
        }
        (points, b.canonical_hnsw)
    };
    let mut options = WriteOptions::default();
    if let Some(p) = &canonical_hnsw {
        options.canonical_hnsw = p
            .parse::<CanonicalHnsw>()
            .map_err(|e| ApiError::field("canonical_hnsw", e.to_string()))?;
    }
    // A key given twice: the later point wins (one record per key).
    let points: std::collections::BTreeMap<Vec<u8>, (Vec<f32>, Vec<u8>)> = points
        .into_iter()
        .map(|(k, v, val)| (k, (v, val)))
        .collect();
    let mut batch = Batch::new();
    for (key, (vector, value)) in points {
        batch.upsert(key, vector, value);
    }
    Ok((batch, options))
}

/// `POST /v1/maps/{name}/points:delete`.
pub(crate) async fn delete(
    State(st): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    raw: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Response, ApiError> {
    let t = Instant::now();
    writer(&st)?;
    let expected = if_match(&headers)?;
    let raw = body(raw)?;
    let max = st.limits.max_batch;
    let batch = on_write_pool(&st, move || {
        let b: DeleteBody = parse(&headers, &raw)?;
        bounded(b.keys.len(), "keys", max)?;
        // A key given twice is deleted once.
        let mut keys = std::collections::BTreeSet::new();
        for (i, k) in b.keys.iter().enumerate() {
            keys.insert(hex_field(&format!("keys[{i}]"), k)?);
        }
        let mut batch = Batch::new();
        for k in keys {
            batch.delete(k);
        }
        Ok(batch)
    })
    .await?;
    apply(st, name, expected, batch, WriteOptions::default(), t).await
}

fn parse_metric(s: &str) -> std::result::Result<Metric, ApiError> {
    match s {
        "l2" => Ok(Metric::L2),
        "ip" => Ok(Metric::InnerProduct),
        "cosine" => Ok(Metric::Cosine),
        other => Err(ApiError::field(
            "metric",
            format!("{other:?} (expected l2, ip or cosine)"),
        )),
    }
}

/// `PUT /v1/maps/{name}`: creates an empty map from a config (201); 409
/// when the name already names a map.
pub(crate) async fn create(
    State(st): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    raw: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Response, ApiError> {
    let t = Instant::now();
    let w = writer(&st)?;
    if !openapi::creatable_name(&name) {
        return Err(ApiError::field(
            "name",
            format!(
                "{name:?}: a new map's name is 1 to 255 of A-Z a-z 0-9 . _ - (not starting with .)"
            ),
        ));
    }
    let b: CreateBody = parse(&headers, &body(raw)?)?;
    if !(1..=openapi::MAX_CREATE_DIMS).contains(&b.dims) {
        return Err(ApiError::field(
            "dims",
            format!("must be in 1..={}", openapi::MAX_CREATE_DIMS),
        ));
    }
    let mut config = ProximityConfig::new(b.dims);
    if let Some(m) = &b.metric {
        config.metric = parse_metric(m)?;
    }
    config.sq8_group_size = b.sq8_group_size;
    let lock = w.lock_for(&name);
    let _serial = lock.lock().await;
    let store = w.store.clone();
    let n = name.clone();
    let snap = tokio::task::spawn_blocking(move || {
        prox_engine::store::validate_root_name(&n)?;
        if let Some((found, _)) = proximity::resolve(&*store, &n)? {
            return Err(EngineError::Conflict {
                name: n,
                expected: None,
                found: Some(found),
            });
        }
        let cid = ProximityMap::build(&*store, &config, Vec::new())?.descriptor_cid();
        proximity::publish_expecting(&*store, &n, cid, &Sidecars::default(), None)?;
        Snapshot::load(store, cid, Sidecars::default())
    })
    .await
    .map_err(internal)?
    .map_err(|e| match e {
        EngineError::Conflict { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "map_exists",
            format!("{name:?} already names a map; DELETE it first"),
        )
        .at("name"),
        EngineError::InvalidRootName { .. } => ApiError::field("name", e.to_string()),
        e => write_error(e),
    })?;
    let cid = snap.index().descriptor();
    let generation = st.maps.publish(&name, snap);
    Ok(answer(
        StatusCode::CREATED,
        &WriteResponse {
            name,
            descriptor: cid.to_string(),
            generation,
            inserted: 0,
            moved: 0,
            value_only: 0,
            deleted: 0,
            absent_deletes: 0,
            blocks_written: 0,
            bytes_written: 0,
            hnsw: "absent",
            pq: "absent",
            profile: "absent",
            took_us: micros(t),
        },
    ))
}

/// `DELETE /v1/maps/{name}`: removes the root (the blocks stay until
/// `prox gc`) and stops serving the map.
pub(crate) async fn drop_map(
    State(st): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> std::result::Result<Json<serde_json::Value>, ApiError> {
    let w = writer(&st)?;
    let expected = if_match(&headers)?;
    let lock = w.lock_for(&name);
    let _serial = lock.lock().await;
    let snap = st
        .maps
        .get(&name)
        .ok_or_else(|| ApiError::unknown_map(&name))?;
    let served = snap.index().descriptor();
    if let Some(e) = expected.filter(|e| *e != served) {
        return Err(precondition_failed(e, served));
    }
    let store = w.store.clone();
    let n = name.clone();
    tokio::task::spawn_blocking(move || {
        let before = store.root(&n)?;
        let found = proximity::resolve(&*store, &n)?.map(|r| r.0);
        if found != Some(served) || !store.cas_root(&n, before.as_deref(), None)? {
            return Err(EngineError::Conflict {
                name: n,
                expected: Some(served),
                found,
            });
        }
        Ok(())
    })
    .await
    .map_err(internal)?
    .map_err(write_error)?;
    st.maps.remove(&name);
    Ok(Json(serde_json::json!({
        "name": name,
        "dropped": served.to_string(),
    })))
}
