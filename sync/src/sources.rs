//! Pulling one closure from several peers at once.
//!
//! One [`WantPlanner`] (the same that drives a single-peer pull) feeds a
//! *lane* per source: the lane's `/prox/blocks/1` stream, its reader task
//! and the `WANT` batches it has in flight. Batches go to whichever lane
//! has room; each lane's room (its window) is sized by the throughput it
//! delivered ([`source_windows`]), so a fast source is asked more and a
//! slow one holds only what it can deliver. Every answer goes through the
//! planner, which verifies each block against its CID and declared kind
//! whoever sent it.
//!
//! A lane ends when its source errs, stalls (no frame for
//! `Limits::idle_timeout`), closes its stream, answers `BUSY` too often,
//! lacks a block or misbehaves; the batches it had in flight go back to
//! the front of the queue, for the other lanes. The pull fails only when no
//! lane is left ([`Error::Sources`], naming every source and why it ended)
//! or on a local failure (store, budget).

use crate::error::{Error, Result, Violation};
use crate::groups::{read_groups, Group};
use crate::links::Linker;
use crate::pacing::{busy_pause, source_windows, MAX_BUSY, RATE_WEIGHT};
use crate::protocol::frames::ReadError;
use crate::protocol::limits::Limits;
use crate::session::{
    planner_mut, received, refused, within_budget, Batch, SourceReport, WantPlanner,
};
use futures::io::{BufWriter, WriteHalf};
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::PeerId;
use std::collections::VecDeque;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A finished multi-source fetch.
pub(crate) struct Fetched<L: Linker> {
    /// The planner, its closure in `main`.
    pub(crate) planner: WantPlanner<L>,
    /// One entry per source, in the order given.
    pub(crate) sources: Vec<SourceReport>,
    /// Why each source that left early left (misbehaving ones get banned).
    pub(crate) failures: Vec<Error>,
}

/// Messages from a lane's reader task.
type Item = std::result::Result<Group, ReadError>;

/// One source's share of the pull.
struct Lane<S> {
    peer: PeerId,
    writer: Option<BufWriter<WriteHalf<S>>>,
    rx: mpsc::Receiver<Item>,
    reader: tokio::task::JoinHandle<()>,
    /// Batches sent and not answered, oldest first, with when each was sent.
    inflight: VecDeque<(u32, Instant)>,
    /// Throughput estimate (bytes/s, 0 before the first answer).
    rate: f64,
    /// When the last answer arrived (the start of the next rate sample).
    last: Option<Instant>,
    busy_streak: u32,
    /// No new batch before this instant (after a `BUSY`).
    paused_until: Option<Instant>,
    report: SourceReport,
}

impl<S> Lane<S> {
    fn alive(&self) -> bool {
        self.writer.is_some()
    }
}

/// Fetches the closure the planner wants from every `(peer, stream)` at
/// once. See the module docs. Also returns the sources whose lane ended
/// because their connection stalled or failed: the caller closes those
/// connections, so a later request dials afresh instead of waiting on a
/// dead one.
pub(crate) async fn drive_many<L, S>(
    planner: WantPlanner<L>,
    streams: Vec<(PeerId, S)>,
    limits: &Limits,
) -> (Result<Fetched<L>>, Vec<PeerId>)
where
    L: Linker,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut lanes: Vec<Lane<S>> = streams
        .into_iter()
        .map(|(peer, stream)| {
            let (reader, writer) = stream.split();
            let (tx, rx) = mpsc::channel(1);
            let reader = futures::io::BufReader::with_capacity(256 << 10, reader);
            let reader = tokio::spawn(read_groups(reader, limits.clone(), limits.idle_timeout, tx));
            Lane {
                peer,
                writer: Some(BufWriter::with_capacity(64 << 10, writer)),
                rx,
                reader,
                inflight: VecDeque::new(),
                rate: 0.0,
                last: None,
                busy_streak: 0,
                paused_until: None,
                report: SourceReport {
                    peer: peer.to_string(),
                    ..SourceReport::default()
                },
            }
        })
        .collect();
    let mut planner = planner;
    planner.max_block = limits.max_block;
    let mut run = Run {
        slot: Some(planner),
        batches: std::collections::HashMap::new(),
        failures: Vec::new(),
        dead: Vec::new(),
        limits,
    };
    let result = run.fetch(&mut lanes).await;
    for lane in &mut lanes {
        if let Some(mut w) = lane.writer.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), w.close()).await;
        }
        lane.reader.abort();
    }
    let dead = std::mem::take(&mut run.dead);
    let fetched = result.and_then(|()| {
        let planner = run
            .slot
            .take()
            .ok_or_else(|| Error::Io(std::io::Error::other("pull planner lost")))?;
        Ok(Fetched {
            planner,
            sources: lanes.into_iter().map(|l| l.report).collect(),
            failures: run.failures,
        })
    });
    (fetched, dead)
}

