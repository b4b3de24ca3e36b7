//! The pull state machine: fetch the closure of a remote root, verify every
//! block, stage it, publish descendant-first, then compare-and-swap.
//!
//! [`WantPlanner`] is the synchronous core (no I/O besides the block stores): it
//! knows which CIDs are wanted, with the kind each parent declared and the
//! dependent round ("wave") that discovered them. [`drive`] runs it over a
//! `/prox/blocks/1` stream: a reader task turns frames into whole batches
//! (bounded by the per-batch byte budget), the driver keeps up to
//! `inflight_batches` `WANT`s outstanding and hands each answered batch to
//! the planner on a blocking thread.
//!
//! Publication rule: a block goes to `main` as soon as all its children are
//! in `main` (leaves at once, parents when their last child lands); until
//! then it waits in `staging`. Every intermediate state therefore satisfies
//! the closure invariant of [`crate::stores`], and a retry skips what was
//! published and walks what was staged locally, fetching only the rest.

mod drive;

pub(crate) use drive::{
    drive, planner_mut, received, refused, seconds_since, within_budget, Stopped,
};

use crate::error::{Error, Result, Violation};
use crate::gate::Gate;
use crate::links::Linker;
use crate::pacing::batch_len;
use crate::protocol::frames::{ClientFrame, ServerFrame};
use crate::protocol::limits::Limits;
use crate::stores::Stores;
use bytes::Bytes;
use libp2p::PeerId;
use prox_engine::store::{PinSet, Verified};
use prox_engine::Cid;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// Outcome of a pull, as printed by `prox sync pull --json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PullReport {
    /// The first CID the new root value points at (hex), `None` for an
    /// empty root.
    pub root: Option<String>,
    /// Blocks received over the network and accepted.
    pub blocks_fetched: u64,
    /// Bytes of those blocks (as stored, patches rebuilt).
    pub bytes_fetched: u64,
    /// Of those blocks, how many arrived as patches against an old block
    /// (`DELTA` or `ZDELTA`).
    pub blocks_patched: u64,
    /// Of those blocks, how many arrived as zstd frames (`ZBLOCK` or
    /// `ZDELTA`).
    pub blocks_compressed: u64,
    /// Block payload bytes received: whole blocks and patches as sent.
    pub bytes_received: u64,
    /// Subtrees not fetched because their root block was already present.
    pub blocks_skipped: u64,
    /// Blocks found in staging from an earlier, interrupted pull.
    pub blocks_resumed: u64,
    /// Dependent network round trips: control exchange plus block rounds.
    pub round_trips: u64,
    /// Wall time.
    pub seconds: f64,
    /// Whether the bulk (whole-closure) path was used.
    pub bulk: bool,
    /// Requests the server answered `BUSY` (each asked again after a pause).
    pub busy: u64,
    /// True when the local root already had this value.
    pub up_to_date: bool,
    /// With several sources: what each contributed, and why any left
    /// early. Empty for a single-source pull.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceReport>,
}

/// What one source contributed to a pull, as listed in
/// [`PullReport::sources`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SourceReport {
    /// The source's peer id.
    pub peer: String,
    /// Blocks it sent that were accepted.
    pub blocks: u64,
    /// Payload bytes it sent (whole blocks and patches as sent).
    pub bytes: u64,
    /// Why it stopped serving this pull before the end, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One wanted block.
#[derive(Debug, Clone)]
struct Want<K> {
    cid: Cid,
    kind: K,
    wave: u64,
    /// The old block at this position and its neighbours of the same kind,
    /// all in `main`, in tree order: a patch for this block copies from
    /// them, and their links pair this block's children with old ones.
    /// Empty: ask for the whole block.
    bases: Vec<Cid>,
}

/// The old block paired with a new one, and the bases of its patch.
type Base = (Option<Cid>, Vec<Cid>);

/// A checked block: what was wanted, its hashed bytes, its typed children.
type Checked<K> = (Want<K>, Verified, Vec<(Cid, K)>);

/// A hashed block and its decoded, typed children.
type Decoded<K> = (Verified, Vec<(Cid, K)>);

