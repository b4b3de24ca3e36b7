//! The serving side of `/prox/blocks/1` and the access policy shared with
//! the control protocol.
//!
//! The server is stateless between requests: any `WANT` is answered from the
//! visible store (`main`), whose closure invariant means every block served
//! has its whole subtree available too. Staged blocks are never served.

use crate::links::Linker;
use crate::protocol::frames::{ClientFrame, ClosureStatus, ReadError, RefusedCode, ServerFrame};
use crate::protocol::limits::Limits;
use bytes::Bytes;
use futures::{AsyncRead, AsyncWrite, AsyncWriteExt};
use libp2p::PeerId;
use prox_engine::{BlockStore, Cid};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// Who may talk to this node and what it serves.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// When `Some`, only these peers may connect or make requests.
    pub allow: Option<HashSet<PeerId>>,
    /// Without an allowlist: serve every peer (`--open`). When false and
    /// `allow` is `None`, nobody but `followed` is served.
    pub open: bool,
    /// Peers this node follows (named by `/p2p/<id>` in a follow address):
    /// always allowed, so their announcements arrive.
    pub followed: HashSet<PeerId>,
    /// When `Some`, only these root names are served (listed, read, bulk).
    pub serve: Option<HashSet<String>>,
    /// Allow the bulk path (`WANT_CLOSURE`) for peers that are not on an
    /// allowlist (by default only allowlisted peers may use it).
    pub bulk_for_anyone: bool,
    /// Offer block patches (`Root{delta: true}`) and answer `WANT_DELTA`
    /// bases with `DELTA` frames when a patch is smaller than the block.
    pub delta: bool,
    /// Offer zstd-coded answers (`Root{zstd: true}`): answer `WANT_ZDELTA`
    /// with `ZBLOCK`/`ZDELTA` frames when they are the smallest.
    pub zstd: bool,
}

impl Access {
    /// True if `peer` may use this node at all: on the allowlist, or any
    /// peer when the node is open, or a followed peer.
    pub fn allows(&self, peer: &PeerId) -> bool {
        match &self.allow {
            Some(a) => a.contains(peer) || self.followed.contains(peer),
            None => self.open || self.followed.contains(peer),
        }
    }

    /// True if the operator named `peer` (allowlisted or followed): such
    /// peers may use the reserved session slots.
    pub fn named(&self, peer: &PeerId) -> bool {
        self.followed.contains(peer) || self.allow.as_ref().is_some_and(|a| a.contains(peer))
    }

    /// True if `name` is served.
    pub fn serves(&self, name: &str) -> bool {
        self.serve.as_ref().is_none_or(|s| s.contains(name))
    }

    /// True if `peer` may ask for a whole closure in one request.
    pub fn bulk_allowed(&self, peer: &PeerId) -> bool {
        match &self.allow {
            Some(a) => a.contains(peer),
            None => self.bulk_for_anyone,
        }
    }
}

/// Shared state of the block server.
pub(crate) struct ServeCtx<L: Linker> {
    pub(crate) linker: Arc<L>,
    pub(crate) store: Arc<dyn BlockStore>,
    pub(crate) access: Arc<Access>,
    pub(crate) limits: Limits,
    /// The node's store gate: reads of `store` run under a permit, so none
    /// outlives `Node::shutdown`.
    gate: crate::gate::Gate,
    sessions: Mutex<HashMap<PeerId, PeerSessions>>,
    /// Block requests in flight for all peers (`Limits::requests_total`).
    requests: Arc<tokio::sync::Semaphore>,
}

/// What one peer holds on this server.
struct PeerSessions {
    /// Open block sessions.
    open: usize,
    /// Its in-flight byte budget, in KiB permits.
    bytes: Arc<tokio::sync::Semaphore>,
    /// Its block requests in flight (`Limits::requests_per_peer`).
    requests: Arc<tokio::sync::Semaphore>,
}

impl<L: Linker> ServeCtx<L> {
    pub(crate) fn new(
        linker: Arc<L>,
        store: Arc<dyn BlockStore>,
        access: Arc<Access>,
        limits: Limits,
        gate: crate::gate::Gate,
    ) -> Self {
        ServeCtx {
            linker,
            store,
            access,
            gate,
            sessions: Mutex::new(HashMap::new()),
            requests: Arc::new(tokio::sync::Semaphore::new(limits.requests_total as usize)),
            limits,
        }
    }

