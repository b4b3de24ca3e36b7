//! Signed root records: a publisher's statement "my root `name` has the
//! value with CID `value_cid`, sequence number `seq`, valid until
//! `not_after`", signed with its libp2p identity key.
//!
//! A record travels with the root value (`Root.record` in `GetRoot` and
//! `Follow` answers) and is relayed unchanged by any peer that pulled it, so
//! a receiver that trusts the publisher's key can take the root from any
//! mirror: it accepts the value only if the record verifies, names the
//! root asked for and the value received, has not expired, and its `seq` is
//! not lower than the one it already holds for that root (no rollback).
//!
//! Wire form: CBOR map `{name, value_cid, seq, not_after, key, sig}`; `key`
//! is the publisher's public key in libp2p's protobuf encoding, `sig` its
//! signature over
//! `"prox-root-record-v1" 00 | name_len u16 BE | name | value_cid | seq u64 BE | not_after u64 BE`.
//! Records are kept as roots of the staging store (`root-record:<local>`),
//! like pending-sync records: durable, invisible to `main`.

use crate::stores::Stores;
use libp2p::identity::{Keypair, PublicKey};
use libp2p::PeerId;
use prox_engine::Cid;
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use std::collections::HashSet;

const DOMAIN: &[u8] = b"prox-root-record-v1\0";
const PREFIX: &str = "root-record:";
/// Largest encoded record accepted.
pub const MAX_RECORD: usize = 4096;

/// Why a root record was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The answer carried no record, and the serving peer is not one whose
    /// unsigned roots are accepted.
    #[error("no signed record for this root")]
    Missing,
    /// The bytes are not a record.
    #[error("malformed record: {0}")]
    Malformed(String),
    /// The signature does not verify under the key the record names.
    #[error("bad signature (claimed publisher {publisher})")]
    BadSignature {
        /// The peer id of the key in the record.
        publisher: PeerId,
    },
    /// Signed by a key this node does not trust.
    #[error("signed by {publisher}, which is not trusted")]
    Untrusted {
        /// The signer.
        publisher: PeerId,
    },
    /// Signed for another root name.
    #[error("record is for root {record:?}, not {asked:?}")]
    WrongName {
        /// Name in the record.
        record: String,
        /// Name asked for.
        asked: String,
    },
    /// Signed for another value.
    #[error("record names value {record}, the peer sent {sent}")]
    WrongValue {
        /// Value CID in the record.
        record: Cid,
        /// CID of the value received.
        sent: Cid,
    },
    /// Past its validity.
    #[error("record expired at {not_after} (now {now}, unix seconds)")]
    Expired {
        /// End of validity.
        not_after: u64,
        /// Current time.
        now: u64,
    },
    /// Older than the record this node already holds for the root.
    #[error("record seq {seq} is older than the known seq {known} (rollback)")]
    Rollback {
        /// The record's seq.
        seq: u64,
        /// The seq already accepted.
        known: u64,
    },
}

#[derive(Serialize, Deserialize)]
struct Wire {
    name: String,
    value_cid: ByteBuf,
    seq: u64,
    not_after: u64,
    key: ByteBuf,
    sig: ByteBuf,
}

/// A decoded record whose signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootRecord {
    /// Root name on the publisher.
    pub name: String,
    /// CID of the root value (RootManifest bytes).
    pub value_cid: Cid,
    /// Sequence number, increasing with each new value.
    pub seq: u64,
    /// End of validity, unix seconds.
    pub not_after: u64,
    /// The signer.
    pub publisher: PeerId,
}

fn signed_bytes(name: &str, value_cid: &Cid, seq: u64, not_after: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN.len() + name.len() + 50);
    m.extend_from_slice(DOMAIN);
    m.extend_from_slice(&(name.len() as u16).to_be_bytes());
    m.extend_from_slice(name.as_bytes());
    m.extend_from_slice(value_cid.as_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(&not_after.to_be_bytes());
    m
}

/// Signs a record for `name` = `value` with `key`; returns its wire bytes.
pub fn sign(
    key: &Keypair,
    name: &str,
    value: &[u8],
    seq: u64,
    not_after: u64,
) -> Result<Vec<u8>, RecordError> {
    let value_cid = Cid::of(value);
    let sig = key
        .sign(&signed_bytes(name, &value_cid, seq, not_after))
        .map_err(|e| RecordError::Malformed(format!("signing: {e}")))?;
    let wire = Wire {
        name: name.to_string(),
        value_cid: ByteBuf::from(value_cid.as_bytes().to_vec()),
        seq,
        not_after,
        key: ByteBuf::from(key.public().encode_protobuf()),
        sig: ByteBuf::from(sig),
    };
    let mut out = Vec::new();
    ciborium::into_writer(&wire, &mut out).map_err(|e| RecordError::Malformed(e.to_string()))?;
    Ok(out)
}

