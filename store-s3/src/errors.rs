//! Service failures as [`Error::Remote`] with a typed kind.
//!
//! `object_store` types 401/403 and 404 itself; the rest (throttling and
//! 5xx after its retries, connection errors) reaches us as a generic error
//! whose text carries the HTTP status and the S3 error code, so the kind is
//! read from that text.

use prox_engine::{Error, RemoteErrorKind};

/// The error and all its sources, joined.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text.push_str(": ");
        text.push_str(&s.to_string());
        cur = s.source();
    }
    text
}

/// What kind of failure `e` is.
pub(crate) fn kind_of(e: &object_store::Error) -> RemoteErrorKind {
    use object_store::Error as E;
    let text = chain(e);
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if matches!(e, E::PermissionDenied { .. } | E::Unauthenticated { .. })
        || has(&[
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "ExpiredToken",
        ])
    {
        RemoteErrorKind::Auth
    } else if has(&["NoSuchBucket"]) {
        RemoteErrorKind::MissingBucket
    } else if has(&["SlowDown", "429 Too Many Requests", "TooManyRequests"]) {
        RemoteErrorKind::Throttled
    } else if has(&[
        " 500 ",
        " 502 ",
        " 503 ",
        " 504 ",
        "error sending request",
        "Connection refused",
        "connection closed",
        "timed out",
        "operation timed out",
        "client error (Connect)",
    ]) {
        RemoteErrorKind::Unavailable
    } else {
        RemoteErrorKind::Other
    }
}

/// `e` as the engine's error for the store named `store`.
pub(crate) fn remote(store: &str, e: object_store::Error) -> Error {
    Error::Remote {
        store: store.to_string(),
        kind: kind_of(&e),
        reason: chain(&e),
    }
}

/// An error of `kind` with a message of our own.
pub(crate) fn remote_msg(store: &str, kind: RemoteErrorKind, reason: impl Into<String>) -> Error {
    Error::Remote {
        store: store.to_string(),
        kind,
        reason: reason.into(),
    }
}
