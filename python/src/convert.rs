//! Python values to engine values: vector matrices, keys, filters and
//! search options.
//!
//! Vectors: a C-contiguous float32 array is read in place (no copy); any
//! other array-like is converted as `numpy.asarray(x, dtype=numpy.float32)`
//! would (a strided array is copied once). Keys: a non-negative Python or
//! numpy integer is the 8-byte big-endian key the CLI gives row numbers;
//! `bytes` are used as they are.

use crate::error::invalid;
use numpy::{AllowTypeChange, PyArrayDescrMethods, PyArrayLikeDyn, PyUntypedArrayMethods};
use prox_engine::index::{PathChoice, QueryMode, Request};
use prox_engine::keys::Filter;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::borrow::Cow;

/// A float32 matrix read from Python: `rows x dims`, row-major.
pub(crate) struct Matrix<'py> {
    array: PyArrayLikeDyn<'py, f32, AllowTypeChange>,
    pub(crate) rows: usize,
    pub(crate) dims: usize,
    /// True when the input was one vector (shape `(d,)`).
    pub(crate) single: bool,
}

impl<'py> Matrix<'py> {
    /// Reads `obj` as a `(d,)` or `(n, d)` float32 array (`field` names the
    /// argument in errors).
    pub(crate) fn extract(obj: &Bound<'py, PyAny>, field: &'static str) -> PyResult<Matrix<'py>> {
        let array: PyArrayLikeDyn<'py, f32, AllowTypeChange> = obj.extract().map_err(|e| {
            invalid(
                field,
                format!("{field} must be a float32 array (or convertible to one): {e}"),
            )
        })?;
        let shape = array.shape().to_vec();
        let (rows, dims, single) = match shape.as_slice() {
            [d] => (1, *d, true),
            [n, d] => (*n, *d, false),
            s => {
                return Err(invalid(
                    field,
                    format!(
                        "{field} must have shape (d,) or (n, d), got {} dimensions",
                        s.len()
                    ),
                ))
            }
        };
        Ok(Matrix {
            array,
            rows,
            dims,
            single,
        })
    }

    /// The components, row-major: borrowed when the array is C-contiguous.
    pub(crate) fn data(&self) -> Cow<'_, [f32]> {
        // `as_slice` also accepts Fortran order (memory order, not row order).
        match self.array.as_slice() {
            Ok(s) if self.array.is_c_contiguous() => Cow::Borrowed(s),
            _ => Cow::Owned(self.array.as_array().iter().copied().collect()),
        }
    }
}

/// A key from a Python `int` (>= 0, < 2**64: 8 bytes big-endian) or
/// `bytes`.
pub(crate) fn key(obj: &Bound<'_, PyAny>, field: &'static str) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    match obj.extract::<u64>() {
        Ok(n) => Ok(n.to_be_bytes().to_vec()),
        Err(_) => Err(invalid(
            field,
            format!(
                "{field}: a key is bytes or an integer in 0..2**64, got {}",
                describe(obj)
            ),
        )),
    }
}

/// Keys from a sequence or array of ints or bytes, and whether every one
/// was an int.
pub(crate) fn keys(obj: &Bound<'_, PyAny>, field: &'static str) -> PyResult<(Vec<Vec<u8>>, bool)> {
    if obj.cast::<PyBytes>().is_ok() {
        return Err(invalid(
            field,
            format!("{field} must be a sequence of keys, not one bytes object"),
        ));
    }
    if let Ok(array) = obj.cast::<numpy::PyUntypedArray>() {
        let kind = array.dtype().kind();
        if kind != b'i' && kind != b'u' {
            return Err(invalid(
                field,
                format!(
                    "{field} must be an integer array, got dtype kind {:?}",
                    kind as char
                ),
            ));
        }
        if array.ndim() != 1 {
            return Err(invalid(field, format!("{field} must be one-dimensional")));
        }
    }
    let mut out = Vec::new();
    let mut all_int = true;
    for item in obj.try_iter().map_err(|_| {
        invalid(
            field,
            format!("{field} must be a sequence of keys (ints or bytes)"),
        )
    })? {
        let item = item?;
        all_int &= item.cast::<PyBytes>().is_err();
        out.push(key(&item, field)?);
    }
    Ok((out, all_int))
}

/// Values from a sequence of `bytes` (or `str`, UTF-8 encoded).
pub(crate) fn values(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for item in obj
        .try_iter()
        .map_err(|_| invalid("values", "values must be a sequence of bytes"))?
    {
        let item = item?;
        if let Ok(b) = item.cast::<PyBytes>() {
            out.push(b.as_bytes().to_vec());
        } else if let Ok(s) = item.extract::<String>() {
            out.push(s.into_bytes());
        } else {
            return Err(invalid(
                "values",
                format!("a value is bytes or str, got {}", describe(&item)),
            ));
        }
    }
    Ok(out)
}

