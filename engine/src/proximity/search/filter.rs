//! Key filters applied during traversal.
//!
//! A subtree is entered only when its `[min_key, max_key]` interval can hold
//! an eligible key; a record is a candidate only when its key is eligible.
//! Prefix filters are evaluated as the half-open range they denote.

use crate::error::Result;
use crate::keys::Filter;

/// A filter normalised for fast tests: prefixes become ranges.
#[derive(Debug)]
pub(crate) enum Compiled<'a> {
    /// No filter: everything is eligible.
    All,
    /// `[start, end)`.
    Range(&'a [u8], Option<std::borrow::Cow<'a, [u8]>>),
    /// A strictly ascending key set.
    Keys(&'a [Vec<u8>]),
}

impl<'a> Compiled<'a> {
    /// Validates and normalises `filter`.
    pub(crate) fn new(filter: Option<&'a Filter>) -> Result<Compiled<'a>> {
        let Some(f) = filter else {
            return Ok(Compiled::All);
        };
        f.validate()?;
        Ok(match (f, f.interval()) {
            (Filter::Keys(keys), _) => Compiled::Keys(keys),
            (_, Some((start, end))) => Compiled::Range(start, end),
            (_, None) => Compiled::All,
        })
    }

    /// True when nothing can be eligible (an empty range or key set).
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Compiled::All => false,
            Compiled::Range(s, Some(e)) => *s >= &**e,
            Compiled::Range(_, None) => false,
            Compiled::Keys(k) => k.is_empty(),
        }
    }

    /// True when `key` is eligible.
    #[inline(always)]
    pub(crate) fn accepts(&self, key: &[u8]) -> bool {
        match self {
            Compiled::All => true,
            Compiled::Range(s, e) => key >= *s && e.as_deref().is_none_or(|e| key < e),
            Compiled::Keys(k) => k.binary_search_by(|x| x.as_slice().cmp(key)).is_ok(),
        }
    }

    /// True when some eligible key may lie in `[min, max]`.
    #[inline(always)]
    pub(crate) fn overlaps(&self, min: &[u8], max: &[u8]) -> bool {
        match self {
            Compiled::All => true,
            Compiled::Range(s, e) => max >= *s && e.as_deref().is_none_or(|e| min < e),
            Compiled::Keys(k) => {
                let i = k.partition_point(|x| x.as_slice() < min);
                i < k.len() && k[i].as_slice() <= max
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_prefixes_and_sets() {
        let f = Filter::Prefix(b"b".to_vec());
        let c = Compiled::new(Some(&f)).unwrap();
        assert!(c.accepts(b"b") && c.accepts(b"bzz") && !c.accepts(b"c") && !c.accepts(b"a"));
        assert!(c.overlaps(b"a", b"b") && !c.overlaps(b"c", b"d") && c.overlaps(b"a", b"z"));
        let f = Filter::Keys(vec![b"c".to_vec(), b"f".to_vec()].into());
        let c = Compiled::new(Some(&f)).unwrap();
        assert!(c.accepts(b"c") && !c.accepts(b"d"));
        assert!(c.overlaps(b"d", b"f") && !c.overlaps(b"d", b"e") && !c.overlaps(b"g", b"h"));
        let bad = Filter::Keys(vec![b"f".to_vec(), b"c".to_vec()].into());
        assert!(Compiled::new(Some(&bad)).is_err());
        let empty = Filter::Range {
            start: b"b".to_vec(),
            end: Some(b"b".to_vec()),
        };
        assert!(Compiled::new(Some(&empty)).unwrap().is_empty());
    }
}