/// Below this many bytes a batch is checked on the calling thread; above,
/// blocks are hashed and decoded in parallel (rayon).
const PARALLEL_CHECK_BYTES: usize = 256 << 10;

/// A `WANT` batch in flight.
#[derive(Debug, Clone)]
pub(crate) struct Batch<K> {
    id: u32,
    items: Vec<Want<K>>,
    /// Asked as `WANT_ZDELTA`: zstd-coded answers are valid.
    zstd: bool,
}

impl<K> Batch<K> {
    /// The id its answer carries.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The request for this batch: `WANT_ZDELTA` in a pull that takes
    /// zstd-coded answers, else `WANT_DELTA` when any item has patch bases,
    /// else a plain `WANT`; answers fit `max_bytes`.
    pub(crate) fn frame(&self, max_bytes: u32) -> ClientFrame {
        if self.zstd || self.items.iter().any(|w| !w.bases.is_empty()) {
            ClientFrame::WantDelta {
                batch: self.id,
                max_bytes,
                items: self
                    .items
                    .iter()
                    .map(|w| (w.cid, w.bases.clone()))
                    .collect(),
                zstd: self.zstd,
            }
        } else {
            ClientFrame::Want {
                batch: self.id,
                max_bytes,
                cids: self.items.iter().map(|w| w.cid).collect(),
            }
        }
    }
}

/// Who waits for a block to become complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parent {
    Root,
    Block(Cid),
}

/// The synchronous pull core. See the module docs.
pub(crate) struct WantPlanner<L: Linker> {
    linker: Arc<L>,
    stores: Stores,
    /// The node's store gate: every blocking step runs under a permit.
    gate: Gate,
    peer: PeerId,
    /// CIDs to request, in discovery order.
    queue: VecDeque<Cid>,
    /// Kind and wave of every queued or in-flight CID.
    wanted: HashMap<Cid, Want<L::Kind>>,
    /// Every CID this session has decided about (wanted, pending, complete).
    known: HashSet<Cid>,
    /// CIDs whose whole closure is in `main`.
    complete: HashSet<Cid>,
    /// Staged blocks waiting for `n` children to become complete.
    pending: HashMap<Cid, (L::Kind, usize)>,
    /// Child -> blocks (or the root value) waiting for it.
    parents: HashMap<Cid, Vec<Parent>>,
    /// Root links not yet complete.
    roots_missing: usize,
    next_batch: u32,
    pins: PinSet,
    /// Blocks decided for `main` since the last flush, descendant-first.
    to_main: Vec<Verified>,
    /// Received blocks decided for staging since the last flush.
    to_staging: HashMap<Cid, Verified>,
    /// Blocks and bytes of the last answered batch (for batch sizing).
    seen_blocks: u64,
    seen_bytes: u64,
    /// Largest block (and rebuilt patch) accepted.
    pub(crate) max_block: u32,
    /// Ask with `WANT_ZDELTA`: the source offers zstd-coded answers.
    pub(crate) zstd: bool,
    pub(crate) report: PullReport,
}

/// Where the bytes of a block being placed come from.
enum Placed {
    /// Received and hashed by this session.
    Received(Verified),
    /// Read back from staging (left by an earlier pull).
    Staged(Bytes),
}

