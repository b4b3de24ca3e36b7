//! Fetching a pull's closure over block streams: from one source (with the
//! bulk path and stream retries) or from several at once
//! ([`crate::sources`]).

use super::{Node, PullBounds, STREAM_ATTEMPTS};
use crate::error::{Error, Result};
use crate::links::Linker;
use crate::protocol::limits::{Limits, PullLimits};
use crate::protocol::messages::{Request, Response};
use crate::protocol::BLOCKS_PROTOCOL;
use crate::session::{self, PullReport, SourceReport, WantPlanner};
use crate::sources;
use libp2p::{Multiaddr, PeerId};
use prox_engine::Cid;
use std::time::Duration;

/// The sources of a multi-source pull that serve the same root value,
/// with what each offers, and why the others were left out.
pub(super) struct Agreeing {
    pub(super) peers: Vec<(PeerId, Offers)>,
    pub(super) left_out: Vec<(PeerId, Error)>,
}

/// The answers a source offers beyond whole blocks (`Root.delta`,
/// `Root.zstd`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Offers {
    pub(super) delta: bool,
    pub(super) zstd: bool,
}

impl Offers {
    /// What two sources both offer.
    pub(super) fn and(self, other: Offers) -> Offers {
        Offers {
            delta: self.delta && other.delta,
            zstd: self.zstd && other.zstd,
        }
    }
}

impl<L: Linker> Node<L> {
    /// Pulls root `name` into local root `local` from the peers at `addrs`
    /// at once. The first address that connects is the first source: its
    /// root value is the one pulled, admitted by the record policy as for
    /// any pull; every other source joins only if it serves that same
    /// value. WANTs are spread over the sources by measured throughput and
    /// a source that fails, stalls or misbehaves hands its share to the
    /// others; every block is verified against its CID whoever sent it.
    /// Fails with [`Error::Sources`] when no source is left. One address
    /// is [`Node::pull_with`].
    pub async fn pull_many(
        &self,
        addrs: &[Multiaddr],
        name: &str,
        local: &str,
        limits: PullLimits,
    ) -> Result<PullReport> {
        limits.validate().map_err(Error::Config)?;
        if let [addr] = addrs {
            return self.pull_with(addr, name, local, limits).await;
        }
        let bounds = self.bounds(limits);
        let (peers, failed) = self.dial_all(addrs, &bounds).await;
        let Some(&(first, first_addr)) = peers.first() else {
            let failures = failed.into_iter().map(|(_, e)| e).collect();
            return Err(Error::Sources { failures });
        };
        let others: Vec<PeerId> = peers[1..].iter().map(|(p, _)| *p).collect();
        let result = self
            .pull_inner(first, &others, Some(first_addr), name, local, None, bounds)
            .await;
        match result {
            Ok(mut report) => {
                report
                    .sources
                    .extend(failed.into_iter().map(|(addr, e)| SourceReport {
                        peer: addr.to_string(),
                        error: Some(e.to_string()),
                        ..SourceReport::default()
                    }));
                Ok(report)
            }
            Err(Error::Sources { mut failures }) => {
                failures.extend(failed.into_iter().map(|(_, e)| e));
                Err(Error::Sources { failures })
            }
            Err(e) => Err(e),
        }
    }

