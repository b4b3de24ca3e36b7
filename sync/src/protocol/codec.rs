//! Length-prefixed CBOR codec for `/prox/ctl/1`.
//!
//! Frame: `u32` big-endian body length, then the CBOR body. The length is
//! checked against the limit *before* reading the body, so an oversized
//! message fails as an explicit `InvalidData` "exceeds the limit" error
//! rather than as a truncated-CBOR decode error (libp2p's built-in CBOR codec
//! silently truncates at `take(limit)`).

use super::limits::{MAX_CTL_REQUEST, MAX_CTL_RESPONSE};
use super::messages::{Request, Response};
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::StreamProtocol;
use serde::{de::DeserializeOwned, Serialize};
use std::io;

/// The request-response codec of the control protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtlCodec {
    /// Largest request body accepted.
    pub max_request: u32,
    /// Largest response body accepted.
    pub max_response: u32,
}

impl Default for CtlCodec {
    fn default() -> Self {
        CtlCodec {
            max_request: MAX_CTL_REQUEST,
            max_response: MAX_CTL_RESPONSE,
        }
    }
}

/// Encodes a message body as CBOR.
pub fn encode<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    ciborium::into_writer(msg, &mut out)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    Ok(out)
}

/// Decodes a CBOR message body; the whole input must be consumed.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> io::Result<T> {
    let mut cursor = io::Cursor::new(body);
    let v = ciborium::from_reader(&mut cursor).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad control message: {e}"),
        )
    })?;
    if cursor.position() as usize != body.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "trailing bytes after control message",
        ));
    }
    Ok(v)
}

async fn read_frame<T: AsyncRead + Unpin + Send, M: DeserializeOwned>(
    io: &mut T,
    max: u32,
    what: &str,
) -> io::Result<M> {
    let mut len = [0u8; 4];
    io.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len);
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what} of {len} bytes exceeds the limit of {max}"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    io.read_exact(&mut body).await?;
    decode(&body)
}

async fn write_frame<T: AsyncWrite + Unpin + Send, M: Serialize>(
    io: &mut T,
    msg: &M,
    max: u32,
    what: &str,
) -> io::Result<()> {
    let body = encode(msg)?;
    if body.len() > max as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what} of {} bytes exceeds the limit of {max}", body.len()),
        ));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    io.write_all(&frame).await?;
    io.flush().await?;
    io.close().await
}

impl libp2p::request_response::Codec for CtlCodec {
    type Protocol = StreamProtocol;
    type Request = Request;
    type Response = Response;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Request>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_frame(io, self.max_request, "control request").await
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Response>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_frame(io, self.max_response, "control response").await
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Request,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        write_frame(io, &req, self.max_request, "control request").await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Response,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        write_frame(io, &res, self.max_response, "control response").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::Hello;
    use libp2p::request_response::Codec;

    #[test]
    fn round_trip_and_byte_strings_are_compact() {
        let value = serde_bytes::ByteBuf::from(vec![7u8; 4096]);
        let resp = Response::Root {
            value: Some(value),
            bulk: false,
            delta: false,
            zstd: false,
            record: None,
        };
        let body = encode(&resp).unwrap();
        // A byte string costs a few header bytes, not one CBOR item per byte.
        assert!(body.len() < 4096 + 64, "{}", body.len());
        assert_eq!(decode::<Response>(&body).unwrap(), resp);
        let mut extra = body.clone();
        extra.push(0);
        assert!(decode::<Response>(&extra).is_err());
    }

    #[test]
    fn oversize_is_an_explicit_error_before_reading_the_body() {
        futures::executor::block_on(async {
            let mut codec = CtlCodec {
                max_request: 64,
                max_response: 64,
            };
            let p = crate::protocol::CTL_PROTOCOL;
            // Announced length 1 MiB, no body at all: must fail on the prefix.
            let mut input: &[u8] = &(1u32 << 20).to_be_bytes();
            let err = codec.read_response(&p, &mut input).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(err.to_string().contains("exceeds the limit"), "{err}");

            let hello = Request::Hello(Hello {
                version: 1,
                max_block: 1,
                max_want: 1,
                bulk: false,
            });
            let mut out = Vec::new();
            codec
                .write_request(&p, &mut out, hello.clone())
                .await
                .unwrap();
            let mut input: &[u8] = &out;
            assert_eq!(codec.read_request(&p, &mut input).await.unwrap(), hello);
        });
    }

    /// `Root.delta` and `Root.zstd` were added inside version 1: a peer
    /// that predates them reads the new answer, and its answer reads as
    /// "no deltas, no zstd".
    #[test]
    fn root_answers_interoperate_with_peers_without_deltas() {
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        enum OldResponse {
            Root {
                value: Option<serde_bytes::ByteBuf>,
                bulk: bool,
            },
        }
        let old = OldResponse::Root {
            value: Some(serde_bytes::ByteBuf::from(vec![1u8, 2])),
            bulk: true,
        };
        let body = encode(&old).unwrap();
        match decode::<Response>(&body).unwrap() {
            Response::Root {
                value,
                bulk,
                delta,
                zstd,
                record,
            } => {
                assert!(record.is_none());
                assert!(!zstd, "an old peer offers no zstd answers");
                assert_eq!(value.map(|v| v.into_vec()), Some(vec![1, 2]));
                assert!(bulk);
                assert!(!delta, "an old peer offers no deltas");
            }
            other => panic!("{other:?}"),
        }
        let new = Response::Root {
            value: None,
            bulk: false,
            delta: true,
            zstd: true,
            record: Some(serde_bytes::ByteBuf::from(vec![9u8])),
        };
        let body = encode(&new).unwrap();
        let OldResponse::Root { value, bulk } = decode::<OldResponse>(&body).unwrap();
        assert_eq!((value, bulk), (None, false));
    }
}
