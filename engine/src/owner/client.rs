//! The client side: a [`BlockStore`] whose every call is one request to
//! the store's owner, bounded by a timeout.

use super::handler::{gc_report, OwnerInfo, MAX_LEASE_WAIT};
use super::proto::{self, Frame, Op};
use crate::cid::Cid;
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};
use crate::gc::GcReport;
use crate::store::{BlockStore, Lease, RetainStats};
use bytes::Bytes;
use std::collections::HashSet;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long one request waits for its reply by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a collection run by the owner may take.
pub const GC_TIMEOUT: Duration = Duration::from_secs(3600);

/// Bytes of blocks sent in one `put_many` frame.
const PUT_CHUNK: usize = 16 << 20;

/// CIDs asked for in one `get_many` frame.
const GET_CHUNK: usize = 256;

struct Conn {
    stream: UnixStream,
    next_id: u64,
}

/// The socket connection, shared with the leases taken over it (which
/// send their release on it when dropped).
struct Channel {
    socket: PathBuf,
    conn: Mutex<Conn>,
}

/// A connection to a store's owner, usable as a [`BlockStore`].
pub struct OwnerClient {
    chan: Arc<Channel>,
    timeout: Duration,
    info: OwnerInfo,
}

impl std::fmt::Debug for OwnerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerClient")
            .field("socket", &self.chan.socket)
            .field("info", &self.info)
            .finish()
    }
}

impl OwnerClient {
    /// Connects to the owner socket at `socket` and greets it. A missing
    /// socket or one nobody listens on is [`Error::Owner`] at once; an
    /// owner that does not answer within `timeout` too.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<OwnerClient> {
        let stream = UnixStream::connect(socket).map_err(|e| Error::Owner {
            socket: socket.to_path_buf(),
            reason: format!("no owner answers: {e}"),
        })?;
        let mut c = OwnerClient {
            chan: Arc::new(Channel {
                socket: socket.to_path_buf(),
                conn: Mutex::new(Conn { stream, next_id: 1 }),
            }),
            timeout,
            info: OwnerInfo {
                version: 0,
                kind: String::new(),
                pid: 0,
            },
        };
        let reply = c.request(Op::Hello, &[], timeout)?;
        let mut r = Reader::new(&reply, "owner hello");
        let version = r.u8()?;
        let kind = proto::string(&mut r)?;
        let pid = u32::try_from(r.uv()?).map_err(|_| r.invalid("pid out of range"))?;
        r.finish()?;
        c.info = OwnerInfo { version, kind, pid };
        Ok(c)
    }

    /// What the owner said about itself.
    pub fn info(&self) -> &OwnerInfo {
        &self.info
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.chan.socket
    }

    /// Runs a garbage collection in the owner (which keeps its own pins).
    pub fn gc(&self, dry_run: bool) -> Result<GcReport> {
        let reply = self.request(Op::Gc, &[u8::from(dry_run)], GC_TIMEOUT)?;
        let mut r = Reader::new(&reply, "owner gc reply");
        let rep = gc_report(&mut r)?;
        r.finish()?;
        Ok(rep)
    }

    fn err(&self, reason: impl Into<String>) -> Error {
        self.chan.err(reason)
    }

    fn request(&self, op: Op, payload: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        self.chan.request(op, payload, timeout)
    }

    fn call(&self, op: Op, payload: &[u8]) -> Result<Vec<u8>> {
        self.request(op, payload, self.timeout)
    }

    fn put_chunk(&self, blocks: &[&[u8]], out: &mut Vec<Cid>) -> Result<()> {
        let mut p = Vec::new();
        put_uv(&mut p, blocks.len() as u64);
        for b in blocks {
            put_blob(&mut p, b);
        }
        let reply = self.call(Op::PutMany, &p)?;
        let mut r = Reader::new(&reply, "owner put reply");
        let cids = proto::cids(&mut r)?;
        r.finish()?;
        if cids.len() != blocks.len() {
            return Err(self.err("put reply count differs from the request"));
        }
        out.extend(cids);
        Ok(())
    }
}

