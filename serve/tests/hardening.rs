//! Hostile clients against the HTTP server, over raw TCP on 127.0.0.1:
//! slowloris headers, slow bodies, idle keep-alive connections, connection
//! floods, foreign `Host` names, cross-origin content types, and a shutdown
//! that a slow client cannot hold up. Every wait is bounded.

use prox_serve::{Config, MapRegistry, Server, ServerHandle};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

struct Served {
    rt: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
    addr: SocketAddr,
}

impl Served {
    fn new(cfg: Config) -> Served {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let handle = rt
            .block_on(Server::start(
                Config {
                    search_threads: 1,
                    ..cfg
                },
                MapRegistry::new(),
            ))
            .unwrap();
        let addr = handle.addr();
        Served {
            rt,
            handle: Some(handle),
            addr,
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Sends a whole request on a new connection; returns the status.
    fn status(&self, req: &str) -> u16 {
        let mut s = self.connect();
        s.write_all(req.as_bytes()).unwrap();
        status_of(&read_some(&mut s))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = self.rt.block_on(h.shutdown());
        }
    }
}

/// Reads until the peer closes or 10 s pass; returns what arrived.
fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// Reads one chunk (a response head at least).
fn read_some(s: &mut TcpStream) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    let n = s.read(&mut b).unwrap_or(0);
    b.truncate(n);
    b
}

fn status_of(resp: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(resp);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

fn get(path: &str, host: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")
}

/// True if the server closed `s` within `limit` (EOF or reset).
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let t = Instant::now();
    let mut b = [0u8; 1024];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
        if t.elapsed() > limit {
            return false;
        }
    }
}

#[test]
fn partial_headers_are_cut_off_at_the_header_timeout() {
    let srv = Served::new(Config {
        header_timeout: Duration::from_millis(300),
        ..Config::default()
    });
    let mut s = srv.connect();
    // A slowloris: one header line, never the blank line.
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        .unwrap();
    let t = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    let srv = Served::new(Config {
        idle_timeout: Duration::from_millis(300),
        ..Config::default()
    });
    let mut s = srv.connect();
    s.write_all(get("/healthz", "localhost").as_bytes())
        .unwrap();
    assert_eq!(status_of(&read_some(&mut s)), 200);
    assert!(
        closed_within(&mut s, Duration::from_secs(5)),
        "an idle connection must not stay open"
    );
}

#[test]
fn slow_bodies_hold_no_in_flight_slot_and_time_out() {
    let srv = Served::new(Config {
        max_in_flight: 2,
        body_timeout: Duration::from_millis(500),
        ..Config::default()
    });
    let slow: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = srv.connect();
            s.write_all(
                b"POST /v1/maps/m/search HTTP/1.1\r\nHost: localhost\r\n\
                  Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
            )
            .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(srv.status(&get("/healthz", "localhost")), 200);
    assert_eq!(srv.status(&get("/v1/maps", "localhost")), 200);
    for mut s in slow {
        let resp = read_all(&mut s);
        assert_eq!(status_of(&resp), 408, "{}", String::from_utf8_lossy(&resp));
    }
}

#[test]
fn connections_beyond_the_cap_are_closed() {
    let srv = Served::new(Config {
        max_connections: 4,
        ..Config::default()
    });
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..4 {
        let mut s = srv.connect();
        s.write_all(get("/healthz", "localhost").as_bytes())
            .unwrap();
        assert_eq!(status_of(&read_some(&mut s)), 200);
        held.push(s);
    }
    let mut extra = srv.connect();
    let _ = extra.write_all(get("/healthz", "localhost").as_bytes());
    assert!(closed_within(&mut extra, Duration::from_secs(5)));
    drop(held.pop());
    let t = Instant::now();
    loop {
        let mut s = srv.connect();
        let _ = s.write_all(get("/healthz", "localhost").as_bytes());
        let r = read_some(&mut s);
        if !r.is_empty() {
            assert_eq!(status_of(&r), 200);
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "slot never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn foreign_host_names_are_refused() {
    let srv = Served::new(Config {
        allowed_hosts: vec!["prox.internal".into()],
        ..Config::default()
    });
    let port = srv.addr.port();
    assert_eq!(srv.status(&get("/v1/maps", "evil.example")), 421);
    assert_eq!(
        srv.status(&get("/v1/maps", &format!("attacker.test:{port}"))),
        421
    );
    assert_eq!(
        srv.status(&get("/v1/maps", &format!("localhost:{port}"))),
        200
    );
    assert_eq!(
        srv.status(&get("/v1/maps", &format!("127.0.0.1:{port}"))),
        200
    );
    assert_eq!(srv.status(&get("/v1/maps", "prox.internal")), 200);
}

#[test]
fn posts_need_a_json_content_type() {
    let srv = Served::new(Config::default());
    let post = |ct: &str| {
        let body = r#"{"vector":[0.0],"k":1}"#;
        let ct = if ct.is_empty() {
            String::new()
        } else {
            format!("Content-Type: {ct}\r\n")
        };
        format!(
            "POST /v1/maps/m/search HTTP/1.1\r\nHost: localhost\r\n{ct}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    assert_eq!(srv.status(&post("text/plain")), 415);
    assert_eq!(srv.status(&post("")), 415);
    assert_eq!(srv.status(&post("application/x-www-form-urlencoded")), 415);
    // Past the content-type check: the map does not exist.
    assert_eq!(srv.status(&post("application/json; charset=utf-8")), 404);
}

#[test]
fn shutdown_does_not_wait_for_a_slow_client_past_its_grace() {
    let mut srv = Served::new(Config {
        body_timeout: Duration::from_secs(120),
        shutdown_grace: Duration::from_millis(300),
        ..Config::default()
    });
    let mut s = srv.connect();
    s.write_all(
        b"POST /v1/maps/m/search HTTP/1.1\r\nHost: localhost\r\n\
          Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    let h = srv.handle.take().unwrap();
    srv.rt.block_on(h.shutdown()).unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(closed_within(&mut s, Duration::from_secs(5)));
}