/// A filter from `{"prefix": key}`, `{"range": (start, end or None)}`,
/// `{"keys": [key, ...]}`, or any other dict as a payload field filter in
/// the JSON filter language of docs/payloads.md (the same forms as the CLI
/// and HTTP API; one parser, `secondary::filter_from_json`).
pub(crate) fn filter(obj: &Bound<'_, PyAny>) -> PyResult<Filter> {
    let d = obj.cast::<PyDict>().map_err(|_| {
        invalid(
            "filter",
            "filter must be a dict: prefix, range, keys or a field filter",
        )
    })?;
    let key_form = d.keys().iter().any(|k| {
        k.extract::<String>()
            .is_ok_and(|k| matches!(k.as_str(), "prefix" | "range" | "keys"))
    });
    if !key_form {
        return field_filter(d);
    }
    if d.len() != 1 {
        return Err(invalid(
            "filter",
            "filter must have exactly one of prefix, range, keys",
        ));
    }
    let (kind, arg) = d
        .iter()
        .next()
        .ok_or_else(|| invalid("filter", "filter is empty"))?;
    let kind: String = kind
        .extract()
        .map_err(|_| invalid("filter", "filter keys are strings"))?;
    match kind.as_str() {
        "prefix" => Ok(Filter::Prefix(key(&arg, "filter.prefix")?)),
        "range" => {
            let pair: Vec<Bound<'_, PyAny>> = arg
                .extract()
                .ok()
                .filter(|p: &Vec<Bound<'_, PyAny>>| p.len() == 2)
                .ok_or_else(|| invalid("filter.range", "range must be (start, end or None)"))?;
            let start = key(&pair[0], "filter.range")?;
            let end = if pair[1].is_none() {
                None
            } else {
                Some(key(&pair[1], "filter.range")?)
            };
            Ok(Filter::Range { start, end })
        }
        "keys" => Ok(Filter::keys(keys(&arg, "filter.keys")?.0)),
        other => Err(invalid(
            "filter",
            format!("unknown filter {other:?} (prefix, range or keys)"),
        )),
    }
}

/// A field or boolean filter dict, read through Python's `json` module
/// (so it takes exactly what JSON can say) into the engine's parser.
fn field_filter(d: &Bound<'_, PyDict>) -> PyResult<Filter> {
    let text: String = d
        .py()
        .import("json")?
        .call_method1("dumps", (d,))
        .and_then(|t| t.extract())
        .map_err(|e| invalid("filter", format!("a field filter is plain JSON data: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| invalid("filter", format!("a field filter is plain JSON data: {e}")))?;
    prox_engine::secondary::filter_from_json(&value).map_err(|e| invalid("filter", e.to_string()))
}

/// The search options of `Index.search` as one engine [`Request`].
pub(crate) struct Options<'a, 'py> {
    pub(crate) k: usize,
    pub(crate) mode: &'a str,
    pub(crate) path: &'a str,
    pub(crate) ef: Option<usize>,
    pub(crate) nprobe: Option<usize>,
    pub(crate) rerank: Option<usize>,
    pub(crate) budget: Option<u64>,
    pub(crate) recall: Option<f64>,
    pub(crate) filter: Option<&'a Bound<'py, PyAny>>,
    pub(crate) with_values: bool,
    pub(crate) timeout: Option<f64>,
}

impl Options<'_, '_> {
    /// The engine request (checked by the engine when it runs).
    pub(crate) fn request(&self) -> PyResult<Request> {
        let mode = QueryMode::parse(self.mode).ok_or_else(|| {
            invalid(
                "mode",
                format!(
                    "{:?} is not a mode (auto, exact, fast, balanced, high)",
                    self.mode
                ),
            )
        })?;
        let path = PathChoice::parse(self.path).ok_or_else(|| {
            invalid(
                "path",
                format!("{:?} is not a path (auto, native, hnsw, pq)", self.path),
            )
        })?;
        let mut req = Request::new(self.k).mode(mode).path(path);
        req.ef = self.ef;
        req.nprobe = self.nprobe;
        req.rerank = self.rerank;
        req.budget = self.budget;
        req.recall = self.recall;
        req.with_values = self.with_values;
        if let Some(f) = self.filter.filter(|f| !f.is_none()) {
            req.filter = Some(filter(f)?);
        }
        if let Some(t) = self.timeout {
            let d = std::time::Duration::try_from_secs_f64(t).map_err(|_| {
                invalid(
                    "timeout",
                    "timeout must be a non-negative number of seconds",
                )
            })?;
            req.deadline = Some(std::time::Instant::now() + d);
        }
        Ok(req)
    }
}

/// `k=v,...` engine parameters from `True` (the defaults), a `str` or a
/// `dict`; `None`/`False`: not asked for.
pub(crate) fn params(
    obj: Option<&Bound<'_, PyAny>>,
    field: &'static str,
) -> PyResult<Option<String>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if let Ok(b) = obj.extract::<bool>() {
        return Ok(b.then(String::new));
    }
    if let Ok(s) = obj.extract::<String>() {
        return Ok(Some(s));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut parts = Vec::new();
        for (k, v) in d.iter() {
            parts.push(format!("{}={}", k.str()?, v.str()?));
        }
        return Ok(Some(parts.join(",")));
    }
    Err(invalid(
        field,
        format!("{field} must be True, a dict or a \"k=v,...\" string"),
    ))
}

/// A short description of a Python value for error messages.
fn describe(obj: &Bound<'_, PyAny>) -> String {
    let ty = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    match obj.repr() {
        Ok(r) => {
            let r = r.to_string();
            if r.len() > 40 {
                ty
            } else {
                format!("{ty} {r}")
            }
        }
        Err(_) => ty,
    }
}
