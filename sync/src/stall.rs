//! A write deadline for block sessions: a writer that fails with
//! `TimedOut` when the peer accepts no byte for a whole idle period, so a
//! peer that never reads cannot hold a session (and its slot) forever.

use futures::AsyncWrite;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Wraps a writer; each write, flush or close must make progress within
/// `idle`.
pub(crate) struct StallGuard<W> {
    inner: W,
    idle: Duration,
    /// Armed while an operation is pending; disarmed on progress.
    timer: Pin<Box<Sleep>>,
    armed: bool,
}

impl<W> StallGuard<W> {
    pub(crate) fn new(inner: W, idle: Duration) -> StallGuard<W> {
        StallGuard {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            armed: false,
        }
    }

    /// Called when the inner writer is pending: fails once `idle` has
    /// passed since the operation started waiting.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if !self.armed {
            self.timer.as_mut().reset(Instant::now() + self.idle);
            self.armed = true;
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "peer accepted no data within the idle timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(&mut self, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.armed = false;
        r
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for StallGuard<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx),
            r => self.progressed(r),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending(cx),
            r => self.progressed(r),
        }
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_close(cx) {
            Poll::Pending => self.pending(cx),
            r => self.progressed(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StallGuard;
    use futures::AsyncWriteExt;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::{Duration, Instant};

    /// A peer that never reads: every write stays pending.
    struct NeverReads;

    impl futures::AsyncWrite for NeverReads {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Pending
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Pending
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_peer_that_never_reads_times_the_write_out() {
        let mut w = StallGuard::new(NeverReads, Duration::from_millis(50));
        let t = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(10), w.write_all(b"block")).await;
        let err = r.expect("bounded").expect_err("the write must fail");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