    /// Claims a session slot for `peer`, or says why not.
    fn admit(&self, peer: PeerId) -> Result<SessionSlot<'_, L>, RefusedCode> {
        if !self.access.allows(&peer) {
            return Err(RefusedCode::Unauthorized);
        }
        let mut s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = s.values().map(|p| p.open).sum();
        let mine = s.get(&peer).map_or(0, |p| p.open);
        let cap = if self.access.named(&peer) {
            self.limits.sessions_total
        } else {
            self.limits
                .sessions_total
                .saturating_sub(self.limits.sessions_reserved)
        };
        if mine >= self.limits.sessions_per_peer as usize || total >= cap as usize {
            return Err(RefusedCode::Busy);
        }
        let kib = self.peer_budget_kib();
        let per_peer = self.limits.requests_per_peer as usize;
        let entry = s.entry(peer).or_insert_with(|| PeerSessions {
            open: 0,
            bytes: Arc::new(tokio::sync::Semaphore::new(kib as usize)),
            requests: Arc::new(tokio::sync::Semaphore::new(per_peer)),
        });
        entry.open += 1;
        Ok(SessionSlot {
            ctx: self,
            peer,
            bytes: entry.bytes.clone(),
            requests: entry.requests.clone(),
        })
    }

    /// Claims one block request of `slot`'s peer and one of the node, or
    /// `None` when either cap is reached (the request is answered `BUSY`).
    /// The claim is held until the answer is written.
    fn claim_request(&self, slot: &SessionSlot<'_, L>) -> Option<RequestClaim> {
        let peer = slot.requests.clone().try_acquire_owned().ok()?;
        let node = self.requests.clone().try_acquire_owned().ok()?;
        Some(RequestClaim {
            _peer: peer,
            _node: node,
        })
    }

    /// The per-peer in-flight budget in KiB permits.
    fn peer_budget_kib(&self) -> u32 {
        u32::try_from(self.limits.peer_inflight_bytes / 1024).unwrap_or(u32::MAX >> 4)
    }
}

struct SessionSlot<'a, L: Linker> {
    ctx: &'a ServeCtx<L>,
    peer: PeerId,
    /// The peer's in-flight byte budget, shared by its sessions.
    bytes: Arc<tokio::sync::Semaphore>,
    /// The peer's block requests in flight, shared by its sessions.
    requests: Arc<tokio::sync::Semaphore>,
}

/// One block request counted against the peer's and the node's caps until
/// its answer is written.
struct RequestClaim {
    _peer: tokio::sync::OwnedSemaphorePermit,
    _node: tokio::sync::OwnedSemaphorePermit,
}

impl<L: Linker> Drop for SessionSlot<'_, L> {
    fn drop(&mut self) {
        let mut s = self.ctx.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = s.get_mut(&self.peer) {
            n.open -= 1;
            if n.open == 0 {
                s.remove(&self.peer);
            }
        }
    }
}

async fn write_frames<W: AsyncWrite + Unpin>(
    w: &mut W,
    frames: &[ServerFrame],
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(16);
    for f in frames {
        head.clear();
        f.encode_header(&mut head);
        w.write_all(&head).await?;
        if let Some(p) = f.payload() {
            w.write_all(p).await?;
        }
    }
    Ok(())
}

