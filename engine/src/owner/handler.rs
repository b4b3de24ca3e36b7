//! The owner side of a request: decode it, run it against the owner's
//! store, encode the reply. Runs on the connection's thread; the store's
//! own locks are held only inside each store call, never across socket I/O.

use super::proto::{self, Op};
use crate::codec::{put_blob, put_uv, Reader};
use crate::error::{Error, Result};
use crate::gc;
use crate::store::{BlockStore, Lease, Pins};
use std::collections::HashMap;
use std::time::Duration;

/// Longest a lease request may wait for the name (its own wait is capped).
pub(super) const MAX_LEASE_WAIT: Duration = Duration::from_secs(600);

/// Write leases one connection may hold at once.
const MAX_LEASES: usize = 64;

/// The write leases a connection holds, by root name; dropped (released)
/// when the connection ends.
pub(super) type Held = HashMap<String, Lease>;

/// Who owns the store, as `hello` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerInfo {
    /// Protocol version the owner speaks.
    pub version: u8,
    /// What kind of process owns it (`serve`, `daemon`, a test name).
    pub kind: String,
    /// Its process id.
    pub pid: u32,
}

/// What a request handler needs from the owner.
pub(super) struct Context {
    pub(super) store: std::sync::Arc<dyn BlockStore>,
    pub(super) pins: Pins,
    pub(super) kind: String,
}

/// Answers one request body with a reply body. Never fails: a malformed
/// request or a failed operation becomes a failure reply (id 0 when the
/// header itself could not be read).
pub(super) fn answer(ctx: &Context, held: &mut Held, body: &[u8]) -> Vec<u8> {
    let mut r = Reader::new(body, "owner request");
    let id = match proto::read_header(&mut r) {
        Ok(id) => id,
        Err(e) => return failure(0, &e),
    };
    let mut out = proto::header(id);
    out.push(0);
    match run(ctx, held, &mut r, &mut out) {
        Ok(()) if out.len() > proto::MAX_FRAME => failure(
            id,
            &Error::InvalidObject {
                object: "owner reply",
                reason: format!("reply of {} bytes exceeds {}", out.len(), proto::MAX_FRAME),
            },
        ),
        Ok(()) => out,
        Err(e) => failure(id, &e),
    }
}

fn lease_error(reason: String) -> Error {
    Error::InvalidObject {
        object: "owner lease request",
        reason,
    }
}

fn failure(id: u64, e: &Error) -> Vec<u8> {
    let mut out = proto::header(id);
    out.push(1);
    put_blob(&mut out, e.to_string().as_bytes());
    out
}

fn run(ctx: &Context, held: &mut Held, r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<()> {
    let store = &*ctx.store;
    match Op::from_u8(r.u8()?)? {
        Op::Hello => {
            r.finish()?;
            out.push(proto::VERSION);
            put_blob(out, ctx.kind.as_bytes());
            put_uv(out, std::process::id() as u64);
        }
        Op::GetMany => {
            let cids = proto::cids(r)?;
            r.finish()?;
            for b in store.get_many(&cids)? {
                proto::put_opt(out, b.as_deref());
            }
        }
        Op::HasMany => {
            let cids = proto::cids(r)?;
            r.finish()?;
            for h in store.has_many(&cids)? {
                out.push(u8::from(h));
            }
        }
        Op::PutMany => {
            let n = proto::count(r, 1)?;
            let mut blocks = Vec::with_capacity(n);
            for _ in 0..n {
                blocks.push(r.blob(proto::MAX_FRAME)?);
            }
            r.finish()?;
            // The owner hashes every block itself: a client cannot name
            // bytes with a CID they do not hash to.
            let cids = store.put_many(&blocks)?;
            proto::put_cids(out, &cids);
        }
        Op::Commit => {
            r.finish()?;
            store.commit()?;
        }
        Op::RootGet => {
            let name = proto::string(r)?;
            r.finish()?;
            proto::put_opt(out, store.root(&name)?.as_deref());
        }
        Op::RootSet => {
            let name = proto::string(r)?;
            let value = proto::opt(r)?;
            r.finish()?;
            store.set_root(&name, value)?;
        }
        Op::RootCas => {
            let name = proto::string(r)?;
            let expected = proto::opt(r)?;
            let new = proto::opt(r)?;
            r.finish()?;
            out.push(u8::from(store.cas_root(&name, expected, new)?));
        }
        Op::Roots => {
            r.finish()?;
            let roots = store.roots()?;
            put_uv(out, roots.len() as u64);
            for (name, value) in roots {
                put_blob(out, name.as_bytes());
                put_blob(out, &value);
            }
        }
        Op::Cids => {
            r.finish()?;
            proto::put_cids(out, &store.cids()?);
        }
        Op::Lease => {
            let name = proto::string(r)?;
            let wait = Duration::from_millis(r.uv()?).min(MAX_LEASE_WAIT);
            r.finish()?;
            if held.contains_key(&name) {
                return Err(lease_error(format!(
                    "this connection already holds {name:?}"
                )));
            }
            if held.len() >= MAX_LEASES {
                return Err(lease_error(format!("more than {MAX_LEASES} leases held")));
            }
            // Reply 1: held; 0: the owner's store has no leases (the
            // writer relies on the swap alone); 2: still busy after `wait`.
            out.push(match store.lease(&name, wait) {
                Ok(Some(lease)) => {
                    held.insert(name, lease);
                    1
                }
                Ok(None) => 0,
                Err(Error::Busy { .. }) => 2,
                Err(e) => return Err(e),
            });
        }
        Op::Release => {
            let name = proto::string(r)?;
            r.finish()?;
            out.push(u8::from(held.remove(&name).is_some()));
        }
        Op::Gc => {
            let dry_run = r.u8()? != 0;
            r.finish()?;
            let rep = gc::collect_default(store, &ctx.pins, dry_run)?;
            put_gc_report(out, &rep);
        }
    }
    Ok(())
}

/// Encodes a collection report.
fn put_gc_report(out: &mut Vec<u8>, rep: &gc::GcReport) {
    for v in [
        rep.roots,
        rep.pinned,
        rep.reachable,
        rep.missing,
        rep.retained.kept_blocks,
        rep.retained.removed_blocks,
        rep.retained.removed_bytes,
    ] {
        put_uv(out, v);
    }
    out.push(u8::from(rep.dry_run));
    proto::put_cids(out, &rep.missing_cids);
}

/// Decodes a collection report.
pub(super) fn gc_report(r: &mut Reader<'_>) -> Result<gc::GcReport> {
    let mut v = [0u64; 7];
    for x in &mut v {
        *x = r.uv()?;
    }
    let dry_run = r.u8()? != 0;
    let missing_cids = proto::cids(r)?;
    Ok(gc::GcReport {
        roots: v[0],
        pinned: v[1],
        reachable: v[2],
        missing: v[3],
        missing_cids,
        retained: crate::store::RetainStats {
            kept_blocks: v[4],
            removed_blocks: v[5],
            removed_bytes: v[6],
        },
        dry_run,
    })
}
