//! Binary frames of `/prox/blocks/1`, one long-lived stream per session.
//!
//! All integers are big-endian; CIDs are 32 raw bytes. Client to server:
//!
//! ```text
//! WANT          01 | batch u32 | max_bytes u32 | n u16 (1..=4096) | n × cid
//! WANT_CLOSURE  02 | batch u32 | max_bytes u64 | value_cid | name_len u8 | name
//! WANT_DELTA    0b | batch u32 | max_bytes u32 | n u16 (1..=4096) | n × (cid | k u8 (0..=3) | k × base_cid)
//! WANT_ZDELTA   0d | as WANT_DELTA
//! ```
//!
//! `WANT_DELTA` is a `WANT` whose every CID comes with up to three old
//! blocks the client holds (its bases); the server may answer it with
//! `DELTA`, a patch against the bases' concatenation, instead of `BLOCK`. Clients send it only to servers that
//! advertised deltas in their `Root` answer. `WANT_ZDELTA` also takes
//! `ZBLOCK` and `ZDELTA` answers (zstd frames, `crate::delta::compress`);
//! clients send it only to servers that advertised `zstd`.
//!
//! Server to client. For each `WANT`, exactly one of `BLOCK`/`MISSING`/`DEFER`
//! per CID in request order, then `DONE`; requests are answered FIFO, so the
//! CID of a `BLOCK` is implicit in its position:
//!
//! ```text
//! BLOCK         03 | len u32 (<= max_block) | bytes
//! MISSING       04
//! DEFER         05                       batch byte budget used up; ask again
//! DONE          06 | batch u32
//! CBLOCK        07 | cid | len u32 | bytes  (closure stream, parent before child)
//! CLOSURE_END   08 | batch u32 | status u8
//! REFUSED       09 | code u8                 then the server closes the stream
//! BUSY          0a | batch u32               request not served: too many in flight
//! DELTA         0c | len u32 (<= max_block) | patch   the block as a patch against its bases
//! ZBLOCK        0e | len u32 (<= max_block) | zstd frame   the block, compressed
//! ZDELTA        0f | len u32 (<= max_block) | zstd frame   compressed with its bases as prefix
//! ```
//!
//! `BUSY` answers a whole `WANT` (or `WANT_CLOSURE`) in place of its frames
//! when the peer (or the node) already has the most requests in flight the
//! server allows; the client asks again after a pause.

use crate::error::Violation;
use bytes::Bytes;
use futures::{AsyncRead, AsyncReadExt};
use prox_engine::Cid;
use std::io;

const WANT: u8 = 1;
const WANT_CLOSURE: u8 = 2;
const BLOCK: u8 = 3;
const MISSING: u8 = 4;
const DEFER: u8 = 5;
const DONE: u8 = 6;
const CBLOCK: u8 = 7;
const CLOSURE_END: u8 = 8;
const REFUSED: u8 = 9;
const BUSY: u8 = 10;
const WANT_DELTA: u8 = 11;
const DELTA: u8 = 12;
const WANT_ZDELTA: u8 = 13;
const ZBLOCK: u8 = 14;
const ZDELTA: u8 = 15;

/// How a `WANT_CLOSURE` stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClosureStatus {
    /// Every block of the closure was sent.
    Complete = 0,
    /// The server's byte budget ran out; fetch the rest with `WANT`.
    Budget = 1,
    /// The named root no longer has the requested value.
    RootChanged = 2,
    /// The server does not offer the bulk path to this peer.
    NotAllowed = 3,
}

impl ClosureStatus {
    fn from_u8(v: u8) -> Option<ClosureStatus> {
        Some(match v {
            0 => ClosureStatus::Complete,
            1 => ClosureStatus::Budget,
            2 => ClosureStatus::RootChanged,
            3 => ClosureStatus::NotAllowed,
            _ => return None,
        })
    }
}

/// Why a server refused a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusedCode {
    /// Too many sessions (per peer or in total).
    Busy = 1,
    /// The peer is not authorized.
    Unauthorized = 2,
}

