//! A minimal blocking HTTP/1.1 client with keep-alive, for the crate's
//! tests and the `prox bench serve` load generator (not a general client:
//! plain `http://` only, one request at a time per connection).
//!
//! Bounds: response headers are capped at 64 KiB and bodies at 256 MiB;
//! every read and write has the client's timeout.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

const MAX_HEADERS: usize = 64 << 10;
const MAX_BODY: usize = 256 << 20;

/// A response: status, headers (names lower-cased) and the whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Headers in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body bytes (chunked bodies decoded).
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> io::Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// One keep-alive connection to a server (reconnects when needed).
#[derive(Debug)]
pub struct Client {
    addr: SocketAddr,
    token: Option<String>,
    timeout: Duration,
    conn: Option<BufReader<TcpStream>>,
}

/// Resolves `http://host:port[/...]` (or `host:port`) to a socket address.
pub fn resolve_url(url: &str) -> io::Result<SocketAddr> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    if url.starts_with("https://") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "https is not supported by this client",
        ));
    }
    let hostport = rest.split('/').next().unwrap_or(rest);
    hostport.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{url:?} resolves to no address"),
        )
    })
}

impl Clone for Client {
    /// The same settings without the connection: the clone opens its own
    /// on first use.
    fn clone(&self) -> Client {
        Client {
            addr: self.addr,
            token: self.token.clone(),
            timeout: self.timeout,
            conn: None,
        }
    }
}

fn bad(m: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.into())
}

impl Client {
    /// A client for `addr` with a 10 s timeout and no token.
    pub fn new(addr: SocketAddr) -> Client {
        Client {
            addr,
            token: None,
            timeout: Duration::from_secs(10),
            conn: None,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(token.into());
        self
    }

    /// Sets the per-read/write timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// `GET path`.
    pub fn get(&mut self, path: &str) -> io::Result<Response> {
        self.request("GET", path, None)
    }

    /// `POST path` with a JSON body.
    pub fn post(&mut self, path: &str, body: &[u8]) -> io::Result<Response> {
        self.request("POST", path, Some(body))
    }

    /// Encodes one whole request (head and body) for
    /// [`Client::send_prepared`], so a load generator pays for it once.
    pub fn prepare(&self, method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
        self.prepare_with(method, path, body, &[])
    }

    /// [`Client::prepare`] with extra headers (`Content-Type` among them
    /// replaces the default JSON one).
    pub fn prepare_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        extra: &[(&str, &str)],
    ) -> Vec<u8> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        // A name or value holding CR or LF would split the request: skipped.
        for (n, v) in extra {
            if !(n.contains(['\r', '\n']) || v.contains(['\r', '\n'])) {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
        }
        if let Some(b) = body {
            // JSON unless the caller named another content type.
            if !extra
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            {
                head.push_str("Content-Type: application/json\r\n");
            }
            head.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
        head.push_str("\r\n");
        let mut msg = head.into_bytes();
        msg.extend_from_slice(body.unwrap_or_default());
        msg
    }

    /// Sends one request, reusing the connection; a request that fails on a
    /// reused connection before any response byte is retried once on a new
    /// one (the server may have closed an idle connection).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> io::Result<Response> {
        self.request_with(method, path, body, &[])
    }

