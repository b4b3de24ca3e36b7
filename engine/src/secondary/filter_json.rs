//! The JSON form of a [`Filter`], shared by HTTP (`"filter"`), the CLI
//! (`prox query --filter`) and the bindings (docs/payloads.md):
//!
//! * record keys: `{"prefix": hex}`, `{"range": [start hex | null, end hex | null]}`,
//!   `{"keys": [hex, ...]}`;
//! * payload fields: `{"key": F, "match": {"value": V}}`,
//!   `{"key": F, "match": {"any": [V, ...]}}`,
//!   `{"key": F, "range": {"gt"|"gte"|"lt"|"lte": number, ...}}`,
//!   `{"is_null": {"key": F}}`, `{"exists": {"key": F}}`;
//! * boolean: `{"must": [..], "should": [..], "must_not": [..]}` (any
//!   non-empty subset of the three members).

use crate::error::{Error, Result};
use crate::keys::{FieldCondition, Filter, MatchValue, Number};
use serde_json::{Map, Value};

/// Deepest nesting of boolean clauses accepted.
const MAX_DEPTH: usize = 32;
/// Most filters in one `must`, `should` or `must_not` list.
pub const MAX_CLAUSES: usize = 64;
/// Most values in one `match: {"any": [...]}`.
pub const MAX_MATCH_ANY: usize = 1024;

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidRequest {
        field: "filter",
        reason: reason.into(),
    }
}

/// A hex argument; errors name the member (`filter.prefix`, ...).
fn hex_arg(v: &Value, field: &'static str) -> Result<Vec<u8>> {
    let at = |reason: String| Error::InvalidRequest { field, reason };
    let s = v
        .as_str()
        .ok_or_else(|| at("must be a hex string".into()))?;
    hex::decode(s).map_err(|e| at(format!("bad hex: {e}")))
}

/// Parses the JSON form of a filter.
pub fn filter_from_json(v: &Value) -> Result<Filter> {
    parse(v, 0)
}

fn parse(v: &Value, depth: usize) -> Result<Filter> {
    if depth > MAX_DEPTH {
        return Err(bad(format!("nested deeper than {MAX_DEPTH} levels")));
    }
    let m = v
        .as_object()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| bad("must be a non-empty JSON object"))?;
    if ["must", "should", "must_not"]
        .iter()
        .any(|k| m.contains_key(*k))
    {
        return boolean(m, depth);
    }
    if let Some(key) = m.get("key") {
        return field(m, key);
    }
    if m.len() != 1 {
        return Err(bad(
            "must have one of prefix, range, keys, is_null, exists, or key with match/range, or must/should/must_not",
        ));
    }
    let (kind, arg) = m.iter().next().ok_or_else(|| bad("empty"))?;
    Ok(match kind.as_str() {
        "prefix" => Filter::Prefix(hex_arg(arg, "filter.prefix")?),
        "range" => {
            let a = arg.as_array().filter(|a| a.len() == 2).ok_or_else(|| {
                Error::InvalidRequest {
                    field: "filter.range",
                    reason: "must be [start hex or null, end hex or null]".into(),
                }
            })?;
            // A null start is the empty key, the smallest.
            let start = match &a[0] {
                Value::Null => Vec::new(),
                s => hex_arg(s, "filter.range")?,
            };
            let end = match &a[1] {
                Value::Null => None,
                e => Some(hex_arg(e, "filter.range")?),
            };
            Filter::Range { start, end }
        }
        "keys" => {
            let a = arg.as_array().ok_or_else(|| Error::InvalidRequest {
                field: "filter.keys",
                reason: "must be an array of hex keys".into(),
            })?;
            Filter::keys(
                a.iter()
                    .map(|k| hex_arg(k, "filter.keys"))
                    .collect::<Result<_>>()?,
            )
        }
        "is_null" | "exists" => {
            let key = arg
                .as_object()
                .and_then(|o| o.get("key"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{kind} must be {{\"key\": field name}}")))?;
            let condition = if kind == "is_null" {
                FieldCondition::IsNull
            } else {
                FieldCondition::Exists
            };
            Filter::Field {
                key: key.to_string(),
                condition,
            }
        }
        other => {
            return Err(bad(format!(
                "unknown filter {other:?} (prefix, range, keys, key + match/range, is_null, exists, must/should/must_not)"
            )))
        }
    })
}

fn boolean(m: &Map<String, Value>, depth: usize) -> Result<Filter> {
    let mut lists: [Vec<Filter>; 3] = Default::default();
    for (k, v) in m {
        let slot = match k.as_str() {
            "must" => 0,
            "should" => 1,
            "must_not" => 2,
            other => {
                return Err(bad(format!(
                    "unknown member {other:?} beside must/should/must_not"
                )))
            }
        };
        let items = match v {
            Value::Array(a) if a.len() > MAX_CLAUSES => {
                return Err(bad(format!(
                    "{k} has {} filters; at most {MAX_CLAUSES}",
                    a.len()
                )))
            }
            Value::Array(a) => a
                .iter()
                .map(|x| parse(x, depth + 1))
                .collect::<Result<_>>()?,
            one @ Value::Object(_) => vec![parse(one, depth + 1)?],
            _ => return Err(bad(format!("{k} must be a filter or an array of filters"))),
        };
        lists[slot] = items;
    }
    let [must, should, must_not] = lists;
    Ok(Filter::Bool {
        must,
        should,
        must_not,
    })
}

