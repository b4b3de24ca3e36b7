//! Order-preserving key encodings (prolly-core.md section 8).
//!
//! Numeric keys are fixed-width big-endian so byte order equals numeric
//! order; signed integers flip the sign bit first. Composite keys are
//! concatenations of escaped segments (`00` -> `00 ff`, terminator
//! `00 00`), which keeps tuple order: a segment that is a prefix of another
//! sorts first because its terminator `00 00` is below any escaped byte.

use crate::error::{Error, Result};

mod set;
pub use set::{new_owner, IdSet, KeySet};

const OBJECT: &str = "composite key";

/// 8-byte big-endian.
pub fn u64_key(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

/// 8-byte big-endian of `v` with the sign bit flipped.
pub fn i64_key(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// 16-byte big-endian.
pub fn u128_key(v: u128) -> [u8; 16] {
    v.to_be_bytes()
}

/// 16-byte big-endian of `v` with the sign bit flipped.
pub fn i128_key(v: i128) -> [u8; 16] {
    ((v as u128) ^ (1 << 127)).to_be_bytes()
}

/// Unix milliseconds as an 8-byte big-endian key.
pub fn timestamp_millis_key(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

/// Escapes `seg` (`00` -> `00 ff`) and appends the terminator `00 00`.
pub fn encode_segment(seg: &[u8]) -> Vec<u8> {
    let mut out = encode_segment_prefix(seg);
    out.extend_from_slice(&[0, 0]);
    out
}

/// Escapes `seg` without the terminator: a prefix of every composite key
/// whose next segment starts with `seg`.
pub fn encode_segment_prefix(seg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(seg.len() + 2);
    for &b in seg {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out
}

/// Splits a composite key into its unescaped segments. The empty key has
/// zero segments; a bad escape or an unterminated segment is an error.
pub fn decode_segments(key: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut i = 0;
    let mut open = false;
    while i < key.len() {
        open = true;
        if key[i] != 0 {
            cur.push(key[i]);
            i += 1;
            continue;
        }
        match key.get(i + 1) {
            Some(0) => {
                out.push(std::mem::take(&mut cur));
                open = false;
            }
            Some(0xff) => cur.push(0),
            Some(b) => {
                return Err(Error::invalid(
                    OBJECT,
                    format!("invalid escape 00 {b:02x} at offset {i}"),
                ))
            }
            None => return Err(Error::invalid(OBJECT, "unexpected end after 00")),
        }
        i += 2;
    }
    if open {
        return Err(Error::invalid(
            OBJECT,
            "unexpected end: unterminated segment",
        ));
    }
    Ok(out)
}

/// Builds a composite key segment by segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyBuilder {
    buf: Vec<u8>,
}

impl KeyBuilder {
    /// An empty key.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one escaped, terminated segment.
    pub fn push_segment(&mut self, seg: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(&encode_segment(seg));
        self
    }

    /// Appends a UTF-8 string segment.
    pub fn push_str(&mut self, s: &str) -> &mut Self {
        self.push_segment(s.as_bytes())
    }

    /// Appends a [`u64_key`] segment.
    pub fn push_u64(&mut self, v: u64) -> &mut Self {
        self.push_segment(&u64_key(v))
    }

    /// Appends an [`i64_key`] segment.
    pub fn push_i64(&mut self, v: i64) -> &mut Self {
        self.push_segment(&i64_key(v))
    }

    /// Appends a [`u128_key`] segment.
    pub fn push_u128(&mut self, v: u128) -> &mut Self {
        self.push_segment(&u128_key(v))
    }

    /// Appends an [`i128_key`] segment.
    pub fn push_i128(&mut self, v: i128) -> &mut Self {
        self.push_segment(&i128_key(v))
    }

    /// Appends a [`timestamp_millis_key`] segment.
    pub fn push_timestamp_millis(&mut self, v: u64) -> &mut Self {
        self.push_segment(&timestamp_millis_key(v))
    }

    /// Appends raw bytes without escaping or terminator.
    pub fn push_raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(bytes);
        self
    }

    /// The key so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The finished key.
    pub fn build(self) -> Vec<u8> {
        self.buf
    }
}

/// Smallest key greater than every key starting with `prefix`: drop
/// trailing `ff` bytes, increment the last byte. `None` when no such bound
/// exists (empty or all-`ff` prefix).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let keep = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut end = prefix[..=keep].to_vec();
    end[keep] += 1;
    Some(end)
}

/// Half-open range `[prefix, prefix_end(prefix))` of keys starting with `prefix`.
pub fn prefix_range(prefix: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    (prefix.to_vec(), prefix_end(prefix))
}

/// A half-open key interval `[start, end)`; `end: None` is unbounded.
pub type KeyInterval<'a> = (&'a [u8], Option<std::borrow::Cow<'a, [u8]>>);

/// Which record keys a search may return: the one filter type of every
/// search path (native, HNSW, PQ) and of every front end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Keys in `[start, end)`; an empty `start` is unbounded below, `end:
    /// None` unbounded above.
    Range {
        /// Smallest eligible key (inclusive).
        start: Vec<u8>,
        /// First ineligible key above the range (exclusive), if any.
        end: Option<Vec<u8>>,
    },
    /// Keys starting with these bytes (the range `[p, prefix_end(p))`).
    Prefix(Vec<u8>),
    /// Exactly these keys, sorted strictly ascending ([`Filter::keys`]
    /// sorts and deduplicates; searches reject an unsorted set). Shared:
    /// cloning the filter does not copy them.
    Keys(KeySet),
    /// A condition on an indexed payload field (docs/payloads.md). Only
    /// [`crate::Index`] evaluates it, against the map's field indexes; the
    /// search paths take key filters only.
    Field {
        /// The payload member.
        key: String,
        /// What it must satisfy.
        condition: FieldCondition,
    },
    /// Qdrant's boolean clause: every `must`, at least one `should` (when
    /// any is given), no `must_not`. Evaluated by [`crate::Index`] like
    /// [`Filter::Field`].
    Bool {
        /// All of these.
        must: Vec<Filter>,
        /// At least one of these (ignored when empty).
        should: Vec<Filter>,
        /// None of these.
        must_not: Vec<Filter>,
    },
}

