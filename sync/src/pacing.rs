//! How a pull paces its block requests: the size of each `WANT` batch and
//! the pauses after `BUSY` answers.

use std::time::Duration;

/// CIDs per `WANT` given the last answered batch (`blocks` blocks of
/// `bytes` bytes): as many mean-sized blocks as fit `budget`, within
/// `1..=max`; `max` before any answer.
pub(crate) fn batch_len(max: usize, budget: u32, blocks: u64, bytes: u64) -> usize {
    if blocks == 0 {
        return max.max(1);
    }
    let mean = (bytes / blocks).max(1);
    ((u64::from(budget) / mean) as usize).clamp(1, max.max(1))
}

/// `BUSY` answers in a row a pull accepts before it fails with
/// `Error::Busy` (the pauses add up to about 6 s).
pub(crate) const MAX_BUSY: u32 = 10;

/// Pause after the `n`th `BUSY` in a row (from 1): 20 ms doubling, at most
/// 1.28 s.
pub(crate) fn busy_pause(n: u32) -> Duration {
    Duration::from_millis(20u64 << n.clamp(1, 7).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_pauses_grow_and_stay_bounded() {
        assert_eq!(busy_pause(1), Duration::from_millis(20));
        assert_eq!(busy_pause(2), Duration::from_millis(40));
        assert_eq!(busy_pause(7), Duration::from_millis(1280));
        assert_eq!(busy_pause(50), Duration::from_millis(1280));
        let total: Duration = (1..=MAX_BUSY).map(busy_pause).sum();
        assert!(total > Duration::from_secs(5) && total < Duration::from_secs(8));
    }
}
