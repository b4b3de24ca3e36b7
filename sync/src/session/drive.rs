//! Driving a [`WantPlanner`] over one block stream: send its batches,
//! hand the answers back, and say how the stream ended.

use super::{Batch, WantPlanner};
use crate::error::{Error, Result, Violation};
use crate::groups::{read_groups, Group};
use crate::links::Linker;
use crate::pacing::{busy_pause, MAX_BUSY};
use crate::protocol::frames::{ClientFrame, ClosureStatus, ReadError, RefusedCode};
use crate::protocol::limits::Limits;
use futures::{AsyncRead, AsyncWrite, AsyncWriteExt};
use libp2p::PeerId;
use prox_engine::Cid;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How [`drive`] ended without finishing.
pub(crate) enum Stopped<L: Linker> {
    /// The stream failed before any answer reached the planner (typically:
    /// the server's accept loop lagged and libp2p-stream dropped the inbound
    /// stream, which the client sees as an immediate end of file). Every
    /// batch that was in flight is queued again, so the planner can be driven
    /// over a fresh stream with nothing lost or fetched twice.
    Lost(Box<WantPlanner<L>>, Error),
    /// Any other failure; the pull is over.
    Failed(Error),
}

impl<L: Linker> Stopped<L> {
    /// The error, whatever the kind of stop.
    pub(crate) fn into_error(self) -> Error {
        match self {
            Stopped::Lost(_, e) | Stopped::Failed(e) => e,
        }
    }
}

/// Fails with [`Error::PullTooLarge`] once the pull fetched more than
/// `limits.pull_max_bytes` (what was accepted so far stays staged).
pub(crate) fn within_budget<L: Linker>(
    slot: &mut Option<WantPlanner<L>>,
    limits: &Limits,
) -> Result<()> {
    let p = planner_mut(slot)?;
    if p.report.bytes_fetched > limits.pull_max_bytes {
        return Err(Error::PullTooLarge {
            peer: p.peer,
            bytes: p.report.bytes_fetched,
            max: limits.pull_max_bytes,
        });
    }
    Ok(())
}

/// Runs `planner` to completion over `stream`. Returns the planner (with
/// its report) once the closure is in `main`; see [`Stopped`] for failures.
pub(crate) async fn drive<L, S>(
    planner: WantPlanner<L>,
    stream: S,
    limits: &Limits,
    bulk: Option<(String, Cid)>,
) -> std::result::Result<WantPlanner<L>, Stopped<L>>
where
    L: Linker,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    use futures::AsyncReadExt;
    let peer = planner.peer;
    let mut planner = planner;
    planner.max_block = limits.max_block;
    let (reader, writer) = stream.split();
    let mut writer = futures::io::BufWriter::with_capacity(64 << 10, writer);
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    // Buffered: a frame header is 5 bytes; reading it straight from the
    // muxed stream would cost one stream poll per field.
    let reader = futures::io::BufReader::with_capacity(256 << 10, reader);
    let reader_task = tokio::spawn(read_groups(reader, limits.clone(), limits.idle_timeout, tx));
    let net = |e: std::io::Error| Error::network(peer, e);
    // The planner lives in `slot` between blocking steps; `answered` turns
    // true once a group from the server reached it (from then on a failure
    // cannot be retried on another stream without double bookkeeping).
    let mut slot = Some(planner);
    let mut answered = false;
    let mut inflight: VecDeque<Batch<L::Kind>> = VecDeque::new();
    let result: Result<()> = async {
        let mut refused_bulk = 0;
        if let Some((name, value_cid)) = bulk {
            let mut buf = Vec::new();
            ClientFrame::WantClosure {
                batch: 0,
                max_bytes: u64::MAX,
                value_cid,
                name,
            }
            .encode(&mut buf)
            .map_err(net)?;
            writer.write_all(&buf).await.map_err(net)?;
            writer.flush().await.map_err(net)?;
            loop {
                let group = next_group(&mut rx, peer, limits.idle_timeout).await?;
                answered = true;
                match group {
                    Group::Closure(blocks) => {
                        step(&mut slot, move |p| p.on_closure_chunk(blocks, 1)).await?;
                        within_budget(&mut slot, limits)?;
                    }
                    Group::ClosureEnd(status) => {
                        tracing::debug!(%peer, ?status, "closure stream ended");
                        let p = planner_mut(&mut slot)?;
                        p.report.bulk =
                            matches!(status, ClosureStatus::Complete | ClosureStatus::Budget);
                        if !p.report.bulk {
                            // The refused request still cost a round trip.
                            refused_bulk = 1;
                        }
                        break;
                    }
                    Group::Refused(code) => return Err(refused(peer, code)),
                    Group::Busy(_) => {
                        // The bulk request was not served: fetch with WANTs.
                        tracing::debug!(%peer, "closure request answered BUSY");
                        refused_bulk = 1;
                        break;
                    }
                    Group::Batch { .. } => {
                        return Err(Error::Misbehaving {
                            peer,
                            violation: Box::new(Violation::Protocol(
                                "DONE during a closure stream".into(),
                            )),
                        })
                    }
                }
            }
            let p = planner_mut(&mut slot)?;
            p.report.round_trips = p.report.round_trips.max(1);
        }
        // Requests the server answered BUSY in a row, and the window of
        // batches in flight: a BUSY narrows it by one, an answer widens it
        // back, so concurrent sessions to one server share its request cap.
        let mut busy_streak = 0u32;
        let mut window = limits.inflight_batches as usize;
        while !planner_mut(&mut slot)?.done() {
            while inflight.len() < window {
                let flush = inflight.is_empty();
                let p = planner_mut(&mut slot)?;
                let len = p.batch_len(limits.want_cids as usize, limits.batch_bytes);
                let Some(batch) = p.next_batch(len, flush) else {
                    break;
                };
                let mut buf = Vec::new();
                batch
                    .frame(limits.batch_bytes)
                    .encode(&mut buf)
                    .map_err(net)?;
                // Queued before the write: a failed write leaves it in flight,
                // to be queued again if the stream turns out to be lost.
                inflight.push_back(batch);
                writer.write_all(&buf).await.map_err(net)?;
            }
            writer.flush().await.map_err(net)?;
            let Some(expected) = inflight.front().map(|b| b.id) else {
                // flush was set, so every wanted CID would have been sent.
                return Err(Error::network(peer, "pull stalled with nothing to request"));
            };
            let group = next_group(&mut rx, peer, limits.idle_timeout).await?;
            answered = true;
            match (group, inflight.pop_front()) {
                (Group::Batch { id, frames }, Some(batch)) if id == expected => {
                    busy_streak = 0;
                    window = (window + 1).min(limits.inflight_batches as usize);
                    step(&mut slot, move |p| p.on_batch(batch, frames)).await?;
                    within_budget(&mut slot, limits)?;
                }
                (Group::Busy(id), Some(batch)) if id == expected => {
                    let p = planner_mut(&mut slot)?;
                    p.requeue(batch);
                    p.report.busy += 1;
                    busy_streak += 1;
                    if busy_streak > MAX_BUSY {
                        return Err(Error::Busy {
                            peer,
                            attempts: busy_streak,
                        });
                    }
                    window = window.saturating_sub(1).max(1);
                    tokio::time::sleep(busy_pause(busy_streak)).await;
                }
                (Group::Refused(code), _) => return Err(refused(peer, code)),
                _ => {
                    return Err(Error::Misbehaving {
                        peer,
                        violation: Box::new(Violation::Protocol(format!(
                            "expected the answer to batch {expected}"
                        ))),
                    })
                }
            }
        }
        planner_mut(&mut slot)?.report.round_trips += refused_bulk;
        Ok(())
    }
    .await;
    let _ = writer.close().await;
    reader_task.abort();
    match (result, slot) {
        (Ok(()), Some(p)) => Ok(p),
        (Err(e @ Error::Network { .. }), Some(mut p)) if !answered => {
            while let Some(batch) = inflight.pop_back() {
                p.requeue(batch);
            }
            Err(Stopped::Lost(Box::new(p), e))
        }
        (Err(e), _) => Err(Stopped::Failed(e)),
        (Ok(()), None) => Err(Stopped::Failed(Error::Io(std::io::Error::other(
            "pull planner lost",
        )))),
    }
}