/// Decodes `bytes` and verifies the signature under the key they name.
pub fn verify(bytes: &[u8]) -> Result<RootRecord, RecordError> {
    if bytes.len() > MAX_RECORD {
        return Err(RecordError::Malformed(format!(
            "{} bytes, over {MAX_RECORD}",
            bytes.len()
        )));
    }
    let w: Wire =
        ciborium::from_reader(bytes).map_err(|e| RecordError::Malformed(e.to_string()))?;
    let value_cid = Cid::from_slice(&w.value_cid)
        .ok_or_else(|| RecordError::Malformed("value_cid is not 32 bytes".into()))?;
    let key = PublicKey::try_decode_protobuf(&w.key)
        .map_err(|e| RecordError::Malformed(format!("key: {e}")))?;
    let publisher = key.to_peer_id();
    if w.name.len() > u16::MAX as usize
        || !key.verify(
            &signed_bytes(&w.name, &value_cid, w.seq, w.not_after),
            &w.sig,
        )
    {
        return Err(RecordError::BadSignature { publisher });
    }
    Ok(RootRecord {
        name: w.name,
        value_cid,
        seq: w.seq,
        not_after: w.not_after,
        publisher,
    })
}

/// The checks a trusting receiver makes on a root `name` = `value` it was
/// sent with `record`; `known` is the seq it already holds for that root.
pub fn check(
    record: &[u8],
    trusted: &HashSet<PeerId>,
    name: &str,
    value: &[u8],
    known: Option<u64>,
    now: u64,
) -> Result<RootRecord, RecordError> {
    let r = verify(record)?;
    if !trusted.contains(&r.publisher) {
        return Err(RecordError::Untrusted {
            publisher: r.publisher,
        });
    }
    if r.name != name {
        return Err(RecordError::WrongName {
            record: r.name,
            asked: name.to_string(),
        });
    }
    let sent = Cid::of(value);
    if r.value_cid != sent {
        return Err(RecordError::WrongValue {
            record: r.value_cid,
            sent,
        });
    }
    if r.not_after < now {
        return Err(RecordError::Expired {
            not_after: r.not_after,
            now,
        });
    }
    if let Some(known) = known.filter(|k| r.seq < *k) {
        return Err(RecordError::Rollback { seq: r.seq, known });
    }
    Ok(r)
}

fn key(local: &str) -> Option<String> {
    let k = format!("{PREFIX}{local}");
    prox_engine::store::validate_root_name(&k).ok().map(|_| k)
}

/// The record kept for local root `local`, if any (bytes as received).
pub(crate) fn load(stores: &Stores, local: &str) -> prox_engine::Result<Option<bytes::Bytes>> {
    match key(local) {
        Some(k) => stores.staging.root(&k),
        None => Ok(None),
    }
}

/// Durably keeps `record` for local root `local` (to check later records
/// against and to relay with the value).
pub(crate) fn store(stores: &Stores, local: &str, record: &[u8]) -> prox_engine::Result<()> {
    match key(local) {
        Some(k) => stores.staging.set_root(&k, Some(record)),
        None => Ok(()),
    }
}

/// Unix seconds now.
fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A node's record policy: whether it signs the roots it serves, which
/// publishers it trusts, and whose unsigned roots it still accepts.
pub(crate) struct Records {
    stores: Stores,
    /// This node's identity when it signs its served roots.
    key: Option<Keypair>,
    /// Validity of the records this node signs, seconds.
    validity: u64,
    /// Publishers whose records are required (empty: records optional).
    trusted: HashSet<PeerId>,
    /// Peers whose unsigned roots are accepted even with `trusted` set.
    unsigned_ok: HashSet<PeerId>,
}

impl Records {
    pub(crate) fn new(
        stores: Stores,
        key: Option<Keypair>,
        validity: u64,
        trusted: HashSet<PeerId>,
        unsigned_ok: HashSet<PeerId>,
    ) -> Records {
        Records {
            stores,
            key,
            validity,
            trusted,
            unsigned_ok,
        }
    }

