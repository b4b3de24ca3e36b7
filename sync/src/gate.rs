//! The store gate: every blocking job of a node that touches its stores
//! runs under a permit of the node's [`Gate`], and shutdown closes the gate
//! before its final commit.
//!
//! Why: aborting a tokio task does not stop a `spawn_blocking` job it is
//! awaiting (nor the rayon work inside it). A pull aborted mid-batch would
//! otherwise go on verifying and writing that batch to the stores after
//! `Node::shutdown` returned, i.e. after the final commit of a daemon that
//! was told to stop.
//!
//! Invariant: once [`Gate::close`] has returned, no permit is held and none
//! can be taken again, so no job of this node reads or writes its stores.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// Shared by every part of one node (cheap to clone).
#[derive(Clone, Default)]
pub(crate) struct Gate {
    lock: Arc<RwLock<()>>,
    closed: Arc<AtomicBool>,
}

/// Held by a running store job; the gate cannot close while any exists.
pub(crate) struct Permit {
    _guard: OwnedRwLockReadGuard<()>,
}

/// Proof that the gate is closed and every permit has been returned.
pub(crate) struct Closed {
    _guard: OwnedRwLockWriteGuard<()>,
}

impl Gate {
    /// A permit, or [`Error::Shutdown`] once closing has begun.
    pub(crate) fn enter(&self) -> Result<Permit> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Shutdown);
        }
        // Fails only while `close` holds or waits for the write lock.
        self.lock
            .clone()
            .try_read_owned()
            .map(|g| Permit { _guard: g })
            .map_err(|_| Error::Shutdown)
    }

    /// Refuses new permits at once (when called, not when first polled),
    /// and returns a future that resolves once every permit handed out has
    /// been dropped (the jobs holding them ran to their end).
    pub(crate) fn close(&self) -> impl std::future::Future<Output = Closed> + Send + 'static {
        self.closed.store(true, Ordering::Release);
        let lock = self.lock.clone();
        async move {
            Closed {
                _guard: lock.write_owned().await,
            }
        }
    }

    /// Runs `f` on a blocking thread under a permit. The permit moves into
    /// the job, so it is returned when the job ends, even if the task that
    /// awaits it was aborted meanwhile.
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T> + Send + 'static,
    {
        let permit = self.enter()?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f()
        })
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?
    }
}

#[cfg(test)]
mod tests {
    use super::Gate;
    use crate::error::Error;
    use std::sync::mpsc;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn close_waits_for_a_job_whose_awaiting_task_was_aborted() {
        let gate = Gate::default();
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let g = gate.clone();
        let task = tokio::spawn(async move {
            g.run(move || {
                entered_tx.send(()).ok();
                release_rx.recv_timeout(Duration::from_secs(30)).ok();
                done_tx.send(()).ok();
                Ok(())
            })
            .await
        });
        tokio::task::spawn_blocking(move || entered_rx.recv_timeout(Duration::from_secs(30)))
            .await
            .unwrap()
            .expect("job started");
        task.abort();
        let _ = task.await;
        let mut closing = Box::pin(gate.close());
        // The job still holds its permit: closing cannot complete.
        assert!(futures::poll!(closing.as_mut()).is_pending());
        assert!(matches!(gate.enter(), Err(Error::Shutdown)));
        release_tx.send(()).unwrap();
        let _closed = closing.await;
        // The job ran to its end before `close` returned.
        assert!(done_rx.try_recv().is_ok());
        assert!(matches!(gate.run(|| Ok(())).await, Err(Error::Shutdown)));
    }
}