/// The planner in `slot`; absent only after a failed blocking step, which
/// ends the session before this is called again.
pub(crate) fn planner_mut<L: Linker>(
    slot: &mut Option<WantPlanner<L>>,
) -> Result<&mut WantPlanner<L>> {
    slot.as_mut()
        .ok_or_else(|| Error::Io(std::io::Error::other("pull planner lost")))
}

/// Runs `f` on the planner in `slot` on a blocking thread and puts it back.
pub(crate) async fn step<L: Linker>(
    slot: &mut Option<WantPlanner<L>>,
    f: impl FnOnce(&mut WantPlanner<L>) -> Result<()> + Send + 'static,
) -> Result<()> {
    let p = slot
        .take()
        .ok_or_else(|| Error::Io(std::io::Error::other("pull planner lost")))?;
    *slot = Some(blocking(p, f).await?);
    Ok(())
}

pub(crate) fn refused(peer: PeerId, code: RefusedCode) -> Error {
    Error::Refused {
        peer,
        reason: match code {
            RefusedCode::Busy => "too many sessions".into(),
            RefusedCode::Unauthorized => "not authorized".into(),
        },
    }
}

async fn next_group(
    rx: &mut tokio::sync::mpsc::Receiver<std::result::Result<Group, ReadError>>,
    peer: PeerId,
    idle: Duration,
) -> Result<Group> {
    received(rx.recv().await, peer, idle)
}

/// What the reader task of `peer`'s block stream handed over (`None`: it
/// ended), as a group or the error that ends the stream.
pub(crate) fn received(
    item: Option<std::result::Result<Group, ReadError>>,
    peer: PeerId,
    idle: Duration,
) -> Result<Group> {
    match item {
        Some(Ok(g)) => Ok(g),
        Some(Err(ReadError::Violation(violation))) => Err(Error::Misbehaving {
            peer,
            violation: Box::new(violation),
        }),
        Some(Err(ReadError::Io(e))) if e.kind() == std::io::ErrorKind::TimedOut => {
            Err(Error::Timeout {
                what: format!("progress on the block stream from {peer}"),
                seconds: idle.as_secs(),
            })
        }
        Some(Err(ReadError::Io(e))) => Err(Error::network(peer, e)),
        None => Err(Error::network(peer, "block stream closed")),
    }
}

/// Runs `f` on the planner on a blocking thread, under a permit of the
/// node's store gate, and hands the planner back. If the awaiting task is
/// aborted, the job (and the rayon work inside it) still runs to its end,
/// but `Node::shutdown` waits for it before its final commit.
async fn blocking<L: Linker>(
    planner: WantPlanner<L>,
    f: impl FnOnce(&mut WantPlanner<L>) -> Result<()> + Send + 'static,
) -> Result<WantPlanner<L>> {
    let gate = planner.gate.clone();
    gate.run(move || {
        let mut p = planner;
        f(&mut p).map(|()| p)
    })
    .await
}

/// Timing helper for reports.
pub(crate) fn seconds_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}
