//! The wire format: request parsing with field-level errors, and the
//! response bodies (serde).
//!
//! Two readers, one answer. The single-pass reader ([`parse_fast`]) reads
//! a well-formed body in one pass: the top-level object and the vector
//! member with a strict RFC 8259 scanner that converts each number as it
//! goes, the other (few, small) members through serde_json. It accepts only
//! bodies that are valid JSON with a valid vector member and no repeated
//! member; on anything else it gives up and the checked reader runs.
//!
//! The checked reader streams the body through serde_json once: the vector
//! member (`vector`, or `vectors` of a batch) is captured as raw text whose
//! syntax serde_json checks without converting any number, and the option
//! members are read as values. The vector text is then read by [`Scan`]
//! straight into a `Vec<f32>`, with the length and finiteness checks. It
//! names the first problem; the options are checked field by field (the
//! same function for both readers), so both give the same result for every
//! body the single-pass reader accepts (tested on random and mutated
//! bodies).
//!
//! Every component is converted directly to the nearest f32, correctly
//! rounded: bit-identical to `str::parse::<f32>` and to serde_json's
//! `float_roundtrip` for an `f32`, never the double rounding of going
//! through f64 first ([`number_f32`]: an exact fast path for up to 19
//! significant digits and powers of ten up to 22, `str::parse` for the
//! rest). Every rejection names the field at fault (`body` for JSON that
//! does not parse or is not an object). Unknown fields are rejected, so a
//! typo never silently falls back to a default.

use crate::snapshot::{Answer, PathChoice, Query, QueryMode};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use prox_engine::proximity::search::Filter;
use serde::de;
use serde::Serialize;
use serde_json::value::RawValue;
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

/// The first problem of a vector, in the order the checks apply (length
/// first, then the first offending component).
enum Bad<'a> {
    NotNumber(usize),
    NotFinite(usize, &'a str),
}