impl<L: Linker> WantPlanner<L> {
    /// Starts a pull of the closure of `value` (a named root's bytes).
    /// Subtrees already in `main` are skipped, staged ones walked locally.
    /// With `old` (the previous local value, whose closure is in `main`),
    /// changed blocks are paired with their old versions by position and
    /// may arrive as patches. Every later step that touches the stores runs
    /// under a permit of `gate` (see [`step`]).
    pub(crate) fn new(
        linker: Arc<L>,
        stores: Stores,
        gate: Gate,
        peer: PeerId,
        value: &[u8],
        old: Option<&[u8]>,
    ) -> Result<Self> {
        let roots = linker.root_links(value)?;
        let bases = match old.map(|v| linker.root_links(v)) {
            Some(Ok(old)) => crate::delta::bases_by_position(&roots, &old),
            _ => vec![(None, Vec::new()); roots.len()],
        };
        let pins = stores.pins.set();
        let mut p = WantPlanner {
            linker,
            stores,
            gate,
            peer,
            queue: VecDeque::new(),
            wanted: HashMap::new(),
            known: HashSet::new(),
            complete: HashSet::new(),
            pending: HashMap::new(),
            parents: HashMap::new(),
            roots_missing: 0,
            next_batch: 0,
            pins,
            to_main: Vec::new(),
            to_staging: HashMap::new(),
            seen_blocks: 0,
            seen_bytes: 0,
            max_block: Limits::default().max_block,
            zstd: false,
            report: PullReport {
                root: roots.first().map(|(c, _)| c.to_hex()),
                ..PullReport::default()
            },
        };
        let mut seen = HashSet::new();
        let mut local = Vec::new();
        for ((cid, kind), base) in roots.into_iter().zip(bases) {
            if !seen.insert(cid) {
                continue;
            }
            if p.link_child(Parent::Root, cid, kind, base, 0, &mut local)? {
                p.roots_missing += 1;
            }
        }
        p.walk_local(local)?;
        p.flush()?;
        Ok(p)
    }

    /// Names `peer` as the source of the next answers (in violations and
    /// errors), for pulls that fetch from several peers.
    pub(crate) fn set_source(&mut self, peer: PeerId) {
        self.peer = peer;
    }

    /// The node's store gate (blocking steps run under its permits).
    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// CIDs waiting to be requested.
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// True when the whole closure is in `main`.
    pub(crate) fn done(&self) -> bool {
        self.roots_missing == 0
    }

    /// True when the main store holds none of the blocks this pull needs yet
    /// (the receiver is empty for this dataset: the bulk path pays off).
    pub(crate) fn nothing_local(&self) -> bool {
        self.complete.is_empty() && self.pending.is_empty()
    }

    /// Takes the next batch: a full one, or a partial one when `flush`.
    pub(crate) fn next_batch(&mut self, max: usize, flush: bool) -> Option<Batch<L::Kind>> {
        if self.queue.is_empty() || (self.queue.len() < max && !flush) {
            return None;
        }
        let n = self.queue.len().min(max);
        let items = self
            .queue
            .drain(..n)
            .filter_map(|c| self.wanted.get(&c).cloned())
            .collect::<Vec<_>>();
        if items.is_empty() {
            return None;
        }
        self.next_batch = self.next_batch.wrapping_add(1);
        Some(Batch {
            id: self.next_batch,
            items,
            zstd: self.zstd,
        })
    }

    /// Puts an unanswered batch back at the front of the queue (its CIDs
    /// are still in `wanted`). Batches go back newest first, so the queue
    /// keeps its order.
    pub(crate) fn requeue(&mut self, batch: Batch<L::Kind>) {
        for item in batch.items.into_iter().rev() {
            self.queue.push_front(item.cid);
        }
    }

