//! A TCP relay in front of the test server, standing in for a failing
//! service: it can answer the first N connections with `503 SlowDown`
//! (throttling) and can be killed and restarted (the server dying
//! mid-upload, as the client sees it, without losing the in-memory
//! server's state).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Relay {
    port: u16,
    inner: Arc<Inner>,
}

struct Inner {
    upstream: SocketAddr,
    /// Connections still to be answered with 503.
    throttle: AtomicUsize,
    throttled: AtomicUsize,
    up: AtomicBool,
    /// Bytes relayed from client to server.
    sent: AtomicU64,
    conns: Mutex<Vec<TcpStream>>,
}

const SLOW_DOWN: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";

impl Relay {
    /// A relay to `endpoint` (`http://127.0.0.1:PORT`) that throttles the
    /// first `throttle` connections.
    pub fn start(endpoint: &str, throttle: usize) -> Relay {
        let upstream: SocketAddr = endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("PROX_S3_ENDPOINT is http://IP:PORT");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let inner = Arc::new(Inner {
            upstream,
            throttle: AtomicUsize::new(throttle),
            throttled: AtomicUsize::new(0),
            up: AtomicBool::new(true),
            sent: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
        });
        spawn_accept(listener, inner.clone());
        Relay { port, inner }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Connections answered with 503 so far.
    pub fn throttled(&self) -> usize {
        self.inner.throttled.load(Ordering::SeqCst)
    }

    /// Bytes relayed from the client to the server so far.
    pub fn sent(&self) -> u64 {
        self.inner.sent.load(Ordering::SeqCst)
    }

    /// Closes the port and resets every open connection.
    pub fn kill(&self) {
        self.inner.up.store(false, Ordering::SeqCst);
        // Wake the accept loop so it drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for c in self.inner.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        // The accept loop closes the port within a few milliseconds.
        std::thread::sleep(Duration::from_millis(50));
    }

    /// Opens the same port again (bounded: 5 s of attempts).
    pub fn restart(&self) {
        for _ in 0..100 {
            if let Ok(l) = TcpListener::bind(("127.0.0.1", self.port)) {
                self.inner.up.store(true, Ordering::SeqCst);
                spawn_accept(l, self.inner.clone());
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("relay port {} did not come back", self.port);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn_accept(listener: TcpListener, inner: Arc<Inner>) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if !inner.up.load(Ordering::SeqCst) {
                return; // drops the listener: the port refuses connections
            }
            let Ok(conn) = conn else { continue };
            let inner = inner.clone();
            std::thread::spawn(move || handle(conn, &inner));
        }
    });
}

fn handle(client: TcpStream, inner: &Inner) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
    let throttle = inner
        .throttle
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if throttle {
        inner.throttled.fetch_add(1, Ordering::SeqCst);
        refuse(client);
        return;
    }
    let Ok(server) = TcpStream::connect(inner.upstream) else {
        return;
    };
    {
        let mut conns = inner.conns.lock().unwrap();
        conns.push(client.try_clone().unwrap());
        conns.push(server.try_clone().unwrap());
    }
    let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut buf = [0u8; 64 * 1024];
            while let Ok(n) = c_read.read(&mut buf) {
                if n == 0 || s_write.write_all(&buf[..n]).is_err() {
                    break;
                }
                inner.sent.fetch_add(n as u64, Ordering::SeqCst);
            }
            let _ = s_write.shutdown(Shutdown::Write);
        });
        let (mut s_read, mut c_write) = (&server, &client);
        let mut buf = [0u8; 64 * 1024];
        while let Ok(n) = s_read.read(&mut buf) {
            if n == 0 || c_write.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = c_write.shutdown(Shutdown::Both);
    });
}

/// Reads one request (head and `Content-Length` body) and answers it with
/// `503 SlowDown`, closing the connection.
fn refuse(mut client: TcpStream) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let len: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let _ = std::io::copy(&mut (&mut client).take(len), &mut std::io::sink());
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SLOW_DOWN}",
        SLOW_DOWN.len()
    );
    let _ = client.write_all(response.as_bytes());
    let _ = client.shutdown(Shutdown::Both);
}
