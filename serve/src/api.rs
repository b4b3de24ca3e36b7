//! The wire format: request parsing with field-level errors, and the
//! response bodies (serde).
//!
//! Requests are parsed into a `serde_json::Value` first and then read field
//! by field, so every rejection names the field at fault (`body` for JSON
//! that does not parse or is not an object). Unknown fields are rejected, so
//! a typo never silently falls back to a default.

use crate::snapshot::{Answer, PathChoice, Query, QueryMode};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use prox_engine::proximity::search::Filter;
use serde::Serialize;
use serde_json::{Map, Value};

/// An error answered as `{"error": {"code", "field", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (`invalid_field`, `unknown_map`, ...).
    pub code: &'static str,
    /// The request field at fault, if any.
    pub field: Option<String>,
    /// Human-readable detail.
    pub message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
    message: &'a str,
}

impl ApiError {
    /// A 400 naming `field`.
    pub fn field(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_field",
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// Any status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            field: None,
            message: message.into(),
        }
    }

    /// The same error naming `field`.
    pub fn at(mut self, field: &str) -> ApiError {
        self.field = Some(field.to_string());
        self
    }

    /// 404 for a map name that is not served.
    pub fn unknown_map(name: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_map",
            format!("no map is served under {name:?}"),
        )
        .at("name")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&ErrorBody {
            error: ErrorDetail {
                code: self.code,
                field: self.field.as_deref(),
                message: &self.message,
            },
        })
        .unwrap_or_default();
        let mut r = (self.status, body).into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// Limits applied while parsing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_k: usize,
    pub(crate) max_batch: usize,
}

/// Parses a JSON object body.
fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::field("body", "the body must be a JSON object")),
        Err(e) => Err(ApiError {
            code: "malformed_json",
            ..ApiError::field("body", format!("malformed JSON: {e}"))
        }),
    }
}

/// One vector: an array of `dims` finite numbers that fit in f32.
fn vector(v: &Value, field: &str, dims: usize) -> Result<Vec<f32>, ApiError> {
    let a = v
        .as_array()
        .ok_or_else(|| ApiError::field(field, "must be an array of numbers"))?;
    if a.len() != dims {
        return Err(ApiError {
            code: "wrong_dimension",
            ..ApiError::field(
                field,
                format!("has {} components, the map has {dims} dimensions", a.len()),
            )
        });
    }
    let mut out = Vec::with_capacity(dims);
    for (i, x) in a.iter().enumerate() {
        let f = x
            .as_f64()
            .ok_or_else(|| ApiError::field(field, format!("component {i} is not a number")))?;
        let g = f as f32;
        if !g.is_finite() {
            return Err(ApiError {
                code: "not_finite",
                ..ApiError::field(
                    field,
                    format!("component {i} ({f}) is not a finite 32-bit float"),
                )
            });
        }
        out.push(g);
    }
    Ok(out)
}

fn hex_bytes(v: &Value, field: &str) -> Result<Vec<u8>, ApiError> {
    let s = v
        .as_str()
        .ok_or_else(|| ApiError::field(field, "must be a hex string"))?;
    hex::decode(s).map_err(|e| ApiError::field(field, format!("bad hex: {e}")))
}

fn filter(v: &Value) -> Result<Filter, ApiError> {
    let m = v.as_object().filter(|m| m.len() == 1).ok_or_else(|| {
        ApiError::field(
            "filter",
            "must be an object with exactly one of prefix, range, keys",
        )
    })?;
    let (kind, arg) = m
        .iter()
        .next()
        .ok_or_else(|| ApiError::field("filter", "empty"))?;
    Ok(match kind.as_str() {
        "prefix" => Filter::Prefix(hex_bytes(arg, "filter.prefix")?),
        "range" => {
            let a = arg.as_array().filter(|a| a.len() == 2).ok_or_else(|| {
                ApiError::field("filter.range", "must be [start hex, end hex or null]")
            })?;
            let start = hex_bytes(&a[0], "filter.range")?;
            let end = match &a[1] {
                Value::Null => None,
                e => Some(hex_bytes(e, "filter.range")?),
            };
            Filter::Range { start, end }
        }
        "keys" => {
            let a = arg
                .as_array()
                .ok_or_else(|| ApiError::field("filter.keys", "must be an array of hex keys"))?;
            let mut keys = a
                .iter()
                .map(|k| hex_bytes(k, "filter.keys"))
                .collect::<Result<Vec<_>, _>>()?;
            keys.sort();
            keys.dedup();
            Filter::Keys(keys)
        }
        other => {
            return Err(ApiError::field(
                "filter",
                format!("unknown filter {other:?} (prefix, range or keys)"),
            ))
        }
    })
}