    /// Accepts the answer to `batch`. Every block is verified (hash, then
    /// decode as the declared kind) before any of them is stored: on a
    /// violation nothing of this batch is kept.
    pub(crate) fn on_batch(
        &mut self,
        batch: Batch<L::Kind>,
        frames: Vec<ServerFrame>,
    ) -> Result<()> {
        if frames.len() != batch.items.len() {
            return Err(self.violation(Violation::Protocol(format!(
                "batch {} answered with {} frames for {} CIDs",
                batch.id,
                frames.len(),
                batch.items.len()
            ))));
        }
        // Hash and decode every block of the batch (in parallel when large)
        // before anything is stored; the first violation in order wins.
        let total: usize = frames
            .iter()
            .map(|f| f.payload().map_or(0, |p| p.len()))
            .sum();
        let zstd = batch.zstd;
        let check = |(item, frame): (&Want<L::Kind>, &ServerFrame)| match frame {
            ServerFrame::Block(bytes) => Some(self.verify(&item.cid, &item.kind, bytes.clone())),
            ServerFrame::Delta(_) | ServerFrame::ZBlock(_) | ServerFrame::ZDelta(_) => Some(
                self.rebuild(item, frame, zstd)
                    .and_then(|bytes| self.verify(&item.cid, &item.kind, bytes)),
            ),
            _ => None,
        };
        let checked: Vec<Option<Result<Decoded<L::Kind>>>> = if total >= PARALLEL_CHECK_BYTES {
            batch
                .items
                .par_iter()
                .zip(frames.par_iter())
                .map(check)
                .collect()
        } else {
            batch.items.iter().zip(frames.iter()).map(check).collect()
        };
        let mut accepted = Vec::new();
        let mut missing = None;
        let mut deferred = Vec::new();
        for ((item, frame), checked) in batch.items.into_iter().zip(frames).zip(checked) {
            match frame {
                ServerFrame::Block(_)
                | ServerFrame::Delta(_)
                | ServerFrame::ZBlock(_)
                | ServerFrame::ZDelta(_) => {
                    if matches!(frame, ServerFrame::Delta(_) | ServerFrame::ZDelta(_)) {
                        self.report.blocks_patched += 1;
                    }
                    if matches!(frame, ServerFrame::ZBlock(_) | ServerFrame::ZDelta(_)) {
                        self.report.blocks_compressed += 1;
                    }
                    let (block, children) = checked.ok_or_else(|| {
                        self.violation(Violation::Protocol("unchecked block".into()))
                    })??;
                    accepted.push((item, block, children));
                }
                ServerFrame::Missing => {
                    missing.get_or_insert(item.cid);
                }
                ServerFrame::Defer => deferred.push(item.cid),
                other => {
                    return Err(self.violation(Violation::Protocol(format!(
                        "unexpected frame in a WANT answer: {other:?}"
                    ))))
                }
            }
        }
        let blocks = accepted.len() as u64;
        if blocks == 0 && missing.is_none() && !deferred.is_empty() {
            // A server sends at least one block per answer before it may
            // defer: an answer of only DEFERs makes no progress, and
            // accepting it would let a peer keep a pull looping forever.
            return Err(self.violation(Violation::Protocol(format!(
                "batch {} answered DEFER for every CID (no progress)",
                batch.id
            ))));
        }
        if blocks > 0 {
            self.note_batch(blocks, total as u64);
        }
        self.report.bytes_received += total as u64;
        // Deferred CIDs go back to the front, keeping their wave: deferral is
        // flow control, not a data dependency.
        for c in deferred.into_iter().rev() {
            self.queue.push_front(c);
        }
        self.accept(accepted)?;
        if let Some(cid) = missing {
            return Err(Error::RemoteMissing {
                peer: self.peer,
                cid,
            });
        }
        Ok(())
    }

    /// Accepts a chunk of a closure stream (parent before child). A block is
    /// acceptable if it is wanted or referenced by an earlier block of the
    /// chunk; blocks this session already has are ignored.
    pub(crate) fn on_closure_chunk(&mut self, blocks: Vec<(Cid, Bytes)>, wave: u64) -> Result<()> {
        // Hashing needs no context: do it for the whole chunk in parallel;
        // kinds come from parents, so decoding stays in stream order.
        let total: usize = blocks.iter().map(|(_, b)| b.len()).sum();
        let hash = |(cid, bytes): (Cid, Bytes)| (cid, Verified::new(bytes));
        let hashed: Vec<(Cid, Verified)> = if total >= PARALLEL_CHECK_BYTES {
            blocks.into_par_iter().map(hash).collect()
        } else {
            blocks.into_iter().map(hash).collect()
        };
        let mut expect: HashMap<Cid, L::Kind> = HashMap::new();
        self.report.bytes_received += total as u64;
        let mut accepted = Vec::new();
        for (cid, block) in hashed {
            let kind = match self.wanted.get(&cid) {
                Some(w) => w.kind.clone(),
                None => match expect.get(&cid) {
                    Some(k) => k.clone(),
                    None if self.known.contains(&cid) => continue,
                    None => return Err(self.violation(Violation::Unsolicited { cid })),
                },
            };
            if *block.cid() != cid {
                return Err(self.violation(Violation::HashMismatch {
                    cid,
                    actual: *block.cid(),
                }));
            }
            let children = self.decode(&cid, &kind, block.bytes())?;
            for (c, k) in &children {
                expect.entry(*c).or_insert_with(|| k.clone());
            }
            expect.remove(&cid);
            accepted.push((
                Want {
                    cid,
                    kind,
                    wave,
                    bases: Vec::new(),
                },
                block,
                children,
            ));
        }
        // Children precede parents so that a block whose subtree arrived in
        // the same chunk is published right after it.
        accepted.reverse();
        self.accept(accepted)
    }