impl Channel {
    fn err(&self, reason: impl Into<String>) -> Error {
        Error::Owner {
            socket: self.socket.clone(),
            reason: reason.into(),
        }
    }

    /// Sends one request and returns the reply payload (after the status
    /// byte). Holds only this client's connection lock meanwhile.
    fn request(&self, op: Op, payload: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| self.err("connection poisoned by an earlier failure"))?;
        let id = conn.next_id;
        conn.next_id += 1;
        let mut body = proto::header(id);
        body.push(op as u8);
        body.extend_from_slice(payload);
        if body.len() > proto::MAX_FRAME {
            return Err(self.err(format!(
                "request of {} bytes exceeds {}",
                body.len(),
                proto::MAX_FRAME
            )));
        }
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => self.err(format!(
                "no reply within {} s (is the owner stuck or gone?)",
                timeout.as_secs()
            )),
            _ => self.err(format!("connection failed: {e}")),
        };
        conn.stream.set_write_timeout(Some(timeout)).map_err(io)?;
        conn.stream.set_read_timeout(Some(timeout)).map_err(io)?;
        proto::write_frame(&mut conn.stream, &body).map_err(io)?;
        let reply = match proto::read_frame(&mut conn.stream).map_err(io)? {
            Frame::Body(b) => b,
            Frame::Closed => return Err(self.err("the owner closed the connection")),
        };
        let mut r = Reader::new(&reply, "owner reply");
        let got = proto::read_header(&mut r)?;
        let status = r.u8()?;
        if status == 1 {
            let msg = proto::string(&mut r)?;
            return Err(Error::OwnerRefused { reason: msg });
        }
        if got != id {
            return Err(self.err(format!("reply to request {got}, expected {id}")));
        }
        if status != 0 {
            return Err(self.err(format!("reply status {status}")));
        }
        Ok(reply[reply.len() - r.remaining()..].to_vec())
    }
}

fn name_payload(name: &str) -> Vec<u8> {
    let mut p = Vec::new();
    put_blob(&mut p, name.as_bytes());
    p
}

impl BlockStore for OwnerClient {
    fn get(&self, cid: &Cid) -> Result<Option<Bytes>> {
        Ok(self.get_many(std::slice::from_ref(cid))?.pop().flatten())
    }

    fn get_many(&self, cids: &[Cid]) -> Result<Vec<Option<Bytes>>> {
        let mut out = Vec::with_capacity(cids.len());
        for chunk in cids.chunks(GET_CHUNK) {
            let mut p = Vec::new();
            proto::put_cids(&mut p, chunk);
            let reply = self.call(Op::GetMany, &p)?;
            let mut r = Reader::new(&reply, "owner get reply");
            for cid in chunk {
                match proto::opt(&mut r)? {
                    // Verified here too: the owner is trusted for
                    // liveness, not for content.
                    Some(b) if cid.matches(b) => out.push(Some(Bytes::copy_from_slice(b))),
                    Some(_) => {
                        return Err(Error::Corrupt {
                            cid: *cid,
                            reason: "the owner sent bytes that do not hash to it".into(),
                        })
                    }
                    None => out.push(None),
                }
            }
            r.finish()?;
        }
        Ok(out)
    }

    fn put(&self, data: &[u8]) -> Result<Cid> {
        Ok(self.put_many(&[data])?[0])
    }

    fn put_many(&self, blocks: &[&[u8]]) -> Result<Vec<Cid>> {
        let mut out = Vec::with_capacity(blocks.len());
        let (mut start, mut bytes) = (0, 0usize);
        for (i, b) in blocks.iter().enumerate() {
            if bytes + b.len() > PUT_CHUNK && i > start {
                self.put_chunk(&blocks[start..i], &mut out)?;
                (start, bytes) = (i, 0);
            }
            bytes += b.len();
        }
        if start < blocks.len() {
            self.put_chunk(&blocks[start..], &mut out)?;
        }
        Ok(out)
    }