/// Serves one inbound block stream until the client closes it, breaks the
/// protocol, or stays idle past the limit.
pub(crate) async fn serve<L, S>(ctx: Arc<ServeCtx<L>>, peer: PeerId, stream: S)
where
    L: Linker,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    use futures::AsyncReadExt;
    let (reader, writer) = stream.split();
    let mut reader = futures::io::BufReader::with_capacity(64 << 10, reader);
    // Writes time out like reads: a peer that stops reading loses the session.
    let writer = crate::stall::StallGuard::new(writer, ctx.limits.idle_timeout);
    let mut writer = futures::io::BufWriter::with_capacity(64 << 10, writer);
    let slot = match ctx.admit(peer) {
        Ok(slot) => slot,
        Err(code) => {
            tracing::info!(%peer, ?code, "refusing block session");
            let _ = write_frames(&mut writer, &[ServerFrame::Refused(code)]).await;
            let _ = writer.close().await;
            return;
        }
    };
    // The reader computes answers (store reads on a blocking thread) while
    // the writer is still sending the previous one: at most `QUEUED`
    // answers wait, so memory stays bounded by that many batch budgets.
    const QUEUED: usize = 2;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Job>(QUEUED);
    let read = async {
        loop {
            let frame =
                match tokio::time::timeout(ctx.limits.idle_timeout, ClientFrame::read(&mut reader))
                    .await
                {
                    Ok(Ok(Some(f))) => f,
                    Ok(Ok(None)) => break,
                    Ok(Err(ReadError::Violation(v))) => {
                        tracing::warn!(%peer, %v, "bad client frame; closing block session");
                        break;
                    }
                    Ok(Err(ReadError::Io(e))) => {
                        tracing::debug!(%peer, %e, "block session ended");
                        break;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "block session idle; closing");
                        break;
                    }
                };
            let batch_id = match &frame {
                ClientFrame::Want { batch, .. }
                | ClientFrame::WantDelta { batch, .. }
                | ClientFrame::WantClosure { batch, .. } => *batch,
            };
            // A plain WANT is a WANT_DELTA without bases; bases are
            // honoured only when this node offers deltas, zstd answers only
            // when it offers those.
            let frame = match frame {
                ClientFrame::Want {
                    batch,
                    max_bytes,
                    cids,
                } => Request::Want {
                    batch,
                    max_bytes,
                    items: cids.into_iter().map(|c| (c, Vec::new())).collect(),
                    zstd: false,
                },
                ClientFrame::WantDelta {
                    batch,
                    max_bytes,
                    mut items,
                    zstd,
                } => {
                    if !ctx.access.delta {
                        items.iter_mut().for_each(|(_, b)| b.clear());
                    }
                    Request::Want {
                        batch,
                        max_bytes,
                        items,
                        zstd: zstd && ctx.access.zstd,
                    }
                }
                ClientFrame::WantClosure {
                    batch,
                    max_bytes,
                    value_cid,
                    name,
                } => Request::Closure {
                    batch,
                    max_bytes,
                    value_cid,
                    name,
                },
            };
            let Some(claim) = ctx.claim_request(&slot) else {
                tracing::debug!(%peer, batch = batch_id, "too many block requests in flight; BUSY");
                if tx.send(Job::Busy(batch_id)).await.is_err() {
                    break;
                }
                continue;
            };
            let job = match frame {
                Request::Want {
                    batch,
                    max_bytes,
                    items,
                    zstd,
                } => {
                    let store = ctx.store.clone();
                    let budget = max_bytes.min(ctx.limits.batch_bytes).max(1) as u64;
                    let max_block = ctx.limits.max_block as usize;
                    // The answer's bytes count against the peer's budget
                    // until written; waiting here paces this peer only.
                    let kib = u32::try_from(budget.div_ceil(1024))
                        .unwrap_or(u32::MAX)
                        .min(ctx.peer_budget_kib());
                    let permit = match tokio::time::timeout(
                        ctx.limits.idle_timeout,
                        slot.bytes.clone().acquire_many_owned(kib),
                    )
                    .await
                    {
                        Ok(Ok(p)) => p,
                        _ => {
                            tracing::debug!(%peer, "peer byte budget stayed full; closing");
                            break;
                        }
                    };
                    match ctx
                        .gate
                        .run(move || Ok(answer_want(&*store, &items, budget, max_block, zstd)))
                        .await
                    {
                        Ok(mut frames) => {
                            frames.push(ServerFrame::Done { batch });
                            Job::Frames(frames, permit, claim)
                        }
                        // Node shutting down (or the job failed): end the session.
                        Err(_) => break,
                    }
                }
                Request::Closure {
                    batch,
                    max_bytes,
                    value_cid,
                    name,
                } => Job::Closure {
                    batch,
                    max_bytes,
                    value_cid,
                    name,
                    _claim: claim,
                },
            };
            if tx.send(job).await.is_err() {
                break;
            }
        }
        drop(tx);
    };
    let write = async {
        while let Some(job) = rx.recv().await {
            let ok = match job {
                Job::Frames(frames, _permit, _claim) => {
                    write_frames(&mut writer, &frames).await.is_ok() && writer.flush().await.is_ok()
                }
                Job::Busy(batch) => {
                    write_frames(&mut writer, &[ServerFrame::Busy { batch }])
                        .await
                        .is_ok()
                        && writer.flush().await.is_ok()
                }
                Job::Closure {
                    batch,
                    max_bytes,
                    value_cid,
                    name,
                    _claim,
                } => stream_closure(&ctx, peer, &mut writer, batch, max_bytes, value_cid, name)
                    .await
                    .is_ok(),
            };
            if !ok {
                break;
            }
        }
        // Dropping the receiver stops the reader at its next answer.
        drop(rx);
    };
    futures::join!(read, write);
    let _ = writer.close().await;
}