/// A cursor over JSON text that serde_json has already checked is
/// well-formed (a [`RawValue`]): it only finds token boundaries and never
/// reports syntax errors. Every index it stops at is on an ASCII byte, so
/// slicing the `str` there cannot split a character; running off the end
/// (impossible for well-formed input) reads as the end of the value.
struct Scan<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Scan<'a> {
    fn new(raw: &'a RawValue) -> Scan<'a> {
        Scan { s: raw.get(), i: 0 }
    }

    fn peek(&self) -> u8 {
        self.s.as_bytes().get(self.i).copied().unwrap_or(0)
    }

    fn ws(&mut self) {
        while matches!(self.peek(), b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    /// Consumes `c` (after whitespace) if it comes next.
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        let hit = self.peek() == c;
        if hit {
            self.i += 1;
        }
        hit
    }

    /// The number token at the cursor, consumed; `None` (nothing consumed)
    /// if the next value is not a number.
    fn number(&mut self) -> Option<&'a str> {
        self.ws();
        if !matches!(self.peek(), b'-' | b'0'..=b'9') {
            return None;
        }
        let start = self.i;
        self.i += 1;
        while matches!(self.peek(), b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
            self.i += 1;
        }
        self.s.get(start..self.i)
    }

    fn skip_string(&mut self) {
        let b = self.s.as_bytes();
        self.i += 1; // the opening quote
        while self.i < b.len() && b[self.i] != b'"' {
            self.i += if b[self.i] == b'\\' { 2 } else { 1 };
        }
        self.i += 1; // the closing quote
    }

    /// Skips one value of any type.
    fn skip_value(&mut self) {
        self.ws();
        let b = self.s.as_bytes();
        match self.peek() {
            b'"' => self.skip_string(),
            b'[' | b'{' => {
                self.i += 1;
                let mut depth = 1usize;
                while depth > 0 && self.i < b.len() {
                    match b[self.i] {
                        b'"' => self.skip_string(),
                        b'[' | b'{' => {
                            depth += 1;
                            self.i += 1;
                        }
                        b']' | b'}' => {
                            depth -= 1;
                            self.i += 1;
                        }
                        _ => self.i += 1,
                    }
                }
            }
            _ => {
                while self.i < b.len()
                    && !matches!(b[self.i], b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    self.i += 1;
                }
            }
        }
    }

    /// Reads one vector (an array of exactly `dims` numbers, each finite as
    /// f32) at the cursor, appending it to `out`; on any error `out` is left
    /// as it was and the error names `field()`. Each component is parsed
    /// straight to the nearest f32 (`str::parse::<f32>`: correctly rounded,
    /// the same value serde_json's `float_roundtrip` gives for an `f32`).
    fn vector(
        &mut self,
        dims: usize,
        field: impl Fn() -> String,
        out: &mut Vec<f32>,
    ) -> Result<(), ApiError> {
        if !self.eat(b'[') {
            self.skip_value();
            return Err(ApiError::field(&field(), "must be an array of numbers"));
        }
        let start = out.len();
        out.reserve(dims);
        let mut n = 0usize;
        let mut bad: Option<Bad<'a>> = None;
        if !self.eat(b']') {
            loop {
                match self.number() {
                    Some(t) if bad.is_none() && n < dims => match token_f32(t) {
                        Ok(x) if x.is_finite() => out.push(x),
                        Ok(_) => bad = Some(Bad::NotFinite(n, t)),
                        Err(_) => bad = Some(Bad::NotNumber(n)),
                    },
                    Some(_) => {}
                    None => {
                        self.skip_value();
                        if bad.is_none() {
                            bad = Some(Bad::NotNumber(n));
                        }
                    }
                }
                n += 1;
                if !self.eat(b',') {
                    self.eat(b']');
                    break;
                }
            }
        }
        if n != dims {
            out.truncate(start);
            return Err(ApiError {
                code: "wrong_dimension",
                ..ApiError::field(
                    &field(),
                    format!("has {n} components, the map has {dims} dimensions"),
                )
            });
        }
        match bad {
            None => Ok(()),
            Some(b) => {
                out.truncate(start);
                Err(match b {
                    Bad::NotNumber(i) => {
                        ApiError::field(&field(), format!("component {i} is not a number"))
                    }
                    Bad::NotFinite(i, t) => ApiError {
                        code: "not_finite",
                        ..ApiError::field(
                            &field(),
                            format!("component {i} ({t}) is not a finite 32-bit float"),
                        )
                    },
                })
            }
        }
    }

    /// Reads `vectors` of a batch: an array of 1..=`max_batch` vectors,
    /// flattened row-major into `out`; returns the row count. The first bad
    /// row's error wins; later rows are only counted.
    fn rows(
        &mut self,
        dims: usize,
        max_batch: usize,
        out: &mut Vec<f32>,
    ) -> Result<usize, ApiError> {
        if !self.eat(b'[') {
            return Err(ApiError::field("vectors", "must be an array of vectors"));
        }
        let mut n = 0usize;
        let mut first_err: Option<ApiError> = None;
        if !self.eat(b']') {
            loop {
                if n < max_batch && first_err.is_none() {
                    if let Err(e) = self.vector(dims, || format!("vectors[{n}]"), out) {
                        first_err = Some(e);
                    }
                } else {
                    self.skip_value();
                }
                n += 1;
                if !self.eat(b',') {
                    break;
                }
            }
        }
        if n == 0 || n > max_batch {
            return Err(ApiError::field(
                "vectors",
                format!("must hold 1..={max_batch} vectors, got {n}"),
            ));
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(n),
        }
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

/// What the body visitor extracts: the vector member's text (checked
/// well-formed, not yet converted), if present, and every other member as
/// a small value for [`query`].
struct Body<'de> {
    vector: Option<&'de RawValue>,
    rest: Map<String, Value>,
}

/// The top-level object, streamed: the vector member is kept as raw text
/// (serde_json checks its syntax without converting any number), the few,
/// small other members become values. Anything but an object is a data
/// error, reported as "the body must be a JSON object".
struct BodySeed {
    field: &'static str,
}

impl<'de> de::DeserializeSeed<'de> for BodySeed {
    type Value = Body<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Body<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> de::Visitor<'de> for BodySeed {
    type Value = Body<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Body<'de>, A::Error> {
        let mut body = Body {
            vector: None,
            rest: Map::new(),
        };
        while let Some(key) = m.next_key::<Cow<'de, str>>()? {
            if key == self.field {
                // A repeated member replaces the earlier one, as in a value tree.
                body.vector = Some(m.next_value()?);
            } else {
                let v: Value = m.next_value()?;
                body.rest.insert(key.into_owned(), v);
            }
        }
        Ok(body)
    }
}

/// `10^i`, each exactly representable in f64 (5^22 < 2^53).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// `10^-i` rounded to the nearest f64 (each within half a unit).
const NEG_POW10: [f64; 23] = [
    1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13, 1e-14,
    1e-15, 1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22,
];