    /// Rebuilds the block `item` from a `DELTA`, `ZDELTA` (against its
    /// bases, read from `main`) or `ZBLOCK` answer. A patch for a CID sent
    /// without a base, a zstd frame in answer to a request that did not
    /// offer them, or one that does not decode is a violation; the result is
    /// hashed like any block.
    fn rebuild(&self, item: &Want<L::Kind>, frame: &ServerFrame, zstd: bool) -> Result<Bytes> {
        let max = self.max_block as u64;
        let bad = |e: crate::delta::PatchError| {
            self.violation(Violation::BadPatch {
                cid: item.cid,
                reason: e.to_string(),
            })
        };
        let compressed = matches!(frame, ServerFrame::ZBlock(_) | ServerFrame::ZDelta(_));
        if compressed && !zstd {
            return Err(self.violation(Violation::Protocol(format!(
                "zstd answer for {} which was asked without WANT_ZDELTA",
                item.cid
            ))));
        }
        let patch = match frame {
            ServerFrame::ZBlock(z) => {
                return crate::delta::decompress(&[], z, max)
                    .map(Bytes::from)
                    .map_err(bad)
            }
            ServerFrame::Delta(p) | ServerFrame::ZDelta(p) => p,
            _ => return Err(self.violation(Violation::Protocol("not a block answer".into()))),
        };
        if item.bases.is_empty() {
            return Err(self.violation(Violation::Protocol(format!(
                "DELTA for {} which was asked without a base",
                item.cid
            ))));
        }
        let mut old = Vec::new();
        for c in &item.bases {
            let b = self
                .stores
                .main
                .get(c)?
                .ok_or(prox_engine::Error::NotFound { cid: *c })?;
            old.extend_from_slice(&b);
        }
        let rebuilt = if compressed {
            crate::delta::decompress(&old, patch, max)
        } else {
            crate::delta::apply(&old, patch, max)
        };
        rebuilt.map(Bytes::from).map_err(bad)
    }

    /// Hashes `bytes` (the one hash a received block gets: the stores take
    /// the resulting [`Verified`] as is) and decodes them as `kind`.
    fn verify(&self, cid: &Cid, kind: &L::Kind, bytes: Bytes) -> Result<Decoded<L::Kind>> {
        let block = Verified::new(bytes);
        if block.cid() != cid {
            return Err(self.violation(Violation::HashMismatch {
                cid: *cid,
                actual: *block.cid(),
            }));
        }
        let children = self.decode(cid, kind, block.bytes())?;
        Ok((block, children))
    }

    fn decode(&self, cid: &Cid, kind: &L::Kind, bytes: &[u8]) -> Result<Vec<(Cid, L::Kind)>> {
        self.linker.links(kind, bytes).map_err(|e| {
            self.violation(Violation::WrongKind {
                cid: *cid,
                kind: format!("{kind:?}"),
                reason: e.to_string(),
            })
        })
    }

    fn violation(&self, violation: Violation) -> Error {
        Error::Misbehaving {
            peer: self.peer,
            violation: Box::new(violation),
        }
    }

    /// Stages or publishes verified blocks, then makes both stores durable.
    fn accept(&mut self, blocks: Vec<Checked<L::Kind>>) -> Result<()> {
        let mut local = Vec::new();
        for (want, block, children) in blocks {
            if self.wanted.remove(&want.cid).is_none() && !self.known.insert(want.cid) {
                // Already handled (duplicate in a closure stream).
                continue;
            }
            if self.complete.contains(&want.cid) || self.pending.contains_key(&want.cid) {
                continue;
            }
            self.report.blocks_fetched += 1;
            self.report.bytes_fetched += block.bytes().len() as u64;
            self.report.round_trips = self.report.round_trips.max(want.wave);
            self.place(
                want.cid,
                want.kind,
                Placed::Received(block),
                children,
                want.wave,
                &want.bases,
                &mut local,
            )?;
        }
        self.walk_local(local)?;
        self.flush()?;
        self.stores.staging.commit()?;
        self.stores.main.commit()?;
        Ok(())
    }

