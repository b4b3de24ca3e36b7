//! Request bodies: the query options, and the two readers of the vector
//! member (see the [module docs](super)).

use super::error::ApiError;
use super::number::{number_f32, token_f32};
use prox_engine::index::{PathChoice, QueryMode, Request};
use prox_engine::keys::Filter;
use serde::de;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// Limits applied while parsing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_k: usize,
    pub(crate) max_batch: usize,
}

/// Reads the JSON form of a [`Filter`] (the `filter` member of a search
/// body, and `prox query --filter`): the engine's one parser,
/// [`prox_engine::secondary::filter_from_json`] (record keys by prefix,
/// range or set; payload fields by match, range, is_null, exists; and
/// must/should/must_not), its errors as 400s naming `filter`.
pub fn filter_from_json(v: &Value) -> Result<Filter, ApiError> {
    prox_engine::secondary::filter_from_json(v).map_err(|e| match e {
        prox_engine::Error::InvalidRequest { field, reason } => ApiError::field(field, reason),
        e => ApiError::field("filter", e.to_string()),
    })
}

/// An optional positive integer member (`null` is absent).
fn positive(m: &mut Map<String, Value>, field: &str, max: u64) -> Result<Option<u64>, ApiError> {
    match m.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|x| (1..=max).contains(x))
            .map(Some)
            .ok_or_else(|| ApiError::field(field, format!("must be an integer in 1..={max}"))),
    }
}

/// An optional boolean member.
fn flag(m: &mut Map<String, Value>, field: &str) -> Result<bool, ApiError> {
    match m.remove(field) {
        None => Ok(false),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| ApiError::field(field, "must be true or false")),
    }
}

/// Reads the query options shared by single and batch searches from `m`
/// (removing them), rejecting anything left but `vector_field`.
pub(super) fn query(
    m: &mut Map<String, Value>,
    vector_field: &str,
    limits: Limits,
) -> Result<Request, ApiError> {
    let mut q = Request::new(10);
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
    q.ef = positive(m, "ef", 1 << 16)?.map(|x| x as usize);
    q.rerank = positive(m, "rerank", 1 << 16)?.map(|x| x as usize);
    q.nprobe = positive(m, "nprobe", 1 << 20)?.map(|x| x as usize);
    q.budget = positive(m, "budget", u64::MAX)?;
    match m.remove("recall") {
        None | Some(Value::Null) => {}
        Some(v) => {
            q.recall = Some(
                v.as_f64()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| ApiError::field("recall", "must be a number in [0, 1]"))?,
            )
        }
    }
    if let Some(v) = m.remove("filter") {
        if !v.is_null() {
            q.filter = Some(filter_from_json(&v)?);
        }
    }
    q.with_values = flag(m, "with_values")?;
    q.with_vectors = flag(m, "with_vectors")?;
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
) -> Result<(Vec<f32>, Request), ApiError> {
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
) -> Result<(Vec<f32>, usize, Request), ApiError> {
    let mut flat = Vec::new();
    let want = Want::Rows {
        dims,
        max_batch: limits.max_batch,
    };
    let (n, q) = parse(body, want, limits, &mut flat)?;
    Ok((flat, n, q))
}

/// [`search_request`] with the checked reader only.
pub(crate) fn search_request_checked(
    body: &[u8],
    dims: usize,
    limits: Limits,
) -> Result<(Vec<f32>, Request), ApiError> {
    let mut v = Vec::new();
    let (_, q) = parse_checked(body, Want::One { dims }, limits, &mut v)?;
    Ok((v, q))
}

/// [`batch_request`] with the checked reader only.
pub(crate) fn batch_request_checked(
    body: &[u8],
    dims: usize,
    limits: Limits,
) -> Result<(Vec<f32>, usize, Request), ApiError> {
    let mut flat = Vec::new();
    let want = Want::Rows {
        dims,
        max_batch: limits.max_batch,
    };
    let (n, q) = parse_checked(body, want, limits, &mut flat)?;
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
pub(super) enum Want {
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
pub(super) fn parse_fast(
    body: &[u8],
    want: Want,
    limits: Limits,
    out: &mut Vec<f32>,
) -> Option<Result<(usize, Request), ApiError>> {
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
) -> Result<(usize, Request), ApiError> {
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
pub(super) fn parse_checked(
    body: &[u8],
    want: Want,
    limits: Limits,
    out: &mut Vec<f32>,
) -> Result<(usize, Request), ApiError> {
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
