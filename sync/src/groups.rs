//! The reader half of a pull's block stream: turns server frames into
//! whole `WANT` answers and closure chunks, refusing answers larger than the
//! per-batch budget allows.

use crate::error::Violation;
use crate::protocol::frames::{ClosureStatus, ReadError, RefusedCode, ServerFrame};
use crate::protocol::limits::Limits;
use crate::stall::StallGuard;
use bytes::Bytes;
use futures::AsyncRead;
use prox_engine::Cid;
use std::time::Duration;

/// A batch of frames as grouped by the reader task.
pub(crate) enum Group {
    Batch {
        id: u32,
        frames: Vec<ServerFrame>,
    },
    Closure(Vec<(Cid, Bytes)>),
    ClosureEnd(ClosureStatus),
    Refused(RefusedCode),
    /// The request `id` was not served (too many in flight on the server).
    Busy(u32),
}

/// Reads frames and groups them into whole `WANT` answers or closure chunks,
/// refusing answers larger than the budget allows.
pub(crate) async fn read_groups<R: AsyncRead + Unpin>(
    reader: R,
    limits: Limits,
    idle: Duration,
    out: tokio::sync::mpsc::Sender<std::result::Result<Group, ReadError>>,
) {
    let max_frames = limits.want_cids as usize;
    let max_bytes = limits.batch_bytes as u64 + limits.max_block as u64;
    let mut frames = Vec::new();
    let mut bytes = 0u64;
    let mut chunk = Vec::new();
    let mut chunk_bytes = 0u64;
    // The idle deadline is on bytes, not frames: a block larger than the
    // link carries in one idle period still arrives; a stream on which no
    // byte moves for `idle` fails with `TimedOut`.
    let mut reader = StallGuard::new(reader, idle);
    loop {
        let frame = match ServerFrame::read(&mut reader, limits.max_block).await {
            Ok(f) => f,
            Err(e) => {
                let _ = out.send(Err(e)).await;
                return;
            }
        };
        let group = match frame {
            ServerFrame::Done { batch } => Some(Group::Batch {
                id: batch,
                frames: std::mem::take(&mut frames),
            }),
            ServerFrame::ClosureBlock { cid, bytes: b } => {
                chunk_bytes += b.len() as u64;
                chunk.push((cid, b));
                if chunk.len() >= max_frames || chunk_bytes >= limits.batch_bytes as u64 {
                    chunk_bytes = 0;
                    Some(Group::Closure(std::mem::take(&mut chunk)))
                } else {
                    None
                }
            }
            ServerFrame::ClosureEnd { status, .. } => {
                if !chunk.is_empty() {
                    chunk_bytes = 0;
                    if out
                        .send(Ok(Group::Closure(std::mem::take(&mut chunk))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                Some(Group::ClosureEnd(status))
            }
            ServerFrame::Refused(code) => Some(Group::Refused(code)),
            ServerFrame::Busy { batch } => {
                if !frames.is_empty() || !chunk.is_empty() {
                    let _ = out
                        .send(Err(ReadError::Violation(Violation::Protocol(
                            "BUSY inside an answer".into(),
                        ))))
                        .await;
                    return;
                }
                Some(Group::Busy(batch))
            }
            f => {
                bytes += f.payload().map_or(0, |p| p.len() as u64);
                frames.push(f);
                if frames.len() > max_frames || bytes > max_bytes {
                    let _ = out
                        .send(Err(ReadError::Violation(Violation::Oversize {
                            what: "WANT answer",
                            len: bytes.max(frames.len() as u64),
                            max: max_bytes,
                        })))
                        .await;
                    return;
                }
                None
            }
        };
        if let Some(g) = group {
            if matches!(g, Group::Batch { .. }) {
                bytes = 0;
            }
            let stop = matches!(g, Group::Refused(_));
            if out.send(Ok(g)).await.is_err() || stop {
                return;
            }
        }
    }
}