/// The nearest f32 to `m * 10^e10` when one f64 operation finds it for
/// certain, else `None`.
///
/// Why it is exact: the f32 midpoints (halfway between neighbouring
/// f32s) inside f32's normal range are f64s whose 29 bits below f32's
/// precision are exactly `1000...0`; `r as f32` rounds to the nearest f32
/// of `r`, which is the nearest f32 to the exact value `v` whenever no
/// midpoint lies between `v` and `r` (or on `r`). Two cases:
///
/// * `m <= 2^53` and `|e10| <= 22`: both operands are exact f64s, so the
///   product or quotient `r` is `v` correctly rounded to f64 (one IEEE
///   operation), and `v` lies in `[1e-22, 2^53 * 1e22]`, inside f32's
///   normal range. Rounding to f64 is monotone and keeps the midpoints,
///   so `r` is on the same side of every midpoint as `v` unless `r` *is*
///   one; that case is left to the slow path.
/// * `2^53 < m < 10^19` (17 to 19 significant digits, what clients send
///   when they print f32 components as f64s) and `|e10| <= 22`: `m` is
///   rounded once to f64 and the operation rounds once more, so
///   `r = v(1 + ε)` with `|ε| < 2^-52 + 2^-106`, less than 3 units in the
///   last place of `r`. When `r`'s dropped bits are more than
///   [`MIDPOINT_SLACK`] units from the midpoint pattern, no midpoint lies
///   within 3 units of `r` (midpoints of a neighbouring binade are 2^27
///   units away), so `v` and `r` round to the same f32. `r` is also kept
///   below `2^127`, and it is at least `2^53 * 1e-22`, so both stay in the
///   normal range. Anything else takes the slow path.
fn clinger_f32(m: u64, e10: i64) -> Option<f32> {
    if !(-22..=22).contains(&e10) {
        return None;
    }
    if e10 < 0 {
        // A multiply by the rounded `10^e10` first (no divide): `m`, the
        // power and the product each round once, so `r = v(1 + ε)` with
        // `|ε| < 3·2^-53 + 2^-105`, under 3 units in the last place of `r`;
        // kept, as in the second case below, when `r` misses every midpoint
        // by more than [`MIDPOINT_SLACK`] units (`r < 10^19`: no range check).
        let r = m as f64 * NEG_POW10[(-e10) as usize];
        if (r.to_bits() & 0x1fff_ffff).abs_diff(0x1000_0000) > MIDPOINT_SLACK {
            return Some(r as f32);
        }
    }
    let r = if e10 >= 0 {
        m as f64 * POW10[e10 as usize]
    } else {
        m as f64 / POW10[(-e10) as usize]
    };
    let dropped = r.to_bits() & 0x1fff_ffff;
    let sure = if m <= 1 << 53 {
        dropped != 0x1000_0000
    } else {
        dropped.abs_diff(0x1000_0000) > MIDPOINT_SLACK && r < TWO_127
    };
    sure.then_some(r as f32)
}

/// Units in the last place of an f64 by which [`clinger_f32`]'s inexact
/// case must miss an f32 midpoint (its error is below 3).
const MIDPOINT_SLACK: u64 = 4;

/// `2^127`, below which every f32 rounding of an f64 is finite and normal
/// for the values [`clinger_f32`] sees.
const TWO_127: f64 = (1u128 << 127) as f64;

/// The value of `s` when it is exactly eight ASCII digits (the first one
/// most significant), else `None`; one 64-bit load and three multiplies
/// instead of eight dependent steps.
fn eight_digits(s: &[u8]) -> Option<u64> {
    let v = u64::from_le_bytes(s.try_into().ok()?);
    // Every byte is 0x30..=0x39: high nibble 3, and adding 6 keeps it 3.
    let high = 0xf0f0_f0f0_f0f0_f0f0u64;
    if (v & high) | ((v.wrapping_add(0x0606_0606_0606_0606) & high) >> 4) != 0x3333_3333_3333_3333 {
        return None;
    }
    // Little-endian: the first digit is the lowest byte. Pairs, then
    // quads, then the whole: d0·10 + d1, then ·100, then ·10^4.
    let v = (v & 0x0f0f_0f0f_0f0f_0f0f).wrapping_mul(2561) >> 8;
    let v = (v & 0x00ff_00ff_00ff_00ff).wrapping_mul(6_553_601) >> 16;
    Some((v & 0x0000_ffff_0000_ffff).wrapping_mul(42_949_672_960_001) >> 32)
}

/// `10^i` for the digit counts [`short_digits`] returns.
const POW10_U64: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// The value and count of the ASCII digits that `s` (eight bytes, *not*
/// all digits) starts with: 0 to 7 of them, the first most significant.
fn short_digits(s: &[u8]) -> (u64, u32) {
    let Ok(bytes) = s.try_into() else {
        return (0, 0);
    };
    let v = u64::from_le_bytes(bytes);
    let t = v ^ 0x3030_3030_3030_3030;
    // Per byte: the top bit set where the byte is not a digit (the low
    // seven bits plus 0x76 reach 0x80 from 10 on, without carrying into
    // the next byte; bytes from 0x80 on keep their own top bit).
    let not_digit =
        (((t & 0x7f7f_7f7f_7f7f_7f7f) + 0x7676_7676_7676_7676) | t) & 0x8080_8080_8080_8080;
    let n = (not_digit.trailing_zeros() / 8).min(7);
    if n == 0 {
        return (0, 0);
    }
    // The n digits moved to the top bytes, '0's below: eight digits whose
    // value is that of the n.
    let w = (v << (8 * (8 - n))) | (0x3030_3030_3030_3030u64 >> (8 * n));
    let w = (w & 0x0f0f_0f0f_0f0f_0f0f).wrapping_mul(2561) >> 8;
    let w = (w & 0x00ff_00ff_00ff_00ff).wrapping_mul(6_553_601) >> 16;
    (
        (w & 0x0000_ffff_0000_ffff).wrapping_mul(42_949_672_960_001) >> 32,
        n,
    )
}

