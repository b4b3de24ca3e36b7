//! The key set of a [`Filter::Keys`](super::Filter::Keys), shared by every
//! query that uses it.
//!
//! A resolved payload filter can admit half a map. The search structures
//! that number records (an HNSW graph, a PQ index) need that set as ids and
//! a membership bitset; computing them costs a binary search per key, far
//! more than the search itself, so each structure's id set is computed once
//! per key set and kept beside it ([`KeySet::ids_for`]); so is any other
//! view a structure derives from it ([`KeySet::derived`], e.g. the PQ
//! fast-scan layout's per-block masks).

use std::any::Any;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Derived views kept per key set (one per search structure that used it).
const MEMO_SLOTS: usize = 4;

/// A memoized view, typed by its structure.
type View = Arc<dyn Any + Send + Sync>;

/// Record keys, cheap to clone (shared), with the ids they map to in each
/// search structure that has used them.
#[derive(Clone)]
pub struct KeySet(Arc<Inner>);

struct Inner {
    keys: Vec<Vec<u8>>,
    /// Sorted strictly ascending (checked once, at construction).
    sorted: bool,
    memo: Mutex<Vec<(u64, View)>>,
}

/// A key set as the ids of one search structure: `ids` ascending, and
/// `bits` with bit `id` set for each (as many words as the structure has
/// ids, rounded up).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct IdSet {
    /// Member ids, ascending, no duplicates.
    pub ids: Vec<u32>,
    /// Membership bitset over the structure's id space.
    pub bits: Vec<u64>,
}

impl IdSet {
    /// The set of `ids` (ascending, deduplicated by the caller) in an id
    /// space of `n`.
    pub fn new(ids: Vec<u32>, n: usize) -> IdSet {
        let mut bits = vec![0u64; n.div_ceil(64)];
        for &id in &ids {
            bits[id as usize / 64] |= 1 << (id % 64);
        }
        IdSet { ids, bits }
    }

    /// True when `id` is a member.
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.bits
            .get(id as usize / 64)
            .is_some_and(|w| w >> (id % 64) & 1 == 1)
    }
}

/// A fresh identity for a search structure's id space: a structure takes
/// one when it is built and a new one whenever its records change, so an
/// id set computed for it is never used for other contents.
pub fn new_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl KeySet {
    /// The keys in the given order (a search refuses them unless sorted
    /// strictly ascending; [`super::Filter::keys`] sorts).
    pub fn new(keys: Vec<Vec<u8>>) -> KeySet {
        let sorted = keys.windows(2).all(|w| w[0] < w[1]);
        KeySet(Arc::new(Inner {
            keys,
            sorted,
            memo: Mutex::new(Vec::new()),
        }))
    }

    /// True when the keys are sorted strictly ascending.
    pub fn strictly_ascending(&self) -> bool {
        self.0.sorted
    }

    /// The keys.
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.0.keys
    }

    /// The id set of these keys in the structure `owner` (from
    /// [`new_owner`]), computed by `build` on first use and kept for the
    /// next query (a few structures per key set; the oldest is dropped).
    pub fn ids_for(&self, owner: u64, build: impl FnOnce(&[Vec<u8>]) -> IdSet) -> Arc<IdSet> {
        self.derived(owner, build)
    }

    /// The view `T` of these keys that the structure `owner` derives with
    /// `build`, computed on first use and kept like [`KeySet::ids_for`]'s
    /// sets (an owner has one view; a different type replaces it).
    pub fn derived<T: Any + Send + Sync>(
        &self,
        owner: u64,
        build: impl FnOnce(&[Vec<u8>]) -> T,
    ) -> Arc<T> {
        // A poisoned memo only loses cached views: recompute.
        let mut memo = self.0.memo.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = memo.iter().position(|(o, _)| *o == owner) {
            match Arc::clone(&memo[i].1).downcast::<T>() {
                Ok(view) => return view,
                Err(_) => {
                    memo.remove(i);
                }
            }
        }
        let view = Arc::new(build(&self.0.keys));
        if memo.len() >= MEMO_SLOTS {
            memo.remove(0);
        }
        memo.push((owner, Arc::clone(&view) as View));
        view
    }
}

impl Deref for KeySet {
    type Target = [Vec<u8>];
    fn deref(&self) -> &[Vec<u8>] {
        &self.0.keys
    }
}

impl From<Vec<Vec<u8>>> for KeySet {
    fn from(keys: Vec<Vec<u8>>) -> KeySet {
        KeySet::new(keys)
    }
}

impl FromIterator<Vec<u8>> for KeySet {
    fn from_iter<I: IntoIterator<Item = Vec<u8>>>(keys: I) -> KeySet {
        KeySet::new(keys.into_iter().collect())
    }
}

impl PartialEq for KeySet {
    fn eq(&self, other: &KeySet) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.keys == other.0.keys
    }
}

impl Eq for KeySet {}

impl PartialEq<Vec<Vec<u8>>> for KeySet {
    fn eq(&self, other: &Vec<Vec<u8>>) -> bool {
        &self.0.keys == other
    }
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.keys.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_set_is_computed_once_per_owner() {
        let set = KeySet::new(vec![b"a".to_vec(), b"c".to_vec()]);
        assert!(set.strictly_ascending());
        assert!(!KeySet::new(vec![b"c".to_vec(), b"a".to_vec()]).strictly_ascending());
        let (a, b) = (new_owner(), new_owner());
        assert_ne!(a, b);
        let mut calls = 0;
        let mut get = |owner, n| {
            set.ids_for(owner, |keys| {
                calls += 1;
                IdSet::new((0..keys.len() as u32).collect(), n)
            })
        };
        let first = get(a, 10);
        let again = get(a, 99);
        assert!(Arc::ptr_eq(&first, &again));
        assert!(first.contains(1) && !first.contains(2) && !first.contains(640));
        get(b, 10);
        assert_eq!(calls, 2);
        // A clone shares the memo; equality is by keys.
        let clone = set.clone();
        assert!(Arc::ptr_eq(&clone.ids_for(a, |_| unreachable!()), &first));
        assert_eq!(clone, KeySet::new(vec![b"a".to_vec(), b"c".to_vec()]));
        // Bounded: the oldest owner is dropped.
        for _ in 0..MEMO_SLOTS {
            set.ids_for(new_owner(), |_| IdSet::default());
        }
        let mut rebuilt = false;
        set.ids_for(a, |_| {
            rebuilt = true;
            IdSet::default()
        });
        assert!(rebuilt);
        // Any view type; the same owner asking for another type rebuilds.
        let c = new_owner();
        let view: Arc<Vec<u32>> = set.derived(c, |keys| vec![keys.len() as u32]);
        let again: Arc<Vec<u32>> = set.derived(c, |_| unreachable!());
        assert!(Arc::ptr_eq(&view, &again) && *view == [2]);
        let other: Arc<u8> = set.derived(c, |_| 5);
        assert_eq!(*other, 5);
    }
}