/// A client-to-server frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientFrame {
    /// Ask for blocks, answered in order.
    Want {
        /// Batch id echoed in `DONE`.
        batch: u32,
        /// Byte budget for the answer.
        max_bytes: u32,
        /// CIDs wanted (1..=4096).
        cids: Vec<Cid>,
    },
    /// Ask for blocks, each with an optional base the client holds; the
    /// server may answer with patches against the bases.
    WantDelta {
        /// Batch id echoed in `DONE`.
        batch: u32,
        /// Byte budget for the answer.
        max_bytes: u32,
        /// CIDs wanted (1..=4096), each with its bases (0..=3).
        items: Vec<(Cid, Vec<Cid>)>,
        /// Sent as `WANT_ZDELTA`: `ZBLOCK` and `ZDELTA` answers welcome.
        zstd: bool,
    },
    /// Ask for the whole closure of a named root's value.
    WantClosure {
        /// Batch id echoed in `CLOSURE_END`.
        batch: u32,
        /// Byte budget the client accepts.
        max_bytes: u64,
        /// CID of the root value the client saw (guards against races).
        value_cid: Cid,
        /// The named root.
        name: String,
    },
}

/// A server-to-client frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerFrame {
    /// The next wanted block.
    Block(Bytes),
    /// The next wanted block as a patch against the base the client named.
    Delta(Bytes),
    /// The next wanted block as a zstd frame without a prefix.
    ZBlock(Bytes),
    /// The next wanted block as a zstd frame with its bases as prefix.
    ZDelta(Bytes),
    /// The server does not have the next wanted block.
    Missing,
    /// Not sent: batch budget exhausted.
    Defer,
    /// End of a `WANT` batch.
    Done {
        /// The batch id.
        batch: u32,
    },
    /// A block of a closure stream.
    ClosureBlock {
        /// Its CID (to be verified).
        cid: Cid,
        /// Its bytes.
        bytes: Bytes,
    },
    /// End of a closure stream.
    ClosureEnd {
        /// The batch id.
        batch: u32,
        /// How it ended.
        status: ClosureStatus,
    },
    /// The server refuses the session.
    Refused(RefusedCode),
    /// The request `batch` was not served: the peer or the node has the
    /// most requests in flight the server allows. Ask again later.
    Busy {
        /// The batch id of the request not served.
        batch: u32,
    },
}

