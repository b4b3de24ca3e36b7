//! Idle deadlines for block sessions: a writer that fails with `TimedOut`
//! when the peer accepts no byte for a whole idle period, so a peer that
//! never reads cannot hold a session (and its slot) forever; and a reader
//! that fails the same way when no byte arrives for that long, so a slow
//! link still delivers a block larger than it carries in one idle period.

use futures::{AsyncRead, AsyncWrite};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Wraps a writer (or reader); each write, flush, close or read must make
/// progress within `idle`.
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
                "no data moved within the idle timeout",
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

impl<R: AsyncRead + Unpin> AsyncRead for StallGuard<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
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

    /// A peer that sends one byte every `gap`, `left` bytes in all.
    struct Trickle {
        gap: tokio::time::Interval,
        left: usize,
    }

    impl futures::AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<std::io::Result<usize>> {
            if self.left == 0 {
                return Poll::Ready(Ok(0));
            }
            match self.gap.poll_tick(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(_) => {
                    self.left -= 1;
                    buf[0] = 7;
                    Poll::Ready(Ok(1))
                }
            }
        }
    }

    #[tokio::test]
    async fn a_slow_reader_times_out_only_when_no_byte_arrives() {
        use futures::AsyncReadExt;
        let tick = |ms| {
            let mut i = tokio::time::interval(Duration::from_millis(ms));
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        };
        // 20 bytes, one per 10 ms: the whole read takes longer than the
        // 60 ms idle period, but bytes keep arriving.
        let mut r = StallGuard::new(
            Trickle {
                gap: tick(10),
                left: 20,
            },
            Duration::from_millis(60),
        );
        let mut got = [0u8; 20];
        let read = tokio::time::timeout(Duration::from_secs(10), r.read_exact(&mut got)).await;
        read.expect("bounded")
            .expect("a trickle that keeps moving is read");
        assert_eq!(got, [7; 20]);
        // A gap longer than the idle period times the read out.
        let mut r = StallGuard::new(
            Trickle {
                gap: tick(300),
                left: 5,
            },
            Duration::from_millis(60),
        );
        let mut buf = [0u8; 5];
        let err = tokio::time::timeout(Duration::from_secs(10), r.read_exact(&mut buf))
            .await
            .expect("bounded")
            .expect_err("a stalled peer fails the read");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
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
