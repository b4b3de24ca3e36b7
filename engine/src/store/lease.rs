//! Write leases: one writer of a named root at a time, in arrival order.
//!
//! Root updates are compare-and-swaps, so two writers of one map never
//! corrupt it; but a slow writer (a CLI update reading through the owner
//! socket) that keeps losing the swap to a fast one (the server's HTTP
//! writes) re-applies its batch forever. A store that has one owner
//! process hands out a lease per root name for the span of
//! apply-and-publish: writers queue, first come first served, and each one
//! finds the root where it read it. Stores without an owner (S3, shared by
//! independent processes) hand out none and rely on the swap alone.

use crate::error::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A held lease on a root name; released when dropped.
pub struct Lease {
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Lease {
    /// A lease whose release runs `release` (a store's own bookkeeping, or
    /// a message to the owner that holds the real one).
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> Lease {
        Lease {
            release: Some(Box::new(release)),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(f) = self.release.take() {
            f();
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lease")
    }
}

#[derive(Default)]
struct Name {
    held: bool,
    queue: VecDeque<u64>,
}

#[derive(Default)]
struct Table {
    names: HashMap<String, Name>,
    next_ticket: u64,
}

/// The leases of one store process: a FIFO queue per root name.
#[derive(Default)]
pub struct Leases {
    table: Mutex<Table>,
    changed: Condvar,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases").finish_non_exhaustive()
    }
}

impl Leases {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits, behind every earlier waiter for `name`, until `name` is free,
    /// and takes it. [`Error::Busy`] after `wait` without getting it (the
    /// waiter's place is given up).
    pub fn acquire(self: &Arc<Self>, name: &str, wait: Duration) -> Result<Lease> {
        let deadline = Instant::now() + wait;
        let mut t = self.lock();
        let ticket = t.next_ticket;
        t.next_ticket += 1;
        t.names
            .entry(name.to_string())
            .or_default()
            .queue
            .push_back(ticket);
        loop {
            let n = t.names.get_mut(name).expect("a queued name has an entry");
            if !n.held && n.queue.front() == Some(&ticket) {
                n.queue.pop_front();
                n.held = true;
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                n.queue.retain(|&q| q != ticket);
                if !n.held && n.queue.is_empty() {
                    t.names.remove(name);
                }
                drop(t);
                // The next in line may be the one after this ticket.
                self.changed.notify_all();
                return Err(Error::Busy {
                    name: name.to_string(),
                    waited: wait,
                });
            }
            t = self
                .changed
                .wait_timeout(t, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(t);
        let (leases, name) = (Arc::clone(self), name.to_string());
        Ok(Lease::new(move || leases.release(&name)))
    }

    fn release(&self, name: &str) {
        let mut t = self.lock();
        if let Some(n) = t.names.get_mut(name) {
            n.held = false;
            if n.queue.is_empty() {
                t.names.remove(name);
            }
        }
        drop(t);
        self.changed.notify_all();
    }

    /// Names leased or waited for now (for tests and diagnostics).
    pub fn busy(&self) -> usize {
        self.lock().names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_of_one_name_take_turns_in_arrival_order() {
        let leases = Arc::new(Leases::default());
        let first = leases.acquire("m", Duration::from_secs(5)).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let (mine, order) = (Arc::clone(&leases), Arc::clone(&order));
                let h = std::thread::spawn(move || {
                    let _l = mine.acquire("m", Duration::from_secs(30)).unwrap();
                    order.lock().unwrap().push(i);
                });
                // Queue them one after another.
                let until = Instant::now() + Duration::from_secs(10);
                while leases.lock().names["m"].queue.len() < i + 1 && Instant::now() < until {
                    std::thread::yield_now();
                }
                h
            })
            .collect();
        // Another name is independent of the queue on "m".
        drop(leases.acquire("other", Duration::ZERO).unwrap());
        drop(first);
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(leases.busy(), 0);
    }

    #[test]
    fn a_waiter_that_times_out_gives_up_its_place() {
        let leases = Arc::new(Leases::default());
        let held = leases.acquire("m", Duration::ZERO).unwrap();
        let e = leases
            .acquire("m", Duration::from_millis(20))
            .expect_err("the name is held");
        assert!(
            matches!(e, Error::Busy { ref name, .. } if name == "m"),
            "{e}"
        );
        drop(held);
        // The timed-out ticket does not block the next writer.
        drop(leases.acquire("m", Duration::ZERO).unwrap());
        assert_eq!(leases.busy(), 0);
    }
}