/// A condition on one payload field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldCondition {
    /// The field holds (or, for an array, contains) any of these values.
    Match(Vec<MatchValue>),
    /// The field holds a number in this range (at least one bound).
    Range {
        /// Exclusive lower bound.
        gt: Option<Number>,
        /// Inclusive lower bound.
        gte: Option<Number>,
        /// Exclusive upper bound.
        lt: Option<Number>,
        /// Inclusive upper bound.
        lte: Option<Number>,
    },
    /// The field is present and JSON `null`.
    IsNull,
    /// The field is present with a non-null value of the index's type.
    Exists,
}

/// A value a keyword, integer or bool field is matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchValue {
    /// A string (keyword fields).
    Keyword(String),
    /// An integer (integer and float fields).
    Integer(i64),
    /// A boolean (bool fields).
    Bool(bool),
}

/// A finite `f64` range bound, compared by value (`Eq` by bits).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Number(pub f64);

impl Eq for Number {}

impl Filter {
    /// A key-set filter from keys in any order, duplicates dropped.
    pub fn keys(mut keys: Vec<Vec<u8>>) -> Filter {
        keys.sort_unstable();
        keys.dedup();
        Filter::Keys(keys.into())
    }

    /// Checks the invariant of [`Filter::Keys`] (sorted strictly ascending).
    /// Field and boolean filters are refused here: [`crate::Index`]
    /// resolves them to a key set before any search path sees them.
    pub fn validate(&self) -> Result<()> {
        match self {
            Filter::Keys(keys) if !keys.strictly_ascending() => Err(
                Error::InvalidArgument("filter keys must be sorted strictly ascending".into()),
            ),
            Filter::Field { .. } | Filter::Bool { .. } => Err(Error::InvalidArgument(
                "field and boolean filters are evaluated by Index against the map's field indexes, not by a search path".into(),
            )),
            _ => Ok(()),
        }
    }

    /// True when the filter only names record keys (range, prefix, set).
    pub fn is_key_filter(&self) -> bool {
        matches!(
            self,
            Filter::Range { .. } | Filter::Prefix(_) | Filter::Keys(_)
        )
    }

    /// The half-open key interval a range or prefix filter denotes
    /// (`None` for a key set).
    pub fn interval(&self) -> Option<KeyInterval<'_>> {
        match self {
            Filter::Range { start, end } => {
                Some((start, end.as_deref().map(std::borrow::Cow::Borrowed)))
            }
            Filter::Prefix(p) => Some((p, prefix_end(p).map(std::borrow::Cow::Owned))),
            Filter::Keys(_) | Filter::Field { .. } | Filter::Bool { .. } => None,
        }
    }
}

/// Human-readable quoted form: printable ASCII literal, `\\`, `\"`, `\n`,
/// `\r`, `\t`, everything else `\xNN` (lowercase hex).
pub fn debug_key(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len() + 2);
    s.push('"');
    for &b in key {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_order_is_byte_order() {
        let vals = [i64::MIN, -42, -1, 0, 1, 42, i64::MAX];
        for w in vals.windows(2) {
            assert!(i64_key(w[0]) < i64_key(w[1]));
        }
        assert_eq!(i64_key(0), [0x80, 0, 0, 0, 0, 0, 0, 0]);
        assert!(i128_key(-1) < i128_key(0));
    }

    #[test]
    fn segments_round_trip_and_errors() {
        let segs: Vec<Vec<u8>> = vec![b"tenant".to_vec(), vec![0, 1, 0xff], vec![]];
        let mut k = KeyBuilder::new();
        for s in &segs {
            k.push_segment(s);
        }
        assert_eq!(decode_segments(k.as_bytes()).unwrap(), segs);
        assert_eq!(decode_segments(&[]).unwrap(), Vec::<Vec<u8>>::new());
        assert!(decode_segments(&[b'a', 0]).is_err());
        assert!(decode_segments(&[0, 1]).is_err());
        assert!(decode_segments(b"abc").is_err());
        // Tuple order: ("a") < ("a", ...) < ("ab").
        assert!(encode_segment(b"a") < encode_segment(b"ab"));
    }

    #[test]
    fn filters_normalise_and_validate() {
        let f = Filter::keys(vec![b"b".to_vec(), b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(f, Filter::Keys(vec![b"a".to_vec(), b"b".to_vec()].into()));
        assert!(f.validate().is_ok() && f.interval().is_none());
        assert!(Filter::Keys(vec![b"b".to_vec(), b"a".to_vec()].into())
            .validate()
            .is_err());
        let p = Filter::Prefix(b"a\xff".to_vec());
        let (start, end) = p.interval().unwrap();
        assert_eq!((start, end.as_deref()), (&b"a\xff"[..], Some(&b"b"[..])));
        let r = Filter::Range {
            start: Vec::new(),
            end: None,
        };
        assert_eq!(r.interval().map(|(s, e)| (s.len(), e)), Some((0, None)));
    }

    #[test]
    fn prefix_end_cases() {
        assert_eq!(prefix_end(b""), None);
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(&[0x12, 0xff]), Some(vec![0x13]));
        assert_eq!(prefix_end(b"abc"), Some(b"abd".to_vec()));
        assert_eq!(debug_key(b"a\n\0\\\""), "\"a\\n\\x00\\\\\\\"\"");
    }
}
