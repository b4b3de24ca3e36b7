//! `application/octet-stream` search and upsert bodies: the vectors as
//! little-endian f32 rows (the row length is the map's dimension), the
//! options (and an upsert's keys) in the query string, so a client sends no
//! decimal text at all.
//!
//! The query string carries the same options as a JSON body, one per name
//! (`k`, `mode`, `path`, `budget`, `ef`, `rerank`, `nprobe`, `recall`, `with_values`,
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
            "recall" => q.recall = from.recall,
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

/// A binary `points:upsert`: one `(key, vector)` per row (values empty).
#[derive(Debug)]
pub(crate) struct BinaryUpsert {
    pub(crate) points: Vec<(Vec<u8>, Vec<f32>)>,
    /// The `canonical_hnsw` option's text, if given.
    pub(crate) canonical_hnsw: Option<String>,
}

/// Parses a binary `points:upsert`: 1..=max_batch rows, keyed by exactly
/// one of `keys` (comma-separated hex, one per row, in row order) or
/// `start_key` (decimal u64: row `i` gets the 8-byte big-endian key
/// `start_key + i`, the keys `prox build` gives), plus an optional
/// `canonical_hnsw`.
pub(crate) fn upsert_binary(
    body: &[u8],
    pairs: &[(String, String)],
    dims: usize,
    max_batch: usize,
) -> Result<BinaryUpsert, ApiError> {
    let mut keys: Option<&str> = None;
    let mut start: Option<&str> = None;
    let mut canonical_hnsw = None;
    for (name, text) in pairs {
        let slot =
            match name.as_str() {
                "keys" => &mut keys,
                "start_key" => &mut start,
                "canonical_hnsw" => {
                    if canonical_hnsw.replace(text.clone()).is_some() {
                        return Err(ApiError::field(name, "given more than once"));
                    }
                    continue;
                }
                "" => return Err(ApiError::field("query", "an option without a name")),
                _ => return Err(ApiError::field(
                    name,
                    "unknown option (a binary upsert takes keys or start_key, and canonical_hnsw)",
                )),
            };
        if slot.replace(text.as_str()).is_some() {
            return Err(ApiError::field(name, "given more than once"));
        }
    }
    let mut flat = Vec::new();
    let n = rows(body, dims, &mut flat)?;
    if n > max_batch {
        return Err(ApiError::field(
            "body",
            format!("{n} rows; at most {max_batch} per batch"),
        ));
    }
    let keys: Vec<Vec<u8>> =
        match (keys, start) {
            (Some(list), None) => {
                let keys = list
                    .split(',')
                    .enumerate()
                    .map(|(i, k)| {
                        hex::decode(k)
                            .map_err(|e| ApiError::field("keys", format!("key {i}: bad hex: {e}")))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if keys.len() != n {
                    return Err(ApiError::field(
                        "keys",
                        format!("{} keys for {n} rows; give one key per row", keys.len()),
                    ));
                }
                keys
            }
            (None, Some(text)) => {
                let first: u64 = text.parse().map_err(|_| {
                    ApiError::field("start_key", "not a decimal integer in 0..=2^64-1")
                })?;
                (0..n as u64)
                    .map(|i| {
                        first
                            .checked_add(i)
                            .map(|k| k.to_be_bytes().to_vec())
                            .ok_or_else(|| {
                                ApiError::field(
                                    "start_key",
                                    "start_key plus the row count overflows u64",
                                )
                            })
                    })
                    .collect::<Result<_, _>>()?
            }
            (Some(_), Some(_)) => {
                return Err(ApiError::field("keys", "give keys or start_key, not both"))
            }
            (None, None) => return Err(ApiError::field(
                "keys",
                "a binary upsert needs keys (comma-separated hex) or start_key in the query string",
            )),
        };
    let d = dims.max(1);
    let points = keys
        .into_iter()
        .zip(flat.chunks_exact(d))
        .map(|(k, v)| (k, v.to_vec()))
        .collect();
    Ok(BinaryUpsert {
        points,
        canonical_hnsw,
    })
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

    #[test]
    fn binary_upserts_take_keys_or_a_start_key() {
        let body = le(&[1.0, 2.0, 3.0, 4.0]);
        let u = upsert_binary(&body, &pairs(&[("keys", "0a,0b0c")]), 2, 3).unwrap();
        assert_eq!(
            u.points,
            vec![
                (vec![0x0a], vec![1.0, 2.0]),
                (vec![0x0b, 0x0c], vec![3.0, 4.0])
            ]
        );
        assert!(u.canonical_hnsw.is_none());
        let u = upsert_binary(
            &body,
            &pairs(&[("start_key", "7"), ("canonical_hnsw", "drop")]),
            2,
            3,
        )
        .unwrap();
        assert_eq!(u.points[0].0, 7u64.to_be_bytes().to_vec());
        assert_eq!(u.points[1].0, 8u64.to_be_bytes().to_vec());
        assert_eq!(u.canonical_hnsw.as_deref(), Some("drop"));
        for (p, field) in [
            (pairs(&[]), "keys"),
            (pairs(&[("keys", "0a")]), "keys"),
            (pairs(&[("keys", "0a,zz")]), "keys"),
            (pairs(&[("keys", "0a,0b"), ("start_key", "1")]), "keys"),
            (pairs(&[("start_key", "-1")]), "start_key"),
            (pairs(&[("start_key", &u64::MAX.to_string())]), "start_key"),
            (
                pairs(&[("start_key", "1"), ("start_key", "2")]),
                "start_key",
            ),
            (pairs(&[("k", "1"), ("start_key", "2")]), "k"),
        ] {
            let e = upsert_binary(&body, &p, 2, 3).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{p:?}");
        }
        let e = upsert_binary(&le(&[0.0; 8]), &pairs(&[("start_key", "0")]), 2, 3).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("body"), "over max_batch");
        let e = upsert_binary(
            &le(&[f32::INFINITY, 0.0]),
            &pairs(&[("start_key", "0")]),
            2,
            3,
        )
        .unwrap_err();
        assert_eq!(e.code, "not_finite");
    }
}