/// Failure reading a frame: transport error or protocol violation.
#[derive(Debug)]
pub enum ReadError {
    /// The stream failed or ended early.
    Io(io::Error),
    /// The peer sent something invalid.
    Violation(Violation),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

impl ClientFrame {
    /// Appends the encoded frame to `out`. Fails on out-of-range fields.
    pub fn encode(&self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            ClientFrame::Want {
                batch,
                max_bytes,
                cids,
            } => {
                if cids.is_empty() || cids.len() > super::limits::MAX_WANT_CIDS as usize {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "WANT needs 1..=4096 CIDs",
                    ));
                }
                out.push(WANT);
                out.extend_from_slice(&batch.to_be_bytes());
                out.extend_from_slice(&max_bytes.to_be_bytes());
                out.extend_from_slice(&(cids.len() as u16).to_be_bytes());
                for c in cids {
                    out.extend_from_slice(c.as_bytes());
                }
            }
            ClientFrame::WantDelta {
                batch,
                max_bytes,
                items,
                zstd,
            } => {
                if items.is_empty() || items.len() > super::limits::MAX_WANT_CIDS as usize {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "WANT_DELTA needs 1..=4096 CIDs",
                    ));
                }
                out.push(if *zstd { WANT_ZDELTA } else { WANT_DELTA });
                out.extend_from_slice(&batch.to_be_bytes());
                out.extend_from_slice(&max_bytes.to_be_bytes());
                out.extend_from_slice(&(items.len() as u16).to_be_bytes());
                for (c, bases) in items {
                    if bases.len() > crate::delta::MAX_BASES {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "WANT_DELTA takes at most 3 bases per CID",
                        ));
                    }
                    out.extend_from_slice(c.as_bytes());
                    out.push(bases.len() as u8);
                    for b in bases {
                        out.extend_from_slice(b.as_bytes());
                    }
                }
            }
            ClientFrame::WantClosure {
                batch,
                max_bytes,
                value_cid,
                name,
            } => {
                if name.is_empty() || name.len() > super::limits::MAX_NAME {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "root name must be 1..=255 bytes",
                    ));
                }
                out.push(WANT_CLOSURE);
                out.extend_from_slice(&batch.to_be_bytes());
                out.extend_from_slice(&max_bytes.to_be_bytes());
                out.extend_from_slice(value_cid.as_bytes());
                out.push(name.len() as u8);
                out.extend_from_slice(name.as_bytes());
            }
        }
        Ok(())
    }

    /// Reads one frame; `Ok(None)` on a clean end of stream before a frame.
    pub async fn read<R: AsyncRead + Unpin>(io: &mut R) -> Result<Option<ClientFrame>, ReadError> {
        let mut tag = [0u8; 1];
        if io.read(&mut tag).await? == 0 {
            return Ok(None);
        }
        match tag[0] {
            WANT => {
                let batch = read_u32(io).await?;
                let max_bytes = read_u32(io).await?;
                let n = read_u16(io).await?;
                if n == 0 || n > super::limits::MAX_WANT_CIDS {
                    return Err(ReadError::Violation(Violation::Oversize {
                        what: "WANT",
                        len: n as u64,
                        max: super::limits::MAX_WANT_CIDS as u64,
                    }));
                }
                let mut raw = vec![0u8; n as usize * 32];
                io.read_exact(&mut raw).await?;
                let cids = raw.chunks_exact(32).filter_map(Cid::from_slice).collect();
                Ok(Some(ClientFrame::Want {
                    batch,
                    max_bytes,
                    cids,
                }))
            }
            WANT_DELTA | WANT_ZDELTA => {
                let batch = read_u32(io).await?;
                let max_bytes = read_u32(io).await?;
                let n = read_u16(io).await?;
                if n == 0 || n > super::limits::MAX_WANT_CIDS {
                    return Err(ReadError::Violation(Violation::Oversize {
                        what: "WANT_DELTA",
                        len: n as u64,
                        max: super::limits::MAX_WANT_CIDS as u64,
                    }));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let cid = read_cid(io).await?;
                    let mut k = [0u8; 1];
                    io.read_exact(&mut k).await?;
                    if k[0] as usize > crate::delta::MAX_BASES {
                        return Err(ReadError::Violation(Violation::Oversize {
                            what: "WANT_DELTA bases",
                            len: k[0] as u64,
                            max: crate::delta::MAX_BASES as u64,
                        }));
                    }
                    let mut bases = Vec::with_capacity(k[0] as usize);
                    for _ in 0..k[0] {
                        bases.push(read_cid(io).await?);
                    }
                    items.push((cid, bases));
                }
                Ok(Some(ClientFrame::WantDelta {
                    batch,
                    max_bytes,
                    items,
                    zstd: tag[0] == WANT_ZDELTA,
                }))
            }
            WANT_CLOSURE => {
                let batch = read_u32(io).await?;
                let mut b8 = [0u8; 8];
                io.read_exact(&mut b8).await?;
                let value_cid = read_cid(io).await?;
                let mut len = [0u8; 1];
                io.read_exact(&mut len).await?;
                let mut name = vec![0u8; len[0] as usize];
                io.read_exact(&mut name).await?;
                let name = String::from_utf8(name).map_err(|_| {
                    ReadError::Violation(Violation::Protocol("root name is not UTF-8".into()))
                })?;
                Ok(Some(ClientFrame::WantClosure {
                    batch,
                    max_bytes: u64::from_be_bytes(b8),
                    value_cid,
                    name,
                }))
            }
            t => Err(ReadError::Violation(Violation::Protocol(format!(
                "unknown client frame tag {t}"
            )))),
        }
    }
}

