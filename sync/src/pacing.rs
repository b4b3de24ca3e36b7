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

/// Batches each source of a multi-source pull may have in flight, given
/// their measured throughputs (`rates`, bytes/s; 0: not measured yet): the
/// fastest gets `max`, every other a share of `max` proportional to its
/// rate, at least 1. A source not measured yet gets `max`. Sizing by rate
/// keeps a slow source from holding more of the closure than it can
/// deliver while the fast ones wait for its answers.
pub(crate) fn source_windows(max: usize, rates: &[f64]) -> Vec<usize> {
    let max = max.max(1);
    let fastest = rates.iter().copied().fold(0.0, f64::max);
    rates
        .iter()
        .map(|&r| {
            if r <= 0.0 || fastest <= 0.0 {
                max
            } else {
                ((max as f64 * r / fastest).ceil() as usize).clamp(1, max)
            }
        })
        .collect()
}

/// Weight of a new sample in a source's throughput estimate (exponential
/// moving average).
pub(crate) const RATE_WEIGHT: f64 = 0.3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_throughput() {
        // Not measured: the full window.
        assert_eq!(source_windows(4, &[0.0, 0.0]), vec![4, 4]);
        assert_eq!(source_windows(4, &[0.0, 5.0]), vec![4, 4]);
        // Equal sources share equally.
        assert_eq!(source_windows(4, &[10.0, 10.0]), vec![4, 4]);
        // A source at half the rate gets half the window; a crawling one
        // keeps one batch.
        assert_eq!(source_windows(4, &[10.0, 5.0]), vec![4, 2]);
        assert_eq!(source_windows(4, &[1000.0, 1.0]), vec![4, 1]);
        assert_eq!(source_windows(0, &[1.0]), vec![1]);
    }

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
