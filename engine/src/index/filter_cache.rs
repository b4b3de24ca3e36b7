//! Field and boolean filters already resolved on one snapshot.
//!
//! Resolving a payload filter reads the field index trees; a filter that
//! admits half a map costs far more than the search it gates. A served map
//! sees the same filters again and again (a tenant, a language), so each
//! [`Index`](super::Index) keeps the key sets of its most recent filters,
//! and with them the id sets the sidecars derived from those key sets
//! ([`KeySet::ids_for`](crate::keys::KeySet::ids_for)). The snapshot is
//! immutable; changing its field indexes clears the cache.

use crate::keys::{Filter, KeySet};
use std::sync::Mutex;

/// Filters kept.
const ENTRIES: usize = 8;

/// Keys kept over all entries (a larger key set is not kept).
const MAX_KEYS: usize = 2_000_000;

/// The recently resolved filters of one snapshot, most recent last.
#[derive(Debug, Default)]
pub(crate) struct FilterCache(Mutex<Vec<(Filter, KeySet)>>);

impl FilterCache {
    /// The key set `filter` resolved to, if kept.
    pub(crate) fn get(&self, filter: &Filter) -> Option<KeySet> {
        let mut entries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let i = entries.iter().position(|(f, _)| f == filter)?;
        let hit = entries.remove(i);
        let keys = hit.1.clone();
        entries.push(hit);
        Some(keys)
    }

    /// Keeps `keys` as what `filter` resolves to, dropping the least
    /// recently used entries past the bounds.
    pub(crate) fn put(&self, filter: &Filter, keys: &KeySet) {
        if keys.len() > MAX_KEYS {
            return;
        }
        let mut entries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|(f, _)| f != filter);
        entries.push((filter.clone(), keys.clone()));
        let mut total: usize = entries.iter().map(|(_, k)| k.len()).sum();
        while entries.len() > ENTRIES || total > MAX_KEYS {
            total -= entries.remove(0).1.len();
        }
    }

    /// Forgets every entry (the field indexes changed).
    pub(crate) fn clear(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{FieldCondition, MatchValue};

    fn field(v: i64) -> Filter {
        Filter::Field {
            key: "year".into(),
            condition: FieldCondition::Match(vec![MatchValue::Integer(v)]),
        }
    }

    #[test]
    fn keeps_the_most_recent_filters_within_bounds() {
        let cache = FilterCache::default();
        let set = |n: u8| KeySet::new((0..n).map(|i| vec![i]).collect());
        assert!(cache.get(&field(1)).is_none());
        cache.put(&field(1), &set(3));
        assert_eq!(cache.get(&field(1)).map(|k| k.len()), Some(3));
        for v in 2..=ENTRIES as i64 + 1 {
            cache.put(&field(v), &set(1));
        }
        // field(1) was used last before the others were added: it is the
        // oldest and went first.
        assert!(cache.get(&field(1)).is_none());
        assert!(cache.get(&field(2)).is_some());
        cache.clear();
        assert!(cache.get(&field(2)).is_none());
    }
}