/// Reads one JSON number (RFC 8259: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`)
/// at `b[*i..]`, advancing `*i` past it, and returns the nearest f32
/// (infinite beyond f32's range, like `str::parse::<f32>`). `None`, with
/// `*i` unchanged, when no number starts there. What follows the number is
/// not looked at.
fn number_f32(b: &[u8], i: &mut usize) -> Option<f32> {
    let start = *i;
    let mut j = start;
    let neg = b.get(j) == Some(&b'-');
    j += usize::from(neg);
    // Significant digits (leading zeros excluded) accumulated into `m`;
    // `m` is exact while `sig <= 19` (10^19 - 1 < 2^64).
    let mut m = 0u64;
    let mut sig = 0u32;
    let mut e10 = 0i64;
    let digit = |c: u8, m: &mut u64, sig: &mut u32| {
        if *m != 0 || c != b'0' {
            *sig += 1;
        }
        *m = m.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
    };
    match b.get(j) {
        Some(b'0') => j += 1,
        Some(b'1'..=b'9') => {
            while let Some(&c @ b'0'..=b'9') = b.get(j) {
                digit(c, &mut m, &mut sig);
                j += 1;
            }
        }
        _ => return None,
    }
    if b.get(j) == Some(&b'.') {
        j += 1;
        let first = j;
        // Eight digits at a time while there are eight, then one by one.
        while let Some(v) = b.get(j..j + 8).and_then(eight_digits) {
            if m != 0 {
                sig += 8;
            } else if v != 0 {
                // Leading zeros of the chunk are not significant.
                sig += v.ilog10() + 1;
            }
            m = m.wrapping_mul(100_000_000).wrapping_add(v);
            e10 -= 8;
            j += 8;
        }
        // The last 0-7 digits: with eight bytes left to load, in one step.
        if let Some((v, n)) = b.get(j..j + 8).map(short_digits) {
            if m != 0 {
                sig += n;
            } else if v != 0 {
                sig += v.ilog10() + 1;
            }
            m = m.wrapping_mul(POW10_U64[n as usize]).wrapping_add(v);
            e10 -= i64::from(n);
            j += n as usize;
        }
        while let Some(&c @ b'0'..=b'9') = b.get(j) {
            digit(c, &mut m, &mut sig);
            e10 -= 1;
            j += 1;
        }
        if j == first {
            return None;
        }
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        j += 1;
        let eneg = match b.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let first = j;
        let mut e = 0i64;
        while let Some(&c @ b'0'..=b'9') = b.get(j) {
            // Saturates far beyond any exponent that matters (the slow path
            // reads the text itself).
            e = (e * 10 + i64::from(c - b'0')).min(1 << 40);
            j += 1;
        }
        if j == first {
            return None;
        }
        e10 += if eneg { -e } else { e };
    }
    // `sig == 0`: every digit is zero (`m` itself can wrap to 0 when
    // `sig > 19`).
    let fast = if sig == 0 {
        Some(0.0)
    } else if sig <= 19 {
        clinger_f32(m, e10)
    } else {
        None
    };
    let x = match fast {
        Some(x) => x,
        // The token is ASCII (checked above) and a valid Rust float literal.
        None => std::str::from_utf8(&b[start + usize::from(neg)..j])
            .ok()?
            .parse::<f32>()
            .ok()?,
    };
    *i = j;
    Some(if neg { -x } else { x })
}

/// `t` (a whole number token) as the nearest f32: [`number_f32`] when `t`
/// is one JSON number, else whatever `str::parse::<f32>` says.
fn token_f32(t: &str) -> Result<f32, std::num::ParseFloatError> {
    let mut i = 0;
    match number_f32(t.as_bytes(), &mut i) {
        Some(x) if i == t.len() => Ok(x),
        _ => t.parse::<f32>(),
    }
}

