//! The wire format: request parsing with field-level errors, and the
//! response bodies (serde).
//!
//! Requests are streamed through a typed deserializer: the vector member
//! (`vector`, or `vectors` of a batch) is parsed straight into a `Vec<f32>`
//! with the length and finiteness checks, without a `serde_json::Value` per
//! component; the few small option members are read as values and checked
//! field by field. Every rejection names the field at fault (`body` for JSON
//! that does not parse or is not an object). Unknown fields are rejected, so
//! a typo never silently falls back to a default. Numbers are parsed with
//! serde_json's `float_roundtrip` (exact decimal) semantics and narrowed to
//! f32 exactly as before, so answers equal the engine's bit for bit.

use crate::snapshot::{Answer, PathChoice, Query, QueryMode};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use prox_engine::proximity::search::Filter;
use serde::de;
use serde::Serialize;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

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
    let mut v = Vec::new();
    let (_, q) = parse(body, Want::One { dims }, limits, &mut v)?;
    Ok((v, q))
}

/// Parses a `search:batch` body: `vectors` (1..=max_batch rows) flattened
/// row-major.
pub(crate) fn batch_request(
    body: &[u8],
    dims: usize,
    limits: Limits,
) -> Result<(Vec<f32>, usize, Query), ApiError> {
    let mut flat = Vec::new();
    let want = Want::Rows {
        dims,
        max_batch: limits.max_batch,
    };
    let (n, q) = parse(body, want, limits, &mut flat)?;
    Ok((flat, n, q))
}

/// The outcome of parsing one vector: the values, or the error naming the
/// field. Content errors are deferred (the rest of the body is still read)
/// so that malformed JSON and option errors take precedence, as they did
/// when the body was parsed into a value tree first.
type Parsed<T> = Result<T, ApiError>;

/// One JSON array element: a number (as f64, exactly as `serde_json::Value`
/// would give it) or something else (consumed).
struct Elem;

impl<'de> de::DeserializeSeed<'de> for Elem {
    type Value = Option<f64>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<f64>, D::Error> {
        d.deserialize_any(ElemVisitor)
    }
}

struct ElemVisitor;