    /// Dials every address at once (within the pull's `bounds`): the
    /// distinct peers that connected, in the order of `addrs`, and the
    /// addresses that did not with their errors.
    #[allow(clippy::type_complexity)]
    pub(super) async fn dial_all<'a>(
        &self,
        addrs: &'a [Multiaddr],
        bounds: &PullBounds,
    ) -> (Vec<(PeerId, &'a Multiaddr)>, Vec<(&'a Multiaddr, Error)>) {
        let dials = addrs.iter().map(|a| async move {
            tokio::time::timeout_at(bounds.until, self.connect(a))
                .await
                .unwrap_or_else(|_| Err(bounds.expired(None)))
        });
        let mut peers: Vec<(PeerId, &Multiaddr)> = Vec::new();
        let mut failed = Vec::new();
        for (addr, dialed) in addrs.iter().zip(futures::future::join_all(dials).await) {
            match dialed {
                Ok(peer) if peers.iter().any(|(p, _)| *p == peer) => {}
                Ok(peer) => peers.push((peer, addr)),
                Err(e) => failed.push((addr, e)),
            }
        }
        (peers, failed)
    }

    /// Asks every one of `others` for root `name` and keeps those whose
    /// value is `value` (the one taken from the first source): a source
    /// serving another version could not supply this closure.
    pub(super) async fn agreeing(&self, others: &[PeerId], name: &str, value: &[u8]) -> Agreeing {
        let ask = others.iter().map(|&peer| async move {
            let req = self.inner.client.request(
                peer,
                Request::GetRoot {
                    name: name.to_string(),
                },
            );
            let answer = tokio::time::timeout(self.inner.limits.request_timeout, req).await;
            let answer = answer.unwrap_or_else(|_| {
                Err(Error::Timeout {
                    what: format!("root {name:?} from {peer}"),
                    seconds: self.inner.limits.request_timeout.as_secs(),
                })
            });
            (peer, answer)
        });
        let mut out = Agreeing {
            peers: Vec::new(),
            left_out: Vec::new(),
        };
        for (peer, answer) in futures::future::join_all(ask).await {
            let why = match answer {
                Ok(Response::Root {
                    value: Some(v),
                    delta,
                    zstd,
                    ..
                }) if v[..] == *value => {
                    out.peers.push((peer, Offers { delta, zstd }));
                    continue;
                }
                Ok(Response::Root { value: Some(_), .. }) => Error::RootDiffers {
                    peer,
                    name: name.to_string(),
                },
                Ok(Response::Root { value: None, .. }) => Error::NoSuchRoot {
                    peer,
                    name: name.to_string(),
                },
                Ok(Response::Error { message, .. }) => Error::Refused {
                    peer,
                    reason: message,
                },
                Ok(other) => {
                    Error::network(peer, format!("unexpected answer to GetRoot: {other:?}"))
                }
                Err(e) => e,
            };
            out.left_out.push((peer, why));
        }
        out
    }

    /// Opens a `/prox/blocks/1` stream to `peer`. A failure while
    /// `*attempt < STREAM_ATTEMPTS` is retried after a short pause (the
    /// connection it picked was closing; libp2p-stream dials if none is
    /// left), counting in `attempt`.
    async fn open_blocks(&self, peer: PeerId, attempt: &mut u32) -> Result<libp2p::Stream> {
        let inner = &self.inner;
        loop {
            let opened = {
                let mut control = inner.control.lock().await;
                tokio::time::timeout(
                    inner.limits.request_timeout,
                    control.open_stream(peer, BLOCKS_PROTOCOL),
                )
                .await
                .map_err(|_| Error::Timeout {
                    what: format!("opening a block stream to {peer}"),
                    seconds: inner.limits.request_timeout.as_secs(),
                })?
            };
            match opened {
                Ok(s) => return Ok(s),
                Err(e) if *attempt < STREAM_ATTEMPTS => {
                    tracing::debug!(%peer, attempt, %e, "opening a block stream failed; retrying");
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(*attempt))).await;
                    *attempt += 1;
                }
                Err(e) => return Err(Error::network(peer, e)),
            }
        }
    }

    /// Runs `planner` to completion over a block stream to `peer` (the
    /// closure request `bulk` first, when given). A stream lost before its
    /// first answer is replaced a bounded number of times; a misbehaving
    /// peer is banned.
    pub(super) async fn fetch_one(
        &self,
        planner: WantPlanner<L>,
        peer: PeerId,
        limits: &Limits,
        bulk: Option<(String, Cid)>,
    ) -> Result<WantPlanner<L>> {
        let mut planner = planner;
        let mut attempt = 1;
        loop {
            let stream = self.open_blocks(peer, &mut attempt).await?;
            match session::drive(planner, stream, limits, bulk.clone()).await {
                Ok(p) => return Ok(p),
                // The server dropped the stream before answering (its
                // accept loop lagged): nothing was applied, try a fresh
                // stream a bounded number of times.
                Err(session::Stopped::Lost(p, e)) if attempt < STREAM_ATTEMPTS => {
                    tracing::debug!(%peer, attempt, %e, "block stream lost before any answer; reopening");
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
                    planner = *p;
                    attempt += 1;
                }
                Err(stop) => {
                    let e = stop.into_error();
                    self.ban_if_misbehaving(&e).await;
                    if matches!(
                        e,
                        Error::Timeout { .. } | Error::Network { .. } | Error::Io(_)
                    ) {
                        // A stalled connection must not carry the next request.
                        let _ = self.inner.client.disconnect(peer).await;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Runs `planner` to completion over one block stream per source
    /// ([`sources::drive_many`]). `left_out` are sources already excluded
    /// (their errors are reported with the others'). Returns the planner
    /// and a report per source; fails with [`Error::Sources`] when no
    /// source is left. Misbehaving sources are banned.
    pub(super) async fn fetch_many(
        &self,
        planner: WantPlanner<L>,
        peers: &[PeerId],
        left_out: Vec<(PeerId, Error)>,
        limits: &Limits,
    ) -> Result<(WantPlanner<L>, Vec<SourceReport>)> {
        let mut failures = left_out;
        let mut streams = Vec::new();
        for &peer in peers {
            let mut attempt = 1;
            match self.open_blocks(peer, &mut attempt).await {
                Ok(s) => streams.push((peer, s)),
                Err(e) => failures.push((peer, e)),
            }
        }
        if streams.is_empty() {
            let failures = failures.into_iter().map(|(_, e)| e).collect();
            return Err(Error::Sources { failures });
        }
        let (fetched, dead) = sources::drive_many(planner, streams, limits).await;
        for peer in dead {
            // A stalled connection must not carry the next request.
            let _ = self.inner.client.disconnect(peer).await;
        }
        match fetched {
            Ok(fetched) => {
                for e in &fetched.failures {
                    self.ban_if_misbehaving(e).await;
                }
                let mut reports = fetched.sources;
                reports.extend(failures.iter().map(|(peer, e)| SourceReport {
                    peer: peer.to_string(),
                    error: Some(e.to_string()),
                    ..SourceReport::default()
                }));
                Ok((fetched.planner, reports))
            }
            Err(Error::Sources { failures: lanes }) => {
                for e in &lanes {
                    self.ban_if_misbehaving(e).await;
                }
                let mut all: Vec<Error> = failures.into_iter().map(|(_, e)| e).collect();
                all.extend(lanes);
                Err(Error::Sources { failures: all })
            }
            Err(e) => Err(e),
        }
    }

    /// Bans the peer of a [`Error::Misbehaving`] (nothing of the batch it
    /// answered was stored).
    async fn ban_if_misbehaving(&self, e: &Error) {
        if let Error::Misbehaving { peer, violation } = e {
            tracing::warn!(%peer, %violation, "peer sent bad data; nothing of that batch was stored");
            let _ = self.inner.client.ban(*peer, violation.to_string()).await;
        }
    }
}
