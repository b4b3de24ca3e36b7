//! Fixed-k selection of scored candidates (lower score is better).
//!
//! Candidates are ordered by `(score, id)` with `f32::total_cmp` on the score
//! after turning `-0.0` into `+0.0`, so equal scores are broken by the smaller
//! id and the result never depends on push order. NaN sorts after `+inf`
//! (worst). Internally a binary max-heap of at most `k` entries: `push` is
//! `O(log k)`, and `O(1)` when the candidate is rejected.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One kept candidate; ordered by `(score, id)`, worst at the heap top.
#[derive(Debug, Clone, Copy)]
struct Entry<I> {
    score: f32,
    id: I,
}

impl<I: Ord> Entry<I> {
    fn key_cmp(&self, score: f32, id: &I) -> Ordering {
        self.score.total_cmp(&score).then_with(|| self.id.cmp(id))
    }
}

impl<I: Ord> PartialEq for Entry<I> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<I: Ord> Eq for Entry<I> {}

impl<I: Ord> PartialOrd for Entry<I> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<I: Ord> Ord for Entry<I> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key_cmp(other.score, &other.id)
    }
}

/// The `k` best `(score, id)` pairs seen so far.
#[derive(Debug, Clone)]
pub struct TopK<I = u32> {
    k: usize,
    heap: BinaryHeap<Entry<I>>,
}

impl<I: Ord + Copy> TopK<I> {
    /// An empty selector keeping at most `k` candidates (`k = 0` keeps none).
    pub fn new(k: usize) -> Self {
        TopK {
            k,
            // Cap the eager allocation; the heap grows on demand beyond it.
            heap: BinaryHeap::with_capacity(k.min(4096)),
        }
    }

    /// The capacity `k`.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of candidates currently kept (`≤ k`).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Whether `k` candidates are kept.
    pub fn is_full(&self) -> bool {
        self.heap.len() >= self.k
    }

    /// Offers a candidate; returns whether it was kept (possibly evicting the
    /// current worst).
    pub fn push(&mut self, score: f32, id: I) -> bool {
        // `x + 0.0` maps -0.0 to +0.0 and leaves every other value unchanged.
        let score = score + 0.0;
        if self.heap.len() < self.k {
            self.heap.push(Entry { score, id });
            return true;
        }
        match self.heap.peek_mut() {
            Some(mut worst) if worst.key_cmp(score, &id) == Ordering::Greater => {
                *worst = Entry { score, id };
                true
            }
            _ => false,
        }
    }

    /// The worst kept score once full, `+inf` while not full (`-inf` if
    /// `k = 0`). A candidate scoring strictly above it can never be kept, so
    /// scans may skip it; one scoring equal may still win on its id.
    pub fn threshold(&self) -> f32 {
        if self.k == 0 {
            f32::NEG_INFINITY
        } else if self.heap.len() < self.k {
            f32::INFINITY
        } else {
            self.heap.peek().map_or(f32::INFINITY, |e| e.score)
        }
    }

    /// Removes every candidate, keeping `k`.
    pub fn clear(&mut self) {
        self.heap.clear();
    }

    /// The kept candidates, best first: ascending score, then ascending id.
    pub fn into_sorted_vec(self) -> Vec<(f32, I)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|e| (e.score, e.id))
            .collect()
    }
}

impl<I: Ord + Copy> Extend<(f32, I)> for TopK<I> {
    fn extend<T: IntoIterator<Item = (f32, I)>>(&mut self, iter: T) {
        for (s, id) in iter {
            self.push(s, id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_best_with_id_tiebreak() {
        let mut t = TopK::new(3);
        for (s, id) in [
            (5.0, 1u32),
            (1.0, 9),
            (1.0, 3),
            (7.0, 0),
            (1.0, 4),
            (0.5, 8),
        ] {
            t.push(s, id);
        }
        assert_eq!(t.threshold(), 1.0);
        assert_eq!(t.into_sorted_vec(), vec![(0.5, 8), (1.0, 3), (1.0, 4)]);
    }

    #[test]
    fn negative_zero_ties_with_zero() {
        let mut t = TopK::new(1);
        t.push(0.0, 2u32);
        assert!(t.push(-0.0, 1));
        assert_eq!(t.into_sorted_vec(), vec![(0.0, 1)]);
    }

    #[test]
    fn k_zero_and_thresholds() {
        let mut t: TopK<u64> = TopK::new(0);
        assert!(!t.push(1.0, 1));
        assert_eq!(t.threshold(), f32::NEG_INFINITY);
        let mut t: TopK<u64> = TopK::new(2);
        assert_eq!(t.threshold(), f32::INFINITY);
        t.push(f32::NAN, 1);
        t.push(3.0, 2);
        assert!(t.threshold().is_nan());
        t.push(2.0, 3);
        assert_eq!(t.into_sorted_vec(), vec![(2.0, 3), (3.0, 2)]);
    }
}