/// A cursor for [`parse_fast`]: every method returns `None` (give up) on
/// anything it does not expect.
struct Fast<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Fast<'a> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// Skips whitespace and consumes `c` if it comes next.
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        let hit = self.b.get(self.i) == Some(&c);
        self.i += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.eat(c).then_some(())
    }

    /// A member name without escapes, of printable ASCII only.
    fn key(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.i;
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'"' => {
                    let k = std::str::from_utf8(&self.b[start..self.i]).ok()?;
                    self.i += 1;
                    return Some(k);
                }
                b' '..=b'~' if c != b'\\' => self.i += 1,
                _ => return None,
            }
        }
        None
    }

    /// Exactly `dims >= 1` finite numbers in brackets, appended to `out`.
    fn vector(&mut self, dims: usize, out: &mut Vec<f32>) -> Option<()> {
        self.expect(b'[')?;
        out.reserve(dims);
        for c in 0..dims {
            self.ws();
            let x = number_f32(self.b, &mut self.i)?;
            if !x.is_finite() {
                return None;
            }
            out.push(x);
            self.expect(if c + 1 < dims { b',' } else { b']' })?;
        }
        (dims > 0).then_some(())
    }

    /// 1..=`max_batch` vectors in brackets; returns how many.
    fn rows(&mut self, dims: usize, max_batch: usize, out: &mut Vec<f32>) -> Option<usize> {
        self.expect(b'[')?;
        let mut n = 0;
        loop {
            if n == max_batch {
                return None;
            }
            self.vector(dims, out)?;
            n += 1;
            if !self.eat(b',') {
                self.expect(b']')?;
                return Some(n);
            }
        }
    }
}

/// The single-pass reader (see the module docs): `Some` only for a body
/// that is one JSON object, with the vector member present once and valid
/// (right length, every component a finite f32), no member repeated and
/// nothing but whitespace after it; the options are then checked exactly
/// as in [`parse_checked`]. `None` leaves `out` with extra rows the caller
/// drops.
fn parse_fast(
    body: &[u8],
    want: Want,
    limits: Limits,
    out: &mut Vec<f32>,
) -> Option<Result<(usize, Query), ApiError>> {
    let field = want.field();
    let mut p = Fast { b: body, i: 0 };
    p.expect(b'{')?;
    let mut rest = Map::new();
    let mut n = None;
    if !p.eat(b'}') {
        loop {
            p.ws();
            let key = p.key()?;
            p.expect(b':')?;
            p.ws();
            if key == field {
                if n.is_some() {
                    return None;
                }
                n = Some(match want {
                    Want::One { dims } => p.vector(dims, out).map(|()| 1)?,
                    Want::Rows { dims, max_batch } => p.rows(dims, max_batch, out)?,
                });
            } else {
                let mut values =
                    serde_json::Deserializer::from_slice(&body[p.i..]).into_iter::<Value>();
                let v = values.next()?.ok()?;
                p.i += values.byte_offset();
                if rest.insert(key.to_string(), v).is_some() {
                    return None;
                }
            }
            if !p.eat(b',') {
                p.expect(b'}')?;
                break;
            }
        }
    }
    p.ws();
    if p.i != body.len() {
        return None;
    }
    let n = n?;
    Some(query(&mut rest, field, limits).map(|q| (n, q)))
}

/// Parses a body of `want` into `out` (row-major vectors) and the query
/// options: [`parse_fast`], or [`parse_checked`] when it gives up.
fn parse(
    body: &[u8],
    want: Want,
    limits: Limits,
    out: &mut Vec<f32>,
) -> Result<(usize, Query), ApiError> {
    let start = out.len();
    match parse_fast(body, want, limits, out) {
        Some(Ok(r)) => Ok(r),
        Some(Err(e)) => {
            out.truncate(start);
            Err(e)
        }
        None => {
            out.truncate(start);
            parse_checked(body, want, limits, out)
        }
    }
}

