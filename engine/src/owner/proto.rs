//! Wire format of the owner socket: length-prefixed binary frames.
//!
//! A frame is `len: u32 BE` then `len` bytes of body (at most
//! [`MAX_FRAME`]). A request body is `version: u8`, `id: u64 BE`,
//! `op: u8`, then the op's payload; a reply body is `version: u8`,
//! `id: u64 BE` (the request's), `status: u8` (0 ok, 1 failed) then the
//! payload (on failure: a blob with the owner's message). Integers inside
//! payloads are unsigned LEB128 varints, byte strings are a varint length
//! then the bytes, options a 0/1 byte before the value.

use crate::cid::Cid;
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};
use std::io::{Read, Write};

/// Protocol version spoken by this build; a frame with another version is
/// refused.
pub const VERSION: u8 = 1;

/// Largest frame body either side sends or accepts (64 MiB).
pub const MAX_FRAME: usize = 64 << 20;

/// Request operation codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Protocol version, owner kind and pid.
    Hello = 0,
    /// Blocks by CID (`None` for absent ones).
    GetMany = 1,
    /// Presence of blocks by CID.
    HasMany = 2,
    /// Stores blocks; the owner hashes them and returns their CIDs.
    PutMany = 3,
    /// Makes everything put durable.
    Commit = 4,
    /// Reads a named root.
    RootGet = 5,
    /// Sets or removes a named root unconditionally.
    RootSet = 6,
    /// Compare-and-swap of a named root.
    RootCas = 7,
    /// All named roots.
    Roots = 8,
    /// Every CID in the store.
    Cids = 9,
    /// A garbage collection run by the owner (with its pins).
    Gc = 10,
    /// Takes a root's write lease for this connection, waiting at most the
    /// given milliseconds; held until released or the connection ends.
    Lease = 11,
    /// Releases a write lease this connection holds.
    Release = 12,
}

impl Op {
    /// The op named by `b`, or a typed error.
    pub fn from_u8(b: u8) -> Result<Op> {
        use Op::*;
        Ok(match b {
            0 => Hello,
            1 => GetMany,
            2 => HasMany,
            3 => PutMany,
            4 => Commit,
            5 => RootGet,
            6 => RootSet,
            7 => RootCas,
            8 => Roots,
            9 => Cids,
            10 => Gc,
            11 => Lease,
            12 => Release,
            _ => {
                return Err(Error::InvalidObject {
                    object: "owner request",
                    reason: format!("unknown op {b}"),
                })
            }
        })
    }
}

/// Writes one frame carrying `body`.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    if body.len() > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("frame of {} bytes exceeds {MAX_FRAME}", body.len()),
        ));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(body);
    w.write_all(&buf)?;
    w.flush()
}

/// What reading a frame gave.
#[derive(Debug)]
pub enum Frame {
    /// A frame body.
    Body(Vec<u8>),
    /// The peer closed the connection cleanly between frames.
    Closed,
}

/// Reads one frame; a length above [`MAX_FRAME`] is an `InvalidData`
/// error before anything is allocated.
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Frame> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(Frame::Closed),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Frame::Body(body))
}

/// Starts a request or reply body: version and id.
pub fn header(id: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.push(VERSION);
    b.extend_from_slice(&id.to_be_bytes());
    b
}

/// Reads the version and id at the start of a body.
pub fn read_header(r: &mut Reader<'_>) -> Result<u64> {
    let v = r.u8()?;
    if v != VERSION {
        return Err(r.invalid(format!("protocol version {v}, this build speaks {VERSION}")));
    }
    r.u64be()
}

/// Appends a list of CIDs.
pub fn put_cids(out: &mut Vec<u8>, cids: &[Cid]) {
    put_uv(out, cids.len() as u64);
    for c in cids {
        out.extend_from_slice(c.as_bytes());
    }
}

/// Reads a list of CIDs.
pub fn cids(r: &mut Reader<'_>) -> Result<Vec<Cid>> {
    let n = count(r, 32)?;
    (0..n).map(|_| r.cid()).collect()
}

/// Reads a list length, refusing one that cannot fit in what is left
/// (each item is at least `min_item` bytes).
pub fn count(r: &mut Reader<'_>, min_item: usize) -> Result<usize> {
    let n = r.uv_usize()?;
    if n.saturating_mul(min_item.max(1)) > r.remaining() {
        return Err(r.invalid(format!("{n} items cannot fit in {} bytes", r.remaining())));
    }
    Ok(n)
}

/// Appends an optional byte string.
pub fn put_opt(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            put_blob(out, b);
        }
    }
}

/// Reads an optional byte string.
pub fn opt<'a>(r: &mut Reader<'a>) -> Result<Option<&'a [u8]>> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(r.blob(MAX_FRAME)?)),
        b => Err(r.invalid(format!("option tag {b}"))),
    }
}

/// Reads a UTF-8 string.
pub fn string(r: &mut Reader<'_>) -> Result<String> {
    let b = r.blob(MAX_FRAME)?;
    String::from_utf8(b.to_vec()).map_err(|_| r.invalid("string is not UTF-8"))
}