    fn has(&self, cid: &Cid) -> Result<bool> {
        Ok(self.has_many(std::slice::from_ref(cid))?[0])
    }

    fn has_many(&self, cids: &[Cid]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(cids.len());
        for chunk in cids.chunks(GET_CHUNK * 16) {
            let mut p = Vec::new();
            proto::put_cids(&mut p, chunk);
            let reply = self.call(Op::HasMany, &p)?;
            if reply.len() != chunk.len() {
                return Err(self.err("has reply count differs from the request"));
            }
            out.extend(reply.iter().map(|b| *b != 0));
        }
        Ok(out)
    }

    fn cids(&self) -> Result<Vec<Cid>> {
        let reply = self.call(Op::Cids, &[])?;
        let mut r = Reader::new(&reply, "owner cids reply");
        let cids = proto::cids(&mut r)?;
        r.finish()?;
        Ok(cids)
    }

    fn commit(&self) -> Result<()> {
        self.call(Op::Commit, &[]).map(|_| ())
    }

    fn root(&self, name: &str) -> Result<Option<Bytes>> {
        let reply = self.call(Op::RootGet, &name_payload(name))?;
        let mut r = Reader::new(&reply, "owner root reply");
        let v = proto::opt(&mut r)?.map(Bytes::copy_from_slice);
        r.finish()?;
        Ok(v)
    }

    fn set_root(&self, name: &str, value: Option<&[u8]>) -> Result<()> {
        let mut p = name_payload(name);
        proto::put_opt(&mut p, value);
        self.call(Op::RootSet, &p).map(|_| ())
    }

    /// Takes the lease in the owner, which holds it for this connection
    /// until the returned [`Lease`] is dropped (or the connection ends).
    fn lease(&self, name: &str, wait: Duration) -> Result<Option<Lease>> {
        let mut p = name_payload(name);
        put_uv(&mut p, u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        let reply = self.request(Op::Lease, &p, wait.min(MAX_LEASE_WAIT) + self.timeout)?;
        match reply.as_slice() {
            [1] => {
                let (chan, timeout, name) =
                    (Arc::clone(&self.chan), self.timeout, name.to_string());
                Ok(Some(Lease::new(move || {
                    // If the release is lost, the owner still drops the
                    // lease when this connection ends.
                    if let Err(e) = chan.request(Op::Release, &name_payload(&name), timeout) {
                        tracing::debug!(%e, name, "owner lease release failed");
                    }
                })))
            }
            [0] => Ok(None),
            [2] => Err(Error::Busy {
                name: name.to_string(),
                waited: wait,
            }),
            _ => Err(self.err("bad lease reply")),
        }
    }

    fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool> {
        let mut p = name_payload(name);
        proto::put_opt(&mut p, expected);
        proto::put_opt(&mut p, new);
        let reply = self.call(Op::RootCas, &p)?;
        match reply.as_slice() {
            [b] => Ok(*b != 0),
            _ => Err(self.err("bad compare-and-swap reply")),
        }
    }

    fn roots(&self) -> Result<Vec<(String, Bytes)>> {
        let reply = self.call(Op::Roots, &[])?;
        let mut r = Reader::new(&reply, "owner roots reply");
        let n = proto::count(&mut r, 2)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let name = proto::string(&mut r)?;
            let value = Bytes::copy_from_slice(r.blob(proto::MAX_FRAME)?);
            out.push((name, value));
        }
        r.finish()?;
        Ok(out)
    }

    fn retain(&self, _live: &HashSet<Cid>) -> Result<RetainStats> {
        Err(Error::OwnerRefused {
            reason: "blocks are reclaimed only by a collection the owner runs \
                     (OwnerClient::gc), which keeps the owner's pins"
                .into(),
        })
    }

    fn plan_retain(&self, _live: &HashSet<Cid>) -> Result<RetainStats> {
        self.retain(_live)
    }
}