/// The checked reader: any body, with errors in this precedence: malformed
/// JSON, not an object, the options (and unknown fields), then the vector
/// member.
fn parse_checked(
    body: &[u8],
    want: Want,
    limits: Limits,
    out: &mut Vec<f32>,
) -> Result<(usize, Query), ApiError> {
    let field = want.field();
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = de::DeserializeSeed::deserialize(BodySeed { field }, &mut de)
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
    let q = query(&mut b.rest, field, limits)?;
    let raw = b
        .vector
        .ok_or_else(|| ApiError::field(field, "is required"))?;
    let mut scan = Scan::new(raw);
    let n = match want {
        Want::One { dims } => scan
            .vector(dims, || "vector".to_string(), out)
            .map(|()| 1)?,
        Want::Rows { dims, max_batch } => scan.rows(dims, max_batch, out)?,
    };
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

/// `POST .../search` response: the batch answer's fields inline (spelled
/// out rather than `#[serde(flatten)]`, which goes through a map
/// serializer).
#[derive(Debug, Serialize)]
pub(crate) struct SearchResponse {
    descriptor: String,
    generation: u64,
    completion: &'static str,
    path: &'static str,
    results: Vec<WireHit>,
    took_us: u64,
}

impl SearchResponse {
    /// The response for `answer` from the snapshot `descriptor` /
    /// `generation`.
    pub(crate) fn new(descriptor: String, generation: u64, answer: Answer, took_us: u64) -> Self {
        let a = WireAnswer::from(answer);
        SearchResponse {
            descriptor,
            generation,
            completion: a.completion,
            path: a.path,
            results: a.results,
            took_us,
        }
    }
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
    use proptest::prelude::*;

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

    /// The references for one body's vector: each component through
    /// `str::parse::<f32>`, and the whole array through serde_json into
    /// `Vec<f32>` (`float_roundtrip`); they must agree with each other.
    fn reference(body: &str) -> Vec<u32> {
        let v: Value = serde_json::from_str(body).unwrap();
        let text = v["vector"].to_string();
        let inner = body
            .split_once('[')
            .and_then(|(_, r)| r.split_once(']'))
            .unwrap()
            .0;
        let by_str: Vec<u32> = inner
            .split(',')
            .map(|t| t.trim().parse::<f32>().unwrap().to_bits())
            .collect();
        let raw = &body[body.find('[').unwrap()..=body.find(']').unwrap()];
        let by_serde: Vec<f32> = serde_json::from_str(raw).unwrap();
        let by_serde: Vec<u32> = by_serde.iter().map(|f| f.to_bits()).collect();
        assert_eq!(by_str, by_serde, "references disagree for {text}");
        by_str
    }

    fn parsed_bits(body: &str, dims: usize) -> Vec<u32> {
        let (v, _) =
            search_request(body.as_bytes(), dims, L).unwrap_or_else(|e| panic!("{e:?} for {body}"));
        v.iter().map(|f| f.to_bits()).collect()
    }

    #[test]
    fn vector_parse_equals_str_parse_and_serde_f32_bit_for_bit() {
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
        for round in 0..400 {
            let dims = 1 + (next() % 64) as usize;
            let parts: Vec<String> = (0..dims)
                .map(|_| {
                    let r = next();
                    let f = f64::from_bits(r);
                    let h = f32::from_bits(r as u32);
                    let g = (r as i64 as f64) / (1u64 << (r % 60)) as f64;
                    match r % 9 {
                        0 => format!("{}", g as f32),
                        1 => format!("{g}"),
                        2 => format!("{g:.25e}"),
                        3 => format!("{}", (r % 1000) as i64 - 500),
                        4 if f.abs() < 3.4e38 => format!("{f:e}"),
                        // Every finite f32 bit pattern, shortest and long forms
                        // (subnormals included).
                        5 if h.is_finite() => format!("{h:e}"),
                        6 if h.is_finite() => format!("{:.40e}", h as f64),
                        // Exact f32 midpoints, nudged by less than an f64 ulp.
                        7 if h.is_finite() && h != f32::MAX => {
                            let mid = (h as f64 + h.next_up() as f64) / 2.0;
                            format!("{:.30e}", mid)
                        }
                        _ => format!("{:.17}", g / 3.0),
                    }
                })
                .collect();
            let sep = [",", " , ", ",\n", "\t,"][(next() % 4) as usize];
            let body = format!(r#"{{"vector":[ {} ],"k":3}}"#, parts.join(sep));
            assert_eq!(
                parsed_bits(&body, dims),
                reference(&body),
                "seed {seed} round {round}: {body}"
            );
        }
    }

    #[test]
    fn vector_parse_edge_cases() {
        for t in [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "0e0",
            "0E+5",
            "1E+5",
            "1e-5",
            "-1.5e-3",
            "3.4028235e38",
            "-3.4028235e38",
            "3.40282356779733661637539395458142568447e38",
            "1e-45",
            "1.4e-45",
            "7e-46",
            "7.006492321624085e-46",
            "1e-50",
            "1.17549435e-38",
            "1.1754942e-38",
            "123456789012345678901234567890",
            "0.000000000000000000000000000000000000000001",
            "16777217",
            "-16777217",
            "1.00000005960464477539062500000000001",
        ] {
            let body = format!(r#"{{"vector":[{t}]}}"#);
            assert_eq!(parsed_bits(&body, 1), reference(&body), "{t}");
        }
        // 1 + 2^-24 + 2^-60: just above the midpoint between 1 and the next
        // f32. Rounding to f64 first lands exactly on the midpoint and then
        // ties to even (1.0); the correctly rounded f32 is the next one up.
        let body = r#"{"vector":[1.000000059604644776257986737988403547205962240695953369140625]}"#;
        assert_eq!(parsed_bits(body, 1), vec![1f32.next_up().to_bits()]);
        assert_eq!(parsed_bits(body, 1), reference(body));
        // Beyond f32's range (rounds to infinity): not finite, with the text.
        for t in ["3.40282357e38", "1e39", "-1e300", "1e400"] {
            let e =
                search_request(format!(r#"{{"vector":[0,{t}]}}"#).as_bytes(), 2, L).unwrap_err();
            assert_eq!(e.code, "not_finite", "{t}");
            assert!(e.message.contains(t), "{t}: {}", e.message);
        }
        // Whitespace everywhere the grammar allows it.
        let (v, _) = search_request(b" { \"vector\" :\n[ 1 ,\t2 ] , \"k\" : 1 } ", 2, L).unwrap();
        assert_eq!(v, vec![1.0, 2.0]);
        // Non-numbers anywhere are named by position, after the length check.
        for (body, msg) in [
            (
                r#"{"vector":[1,"a\"],[",3]}"#,
                "component 1 is not a number",
            ),
            (
                r#"{"vector":[1,{"a":[1,2]},3]}"#,
                "component 1 is not a number",
            ),
            (r#"{"vector":[1,2,null]}"#, "component 2 is not a number"),
            (r#"{"vector":[[1],2,true]}"#, "component 0 is not a number"),
            (r#"{"vector":[1,"x",2,3]}"#, "has 4 components"),
            (r#"{"vector":[]}"#, "has 0 components"),
        ] {
            let e = search_request(body.as_bytes(), 3, L).unwrap_err();
            assert!(e.message.contains(msg), "{body}: {}", e.message);
            assert_eq!(e.field.as_deref(), Some("vector"), "{body}");
        }
        let e = search_request(br#"{"vector":"[1,2]"}"#, 2, L).unwrap_err();
        assert_eq!(e.message, "must be an array of numbers");
    }

    /// Reads `body` with both readers; whenever the single-pass one answers,
    /// the checked one must give the same vectors (bit for bit), options
    /// and errors. Returns whether the single-pass reader answered.
    fn readers_agree(body: &[u8], want: Want) -> bool {
        let mut fast = Vec::new();
        let Some(f) = parse_fast(body, want, L, &mut fast) else {
            return false;
        };
        let mut checked = Vec::new();
        let c = parse_checked(body, want, L, &mut checked);
        let text = String::from_utf8_lossy(body);
        assert_eq!(f, c, "{text}");
        if f.is_ok() {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&checked), "{text}");
        }
        true
    }

    /// A decimal that is one JSON number: sign, integer part, optional
    /// fraction and exponent, up to 30 significant digits.
    fn decimal() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            prop_oneof![Just("0".to_string()), "[1-9][0-9]{0,24}"],
            proptest::option::of("[0-9]{1,30}"),
            proptest::option::of((
                prop_oneof![Just("e"), Just("E")],
                prop_oneof![Just(""), Just("+"), Just("-")],
                0u32..70,
            )),
        )
            .prop_map(|(neg, int, frac, exp)| {
                let mut s = String::new();
                if neg {
                    s.push('-');
                }
                s.push_str(&int);
                if let Some(f) = frac {
                    s.push('.');
                    s.push_str(&f);
                }
                if let Some((e, sign, x)) = exp {
                    s.push_str(&format!("{e}{sign}{x}"));
                }
                s
            })
    }

    /// Every way an f32 (or a point near an f32 midpoint) is printed.
    fn printed_f32() -> impl Strategy<Value = String> {
        (any::<u32>(), 0u8..7, 6usize..19).prop_map(|(bits, how, digits)| {
            let h = f32::from_bits(bits);
            let h = if h.is_finite() { h } else { 1.5 };
            let mid = (h as f64 + h.next_up() as f64) / 2.0;
            match how {
                0 => format!("{h}"),
                1 => format!("{h:e}"),
                2 => serde_json::to_string(&h).unwrap(),
                3 => format!("{:.*e}", digits, h as f64),
                // Near (or at) the midpoint above h, with 7..=19 digits:
                // where rounding twice would go wrong.
                4 => format!("{mid:.digits$e}"),
                // The f32 printed as an f64 (17 significant digits as a
                // rule): what JSON clients holding f64s send.
                5 => format!("{}", h as f64),
                _ => format!("{mid:.digits$}"),
            }
        })
    }

    /// One xorshift64 step (deterministic test inputs).
    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn eight_digits_reads_exactly_eight_ascii_digits() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            xorshift(&mut x);
            let n = x % 100_000_000;
            let t = format!("{n:08}");
            assert_eq!(eight_digits(t.as_bytes()), Some(n), "{t}");
            // One byte replaced by a non-digit (or any byte outside 0-9).
            let mut bad = t.clone().into_bytes();
            let k = (x >> 32) as usize % 8;
            bad[k] = [b'/', b':', b'.', b'e', b' ', 0xff, 0x00, b'-'][(x >> 40) as usize % 8];
            assert_eq!(eight_digits(&bad), None, "{bad:?}");
        }
        assert_eq!(eight_digits(b"1234567"), None);
        assert_eq!(eight_digits(b"123456789"), None);
    }

    #[test]
    fn short_digits_reads_the_leading_digits_of_eight_bytes() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        // Bytes that end a run of digits: around '0'..='9', JSON
        // punctuation, and bytes with the top bit set.
        let stops = [
            b'/', b':', b'.', b',', b']', b'e', b' ', 0x00, 0x80, 0xb0, 0xb9, 0xff,
        ];
        for n in 0..8usize {
            for &stop in &stops {
                for _ in 0..200 {
                    let mut s = [0u8; 8];
                    for c in s.iter_mut() {
                        *c = (xorshift(&mut x) % 256) as u8;
                    }
                    let mut want = 0u64;
                    for c in s.iter_mut().take(n) {
                        *c = b'0' + (xorshift(&mut x) % 10) as u8;
                        want = want * 10 + u64::from(*c - b'0');
                    }
                    s[n] = stop;
                    assert_eq!(short_digits(&s), (want, n as u32), "{s:?}");
                }
            }
        }
        assert_eq!(short_digits(b"12"), (0, 0), "fewer than eight bytes");
    }

    /// Many f32s printed as f64s, and points within a few f64 units of
    /// the f32 midpoints printed with 17-19 digits (the inexact fast path's
    /// hardest inputs), parse exactly as `str::parse::<f32>` does.
    #[test]
    fn long_decimals_near_midpoints_parse_exactly() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || xorshift(&mut x);
        for _ in 0..100_000 {
            let h = f32::from_bits(next() as u32);
            if !h.is_finite() {
                continue;
            }
            let mid = (f64::from(h) + f64::from(h.next_up())) / 2.0;
            let off = (next() % 9) as i64 - 4;
            let near = f64::from_bits((mid.to_bits() as i64 + off) as u64);
            let digits = 16 + (next() % 3) as usize;
            for t in [
                format!("{}", f64::from(h)),
                format!("{near:.digits$e}"),
                format!("{near}"),
            ] {
                let mut i = 0;
                let got = number_f32(t.as_bytes(), &mut i).map(f32::to_bits);
                assert_eq!(got, Some(t.parse::<f32>().unwrap().to_bits()), "{t}");
                assert_eq!(i, t.len(), "{t}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn number_f32_equals_str_parse(t in prop_oneof![decimal(), printed_f32()]) {
            let want = t.parse::<f32>().unwrap();
            let mut i = 0;
            let got = number_f32(t.as_bytes(), &mut i);
            prop_assert_eq!(i, t.len(), "{}", t);
            prop_assert_eq!(got.map(f32::to_bits), Some(want.to_bits()), "{}", t);
            prop_assert_eq!(token_f32(&t).map(f32::to_bits), Ok(want.to_bits()), "{}", t);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1500))]

        /// Well-formed bodies take the single pass; broken ones (one byte
        /// deleted, replaced or inserted) either take it with the checked
        /// reader's answer or fall back to it.
        #[test]
        fn single_pass_reader_agrees_with_the_checked_one(
            comps in proptest::collection::vec(prop_oneof![decimal(), printed_f32()], 1..6),
            k in 0u32..120,
            sep in prop_oneof![Just(","), Just(" , "), Just(",\n\t")],
            opts_first in any::<bool>(),
            batch in any::<bool>(),
            cut in any::<prop::sample::Index>(),
            edit in 0u8..4,
            byte in prop::sample::select(br#" []{},:"0159.eE+-axk\"#.to_vec()),
        ) {
            let dims = comps.len();
            let vector = format!("[{}]", comps.join(sep));
            let (member, want) = if batch {
                (
                    format!(r#""vectors": [{vector},{vector}]"#),
                    Want::Rows { dims, max_batch: L.max_batch },
                )
            } else {
                (format!(r#""vector":{vector}"#), Want::One { dims })
            };
            let opts = format!(r#""k":{k}, "mode" : "fast""#);
            let body = if opts_first {
                format!("{{{opts},{member}}}")
            } else {
                format!(" {{ {member} ,{opts} }}\n")
            };
            let valid = comps.iter().all(|c| c.parse::<f32>().unwrap().is_finite());
            let answered = readers_agree(body.as_bytes(), want);
            prop_assert_eq!(answered, valid, "{}", body);
            let mut b = body.into_bytes();
            let at = cut.index(b.len());
            match edit {
                0 => {
                    b.remove(at);
                }
                1 => b[at] = byte,
                2 => b.insert(at, byte),
                _ => {
                    // The vector member twice: the checked reader keeps the last.
                    let twice = format!(r#"{{"vector":[{}],"vector":{vector}}}"#, "1,".repeat(dims - 1) + "1");
                    b = twice.into_bytes();
                    let one = Want::One { dims };
                    prop_assert!(!readers_agree(&b, one), "repeated member");
                }
            }
            readers_agree(&b, want);
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
