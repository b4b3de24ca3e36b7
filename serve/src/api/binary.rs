//! `application/octet-stream` search bodies: the vectors as little-endian
//! f32 rows (the row length is the map's dimension), the options in the
//! query string, so a client sends no decimal text at all.
//!
//! The query string carries the same options as a JSON body, one per name
//! (`k`, `mode`, `path`, `budget`, `ef`, `rerank`, `nprobe`, `with_values`,
//! `with_vectors`, and `filter` as its JSON text); each value is read as
//! the JSON member of that name would be, by the same checks. With a JSON
//! body the query string may carry options too; each replaces the body's
//! member of the same name ([`overlay`]).

use super::error::ApiError;
use super::request::{query, Limits};
use prox_engine::index::Request;
use serde_json::{Map, Value};

/// Reads the options of a binary search from decoded query pairs.
fn options(pairs: &[(String, String)], limits: Limits) -> Result<Request, ApiError> {
    let mut m = Map::new();
    for (name, text) in pairs {
        if name.is_empty() {
            return Err(ApiError::field("query", "an option without a name"));
        }
        let v = match name.as_str() {
            // Strings stay strings ("auto" is not JSON).
            "mode" | "path" => Value::String(text.clone()),
            "filter" => serde_json::from_str(text)
                .map_err(|e| ApiError::field("filter", format!("not JSON: {e}")))?,
            // Numbers and booleans as their JSON text; anything else stays
            // a string, which the option's own check rejects by name.
            // (`null` too: in a query string an option is given or absent).
            _ => match serde_json::from_str(text) {
                Ok(Value::Null) | Err(_) => Value::String(text.clone()),
                Ok(v) => v,
            },
        };
        if m.insert(name.clone(), v).is_some() {
            return Err(ApiError::field(name, "given more than once"));
        }
    }
    query(&mut m, "", limits)
}

/// Applies the query-string options to `q` (read from a JSON body): each
/// option given in the query string replaces the body's.
pub(crate) fn overlay(
    q: &mut Request,
    pairs: &[(String, String)],
    limits: Limits,
) -> Result<(), ApiError> {
    let from = options(pairs, limits)?;
    for (name, _) in pairs {
        match name.as_str() {
            "k" => q.k = from.k,
            "mode" => q.mode = from.mode,
            "path" => q.path = from.path,
            "budget" => q.budget = from.budget,
            "ef" => q.ef = from.ef,
            "rerank" => q.rerank = from.rerank,
            "nprobe" => q.nprobe = from.nprobe,
            "filter" => q.filter = from.filter.clone(),
            "with_values" => q.with_values = from.with_values,
            "with_vectors" => q.with_vectors = from.with_vectors,
            // `options` rejected every other name.
            _ => {}
        }
    }
    Ok(())
}

/// Decodes `body` as rows of `dims` little-endian f32, each finite.
fn rows(body: &[u8], dims: usize, out: &mut Vec<f32>) -> Result<usize, ApiError> {
    let row = dims.max(1) * 4;
    if body.is_empty() || !body.len().is_multiple_of(row) {
        return Err(ApiError {
            code: "wrong_dimension",
            ..ApiError::field(
                "body",
                format!(
                    "{} bytes is not a whole number (>= 1) of rows of {dims} little-endian f32 ({row} bytes)",
                    body.len()
                ),
            )
        });
    }
    out.reserve(body.len() / 4);
    for (i, c) in body.chunks_exact(4).enumerate() {
        let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if !x.is_finite() {
            return Err(ApiError {
                code: "not_finite",
                ..ApiError::field(
                    "body",
                    format!(
                        "row {} component {} is not a finite 32-bit float",
                        i / dims.max(1),
                        i % dims.max(1)
                    ),
                )
            });
        }
        out.push(x);
    }
    Ok(body.len() / row)
}

/// Parses a binary `search` request: exactly one row.
pub(crate) fn search_binary(
    body: &[u8],
    pairs: &[(String, String)],
    dims: usize,
    limits: Limits,
) -> Result<(Vec<f32>, Request), ApiError> {
    let q = options(pairs, limits)?;
    let mut v = Vec::new();
    if body.len() != dims * 4 {
        return Err(ApiError {
            code: "wrong_dimension",
            ..ApiError::field(
                "body",
                format!(
                    "has {} bytes, one vector of the map's {dims} dimensions is {} bytes of little-endian f32",
                    body.len(),
                    dims * 4
                ),
            )
        });
    }
    rows(body, dims, &mut v)?;
    Ok((v, q))
}

/// Parses a binary `search:batch` request: 1..=max_batch rows.
pub(crate) fn batch_binary(
    body: &[u8],
    pairs: &[(String, String)],
    dims: usize,
    limits: Limits,
) -> Result<(Vec<f32>, usize, Request), ApiError> {
    let q = options(pairs, limits)?;
    let mut flat = Vec::new();
    let n = rows(body, dims, &mut flat)?;
    if n > limits.max_batch {
        return Err(ApiError::field(
            "body",
            format!("{n} rows; at most {} per batch", limits.max_batch),
        ));
    }
    Ok((flat, n, q))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_k: 100,
        max_batch: 3,
    };

    fn le(xs: &[f32]) -> Vec<u8> {
        xs.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn rows_and_options_read_like_the_json_body() {
        let (v, q) = search_binary(
            &le(&[1.5, -2.0]),
            &pairs(&[("k", "7"), ("mode", "exact"), ("with_values", "true")]),
            2,
            LIMITS,
        )
        .unwrap();
        assert_eq!(v, vec![1.5, -2.0]);
        assert_eq!(q.k, 7);
        assert!(q.with_values);
        let f = pairs(&[("filter", r#"{"prefix":"00"}"#), ("ef", "9")]);
        let (flat, n, q) = batch_binary(&le(&[1.0, 2.0, 3.0, 4.0]), &f, 2, LIMITS).unwrap();
        assert_eq!((flat.len(), n, q.ef), (4, 2, Some(9)));
        assert!(q.filter.is_some());
    }

    #[test]
    fn bad_bodies_and_options_name_the_field() {
        let e = search_binary(&le(&[1.0]), &[], 2, LIMITS).unwrap_err();
        assert_eq!(
            (e.code, e.field.as_deref()),
            ("wrong_dimension", Some("body"))
        );
        let e = batch_binary(&[0u8; 12], &[], 2, LIMITS).unwrap_err();
        assert_eq!(e.code, "wrong_dimension");
        let e = batch_binary(&[], &[], 2, LIMITS).unwrap_err();
        assert_eq!(e.code, "wrong_dimension");
        let e = batch_binary(&le(&[0.0; 8]), &[], 2, LIMITS).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("body"), "over max_batch");
        let e = search_binary(&le(&[f32::NAN, 0.0]), &[], 2, LIMITS).unwrap_err();
        assert_eq!(e.code, "not_finite");
        for (name, value) in [
            ("k", "0"),
            ("k", "x"),
            ("mode", "slow"),
            ("nope", "1"),
            ("with_values", "1"),
            ("ef", "null"),
        ] {
            let e =
                search_binary(&le(&[0.0, 0.0]), &pairs(&[(name, value)]), 2, LIMITS).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(name), "{name}={value}");
        }
        let twice = pairs(&[("k", "1"), ("k", "2")]);
        assert_eq!(
            search_binary(&le(&[0.0, 0.0]), &twice, 2, LIMITS)
                .unwrap_err()
                .field
                .as_deref(),
            Some("k")
        );
    }
}