    /// The record to send with this node's root `name` = `value`: signed
    /// now when this node signs (its kept record is reused while it names
    /// this value and has more than half its validity left; a new one gets
    /// a seq above the kept one), otherwise the kept record when it names
    /// this value (relay). `None` when there is none.
    pub(crate) fn attach(&self, name: &str, value: &[u8]) -> Option<Vec<u8>> {
        let kept = load(&self.stores, name).ok().flatten();
        let decoded = kept.as_ref().and_then(|b| verify(b).ok());
        let cid = Cid::of(value);
        let Some(key) = &self.key else {
            return kept
                .filter(|_| decoded.is_some_and(|r| r.value_cid == cid && r.name == name))
                .map(|b| b.to_vec());
        };
        let now = now_unix();
        let me = key.public().to_peer_id();
        let mine = decoded.filter(|r| r.publisher == me && r.name == name);
        if let (Some(r), Some(b)) = (&mine, &kept) {
            if r.value_cid == cid && r.not_after > now + self.validity / 2 {
                return Some(b.to_vec());
            }
        }
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let seq = mine.map_or(0, |r| r.seq + 1).max(millis);
        let record = sign(key, name, value, seq, now + self.validity).ok()?;
        if let Err(e) = store(&self.stores, name, &record) {
            tracing::warn!(%name, %e, "cannot keep the signed root record");
        }
        Some(record)
    }

    /// The receiver's decision on root `name` (kept locally as `local`)
    /// = `value` from `peer`, sent with `record`. With trusted publishers
    /// the record must pass [`check`] against the seq kept for `local`
    /// (unless `peer` may send unsigned roots and sent none); without, a
    /// record that verifies and names this root and value is kept for
    /// relaying. Returns the record to keep once the pull has published.
    pub(crate) fn admit(
        &self,
        peer: &PeerId,
        name: &str,
        local: &str,
        value: &[u8],
        record: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RecordError> {
        if self.trusted.is_empty() {
            let ok = record.filter(|r| {
                verify(r).is_ok_and(|r| r.name == name && r.value_cid == Cid::of(value))
            });
            return Ok(ok.map(<[u8]>::to_vec));
        }
        let Some(record) = record else {
            return if self.unsigned_ok.contains(peer) {
                Ok(None)
            } else {
                Err(RecordError::Missing)
            };
        };
        let known = load(&self.stores, local)
            .ok()
            .flatten()
            .and_then(|b| verify(&b).ok())
            .filter(|r| self.trusted.contains(&r.publisher))
            .map(|r| r.seq);
        check(record, &self.trusted, name, value, known, now_unix())?;
        Ok(Some(record.to_vec()))
    }

    /// Keeps `record` for `local` after its value was published there.
    pub(crate) fn keep(&self, local: &str, record: &[u8]) {
        if let Err(e) = store(&self.stores, local, record) {
            tracing::warn!(%local, %e, "cannot keep the root record");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_verify_and_every_check_refuses_what_it_should() {
        let key = Keypair::generate_ed25519();
        let me = key.public().to_peer_id();
        let trusted: HashSet<PeerId> = [me].into_iter().collect();
        let rec = sign(&key, "docs", b"v2", 5, 1000).unwrap();
        let ok = check(&rec, &trusted, "docs", b"v2", Some(5), 999).unwrap();
        assert_eq!((ok.seq, ok.publisher), (5, me));
        let refuse = |r: &[u8], name, value: &[u8], known, now| {
            check(r, &trusted, name, value, known, now).unwrap_err()
        };
        assert!(matches!(
            refuse(&rec, "docs", b"v2", Some(6), 999),
            RecordError::Rollback { seq: 5, known: 6 }
        ));
        assert!(matches!(
            refuse(&rec, "docs", b"v2", None, 1001),
            RecordError::Expired { .. }
        ));
        assert!(matches!(
            refuse(&rec, "other", b"v2", None, 0),
            RecordError::WrongName { .. }
        ));
        assert!(matches!(
            refuse(&rec, "docs", b"v1", None, 0),
            RecordError::WrongValue { .. }
        ));
        let stranger = sign(&Keypair::generate_ed25519(), "docs", b"v2", 9, 1000).unwrap();
        assert!(matches!(
            refuse(&stranger, "docs", b"v2", None, 0),
            RecordError::Untrusted { .. }
        ));
        // A changed seq under the original signature: forged.
        let mut w: Wire = ciborium::from_reader(&rec[..]).unwrap();
        w.seq = 50;
        let mut forged = Vec::new();
        ciborium::into_writer(&w, &mut forged).unwrap();
        assert!(matches!(
            refuse(&forged, "docs", b"v2", None, 0),
            RecordError::BadSignature { .. }
        ));
        assert!(matches!(
            refuse(b"junk", "docs", b"v2", None, 0),
            RecordError::Malformed(_)
        ));
    }
}