/// Reads the query options shared by single and batch searches from `m`
/// (removing them), rejecting anything left but `vector_field`.
fn query(
    m: &mut Map<String, Value>,
    vector_field: &str,
    limits: Limits,
) -> Result<Query, ApiError> {
    let mut q = Query {
        k: 10,
        ..Query::default()
    };
    if let Some(v) = m.remove("k") {
        let k = v
            .as_u64()
            .ok_or_else(|| ApiError::field("k", "must be a positive integer"))?;
        if k == 0 || k > limits.max_k as u64 {
            return Err(ApiError::field(
                "k",
                format!("must be in 1..={}, got {k}", limits.max_k),
            ));
        }
        q.k = k as usize;
    }
    if let Some(v) = m.remove("mode") {
        q.mode = v.as_str().and_then(QueryMode::parse).ok_or_else(|| {
            ApiError::field("mode", "must be one of auto, exact, fast, balanced, high")
        })?;
    }
    if let Some(v) = m.remove("path") {
        q.path = v
            .as_str()
            .and_then(PathChoice::parse)
            .ok_or_else(|| ApiError::field("path", "must be one of auto, native, hnsw, pq"))?;
    }
    if let Some(v) = m.remove("ef") {
        if !v.is_null() {
            let ef = v
                .as_u64()
                .filter(|e| (1..=1 << 16).contains(e))
                .ok_or_else(|| ApiError::field("ef", "must be an integer in 1..=65536"))?;
            q.ef = Some(ef as usize);
        }
    }
    if let Some(v) = m.remove("filter") {
        if !v.is_null() {
            q.filter = Some(filter(&v)?);
        }
    }
    if let Some(v) = m.remove("with_values") {
        q.with_values = v
            .as_bool()
            .ok_or_else(|| ApiError::field("with_values", "must be true or false"))?;
    }
    if let Some(extra) = m.keys().find(|k| k.as_str() != vector_field) {
        return Err(ApiError::field(extra, "unknown field"));
    }
    Ok(q)
}

/// Parses a `search` body for a map of `dims` dimensions.
pub(crate) fn search_request(
    body: &[u8],
    dims: usize,
    limits: Limits,
) -> Result<(Vec<f32>, Query), ApiError> {
    let mut m = object(body)?;
    let q = query(&mut m, "vector", limits)?;
    let v = m
        .get("vector")
        .ok_or_else(|| ApiError::field("vector", "is required"))?;
    Ok((vector(v, "vector", dims)?, q))
}

/// Parses a `search:batch` body: `vectors` (1..=max_batch rows) flattened
/// row-major.
pub(crate) fn batch_request(
    body: &[u8],
    dims: usize,
    limits: Limits,
) -> Result<(Vec<f32>, usize, Query), ApiError> {
    let mut m = object(body)?;
    let q = query(&mut m, "vectors", limits)?;
    let rows = m
        .get("vectors")
        .ok_or_else(|| ApiError::field("vectors", "is required"))?
        .as_array()
        .ok_or_else(|| ApiError::field("vectors", "must be an array of vectors"))?;
    if rows.is_empty() || rows.len() > limits.max_batch {
        return Err(ApiError::field(
            "vectors",
            format!(
                "must hold 1..={} vectors, got {}",
                limits.max_batch,
                rows.len()
            ),
        ));
    }
    let mut flat = Vec::with_capacity(rows.len() * dims);
    for (i, r) in rows.iter().enumerate() {
        flat.extend(vector(r, &format!("vectors[{i}]"), dims)?);
    }
    Ok((flat, rows.len(), q))
}

/// One hit on the wire.
#[derive(Debug, Serialize)]
pub(crate) struct WireHit {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    score: f64,
}

/// One query's answer on the wire.
#[derive(Debug, Serialize)]
pub(crate) struct WireAnswer {
    completion: &'static str,
    path: &'static str,
    results: Vec<WireHit>,
}

impl From<Answer> for WireAnswer {
    fn from(a: Answer) -> Self {
        WireAnswer {
            completion: a.completion,
            path: a.path.name(),
            results: a
                .hits
                .into_iter()
                .map(|h| WireHit {
                    key: hex::encode(&h.key),
                    value: h.value.map(hex::encode),
                    score: h.score,
                })
                .collect(),
        }
    }
}