fn match_value(v: &Value) -> Result<MatchValue> {
    Ok(match v {
        Value::String(s) => MatchValue::Keyword(s.clone()),
        Value::Bool(b) => MatchValue::Bool(*b),
        Value::Number(n) => MatchValue::Integer(
            n.as_i64()
                .ok_or_else(|| bad(format!("match value {n} is not an i64 integer")))?,
        ),
        other => {
            return Err(bad(format!(
                "match value {other} is not a string, integer or bool"
            )))
        }
    })
}

fn field(m: &Map<String, Value>, key: &Value) -> Result<Filter> {
    let key = key
        .as_str()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| bad("key must be a non-empty field name"))?
        .to_string();
    if m.len() != 2 {
        return Err(bad(format!(
            "field condition on {key:?} must have exactly one of match, range"
        )));
    }
    if let Some(mv) = m.get("match") {
        let o = mv
            .as_object()
            .filter(|o| o.len() == 1)
            .ok_or_else(|| bad("match must be {\"value\": v} or {\"any\": [v, ...]}"))?;
        let values = match (o.get("value"), o.get("any")) {
            (Some(v), None) => vec![match_value(v)?],
            (None, Some(Value::Array(a))) if a.len() > MAX_MATCH_ANY => {
                return Err(bad(format!(
                    "match any has {} values; at most {MAX_MATCH_ANY}",
                    a.len()
                )))
            }
            (None, Some(Value::Array(a))) => a.iter().map(match_value).collect::<Result<_>>()?,
            _ => return Err(bad("match must be {\"value\": v} or {\"any\": [v, ...]}")),
        };
        return Ok(Filter::Field {
            key,
            condition: FieldCondition::Match(values),
        });
    }
    if let Some(rv) = m.get("range") {
        let o = rv
            .as_object()
            .ok_or_else(|| bad("range must be an object of gt/gte/lt/lte"))?;
        let mut b: [Option<Number>; 4] = [None; 4];
        for (k, v) in o {
            let slot = ["gt", "gte", "lt", "lte"]
                .iter()
                .position(|n| n == k)
                .ok_or_else(|| bad(format!("range bound {k:?} is not gt, gte, lt or lte")))?;
            let n = v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(format!("range bound {k} must be a finite number")))?;
            b[slot] = Some(Number(n));
        }
        if b.iter().all(Option::is_none) {
            return Err(bad("range needs at least one of gt, gte, lt, lte"));
        }
        let [gt, gte, lt, lte] = b;
        return Ok(Filter::Field {
            key,
            condition: FieldCondition::Range { gt, gte, lt, lte },
        });
    }
    Err(bad(format!(
        "field condition on {key:?} must have match or range"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes() {
        let f = filter_from_json(&json!({
            "must": [{"key": "lang", "match": {"value": "en"}},
                     {"key": "year", "range": {"gte": 2020}}],
            "must_not": {"key": "tag", "match": {"any": ["spam", "ads"]}},
        }))
        .unwrap();
        let Filter::Bool {
            must,
            should,
            must_not,
        } = f
        else {
            panic!("not bool")
        };
        assert_eq!(must.len(), 2);
        assert!(should.is_empty());
        assert_eq!(must_not.len(), 1);
        assert_eq!(
            filter_from_json(&json!({"prefix": "00"})).unwrap(),
            Filter::Prefix(vec![0])
        );
        assert!(matches!(
            filter_from_json(&json!({"exists": {"key": "x"}})).unwrap(),
            Filter::Field {
                condition: FieldCondition::Exists,
                ..
            }
        ));
        let many: Vec<_> = (0..=MAX_CLAUSES).map(|_| json!({"keys": []})).collect();
        assert!(filter_from_json(&json!({ "should": many })).is_err());
        let many: Vec<_> = (0..=MAX_MATCH_ANY).map(|i| json!(i)).collect();
        assert!(filter_from_json(&json!({"key": "x", "match": {"any": many}})).is_err());
        for bad in [
            json!({}),
            json!({"key": "x"}),
            json!({"key": "x", "match": {"value": 1.5}}),
            json!({"key": "x", "range": {}}),
            json!({"key": "x", "range": {"from": 1}}),
            json!({"must": 3}),
            json!({"nope": 1}),
            json!({"prefix": "zz"}),
        ] {
            assert!(filter_from_json(&bad).is_err(), "{bad} accepted");
        }
    }
}