/// A block request as the server handles it.
enum Request {
    /// `WANT`, `WANT_DELTA` or `WANT_ZDELTA`: CIDs, each with the bases
    /// to patch against, and whether zstd answers may be sent.
    Want {
        batch: u32,
        max_bytes: u32,
        items: Vec<(Cid, Vec<Cid>)>,
        zstd: bool,
    },
    /// `WANT_CLOSURE`.
    Closure {
        batch: u32,
        max_bytes: u64,
        value_cid: Cid,
        name: String,
    },
}

/// Work for the writer half of a block session, in request order.
enum Job {
    /// A whole `WANT` answer, `DONE` included, with the share of the
    /// peer's byte budget and the request claim it holds until written.
    Frames(
        Vec<ServerFrame>,
        tokio::sync::OwnedSemaphorePermit,
        RequestClaim,
    ),
    /// A request not served: too many in flight.
    Busy(u32),
    /// A `WANT_CLOSURE` to stream.
    Closure {
        batch: u32,
        max_bytes: u64,
        value_cid: Cid,
        name: String,
        _claim: RequestClaim,
    },
}

/// Answers one `WANT`: blocks in order, `MISSING` for absent ones, `DEFER`
/// once `budget` bytes were sent (at least one block always goes out). Each
/// block goes in the smallest form offered (see [`smallest`]).
fn answer_want(
    store: &dyn BlockStore,
    items: &[(Cid, Vec<Cid>)],
    budget: u64,
    max_block: usize,
    zstd: bool,
) -> Vec<ServerFrame> {
    let mut out = Vec::with_capacity(items.len() + 1);
    let mut sent = 0u64;
    let mut over = false;
    for (cid, bases) in items {
        if over {
            out.push(ServerFrame::Defer);
            continue;
        }
        match store.get(cid) {
            Ok(Some(b)) if b.len() <= max_block => {
                let old = concat_bases(store, bases);
                let frame = smallest(b, old.as_deref(), zstd);
                let len = frame.payload().map_or(0, |p| p.len() as u64);
                if sent > 0 && sent + len > budget {
                    over = true;
                    out.push(ServerFrame::Defer);
                } else {
                    sent += len;
                    out.push(frame);
                }
            }
            Ok(_) => out.push(ServerFrame::Missing),
            Err(e) => {
                tracing::warn!(%cid, %e, "cannot serve block");
                out.push(ServerFrame::Missing);
            }
        }
    }
    out
}

/// The smallest of the forms `block` may travel in: whole (`BLOCK`); with
/// `old` (the client's bases, concatenated), a patch (`DELTA`); with `zstd`,
/// a zstd frame (`ZBLOCK`, and with `old` a frame against it as prefix,
/// `ZDELTA`). A form replaces the whole block only when strictly smaller.
fn smallest(block: Bytes, old: Option<&[u8]>, zstd: bool) -> ServerFrame {
    let mut best: Option<ServerFrame> = None;
    let mut offer = |f: ServerFrame| {
        let len = |f: &ServerFrame| f.payload().map_or(0, |p| p.len());
        if len(&f) < best.as_ref().map_or(block.len(), len) {
            best = Some(f);
        }
    };
    if let Some(old) = old {
        offer(ServerFrame::Delta(crate::delta::encode(old, &block).into()));
    }
    if zstd {
        let level = crate::delta::LEVEL;
        if let Some(z) = crate::delta::compress(&[], &block, level) {
            offer(ServerFrame::ZBlock(z.into()));
        }
        if let Some(z) = old.and_then(|old| crate::delta::compress(old, &block, level)) {
            offer(ServerFrame::ZDelta(z.into()));
        }
    }
    best.unwrap_or(ServerFrame::Block(block))
}

/// The concatenation of `bases` when there are some and all are in
/// `store` (the client rebuilds against the same bytes).
pub(crate) fn concat_bases(store: &dyn BlockStore, bases: &[Cid]) -> Option<Vec<u8>> {
    if bases.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for c in bases {
        out.extend_from_slice(&store.get(c).ok().flatten()?);
    }
    Some(out)
}

