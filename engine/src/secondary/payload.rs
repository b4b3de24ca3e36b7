//! Payloads: record values that are JSON objects, their canonical encoding,
//! and the typed field indexes declared over them (docs/payloads.md).
//!
//! A payload is stored as canonical JSON: object members sorted by the
//! UTF-8 bytes of their names (recursively), no insignificant whitespace,
//! strings escaped as `serde_json` writes them, integers in decimal, other
//! numbers in the shortest form that reads back to the same `f64`. A value
//! that is not a JSON object stays opaque bytes and is in no field index.
//!
//! A field index covers one top-level member of one type. Its terms (the
//! extractor ids `prox.payload.<type>/v1`): a JSON `null` is the empty term;
//! a value is `01` followed by an order-preserving encoding (keyword: the
//! UTF-8 bytes; integer: `i64` big-endian with the sign bit flipped; float:
//! the IEEE bits with the sign bit flipped, or every bit flipped when
//! negative; bool: `00` / `01`). An array contributes each element. Values
//! of another type than the index's are left out of it.

use super::build::{Extract, Term};
use crate::error::{Error, Result};
use crate::proximity::Record;
use serde_json::Value;

/// The type of an indexed payload field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldType {
    /// Strings, matched exactly.
    Keyword,
    /// Integers in the `i64` range.
    Integer,
    /// Any JSON number, as `f64`.
    Float,
    /// `true` / `false`.
    Bool,
}

impl FieldType {
    /// Every type, in the order the docs list them.
    pub const ALL: [FieldType; 4] = [
        FieldType::Keyword,
        FieldType::Integer,
        FieldType::Float,
        FieldType::Bool,
    ];

    /// The CLI and wire spelling.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Keyword => "keyword",
            FieldType::Integer => "integer",
            FieldType::Float => "float",
            FieldType::Bool => "bool",
        }
    }

    /// The extractor id persisted in the index's descriptor.
    pub fn extractor_id(self) -> String {
        format!("prox.payload.{}/v1", self.name())
    }

    /// Inverse of [`FieldType::extractor_id`].
    pub fn from_extractor_id(id: &str) -> Option<FieldType> {
        FieldType::ALL.into_iter().find(|t| t.extractor_id() == id)
    }
}

impl std::str::FromStr for FieldType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        FieldType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("{s:?} is not a field type (keyword, integer, float, bool)"))
    }
}

/// One declared field index: `name:type` on the command line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldIndex {
    /// Top-level payload member name (non-empty).
    pub field: String,
    /// Its type.
    pub ty: FieldType,
}

impl std::str::FromStr for FieldIndex {
    type Err = String;
    /// Parses `name:type`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (field, ty) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?} is not FIELD:TYPE (e.g. lang:keyword)"))?;
        if field.is_empty() {
            return Err(format!("{s:?}: empty field name"));
        }
        Ok(FieldIndex {
            field: field.to_string(),
            ty: ty.parse()?,
        })
    }
}

impl std::fmt::Display for FieldIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.field, self.ty.name())
    }
}

/// Parses `bytes` as a JSON object and returns its canonical encoding.
/// Anything else (not JSON, or JSON that is not an object) is
/// [`Error::InvalidArgument`].
pub fn canonical_payload(bytes: &[u8]) -> Result<Vec<u8>> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::InvalidArgument(format!("payload is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Error::InvalidArgument(
            "payload must be a JSON object".into(),
        ));
    }
    encode_canonical(&v)
}

/// The canonical encoding of a JSON value (serde_json's default map keeps
/// members sorted by name, which is UTF-8 byte order).
pub fn encode_canonical(v: &Value) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::InvalidArgument(format!("payload: {e}")))
}

