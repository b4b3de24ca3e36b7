//! Listing a peer's served roots (`ListRoots`) and mirroring all of them.

use super::Node;
use crate::error::{Error, Result};
use crate::links::Linker;
use crate::protocol::limits::MAX_LIST_ROOTS;
use crate::protocol::messages::{Request, Response};
use crate::session::PullReport;
use libp2p::Multiaddr;
use serde::Serialize;
use std::time::Duration;

/// Most `ListRoots` pages one listing reads (1000 names each).
const MAX_PAGES: usize = 1000;

/// A root a peer serves, as `prox sync ls` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteRoot {
    /// Root name.
    pub name: String,
    /// The first CID the value points at (hex); `None` when the value is
    /// empty or not a root this node's linker understands.
    pub root: Option<String>,
    /// Size of the root value (RootManifest bytes). The closure's size is
    /// not listed by the protocol.
    pub value_bytes: usize,
}

/// Outcome of mirroring one root.
#[derive(Debug, Clone, Serialize)]
pub struct MirroredRoot {
    /// Root name (the same locally and on the peer).
    pub name: String,
    /// The pull's report, when it succeeded.
    pub pull: Option<PullReport>,
    /// Why the pull failed, when it did (the other roots are still pulled).
    pub error: Option<String>,
    /// Whether a follow loop now keeps this root in step.
    pub following: bool,
}

impl<L: Linker> Node<L> {
    /// Every root `addr` serves to this node, in name order (paged
    /// `ListRoots`, at most [`MAX_PAGES`] pages).
    pub async fn list_roots(&self, addr: &Multiaddr) -> Result<Vec<RemoteRoot>> {
        let peer = self.connect(addr).await?;
        let mut out = Vec::new();
        let mut after = None;
        for _ in 0..MAX_PAGES {
            let answer = self
                .inner
                .client
                .request(
                    peer,
                    Request::ListRoots {
                        after: after.take(),
                        limit: MAX_LIST_ROOTS,
                    },
                )
                .await?;
            let (roots, next) = match answer {
                Response::Roots { roots, next_after } => (roots, next_after),
                Response::Error { message, .. } => {
                    return Err(Error::Refused {
                        peer,
                        reason: message,
                    })
                }
                other => {
                    return Err(Error::network(
                        peer,
                        format!("unexpected answer to ListRoots: {other:?}"),
                    ))
                }
            };
            for e in roots {
                let root = self
                    .inner
                    .linker
                    .root_links(&e.value)
                    .ok()
                    .and_then(|l| l.first().map(|(c, _)| c.to_hex()));
                out.push(RemoteRoot {
                    name: e.name,
                    root,
                    value_bytes: e.value.len(),
                });
            }
            match next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
        Err(Error::network(
            peer,
            format!("ListRoots did not end within {MAX_PAGES} pages"),
        ))
    }

    /// Pulls every root `addr` serves into the local root of the same name,
    /// one after the other (a failure is reported and the rest still
    /// pulled); with `follow`, then keeps each one in step with a follow
    /// loop whose fallback poll is `follow` (not twice for a root already
    /// followed). Follow loops live as long as this node.
    pub async fn mirror(
        &self,
        addr: &Multiaddr,
        follow: Option<Duration>,
    ) -> Result<Vec<MirroredRoot>> {
        let roots = self.list_roots(addr).await?;
        let mut out = Vec::with_capacity(roots.len());
        for r in roots {
            let (pull, error) = match self.pull(addr, &r.name, &r.name).await {
                Ok(p) => (Some(p), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let following = match follow {
                Some(fallback) => {
                    if !self.inner.follows.contains(&r.name) {
                        self.follow(addr.clone(), r.name.clone(), fallback);
                    }
                    true
                }
                None => false,
            };
            out.push(MirroredRoot {
                name: r.name,
                pull,
                error,
                following,
            });
        }
        Ok(out)
    }
}