/// Streams the closure of the named root `name` breadth-first, parents
/// before children, each block once, within the server's byte budget.
async fn stream_closure<L, W>(
    ctx: &Arc<ServeCtx<L>>,
    peer: PeerId,
    writer: &mut W,
    batch: u32,
    max_bytes: u64,
    value_cid: Cid,
    name: String,
) -> std::io::Result<()>
where
    L: Linker,
    W: AsyncWrite + Unpin,
{
    if !ctx.access.bulk_allowed(&peer) || !ctx.access.serves(&name) {
        let end = ServerFrame::ClosureEnd {
            batch,
            status: ClosureStatus::NotAllowed,
        };
        write_frames(writer, &[end]).await?;
        return writer.flush().await;
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Vec<(Cid, Bytes)>, ClosureStatus>>(2);
    let budget = max_bytes.min(ctx.limits.bulk_budget_bytes);
    let chunk_bytes = ctx.limits.batch_bytes as u64;
    let max_block = ctx.limits.max_block as usize;
    let store = ctx.store.clone();
    let linker = ctx.linker.clone();
    let Ok(permit) = ctx.gate.enter() else {
        // The node is shutting down: end the session without an answer.
        return Err(std::io::Error::other("node shutting down"));
    };
    // The walk ends when the session drops `rx` (its next send fails), so
    // the permit is held no longer than the session that asked for it.
    let producer = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let status = walk_closure(
            &*store,
            &*linker,
            &name,
            value_cid,
            budget,
            chunk_bytes,
            max_block,
            &tx,
        );
        let _ = tx.blocking_send(Err(status));
    });
    let mut status = ClosureStatus::Budget;
    while let Some(item) = rx.recv().await {
        match item {
            Ok(chunk) => {
                let frames: Vec<ServerFrame> = chunk
                    .into_iter()
                    .map(|(cid, bytes)| ServerFrame::ClosureBlock { cid, bytes })
                    .collect();
                if let Err(e) = write_frames(writer, &frames).await {
                    producer.abort();
                    return Err(e);
                }
            }
            Err(s) => {
                status = s;
                break;
            }
        }
    }
    write_frames(writer, &[ServerFrame::ClosureEnd { batch, status }]).await?;
    writer.flush().await
}

#[allow(clippy::too_many_arguments)]
fn walk_closure<L: Linker>(
    store: &dyn BlockStore,
    linker: &L,
    name: &str,
    value_cid: Cid,
    budget: u64,
    chunk_bytes: u64,
    max_block: usize,
    tx: &tokio::sync::mpsc::Sender<Result<Vec<(Cid, Bytes)>, ClosureStatus>>,
) -> ClosureStatus {
    let value = match store.root(name) {
        Ok(Some(v)) if Cid::of(&v) == value_cid => v,
        _ => return ClosureStatus::RootChanged,
    };
    let Ok(roots) = linker.root_links(&value) else {
        return ClosureStatus::RootChanged;
    };
    let mut seen: HashSet<Cid> = HashSet::new();
    let mut queue: VecDeque<(Cid, L::Kind)> = VecDeque::new();
    for (c, k) in roots {
        if seen.insert(c) {
            queue.push_back((c, k));
        }
    }
    let mut sent = 0u64;
    let mut chunk = Vec::new();
    let mut in_chunk = 0u64;
    while let Some((cid, kind)) = queue.pop_front() {
        let bytes = match store.get(&cid) {
            Ok(Some(b)) if b.len() <= max_block => b,
            // A hole in our own closure: stop; the client's WANT fallback
            // will see MISSING for it.
            _ => return ClosureStatus::Budget,
        };
        if sent + bytes.len() as u64 > budget {
            let _ = tx.blocking_send(Ok(chunk));
            return ClosureStatus::Budget;
        }
        match linker.links(&kind, &bytes) {
            Ok(children) => {
                for (c, k) in children {
                    if seen.insert(c) {
                        queue.push_back((c, k));
                    }
                }
            }
            Err(_) => return ClosureStatus::Budget,
        }
        sent += bytes.len() as u64;
        in_chunk += bytes.len() as u64;
        chunk.push((cid, bytes));
        if in_chunk >= chunk_bytes {
            in_chunk = 0;
            if tx.blocking_send(Ok(std::mem::take(&mut chunk))).is_err() {
                return ClosureStatus::Budget;
            }
        }
    }
    if !chunk.is_empty() && tx.blocking_send(Ok(chunk)).is_err() {
        return ClosureStatus::Budget;
    }
    ClosureStatus::Complete
}