/// The payload of a record value, if it is a JSON object.
pub fn parse_payload(value: &[u8]) -> Option<serde_json::Map<String, Value>> {
    if value.first() != Some(&b'{') {
        return None;
    }
    match serde_json::from_slice(value) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// Term of a present (non-null) scalar.
pub(super) fn value_term(ty: FieldType, v: &Value) -> Option<Vec<u8>> {
    let mut t = vec![1u8];
    match (ty, v) {
        (FieldType::Keyword, Value::String(s)) => t.extend_from_slice(s.as_bytes()),
        (FieldType::Integer, Value::Number(n)) => t.extend_from_slice(&int_key(n.as_i64()?)),
        (FieldType::Float, Value::Number(n)) => t.extend_from_slice(&float_key(n.as_f64()?)),
        (FieldType::Bool, Value::Bool(b)) => t.push(u8::from(*b)),
        _ => return None,
    }
    Some(t)
}

/// Order-preserving bytes of an `i64`.
pub fn int_key(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// Order-preserving bytes of an `f64` (`-0.0` is read as `0.0`; NaN never
/// reaches here: JSON has none).
pub fn float_key(v: f64) -> [u8; 8] {
    let v = if v == 0.0 { 0.0 } else { v };
    let bits = v.to_bits();
    let k = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    k.to_be_bytes()
}

/// The terms of one payload for one field index.
pub fn field_terms(
    ty: FieldType,
    payload: &serde_json::Map<String, Value>,
    field: &str,
) -> Vec<Vec<u8>> {
    match payload.get(field) {
        None => Vec::new(),
        Some(Value::Null) => vec![Vec::new()],
        Some(Value::Array(items)) => items.iter().filter_map(|v| value_term(ty, v)).collect(),
        Some(v) => value_term(ty, v).into_iter().collect(),
    }
}

/// The extractor of a field index over a map's directory (key -> `PRVR`
/// record): decodes the record, reads its value as a payload.
#[derive(Debug, Clone)]
pub struct PayloadExtractor {
    /// The field and its type.
    pub index: FieldIndex,
    /// The map's dimensions (to decode `PRVR`).
    pub dims: u32,
}

impl Extract for PayloadExtractor {
    fn terms(&self, _pk: &[u8], value: &[u8]) -> std::result::Result<Vec<Term>, String> {
        let record = Record::decode(value, self.dims).map_err(|e| e.to_string())?;
        Ok(match parse_payload(&record.value) {
            Some(p) => field_terms(self.index.ty, &p, &self.index.field)
                .into_iter()
                .map(|t| (t, None))
                .collect(),
            None => Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_sorts_and_strips() {
        let c =
            canonical_payload(br#"{ "b": [1, 2.50, "x"], "a": {"z": null, "y": true} }"#).unwrap();
        assert_eq!(c, br#"{"a":{"y":true,"z":null},"b":[1,2.5,"x"]}"#.to_vec());
        assert!(canonical_payload(b"[1]").is_err());
        assert!(canonical_payload(b"\xff").is_err());
    }

    #[test]
    fn keys_preserve_order() {
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ints.windows(2) {
            assert!(int_key(w[0]) < int_key(w[1]));
        }
        let floats = [f64::MIN, -2.5, -1e-300, 0.0, 1e-300, 3.25, f64::MAX];
        for w in floats.windows(2) {
            assert!(float_key(w[0]) < float_key(w[1]), "{} {}", w[0], w[1]);
        }
        assert_eq!(float_key(-0.0), float_key(0.0));
    }

    #[test]
    fn terms_by_type() {
        let p = parse_payload(br#"{"lang":["en","fr",3],"year":2020,"n":null}"#).unwrap();
        assert_eq!(
            field_terms(FieldType::Keyword, &p, "lang"),
            vec![b"\x01en".to_vec(), b"\x01fr".to_vec()]
        );
        assert_eq!(
            field_terms(FieldType::Keyword, &p, "year"),
            Vec::<Vec<u8>>::new()
        );
        assert_eq!(
            field_terms(FieldType::Integer, &p, "n"),
            vec![Vec::<u8>::new()]
        );
        assert!(field_terms(FieldType::Integer, &p, "missing").is_empty());
        assert_eq!(
            "lang:keyword".parse::<FieldIndex>().unwrap().ty,
            FieldType::Keyword
        );
        assert!("lang".parse::<FieldIndex>().is_err());
        assert!("lang:text".parse::<FieldIndex>().is_err());
    }
}