    /// Writes the blocks decided on since the last flush: staging first,
    /// then `main` in the order they were published (descendant-first), each
    /// store in one call and without a second hash.
    fn flush(&mut self) -> Result<()> {
        if !self.to_staging.is_empty() {
            let staged: Vec<Verified> =
                std::mem::take(&mut self.to_staging).into_values().collect();
            let _staging = self.stores.lock_staging();
            self.stores.staging.put_verified_many(&staged)?;
        }
        if !self.to_main.is_empty() {
            let blocks = std::mem::take(&mut self.to_main);
            self.stores.main.put_verified_many(&blocks)?;
        }
        Ok(())
    }

    /// Mean block size of the last answered batch, which sizes the next
    /// `WANT`s so that one batch fits the server's byte budget (several
    /// then pipeline, instead of one batch coming back mostly `DEFER`red).
    /// The last batch, not the whole pull: blocks of one tree level are
    /// alike and levels differ by orders of magnitude.
    fn note_batch(&mut self, blocks: u64, bytes: u64) {
        self.seen_blocks = blocks;
        self.seen_bytes = bytes;
    }

    /// CIDs per `WANT`: `max`, or fewer once the mean block size says that
    /// `max` blocks would not fit the per-batch byte budget.
    pub(crate) fn batch_len(&self, max: usize, budget: u32) -> usize {
        batch_len(max, budget, self.seen_blocks, self.seen_bytes)
    }

    /// Records `cid` as a child of `parent`. Returns true if the parent must
    /// wait for it (it is not complete yet). May queue it for fetching or
    /// push it on `local` when it is staged from an earlier pull.
    fn link_child(
        &mut self,
        parent: Parent,
        cid: Cid,
        kind: L::Kind,
        base: Base,
        wave: u64,
        local: &mut Vec<(Cid, L::Kind)>,
    ) -> Result<bool> {
        if self.complete.contains(&cid) {
            return Ok(false);
        }
        if !self.known.contains(&cid) && self.stores.main.has(&cid)? {
            // Closure invariant: present in main => whole subtree present.
            self.known.insert(cid);
            self.complete.insert(cid);
            self.pins.add(cid);
            self.report.blocks_skipped += 1;
            return Ok(false);
        }
        self.parents.entry(cid).or_default().push(parent);
        if self.known.insert(cid) {
            if self.stores.staging.has(&cid)? {
                local.push((cid, kind));
            } else {
                self.queue.push_back(cid);
                self.wanted.insert(
                    cid,
                    Want {
                        cid,
                        kind,
                        wave: wave + 1,
                        bases: base.1,
                    },
                );
            }
        }
        Ok(true)
    }

