//! The listening side: a Unix socket in the store directory, one thread
//! per connection (at most [`MAX_CONNECTIONS`]), requests on a connection
//! answered in order.

use super::handler::{answer, Context, Held};
use super::proto::{self, Frame};
use super::socket_path;
use crate::error::{Error, Result};
use crate::store::{BlockStore, Pins};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once; more are closed on arrival.
pub const MAX_CONNECTIONS: usize = 16;

/// A connection idle this long between requests is closed.
const IDLE: Duration = Duration::from_secs(300);

/// A reply that cannot be written within this long ends the connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// A running owner socket; dropping it stops the listener and removes the
/// socket file.
#[derive(Debug)]
pub struct OwnerSocket {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OwnerSocket {
    /// Listens on `<dir>/owner.sock` for requests against `store` (the
    /// store this process holds the write lock of). `pins` are kept by
    /// collections the socket runs; `kind` is what `hello` reports. A
    /// socket file left by a dead owner is replaced; a live one is
    /// [`Error::Owner`].
    pub fn start(
        dir: &Path,
        store: Arc<dyn BlockStore>,
        pins: Pins,
        kind: &str,
    ) -> Result<OwnerSocket> {
        let path = socket_path(dir);
        let owner_err = |reason: String| Error::Owner {
            socket: path.clone(),
            reason,
        };
        if path.exists() {
            if UnixStream::connect(&path).is_ok() {
                return Err(owner_err("another owner is listening there".into()));
            }
            std::fs::remove_file(&path)?;
        }
        let listener = UnixListener::bind(&path)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
        let ctx = Arc::new(Context {
            store,
            pins,
            kind: kind.to_string(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("prox-owner".into())
            .spawn(move || accept_loop(listener, ctx, stop2))?;
        Ok(OwnerSocket {
            path,
            stop,
            thread: Some(thread),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OwnerSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so it sees the flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(listener: UnixListener, ctx: Arc<Context>, stop: Arc<AtomicBool>) {
    let live = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(conn) = conn else { continue };
        if live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("owner socket: too many connections, one refused");
            continue;
        }
        let (ctx, live2, stop) = (ctx.clone(), live.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("prox-owner-conn".into())
            .spawn(move || {
                if let Err(e) = serve_conn(&ctx, conn, &stop) {
                    tracing::debug!(%e, "owner connection ended");
                }
                live2.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn serve_conn(ctx: &Context, mut conn: UnixStream, stop: &AtomicBool) -> std::io::Result<()> {
    conn.set_read_timeout(Some(IDLE))?;
    conn.set_write_timeout(Some(WRITE_TIMEOUT))?;
    // Leases live as long as the connection: a client that dies releases
    // every name it held.
    let mut held = Held::new();
    while !stop.load(Ordering::SeqCst) {
        let body = match proto::read_frame(&mut conn) {
            Ok(Frame::Body(b)) => b,
            Ok(Frame::Closed) => return Ok(()),
            Err(e) => {
                // An oversized or cut frame: say why (id 0), then close,
                // since the stream is no longer at a frame boundary.
                let err = Error::InvalidObject {
                    object: "owner request",
                    reason: e.to_string(),
                };
                let mut out = proto::header(0);
                out.push(1);
                crate::codec::put_blob(&mut out, err.to_string().as_bytes());
                let _ = proto::write_frame(&mut conn, &out);
                return Err(e);
            }
        };
        let reply = answer(ctx, &mut held, &body);
        proto::write_frame(&mut conn, &reply)?;
    }
    Ok(())
}
