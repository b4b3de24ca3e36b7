//! [`Watch`]: a search's deadline, read from the clock at bounded intervals
//! of work so the check costs far less than the search it guards.
//!
//! Every long search loop ticks the watch with the work it is about to do,
//! counted in vector components (or code bytes) a kernel reads; a record
//! an exact search rescores counts `d + k` (its canonical score and at
//! worst an insertion into the `k`-long top list). The clock
//! is read on the first tick and then once every [`STRIDE`] units: at
//! roughly 0.1 to 1 ns per unit that is a few tens to a few hundred
//! microseconds of search per `Instant::now()` (about 20 ns), so the check
//! costs well under 1% and a search stops within about a millisecond of
//! its deadline. Without a deadline a tick is one branch. A watch never
//! changes what a search computes; it only stops it with
//! [`Error::DeadlineExceeded`].

use crate::error::{Error, Result};
use std::time::Instant;

/// Work units (components or code bytes read) between two clock reads.
pub(crate) const STRIDE: usize = 1 << 20;

/// One search's deadline and the work left before the next clock read.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Watch {
    at: Option<Instant>,
    left: usize,
}

impl Watch {
    /// A watch for `at` (`None`: no deadline, every tick passes). The first
    /// tick reads the clock.
    pub(crate) fn new(at: Option<Instant>) -> Watch {
        Watch { at, left: 0 }
    }

    /// Accounts `work` units about to be done; reads the clock once
    /// [`STRIDE`] units have accumulated since the last read and fails with
    /// [`Error::DeadlineExceeded`] if the deadline has passed.
    #[inline]
    pub(crate) fn tick(&mut self, work: usize) -> Result<()> {
        let Some(at) = self.at else {
            return Ok(());
        };
        if work < self.left {
            self.left -= work;
            return Ok(());
        }
        self.left = STRIDE;
        if Instant::now() >= at {
            return Err(Error::DeadlineExceeded);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn no_deadline_always_passes() {
        let mut w = Watch::new(None);
        for _ in 0..10 {
            assert!(w.tick(STRIDE * 4).is_ok());
        }
    }

    #[test]
    fn a_passed_deadline_stops_the_first_tick() {
        let mut w = Watch::new(Some(Instant::now()));
        assert!(matches!(w.tick(0), Err(Error::DeadlineExceeded)));
    }

    #[test]
    fn the_clock_is_read_once_per_stride() {
        // A deadline that has passed, but the clock was read at a time it
        // had not: ticks within the stride pass, the next read stops.
        let mut w = Watch::new(Some(Instant::now() + Duration::from_secs(3600)));
        assert!(w.tick(1).is_ok());
        w.at = Some(Instant::now());
        assert!(w.tick(STRIDE - 1).is_ok());
        assert!(matches!(w.tick(1), Err(Error::DeadlineExceeded)));
    }
}