    /// Walks staged blocks left by an earlier pull without touching the
    /// network. A staged block that no longer decodes as the kind now
    /// declared is dropped from consideration and fetched instead.
    fn walk_local(&mut self, mut stack: Vec<(Cid, L::Kind)>) -> Result<()> {
        while let Some((cid, kind)) = stack.pop() {
            let staged = self.stores.staging.get(&cid)?;
            let decoded = staged
                .as_ref()
                .map(|b| (b.clone(), self.linker.links(&kind, b)));
            match decoded {
                Some((bytes, Ok(children))) => {
                    self.report.blocks_resumed += 1;
                    self.place(
                        cid,
                        kind,
                        Placed::Staged(bytes),
                        children,
                        0,
                        &[],
                        &mut stack,
                    )?;
                }
                _ => {
                    self.queue.push_back(cid);
                    self.wanted.insert(
                        cid,
                        Want {
                            cid,
                            kind,
                            wave: 1,
                            bases: Vec::new(),
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// Publishes `cid` if all its children are complete, else stages it.
    /// With `olds` (its old version and neighbours in `main`), each child
    /// is paired with an old child (see [`Self::child_bases`]).
    #[allow(clippy::too_many_arguments)]
    fn place(
        &mut self,
        cid: Cid,
        kind: L::Kind,
        block: Placed,
        children: Vec<(Cid, L::Kind)>,
        wave: u64,
        olds: &[Cid],
        local: &mut Vec<(Cid, L::Kind)>,
    ) -> Result<()> {
        let bases = self.child_bases(&kind, olds, &children);
        let mut waiting = 0usize;
        let mut seen = HashSet::new();
        for ((c, k), b) in children.into_iter().zip(bases) {
            if seen.insert(c) && self.link_child(Parent::Block(cid), c, k, b, wave, local)? {
                waiting += 1;
            }
        }
        if waiting == 0 {
            self.publish(cid, Some(block))
        } else {
            if let Placed::Received(v) = block {
                self.to_staging.insert(cid, v);
            }
            self.pending.insert(cid, (kind, waiting));
            Ok(())
        }
    }

    /// The old child paired with each child and its patch bases (see
    /// [`crate::delta::bases_by_position`]), against the links of `olds`
    /// (the paired old block and its neighbours, in tree order) taken
    /// together, so a child whose chunk moved to a neighbour still finds
    /// its old version. None without old blocks, or when one cannot be read
    /// or decoded (then blocks come whole).
    fn child_bases(&self, kind: &L::Kind, olds: &[Cid], children: &[(Cid, L::Kind)]) -> Vec<Base> {
        let mut old = Vec::new();
        for c in olds {
            let links = self
                .stores
                .main
                .get(c)
                .ok()
                .flatten()
                .and_then(|bytes| self.linker.links(kind, &bytes).ok());
            match links {
                Some(l) => old.extend(l),
                None => return vec![(None, Vec::new()); children.len()],
            }
        }
        crate::delta::bases_by_position(children, &old)
    }

    /// Moves `cid` into `main` (its children are all there), then every
    /// waiting parent whose last missing child this was, descendant-first.
    fn publish(&mut self, cid: Cid, block: Option<Placed>) -> Result<()> {
        let mut stack = vec![(cid, block)];
        while let Some((cid, block)) = stack.pop() {
            let block = match block {
                Some(Placed::Received(v)) => v,
                Some(Placed::Staged(b)) => Verified::check(&cid, b)?,
                None => match self.to_staging.remove(&cid) {
                    Some(v) => v,
                    None => match self.stores.staging.get(&cid)? {
                        Some(b) => Verified::check(&cid, b)?,
                        // A concurrent pull may have published it and
                        // cleaned staging.
                        None => Verified::check(
                            &cid,
                            self.stores
                                .main
                                .get(&cid)?
                                .ok_or(prox_engine::Error::NotFound { cid })?,
                        )?,
                    },
                },
            };
            self.pins.add(cid);
            self.to_main.push(block);
            self.complete.insert(cid);
            for parent in self.parents.remove(&cid).unwrap_or_default() {
                match parent {
                    Parent::Root => self.roots_missing -= 1,
                    Parent::Block(p) => {
                        let ready = match self.pending.get_mut(&p) {
                            Some((_, n)) => {
                                *n -= 1;
                                *n == 0
                            }
                            None => false,
                        };
                        if ready {
                            self.pending.remove(&p);
                            stack.push((p, None));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{batch_len, drive, Stopped, WantPlanner};
    use crate::error::Error;
    use crate::links::Linker;
    use crate::protocol::limits::Limits;
    use crate::stores::Stores;
    use prox_engine::{Cid, MemStore};
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::Duration;

    /// Root values are concatenated CIDs of childless blocks.
    struct Flat;

    impl Linker for Flat {
        type Kind = ();
        fn root_links(&self, value: &[u8]) -> prox_engine::Result<Vec<(Cid, ())>> {
            Ok(value
                .chunks_exact(32)
                .map(|c| (Cid(c.try_into().unwrap_or([0; 32])), ()))
                .collect())
        }
        fn links(&self, _: &(), _: &[u8]) -> prox_engine::Result<Vec<(Cid, ())>> {
            Ok(Vec::new())
        }
    }

    /// A block stream as the client sees one the server dropped (end of
    /// file at once, writes swallowed), or one that never answers.
    struct Peer {
        hung: bool,
    }

    impl futures::AsyncRead for Peer {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            if self.hung {
                Poll::Pending
            } else {
                Poll::Ready(Ok(0))
            }
        }
    }

    impl futures::AsyncWrite for Peer {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            b: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn planner(cids: &[Cid]) -> WantPlanner<Flat> {
        let stores = Stores::new(Arc::new(MemStore::new()), Arc::new(MemStore::new()));
        let value: Vec<u8> = cids.iter().flat_map(|c| c.0).collect();
        WantPlanner::new(
            Arc::new(Flat),
            stores,
            crate::gate::Gate::default(),
            libp2p::PeerId::random(),
            &value,
            None,
        )
        .unwrap()
    }

    fn wanted(p: &mut WantPlanner<Flat>) -> Vec<Cid> {
        let batch = p.next_batch(1024, true).expect("a batch");
        batch.items.iter().map(|w| w.cid).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_lost_before_any_answer_hands_back_the_whole_queue() {
        let cids: Vec<Cid> = (0u8..5).map(|i| Cid::of(&[i])).collect();
        let limits = Limits {
            want_cids: 2, // three batches in flight when the stream ends
            inflight_batches: 4,
            ..Limits::default()
        };
        for bulk in [None, Some(("r".to_string(), Cid::of(b"r")))] {
            let lost = drive(planner(&cids), Peer { hung: false }, &limits, bulk.clone()).await;
            match lost {
                Err(Stopped::Lost(mut p, Error::Network { .. })) => {
                    assert_eq!(
                        wanted(&mut p),
                        cids,
                        "bulk {bulk:?}: queue order after requeue"
                    );
                }
                Err(Stopped::Lost(_, e)) | Err(Stopped::Failed(e)) => {
                    panic!("bulk {bulk:?}: expected a lost stream, got {e}")
                }
                Ok(_) => panic!("bulk {bulk:?}: finished without blocks"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_peer_times_out_and_is_not_retried() {
        let limits = Limits {
            idle_timeout: Duration::from_millis(50),
            ..Limits::default()
        };
        let r = drive(
            planner(&[Cid::of(b"x")]),
            Peer { hung: true },
            &limits,
            None,
        )
        .await;
        assert!(
            matches!(r, Err(Stopped::Failed(Error::Timeout { .. }))),
            "{:?}",
            r.err().map(Stopped::into_error)
        );
    }

    #[test]
    fn an_answer_of_only_defers_is_a_violation() {
        use crate::protocol::frames::ServerFrame;
        let cids: Vec<Cid> = (0u8..4).map(|i| Cid::of(&[i])).collect();
        let mut p = planner(&cids);
        let batch = p.next_batch(1024, true).expect("a batch");
        let frames = (0..cids.len()).map(|_| ServerFrame::Defer).collect();
        match p.on_batch(batch, frames) {
            Err(Error::Misbehaving { .. }) => {}
            other => panic!("endless DEFER must end the pull: {other:?}"),
        }
    }

    #[test]
    fn batches_fit_the_byte_budget() {
        let budget = 8 << 20;
        // Nothing answered yet: the configured maximum.
        assert_eq!(batch_len(1024, budget, 0, 0), 1024);
        // Leaf pages of ~94 KB: ~89 per 8 MiB batch instead of 1024 CIDs
        // answered with ~940 DEFERs.
        assert_eq!(batch_len(1024, budget, 85, 85 * 94_000), 89);
        // Small interior nodes: capped by the maximum.
        assert_eq!(batch_len(1024, budget, 10, 10 * 300), 1024);
        // Blocks larger than the budget: one per batch, never zero.
        assert_eq!(batch_len(1024, budget, 1, 16 << 20), 1);
        assert_eq!(batch_len(0, budget, 0, 0), 1);
    }
}