/// The state of one multi-source fetch besides its lanes.
struct Run<'a, L: Linker> {
    /// The planner between blocking steps.
    slot: Option<WantPlanner<L>>,
    /// Every batch in flight on any lane, by id (ids are unique per pull).
    batches: std::collections::HashMap<u32, Batch<L::Kind>>,
    /// Why each lane that ended ended.
    failures: Vec<Error>,
    /// Sources whose lane ended on a stalled or failed connection.
    dead: Vec<PeerId>,
    limits: &'a Limits,
}

impl<L: Linker> Run<'_, L> {
    async fn fetch<S>(&mut self, lanes: &mut [Lane<S>]) -> Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut turn = 0usize;
        while !planner_mut(&mut self.slot)?.done() {
            if !lanes.iter().any(Lane::alive) {
                return Err(Error::Sources {
                    failures: std::mem::take(&mut self.failures),
                });
            }
            self.fill(lanes).await?;
            if !lanes.iter().any(Lane::alive) {
                continue;
            }
            let inflight: usize = lanes.iter().map(|l| l.inflight.len()).sum();
            if inflight == 0 {
                // Nothing asked: every live lane is paused after a BUSY (a
                // lane with room takes any queued CID, and a flush sends
                // partial batches).
                let until = lanes
                    .iter()
                    .filter(|l| l.alive())
                    .filter_map(|l| l.paused_until)
                    .min();
                match until {
                    Some(t) => {
                        tokio::time::sleep_until(t).await;
                        continue;
                    }
                    None => {
                        return Err(Error::network(
                            "every source",
                            "pull stalled with nothing to request",
                        ))
                    }
                }
            }
            let n = lanes.len();
            turn = turn.wrapping_add(1);
            let start = turn % n;
            let (i, item) = futures::future::poll_fn(|cx| {
                for k in 0..n {
                    let i = (start + k) % n;
                    let lane = &mut lanes[i];
                    if !lane.alive() {
                        continue;
                    }
                    if let Poll::Ready(item) = lane.rx.poll_recv(cx) {
                        return Poll::Ready((i, item));
                    }
                }
                Poll::Pending
            })
            .await;
            let lane = &mut lanes[i];
            match received(item, lane.peer, self.limits.idle_timeout) {
                Ok(group) => self.on_group(lane, group).await?,
                Err(e) => self.end(lane, e),
            }
        }
        Ok(())
    }

    /// Sends batches to every live lane with room: one batch per lane per
    /// round, fastest lane first, each at most an equal share of the queue
    /// (so a wave is spread over the lanes instead of going to the first
    /// one in a single batch).
    async fn fill<S>(&mut self, lanes: &mut [Lane<S>]) -> Result<()>
    where
        S: AsyncWrite + Unpin,
    {
        let max = self.limits.inflight_batches as usize;
        let rates: Vec<f64> = lanes
            .iter()
            .map(|l| if l.alive() { l.rate } else { 0.0 })
            .collect();
        let windows = source_windows(max, &rates);
        let mut order: Vec<usize> = (0..lanes.len()).collect();
        order.sort_by(|&a, &b| rates[b].total_cmp(&rates[a]));
        let now = Instant::now();
        let ready: Vec<bool> = lanes
            .iter()
            .map(|l| l.alive() && l.paused_until.is_none_or(|t| t <= now))
            .collect();
        let sharing = ready.iter().filter(|r| **r).count().max(1);
        let share = planner_mut(&mut self.slot)?
            .queued()
            .div_ceil(sharing)
            .max(1);
        let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); lanes.len()];
        loop {
            let mut took = false;
            for &i in &order {
                let lane = &mut lanes[i];
                let window = windows[i].saturating_sub(lane.busy_streak as usize).max(1);
                if !ready[i] || lane.inflight.len() >= window {
                    continue;
                }
                lane.paused_until = None;
                let flush = lane.inflight.is_empty();
                let p = planner_mut(&mut self.slot)?;
                let len = p
                    .batch_len(self.limits.want_cids as usize, self.limits.batch_bytes)
                    .min(share);
                let Some(batch) = p.next_batch(len, flush) else {
                    continue;
                };
                batch
                    .frame(self.limits.batch_bytes)
                    .encode(&mut bufs[i])
                    .map_err(|e| Error::network(lane.peer, e))?;
                lane.inflight.push_back((batch.id(), Instant::now()));
                self.batches.insert(batch.id(), batch);
                took = true;
            }
            if !took {
                break;
            }
        }
        for (lane, buf) in lanes.iter_mut().zip(bufs) {
            if buf.is_empty() {
                continue;
            }
            let Some(writer) = lane.writer.as_mut() else {
                continue;
            };
            let sent = tokio::time::timeout(self.limits.idle_timeout, async {
                writer.write_all(&buf).await?;
                writer.flush().await
            })
            .await;
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    let e = Error::network(lane.peer, e);
                    self.end(lane, e);
                }
                Err(_) => {
                    let e = Error::Timeout {
                        what: format!("sending WANTs to {}", lane.peer),
                        seconds: self.limits.idle_timeout.as_secs(),
                    };
                    self.end(lane, e);
                }
            }
        }
        Ok(())
    }

    /// Handles one group from `lane`: an answer goes to the planner; a
    /// `BUSY` requeues the batch and pauses the lane; anything else ends
    /// the lane.
    async fn on_group<S>(&mut self, lane: &mut Lane<S>, group: Group) -> Result<()> {
        let expected = lane.inflight.front().map(|(id, _)| *id);
        match group {
            Group::Batch { id, frames } if Some(id) == expected => {
                let (_, sent) = lane.inflight.pop_front().unwrap_or((id, Instant::now()));
                let Some(batch) = self.batches.remove(&id) else {
                    return Err(Error::Io(std::io::Error::other("batch lost")));
                };
                let bytes: u64 = frames
                    .iter()
                    .map(|f| f.payload().map_or(0, |p| p.len() as u64))
                    .sum();
                let now = Instant::now();
                let since = lane.last.map_or(sent, |l| l.max(sent));
                let secs = now.duration_since(since).as_secs_f64().max(1e-6);
                let sample = bytes as f64 / secs;
                lane.rate = if lane.rate == 0.0 {
                    sample
                } else {
                    lane.rate + RATE_WEIGHT * (sample - lane.rate)
                };
                lane.last = Some(now);
                lane.busy_streak = 0;
                let keep = batch.clone();
                let peer = lane.peer;
                let before = planner_mut(&mut self.slot)?.report.blocks_fetched;
                let outcome = self
                    .answer(move |p| {
                        p.set_source(peer);
                        p.on_batch(batch, frames)
                    })
                    .await?;
                let after = planner_mut(&mut self.slot)?.report.blocks_fetched;
                lane.report.blocks += after - before;
                lane.report.bytes += bytes;
                match outcome {
                    Ok(()) => within_budget(&mut self.slot, self.limits),
                    Err(e @ (Error::Misbehaving { .. } | Error::RemoteMissing { .. })) => {
                        // Nothing of a misbehaving answer was stored; a
                        // missing block's batch keeps what was accepted
                        // (the planner skips CIDs it no longer wants).
                        planner_mut(&mut self.slot)?.requeue(keep);
                        self.end(lane, e);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Group::Busy(id) if Some(id) == expected => {
                lane.inflight.pop_front();
                if let Some(batch) = self.batches.remove(&id) {
                    let p = planner_mut(&mut self.slot)?;
                    p.requeue(batch);
                    p.report.busy += 1;
                }
                lane.busy_streak += 1;
                if lane.busy_streak > MAX_BUSY {
                    let e = Error::Busy {
                        peer: lane.peer,
                        attempts: lane.busy_streak,
                    };
                    self.end(lane, e);
                } else {
                    lane.paused_until = Some(Instant::now() + busy_pause(lane.busy_streak));
                }
                Ok(())
            }
            Group::Refused(code) => {
                let e = refused(lane.peer, code);
                self.end(lane, e);
                Ok(())
            }
            _ => {
                let e = Error::Misbehaving {
                    peer: lane.peer,
                    violation: Box::new(Violation::Protocol(format!(
                        "expected the answer to batch {}",
                        expected.map_or_else(|| "none".into(), |id| id.to_string())
                    ))),
                };
                self.end(lane, e);
                Ok(())
            }
        }
    }

    /// Runs `f` on the planner on a blocking thread and puts it back
    /// whatever `f` answers (a source's fault must not lose the pull).
    /// The outer error is the gate's (node shutting down).
    async fn answer(
        &mut self,
        f: impl FnOnce(&mut WantPlanner<L>) -> Result<()> + Send + 'static,
    ) -> Result<Result<()>> {
        let p = self
            .slot
            .take()
            .ok_or_else(|| Error::Io(std::io::Error::other("pull planner lost")))?;
        let gate = p.gate().clone();
        let (p, r) = gate
            .run(move || {
                let mut p = p;
                let r = f(&mut p);
                Ok((p, r))
            })
            .await?;
        self.slot = Some(p);
        Ok(r)
    }

    /// Ends `lane` for `why`: its batches in flight go back to the queue,
    /// newest first so the queue keeps its order.
    fn end<S>(&mut self, lane: &mut Lane<S>, why: Error) {
        tracing::warn!(peer = %lane.peer, %why, "source left the pull; its WANTs go to the others");
        lane.writer = None;
        lane.reader.abort();
        while let Some((id, _)) = lane.inflight.pop_back() {
            if let (Some(batch), Some(p)) = (self.batches.remove(&id), self.slot.as_mut()) {
                p.requeue(batch);
            }
        }
        if matches!(
            why,
            Error::Timeout { .. } | Error::Network { .. } | Error::Io(_)
        ) {
            self.dead.push(lane.peer);
        }
        lane.report.error = Some(why.to_string());
        self.failures.push(why);
    }
}