impl ServerFrame {
    /// Appends the frame header to `out`; for `Block` and `ClosureBlock` the
    /// caller writes the block bytes right after (no copy of the payload).
    pub fn encode_header(&self, out: &mut Vec<u8>) {
        match self {
            ServerFrame::Block(b) => {
                out.push(BLOCK);
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            }
            ServerFrame::Delta(p) | ServerFrame::ZBlock(p) | ServerFrame::ZDelta(p) => {
                out.push(match self {
                    ServerFrame::ZBlock(_) => ZBLOCK,
                    ServerFrame::ZDelta(_) => ZDELTA,
                    _ => DELTA,
                });
                out.extend_from_slice(&(p.len() as u32).to_be_bytes());
            }
            ServerFrame::Missing => out.push(MISSING),
            ServerFrame::Defer => out.push(DEFER),
            ServerFrame::Done { batch } => {
                out.push(DONE);
                out.extend_from_slice(&batch.to_be_bytes());
            }
            ServerFrame::ClosureBlock { cid, bytes } => {
                out.push(CBLOCK);
                out.extend_from_slice(cid.as_bytes());
                out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            }
            ServerFrame::ClosureEnd { batch, status } => {
                out.push(CLOSURE_END);
                out.extend_from_slice(&batch.to_be_bytes());
                out.push(*status as u8);
            }
            ServerFrame::Refused(code) => {
                out.push(REFUSED);
                out.push(*code as u8);
            }
            ServerFrame::Busy { batch } => {
                out.push(BUSY);
                out.extend_from_slice(&batch.to_be_bytes());
            }
        }
    }

    /// The payload that follows the header, if any.
    pub fn payload(&self) -> Option<&Bytes> {
        match self {
            ServerFrame::Block(b)
            | ServerFrame::Delta(b)
            | ServerFrame::ZBlock(b)
            | ServerFrame::ZDelta(b)
            | ServerFrame::ClosureBlock { bytes: b, .. } => Some(b),
            _ => None,
        }
    }

    /// Reads one frame, refusing block lengths above `max_block` before
    /// allocating anything.
    pub async fn read<R: AsyncRead + Unpin>(
        io: &mut R,
        max_block: u32,
    ) -> Result<ServerFrame, ReadError> {
        let mut tag = [0u8; 1];
        io.read_exact(&mut tag).await?;
        Ok(match tag[0] {
            BLOCK => ServerFrame::Block(read_block(io, max_block).await?),
            DELTA => ServerFrame::Delta(read_block(io, max_block).await?),
            ZBLOCK => ServerFrame::ZBlock(read_block(io, max_block).await?),
            ZDELTA => ServerFrame::ZDelta(read_block(io, max_block).await?),
            MISSING => ServerFrame::Missing,
            DEFER => ServerFrame::Defer,
            DONE => ServerFrame::Done {
                batch: read_u32(io).await?,
            },
            CBLOCK => {
                let cid = read_cid(io).await?;
                ServerFrame::ClosureBlock {
                    cid,
                    bytes: read_block(io, max_block).await?,
                }
            }
            CLOSURE_END => {
                let batch = read_u32(io).await?;
                let mut s = [0u8; 1];
                io.read_exact(&mut s).await?;
                let status = ClosureStatus::from_u8(s[0]).ok_or_else(|| {
                    ReadError::Violation(Violation::Protocol(format!(
                        "bad closure status {}",
                        s[0]
                    )))
                })?;
                ServerFrame::ClosureEnd { batch, status }
            }
            REFUSED => {
                let mut c = [0u8; 1];
                io.read_exact(&mut c).await?;
                ServerFrame::Refused(match c[0] {
                    1 => RefusedCode::Busy,
                    2 => RefusedCode::Unauthorized,
                    v => {
                        return Err(ReadError::Violation(Violation::Protocol(format!(
                            "bad refusal code {v}"
                        ))))
                    }
                })
            }
            BUSY => ServerFrame::Busy {
                batch: read_u32(io).await?,
            },
            t => {
                return Err(ReadError::Violation(Violation::Protocol(format!(
                    "unknown server frame tag {t}"
                ))))
            }
        })
    }
}

async fn read_u32<R: AsyncRead + Unpin>(io: &mut R) -> io::Result<u32> {
    let mut b = [0u8; 4];
    io.read_exact(&mut b).await?;
    Ok(u32::from_be_bytes(b))
}

async fn read_u16<R: AsyncRead + Unpin>(io: &mut R) -> io::Result<u16> {
    let mut b = [0u8; 2];
    io.read_exact(&mut b).await?;
    Ok(u16::from_be_bytes(b))
}

async fn read_cid<R: AsyncRead + Unpin>(io: &mut R) -> io::Result<Cid> {
    let mut b = [0u8; 32];
    io.read_exact(&mut b).await?;
    Ok(Cid(b))
}

