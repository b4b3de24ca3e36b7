//! Serving accepted connections with bounds: a cap on open connections,
//! hyper's header-read timeout, an idle timeout, and a graceful shutdown
//! that gives open requests a deadline and then closes what is left.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Connection bounds (from [`crate::Config`]).
#[derive(Debug, Clone)]
pub(crate) struct ConnLimits {
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) shutdown_grace: Duration,
    /// One permit per open connection.
    pub(crate) slots: Arc<Semaphore>,
}

/// A socket that records when it last moved a byte.
struct Timed {
    inner: TcpStream,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last read or write.
    last: Arc<AtomicU64>,
}

impl Timed {
    fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl AsyncRead for Timed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Timed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves the connections `listener` accepts until `stop` resolves, then
/// lets open requests finish for [`ConnLimits::shutdown_grace`] and closes
/// every connection still open.
pub(crate) async fn serve<L>(
    mut listener: L,
    app: Router,
    lim: ConnLimits,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    L: axum::serve::Listener<Io = TcpStream, Addr = SocketAddr>,
{
    let (closing, close_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            (io, peer) = listener.accept() => {
                let Ok(permit) = lim.slots.clone().try_acquire_owned() else {
                    tracing::debug!(%peer, "connection cap reached; closing");
                    drop(io);
                    continue;
                };
                let (app, lim, close) = (app.clone(), lim.clone(), close_rx.clone());
                conns.spawn(async move {
                    serve_one(io, app, &lim, close).await;
                    drop(permit);
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    let _ = closing.send(true);
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(lim.shutdown_grace, drain)
        .await
        .is_err()
    {
        tracing::info!(
            open = conns.len(),
            "shutdown grace over; closing connections"
        );
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
    Ok(())
}

/// One HTTP/1.1 connection: closed gracefully when idle for
/// [`ConnLimits::idle_timeout`] or when the server stops.
async fn serve_one(io: TcpStream, app: Router, lim: &ConnLimits, mut close: watch::Receiver<bool>) {
    let last = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let io = TokioIo::new(Timed {
        inner: io,
        epoch,
        last: last.clone(),
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(lim.header_timeout)
        .serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(conn);
    let mut shutting = false;
    let check = (lim.idle_timeout / 4).max(Duration::from_millis(10));
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%e, "connection ended with an error");
                }
                return;
            }
            _ = close.changed(), if !shutting => {
                conn.as_mut().graceful_shutdown();
                shutting = true;
            }
            _ = tokio::time::sleep(check), if !shutting => {
                let idle = epoch.elapsed().as_millis() as u64 - last.load(Ordering::Relaxed);
                if idle >= lim.idle_timeout.as_millis() as u64 {
                    conn.as_mut().graceful_shutdown();
                    shutting = true;
                }
            }
        }
    }
}