/// `POST .../search` response.
#[derive(Debug, Serialize)]
pub(crate) struct SearchResponse {
    pub(crate) descriptor: String,
    pub(crate) generation: u64,
    #[serde(flatten)]
    pub(crate) answer: WireAnswer,
    pub(crate) took_us: u64,
}

/// `POST .../search:batch` response.
#[derive(Debug, Serialize)]
pub(crate) struct BatchResponse {
    pub(crate) descriptor: String,
    pub(crate) generation: u64,
    pub(crate) results: Vec<WireAnswer>,
    pub(crate) took_us: u64,
}

/// Sidecar manifests of a map.
#[derive(Debug, Serialize)]
pub(crate) struct WireSidecars {
    pub(crate) hnsw: Option<String>,
    pub(crate) pq: Option<String>,
}

/// One map in `GET /v1/maps`.
#[derive(Debug, Serialize)]
pub(crate) struct MapInfo {
    pub(crate) name: String,
    pub(crate) descriptor: String,
    pub(crate) generation: u64,
    pub(crate) count: u64,
    pub(crate) dims: usize,
    pub(crate) metric: &'static str,
    pub(crate) sidecars: WireSidecars,
}

/// `GET .../records/{key}` response.
#[derive(Debug, Serialize)]
pub(crate) struct RecordResponse {
    pub(crate) descriptor: String,
    pub(crate) generation: u64,
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) vector: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        max_k: 100,
        max_batch: 4,
    };

    fn field_of(r: Result<(Vec<f32>, Query), ApiError>) -> String {
        r.unwrap_err().field.unwrap()
    }

    #[test]
    fn parses_a_full_request() {
        let body = br#"{"vector":[1,2.5],"k":3,"mode":"exact","ef":40,
            "filter":{"keys":["0b","0a","0b"]},"with_values":true}"#;
        let (v, q) = search_request(body, 2, L).unwrap();
        assert_eq!(v, vec![1.0, 2.5]);
        assert_eq!(
            (q.k, q.mode, q.ef, q.with_values),
            (3, QueryMode::Exact, Some(40), true)
        );
        assert_eq!(q.filter, Some(Filter::Keys(vec![vec![0x0a], vec![0x0b]])));
        let (_, q) =
            search_request(br#"{"vector":[0,0],"filter":{"range":["00",null]}}"#, 2, L).unwrap();
        assert_eq!(
            q.filter,
            Some(Filter::Range {
                start: vec![0],
                end: None
            })
        );
    }

    #[test]
    fn names_the_field_at_fault() {
        let f = |b: &[u8]| field_of(search_request(b, 2, L));
        assert_eq!(f(b"{"), "body");
        assert_eq!(f(b"[1]"), "body");
        assert_eq!(f(br#"{"k":1}"#), "vector");
        assert_eq!(f(br#"{"vector":[1]}"#), "vector");
        assert_eq!(f(br#"{"vector":[1,"x"]}"#), "vector");
        assert_eq!(f(br#"{"vector":[1,1e39]}"#), "vector");
        assert_eq!(f(br#"{"vector":[1,2],"k":0}"#), "k");
        assert_eq!(f(br#"{"vector":[1,2],"k":101}"#), "k");
        assert_eq!(f(br#"{"vector":[1,2],"k":-1}"#), "k");
        assert_eq!(f(br#"{"vector":[1,2],"mode":"slow"}"#), "mode");
        assert_eq!(f(br#"{"vector":[1,2],"path":"x"}"#), "path");
        assert_eq!(f(br#"{"vector":[1,2],"ef":0}"#), "ef");
        assert_eq!(
            f(br#"{"vector":[1,2],"filter":{"prefix":"zz"}}"#),
            "filter.prefix"
        );
        assert_eq!(f(br#"{"vector":[1,2],"filter":{"a":1,"b":2}}"#), "filter");
        assert_eq!(f(br#"{"vector":[1,2],"with_values":1}"#), "with_values");
        assert_eq!(f(br#"{"vector":[1,2],"kk":1}"#), "kk");
        let b = batch_request(br#"{"vectors":[[1,2],[3]]}"#, 2, L).unwrap_err();
        assert_eq!(b.field.as_deref(), Some("vectors[1]"));
        let b = batch_request(br#"{"vectors":[]}"#, 2, L).unwrap_err();
        assert_eq!(b.field.as_deref(), Some("vectors"));
        let b = batch_request(br#"{"vectors":[[1,2],[1,2],[1,2],[1,2],[1,2]]}"#, 2, L);
        assert_eq!(b.unwrap_err().field.as_deref(), Some("vectors"));
    }
}