    /// [`Client::request`] with extra request headers (e.g. `If-Match`).
    pub fn request_with(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> io::Result<Response> {
        let msg = self.prepare_with(method, path, body, headers);
        let mut headers = Vec::new();
        let mut out = Vec::new();
        let status = self.exchange(&msg, &mut out, &mut |n, v| {
            headers.push((n.to_ascii_lowercase(), v.to_string()));
        })?;
        Ok(Response {
            status,
            headers,
            body: out,
        })
    }

    /// Sends a request made by [`Client::prepare`] (same retry rule as
    /// [`Client::request`]); the body replaces the contents of `body` and
    /// the status is returned. Headers are not collected, so the only
    /// allocation is `body` growing.
    pub fn send_prepared(&mut self, request: &[u8], body: &mut Vec<u8>) -> io::Result<u16> {
        self.exchange(request, body, &mut |_, _| {})
    }

    fn exchange(
        &mut self,
        msg: &[u8],
        body: &mut Vec<u8>,
        header: &mut dyn FnMut(&str, &str),
    ) -> io::Result<u16> {
        let reused = self.conn.is_some();
        match self.exchange_once(msg, body, header) {
            Err(e) if reused && e.kind() != io::ErrorKind::TimedOut => {
                self.conn = None;
                self.exchange_once(msg, body, header)
            }
            r => r,
        }
    }

    fn exchange_once(
        &mut self,
        msg: &[u8],
        body: &mut Vec<u8>,
        header: &mut dyn FnMut(&str, &str),
    ) -> io::Result<u16> {
        let c = match &mut self.conn {
            Some(c) => c,
            None => {
                let s = TcpStream::connect_timeout(&self.addr, self.timeout)?;
                s.set_read_timeout(Some(self.timeout))?;
                s.set_write_timeout(Some(self.timeout))?;
                s.set_nodelay(true)?;
                self.conn.insert(BufReader::new(s))
            }
        };
        let r = c
            .get_mut()
            .write_all(msg)
            .and_then(|()| read_response(c, body, header));
        match r {
            Ok((status, keep)) => {
                if !keep {
                    self.conn = None;
                }
                Ok(status)
            }
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }
}

/// Reads one line (CRLF or LF) into `line` (cleared first), charging it
/// to `budget`; returns it without the line end.
fn read_line<'a>(
    r: &mut impl BufRead,
    budget: &mut usize,
    line: &'a mut Vec<u8>,
) -> io::Result<&'a str> {
    line.clear();
    let n = r.take(*budget as u64 + 1).read_until(b'\n', line)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    if n > *budget {
        return Err(bad("response headers too large"));
    }
    *budget -= n;
    let s = std::str::from_utf8(line).map_err(|_| bad("non-UTF-8 header"))?;
    Ok(s.trim_end_matches(['\r', '\n']))
}

/// Reads one response: each header goes to `header` (name as sent, value
/// trimmed), the body (chunked bodies decoded) replaces `body`. Returns the
/// status and whether the connection stays usable.
fn read_response(
    r: &mut BufReader<TcpStream>,
    body: &mut Vec<u8>,
    header: &mut dyn FnMut(&str, &str),
) -> io::Result<(u16, bool)> {
    let mut budget = MAX_HEADERS;
    let mut line = Vec::with_capacity(128);
    let status_line = read_line(r, &mut budget, &mut line)?;
    let mut parts = status_line.splitn(3, ' ');
    let mut keep = parts.next() == Some("HTTP/1.1");
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    loop {
        let l = read_line(r, &mut budget, &mut line)?;
        if l.is_empty() {
            break;
        }
        let (n, v) = l
            .split_once(':')
            .ok_or_else(|| bad(format!("bad header {l:?}")))?;
        let (n, v) = (n.trim(), v.trim());
        if n.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
            keep = false;
        } else if n.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.eq_ignore_ascii_case("chunked");
        } else if n.eq_ignore_ascii_case("content-length") && length.is_none() {
            length = Some(v.parse().map_err(|_| bad("bad content-length"))?);
        }
        header(n, v);
    }
    body.clear();
    if chunked {
        loop {
            let mut b = MAX_HEADERS;
            let size_line = read_line(r, &mut b, &mut line)?;
            let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad(format!("bad chunk size {size_line:?}")))?;
            if size == 0 {
                // Trailers, then the final empty line.
                while !read_line(r, &mut b, &mut line)?.is_empty() {}
                break;
            }
            if body.len() + size > MAX_BODY {
                return Err(bad("response body too large"));
            }
            let at = body.len();
            body.resize(at + size, 0);
            r.read_exact(&mut body[at..])?;
            read_line(r, &mut b, &mut line)?;
        }
    } else if let Some(len) = length {
        if len > MAX_BODY {
            return Err(bad("response body too large"));
        }
        body.resize(len, 0);
        r.read_exact(body)?;
    } else if status != 204 && status != 304 {
        r.take(MAX_BODY as u64).read_to_end(body)?;
        keep = false;
    }
    Ok((status, keep))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_forms() {
        assert_eq!(
            resolve_url("http://127.0.0.1:8080/v1").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(
            resolve_url("127.0.0.1:9").unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert!(resolve_url("https://127.0.0.1:1").is_err());
    }
}
