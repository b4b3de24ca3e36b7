//! Follow loops: keeping a local root in step with the same root on one
//! or several sources, push-driven ([`crate::follow`] holds their shared
//! table).

use super::Node;
use crate::error::{Error, Result};
use crate::links::Linker;
use crate::protocol::limits::PullLimits;
use crate::protocol::messages::{Request, Response};
use crate::session::PullReport;
use libp2p::{Multiaddr, PeerId};
use std::time::Duration;

impl<L: Linker> Node<L> {
    /// Keeps local root `name` in step with the same root of the peer at
    /// `addr`: [`Node::follow_from`] with one source.
    pub fn follow(&self, addr: Multiaddr, name: String, fallback: Duration) {
        self.follow_from(vec![addr], name, fallback);
    }

    /// Keeps local root `name` in step with the same root served by the
    /// peers at `addrs` (in order of preference), push-driven: each round
    /// dials every source at once, subscribes with `Follow` at every one
    /// that connects (the first one's answer, which also carries its
    /// current value, is the value followed) and, when it differs from the
    /// local value, pulls it from all of them as [`Node::pull_many`] does
    /// (the others join when they serve that same value; a source that
    /// stalls or dies hands its share to the rest). A source that does not
    /// connect is skipped for that round: the next one in order leads.
    /// Then the loop waits for an `Announce` of the root from any source,
    /// a disconnect of one (re-subscribe), or `fallback` (a slow poll, in
    /// case announces are lost). Failures retry with exponential backoff
    /// from 1 s up to `fallback`. A pull interrupted by a stop is resumed
    /// by the first round after a restart (its pending-sync record and
    /// staged blocks are durable). Runs until [`shutdown`](Self::shutdown).
    ///
    /// # Panics
    /// If `addrs` is empty.
    pub fn follow_from(&self, addrs: Vec<Multiaddr>, name: String, fallback: Duration) {
        assert!(!addrs.is_empty(), "a follow needs at least one source");
        let follows = self.inner.follows.clone();
        let shown: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let wake = follows.add(&shown, &name);
        let node = self.clone();
        let task = tokio::spawn(async move {
            let mut backoff = Duration::from_secs(1);
            loop {
                follows.update(&name, |s| s.checks += 1);
                let wait = match node.follow_round(&addrs, &name).await {
                    Ok(report) => {
                        backoff = Duration::from_secs(1);
                        follows.update(&name, |s| {
                            s.last_error = None;
                            if let Some(r) = &report {
                                s.last_pull = Some(r.clone());
                            }
                        });
                        match report {
                            Some(r) => {
                                tracing::info!(%name, fetched = r.blocks_fetched, bytes = r.bytes_fetched, resumed = r.blocks_resumed, sources = r.sources.len().max(1), "followed root updated")
                            }
                            None => tracing::debug!(%name, "followed root up to date"),
                        }
                        fallback
                    }
                    Err(e) => {
                        tracing::warn!(%name, %e, "follow round failed; will retry");
                        follows.update(&name, |s| s.last_error = Some(e.to_string()));
                        let w = backoff;
                        backoff = (backoff * 2).min(fallback);
                        w.min(fallback)
                    }
                };
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        });
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    /// One follow round: dial every source, (re)subscribe at each, pull if
    /// the first connected source's value differs from the local one.
    async fn follow_round(&self, addrs: &[Multiaddr], name: &str) -> Result<Option<PullReport>> {
        let inner = &self.inner;
        let bounds = self.bounds(PullLimits::default());
        let (peers, failed) = self.dial_all(addrs, &bounds).await;
        let Some(&(peer, addr)) = peers.first() else {
            let mut failures: Vec<Error> = failed.into_iter().map(|(_, e)| e).collect();
            return Err(match failures.len() {
                1 => failures.remove(0),
                _ => Error::Sources { failures },
            });
        };
        let ids: Vec<PeerId> = peers.iter().map(|(p, _)| *p).collect();
        inner.follows.set_peers(name, &ids);
        let subscribe = ids.iter().map(|&p| {
            inner.client.request(
                p,
                Request::Follow {
                    name: name.to_string(),
                },
            )
        });
        let mut answers = futures::future::join_all(subscribe).await.into_iter();
        // The other sources' subscriptions only wake this loop: their
        // values are compared by the pull itself.
        let answer = answers.next().expect("one answer per connected source");
        let known = match answer {
            Ok(answer @ Response::Root { value: Some(_), .. }) => {
                inner.follows.update(name, |s| s.subscribed = true);
                Some(answer)
            }
            Ok(Response::Root { value: None, .. }) => {
                return Err(Error::NoSuchRoot {
                    peer,
                    name: name.to_string(),
                })
            }
            // An older or refusing source: poll with GetRoot instead.
            Ok(_) | Err(Error::Network { .. }) => {
                inner.follows.update(name, |s| s.subscribed = false);
                None
            }
            Err(e) => return Err(e),
        };
        let report = self
            .pull_inner(peer, &ids[1..], Some(addr), name, name, known, bounds)
            .await?;
        Ok((!report.up_to_date).then_some(report))
    }
}