async fn read_block<R: AsyncRead + Unpin>(io: &mut R, max_block: u32) -> Result<Bytes, ReadError> {
    let len = read_u32(io).await?;
    if len > max_block {
        return Err(ReadError::Violation(Violation::Oversize {
            what: "block",
            len: len as u64,
            max: max_block as u64,
        }));
    }
    let mut buf = vec![0u8; len as usize];
    io.read_exact(&mut buf).await?;
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_bytes(frames: &[ServerFrame]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            f.encode_header(&mut out);
            if let Some(p) = f.payload() {
                out.extend_from_slice(p);
            }
        }
        out
    }

    #[test]
    fn frames_round_trip() {
        futures::executor::block_on(async {
            let want = ClientFrame::Want {
                batch: 9,
                max_bytes: 1 << 20,
                cids: vec![Cid::of(b"a"), Cid::of(b"b")],
            };
            let closure = ClientFrame::WantClosure {
                batch: 3,
                max_bytes: 1 << 40,
                value_cid: Cid::of(b"v"),
                name: "idx".into(),
            };
            let mut out = Vec::new();
            want.encode(&mut out).unwrap();
            closure.encode(&mut out).unwrap();
            let delta = ClientFrame::WantDelta {
                batch: 4,
                max_bytes: 99,
                items: vec![
                    (Cid::of(b"n"), vec![Cid::of(b"o"), Cid::of(b"p")]),
                    (Cid::of(b"m"), vec![]),
                ],
                zstd: false,
            };
            delta.encode(&mut out).unwrap();
            let zdelta = ClientFrame::WantDelta {
                batch: 5,
                max_bytes: 7,
                items: vec![(Cid::of(b"z"), vec![Cid::of(b"y")])],
                zstd: true,
            };
            zdelta.encode(&mut out).unwrap();
            let mut r: &[u8] = &out;
            assert_eq!(ClientFrame::read(&mut r).await.unwrap(), Some(want));
            assert_eq!(ClientFrame::read(&mut r).await.unwrap(), Some(closure));
            assert_eq!(ClientFrame::read(&mut r).await.unwrap(), Some(delta));
            assert_eq!(ClientFrame::read(&mut r).await.unwrap(), Some(zdelta));
            assert_eq!(ClientFrame::read(&mut r).await.unwrap(), None);

            let frames = vec![
                ServerFrame::Block(Bytes::from_static(b"hello")),
                ServerFrame::Missing,
                ServerFrame::Delta(Bytes::from_static(b"patch")),
                ServerFrame::ZBlock(Bytes::from_static(b"zb")),
                ServerFrame::ZDelta(Bytes::from_static(b"zd")),
                ServerFrame::Defer,
                ServerFrame::Done { batch: 9 },
                ServerFrame::ClosureBlock {
                    cid: Cid::of(b"x"),
                    bytes: Bytes::from_static(b"x"),
                },
                ServerFrame::ClosureEnd {
                    batch: 3,
                    status: ClosureStatus::Budget,
                },
                ServerFrame::Refused(RefusedCode::Busy),
                ServerFrame::Busy { batch: 7 },
            ];
            let bytes = server_bytes(&frames);
            let mut r: &[u8] = &bytes;
            for f in &frames {
                assert_eq!(&ServerFrame::read(&mut r, 16).await.unwrap(), f);
            }
        });
    }

    #[test]
    fn oversize_block_is_refused_before_allocation() {
        futures::executor::block_on(async {
            for tag in [BLOCK, DELTA, ZBLOCK, ZDELTA] {
                let mut out = vec![tag];
                out.extend_from_slice(&u32::MAX.to_be_bytes());
                let mut r: &[u8] = &out;
                match ServerFrame::read(&mut r, 1024).await {
                    Err(ReadError::Violation(Violation::Oversize { len, max, .. })) => {
                        assert_eq!((len, max), (u32::MAX as u64, 1024));
                    }
                    other => panic!("tag {tag}: expected oversize violation, got {other:?}"),
                }
            }
            let mut r: &[u8] = &[0xEE];
            assert!(matches!(
                ServerFrame::read(&mut r, 1).await,
                Err(ReadError::Violation(_))
            ));
            let bad_want = [WANT, 0, 0, 0, 1, 0, 0, 0, 1, 0xFF, 0xFF];
            let mut r: &[u8] = &bad_want;
            assert!(matches!(
                ClientFrame::read(&mut r).await,
                Err(ReadError::Violation(_))
            ));
        });
    }
}