impl<'de> de::Visitor<'de> for ElemVisitor {
    type Value = Option<f64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Option<f64>, E> {
        Ok(Some(v as f64))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Option<f64>, E> {
        Ok(Some(v as f64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Option<f64>, E> {
        Ok(Some(v))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Option<f64>, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Option<f64>, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Option<f64>, E> {
        Ok(None)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Option<f64>, A::Error> {
        while s.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Option<f64>, A::Error> {
        while m.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// Why a vector was rejected, first offending component first.
enum Bad {
    NotNumber(usize),
    NotFinite(usize, f64),
}

/// Parses one vector straight into `out` (appending), without a value tree:
/// an array of exactly `dims` numbers, each finite as f32. Anything else
/// (another JSON type, a wrong length) is consumed and reported as a
/// deferred [`ApiError`] naming `field`.
struct VectorSeed<'a> {
    field: &'a dyn Fn() -> String,
    dims: usize,
    out: &'a mut Vec<f32>,
}

impl<'de> de::DeserializeSeed<'de> for VectorSeed<'_> {
    type Value = Parsed<()>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Parsed<()>, D::Error> {
        d.deserialize_any(self)
    }
}

impl VectorSeed<'_> {
    fn not_array(&self) -> ApiError {
        ApiError::field(&(self.field)(), "must be an array of numbers")
    }
}

impl<'de> de::Visitor<'de> for VectorSeed<'_> {
    type Value = Parsed<()>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of numbers")
    }
    fn visit_u64<E>(self, _: u64) -> Result<Parsed<()>, E> {
        Ok(Err(self.not_array()))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Parsed<()>, E> {
        Ok(Err(self.not_array()))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Parsed<()>, E> {
        Ok(Err(self.not_array()))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Parsed<()>, E> {
        Ok(Err(self.not_array()))
    }
    fn visit_str<E>(self, _: &str) -> Result<Parsed<()>, E> {
        Ok(Err(self.not_array()))
    }
    fn visit_unit<E>(self) -> Result<Parsed<()>, E> {
        Ok(Err(self.not_array()))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Parsed<()>, A::Error> {
        while m.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(Err(self.not_array()))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Parsed<()>, A::Error> {
        let start = self.out.len();
        self.out.reserve(self.dims);
        let mut n = 0usize;
        let mut bad: Option<Bad> = None;
        while let Some(x) = s.next_element_seed(Elem)? {
            if n < self.dims && bad.is_none() {
                match x {
                    None => bad = Some(Bad::NotNumber(n)),
                    Some(f) => {
                        let g = f as f32;
                        if g.is_finite() {
                            self.out.push(g);
                        } else {
                            bad = Some(Bad::NotFinite(n, f));
                        }
                    }
                }
            }
            n += 1;
        }
        let field = (self.field)();
        if n != self.dims {
            self.out.truncate(start);
            return Ok(Err(ApiError {
                code: "wrong_dimension",
                ..ApiError::field(
                    &field,
                    format!("has {n} components, the map has {} dimensions", self.dims),
                )
            }));
        }
        Ok(match bad {
            None => Ok(()),
            Some(b) => {
                self.out.truncate(start);
                Err(match b {
                    Bad::NotNumber(i) => {
                        ApiError::field(&field, format!("component {i} is not a number"))
                    }
                    Bad::NotFinite(i, f) => ApiError {
                        code: "not_finite",
                        ..ApiError::field(
                            &field,
                            format!("component {i} ({f}) is not a finite 32-bit float"),
                        )
                    },
                })
            }
        })
    }
}

/// `vectors` of a batch: an array of 1..=`max_batch` vectors, flattened
/// row-major into `out`; returns the row count.
struct RowsSeed<'a> {
    dims: usize,
    max_batch: usize,
    out: &'a mut Vec<f32>,
}

impl<'de> de::DeserializeSeed<'de> for RowsSeed<'_> {
    type Value = Parsed<usize>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Parsed<usize>, D::Error> {
        d.deserialize_any(self)
    }
}

fn not_rows() -> ApiError {
    ApiError::field("vectors", "must be an array of vectors")
}

impl<'de> de::Visitor<'de> for RowsSeed<'_> {
    type Value = Parsed<usize>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of vectors")
    }
    fn visit_u64<E>(self, _: u64) -> Result<Parsed<usize>, E> {
        Ok(Err(not_rows()))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Parsed<usize>, E> {
        Ok(Err(not_rows()))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Parsed<usize>, E> {
        Ok(Err(not_rows()))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Parsed<usize>, E> {
        Ok(Err(not_rows()))
    }
    fn visit_str<E>(self, _: &str) -> Result<Parsed<usize>, E> {
        Ok(Err(not_rows()))
    }
    fn visit_unit<E>(self) -> Result<Parsed<usize>, E> {
        Ok(Err(not_rows()))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Parsed<usize>, A::Error> {
        while m.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(Err(not_rows()))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Parsed<usize>, A::Error> {
        let mut n = 0usize;
        let mut first_err: Option<ApiError> = None;
        loop {
            if n >= self.max_batch || first_err.is_some() {
                // Only counted (and syntax-checked) from here on.
                if s.next_element::<de::IgnoredAny>()?.is_none() {
                    break;
                }
            } else {
                let i = n;
                let field = move || format!("vectors[{i}]");
                let seed = VectorSeed {
                    field: &field,
                    dims: self.dims,
                    out: self.out,
                };
                match s.next_element_seed(seed)? {
                    None => break,
                    Some(Ok(())) => {}
                    Some(Err(e)) => first_err = Some(e),
                }
            }
            n += 1;
        }
        if n == 0 || n > self.max_batch {
            return Ok(Err(ApiError::field(
                "vectors",
                format!("must hold 1..={} vectors, got {n}", self.max_batch),
            )));
        }
        Ok(match first_err {
            Some(e) => Err(e),
            None => Ok(n),
        })
    }
}

/// Which vector member a body carries.
#[derive(Clone, Copy)]
enum Want {
    /// `vector`: one vector.
    One { dims: usize },
    /// `vectors`: 1..=`max_batch` vectors.
    Rows { dims: usize, max_batch: usize },
}

impl Want {
    fn field(self) -> &'static str {
        match self {
            Want::One { .. } => "vector",
            Want::Rows { .. } => "vectors",
        }
    }
}

/// What the body visitor extracts: the vector member's outcome (rows
/// parsed into `out`, or its deferred error), if present, and every other
/// member as a small value for [`query`].
struct Body {
    vectors: Option<Parsed<usize>>,
    rest: Map<String, Value>,
}

/// The top-level object, streamed: the vector member is parsed straight
/// into `out`, the (few, small) other members into values. Anything but an
/// object is a data error, reported as "the body must be a JSON object".
struct BodySeed<'a> {
    want: Want,
    out: &'a mut Vec<f32>,
}

impl<'de> de::DeserializeSeed<'de> for BodySeed<'_> {
    type Value = Body;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Body, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> de::Visitor<'de> for BodySeed<'_> {
    type Value = Body;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Body, A::Error> {
        let mut body = Body {
            vectors: None,
            rest: Map::new(),
        };
        let name = self.want.field();
        while let Some(key) = m.next_key::<Cow<'de, str>>()? {
            if key == name {
                // A repeated member replaces the earlier one, as in a value tree.
                self.out.clear();
                let got = match self.want {
                    Want::One { dims } => {
                        let field = || "vector".to_string();
                        m.next_value_seed(VectorSeed {
                            field: &field,
                            dims,
                            out: self.out,
                        })?
                        .map(|()| 1)
                    }
                    Want::Rows { dims, max_batch } => m.next_value_seed(RowsSeed {
                        dims,
                        max_batch,
                        out: self.out,
                    })?,
                };
                body.vectors = Some(got);
            } else {
                let v: Value = m.next_value()?;
                body.rest.insert(key.into_owned(), v);
            }
        }
        Ok(body)
    }
}

/// Parses a body of `want` into `out` (row-major vectors) and the query
/// options, in the precedence the value-tree parser had: malformed JSON,
/// not an object, the options (and unknown fields), then the vector member.
fn parse(
    body: &[u8],
    want: Want,
    limits: Limits,
    out: &mut Vec<f32>,
) -> Result<(usize, Query), ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = de::DeserializeSeed::deserialize(BodySeed { want, out }, &mut de)
        .and_then(|b| de.end().map(|()| b));
    let mut b = match parsed {
        Ok(b) => b,
        // A data error can only come from a well-formed body that is not an
        // object (every member type is accepted); check the whole body is
        // JSON so that malformed input is named as such either way.
        Err(e) if e.is_data() && serde_json::from_slice::<de::IgnoredAny>(body).is_ok() => {
            return Err(ApiError::field("body", "the body must be a JSON object"))
        }
        Err(e) => {
            return Err(ApiError {
                code: "malformed_json",
                ..ApiError::field("body", format!("malformed JSON: {e}"))
            })
        }
    };
    let field = want.field();
    let q = query(&mut b.rest, field, limits)?;
    let n = b
        .vectors
        .ok_or_else(|| ApiError::field(field, "is required"))??;
    Ok((n, q))
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

    /// The old value-tree reading of one vector, as the reference.
    fn via_value(body: &[u8]) -> Vec<f32> {
        let v: Value = serde_json::from_slice(body).unwrap();
        v["vector"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    }

    #[test]
    fn vector_parse_matches_a_value_tree_bit_for_bit() {
        let seed: u64 = std::env::var("PROX_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed_0008);
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let dims = 1 + (next() % 64) as usize;
            let parts: Vec<String> = (0..dims)
                .map(|_| {
                    let r = next();
                    let f = f64::from_bits(r);
                    let g = (r as i64 as f64) / (1u64 << (r % 60)) as f64;
                    match r % 6 {
                        0 => format!("{}", g as f32),
                        1 => format!("{g}"),
                        2 => format!("{g:.25e}"),
                        3 => format!("{}", (r % 1000) as i64 - 500),
                        4 if f.is_finite() && (f as f32).is_finite() => format!("{f:e}"),
                        _ => format!("{:.17}", g / 3.0),
                    }
                })
                .collect();
            let body = format!(r#"{{"vector":[{}],"k":3}}"#, parts.join(","));
            let (v, _) = search_request(body.as_bytes(), dims, L)
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e:?} for {body}"));
            let want = via_value(body.as_bytes());
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&v), bits(&want), "seed {seed} round {round}: {body}");
        }
    }

    #[test]
    fn batch_rows_and_precedence() {
        let (flat, n, q) =
            batch_request(br#"{"k":2,"vectors":[[1,2],[3,4.5]],"mode":"exact"}"#, 2, L).unwrap();
        assert_eq!((flat, n, q.k), (vec![1.0, 2.0, 3.0, 4.5], 2, 2));
        // A repeated vector member replaces the earlier one.
        let (v, _) = search_request(br#"{"vector":[9,9],"vector":[1,2]}"#, 2, L).unwrap();
        assert_eq!(v, vec![1.0, 2.0]);
        // Malformed JSON wins over everything, then options, then the vector.
        let e = search_request(br#"{"vector":[1],"k":0"#, 2, L).unwrap_err();
        assert_eq!(
            (e.code, e.field.as_deref()),
            ("malformed_json", Some("body"))
        );
        let e = search_request(br#"{"vector":[1],"k":0}"#, 2, L).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("k"));
        let e = search_request(br#"{"vector":{"a":[1]}}"#, 2, L).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("vector"));
        let e = search_request(br#"{"vector":[1,2,3]}"#, 2, L).unwrap_err();
        assert_eq!(e.code, "wrong_dimension");
        let e = search_request(br#"{"vector":[1,1e39]}"#, 2, L).unwrap_err();
        assert_eq!(e.code, "not_finite");
        let e = search_request(b"[1", 2, L).unwrap_err();
        assert_eq!(e.code, "malformed_json");
        let e = batch_request(br#"{"vectors":[[1,2],[1,[2]]]}"#, 2, L).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("vectors[1]"));
        let e = batch_request(br#"{"vectors":5}"#, 2, L).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("vectors"));
    }
}
